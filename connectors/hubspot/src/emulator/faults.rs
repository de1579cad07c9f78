//! HubSpot's rate-limit policies. (Fault plans are `recon_emulator_kit`'s,
//! with the same rules as the other emulators'.)
//!
//! Time is `tokio::time::Instant`, so a test on tokio's paused clock drives
//! the windows.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// A rolling window: at most `limit` admissions in any `span`. HubSpot names
/// its burst policy `TEN_SECONDLY_ROLLING`, i.e. a sliding window rather than
/// fixed buckets, so the emulator keeps the admission times of the last `span`
/// (at most `limit` of them) and admits while fewer than `limit` remain.
/// Rejected requests are not recorded: a client that backs off recovers once
/// its oldest admissions leave the window.
///
/// An admission leaves the window 1% of `span` early (10 ms of a second,
/// 100 ms of ten). Admission times are taken in the handler, after the
/// emulator's own scheduling delays; without the allowance, a client paced
/// exactly at the limit (e.g. a GCRA at `limit` per `span`) could be refused
/// when an earlier request of it happened to be admitted a few milliseconds
/// late. A client that truly exceeds the limit is still refused.
///
/// In strict mode there is no allowance: an admission stays in the window for
/// the whole `span`, so no `span`-long interval ever holds more than `limit`
/// admissions, as the server counts them.
pub(crate) struct Window {
    limit: u32,
    span: Duration,
    strict: bool,
    log: VecDeque<Instant>,
}

impl Window {
    pub fn new(limit: u32, span: Duration, strict: bool) -> Self {
        Window {
            limit,
            span,
            strict,
            log: VecDeque::new(),
        }
    }

    fn prune(&mut self, now: Instant) {
        let allowance = if self.strict {
            Duration::ZERO
        } else {
            self.span / 100
        };
        while let Some(&t) = self.log.front() {
            if now.saturating_duration_since(t) + allowance >= self.span {
                self.log.pop_front();
            } else {
                break;
            }
        }
    }

    fn has_room(&mut self, now: Instant) -> bool {
        self.prune(now);
        (self.log.len() as u64) < self.limit as u64
    }

    fn record(&mut self, now: Instant) {
        self.log.push_back(now);
    }

    fn remaining(&self) -> u32 {
        self.limit.saturating_sub(self.log.len() as u32)
    }
}

/// Which HubSpot policy refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// `DAILY`: "You have reached your daily limit."
    Daily,
    /// `TEN_SECONDLY_ROLLING`: the general burst limit.
    TenSecondly,
    /// `SECONDLY`: the search endpoints' per-second limit.
    Secondly,
}

/// The values of the `X-HubSpot-RateLimit-*` headers for one response.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RateHeaders {
    /// `(Max, Remaining)` of the 10-second window.
    pub ten: Option<(u32, u32)>,
    /// `(Daily, Daily-Remaining)`.
    pub daily: Option<(u64, u64)>,
}

/// All of HubSpot's limits, checked together under one lock so that a request
/// is either admitted by (and recorded in) every applicable policy or by none.
pub(crate) struct Limits {
    ten: Option<Window>,
    search: Option<Window>,
    daily: Option<u64>,
    daily_used: u64,
}

impl Limits {
    pub fn new(
        limit_per_10s: Option<u32>,
        search_per_sec: Option<u32>,
        daily: Option<u64>,
        strict: bool,
    ) -> Self {
        Limits {
            ten: limit_per_10s.map(|n| Window::new(n, Duration::from_secs(10), strict)),
            search: search_per_sec.map(|n| Window::new(n, Duration::from_secs(1), strict)),
            daily,
            daily_used: 0,
        }
    }

    /// Forgets every admission of the rolling windows (the daily count
    /// stays), as if both windows had passed.
    pub fn close_windows(&mut self) {
        for w in [&mut self.ten, &mut self.search].into_iter().flatten() {
            w.log.clear();
        }
    }

    /// Admits a request of another app of the same account (see
    /// `EmulatorConfig::others_share`): it counts toward the 10-second
    /// window only. `false` when the window is full (the other app retries).
    pub fn admit_other(&mut self, now: Instant) -> bool {
        let Some(w) = &mut self.ten else {
            return true;
        };
        let room = w.has_room(now);
        if room {
            w.record(now);
        }
        room
    }

    /// The headers as they stand (after any admission just made).
    pub fn headers(&self) -> RateHeaders {
        RateHeaders {
            ten: self.ten.as_ref().map(|w| (w.limit, w.remaining())),
            daily: self.daily.map(|d| (d, d.saturating_sub(self.daily_used))),
        }
    }

    /// Admits a request arriving `now` or names the policy refusing it. Checked
    /// in the order DAILY, TEN_SECONDLY_ROLLING, then (for searches) SECONDLY;
    /// search requests count toward the 10-second and daily limits too.
    pub fn admit(&mut self, now: Instant, is_search: bool) -> Result<(), Policy> {
        if let Some(d) = self.daily {
            if self.daily_used >= d {
                return Err(Policy::Daily);
            }
        }
        if let Some(w) = &mut self.ten {
            if !w.has_room(now) {
                return Err(Policy::TenSecondly);
            }
        }
        if is_search {
            if let Some(w) = &mut self.search {
                if !w.has_room(now) {
                    return Err(Policy::Secondly);
                }
            }
        }
        self.daily_used += 1;
        if let Some(w) = &mut self.ten {
            w.record(now);
        }
        if is_search {
            if let Some(w) = &mut self.search {
                w.record(now);
            }
        }
        Ok(())
    }
}
