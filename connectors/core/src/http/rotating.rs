//! OAuth 2.0 refresh-token grants (RFC 6749 section 6) whose refresh token
//! rotates: every refresh answers with a new refresh token and the old one
//! stops working (Intuit's QuickBooks Online; any API declared with
//! `kind = "oauth_refresh_token"`). The newest token must outlive the run
//! that received it, so it is kept in the job's state store
//! ([`TokenStore`]), sealed: XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`) under a key derived by HKDF-SHA256 from the app's
//! client secret, a random 192-bit nonce per seal, so the store never holds
//! a token in clear and an altered one is refused.
//!
//! The refresh token tried first is the one this process received last,
//! then the stored one, then the configured one (`${…_REFRESH_TOKEN}`): the
//! configured token is used only when the store holds none, or after the
//! stored one was refused (the reconnect path: put a new token in the
//! environment and run again). Each new token is saved before the access
//! token that came with it is used. Every token is registered as a secret.
//!
//! Two refreshes at once: [`super::RefreshableToken`] refreshes one at a
//! time within a process, and the run lock serialises the runs of one job;
//! two jobs sharing one connection could still race, and the loser's
//! `invalid_grant` makes it read the store again and use the winner's.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use super::{HttpClient, HttpError, HttpPolicy, Method, Provider, StaticAuth, TokenSource};
use crate::{register_secret, ConnectorError, Secret, TokenStore};

/// How the client authenticates at the token endpoint (RFC 6749 section
/// 2.3.1 allows both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// `Authorization: Basic base64(client_id:client_secret)` (Intuit).
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Form,
}

/// What a rotating refresh grant needs: the endpoint, the app's
/// credentials, the configured token and where newer ones are kept.
pub struct RefreshGrant {
    /// The token endpoint's identity for the HTTP policy (its error bodies
    /// should read RFC 6749's `{"error": …}` code: see [`oauth_error_body`]).
    pub provider: Provider,
    /// `POST` here with `grant_type=refresh_token`.
    pub token_url: String,
    /// The app's client ID.
    pub client_id: Secret,
    /// The app's client secret; also what seals the stored token.
    pub client_secret: Secret,
    /// How the client authenticates.
    pub client_auth: ClientAuth,
    /// An optional `scope` sent with the grant.
    pub scope: Option<String>,
    /// The job's configured refresh token, if any.
    pub configured: Option<Secret>,
    /// The job's state store.
    pub store: Option<Arc<dyn TokenStore>>,
    /// The store's name for this connection's token ([`token_name`]).
    pub name: String,
    /// The connection, for messages (`QuickBooks company 123`).
    pub label: String,
    /// The setting to put a new refresh token in, for messages
    /// (`refresh_token = "${QBO_REFRESH_TOKEN}"`).
    pub setting: String,
}

/// Access tokens from a rotating refresh grant, the newest refresh token
/// saved in the store.
pub struct RotatingRefresh {
    grant: RefreshGrant,
    http: HttpClient,
    /// The newest refresh token this process holds.
    current: Mutex<Option<Secret>>,
}

/// The store's name of a connection's refresh token: `prefix` and a digest
/// of the client ID (not the ID itself).
pub fn token_name(prefix: &str, client_id: &Secret) -> String {
    let digest = Sha256::digest(client_id.expose().as_bytes());
    let short = crate::lower_hex(&digest[..6]);
    format!("{prefix}/{short}/refresh_token")
}

/// RFC 6749 section 5.2 error bodies, `{"error": "invalid_grant",
/// "error_description"?}`: the code is `error`.
pub fn oauth_error_body(body: &[u8]) -> Option<super::ProviderError> {
    let v: Json = serde_json::from_slice(body).ok()?;
    let code = v.get("error").and_then(Json::as_str)?.to_string();
    let message = v
        .get("error_description")
        .and_then(Json::as_str)
        .map_or_else(|| code.clone(), str::to_string);
    Some(super::ProviderError {
        message: Some(message),
        code: Some(code),
        is_final: false,
    })
}

/// Whether `e` is `provider`'s token endpoint refusing the refresh token.
pub fn is_invalid_grant(e: &HttpError, provider: &Provider) -> bool {
    matches!(e, HttpError::Status { provider: p, body_code: Some(code), .. }
        if *p == provider.name && code == "invalid_grant")
}

/// The cipher of sealed tokens: its key derived from the client secret by
/// HKDF-SHA256 under a fixed label.
fn cipher(client_secret: &Secret) -> XChaCha20Poly1305 {
    let mut key = [0u8; 32];
    hkdf::Hkdf::<Sha256>::new(None, client_secret.expose().as_bytes())
        .expand(b"recon refresh token v1", &mut key)
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

impl RotatingRefresh {
    /// The token source of `grant`; no request is sent yet.
    pub fn new(grant: RefreshGrant) -> Result<RotatingRefresh, HttpError> {
        let mut policy = HttpPolicy::new(5);
        policy.follow_redirects = false;
        for s in [
            Some(&grant.client_id),
            Some(&grant.client_secret),
            grant.configured.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            register_secret(s.expose());
        }
        Ok(RotatingRefresh {
            http: HttpClient::with_auth(
                grant.provider,
                policy,
                Arc::new(StaticAuth::new(vec![])),
                vec![("Accept".into(), "application/json".into())],
            )?,
            grant,
            current: Mutex::new(None),
        })
    }

    /// The refresh token saved in the store, if any (one sealed with
    /// another client secret counts as none, with a warning).
    async fn stored(&self) -> Result<Option<Secret>, HttpError> {
        let Some(store) = &self.grant.store else {
            return Ok(None);
        };
        let sealed = store
            .get(&self.grant.name)
            .await
            .map_err(|e| self.store_error(e))?;
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        match open(&sealed, &self.grant.client_secret) {
            Some(t) => {
                register_secret(&t);
                Ok(Some(Secret::new(t)))
            }
            None => {
                tracing::warn!(
                    message = "The refresh token saved in the state store cannot be read with this client secret (the app's secret changed?); using the configured one.",
                    connection = self.grant.label.as_str()
                );
                Ok(None)
            }
        }
    }

    fn store_error(&self, e: ConnectorError) -> HttpError {
        HttpError::Client {
            provider: self.grant.provider.name,
            message: format!(
                "the state store holding the refresh token of {}: {e}",
                self.grant.label
            ),
        }
    }

    /// Saves `newest`, sealed.
    async fn save(&self, newest: &Secret) -> Result<(), HttpError> {
        let Some(store) = &self.grant.store else {
            tracing::warn!(
                message = "No state store: the rotated refresh token is kept only by this process.",
                connection = self.grant.label.as_str()
            );
            return Ok(());
        };
        let sealed = seal(newest.expose(), &self.grant.client_secret).ok_or_else(|| {
            self.store_error(ConnectorError::Config(
                "the operating system gave no random bytes to seal the new refresh token with"
                    .into(),
            ))
        })?;
        store
            .put(&self.grant.name, &sealed)
            .await
            .map_err(|e| self.store_error(e))
    }

    /// One refresh grant with `refresh`: (access token, refresh token; the
    /// same one when the endpoint did not rotate it).
    async fn exchange(&self, refresh: &Secret) -> Result<(Secret, Secret), HttpError> {
        let g = &self.grant;
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh.expose()),
        ];
        if let Some(scope) = &g.scope {
            form.push(("scope", scope));
        }
        let basic = match g.client_auth {
            ClientAuth::Basic => {
                let raw = format!("{}:{}", g.client_id.expose(), g.client_secret.expose());
                let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
                register_secret(&b64);
                Some(format!("Basic {b64}"))
            }
            ClientAuth::Form => {
                form.push(("client_id", g.client_id.expose()));
                form.push(("client_secret", g.client_secret.expose()));
                None
            }
        };
        let (v, meta) = self
            .http
            .send_json::<Json>(Method::POST, &g.token_url, |req| match &basic {
                Some(b) => req.header("Authorization", b.as_str()).form(&form),
                None => req.form(&form),
            })
            .await?;
        let text = |k: &str| v.get(k).and_then(Json::as_str).filter(|t| !t.is_empty());
        match (text("access_token"), text("refresh_token")) {
            (Some(a), r) => {
                register_secret(a);
                let newest = match r {
                    Some(r) => {
                        register_secret(r);
                        Secret::new(r)
                    }
                    None => refresh.clone(),
                };
                Ok((Secret::new(a), newest))
            }
            _ => Err(HttpError::Status {
                provider: g.provider.name,
                endpoint: "POST token_url".into(),
                status: meta.status,
                request_id: meta.request_id,
                message: "the token answer has no access_token".into(),
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
                _ => self.grant.configured.clone(),
            };
            let Some(refresh) = candidate else { continue };
            if tried.iter().any(|t| t == refresh.expose()) {
                continue;
            }
            tried.push(refresh.expose().to_string());
            match self.exchange(&refresh).await {
                Ok((access, newest)) => {
                    let rotated = newest.expose() != refresh.expose();
                    // A configured token that worked is saved too: the
                    // store then holds the connection's token from now on.
                    if rotated || step == 2 {
                        self.save(&newest).await?;
                    }
                    if rotated {
                        tracing::info!(
                            message = "The refresh token was rotated; the new one is saved (encrypted) in the state store.",
                            connection = self.grant.label.as_str()
                        );
                    }
                    *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(newest);
                    return Ok(access);
                }
                Err(e) if is_invalid_grant(&e, &self.grant.provider) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| HttpError::Client {
            provider: self.grant.provider.name,
            message: format!(
                "no refresh token for {}: the state store holds none and the job sets none (use {})",
                self.grant.label, self.grant.setting
            ),
        }))
    }
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
    fn names_hide_the_client_id_and_errors_carry_their_code() {
        let n = token_name("quickbooks/123", &Secret::new("ABclientid"));
        assert!(
            n.starts_with("quickbooks/123/")
                && n.ends_with("/refresh_token")
                && !n.contains("ABclientid"),
            "{n}"
        );
        let e =
            oauth_error_body(br#"{"error":"invalid_grant","error_description":"Token expired"}"#)
                .unwrap();
        assert_eq!(e.code.as_deref(), Some("invalid_grant"));
        assert_eq!(e.message.as_deref(), Some("Token expired"));
        assert!(oauth_error_body(b"not json").is_none());
    }
}
