//! The largest rows report.html lists, found as a run writes its files,
//! are what reading the files back finds.

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use recon_core::{Currency, Field, FieldKind, Money, Record, Schema, Value};

use super::files::{GapsFile, HistoryMap, RunExtras};
use super::html::{largest, TOP_PER_CURRENCY};
use super::{write_diff_files, ReportDir};
use crate::diff::{DiffEngine, DiffSpec};
use crate::state::{Class, DiscrepancyDelta};

/// A schema with a money field, a status, and (with `currency_field`) a
/// currency field named `currency`, the money's currency taken from the
/// record's own value: the two may disagree.
fn schema(currency_field: bool, money_name: &str) -> Schema {
    let field = |name: &str, kind| Field {
        name: name.into(),
        kind,
        compared: true,
    };
    let mut fields = vec![
        field(money_name, FieldKind::Money),
        field("status", FieldKind::Text),
    ];
    if currency_field {
        fields.push(field("currency", FieldKind::Currency));
    }
    Schema { fields }
}

const CURRENCIES: [&str; 3] = ["USD", "JPY", "KWD"];

/// A record: key index, amount (or none), its currency, the currency
/// field's own currency, status.
type Row = (u8, Option<i64>, usize, usize, bool);

fn record(schema: &Schema, (k, minor, money_cur, field_cur, status): Row) -> Record {
    let cur = |i: usize| Currency::parse(CURRENCIES[i]).unwrap();
    // Keys a spreadsheet would run as formulas are neutralised in the
    // files: the page lists them as the files hold them.
    let key = match k % 4 {
        0 => format!("=k{k:03}"),
        1 => format!("-k{k:03}"),
        _ => format!("k{k:03}"),
    };
    let mut values = vec![
        minor.map_or(Value::Null, |m| {
            Value::Money(Money::from_minor(m, cur(money_cur)))
        }),
        Value::Text(if status { "paid" } else { "failed" }.into()),
    ];
    if schema.fields.len() == 3 {
        values.push(Value::Currency(cur(field_cur)));
    }
    Record { key, values }
}

fn amount() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        4 => (-50i64..50).prop_map(Some),
        1 => Just(None),
        // Differences of these overflow i64: no amount the page can list.
        1 => prop::sample::select(vec![i64::MAX - 3, i64::MIN + 3, i64::MAX, i64::MIN]).prop_map(Some),
    ]
}

fn side() -> impl Strategy<Value = Vec<Row>> {
    prop::collection::vec(
        (0u8..60, amount(), 0usize..3, 0usize..3, any::<bool>()),
        0..80,
    )
}

/// The run's history: every other discrepancy key persisting since one
/// of two first sightings.
fn history(outcome: &crate::diff::DiffOutcome) -> HistoryMap {
    let at = |s: i64| jiff::Timestamp::from_second(s).unwrap();
    let keys = outcome
        .gaps
        .iter()
        .map(|r| (Class::Gap, r.key.clone()))
        .chain(
            outcome
                .orphans
                .iter()
                .map(|r| (Class::Orphan, r.key.clone())),
        )
        .chain(
            outcome
                .mismatches
                .iter()
                .map(|m| (Class::Mismatch, m.key.clone())),
        );
    let delta = DiscrepancyDelta {
        persisting: keys
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(i, key)| (key, at(1_700_000_000 + (i % 4) as i64)))
            .collect(),
        ..DiscrepancyDelta::default()
    };
    let firsts: HashMap<_, _> = [0, 2]
        .map(|s| at(1_700_000_000 + s))
        .into_iter()
        .map(|t| (t, recon_core::format_timestamp(t)))
        .collect();
    HistoryMap {
        now: "2026-12-06T00:00:00Z".into(),
        delta: Arc::new(delta),
        firsts,
        in_order: Default::default(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn found_as_written_is_what_the_files_read_back_hold(
        source in side(),
        target in side(),
        currency_field in any::<bool>(),
        with_history in any::<bool>(),
        money_name in prop::sample::select(vec!["amount", "=amount"]),
    ) {
        let schema = schema(currency_field, money_name);
        let mut engine = DiffEngine::new(DiffSpec::new(schema.clone(), vec![None; schema.fields.len()]));
        let mut seen = [std::collections::HashSet::new(), std::collections::HashSet::new()];
        for (i, rows) in [&source, &target].into_iter().enumerate() {
            for row in rows {
                // One copy per key and side: duplicates are not listed.
                if !seen[i].insert(row.0) {
                    continue;
                }
                let r = record(&schema, *row);
                let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
                if i == 0 {
                    engine.add_source(&r.key, &v).unwrap();
                } else {
                    engine.add_target(&r.key, &v).unwrap();
                }
            }
        }
        let outcome = engine.finish();
        let extras = RunExtras {
            history: with_history.then(|| Arc::new(history(&outcome))),
            ..RunExtras::default()
        };
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = ReportDir::prepare(&tmp.path().join("out")).unwrap();
        let money_field = Some(money_name);
        let top = Some((money_field, TOP_PER_CURRENCY));
        let found = write_diff_files(&mut dir, &schema, &outcome, &extras, top, None)
            .unwrap()
            .expect("a list when asked");
        let read = largest(&dir.staged(""), money_field, TOP_PER_CURRENCY).unwrap();
        prop_assert_eq!(&found, &read);
        // gaps.csv written on a thread of its own first (a run that
        // backfills): the same files, the same list.
        if let Some(h) = &extras.history {
            let mut early = ReportDir::prepare(&tmp.path().join("early")).unwrap();
            let gaps = GapsFile::create(&mut early, &schema, &outcome.gaps, top)
                .unwrap()
                .start(Arc::clone(h))
                .unwrap();
            let listed = write_diff_files(&mut early, &schema, &outcome, &extras, top, Some(gaps))
                .unwrap()
                .expect("a list when asked");
            prop_assert_eq!(&listed, &found);
            for name in ["gaps.csv", "orphans.csv", "mismatches.csv"] {
                let text = |d: &ReportDir| std::fs::read_to_string(d.staged(name)).unwrap();
                prop_assert_eq!(text(&early), text(&dir), "{}", name);
            }
        }
        // Not asked, none is made.
        let mut again = ReportDir::prepare(&tmp.path().join("again")).unwrap();
        prop_assert!(write_diff_files(&mut again, &schema, &outcome, &extras, None, None).unwrap().is_none());
    }
}

/// The cases the property draws at random, once each for sure: listed
/// gaps, orphans and mismatches, a neutralised key, history cells.
#[test]
fn a_run_lists_gaps_orphans_and_mismatches_with_their_history() {
    let schema = schema(true, "amount");
    let row = |k, m, c| (k, Some(m), c, c, true);
    let source = [row(2, 40, 0), row(3, 30, 0), row(4, 7, 1)];
    let target = [row(3, 33, 0), row(5, 20, 0), row(6, 9, 2), row(4, 7, 1)];
    let mut engine = DiffEngine::new(DiffSpec::new(schema.clone(), vec![None; 3]));
    for r in source {
        let r = record(&schema, r);
        let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
        engine.add_source(&r.key, &v).unwrap();
    }
    for r in target {
        let r = record(&schema, r);
        let v: Vec<_> = r.values.iter().map(Value::as_ref).collect();
        engine.add_target(&r.key, &v).unwrap();
    }
    let outcome = engine.finish();
    let extras = RunExtras {
        history: Some(Arc::new(history(&outcome))),
        ..RunExtras::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = ReportDir::prepare(&tmp.path().join("out")).unwrap();
    let found = write_diff_files(
        &mut dir,
        &schema,
        &outcome,
        &extras,
        Some((Some("amount"), 10)),
        None,
    )
    .unwrap()
    .unwrap();
    let rows: Vec<_> = found
        .iter()
        .map(|r| {
            (
                r.class,
                r.key.as_str(),
                r.minor,
                r.currency.code(),
                r.state.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("orphan", "k006", 9, "KWD", "persisting"),
            ("gap", "k002", 40, "USD", "persisting"),
            ("orphan", "'-k005", 20, "USD", "new"),
            ("mismatch", "k003", 3, "USD", "new"),
        ]
    );
    assert_eq!(found, largest(&dir.staged(""), Some("amount"), 10).unwrap());
}

/// A written row that cannot be offered (a cell missing) fails the list,
/// not the file: it is not used, whatever it kept before.
#[test]
fn a_row_that_cannot_be_offered_fails_only_the_list() {
    use super::html::{FileTop, TopFile};
    let header: Vec<String> = ["external_id", "amount", "currency"]
        .map(String::from)
        .to_vec();
    let mut top = FileTop::new(TopFile::Gaps, &header, Some("amount"), 10).unwrap();
    top.offer_written(&["ch_1".into(), "1.00".into(), "USD".into()]);
    assert!(!top.failed());
    top.offer_written(&["ch_2".into(), "2.00".into()]);
    assert!(top.failed());
    top.offer_written(&["ch_3".into(), "3.00".into(), "USD".into()]);
    assert!(top.failed(), "a failed list stays failed");
}

/// One backfill.csv row: an outcome of every kind, and IDs and errors a
/// spreadsheet would read as formulas, or that need quoting.
fn backfill_row() -> impl Strategy<Value = super::BackfillRow> {
    use super::BackfillOutcome as O;
    let outcome = prop::sample::select(vec![
        O::Created,
        O::Updated,
        O::Unchanged,
        O::Failed,
        O::Skipped,
        O::Delivered,
        O::AlreadyDone,
        O::DeliveredNotCreated,
    ]);
    let text = "[=+@a-c,\"\n -]{0,6}";
    (text, outcome, text).prop_map(|(key, outcome, error)| super::BackfillRow {
        key,
        action: crate::plan::Action::Insert,
        outcome,
        error,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// What a run's page says of its backfill, found from the rows it has
    /// in memory, is what the page read back from the files says:
    /// outcome counts, the first refused IDs and errors as backfill.csv
    /// holds them (neutralised), and plan.jsonl's lines.
    #[test]
    fn the_backfill_the_page_shows_is_the_files(
        rows in prop::collection::vec(backfill_row(), 0..60),
        planned in prop::option::of(0u64..5),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = ReportDir::prepare(&tmp.path().join("out")).unwrap();
        super::write_backfill_csv(&mut dir, &rows).unwrap();
        if let Some(n) = planned {
            let lines: String = (0..n).map(|i| format!("{{\"line\":{i}}}\n")).collect();
            dir.write_all(crate::plan::PLAN_FILE, lines.as_bytes()).unwrap();
        }
        let read = super::html::backfill(&dir.staged("")).unwrap();
        prop_assert_eq!(super::html::Backfill::of_rows(Some(&rows), planned), read);
    }
}

/// Past twenty refused items, the page names the first twenty, read back
/// or from the rows alike.
#[test]
fn the_page_names_the_first_twenty_refused_items() {
    let rows: Vec<super::BackfillRow> = (0..30)
        .map(|i| super::BackfillRow {
            key: format!("=ch_{i:02}"),
            action: crate::plan::Action::Insert,
            outcome: super::BackfillOutcome::Failed,
            error: format!("refused {i}"),
        })
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = ReportDir::prepare(&tmp.path().join("out")).unwrap();
    super::write_backfill_csv(&mut dir, &rows).unwrap();
    let known = super::html::Backfill::of_rows(Some(&rows), None);
    assert_eq!(known, super::html::backfill(&dir.staged("")).unwrap());
    assert_eq!(known.failures.len(), 20);
    assert_eq!(known.failures[19], ("'=ch_19".into(), "refused 19".into()));
    assert_eq!(known.outcomes["failed"], 30);
    assert_eq!(known.planned, None);
}
