//! The report files of one diff: summary.json, summary.csv, gaps.csv,
//! orphans.csv, mismatches.csv and duplicates.csv. Column orders are part
//! of the contract with finance spreadsheets; reports/README.md explains them.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};
use jiff::Timestamp;
use recon_core::{format_minor, Currency, FieldKind, Record, Schema, Value};

use super::html::{merge_largest, FileTop, TopFile, TopRow};
use super::staging::ReportFile;
use super::summary::{
    Class as Count, Counts, RunFields, RunSummary, Timings, Total, Totals as SummaryTotals,
    Webhook, WindowText,
};
use super::{neutralise, CsvReport, ReportDir};
use crate::diff::{DiffOutcome, Records, Totals};
use crate::state::{Class, DiscrepancyDelta};

/// The ID column of every report CSV.
pub const ID_COLUMN: &str = "external_id";

/// The columns a configured run adds after the fields (first sighting,
/// `new` or `persisting`) in gaps.csv, orphans.csv, mismatches.csv and
/// duplicates.csv.
pub const HISTORY_COLUMNS: [&str; 2] = ["first_seen", "state"];

/// The columns of gaps.csv, orphans.csv and pending.csv that are not
/// fields of the job (see `record_header`): a field of one of these
/// names would give the file two columns of that name, and report.html
/// would read the wrong one. `currency` is not among them: it is added
/// only when no field has that name. The job config refuses these names
/// (`crate::config`).
pub const RESERVED_FIELD_NAMES: [&str; 3] = [ID_COLUMN, HISTORY_COLUMNS[0], HISTORY_COLUMNS[1]];

/// The column of gaps.csv, orphans.csv and pending.csv that holds the
/// money field's currency code. A field of this name takes its place (it
/// is then the code, as `currency = "currency"`); the job config refuses
/// one that cannot hold a code, and other spellings of the name
/// (`crate::config`).
pub const CURRENCY_COLUMN: &str = "currency";

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

/// Writes the lines of plan.jsonl into the file it is given.
type WriteLines = dyn Fn(&mut dyn Write) -> std::io::Result<()> + Send + Sync;

/// The backfill plan, written into plan.jsonl one line at a time as the
/// file is written: a plan of 200,000 items is never held as JSON.
#[derive(Clone)]
pub struct PlanLines {
    /// How many lines it writes.
    pub count: u64,
    /// Writes them.
    pub write: std::sync::Arc<WriteLines>,
}

impl std::fmt::Debug for PlanLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanLines")
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

/// What a configured run adds to a diff's reports.
#[derive(Clone, Debug, Default)]
pub struct RunExtras {
    /// The run's ID in the state store.
    pub run_id: Option<String>,
    /// Whether the run was a dry run.
    pub dry_run: bool,
    /// Source records too young to judge.
    pub pending: Vec<Record>,
    /// History of the open discrepancies (first seen; new or persisting).
    /// `None` for ad-hoc diffs.
    pub history: Option<Arc<HistoryMap>>,
    /// Discrepancies of earlier runs that are gone now.
    pub resolved: Vec<ResolvedRow>,
    /// The backfill plan (dry run, or a run stopped by the safety limit).
    pub plan: Option<PlanLines>,
    /// Outcome of each backfilled item (apply).
    pub backfill: Option<Vec<BackfillRow>>,
    /// IDs written to the target.
    pub backfilled: u64,
    /// IDs the target refused.
    pub backfill_failed: u64,
    /// Remarks for the summary (safety limit, confirmations).
    pub notes: Vec<String>,
    /// IDs whose discrepancy was dismissed by a key lookup at the window edge.
    pub confirmed_by_lookup: u64,
    /// Records of either side that no window can hold (time field empty,
    /// NULL or not a timestamp): listed in unplaced.csv, never diffed.
    pub unplaced: Vec<UnplacedRow>,
    /// `backfill.via = "webhook"`: the deliveries' counts (summary.json
    /// `webhook`, and `delivered_not_created` at the top level).
    pub webhook: Option<Webhook>,
    /// Every copy of the external IDs a side holds more than once
    /// (duplicate_copies.csv, and the money counted twice in summary.csv,
    /// summary.json and report.html); `None` when they were not looked up.
    pub duplicate_copies: Option<Vec<super::copies::CopyRow>>,
}

/// A record that could not be placed in the window, with its side.
#[derive(Clone, Debug)]
pub struct UnplacedRow {
    /// `source` or `target`.
    pub side: String,
    /// The record as its side reported it.
    pub record: recon_core::Unplaced,
}

/// `unplaced.csv`: records that no window can hold, by side and ID.
fn write_unplaced_csv(dir: &mut ReportDir, rows: &[UnplacedRow]) -> Result<()> {
    let mut w = CsvReport::new(
        dir.file("unplaced.csv")?,
        &["side", ID_COLUMN, "field", "value", "reason"],
    )?;
    for r in rows {
        w.row([
            &r.side,
            &r.record.key,
            &r.record.field,
            &r.record.value,
            &r.record.reason,
        ])?;
    }
    w.finish()?.flush()?;
    Ok(())
}

/// A discrepancy of an earlier run that no longer exists.
#[derive(Clone, Debug)]
pub struct ResolvedRow {
    /// gap, orphan, mismatch or duplicate.
    pub class: String,
    /// The ID.
    pub key: String,
    /// When it was first seen, RFC 3339.
    pub first_seen: String,
    /// When this run found it gone, RFC 3339.
    pub resolved_at: String,
}

/// What happened to one backfill item, as `backfill.csv` spells it
/// (snake case: `AlreadyDone` is `already_done`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::EnumIter,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(serialize_all = "snake_case")]
pub enum BackfillOutcome {
    /// The record was created.
    Created,
    /// The record existed and was updated.
    Updated,
    /// The record existed and was left as it was.
    Unchanged,
    /// The target refused it.
    Failed,
    /// Not written: `recon apply` found it already present.
    Skipped,
    /// `backfill.via = "webhook"`: the endpoint answered 2xx and the record
    /// is in the target.
    Delivered,
    /// `backfill.via = "webhook"`: the endpoint answered 409 (its handler
    /// had done it) and the record is in the target.
    AlreadyDone,
    /// `backfill.via = "webhook"`: the endpoint acknowledged the delivery
    /// but the record is not in the target after `verify_after`: the
    /// handler is broken. Never sent again.
    DeliveredNotCreated,
}

impl BackfillOutcome {
    /// The outcome of a target's write.
    pub fn of(o: &recon_core::WriteOutcome) -> BackfillOutcome {
        match o {
            recon_core::WriteOutcome::Created => BackfillOutcome::Created,
            recon_core::WriteOutcome::Updated => BackfillOutcome::Updated,
            recon_core::WriteOutcome::Unchanged => BackfillOutcome::Unchanged,
            recon_core::WriteOutcome::Failed(_) => BackfillOutcome::Failed,
        }
    }

    /// Its `backfill.csv` spelling.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether only a webhook route has it.
    pub fn webhook_only(self) -> bool {
        matches!(
            self,
            BackfillOutcome::Delivered
                | BackfillOutcome::AlreadyDone
                | BackfillOutcome::DeliveredNotCreated
        )
    }

    /// Whether the target now holds the record as the source has it.
    pub fn written(self) -> bool {
        !matches!(
            self,
            BackfillOutcome::Failed | BackfillOutcome::DeliveredNotCreated
        )
    }
}

/// One backfilled item.
#[derive(Clone, Debug)]
pub struct BackfillRow {
    /// The ID.
    pub key: String,
    /// Insert or update.
    pub action: crate::plan::Action,
    /// What happened.
    pub outcome: BackfillOutcome,
    /// The target's error for a failed item (why it was skipped).
    pub error: String,
}

impl BackfillRow {
    /// The row of one written item.
    pub fn new(
        key: &str,
        action: crate::plan::Action,
        o: &recon_core::WriteOutcome,
    ) -> BackfillRow {
        BackfillRow {
            key: key.to_string(),
            action,
            outcome: BackfillOutcome::of(o),
            error: match o {
                recon_core::WriteOutcome::Failed(e) => e.clone(),
                _ => String::new(),
            },
        }
    }
}

/// `backfill.csv`: each written (or skipped) item's outcome.
pub fn write_backfill_csv(dir: &mut ReportDir, rows: &[BackfillRow]) -> Result<()> {
    let mut w = CsvReport::new(
        dir.file("backfill.csv")?,
        &[ID_COLUMN, "action", "outcome", "error"],
    )?;
    for r in rows {
        w.row([
            r.key.as_str(),
            r.action.as_str(),
            r.outcome.as_str(),
            r.error.as_str(),
        ])?;
    }
    w.finish()?.flush()?;
    Ok(())
}

/// The per-currency totals of one side, as summary.json lists them.
pub(super) fn totals_of(totals: &Totals) -> Vec<Total> {
    totals
        .iter()
        .map(|(cur, t)| Total {
            currency: cur.map(|c| c.code().to_string()),
            records: t.records,
            total: cur.map(|c| format_minor(t.minor, c)),
            total_minor: cur.map(|_| t.minor.to_string()),
        })
        .collect()
}

/// The summary of a diff (`recon diff`, `recon run`): what summary.json
/// holds.
pub fn summary_of(
    schema: &Schema,
    outcome: &DiffOutcome,
    meta: &RunMeta,
    extras: &RunExtras,
    exit_status: u8,
) -> RunSummary {
    let mut counts = Counts::default();
    for (class, n) in [
        (Count::SourceRecords, outcome.source_records),
        (Count::TargetRecords, outcome.target_records),
        (Count::Matched, outcome.matched),
        (Count::Gaps, outcome.gaps.len() as u64),
        (Count::Orphans, outcome.orphans.len() as u64),
        (Count::Mismatches, outcome.mismatches.len() as u64),
        (Count::Duplicates, outcome.duplicates.len() as u64),
        (Count::Pending, extras.pending.len() as u64),
        (Count::Unplaced, extras.unplaced.len() as u64),
        (Count::Backfilled, extras.backfilled),
        (Count::BackfillFailed, extras.backfill_failed),
        (Count::ConfirmedByLookup, extras.confirmed_by_lookup),
        (Count::SourceRows, outcome.source_rows),
        (Count::TargetRows, outcome.target_rows),
    ] {
        counts.set(class, n);
    }
    if let Some(w) = &extras.webhook {
        counts.set(Count::DeliveredNotCreated, w.delivered_not_created);
    }
    if extras.history.is_some() {
        counts.set(Count::Resolved, extras.resolved.len() as u64);
    }
    let ms = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    let run = RunFields {
        job: meta.job.clone(),
        source: Some(meta.source.clone()),
        target: Some(meta.target.clone()),
        window: meta.window.as_ref().map(|(s, e)| WindowText {
            start: s.clone(),
            end: e.clone(),
        }),
        webhook: extras.webhook.clone(),
        run_id: extras.run_id.clone(),
        dry_run: Some(extras.dry_run),
        notes: Some(extras.notes.clone()),
        exit_status: Some(exit_status),
        compared_fields: Some(
            schema
                .fields
                .iter()
                .filter(|f| f.compared)
                .map(|f| f.name.clone())
                .collect(),
        ),
        totals: Some(SummaryTotals {
            source: totals_of(&outcome.source_totals),
            target: totals_of(&outcome.target_totals),
        }),
        counted_twice: extras
            .duplicate_copies
            .as_deref()
            .map(|rows| super::copies::summary_counted_twice(rows, schema)),
        timings: Some(Timings {
            started_at: meta.started_at.clone(),
            source_ms: ms(meta.source_ms),
            target_ms: ms(meta.target_ms),
            total_ms: ms(meta.total_ms),
        }),
        recon_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        ..RunFields::default()
    };
    let mut summary = RunSummary {
        counts,
        run,
        ..RunSummary::default()
    };
    summary.count_backfill(extras.backfill.iter().flatten());
    summary
}

/// Writes summary.json.
pub fn write_summary(dir: &mut ReportDir, summary: &RunSummary) -> Result<()> {
    dir.write_all("summary.json", &summary.to_file_bytes()?)
}

/// Writes every report of a diff into `dir` (not yet committed).
pub fn write_diff_reports(
    dir: &mut ReportDir,
    schema: &Schema,
    outcome: &DiffOutcome,
    meta: &RunMeta,
    extras: &RunExtras,
    exit_status: u8,
) -> Result<()> {
    write_diff_files(dir, schema, outcome, extras, None, None)?;
    write_summary(dir, &summary_of(schema, outcome, meta, extras, exit_status))
}

/// Writes the CSV (and JSON Lines) reports of a diff: every file but
/// summary.json. With `top` (the job's money field, and how many per
/// currency), the largest gaps, orphans and mismatches report.html lists
/// are found from the rows as they are written, as
/// [`largest`](super::html::largest) finds them in the files (a 10M-row
/// run read its three files back for 70 ms); `None` when a written row
/// could not be offered (the page then reads the files back).
pub fn write_diff_files(
    dir: &mut ReportDir,
    schema: &Schema,
    outcome: &DiffOutcome,
    extras: &RunExtras,
    top: Option<(Option<&str>, usize)>,
    gaps_written: Option<GapsWriting>,
) -> Result<Option<Vec<TopRow>>> {
    let h = extras.history.as_deref();
    let top_of = |kind: TopFile, header: &[String]| {
        let (money_field, n) = top?;
        file_top(kind, header, money_field, n)
    };
    // gaps.csv, the longest file after an incident, and mismatches.csv
    // are written on threads of their own beside the others (a 200,000-gap
    // run spends a tenth of its time writing gaps.csv; with both on one
    // thread, a 10M-row diff's 100,000 gaps and 100,000 mismatches took
    // 60 ms after the other files were done); the folder is committed
    // only once all are done. A run that backfills wrote gaps.csv while
    // the target was written ([`GapsFile`]): it is waited for here.
    let gaps_file = match gaps_written {
        Some(written) => Err(written),
        None => Ok(dir.file("gaps.csv")?),
    };
    let mismatches_file = dir.file("mismatches.csv")?;
    let (gaps, orphans, mismatches) = std::thread::scope(|scope| {
        let gaps = scope.spawn(|| match gaps_file {
            Ok(file) => records_into(
                file,
                schema,
                outcome.gaps.iter(),
                h.map(|h| (h, Class::Gap)),
                |header| top_of(TopFile::Gaps, header),
            ),
            Err(written) => written.wait(),
        });
        let mismatches = scope.spawn(|| {
            write_mismatches(mismatches_file, schema, outcome, h, |header| {
                top_of(TopFile::Mismatches, header)
            })
        });
        let rest = write_other_files(dir, schema, outcome, extras, |header| {
            top_of(TopFile::Orphans, header)
        });
        let gaps =
            (gaps.join()).unwrap_or_else(|_| Err(anyhow::anyhow!("writing gaps.csv panicked")));
        let mismatches = (mismatches.join())
            .unwrap_or_else(|_| Err(anyhow::anyhow!("writing mismatches.csv panicked")));
        anyhow::Ok((gaps?, rest?, mismatches?))
    })?;
    // A list that failed is not used: the page reads the files back.
    let lists = [gaps, orphans, mismatches];
    if lists.iter().flatten().any(FileTop::failed) {
        return Ok(None);
    }
    Ok(top.map(|(_, n)| merge_largest(lists, n)))
}

/// The list of `kind`'s largest rows for a file whose header is `header`
/// (as written, before [`neutralise`]).
fn file_top<'m>(
    kind: TopFile,
    header: &[String],
    money_field: Option<&'m str>,
    n: usize,
) -> Option<FileTop<'m>> {
    let header: Vec<String> = header.iter().map(|c| neutralise(c).into_owned()).collect();
    FileTop::new(kind, &header, money_field, n)
}

/// gaps.csv of a run that backfills, made before the writes: started
/// ([`GapsFile::start`]) once the history's first sightings are known, it
/// is written on a thread of its own while the target is written, at the
/// reports' lower priority ([`crate::priority`]); the report phase waits
/// for it ([`write_diff_files`]). Its rows depend on nothing the writes
/// do: a 200,000-gap backfill wrote it for 150 ms after its last write.
pub struct GapsFile {
    file: ReportFile,
    schema: Schema,
    gaps: Records,
    top: Option<(Option<String>, usize)>,
}

/// gaps.csv being written ([`GapsFile::start`]). Dropped unwaited (the
/// run failed before its reports), the thread finishes into the staging
/// folder the failed run removes.
pub struct GapsWriting(std::thread::JoinHandle<Result<Option<FileTop<'static>>>>);

impl GapsFile {
    /// Creates gaps.csv in `dir` for the `gaps` of a run; `top` as
    /// [`write_diff_files`] takes it.
    pub fn create(
        dir: &mut ReportDir,
        schema: &Schema,
        gaps: &Records,
        top: Option<(Option<&str>, usize)>,
    ) -> Result<GapsFile> {
        Ok(GapsFile {
            file: dir.file("gaps.csv")?,
            schema: schema.clone(),
            gaps: gaps.clone(),
            top: top.map(|(field, n)| (field.map(str::to_string), n)),
        })
    }

    /// Starts writing the file with the run's `history`.
    pub fn start(self, history: Arc<HistoryMap>) -> Result<GapsWriting> {
        let GapsFile {
            file,
            schema,
            gaps,
            top,
        } = self;
        let write = move || {
            crate::priority::lower_this_thread(crate::priority::REPORTS);
            let top = records_into(
                file,
                &schema,
                gaps.iter(),
                Some((&*history, Class::Gap)),
                |header| {
                    let (field, n) = top.as_ref()?;
                    file_top(TopFile::Gaps, header, field.as_deref(), *n)
                },
            )?;
            Ok(top.and_then(FileTop::detached))
        };
        let handle = std::thread::Builder::new()
            .name("recon-gaps".into())
            .spawn(write)
            .context("cannot start the thread writing gaps.csv")?;
        Ok(GapsWriting(handle))
    }
}

impl GapsWriting {
    /// Waits for the file; its list of largest rows, as [`records_into`]
    /// returns it.
    fn wait(self) -> Result<Option<FileTop<'static>>> {
        self.0
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("writing gaps.csv panicked")))
    }
}

/// Every file of [`write_diff_files`] but gaps.csv and mismatches.csv;
/// the largest orphans when `top` makes a list for orphans.csv's header.
fn write_other_files<'m>(
    dir: &mut ReportDir,
    schema: &Schema,
    outcome: &DiffOutcome,
    extras: &RunExtras,
    top: impl FnOnce(&[String]) -> Option<FileTop<'m>>,
) -> Result<Option<FileTop<'m>>> {
    let h = extras.history.as_deref();
    write_summary_csv(dir, schema, outcome, extras)?;
    let orphans = records_into(
        dir.file("orphans.csv")?,
        schema,
        outcome.orphans.iter(),
        h.map(|h| (h, Class::Orphan)),
        top,
    )?;
    write_duplicates(dir, outcome, h)?;
    if let Some(rows) = &extras.duplicate_copies {
        super::copies::write(dir, schema, rows)?;
    }
    write_records(dir, "pending.csv", schema, &extras.pending, None)?;
    if h.is_some() {
        // Configured runs only: `recon diff` reads whole files, no window.
        write_unplaced_csv(dir, &extras.unplaced)?;
        let mut w = CsvReport::new(
            dir.file("resolved.csv")?,
            &["class", ID_COLUMN, HISTORY_COLUMNS[0], "resolved_at"],
        )?;
        for r in &extras.resolved {
            w.row([&r.class, &r.key, &r.first_seen, &r.resolved_at])?;
        }
        w.finish()?.flush()?;
    }
    if let Some(plan) = &extras.plan {
        let mut f = dir.file("plan.jsonl")?;
        (plan.write)(&mut f)?;
        f.flush()?;
    }
    if let Some(rows) = &extras.backfill {
        write_backfill_csv(dir, rows)?;
    }

    Ok(orphans)
}

/// summary.csv: per currency, both sides' rows and totals, their deltas,
/// and the money each side counts more than once (empty when the copies
/// were not looked up).
fn write_summary_csv(
    dir: &mut ReportDir,
    schema: &Schema,
    outcome: &DiffOutcome,
    extras: &RunExtras,
) -> Result<()> {
    let twice = extras.duplicate_copies.as_deref().map(|rows| {
        (
            super::copies::counted_twice(rows, "source", schema),
            super::copies::counted_twice(rows, "target", schema),
        )
    });
    let currencies: BTreeSet<Option<Currency>> = outcome
        .source_totals
        .keys()
        .chain(outcome.target_totals.keys())
        .chain(twice.iter().flat_map(|(s, t)| s.keys().chain(t.keys())))
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
            "source_counted_twice",
            "target_counted_twice",
        ],
    )?;
    for cur in currencies {
        let s = outcome.source_totals.get(&cur).copied().unwrap_or_default();
        let t = outcome.target_totals.get(&cur).copied().unwrap_or_default();
        let money = |minor: i128| cur.map(|c| format_minor(minor, c)).unwrap_or_default();
        let counted = |side: &Totals| money(side.get(&cur).map_or(0, |t| t.minor));
        let (source_twice, target_twice) = match &twice {
            Some((s, t)) => (counted(s), counted(t)),
            None => (String::new(), String::new()),
        };
        w.row([
            cur.map(|c| c.code().to_string()).unwrap_or_default(),
            s.records.to_string(),
            money(s.minor),
            t.records.to_string(),
            money(t.minor),
            (i128::from(t.records) - i128::from(s.records)).to_string(),
            money(t.minor - s.minor),
            source_twice,
            target_twice,
        ])?;
    }
    w.finish()?.flush()?;
    Ok(())
}

/// Columns of gaps.csv and orphans.csv: the ID, every field in schema order
/// (money in major units), then the money's currency unless a field is
/// already named `currency`.
pub(super) fn record_header(schema: &Schema) -> (Vec<String>, bool) {
    let mut header = vec![ID_COLUMN.to_string()];
    header.extend(schema.fields.iter().map(|f| f.name.clone()));
    let add_currency = schema.money_field().is_some() && schema.index_of(CURRENCY_COLUMN).is_none();
    if add_currency {
        header.push(CURRENCY_COLUMN.into());
    }
    (header, add_currency)
}

/// The history of this run's open discrepancies, kept small: only those
/// that persist from an earlier run are listed (with their first
/// sighting); every other one is new, first seen now.
#[derive(Clone, Debug, Default)]
pub struct HistoryMap {
    /// This run's start, RFC 3339: the first sighting of the new ones.
    pub now: String,
    /// What the history says of this run's discrepancies: the persisting
    /// ones with their first sighting, by class and external ID.
    pub delta: Arc<DiscrepancyDelta>,
    /// Each distinct first sighting, RFC 3339 (a history holds few: one
    /// per run that found something new).
    pub firsts: HashMap<Timestamp, String>,
    /// The first sightings of the gaps, orphans and mismatches in their
    /// lists' order, found as the delta was built: their rows need no
    /// look-up in `delta` (a binary search and its cache misses per row).
    pub in_order: InOrder,
}

/// First sightings in report order: `None` for a discrepancy seen for the
/// first time by this run.
#[derive(Clone, Debug, Default)]
pub struct InOrder {
    /// One per gap, in the outcome's order.
    pub gaps: Vec<Option<Timestamp>>,
    /// One per orphan, in the outcome's order.
    pub orphans: Vec<Option<Timestamp>>,
    /// One per mismatched record, in the outcome's order.
    pub mismatches: Vec<Option<Timestamp>>,
}

impl HistoryMap {
    /// The first sightings of `class` in list order, when they were found
    /// for a list of `len` records (else rows are looked up by key).
    fn in_order(&self, class: Class, len: usize) -> Option<&[Option<Timestamp>]> {
        let list = match class {
            Class::Gap => &self.in_order.gaps,
            Class::Orphan => &self.in_order.orphans,
            Class::Mismatch => &self.in_order.mismatches,
            Class::Duplicate => return None,
        };
        (list.len() == len).then_some(list.as_slice())
    }

    /// The history's cells of a discrepancy whose first sighting is known.
    fn cells_of(&self, first: Option<Timestamp>) -> [&str; 2] {
        match first.and_then(|t| self.firsts.get(&t)) {
            Some(first) => [first.as_str(), "persisting"],
            None => [self.now.as_str(), "new"],
        }
    }
}

type History<'a> = (&'a HistoryMap, Class);

/// The history's cells (first seen; `new` or `persisting`) of a list's
/// rows, borrowed from the map: by the row's place when the run found the
/// list's first sightings in its order, else looked up by key.
#[derive(Clone, Copy)]
struct ListHistory<'h> {
    history: Option<History<'h>>,
    in_order: Option<&'h [Option<Timestamp>]>,
}

impl<'h> ListHistory<'h> {
    /// For a list of `len` rows of `history`'s class.
    fn new(history: Option<History<'h>>, len: usize) -> ListHistory<'h> {
        let in_order = history.and_then(|(h, class)| h.in_order(class, len));
        ListHistory { history, in_order }
    }

    /// The cells of row `i`, whose ID is `key`.
    fn cells(&self, i: usize, key: &str) -> Option<[&'h str; 2]> {
        let (h, class) = self.history?;
        let first = match self.in_order {
            Some(firsts) => firsts[i],
            None => h.delta.persisting.get(class, key),
        };
        Some(h.cells_of(first))
    }
}

/// Writes records one at a time, as the list yields them: a large list of
/// encoded records is never materialised whole.
fn write_records<R: std::borrow::Borrow<Record>>(
    dir: &mut ReportDir,
    name: &str,
    schema: &Schema,
    records: impl IntoIterator<Item = R, IntoIter: ExactSizeIterator>,
    history: Option<History<'_>>,
) -> Result<()> {
    records_into(dir.file(name)?, schema, records, history, |_| None)?;
    Ok(())
}

/// [`write_records`] into a file already created; `top` may make a list
/// of the largest rows for the file's header, offered each row.
fn records_into<'m, R: std::borrow::Borrow<Record>>(
    file: ReportFile,
    schema: &Schema,
    records: impl IntoIterator<Item = R, IntoIter: ExactSizeIterator>,
    history: Option<History<'_>>,
    top: impl FnOnce(&[String]) -> Option<FileTop<'m>>,
) -> Result<Option<FileTop<'m>>> {
    let (mut header, add_currency) = record_header(schema);
    if history.is_some() {
        header.extend(HISTORY_COLUMNS.map(String::from));
    }
    let mut top = top(&header);
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    write_rows(
        CsvReport::new(file, &header)?,
        schema,
        records,
        history,
        add_currency,
        top.as_mut(),
    )?;
    Ok(top)
}

fn write_rows<R: std::borrow::Borrow<Record>>(
    mut w: CsvReport<ReportFile>,
    schema: &Schema,
    records: impl IntoIterator<Item = R, IntoIter: ExactSizeIterator>,
    history: Option<History<'_>>,
    add_currency: bool,
    mut top: Option<&mut FileTop<'_>>,
) -> Result<()> {
    use std::fmt::Write as _;
    let money_field = schema.money_field();
    // Every cell is written into a buffer reused from row to row, and the
    // history is looked up with a reused key: no string is made per cell
    // (gaps.csv of a 10M-row diff has 100,000 rows). Gaps and orphans take
    // their first sightings in list order instead, when the run found them.
    let mut row = RowBuf::default();
    let records = records.into_iter();
    let history = ListHistory::new(history, records.len());
    for (i, r) in records.enumerate() {
        let r: &Record = r.borrow();
        row.used = 0;
        row.next().push_str(&r.key);
        for v in &r.values {
            write!(row.next(), "{v}")?;
        }
        if add_currency {
            let cur = money_field.and_then(|i| r.values[i].currency());
            row.next().push_str(cur.as_ref().map_or("", |c| c.code()));
        }
        for cell in history.cells(i, &r.key).into_iter().flatten() {
            row.next().push_str(cell);
        }
        w.row(row.cells())?;
        if let Some(top) = top.as_deref_mut() {
            top.offer_written(row.cells());
        }
    }
    w.finish()?.flush()?;
    Ok(())
}

/// The cells of one row, their strings kept from row to row.
#[derive(Default)]
struct RowBuf {
    cells: Vec<String>,
    used: usize,
}

impl RowBuf {
    /// The next cell, empty.
    fn next(&mut self) -> &mut String {
        if self.used == self.cells.len() {
            self.cells.push(String::new());
        }
        let cell = &mut self.cells[self.used];
        self.used += 1;
        cell.clear();
        cell
    }

    fn cells(&self) -> &[String] {
        &self.cells[..self.used]
    }
}

/// mismatches.csv: one row per differing field; `top` as in
/// [`records_into`].
fn write_mismatches<'m>(
    file: ReportFile,
    schema: &Schema,
    outcome: &DiffOutcome,
    history: Option<&HistoryMap>,
    top: impl FnOnce(&[String]) -> Option<FileTop<'m>>,
) -> Result<Option<FileTop<'m>>> {
    use std::fmt::Write as _;
    let mut header = vec![
        ID_COLUMN,
        "field",
        "source_value",
        "target_value",
        "currency",
        "difference",
    ];
    if history.is_some() {
        header.extend(HISTORY_COLUMNS);
    }
    let mut top = top(&header.iter().map(|c| c.to_string()).collect::<Vec<_>>());
    let mut w = CsvReport::new(file, &header)?;
    // Cells written into buffers reused from row to row (a 10M-row diff
    // has 100,000 mismatches); first sightings in list order when the run
    // found them so.
    let mut row = RowBuf::default();
    let list = ListHistory::new(
        history.map(|h| (h, Class::Mismatch)),
        outcome.mismatches.len(),
    );
    for (i, m) in outcome.mismatches.iter().enumerate() {
        let cells = list.cells(i, &m.key);
        for d in &m.fields {
            let field = &schema.fields[d.field];
            row.used = 0;
            row.next().push_str(&m.key);
            row.next().push_str(&field.name);
            write!(row.next(), "{}", d.source)?;
            write!(row.next(), "{}", d.target)?;
            let currency = row.next();
            match (&d.source, &d.target) {
                (Value::Money(a), Value::Money(b)) if a.currency == b.currency => {
                    currency.push_str(a.currency.code());
                    let difference =
                        format_minor(i128::from(b.minor) - i128::from(a.minor), a.currency);
                    row.next().push_str(&difference);
                }
                (Value::Money(a), Value::Money(b)) => {
                    write!(currency, "{}/{}", a.currency, b.currency)?;
                    row.next();
                }
                (a, b) if field.kind == FieldKind::Money => {
                    if let Some(c) = a.currency().or(b.currency()) {
                        write!(currency, "{c}")?;
                    }
                    row.next();
                }
                (Value::Integer(a), Value::Integer(b)) => {
                    write!(row.next(), "{}", i128::from(*b) - i128::from(*a))?;
                }
                (Value::Timestamp(a), Value::Timestamp(b)) => {
                    let seconds = i128::from(b.as_second()) - i128::from(a.as_second());
                    write!(row.next(), "{seconds}")?;
                }
                _ => {
                    row.next();
                }
            }
            for cell in cells.into_iter().flatten() {
                row.next().push_str(cell);
            }
            w.row(row.cells())?;
            if let Some(top) = top.as_mut() {
                top.offer_written(row.cells());
            }
        }
    }
    w.finish()?.flush()?;
    Ok(top)
}

fn write_duplicates(
    dir: &mut ReportDir,
    outcome: &DiffOutcome,
    history: Option<&HistoryMap>,
) -> Result<()> {
    let mut header = vec![ID_COLUMN, "side", "count", "other_side_count"];
    if history.is_some() {
        header.extend(HISTORY_COLUMNS);
    }
    let mut w = CsvReport::new(dir.file("duplicates.csv")?, &header)?;
    // Duplicates' first sightings are not kept in list order: by key.
    let list = ListHistory::new(history.map(|h| (h, Class::Duplicate)), 0);
    for (i, d) in outcome.duplicates.iter().enumerate() {
        let extra = list.cells(i, &d.key);
        for (side, count, other) in [
            ("source", d.source_count, d.target_count),
            ("target", d.target_count, d.source_count),
        ] {
            if count > 1 {
                let mut row = vec![
                    d.key.clone(),
                    side.to_string(),
                    count.to_string(),
                    other.to_string(),
                ];
                row.extend(extra.into_iter().flatten().map(String::from));
                w.row(&row)?;
            }
        }
    }
    w.finish()?.flush()?;
    Ok(())
}
