//! Fault plans and the rate limiter.
//!
//! A fault plan is consulted once per request, in arrival order. Request number
//! `n` (0-based, counted from the last [`set_faults`](super::Emulator::set_faults))
//! gets the first fault of the plan with `after <= n < after + times`; requests
//! that no fault covers are served normally. Each fault therefore counts from the
//! same origin, so `[{after: 0, times: 2}, {after: 5, times: 1}]` hits requests
//! 0, 1 and 5.

use std::time::Instant;

use super::FaultKind;

/// The shared fault plan (see `recon_emulator_kit::FaultPlan`).
pub(crate) type FaultPlan = recon_emulator_kit::FaultPlan<FaultKind>;

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
    /// Current tokens, in units of 10^-9 token.
    units: u128,
    last: Option<Instant>,
}

const UNIT: u128 = 1_000_000_000;

impl RateLimiter {
    pub fn new(per_sec: u32) -> Self {
        let per_sec = per_sec as u128;
        RateLimiter {
            per_sec,
            units: per_sec * UNIT,
            last: None,
        }
    }

    /// Returns whether a request arriving now may go through.
    pub fn admit(&mut self, now: Instant) -> bool {
        let capacity = self.per_sec * UNIT;
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_nanos();
            self.units = capacity.min(self.units + elapsed.saturating_mul(self.per_sec));
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
