//! Run-window specs: the `--window` text of a nightly job (`yesterday`,
//! `last:24h`, `2026-11-01..2026-11-28`, ...) and how it becomes a half-open
//! [`Window`] of instants.
//!
//! Parsing ([`WindowSpec::from_str`]) needs no clock and no zone; resolving
//! ([`WindowSpec::resolve`]) takes both, so that tests and re-runs are
//! deterministic. Calendar days are midnight to midnight in the job's zone,
//! computed with zoned arithmetic: a day can be 23 or 25 hours long across a
//! DST change, and it starts at the first instant of the day when midnight
//! itself does not exist.

use std::fmt;
use std::str::FromStr;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use recon_core::Window;

/// Every accepted form, for error messages.
const EXPECTED: &str = "today, yesterday, last:24h, a day 2026-11-28, \
     a range 2026-11-01..2026-11-28 (end exclusive), an RFC 3339 range, \
     or since-last-success";

/// The accepted duration forms, for error messages.
const DURATION_FORMS: &str =
    "a number and a unit (d, h, m or s), such as 24h, 90m, 2d, 30s or 1h30m";

/// A parsed window spec, before it is resolved against a clock and a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowSpec {
    /// `today`: the current calendar day in the job's zone, midnight to
    /// midnight (it ends in the future).
    Today,
    /// `yesterday`: the previous calendar day in the job's zone.
    Yesterday,
    /// `last:24h`: `[now - d, now)`, in absolute time (`d` is 24 hours).
    Last(SignedDuration),
    /// `2026-11-28`: that calendar day in the job's zone.
    Day(Date),
    /// `2026-11-01..2026-11-28`: from the start of the first day to the start
    /// of the second (end exclusive), in the job's zone.
    DayRange(Date, Date),
    /// `2026-11-28T00:00:00Z..2026-11-29T00:00:00+01:00`: explicit instants.
    Instants(Timestamp, Timestamp),
    /// `since-last-success`: from the end of the last successful run to now.
    SinceLastSuccess,
}

/// Why a window spec or a duration was refused.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// The text is none of the accepted forms.
    #[error("bad window `{spec}`: {}expected {}", reason_prefix(.reason), EXPECTED)]
    BadSpec {
        /// The spec as given (trimmed).
        spec: String,
        /// What exactly is wrong, when more can be said than "not a form".
        reason: Option<String>,
    },
    /// A range whose end is not after its start.
    #[error(
        "bad window `{spec}`: the end {end} is not after the start {start} \
         (ranges are end exclusive)"
    )]
    EmptyRange {
        /// The spec as given (trimmed), or its canonical form.
        spec: String,
        /// The start as written.
        start: String,
        /// The end as written.
        end: String,
    },
    /// A duration (`last:`, config `lookback` or `grace`) that does not parse.
    #[error("bad duration `{text}`: {reason}; expected {}", DURATION_FORMS)]
    BadDuration {
        /// The duration as given (trimmed).
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `since-last-success` before any run has completed.
    #[error(
        "window since-last-success: no completed run exists yet, so there is \
         nothing to continue from; run once with an explicit window such as \
         `yesterday`"
    )]
    NoLastSuccess,
    /// `since-last-success` when the last success ends at or after now.
    #[error(
        "window since-last-success: the last successful run ended at \
         {last_end}, which is not before now ({now}); nothing to reconcile \
         (is this machine's clock behind?)"
    )]
    LastSuccessNotBeforeNow {
        /// End of the last successful run's window.
        last_end: Timestamp,
        /// The clock reading the spec was resolved against.
        now: Timestamp,
    },
    /// The spec parsed but cannot be turned into instants (out of jiff's
    /// supported range, or a bad value built without parsing).
    #[error("window `{spec}` cannot be resolved in time zone {tz}: {reason}")]
    Unresolvable {
        /// The spec, in canonical form.
        spec: String,
        /// The zone's IANA name, when it has one.
        tz: String,
        /// What went wrong.
        reason: String,
    },
}

fn reason_prefix(reason: &Option<String>) -> String {
    match reason {
        Some(r) => format!("{r}; "),
        None => String::new(),
    }
}

impl FromStr for WindowSpec {
    type Err = WindowError;

    fn from_str(s: &str) -> Result<WindowSpec, WindowError> {
        let spec = s.trim();
        let bad = |reason: Option<String>| WindowError::BadSpec {
            spec: spec.to_string(),
            reason,
        };
        if spec.is_empty() {
            return Err(bad(Some("the window is empty".to_string())));
        }
        let lower = spec.to_ascii_lowercase();
        match lower.as_str() {
            "today" => return Ok(WindowSpec::Today),
            "yesterday" => return Ok(WindowSpec::Yesterday),
            "since-last-success" => return Ok(WindowSpec::SinceLastSuccess),
            _ => {}
        }
        if lower.starts_with("last:") {
            // "last:" is ASCII, so the offset is the same in `spec`.
            let rest = &spec["last:".len()..];
            let d = parse_duration(rest).map_err(|e| match e {
                WindowError::BadDuration { .. } if rest.trim().is_empty() => {
                    bad(Some("missing duration after `last:`".to_string()))
                }
                WindowError::BadDuration { text, reason } => {
                    bad(Some(format!("bad duration `{text}` ({reason})")))
                }
                other => bad(Some(other.to_string())),
            })?;
            if d.is_zero() {
                return Err(bad(Some(
                    "a last: window must be longer than zero".to_string(),
                )));
            }
            return Ok(WindowSpec::Last(d));
        }
        if let Some((a, b)) = spec.split_once("..") {
            let (a, b) = (a.trim(), b.trim());
            let empty = || WindowError::EmptyRange {
                spec: spec.to_string(),
                start: a.to_string(),
                end: b.to_string(),
            };
            return match (looks_like_date(a), looks_like_date(b)) {
                (true, true) => {
                    let start = parse_date(a).map_err(|r| bad(Some(r)))?;
                    let end = parse_date(b).map_err(|r| bad(Some(r)))?;
                    if end <= start {
                        return Err(empty());
                    }
                    Ok(WindowSpec::DayRange(start, end))
                }
                (false, false) => {
                    let start = parse_instant(a).map_err(|r| bad(Some(r)))?;
                    let end = parse_instant(b).map_err(|r| bad(Some(r)))?;
                    if end <= start {
                        return Err(empty());
                    }
                    Ok(WindowSpec::Instants(start, end))
                }
                _ => Err(bad(Some(
                    "both ends of a range must be days (2026-11-01..2026-11-28) \
                     or both RFC 3339 instants"
                        .to_string(),
                ))),
            };
        }
        if looks_like_date(spec) {
            return parse_date(spec)
                .map(WindowSpec::Day)
                .map_err(|r| bad(Some(r)));
        }
        if spec.parse::<Timestamp>().is_ok() {
            return Err(bad(Some(
                "a single instant is not a window; give a range start..end".to_string(),
            )));
        }
        Err(bad(None))
    }
}

/// Whether `s` has the shape `YYYY-MM-DD` (validity is jiff's business).
fn looks_like_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

fn parse_date(s: &str) -> Result<Date, String> {
    s.parse::<Date>()
        .map_err(|e| format!("`{s}` is not a valid date: {e}"))
}

fn parse_instant(s: &str) -> Result<Timestamp, String> {
    s.parse::<Timestamp>().map_err(|e| {
        format!("`{s}` is not an RFC 3339 instant with an offset (like 2026-11-28T00:00:00Z): {e}")
    })
}

impl fmt::Display for WindowSpec {
    /// The canonical text, which parses back to the same spec (durations
    /// are written in h, m and s: `last:2d` displays as `last:48h`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowSpec::Today => f.write_str("today"),
            WindowSpec::Yesterday => f.write_str("yesterday"),
            WindowSpec::Last(d) => {
                f.write_str("last:")?;
                write_duration(f, *d)
            }
            WindowSpec::Day(d) => write!(f, "{d}"),
            WindowSpec::DayRange(a, b) => write!(f, "{a}..{b}"),
            WindowSpec::Instants(a, b) => write!(f, "{a}..{b}"),
            WindowSpec::SinceLastSuccess => f.write_str("since-last-success"),
        }
    }
}

/// Writes a duration as `1h30m`; sub-second parts as fractional seconds.
fn write_duration(f: &mut fmt::Formatter<'_>, d: SignedDuration) -> fmt::Result {
    if d.is_negative() {
        f.write_str("-")?;
    }
    let secs = d.as_secs().unsigned_abs();
    let nanos = d.subsec_nanos().unsigned_abs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        write!(f, "{h}h")?;
    }
    if m > 0 {
        write!(f, "{m}m")?;
    }
    if s > 0 || nanos > 0 || secs == 0 {
        write!(f, "{s}")?;
        if nanos > 0 {
            let frac = format!("{nanos:09}");
            write!(f, ".{}", frac.trim_end_matches('0'))?;
        }
        f.write_str("s")?;
    }
    Ok(())
}

impl WindowSpec {
    /// The half-open window `[start, end)` this spec means at `now` in `tz`.
    ///
    /// `last_success_end` is the end of the last successful run's window,
    /// used only by `since-last-success`. Windows in the future are allowed.
    pub fn resolve(
        &self,
        now: Timestamp,
        tz: &TimeZone,
        last_success_end: Option<Timestamp>,
    ) -> Result<Window, WindowError> {
        let unresolvable = |reason: String| WindowError::Unresolvable {
            spec: self.to_string(),
            tz: tz.iana_name().unwrap_or("(unnamed)").to_string(),
            reason,
        };
        let today = || now.to_zoned_datetime(tz.clone()).date();
        let (start, end) = match self {
            WindowSpec::Today => day_bounds(today(), tz).map_err(unresolvable)?,
            WindowSpec::Yesterday => {
                let day = today()
                    .yesterday()
                    .map_err(|e| unresolvable(e.to_string()))?;
                day_bounds(day, tz).map_err(unresolvable)?
            }
            WindowSpec::Day(day) => day_bounds(*day, tz).map_err(unresolvable)?,
            WindowSpec::DayRange(a, b) => {
                if b <= a {
                    return Err(WindowError::EmptyRange {
                        spec: self.to_string(),
                        start: a.to_string(),
                        end: b.to_string(),
                    });
                }
                let start = start_of_day(*a, tz).map_err(&unresolvable)?;
                let end = start_of_day(*b, tz).map_err(&unresolvable)?;
                (start, end)
            }
            WindowSpec::Instants(a, b) => {
                if b <= a {
                    return Err(WindowError::EmptyRange {
                        spec: self.to_string(),
                        start: a.to_string(),
                        end: b.to_string(),
                    });
                }
                (*a, *b)
            }
            WindowSpec::Last(d) => {
                if !d.is_positive() {
                    return Err(unresolvable(
                        "a last: window must be longer than zero".to_string(),
                    ));
                }
                let start = now
                    .checked_sub(*d)
                    .map_err(|e| unresolvable(e.to_string()))?;
                (start, now)
            }
            WindowSpec::SinceLastSuccess => {
                let last_end = last_success_end.ok_or(WindowError::NoLastSuccess)?;
                if last_end >= now {
                    return Err(WindowError::LastSuccessNotBeforeNow { last_end, now });
                }
                (last_end, now)
            }
        };
        Ok(Window { start, end })
    }
}

/// The first instant of `day` in `tz`: local midnight, or the first instant
/// after a DST gap when midnight does not exist that day.
fn start_of_day(day: Date, tz: &TimeZone) -> Result<Timestamp, String> {
    day.to_zoned_datetime(tz.clone())
        .map(|z| z.timestamp())
        .map_err(|e| e.to_string())
}

/// `[start of day, start of the next day)` in `tz`.
fn day_bounds(day: Date, tz: &TimeZone) -> Result<(Timestamp, Timestamp), String> {
    let next = day.tomorrow().map_err(|e| e.to_string())?;
    Ok((start_of_day(day, tz)?, start_of_day(next, tz)?))
}

pub use recon_core::parse::MAX_DURATION_DAYS;

/// Parses a duration such as `24h`, `90m`, `2d`, `30s` or `1h30m`
/// ([`recon_core::parse::duration`], the one duration syntax of every
/// setting).
pub fn parse_duration(s: &str) -> Result<SignedDuration, WindowError> {
    recon_core::parse::duration(s).map_err(|e| WindowError::BadDuration {
        text: e.text,
        reason: e.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap_or_else(|e| panic!("time zone {name}: {e}"))
    }

    /// Parses and resolves `spec`, returning `(start, end)` as RFC 3339.
    fn resolve_at(spec: &str, now: &str, tz: &str) -> (String, String) {
        let w = spec
            .parse::<WindowSpec>()
            .unwrap_or_else(|e| panic!("{spec}: {e}"))
            .resolve(ts(now), &zone(tz), None)
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        (w.start.to_string(), w.end.to_string())
    }

    fn length(spec: &str, now: &str, tz: &str) -> SignedDuration {
        let (start, end) = resolve_at(spec, now, tz);
        ts(&end) - ts(&start)
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    fn parse_err(spec: &str) -> String {
        match spec.parse::<WindowSpec>() {
            Ok(w) => panic!("{spec:?} parsed as {w:?}"),
            Err(e) => e.to_string(),
        }
    }

    // 10:00 in New York (EST, -05:00).
    const NOW: &str = "2026-11-28T15:00:00Z";

    #[test]
    fn today_and_yesterday_in_new_york() {
        assert_eq!(
            resolve_at("today", NOW, "America/New_York"),
            pair("2026-11-28T05:00:00Z", "2026-11-29T05:00:00Z")
        );
        assert_eq!(
            resolve_at("yesterday", NOW, "America/New_York"),
            pair("2026-11-27T05:00:00Z", "2026-11-28T05:00:00Z")
        );
    }

    #[test]
    fn today_uses_the_local_date_not_the_utc_date() {
        // 00:30 local in New York.
        assert_eq!(
            resolve_at("today", "2026-11-28T05:30:00Z", "America/New_York"),
            pair("2026-11-28T05:00:00Z", "2026-11-29T05:00:00Z")
        );
        // 22:00 local on the 28th is already the 29th in UTC.
        assert_eq!(
            resolve_at("today", "2026-11-29T03:00:00Z", "America/New_York"),
            pair("2026-11-28T05:00:00Z", "2026-11-29T05:00:00Z")
        );
        // 00:30 local in Kolkata is still the 27th in UTC.
        assert_eq!(
            resolve_at("today", "2026-11-27T19:00:00Z", "Asia/Kolkata"),
            pair("2026-11-27T18:30:00Z", "2026-11-28T18:30:00Z")
        );
        assert_eq!(
            resolve_at("yesterday", "2026-11-27T19:00:00Z", "Asia/Kolkata"),
            pair("2026-11-26T18:30:00Z", "2026-11-27T18:30:00Z")
        );
    }

    #[test]
    fn dst_days_in_new_york_are_23_and_25_hours() {
        let ny = "America/New_York";
        assert_eq!(
            resolve_at("2026-03-08", NOW, ny),
            pair("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z")
        );
        assert_eq!(
            length("2026-03-08", NOW, ny),
            SignedDuration::from_hours(23)
        );
        assert_eq!(
            resolve_at("2026-11-01", NOW, ny),
            pair("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z")
        );
        assert_eq!(
            length("2026-11-01", NOW, ny),
            SignedDuration::from_hours(25)
        );
        // An ordinary day either side.
        assert_eq!(
            length("2026-03-09", NOW, ny),
            SignedDuration::from_hours(24)
        );
        assert_eq!(
            length("2026-10-31", NOW, ny),
            SignedDuration::from_hours(24)
        );
    }

    #[test]
    fn yesterday_after_spring_forward_is_the_23_hour_day() {
        // 12:00 EDT on 2026-03-09.
        let now = "2026-03-09T16:00:00Z";
        assert_eq!(
            resolve_at("yesterday", now, "America/New_York"),
            pair("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z")
        );
        assert_eq!(
            length("yesterday", now, "America/New_York"),
            SignedDuration::from_hours(23)
        );
    }

    #[test]
    fn today_on_fall_back_day_is_25_hours() {
        // 12:00 EST on 2026-11-01.
        assert_eq!(
            resolve_at("today", "2026-11-01T17:00:00Z", "America/New_York"),
            pair("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z")
        );
    }

    #[test]
    fn london_days() {
        let l = "Europe/London";
        // GMT.
        assert_eq!(
            resolve_at("2026-11-28", NOW, l),
            pair("2026-11-28T00:00:00Z", "2026-11-29T00:00:00Z")
        );
        // BST (+01:00).
        assert_eq!(
            resolve_at("2026-07-15", NOW, l),
            pair("2026-07-14T23:00:00Z", "2026-07-15T23:00:00Z")
        );
        // Clocks go forward on 2026-03-29, back on 2026-10-25.
        assert_eq!(
            resolve_at("2026-03-29", NOW, l),
            pair("2026-03-29T00:00:00Z", "2026-03-29T23:00:00Z")
        );
        assert_eq!(
            resolve_at("2026-10-25", NOW, l),
            pair("2026-10-24T23:00:00Z", "2026-10-26T00:00:00Z")
        );
        assert_eq!(length("2026-10-25", NOW, l), SignedDuration::from_hours(25));
    }

    #[test]
    fn kolkata_day_is_offset_by_five_and_a_half_hours() {
        assert_eq!(
            resolve_at("2026-11-28", NOW, "Asia/Kolkata"),
            pair("2026-11-27T18:30:00Z", "2026-11-28T18:30:00Z")
        );
    }

    #[test]
    fn day_whose_midnight_does_not_exist_starts_after_the_gap() {
        // São Paulo moved clocks from 00:00 to 01:00 (-02:00) on 2015-10-18.
        assert_eq!(
            resolve_at("2015-10-18", NOW, "America/Sao_Paulo"),
            pair("2015-10-18T03:00:00Z", "2015-10-19T02:00:00Z")
        );
    }

    #[test]
    fn last_is_absolute_time_before_now() {
        let ny = "America/New_York";
        assert_eq!(
            resolve_at("last:24h", NOW, ny),
            pair("2026-11-27T15:00:00Z", NOW)
        );
        assert_eq!(
            resolve_at("last:90m", NOW, ny),
            pair("2026-11-28T13:30:00Z", NOW)
        );
        assert_eq!(
            resolve_at("last:1h30m", NOW, ny),
            pair("2026-11-28T13:30:00Z", NOW)
        );
        // 2d is 48 hours even across the spring-forward day.
        assert_eq!(
            resolve_at("last:2d", "2026-03-09T16:00:00Z", ny),
            pair("2026-03-07T16:00:00Z", "2026-03-09T16:00:00Z")
        );
        assert_eq!(
            "last:2d".parse::<WindowSpec>().unwrap(),
            WindowSpec::Last(SignedDuration::from_hours(48))
        );
    }

    #[test]
    fn day_and_day_range() {
        let ny = "America/New_York";
        assert_eq!(
            resolve_at("2026-11-28", NOW, ny),
            pair("2026-11-28T05:00:00Z", "2026-11-29T05:00:00Z")
        );
        // Starts on the 25-hour day (EDT), ends in EST; end exclusive.
        assert_eq!(
            resolve_at("2026-11-01..2026-11-28", NOW, ny),
            pair("2026-11-01T04:00:00Z", "2026-11-28T05:00:00Z")
        );
        assert_eq!(
            "2026-11-01..2026-11-28".parse::<WindowSpec>().unwrap(),
            WindowSpec::DayRange(
                jiff::civil::date(2026, 11, 1),
                jiff::civil::date(2026, 11, 28)
            )
        );
        // A one-day range equals the day.
        assert_eq!(
            resolve_at("2026-11-28..2026-11-29", NOW, ny),
            resolve_at("2026-11-28", NOW, ny)
        );
    }

    #[test]
    fn instant_range() {
        assert_eq!(
            resolve_at(
                "2026-11-28T00:00:00Z..2026-11-29T00:00:00+01:00",
                NOW,
                "America/New_York"
            ),
            pair("2026-11-28T00:00:00Z", "2026-11-28T23:00:00Z")
        );
        // The zone does not matter for instants.
        assert_eq!(
            resolve_at(
                "2026-11-28T00:00:00Z..2026-11-29T00:00:00+01:00",
                NOW,
                "Asia/Kolkata"
            ),
            pair("2026-11-28T00:00:00Z", "2026-11-28T23:00:00Z")
        );
    }

    #[test]
    fn future_windows_are_allowed() {
        assert_eq!(
            resolve_at("2027-01-01", NOW, "Europe/London"),
            pair("2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z")
        );
        assert_eq!(
            resolve_at("2027-01-01T00:00:00Z..2027-01-02T00:00:00Z", NOW, "UTC"),
            pair("2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z")
        );
    }

    #[test]
    fn whitespace_and_case() {
        let cases = [
            ("  TODAY ", WindowSpec::Today),
            ("Yesterday\n", WindowSpec::Yesterday),
            ("\tSince-Last-Success", WindowSpec::SinceLastSuccess),
            (
                " LAST:24H ",
                WindowSpec::Last(SignedDuration::from_hours(24)),
            ),
            (
                " 2026-11-28 ",
                WindowSpec::Day(jiff::civil::date(2026, 11, 28)),
            ),
            (
                "2026-11-01 .. 2026-11-28",
                WindowSpec::DayRange(
                    jiff::civil::date(2026, 11, 1),
                    jiff::civil::date(2026, 11, 28),
                ),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<WindowSpec>().unwrap(), want, "{text:?}");
        }
    }

    #[test]
    fn reversed_or_empty_ranges_are_errors() {
        for spec in [
            "2026-11-28..2026-11-01",
            "2026-11-28..2026-11-28",
            "2026-11-29T00:00:00Z..2026-11-28T00:00:00Z",
            // Same instant written with two offsets.
            "2026-11-28T01:00:00+01:00..2026-11-28T00:00:00Z",
        ] {
            let e = spec.parse::<WindowSpec>().unwrap_err();
            assert!(matches!(e, WindowError::EmptyRange { .. }), "{spec}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(spec), "{msg}");
            assert!(msg.contains("not after the start"), "{msg}");
        }
        // Built without parsing, caught at resolve time.
        let d = jiff::civil::date(2026, 11, 28);
        let e = WindowSpec::DayRange(d, d)
            .resolve(ts(NOW), &zone("UTC"), None)
            .unwrap_err();
        assert!(matches!(e, WindowError::EmptyRange { .. }), "{e:?}");
    }

    #[test]
    fn bad_specs_name_the_text_and_the_accepted_forms() {
        for spec in [
            "yesterdy",
            "last:",
            "last:5x",
            "last:-1h",
            "last:0h",
            "2026-13-01",
            "2026-02-30",
            "2026-11-28..2026-11-01",
            "2026-11-01..2026-11-28T00:00:00Z",
            "2026-11-28T00:00:00..2026-11-29T00:00:00",
            "2026-11-28T00:00:00Z",
            "..",
            "today..",
            "",
            "last 24h",
        ] {
            let msg = parse_err(spec);
            assert!(msg.contains(&format!("`{spec}`")), "{spec:?}: {msg}");
        }
        assert_eq!(
            parse_err("yesterdy"),
            "bad window `yesterdy`: expected today, yesterday, last:24h, a day \
             2026-11-28, a range 2026-11-01..2026-11-28 (end exclusive), an RFC \
             3339 range, or since-last-success"
        );
        let msg = parse_err("last:5x");
        assert!(msg.contains("unknown unit `x`"), "{msg}");
        assert!(msg.contains("expected today, yesterday"), "{msg}");
        let msg = parse_err("2026-13-01");
        assert!(msg.contains("not a valid date"), "{msg}");
        assert!(msg.contains("expected today, yesterday"), "{msg}");
        let msg = parse_err("2026-11-28T00:00:00Z");
        assert!(msg.contains("single instant"), "{msg}");
        let msg = parse_err("2026-11-28T00:00:00..2026-11-29T00:00:00");
        assert!(msg.contains("RFC 3339 instant with an offset"), "{msg}");
        let msg = parse_err("2026-11-01..2026-11-28T00:00:00Z");
        assert!(msg.contains("both ends"), "{msg}");
    }

    #[test]
    fn since_last_success() {
        let spec: WindowSpec = "since-last-success".parse().unwrap();
        let tz = zone("America/New_York");
        let w = spec
            .resolve(ts(NOW), &tz, Some(ts("2026-11-27T05:00:00Z")))
            .unwrap();
        assert_eq!(w.start.to_string(), "2026-11-27T05:00:00Z");
        assert_eq!(w.end.to_string(), NOW);

        let e = spec.resolve(ts(NOW), &tz, None).unwrap_err();
        assert!(matches!(e, WindowError::NoLastSuccess), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("no completed run exists yet"), "{msg}");
        assert!(msg.contains("`yesterday`"), "{msg}");

        // A last success at or after now: the clock went backwards.
        for last in [NOW, "2026-11-28T16:00:00Z"] {
            let e = spec.resolve(ts(NOW), &tz, Some(ts(last))).unwrap_err();
            assert!(
                matches!(e, WindowError::LastSuccessNotBeforeNow { .. }),
                "{e:?}"
            );
        }
        // Other specs ignore the last success.
        let w = WindowSpec::Yesterday
            .resolve(ts(NOW), &tz, Some(ts("2020-01-01T00:00:00Z")))
            .unwrap();
        assert_eq!(w.start.to_string(), "2026-11-27T05:00:00Z");
    }

    #[test]
    fn last_out_of_range_or_not_positive_is_an_error_not_a_panic() {
        let tz = zone("UTC");
        let e = "last:999999999d".parse::<WindowSpec>().unwrap_err();
        assert!(e.to_string().contains("the maximum is 36500d"), "{e}");
        let e = WindowSpec::Last(SignedDuration::from_secs(999_999_999 * 86_400))
            .resolve(ts(NOW), &tz, None)
            .unwrap_err();
        assert!(matches!(e, WindowError::Unresolvable { .. }), "{e:?}");
        for d in [SignedDuration::ZERO, SignedDuration::from_hours(-1)] {
            let e = WindowSpec::Last(d).resolve(ts(NOW), &tz, None).unwrap_err();
            assert!(matches!(e, WindowError::Unresolvable { .. }), "{e:?}");
        }
    }

    #[test]
    fn parse_duration_forms() {
        let h = SignedDuration::from_hours;
        let m = SignedDuration::from_mins;
        let s = SignedDuration::from_secs;
        for (text, want) in [
            ("24h", h(24)),
            ("90m", m(90)),
            ("2d", h(48)),
            ("30s", s(30)),
            ("1h30m", m(90)),
            ("1d2h3m4s", s(86_400 + 2 * 3_600 + 3 * 60 + 4)),
            ("0s", s(0)),
            (" 15M ", m(15)),
            ("36H", h(36)),
            ("36500d", h(36_500 * 24)),
            ("876000h", h(876_000)),
        ] {
            assert_eq!(parse_duration(text).unwrap(), want, "{text:?}");
        }
    }

    #[test]
    fn parse_duration_errors() {
        for (text, reason) in [
            ("", "it is empty"),
            ("   ", "it is empty"),
            ("5", "`5` has no unit"),
            ("h", "expected a number before `h`"),
            ("-1h", "negative durations are not allowed"),
            ("5x", "unknown unit `x`"),
            ("1.5h", "fractions are not supported"),
            ("30m1h", "largest to smallest"),
            ("1h1h", "largest to smallest"),
            ("1h30", "`30` has no unit"),
            ("1h 30m", "expected a number before ` 30m`"),
            ("99999999999999999999h", "too large"),
            ("9999999999999999d", "too large"),
            ("36501d", "the maximum is 36500d (100 years)"),
            ("36500d1s", "the maximum is 36500d"),
            ("876001h", "the maximum is 36500d"),
            ("99999999999999999999h", "the maximum is 36500d"),
        ] {
            let e = parse_duration(text).unwrap_err();
            assert!(matches!(e, WindowError::BadDuration { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("`{}`", text.trim())), "{msg}");
            assert!(msg.contains(reason), "{text:?}: {msg}");
            assert!(msg.contains("such as 24h, 90m, 2d, 30s or 1h30m"), "{msg}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "today",
            "yesterday",
            "since-last-success",
            "last:24h",
            "last:1h30m",
            "last:45s",
            "2026-11-28",
            "2026-11-01..2026-11-28",
            "2026-11-28T00:00:00Z..2026-11-28T23:00:00Z",
        ] {
            let spec: WindowSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(spec.to_string().parse::<WindowSpec>().unwrap(), spec);
        }
        assert_eq!(
            "last:2d".parse::<WindowSpec>().unwrap().to_string(),
            "last:48h"
        );
        // Instants are shown in UTC.
        assert_eq!(
            "2026-11-28T00:00:00Z..2026-11-29T00:00:00+01:00"
                .parse::<WindowSpec>()
                .unwrap()
                .to_string(),
            "2026-11-28T00:00:00Z..2026-11-28T23:00:00Z"
        );
    }
}
