//! The measurement behind keeping the own limiter (ARCHITECTURE.md,
//! Dependencies, governor): one sender drives the own [`Limiter`] and a
//! governor `RateLimiter` against a provider that counts strictly per
//! window (Stripe: any one second; HubSpot: any rolling 10 s, shared with
//! other clients), on tokio's paused clock, and reports refusals and
//! throughput. Governor's `Quota` is fixed at construction (governor issue
//! #273), so under the adaptive layer it is rebuilt when the pace changes.
//!
//! `cargo test -p recon-core --all-features --lib governor_bench -- --nocapture`

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock;
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

use super::{HttpPolicy, Limiter};

/// Governor's clock on tokio's (paused) clock.
#[derive(Clone)]
struct TokioClock(Instant);

impl Clock for TokioClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

type Governor = RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    TokioClock,
    governor::middleware::NoOpMiddleware<Duration>,
>;

/// A provider counting every accepted request, ours and others', over any
/// window of `window` (a rolling window: the strictest count).
struct Provider {
    limit: usize,
    window: Duration,
    accepted: VecDeque<Instant>,
    /// Others' arrivals, in order, from `others_from` at `others_per_window`.
    others: VecDeque<Instant>,
}

impl Provider {
    fn new(limit: usize, window: Duration, others: Option<(Duration, u32)>) -> Provider {
        let start = Instant::now();
        let others = match others {
            Some((from, per_window)) => (0..100_000u32)
                .map(|k| start + from + window.mul_f64(f64::from(k) / f64::from(per_window)))
                .collect(),
            None => VecDeque::new(),
        };
        Provider {
            limit,
            window,
            accepted: VecDeque::new(),
            others,
        }
    }

    /// Our request at `now`: accepted, or refused (a 429).
    fn answer(&mut self, now: Instant) -> bool {
        while self.others.front().is_some_and(|t| *t <= now) {
            let t = self.others.pop_front().unwrap_or(now);
            self.accepted.push_back(t);
        }
        while self
            .accepted
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            self.accepted.pop_front();
        }
        if self.accepted.len() >= self.limit {
            return false;
        }
        self.accepted.push_back(now);
        true
    }
}

#[derive(Debug)]
struct Run {
    refusals: u32,
    seconds: f64,
    per_window: f64,
    rebuilds: u32,
}

/// Which engine paces the sends.
#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Own,
    /// Governor, rebuilt when the adaptive pace moved by more than this
    /// share since the last build (0: on every change).
    Governor(f64),
}

fn quota(policy: &HttpPolicy, rate: f64) -> Quota {
    let period = policy.interval.div_f64(rate.max(0.01));
    Quota::with_period(period)
        .expect("a period above zero")
        .allow_burst(NonZeroU32::new(policy.burst.max(1)).expect("burst of at least 1"))
}

/// Sends until `n` requests were accepted; every answer goes to the
/// adaptive layer (the own limiter's AIMD: `served`, `throttled`).
async fn drive(policy: &HttpPolicy, mut provider: Provider, n: u32, engine: Engine) -> Run {
    let limiter = Limiter::new(policy);
    let clock = TokioClock(Instant::now());
    let mut built = limiter.ceiling;
    let mut gov: Governor = RateLimiter::direct_with_clock(quota(policy, built), clock.clone());
    let (mut ok, mut refusals, mut rebuilds) = (0, 0, 0);
    let start = Instant::now();
    while ok < n {
        match engine {
            Engine::Own => limiter.acquire().await,
            Engine::Governor(moved) => {
                let rate = limiter.effective_rate(&mut limiter.lock(), Instant::now());
                if (rate - built).abs() > built * moved {
                    built = rate;
                    rebuilds += 1;
                    gov = RateLimiter::direct_with_clock(quota(policy, rate), clock.clone());
                }
                while let Err(not_until) = gov.check() {
                    tokio::time::sleep(not_until.wait_time_from(clock.now())).await;
                }
            }
        }
        let sent = Instant::now();
        if provider.answer(sent) {
            ok += 1;
            limiter.served();
        } else {
            refusals += 1;
            limiter.throttled(Some(sent), None);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Run {
        refusals,
        seconds,
        per_window: f64::from(n) / seconds * policy.interval.as_secs_f64(),
        rebuilds,
    }
}

async fn report(name: &str, policy: &HttpPolicy, make: impl Fn() -> Provider, n: u32) -> Vec<Run> {
    let mut runs = Vec::new();
    for (label, engine) in [
        ("own limiter", Engine::Own),
        (
            "governor, rebuilt on every pace change",
            Engine::Governor(0.0),
        ),
        (
            "governor, rebuilt when the pace moved 10%",
            Engine::Governor(0.1),
        ),
    ] {
        let run = drive(policy, make(), n, engine).await;
        eprintln!(
            "{name}: {label}: {} refusals, {n} accepted in {:.1} s ({:.1} per window), {} rebuilds",
            run.refusals, run.seconds, run.per_window, run.rebuilds
        );
        runs.push(run);
    }
    runs
}

#[tokio::test(start_paused = true)]
async fn governor_against_the_own_limiter_under_strict_window_counts() {
    // Stripe: 25 per any one second, no one else.
    let stripe = HttpPolicy::new(25);
    let s = report(
        "Stripe 25/s, static",
        &stripe,
        || Provider::new(25, Duration::from_secs(1), None),
        1000,
    )
    .await;
    // HubSpot: 100 per rolling 10 s, burst 5, 5% headroom, as the connector.
    let mut hubspot = HttpPolicy::new(100);
    hubspot.interval = Duration::from_secs(10);
    hubspot.burst = 5;
    hubspot.headroom_percent = 5;
    let h = report(
        "HubSpot 100/10s, static",
        &hubspot,
        || Provider::new(100, Duration::from_secs(10), None),
        1000,
    )
    .await;
    // The quota changes at run time: after 30 s other apps take 60 of the
    // 100 per 10 s; the adaptive layer cuts on 429s and recovers.
    let c = report(
        "HubSpot 100/10s, others take 60/10s from 30 s",
        &hubspot,
        || {
            Provider::new(
                100,
                Duration::from_secs(10),
                Some((Duration::from_secs(30), 60)),
            )
        },
        1000,
    )
    .await;
    // Static quotas: both engines count as the provider does.
    assert_eq!((s[0].refusals, h[0].refusals), (0, 0));
    assert_eq!((s[1].refusals, h[1].refusals), (0, 0));
    // A quota changing at run time: the own limiter refuses no more often
    // than governor rebuilt on every pace change (whose fresh state lets a
    // request through at once after each rebuild).
    assert!(c[0].refusals <= c[1].refusals, "{c:?}");
    assert!(c[0].refusals <= c[2].refusals, "{c:?}");
}
