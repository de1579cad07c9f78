//! `duplicate_copies.csv` and the money counted twice: every copy of an
//! external ID a side holds more than once, numbered in a fixed order, and
//! per currency the amounts of every copy but the first. recon never
//! deletes or voids a copy; the report says which ones to review.

use std::cmp::Ordering;
use std::io::Write;

use anyhow::Result;
use recon_core::{DuplicateCopy, Record, Schema, Value};

use super::files::{record_header, ID_COLUMN};
use super::summary::Totals as SummaryTotals;
use super::{CsvReport, ReportDir};
use crate::diff::Totals;

/// The file's name in a report folder.
pub const FILE: &str = "duplicate_copies.csv";

/// The columns before the job's fields.
pub const COLUMNS: [&str; 4] = [ID_COLUMN, "side", "copy", "native_id"];

/// One copy of a duplicated external ID, as `duplicate_copies.csv` lists
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyRow {
    /// `source` or `target`.
    pub side: &'static str,
    /// 1 for the copy kept as the reference, 2, 3… for the ones to review.
    pub copy: u32,
    /// The system's own ID of the copy (a QuickBooks `Id`), when known.
    pub native_id: Option<String>,
    /// The copy's values.
    pub record: Record,
}

/// The order of two copies of one key: by native ID, as numbers when both
/// are whole numbers (QuickBooks `Id` 9 before 10), else as text; copies
/// without a native ID keep the order their side returned them in.
fn by_native_id(a: &Option<String>, b: &Option<String>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => match (a.parse::<i128>(), b.parse::<i128>()) {
            (Ok(x), Ok(y)) => x.cmp(&y).then_with(|| a.cmp(b)),
            _ => a.cmp(b),
        },
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Numbers the copies one side returned: grouped by external ID (in ID
/// order), ordered within an ID by [`by_native_id`] (a stable sort: the
/// side's order otherwise), copy 1 first.
pub fn number(side: &'static str, copies: Vec<DuplicateCopy>) -> Vec<CopyRow> {
    let mut copies = copies;
    copies.sort_by(|a, b| {
        a.record
            .key
            .cmp(&b.record.key)
            .then_with(|| by_native_id(&a.native_id, &b.native_id))
    });
    let mut out: Vec<CopyRow> = Vec::with_capacity(copies.len());
    for c in copies {
        let copy = match out.last() {
            Some(prev) if prev.record.key == c.record.key => prev.copy + 1,
            _ => 1,
        };
        out.push(CopyRow {
            side,
            copy,
            native_id: c.native_id,
            record: c.record,
        });
    }
    out
}

/// The money counted more than once on `side`: per currency, the copies
/// beyond the first (copy 2, 3…) and the sum of their amounts in minor
/// units. Copies without an amount are counted under `None`.
pub fn counted_twice(rows: &[CopyRow], side: &str, schema: &Schema) -> Totals {
    let money_field = schema.money_field();
    let mut out = Totals::new();
    for r in rows.iter().filter(|r| r.side == side && r.copy > 1) {
        let (currency, minor) = match money_field.map(|i| &r.record.values[i]) {
            Some(Value::Money(m)) => (Some(m.currency), i128::from(m.minor)),
            _ => (None, 0),
        };
        let t = out.entry(currency).or_default();
        t.records += 1;
        t.minor += minor;
    }
    out
}

/// summary.json's `counted_twice`: both sides' [`counted_twice`], written
/// as the totals are.
pub fn summary_counted_twice(rows: &[CopyRow], schema: &Schema) -> SummaryTotals {
    SummaryTotals {
        source: super::files::totals_of(&counted_twice(rows, "source", schema)),
        target: super::files::totals_of(&counted_twice(rows, "target", schema)),
    }
}

/// Writes `duplicate_copies.csv`: the four columns of [`COLUMNS`], then the
/// job's fields as gaps.csv writes them (money in major units, then its
/// currency unless a field is named `currency`); one row per copy,
/// ordered by external ID, side and copy.
pub fn write(dir: &mut ReportDir, schema: &Schema, rows: &[CopyRow]) -> Result<()> {
    let (fields, add_currency) = record_header(schema);
    let mut header: Vec<&str> = COLUMNS.to_vec();
    header.extend(fields.iter().skip(1).map(String::as_str));
    let mut w = CsvReport::new(dir.file(FILE)?, &header)?;
    let money_field = schema.money_field();
    let mut order: Vec<&CopyRow> = rows.iter().collect();
    order.sort_by(|a, b| {
        (a.record.key.as_str(), a.side, a.copy).cmp(&(b.record.key.as_str(), b.side, b.copy))
    });
    for r in order {
        let mut row = vec![
            r.record.key.clone(),
            r.side.to_string(),
            r.copy.to_string(),
            r.native_id.clone().unwrap_or_default(),
        ];
        row.extend(r.record.values.iter().map(|v| v.to_string()));
        if add_currency {
            let cur = money_field
                .and_then(|i| r.record.values[i].currency())
                .map(|c| c.code().to_string())
                .unwrap_or_default();
            row.push(cur);
        }
        w.row(&row)?;
    }
    w.finish()?.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_core::{Currency, Field, FieldKind, Money};

    fn schema() -> Schema {
        Schema {
            fields: vec![Field {
                name: "amount".into(),
                kind: FieldKind::Money,
                compared: true,
            }],
        }
    }

    fn copy(key: &str, id: Option<&str>, minor: i64, cur: &str) -> DuplicateCopy {
        DuplicateCopy {
            native_id: id.map(str::to_string),
            record: Record {
                key: key.to_string(),
                values: vec![Value::Money(Money {
                    minor,
                    currency: Currency::parse(cur).unwrap(),
                })],
            },
        }
    }

    #[test]
    fn copies_are_numbered_by_numeric_id_and_the_first_is_not_counted() {
        let rows = number(
            "target",
            vec![
                copy("b", Some("10"), 500, "USD"),
                copy("a", Some("x2"), 7, "JPY"),
                copy("b", Some("9"), 400, "USD"),
                copy("a", Some("x10"), 8, "JPY"),
                copy("b", Some("100"), 300, "USD"),
            ],
        );
        let seen: Vec<(&str, u32, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r.record.key.as_str(),
                    r.copy,
                    r.native_id.as_deref().unwrap(),
                )
            })
            .collect();
        // Text order for IDs that are not numbers: "x10" < "x2".
        assert_eq!(
            seen,
            [
                ("a", 1, "x10"),
                ("a", 2, "x2"),
                ("b", 1, "9"),
                ("b", 2, "10"),
                ("b", 3, "100"),
            ]
        );
        let twice = counted_twice(&rows, "target", &schema());
        let usd = twice[&Some(Currency::parse("USD").unwrap())];
        assert_eq!((usd.records, usd.minor), (2, 800));
        let jpy = twice[&Some(Currency::parse("JPY").unwrap())];
        assert_eq!((jpy.records, jpy.minor), (1, 7));
        assert!(counted_twice(&rows, "source", &schema()).is_empty());
    }

    #[test]
    fn copies_without_ids_keep_the_order_returned() {
        let rows = number(
            "source",
            vec![copy("k", None, 1, "EUR"), copy("k", None, 2, "EUR")],
        );
        assert_eq!(
            rows[0].record.values,
            copy("k", None, 1, "EUR").record.values
        );
        assert_eq!((rows[0].copy, rows[1].copy), (1, 2));
        let eur = counted_twice(&rows, "source", &schema())[&Some(Currency::parse("EUR").unwrap())];
        assert_eq!((eur.records, eur.minor), (1, 2));
    }
}
