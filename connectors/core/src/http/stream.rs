//! Bodies read as they come ([`HttpClient::get_stream`]): a large download
//! (Shopify's bulk-operation results) under the same policy as every call,
//! and sent again from the start when it breaks off, the bytes already
//! handed out skipped.

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{describe, Decode, HttpClient, HttpError, Method, ResponseMeta};

/// A 2xx response whose body the caller reads.
struct Streamed(reqwest::Response);

impl Decode for Streamed {
    const STREAM: bool = true;
    fn streamed(response: reqwest::Response) -> Option<Self> {
        Some(Streamed(response))
    }

    fn decode(_: &[u8]) -> Result<Self, String> {
        Err("a streamed body is not decoded".into())
    }
}

/// The body of a [`HttpClient::get_stream`] call, chunk by chunk. A body
/// cut short (a reset, a timeout, fewer bytes than its length) is asked
/// for again under the policy (limiter, retries of 5xx and 429, traffic
/// counts), the bytes already returned skipped, within `max_attempts` and
/// `max_total_wait` per stream.
pub struct BodyStream {
    client: HttpClient,
    url: String,
    endpoint: String,
    response: reqwest::Response,
    meta: ResponseMeta,
    /// Bytes returned so far.
    delivered: u64,
    /// Bytes of a response sent again still to drop (returned before).
    skip: u64,
    failures: u32,
    waited: Duration,
}

impl fmt::Debug for BodyStream {
    // The URL may be signed (a download link): not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyStream")
            .field("endpoint", &self.endpoint)
            .field("delivered", &self.delivered)
            .field("failures", &self.failures)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// `GET url` under the policy, its 2xx body returned as a stream (see
    /// [`BodyStream`]) rather than read whole; the policy's `timeout`
    /// covers each response's whole body.
    pub async fn get_stream(&self, url: &str) -> Result<BodyStream, HttpError> {
        let (Streamed(response), meta) = self.call(Method::GET, url, |r| r).await?;
        let path = reqwest::Url::parse(url).map(|u| u.path().to_string());
        Ok(BodyStream {
            client: self.clone(),
            url: url.to_string(),
            endpoint: format!("GET {}", path.unwrap_or_default()),
            response,
            meta,
            delivered: 0,
            skip: 0,
            failures: 0,
            waited: Duration::ZERO,
        })
    }
}

impl BodyStream {
    /// Status, request ID and headers of the response being read.
    pub fn meta(&self) -> &ResponseMeta {
        &self.meta
    }

    /// The next bytes of the body, `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        loop {
            match self.response.chunk().await {
                Ok(Some(bytes)) => {
                    let drop = usize::try_from(self.skip).unwrap_or(usize::MAX);
                    let drop = drop.min(bytes.len());
                    self.skip -= drop as u64;
                    if drop == bytes.len() {
                        continue;
                    }
                    let fresh = bytes.slice(drop..);
                    self.delivered += fresh.len() as u64;
                    return Ok(Some(fresh.to_vec()));
                }
                Ok(None) if self.skip == 0 => return Ok(None),
                // Sent again, the body ended before what was returned.
                Ok(None) => self.again("body shorter than before".into()).await?,
                Err(e) => {
                    let last = self.client.scrub(describe(&e));
                    self.again(last).await?
                }
            }
        }
    }

    /// The body broke off: backs off, then asks for it again from the start.
    async fn again(&mut self, last: String) -> Result<(), HttpError> {
        let inner = &*self.client.inner;
        let policy = &inner.policy;
        self.failures += 1;
        let wait = policy.backoff(self.failures - 1, None);
        if self.failures >= policy.max_attempts.max(1)
            || self.waited.saturating_add(wait) > policy.max_total_wait
        {
            return Err(HttpError::RetriesExhausted {
                provider: inner.provider.name,
                endpoint: self.endpoint.clone(),
                attempts: self.failures,
                last,
                request_id: self.meta.request_id.clone(),
            });
        }
        self.waited += wait;
        tracing::warn!(
            provider = inner.provider.name,
            endpoint = self.endpoint.as_str(),
            error = last.as_str(),
            delivered = self.delivered,
            wait_ms = wait.as_millis() as u64,
            "The body broke off; asking for it again."
        );
        tokio::time::sleep(wait).await;
        inner.retries.fetch_add(1, Ordering::Relaxed);
        let (Streamed(response), meta) = self.client.call(Method::GET, &self.url, |r| r).await?;
        self.response = response;
        self.meta = meta;
        self.skip = self.delivered;
        Ok(())
    }
}
