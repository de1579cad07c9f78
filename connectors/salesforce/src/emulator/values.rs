//! Field values as the emulator stores them, and their text forms: exact
//! decimals (never `f64`), datetimes as epoch milliseconds, dates, and
//! Salesforce record ids.
//!
//! * Decimals (`currency`, `double`, `percent`) are kept as canonical decimal
//!   text: no exponent, no leading zeros, at least the field's `scale` digits
//!   after the point (trailing zeros beyond the scale trimmed). Salesforce's
//!   knowledge article 000385689, "Round Off Decimal Values of Currency Fields
//!   in the Salesforce UI and API", says that values written through the API
//!   are *not* rounded to the field's decimal places ("it will be stored
//!   exactly as entered, regardless of the field's decimal setting"); only
//!   the UI rounds. So a value with more decimals than the scale is stored as
//!   given, and the emulator neither rounds nor refuses it. Digits left of the
//!   point are limited to `precision - scale` (`NUMBER_OUTSIDE_VALID_RANGE`).
//! * Datetimes are accepted as `yyyy-MM-ddTHH:mm:ss[.SSS](Z|±HH:mm|±HHmm)` (REST
//!   API "Valid Date and DateTime Formats"; Bulk API 2.0 "Valid Date Format in
//!   Records") and written back as REST JSON does,
//!   `2026-01-02T03:04:05.000+0000`, or, in Bulk API CSV, with `Z`. Stored
//!   datetimes hold whole seconds ("Regular dateTime fields are full
//!   timestamps with a precision of one second", SOAP API "Primitive Data
//!   Types"); milliseconds given on write are dropped. SOQL datetime
//!   literals keep theirs.
//! * Record ids are 18 characters: a 3-character key prefix, 12 characters,
//!   and the 3-character case-safe suffix computed as Salesforce does (one
//!   character per 5-character chunk, bit *i* set when character *i* is an
//!   uppercase letter).

use std::cmp::Ordering;

use serde_json::Value;

/// A stored field value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Val {
    Null,
    Str(String),
    /// Canonical decimal text (see the module docs).
    Num(String),
    Bool(bool),
    /// Epoch milliseconds, UTC.
    DateTime(i64),
    Date(jiff::civil::Date),
}

impl Val {
    pub fn is_null(&self) -> bool {
        matches!(self, Val::Null)
    }

    /// The REST API's JSON form.
    pub fn to_json(&self) -> Value {
        match self {
            Val::Null => Value::Null,
            Val::Str(s) => Value::String(s.clone()),
            // Canonical decimal text is valid JSON number text; with
            // serde_json's arbitrary_precision it is kept digit for digit.
            Val::Num(n) => n
                .parse::<serde_json::Number>()
                .map(Value::Number)
                .unwrap_or_else(|_| Value::String(n.clone())),
            Val::Bool(b) => Value::Bool(*b),
            Val::DateTime(ms) => Value::String(rest_datetime(*ms)),
            Val::Date(d) => Value::String(d.to_string()),
        }
    }

    /// The Bulk API 2.0 CSV form (`""` for null).
    pub fn to_csv(&self) -> String {
        match self {
            Val::Null => String::new(),
            Val::Str(s) | Val::Num(s) => s.clone(),
            Val::Bool(b) => b.to_string(),
            Val::DateTime(ms) => csv_datetime(*ms),
            Val::Date(d) => d.to_string(),
        }
    }
}

// ---------------------------------------------------------------------------
// Decimals

/// A parsed decimal: sign, integer digits (no leading zeros; empty for 0) and
/// fraction digits (as given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dec {
    neg: bool,
    int: String,
    frac: String,
}

impl Dec {
    /// Parses `[+-]digits[.digits][e[+-]digits]` (JSON number text, or a
    /// numeric string). The exponent is applied by moving the point, exactly.
    pub fn parse(text: &str) -> Option<Dec> {
        let t = text.trim();
        let (neg, rest) = match t.as_bytes().first()? {
            b'-' => (true, &t[1..]),
            b'+' => (false, &t[1..]),
            _ => (false, t),
        };
        let (mantissa, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().ok()?),
            None => (rest, 0),
        };
        let (int, frac) = match mantissa.split_once('.') {
            Some((i, f)) => (i, f),
            None => (mantissa, ""),
        };
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || exp.unsigned_abs() > 400
        {
            return None;
        }
        let mut digits = format!("{int}{frac}");
        let mut point = int.len() as i64 + i64::from(exp);
        if point < 0 {
            digits = format!("{}{digits}", "0".repeat((-point) as usize));
            point = 0;
        }
        if point as usize > digits.len() {
            digits.push_str(&"0".repeat(point as usize - digits.len()));
        }
        let (i, f) = digits.split_at(point as usize);
        let int = i.trim_start_matches('0').to_owned();
        let frac = f.to_owned();
        let zero = int.is_empty() && frac.bytes().all(|b| b == b'0');
        Some(Dec {
            neg: neg && !zero,
            int,
            frac,
        })
    }

    /// Digits left of the point.
    pub fn int_digits(&self) -> usize {
        self.int.len()
    }

    /// Canonical text with at least `scale` fraction digits; fraction digits
    /// beyond the scale are kept unless they are trailing zeros.
    pub fn canonical(&self, scale: u32) -> String {
        let mut frac = self.frac.trim_end_matches('0').to_owned();
        while frac.len() < scale as usize {
            frac.push('0');
        }
        let int = if self.int.is_empty() { "0" } else { &self.int };
        let sign = if self.neg { "-" } else { "" };
        if frac.is_empty() {
            format!("{sign}{int}")
        } else {
            format!("{sign}{int}.{frac}")
        }
    }
}

impl Ord for Dec {
    fn cmp(&self, other: &Self) -> Ordering {
        let mag = |a: &Dec, b: &Dec| {
            a.int
                .len()
                .cmp(&b.int.len())
                .then_with(|| a.int.cmp(&b.int))
                .then_with(|| {
                    let n = a.frac.len().max(b.frac.len());
                    let pad = |s: &str| format!("{s:0<n$}");
                    pad(&a.frac).cmp(&pad(&b.frac))
                })
        };
        match (self.neg, other.neg) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => mag(self, other),
            (true, true) => mag(other, self),
        }
    }
}

impl PartialOrd for Dec {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Compares two canonical decimal texts exactly.
pub(crate) fn cmp_num(a: &str, b: &str) -> Ordering {
    match (Dec::parse(a), Dec::parse(b)) {
        (Some(a), Some(b)) => a.cmp(&b),
        _ => a.cmp(b),
    }
}

// ---------------------------------------------------------------------------
// Datetimes and dates

fn digits(s: &str) -> Option<i64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// `yyyy-MM-dd`.
pub(crate) fn parse_date(s: &str) -> Option<jiff::civil::Date> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let y = digits(&s[0..4])?;
    let m = digits(&s[5..7])?;
    let d = digits(&s[8..10])?;
    jiff::civil::Date::new(y as i16, m as i8, d as i8).ok()
}

/// `yyyy-MM-ddTHH:mm:ss[.S+](Z|±HH:mm|±HHmm|±HH)` → epoch milliseconds
/// (sub-millisecond digits dropped).
pub(crate) fn parse_datetime(s: &str) -> Option<i64> {
    let s = s.trim();
    if s.len() < 20 || s.as_bytes()[10] != b'T' && s.as_bytes()[10] != b't' {
        return None;
    }
    let date = parse_date(&s[..10])?;
    let t = &s[11..];
    let tb = t.as_bytes();
    if tb.len() < 9 || tb[2] != b':' || tb[5] != b':' {
        return None;
    }
    let (h, mi, sec) = (digits(&t[0..2])?, digits(&t[3..5])?, digits(&t[6..8])?);
    let mut rest = &t[8..];
    let mut ms = 0i64;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let f = &r[..n];
        ms = digits(&format!("{:0<3}", &f[..n.min(3)]))?;
        rest = &r[n..];
    }
    let offset_s: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let (sign, o) = match rest.as_bytes().first()? {
                b'+' => (1, &rest[1..]),
                b'-' => (-1, &rest[1..]),
                _ => return None,
            };
            let (oh, om) = match o.len() {
                2 => (digits(o)?, 0),
                4 => (digits(&o[..2])?, digits(&o[2..])?),
                5 if o.as_bytes()[2] == b':' => (digits(&o[..2])?, digits(&o[3..])?),
                _ => return None,
            };
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let dt = date.to_datetime(jiff::civil::Time::new(h as i8, mi as i8, sec as i8, 0).ok()?);
    let offset = jiff::tz::Offset::from_seconds(offset_s as i32).ok()?;
    let ts = offset.to_timestamp(dt).ok()?;
    Some(ts.as_millisecond() + ms)
}

fn civil(ms: i64) -> jiff::civil::DateTime {
    let ts = jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    jiff::tz::TimeZone::UTC.to_datetime(ts)
}

fn fmt_datetime(ms: i64, zone: &str) -> String {
    let d = civil(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}{zone}",
        d.year(),
        d.month(),
        d.day(),
        d.hour(),
        d.minute(),
        d.second(),
        d.millisecond()
    )
}

/// `2026-01-02T03:04:05.000+0000`, as the REST API writes datetimes in JSON.
pub(crate) fn rest_datetime(ms: i64) -> String {
    fmt_datetime(ms, "+0000")
}

/// `2026-01-02T03:04:05.000Z`, as Bulk API 2.0 writes datetimes in CSV.
pub(crate) fn csv_datetime(ms: i64) -> String {
    fmt_datetime(ms, "Z")
}

pub(crate) fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

// ---------------------------------------------------------------------------
// Ids

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const SUFFIX: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ012345";

/// The 3-character case-safe suffix of a 15-character id.
pub(crate) fn id_suffix(id15: &str) -> String {
    id15.as_bytes()
        .chunks(5)
        .map(|chunk| {
            let flags = chunk
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_ascii_uppercase())
                .fold(0usize, |f, (i, _)| f | (1 << i));
            SUFFIX[flags] as char
        })
        .collect()
}

/// An 18-character id: `prefix` (3 characters), the pod-like `"5g"`, `n`
/// in base 62 over 10 characters, and the case-safe suffix.
pub(crate) fn sf_id(prefix: &str, n: u64) -> String {
    let mut body = [b'0'; 10];
    let mut v = n;
    for slot in body.iter_mut().rev() {
        *slot = BASE62[(v % 62) as usize];
        v /= 62;
    }
    let id15 = format!(
        "{prefix}5g{}",
        std::str::from_utf8(&body).unwrap_or("0000000000")
    );
    let suffix = id_suffix(&id15);
    id15 + &suffix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_exactly_and_keep_extra_digits() {
        let c = |s: &str, scale| Dec::parse(s).map(|d| d.canonical(scale));
        assert_eq!(c("12.3", 2).as_deref(), Some("12.30"));
        assert_eq!(c("12.300", 2).as_deref(), Some("12.30"));
        assert_eq!(c("12.345", 2).as_deref(), Some("12.345"));
        assert_eq!(c("0012", 0).as_deref(), Some("12"));
        assert_eq!(c("-0.00", 2).as_deref(), Some("0.00"));
        assert_eq!(c("1.5e3", 2).as_deref(), Some("1500.00"));
        assert_eq!(c("15e-4", 4).as_deref(), Some("0.0015"));
        assert_eq!(
            c("123456789012345678.91", 2).as_deref(),
            Some("123456789012345678.91")
        );
        for bad in ["", "-", "1.2.3", "abc", "1e", "NaN", "0x10", "1 000"] {
            assert_eq!(Dec::parse(bad), None, "{bad:?}");
        }
        assert_eq!(cmp_num("10.00", "9.999"), Ordering::Greater);
        assert_eq!(cmp_num("-10", "-9.5"), Ordering::Less);
        assert_eq!(cmp_num("1.10", "1.1"), Ordering::Equal);
    }

    #[test]
    fn datetimes_round_trip_in_both_formats() {
        let ms = parse_datetime("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(rest_datetime(ms), "2026-01-02T03:04:05.000+0000");
        assert_eq!(csv_datetime(ms), "2026-01-02T03:04:05.000Z");
        assert_eq!(parse_datetime("2026-01-02T03:04:05.000+0000"), Some(ms));
        assert_eq!(parse_datetime("2026-01-02T04:04:05.000+01:00"), Some(ms));
        assert_eq!(parse_datetime("2026-01-01T19:04:05-08:00"), Some(ms));
        assert_eq!(parse_datetime("2026-01-02T03:04:05.1234Z"), Some(ms + 123));
        for bad in [
            "2026-01-02",
            "2026-01-02T03:04Z",
            "2026-02-30T00:00:00Z",
            "x",
        ] {
            assert_eq!(parse_datetime(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ids_carry_the_case_safe_suffix() {
        // A documented example id: 001D000000IRFma + IAH.
        assert_eq!(id_suffix("001D000000IRFma"), "IAH");
        let id = sf_id("a01", 12345);
        assert_eq!(id.len(), 18);
        assert!(id.starts_with("a015g"));
        assert_eq!(&id[15..], id_suffix(&id[..15]));
        assert_ne!(sf_id("a01", 1), sf_id("a01", 2));
    }
}
