//! The org's daily API allowance: what `Sforce-Limit-Info` reports on every
//! response, and the guard that refuses a write that would take more than
//! a share of what remains.
//!
//! Every REST response carries `Sforce-Limit-Info: api-usage=N/M`, N the
//! calls the org used in the last 24 hours (this one included) and M its
//! allowance ("Limit Info Header", REST API Developer Guide:
//! https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/headers_api_usage.htm);
//! `GET /limits` reports `DailyApiRequests` {Max, Remaining} ("Limits",
//! same guide). Past the allowance Salesforce answers 403
//! `REQUEST_LIMIT_EXCEEDED` ("Status Codes and Error Responses",
//! https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/errorcodes.htm),
//! which is final: nothing recon waits for brings calls back within a run.

use std::sync::{Arc, Mutex};

/// Calls the org used and its daily allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiUsage {
    /// Calls used in the last 24 hours.
    pub used: u64,
    /// The org's allowance.
    pub max: u64,
}

impl ApiUsage {
    /// Calls left before the allowance is spent.
    pub fn remaining(&self) -> u64 {
        self.max.saturating_sub(self.used)
    }
}

/// Reads `api-usage=N/M` from an `Sforce-Limit-Info` value such as
/// `api-usage=25/5000; per-app-api-usage=17/250(appName=sample)`.
pub fn parse_limit_info(value: &str) -> Option<ApiUsage> {
    value.split(';').find_map(|part| {
        let (name, figures) = part.trim().split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("api-usage") {
            return None;
        }
        let (used, max) = figures.trim().split_once('/')?;
        Some(ApiUsage {
            used: used.trim().parse().ok()?,
            max: max.trim().parse().ok()?,
        })
    })
}

/// The latest usage seen, shared by every clone of a connector. Answers
/// can arrive out of order, so within one allowance the highest count wins.
#[derive(Clone, Debug, Default)]
pub struct UsageTracker(Arc<Mutex<Option<ApiUsage>>>);

impl UsageTracker {
    /// Notes a usage report.
    pub fn note(&self, u: ApiUsage) {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some(match *last {
            Some(prev) if prev.max == u.max && prev.used > u.used => prev,
            _ => u,
        });
    }

    /// The latest usage, if any response has reported one.
    pub fn latest(&self) -> Option<ApiUsage> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Refuses `needed` calls when they exceed `share` of what remains of the
/// org's allowance; the message gives the figures and the ways out.
pub fn check_share(what: &str, needed: u64, usage: ApiUsage, share: f64) -> Result<(), String> {
    let remaining = usage.remaining();
    let allowed = (remaining as f64 * share).floor() as u64;
    if needed <= allowed {
        return Ok(());
    }
    Err(format!(
        "Salesforce daily API allowance: {what} needs about {needed} API calls, but the org has used {} of its {} calls in the last 24 hours ({remaining} remain) and daily_share = {share} lets one run use at most {allowed} of them, leaving the rest to the org's other integrations; nothing was written. Run again when the org has more calls left (usage falls as the 24-hour window rolls on), write fewer records (backfill.max_records), or raise daily_share",
        usage.used, usage.max
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_info_is_read_with_or_without_other_parts() {
        assert_eq!(
            parse_limit_info("api-usage=18/5000"),
            Some(ApiUsage {
                used: 18,
                max: 5000
            })
        );
        assert_eq!(
            parse_limit_info(
                "api-usage=25/5000; per-app-api-usage=17/250(appName=sample-connected-app)"
            ),
            Some(ApiUsage {
                used: 25,
                max: 5000
            })
        );
        assert_eq!(
            parse_limit_info("per-app-api-usage=17/250(appName=x); api-usage=10018/100000"),
            Some(ApiUsage {
                used: 10018,
                max: 100000
            })
        );
        assert_eq!(parse_limit_info("api-usage=x/5000"), None);
        assert_eq!(parse_limit_info(""), None);
    }

    #[test]
    fn tracker_keeps_the_highest_count_of_an_allowance() {
        let t = UsageTracker::default();
        assert_eq!(t.latest(), None);
        t.note(ApiUsage { used: 10, max: 100 });
        t.note(ApiUsage { used: 8, max: 100 });
        assert_eq!(t.latest(), Some(ApiUsage { used: 10, max: 100 }));
        t.note(ApiUsage { used: 3, max: 200 });
        assert_eq!(t.latest(), Some(ApiUsage { used: 3, max: 200 }));
    }

    #[test]
    fn the_share_guard_refuses_with_figures() {
        let usage = ApiUsage {
            used: 99_000,
            max: 100_000,
        };
        assert!(check_share("the write", 500, usage, 0.5).is_ok());
        let e = check_share("writing 20000 records", 501, usage, 0.5).unwrap_err();
        for figure in [
            "501",
            "99000",
            "100000",
            "1000 remain",
            "500",
            "daily_share = 0.5",
        ] {
            assert!(e.contains(figure), "{figure} missing from: {e}");
        }
        let spent = ApiUsage {
            used: 100_001,
            max: 100_000,
        };
        assert!(check_share("x", 1, spent, 1.0).is_err());
        assert!(check_share("x", 0, spent, 1.0).is_ok());
    }
}
