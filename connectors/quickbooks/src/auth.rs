//! OAuth 2.0 refresh tokens as Intuit issues them, and where recon keeps
//! the newest one.
//!
//! Intuit's access tokens "are valid for 3600 seconds (one hour), after
//! which time you need to get a fresh one using the latest refresh_token
//! returned to you from the previous request" (OAuth FAQ,
//! https://developer.intuit.com/app/developer/qbo/docs/develop/authentication-and-authorization/faq;
//! refresh tokens: a rolling 100 days, Intuit blog "OAuth token management
//! done the right way", https://blogs.intuit.com/2024/06/03/oauth-token-management-done-the-right-way/).
//! The refresh grant is a form `POST` of `grant_type=refresh_token` and
//! the token, with the app's client ID and secret as HTTP Basic auth.
//!
//! Because the refresh token changes, recon saves each new one in the
//! job's state store before it uses the access token that came with it,
//! sealed (the shared [`recon_core::http::rotating`], which the declarative
//! HTTP connector's `oauth_refresh_token` uses too), so the store never
//! holds a token in clear and an altered one is refused. The token tried
//! first is the one this process received last, then the saved one, then the configured `refresh_token`
//! (`${QBO_REFRESH_TOKEN}`); so the configured token is used only when the
//! store holds none, or after the saved one was refused (the reconnect
//! path: put the new token in the environment and run again). Every token
//! is registered as a secret: scrubbed from every message and log line.
//!
//! Two refreshes at once: the shared HTTP policy's [`RefreshableToken`]
//! refreshes one at a time within a process, and the run lock serialises
//! the runs of one job. Two *jobs* sharing one QuickBooks connection could
//! still race; the loser's `invalid_grant` makes it read the store again
//! and use the token the winner saved.
//!
//! [`RefreshableToken`]: recon_core::http::RefreshableToken

use std::sync::Arc;

use recon_core::http::rotating::{self, ClientAuth, RefreshGrant, RotatingRefresh};
use recon_core::http::{HttpError, Provider};
use recon_core::{Secret, TokenStore};

/// The token endpoint's identity for the HTTP policy: RFC 6749's error
/// bodies, Intuit's `intuit_tid`.
pub const QUICKBOOKS_OAUTH: Provider = Provider {
    error_body: rotating::oauth_error_body,
    ..Provider::new("QuickBooks OAuth", "intuit_tid")
};

/// Whether `e` is the token endpoint refusing the refresh token.
pub fn is_invalid_grant(e: &HttpError) -> bool {
    rotating::is_invalid_grant(e, &QUICKBOOKS_OAUTH)
}

/// The store's name for a connection's refresh token: the company and a
/// digest of the client ID (not the ID itself).
pub fn token_name(realm_id: &str, client_id: &Secret) -> String {
    rotating::token_name(&format!("quickbooks/{realm_id}"), client_id)
}

/// Access tokens for the app (`client_id`, `client_secret`) and company
/// `realm_id` from Intuit's refresh grant (client credentials as HTTP
/// Basic auth), the rotated refresh token saved in `store`.
pub fn rotating_refresh(
    token_url: &str,
    client_id: Secret,
    client_secret: Secret,
    configured: Option<Secret>,
    store: Option<Arc<dyn TokenStore>>,
    realm_id: &str,
) -> Result<RotatingRefresh, HttpError> {
    RotatingRefresh::new(RefreshGrant {
        provider: QUICKBOOKS_OAUTH,
        token_url: token_url.to_string(),
        name: token_name(realm_id, &client_id),
        client_id,
        client_secret,
        client_auth: ClientAuth::Basic,
        scope: None,
        configured,
        store,
        label: format!("QuickBooks company {realm_id}"),
        setting: "refresh_token = \"${QBO_REFRESH_TOKEN}\"".into(),
    })
}

/// What to do when Intuit refuses the refresh token.
pub fn reconnect_steps(realm_id: &str) -> String {
    format!(
        "QuickBooks refused the refresh token (invalid_grant: it expired, the company disconnected the app, or it was replaced by a newer one). \
         To reconnect: 1) sign in to the QuickBooks company {realm_id} through your app's Connect to QuickBooks flow (or Intuit's OAuth 2.0 Playground) and authorize the app again; \
         2) put the new refresh token in the environment variable the job's refresh_token names (QBO_REFRESH_TOKEN); \
         3) run recon again: when the token it saved is refused it tries the configured one, and saves every newer one in the state store"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_hide_the_client_id_and_oauth_errors_carry_their_code() {
        let n = token_name("123", &Secret::new("ABclientid"));
        assert!(
            n.starts_with("quickbooks/123/") && !n.contains("ABclientid"),
            "{n}"
        );
        let e = rotating::oauth_error_body(br#"{"error":"invalid_grant"}"#).unwrap();
        assert_eq!(e.code.as_deref(), Some("invalid_grant"));
        assert_eq!(rotating::oauth_error_body(b"{}"), None);
    }
}
