//! Field values between Salesforce and recon's canonical values, driven by
//! the field types describe reports.
//!
//! - **Numbers** (`currency`, `double`, `percent`, `int`) are exact
//!   decimals: JSON numbers are taken by their text (serde_json's
//!   `arbitrary_precision`), CSV cells as written, exponents (`1.5E3`)
//!   expanded digit by digit, never through `f64`; money goes through
//!   [`Money::parse_major`]. Amounts are written with their currency's
//!   decimals, trailing zeros past the field's `scale` dropped. An amount
//!   with more significant decimals than the scale (KWD 1.234 into a
//!   scale-2 field) is written exactly all the same: Salesforce stores API
//!   values as given and rounds only what its UI shows ("Round Off Decimal
//!   Values of Currency Fields in the Salesforce UI and API", Salesforce
//!   Help 000385689), so it reads back equal; [`beyond_scale`] lets the
//!   writer warn that a user saving the record in the UI would round it.
//! - **Datetimes** come as `2026-01-02T03:04:05.000+0000` (REST) or
//!   `2026-01-02T03:04:05.000Z` (Bulk API 2.0 CSV) and are written as
//!   `2026-01-02T03:04:05Z`; **dates** as `2026-01-02`, read as midnight
//!   UTC ("Valid Date and DateTime Formats", Bulk API 2.0 Developer Guide:
//!   https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/datafiles_date_format.htm).
//! - **Currencies** of multi-currency orgs are each record's
//!   `CurrencyIsoCode`; single-currency orgs' amounts are in the org's
//!   currency (the `currency` setting).

use jiff::{tz::TimeZone, Timestamp};
use recon_core::{Currency, FieldKind, Money, Value};
use serde_json::Value as Json;

use crate::describe::FieldInfo;

/// A JSON scalar as text: strings as they are, numbers by their exact text,
/// booleans as `true`/`false`; `None` for null, empty strings, objects.
pub fn json_text(v: Option<&Json>) -> Option<String> {
    match v? {
        Json::String(s) if !s.is_empty() => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A decimal in plain notation: `1.5E3` is `1500`, `2.5e-2` is `0.025`,
/// `29.99` stays; `None` when `s` is not a number.
pub fn plain_decimal(s: &str) -> Option<String> {
    let s = s.trim();
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (neg, digits) = match mantissa.as_bytes().first()? {
        b'-' => (true, &mantissa[1..]),
        b'+' => (false, &mantissa[1..]),
        _ => (false, mantissa),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    if exp == 0 {
        return Some(s.trim_start_matches('+').to_string());
    }
    if exp.unsigned_abs() > 400 {
        return None;
    }
    let all: String = format!("{int}{frac}");
    let point = int.len() as i64 + i64::from(exp);
    let (i, f) = if point <= 0 {
        (
            "0".to_string(),
            format!("{}{all}", "0".repeat(point.unsigned_abs() as usize)),
        )
    } else if point as usize >= all.len() {
        (
            format!("{all}{}", "0".repeat(point as usize - all.len())),
            String::new(),
        )
    } else {
        (
            all[..point as usize].to_string(),
            all[point as usize..].to_string(),
        )
    };
    let i = i.trim_start_matches('0');
    let i = if i.is_empty() { "0" } else { i };
    let sign = if neg { "-" } else { "" };
    Some(if f.is_empty() {
        format!("{sign}{i}")
    } else {
        format!("{sign}{i}.{f}")
    })
}

/// How Salesforce spells times: RFC 3339 with an offset (`…Z`, `…+00:00`,
/// or `…+0000`, normalised first), and dates alone (midnight UTC). A date
/// and time without an offset is refused, never cut to its date.
const RULES: recon_core::parse::TimestampRules = recon_core::parse::TimestampRules {
    integers: None,
    naive_is_utc: false,
    date_is_midnight_utc: true,
};

/// Parses Salesforce's datetime forms (`…+0000`, `…Z`, `…+00:00`, with or
/// without milliseconds) and dates (midnight UTC), through
/// `recon_core::parse`.
pub fn parse_datetime(t: &str) -> Option<Timestamp> {
    let t = t.trim();
    // `+0000`: RFC 3339 wants `+00:00`.
    let b = t.as_bytes();
    let fixed;
    let text = if b.len() > 5
        && b.contains(&b'T')
        && matches!(b[b.len() - 5], b'+' | b'-')
        && b[b.len() - 4..].iter().all(u8::is_ascii_digit)
    {
        fixed = format!("{}:{}", &t[..t.len() - 2], &t[t.len() - 2..]);
        fixed.as_str()
    } else {
        t
    };
    recon_core::parse::timestamp(text, RULES).ok()
}

#[cfg(test)]
mod datetime_tests {
    use super::parse_datetime;

    #[test]
    fn salesforce_times_parse_and_naive_ones_are_refused() {
        let at = |s: &str| parse_datetime(s).map(|t| t.to_string());
        let noon = Some("2026-11-28T12:00:00Z".to_string());
        assert_eq!(at("2026-11-28T12:00:00.000+0000"), noon);
        assert_eq!(at("2026-11-28T13:00:00.000+0100"), noon);
        assert_eq!(at("2026-11-28T12:00:00Z"), noon);
        assert_eq!(at("2026-11-28T12:00:00+00:00"), noon);
        assert_eq!(at("2026-11-28"), Some("2026-11-28T00:00:00Z".to_string()));
        // No offset: not a time Salesforce sends; never cut to midnight.
        assert_eq!(at("2026-11-28T12:00:00"), None);
        assert_eq!(at("2026-11-28 12:00:00"), None);
        assert_eq!(at("1795824000"), None);
        assert_eq!(at(""), None);
    }
}

/// A canonical value from a field's text (`None`: null or empty).
/// `currency` is the record's currency for money fields.
pub fn value_from_text(
    text: Option<&str>,
    kind: FieldKind,
    field: &FieldInfo,
    currency: Option<Currency>,
) -> Result<Value, String> {
    let Some(t) = text.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(Value::Null);
    };
    Ok(match kind {
        FieldKind::Text => Value::Text(if field.is_number() {
            plain_decimal(t).unwrap_or_else(|| t.to_string())
        } else {
            t.to_string()
        }),
        FieldKind::Integer => {
            let p = plain_decimal(t).ok_or_else(|| format!("`{t}` is not a number"))?;
            let (i, f) = p.split_once('.').unwrap_or((&p, ""));
            if f.bytes().any(|b| b != b'0') {
                return Err(format!("`{t}` is not a whole number"));
            }
            Value::Integer(i.parse().map_err(|_| format!("`{t}` is out of range"))?)
        }
        FieldKind::Currency => Value::Currency(Currency::parse(t).map_err(|e| e.to_string())?),
        FieldKind::Timestamp => {
            Value::Timestamp(parse_datetime(t).ok_or_else(|| format!("`{t}` is not a date-time"))?)
        }
        FieldKind::Money => {
            let c = currency.ok_or_else(|| {
                "amounts need a currency: the record has no CurrencyIsoCode (set currency_field, or `currency` for a single-currency org)".to_string()
            })?;
            let p = plain_decimal(t).ok_or_else(|| format!("`{t}` is not a number"))?;
            Value::Money(
                recon_core::parse::money(&p, c, recon_core::AmountFormat::Major)
                    .map_err(|e| e.to_string())?,
            )
        }
    })
}

/// An amount as decimal text for `field`: with the currency's decimals,
/// trailing zeros past the field's scale dropped (`500.00` JPY is `500`,
/// KWD `1.230` into scale 2 is `1.23`); significant digits are never
/// dropped (KWD `1.234` stays `1.234`).
pub fn money_text(m: Money, field: &FieldInfo) -> String {
    let text = m.to_major_string();
    if !field.is_number() {
        return text;
    }
    let scale = field.scale as usize;
    match text.split_once('.') {
        Some((i, f)) if f.len() > scale => {
            let kept = f.trim_end_matches('0');
            let kept = &f[..kept.len().max(scale)];
            if kept.is_empty() {
                i.to_string()
            } else {
                format!("{i}.{kept}")
            }
        }
        _ => text,
    }
}

/// Whether `m` has more significant decimals than `field`'s scale (the
/// UI shows it rounded).
pub fn beyond_scale(m: Money, field: &FieldInfo) -> bool {
    field.is_number()
        && m.to_major_string()
            .split_once('.')
            .is_some_and(|(_, f)| f.trim_end_matches('0').len() > field.scale as usize)
}

/// How a value is written: `Some(text)`, or `None` for null. `number`
/// says the text is a number (JSON number rather than string).
pub struct Written {
    /// The value's text, `None` for null.
    pub text: Option<String>,
    /// Whether to send it as a JSON number.
    pub number: bool,
    /// Whether to send it as a JSON boolean.
    pub boolean: bool,
}

/// A canonical value as `field` takes it.
pub fn value_to_field(v: &Value, field: &FieldInfo) -> Result<Written, String> {
    let plain = |text: String| Written {
        number: false,
        boolean: false,
        text: Some(text),
    };
    Ok(match v {
        Value::Null => Written {
            text: None,
            number: false,
            boolean: false,
        },
        Value::Money(m) => Written {
            text: Some(money_text(*m, field)),
            number: field.is_number(),
            boolean: false,
        },
        Value::Integer(i) => Written {
            text: Some(i.to_string()),
            number: field.is_number(),
            boolean: false,
        },
        Value::Timestamp(t) if field.is_date() => {
            plain(TimeZone::UTC.to_datetime(*t).date().to_string())
        }
        Value::Timestamp(t) => plain(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        Value::Currency(c) => plain(c.code().to_string()),
        Value::Text(s) if field.is_number() => match plain_decimal(s) {
            Some(n) => Written {
                text: Some(n),
                number: true,
                boolean: false,
            },
            None => plain(s.clone()),
        },
        Value::Text(s) if field.kind == "boolean" => match s.trim().to_ascii_lowercase().as_str() {
            b @ ("true" | "false") => Written {
                text: Some(b.to_string()),
                number: false,
                boolean: true,
            },
            _ => plain(s.clone()),
        },
        Value::Text(s) => plain(s.clone()),
    })
}

/// A written value as JSON: numbers as JSON numbers with their exact text.
pub fn to_json(w: &Written) -> Json {
    match &w.text {
        None => Json::Null,
        Some(t) if w.number => t
            .parse::<serde_json::Number>()
            .map(Json::Number)
            .unwrap_or_else(|_| Json::String(t.clone())),
        Some(t) if w.boolean => Json::Bool(t == "true"),
        Some(t) => Json::String(t.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(kind: &str, scale: u32) -> FieldInfo {
        FieldInfo {
            name: "F__c".into(),
            kind: kind.into(),
            external_id: false,
            unique: false,
            case_sensitive: false,
            scale,
            precision: 18,
            createable: true,
            updateable: true,
        }
    }

    fn cur(c: &str) -> Currency {
        Currency::parse(c).unwrap()
    }

    #[test]
    fn plain_decimals_expand_exponents_exactly() {
        assert_eq!(plain_decimal("29.99").as_deref(), Some("29.99"));
        assert_eq!(plain_decimal("1.5E3").as_deref(), Some("1500"));
        assert_eq!(plain_decimal("1.5E+3").as_deref(), Some("1500"));
        assert_eq!(plain_decimal("-2.5e-2").as_deref(), Some("-0.025"));
        assert_eq!(plain_decimal("1.0E7").as_deref(), Some("10000000"));
        assert_eq!(plain_decimal("123.456E1").as_deref(), Some("1234.56"));
        assert_eq!(
            plain_decimal("9007199254740993.01").as_deref(),
            Some("9007199254740993.01"),
            "beyond f64's exact integers"
        );
        assert_eq!(plain_decimal("abc"), None);
        assert_eq!(plain_decimal("1e"), None);
    }

    #[test]
    fn datetimes_in_every_salesforce_form() {
        let want: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        for t in [
            "2026-01-02T03:04:05.000+0000",
            "2026-01-02T03:04:05.000Z",
            "2026-01-02T03:04:05Z",
            "2026-01-02T04:04:05.000+0100",
            "2026-01-02T03:04:05+00:00",
        ] {
            assert_eq!(parse_datetime(t), Some(want), "{t}");
        }
        assert_eq!(
            parse_datetime("2026-01-02"),
            Some("2026-01-02T00:00:00Z".parse().unwrap())
        );
        assert_eq!(parse_datetime("yesterday"), None);
    }

    #[test]
    fn money_is_read_exactly_in_the_record_currency() {
        let f = field("currency", 2);
        let v = value_from_text(
            Some("9007199254740.99"),
            FieldKind::Money,
            &f,
            Some(cur("USD")),
        )
        .unwrap();
        assert_eq!(
            v,
            Value::Money(Money::from_minor(900_719_925_474_099, cur("USD")))
        );
        let jpy = value_from_text(Some("500.00"), FieldKind::Money, &f, Some(cur("JPY"))).unwrap();
        assert_eq!(jpy, Value::Money(Money::from_minor(500, cur("JPY"))));
        assert!(value_from_text(Some("1.5"), FieldKind::Money, &f, Some(cur("JPY"))).is_err());
        assert!(value_from_text(Some("1.5"), FieldKind::Money, &f, None)
            .unwrap_err()
            .contains("currency"));
        assert_eq!(
            value_from_text(None, FieldKind::Money, &f, None).unwrap(),
            Value::Null
        );
    }

    #[test]
    fn money_is_written_exactly_without_zeros_past_the_scale() {
        let two = field("currency", 2);
        let m = |minor, c| Money::from_minor(minor, cur(c));
        assert_eq!(money_text(m(2999, "USD"), &two), "29.99");
        assert_eq!(money_text(m(2990, "USD"), &two), "29.90");
        assert_eq!(money_text(m(500, "JPY"), &two), "500");
        assert_eq!(money_text(m(1230, "KWD"), &two), "1.23");
        assert_eq!(money_text(m(1234, "KWD"), &two), "1.234");
        assert!(beyond_scale(m(1234, "KWD"), &two));
        assert!(!beyond_scale(m(1230, "KWD"), &two));
        assert!(!beyond_scale(m(2999, "USD"), &two));
        let zero = field("currency", 0);
        assert_eq!(money_text(m(1200, "USD"), &zero), "12");
        assert_eq!(money_text(m(1201, "USD"), &zero), "12.01");
        assert!(beyond_scale(m(1201, "USD"), &zero));
        let w = value_to_field(&Value::Money(m(2999, "USD")), &two).unwrap();
        assert_eq!(to_json(&w).to_string(), "29.99");
        let big = value_to_field(&Value::Money(m(i64::MAX, "USD")), &two).unwrap();
        assert_eq!(to_json(&big).to_string(), "92233720368547758.07");
    }

    #[test]
    fn other_values_by_field_type() {
        let dt = field("datetime", 0);
        let t: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let w = value_to_field(&Value::Timestamp(t), &dt).unwrap();
        assert_eq!(to_json(&w), Json::String("2026-01-02T03:04:05Z".into()));
        let d = field("date", 0);
        let w = value_to_field(&Value::Timestamp(t), &d).unwrap();
        assert_eq!(w.text.as_deref(), Some("2026-01-02"));
        let b = field("boolean", 0);
        assert_eq!(
            to_json(&value_to_field(&Value::Text("TRUE".into()), &b).unwrap()),
            Json::Bool(true)
        );
        let n = field("double", 2);
        assert_eq!(
            value_from_text(Some("1.0E2"), FieldKind::Text, &n, None).unwrap(),
            Value::Text("100".into())
        );
        assert_eq!(
            value_from_text(Some("42.000"), FieldKind::Integer, &n, None).unwrap(),
            Value::Integer(42)
        );
        assert!(value_from_text(Some("42.5"), FieldKind::Integer, &n, None).is_err());
        assert_eq!(
            json_text(Some(&Json::Bool(false))).as_deref(),
            Some("false")
        );
        assert_eq!(json_text(Some(&Json::String(String::new()))), None);
    }
}
