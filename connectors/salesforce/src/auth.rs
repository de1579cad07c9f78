//! OAuth 2.0 client credentials against the org's token endpoint, or a
//! static access token.
//!
//! The client credentials flow posts `grant_type=client_credentials`,
//! `client_id` and `client_secret` form-encoded to the org's My Domain
//! token endpoint, `https://MyDomainName.my.salesforce.com/services/oauth2/token`,
//! and gets `{"access_token", "instance_url", "token_type": "Bearer", …}`
//! back; there is no refresh token: a new access token is requested the
//! same way (Salesforce Developers, "Using the Client Credentials Flow for
//! Easier API Authentication":
//! https://developer.salesforce.com/blogs/2023/03/using-the-client-credentials-flow-for-easier-api-authentication;
//! the app needs the flow enabled and a Run As user).
//! A request refused with `401 INVALID_SESSION_ID` (the session expired or
//! was revoked) makes the shared HTTP policy fetch one new token through
//! [`RefreshableToken`] and send the request once more; a second 401 is
//! final. Tokens are registered as secrets (never logged, scrubbed from
//! every message) and cached for every request of the connector.

use std::sync::Arc;

use recon_core::http::{
    ClientCredentials, HttpError, HttpPolicy, Provider, RefreshableToken, StaticAuth,
};
use recon_core::Secret;

/// The token endpoint's identity for the HTTP policy (OAuth 2.0 error
/// bodies, `{"error", "error_description"}`, read the common way).
const SALESFORCE_OAUTH: Provider = Provider::new("Salesforce OAuth", "X-Request-Id");

/// Access tokens from the client credentials flow of a connected app, at
/// `token_url` (`/services/oauth2/token`), through the shared grant.
pub fn client_credentials(
    token_url: &str,
    client_id: Secret,
    client_secret: Secret,
    policy: HttpPolicy,
) -> Result<ClientCredentials, HttpError> {
    ClientCredentials::new(
        SALESFORCE_OAUTH,
        policy,
        token_url,
        "POST /services/oauth2/token",
        (client_id, client_secret),
        None,
    )
}

/// The bearer token hook of a connector: refreshed once after a 401
/// (client credentials), or fixed (a static access token).
pub fn bearer_auth(
    source: Option<ClientCredentials>,
    static_token: Option<&Secret>,
) -> Arc<dyn recon_core::http::Auth> {
    match (source, static_token) {
        (Some(s), _) => Arc::new(RefreshableToken::bearer(s)),
        (None, Some(t)) => Arc::new(StaticAuth::bearer(t)),
        (None, None) => Arc::new(StaticAuth::new(vec![])),
    }
}
