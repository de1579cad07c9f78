//! The run pipeline, in named stages, each a function with typed input
//! and output:
//!
//! | stage | module | in → out |
//! |---|---|---|
//! | plan | [`RunPlan::from_args`] | args + config → [`RunPlan`] |
//! | connect | [`read::Sides::build`] | settings → source, target |
//! | read + diff | [`read::read_and_diff`] | both sides → `DiffOutcome` |
//! | unplaced | [`read::unplaced_records`] | what the reads met in no window → rows |
//! | confirm edges | [`read::confirm_edges`] | outcome → outcome, dismissed |
//! | duplicate copies | [`read::duplicate_copies`] | outcome → every copy of each duplicate |
//! | pending | `pending` | outcome → outcome, young records |
//! | plan items | [`backfill::plan_items`] | outcome → items |
//! | guard | [`backfill::guard`] | items → write or stop |
//! | history ∥ apply ∥ gaps.csv | [`history::update_while_applying`], [`backfill::apply`] | → history, outcomes |
//! | report | [`finish`] | everything → report folder, status |
//!
//! `recon run` is [`execute`]; `recon apply` reuses connect, apply and
//! report. Both run under [`locked_run`] (lock, start, record, release);
//! the backfill's batches and the webhook deliveries are written by
//! [`writer`] (N in flight, one ledger commit per drained chunk).

pub mod backfill;
pub mod feed;
pub mod finish;
pub mod history;
mod job;
pub mod read;
pub mod webhook;
pub mod writer;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use jiff::Timestamp;
use recon_core::{format_timestamp, Record, ValueRef, Window};

pub use job::RunPlan;

use crate::diff::DiffOutcome;
use crate::report::ReportDir;
use crate::state::prelude::*;
use crate::state::{RunStatus, StateStore};
use crate::Status;
use backfill::Ledger;

/// Runs a plan end to end under the job's lock; returns what it found.
pub async fn execute(plan: RunPlan) -> Result<Finished> {
    // Every log line of the run carries its job and (once the state store
    // gave it) its run id: `--log-format json` shows them.
    let span = crate::ops::progress::run_span(&plan.job.name);
    tracing::Instrument::instrument(execute_in_span(plan), span).await
}

async fn execute_in_span(plan: RunPlan) -> Result<Finished> {
    let now = Timestamp::now();
    let job = plan.job.name.clone();
    let state = StateStore::open(plan.job.state.expose()).await?;
    let finished = locked_run(
        &state,
        &job,
        async || start_of(&plan, &state, now).await,
        async |ledger, asked| run_locked(&plan, ledger, asked, now).await,
        finish::record,
    )
    .await?;
    println!("reports: {}", finished.report.display());
    // Trouble here is the safety limit: reports and plan written, nothing else.
    Ok(finished)
}

/// How a run starts, worked out under its lock.
pub struct Start {
    /// The window the run's record holds: what a later
    /// `since-last-success` starts from.
    pub recorded: Window,
    /// The window the run reconciles.
    pub asked: Window,
    /// Whether the run writes nothing.
    pub dry_run: bool,
}

/// The one scaffold of the runs that take the job's lock (`recon run`,
/// `recon apply`): takes the lock; under it, works out the run's start
/// (`start`), records that the run started, runs `body` with the run's
/// ledger and the window it reconciles, and records how the run ended
/// (`record`: [`finish::record`]); then releases the lock, whatever
/// happened ([`backfill::under_lock`]).
pub async fn locked_run<T>(
    state: &StateStore,
    job: &str,
    start: impl AsyncFnOnce() -> Result<Start>,
    body: impl AsyncFnOnce(&Ledger<'_>, Window) -> Result<T>,
    record: impl AsyncFnOnce(&StateStore, &str, &Result<T>) -> Result<()>,
) -> Result<T> {
    backfill::under_lock(state, job, async |lock| {
        let Start {
            recorded,
            asked,
            dry_run,
        } = start().await?;
        let run_id = backfill::start_run(state, lock, job, recorded, dry_run).await?;
        crate::ops::note_run(job, &run_id, asked);
        let ledger = Ledger {
            state,
            lock,
            plan_id: &run_id,
            job,
        };
        let result = body(&ledger, asked).await;
        record(state, &run_id, &result).await?;
        result
    })
    .await
}

/// The window `recon run` reconciles, resolved under the lock (the last
/// success cannot change then).
async fn start_of(plan: &RunPlan, state: &StateStore, now: Timestamp) -> Result<Start> {
    let job = &plan.job.name;
    let last = state.last_success_end(job).await?;
    let asked = plan
        .window
        .resolve(now, &plan.tz, last)
        .map_err(|e| anyhow!("job `{job}`: {e}"))?;
    // A dry run may look at a future window (nothing it records counts for
    // `since-last-success`); a run that writes may not.
    if asked.start > now && !plan.dry_run {
        bail!(
            "job `{job}`: the window {}..{} has not begun yet; nothing can be reconciled before it starts. Check --window",
            format_timestamp(asked.start),
            format_timestamp(asked.end)
        );
    }
    // The part of the window after now was not read: a later
    // `since-last-success` must start where this run's reading ended.
    let recorded = Window {
        start: asked.start,
        end: asked.end.min(now).max(asked.start),
    };
    Ok(Start {
        recorded,
        asked,
        dry_run: plan.dry_run,
    })
}

/// What a finished run hands back.
#[derive(Debug)]
pub struct Finished {
    /// The exit status.
    pub status: Status,
    /// What summary.json holds.
    pub summary: crate::report::RunSummary,
    /// The committed report folder.
    pub report: PathBuf,
}

impl Status {
    /// The run status recorded for an exit status.
    pub fn run_status(self) -> RunStatus {
        match self {
            Status::Clean => RunStatus::Clean,
            Status::Discrepancies => RunStatus::Discrepancies,
            Status::Trouble => RunStatus::Failed,
        }
    }
}

/// The stages, in order, between taking the lock and releasing it.
async fn run_locked(
    plan: &RunPlan,
    ledger: &Ledger<'_>,
    asked: Window,
    now: Timestamp,
) -> Result<Finished> {
    let started = Instant::now();
    let job = &plan.job.name;
    // The report destination is checked (and its staging folder made)
    // before anything is read or written.
    let dir_path = match &plan.out {
        Some(p) => p.clone(),
        None => plan.job.reports.join(job).join(ledger.plan_id),
    };
    let mut dir = ReportDir::prepare(&dir_path)?;
    // Until the writes, nothing needs finishing: a stop request drops the
    // reading and diffing at once.
    let Read {
        window,
        sides,
        timings,
        unplaced,
        outcome,
        confirmed,
        copies,
        pending,
        items,
        guard,
        open,
    } = crate::interrupt::cancellable(
        job,
        "while reading and diffing, before writing anything",
        read_stages(plan, ledger, asked, now),
    )
    .await?;
    // A backfill's gaps.csv is written beside its writes.
    let schema = &plan.spec.schema;
    let gaps_file =
        || crate::report::GapsFile::create(&mut dir, schema, &outcome.gaps, finish::top_of(schema));
    let history::Applied {
        history,
        resolved,
        outcomes,
        recording,
        gaps_written,
    } = crate::ops::progress::phase(
        "backfill",
        history::update_while_applying(
            ledger,
            open,
            &sides,
            &outcome,
            &items,
            &guard,
            now,
            plan.webhook.is_some(),
            gaps_file,
        ),
    )
    .await?;
    let webhook = webhook::stage(plan, ledger, &sides, &items, &guard).await?;
    // Nothing is committed after the writes by a run that lost its lock.
    backfill::ensure_lock(ledger.lock, job, "recording the discrepancy history").await?;
    crate::interrupt::check(
        job,
        "after its writes, before recording its history and reports",
    )?;
    // SQLite's single writer is free now: the history is recorded while
    // the reports are rendered.
    let recording = recording.start();
    let context = finish::Context {
        plan,
        run_id: ledger.plan_id,
        asked,
        window,
        now,
        started,
        timings,
        sides: &sides,
        lock: ledger.lock,
    };
    let found = finish::Found {
        outcome,
        unplaced,
        confirmed,
        copies,
        pending,
        history,
        resolved,
        gaps_written,
        items,
        guard,
        outcomes,
        webhook,
        recording,
    };
    crate::ops::progress::phase("report", finish::report(&context, ledger.state, dir, found)).await
}

/// What the stages before the writes hand on.
struct Read {
    window: Window,
    sides: read::Sides,
    timings: (u128, u128),
    unplaced: Vec<crate::report::UnplacedRow>,
    outcome: DiffOutcome,
    confirmed: read::Confirmed,
    copies: Vec<crate::report::copies::CopyRow>,
    pending: Vec<Record>,
    items: Vec<backfill::Item>,
    guard: backfill::Guard,
    open: history::Prefetch,
}

/// Connect, read + diff, unplaced, confirm edges, pending, plan items,
/// guard: everything before the first write, none of which writes.
async fn read_stages(
    plan: &RunPlan,
    ledger: &Ledger<'_>,
    asked: Window,
    now: Timestamp,
) -> Result<Read> {
    let job = &plan.job.name;
    let window = Window {
        start: asked.start.checked_sub(plan.lookback).map_err(|_| {
            anyhow!(
                "job `{job}`: lookback reaches before the earliest supported instant \
                 from the window's start {}; shorten lookback",
                asked.start
            )
        })?,
        end: asked.end,
    };
    // A webhook route never writes the target itself: it is read (and
    // looked up to verify the deliveries).
    let sides = read::Sides::build(plan, plan.writes() && plan.webhook.is_none()).await?;
    // The history's open set is read while the sides are: it cannot change
    // while this run holds the lock.
    let open = history::Prefetch::start(ledger.state, job);
    let read =
        crate::ops::progress::phase("read", read::read_and_diff(plan, &sides, window)).await?;
    let unplaced = read::unplaced_records(plan, read.unplaced)?;
    let mut outcome = read.outcome;
    let mut confirmed = crate::ops::progress::phase(
        "diff",
        read::confirm_edges(&mut outcome, &sides, &plan.spec, (&read.outside, window)),
    )
    .await?;
    let (source, target) = (sides.source.as_ref(), sides.target());
    let copies = read::duplicate_copies(&outcome, source, target, &mut confirmed.notes).await?;
    let pending = pending(plan, &mut outcome, now)?;
    let items = backfill::plan_items(plan, &outcome, &confirmed.mismatch_sources);
    let guard = backfill::guard(plan, items.len(), outcome.source_records);
    Ok(Read {
        window,
        sides,
        timings: (read.source_ms, read.target_ms),
        unplaced,
        outcome,
        confirmed,
        copies,
        pending,
        items,
        guard,
        open,
    })
}

/// Young source records are in flight, not missing: gaps younger than
/// `grace` are taken out of the outcome.
fn pending(plan: &RunPlan, outcome: &mut DiffOutcome, now: Timestamp) -> Result<Vec<Record>> {
    let (Some(t), false) = (plan.time_field, plan.grace.is_zero()) else {
        return Ok(Vec::new());
    };
    let cutoff = now.checked_sub(plan.grace).map_err(|_| {
        anyhow!(
            "job `{}`: grace reaches before the earliest supported instant; shorten grace",
            plan.job.name
        )
    })?;
    // The gaps stay encoded: only their time is read, and only the young
    // ones are decoded to be kept.
    Ok(outcome
        .gaps
        .take_where_value(t, |v| matches!(v, ValueRef::Timestamp(ts) if ts >= cutoff)))
}
