//! Stripe objects as recon reads them: which list endpoint, which JSON path
//! holds each canonical field, and strict conversion of a JSON object into a
//! canonical [`Record`].
//!
//! Parsing ignores fields recon does not read (Stripe adds fields in new API
//! versions) but is strict about the ones it does: a wrong type is an error
//! naming the object ID and the field, never a silent null.

use recon_core::parse;
use recon_core::{
    ConnectorError, Currency, FieldKind, Location, MinorUnits, Record, Schema, Value,
};
use serde::Deserialize;

/// Stripe's minor units in API amounts, where they differ from ISO 4217
/// (or where Stripe's docs single a currency out), per
/// <https://docs.stripe.com/currencies#zero-decimal> and
/// <https://docs.stripe.com/currencies#special-cases>:
///
/// - Zero-decimal currencies (the amount is whole units): BIF, CLP, DJF,
///   GNF, JPY, KMF, KRW, MGA, PYG, RWF, UGX, VND, VUV, XAF, XOF, XPF. All
///   but MGA agree with ISO 4217; ISO gives MGA two decimals, so Stripe MGA
///   `500` is 500.00 MGA.
/// - ISK is two-decimal in the API although ISO 4217 gives it none: "ISK
///   will remain a two-decimal currency in the Stripe API, and an ISK
///   amount of `100` will continue to represent 1 króna"
///   (<https://support.stripe.com/questions/deprecation-of-fractional-isk-charges-and-refunds>).
///   Stripe ISK `10000` is 100 ISK; `10050` cannot be an ISK amount and is
///   refused, never rounded.
/// - HUF and TWD are charged with two decimals in API amounts (Stripe pays
///   them out in whole units only); two is also their ISO 4217 exponent.
/// - Three-decimal currencies (BHD, JOD, KWD, OMR, TND) are in thousandths,
///   as ISO 4217 says, so they need no entry.
pub const STRIPE_MINOR_UNITS: MinorUnits = MinorUnits {
    provider: "Stripe",
    exponents: &[
        ("BIF", 0),
        ("CLP", 0),
        ("DJF", 0),
        ("GNF", 0),
        ("JPY", 0),
        ("KMF", 0),
        ("KRW", 0),
        ("MGA", 0),
        ("PYG", 0),
        ("RWF", 0),
        ("UGX", 0),
        ("VND", 0),
        ("VUV", 0),
        ("XAF", 0),
        ("XOF", 0),
        ("XPF", 0),
        ("ISK", 2),
        ("HUF", 2),
        ("TWD", 2),
    ],
};

/// The Stripe object types recon can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StripeObject {
    /// `/v1/charges`
    Charges,
    /// `/v1/payment_intents`
    PaymentIntents,
    /// `/v1/invoices`
    Invoices,
    /// `/v1/refunds`
    Refunds,
    /// `/v1/customers`
    Customers,
    /// `/v1/balance_transactions`: funds moving through the Stripe balance
    /// (<https://docs.stripe.com/api/balance_transactions/object>).
    BalanceTransactions,
    /// `/v1/payouts`: payouts to the account's bank account or card
    /// (<https://docs.stripe.com/api/payouts/object>).
    Payouts,
}

impl StripeObject {
    /// The list endpoint's path.
    pub fn path(&self) -> &'static str {
        match self {
            StripeObject::Charges => "/v1/charges",
            StripeObject::PaymentIntents => "/v1/payment_intents",
            StripeObject::Invoices => "/v1/invoices",
            StripeObject::Refunds => "/v1/refunds",
            StripeObject::Customers => "/v1/customers",
            StripeObject::BalanceTransactions => "/v1/balance_transactions",
            StripeObject::Payouts => "/v1/payouts",
        }
    }

    /// The singular noun for messages.
    pub fn noun(&self) -> &'static str {
        match self {
            StripeObject::Charges => "charge",
            StripeObject::PaymentIntents => "payment intent",
            StripeObject::Invoices => "invoice",
            StripeObject::Refunds => "refund",
            StripeObject::Customers => "customer",
            StripeObject::BalanceTransactions => "balance transaction",
            StripeObject::Payouts => "payout",
        }
    }

    /// The documented default JSON path of a canonical field for this
    /// object (see the README's Stripe section); other names are read as a
    /// path of their own name.
    ///
    /// Balance transactions and payouts read every documented field from
    /// the top-level field of its own name (see [`StripeObject::fields`]):
    /// `amount`, `fee` and `net` are integers in Stripe's minor units, signed
    /// (a refund's or a failed payout's are negative); `source` and
    /// `balance_transaction` are IDs, or an expanded object's `id`.
    pub fn default_path(&self, field: &str) -> String {
        let p = match (self, field) {
            (StripeObject::Invoices, "amount") => "total",
            (StripeObject::Charges, "email") => "billing_details.email",
            (StripeObject::PaymentIntents, "email") => "receipt_email",
            (StripeObject::Invoices, "email") => "customer_email",
            (StripeObject::Refunds, "customer") => "charge",
            _ => field,
        };
        p.to_string()
    }
}

impl StripeObject {
    /// The fields recon documents for this object, with their JSON types
    /// in Stripe's API reference (`"integer"`, `"string"`, `"boolean"`,
    /// `"timestamp"` for Unix seconds, `"id"` for an ID or expanded
    /// object), per <https://docs.stripe.com/api/balance_transactions/object>
    /// and <https://docs.stripe.com/api/payouts/object>. Empty for the
    /// objects whose fields the README lists by name only.
    pub fn fields(&self) -> &'static [(&'static str, &'static str)] {
        match self {
            StripeObject::BalanceTransactions => &[
                ("amount", "integer"),
                ("fee", "integer"),
                ("net", "integer"),
                ("currency", "string"),
                ("type", "string"),
                ("source", "id"),
                ("status", "string"),
                ("created", "timestamp"),
                ("available_on", "timestamp"),
                ("reporting_category", "string"),
            ],
            StripeObject::Payouts => &[
                ("amount", "integer"),
                ("currency", "string"),
                ("status", "string"),
                ("arrival_date", "timestamp"),
                ("created", "timestamp"),
                ("method", "string"),
                ("type", "string"),
                ("automatic", "boolean"),
                ("balance_transaction", "id"),
            ],
            _ => &[],
        }
    }
}

impl StripeObject {
    /// The list filters of this object's list endpoint that a job may set
    /// (`source.filters`), beyond the `created` window and the cursor:
    /// balance transactions `type`, `currency`, `source`, `payout`
    /// (<https://docs.stripe.com/api/balance_transactions/list>), payouts
    /// `status`, `destination` (<https://docs.stripe.com/api/payouts/list>).
    /// The other objects take none here.
    pub fn list_filters(&self) -> &'static [&'static str] {
        match self {
            StripeObject::BalanceTransactions => &["type", "currency", "source", "payout"],
            StripeObject::Payouts => &["status", "destination"],
            _ => &[],
        }
    }
}

/// An ID field that may be expanded: the string, or the object's `id`.
pub fn id_of(v: Option<&serde_json::Value>) -> Option<&str> {
    match v? {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Object(o) => o.get("id").and_then(|i| i.as_str()),
        _ => None,
    }
}

/// Whether `object` passes the list filter `name = want` judged on its own
/// fields: `type`, `status` exactly, `currency` ignoring case (Stripe
/// sends lowercase), `destination` by ID. `None` for a filter the object
/// alone cannot decide (`payout`: a balance transaction does not name its
/// payout; `source`: Stripe documents it as "transactions associated with
/// the given object", which may be more than the `source` field says).
pub fn passes_filter(object: &serde_json::Value, name: &str, want: &str) -> Option<bool> {
    let text = |f: &str| object.get(f).and_then(|v| v.as_str());
    match name {
        "type" | "status" => Some(text(name) == Some(want)),
        "currency" => Some(text("currency").is_some_and(|c| c.eq_ignore_ascii_case(want))),
        "destination" => Some(id_of(object.get("destination")) == Some(want)),
        _ => None,
    }
}

/// A page of a Stripe list response.
#[derive(Debug, Deserialize)]
pub struct ListPage {
    /// The objects, newest first.
    pub data: Vec<serde_json::Value>,
    /// Whether more objects follow.
    pub has_more: bool,
}

fn path<'v>(obj: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    let mut cur = obj;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

/// How each schema field is read from an object.
#[derive(Clone, Debug)]
pub struct FieldPaths {
    /// JSON path per schema field.
    pub fields: Vec<String>,
    /// JSON path of the money fields' currency.
    pub currency: String,
}

/// The `created` of an object, which every listed Stripe object has.
pub fn created_of(
    object: StripeObject,
    v: &serde_json::Value,
) -> Result<(String, i64), ConnectorError> {
    let id = v
        .get("id")
        .and_then(|i| i.as_str())
        .ok_or_else(|| ConnectorError::Malformed {
            location: Location(format!("Stripe {}", object.path())),
            message: "an object has no string `id`".into(),
        })?
        .to_string();
    let created =
        v.get("created")
            .and_then(|c| c.as_i64())
            .ok_or_else(|| ConnectorError::Malformed {
                location: Location(format!("Stripe {} {id}", object.noun())),
                message: "field `created` is missing or not an integer (Unix seconds)".into(),
            })?;
    Ok((id, created))
}

/// Converts one Stripe object into a canonical record.
pub fn to_record(
    object: StripeObject,
    schema: &Schema,
    paths: &FieldPaths,
    v: &serde_json::Value,
) -> Result<Record, ConnectorError> {
    let (id, _) = created_of(object, v)?;
    let bad = |field: &str, what: &str| ConnectorError::Malformed {
        location: Location(format!("Stripe {} {id}", object.noun())),
        message: format!("field `{field}` {what}"),
    };
    let mut values = Vec::with_capacity(schema.fields.len());
    for (f, p) in schema.fields.iter().zip(&paths.fields) {
        let raw = path(v, p);
        let value = match (f.kind, raw) {
            (_, None) | (_, Some(serde_json::Value::Null)) => Value::Null,
            (FieldKind::Money, Some(a)) => {
                // The number's own text (serde_json keeps it with
                // `arbitrary_precision`): `2999.0` or `1e3` is refused,
                // not read through a float.
                let amount = a.as_i64().ok_or_else(|| {
                    bad(
                        p,
                        &format!("`{a}` is not an integer amount in Stripe's minor units"),
                    )
                })?;
                let code = path(v, &paths.currency)
                    .and_then(|c| c.as_str())
                    .ok_or_else(|| bad(&paths.currency, "is missing; amounts need a currency"))?;
                let c = Currency::parse(code).map_err(|e| bad(&paths.currency, &e.to_string()))?;
                // Stripe's units, not ISO's: ISK 10000 is 100 ISK.
                Value::Money(
                    STRIPE_MINOR_UNITS
                        .to_money(amount, c)
                        .map_err(|e| bad(p, &e.to_string()))?,
                )
            }
            (FieldKind::Currency, Some(c)) => {
                let code = c.as_str().ok_or_else(|| bad(p, "is not a currency code"))?;
                Value::Currency(Currency::parse(code).map_err(|e| bad(p, &e.to_string()))?)
            }
            (FieldKind::Integer, Some(n)) => Value::Integer(
                n.as_i64()
                    .ok_or_else(|| bad(p, &format!("`{n}` is not a 64-bit integer")))?,
            ),
            (FieldKind::Timestamp, Some(n)) => {
                let secs = n
                    .as_i64()
                    .ok_or_else(|| bad(p, &format!("`{n}` is not a Unix timestamp")))?;
                Value::Timestamp(
                    parse::unix(secs, parse::Unit::Seconds).map_err(|e| bad(p, &e.to_string()))?,
                )
            }
            (FieldKind::Text, Some(serde_json::Value::String(s))) => Value::Text(s.clone()),
            (FieldKind::Text, Some(serde_json::Value::Bool(b))) => Value::Text(b.to_string()),
            // The number's text as Stripe sent it (`arbitrary_precision`).
            (FieldKind::Text, Some(serde_json::Value::Number(n))) => Value::Text(n.to_string()),
            // An expanded object (customer: {id: …}) reads as its ID.
            (FieldKind::Text, Some(o @ serde_json::Value::Object(_))) => {
                match o.get("id").and_then(|i| i.as_str()) {
                    Some(i) => Value::Text(i.to_string()),
                    None => return Err(bad(p, "is an object without an `id`")),
                }
            }
            (FieldKind::Text, Some(_)) => return Err(bad(p, "is a list, not text")),
        };
        values.push(value);
    }
    Ok(Record { key: id, values })
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::{Field, Money};
    use serde_json::json;

    fn schema() -> Schema {
        let f = |n: &str, k| Field {
            name: n.into(),
            kind: k,
            compared: true,
        };
        Schema {
            fields: vec![
                f("amount", FieldKind::Money),
                f("currency", FieldKind::Currency),
                f("status", FieldKind::Text),
                f("created", FieldKind::Timestamp),
                f("customer", FieldKind::Text),
                f("email", FieldKind::Text),
            ],
        }
    }

    fn paths(o: StripeObject) -> FieldPaths {
        FieldPaths {
            fields: schema()
                .fields
                .iter()
                .map(|f| o.default_path(&f.name))
                .collect(),
            currency: "currency".into(),
        }
    }

    #[test]
    fn reads_a_charge_with_documented_defaults() {
        let charge = json!({
            "id": "ch_1", "object": "charge", "amount": 500, "currency": "jpy", "status": "succeeded",
            "created": 1_764_374_399, "customer": {"id": "cus_9", "object": "customer"},
            "billing_details": {"email": "a@example.com"}, "some_new_field": {"x": 1}
        });
        let r = to_record(
            StripeObject::Charges,
            &schema(),
            &paths(StripeObject::Charges),
            &charge,
        )
        .unwrap();
        assert_eq!(r.key, "ch_1");
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(r.values[0], Value::Money(Money::from_minor(500, jpy)));
        assert_eq!(r.values[1], Value::Currency(jpy));
        assert_eq!(r.values[4], Value::Text("cus_9".into()));
        assert_eq!(r.values[5], Value::Text("a@example.com".into()));
    }

    #[test]
    fn wrong_types_name_the_object_and_field() {
        let bad = json!({"id": "ch_2", "created": 1, "amount": "5.00", "currency": "usd"});
        let e = to_record(
            StripeObject::Charges,
            &schema(),
            &paths(StripeObject::Charges),
            &bad,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("Stripe charge ch_2") && e.contains("field `amount`"),
            "{e}"
        );
        let e = to_record(
            StripeObject::Charges,
            &schema(),
            &paths(StripeObject::Charges),
            &json!({"id": "ch_3", "amount": 1}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ch_3") && e.contains("created"), "{e}");
        let e = to_record(
            StripeObject::Charges,
            &schema(),
            &paths(StripeObject::Charges),
            &json!({"id": "ch_4", "created": 1, "amount": 1, "currency": "zzz"}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown currency code `zzz`"), "{e}");
    }

    #[test]
    fn created_is_unix_seconds_either_side_of_the_epoch_within_range() {
        let read = |created: serde_json::Value| {
            to_record(
                StripeObject::Charges,
                &schema(),
                &paths(StripeObject::Charges),
                &json!({"id": "ch_5", "created": created, "amount": 1, "currency": "usd"}),
            )
        };
        let r = read(json!(-60)).unwrap();
        assert_eq!(
            r.values[3],
            Value::Timestamp("1969-12-31T23:59:00Z".parse().unwrap())
        );
        let e = read(json!(253_402_300_800_i64)).unwrap_err().to_string();
        assert_eq!(
            e,
            "Stripe charge ch_5: field `created` `253402300800` Unix seconds is out of range (years -9999 to 9999)"
        );
    }

    #[test]
    fn invoices_use_total_and_customer_email() {
        let inv = json!({"id": "in_1", "created": 5, "total": 1234, "currency": "kwd", "status": "paid", "customer_email": "b@example.com"});
        let r = to_record(
            StripeObject::Invoices,
            &schema(),
            &paths(StripeObject::Invoices),
            &inv,
        )
        .unwrap();
        assert_eq!(
            r.values[0],
            Value::Money(Money::from_minor(1234, Currency::parse("KWD").unwrap()))
        );
        assert_eq!(r.values[5], Value::Text("b@example.com".into()));
    }

    fn charge_in(id: &str, amount: serde_json::Value, currency: &str) -> serde_json::Value {
        json!({"id": id, "object": "charge", "amount": amount, "currency": currency,
               "status": "succeeded", "created": 1_764_374_399})
    }

    /// Stripe's API amounts per https://docs.stripe.com/currencies: each
    /// row is (currency, Stripe amount, canonical ISO 4217 minor units,
    /// major units as reports print them).
    #[test]
    fn stripe_amounts_become_iso_minor_units_exactly() {
        let cases: &[(&str, i64, i64, &str)] = &[
            // ISK: two decimals in the API, none in ISO 4217.
            ("isk", 10000, 100, "100"),
            ("isk", 123400, 1234, "1234"),
            // MGA: zero-decimal in the API, two decimals in ISO 4217.
            ("mga", 500, 50000, "500.00"),
            // HUF, TWD: two decimals in API amounts, as in ISO 4217.
            ("huf", 12345, 12345, "123.45"),
            ("twd", 9900, 9900, "99.00"),
            // UGX, JPY: zero-decimal in both.
            ("ugx", 5000, 5000, "5000"),
            ("jpy", 500, 500, "500"),
            // KWD: three decimals in both.
            ("kwd", 1230, 1230, "1.230"),
            ("usd", 2999, 2999, "29.99"),
            ("usd", -150, -150, "-1.50"),
        ];
        for &(code, amount, minor, major) in cases {
            let r = to_record(
                StripeObject::Charges,
                &schema(),
                &paths(StripeObject::Charges),
                &charge_in("ch_t", json!(amount), code),
            )
            .unwrap_or_else(|e| panic!("{code} {amount}: {e}"));
            let c = Currency::parse(code).unwrap();
            assert_eq!(
                r.values[0],
                Value::Money(Money::from_minor(minor, c)),
                "{code} {amount}"
            );
            assert_eq!(r.values[0].to_string(), major, "{code} {amount}");
        }
    }

    #[test]
    fn an_amount_that_would_need_rounding_is_an_error_naming_object_and_field() {
        for (amount, code) in [(10050, "isk"), (1, "isk"), (-99, "isk")] {
            let e = to_record(
                StripeObject::Charges,
                &schema(),
                &paths(StripeObject::Charges),
                &charge_in("ch_isk", json!(amount), code),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("Stripe charge ch_isk")
                    && e.contains("field `amount`")
                    && e.contains(&format!("`{amount}`"))
                    && e.contains("never rounded"),
                "{e}"
            );
        }
        let e = to_record(
            StripeObject::Charges,
            &schema(),
            &paths(StripeObject::Charges),
            &charge_in("ch_isk", json!(10050), "isk"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("is 100.50 ISK"), "{e}");
        // MGA amounts past i64 once multiplied by 100 overflow, loudly.
        let e = to_record(
            StripeObject::Charges,
            &schema(),
            &paths(StripeObject::Charges),
            &charge_in("ch_big", json!(i64::MAX), "mga"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ch_big") && e.contains("too large"), "{e}");
    }

    /// Numbers are read from their text (serde_json `arbitrary_precision`):
    /// a fractional or exponent amount is refused, never truncated, and a
    /// numeric text field keeps its digits.
    #[test]
    fn json_numbers_are_read_from_their_text() {
        for text in ["2999.0", "29.99", "18446744073709551616"] {
            let v: serde_json::Value = serde_json::from_str(&format!(
                r#"{{"id":"ch_n","created":1,"amount":{text},"currency":"usd"}}"#
            ))
            .unwrap();
            let e = to_record(
                StripeObject::Charges,
                &schema(),
                &paths(StripeObject::Charges),
                &v,
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("ch_n") && e.contains("field `amount`") && e.contains(text),
                "{e}"
            );
        }
        let v: serde_json::Value = serde_json::from_str(
            r#"{"id":"ch_t","created":1,"amount":1,"currency":"usd","customer":123456789012345678901234.50}"#,
        )
        .unwrap();
        let r = to_record(
            StripeObject::Charges,
            &schema(),
            &paths(StripeObject::Charges),
            &v,
        )
        .unwrap();
        assert_eq!(
            r.values[4],
            Value::Text("123456789012345678901234.50".into())
        );
    }

    fn finance_schema(object: StripeObject, money: &str) -> (Schema, FieldPaths) {
        let kind = |ty: &str| match ty {
            "integer" => FieldKind::Integer,
            "timestamp" => FieldKind::Timestamp,
            _ => FieldKind::Text,
        };
        let fields: Vec<Field> = object
            .fields()
            .iter()
            .map(|(name, ty)| Field {
                name: (*name).into(),
                kind: match *name {
                    n if n == money => FieldKind::Money,
                    "currency" => FieldKind::Currency,
                    _ => kind(ty),
                },
                compared: true,
            })
            .collect();
        let paths = FieldPaths {
            fields: fields
                .iter()
                .map(|f| object.default_path(&f.name))
                .collect(),
            currency: "currency".into(),
        };
        (Schema { fields }, paths)
    }

    /// A refund's balance transaction: amount and net negative, read
    /// exactly; `fee` and `net` as integers of Stripe's minor units beside
    /// the one money field; an expanded `source` reads as its ID.
    #[test]
    fn reads_a_negative_balance_transaction_with_fee_and_net_as_integers() {
        let (schema, paths) = finance_schema(StripeObject::BalanceTransactions, "amount");
        let v: serde_json::Value = serde_json::from_str(
            r#"{"id":"txn_r1","object":"balance_transaction","amount":-1999,"available_on":1764460800,
                "created":1764374400,"currency":"eur","fee":-35,"net":-1964,"type":"refund",
                "source":{"id":"re_9","object":"refund"},"status":"pending","reporting_category":"refund"}"#,
        )
        .unwrap();
        let r = to_record(StripeObject::BalanceTransactions, &schema, &paths, &v).unwrap();
        let eur = Currency::parse("EUR").unwrap();
        assert_eq!(r.key, "txn_r1");
        assert_eq!(
            r.values,
            vec![
                Value::Money(Money::from_minor(-1999, eur)),
                Value::Integer(-35),
                Value::Integer(-1964),
                Value::Currency(eur),
                Value::Text("refund".into()),
                Value::Text("re_9".into()),
                Value::Text("pending".into()),
                Value::Timestamp("2025-11-29T00:00:00Z".parse().unwrap()),
                Value::Timestamp("2025-11-30T00:00:00Z".parse().unwrap()),
                Value::Text("refund".into()),
            ]
        );
        assert_eq!(r.values[0].to_string(), "-19.99");
        // `net` may be the money field instead; `fee` then stays an integer.
        let (schema, paths) = finance_schema(StripeObject::BalanceTransactions, "net");
        let r = to_record(StripeObject::BalanceTransactions, &schema, &paths, &v).unwrap();
        assert_eq!(r.values[0], Value::Integer(-1999));
        assert_eq!(r.values[2], Value::Money(Money::from_minor(-1964, eur)));
        // A fractional fee is refused, naming the object and the field.
        let bad: serde_json::Value = serde_json::from_str(
            r#"{"id":"txn_r2","created":1,"amount":100,"fee":2.5,"net":97,"currency":"usd"}"#,
        )
        .unwrap();
        let e = to_record(StripeObject::BalanceTransactions, &schema, &paths, &bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Stripe balance transaction txn_r2")
                && e.contains("field `fee`")
                && e.contains("2.5"),
            "{e}"
        );
    }

    #[test]
    fn reads_a_payout_with_its_documented_fields() {
        let (schema, paths) = finance_schema(StripeObject::Payouts, "amount");
        let v = json!({"id": "po_1", "object": "payout", "amount": -250_000, "currency": "jpy",
            "status": "failed", "arrival_date": 1_764_547_200, "created": 1_764_374_400,
            "method": "instant", "type": "card", "automatic": false,
            "balance_transaction": {"id": "txn_po1", "object": "balance_transaction"}});
        let r = to_record(StripeObject::Payouts, &schema, &paths, &v).unwrap();
        let jpy = Currency::parse("JPY").unwrap();
        assert_eq!(
            r.values,
            vec![
                Value::Money(Money::from_minor(-250_000, jpy)),
                Value::Currency(jpy),
                Value::Text("failed".into()),
                Value::Timestamp("2025-12-01T00:00:00Z".parse().unwrap()),
                Value::Timestamp("2025-11-29T00:00:00Z".parse().unwrap()),
                Value::Text("instant".into()),
                Value::Text("card".into()),
                Value::Text("false".into()),
                Value::Text("txn_po1".into()),
            ]
        );
        assert_eq!(StripeObject::Payouts.path(), "/v1/payouts");
        assert_eq!(
            StripeObject::BalanceTransactions.path(),
            "/v1/balance_transactions"
        );
    }
}
