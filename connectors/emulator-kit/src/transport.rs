//! The faults every emulator injects the same way, the counters every
//! emulator keeps, and the per-request sequence that applies them.
//!
//! A handler calls [`Transport::arrive`] first thing. The [`Arrival`] it gets
//! holds the request's fault (taken from the plan in arrival order), counts
//! it in [`Stats`] and as in flight, and then drives the sequence:
//!
//! 1. [`Arrival::injected`]: an error fault the provider answers at once,
//!    with its own body, before auth or rate limits (`RateLimited`,
//!    `ServerError`, `Unavailable`, `MalformedJson`, or a provider's own
//!    fault). Everything else that depends on arrival order (auth, the rate
//!    limiter) the handler decides now too.
//! 2. [`Arrival::wait`]: sleeps the latency plus any `Slow` extra; on
//!    `DropConnection` it drops the connection and hands back the response
//!    to return (never written).
//! 3. The handler serves the request (unless it answered in step 1).
//! 4. [`Arrival::after_work`]: `TruncatedJson` cuts the body in half as a
//!    `200`; `DropAfterWork` drops the connection; `ServerErrorAfterWork`
//!    asks the provider for its `500` instead of the served reply.
//! 5. [`Arrival::sent`]: counts the response by status (and as throttled).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::Request;
use axum::response::Response;

use crate::{dropped_response, ConnHandle, Fault, FaultPlan, InFlight};

/// A fault to inject instead of (or on top of) the normal response. `P` is a
/// provider's own faults (e.g. Stripe's `lock_timeout`), none by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportFault<P = Infallible> {
    /// `429` with the provider's rate-limit body; not processed.
    RateLimited,
    /// `500` with the provider's internal-error body; not processed.
    ServerError,
    /// `503` with the provider's unavailable body; not processed.
    Unavailable,
    /// The normal response, sent after this extra delay (on top of the
    /// emulator's latency).
    Slow(Duration),
    /// `200` whose body is the first half of the normal response's JSON, with
    /// a `Content-Length` matching the truncated body. The request is processed.
    TruncatedJson,
    /// `200` with a JSON content type and an HTML body
    /// ([`MALFORMED_JSON_BODY`](crate::MALFORMED_JSON_BODY)); not processed.
    MalformedJson,
    /// The TCP connection is closed without any HTTP response; the request is
    /// not processed.
    DropConnection,
    /// The request is processed, then answered with the provider's `500`
    /// instead: the work is done, its answer lost.
    ServerErrorAfterWork,
    /// The request is processed, then the connection closes without a
    /// response: the work is done, its answer lost.
    DropAfterWork,
    /// A provider's own fault, answered at once by the provider.
    Provider(P),
}

/// An error fault the provider answers at once (see [`Arrival::injected`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected<'a, P> {
    RateLimited,
    ServerError,
    Unavailable,
    /// Status `200`, body [`MALFORMED_JSON_BODY`](crate::MALFORMED_JSON_BODY).
    MalformedJson,
    Provider(&'a P),
}

/// What to do with the served reply (see [`Arrival::after_work`]).
pub enum AfterWork {
    /// Send it (possibly truncated).
    Send,
    /// Send the provider's `500` instead.
    ServerError,
    /// Return this response: the connection is dropped, nothing is written.
    Dropped(Response),
}

/// Counters every emulator keeps, since it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Every HTTP request received (including dropped connections).
    pub requests: u64,
    /// `429` responses sent, from the rate limiters or from faults, plus the
    /// replies a provider marks as throttled (e.g. Shopify's `THROTTLED`).
    pub throttled: u64,
    /// Responses sent, by status. Dropped connections send none and are absent.
    pub by_status: BTreeMap<u16, u64>,
    /// The most requests ever being handled at once.
    pub max_in_flight: u64,
}

/// An emulator's fault plan, latency and [`Stats`].
pub struct Transport<P = Infallible> {
    latency: Duration,
    plan: Mutex<FaultPlan<TransportFault<P>>>,
    stats: Mutex<Stats>,
    in_flight: AtomicU64,
}

impl<P: Clone> Transport<P> {
    /// No faults; every response waits `latency` first.
    pub fn new(latency: Duration) -> Self {
        Transport {
            latency,
            plan: Mutex::new(FaultPlan::default()),
            stats: Mutex::new(Stats::default()),
            in_flight: AtomicU64::new(0),
        }
    }

    /// Replaces the fault plan; the next request is request number 0 of it.
    pub fn set_faults(&self, faults: Vec<Fault<TransportFault<P>>>) {
        *self.plan.lock().unwrap() = FaultPlan::new(faults);
    }

    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap().clone()
    }

    /// Counts `req` and takes its fault from the plan.
    pub fn arrive<B>(&self, req: &Request<B>) -> Arrival<'_, P> {
        self.arrive_with(req, || None)
    }

    /// [`arrive`](Self::arrive), with a second plan (e.g. one route's):
    /// `other` is always consulted, and the shared plan's fault wins.
    pub fn arrive_with<B>(
        &self,
        req: &Request<B>,
        other: impl FnOnce() -> Option<TransportFault<P>>,
    ) -> Arrival<'_, P> {
        let (guard, in_flight) = InFlight::enter(&self.in_flight);
        {
            let mut stats = self.stats.lock().unwrap();
            stats.requests += 1;
            stats.max_in_flight = stats.max_in_flight.max(in_flight);
        }
        let shared = self.plan.lock().unwrap().next();
        let fault = shared.or(other());
        let mut delay = self.latency;
        if let Some(TransportFault::Slow(extra)) = &fault {
            delay += *extra;
        }
        Arrival {
            transport: self,
            fault,
            delay,
            conn: ConnHandle::of(req),
            _in_flight: guard,
        }
    }
}

/// One request on its way through the fault sequence (see the module docs).
pub struct Arrival<'a, P> {
    transport: &'a Transport<P>,
    fault: Option<TransportFault<P>>,
    delay: Duration,
    conn: Option<ConnHandle>,
    _in_flight: InFlight<'a>,
}

impl<P> Arrival<'_, P> {
    /// The request's fault, if any.
    pub fn fault(&self) -> Option<&TransportFault<P>> {
        self.fault.as_ref()
    }

    /// The error the provider must answer with at once, if any.
    pub fn injected(&self) -> Option<Injected<'_, P>> {
        match self.fault.as_ref()? {
            TransportFault::RateLimited => Some(Injected::RateLimited),
            TransportFault::ServerError => Some(Injected::ServerError),
            TransportFault::Unavailable => Some(Injected::Unavailable),
            TransportFault::MalformedJson => Some(Injected::MalformedJson),
            TransportFault::Provider(p) => Some(Injected::Provider(p)),
            _ => None,
        }
    }

    /// Whether the connection is dropped before the request is processed.
    pub fn drops(&self) -> bool {
        matches!(self.fault, Some(TransportFault::DropConnection))
    }

    /// Waits the latency (plus any `Slow` extra). `Err` on `DropConnection`:
    /// return that response (the connection is dropped, nothing is written).
    pub async fn wait(&self) -> Result<(), Response> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if self.drops() {
            return Err(dropped_response(self.conn.clone()));
        }
        Ok(())
    }

    /// Applies the faults that strike once the request is served: truncates
    /// `body` (status `200`) on `TruncatedJson`, else says what to send.
    pub fn after_work(&self, status: &mut u16, body: &mut Vec<u8>) -> AfterWork {
        match self.fault {
            Some(TransportFault::TruncatedJson) => {
                *status = 200;
                body.truncate(body.len() / 2);
                AfterWork::Send
            }
            Some(TransportFault::DropAfterWork) => {
                AfterWork::Dropped(dropped_response(self.conn.clone()))
            }
            Some(TransportFault::ServerErrorAfterWork) => AfterWork::ServerError,
            _ => AfterWork::Send,
        }
    }

    /// Counts a response sent with `status`; `throttled` marks a throttling
    /// reply whose status is not `429`.
    pub fn sent(&self, status: u16, throttled: bool) {
        let mut stats = self.transport.stats.lock().unwrap();
        *stats.by_status.entry(status).or_insert(0) += 1;
        if status == 429 || throttled {
            stats.throttled += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn fault(kind: TransportFault<char>, after: u64, times: u64) -> Fault<TransportFault<char>> {
        Fault { kind, after, times }
    }

    fn req() -> Request<Body> {
        Request::new(Body::empty())
    }

    #[tokio::test(start_paused = true)]
    async fn slow_adds_to_the_latency_and_drop_ends_the_wait() {
        let t = Transport::<char>::new(Duration::from_millis(100));
        t.set_faults(vec![
            fault(TransportFault::Slow(Duration::from_millis(250)), 0, 1),
            fault(TransportFault::DropConnection, 1, 1),
        ]);
        let start = tokio::time::Instant::now();
        let a = t.arrive(&req());
        assert!(a.injected().is_none());
        assert!(a.wait().await.is_ok());
        assert_eq!(start.elapsed(), Duration::from_millis(350));
        let b = t.arrive(&req());
        assert!(b.drops());
        assert!(b.wait().await.is_err());
        assert_eq!(start.elapsed(), Duration::from_millis(450));
        let c = t.arrive(&req());
        assert!(c.wait().await.is_ok());
        assert_eq!(start.elapsed(), Duration::from_millis(550));
    }

    #[test]
    fn error_faults_are_injected_and_after_work_faults_strike_later() {
        let t = Transport::<char>::new(Duration::ZERO);
        t.set_faults(vec![
            fault(TransportFault::RateLimited, 0, 1),
            fault(TransportFault::Provider('x'), 1, 1),
            fault(TransportFault::TruncatedJson, 2, 1),
            fault(TransportFault::ServerErrorAfterWork, 3, 1),
            fault(TransportFault::DropAfterWork, 4, 1),
        ]);
        assert_eq!(t.arrive(&req()).injected(), Some(Injected::RateLimited));
        assert_eq!(t.arrive(&req()).injected(), Some(Injected::Provider(&'x')));
        let (mut status, mut body) = (404, b"abcdef".to_vec());
        let a = t.arrive(&req());
        assert!(matches!(
            a.after_work(&mut status, &mut body),
            AfterWork::Send
        ));
        assert_eq!((status, body.as_slice()), (200, &b"abc"[..]));
        let a = t.arrive(&req());
        assert!(a.injected().is_none());
        assert!(matches!(
            a.after_work(&mut status, &mut body),
            AfterWork::ServerError
        ));
        let a = t.arrive(&req());
        assert!(matches!(
            a.after_work(&mut status, &mut body),
            AfterWork::Dropped(_)
        ));
    }

    #[test]
    fn stats_count_requests_statuses_throttles_and_concurrency() {
        let t = Transport::<Infallible>::new(Duration::ZERO);
        let a = t.arrive(&req());
        let b = t.arrive(&req());
        a.sent(429, false);
        b.sent(200, true);
        drop((a, b));
        t.arrive(&req()).sent(200, false);
        let s = t.stats();
        assert_eq!(s.requests, 3);
        assert_eq!(s.throttled, 2);
        assert_eq!(s.max_in_flight, 2);
        assert_eq!(s.by_status, BTreeMap::from([(200, 2), (429, 1)]));
    }

    #[test]
    fn a_second_plan_is_consulted_every_time_and_the_shared_one_wins() {
        let t = Transport::<char>::new(Duration::ZERO);
        t.set_faults(vec![fault(TransportFault::ServerError, 0, 1)]);
        let mut own = FaultPlan::new(vec![fault(TransportFault::Unavailable, 0, 2)]);
        let first = t.arrive_with(&req(), || own.next());
        assert_eq!(first.fault(), Some(&TransportFault::ServerError));
        let second = t.arrive_with(&req(), || own.next());
        assert_eq!(second.fault(), Some(&TransportFault::Unavailable));
        let third = t.arrive_with(&req(), || own.next());
        assert_eq!(third.fault(), None);
    }
}
