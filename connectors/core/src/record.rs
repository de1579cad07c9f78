//! The canonical record every connector produces: an external ID and typed
//! field values, in the order the job's schema lists its fields.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::money::{Currency, Money};

/// How a canonical field is typed and therefore compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    /// Free text, compared byte for byte.
    Text,
    /// A whole number.
    Integer,
    /// An amount with its currency, compared in minor units.
    Money,
    /// An ISO 4217 code, compared case-insensitively.
    Currency,
    /// An instant, compared in whole seconds (UTC).
    Timestamp,
}

impl fmt::Display for FieldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldKind::Text => "text",
            FieldKind::Integer => "integer",
            FieldKind::Money => "money",
            FieldKind::Currency => "currency",
            FieldKind::Timestamp => "timestamp",
        })
    }
}

/// One typed field value, owned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    /// Absent or empty.
    Null,
    /// Free text.
    Text(String),
    /// A whole number.
    Integer(i64),
    /// Money in minor units.
    Money(Money),
    /// A currency code.
    Currency(Currency),
    /// An instant.
    Timestamp(Timestamp),
}

/// One typed field value, borrowing its text. Readers build these without
/// allocating, which keeps the diff of large exports fast.
///
/// The tag fills a whole word (`repr(u64)`; the size stays 24 bytes): with a
/// one-byte tag, small payloads (a currency's three bytes) sat in bytes 1-7,
/// which LLVM moves as two overlapping 4-byte copies; reading one back
/// straight after it is written cannot be forwarded from the store buffer,
/// and those reloads were the file reader's hottest stall (perf annotate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum ValueRef<'a> {
    /// Absent or empty.
    Null,
    /// Free text.
    Text(&'a str),
    /// A whole number.
    Integer(i64),
    /// Money in minor units.
    Money(Money),
    /// A currency code.
    Currency(Currency),
    /// An instant.
    Timestamp(Timestamp),
}

const _: () = assert!(std::mem::size_of::<ValueRef<'static>>() == 24);

impl Value {
    /// Borrows this value.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Text(s) => ValueRef::Text(s),
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Money(m) => ValueRef::Money(*m),
            Value::Currency(c) => ValueRef::Currency(*c),
            Value::Timestamp(t) => ValueRef::Timestamp(*t),
        }
    }

    /// The currency of a money value.
    pub fn currency(&self) -> Option<Currency> {
        match self {
            Value::Money(m) => Some(m.currency),
            Value::Currency(c) => Some(*c),
            _ => None,
        }
    }
}

impl ValueRef<'_> {
    /// Copies the borrowed text into an owned value.
    pub fn to_owned_value(&self) -> Value {
        match *self {
            ValueRef::Null => Value::Null,
            ValueRef::Text(s) => Value::Text(s.to_string()),
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Money(m) => Value::Money(m),
            ValueRef::Currency(c) => Value::Currency(c),
            ValueRef::Timestamp(t) => Value::Timestamp(t),
        }
    }
}

impl fmt::Display for Value {
    /// The form used in reports: money in major units (its currency goes in
    /// its own column), timestamps as ISO 8601 UTC with seconds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => Ok(()),
            Value::Text(s) => f.write_str(s),
            Value::Integer(i) => write!(f, "{i}"),
            Value::Money(m) => m.write_major(f),
            Value::Currency(c) => f.write_str(c.code()),
            Value::Timestamp(t) => write_timestamp(f, *t),
        }
    }
}

/// ISO 8601 UTC with whole seconds, the one timestamp form in reports.
pub fn format_timestamp(t: Timestamp) -> String {
    let mut s = String::with_capacity(20);
    // Writing to a String cannot fail.
    let _ = write_timestamp(&mut s, t);
    s
}

/// [`format_timestamp`] into `w`, without a string of its own. Instants
/// from 1970 to 9999 are written from their day number (a report of a
/// 10M-row run writes hundreds of thousands: `strftime` parsed its format
/// and made a string each time); any other goes through `strftime`.
pub fn write_timestamp<W: fmt::Write + ?Sized>(w: &mut W, t: Timestamp) -> fmt::Result {
    const FORMAT: &str = "%Y-%m-%dT%H:%M:%SZ";
    // 10000-01-01T00:00:00Z: years of four digits below it.
    const YEAR_10000: i64 = 253_402_300_800;
    let secs = t.as_second();
    if !(0..YEAR_10000).contains(&secs) || t.subsec_nanosecond() < 0 {
        return write!(w, "{}", t.strftime(FORMAT));
    }
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    let mut out = *b"0000-00-00T00:00:00Z";
    let mut put = |at: usize, v: i64, digits: usize| {
        let mut v = v;
        for i in (0..digits).rev() {
            out[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, y, 4);
    put(5, m, 2);
    put(8, d, 2);
    put(11, rem / 3600, 2);
    put(14, rem / 60 % 60, 2);
    put(17, rem % 60, 2);
    // Only ASCII digits and separators were written.
    w.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`), for days from 0 on.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A record from one side, keyed by its external ID. `values` follow the
/// order of the job's [`Schema`](crate::Schema).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The external ID shared by both systems (for example a Stripe charge ID).
    pub key: String,
    /// Field values in schema order.
    pub values: Vec<Value>,
}

/// A canonical field of a job: its name, type, and whether the diff compares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// Canonical name, as reports show it (`amount`, `status`).
    pub name: String,
    /// How values are typed and compared.
    pub kind: FieldKind,
    /// Whether a difference in this field is a mismatch. Money fields are
    /// always read for totals even when not compared.
    pub compared: bool,
}

/// The canonical fields of one job, in the order records carry their values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// Fields in value order.
    pub fields: Vec<Field>,
}

impl Schema {
    /// Index of the first money field, whose amounts make the per-currency totals.
    pub fn money_field(&self) -> Option<usize> {
        self.fields.iter().position(|f| f.kind == FieldKind::Money)
    }

    /// Index of the field with this name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// How a system writes amounts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmountFormat {
    /// Integer minor units (Stripe: `2999`).
    #[default]
    Minor,
    /// Decimal major units (Shopify, ledgers: `29.99`), converted exactly.
    Major,
}

#[cfg(test)]
mod format_tests {
    use super::*;
    use proptest::prelude::*;

    fn by_strftime(t: Timestamp) -> String {
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    #[test]
    fn edges_read_as_strftime_writes_them() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        for t in [
            Timestamp::UNIX_EPOCH,
            at("1970-01-01T00:00:00.999999999Z"),
            at("1969-12-31T23:59:59.5Z"),
            at("1969-12-31T23:59:59Z"),
            at("2000-02-29T12:00:00Z"),
            at("2100-02-28T23:59:59Z"),
            at("2100-03-01T00:00:00Z"),
            at("2400-02-29T00:00:00Z"),
            at("9999-12-30T21:59:59.999Z"),
            Timestamp::MAX,
            Timestamp::MIN,
            at("0001-01-01T00:00:00Z"),
        ] {
            assert_eq!(format_timestamp(t), by_strftime(t), "{t:?}");
            assert_eq!(Value::Timestamp(t).to_string(), by_strftime(t), "{t:?}");
        }
    }

    proptest! {
        /// Every instant jiff holds is written as `strftime` writes it,
        /// with or without a fraction of a second, either side of 1970.
        #[test]
        fn any_instant_reads_as_strftime_writes_it(
            secs in Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
            near in 0i64..400 * 366 * 86_400,
            nanos in 0i32..1_000_000_000,
        ) {
            for s in [secs, near, -near] {
                let t = Timestamp::new(s, if s == Timestamp::MAX.as_second() { 0 } else { nanos })
                    .unwrap_or(Timestamp::new(s, 0).unwrap());
                prop_assert_eq!(format_timestamp(t), by_strftime(t));
            }
        }

        /// A money cell is its major-units text, for any amount.
        #[test]
        fn money_cells_are_major_units(
            minor in any::<i64>(),
            code in prop::sample::select(vec!["USD", "JPY", "KWD", "CLF", "EUR"]),
        ) {
            let m = Money::from_minor(minor, Currency::parse(code).unwrap());
            prop_assert_eq!(Value::Money(m).to_string(), m.to_major_string());
        }
    }
}
