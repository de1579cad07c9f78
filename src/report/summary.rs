//! `summary.json` as a type: a run's result, built once when it finishes
//! and handed by value to the report page, the metrics file, the
//! notification and `recon runs`.
//!
//! The file's keys are sorted (serde_json's map keeps them so without its
//! `preserve_order` feature): a [`RunSummary`] is serialised through that
//! map, so the bytes are those every earlier release wrote. Three shapes
//! share the type: `recon run` and `recon diff` (counts, totals, timings)
//! and `recon apply` (`plan`, `plan_id`, `planned`, `skipped`); a key one
//! shape lacks is `None` and stays absent.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use recon_core::Currency;
use serde::{Deserialize, Serialize};
use strum::{EnumCount, EnumIter, EnumProperty, EnumString, IntoEnumIterator, IntoStaticStr};

use super::files::BackfillOutcome;

/// A count of summary.json: its key is the variant in snake case
/// (`Class::BackfillFailed` is `backfill_failed`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    EnumCount,
    EnumIter,
    EnumProperty,
    EnumString,
    IntoStaticStr,
    strum::Display,
)]
#[strum(serialize_all = "snake_case")]
pub enum Class {
    /// Distinct IDs of the source.
    SourceRecords,
    /// Distinct IDs of the target.
    TargetRecords,
    /// IDs equal on both sides.
    Matched,
    /// In the source, missing in the target.
    #[strum(props(one = "gap"))]
    Gaps,
    /// In the target only.
    #[strum(props(one = "orphan"))]
    Orphans,
    /// On both sides, with a compared field that differs.
    #[strum(props(one = "mismatch"))]
    Mismatches,
    /// Held more than once by a side.
    #[strum(props(one = "duplicate"))]
    Duplicates,
    /// Source records too young to judge.
    Pending,
    /// Records no window can hold.
    #[strum(props(one = "unplaced"))]
    Unplaced,
    /// Discrepancies of earlier runs gone now (configured runs only).
    Resolved,
    /// IDs written to the target.
    Backfilled,
    /// IDs the target refused.
    BackfillFailed,
    /// Webhook deliveries acknowledged but not in the target.
    DeliveredNotCreated,
    /// Discrepancies dismissed by a key lookup at the window's edge.
    ConfirmedByLookup,
    /// Rows read from the source, each copy of a duplicate counted.
    SourceRows,
    /// Rows read from the target.
    TargetRows,
    /// `recon apply`: the plan's items.
    Planned,
    /// `recon apply`: inserts skipped because the key appeared since.
    Skipped,
}

impl Class {
    /// The open discrepancy classes, in display order (the report page's
    /// charts).
    pub const DISCREPANCIES: [Class; 4] = [
        Class::Gaps,
        Class::Orphans,
        Class::Mismatches,
        Class::Duplicates,
    ];

    /// The key in summary.json.
    pub fn key(self) -> &'static str {
        self.into()
    }

    /// One of the class (`gap`), the `class` label of the metrics; `None`
    /// for a count that is not a discrepancy.
    pub fn one(self) -> Option<&'static str> {
        self.get_str("one")
    }

    /// Whether the run log of the state store keeps it (what `recon runs`
    /// and the charts read back): what `finish::record` has always stored.
    fn in_run_log(self) -> bool {
        !matches!(
            self,
            Class::Unplaced | Class::Resolved | Class::ConfirmedByLookup
        )
    }
}

/// The counts of a summary, by class; a count the summary does not hold
/// is absent (not 0), as in the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts([Option<u64>; Class::COUNT]);

impl Counts {
    /// The count, 0 when absent.
    pub fn get(&self, class: Class) -> u64 {
        self.present(class).unwrap_or(0)
    }

    /// The count, when the summary holds it.
    pub fn present(&self, class: Class) -> Option<u64> {
        self.0[class as usize]
    }

    /// Sets a count.
    pub fn set(&mut self, class: Class, n: u64) {
        self.0[class as usize] = Some(n);
    }

    /// The counts held, in class order.
    pub fn iter(&self) -> impl Iterator<Item = (Class, u64)> + '_ {
        Class::iter().filter_map(|c| Some((c, self.present(c)?)))
    }

    /// The counts of a JSON object (summary.json, or a run's counts in
    /// the state store): numbers, or whole numbers written as text.
    pub fn of_json(value: &serde_json::Value) -> Counts {
        let mut out = Counts::default();
        for c in Class::iter() {
            let n = value.get(c.key()).and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            });
            out.0[c as usize] = n;
        }
        out
    }
}

/// The window of a summary, RFC 3339 (start included, end excluded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowText {
    /// The end, excluded.
    pub end: String,
    /// The start.
    pub start: String,
}

/// When the run started and how long its parts took.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timings {
    /// Milliseconds reading the source.
    pub source_ms: u64,
    /// When the run started, RFC 3339.
    pub started_at: String,
    /// Milliseconds reading the target.
    pub target_ms: u64,
    /// Milliseconds for the whole run.
    pub total_ms: u64,
}

/// One currency's total on one side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Total {
    /// The ISO 4217 code; `None` for rows without an amount.
    pub currency: Option<String>,
    /// Rows, each copy of a duplicate counted.
    #[serde(default)]
    pub records: u64,
    /// The sum in major units.
    #[serde(default)]
    pub total: Option<String>,
    /// The sum in minor units, as text (exact beyond 2^53).
    #[serde(default)]
    pub total_minor: Option<String>,
}

impl Total {
    /// The currency, parsed; `side` names the side in the error.
    pub fn currency(&self, side: &str) -> Result<Option<Currency>> {
        self.currency
            .as_deref()
            .map(|c| {
                Currency::parse(c)
                    .with_context(|| format!("summary.json: currency `{c}` of the {side}"))
            })
            .transpose()
    }

    /// The sum in minor units (0 without an amount).
    pub fn minor(&self, side: &str) -> Result<i128> {
        match self.total_minor.as_deref() {
            Some(m) => m.parse().with_context(|| {
                format!("summary.json: {side} total_minor `{m}` is not a whole number")
            }),
            None => Ok(0),
        }
    }
}

/// The totals of both sides, per currency.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    /// The source's.
    pub source: Vec<Total>,
    /// The target's.
    pub target: Vec<Total>,
}

/// `backfill.via = "webhook"`: what the deliveries did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Webhook {
    /// 409 answers, found in the target.
    pub already_done: u64,
    /// 2xx answers, found in the target.
    pub delivered: u64,
    /// Acknowledged but not in the target: the handler is broken.
    pub delivered_not_created: u64,
    /// Refused.
    pub failed: u64,
    /// HTTP attempts, retries included.
    pub requests: u64,
    /// Retries.
    pub retries: u64,
    /// The endpoint, redacted.
    pub url: String,
    /// Earlier deliveries found in the target by this run's check.
    pub verified_earlier: u64,
}

/// Everything of summary.json but its counts (see [`RunSummary`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFields {
    /// The fields whose differences count as mismatches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared_fields: Option<Vec<String>>,
    /// Per side and currency, the copies of duplicated external IDs beyond
    /// the first and their money: what the side counts more than once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_twice: Option<Totals>,
    /// Whether the run was a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// 0 nothing open, 1 discrepancies remain, 2 trouble.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<u8>,
    /// The job (`diff` for an ad-hoc diff).
    #[serde(default)]
    pub job: String,
    /// Remarks (safety limit, confirmations, a page not written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<Vec<String>>,
    /// `recon apply`: the plan file applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// `recon apply`: the dry run's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// `recon apply`: the plan file's SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_sha256: Option<String>,
    /// The release that wrote the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recon_version: Option<String>,
    /// The run's id (null for an ad-hoc diff).
    #[serde(default)]
    pub run_id: Option<String>,
    /// What the source was, secrets removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// What the target was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Clocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// Per-currency totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<Totals>,
    /// Webhook deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    /// The window read (null for whole files).
    #[serde(default)]
    pub window: Option<WindowText>,
}

/// A run's result: the counts by [`Class`], the rest of summary.json, and
/// (in the process that ran it only) the backfill's outcomes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// The counts.
    pub counts: Counts,
    /// The other fields.
    pub run: RunFields,
    /// Items written by this run's backfill, by outcome (as backfill.csv
    /// lists them). Not part of summary.json: empty for a summary read
    /// from a file.
    pub backfill: BTreeMap<BackfillOutcome, u64>,
}

impl RunSummary {
    /// The summary as a JSON object, keys sorted.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = match serde_json::to_value(&self.run) {
            Ok(serde_json::Value::Object(m)) => m,
            // Plain fields of strings and numbers always make an object.
            _ => serde_json::Map::new(),
        };
        for (c, n) in self.counts.iter() {
            map.insert(c.key().to_string(), n.into());
        }
        serde_json::Value::Object(map)
    }

    /// The summary of a JSON object (summary.json as any release wrote it).
    pub fn of_json(value: serde_json::Value) -> Result<RunSummary> {
        let counts = Counts::of_json(&value);
        let serde_json::Value::Object(mut map) = value else {
            anyhow::bail!("summary.json does not hold an object");
        };
        for c in Class::iter() {
            map.remove(c.key());
        }
        let run = serde_json::from_value(serde_json::Value::Object(map))
            .context("summary.json does not have the fields of a run's summary")?;
        Ok(RunSummary {
            counts,
            run,
            backfill: BTreeMap::new(),
        })
    }

    /// summary.json's bytes: pretty-printed, one newline at the end.
    pub fn to_file_bytes(&self) -> Result<Vec<u8>> {
        let mut text = serde_json::to_vec_pretty(&self.to_json())?;
        text.push(b'\n');
        Ok(text)
    }

    /// Reads a folder's summary.json.
    pub fn read(path: &std::path::Path) -> Result<RunSummary> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        RunSummary::of_json(value).with_context(|| format!("{}", path.display()))
    }

    /// What the state store's run log keeps of the run (`recon runs`, the
    /// charts): a run's counts, or an apply's whole summary.
    pub fn run_log_json(&self) -> serde_json::Value {
        if self.run.plan_id.is_some() {
            return self.to_json();
        }
        let map = self
            .counts
            .iter()
            .filter(|(c, _)| c.in_run_log())
            .map(|(c, n)| (c.key().to_string(), n.into()))
            .collect();
        serde_json::Value::Object(map)
    }

    /// Adds a remark.
    pub fn add_note(&mut self, note: String) {
        self.run.notes.get_or_insert_with(Vec::new).push(note);
    }

    /// Target total minus source total per currency code, minor units
    /// (rows without a currency, or with a total that is not a whole
    /// number, are left out).
    pub fn money_delta(&self) -> Vec<(String, i128)> {
        let mut out: BTreeMap<String, i128> = BTreeMap::new();
        let Some(totals) = &self.run.totals else {
            return Vec::new();
        };
        for (list, sign) in [(&totals.source, -1i128), (&totals.target, 1)] {
            for t in list {
                let (Some(cur), Some(Ok(minor))) = (
                    &t.currency,
                    t.total_minor.as_deref().map(str::parse::<i128>),
                ) else {
                    continue;
                };
                *out.entry(cur.clone()).or_default() += sign * minor;
            }
        }
        out.into_iter().collect()
    }

    /// The backfill's items by outcome: every target outcome listed (0 when
    /// none), and a webhook route's outcomes too when the run had one.
    pub fn backfill_outcomes(&self) -> Vec<(BackfillOutcome, u64)> {
        BackfillOutcome::iter()
            .filter(|o| self.run.webhook.is_some() || !o.webhook_only())
            .map(|o| (o, self.backfill.get(&o).copied().unwrap_or(0)))
            .collect()
    }

    /// Counts rows into [`RunSummary::backfill`].
    pub fn count_backfill<'a>(&mut self, rows: impl IntoIterator<Item = &'a super::BackfillRow>) {
        for r in rows {
            *self.backfill.entry(r.outcome).or_default() += 1;
        }
    }
}

impl Serialize for RunSummary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for RunSummary {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        RunSummary::of_json(value).map_err(|e| serde::de::Error::custom(format!("{e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// summary.json of a `recon run` with history and a webhook route, as
    /// the release before this type wrote it (keys sorted).
    const RUN: &str = r#"{
  "backfill_failed": 1,
  "backfilled": 3,
  "compared_fields": [
    "amount",
    "status"
  ],
  "confirmed_by_lookup": 0,
  "delivered_not_created": 0,
  "dry_run": false,
  "duplicates": 1,
  "exit_status": 1,
  "gaps": 4,
  "job": "charges",
  "matched": 90,
  "mismatches": 2,
  "notes": [
    "a note"
  ],
  "orphans": 3,
  "pending": 0,
  "recon_version": "0.1.0",
  "resolved": 5,
  "run_id": "charges-20261130T060000Z-1a2b",
  "source": "stripe (https://api.stripe.com)",
  "source_records": 100,
  "source_rows": 101,
  "target": "sql table charges",
  "target_records": 96,
  "target_rows": 96,
  "timings": {
    "source_ms": 120,
    "started_at": "2026-11-30T06:00:00Z",
    "target_ms": 80,
    "total_ms": 250
  },
  "totals": {
    "source": [
      {
        "currency": null,
        "records": 1,
        "total": null,
        "total_minor": null
      },
      {
        "currency": "USD",
        "records": 100,
        "total": "90071992547409.93",
        "total_minor": "9007199254740993"
      }
    ],
    "target": [
      {
        "currency": "USD",
        "records": 95,
        "total": "1.00",
        "total_minor": "100"
      }
    ]
  },
  "unplaced": 0,
  "webhook": {
    "already_done": 1,
    "delivered": 2,
    "delivered_not_created": 0,
    "failed": 1,
    "requests": 5,
    "retries": 1,
    "url": "https://hooks.example/[redacted]",
    "verified_earlier": 0
  },
  "window": {
    "end": "2026-11-30T05:00:00Z",
    "start": "2026-11-28T05:00:00Z"
  }
}
"#;

    /// summary.json of a `recon diff` (no window, no run id).
    const DIFF: &str = r#"{
  "backfill_failed": 0,
  "backfilled": 0,
  "compared_fields": [],
  "confirmed_by_lookup": 0,
  "dry_run": false,
  "duplicates": 0,
  "exit_status": 0,
  "gaps": 0,
  "job": "diff",
  "matched": 2,
  "mismatches": 0,
  "notes": [],
  "orphans": 0,
  "pending": 0,
  "recon_version": "0.1.0",
  "run_id": null,
  "source": "a.csv",
  "source_records": 2,
  "source_rows": 2,
  "target": "b.csv",
  "target_records": 2,
  "target_rows": 2,
  "timings": {
    "source_ms": 0,
    "started_at": "2026-11-30T06:00:00Z",
    "target_ms": 0,
    "total_ms": 1
  },
  "totals": {
    "source": [],
    "target": []
  },
  "unplaced": 0,
  "window": null
}
"#;

    /// summary.json of a `recon apply`.
    const APPLY: &str = r#"{
  "backfill_failed": 0,
  "backfilled": 2,
  "exit_status": 0,
  "job": "charges",
  "plan": "reports/charges/r1/plan.jsonl",
  "plan_id": "r1",
  "plan_sha256": "ab12",
  "planned": 3,
  "run_id": "r2",
  "skipped": 1,
  "window": {
    "end": "2026-11-30T05:00:00Z",
    "start": "2026-11-29T05:00:00Z"
  }
}
"#;

    #[test]
    fn every_shape_of_summary_json_round_trips_byte_for_byte() {
        for text in [RUN, DIFF, APPLY] {
            let s: RunSummary = serde_json::from_str(text).unwrap();
            let bytes = s.to_file_bytes().unwrap();
            assert_eq!(String::from_utf8(bytes).unwrap(), text);
            // Through serde's own entry point too.
            let again = serde_json::to_string_pretty(&s).unwrap() + "\n";
            assert_eq!(again, text);
        }
    }

    #[test]
    fn the_fields_are_typed() {
        let s: RunSummary = serde_json::from_str(RUN).unwrap();
        assert_eq!(s.counts.get(Class::Gaps), 4);
        assert_eq!(s.counts.present(Class::Resolved), Some(5));
        assert_eq!(s.counts.present(Class::Planned), None);
        assert_eq!(s.run.exit_status, Some(1));
        assert_eq!(s.run.window.as_ref().unwrap().start, "2026-11-28T05:00:00Z");
        assert_eq!(s.run.timings.as_ref().unwrap().total_ms, 250);
        assert_eq!(s.run.webhook.as_ref().unwrap().delivered, 2);
        assert_eq!(
            s.money_delta(),
            vec![("USD".into(), 100 - 9_007_199_254_740_993)]
        );
        let d: RunSummary = serde_json::from_str(DIFF).unwrap();
        assert_eq!(d.run.window, None);
        assert_eq!(d.run.run_id, None);
        let a: RunSummary = serde_json::from_str(APPLY).unwrap();
        assert_eq!(a.counts.get(Class::Skipped), 1);
        assert_eq!(a.run.source, None);
    }

    #[test]
    fn the_run_log_keeps_what_it_always_kept() {
        let s: RunSummary = serde_json::from_str(RUN).unwrap();
        let log = s.run_log_json();
        let keys: Vec<&str> = log
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "backfill_failed",
                "backfilled",
                "delivered_not_created",
                "duplicates",
                "gaps",
                "matched",
                "mismatches",
                "orphans",
                "pending",
                "source_records",
                "source_rows",
                "target_records",
                "target_rows"
            ]
        );
        // An apply's record is its whole summary.
        let a: RunSummary = serde_json::from_str(APPLY).unwrap();
        assert_eq!(
            a.run_log_json(),
            serde_json::from_str::<serde_json::Value>(APPLY).unwrap()
        );
    }

    #[test]
    fn every_class_has_one_spelling_both_ways() {
        let keys: Vec<&str> = Class::iter().map(Class::key).collect();
        assert_eq!(
            keys,
            [
                "source_records",
                "target_records",
                "matched",
                "gaps",
                "orphans",
                "mismatches",
                "duplicates",
                "pending",
                "unplaced",
                "resolved",
                "backfilled",
                "backfill_failed",
                "delivered_not_created",
                "confirmed_by_lookup",
                "source_rows",
                "target_rows",
                "planned",
                "skipped"
            ]
        );
        for c in Class::iter() {
            assert_eq!(Class::from_str(c.key()), Ok(c), "{c:?}");
            assert_eq!(c.to_string(), c.key());
        }
        assert!(Class::from_str("gap").is_err());
        let ones: Vec<(Class, &str)> = Class::iter().filter_map(|c| Some((c, c.one()?))).collect();
        assert_eq!(
            ones,
            [
                (Class::Gaps, "gap"),
                (Class::Orphans, "orphan"),
                (Class::Mismatches, "mismatch"),
                (Class::Duplicates, "duplicate"),
                (Class::Unplaced, "unplaced")
            ]
        );
    }

    #[test]
    fn counts_read_from_the_store_accept_numbers_as_text() {
        let c = Counts::of_json(&serde_json::json!({"gaps": "7", "orphans": 2, "x": 1}));
        assert_eq!(c.present(Class::Gaps), Some(7));
        assert_eq!(c.present(Class::Orphans), Some(2));
        assert_eq!(c.present(Class::Matched), None);
    }

    #[test]
    fn a_summary_that_is_not_one_is_refused_with_its_reason() {
        let e = RunSummary::of_json(serde_json::json!([1])).unwrap_err();
        assert!(e.to_string().contains("does not hold an object"), "{e}");
        let e = RunSummary::of_json(serde_json::json!({"job": 5})).unwrap_err();
        assert!(
            format!("{e:#}").contains("fields of a run's summary"),
            "{e:#}"
        );
    }
}
