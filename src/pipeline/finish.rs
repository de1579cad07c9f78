//! Stage 9: reports, the saved plan, the terminal summary and the run's
//! record in the state store.

use std::collections::HashSet;
use std::time::Instant;

use anyhow::Result;
use jiff::Timestamp;
use recon_core::{format_timestamp, Record, Window, WriteOutcome};
use serde_json::json;

use super::backfill::{Guard, Item};
use super::read::{Confirmed, Sides};
use super::{Finished, RunPlan};
use crate::diff::DiffOutcome;
use crate::plan::{Action, PlanLine, PLAN_FILE};
use crate::report::summary::Webhook;
use crate::report::{
    write_diff_files, write_summary, BackfillRow, PlanLines, ReportDir, RunExtras, RunMeta,
    RunSummary, UnplacedRow,
};
use crate::state::prelude::*;
use crate::state::{PlanRecord, RunStatus, StateStore};
use crate::Status;

/// What the run is: its plan, id, windows and clocks.
pub struct Context<'a> {
    /// The validated run.
    pub plan: &'a RunPlan,
    /// The run's id.
    pub run_id: &'a str,
    /// The window asked for.
    pub asked: Window,
    /// The window read (with lookback).
    pub window: Window,
    /// When the run started.
    pub now: Timestamp,
    /// Its monotonic start.
    pub started: Instant,
    /// Milliseconds reading the source and the target.
    pub timings: (u128, u128),
    /// Both sides, for their names.
    pub sides: &'a Sides,
    /// The run lock, verified before the history and the folder are
    /// committed.
    pub lock: &'a crate::state::RunLock,
}

/// What the run found and did.
pub struct Found {
    /// The diff, confirmed.
    pub outcome: DiffOutcome,
    /// Records no window can hold.
    pub unplaced: Vec<UnplacedRow>,
    /// What edge confirmation settled.
    pub confirmed: Confirmed,
    /// Every copy of the duplicated external IDs.
    pub copies: Vec<crate::report::copies::CopyRow>,
    /// Young source records.
    pub pending: Vec<Record>,
    /// The history as the reports show it.
    pub history: std::sync::Arc<crate::report::HistoryMap>,
    /// The discrepancies of earlier runs that are gone now.
    pub resolved: Vec<crate::report::ResolvedRow>,
    /// gaps.csv, when it was written beside the backfill.
    pub gaps_written: Option<crate::report::GapsWriting>,
    /// The backfill plan.
    pub items: Vec<Item>,
    /// What the safety limits decided.
    pub guard: Guard,
    /// The write outcomes, when the backfill ran.
    pub outcomes: Option<Vec<WriteOutcome>>,
    /// `backfill.via = "webhook"`: previews and deliveries.
    pub webhook: Option<super::webhook::Report>,
    /// The history's write, when it runs beside the reports.
    pub recording: super::history::Recording,
}

/// Writes the report folder (and plan.jsonl when kept), saves the plan for
/// `recon apply`, commits the folder and prints the summary.
pub async fn report(
    cx: &Context<'_>,
    state: &StateStore,
    mut dir: ReportDir,
    mut found: Found,
) -> Result<Finished> {
    let mut webhook = found.webhook.take();
    let previews = webhook.as_mut().and_then(|w| w.previews.take());
    let plan_lines = found
        .guard
        .plan_file
        .then(|| plan_lines(cx, &mut found, previews.unwrap_or_default()));
    let delivered = webhook.and_then(|w| w.delivered);
    let extras = extras(cx, &mut found, plan_lines, delivered.as_ref());
    let schema = &cx.plan.spec.schema;
    // The status (after a large backfill, a look-up of every gap among
    // the written keys) is found on a thread of its own while the
    // discrepancy files are written, and the largest rows report.html
    // lists are found as the files are (not read back from them).
    let top = top_of(schema);
    let gaps_written = found.gaps_written.take();
    // Beside the history's write (SQLite's one writer, which the run's end
    // waits for), the files are written at a lower priority: the threads
    // they are written on yield to it ([`crate::priority`]).
    let beside_history = found.recording.is_running();
    let (status, files) = std::thread::scope(|scope| {
        let status = scope.spawn(|| status(&found.outcome, &extras, found.guard.trouble.is_some()));
        let files = scope.spawn(|| {
            if beside_history {
                // The threads it spawns inherit its priority.
                crate::priority::lower_this_thread(crate::priority::REPORTS);
            }
            write_diff_files(&mut dir, schema, &found.outcome, &extras, top, gaps_written)
        });
        let files = files
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let status = status
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (status, files)
    });
    let mut summary =
        crate::report::summary_of(schema, &found.outcome, &meta(cx), &extras, status.code());
    // The diff's lists are not read again: freed beside report.html and
    // the history's commit instead of after them.
    let outcome = std::mem::take(&mut found.outcome);
    let (rendered, source_records) = (render(&outcome, &extras), outcome.source_records);
    crate::memory::drop_aside(outcome);
    let history = (source_records, found.recording);
    let written = match files {
        Ok(top) => write_folder(cx, state, dir, history, &extras, &mut summary, top).await,
        Err(e) => Err(e),
    };
    // What the run did is recorded even when its reports could not be
    // written (a full disk): its writes are in the ledger, its counts in the
    // run's record, for `recon runs` and the next run.
    let report = written.map_err(|error| report_failed(cx, &extras, &summary, error))?;
    println!("{rendered}");
    if let Some(d) = &delivered {
        println!("{}", d.render());
    }
    if let Some(msg) = &found.guard.trouble {
        crate::logging::stderr_line("error", msg);
    }
    // The plan's records (200,000 gaps: 30-50 ms of frees) go the same way.
    crate::memory::drop_aside((
        extras,
        std::mem::take(&mut found.items),
        found.outcomes.take(),
    ));
    Ok(Finished {
        status,
        summary,
        report,
    })
}

/// plan.jsonl, streamed: the items are moved into the writer (no backfill
/// ran, so nothing else needs them) and each line is made, written and
/// dropped in turn.
fn plan_lines(
    cx: &Context<'_>,
    found: &mut Found,
    previews: Vec<crate::webhook::PlanRequest>,
) -> PlanLines {
    let items = match found.outcomes {
        None => std::mem::take(&mut found.items),
        Some(_) => found.items.clone(),
    };
    let count = items.len() as u64;
    let (run_id, job, asked, schema) = (
        cx.run_id.to_string(),
        cx.plan.job.name.clone(),
        cx.asked,
        cx.plan.spec.schema.clone(),
    );
    let lines = crate::plan::PlanLineWriter::new(&run_id, &job, asked, &schema);
    let write = move |f: &mut dyn std::io::Write| -> std::io::Result<()> {
        let mut scratch = (Vec::with_capacity(256), String::new());
        for (i, (r, m)) in items.iter().enumerate() {
            let Some(preview) = previews.get(i) else {
                lines.write(f, Action::from(*m), r, &mut scratch)?;
                continue;
            };
            let mut line = PlanLine::new(&run_id, &job, asked, Action::from(*m), &schema, r);
            line.webhook = Some(preview.clone());
            serde_json::to_writer(&mut *f, &line.to_json())?;
            f.write_all(b"\n")?;
        }
        Ok(())
    };
    PlanLines {
        count,
        write: std::sync::Arc::new(write),
    }
}

/// What report.html lists of the discrepancy files: the largest rows of
/// the money field, per currency.
pub fn top_of(schema: &recon_core::Schema) -> Option<(Option<&str>, usize)> {
    let money_field = schema.money_field().map(|i| schema.fields[i].name.as_str());
    Some((money_field, crate::report::html::TOP_PER_CURRENCY))
}

/// What the run adds to the diff's reports.
fn extras(
    cx: &Context<'_>,
    found: &mut Found,
    plan: Option<PlanLines>,
    delivered: Option<&super::webhook::Delivered>,
) -> RunExtras {
    let mut extras = RunExtras {
        run_id: Some(cx.run_id.to_string()),
        dry_run: cx.plan.dry_run,
        pending: std::mem::take(&mut found.pending),
        history: Some(std::sync::Arc::clone(&found.history)),
        resolved: std::mem::take(&mut found.resolved),
        confirmed_by_lookup: found.confirmed.dismissed,
        unplaced: std::mem::take(&mut found.unplaced),
        notes: std::mem::take(&mut found.confirmed.notes),
        plan,
        duplicate_copies: Some(std::mem::take(&mut found.copies)),
        ..RunExtras::default()
    };
    extras.notes.extend(found.guard.trouble.clone());
    if let Some(outcomes) = &found.outcomes {
        let rows = backfill_rows(&found.items, outcomes);
        extras.backfilled = rows.written;
        extras.backfill_failed = rows.failed;
        extras.backfill = Some(rows.rows);
    }
    if let Some(d) = delivered {
        extras.backfilled = d.delivered + d.already_done;
        extras.backfill_failed = d.failed;
        extras.backfill = Some(d.rows.clone());
        extras.webhook = Some(webhook_counts(d));
    }
    extras
}

/// summary.json's `webhook` object.
fn webhook_counts(d: &super::webhook::Delivered) -> Webhook {
    Webhook {
        already_done: d.already_done,
        delivered: d.delivered,
        delivered_not_created: d.not_created,
        failed: d.failed,
        requests: d.requests,
        retries: d.retries,
        url: d.url.clone(),
        verified_earlier: d.verified_earlier,
    }
}

/// What the reports say about the run itself.
fn meta(cx: &Context<'_>) -> RunMeta {
    let (source_ms, target_ms) = cx.timings;
    RunMeta {
        job: cx.plan.job.name.clone(),
        source: cx.sides.source.describe(),
        target: cx.sides.target().describe(),
        window: Some((
            format_timestamp(cx.window.start),
            format_timestamp(cx.window.end),
        )),
        started_at: format_timestamp(cx.now),
        source_ms,
        target_ms,
        total_ms: cx.started.elapsed().as_millis(),
    }
}

/// Stages every file (report.html last: it shows the others), saves the
/// plan, waits for the history and commits the folder.
async fn write_folder(
    cx: &Context<'_>,
    state: &StateStore,
    mut dir: ReportDir,
    (source_records, recording): (u64, super::history::Recording),
    extras: &RunExtras,
    summary: &mut RunSummary,
    top: Option<Vec<crate::report::html::TopRow>>,
) -> Result<std::path::PathBuf> {
    let job = &cx.plan.job.name;
    let schema = &cx.plan.spec.schema;
    // The discrepancy files are written already (beside the status).
    write_summary(&mut dir, summary)?;
    if let Some(lines) = extras.plan.as_ref().filter(|p| p.count > 0) {
        save_plan(cx, state, &dir, lines.count, source_records).await?;
    }
    let money_field = schema.money_field().map(|i| schema.fields[i].name.as_str());
    // backfill.csv and plan.jsonl as the page counts them, from the rows
    // (not read back: 200,000 rows of backfill.csv).
    let backfill = crate::report::html::Backfill::of_rows(
        extras.backfill.as_deref(),
        extras.plan.as_ref().map(|p| p.count),
    );
    crate::report::html::write_for_run(
        &mut dir,
        state,
        job,
        money_field,
        summary,
        top,
        Some(backfill),
    )
    .await?;
    // The folder is committed only once the history it shows is recorded,
    // and only by a run that still holds its lock and was not stopped.
    if let Err(e) = recording.finish().await {
        return Err(super::history::lost_lock_or(cx.lock, job, e).await);
    }
    crate::report::html::record_totals(&mut dir, state, summary).await?;
    if crate::faults::abort_after_history() {
        std::process::abort();
    }
    super::backfill::ensure_lock(cx.lock, job, "committing the report folder").await?;
    crate::interrupt::check(job, "before committing its report folder")?;
    dir.commit()
}

/// The report phase's error, with what the backfill had written.
fn report_failed(
    cx: &Context<'_>,
    extras: &RunExtras,
    summary: &RunSummary,
    error: anyhow::Error,
) -> anyhow::Error {
    let job = &cx.plan.job.name;
    let wrote = extras.backfilled + extras.backfill_failed;
    let note = if wrote > 0 {
        format!(
            "; the backfill had already written {} and failed {} items, recorded in the state store (recon runs shows the counts; the next run does not write them again)",
            extras.backfilled, extras.backfill_failed
        )
    } else {
        String::new()
    };
    anyhow::Error::new(ReportFailed {
        counts: summary.run_log_json(),
        error: error.context(format!(
            "job `{job}`: report phase: the reports were not written and any earlier report folder is untouched{note}"
        )),
    })
}

/// A run that failed in its report phase, with the counts of what it did
/// (recorded with the failure).
#[derive(Debug)]
pub struct ReportFailed {
    /// The run's counts, as `summary.json` would have held them.
    pub counts: serde_json::Value,
    /// Why the reports were not written.
    pub error: anyhow::Error,
}

impl std::fmt::Display for ReportFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for ReportFailed {}

/// Items written by a backfill, as `backfill.csv` and the counts show them.
pub struct Rows {
    /// One row per item, in plan order.
    pub rows: Vec<BackfillRow>,
    /// Items created or updated.
    pub written: u64,
    /// Items the target refused.
    pub failed: u64,
}

/// The `backfill.csv` rows of written items, counting written and refused
/// ones (`recon run` and `recon apply`).
pub fn backfill_rows(items: &[Item], outcomes: &[WriteOutcome]) -> Rows {
    let mut out = Rows {
        rows: Vec::with_capacity(items.len()),
        written: 0,
        failed: 0,
    };
    for ((r, m), o) in items.iter().zip(outcomes) {
        match o {
            WriteOutcome::Failed(_) => out.failed += 1,
            WriteOutcome::Created | WriteOutcome::Updated => out.written += 1,
            WriteOutcome::Unchanged => {}
        }
        out.rows.push(BackfillRow::new(&r.key, Action::from(*m), o));
    }
    out
}

/// Clean when nothing is open after this run's writes; trouble when the
/// safety limit stopped them.
fn status(outcome: &DiffOutcome, extras: &RunExtras, trouble: bool) -> Status {
    let rows = extras.backfill.as_deref().unwrap_or_default();
    // Made once, and only when the gaps cannot be counted in order or
    // there are mismatches to look up.
    let written = std::cell::OnceCell::new();
    let written = || written.get_or_init(|| written_keys(rows));
    let open_gaps = if !rows.iter().any(|r| r.outcome.written()) {
        outcome.gaps.len()
    } else if let Some(open) = open_gaps_in_order(outcome, rows) {
        open
    } else {
        // Gap keys are looked up decoded on the stack, not as a string
        // each (200,000 gaps: 90 ms of the report phase that way).
        let (written, mut open) = (written(), 0);
        outcome.gaps.for_each_key(|k| {
            if !written.contains(k) {
                open += 1;
            }
        });
        open
    };
    let open_mismatches = outcome
        .mismatches
        .iter()
        .filter(|m| !written().contains(m.key.as_str()))
        .count();
    let open = open_gaps
        + outcome.orphans.len()
        + open_mismatches
        + outcome.duplicates.len()
        + extras.unplaced.len();
    if trouble {
        Status::Trouble
    } else if open == 0 {
        Status::Clean
    } else {
        Status::Discrepancies
    }
}

/// The keys of the items written.
fn written_keys(rows: &[BackfillRow]) -> HashSet<&str, foldhash::fast::RandomState> {
    rows.iter()
        .filter(|r| r.outcome.written())
        .map(|r| r.key.as_str())
        .collect()
}

/// The gaps left open, when the backfill's rows begin with the gaps in
/// their list's order (as the plan lists them: [`super::backfill::plan_items`]),
/// checked key by key: one pass beside both lists. 200,000 gaps took 160
/// ms as a set of written keys and a look-up of each gap, on a thread
/// beside the report files' two. `None` when the rows are in another
/// order (a webhook route's, a plan without the gaps): then looked up.
fn open_gaps_in_order(outcome: &DiffOutcome, rows: &[BackfillRow]) -> Option<usize> {
    if outcome.gaps.is_empty() {
        return Some(0);
    }
    if rows.len() < outcome.gaps.len() {
        return None;
    }
    let (mut i, mut open, mut same) = (0, 0, true);
    outcome.gaps.for_each_key(|k| {
        let row = &rows[i];
        same &= row.key == k;
        if !row.outcome.written() {
            open += 1;
        }
        i += 1;
    });
    same.then_some(open)
}

/// Records plan.jsonl's digest: what `recon apply --plan` will accept is
/// this file, unedited.
async fn save_plan(
    cx: &Context<'_>,
    state: &StateStore,
    dir: &ReportDir,
    items: u64,
    source_records: u64,
) -> Result<()> {
    let record = PlanRecord {
        id: cx.run_id.to_string(),
        job: cx.plan.job.name.clone(),
        window: cx.asked,
        sha256: crate::plan::file_sha256(&dir.staged(PLAN_FILE))?,
        items,
        source_records,
        read_at: cx.now,
        created_at: Timestamp::now(),
    };
    state.save_plan(&record).await?;
    Ok(())
}

/// Records how the run ended in the state store.
pub async fn record(state: &StateStore, run_id: &str, result: &Result<Finished>) -> Result<()> {
    let (status, counts, dir, error) = match result {
        Ok(f) => (
            f.status.run_status(),
            f.summary.run_log_json(),
            Some(f.report.display().to_string()),
            None,
        ),
        Err(e) => {
            let counts = e
                .downcast_ref::<ReportFailed>()
                .map_or(json!(null), |r| r.counts.clone());
            (RunStatus::Failed, counts, None, Some(format!("{e:#}")))
        }
    };
    state
        .finish_run(run_id, status, &counts, dir.as_deref(), error.as_deref())
        .await?;
    // The summary as summary.json holds it, for the report page and
    // `recon runs` (the run log keeps its counts besides); saved after the
    // run's status, so that a failure here never leaves the run open.
    if let Ok(f) = result {
        let text = String::from_utf8(f.summary.to_file_bytes()?)?;
        state.save_summary(run_id, &text).await?;
    }
    Ok(())
}

fn render(o: &DiffOutcome, e: &RunExtras) -> String {
    format!(
        "{}\n  unplaced    {}\n  pending     {}\n  resolved    {}\n  backfilled  {}{}",
        crate::commands::diff::render_summary(o),
        e.unplaced.len(),
        e.pending.len(),
        e.resolved.len(),
        e.backfilled,
        if e.backfill_failed > 0 {
            format!("\n  failed      {}", e.backfill_failed)
        } else if e.dry_run {
            " (dry run: see plan.jsonl)".to_string()
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::Mismatch;
    use crate::plan::Action;

    fn outcome(gaps: &[&str], mismatches: &[&str]) -> DiffOutcome {
        DiffOutcome {
            gaps: gaps
                .iter()
                .map(|k| Record {
                    key: k.to_string(),
                    values: Vec::new(),
                })
                .collect(),
            mismatches: mismatches
                .iter()
                .map(|k| Mismatch {
                    key: k.to_string(),
                    fields: Vec::new(),
                })
                .collect(),
            ..DiffOutcome::default()
        }
    }

    fn rows(items: &[(&str, bool)]) -> RunExtras {
        let row = |&(key, written): &(&str, bool)| {
            let o = if written {
                WriteOutcome::Created
            } else {
                WriteOutcome::Failed("refused".into())
            };
            BackfillRow::new(key, Action::Insert, &o)
        };
        RunExtras {
            backfill: Some(items.iter().map(row).collect()),
            ..RunExtras::default()
        }
    }

    /// A dry run with SQLite state writes its history beside its reports,
    /// whose threads then yield to it ([`crate::priority`]): they lower
    /// themselves, never the runtime's thread that asked for them (a
    /// worker lowered once would stay lowered for every later task). Run
    /// here on a runtime whose only worker is the test's thread: its nice
    /// value is the same after the run, and the run found, reported and
    /// recorded what it should.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_reports_yield_to_the_history_without_lowering_the_runtime() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let mut source = String::from("id,amount,currency,created\n");
        let mut target = source.clone();
        for i in 0..300 {
            let row = format!(
                "ch_{i:04},{},usd,2026-11-{:02}T10:00:00Z\n",
                100 + i,
                1 + i % 28
            );
            source.push_str(&row);
            // Every third is missing from the target: 100 gaps.
            if i % 3 != 0 {
                target.push_str(&row);
            }
        }
        std::fs::write(d.join("source.csv"), source).unwrap();
        std::fs::write(d.join("target.csv"), target).unwrap();
        let state = d.join("state.db");
        let config = d.join("recon.toml");
        std::fs::write(
            &config,
            format!(
                "[defaults]\nreports = {:?}\nstate = \"sqlite://{}\"\n\n[jobs.files]\n\
                 fields = {{ amount = \"money\", currency = \"currency\", created = \"timestamp\" }}\n\
                 time_field = \"created\"\ncompare = [\"amount\", \"currency\", \"created\"]\n\
                 window = \"2026-11-01..2026-12-01\"\nbackfill = {{ mode = \"off\" }}\n\n\
                 [jobs.files.source]\ntype = \"file\"\npath = {:?}\nkey = \"id\"\n\n\
                 [jobs.files.target]\ntype = \"file\"\npath = {:?}\nkey = \"id\"\n",
                d.join("reports"),
                state.display(),
                d.join("source.csv"),
                d.join("target.csv"),
            ),
        )
        .unwrap();
        let args = crate::cli::RunArgs {
            config,
            job: None,
            window: None,
            dry_run: true,
            out: Some(d.join("out")),
            max_records: None,
            max_ratio: None,
            metrics_file: None,
        };
        let plan = super::super::RunPlan::from_args(&args).unwrap();
        let before = crate::priority::this_thread_nice().expect("a Linux thread's nice value");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let finished = runtime.block_on(super::super::execute(plan)).unwrap();
        assert_eq!(crate::priority::this_thread_nice(), Some(before));
        assert_eq!(finished.status, Status::Discrepancies);
        let count = |c| finished.summary.counts.get(c);
        use crate::report::summary::Class as Count;
        assert_eq!((count(Count::Gaps), count(Count::Matched)), (100, 200));
        assert_eq!(
            std::fs::read_to_string(d.join("out/gaps.csv"))
                .unwrap()
                .lines()
                .count(),
            101
        );
        // The history the reports were written beside: 100 open gaps
        // (all of them resolved by a run that found none).
        let open = runtime.block_on(async {
            let store = crate::state::StateStore::open(&format!("sqlite://{}", state.display()))
                .await
                .unwrap();
            store.open_history("files").await.unwrap()
        });
        let resolved = open.delta(&[]).resolved;
        assert_eq!(resolved.len(), 100);
        assert!(resolved
            .iter()
            .all(|(c, _, _)| *c == crate::state::Class::Gap));
    }

    /// The plan lists the gaps first, in order: they are counted beside
    /// the rows; any other order is looked up, with the same answer.
    #[test]
    fn open_gaps_are_counted_whatever_the_rows_order() {
        let o = outcome(&["a", "b", "c"], &[]);
        let in_order = rows(&[("a", true), ("b", false), ("c", true)]);
        assert_eq!(
            open_gaps_in_order(&o, in_order.backfill.as_deref().unwrap()),
            Some(1)
        );
        assert_eq!(status(&o, &in_order, false), Status::Discrepancies);
        // Another order, or other keys in the gaps' places: not counted
        // by place.
        let reversed = rows(&[("c", true), ("b", false), ("a", true)]);
        assert_eq!(
            open_gaps_in_order(&o, reversed.backfill.as_deref().unwrap()),
            None
        );
        assert_eq!(status(&o, &reversed, false), Status::Discrepancies);
        let others = rows(&[("a", true), ("x", true), ("c", true), ("b", true)]);
        assert_eq!(
            open_gaps_in_order(&o, others.backfill.as_deref().unwrap()),
            None
        );
        assert_eq!(status(&o, &others, false), Status::Clean);
        // Counted by place, a refused item before the gaps would leave one
        // open.
        let o2 = outcome(&["a", "b"], &[]);
        let shifted = rows(&[("x", false), ("a", true), ("b", true)]);
        assert_eq!(status(&o2, &shifted, false), Status::Clean);
        // Every gap written, in order or not: clean.
        for extras in [
            rows(&[("a", true), ("b", true), ("c", true)]),
            rows(&[("b", true), ("c", true), ("a", true)]),
        ] {
            assert_eq!(status(&o, &extras, false), Status::Clean);
        }
        // A written mismatch after the gaps is closed; one not written is open.
        let o = outcome(&["a"], &["m", "n"]);
        assert_eq!(
            status(&o, &rows(&[("a", true), ("m", true), ("n", true)]), false),
            Status::Clean
        );
        assert_eq!(
            status(&o, &rows(&[("a", true), ("m", true)]), false),
            Status::Discrepancies
        );
        // Nothing written (a dry run, or every item refused): every gap open.
        assert_eq!(
            status(&outcome(&["a"], &[]), &RunExtras::default(), false),
            Status::Discrepancies
        );
        assert_eq!(
            status(&outcome(&[], &[]), &RunExtras::default(), false),
            Status::Clean
        );
        assert_eq!(
            status(&outcome(&[], &[]), &RunExtras::default(), true),
            Status::Trouble
        );
    }
}
