//! The OAuth 2.0 client credentials grant (RFC 6749 section 4.4): `POST
//! token_url` form-encoded `grant_type=client_credentials`, `client_id`,
//! `client_secret` and an optional `scope`; the answer's `access_token`
//! (Salesforce's connected apps, any API declared with `kind =
//! "oauth_client_credentials"`). Wrapped in [`super::RefreshableToken`]
//! it is fetched once and again after a 401.

use std::sync::Arc;

use serde_json::Value as Json;

use super::{HttpClient, HttpError, HttpPolicy, Method, Provider, StaticAuth, TokenSource};
use crate::Secret;

/// Access tokens from one token endpoint for one client.
pub struct ClientCredentials {
    http: HttpClient,
    provider: &'static str,
    token_url: String,
    /// How errors name the endpoint (`POST /services/oauth2/token`).
    endpoint: String,
    client_id: Secret,
    client_secret: Secret,
    scope: Option<String>,
}

impl ClientCredentials {
    /// Tokens from `token_url` for this client, asked through `provider`'s
    /// policy (its name labels errors; `endpoint` names the call in them).
    pub fn new(
        provider: Provider,
        policy: HttpPolicy,
        token_url: &str,
        endpoint: &str,
        (client_id, client_secret): (Secret, Secret),
        scope: Option<String>,
    ) -> Result<ClientCredentials, HttpError> {
        Ok(ClientCredentials {
            http: HttpClient::with_auth(
                provider,
                policy,
                Arc::new(StaticAuth::new(vec![])),
                vec![("Accept".into(), "application/json".into())],
            )?,
            provider: provider.name,
            token_url: token_url.to_string(),
            endpoint: endpoint.to_string(),
            client_id,
            client_secret,
            scope,
        })
    }
}

#[async_trait::async_trait]
impl TokenSource for ClientCredentials {
    async fn fetch(&self) -> Result<Secret, HttpError> {
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", self.client_id.expose()),
            ("client_secret", self.client_secret.expose()),
        ];
        if let Some(s) = &self.scope {
            form.push(("scope", s));
        }
        let (v, meta) = self
            .http
            .send_json::<Json>(Method::POST, &self.token_url, |req| req.form(&form))
            .await?;
        match v.get("access_token").and_then(Json::as_str) {
            Some(t) if !t.is_empty() => {
                tracing::info!(
                    message = "Fetched an access token (OAuth 2.0 client credentials).",
                    provider = self.provider,
                    request_id = meta.request_id.as_deref()
                );
                Ok(Secret::new(t))
            }
            _ => Err(HttpError::Status {
                provider: self.provider,
                endpoint: self.endpoint.clone(),
                status: meta.status,
                request_id: meta.request_id,
                message: "the token answer has no access_token".into(),
                body_code: None,
            }),
        }
    }
}
