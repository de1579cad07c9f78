//! The report files of one diff: summary.json, summary.csv, gaps.csv,
//! orphans.csv, mismatches.csv and duplicates.csv. Column orders are part
//! of the contract with finance spreadsheets; reports/README.md explains them.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::Result;
use recon_core::{format_minor, Currency, FieldKind, Record, Schema, Value};
use serde_json::json;

use super::{CsvReport, ReportDir};
use crate::diff::{DiffOutcome, Totals};

/// What the reports say about the run itself.
#[derive(Clone, Debug, Default)]
pub struct RunMeta {
    /// Job name (`diff` for ad-hoc diffs).
    pub job: String,
    /// What the source was (a path, an API), secrets removed.
    pub source: String,
    /// What the target was.
    pub target: String,
    /// The window, when the run had one: start and end, RFC 3339.
    pub window: Option<(String, String)>,
    /// When the run started, RFC 3339.
    pub started_at: String,
    /// Milliseconds spent reading the source side.
    pub source_ms: u128,
    /// Milliseconds spent reading the target side.
    pub target_ms: u128,
    /// Milliseconds for the whole run.
    pub total_ms: u128,
}

/// Counts for the contract's top-level integers.
pub fn counts(outcome: &DiffOutcome) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    for (k, v) in [
        ("source_records", outcome.source_records),
        ("target_records", outcome.target_records),
        ("matched", outcome.matched),
        ("gaps", outcome.gaps.len() as u64),
        ("orphans", outcome.orphans.len() as u64),
        ("mismatches", outcome.mismatches.len() as u64),
        ("duplicates", outcome.duplicates.len() as u64),
        ("pending", 0),
        ("backfilled", 0),
        ("backfill_failed", 0),
        ("source_rows", outcome.source_rows),
        ("target_rows", outcome.target_rows),
    ] {
        m.insert(k.to_string(), json!(v));
    }
    m
}

fn totals_json(totals: &Totals) -> serde_json::Value {
    totals
        .iter()
        .map(|(cur, t)| {
            json!({
                "currency": cur.map(|c| c.code().to_string()),
                "records": t.records,
                "total": cur.map(|c| format_minor(t.minor, c)),
                "total_minor": cur.map(|_| t.minor.to_string()),
            })
        })
        .collect::<Vec<_>>()
        .into()
}

/// Writes every report of a diff into `dir` (not yet committed).
pub fn write_diff_reports(
    dir: &mut ReportDir,
    schema: &Schema,
    outcome: &DiffOutcome,
    meta: &RunMeta,
    exit_status: u8,
) -> Result<()> {
    write_summary_csv(dir, outcome)?;
    write_records(dir, "gaps.csv", schema, &outcome.gaps)?;
    write_records(dir, "orphans.csv", schema, &outcome.orphans)?;
    write_mismatches(dir, schema, outcome)?;
    write_duplicates(dir, outcome)?;

    let mut summary = serde_json::Map::new();
    summary.insert("job".into(), json!(meta.job));
    summary.insert("source".into(), json!(meta.source));
    summary.insert("target".into(), json!(meta.target));
    summary.insert(
        "window".into(),
        match &meta.window {
            Some((s, e)) => json!({ "start": s, "end": e }),
            None => serde_json::Value::Null,
        },
    );
    summary.extend(counts(outcome));
    summary.insert("exit_status".into(), json!(exit_status));
    summary.insert(
        "compared_fields".into(),
        json!(schema
            .fields
            .iter()
            .filter(|f| f.compared)
            .map(|f| f.name.clone())
            .collect::<Vec<_>>()),
    );
    summary.insert(
        "totals".into(),
        json!({
            "source": totals_json(&outcome.source_totals),
            "target": totals_json(&outcome.target_totals),
        }),
    );
    summary.insert(
        "timings".into(),
        json!({
            "started_at": meta.started_at,
            "source_ms": meta.source_ms,
            "target_ms": meta.target_ms,
            "total_ms": meta.total_ms,
        }),
    );
    summary.insert("recon_version".into(), json!(env!("CARGO_PKG_VERSION")));
    let mut text = serde_json::to_vec_pretty(&serde_json::Value::Object(summary))?;
    text.push(b'\n');
    dir.write_all("summary.json", &text)
}

fn write_summary_csv(dir: &mut ReportDir, outcome: &DiffOutcome) -> Result<()> {
    let currencies: BTreeSet<Option<Currency>> = outcome
        .source_totals
        .keys()
        .chain(outcome.target_totals.keys())
        .copied()
        .collect();
    let mut w = CsvReport::new(
        dir.file("summary.csv")?,
        &[
            "currency",
            "source_records",
            "source_total",
            "target_records",
            "target_total",
            "records_delta",
            "total_delta",
        ],
    )?;
    for cur in currencies {
        let s = outcome.source_totals.get(&cur).copied().unwrap_or_default();
        let t = outcome.target_totals.get(&cur).copied().unwrap_or_default();
        let money = |minor: i128| cur.map(|c| format_minor(minor, c)).unwrap_or_default();
        w.row([
            cur.map(|c| c.code().to_string()).unwrap_or_default(),
            s.records.to_string(),
            money(s.minor),
            t.records.to_string(),
            money(t.minor),
            (i128::from(t.records) - i128::from(s.records)).to_string(),
            money(t.minor - s.minor),
        ])?;
    }
    w.finish()?.flush()?;
    Ok(())
}

/// Columns of gaps.csv and orphans.csv: the ID, every field in schema order
/// (money in major units), then the money's currency unless a field is
/// already named `currency`.
fn record_header(schema: &Schema) -> (Vec<String>, bool) {
    let mut header = vec!["external_id".to_string()];
    header.extend(schema.fields.iter().map(|f| f.name.clone()));
    let add_currency = schema.money_field().is_some() && schema.index_of("currency").is_none();
    if add_currency {
        header.push("currency".into());
    }
    (header, add_currency)
}

fn write_records(
    dir: &mut ReportDir,
    name: &str,
    schema: &Schema,
    records: &[Record],
) -> Result<()> {
    let (header, add_currency) = record_header(schema);
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut w = CsvReport::new(dir.file(name)?, &header)?;
    let money_field = schema.money_field();
    let mut row = Vec::with_capacity(header.len());
    for r in records {
        row.clear();
        row.push(r.key.clone());
        row.extend(r.values.iter().map(|v| v.to_string()));
        if add_currency {
            let cur = money_field
                .and_then(|i| r.values[i].currency())
                .map(|c| c.code().to_string())
                .unwrap_or_default();
            row.push(cur);
        }
        w.row(&row)?;
    }
    w.finish()?.flush()?;
    Ok(())
}

fn write_mismatches(dir: &mut ReportDir, schema: &Schema, outcome: &DiffOutcome) -> Result<()> {
    let mut w = CsvReport::new(
        dir.file("mismatches.csv")?,
        &[
            "external_id",
            "field",
            "source_value",
            "target_value",
            "currency",
            "difference",
        ],
    )?;
    for m in &outcome.mismatches {
        for d in &m.fields {
            let field = &schema.fields[d.field];
            let (currency, difference) = match (&d.source, &d.target) {
                (Value::Money(a), Value::Money(b)) if a.currency == b.currency => (
                    a.currency.code().to_string(),
                    format_minor(i128::from(b.minor) - i128::from(a.minor), a.currency),
                ),
                (Value::Money(a), Value::Money(b)) => {
                    (format!("{}/{}", a.currency, b.currency), String::new())
                }
                (a, b) if field.kind == FieldKind::Money => (
                    a.currency()
                        .or(b.currency())
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                    String::new(),
                ),
                (Value::Integer(a), Value::Integer(b)) => {
                    (String::new(), (i128::from(*b) - i128::from(*a)).to_string())
                }
                (Value::Timestamp(a), Value::Timestamp(b)) => (
                    String::new(),
                    (i128::from(b.as_second()) - i128::from(a.as_second())).to_string(),
                ),
                _ => (String::new(), String::new()),
            };
            w.row([
                m.key.clone(),
                field.name.clone(),
                d.source.to_string(),
                d.target.to_string(),
                currency,
                difference,
            ])?;
        }
    }
    w.finish()?.flush()?;
    Ok(())
}

fn write_duplicates(dir: &mut ReportDir, outcome: &DiffOutcome) -> Result<()> {
    let mut w = CsvReport::new(
        dir.file("duplicates.csv")?,
        &["external_id", "side", "count", "other_side_count"],
    )?;
    for d in &outcome.duplicates {
        if d.source_count > 1 {
            w.row([
                d.key.clone(),
                "source".into(),
                d.source_count.to_string(),
                d.target_count.to_string(),
            ])?;
        }
        if d.target_count > 1 {
            w.row([
                d.key.clone(),
                "target".into(),
                d.target_count.to_string(),
                d.source_count.to_string(),
            ])?;
        }
    }
    w.finish()?.flush()?;
    Ok(())
}
