//! What every [`HttpClient`](super::HttpClient) of the process sent and was
//! answered, by provider: responses by status and "slow down" signals. The
//! figures of `recon_http_requests_total{provider,status}` and
//! `recon_rate_limited_total{provider}` in the metrics file.
//!
//! One short lock per response (an HTTP round trip costs far more); a
//! process runs one job, so the totals are that run's.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// How an attempt was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answer {
    /// An HTTP status.
    Status(u16),
    /// No response: timeout, refused or reset connection.
    NoResponse,
}

impl Answer {
    /// The `status` label: `200`, `429`, or `error` when nothing came back.
    pub fn label(self) -> String {
        match self {
            Answer::Status(s) => s.to_string(),
            Answer::NoResponse => "error".to_string(),
        }
    }
}

/// The process's totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Attempts by (provider, answer), retries included.
    pub requests: BTreeMap<(&'static str, Answer), u64>,
    /// "Slow down" signals by provider: 429 responses and the signals a
    /// connector found in a body (Shopify's `THROTTLED`).
    pub rate_limited: BTreeMap<&'static str, u64>,
}

static TRAFFIC: Mutex<Traffic> = Mutex::new(Traffic {
    requests: BTreeMap::new(),
    rate_limited: BTreeMap::new(),
});

fn with<R>(f: impl FnOnce(&mut Traffic) -> R) -> R {
    // A panic while holding the lock leaves the counts usable.
    let mut guard = TRAFFIC.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut guard)
}

/// Counts one attempt's answer.
pub(crate) fn answered(provider: &'static str, answer: Answer) {
    with(|t| *t.requests.entry((provider, answer)).or_default() += 1);
}

/// Counts one "slow down" signal.
pub(crate) fn rate_limited(provider: &'static str) {
    with(|t| *t.rate_limited.entry(provider).or_default() += 1);
}

/// The totals since the process started.
pub fn traffic() -> Traffic {
    with(|t| t.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_counted_by_provider_and_status() {
        // Other tests of this process count too: compare differences.
        let before = traffic();
        answered("traffic-test", Answer::Status(200));
        answered("traffic-test", Answer::Status(200));
        answered("traffic-test", Answer::Status(429));
        answered("traffic-test", Answer::NoResponse);
        rate_limited("traffic-test");
        let after = traffic();
        let delta = |a: Answer| {
            after
                .requests
                .get(&("traffic-test", a))
                .copied()
                .unwrap_or(0)
                - before
                    .requests
                    .get(&("traffic-test", a))
                    .copied()
                    .unwrap_or(0)
        };
        assert_eq!(delta(Answer::Status(200)), 2);
        assert_eq!(delta(Answer::Status(429)), 1);
        assert_eq!(delta(Answer::NoResponse), 1);
        assert_eq!(Answer::NoResponse.label(), "error");
        assert_eq!(Answer::Status(503).label(), "503");
        assert_eq!(
            after.rate_limited["traffic-test"]
                - before
                    .rate_limited
                    .get("traffic-test")
                    .copied()
                    .unwrap_or(0),
            1
        );
    }
}
