//! The connector's HTTP client: the shared policy (`recon_core::http`) with
//! the API's declared rate, request-ID header, extra retried statuses,
//! rate-limit headers and auth. Nothing here sends a request by itself.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use recon_core::http::rotating::{self, ClientAuth, RefreshGrant, RotatingRefresh};
use recon_core::http::{
    Auth, ClientCredentials, HttpClient, HttpError, HttpPolicy, Method, Provider, RefreshableToken,
    ResponseMeta, StaticAuth, Throttle,
};
use recon_core::{ConnectorError, Secret, TokenStore};
use serde_json::Value as Json;

use crate::settings::{AuthSettings, ClientAuthSetting, HttpSettings, RateLimitHeaders};

/// The API as the connector calls it.
pub struct Api {
    /// The shared policy's client.
    pub http: HttpClient,
    /// The API key sent as a query parameter, if that is the auth.
    query_key: Option<(String, Secret)>,
    /// Headers to pace by.
    rate_headers: Option<RateLimitHeaders>,
}

/// A `&'static str` made once per connector build: the shared policy's
/// [`Provider`] names its API and request-ID header statically, and a
/// declared API has them only at run time. A job builds each side once or
/// twice, so this leaks a few bytes per run.
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

impl Api {
    /// The client of `settings`.
    pub fn new(
        settings: &HttpSettings,
        rate: (u32, Duration),
        tokens: Option<Arc<dyn TokenStore>>,
    ) -> Result<Api, ConnectorError> {
        let provider = Provider::new(leak(&settings.name), leak(&settings.request_id_header));
        let mut policy = HttpPolicy::new(rate.0);
        policy.interval = rate.1;
        // Arrivals bunch by the network's jitter: keep 20 ms of it.
        policy.jitter = Duration::from_millis(20);
        if let Some(p) = settings.patience()? {
            policy.rate_limit_patience = p;
        }
        if let Some(t) = settings.timeout()? {
            policy.timeout = t;
        }
        let config = |e: HttpError| ConnectorError::Config(e.to_string());
        let mut query_key = None;
        let auth: Arc<dyn Auth> = match &settings.auth {
            None => Arc::new(StaticAuth::new(vec![])),
            Some(AuthSettings::Bearer { token }) => Arc::new(StaticAuth::bearer(token)),
            Some(AuthSettings::Basic { username, password }) => {
                let raw = format!("{}:{}", username.expose(), password.expose());
                let value = Secret::new(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                ));
                Arc::new(StaticAuth::new(vec![("Authorization".into(), value)]))
            }
            Some(AuthSettings::ApiKey {
                header,
                query,
                value,
            }) => match (header, query) {
                (Some(h), None) => Arc::new(StaticAuth::new(vec![(h.clone(), value.clone())])),
                (None, Some(q)) => {
                    query_key = Some((q.clone(), value.clone()));
                    Arc::new(StaticAuth::new(vec![]))
                }
                _ => {
                    return Err(ConnectorError::Config(
                        "auth: an api_key goes in a header (auth.header = \"X-Api-Key\") or a query parameter (auth.query = \"api_key\"): set exactly one".into(),
                    ))
                }
            },
            Some(AuthSettings::OauthClientCredentials {
                token_url,
                client_id,
                client_secret,
                scope,
            }) => {
                let grant = ClientCredentials::new(
                    Provider::new(leak(&format!("{} OAuth", settings.name)), "X-Request-Id"),
                    HttpPolicy::new(5),
                    token_url,
                    "POST auth.token_url",
                    (client_id.clone(), client_secret.clone()),
                    scope.clone(),
                )
                .map_err(config)?;
                Arc::new(RefreshableToken::bearer(grant))
            }
            Some(AuthSettings::OauthRefreshToken {
                token_url,
                client_id,
                client_secret,
                refresh_token,
                scope,
                client_auth,
            }) => {
                let grant = RefreshGrant {
                    provider: Provider {
                        error_body: rotating::oauth_error_body,
                        ..Provider::new(leak(&format!("{} OAuth", settings.name)), "X-Request-Id")
                    },
                    token_url: token_url.clone(),
                    name: rotating::token_name(&format!("http/{}", settings.name), client_id),
                    client_id: client_id.clone(),
                    client_secret: client_secret.clone(),
                    client_auth: match client_auth {
                        ClientAuthSetting::Basic => ClientAuth::Basic,
                        ClientAuthSetting::Form => ClientAuth::Form,
                    },
                    scope: scope.clone(),
                    configured: refresh_token.clone(),
                    store: tokens,
                    label: format!("the API `{}`", settings.name),
                    setting: "auth.refresh_token = \"${API_REFRESH_TOKEN}\"".into(),
                };
                Arc::new(RefreshableToken::bearer(
                    RotatingRefresh::new(grant).map_err(config)?,
                ))
            }
        };
        let mut headers: Vec<(String, String)> = vec![("Accept".into(), "application/json".into())];
        headers.extend(
            settings
                .headers
                .0
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let mut http = HttpClient::with_auth(provider, policy, auth, headers).map_err(config)?;
        if !settings.retry_statuses.is_empty() {
            let extra = settings.retry_statuses.clone();
            http = http.with_throttle_hint(move |status, _body| {
                extra.contains(&status).then(|| Throttle {
                    wait: None,
                    code: status.to_string(),
                    shared_window: false,
                })
            });
        }
        Ok(Api {
            http,
            query_key,
            rate_headers: settings.rate_limit_headers,
        })
    }

    /// One call under the policy: `method url?query` with an optional JSON
    /// body and extra headers; the answer as JSON.
    pub async fn call(
        &self,
        method: Method,
        url: &str,
        query: &[(String, String)],
        body: Option<&Json>,
        headers: &[(String, String)],
    ) -> Result<(Json, ResponseMeta), HttpError> {
        let mut q: Vec<(String, String)> = query.to_vec();
        if let Some((name, key)) = &self.query_key {
            q.push((name.clone(), key.expose().to_string()));
        }
        let (json, meta) = self
            .http
            .send_json::<Json>(method, url, |req| {
                let mut req = if q.is_empty() { req } else { req.query(&q) };
                for (k, v) in headers {
                    req = req.header(k, v);
                }
                match body {
                    Some(b) => req.json(b),
                    None => req,
                }
            })
            .await?;
        self.pace_by_headers(&meta);
        Ok((json, meta))
    }

    /// Like [`Api::call`], but a 2xx is success whatever its body (empty,
    /// not JSON): for writes whose answer recon does not read, so that a
    /// body it cannot parse never makes the policy send the write again.
    pub async fn call_status(
        &self,
        method: Method,
        url: &str,
        query: &[(String, String)],
        body: Option<&Json>,
        headers: &[(String, String)],
    ) -> Result<ResponseMeta, HttpError> {
        let mut q: Vec<(String, String)> = query.to_vec();
        if let Some((name, key)) = &self.query_key {
            q.push((name.clone(), key.expose().to_string()));
        }
        let meta = self
            .http
            .send_status(method, url, |req| {
                let mut req = if q.is_empty() { req } else { req.query(&q) };
                for (k, v) in headers {
                    req = req.header(k, v);
                }
                match body {
                    Some(b) => req.json(b),
                    None => req,
                }
            })
            .await?;
        self.pace_by_headers(&meta);
        Ok(meta)
    }

    /// Reads the declared rate-limit headers of an answer and tells the
    /// shared limiter what remains of the API's window.
    fn pace_by_headers(&self, meta: &ResponseMeta) {
        let Some(kind) = self.rate_headers else {
            return;
        };
        let h = |name: &str| {
            meta.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        };
        let (remaining, reset) = match kind {
            RateLimitHeaders::XRatelimit => (
                h("x-ratelimit-remaining").and_then(|v| v.parse::<u64>().ok()),
                h("x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok()),
            ),
            RateLimitHeaders::Ietf => match (h("ratelimit-remaining"), h("ratelimit-reset")) {
                (Some(r), Some(t)) => (r.parse().ok(), t.parse().ok()),
                _ => h("ratelimit").map_or((None, None), combined),
            },
        };
        if let (Some(remaining), Some(reset)) = (remaining, reset) {
            let secs = if reset > 1_000_000_000 {
                // A Unix time (GitHub's X-RateLimit-Reset).
                let now = jiff::Timestamp::now().as_second().max(0) as u64;
                reset.saturating_sub(now)
            } else {
                reset
            };
            self.http.report_remaining(
                u32::try_from(remaining).unwrap_or(u32::MAX),
                Duration::from_secs(secs.max(1)),
            );
        }
    }
}

/// One `RateLimit` header of the IETF draft: `limit=100, remaining=50,
/// reset=30` (drafts 03–07) or `"default";r=50;t=30` (draft 08 on).
fn combined(v: &str) -> (Option<u64>, Option<u64>) {
    let (mut r, mut t) = (None, None);
    for part in v.split([',', ';']) {
        if let Some((k, val)) = part.trim().split_once('=') {
            let n = val.trim().parse::<u64>().ok();
            match k.trim() {
                "r" | "remaining" => r = n,
                "t" | "reset" => t = n,
                _ => {}
            }
        }
    }
    (r, t)
}

/// `base` joined with a rendered path, or the path itself when it is a
/// whole URL.
pub fn join(base: &str, path: &str) -> String {
    if path.starts_with("http://") || path.starts_with("https://") {
        path.to_string()
    } else if path.starts_with('/') {
        format!("{base}{path}")
    } else {
        format!("{base}/{path}")
    }
}

/// A next-page URL as the API gave it, made absolute against the URL of
/// the page it came with (RFC 3986 reference resolution).
pub fn resolve(current: &str, next: &str) -> Option<String> {
    let base = url::Url::parse(current).ok()?;
    base.join(next).ok().map(String::from)
}

/// The `rel="next"` target of an RFC 8288 `Link` header.
pub fn link_next(header: &str) -> Option<String> {
    for link in header.split(',') {
        let mut parts = link.split(';');
        let target = parts.next()?.trim();
        let target = target.strip_prefix('<')?.strip_suffix('>')?;
        let is_next = parts.any(|p| {
            let p = p.trim();
            p.split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("rel")
                    && v.trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if is_next {
            return Some(target.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers_give_their_next_target() {
        let h = r#"<https://api.github.com/repositories/1/issues?page=2>; rel="next", <https://api.github.com/repositories/1/issues?page=5>; rel="last""#;
        assert_eq!(
            link_next(h).as_deref(),
            Some("https://api.github.com/repositories/1/issues?page=2")
        );
        assert_eq!(link_next(r#"<https://x/?page=1>; rel="prev first""#), None);
        assert_eq!(
            link_next(r#"<https://x/?p=3>; title="x"; rel="last next""#).as_deref(),
            Some("https://x/?p=3")
        );
    }

    #[test]
    fn next_urls_resolve_against_the_page_they_came_with() {
        assert_eq!(
            resolve("http://127.0.0.1:9/v1/items?page=1", "/v1/items?page=2").as_deref(),
            Some("http://127.0.0.1:9/v1/items?page=2")
        );
        assert_eq!(
            resolve("http://127.0.0.1:9/v1/items", "https://other/x").as_deref(),
            Some("https://other/x")
        );
        assert_eq!(join("http://h/api", "/v1/x"), "http://h/api/v1/x");
        assert_eq!(join("http://h/api", "https://o/y"), "https://o/y");
    }

    #[test]
    fn the_ietf_combined_header_is_read_in_both_draft_forms() {
        assert_eq!(
            combined("limit=100, remaining=50, reset=30"),
            (Some(50), Some(30))
        );
        assert_eq!(combined("\"default\";r=7;t=2"), (Some(7), Some(2)));
    }
}
