//! The one HTTP policy every API connector uses (Stripe, Shopify, HubSpot):
//! a shared adaptive rate limiter, one retry classifier, exponential backoff
//! with full jitter that honours `Retry-After`, retry budgets (by time for
//! "slow down" answers, by count for failures), a per-request timeout,
//! structured logs, and errors that name the provider, the endpoint and the
//! request ID but never a secret.
//!
//! - **Rate limit as the provider counts it.** A GCRA limiter shared by every
//!   clone of an [`HttpClient`]; every attempt, retries included, waits for a
//!   permit, in arrival order. With a burst of `B` at a steady rate `r` per
//!   `interval`, any window of one `interval` holds at most `B - 1 + r`
//!   requests, so the limiter paces at `r = limit × (1 − headroom) − (B − 1)`:
//!   no window of `interval` (Stripe: any one second; HubSpot: any rolling
//!   10 s) ever holds more than the configured limit, whatever the burst.
//!   `headroom_percent` keeps a share of the limit unused (a budget others
//!   share); `jitter` stretches the pace so that what is sent over
//!   `interval + jitter` fits one window, since the provider counts on its
//!   own clock what the network delivers bunched: a fixed time, not a share
//!   of the limit (`× interval / (interval + jitter)`).
//! - **Adaptive pacing (AIMD).** A 429, a `Retry-After`, a provider hint of
//!   what remains of its window ([`LimitHeaders`],
//!   [`HttpClient::report_remaining`]) or a caller's own "slow down" signal
//!   ([`HttpClient::slow_down`]) cuts the pace multiplicatively — to half, but
//!   never below 95% of what the provider demonstrably served in the last
//!   `interval`, and never below 5% of the configured pace — at most once per
//!   round of requests (429s of requests sent before the cut do not cut
//!   again, and cuts are an interval apart). Any answer within the limit
//!   (a 404 as much as a 200) counts as served. Recovery remembers the pace
//!   the provider refused (what it served when that was a fair sample):
//!   below 90% of it the pace grows by 25% of itself per `interval`'s worth
//!   of answers, up to 105% of it by 0.5% of it, beyond by 1% of the
//!   configured pace, up to the configured pace, and only while the pace is
//!   in use (answers of the last interval reach 80% of it). The pace, a
//!   `Retry-After` pause and a provider cap are shared by every clone, so list
//!   paging and lookups slow down together.
//! - **Retries.** 429, 500, 502, 503 and 504 are retried, as are timeouts,
//!   connection errors, truncated bodies and 2xx bodies that are not valid
//!   JSON for the expected type. 401 and 403 never are; other 4xx are not.
//!   A provider's hint header (`Stripe-Should-Retry: true|false`) overrides
//!   the status-based decision (see [`Provider::should_retry`]), and a body
//!   the provider's error-body hook marks final is not retried.
//! - **Provider hooks.** Each provider reads its own error bodies
//!   ([`Provider::error_body`]; [`default_error_body`] reads the common
//!   shapes) and supplies its credentials ([`Auth`]): a fixed key
//!   ([`StaticAuth`]) or an access token fetched again after a 401
//!   ([`RefreshableToken`]), the request then retried once. A client may
//!   also read "throttled, wait X" in bodies ([`HttpClient::with_throttle_hint`]:
//!   Shopify's `THROTTLED` in a 200, HubSpot's search 429 of the account's
//!   10-second window): such answers are "slow down" answers like 429s, so
//!   the same classifier, backoff, patience and counts apply.
//! - **Streamed bodies.** [`HttpClient::get_stream`] hands a 2xx body out
//!   chunk by chunk (Shopify's bulk results); a body cut short is asked for
//!   again under the policy and continued where it broke off.
//! - **Retry budgets.** A 429 means "slow down", not "broken": it is retried
//!   until the client has made no progress (no successful response on any
//!   clone) for `rate_limit_patience` (default 15 minutes), or at once when
//!   the provider's wait (`Retry-After`, a throttle hint) would pass it;
//!   then the call fails with [`HttpError::RateLimited`], which names the
//!   setting. Other
//!   failures keep a count cap (`max_attempts`) and a cap on the time spent
//!   waiting between them (`max_total_wait`).
//! - **Backoff.** `random(0 ..= min(max_backoff, base_backoff * 2^retry))`,
//!   at least `Retry-After` when the response carries one.
//! - **Secrets.** Secret headers are marked sensitive, never logged, and
//!   scrubbed from any error message a server echoes back; refreshed tokens
//!   too (and they are registered with [`crate::register_secret`]).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

pub use client_credentials::ClientCredentials;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
pub use traffic::{traffic, Answer, Traffic};

mod call;
mod client_credentials;
pub mod rotating;
mod stream;
mod traffic;
/// The request method and builder of [`HttpClient::send_json`] and
/// [`HttpClient::send_text`] (reqwest's), so that connectors need not
/// depend on reqwest themselves.
pub use reqwest::{Method, RequestBuilder};
pub use stream::BodyStream;

use crate::Secret;

/// Response headers in which a provider reports what is left of its
/// current rate-limit window (HubSpot: `X-HubSpot-RateLimit-Remaining` and
/// `X-HubSpot-RateLimit-Interval-Milliseconds`). When both parse, the client
/// calls [`HttpClient::report_remaining`] with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitHeaders {
    /// Requests left in the provider's current window.
    pub remaining: &'static str,
    /// The provider's window, in milliseconds.
    pub interval_ms: &'static str,
}

/// Rate, timeout and retry settings of one client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpPolicy {
    /// The provider's limit: most requests in any one `interval` (at least
    /// 1); per second unless `interval` says otherwise. The limiter never
    /// lets a window of `interval` hold more (see `burst` and
    /// `headroom_percent`).
    pub requests_per_second: u32,
    /// The period `requests_per_second` counts over: 1 s by default; HubSpot
    /// documents its general limit per rolling 10 s.
    pub interval: Duration,
    /// Requests that may go at once after a quiet spell (at least 1; default
    /// 1). A burst is paid for out of the steady rate: the limiter paces at
    /// `limit × (1 − headroom) − (burst − 1)` per `interval`.
    pub burst: u32,
    /// Percent of the limit left unused (0..=50; default 0), for a budget
    /// others share (HubSpot's apps of one account) or counting coarser
    /// than ours.
    pub headroom_percent: u32,
    /// How much closer together the provider may see requests than they
    /// were sent (network and timer jitter; default 0): the provider counts
    /// arrivals on its own clock, so a window of `interval` there holds
    /// what was sent over `interval + jitter`. The pace leaves exactly that
    /// unused: `× interval / (interval + jitter)`, a fixed time rather than
    /// a share of the limit (at 50/s, 20 ms of jitter costs 2%, where 6%
    /// of headroom cost three requests a second).
    pub jitter: Duration,
    /// Per-request timeout, from sending to the end of the body.
    pub timeout: Duration,
    /// Most attempts per call that fail other than by rate limiting (5xx,
    /// timeouts, resets, malformed bodies), the first included.
    pub max_attempts: u32,
    /// Most time spent sleeping after such failures within one call.
    pub max_total_wait: Duration,
    /// How long "slow down" answers (429) are retried while the client
    /// makes no progress at all (no successful response on any clone)
    /// before the call fails (default 15 minutes).
    pub rate_limit_patience: Duration,
    /// Backoff before the first retry (the upper bound of its jitter).
    pub base_backoff: Duration,
    /// Upper bound of any backoff (but `Retry-After` is always honoured).
    pub max_backoff: Duration,
    /// Headers reporting what is left of the provider's window, if it sends
    /// them (default none).
    pub limit_headers: Option<LimitHeaders>,
    /// Whether 3xx answers are followed (default `true`, up to 10 hops:
    /// reqwest's default). When `false`, a 3xx is a final error naming the
    /// `Location` (its origin; the path is masked): a POST must not turn
    /// into a GET without its body, nor carry its headers to another host.
    pub follow_redirects: bool,
}

impl HttpPolicy {
    /// The defaults at `requests_per_second`: burst 1, no headroom, 30 s
    /// timeout, 6 attempts and 120 s of total wait for failures, 15 minutes
    /// of patience with rate limiting, backoff from 250 ms up to 20 s.
    pub fn new(requests_per_second: u32) -> HttpPolicy {
        HttpPolicy {
            requests_per_second,
            interval: Duration::from_secs(1),
            burst: 1,
            headroom_percent: 0,
            jitter: Duration::ZERO,
            timeout: Duration::from_secs(30),
            max_attempts: 6,
            max_total_wait: Duration::from_secs(120),
            rate_limit_patience: Duration::from_secs(15 * 60),
            base_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(20),
            limit_headers: None,
            follow_redirects: true,
        }
    }

    /// The steady pace, in requests per `interval`: the limit less the
    /// headroom less what the burst may add to a window, spread so that
    /// what was sent over `interval + jitter` fits one window.
    pub fn pace(&self) -> f64 {
        let limit = f64::from(self.requests_per_second);
        let kept = limit * (1.0 - f64::from(self.headroom_percent.min(50)) / 100.0);
        let interval = self.interval.max(Duration::from_millis(1)).as_secs_f64();
        let spread = interval / (interval + self.jitter.as_secs_f64());
        ((kept - f64::from(self.burst.max(1) - 1)) * spread).max(limit.min(1.0) * 0.5)
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

/// `15m`, `90s`, `1.5s`, `250ms`: a duration as a config value would spell it.
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms >= 60_000 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) && ms > 0 {
        format!("{}s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{ms}ms")
    }
}

/// Multiplicative decrease on a "slow down" signal.
const DECREASE: f64 = 0.5;
/// A cut never goes below this share of what the provider served in the
/// last interval: that much demonstrably fits.
const SERVED_SHARE: f64 = 0.95;
/// The pace never drops below this share of the configured pace.
const FLOOR_SHARE: f64 = 0.05;
/// Probing above the remembered pace: this share of the configured pace
/// per interval's worth of answers (additive increase).
const RECOVER_SHARE: f64 = 0.01;
/// After a cut, the pace grows fast back to this share of the pace the
/// provider refused ...
const RECALL_SHARE: f64 = 0.9;
/// ... by this share of itself per interval's worth of answers
/// (multiplicative, so a halved pace is back within a few intervals) ...
const FAST_GROWTH: f64 = 0.25;
/// ... then creeps by this share of the refused pace per interval ...
const NEAR_PEAK_SHARE: f64 = 0.005;
/// ... up to this multiple of it, so a limit near the refused pace is met
/// once in many intervals, not every few; beyond, it probes by
/// [`RECOVER_SHARE`].
const NEAR_PEAK_UNTIL: f64 = 1.05;
/// The pace grows only while the answers of the last interval reach this
/// share of it: a client sending less than its pace learns nothing about
/// the provider's limit, and must not climb far past it unnoticed.
const IN_USE_SHARE: f64 = 0.8;

/// The pacing state shared by every clone of a client (and by clients that
/// are [`HttpClient::also_limited_by`] it).
struct Limiter {
    interval: Duration,
    burst: u32,
    /// The configured pace (requests per interval).
    ceiling: f64,
    /// FIFO turns: the head of the queue sleeps until its slot, later
    /// requests wait behind it, so a cut applies to every waiting request.
    turn: tokio::sync::Mutex<()>,
    pace: Mutex<Pace>,
}

struct Pace {
    /// Current pace, requests per interval, within `[floor, ceiling]`.
    rate: f64,
    /// GCRA theoretical arrival time of the next request.
    tat: Option<Instant>,
    /// No request leaves before this (`Retry-After`, an empty window).
    blocked_until: Option<Instant>,
    /// A provider's report of what remains: at most this pace until then.
    cap: Option<(f64, Instant)>,
    /// When the pace was last cut; 429s of requests sent before do not cut.
    last_cut: Option<Instant>,
    /// The pace the provider last refused (what it served when the sample
    /// was fair, else the pace requests went at): the target of the fast
    /// recovery after a cut, and where probing slows down.
    peak: Option<f64>,
    /// Times of the answers (anything but a 429 or a 5xx) within the last
    /// interval.
    served: VecDeque<Instant>,
}

impl Limiter {
    fn new(policy: &HttpPolicy) -> Limiter {
        let ceiling = policy.pace();
        Limiter {
            interval: policy.interval.max(Duration::from_millis(1)),
            burst: policy.burst.max(1),
            ceiling,
            turn: tokio::sync::Mutex::new(()),
            pace: Mutex::new(Pace {
                rate: ceiling,
                tat: None,
                blocked_until: None,
                cap: None,
                last_cut: None,
                peak: None,
                served: VecDeque::new(),
            }),
        }
    }

    fn floor(&self) -> f64 {
        (self.ceiling * FLOOR_SHARE).min(self.ceiling)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pace> {
        self.pace.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current pace including a provider's cap, in requests per interval.
    fn effective_rate(&self, pace: &mut Pace, now: Instant) -> f64 {
        if pace.cap.is_some_and(|(_, until)| now >= until) {
            pace.cap = None;
        }
        let rate = pace.rate;
        match pace.cap {
            // The provider's own count wins over the floor.
            Some((cap, _)) => rate.min(cap),
            None => rate,
        }
    }

    /// Waits for a permit; returns when the request may be sent.
    async fn acquire(&self) {
        let _turn = self.turn.lock().await;
        loop {
            let now = Instant::now();
            let at = {
                let mut pace = self.lock();
                let period = self.interval.div_f64(self.effective_rate(&mut pace, now));
                let tolerance = period * (self.burst - 1);
                let mut at = now;
                if let Some(tat) = pace.tat {
                    at = at.max(tat.checked_sub(tolerance).unwrap_or(tat));
                }
                if let Some(blocked) = pace.blocked_until {
                    at = at.max(blocked);
                }
                if at <= now {
                    // A permit taken a little late (a timer fires a
                    // millisecond or two after its deadline) keeps its slot,
                    // so lateness does not pile up over thousands of
                    // requests; no request ever goes before its slot. After
                    // a quiet spell the schedule restarts from now.
                    let base = match pace.tat {
                        Some(t) if now <= t + period / 4 => t,
                        _ => now,
                    };
                    pace.tat = Some(base + period);
                    return;
                }
                at
            };
            tokio::time::sleep_until(at).await;
        }
    }

    /// An answer within the provider's limit (any status but 429 and 5xx):
    /// remember it, and recover. Below [`RECALL_SHARE`] of the refused pace
    /// the pace grows by [`FAST_GROWTH`] of itself per interval's worth of
    /// answers; from there to [`NEAR_PEAK_UNTIL`] times the refused pace by
    /// [`NEAR_PEAK_SHARE`] of it; beyond, by [`RECOVER_SHARE`] of the
    /// configured pace. It grows only
    /// while it is in use ([`IN_USE_SHARE`]).
    fn served(&self) {
        let now = Instant::now();
        let mut pace = self.lock();
        pace.served.push_back(now);
        while pace
            .served
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.interval)
        {
            pace.served.pop_front();
        }
        let rate = pace.rate;
        if rate >= self.ceiling || (pace.served.len() as f64) < rate * IN_USE_SHARE {
            return;
        }
        // One answer is 1/rate of an interval's worth.
        let next = match pace.peak {
            Some(peak) if rate < peak * RECALL_SHARE => {
                (rate + FAST_GROWTH).min(peak * RECALL_SHARE)
            }
            Some(peak) if rate < peak * NEAR_PEAK_UNTIL => {
                rate + peak * NEAR_PEAK_SHARE / rate.max(1.0)
            }
            _ => rate + self.ceiling * RECOVER_SHARE / rate.max(1.0),
        };
        pace.rate = next.min(self.ceiling);
    }

    /// A "slow down" signal about a request sent at `sent` (`None`: not
    /// tied to a request). Returns the new pace when it was cut.
    fn throttled(&self, sent: Option<Instant>, wait: Option<Duration>) -> Option<f64> {
        let now = Instant::now();
        let mut pace = self.lock();
        if let Some(wait) = wait {
            let until = now + wait;
            pace.blocked_until = Some(pace.blocked_until.map_or(until, |b| b.max(until)));
        }
        // One cut per round: a 429 of a request sent before the last cut
        // reflects the old pace, and a provider counting by windows keeps
        // refusing until its window ends, so cuts are at least one interval
        // apart.
        let fresh = match pace.last_cut {
            None => true,
            Some(cut) => {
                sent.is_none_or(|sent| sent >= cut) && now.duration_since(cut) >= self.interval
            }
        };
        if !fresh {
            return None;
        }
        while pace
            .served
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.interval)
        {
            pace.served.pop_front();
        }
        let served = pace.served.len() as f64;
        let rate = pace.rate;
        let cut = (rate * DECREASE)
            .max(served.min(rate) * SERVED_SHARE)
            .clamp(self.floor(), self.ceiling);
        pace.rate = cut.min(rate);
        pace.last_cut = Some(now);
        // What the provider refused: the pace requests went at, or what it
        // served when that is a fair sample (fixed windows refuse a pace
        // above what they let through).
        let refused = if served >= pace.rate {
            served.min(rate)
        } else {
            rate
        };
        pace.peak = Some(refused.max(pace.rate));
        Some(pace.rate)
    }

    /// No request leaves for `wait` (a window others spent).
    fn hold(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut pace = self.lock();
        pace.blocked_until = Some(pace.blocked_until.map_or(until, |b| b.max(until)));
    }

    /// The provider reports `remaining` requests left in a window of
    /// `window`: pace at most that over the window, or pause when none.
    fn remaining(&self, remaining: u32, window: Duration) {
        let window = window.max(Duration::from_millis(1));
        if remaining == 0 {
            self.hold(window);
        } else {
            let now = Instant::now();
            let until = now + window;
            let mut pace = self.lock();
            let per_interval =
                f64::from(remaining) * self.interval.as_secs_f64() / window.as_secs_f64();
            pace.cap = Some((per_interval, until));
        }
    }
}

/// Who is on the other end: its name for messages, the header carrying its
/// request ID, its optional retry hint header, and the hook that reads its
/// error bodies. Cheap to copy; connectors declare it as a `const`.
#[derive(Clone, Copy, Debug)]
pub struct Provider {
    /// Name used in errors and logs (`Stripe`).
    pub name: &'static str,
    /// Response header with the request ID (`Request-Id`).
    pub request_id_header: &'static str,
    /// Response header whose `true`/`false` overrides the retry decision
    /// (`Stripe-Should-Retry`).
    pub should_retry_header: Option<&'static str>,
    /// Reads a non-2xx body: the message and code shown in errors, and
    /// whether the body makes an otherwise retryable status final (HubSpot's
    /// 429 with `policyName: DAILY`: the day's quota is spent, and retrying
    /// for hours would only hide it). `None` when the body says nothing
    /// readable. [`default_error_body`] reads the common shapes.
    pub error_body: fn(&[u8]) -> Option<ProviderError>,
}

/// What a provider's error body says (see [`Provider::error_body`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderError {
    /// The human-readable message (Stripe: `error.message`).
    pub message: Option<String>,
    /// A machine-readable code (Stripe: `error.code`), shown next to the
    /// status and as the `last` failure of retried calls.
    pub code: Option<String>,
    /// The body makes a retryable status final: retrying cannot help.
    pub is_final: bool,
}

/// What an answer says about the provider's rate limit that its status
/// does not: Shopify's `THROTTLED` error in a 200, HubSpot's search 429 of
/// the account's 10-second window (see [`HttpClient::with_throttle_hint`]).
/// The policy retries it as a "slow down" answer: counted with the 429s
/// ([`HttpStats::throttled`], [`Traffic::rate_limited`]), the pace cut,
/// its backoff at least `wait`, under `rate_limit_patience`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Throttle {
    /// How long the provider will refuse (at least this long is waited).
    pub wait: Option<Duration>,
    /// What the answer said, for `last` of errors and logs (`THROTTLED`).
    pub code: String,
    /// The provider's window is spent by others that share it (HubSpot's
    /// account-wide 10 s): every limiter of the client (its own and those
    /// of [`HttpClient::also_limited_by`]) holds for `wait` (or one
    /// `interval`), and the pace is not cut, since it did not cause this.
    pub shared_window: bool,
}

/// A provider's reading of an answer (status, raw body) that may say
/// "throttled, wait X". It may keep state (Shopify's wait depends on the
/// restore rate seen over earlier answers), hence a closure rather than a
/// field of the `const` [`Provider`].
pub type ThrottleHint = Arc<dyn Fn(u16, &[u8]) -> Option<Throttle> + Send + Sync>;

impl Provider {
    /// A provider named `name` whose request IDs come in
    /// `request_id_header`, without a retry hint header, whose error bodies
    /// are read by [`default_error_body`]. Override fields with
    /// `Provider { error_body: …, ..Provider::new(…) }`.
    pub const fn new(name: &'static str, request_id_header: &'static str) -> Provider {
        Provider {
            name,
            request_id_header,
            should_retry_header: None,
            error_body: default_error_body,
        }
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

/// The credentials one request is sent with: secret headers, and the
/// generation they belong to (it changes with every refresh, so a 401 to a
/// request sent with old credentials does not refresh them twice).
#[derive(Clone, Debug)]
pub struct Credentials {
    generation: u64,
    headers: Arc<[(String, Secret)]>,
}

impl Credentials {
    /// `headers` (name, secret value) of generation `generation`.
    pub fn new(generation: u64, headers: Vec<(String, Secret)>) -> Credentials {
        Credentials {
            generation,
            headers: headers.into(),
        }
    }

    /// Which credentials these are.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The headers to send; their values are marked sensitive, never logged
    /// or shown.
    pub fn headers(&self) -> &[(String, Secret)] {
        &self.headers
    }
}

/// How a provider authenticates: the hook the client asks for the auth
/// headers of every request, and asks to refresh them once when a request
/// is refused with 401. [`StaticAuth`] is a fixed key; [`RefreshableToken`]
/// an access token fetched again when it expires (OAuth 2.0 client
/// credentials).
#[async_trait::async_trait]
pub trait Auth: Send + Sync {
    /// The credentials for the next request (a token not yet fetched is
    /// fetched here).
    async fn credentials(&self) -> Result<Credentials, HttpError>;

    /// A request sent with `stale` was refused with 401: get new
    /// credentials (unless others already replaced `stale`) and return
    /// `true` to retry the request once with them, or `false` when these
    /// credentials cannot be refreshed and the 401 is final.
    async fn refresh(&self, stale: &Credentials) -> Result<bool, HttpError>;

    /// Every secret value these credentials have held, to scrub from any
    /// message a server echoes back.
    fn secrets(&self) -> Vec<Secret>;
}

/// Fixed secret headers (an API key, a private app token); a 401 is final.
#[derive(Clone, Debug)]
pub struct StaticAuth {
    credentials: Credentials,
}

impl StaticAuth {
    /// Sends `headers` (name, secret value) with every request.
    pub fn new(headers: Vec<(String, Secret)>) -> StaticAuth {
        StaticAuth {
            credentials: Credentials::new(0, headers),
        }
    }

    /// `Authorization: Bearer <token>`.
    pub fn bearer(token: &Secret) -> StaticAuth {
        StaticAuth::new(vec![(
            "Authorization".into(),
            Secret::new(format!("Bearer {}", token.expose())),
        )])
    }
}

#[async_trait::async_trait]
impl Auth for StaticAuth {
    async fn credentials(&self) -> Result<Credentials, HttpError> {
        Ok(self.credentials.clone())
    }

    async fn refresh(&self, _stale: &Credentials) -> Result<bool, HttpError> {
        Ok(false)
    }

    fn secrets(&self) -> Vec<Secret> {
        self.credentials
            .headers()
            .iter()
            .map(|(_, s)| s.clone())
            .collect()
    }
}

/// Where a [`RefreshableToken`] gets its access tokens (OAuth 2.0 client
/// credentials: a `POST` to the provider's token endpoint).
#[async_trait::async_trait]
pub trait TokenSource: Send + Sync {
    /// A new access token. Called for the first request and after a 401,
    /// one call at a time; the token is registered as a secret.
    async fn fetch(&self) -> Result<Secret, HttpError>;
}

/// An access token sent as `<header>: <prefix><token>`, fetched from its
/// [`TokenSource`] before the first request and again when a request is
/// refused with 401 (the token expired or was revoked). Concurrent 401s of
/// the same token fetch one new token: refreshes go one at a time, and a
/// request refused with a token already replaced just retries with the new
/// one. Share one (`Arc`) between the clients of an account.
pub struct RefreshableToken {
    header: String,
    prefix: String,
    source: Box<dyn TokenSource>,
    current: Mutex<Option<Credentials>>,
    /// Held while fetching: one refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// Every token and header value issued, to scrub from messages (a
    /// server may echo an old one).
    issued: Mutex<Vec<Secret>>,
}

impl fmt::Debug for RefreshableToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefreshableToken")
            .field("header", &self.header)
            .field(
                "generation",
                &self.current_credentials().map(|c| c.generation()),
            )
            .finish_non_exhaustive()
    }
}

impl RefreshableToken {
    /// `<header>: <prefix><token>`, tokens from `source`.
    pub fn new(
        header: impl Into<String>,
        prefix: impl Into<String>,
        source: impl TokenSource + 'static,
    ) -> RefreshableToken {
        RefreshableToken {
            header: header.into(),
            prefix: prefix.into(),
            source: Box::new(source),
            current: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            issued: Mutex::new(Vec::new()),
        }
    }

    /// `Authorization: Bearer <token>`, tokens from `source`.
    pub fn bearer(source: impl TokenSource + 'static) -> RefreshableToken {
        RefreshableToken::new("Authorization", "Bearer ", source)
    }

    fn current_credentials(&self) -> Option<Credentials> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fetches a token unless credentials other than `stale` (`None`: any)
    /// are in place by the time it is this caller's turn.
    async fn renew(&self, stale: Option<u64>) -> Result<Credentials, HttpError> {
        let _turn = self.refreshing.lock().await;
        let now = self.current_credentials();
        if let Some(now) = &now {
            if stale != Some(now.generation()) {
                return Ok(now.clone());
            }
        }
        let token = self.source.fetch().await?;
        crate::register_secret(token.expose());
        let value = Secret::new(format!("{}{}", self.prefix, token.expose()));
        let credentials = Credentials::new(
            now.map_or(1, |c| c.generation() + 1),
            vec![(self.header.clone(), value.clone())],
        );
        self.issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            // The whole header value first: scrubbed whole, not around
            // the token.
            .extend([value, token]);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(credentials.clone());
        Ok(credentials)
    }
}

#[async_trait::async_trait]
impl Auth for RefreshableToken {
    async fn credentials(&self) -> Result<Credentials, HttpError> {
        match self.current_credentials() {
            Some(c) => Ok(c),
            None => self.renew(None).await,
        }
    }

    async fn refresh(&self, stale: &Credentials) -> Result<bool, HttpError> {
        self.renew(Some(stale.generation())).await.map(|_| true)
    }

    fn secrets(&self) -> Vec<Secret> {
        self.issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A secret header as sent: the value marked sensitive. The error names the
/// header, never the value.
fn secret_header(name: &str, secret: &Secret) -> Result<(HeaderName, HeaderValue), String> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("invalid header name {name:?}"))?;
    let mut value = HeaderValue::from_str(secret.expose())
        .map_err(|_| format!("invalid value for secret header {name} (value not shown)"))?;
    value.set_sensitive(true);
    Ok((header, value))
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
    /// "Slow down" answers seen: 429 responses and answers a throttle
    /// hint ([`HttpClient::with_throttle_hint`]) read as such.
    pub throttled: u64,
    /// 5xx responses seen.
    pub server_errors: u64,
}

/// Why a call failed. `Display` names the provider, the endpoint (method and
/// URL path, no query, no host) and the request ID; never a secret.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// 401 or 403: bad or insufficient credentials. Not retried, except
    /// once after a 401 when the [`Auth`] hook refreshed the credentials
    /// (`refreshed`: this 401 came after that).
    #[error("{provider} {endpoint} was refused with {status}{}: {message} ({})", if *.refreshed { " again after refreshing the credentials" } else { "" }, RequestId(.request_id))]
    Unauthorized {
        provider: &'static str,
        endpoint: String,
        status: u16,
        request_id: Option<String>,
        message: String,
        refreshed: bool,
    },
    /// Any other final non-2xx response (400, 404, 409…). Not retried.
    /// `message` and `body_code` are what the provider's error-body hook
    /// read ([`Provider::error_body`]; Stripe: `error.message`, `error.code`).
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
    /// The provider kept answering "slow down" (429) and the client made no
    /// progress at all for `rate_limit_patience`.
    #[error("{provider} {endpoint} was still rate limited after {} without progress ({attempts} attempt{}, last: {last}; {}): other clients of the account may be using most of its limit; raise the job's rate_limit_patience, lower its requests_per_second, or run when the account is quieter", human_duration(*.patience), if *.attempts == 1 { "" } else { "s" }, RequestId(.request_id))]
    RateLimited {
        provider: &'static str,
        endpoint: String,
        attempts: u32,
        last: String,
        request_id: Option<String>,
        patience: Duration,
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
    limiter: Arc<Limiter>,
    /// Limiters of other clients this one also waits for: HubSpot's search
    /// calls obey their own per-second limit and the account's 10-second one.
    also: Vec<Arc<Limiter>>,
    /// The auth headers of every request, and the values scrubbed from
    /// every message that could echo them.
    auth: Arc<dyn Auth>,
    /// Reads "throttled, wait X" in answers, when the provider says so in
    /// bodies ([`HttpClient::with_throttle_hint`]).
    throttle_hint: Option<ThrottleHint>,
    /// When the client was built; `progress` counts from it.
    born: Instant,
    /// Milliseconds from `born` to the last successful response.
    progress: Arc<AtomicU64>,
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

impl HttpClient {
    /// A client sending `headers` and `secret_headers` on every request
    /// (a [`StaticAuth`]). Secret header values are marked sensitive and
    /// never logged or shown.
    pub fn new(
        provider: Provider,
        policy: HttpPolicy,
        secret_headers: Vec<(String, Secret)>,
        headers: Vec<(String, String)>,
    ) -> Result<HttpClient, HttpError> {
        for (name, secret) in &secret_headers {
            secret_header(name, secret).map_err(|message| HttpError::Client {
                provider: provider.name,
                message,
            })?;
        }
        let auth = Arc::new(StaticAuth::new(secret_headers));
        HttpClient::with_auth(provider, policy, auth, headers)
    }

    /// A client sending `headers` and the credentials of `auth` on every
    /// request; after a 401 it asks `auth` to refresh them and retries the
    /// request once (see [`RefreshableToken`]).
    pub fn with_auth(
        provider: Provider,
        policy: HttpPolicy,
        auth: Arc<dyn Auth>,
        headers: Vec<(String, String)>,
    ) -> Result<HttpClient, HttpError> {
        let fail = |message: String| HttpError::Client {
            provider: provider.name,
            message,
        };
        if policy.requests_per_second == 0 {
            return Err(fail("requests_per_second must be at least 1".into()));
        }
        if policy.burst == 0 {
            return Err(fail("burst must be at least 1".into()));
        }
        if policy.interval.is_zero() {
            return Err(fail("interval must be longer than zero".into()));
        }
        if policy.headroom_percent > 50 {
            return Err(fail("headroom_percent must be 0..=50".into()));
        }
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
        let redirects = if policy.follow_redirects {
            reqwest::redirect::Policy::default()
        } else {
            reqwest::redirect::Policy::none()
        };
        let client = reqwest::Client::builder()
            .default_headers(map)
            .timeout(policy.timeout)
            .redirect(redirects)
            .build()
            .map_err(|e| fail(root_cause(&e)))?;
        let limiter = Arc::new(Limiter::new(&policy));
        Ok(HttpClient {
            inner: Arc::new(Inner {
                provider,
                policy,
                client,
                limiter,
                also: Vec::new(),
                auth,
                throttle_hint: None,
                born: Instant::now(),
                progress: Arc::new(AtomicU64::new(0)),
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
        let limiter = other.inner.limiter.clone();
        self.rebuilt(|inner| inner.also.push(limiter))
    }

    /// This client, reading every answer (2xx and not) with `hint` before
    /// it is decoded or classified: an answer it reads as [`Throttle`] is
    /// retried as "slow down". A body the provider's error-body hook marks
    /// final stays final. Streamed bodies ([`HttpClient::get_stream`]) are
    /// not read by it. Call before cloning, like
    /// [`HttpClient::also_limited_by`].
    pub fn with_throttle_hint(
        self,
        hint: impl Fn(u16, &[u8]) -> Option<Throttle> + Send + Sync + 'static,
    ) -> HttpClient {
        let hint: ThrottleHint = Arc::new(hint);
        self.rebuilt(|inner| inner.throttle_hint = Some(hint))
    }

    /// This client changed by `change`; when clones share it, a copy with
    /// the same limiters, auth and progress and counts of its own.
    fn rebuilt(self, change: impl FnOnce(&mut Inner)) -> HttpClient {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            provider: shared.provider,
            policy: shared.policy.clone(),
            client: shared.client.clone(),
            limiter: shared.limiter.clone(),
            also: shared.also.clone(),
            auth: shared.auth.clone(),
            throttle_hint: shared.throttle_hint.clone(),
            born: shared.born,
            progress: shared.progress.clone(),
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
        });
        change(&mut inner);
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
        self.send_json(Method::GET, url, |req| req.query(query))
            .await
    }

    /// `POST url` with a JSON body, the response parsed as JSON into `T`,
    /// under the policy. Retried like a GET: the provider must make the call
    /// idempotent (Stripe: send an `Idempotency-Key` header).
    pub async fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<(T, ResponseMeta), HttpError> {
        self.send_json(Method::POST, url, |req| req.json(body))
            .await
    }

    /// `method url` with the request as `build` completes it (headers, a
    /// JSON, form or text body: Salesforce's `PATCH` of sObject
    /// Collections, a form-encoded OAuth token request), the response
    /// parsed as JSON into `T`, under the policy. Retried like a GET: the
    /// call must be idempotent.
    pub async fn send_json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<(T, ResponseMeta), HttpError> {
        let (JsonBody(value), meta) = self.call(method, url, build).await?;
        Ok((value, meta))
    }

    /// Like [`HttpClient::send_json`], but the 2xx body is returned as
    /// text, not parsed (CSV results of Salesforce's Bulk API 2.0); a body
    /// that is not UTF-8 is retried like malformed JSON.
    pub async fn send_text(
        &self,
        method: Method,
        url: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<(String, ResponseMeta), HttpError> {
        self.call(method, url, build).await
    }

    /// Like [`HttpClient::send_text`], but decided on the status alone: a
    /// 2xx is success whatever its body (not UTF-8, cut short by a reset),
    /// which is read and dropped. For calls that must never be repeated
    /// once the server accepted them (a webhook delivery).
    pub async fn send_status(
        &self,
        method: Method,
        url: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<ResponseMeta, HttpError> {
        let (StatusOnly, meta) = self.call(method, url, build).await?;
        Ok(meta)
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

    /// The pace the limiter keeps now, in requests per `interval`: the
    /// configured pace ([`HttpPolicy::pace`]) until the provider says "slow
    /// down", less after, recovering with successes.
    pub fn current_rate(&self) -> f64 {
        let limiter = &self.inner.limiter;
        let mut pace = limiter.lock();
        limiter.effective_rate(&mut pace, Instant::now())
    }

    /// A "slow down" signal the caller found in an answer the policy cannot
    /// read (Shopify's `THROTTLED`, a provider hint in a body): cuts the pace
    /// shared by every clone (at most once per `interval`), and when `wait`
    /// is given, holds every request of every clone for that long.
    pub fn slow_down(&self, wait: Option<Duration>) {
        traffic::rate_limited(self.inner.provider.name);
        if let Some(rate) = self.inner.limiter.throttled(None, wait) {
            tracing::info!(
                provider = self.inner.provider.name,
                rate,
                "Slowing down on the provider's signal."
            );
        }
    }

    /// The provider reports `remaining` requests left in a window of
    /// `window` (HubSpot's `X-HubSpot-RateLimit-Remaining` and
    /// `-Interval-Milliseconds`): every clone paces at most `remaining` over
    /// the next `window`, or waits it out when nothing remains. Done
    /// automatically for [`HttpPolicy::limit_headers`].
    pub fn report_remaining(&self, remaining: u32, window: Duration) {
        self.inner.limiter.remaining(remaining, window);
    }

    /// When any clone last got a successful response (or the client was
    /// built): the clock `rate_limit_patience` runs against.
    pub fn last_progress(&self) -> Instant {
        let inner = &self.inner;
        inner.born + Duration::from_millis(inner.progress.load(Ordering::Relaxed))
    }

    fn note_progress(&self) {
        let inner = &self.inner;
        let ms = u64::try_from(inner.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        inner.progress.fetch_max(ms, Ordering::Relaxed);
    }

    /// `text` with every secret header value the auth hook has held (and
    /// the token after a scheme such as `Bearer `) replaced by `***`, in
    /// case a server echoed it.
    fn scrub(&self, mut text: String) -> String {
        for secret in &self.inner.auth.secrets() {
            let value = secret.expose();
            let token = value.rsplit(' ').next().unwrap_or(value);
            for needle in [value, token] {
                if needle.len() >= 6 && text.contains(needle) {
                    text = text.replace(needle, "***");
                }
            }
        }
        // The process-wide list too (every `Secret`, the parts of long ones).
        crate::scrub(&text).into_owned()
    }
}

/// How a 2xx body becomes the caller's value; `Err` is retried like any
/// malformed body.
trait Decode: Sized {
    /// Success is the 2xx status alone: a body that cannot be read is no
    /// reason to retry.
    const STATUS_ONLY: bool = false;
    /// The 2xx body is the caller's to read as it comes
    /// ([`HttpClient::get_stream`]): [`Decode::streamed`] takes the response.
    const STREAM: bool = false;
    /// The value holding the response, for [`Decode::STREAM`] types.
    fn streamed(_response: reqwest::Response) -> Option<Self> {
        None
    }
    fn decode(bytes: &[u8]) -> Result<Self, String>;
}

/// A 2xx whose body is ignored ([`HttpClient::send_status`]).
struct StatusOnly;

impl Decode for StatusOnly {
    const STATUS_ONLY: bool = true;
    fn decode(_: &[u8]) -> Result<Self, String> {
        Ok(StatusOnly)
    }
}

/// A body parsed as JSON into `T`.
struct JsonBody<T>(T);

impl<T: serde::de::DeserializeOwned> Decode for JsonBody<T> {
    fn decode(bytes: &[u8]) -> Result<Self, String> {
        // An empty body (204) reads as `null`, so `()` and `Option` work.
        let json: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"null"
        } else {
            bytes
        };
        serde_json::from_slice(json)
            .map(JsonBody)
            .map_err(|e| format!("malformed JSON: {e}"))
    }
}

impl Decode for String {
    fn decode(bytes: &[u8]) -> Result<Self, String> {
        String::from_utf8(bytes.to_vec()).map_err(|e| format!("body is not UTF-8: {e}"))
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

/// The error-body hook of providers without their own: the common JSON
/// shapes. `{"error": {"message", "code"}}` (the code falls back to
/// `type`), OAuth 2.0's `{"error": "code", "error_description": "…"}`, a
/// plain `{"error": "…"}`, or top-level `message` and `code`. Never final.
pub fn default_error_body(body: &[u8]) -> Option<ProviderError> {
    let json = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    let (message, code) = match json.get("error") {
        Some(err @ serde_json::Value::Object(_)) => (
            text(err.get("message")),
            text(err.get("code")).or_else(|| text(err.get("type"))),
        ),
        Some(serde_json::Value::String(s)) => match text(json.get("error_description")) {
            Some(description) => (Some(description), Some(s.clone())),
            None => (Some(s.clone()), text(json.get("code"))),
        },
        _ => (text(json.get("message")), text(json.get("code"))),
    };
    (message.is_some() || code.is_some()).then_some(ProviderError {
        message,
        code,
        is_final: false,
    })
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
mod governor_bench;
#[cfg(test)]
mod tests;
