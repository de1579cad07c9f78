//! Typed parsing of text shared by every connector and the binary:
//!
//! - [`duration`]: the one duration syntax of every setting (`24h`, `1h30m`).
//! - [`timestamp`]: one timestamp parser; [`TimestampRules`] names what
//!   genuinely differs between sources (the unit of a bare integer, whether
//!   a date and time without offset or a date alone is read as UTC), with a
//!   preset per source.
//! - [`value`] / [`value_ref`]: text to a [`Value`] of a [`FieldKind`]
//!   (whole numbers, currency codes, amounts by [`AmountFormat`],
//!   timestamps by rules).
//!
//! Errors say what is wrong with the text; each caller places them (file
//! and line, table and column, HubSpot object and property, plan line).

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::error::ConnectorError;
use crate::money::{Currency, Money, MoneyError};
use crate::record::{AmountFormat, FieldKind, Value, ValueRef};

/// A duration that could not be parsed: the text and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad duration `{text}`: {reason}")]
pub struct DurationError {
    /// The duration as given (trimmed).
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The longest duration [`duration`] accepts, in days: 100 years
/// (36500d). Longer ones are refused rather than overflowing later, when
/// the duration is subtracted from an instant.
pub const MAX_DURATION_DAYS: i64 = 36_500;

/// Parses a duration such as `24h`, `90m`, `2d` (24 hours), `30s` or
/// `1h30m`: numbers each followed by a unit, largest unit first, each unit at
/// most once. Zero is allowed; negative and fractional values are not, nor
/// anything longer than [`MAX_DURATION_DAYS`].
pub fn duration(s: &str) -> Result<SignedDuration, DurationError> {
    let text = s.trim();
    let err = |reason: String| DurationError {
        text: text.to_string(),
        reason,
    };
    if text.is_empty() {
        return Err(err("it is empty".to_string()));
    }
    if text.starts_with('-') {
        return Err(err("negative durations are not allowed".to_string()));
    }
    let mut total: i64 = 0;
    let mut prev_rank: Option<u8> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err(format!("expected a number before `{rest}`")));
        }
        let (num, after) = rest.split_at(digits);
        let Some(unit) = after.chars().next() else {
            return Err(err(format!("`{num}` has no unit")));
        };
        let (rank, unit_secs): (u8, i64) = match unit.to_ascii_lowercase() {
            'd' => (0, 86_400),
            'h' => (1, 3_600),
            'm' => (2, 60),
            's' => (3, 1),
            '.' | ',' => {
                return Err(err(
                    "fractions are not supported (write 1h30m, not 1.5h)".to_string()
                ))
            }
            _ => return Err(err(format!("unknown unit `{unit}`"))),
        };
        if prev_rank.is_some_and(|p| rank <= p) {
            return Err(err(
                "units must go from largest to smallest, each at most once".to_string(),
            ));
        }
        prev_rank = Some(rank);
        let too_large = || {
            err(format!(
                "it is too large; the maximum is {MAX_DURATION_DAYS}d (100 years)"
            ))
        };
        total = num
            .parse::<i64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_secs))
            .and_then(|v| total.checked_add(v))
            .filter(|&t| t <= MAX_DURATION_DAYS * 86_400)
            .ok_or_else(too_large)?;
        rest = &after[unit.len_utf8()..];
    }
    Ok(SignedDuration::from_secs(total))
}

/// A setting that must be a positive duration (`rate_limit_patience =
/// "15m"`), as a `std` duration; the error names the setting and the fix.
pub fn positive_duration(text: &str, setting: &str) -> Result<std::time::Duration, ConnectorError> {
    let d = duration(text)
        .map_err(|e| ConnectorError::Config(format!("{setting} = \"{text}\": {}", e.reason)))?;
    std::time::Duration::try_from(d)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ConnectorError::Config(format!(
                "{setting} = \"{text}\": must be longer than zero, e.g. \"15m\""
            ))
        })
}

/// What a bare integer (`1764374399`, `-5`) counts when read as a timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Unix seconds (files, SQL integer and time columns, Stripe).
    Seconds,
    /// Unix milliseconds (HubSpot).
    Milliseconds,
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unit::Seconds => "seconds",
            Unit::Milliseconds => "milliseconds",
        })
    }
}

/// Which timestamp forms a source writes, besides RFC 3339.
///
/// An instant with an offset is always accepted: RFC 3339 such as
/// `2026-11-28T23:59:59Z` or `2026-11-28T18:59:59-05:00`, as jiff reads
/// it (ISO 8601: a space instead of `T`, fractional seconds, a bracketed
/// zone after the offset). Text without an offset names no instant by
/// itself, so each rule below that reads one as UTC is a decision about a
/// source, taken where the source is known to mean UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimestampRules {
    /// The unit of a bare integer with an optional sign; `None` refuses
    /// integers.
    pub integers: Option<Unit>,
    /// Whether a date and time without offset (`2026-11-28 23:59:59`,
    /// `2026-11-28T23:59:59`, fractional seconds allowed) is read as UTC.
    /// Never with a bracketed zone (`…[Europe/Paris]`): that is not UTC.
    pub naive_is_utc: bool,
    /// Whether a date alone (`2026-11-28`) is read as midnight UTC. A date
    /// with a time is never cut to its date.
    pub date_is_midnight_utc: bool,
}

impl TimestampRules {
    /// RFC 3339 only: plan lines (written by recon in UTC) and Shopify's
    /// `DateTime` scalars.
    pub const RFC3339: TimestampRules = TimestampRules {
        integers: None,
        naive_is_utc: false,
        date_is_midnight_utc: false,
    };

    /// Export files: Unix seconds or RFC 3339. A file says nothing about
    /// its zone, so text without an offset is refused rather than guessed.
    pub const FILE: TimestampRules = TimestampRules {
        integers: Some(Unit::Seconds),
        ..TimestampRules::RFC3339
    };

    /// SQL values read as text: Unix seconds (integer columns, and time
    /// columns, which are read as epoch seconds), RFC 3339, and text
    /// without an offset as UTC, the session zone recon sets at connect
    /// (`YYYY-MM-DD HH:MM:SS`, or a date alone at midnight).
    pub const SQL: TimestampRules = TimestampRules {
        integers: Some(Unit::Seconds),
        naive_is_utc: true,
        date_is_midnight_utc: true,
    };

    /// HubSpot: datetime properties in Unix milliseconds or RFC 3339, date
    /// properties as `YYYY-MM-DD`, which HubSpot stores at midnight UTC.
    pub const HUBSPOT: TimestampRules = TimestampRules {
        integers: Some(Unit::Milliseconds),
        naive_is_utc: false,
        date_is_midnight_utc: true,
    };

    /// What these rules accept, for messages: `Unix seconds or RFC 3339
    /// such as 2026-11-28T23:59:59Z`.
    pub fn expected(&self) -> String {
        let mut forms: Vec<String> = Vec::with_capacity(4);
        if let Some(unit) = self.integers {
            forms.push(format!("Unix {unit}"));
        }
        forms.push("RFC 3339 such as 2026-11-28T23:59:59Z".to_string());
        if self.naive_is_utc {
            forms.push("YYYY-MM-DD HH:MM:SS in UTC".to_string());
        }
        if self.date_is_midnight_utc {
            forms.push("a date YYYY-MM-DD (midnight UTC)".to_string());
        }
        match forms.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => forms.concat(),
        }
    }
}

/// Text that is not a timestamp under the rules it was read with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimestampError {
    /// Not in any form the rules accept.
    #[error("`{text}` is not a timestamp; expected {}", rules.expected())]
    Form {
        /// The text as given.
        text: String,
        /// The rules it was read with.
        rules: TimestampRules,
    },
    /// A Unix time outside the years -9999 to 9999.
    #[error("`{value}` Unix {unit} is out of range (years -9999 to 9999)")]
    Range {
        /// The number as given.
        value: i64,
        /// Its unit.
        unit: Unit,
    },
}

/// The instant `n` seconds or milliseconds after the Unix epoch (before it
/// when negative).
pub fn unix(n: i64, unit: Unit) -> Result<Timestamp, TimestampError> {
    from_unix(n, unit).map_err(|_| TimestampError::Range { value: n, unit })
}

/// [`unix`] with jiff's own error, always inlined: the file reader's
/// [`timestamp_fast`] calls it per cell, where a call to `unix` (not
/// inlined) returned its `Result` through memory (2% of a Unix-seconds
/// read, and the reload after it).
#[inline(always)]
fn from_unix(n: i64, unit: Unit) -> Result<Timestamp, jiff::Error> {
    match unit {
        Unit::Seconds => Timestamp::from_second(n),
        Unit::Milliseconds => Timestamp::from_millisecond(n),
    }
}

pub use crate::money::{plain_amount, plain_integer};

/// The value of each byte of `x`, when every one is an ASCII digit
/// (0x30..=0x39: high nibble 3, and still 3 after adding 6; no byte
/// carries, each is at most 0x3F once the first test holds); `None` else.
#[inline(always)]
fn digit_values(x: u64) -> Option<u64> {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    if x & HIGH != DIGIT_ZEROS || x.wrapping_add(0x0606_0606_0606_0606) & HIGH != DIGIT_ZEROS {
        return None;
    }
    Some(x - DIGIT_ZEROS)
}

/// Eight ASCII `0`s.
const DIGIT_ZEROS: u64 = 0x3030_3030_3030_3030;

/// The little-endian word of the eight bytes at `at` (always inlined: the
/// file reader's loop reads digits through it).
#[inline(always)]
fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes([
        b[at],
        b[at + 1],
        b[at + 2],
        b[at + 3],
        b[at + 4],
        b[at + 5],
        b[at + 6],
        b[at + 7],
    ])
}

/// The number that 1 to 18 ASCII digits spell (leading zeros allowed, no
/// sign); `None` for anything else. Eight digits at a time: one check and
/// three multiplies per eight instead of a dependent multiply-add per
/// digit (a Unix time has ten). Shared by the plain-integer reads here and
/// the diff engine's digit form of text.
#[inline]
pub fn ascii_digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 18 {
        return None;
    }
    if s.len() == 10 {
        return ten_digits(s);
    }
    let mut v = 0u64;
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        // The first digit is the lowest byte: fold pairs, quads, then halves.
        let d = digit_values(word(c, 0))?;
        let d = (d * 10 + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
        let d = (d * 100 + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
        let d = (d * 10_000 + (d >> 32)) & 0xFFFF_FFFF;
        v = v * 100_000_000 + d;
    }
    for &b in chunks.remainder() {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

/// [`ascii_digits`] of ten bytes (a Unix time in seconds, 2001 to 2286):
/// the first eight as a word, the last two as the top of a word of `0`s,
/// both checked at once; no loop over the last digits.
#[inline(always)]
fn ten_digits(s: &[u8]) -> Option<u64> {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    let first = word(s, 0);
    let last = (u64::from(u16::from_le_bytes([s[8], s[9]])) << 48) | (DIGIT_ZEROS >> 16);
    let bad = |x: u64| {
        ((x & HIGH) ^ DIGIT_ZEROS) | ((x.wrapping_add(0x0606_0606_0606_0606) & HIGH) ^ DIGIT_ZEROS)
    };
    if bad(first) | bad(last) != 0 {
        return None;
    }
    let d = first - DIGIT_ZEROS;
    let d = (d * 10 + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d * 100 + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    let d = (d * 10_000 + (d >> 32)) & 0xFFFF_FFFF;
    let t = last - DIGIT_ZEROS;
    Some(d * 100 + ((t >> 48) & 0xFF) * 10 + (t >> 56))
}

/// [`ascii_digits`], the form amounts in minor units take most (four to
/// eight digits) read without a loop ([`four_to_eight_digits`]). Apart
/// from [`ascii_digits`], which a Unix time's ten digits take: with this
/// path in it, the Unix-seconds read of the timestamps bench was 0.5 ns a
/// row slower.
#[inline]
pub fn amount_digits(s: &[u8]) -> Option<u64> {
    if (4..=8).contains(&s.len()) {
        return four_to_eight_digits(s);
    }
    ascii_digits(s)
}

/// [`ascii_digits`] of four to eight bytes (an amount in minor units):
/// the first four and the last four bytes (overlapping) make one word of
/// the digits after `0`s, checked and read as eight digits; no loop
/// whose end moves with the amount's length.
#[inline(always)]
fn four_to_eight_digits(s: &[u8]) -> Option<u64> {
    let n = s.len();
    let first = u64::from(u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    let last = u64::from(u32::from_le_bytes([s[n - 4], s[n - 3], s[n - 2], s[n - 1]]));
    let pad = 8 * (8 - n) as u32;
    let zeros = DIGIT_ZEROS & ((1u64 << pad) - 1);
    let w = ((first << pad) & 0xFFFF_FFFF) | (last << 32) | zeros;
    let d = digit_values(w)?;
    let d = (d * 10 + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d * 100 + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((d * 10_000 + (d >> 32)) & 0xFFFF_FFFF)
}

/// The forms exports write most, read without the general parser: a bare
/// integer in the rules' unit, and RFC 3339 as `YYYY-MM-DDTHH:MM:SS[.f](Z|±HH:MM)`
/// with no surrounding space. `None` for anything else, an instant out of
/// range included: the caller then asks [`timestamp`], which reads these
/// forms to the same instant (a property test checks it) and says why the
/// others are refused. Inlined into the file reader's loop, where a call
/// through [`value_ref`] per timestamp cell was a quarter of a typed row.
// Always inlined: returned from a call, the timestamp came back through
// memory and its reload could not be store-forwarded (perf annotate).
#[inline(always)]
pub fn timestamp_fast(text: &str, rules: TimestampRules) -> Option<Timestamp> {
    timestamp_fast_with(text, rules, None)
}

/// [`timestamp_fast`], an RFC 3339 text's date looked up in `memo` first
/// (and kept there): the same instants.
#[inline(always)]
pub fn timestamp_fast_with(
    text: &str,
    rules: TimestampRules,
    memo: Option<&DateMemo>,
) -> Option<Timestamp> {
    let b = text.as_bytes();
    // An RFC 3339 text's fifth byte is a `-`, which no integer has.
    if b.len() >= 20 && b[4] == b'-' {
        return rfc3339_with(b, memo);
    }
    let n = plain_integer(b)?;
    from_unix(n, rules.integers?).ok()
}

/// Parses a timestamp by `rules` (surrounding whitespace ignored): a bare
/// integer in the rules' unit, RFC 3339 with an offset, and, as the rules
/// allow, a date and time without offset or a date alone as UTC.
pub fn timestamp(text: &str, rules: TimestampRules) -> Result<Timestamp, TimestampError> {
    // Unix time as exports write it (digits, no spaces): no trim, no
    // general parser. Anything else takes the paths below.
    if let Some(unit) = rules.integers {
        if let Some(n) = plain_integer(text.as_bytes()) {
            return unix(n, unit);
        }
    }
    let t = text.trim();
    // The common RFC 3339 form first: its fifth byte is a `-`, which no
    // integer has.
    if t.len() >= 20 && t.as_bytes()[4] == b'-' {
        if let Some(ts) = rfc3339_fast(t.as_bytes()) {
            return Ok(ts);
        }
    }
    if let Some(unit) = rules.integers {
        if let Ok(n) = t.parse::<i64>() {
            return unix(n, unit);
        }
    }
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(ts);
    }
    let refused = || TimestampError::Form {
        text: text.to_string(),
        rules,
    };
    // jiff's civil parsers ignore a bracketed zone, and its date parser
    // drops a time: neither may be read as UTC or as midnight.
    if t.contains('[') {
        return Err(refused());
    }
    let has_time = t.bytes().any(|b| matches!(b, b'T' | b't' | b' '));
    let civil = if has_time {
        rules
            .naive_is_utc
            .then(|| t.parse::<DateTime>().ok())
            .flatten()
    } else {
        rules
            .date_is_midnight_utc
            .then(|| t.parse::<Date>().ok())
            .flatten()
            .map(|d| d.to_datetime(Time::midnight()))
    };
    civil
        .and_then(|dt| TimeZone::UTC.to_timestamp(dt).ok())
        .ok_or_else(refused)
}

/// The digit pairs of `w`: byte `k` of the result is `10 d[k] + d[k + 1]`
/// for the digits `d` at the bytes `digit` marks (the other bytes
/// counting as `0`); `None` when a marked byte is not a digit.
#[inline(always)]
fn pairs(w: u64, digit: u64) -> Option<u64> {
    let d = digit_values((w & digit) | (DIGIT_ZEROS & !digit))?;
    // At most 9 * 10 + 9 per byte: no carry into the next.
    Some(d * 10 + (d >> 8))
}

/// Byte `k` of `w`.
#[inline(always)]
fn byte(w: u64, k: u32) -> i64 {
    ((w >> (8 * k)) & 0xFF) as i64
}

/// The dates RFC 3339 cells held last, for a reader to keep beside its
/// loop ([`timestamp_fast_with`]): by their day and their month's parity
/// (the days of a month, and of the next one, each have a slot of their
/// own), the date's first eight bytes (`YYYY-MM-`) as a word, its day's
/// two, and its days from 1970-01-01. Only a date read whole is kept, so
/// a match is a valid date. Exports hold a few dates many times (a window
/// of a day to a month): a match skips the date's checks and the
/// calendar's arithmetic (the timestamps bench's RFC 3339 read, typed
/// minus text: 8.2-8.6 ns a row without, 6.7-7.5 with it; a thread-local
/// memo instead, whose every access was a call: 7.0-7.3).
pub struct DateMemo([std::cell::Cell<(u64, u16, i32)>; 64]);

impl Default for DateMemo {
    fn default() -> DateMemo {
        DateMemo(std::array::from_fn(|_| std::cell::Cell::new((0, 0, 0))))
    }
}

impl std::fmt::Debug for DateMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DateMemo")
    }
}

/// The days from 1970-01-01 of the date whose first eight bytes are the
/// word `w` (`YYYY-MM-`) and whose day is `dd` as written (`day` as
/// read): `None` when it is not a date of years 0000-9999.
#[inline(always)]
fn date_days(w: u64, dd: [u8; 2], day: i64, memo: Option<&DateMemo>) -> Option<i64> {
    let dd = u16::from_le_bytes(dd);
    // The day, and the last bit of the month's last digit.
    let slot = (day as usize & 31) | (((w >> 48) as usize & 1) << 5);
    if let Some(memo) = memo {
        // A slot never written holds the word 0, which no date's is.
        let (word, day_bytes, days) = memo.0[slot].get();
        if word == w && day_bytes == dd {
            return Some(i64::from(days));
        }
    }
    // Digits at bytes 0-3 and 5-6 of the word.
    let date = pairs(w, 0x00FF_FF00_FFFF_FFFF)?;
    let (year, month) = (byte(date, 0) * 100 + byte(date, 2), byte(date, 5));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month {
        return None;
    }
    // Days from 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
    // days_from_civil), for years 0000-9999: counted from year -400 so
    // that every quotient is of a non-negative number. (Two tables, days
    // before each year and month, were tried instead: no faster.)
    let y = if month <= 2 { year - 1 } else { year } + 400;
    let (era, yoe) = (y / 400, y % 400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era - 1) * 146_097 + doe - 719_468;
    // Years 0000-9999: within an i32 (about ±3.7 million days).
    if let Some(memo) = memo {
        memo.0[slot].set((w, dd, days as i32));
    }
    Some(days)
}

/// The common RFC 3339 form, `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`,
/// read without jiff's general parser (a third of the time of a whole CSV
/// row otherwise). `None` for anything else, a leap second included: the
/// caller then asks jiff, so what is accepted and how never changes (a
/// property test checks both agree).
// Always inlined, as `timestamp_fast` is: called, it returned its
// timestamp through memory (a file reader's RFC 3339 column, typed, 39.6-
// 42.9 ns per row, 37.2-37.5 inlined; 3 interleaved rounds of the
// timestamps bench).
#[inline(always)]
fn rfc3339_fast(b: &[u8]) -> Option<Timestamp> {
    rfc3339_with(b, None)
}

/// [`rfc3339_fast`], the date looked up in `memo` first (and kept there).
#[inline(always)]
fn rfc3339_with(b: &[u8], memo: Option<&DateMemo>) -> Option<Timestamp> {
    // At most nine digits here (a fraction, an offset's hours or minutes).
    let digits = |b: &[u8]| ascii_digits(b).map(|n| n as i64);
    // `YYYY-MM-DDTHH:MM:SS` as two words and the seconds' bytes: the
    // separators checked, the twelve digits at once (a loop per number
    // and its checks were a quarter of an RFC 3339 read).
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    // Digits at bytes 0-1, 3-4, 6-7 of the word at 8 (the day, hour and
    // minute); the seconds at bytes 17-18, bytes 1-2 of the word at 16.
    let time = pairs(word(b, 8), 0xFFFF_00FF_FF00_FFFF)?;
    let secs = pairs(
        u64::from(u16::from_le_bytes([b[17], b[18]])) << 8,
        0xFF_FF00,
    )?;
    let (day, hour, minute) = (byte(time, 0), byte(time, 3), byte(time, 6));
    let second = byte(secs, 1);
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = date_days(word(b, 0), [b[8], b[9]], day, memo)?;
    let mut i = 19;
    let mut nanos = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        let mut end = start;
        while end < b.len() && b[end].is_ascii_digit() {
            end += 1;
        }
        let n = end - start;
        if n == 0 || n > 9 {
            return None;
        }
        nanos = digits(&b[start..end])? * 10i64.pow(9 - n as u32);
        i = end;
    }
    let offset = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (h, m) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    if nanos == 0 {
        // Whole seconds (most exports): no nanosecond normalisation.
        return Timestamp::from_second(seconds).ok();
    }
    Timestamp::new(seconds, nanos as i32).ok()
}

/// How a source writes amounts and timestamps, for [`value`] and
/// [`value_ref`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueRules {
    /// Amounts in minor or major units.
    pub amounts: AmountFormat,
    /// Which timestamp forms are accepted.
    pub timestamps: TimestampRules,
}

/// Text that is not a value of its field's kind. The message says what is
/// wrong; the caller says where, most simply with [`ValueError::message`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// An integer field holds something else (the text as given).
    #[error("`{0}` is not a whole number")]
    Integer(String),
    /// A currency field holds no known code, or an amount is malformed.
    #[error(transparent)]
    Money(MoneyError),
    /// The currency beside an amount is not a known code.
    #[error(transparent)]
    AmountCurrency(MoneyError),
    /// An amount has no currency beside it (the amount as given).
    #[error("amount `{0}` has no currency")]
    NoCurrency(String),
    /// A timestamp field holds no timestamp.
    #[error(transparent)]
    Timestamp(#[from] TimestampError),
}

impl ValueError {
    /// The message for a value of `field`, a `noun` such as `column` or
    /// `property`, whose amounts take their currency from `currency`: an
    /// error in that currency is put on it.
    pub fn message(&self, noun: &str, field: &str, currency: &str) -> String {
        match self {
            ValueError::AmountCurrency(e) => {
                format!("{noun} `{currency}` (currency of `{field}`): {e}")
            }
            ValueError::NoCurrency(_) => {
                format!("{noun} `{field}`: {self}; fill the currency {noun} `{currency}`")
            }
            other => format!("{noun} `{field}`: {other}"),
        }
    }
}

/// A whole number, surrounding whitespace ignored.
#[inline]
pub fn integer(text: &str) -> Result<i64, ValueError> {
    text.trim()
        .parse()
        .map_err(|_| ValueError::Integer(text.to_string()))
}

/// An amount in `currency`, in minor (`2999`) or major (`29.99`) units,
/// converted exactly.
#[inline]
pub fn money(text: &str, currency: Currency, format: AmountFormat) -> Result<Money, MoneyError> {
    match format {
        AmountFormat::Minor => Money::parse_minor(text, currency),
        AmountFormat::Major => Money::parse_major(text, currency),
    }
}

/// Text as a value of `kind`, borrowing text values. Which text means null
/// is the caller's decision; this reads what is not null. An amount takes
/// its currency from `amount_currency` (absent or empty: an error), a code
/// read by `currency` (a cache, or [`Currency::parse`]), as are currency
/// fields.
// Inlined into each reader's loop: the file reader calls it per cell.
#[inline]
pub fn value_ref<'a>(
    text: &'a str,
    kind: FieldKind,
    amount_currency: Option<&str>,
    rules: ValueRules,
    mut currency: impl FnMut(&str) -> Result<Currency, MoneyError>,
) -> Result<ValueRef<'a>, ValueError> {
    Ok(match kind {
        FieldKind::Text => ValueRef::Text(text),
        FieldKind::Integer => ValueRef::Integer(integer(text)?),
        FieldKind::Currency => ValueRef::Currency(currency(text).map_err(ValueError::Money)?),
        FieldKind::Money => {
            let code = match amount_currency {
                Some(c) if !c.is_empty() => c,
                _ => return Err(ValueError::NoCurrency(text.to_string())),
            };
            let c = currency(code).map_err(ValueError::AmountCurrency)?;
            ValueRef::Money(money(text, c, rules.amounts).map_err(ValueError::Money)?)
        }
        FieldKind::Timestamp => ValueRef::Timestamp(timestamp(text, rules.timestamps)?),
    })
}

/// Owned text as a value of `kind` (text values keep their string); see
/// [`value_ref`].
pub fn value(
    text: String,
    kind: FieldKind,
    amount_currency: Option<&str>,
    rules: ValueRules,
) -> Result<Value, ValueError> {
    match kind {
        FieldKind::Text => Ok(Value::Text(text)),
        _ => value_ref(&text, kind, amount_currency, rules, Currency::parse)
            .map(|v| v.to_owned_value()),
    }
}

#[cfg(test)]
mod rfc3339_fast_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_what_jiff_reads() {
        for text in [
            "2026-11-28T23:59:59Z",
            "2026-11-28t00:00:00z",
            "2024-02-29T12:00:00.5+05:30",
            "1970-01-01T00:00:00-00:00",
            "0000-01-01T00:00:00Z",
            "9999-12-30T21:59:59.999999999Z",
            "1969-12-31T23:59:59.000000001-23:59",
        ] {
            assert_eq!(
                rfc3339_fast(text.as_bytes()),
                text.parse::<Timestamp>().ok(),
                "{text}"
            );
            assert!(rfc3339_fast(text.as_bytes()).is_some(), "{text}");
        }
        // Left to jiff (which accepts or refuses them by its own rules).
        for text in [
            "2026-11-28 23:59:59Z",
            "2026-11-28T23:59:60Z",
            "2023-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-28T23:59:59",
            "2026-11-28T23:59:59.Z",
            "2026-11-28T23:59:59.1234567890Z",
            "2026-11-28T23:59:59+0530",
            "2026-11-28T23:59:59Z[UTC]",
            "+2026-11-28T23:59:59Z",
        ] {
            assert_eq!(rfc3339_fast(text.as_bytes()), None, "{text}");
        }
    }

    #[test]
    fn every_month_of_three_centuries_reads_as_jiff_does() {
        // Each field's digits are taken from their word by place: every
        // month's first, a middle and last day, across the leap-year
        // rules of 1900, 2000 and 2100, against jiff.
        for year in 1895..2161 {
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            for month in 1..=12 {
                const DAYS: [u32; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
                let last = DAYS[month - 1] + u32::from(leap && month == 2);
                for day in [1, 15, last] {
                    let text = format!("{year:04}-{month:02}-{day:02}T12:34:56Z");
                    let fast = rfc3339_fast(text.as_bytes());
                    assert!(fast.is_some(), "{text}");
                    assert_eq!(fast, text.parse::<Timestamp>().ok(), "{text}");
                }
            }
        }
    }

    #[test]
    fn a_byte_that_is_not_a_digit_where_one_belongs_is_refused() {
        // The digits are checked a word at a time: every other byte value,
        // at every digit's place (those next to '0' and '9' included),
        // leaves the text to jiff, which refuses it too.
        let good = b"2026-11-28T23:59:59Z";
        for at in [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18] {
            for other in (0..=255u8).filter(|b| !b.is_ascii_digit()) {
                let mut text = good.to_vec();
                text[at] = other;
                assert_eq!(rfc3339_fast(&text), None, "byte {other:#04x} at {at}");
                if let Ok(t) = std::str::from_utf8(&text) {
                    assert!(t.parse::<Timestamp>().is_err(), "{t}");
                }
            }
        }
        assert!(rfc3339_fast(good).is_some());
    }

    proptest! {
        /// A reader's memo of dates changes no instant: texts of a few
        /// dates read in turn through one memo (each date met again, and
        /// dates of other months and years in its slot), valid or not (a
        /// 29th of February of leap and common years, a 31st of short
        /// months, day 00, 32 and 33, month 13, a byte not a digit), read
        /// as without it; a refused date is never taken from the memo.
        #[test]
        fn a_memo_of_dates_reads_what_none_reads(
            texts in proptest::collection::vec(
                (
                    prop_oneof![
                        Just("2024-02-29"), Just("2023-02-29"), Just("2026-11-30"),
                        Just("2026-11-31"), Just("2026-12-31"), Just("2025-11-30"),
                        Just("2026-11-00"), Just("2026-13-01"), Just("2026-1a-01"),
                        Just("2100-02-29"), Just("2000-02-29"), Just("0000-03-01"),
                        Just("9999-12-31"), Just("2026-10-31"), Just("2026-09-31"),
                        // Day 33 takes day 1's slot, day 32 day 00's.
                        Just("2026-11-01"), Just("2026-11-33"), Just("2026-11-32"),
                    ],
                    0i64..=24, 0i64..=60,
                    prop_oneof![Just("Z"), Just("+01:00"), Just(".5Z"), Just("-23:59"), Just("Q")],
                ),
                1..60,
            ),
        ) {
            let memo = DateMemo::default();
            for (date, h, m, tail) in texts {
                let text = format!("{date}T{h:02}:{m:02}:07{tail}");
                prop_assert_eq!(
                    rfc3339_with(text.as_bytes(), Some(&memo)),
                    rfc3339_fast(text.as_bytes()),
                    "{}", text
                );
                prop_assert_eq!(
                    timestamp_fast_with(&text, TimestampRules::FILE, Some(&memo)),
                    timestamp_fast(&text, TimestampRules::FILE),
                    "{}", text
                );
            }
        }

        /// Ten bytes, a Unix time's length, are read as two words: every
        /// ten digits are read to their value, and a byte of any value at
        /// any place that is not a digit makes them no number.
        #[test]
        fn ten_bytes_are_a_number_only_when_all_are_digits(
            digits in "[0-9]{10}", at in 0usize..10, byte in any::<u8>(),
        ) {
            prop_assert_eq!(ascii_digits(digits.as_bytes()), digits.parse::<u64>().ok());
            let mut b = digits.into_bytes();
            b[at] = byte;
            let want = b
                .iter()
                .all(u8::is_ascii_digit)
                .then(|| std::str::from_utf8(&b).unwrap().parse::<u64>().unwrap());
            prop_assert_eq!(ascii_digits(&b), want, "{:?}", b);
        }

        /// Whatever the fast path accepts, jiff reads as the same instant;
        /// and every canonical form in range is accepted.
        #[test]
        fn agrees_with_jiff(
            y in 0i64..=9999, mo in 0i64..=13, d in 0i64..=32, h in 0i64..=24,
            mi in 0i64..=60, s in 0i64..=60, frac in proptest::option::of("[0-9]{1,10}"),
            off in prop_oneof![Just("Z".to_string()), Just("z".to_string()),
                (0i64..=24, 0i64..=60, any::<bool>()).prop_map(|(h, m, neg)|
                    format!("{}{h:02}:{m:02}", if neg { '-' } else { '+' }))],
        ) {
            let frac = frac.map(|f| format!(".{f}")).unwrap_or_default();
            let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}{off}");
            let fast = rfc3339_fast(text.as_bytes());
            let jiff = text.parse::<Timestamp>().ok();
            if let Some(t) = fast {
                prop_assert_eq!(Some(t), jiff, "{}", text);
            }
            // The common form, in range, takes the fast path (others fall
            // back to jiff, which decides).
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
            let canonical = (1..=12).contains(&mo)
                && d >= 1
                && d <= month_days[(mo - 1).clamp(0, 11) as usize]
                && h < 24 && mi < 60 && s < 60
                && frac.len() <= 10
                && (off.len() == 1 || (off[1..3].parse::<i64>().unwrap() < 24 && off[4..6].parse::<i64>().unwrap() < 60))
                && jiff.is_some();
            if canonical {
                prop_assert!(fast.is_some(), "{} not on the fast path", text);
            }
        }

        /// Arbitrary bytes never pass the fast path unless jiff agrees.
        #[test]
        fn never_accepts_what_jiff_refuses(text in "[0-9T:.Zz+ -]{18,32}") {
            if let Some(t) = rfc3339_fast(text.as_bytes()) {
                prop_assert_eq!(Some(t), text.parse::<Timestamp>().ok(), "{}", text);
            }
        }

        /// The reader's inline path reads exactly what [`timestamp`] reads,
        /// under every preset: digits (signed, padded, past 18 digits, out
        /// of range), RFC 3339 shapes and near misses, spaces around.
        #[test]
        fn timestamp_fast_agrees_with_timestamp(
            text in prop_oneof![
                "[ ]?-?[0-9]{1,20}[ ]?",
                "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,10})?([Zz]|[+-][0-9]{2}:[0-9]{2})?",
                "[0-9T:.Zz+ -]{1,32}",
            ],
            rules in prop_oneof![
                Just(TimestampRules::FILE),
                Just(TimestampRules::RFC3339),
                Just(TimestampRules::SQL),
                Just(TimestampRules::HUBSPOT),
            ],
        ) {
            if let Some(t) = timestamp_fast(&text, rules) {
                prop_assert_eq!(Ok(t), timestamp(&text, rules), "{}", text);
            }
            // Unix times as exports write them (in range: at most 11
            // digits) always take the fast path.
            if rules.integers.is_some() && !text.is_empty() && text.len() <= 11
                && text.bytes().all(|b| b.is_ascii_digit()) {
                prop_assert!(timestamp_fast(&text, rules).is_some(), "{}", text);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    // ---- durations -------------------------------------------------------

    #[test]
    fn duration_accepts_units_largest_first() {
        let s = SignedDuration::from_secs;
        for (text, want) in [
            ("24h", s(86_400)),
            ("90m", s(5_400)),
            ("2d", s(172_800)),
            ("30s", s(30)),
            ("1h30m", s(5_400)),
            ("1d2h3m4s", s(93_784)),
            ("0s", s(0)),
            ("0d", s(0)),
            (" 5m ", s(300)),
            ("2H", s(7_200)),
            ("36500d", s(36_500 * 86_400)),
        ] {
            assert_eq!(duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn duration_refusals_say_why() {
        for (text, reason) in [
            ("", "it is empty"),
            ("  ", "it is empty"),
            ("5", "`5` has no unit"),
            ("h", "expected a number before `h`"),
            ("-1h", "negative durations are not allowed"),
            ("5x", "unknown unit `x`"),
            (
                "1.5h",
                "fractions are not supported (write 1h30m, not 1.5h)",
            ),
            (
                "1,5h",
                "fractions are not supported (write 1h30m, not 1.5h)",
            ),
            (
                "30m1h",
                "units must go from largest to smallest, each at most once",
            ),
            (
                "1h1h",
                "units must go from largest to smallest, each at most once",
            ),
            ("1h 30m", "expected a number before ` 30m`"),
            (
                "36501d",
                "it is too large; the maximum is 36500d (100 years)",
            ),
            (
                "36500d1s",
                "it is too large; the maximum is 36500d (100 years)",
            ),
            (
                "99999999999999999999h",
                "it is too large; the maximum is 36500d (100 years)",
            ),
        ] {
            let e = duration(text).unwrap_err();
            assert_eq!(e.reason, reason, "{text:?}");
            assert_eq!(e.text, text.trim());
            assert_eq!(
                e.to_string(),
                format!("bad duration `{}`: {reason}", text.trim())
            );
        }
    }

    #[test]
    fn positive_duration_refuses_zero_and_names_the_setting() {
        assert_eq!(
            positive_duration("15m", "x").unwrap(),
            std::time::Duration::from_secs(900)
        );
        let e = positive_duration("0s", "Stripe rate_limit_patience").unwrap_err();
        assert_eq!(
            e.to_string(),
            "Stripe rate_limit_patience = \"0s\": must be longer than zero, e.g. \"15m\""
        );
        let e = positive_duration("1.5h", "HubSpot rate_limit_patience").unwrap_err();
        assert_eq!(
            e.to_string(),
            "HubSpot rate_limit_patience = \"1.5h\": fractions are not supported (write 1h30m, not 1.5h)"
        );
    }

    // ---- timestamps ------------------------------------------------------

    #[test]
    fn unix_seconds_and_milliseconds_either_side_of_the_epoch() {
        assert_eq!(
            unix(1_764_374_399, Unit::Seconds),
            Ok(ts("2025-11-28T23:59:59Z"))
        );
        assert_eq!(unix(-1, Unit::Seconds), Ok(ts("1969-12-31T23:59:59Z")));
        assert_eq!(
            unix(1_764_374_399_500, Unit::Milliseconds),
            Ok(ts("2025-11-28T23:59:59.5Z"))
        );
        assert_eq!(
            unix(-1_500, Unit::Milliseconds),
            Ok(ts("1969-12-31T23:59:58.5Z"))
        );
        assert_eq!(
            unix(999_999_999_999, Unit::Seconds)
                .unwrap_err()
                .to_string(),
            "`999999999999` Unix seconds is out of range (years -9999 to 9999)"
        );
        assert_eq!(
            unix(i64::MIN, Unit::Milliseconds).unwrap_err(),
            TimestampError::Range {
                value: i64::MIN,
                unit: Unit::Milliseconds
            }
        );
    }

    #[test]
    fn every_preset_reads_rfc3339_with_an_offset() {
        for rules in [
            TimestampRules::RFC3339,
            TimestampRules::FILE,
            TimestampRules::SQL,
            TimestampRules::HUBSPOT,
        ] {
            for (text, want) in [
                ("2026-11-28T23:59:59Z", "2026-11-28T23:59:59Z"),
                (" 2026-11-28T23:59:59Z\n", "2026-11-28T23:59:59Z"),
                ("2026-11-28T18:59:59-05:00", "2026-11-28T23:59:59Z"),
                ("2026-11-28 23:59:59+00:00", "2026-11-28T23:59:59Z"),
                ("2026-11-28T23:59:59.25Z", "2026-11-28T23:59:59.25Z"),
                ("2026-11-28t23:59:59z", "2026-11-28T23:59:59Z"),
                (
                    "2026-11-29T00:59:59+01:00[Europe/Paris]",
                    "2026-11-28T23:59:59Z",
                ),
                ("1969-07-20T20:17:40Z", "1969-07-20T20:17:40Z"),
            ] {
                assert_eq!(timestamp(text, rules), Ok(ts(want)), "{rules:?} {text}");
            }
        }
    }

    #[test]
    fn integers_are_read_in_the_rules_unit_or_refused() {
        let file = TimestampRules::FILE;
        assert_eq!(
            timestamp("1764374399", file),
            Ok(ts("2025-11-28T23:59:59Z"))
        );
        assert_eq!(
            timestamp(" 1764374399 ", file),
            Ok(ts("2025-11-28T23:59:59Z"))
        );
        assert_eq!(timestamp("-86400", file), Ok(ts("1969-12-31T00:00:00Z")));
        assert_eq!(timestamp("0", file), Ok(Timestamp::UNIX_EPOCH));
        assert_eq!(timestamp("+60", file), Ok(ts("1970-01-01T00:01:00Z")));
        assert_eq!(
            timestamp("1764374399", TimestampRules::SQL),
            Ok(ts("2025-11-28T23:59:59Z"))
        );
        let hubspot = TimestampRules::HUBSPOT;
        assert_eq!(
            timestamp("1764374399000", hubspot),
            Ok(ts("2025-11-28T23:59:59Z"))
        );
        assert_eq!(timestamp("-1000", hubspot), Ok(ts("1969-12-31T23:59:59Z")));
        // Out of range is said so, not "not a timestamp".
        assert_eq!(
            timestamp("253402300800", file).unwrap_err().to_string(),
            "`253402300800` Unix seconds is out of range (years -9999 to 9999)"
        );
        assert_eq!(
            timestamp("9999999999999999", hubspot)
                .unwrap_err()
                .to_string(),
            "`9999999999999999` Unix milliseconds is out of range (years -9999 to 9999)"
        );
        // Plan lines and Shopify never hold integers.
        assert_eq!(
            timestamp("1764374399", TimestampRules::RFC3339)
                .unwrap_err()
                .to_string(),
            "`1764374399` is not a timestamp; expected RFC 3339 such as 2026-11-28T23:59:59Z"
        );
        // More digits than an i64 holds is not a number of seconds.
        assert!(matches!(
            timestamp("99999999999999999999", file),
            Err(TimestampError::Form { .. })
        ));
    }

    #[test]
    fn a_date_alone_is_midnight_utc_only_where_the_rules_say_so() {
        let midnight = Ok(ts("2026-11-28T00:00:00Z"));
        assert_eq!(timestamp("2026-11-28", TimestampRules::HUBSPOT), midnight);
        assert_eq!(timestamp("2026-11-28", TimestampRules::SQL), midnight);
        assert_eq!(timestamp(" 2026-11-28 ", TimestampRules::SQL), midnight);
        // A file's date is digits and dashes but not Unix seconds: refused
        // with the forms a file may use, never read as a number.
        assert_eq!(
            timestamp("2026-11-28", TimestampRules::FILE).unwrap_err().to_string(),
            "`2026-11-28` is not a timestamp; expected Unix seconds or RFC 3339 such as 2026-11-28T23:59:59Z"
        );
        assert!(timestamp("2026-11-28", TimestampRules::RFC3339).is_err());
        assert!(timestamp("2026-02-30", TimestampRules::HUBSPOT).is_err());
    }

    #[test]
    fn naive_date_times_are_utc_only_where_the_rules_say_so() {
        let sql = TimestampRules::SQL;
        let want = Ok(ts("2026-11-28T23:59:59Z"));
        assert_eq!(timestamp("2026-11-28 23:59:59", sql), want);
        assert_eq!(timestamp("2026-11-28T23:59:59", sql), want);
        assert_eq!(
            timestamp("2026-11-28 23:59:59.5", sql),
            Ok(ts("2026-11-28T23:59:59.5Z"))
        );
        assert_eq!(
            timestamp("2026-11-28 23:59", sql),
            Ok(ts("2026-11-28T23:59:00Z"))
        );
        // A bracketed zone is not UTC, and without an offset it names no
        // instant here: refused rather than read as UTC.
        assert_eq!(
            timestamp("2026-11-28T23:59:59[Europe/Paris]", sql)
                .unwrap_err()
                .to_string(),
            "`2026-11-28T23:59:59[Europe/Paris]` is not a timestamp; expected Unix seconds, \
             RFC 3339 such as 2026-11-28T23:59:59Z, YYYY-MM-DD HH:MM:SS in UTC \
             or a date YYYY-MM-DD (midnight UTC)"
        );
        // HubSpot reads dates, but a date with a time is not cut to
        // midnight (10 hours lost), nor read as UTC.
        for text in ["2026-11-28T10:00:00", "2026-11-28 10:00:00"] {
            assert_eq!(
                timestamp(text, TimestampRules::HUBSPOT)
                    .unwrap_err()
                    .to_string(),
                format!(
                    "`{text}` is not a timestamp; expected Unix milliseconds, \
                     RFC 3339 such as 2026-11-28T23:59:59Z or a date YYYY-MM-DD (midnight UTC)"
                )
            );
        }
        for rules in [TimestampRules::FILE, TimestampRules::RFC3339] {
            assert!(
                timestamp("2026-11-28 23:59:59", rules).is_err(),
                "{rules:?}"
            );
        }
    }

    #[test]
    fn refusals_keep_the_text_as_given_and_list_the_accepted_forms() {
        for text in [
            "",
            "  ",
            "soon",
            "1-2",
            "--5",
            "28/11/2026",
            "2026-11-28T25:00:00Z",
            "12:00",
        ] {
            for rules in [
                TimestampRules::FILE,
                TimestampRules::SQL,
                TimestampRules::HUBSPOT,
            ] {
                assert_eq!(
                    timestamp(text, rules),
                    Err(TimestampError::Form {
                        text: text.to_string(),
                        rules
                    }),
                    "{text:?}"
                );
            }
        }
        assert_eq!(
            TimestampRules::RFC3339.expected(),
            "RFC 3339 such as 2026-11-28T23:59:59Z"
        );
        assert_eq!(
            TimestampRules::FILE.expected(),
            "Unix seconds or RFC 3339 such as 2026-11-28T23:59:59Z"
        );
        assert_eq!(
            TimestampRules::HUBSPOT.expected(),
            "Unix milliseconds, RFC 3339 such as 2026-11-28T23:59:59Z or a date YYYY-MM-DD (midnight UTC)"
        );
        assert_eq!(
            TimestampRules::SQL.expected(),
            "Unix seconds, RFC 3339 such as 2026-11-28T23:59:59Z, YYYY-MM-DD HH:MM:SS in UTC or a date YYYY-MM-DD (midnight UTC)"
        );
    }

    /// The parsers each connector had before this module, verbatim.
    mod before {
        use jiff::Timestamp;

        pub fn file(text: &str) -> Option<Timestamp> {
            let t = text.trim();
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                return Timestamp::from_second(t.parse().ok()?).ok();
            }
            t.parse::<Timestamp>().ok()
        }

        pub fn sql(text: &str) -> Option<Timestamp> {
            let t = text.trim();
            if let Ok(secs) = t.parse::<i64>() {
                return Timestamp::from_second(secs).ok();
            }
            if let Ok(ts) = t.parse::<Timestamp>() {
                return Some(ts);
            }
            t.parse::<jiff::civil::DateTime>()
                .ok()
                .and_then(|dt| jiff::tz::TimeZone::UTC.to_timestamp(dt).ok())
        }

        pub fn hubspot(t: &str) -> Option<Timestamp> {
            let t = t.trim();
            if let Ok(ms) = t.parse::<i64>() {
                return Timestamp::from_millisecond(ms).ok();
            }
            if let Ok(ts) = t.parse::<Timestamp>() {
                return Some(ts);
            }
            t.parse::<jiff::civil::Date>().ok().and_then(|d| {
                jiff::tz::TimeZone::UTC
                    .to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
                    .ok()
            })
        }

        pub fn plan(t: &str) -> Option<Timestamp> {
            t.parse::<Timestamp>().ok()
        }
    }

    type Before = fn(&str) -> Option<Timestamp>;

    #[test]
    fn each_preset_accepts_what_its_connector_accepted_before_except_the_fixed_cases() {
        let corpus = [
            "",
            " ",
            "0",
            "-0",
            "1764374399",
            " 1764374399 ",
            "-1764374399",
            "1764374399000",
            "253402300800",
            "99999999999999999999",
            "+60",
            "1-2",
            "--5",
            "-",
            "2026-11-28",
            "20261128",
            "2026-11-28T23:59:59Z",
            "2026-11-28T23:59:59.123456789Z",
            "2026-11-28T18:59:59-05:00",
            "2026-11-28 23:59:59+00:00",
            "2026-11-28T23:59:59",
            "2026-11-28 23:59:59",
            "2026-11-28 23:59:59.5",
            "2026-11-28T23:59",
            "2026-11-28T23:59:59[Europe/Paris]",
            "2026-11-29T00:59:59+01:00[Europe/Paris]",
            "2026-11-28[Europe/Paris]",
            "2026-02-30",
            "soon",
            "28/11/2026",
            "12:00",
        ];
        // (rules, before, texts the new parser deliberately reads differently)
        let presets: [(TimestampRules, Before, &[&str]); 4] = [
            // `+60`: any integer now, as SQL and HubSpot already read it.
            (TimestampRules::FILE, before::file, &["+60"]),
            // A bracketed zone without offset was read as UTC.
            (
                TimestampRules::SQL,
                before::sql,
                &[
                    "2026-11-28T23:59:59[Europe/Paris]",
                    "2026-11-28[Europe/Paris]",
                ],
            ),
            // jiff's date parser dropped a time: `…T23:59:59` became midnight.
            (
                TimestampRules::HUBSPOT,
                before::hubspot,
                &[
                    "2026-11-28T23:59:59",
                    "2026-11-28 23:59:59",
                    "2026-11-28 23:59:59.5",
                    "2026-11-28T23:59",
                    "2026-11-28T23:59:59[Europe/Paris]",
                    "2026-11-28[Europe/Paris]",
                ],
            ),
            (TimestampRules::RFC3339, before::plan, &[]),
        ];
        for (rules, old, changed) in presets {
            for text in corpus {
                let new = timestamp(text, rules).ok();
                if changed.contains(&text) {
                    assert_ne!(new, old(text), "{rules:?} {text:?} was meant to change");
                } else {
                    assert_eq!(new, old(text), "{rules:?} {text:?}");
                }
            }
        }
    }

    // ---- values ----------------------------------------------------------

    const MINOR: ValueRules = ValueRules {
        amounts: AmountFormat::Minor,
        timestamps: TimestampRules::FILE,
    };
    const MAJOR: ValueRules = ValueRules {
        amounts: AmountFormat::Major,
        timestamps: TimestampRules::HUBSPOT,
    };

    fn read<'a>(
        text: &'a str,
        kind: FieldKind,
        currency: Option<&str>,
        rules: ValueRules,
    ) -> Result<ValueRef<'a>, ValueError> {
        value_ref(text, kind, currency, rules, Currency::parse)
    }

    #[test]
    fn integers_are_whole_numbers_with_whitespace_ignored() {
        assert_eq!(integer(" 42 "), Ok(42));
        assert_eq!(integer("-7"), Ok(-7));
        assert_eq!(integer(&i64::MAX.to_string()), Ok(i64::MAX));
        for text in ["4.0", "1e3", "", "x", "9223372036854775808"] {
            let e = integer(text).unwrap_err();
            assert_eq!(e, ValueError::Integer(text.to_string()));
            assert_eq!(e.to_string(), format!("`{text}` is not a whole number"));
        }
    }

    #[test]
    fn money_by_amount_format() {
        let usd = usd();
        assert_eq!(
            money("2999", usd, AmountFormat::Minor),
            Ok(Money::from_minor(2999, usd))
        );
        assert_eq!(
            money("29.99", usd, AmountFormat::Major),
            Ok(Money::from_minor(2999, usd))
        );
        assert_eq!(
            money("-5", usd, AmountFormat::Major),
            Ok(Money::from_minor(-500, usd))
        );
        assert!(matches!(
            money("29.99", usd, AmountFormat::Minor),
            Err(MoneyError::NotMinorUnits(_))
        ));
        assert!(money("29.999", usd, AmountFormat::Major).is_err());
    }

    #[test]
    fn each_kind_reads_its_text() {
        let usd = usd();
        assert_eq!(
            read(" a ", FieldKind::Text, None, MINOR),
            Ok(ValueRef::Text(" a "))
        );
        assert_eq!(
            read("12", FieldKind::Integer, None, MINOR),
            Ok(ValueRef::Integer(12))
        );
        assert_eq!(
            read("usd", FieldKind::Currency, None, MINOR),
            Ok(ValueRef::Currency(usd))
        );
        assert_eq!(
            read("2999", FieldKind::Money, Some("usd"), MINOR),
            Ok(ValueRef::Money(Money::from_minor(2999, usd)))
        );
        assert_eq!(
            read("29.99", FieldKind::Money, Some("USD"), MAJOR),
            Ok(ValueRef::Money(Money::from_minor(2999, usd)))
        );
        assert_eq!(
            read("1764374399", FieldKind::Timestamp, None, MINOR),
            Ok(ValueRef::Timestamp(ts("2025-11-28T23:59:59Z")))
        );
        assert_eq!(
            read("1764374399000", FieldKind::Timestamp, None, MAJOR),
            Ok(ValueRef::Timestamp(ts("2025-11-28T23:59:59Z")))
        );
    }

    #[test]
    fn owned_values_keep_their_text() {
        let text = String::from("succeeded");
        let ptr = text.as_ptr();
        match value(text, FieldKind::Text, None, MINOR) {
            Ok(Value::Text(t)) => assert_eq!(t.as_ptr(), ptr),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            value("29.99".into(), FieldKind::Money, Some("usd"), MAJOR),
            Ok(Value::Money(Money::from_minor(2999, usd())))
        );
        assert_eq!(
            value("x".into(), FieldKind::Integer, None, MINOR),
            Err(ValueError::Integer("x".into()))
        );
    }

    #[test]
    fn the_currency_reader_is_the_callers() {
        let mut calls = Vec::new();
        let eur = Currency::parse("EUR").unwrap();
        let v = value_ref("5", FieldKind::Money, Some("whatever"), MINOR, |c: &str| {
            calls.push(c.to_string());
            Ok(eur)
        });
        assert_eq!(v, Ok(ValueRef::Money(Money::from_minor(5, eur))));
        assert_eq!(calls, ["whatever"]);
    }

    #[test]
    fn value_errors_are_placed_by_the_caller() {
        let m = |r: Result<ValueRef<'_>, ValueError>| {
            r.unwrap_err().message("column", "amount", "currency")
        };
        assert_eq!(
            m(read("5.5", FieldKind::Integer, None, MINOR)),
            "column `amount`: `5.5` is not a whole number"
        );
        assert_eq!(
            m(read("xyz", FieldKind::Currency, None, MINOR)),
            "column `amount`: unknown currency code `xyz`; expected an ISO 4217 code such as USD, EUR, JPY"
        );
        for currency in [None, Some("")] {
            assert_eq!(
                read("5", FieldKind::Money, currency, MINOR),
                Err(ValueError::NoCurrency("5".into()))
            );
            assert_eq!(
                m(read("5", FieldKind::Money, currency, MINOR)),
                "column `amount`: amount `5` has no currency; fill the currency column `currency`"
            );
        }
        assert_eq!(
            m(read("5", FieldKind::Money, Some("zzz"), MINOR)),
            "column `currency` (currency of `amount`): unknown currency code `zzz`; expected an ISO 4217 code such as USD, EUR, JPY"
        );
        assert_eq!(
            m(read("5.5", FieldKind::Money, Some("usd"), MINOR)),
            format!(
                "column `amount`: {}",
                MoneyError::NotMinorUnits("5.5".into())
            )
        );
        assert_eq!(
            read("soon", FieldKind::Timestamp, None, MAJOR)
                .unwrap_err()
                .message("property", "closedate", "deal_currency_code"),
            "property `closedate`: `soon` is not a timestamp; expected Unix milliseconds, \
             RFC 3339 such as 2026-11-28T23:59:59Z or a date YYYY-MM-DD (midnight UTC)"
        );
    }
}
