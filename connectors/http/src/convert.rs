//! JSON records to canonical records and back: each field read by its
//! JSONPath and typed by the job's field kind, numbers taken from their
//! exact JSON text (serde_json's `arbitrary_precision`), never a float.

use recon_core::parse::{self, TimestampRules, Unit};
use recon_core::{
    AmountFormat, ConnectorError, Currency, FieldKind, Location, Record, Schema, Value,
};
use serde_json::Value as Json;

use crate::path::{snippet, Path};
use crate::template::{Major, Val};

/// How the JSON of one record becomes a canonical record.
#[derive(Clone, Debug)]
pub struct Mapping {
    /// The external ID (`id`).
    pub id: Path,
    /// One path per schema field.
    pub fields: Vec<Path>,
    /// Each schema field's kind.
    pub kinds: Vec<FieldKind>,
    /// The field names, for messages and templates.
    pub names: Vec<String>,
    /// The currency of money fields.
    pub currency: Option<Path>,
    /// Minor or major units.
    pub amount_format: AmountFormat,
    /// How a bare number in a timestamp field counts.
    pub timestamp_unit: Unit,
    /// Schema index of the job's time field.
    pub time_field: Option<usize>,
    /// Whether a date and time without an offset is UTC.
    pub naive_is_utc: bool,
}

impl Mapping {
    fn rules(&self) -> TimestampRules {
        TimestampRules {
            integers: Some(self.timestamp_unit),
            naive_is_utc: self.naive_is_utc,
            date_is_midnight_utc: true,
        }
    }

    /// The external ID of `record` (a string, or an integer's text).
    pub fn key_of(&self, record: &Json, endpoint: &str) -> Result<String, ConnectorError> {
        match self.id.first(record) {
            Some(Json::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Json::Number(n)) => Ok(n.to_string()),
            Some(other) => Err(ConnectorError::Config(format!(
                "{} = {:?} found {} in a record of {endpoint} (first 200 bytes of the record: {}); the external ID must be a non-empty string or an integer: point {} at it",
                self.id.key,
                self.id.text,
                kind_of(other),
                snippet(record),
                self.id.key
            ))),
            None => Err(self.id.failed("matched nothing in a record", endpoint, record)),
        }
    }

    /// The canonical record of `record`, the JSON of one object.
    pub fn to_record(
        &self,
        record: &Json,
        endpoint: &str,
        noun: &str,
    ) -> Result<Record, ConnectorError> {
        let key = self.key_of(record, endpoint)?;
        let bad = |p: &Path, message: String| ConnectorError::Malformed {
            location: Location(format!("{noun} {key}")),
            message: format!("{} = {:?}: {message}", p.key, p.text),
        };
        let mut values = Vec::with_capacity(self.fields.len());
        for (p, kind) in self.fields.iter().zip(&self.kinds) {
            let raw = p.first(record);
            let value = match (kind, raw) {
                (_, None | Some(Json::Null)) => Value::Null,
                (FieldKind::Money, Some(a)) => {
                    let text = scalar_text(a)
                        .ok_or_else(|| bad(p, format!("is {}, not an amount", kind_of(a))))?;
                    let cp = self.currency.as_ref().ok_or_else(|| {
                        bad(
                            p,
                            "an amount needs a currency: set `currency` to its JSONPath".into(),
                        )
                    })?;
                    let code = match cp.first(record) {
                        Some(Json::String(c)) if !c.is_empty() => c.clone(),
                        _ => {
                            return Err(bad(
                                cp,
                                format!(
                                    "is missing or not a currency code; amount `{text}` needs one"
                                ),
                            ))
                        }
                    };
                    let c = Currency::parse(&code).map_err(|e| bad(cp, e.to_string()))?;
                    Value::Money(
                        parse::money(&text, c, self.amount_format)
                            .map_err(|e| bad(p, e.to_string()))?,
                    )
                }
                (FieldKind::Currency, Some(Json::String(c))) if !c.is_empty() => {
                    Value::Currency(Currency::parse(c).map_err(|e| bad(p, e.to_string()))?)
                }
                (FieldKind::Currency, Some(Json::String(_))) => Value::Null,
                (FieldKind::Currency, Some(other)) => {
                    return Err(bad(
                        p,
                        format!("is {}, not a currency code", kind_of(other)),
                    ))
                }
                (FieldKind::Integer, Some(n)) => {
                    let text = scalar_text(n)
                        .ok_or_else(|| bad(p, format!("is {}, not a whole number", kind_of(n))))?;
                    Value::Integer(parse::integer(&text).map_err(|e| bad(p, e.to_string()))?)
                }
                (FieldKind::Timestamp, Some(Json::String(s))) if s.trim().is_empty() => Value::Null,
                (FieldKind::Timestamp, Some(t)) => {
                    let text = scalar_text(t)
                        .ok_or_else(|| bad(p, format!("is {}, not a timestamp", kind_of(t))))?;
                    Value::Timestamp(
                        parse::timestamp(&text, self.rules()).map_err(|e| bad(p, e.to_string()))?,
                    )
                }
                (FieldKind::Text, Some(Json::String(s))) => Value::Text(s.clone()),
                (FieldKind::Text, Some(Json::Bool(b))) => Value::Text(b.to_string()),
                (FieldKind::Text, Some(Json::Number(n))) => Value::Text(n.to_string()),
                (FieldKind::Text, Some(other)) => {
                    return Err(bad(
                        p,
                        format!(
                            "is {}; point the path at a string inside it",
                            kind_of(other)
                        ),
                    ))
                }
            };
            values.push(value);
        }
        Ok(Record { key, values })
    }

    /// The value a write template's `{{ fields.NAME }}` stands for.
    pub fn field_val(&self, schema: &Schema, record: &Record, name: &str) -> Val {
        let Some(i) = schema.index_of(name) else {
            return Val::Null;
        };
        match record.values.get(i) {
            None | Some(Value::Null) => Val::Null,
            Some(Value::Text(s)) => Val::Text(s.clone()),
            Some(Value::Integer(n)) => Val::Number(n.to_string()),
            Some(Value::Money(m)) => {
                Val::Money(*m, Major(self.amount_format == AmountFormat::Major))
            }
            Some(Value::Currency(c)) => Val::Text(c.code().to_string()),
            Some(Value::Timestamp(t)) => Val::Time(*t),
        }
    }
}

/// A scalar's text: a string as is, a number as its exact JSON text.
fn scalar_text(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `an object`, `a list`, `true`: what a JSON value is, for messages.
pub fn kind_of(v: &Json) -> String {
    match v {
        Json::Null => "null".into(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => format!("the number {n}"),
        Json::String(s) => format!("the string {s:?}"),
        Json::Array(_) => "a list".into(),
        Json::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::{Field, Money};
    fn mapping(format: AmountFormat) -> (Schema, Mapping) {
        let f = |name: &str, kind| Field {
            name: name.into(),
            kind,
            compared: true,
        };
        let schema = Schema {
            fields: vec![
                f("amount", FieldKind::Money),
                f("currency", FieldKind::Currency),
                f("status", FieldKind::Text),
                f("created", FieldKind::Timestamp),
                f("count", FieldKind::Integer),
            ],
        };
        let p = |k: &str, t: &str| Path::parse(k, t).unwrap();
        let m = Mapping {
            id: p("id", "$.id"),
            fields: vec![
                p("fields.amount", "$.price.amount"),
                p("fields.currency", "$.price.currency"),
                p("fields.status", "$.status"),
                p("fields.created", "$.created_at"),
                p("fields.count", "$.count"),
            ],
            kinds: schema.fields.iter().map(|f| f.kind).collect(),
            names: schema.fields.iter().map(|f| f.name.clone()).collect(),
            currency: Some(p("currency", "$.price.currency")),
            amount_format: format,
            timestamp_unit: Unit::Seconds,
            time_field: Some(3),
            naive_is_utc: false,
        };
        (schema, m)
    }

    fn parse(text: &str) -> Json {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn values_are_read_exactly_from_the_json_text() {
        let (_, m) = mapping(AmountFormat::Major);
        let r = m
            .to_record(
                &parse(r#"{"id": 42, "price": {"amount": 90071992547409.93, "currency": "usd"}, "status": true, "created_at": "2026-11-28T05:00:00-05:00", "count": "7"}"#),
                "GET /orders",
                "order",
            )
            .unwrap();
        assert_eq!(r.key, "42");
        let usd = Currency::parse("USD").unwrap();
        assert_eq!(
            r.values[0],
            Value::Money(Money::from_minor(9_007_199_254_740_993, usd))
        );
        assert_eq!(r.values[1], Value::Currency(usd));
        assert_eq!(r.values[2], Value::Text("true".into()));
        assert_eq!(
            r.values[3],
            Value::Timestamp("2026-11-28T10:00:00Z".parse().unwrap())
        );
        assert_eq!(r.values[4], Value::Integer(7));
    }

    #[test]
    fn minor_units_unix_seconds_and_missing_values() {
        let (schema, m) = mapping(AmountFormat::Minor);
        let r = m
            .to_record(
                &parse(r#"{"id": "o1", "price": {"amount": 2999, "currency": "JPY"}, "created_at": 1795842000}"#),
                "GET /orders",
                "order",
            )
            .unwrap();
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(r.values[0], Value::Money(Money::from_minor(2999, jpy)));
        assert_eq!(r.values[2], Value::Null);
        assert_eq!(
            r.values[3],
            Value::Timestamp(Timestamp::from_second(1_795_842_000).unwrap())
        );
        assert_eq!(
            m.field_val(&schema, &r, "amount"),
            Val::Money(Money::from_minor(2999, jpy), Major(false))
        );
        assert_eq!(m.field_val(&schema, &r, "status"), Val::Null);
    }

    use jiff::Timestamp;

    #[test]
    fn wrong_values_name_the_record_the_setting_and_the_path() {
        let (_, m) = mapping(AmountFormat::Minor);
        let e = m
            .to_record(
                &parse(r#"{"id": "o1", "price": {"amount": 29.99, "currency": "USD"}}"#),
                "GET /orders",
                "order",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("order o1") && e.contains("fields.amount = \"$.price.amount\""),
            "{e}"
        );
        let e = m
            .to_record(
                &parse(r#"{"id": "o2", "status": {"a": 1}}"#),
                "GET /orders",
                "order",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fields.status") && e.contains("an object"),
            "{e}"
        );
        let e = m
            .to_record(&parse(r#"{"uuid": "o3"}"#), "GET /orders", "order")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("id = \"$.id\" matched nothing in a record in the answer of GET /orders")
                && e.contains("{\"uuid\":\"o3\"}"),
            "{e}"
        );
        let e = m
            .to_record(
                &parse(r#"{"id": "o4", "price": {"amount": 1}}"#),
                "GET /orders",
                "order",
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("currency = \"$.price.currency\""), "{e}");
    }
}
