//! The retry loop of [`HttpClient`] and its one attempt, in named steps:
//! build the request, wait for a permit, send, classify the answer, decide
//! the next wait (or give up).

use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::Url;
use tokio::time::Instant;

use super::traffic::{self, Answer};
use super::{
    describe, retry_after, secret_header, Credentials, Decode, HttpClient, HttpError, Method,
    RequestBuilder, ResponseMeta, Throttle,
};

/// What one attempt came to.
pub(super) enum Outcome<T> {
    Done(T, ResponseMeta),
    Fatal(HttpError),
    Retry(Failure),
}

/// A retryable failure of one attempt.
pub(super) struct Failure {
    /// For `RetriesExhausted::last` and the log.
    pub(super) last: String,
    pub(super) status: Option<u16>,
    pub(super) request_id: Option<String>,
    pub(super) retry_after: Option<Duration>,
    /// A "slow down" answer (429, a provider's throttle hint): retried
    /// under `rate_limit_patience`.
    pub(super) throttle: bool,
    /// The provider's window is spent by others sharing it: hold every
    /// limiter of the client for `retry_after`, do not cut the pace.
    pub(super) shared_window: bool,
}

impl Failure {
    pub(super) fn transport(last: String) -> Failure {
        Failure {
            last,
            status: None,
            request_id: None,
            retry_after: None,
            throttle: false,
            shared_window: false,
        }
    }

    /// A failure of a 2xx whose body could not be read or decoded.
    fn body(last: String, request_id: Option<String>) -> Failure {
        Failure {
            request_id,
            ..Failure::transport(last)
        }
    }

    /// A provider's throttle hint as a "slow down" answer.
    fn throttled(t: Throttle, status: u16, request_id: Option<String>) -> Failure {
        Failure {
            last: t.code,
            status: Some(status),
            request_id,
            retry_after: t.wait,
            throttle: true,
            shared_window: t.shared_window,
        }
    }
}

/// What one call has spent of its budgets so far.
struct Budget {
    /// When the call started: patience runs from it or the last progress.
    started: Instant,
    attempt: u32,
    /// Failures other than "slow down", under `max_attempts`.
    failures: u32,
    /// Time slept after those failures, under `max_total_wait`.
    waited: Duration,
    /// "Slow down" answers: the exponent of their backoff.
    throttles: u32,
    /// The credentials were refreshed after a 401 (once per call).
    refreshed: bool,
}

impl HttpClient {
    /// The retry loop: attempts until one succeeds, one is final, or a
    /// budget is spent.
    pub(super) async fn call<T: Decode>(
        &self,
        method: Method,
        url: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<(T, ResponseMeta), HttpError> {
        let inner = &*self.inner;
        let parsed = Url::parse(url).map_err(|e| HttpError::Client {
            provider: inner.provider.name,
            message: format!("invalid URL for {method}: {e}"),
        })?;
        let endpoint = format!("{method} {}", parsed.path());
        let mut budget = Budget {
            started: Instant::now(),
            attempt: 0,
            failures: 0,
            waited: Duration::ZERO,
            throttles: 0,
            refreshed: false,
        };
        loop {
            budget.attempt += 1;
            let credentials = inner.auth.credentials().await?;
            let request = self.request(&method, &parsed, &build, &credentials)?;
            let sent = self.permit(&endpoint, budget.attempt).await;
            let failure = match self.attempt::<T>(request, &endpoint).await {
                Outcome::Done(value, meta) => {
                    self.note_progress();
                    return Ok((value, meta));
                }
                Outcome::Fatal(e) => {
                    if self
                        .refreshed_after(&e, &mut budget, &credentials, &endpoint)
                        .await?
                    {
                        continue;
                    }
                    return Err(self.after_refresh(e, budget.refreshed));
                }
                Outcome::Retry(failure) => failure,
            };
            let wait = self.next_wait(&mut budget, failure, sent, &endpoint)?;
            tokio::time::sleep(wait).await;
            inner.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The request of one attempt: `build` applied, the credentials added
    /// as sensitive headers.
    fn request(
        &self,
        method: &Method,
        url: &Url,
        build: &impl Fn(RequestBuilder) -> RequestBuilder,
        credentials: &Credentials,
    ) -> Result<RequestBuilder, HttpError> {
        let provider = self.inner.provider.name;
        let mut request = build(self.inner.client.request(method.clone(), url.clone()));
        for (name, secret) in credentials.headers() {
            let (name, value) = secret_header(name, secret)
                .map_err(|message| HttpError::Client { provider, message })?;
            request = request.header(name, value);
        }
        Ok(request)
    }

    /// Waits for a permit of every limiter, counts the attempt; returns
    /// when it is sent.
    async fn permit(&self, endpoint: &str, attempt: u32) -> Instant {
        let inner = &*self.inner;
        inner.limiter.acquire().await;
        for other in &inner.also {
            other.acquire().await;
        }
        inner.requests.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            provider = inner.provider.name,
            endpoint,
            attempt,
            "Sending request."
        );
        Instant::now()
    }

    /// After a first 401: whether the auth hook refreshed the credentials,
    /// so the request is sent once more.
    async fn refreshed_after(
        &self,
        e: &HttpError,
        budget: &mut Budget,
        credentials: &Credentials,
        endpoint: &str,
    ) -> Result<bool, HttpError> {
        let first_401 = matches!(e, HttpError::Unauthorized { status: 401, .. });
        if !first_401 || budget.refreshed || !self.inner.auth.refresh(credentials).await? {
            return Ok(false);
        }
        budget.refreshed = true;
        tracing::info!(
            provider = self.inner.provider.name,
            endpoint,
            attempt = budget.attempt,
            "Credentials refused (401); refreshed them, retrying once."
        );
        self.inner.retries.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// A final error, marked when it is a 401 that came after a refresh.
    fn after_refresh(&self, mut e: HttpError, refreshed: bool) -> HttpError {
        if let HttpError::Unauthorized {
            status: 401,
            refreshed: after,
            ..
        } = &mut e
        {
            *after = refreshed;
        }
        e
    }

    /// The sleep before the next attempt after `failure`, or the error
    /// when a budget is spent.
    fn next_wait(
        &self,
        budget: &mut Budget,
        failure: Failure,
        sent: Instant,
        endpoint: &str,
    ) -> Result<Duration, HttpError> {
        let wait = if failure.throttle {
            self.throttle_wait(budget, &failure, sent, endpoint)?
        } else {
            self.failure_wait(budget, &failure, endpoint)?
        };
        tracing::warn!(
            provider = self.inner.provider.name,
            endpoint,
            status = failure.status,
            error = failure.status.is_none().then_some(failure.last.as_str()),
            attempt = budget.attempt,
            wait_ms = wait.as_millis() as u64,
            request_id = failure.request_id.as_deref(),
            "Retrying request."
        );
        Ok(wait)
    }

    /// A "slow down" answer: the limiters slow down (or hold), and the call
    /// waits its backoff, at least the provider's wait, unless the client
    /// made no progress for `rate_limit_patience` (or the provider's wait
    /// passes it).
    fn throttle_wait(
        &self,
        budget: &mut Budget,
        failure: &Failure,
        sent: Instant,
        endpoint: &str,
    ) -> Result<Duration, HttpError> {
        let inner = &*self.inner;
        let policy = &inner.policy;
        budget.throttles += 1;
        self.slow_down_after(failure, sent, endpoint);
        // Patience runs from the last progress of any clone (or the start
        // of this call, whichever is later).
        let progress = self.last_progress().max(budget.started);
        let now = Instant::now();
        let deadline = progress + policy.rate_limit_patience;
        let past = |wait: Duration| now + wait > deadline;
        if now >= deadline || failure.retry_after.is_some_and(past) {
            return Err(HttpError::RateLimited {
                provider: inner.provider.name,
                endpoint: endpoint.to_string(),
                attempts: budget.attempt,
                last: failure.last.clone(),
                request_id: failure.request_id.clone(),
                patience: policy.rate_limit_patience,
            });
        }
        let wait = policy.backoff(budget.throttles - 1, failure.retry_after);
        // Wake in time to fail at the deadline rather than after it.
        Ok(wait.min(deadline - now + Duration::from_millis(1)))
    }

    /// Cuts the pace (once per round) and holds it for the provider's wait;
    /// a window spent by others holds every limiter instead of cutting.
    fn slow_down_after(&self, failure: &Failure, sent: Instant, endpoint: &str) {
        let inner = &*self.inner;
        if failure.shared_window {
            let wait = failure.retry_after.unwrap_or(inner.policy.interval);
            inner.limiter.hold(wait);
            for other in &inner.also {
                other.hold(wait);
            }
            tracing::warn!(
                provider = inner.provider.name,
                endpoint,
                wait_ms = wait.as_millis() as u64,
                "The provider's window is spent (others share it); holding requests."
            );
        } else if let Some(rate) = inner.limiter.throttled(Some(sent), failure.retry_after) {
            tracing::info!(
                provider = inner.provider.name,
                endpoint,
                rate,
                "Slowing down after a \"slow down\" answer."
            );
        }
    }

    /// A failure other than "slow down": its backoff, unless the attempts
    /// or the total wait are spent.
    fn failure_wait(
        &self,
        budget: &mut Budget,
        failure: &Failure,
        endpoint: &str,
    ) -> Result<Duration, HttpError> {
        let inner = &*self.inner;
        let policy = &inner.policy;
        budget.failures += 1;
        let exhausted = || HttpError::RetriesExhausted {
            provider: inner.provider.name,
            endpoint: endpoint.to_string(),
            attempts: budget.attempt,
            last: failure.last.clone(),
            request_id: failure.request_id.clone(),
        };
        if budget.failures >= policy.max_attempts.max(1) {
            return Err(exhausted());
        }
        let wait = policy.backoff(budget.failures - 1, failure.retry_after);
        if budget.waited.saturating_add(wait) > policy.max_total_wait {
            tracing::debug!(
                provider = inner.provider.name,
                endpoint,
                attempt = budget.attempt,
                wait_ms = wait.as_millis() as u64,
                "Giving up: the next wait would pass max_total_wait."
            );
            return Err(exhausted());
        }
        budget.waited += wait;
        Ok(wait)
    }

    /// One attempt, classified.
    pub(super) async fn attempt<T: Decode>(
        &self,
        request: RequestBuilder,
        endpoint: &str,
    ) -> Outcome<T> {
        let provider = self.inner.provider.name;
        let started = Instant::now();
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                traffic::answered(provider, Answer::NoResponse);
                return Outcome::Retry(Failure::transport(self.scrub(describe(&e))));
            }
        };
        let meta = self.note_answer(&response);
        if (200..300).contains(&meta.status) {
            return self.success(response, meta, started, endpoint).await;
        }
        let body = response.bytes().await;
        self.log_received(&meta, started, endpoint);
        if (300..400).contains(&meta.status) && !self.inner.policy.follow_redirects {
            return Outcome::Fatal(self.redirected(meta, endpoint));
        }
        self.refusal(meta, body.ok().as_deref(), endpoint)
    }

    /// Counts an answer (stats, traffic, the limiter's served answers) and
    /// reads the provider's report of what remains; returns its meta.
    fn note_answer(&self, response: &reqwest::Response) -> ResponseMeta {
        let inner = &*self.inner;
        let provider = inner.provider.name;
        let status = response.status().as_u16();
        traffic::answered(provider, Answer::Status(status));
        let headers = response.headers().clone();
        let request_id = headers
            .get(inner.provider.request_id_header)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if status == 429 {
            inner.throttled.fetch_add(1, Ordering::Relaxed);
            traffic::rate_limited(provider);
        } else if status < 500 {
            // The provider answered within its limit (a 404 counts against
            // it as much as a 200): the pace fits.
            inner.limiter.served();
        }
        self.limit_headers(&headers);
        if status >= 500 {
            inner.server_errors.fetch_add(1, Ordering::Relaxed);
        }
        ResponseMeta {
            status,
            request_id,
            headers,
        }
    }

    /// [`HttpPolicy::limit_headers`](super::HttpPolicy::limit_headers),
    /// when both parse, reported to the limiter.
    fn limit_headers(&self, headers: &HeaderMap) {
        let Some(names) = self.inner.policy.limit_headers else {
            return;
        };
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(remaining), Some(ms)) = (number(names.remaining), number(names.interval_ms)) {
            self.report_remaining(
                u32::try_from(remaining).unwrap_or(u32::MAX),
                Duration::from_millis(ms),
            );
        }
    }

    fn log_received(&self, meta: &ResponseMeta, started: Instant, endpoint: &str) {
        tracing::debug!(
            provider = self.inner.provider.name,
            endpoint,
            status = meta.status,
            request_id = meta.request_id.as_deref(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "Received response."
        );
    }

    /// A 2xx: streamed to the caller, or read whole, checked against the
    /// provider's throttle hint and decoded.
    async fn success<T: Decode>(
        &self,
        response: reqwest::Response,
        meta: ResponseMeta,
        started: Instant,
        endpoint: &str,
    ) -> Outcome<T> {
        if T::STREAM {
            return match T::streamed(response) {
                Some(value) => Outcome::Done(value, meta),
                None => Outcome::Fatal(HttpError::Client {
                    provider: self.inner.provider.name,
                    message: "a streamed body was not taken".into(),
                }),
            };
        }
        let body = response.bytes().await;
        self.log_received(&meta, started, endpoint);
        let bytes = match body {
            Ok(b) => b,
            // Accepted: what follows the status does not matter.
            Err(_) if T::STATUS_ONLY => Default::default(),
            Err(e) => {
                let last = self.scrub(describe(&e));
                return Outcome::Retry(Failure::body(last, meta.request_id));
            }
        };
        if let Some(t) = self.hinted(meta.status, &bytes) {
            return Outcome::Retry(Failure::throttled(t, meta.status, meta.request_id));
        }
        match T::decode(&bytes) {
            Ok(value) => Outcome::Done(value, meta),
            Err(e) => Outcome::Retry(Failure::body(self.scrub(e), meta.request_id)),
        }
    }

    /// The client's throttle hint on an answer, counted as a "slow down"
    /// signal (its code scrubbed).
    fn hinted(&self, status: u16, body: &[u8]) -> Option<Throttle> {
        let hint = self.inner.throttle_hint.as_ref()?;
        let mut t = hint(status, body)?;
        t.code = self.scrub(t.code);
        if status != 429 {
            // A 429 was counted when it arrived.
            self.inner.throttled.fetch_add(1, Ordering::Relaxed);
            traffic::rate_limited(self.inner.provider.name);
        }
        Some(t)
    }

    /// A 3xx when redirects are not followed: final, naming where to.
    fn redirected(&self, meta: ResponseMeta, endpoint: &str) -> HttpError {
        let status = meta.status;
        let to = meta
            .headers
            .get(reqwest::header::LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let message = match to {
            Some(to) => format!(
                "redirected ({status}) to {}; redirects are not followed: configure the final address",
                crate::redact::redact_url_path(&to)
            ),
            None => format!("redirected ({status}) without a Location; redirects are not followed"),
        };
        HttpError::Status {
            provider: self.inner.provider.name,
            endpoint: endpoint.to_string(),
            status,
            request_id: meta.request_id,
            message: self.scrub(crate::scrub(&message).into_owned()),
            body_code: None,
        }
    }

    /// Any other non-2xx: final (401, 403, a final body, other 4xx) or
    /// retried (a throttle hint, 429, 5xx, the provider's retry header).
    fn refusal<T>(&self, meta: ResponseMeta, body: Option<&[u8]>, endpoint: &str) -> Outcome<T> {
        let inner = &*self.inner;
        let status = meta.status;
        // Scrubbed whole, before any hook reads or cuts it: a secret the
        // server echoed is removed while it is still whole.
        let said = body
            .map(|b| self.scrub(String::from_utf8_lossy(b).into_owned()))
            .and_then(|b| (inner.provider.error_body)(b.as_bytes()))
            .unwrap_or_default();
        let message = self.scrub(said.message.unwrap_or_else(|| {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no error message")
                .to_string()
        }));
        let body_code = said.code.map(|c| self.scrub(c));
        let (provider, endpoint) = (inner.provider.name, endpoint.to_string());
        if status == 401 || status == 403 {
            return Outcome::Fatal(HttpError::Unauthorized {
                provider,
                endpoint,
                status,
                request_id: meta.request_id,
                message,
                refreshed: false,
            });
        }
        if !said.is_final {
            if let Some(t) = body.and_then(|b| self.hinted(status, b)) {
                return Outcome::Retry(Failure::throttled(t, status, meta.request_id));
            }
        }
        if inner.provider.should_retry(status, &meta.headers) && !said.is_final {
            return Outcome::Retry(Failure {
                last: match &body_code {
                    Some(code) => format!("{status} {code}"),
                    None => status.to_string(),
                },
                status: Some(status),
                retry_after: retry_after(&meta.headers),
                request_id: meta.request_id,
                throttle: status == 429,
                shared_window: false,
            });
        }
        Outcome::Fatal(HttpError::Status {
            provider,
            endpoint,
            status,
            request_id: meta.request_id,
            message,
            body_code,
        })
    }
}
