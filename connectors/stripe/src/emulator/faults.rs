//! The rate limiters. (Fault plans are `recon_emulator_kit`'s: request number
//! `n`, 0-based, counted from the last
//! [`set_faults`](super::Emulator::set_faults), gets the first fault of the
//! plan with `after <= n < after + times`.)
//!
//! Time is `tokio::time::Instant`, so a test on tokio's paused clock drives
//! the windows.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// A token bucket of capacity `per_sec`, refilled continuously at `per_sec`
/// tokens per second; each admitted request takes one token.
///
/// Stripe documents its limits as requests per second (by default 100 read
/// operations per second in live mode and 25 in test mode) and answers requests
/// above them with `429 Too Many Requests`, error code `rate_limit`; Stripe's
/// engineering blog ("Scaling your API with rate limiters") describes its
/// request rate limiter as a token bucket. A bucket (rather than a sliding
/// one-second log) also means a client that paces itself with a token bucket or
/// GCRA of the same rate and burst (e.g. `governor`) is never throttled, while
/// a client that bursts past it is, at once. Rejected requests take no token.
/// The arithmetic is exact: tokens are counted in units of 1/10^9, and a second
/// of nanoseconds refills `per_sec * 10^9` units.
pub(crate) struct RateLimiter {
    per_sec: u128,
    /// Refill per second, in units of 10^-9 token: `per_sec` less what other
    /// clients spend.
    refill: u128,
    /// Current tokens, in units of 10^-9 token.
    units: u128,
    last: Option<Instant>,
}

const UNIT: u128 = 1_000_000_000;

impl RateLimiter {
    /// A bucket of `per_sec`, of which other clients spend `others_percent`.
    pub fn new(per_sec: u32, others_percent: u32) -> Self {
        let per_sec = per_sec as u128;
        let ours = 100 - others_percent.min(100) as u128;
        RateLimiter {
            per_sec,
            refill: per_sec * ours / 100,
            units: per_sec * UNIT * ours / 100,
            last: None,
        }
    }

    /// Returns whether a request arriving now may go through.
    pub fn admit(&mut self, now: Instant) -> bool {
        let capacity = self.per_sec * UNIT;
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_nanos();
            self.units = capacity.min(self.units + elapsed.saturating_mul(self.refill));
        }
        if self.last.is_none_or(|last| now > last) {
            self.last = Some(now);
        }
        if self.units >= UNIT {
            self.units -= UNIT;
            true
        } else {
            false
        }
    }
}

/// The strict count: at most `limit` requests in each one-second window
/// (fixed windows `[origin + n s, origin + (n + 1) s)`), as a provider that
/// counts "requests per second" literally would. Other clients of the account
/// spend `others_percent` of each window before ours arrive (on average
/// exactly that share: window `n` gets `⌊(n+1)·L·p⌋ − ⌊n·L·p⌋` of theirs).
/// Rejected requests are not counted.
pub(crate) struct WindowCounter {
    limit: u64,
    others_percent: u64,
    origin: Instant,
    window: u64,
    used: u64,
}

impl WindowCounter {
    pub fn new(limit: u32, others_percent: u32, origin: Instant) -> Self {
        let mut w = WindowCounter {
            limit: u64::from(limit),
            others_percent: u64::from(others_percent.min(100)),
            origin,
            window: 0,
            used: 0,
        };
        w.used = w.others_in(0);
        w
    }

    fn others_in(&self, n: u64) -> u64 {
        let spent = |k: u64| k * self.limit * self.others_percent / 100;
        spent(n + 1) - spent(n)
    }

    /// Returns whether a request arriving now may go through.
    pub fn admit(&mut self, now: Instant) -> bool {
        let n = now.saturating_duration_since(self.origin).as_secs();
        if n != self.window {
            self.window = n;
            self.used = self.others_in(n);
        }
        if self.used < self.limit {
            self.used += 1;
            true
        } else {
            false
        }
    }
}

/// The strictest count: at most `limit` requests admitted in any one
/// second ending at an arrival (the window `(now − 1 s, now]`), as a
/// provider keeping a log of its last second would. Other clients spend
/// `others_percent` of it, spread evenly over the second (they are modelled
/// as a steady stream, not a burst). Rejected requests are not counted.
pub(crate) struct SlidingCounter {
    limit: usize,
    others_percent: u64,
    origin: Instant,
    /// Our admitted requests within the last second.
    log: VecDeque<Instant>,
}

impl SlidingCounter {
    pub fn new(limit: u32, others_percent: u32, origin: Instant) -> Self {
        SlidingCounter {
            limit: limit as usize,
            others_percent: u64::from(others_percent.min(100)),
            origin,
            log: VecDeque::new(),
        }
    }

    /// Requests of other clients in the last second: a steady stream of
    /// `limit × others%` per second since the origin.
    fn others(&self, now: Instant) -> usize {
        let per_sec = self.limit as u64 * self.others_percent;
        if per_sec == 0 {
            return 0;
        }
        // Arrival k (from 0) of theirs is at k / rate seconds.
        let at = |t: Duration| (t.as_nanos() * u128::from(per_sec) / 100 / 1_000_000_000) as i64;
        let elapsed = now.saturating_duration_since(self.origin);
        let before = elapsed.checked_sub(Duration::from_secs(1));
        let upto = at(elapsed) + 1;
        let from = before.map_or(0, |b| at(b) + 1);
        (upto - from).max(0) as usize
    }

    /// Returns whether a request arriving now may go through.
    pub fn admit(&mut self, now: Instant) -> bool {
        while self
            .log
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= Duration::from_secs(1))
        {
            self.log.pop_front();
        }
        if self.log.len() + self.others(now) < self.limit {
            self.log.push_back(now);
            true
        } else {
            false
        }
    }
}

/// Any way of counting, as configured.
pub(crate) enum Limiter {
    Bucket(RateLimiter),
    Window(WindowCounter),
    Sliding(SlidingCounter),
}

impl Limiter {
    pub fn admit(&mut self, now: Instant) -> bool {
        match self {
            Limiter::Bucket(b) => b.admit(now),
            Limiter::Window(w) => w.admit(now),
            Limiter::Sliding(s) => s.admit(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sliding_second_never_holds_more_than_the_limit() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let mut s = SlidingCounter::new(3, 0, t0);
        for m in [0, 500, 999] {
            assert!(s.admit(ms(m)));
        }
        assert!(s.admit(ms(1000)), "the request at 0 ms left the second");
        // A fixed window would admit two more here; a sliding second not.
        assert!(!s.admit(ms(1000)));
        assert!(!s.admit(ms(1400)));
        assert!(s.admit(ms(1500)));
        // Others spending half of 10/s leave 5 in any second.
        let mut s = SlidingCounter::new(10, 50, t0);
        let got = (0..20).filter(|i| s.admit(ms(5000 + i * 10))).count();
        assert_eq!(got, 5);
    }

    #[test]
    fn a_window_admits_the_limit_less_the_others_share() {
        let t0 = Instant::now();
        let mut w = WindowCounter::new(25, 50, t0);
        let admitted = |w: &mut WindowCounter, second: u64| {
            let at = t0 + Duration::from_secs(second) + Duration::from_millis(10);
            (0..40).filter(|_| w.admit(at)).count()
        };
        // 12.5 on average: 12 and 13 in turn.
        let got: Vec<usize> = (0..4).map(|s| admitted(&mut w, s)).collect();
        assert_eq!(got.iter().sum::<usize>(), 50, "{got:?}");
        assert!(got.iter().all(|&n| n == 12 || n == 13), "{got:?}");
        let mut alone = WindowCounter::new(25, 0, t0);
        assert_eq!(admitted(&mut alone, 0), 25);
        // A new window starts afresh, to the millisecond.
        let mut w = WindowCounter::new(2, 0, t0);
        assert!(w.admit(t0 + Duration::from_millis(999)));
        assert!(w.admit(t0 + Duration::from_millis(999)));
        assert!(!w.admit(t0 + Duration::from_millis(999)));
        assert!(w.admit(t0 + Duration::from_millis(1000)));
    }

    #[test]
    fn a_bucket_refills_at_what_others_leave() {
        let t0 = Instant::now();
        let mut b = RateLimiter::new(10, 50);
        // Starts with half its capacity, refills at 5 per second.
        assert_eq!((0..20).filter(|_| b.admit(t0)).count(), 5);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..20).filter(|_| b.admit(t1)).count(), 5);
    }
}
