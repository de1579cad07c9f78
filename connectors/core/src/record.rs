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
            Value::Money(m) => f.write_str(&m.to_major_string()),
            Value::Currency(c) => f.write_str(c.code()),
            Value::Timestamp(t) => write!(f, "{}", format_timestamp(*t)),
        }
    }
}

/// ISO 8601 UTC with whole seconds, the one timestamp form in reports.
pub fn format_timestamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
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
