//! The cost bucket. (Fault plans are `recon_emulator_kit`'s, with the same
//! rules as the other emulators'.)
//!
//! Time is `tokio::time::Instant`, so a test on tokio's paused clock drives
//! the bucket's refill.

use tokio::time::Instant;

/// One point, in the bucket's internal units (nano-points).
const UNIT: u128 = 1_000_000_000;

/// Shopify's leaky bucket of query-cost points, per app and shop.
///
/// Shopify ("GraphQL Admin API rate limits", shopify.dev/docs/apps/build/apis/
/// graphql-admin/rate-limits): "Each combination of app and store is given a
/// bucket size and restore rate based on the store's plan", "your quota refills
/// continuously", and "Before execution can begin, the app's bucket must have
/// enough room for the requested cost of the query; then, once execution is
/// complete, the bucket is refunded the difference between the requested cost
/// and the actual cost of the query." The state is what every response reports
/// as `extensions.cost.throttleStatus`: `maximumAvailable` (bucket size),
/// `currentlyAvailable`, `restoreRate` (points per second).
///
/// The arithmetic is exact: points are counted in units of 10^-9, and a
/// nanosecond restores `restore_rate` units.
pub(crate) struct CostBucket {
    max: u128,
    rate: u128,
    /// Units per nanosecond another client of the same app and shop spends
    /// while the bucket holds any (see `EmulatorConfig::others_share`).
    others: u128,
    units: u128,
    last: Instant,
}

impl CostBucket {
    /// A full bucket.
    pub fn new(max_available: u32, restore_rate: u32, now: Instant) -> Self {
        CostBucket {
            max: max_available as u128 * UNIT,
            rate: restore_rate as u128,
            others: 0,
            units: max_available as u128 * UNIT,
            last: now,
        }
    }

    /// Another client spends `share` (0..=1) of the restore rate from now
    /// on: the bucket refills at the rest (and `throttleStatus.restoreRate`
    /// still reports the whole rate, as Shopify's does).
    pub fn set_others(&mut self, share: f64, now: Instant) {
        self.refill(now);
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.others = ((self.rate as f64) * share).round() as u128;
    }

    fn refill(&mut self, now: Instant) {
        if now > self.last {
            let elapsed = now.duration_since(self.last).as_nanos();
            let net = self.rate.saturating_sub(self.others);
            self.units = self
                .max
                .min(self.units.saturating_add(elapsed.saturating_mul(net)));
            self.last = now;
        }
    }

    /// Takes `points` if the bucket holds that many now.
    pub fn try_take(&mut self, points: u64, now: Instant) -> bool {
        self.refill(now);
        let need = points as u128 * UNIT;
        if self.units >= need {
            self.units -= need;
            true
        } else {
            false
        }
    }

    /// Gives back `points` (never above the bucket size).
    pub fn refund(&mut self, points: u64) {
        self.units = self.max.min(self.units + points as u128 * UNIT);
    }

    /// Spends up to `points` now, as another client of the same shop would.
    pub fn drain(&mut self, points: u64, now: Instant) {
        self.refill(now);
        self.units = self.units.saturating_sub(points as u128 * UNIT);
    }

    /// Whole points available now (rounded down).
    pub fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        (self.units / UNIT) as u64
    }

    pub fn maximum(&self) -> u64 {
        (self.max / UNIT) as u64
    }

    pub fn restore_rate(&self) -> u64 {
        self.rate as u64
    }
}
