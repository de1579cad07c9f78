//! The one HTTP policy every API connector uses (Stripe now; Shopify and
//! HubSpot later): a shared rate limiter, one retry classifier, exponential
//! backoff with full jitter that honours `Retry-After`, a per-request timeout,
//! structured logs, and errors that name the provider, the endpoint and the
//! request ID but never a secret.
//!
//! - **Rate limit.** A `governor` direct limiter (`requests_per_second`,
//!   `burst`) shared by every clone of an [`HttpClient`]; every attempt,
//!   retries included, waits for a permit.
//! - **Retries.** 429, 500, 502, 503 and 504 are retried, as are timeouts,
//!   connection errors, truncated bodies and 2xx bodies that are not valid
//!   JSON for the expected type. 401 and 403 never are; other 4xx are not.
//!   A provider's hint header (`Stripe-Should-Retry: true|false`) overrides
//!   the status-based decision (see [`Provider::should_retry`]).
//! - **Backoff.** `random(0 ..= min(max_backoff, base_backoff * 2^retry))`,
//!   at least `Retry-After` when the response carries one. The client gives
//!   up after `max_attempts` attempts, or when the next wait would take the
//!   total waited past `max_total_wait`.
//! - **Secrets.** Secret headers are marked sensitive, never logged, and
//!   scrubbed from any error message a server echoes back.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use reqwest::{Method, RequestBuilder, Url};

use crate::Secret;

/// Rate, timeout and retry settings of one client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpPolicy {
    /// Sustained requests per `interval` (at least 1); per second unless
    /// `interval` says otherwise.
    pub requests_per_second: u32,
    /// The period `requests_per_second` counts over: 1 s by default; HubSpot
    /// documents its general limit per rolling 10 s.
    pub interval: Duration,
    /// Requests that may go at once after a quiet spell (at least 1).
    pub burst: u32,
    /// Per-request timeout, from sending to the end of the body.
    pub timeout: Duration,
    /// Most attempts per call, the first included.
    pub max_attempts: u32,
    /// Most time spent sleeping between the attempts of one call.
    pub max_total_wait: Duration,
    /// Backoff before the first retry (the upper bound of its jitter).
    pub base_backoff: Duration,
    /// Upper bound of any backoff (but `Retry-After` is always honoured).
    pub max_backoff: Duration,
}

impl HttpPolicy {
    /// The defaults at `requests_per_second`: burst = rate, 30 s timeout,
    /// 6 attempts, 120 s of total wait, backoff from 250 ms up to 20 s.
    pub fn new(requests_per_second: u32) -> HttpPolicy {
        HttpPolicy {
            requests_per_second,
            interval: Duration::from_secs(1),
            burst: requests_per_second,
            timeout: Duration::from_secs(30),
            max_attempts: 6,
            max_total_wait: Duration::from_secs(120),
            base_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(20),
        }
    }

    /// The sleep before retry number `retry` (0 for the first retry): full
    /// jitter below the exponential cap, but at least `retry_after`.
    fn backoff(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        let cap = self
            .base_backoff
            .saturating_mul(factor)
            .min(self.max_backoff);
        let micros = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
        let jitter = Duration::from_micros(fastrand::u64(0..=micros));
        retry_after.map_or(jitter, |at_least| jitter.max(at_least))
    }
}

/// Who is on the other end: its name for messages, the header carrying its
/// request ID, and its optional retry hint header.
#[derive(Clone, Copy, Debug)]
pub struct Provider {
    /// Name used in errors and logs (`Stripe`).
    pub name: &'static str,
    /// Response header with the request ID (`Request-Id`).
    pub request_id_header: &'static str,
    /// Response header whose `true`/`false` overrides the retry decision
    /// (`Stripe-Should-Retry`).
    pub should_retry_header: Option<&'static str>,
    /// Top-level JSON fields of an error body that make an otherwise
    /// retryable status final: HubSpot's 429 with `policyName: DAILY` means
    /// the day's quota is spent, and retrying for hours would only hide it.
    pub final_when: &'static [(&'static str, &'static str)],
}

impl Provider {
    /// Whether the error body carries one of [`Provider::final_when`].
    pub fn is_final_body(&self, body: Option<&[u8]>) -> bool {
        if self.final_when.is_empty() {
            return false;
        }
        let Some(v) = body.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok()) else {
            return false;
        };
        self.final_when
            .iter()
            .any(|(field, value)| v.get(field).and_then(|x| x.as_str()) == Some(value))
    }

    /// The retry classifier for HTTP responses: 429, 500, 502, 503 and 504
    /// are retried, other statuses are not; the provider's hint header, when
    /// present with `true` or `false`, overrides that. 2xx, 401 and 403 are
    /// never retried. (Timeouts, connection errors, truncated bodies and
    /// malformed 2xx JSON are always retried; they have no status to judge.)
    pub fn should_retry(&self, status: u16, headers: &HeaderMap) -> bool {
        if (200..300).contains(&status) || status == 401 || status == 403 {
            return false;
        }
        if let Some(hint) = self
            .should_retry_header
            .and_then(|name| headers.get(name))
            .and_then(|v| v.to_str().ok())
        {
            match hint.trim().to_ascii_lowercase().as_str() {
                "true" => return true,
                "false" => return false,
                _ => {}
            }
        }
        matches!(status, 429 | 500 | 502 | 503 | 504)
    }
}

/// Status, request ID and headers of the response that succeeded.
#[derive(Clone, Debug)]
pub struct ResponseMeta {
    /// HTTP status.
    pub status: u16,
    /// The provider's request ID, when it sent one.
    pub request_id: Option<String>,
    /// Response headers.
    pub headers: HeaderMap,
}

/// Totals since the client was created (shared by its clones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpStats {
    /// Attempts sent, retries included.
    pub requests: u64,
    /// Retries (attempts after the first of a call).
    pub retries: u64,
    /// 429 responses seen.
    pub throttled: u64,
    /// 5xx responses seen.
    pub server_errors: u64,
}

/// Why a call failed. `Display` names the provider, the endpoint (method and
/// URL path, no query, no host) and the request ID; never a secret.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// 401 or 403: bad or insufficient credentials. Never retried.
    #[error("{provider} {endpoint} was refused with {status}: {message} ({})", RequestId(.request_id))]
    Unauthorized {
        provider: &'static str,
        endpoint: String,
        status: u16,
        request_id: Option<String>,
        message: String,
    },
    /// Any other final non-2xx response (400, 404, 409…). Not retried.
    /// `message` and `body_code` come from the provider's JSON error body
    /// when it has one (Stripe: `error.message`, `error.code`).
    #[error("{provider} {endpoint} returned {status}{}: {message} ({})", BodyCode(.body_code), RequestId(.request_id))]
    Status {
        provider: &'static str,
        endpoint: String,
        status: u16,
        request_id: Option<String>,
        message: String,
        body_code: Option<String>,
    },
    /// Every allowed attempt failed with a retryable error, or the next wait
    /// would have passed `max_total_wait`. `last` describes the last failure:
    /// `429 rate_limit`, `503`, `timeout`, `connection reset (…)`,
    /// `malformed JSON: …`.
    #[error("{provider} {endpoint} failed after {attempts} attempt{} (last: {last}; {})", if *.attempts == 1 { "" } else { "s" }, RequestId(.request_id))]
    RetriesExhausted {
        provider: &'static str,
        endpoint: String,
        attempts: u32,
        last: String,
        request_id: Option<String>,
    },
    /// The client could not be built (bad policy, header or URL).
    #[error("{provider} HTTP client: {message}")]
    Client {
        provider: &'static str,
        message: String,
    },
}

/// `request req_abc` or `no request ID`.
struct RequestId<'a>(&'a Option<String>);

impl fmt::Display for RequestId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => write!(f, "request {id}"),
            None => f.write_str("no request ID"),
        }
    }
}

/// ` (resource_missing)` or nothing.
struct BodyCode<'a>(&'a Option<String>);

impl fmt::Display for BodyCode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(code) => write!(f, " ({code})"),
            None => Ok(()),
        }
    }
}

/// An HTTP client bound to one provider and one policy. Cheap to clone; the
/// clones share the connection pool, the rate limiter and the stats.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

struct Inner {
    provider: Provider,
    policy: HttpPolicy,
    client: reqwest::Client,
    limiter: Arc<DefaultDirectRateLimiter>,
    /// Limiters of other clients this one also waits for: HubSpot's search
    /// calls obey their own per-second limit and the account's 10-second one.
    also: Vec<Arc<DefaultDirectRateLimiter>>,
    /// Values scrubbed from every message that could echo them.
    secrets: Vec<Secret>,
    requests: AtomicU64,
    retries: AtomicU64,
    throttled: AtomicU64,
    server_errors: AtomicU64,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("provider", &self.inner.provider)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

/// What one attempt came to.
enum Outcome<T> {
    Done(T, ResponseMeta),
    Fatal(HttpError),
    Retry(Failure),
}

/// A retryable failure of one attempt.
struct Failure {
    /// For `RetriesExhausted::last` and the log.
    last: String,
    status: Option<u16>,
    request_id: Option<String>,
    retry_after: Option<Duration>,
}

impl Failure {
    fn transport(last: String) -> Failure {
        Failure {
            last,
            status: None,
            request_id: None,
            retry_after: None,
        }
    }
}

impl HttpClient {
    /// A client sending `headers` and `secret_headers` on every request.
    /// Secret header values are marked sensitive and never logged or shown.
    pub fn new(
        provider: Provider,
        policy: HttpPolicy,
        secret_headers: Vec<(String, Secret)>,
        headers: Vec<(String, String)>,
    ) -> Result<HttpClient, HttpError> {
        let fail = |message: String| HttpError::Client {
            provider: provider.name,
            message,
        };
        let rate = NonZeroU32::new(policy.requests_per_second)
            .ok_or_else(|| fail("requests_per_second must be at least 1".into()))?;
        let burst =
            NonZeroU32::new(policy.burst).ok_or_else(|| fail("burst must be at least 1".into()))?;
        let header_name = |name: &str| {
            HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| fail(format!("invalid header name {name:?}")))
        };

        let mut map = HeaderMap::new();
        map.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("recon/", env!("CARGO_PKG_VERSION"))),
        );
        for (name, value) in &headers {
            let value = HeaderValue::from_str(value)
                .map_err(|_| fail(format!("invalid value for header {name}")))?;
            map.insert(header_name(name)?, value);
        }
        for (name, secret) in &secret_headers {
            let mut value = HeaderValue::from_str(secret.expose()).map_err(|_| {
                fail(format!(
                    "invalid value for secret header {name} (value not shown)"
                ))
            })?;
            value.set_sensitive(true);
            map.insert(header_name(name)?, value);
        }
        let client = reqwest::Client::builder()
            .default_headers(map)
            .timeout(policy.timeout)
            .build()
            .map_err(|e| fail(root_cause(&e)))?;
        let period = policy.interval.max(Duration::from_millis(1)) / rate.get();
        let quota = Quota::with_period(period)
            .ok_or_else(|| fail("interval must be longer than zero".into()))?
            .allow_burst(burst);
        let limiter = RateLimiter::direct(quota);
        Ok(HttpClient {
            inner: Arc::new(Inner {
                provider,
                policy,
                client,
                limiter: Arc::new(limiter),
                also: Vec::new(),
                secrets: secret_headers.into_iter().map(|(_, s)| s).collect(),
                requests: AtomicU64::new(0),
                retries: AtomicU64::new(0),
                throttled: AtomicU64::new(0),
                server_errors: AtomicU64::new(0),
            }),
        })
    }

    /// This client, also paced by `other`'s rate limiter (every request waits
    /// for a permit of both). Call before cloning: clones made earlier keep
    /// their limiters.
    pub fn also_limited_by(self, other: &HttpClient) -> HttpClient {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            provider: shared.provider,
            policy: shared.policy.clone(),
            client: shared.client.clone(),
            limiter: shared.limiter.clone(),
            also: shared.also.clone(),
            secrets: shared.secrets.clone(),
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
        });
        let mut inner = inner;
        inner.also.push(other.inner.limiter.clone());
        HttpClient {
            inner: Arc::new(inner),
        }
    }

    /// `GET url?query`, parsed as JSON into `T`, under the policy.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        query: &[(String, String)],
    ) -> Result<(T, ResponseMeta), HttpError> {
        self.call(Method::GET, url, |req| req.query(query)).await
    }

    /// `POST url` with a JSON body, the response parsed as JSON into `T`,
    /// under the policy. Retried like a GET: the provider must make the call
    /// idempotent (Stripe: send an `Idempotency-Key` header).
    pub async fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<(T, ResponseMeta), HttpError> {
        self.call(Method::POST, url, |req| req.json(body)).await
    }

    /// Totals since the client was created, over all its clones.
    pub fn stats(&self) -> HttpStats {
        let i = &self.inner;
        HttpStats {
            requests: i.requests.load(Ordering::Relaxed),
            retries: i.retries.load(Ordering::Relaxed),
            throttled: i.throttled.load(Ordering::Relaxed),
            server_errors: i.server_errors.load(Ordering::Relaxed),
        }
    }

    /// The retry loop.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<(T, ResponseMeta), HttpError> {
        let inner = &*self.inner;
        let provider = inner.provider.name;
        let parsed = Url::parse(url).map_err(|e| HttpError::Client {
            provider,
            message: format!("invalid URL for {method}: {e}"),
        })?;
        let endpoint = format!("{method} {}", parsed.path());
        let max_attempts = inner.policy.max_attempts.max(1);
        let mut waited = Duration::ZERO;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            inner.limiter.until_ready().await;
            for other in &inner.also {
                other.until_ready().await;
            }
            inner.requests.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                provider,
                endpoint = endpoint.as_str(),
                attempt,
                "Sending request."
            );
            let request = build(inner.client.request(method.clone(), parsed.clone()));
            let failure = match self.attempt::<T>(request, &endpoint).await {
                Outcome::Done(value, meta) => return Ok((value, meta)),
                Outcome::Fatal(e) => return Err(e),
                Outcome::Retry(failure) => failure,
            };
            let exhausted = || HttpError::RetriesExhausted {
                provider,
                endpoint: endpoint.clone(),
                attempts: attempt,
                last: failure.last.clone(),
                request_id: failure.request_id.clone(),
            };
            if attempt >= max_attempts {
                return Err(exhausted());
            }
            let wait = inner.policy.backoff(attempt - 1, failure.retry_after);
            if waited.saturating_add(wait) > inner.policy.max_total_wait {
                tracing::debug!(
                    provider,
                    endpoint = endpoint.as_str(),
                    attempt,
                    wait_ms = wait.as_millis() as u64,
                    "Giving up: the next wait would pass max_total_wait."
                );
                return Err(exhausted());
            }
            tracing::warn!(
                provider,
                endpoint = endpoint.as_str(),
                status = failure.status,
                error = failure.status.is_none().then_some(failure.last.as_str()),
                attempt,
                wait_ms = wait.as_millis() as u64,
                request_id = failure.request_id.as_deref(),
                "Retrying request."
            );
            tokio::time::sleep(wait).await;
            waited += wait;
            inner.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One attempt, classified.
    async fn attempt<T: serde::de::DeserializeOwned>(
        &self,
        request: RequestBuilder,
        endpoint: &str,
    ) -> Outcome<T> {
        let inner = &*self.inner;
        let provider = inner.provider.name;
        let started = Instant::now();
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Outcome::Retry(Failure::transport(self.scrub(describe(&e)))),
        };
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let request_id = headers
            .get(inner.provider.request_id_header)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if status == 429 {
            inner.throttled.fetch_add(1, Ordering::Relaxed);
        }
        if status >= 500 {
            inner.server_errors.fetch_add(1, Ordering::Relaxed);
        }
        let body = response.bytes().await;
        tracing::debug!(
            provider,
            endpoint,
            status,
            request_id = request_id.as_deref(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "Received response."
        );

        if (200..300).contains(&status) {
            let bytes = match body {
                Ok(b) => b,
                Err(e) => {
                    return Outcome::Retry(Failure {
                        last: self.scrub(describe(&e)),
                        status: None,
                        request_id,
                        retry_after: None,
                    })
                }
            };
            // An empty body (204) reads as `null`, so `()` and `Option` work.
            let json: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
                b"null"
            } else {
                &bytes
            };
            return match serde_json::from_slice::<T>(json) {
                Ok(value) => Outcome::Done(
                    value,
                    ResponseMeta {
                        status,
                        request_id,
                        headers,
                    },
                ),
                Err(e) => Outcome::Retry(Failure {
                    last: self.scrub(format!("malformed JSON: {e}")),
                    status: None,
                    request_id,
                    retry_after: None,
                }),
            };
        }

        let body = body.ok();
        let (message, body_code) = error_body(body.as_deref());
        let message = self.scrub(message.unwrap_or_else(|| {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no error message")
                .to_string()
        }));
        let body_code = body_code.map(|c| self.scrub(c));
        if status == 401 || status == 403 {
            return Outcome::Fatal(HttpError::Unauthorized {
                provider,
                endpoint: endpoint.to_string(),
                status,
                request_id,
                message,
            });
        }
        if inner.provider.should_retry(status, &headers)
            && !inner.provider.is_final_body(body.as_deref())
        {
            let last = match &body_code {
                Some(code) => format!("{status} {code}"),
                None => status.to_string(),
            };
            return Outcome::Retry(Failure {
                last,
                status: Some(status),
                request_id,
                retry_after: retry_after(&headers),
            });
        }
        Outcome::Fatal(HttpError::Status {
            provider,
            endpoint: endpoint.to_string(),
            status,
            request_id,
            message,
            body_code,
        })
    }

    /// `text` with every secret header value (and the token after a scheme
    /// such as `Bearer `) replaced by `***`, in case a server echoed it.
    fn scrub(&self, mut text: String) -> String {
        for secret in &self.inner.secrets {
            let value = secret.expose();
            let token = value.rsplit(' ').next().unwrap_or(value);
            for needle in [value, token] {
                if needle.len() >= 6 && text.contains(needle) {
                    text = text.replace(needle, "***");
                }
            }
        }
        text
    }
}

/// A transport or body error in a few words, without the URL: `timeout`,
/// `connection failed (…)`, `body read error (…)`, `connection reset (…)`.
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".to_string()
    } else if e.is_connect() {
        format!("connection failed ({})", root_cause(e))
    } else if e.is_body() || e.is_decode() {
        format!("body read error ({})", root_cause(e))
    } else {
        format!("connection reset ({})", root_cause(e))
    }
}

/// The innermost cause's message; reqwest's own message holds the URL, so
/// it is never used.
fn root_cause(e: &reqwest::Error) -> String {
    let mut innermost: Option<&dyn std::error::Error> = None;
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        innermost = Some(cause);
        next = cause.source();
    }
    match innermost {
        Some(cause) => cause.to_string(),
        None if e.is_builder() => "invalid request".to_string(),
        None if e.is_redirect() => "redirect failed".to_string(),
        None => "request failed".to_string(),
    }
}

/// Message and code from a JSON error body: Stripe's
/// `{"error": {"message", "code"}}` (code falls back to `type`), a plain
/// `{"error": "…"}` or `{"errors": "…"}` (Shopify), or top-level
/// `message`/`code`/`category` (HubSpot).
fn error_body(body: Option<&[u8]>) -> (Option<String>, Option<String>) {
    let Some(json) = body.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok()) else {
        return (None, None);
    };
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    match json.get("error") {
        Some(err @ serde_json::Value::Object(_)) => (
            text(err.get("message")),
            text(err.get("code")).or_else(|| text(err.get("type"))),
        ),
        Some(serde_json::Value::String(s)) => (Some(s.clone()), text(json.get("code"))),
        _ => (
            text(json.get("message")).or_else(|| text(json.get("errors"))),
            text(json.get("code")).or_else(|| text(json.get("category"))),
        ),
    }
}

/// `Retry-After` as seconds (`1`, `2.0`) or an HTTP date; a past date is 0.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::from_secs_f64(seconds.min(1e9)));
    }
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()?;
    Some(Duration::try_from(at.duration_since(jiff::Timestamp::now())).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    use axum::body::Body;
    use axum::extract::Request;
    use axum::Router;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const STRIPE: Provider = Provider {
        final_when: &[],
        name: "Stripe",
        request_id_header: "Request-Id",
        should_retry_header: Some("Stripe-Should-Retry"),
    };

    const KEY: &str = "sk_test_51TopSecretKeyValue";

    /// A scripted response.
    struct Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
        delay: Duration,
    }

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type", "application/json".into())],
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    impl Reply {
        fn header(mut self, name: &'static str, value: &str) -> Reply {
            self.headers.push((name, value.into()));
            self
        }
        fn delay(mut self, d: Duration) -> Reply {
            self.delay = d;
            self
        }
    }

    /// What the server saw of one request.
    struct Seen {
        method: String,
        uri: String,
        authorization: Option<String>,
        body: String,
    }

    /// An axum server on 127.0.0.1:0 answering request `n` (from 0) with
    /// `script(n, &request)`. Returns its base URL and the request counter.
    async fn serve(
        script: impl Fn(usize, &Seen) -> Reply + Clone + Send + Sync + 'static,
    ) -> (String, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        let app = Router::new().fallback(move |req: Request| {
            let script = script.clone();
            let counter = counter.clone();
            async move {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
                let seen = Seen {
                    method: parts.method.to_string(),
                    uri: parts.uri.to_string(),
                    authorization: parts
                        .headers
                        .get("authorization")
                        .map(|v| v.to_str().unwrap().to_string()),
                    body: String::from_utf8_lossy(&body).into_owned(),
                };
                let r = script(n, &seen);
                tokio::time::sleep(r.delay).await;
                let mut b = axum::http::Response::builder().status(r.status);
                for (k, v) in r.headers {
                    b = b.header(k, v);
                }
                b.body(Body::from(r.body)).unwrap()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}"), count)
    }

    /// A raw TCP server: reads each connection's request head, then writes
    /// `script(n)` (if any) and closes. Returns its base URL and the
    /// connection counter.
    async fn raw_server(script: fn(usize) -> Option<&'static str>) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        tokio::spawn(async move {
            loop {
                let (mut sock, _) = listener.accept().await.unwrap();
                let n = counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                    }
                    if let Some(answer) = script(n) {
                        let _ = sock.write_all(answer.as_bytes()).await;
                        let _ = sock.flush().await;
                    }
                    let _ = sock.shutdown().await;
                });
            }
        });
        (format!("http://{addr}"), count)
    }

    /// A fast policy for tests: no rate limit to speak of, millisecond backoff.
    fn fast(max_attempts: u32) -> HttpPolicy {
        HttpPolicy {
            requests_per_second: 1000,
            interval: Duration::from_secs(1),
            burst: 1000,
            timeout: Duration::from_secs(5),
            max_attempts,
            max_total_wait: Duration::from_secs(10),
            base_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(10),
        }
    }

    fn client(policy: HttpPolicy) -> HttpClient {
        HttpClient::new(
            STRIPE,
            policy,
            vec![("Authorization".into(), Secret::new(format!("Bearer {KEY}")))],
            vec![("Stripe-Version".into(), "2024-06-20".into())],
        )
        .unwrap()
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Charge {
        id: String,
        amount: i64,
    }

    const CHARGE: &str = r#"{"id":"ch_1","amount":500}"#;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn ok_json_is_parsed_with_request_id() {
        let (base, count) = serve(|_, seen| {
            assert_eq!(seen.method, "GET");
            assert_eq!(seen.uri, "/v1/charges/ch_1?expand=customer");
            assert_eq!(
                seen.authorization.as_deref(),
                Some(&*format!("Bearer {KEY}"))
            );
            reply(200, CHARGE).header("Request-Id", "req_abc")
        })
        .await;
        let c = client(fast(3));
        let (charge, meta): (Charge, _) = c
            .get_json(
                &format!("{base}/v1/charges/ch_1"),
                &q(&[("expand", "customer")]),
            )
            .await
            .unwrap();
        assert_eq!(
            charge,
            Charge {
                id: "ch_1".into(),
                amount: 500
            }
        );
        assert_eq!(meta.status, 200);
        assert_eq!(meta.request_id.as_deref(), Some("req_abc"));
        assert_eq!(meta.headers.get("request-id").unwrap(), "req_abc");
        assert_eq!(count.load(Ordering::SeqCst), 1);
        assert_eq!(
            c.stats(),
            HttpStats {
                requests: 1,
                ..HttpStats::default()
            }
        );
    }

    #[tokio::test]
    async fn post_sends_json_body() {
        let (base, _) = serve(|_, seen| {
            assert_eq!(seen.method, "POST");
            let body: serde_json::Value = serde_json::from_str(&seen.body).unwrap();
            assert_eq!(body["amount"], 500);
            reply(200, CHARGE)
        })
        .await;
        let (charge, meta): (Charge, _) = client(fast(3))
            .post_json(
                &format!("{base}/v1/charges"),
                &serde_json::json!({"amount": 500}),
            )
            .await
            .unwrap();
        assert_eq!(charge.amount, 500);
        assert_eq!(meta.request_id, None);
    }

    #[tokio::test]
    async fn not_found_is_a_status_error_without_retry() {
        let (base, count) = serve(|_, _| {
            reply(
                404,
                r#"{"error":{"code":"resource_missing","message":"No such charge: 'ch_x'","type":"invalid_request_error"}}"#,
            )
            .header("Request-Id", "req_404")
        })
        .await;
        let c = client(fast(6));
        let e = c
            .get_json::<Charge>(
                &format!("{base}/v1/charges/ch_x"),
                &q(&[("secret_param", "x")]),
            )
            .await
            .unwrap_err();
        match &e {
            HttpError::Status {
                provider,
                endpoint,
                status,
                request_id,
                message,
                body_code,
            } => {
                assert_eq!(*provider, "Stripe");
                assert_eq!(endpoint, "GET /v1/charges/ch_x");
                assert_eq!(*status, 404);
                assert_eq!(request_id.as_deref(), Some("req_404"));
                assert_eq!(message, "No such charge: 'ch_x'");
                assert_eq!(body_code.as_deref(), Some("resource_missing"));
            }
            other => panic!("expected Status, got {other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "Stripe GET /v1/charges/ch_x returned 404 (resource_missing): No such charge: 'ch_x' (request req_404)"
        );
        assert_eq!(count.load(Ordering::SeqCst), 1);
        assert_eq!(c.stats().retries, 0);
    }

    #[tokio::test]
    async fn unauthorized_is_not_retried() {
        let (base, count) = serve(|_, _| {
            reply(
                401,
                r#"{"error":{"message":"Invalid API Key provided: sk_test_****alue","type":"invalid_request_error"}}"#,
            )
        })
        .await;
        let e = client(fast(6))
            .get_json::<Charge>(&format!("{base}/v1/charges"), &[])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, HttpError::Unauthorized { status: 401, message, .. } if message.contains("Invalid API Key")),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "Stripe GET /v1/charges was refused with 401: Invalid API Key provided: sk_test_****alue (no request ID)"
        );
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn server_errors_are_retried_until_success() {
        let (base, count) = serve(|n, _| {
            if n < 2 {
                reply(503, "").header("Request-Id", &format!("req_{n}"))
            } else {
                reply(200, CHARGE)
            }
        })
        .await;
        let c = client(fast(6));
        let (charge, _): (Charge, _) = c
            .get_json(&format!("{base}/v1/charges/ch_1"), &[])
            .await
            .unwrap();
        assert_eq!(charge.id, "ch_1");
        assert_eq!(count.load(Ordering::SeqCst), 3);
        assert_eq!(
            c.stats(),
            HttpStats {
                requests: 3,
                retries: 2,
                throttled: 0,
                server_errors: 2
            }
        );
    }

    #[tokio::test]
    async fn too_many_requests_waits_for_retry_after() {
        let (base, count) = serve(|n, _| {
            if n == 0 {
                reply(
                    429,
                    r#"{"error":{"code":"rate_limit","message":"Too many requests"}}"#,
                )
                .header("Retry-After", "1")
            } else {
                reply(200, CHARGE)
            }
        })
        .await;
        let c = client(fast(6));
        let started = Instant::now();
        c.get_json::<Charge>(&format!("{base}/v1/charges/ch_1"), &[])
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(count.load(Ordering::SeqCst), 2);
        let stats = c.stats();
        assert_eq!((stats.throttled, stats.retries), (1, 1));
    }

    #[tokio::test]
    async fn should_retry_false_overrides_a_503() {
        let (base, count) =
            serve(|_, _| reply(503, "").header("Stripe-Should-Retry", "false")).await;
        let e = client(fast(6))
            .get_json::<Charge>(&format!("{base}/v1/charges"), &[])
            .await
            .unwrap_err();
        assert!(matches!(e, HttpError::Status { status: 503, .. }), "{e:?}");
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn should_retry_true_overrides_a_409() {
        let (base, count) = serve(|n, _| {
            if n == 0 {
                reply(409, r#"{"error":{"code":"lock_timeout","message":"busy"}}"#)
                    .header("Stripe-Should-Retry", "true")
            } else {
                reply(200, CHARGE)
            }
        })
        .await;
        let c = client(fast(6));
        c.get_json::<Charge>(&format!("{base}/v1/charges"), &[])
            .await
            .unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert_eq!(c.stats().retries, 1);
    }

    #[tokio::test]
    async fn timeouts_are_retried_then_exhausted() {
        let (base, count) = serve(|_, _| reply(200, CHARGE).delay(Duration::from_secs(2))).await;
        let mut policy = fast(3);
        policy.timeout = Duration::from_millis(200);
        let e = client(policy)
            .get_json::<Charge>(&format!("{base}/v1/charges"), &[])
            .await
            .unwrap_err();
        match &e {
            HttpError::RetriesExhausted { attempts, last, .. } => {
                assert_eq!(*attempts, 3);
                assert_eq!(last, "timeout");
            }
            other => panic!("expected RetriesExhausted, got {other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "Stripe GET /v1/charges failed after 3 attempts (last: timeout; no request ID)"
        );
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn malformed_json_is_retried() {
        let (base, count) = serve(|n, _| {
            if n < 2 {
                reply(200, r#"{"id":"ch_1","amou"#)
            } else {
                reply(200, CHARGE)
            }
        })
        .await;
        let c = client(fast(6));
        let (charge, _): (Charge, _) = c
            .get_json(&format!("{base}/v1/charges/ch_1"), &[])
            .await
            .unwrap();
        assert_eq!(charge.amount, 500);
        assert_eq!(count.load(Ordering::SeqCst), 3);
        assert_eq!(c.stats().retries, 2);

        // And when it never gets better, the error says so.
        let (base, _) = serve(|_, _| reply(200, "<html>oops</html>")).await;
        let e = client(fast(2))
            .get_json::<Charge>(&format!("{base}/v1/charges"), &[])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, HttpError::RetriesExhausted { last, attempts: 2, .. } if last.starts_with("malformed JSON: ")),
            "{e:?}"
        );
    }

    const OK_RAW: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 26\r\nConnection: close\r\n\r\n{\"id\":\"ch_1\",\"amount\":500}";

    #[tokio::test]
    async fn closed_connections_are_retried() {
        let (base, conns) = raw_server(|n| (n >= 2).then_some(OK_RAW)).await;
        let c = client(fast(6));
        let (charge, _): (Charge, _) = c
            .get_json(&format!("{base}/v1/charges/ch_1"), &[])
            .await
            .unwrap();
        assert_eq!(charge.id, "ch_1");
        assert_eq!(c.stats().requests, 3);
        assert!(conns.load(Ordering::SeqCst) >= 3);

        let (base, conns) = raw_server(|_| None).await;
        let c = client(fast(3));
        let e = c
            .get_json::<Charge>(&format!("{base}/v1/charges"), &[])
            .await
            .unwrap_err();
        match &e {
            HttpError::RetriesExhausted { attempts, last, .. } => {
                assert_eq!(*attempts, 3);
                assert!(last.starts_with("connection"), "{last}");
            }
            other => panic!("expected RetriesExhausted, got {other:?}"),
        }
        assert_eq!(c.stats().requests, 3);
        assert!(conns.load(Ordering::SeqCst) >= 3);
    }

    #[tokio::test]
    async fn truncated_bodies_are_retried() {
        let (base, _) = raw_server(|n| {
            Some(if n == 0 {
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"id\":"
            } else {
                OK_RAW
            })
        })
        .await;
        let c = client(fast(6));
        let (charge, _): (Charge, _) = c
            .get_json(&format!("{base}/v1/charges/ch_1"), &[])
            .await
            .unwrap();
        assert_eq!(charge.amount, 500);
        assert_eq!(c.stats().requests, 2);
        assert_eq!(c.stats().retries, 1);
    }

    #[tokio::test]
    async fn attempts_are_capped() {
        let (base, count) = serve(|_, _| reply(500, "").header("Request-Id", "req_123")).await;
        let c = client(fast(4));
        let e = c
            .get_json::<Charge>(&format!("{base}/v1/charges"), &q(&[("limit", "100")]))
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Stripe GET /v1/charges failed after 4 attempts (last: 500; request req_123)"
        );
        assert_eq!(count.load(Ordering::SeqCst), 4);
        assert_eq!(
            c.stats(),
            HttpStats {
                requests: 4,
                retries: 3,
                throttled: 0,
                server_errors: 4
            }
        );
    }

    #[tokio::test]
    async fn total_wait_is_capped() {
        let (base, count) = serve(|_, _| {
            reply(
                429,
                r#"{"error":{"code":"rate_limit","message":"Too many requests"}}"#,
            )
            .header("Retry-After", "1")
        })
        .await;
        let mut policy = fast(10);
        policy.max_total_wait = Duration::from_millis(1500);
        let started = Instant::now();
        let e = client(policy)
            .get_json::<Charge>(&format!("{base}/v1/charges"), &[])
            .await
            .unwrap_err();
        // Waited 1 s after the first 429; a second wait would make 2 s > 1.5 s.
        assert!(
            matches!(&e, HttpError::RetriesExhausted { attempts: 2, last, .. } if last == "429 rate_limit"),
            "{e:?}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert!(started.elapsed() >= Duration::from_millis(900));
    }

    #[tokio::test]
    async fn rate_limiter_is_shared_by_clones() {
        let (base, count) = serve(|_, _| reply(200, CHARGE)).await;
        let mut policy = fast(1);
        policy.requests_per_second = 10;
        policy.burst = 1;
        let c = client(policy);
        let url = format!("{base}/v1/charges/ch_1");
        let started = Instant::now();
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let c = c.clone();
                let url = url.clone();
                tokio::spawn(async move { c.get_json::<Charge>(&url, &[]).await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // One at once, then one per 100 ms: 1.9 s for 20.
        assert!(
            started.elapsed() >= Duration::from_millis(1800),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(count.load(Ordering::SeqCst), 20);
        assert_eq!(c.stats().requests, 20);
    }

    /// A `MakeWriter` appending to a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    #[tokio::test]
    async fn secrets_never_show() {
        let logs = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(logs.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        // A server that echoes the Authorization header in its errors and
        // in a body that is not the expected JSON.
        let (base, _) = serve(|n, seen| {
            let auth = seen.authorization.clone().unwrap_or_default();
            let msg =
                serde_json::json!({"error": {"message": format!("bad key {auth}"), "code": auth}});
            match n {
                0 => reply(503, &msg.to_string()),
                1 => reply(
                    200,
                    &serde_json::json!({"id": auth, "amount": auth}).to_string(),
                ),
                2 => reply(400, &msg.to_string()),
                _ => reply(401, &msg.to_string()),
            }
        })
        .await;
        let c = client(fast(2));
        let mut shown = vec![format!("{c:?}")];
        let url = format!("{base}/v1/charges");
        for _ in 0..3 {
            let e = c.get_json::<Charge>(&url, &[]).await.unwrap_err();
            shown.push(format!("{e:?}"));
            shown.push(e.to_string());
        }
        let e = HttpClient::new(
            STRIPE,
            fast(1),
            vec![(
                "Authorization".into(),
                Secret::new(format!("Bearer {KEY}\n")),
            )],
            vec![],
        )
        .unwrap_err();
        shown.push(format!("{e:?}"));
        shown.push(e.to_string());

        let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        assert!(logs.contains("Retrying request."), "{logs}");
        assert!(logs.contains("Sending request."), "{logs}");
        shown.push(logs);
        for text in &shown {
            assert!(!text.contains(KEY), "secret in: {text}");
            assert!(!text.contains("TopSecret"), "secret in: {text}");
        }
        // The errors still carry what the server said, minus the key.
        assert!(shown.iter().any(|t| t.contains("bad key ***")));
        assert!(shown[0].contains("Stripe") && shown[0].contains("policy"));
    }

    #[test]
    fn classifier() {
        let none = HeaderMap::new();
        for s in [429, 500, 502, 503, 504] {
            assert!(STRIPE.should_retry(s, &none), "{s}");
        }
        for s in [200, 400, 401, 403, 404, 409, 422, 501] {
            assert!(!STRIPE.should_retry(s, &none), "{s}");
        }
        let mut yes = HeaderMap::new();
        yes.insert("stripe-should-retry", HeaderValue::from_static("true"));
        let mut no = HeaderMap::new();
        no.insert("stripe-should-retry", HeaderValue::from_static("false"));
        assert!(STRIPE.should_retry(409, &yes));
        assert!(!STRIPE.should_retry(503, &no));
        assert!(!STRIPE.should_retry(401, &yes));
        let plain = Provider {
            final_when: &[],
            should_retry_header: None,
            ..STRIPE
        };
        assert!(!plain.should_retry(409, &yes));
    }

    #[test]
    fn backoff_is_full_jitter_under_the_cap() {
        let p = HttpPolicy {
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..HttpPolicy::new(10)
        };
        for retry in 0..40 {
            let cap =
                Duration::from_millis(100 * 2u64.pow(retry.min(20))).min(Duration::from_secs(1));
            for _ in 0..50 {
                assert!(p.backoff(retry, None) <= cap);
            }
            assert!(p.backoff(retry, Some(Duration::from_secs(3))) >= Duration::from_secs(3));
        }
        // Jitter, not a constant.
        let samples: std::collections::HashSet<_> = (0..50).map(|_| p.backoff(5, None)).collect();
        assert!(samples.len() > 1);
    }

    #[test]
    fn retry_after_as_seconds_or_date() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(retry_after(&h("1")), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(&h("2.5")), Some(Duration::from_millis(2500)));
        assert_eq!(retry_after(&h("soon")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
        let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
        let date = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&at)
            .unwrap();
        assert!(date.ends_with("GMT"), "{date}");
        let d = retry_after(&h(&date)).unwrap();
        assert!(
            d > Duration::from_secs(28) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        assert_eq!(
            retry_after(&h("Sun, 06 Nov 1994 08:49:37 GMT")),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn policy_defaults_and_bad_settings() {
        let p = HttpPolicy::new(25);
        assert_eq!(p.burst, 25);
        assert_eq!(p.timeout, Duration::from_secs(30));
        assert_eq!(p.max_attempts, 6);
        assert_eq!(p.max_total_wait, Duration::from_secs(120));
        assert_eq!(p.base_backoff, Duration::from_millis(250));
        assert_eq!(p.max_backoff, Duration::from_secs(20));
        let e = HttpClient::new(STRIPE, HttpPolicy::new(0), vec![], vec![]).unwrap_err();
        assert!(matches!(e, HttpError::Client { .. }));
        assert_eq!(
            e.to_string(),
            "Stripe HTTP client: requests_per_second must be at least 1"
        );
    }

    #[tokio::test]
    async fn endpoint_has_no_query_or_credentials() {
        let c = client(fast(1));
        let e = c.get_json::<Charge>("not a url", &[]).await.unwrap_err();
        assert!(matches!(e, HttpError::Client { .. }));
        // An unreachable host with credentials in the URL: only the path shows.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let e = c
            .get_json::<Charge>(
                &format!("http://user:hunter22@127.0.0.1:{port}/v1/x?api_key=hunter22"),
                &[],
            )
            .await
            .unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!text.contains("hunter22"), "{text}");
        assert!(text.contains("GET /v1/x"), "{text}");
        assert!(text.contains("connection failed"), "{text}");
    }
}
