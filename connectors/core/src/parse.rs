//! Typed parsing of text shared by every connector and the binary: one
//! duration syntax for every setting.

use jiff::SignedDuration;

use crate::error::ConnectorError;

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
