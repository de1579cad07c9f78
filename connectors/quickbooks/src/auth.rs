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
//! job's state store ([`TokenStore`]) before it uses the access token that
//! came with it, encrypted with a key derived from the app's client secret
//! (XChaCha20-Poly1305 from RustCrypto's `chacha20poly1305`, the key by
//! HKDF-SHA256, a random 192-bit nonce per seal), so the store never holds
//! a token in clear and an altered one is refused. The token tried first is the one this process received last,
//! then the saved one, then the configured `refresh_token`
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

use std::sync::{Arc, Mutex};

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use recon_core::http::{
    HttpClient, HttpError, HttpPolicy, Method, Provider, ProviderError, StaticAuth, TokenSource,
};
use recon_core::{register_secret, ConnectorError, Secret, TokenStore};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// The token endpoint's identity for the HTTP policy.
pub const QUICKBOOKS_OAUTH: Provider = Provider {
    error_body: oauth_error_body,
    ..Provider::new("QuickBooks OAuth", "intuit_tid")
};

/// `{"error": "invalid_grant", "error_description"?}`: the code is `error`.
fn oauth_error_body(body: &[u8]) -> Option<ProviderError> {
    let v: Json = serde_json::from_slice(body).ok()?;
    let code = v.get("error").and_then(Json::as_str)?.to_string();
    let message = v
        .get("error_description")
        .and_then(Json::as_str)
        .map_or_else(|| code.clone(), str::to_string);
    Some(ProviderError {
        message: Some(message),
        code: Some(code),
        is_final: false,
    })
}

/// Whether `e` is the token endpoint refusing the refresh token.
pub fn is_invalid_grant(e: &HttpError) -> bool {
    matches!(e, HttpError::Status { provider, body_code: Some(code), .. }
        if *provider == QUICKBOOKS_OAUTH.name && code == "invalid_grant")
}

/// The cipher of sealed tokens: its key derived from the client secret by
/// HKDF-SHA256 under a fixed label.
fn cipher(client_secret: &Secret) -> XChaCha20Poly1305 {
    let mut key = [0u8; 32];
    hkdf::Hkdf::<Sha256>::new(None, client_secret.expose().as_bytes())
        .expand(b"recon quickbooks refresh token v1", &mut key)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    XChaCha20Poly1305::new(&key.into())
}

/// Seals `token` with a key derived from `client_secret`:
/// `v1:` + base64url(nonce ‖ ciphertext and tag). `None` only when the
/// operating system has no random numbers to give.
pub fn seal(token: &str, client_secret: &Secret) -> Option<String> {
    let mut nonce = [0u8; 24];
    getrandom::getrandom(&mut nonce).ok()?;
    let sealed = cipher(client_secret)
        .encrypt(&XNonce::from(nonce), token.as_bytes())
        .ok()?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Some(format!(
        "v1:{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
    ))
}

/// The token [`seal`] sealed, or `None` when `sealed` was made with
/// another client secret, or altered.
pub fn open(sealed: &str, client_secret: &Secret) -> Option<String> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sealed.strip_prefix("v1:")?)
        .ok()?;
    if raw.len() < 24 + 16 {
        return None;
    }
    let (nonce, sealed) = raw.split_at(24);
    let nonce: [u8; 24] = nonce.try_into().ok()?;
    let token = cipher(client_secret)
        .decrypt(&XNonce::from(nonce), sealed)
        .ok()?;
    String::from_utf8(token).ok()
}

/// The store's name for a connection's refresh token: the company and a
/// digest of the client ID (not the ID itself).
pub fn token_name(realm_id: &str, client_id: &Secret) -> String {
    let digest = Sha256::digest(client_id.expose().as_bytes());
    let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("quickbooks/{realm_id}/{short}/refresh_token")
}

/// Access tokens from the refresh grant, the rotated refresh token saved.
pub struct RotatingRefresh {
    http: HttpClient,
    token_url: String,
    client_id: Secret,
    client_secret: Secret,
    configured: Option<Secret>,
    store: Option<Arc<dyn TokenStore>>,
    name: String,
    realm_id: String,
    /// The newest refresh token this process holds.
    current: Mutex<Option<Secret>>,
}

impl RotatingRefresh {
    /// Tokens for the app (`client_id`, `client_secret`) and company
    /// `realm_id`, from `token_url`.
    pub fn new(
        token_url: &str,
        client_id: Secret,
        client_secret: Secret,
        configured: Option<Secret>,
        store: Option<Arc<dyn TokenStore>>,
        realm_id: &str,
    ) -> Result<RotatingRefresh, HttpError> {
        let mut policy = HttpPolicy::new(5);
        policy.follow_redirects = false;
        for s in [Some(&client_id), Some(&client_secret), configured.as_ref()]
            .into_iter()
            .flatten()
        {
            register_secret(s.expose());
        }
        Ok(RotatingRefresh {
            http: HttpClient::with_auth(
                QUICKBOOKS_OAUTH,
                policy,
                Arc::new(StaticAuth::new(vec![])),
                vec![("Accept".into(), "application/json".into())],
            )?,
            token_url: token_url.to_string(),
            name: token_name(realm_id, &client_id),
            client_id,
            client_secret,
            configured,
            store,
            realm_id: realm_id.to_string(),
            current: Mutex::new(None),
        })
    }

    fn basic(&self) -> String {
        let raw = format!(
            "{}:{}",
            self.client_id.expose(),
            self.client_secret.expose()
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
        register_secret(&b64);
        format!("Basic {b64}")
    }

    /// The refresh token saved in the store, if any (one sealed with
    /// another client secret counts as none, with a warning).
    async fn stored(&self) -> Result<Option<Secret>, HttpError> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let sealed = store
            .get(&self.name)
            .await
            .map_err(|e| self.store_error(e))?;
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        match open(&sealed, &self.client_secret) {
            Some(t) => {
                register_secret(&t);
                Ok(Some(Secret::new(t)))
            }
            None => {
                tracing::warn!(
                    message = "The refresh token saved in the state store cannot be read with this client secret (the app's secret changed?); using the configured refresh_token.",
                    realm_id = self.realm_id.as_str()
                );
                Ok(None)
            }
        }
    }

    fn store_error(&self, e: ConnectorError) -> HttpError {
        HttpError::Client {
            provider: QUICKBOOKS_OAUTH.name,
            message: format!("the state store holding the QuickBooks refresh token: {e}"),
        }
    }

    /// One refresh grant with `refresh`: (access token, refresh token).
    async fn grant(&self, refresh: &Secret) -> Result<(Secret, Secret), HttpError> {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh.expose()),
        ];
        let basic = self.basic();
        let (v, meta) = self
            .http
            .send_json::<Json>(Method::POST, &self.token_url, |req| {
                req.header("Authorization", basic.as_str()).form(&form)
            })
            .await?;
        let text = |k: &str| v.get(k).and_then(Json::as_str).filter(|t| !t.is_empty());
        match (text("access_token"), text("refresh_token")) {
            (Some(a), Some(r)) => {
                register_secret(a);
                register_secret(r);
                Ok((Secret::new(a), Secret::new(r)))
            }
            _ => Err(HttpError::Status {
                provider: QUICKBOOKS_OAUTH.name,
                endpoint: "POST /oauth2/v1/tokens/bearer".into(),
                status: meta.status,
                request_id: meta.request_id,
                message: "the token response has no access_token or refresh_token".into(),
                body_code: None,
            }),
        }
    }
}

#[async_trait::async_trait]
impl TokenSource for RotatingRefresh {
    async fn fetch(&self) -> Result<Secret, HttpError> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut tried: Vec<String> = Vec::new();
        let mut last: Option<HttpError> = None;
        // The newest first: this process's, the saved one, the configured one.
        for step in 0..3 {
            let candidate = match step {
                0 => current.clone(),
                1 => self.stored().await?,
                _ => self.configured.clone(),
            };
            let Some(refresh) = candidate else { continue };
            if tried.iter().any(|t| t == refresh.expose()) {
                continue;
            }
            tried.push(refresh.expose().to_string());
            match self.grant(&refresh).await {
                Ok((access, newest)) => {
                    if newest.expose() != refresh.expose() || step == 2 {
                        match &self.store {
                            Some(store) => {
                                let sealed = seal(newest.expose(), &self.client_secret)
                                    .ok_or_else(|| {
                                        self.store_error(ConnectorError::Config(
                                            "the operating system gave no random bytes to seal the new refresh token with".into(),
                                        ))
                                    })?;
                                store
                                    .put(&self.name, &sealed)
                                    .await
                                    .map_err(|e| self.store_error(e))?
                            }
                            None => tracing::warn!(
                                message = "No state store: the rotated QuickBooks refresh token is kept only by this process.",
                                realm_id = self.realm_id.as_str()
                            ),
                        }
                        if newest.expose() != refresh.expose() {
                            tracing::info!(
                                message = "QuickBooks rotated the refresh token; the new one is saved (encrypted) in the state store.",
                                realm_id = self.realm_id.as_str()
                            );
                        }
                    }
                    *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(newest);
                    return Ok(access);
                }
                Err(e) if is_invalid_grant(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| HttpError::Client {
            provider: QUICKBOOKS_OAUTH.name,
            message: "no refresh token: the state store holds none and the job sets no refresh_token (use refresh_token = \"${QBO_REFRESH_TOKEN}\")".into(),
        }))
    }
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
    fn sealed_tokens_open_only_with_the_same_secret_and_unaltered() {
        let secret = Secret::new("client-secret-1");
        let token = "RT1-0123456789abcdef0123456789abcdef0123456789";
        let sealed = seal(token, &secret).unwrap();
        assert!(!sealed.contains(token) && !sealed.contains("RT1-"));
        assert_eq!(open(&sealed, &secret).as_deref(), Some(token));
        assert_ne!(
            sealed,
            seal(token, &secret).unwrap(),
            "a fresh nonce each time"
        );
        assert_eq!(open(&sealed, &Secret::new("other")), None);
        let mut bytes = sealed.into_bytes();
        let last = bytes.len() - 5;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(open(&String::from_utf8(bytes).unwrap(), &secret), None);
        assert_eq!(open("v1:", &secret), None);
        assert_eq!(open("plain", &secret), None);
    }

    #[test]
    fn names_hide_the_client_id_and_oauth_errors_carry_their_code() {
        let n = token_name("123", &Secret::new("ABclientid"));
        assert!(
            n.starts_with("quickbooks/123/") && !n.contains("ABclientid"),
            "{n}"
        );
        let e = oauth_error_body(br#"{"error":"invalid_grant"}"#).unwrap();
        assert_eq!(e.code.as_deref(), Some("invalid_grant"));
        assert_eq!(oauth_error_body(b"{}"), None);
    }
}
