//! The store's roles, one trait each. [`StateStore`](crate::StateStore)
//! implements them all, on either backend; a caller names the role it
//! needs (`impl RunLog`) or imports them all ([`crate::prelude`]).
//!
//! The reads that reports need ([`ReportReads`]) are a trait of their own,
//! and the supertrait of the roles they belong to: code that only renders
//! (`report.html`, `recon history`, `recon report`, `recon runs`) imports
//! it alone and cannot write.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use recon_core::Window;

use crate::webhook::{DeliveryMark, DeliveryRow, Verified};
use crate::{
    BatchOutcome, Class, DiscrepancyDelta, IdRecords, LedgerBatch, LedgerItem, OpenHistory,
    PlanRecord, RunLock, RunRow, RunStatus, RunTotals, StateError,
};

/// What reports read: runs, their totals and summaries, one ID's story,
/// and whether a run still `running` died.
pub trait ReportReads {
    /// The latest runs, newest first, of one job or of all.
    fn recent_runs(
        &self,
        job: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RunRow>, StateError>> + Send;

    /// The stored status of one run, if the run exists.
    fn run_status(
        &self,
        run_id: &str,
    ) -> impl Future<Output = Result<Option<RunStatus>, StateError>> + Send;

    /// The summary JSON saved for a run ([`RunLog::save_summary`]); `None`
    /// when the run has none (it is still running, ran before migration
    /// 14, or does not exist).
    fn summary(
        &self,
        run_id: &str,
    ) -> impl Future<Output = Result<Option<String>, StateError>> + Send;

    /// Whether the process that started run `run_id` is still alive on this
    /// host (its recorded owner's PID exists): such a run is not crashed,
    /// even if it lost its lock; it stops before its next write.
    fn run_owner_alive_here(
        &self,
        run_id: &str,
    ) -> impl Future<Output = Result<bool, StateError>> + Send;

    /// Whether the holder of `job`'s run lock is provably gone, so that a
    /// run of the job still `running` died (killed, machine lost) rather
    /// than being in progress. On SQLite: the lock row names a process on
    /// this machine that no longer exists. On PostgreSQL: nobody holds the
    /// job's advisory lock (it dies with its session). Anything else, such
    /// as a holder on another machine, is not proof: `false`.
    fn lock_holder_gone(&self, job: &str) -> impl Future<Output = Result<bool, StateError>> + Send;

    /// The recorded totals of these runs, by run id (runs without any are
    /// absent: they ran before migration 7, or failed).
    fn run_totals(
        &self,
        run_ids: &[String],
    ) -> impl Future<Output = Result<HashMap<String, Vec<RunTotals>>, StateError>> + Send;

    /// Everything the store holds about `external_id` in `job`: the job's
    /// runs, the ID's latest streak per class, its closed streaks and its
    /// ledger items. Every read goes through a primary key (ledger items
    /// are probed by each run's id, never by scanning the ledger).
    fn id_records(
        &self,
        job: &str,
        external_id: &str,
    ) -> impl Future<Output = Result<IdRecords, StateError>> + Send;

    /// Delivery rows of `job` for these keys (those that have one).
    fn webhook_rows(
        &self,
        job: &str,
        keys: &[String],
    ) -> impl Future<Output = Result<HashMap<String, DeliveryRow>, StateError>> + Send;
}

/// The run log (`recon_runs`): one row per run, `running` until
/// [`RunLog::finish_run`]. Listing, status and dead-run settling are its
/// reads in [`ReportReads`].
pub trait RunLog: ReportReads {
    /// Records the start of a run and returns its id. Earlier runs of this
    /// job still `running` died (the caller holds the run lock), so they
    /// become `crashed` and their `planned` backfill items `superseded`.
    fn start_run(
        &self,
        job: &str,
        window: Window,
        dry_run: bool,
    ) -> impl Future<Output = Result<String, StateError>> + Send;

    /// [`RunLog::start_run`] for the holder of the run lock `owner`
    /// (`host:pid:random`), recorded with the run. An earlier `running` run
    /// is marked `crashed` only when its holder is provably gone: its
    /// process no longer exists on this host, or it ran elsewhere (the run
    /// lock, which the caller now holds, is the proof there). A run whose
    /// process is still alive on this host (it lost its lock and stops
    /// before its next write) makes this one refuse to start.
    fn start_run_as(
        &self,
        job: &str,
        window: Window,
        dry_run: bool,
        owner: Option<&str>,
    ) -> impl Future<Output = Result<String, StateError>> + Send;

    /// Records how a run ended. `status` is one of `clean`,
    /// `discrepancies`, `failed` or `crashed`; `counts` is stored as JSON
    /// text (`null` as no counts).
    fn finish_run<S>(
        &self,
        run_id: &str,
        status: S,
        counts: &serde_json::Value,
        report_dir: Option<&str>,
        error: Option<&str>,
    ) -> impl Future<Output = Result<(), StateError>> + Send
    where
        S: TryInto<RunStatus>,
        StateError: From<S::Error>;

    /// Saves a run's summary, JSON text (again: replaced). A run that does
    /// not exist, or text that is not JSON, is refused.
    fn save_summary(
        &self,
        run_id: &str,
        json: &str,
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// The window end of the job's latest (by start time) run that was not a
    /// dry run and completed (`clean` or `discrepancies`): where a
    /// `since-last-success` window starts.
    fn last_success_end(
        &self,
        job: &str,
    ) -> impl Future<Output = Result<Option<Timestamp>, StateError>> + Send;

    /// Proves the store takes writes without changing it: inside a write
    /// transaction (on SQLite `BEGIN IMMEDIATE`, which takes the write lock),
    /// a run row of `job` is inserted, then the transaction is rolled back.
    /// A read-only file, a full disk or a user without INSERT on
    /// `recon_runs` fails here with the database's own error.
    fn check_writable(&self, job: &str) -> impl Future<Output = Result<(), StateError>> + Send;
}

/// The backfill ledger: every planned write and its outcome, so that a
/// run started again after a crash writes each missing record exactly
/// once; and the reviewed plans that `recon apply --plan` applies.
pub trait BackfillLedger {
    /// Records a backfill plan: each `(external_id, action)` with status
    /// `planned` and no attempts, in multi-row inserts inside one
    /// transaction. `plan_id` is by convention the id of the run making the
    /// plan. Items already in the plan keep their state, so recording the
    /// same plan again changes nothing.
    fn record_plan(
        &self,
        plan_id: &str,
        job: &str,
        items: &[(String, &str)],
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Records write outcomes: each item's status and error, one more
    /// attempt, in batched updates inside one transaction. When an id
    /// appears more than once, its last outcome counts.
    fn mark_items(
        &self,
        plan_id: &str,
        outcomes: &[(String, crate::ItemStatus, Option<String>)],
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// One step of a backfill's ledger, in one transaction (one commit):
    /// the outcomes of the batches just written, then the next batches as
    /// planned, before any of them is written. A batch is one row whatever
    /// its size (migration 10); only the items whose outcome differs from
    /// their batch's get rows of their own. A backfill records each
    /// batch's plan in the same commit as the previous batch's outcomes,
    /// while the target writes: the ledger never waits for the target, nor
    /// the target for the ledger.
    fn ledger_step(
        &self,
        plan_id: &str,
        job: &str,
        done: &[BatchOutcome],
        planned: &[LedgerBatch<'_>],
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Items of the job whose write outcome is unknown (the connection was
    /// lost while they were in flight): `(plan_id, external_id)`.
    fn unknown_items(
        &self,
        job: &str,
    ) -> impl Future<Output = Result<Vec<(String, String)>, StateError>> + Send;

    /// Every item of a plan, by external ID.
    fn plan_items(
        &self,
        plan_id: &str,
    ) -> impl Future<Output = Result<Vec<LedgerItem>, StateError>> + Send;

    /// Records a plan written to a plan.jsonl file. Recording the same plan
    /// id twice is refused: a plan is made once, by one run.
    fn save_plan(&self, plan: &PlanRecord) -> impl Future<Output = Result<(), StateError>> + Send;

    /// The plan recorded under `id`, if any.
    fn saved_plan(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<PlanRecord>, StateError>> + Send;
}

/// The discrepancy history: when each open discrepancy was first and last
/// seen and when it was resolved, each closed streak, and each run's totals.
pub trait DiscrepancyHistory: ReportReads {
    /// Updates the discrepancy history of `job` with what run `run_id` found
    /// at `now`, and says what is new, what persists and what was resolved:
    /// [`Self::discrepancy_delta`] then [`Self::write_discrepancies`].
    fn update_discrepancies(
        &self,
        job: &str,
        run_id: &str,
        now: Timestamp,
        current: &[(Class, String)],
    ) -> impl Future<Output = Result<DiscrepancyDelta, StateError>> + Send;

    /// What `current` (the open discrepancies one run found) changes in the
    /// history of `job`, read without writing: the ones open before persist
    /// (with their first sighting), every other one is new, and the open
    /// ones not in `current` are resolved. Only the open set of the
    /// previous run is read. Duplicates in `current` count once. The run
    /// lock keeps the history from changing until
    /// [`Self::write_discrepancies`] records it, so the two may be apart
    /// (a run reads the delta first, writes the target, then records).
    fn discrepancy_delta(
        &self,
        job: &str,
        current: &[(Class, String)],
    ) -> impl Future<Output = Result<DiscrepancyDelta, StateError>> + Send;

    /// The open discrepancies of `job`, with when each was first seen: what
    /// [`OpenHistory::delta`] compares a run's findings with. Read while
    /// the run lock is held, it stays true until the run records its
    /// history, so a run reads it while it reads its sides. The open set is
    /// held once, as keys, never as rows.
    fn open_history(
        &self,
        job: &str,
    ) -> impl Future<Output = Result<OpenHistory, StateError>> + Send;

    /// Records in the history of `job` what run `run_id` found at `now`, as
    /// `delta` says ([`OpenHistory::delta`], read under the same run lock),
    /// in one transaction (see the implementation's notes).
    fn write_discrepancies(
        &self,
        job: &str,
        run_id: &str,
        now: Timestamp,
        delta: &DiscrepancyDelta,
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Records a run's totals per currency (again: replaced).
    fn record_run_totals(
        &self,
        run_id: &str,
        totals: &[RunTotals],
    ) -> impl Future<Output = Result<(), StateError>> + Send;
}

/// The run lock: at most one live run per job, whatever the scheduler does.
/// Settling a dead holder is [`ReportReads::lock_holder_gone`].
pub trait RunLocks: ReportReads {
    /// Acquires the run lock of `job`; see [`RunLock`]. On SQLite a lock
    /// whose heartbeat is older than `stale_after` belonged to a run that
    /// died and is taken over.
    fn acquire_lock(
        &self,
        job: &str,
        stale_after: Duration,
    ) -> impl Future<Output = Result<RunLock, StateError>> + Send;
}

/// The delivery ledger of `backfill.via = "webhook"` (see [`crate::webhook`]).
/// Reading rows by key is [`ReportReads::webhook_rows`].
pub trait DeliveryLedger: ReportReads {
    /// Items of `job` that were delivered (2xx or 409) but not yet found in
    /// the target: checked again by every run.
    fn webhook_unverified(
        &self,
        job: &str,
    ) -> impl Future<Output = Result<Vec<DeliveryRow>, StateError>> + Send;

    /// Records `(external ID, idempotency key)` pairs as `planned` under
    /// `plan_id`, before anything is sent. A row already delivered or
    /// already done under the same key is left as it is (callers never plan
    /// those); under another key (the source record was replaced under its
    /// ID) it is planned again.
    fn webhook_plan(
        &self,
        plan_id: &str,
        job: &str,
        items: &[(String, String)],
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Records delivery outcomes (one more attempt each): one UPDATE per
    /// (status, HTTP status, error) group, its keys in one bound JSON array.
    fn webhook_mark(
        &self,
        job: &str,
        marks: &[DeliveryMark],
    ) -> impl Future<Output = Result<(), StateError>> + Send;

    /// Records what the target showed for delivered items.
    fn webhook_verify(
        &self,
        job: &str,
        results: &[(String, Verified)],
    ) -> impl Future<Output = Result<(), StateError>> + Send;
}
