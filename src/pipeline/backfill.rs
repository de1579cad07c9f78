//! Stages 5–7: the backfill plan, the safety limits that guard it, and
//! the ledger-backed writes that apply it exactly once.

use std::collections::{HashMap, HashSet};

use anyhow::{anyhow, bail, Context, Result};
use recon_core::{ConnectorError, Record, Target, WriteMode, WriteOutcome};

use super::{writer, RunPlan};
use crate::config::BackfillMode;
use crate::diff::DiffOutcome;
use crate::plan::Action;
use crate::state::prelude::*;
use crate::state::{BatchOutcome, ItemStatus, LedgerBatch, RunLock, StateError, StateStore};

/// How long a SQLite run lock may go without a heartbeat before another
/// run may take it over (the holder died without releasing it).
const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(600);

/// Write batches sent to the target at once during a backfill.
const WRITES_IN_FLIGHT: usize = 2;

/// One item of a backfill plan: the source's record and how to write it.
pub type Item = (Record, WriteMode);

/// The backfill plan: gaps, and mismatches when repairing. A mismatch's
/// source record is the one the diff read (or the edge lookup found), so
/// no second source fetch is made.
pub fn plan_items(plan: &RunPlan, outcome: &DiffOutcome, confirmed: &[Record]) -> Vec<Item> {
    let mode = plan.job.job.backfill.mode;
    let mut items: Vec<Item> = Vec::new();
    if mode == BackfillMode::Off {
        return items;
    }
    items.extend(
        outcome
            .gaps
            .to_owned_vec()
            .into_iter()
            .map(|r| (r, WriteMode::Insert)),
    );
    if mode == BackfillMode::Upsert {
        let engine = outcome.mismatch_sources.iter().map(|r| r.into_owned());
        let found = confirmed.iter().cloned();
        items.extend(engine.chain(found).map(|r| (r, WriteMode::Upsert)));
    }
    items
}

/// What the safety limits allow.
pub struct Guard {
    /// Whether to write at all.
    pub write: bool,
    /// Whether plan.jsonl is written (dry run, nothing to do, or stopped).
    pub plan_file: bool,
    /// Why the writes were stopped: the run exits 2 with this message.
    pub trouble: Option<String>,
}

/// A plan over a safety limit: why, and the limits that would let it through.
pub struct Breach {
    /// Which limit, with the figures.
    pub why: String,
    /// The `--max-records` that would pass.
    pub records: u64,
    /// The `--max-ratio` that would pass, rounded up to 3 decimals.
    pub ratio: String,
}

/// Checks `items` against `max_records` and `max_ratio` (share of the
/// window's `source_records`).
pub fn breach(items: u64, source_records: u64, max_records: u64, max_ratio: f64) -> Option<Breach> {
    let ratio = items as f64 / source_records.max(1) as f64;
    let why = if items > max_records {
        format!(
            "{items} records exceed backfill.max_records = {max_records} by {}",
            items - max_records
        )
    } else if source_records > 0 && ratio > max_ratio {
        format!(
            "{items} records are {:.1}% of the window's {source_records} source records, above backfill.max_ratio = {:.1}%",
            ratio * 100.0,
            max_ratio * 100.0
        )
    } else {
        return None;
    };
    // The suggested ratio is rounded UP to 3 decimals (exact integer
    // arithmetic), so that the suggested rerun passes: 103 of 2000 is
    // 0.0515 and suggests 0.052, never 0.051. A configured ratio that
    // already allows the plan is kept as written (`{}` round-trips).
    let source = u128::from(source_records).max(1);
    let milli = (u128::from(items) * 1000).div_ceil(source).min(1000);
    let needed = format!("{}.{:03}", milli / 1000, milli % 1000);
    let ratio = if max_ratio >= needed.parse::<f64>().unwrap_or(1.0) {
        max_ratio.to_string()
    } else {
        needed
    };
    Some(Breach {
        why,
        records: items.max(max_records),
        ratio,
    })
}

/// Checks the plan against the safety limits: a plan over a limit is not
/// written; plan.jsonl is kept for review and the message suggests the
/// limits that would let it through.
pub fn guard(plan: &RunPlan, items: usize, source_records: u64) -> Guard {
    if plan.dry_run || items == 0 {
        return Guard {
            write: false,
            plan_file: true,
            trouble: None,
        };
    }
    let Some(b) = breach(
        items as u64,
        source_records,
        plan.max_records,
        plan.max_ratio,
    ) else {
        return Guard {
            write: true,
            plan_file: false,
            trouble: None,
        };
    };
    let msg = format!(
        "job `{}`: safety limit: the backfill was stopped before writing anything: {}. Review plan.jsonl, then rerun with --max-records {} --max-ratio {} (or raise the limits in the config)",
        plan.job.name, b.why, b.records, b.ratio
    );
    Guard {
        write: false,
        plan_file: true,
        trouble: Some(msg),
    }
}

/// Takes the job's run lock; an overlapping run is trouble, said plainly.
pub async fn lock(state: &StateStore, job: &str) -> Result<RunLock> {
    match state.acquire_lock(job, STALE_LOCK).await {
        Ok(lock) => Ok(lock),
        Err(e @ StateError::Locked { .. }) => bail!("{e}"),
        Err(e) => Err(e.into()),
    }
}

/// The scaffold of every run that takes the job's lock (`recon run`,
/// `recon apply`): takes the lock, runs `body` under it, and releases the
/// lock whatever `body` returned (an early error included), before the
/// result is handed back. A release that fails turns a success into an
/// error; after an error it is logged and the first error kept.
pub async fn under_lock<T>(
    state: &StateStore,
    job: &str,
    body: impl AsyncFnOnce(&RunLock) -> Result<T>,
) -> Result<T> {
    let lock = lock(state, job).await?;
    let result = body(&lock).await;
    let released = lock.release().await;
    match (result, released) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) => Err(e.into()),
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(r)) => {
            tracing::warn!(message = "Releasing the run lock failed too.", job, error = %r);
            Err(e)
        }
    }
}

/// Records the start of a run under the held `lock`; when the store
/// refuses (an earlier run of the job is still alive), the refusal.
pub async fn start_run(
    state: &StateStore,
    lock: &RunLock,
    job: &str,
    window: recon_core::Window,
    dry_run: bool,
) -> Result<String> {
    match state
        .start_run_as(job, window, dry_run, Some(lock.owner()))
        .await
    {
        Ok(id) => Ok(id),
        Err(e) => bail!("{e}"),
    }
}

/// Fails when the run no longer holds its lock (asked of the database
/// now): called before anything is committed after the writes (history,
/// report folder), so that a run that lost its lock never looks complete.
pub async fn ensure_lock(lock: &RunLock, job: &str, before: &str) -> Result<()> {
    if !lock.verify().await? {
        bail!(
            "job `{job}`: lost the run lock (its session ended or another run took it over) before {before}; the run is recorded as failed and its reports are not written. What was written is in the backfill ledger; check that no other run of this job is active, then run again"
        );
    }
    Ok(())
}

/// Where a backfill records what it does: the state store, the plan's id
/// and job, and the run lock that must still be held before each write.
pub struct Ledger<'a> {
    /// The state store.
    pub state: &'a StateStore,
    /// The run lock, verified before every write batch.
    pub lock: &'a RunLock,
    /// The plan (run) id the items are recorded under.
    pub plan_id: &'a str,
    /// The job.
    pub job: &'a str,
}

/// A ledger mark: key, status, error.
type Mark = (String, ItemStatus, Option<String>);

/// A batch of one write mode, numbered in the plan (its ledger row): the
/// indexes of its items.
struct Slot {
    seq: u64,
    mode: WriteMode,
    items: Vec<usize>,
}

impl Slot {
    /// Its ledger row, as planned.
    fn planned<'a>(&self, items: &'a [Item]) -> LedgerBatch<'a> {
        LedgerBatch {
            seq: self.seq,
            action: Action::from(self.mode).as_str(),
            keys: self
                .items
                .iter()
                .map(|&i| items[i].0.key.as_str())
                .collect(),
        }
    }

    /// Its records, built as it is sent.
    fn records(&self, items: &[Item]) -> Vec<Record> {
        self.items.iter().map(|&i| items[i].0.clone()).collect()
    }

    /// Its ledger mark after a write that returned: applied, but for the
    /// items the target refused (failed, with the error).
    fn written(&self, records: &[Record], outcomes: &[WriteOutcome]) -> BatchOutcome {
        let exceptions = records
            .iter()
            .zip(outcomes)
            .filter_map(|(r, o)| match o {
                WriteOutcome::Failed(e) => {
                    Some((r.key.clone(), ItemStatus::Failed, Some(e.clone())))
                }
                _ => None,
            })
            .collect();
        self.mark(ItemStatus::Applied, exceptions)
    }

    /// Its ledger mark when its outcome is unknown: every item, with why.
    fn unknown(&self, records: &[Record], why: &str) -> BatchOutcome {
        let exceptions = records
            .iter()
            .map(|r| (r.key.clone(), ItemStatus::Unknown, Some(why.to_string())))
            .collect();
        self.mark(ItemStatus::Unknown, exceptions)
    }

    fn mark(&self, status: ItemStatus, exceptions: Vec<Mark>) -> BatchOutcome {
        BatchOutcome {
            seq: self.seq,
            action: Action::from(self.mode).as_str(),
            status,
            exceptions,
        }
    }
}

/// Items whose outcome a lost connection left unknown are settled first:
/// each is looked up by key in the target; present means applied, absent
/// means it was never committed.
async fn settle_unknown(ledger: &Ledger<'_>, target: &dyn Target) -> Result<()> {
    let unknown = ledger.state.unknown_items(ledger.job).await?;
    if unknown.is_empty() {
        return Ok(());
    }
    let keys: Vec<String> = unknown.iter().map(|(_, k)| k.clone()).collect();
    let present: HashSet<String> = target
        .lookup(&keys)
        .await
        .with_context(|| {
            format!(
                "job `{}`: settling {} backfill items of unknown outcome by key lookup in the target",
                ledger.job,
                keys.len()
            )
        })?
        .into_iter()
        .map(|r| r.key)
        .collect();
    let mut by_plan: HashMap<&str, Vec<Mark>> = HashMap::new();
    for (plan, key) in &unknown {
        let mark = if present.contains(key) {
            (key.clone(), ItemStatus::Applied, None)
        } else {
            let why = "not committed: the connection was lost while it was in flight";
            (key.clone(), ItemStatus::Failed, Some(why.to_string()))
        };
        by_plan.entry(plan.as_str()).or_default().push(mark);
    }
    for (plan, marks) in &by_plan {
        ledger.state.mark_items(plan, marks).await?;
    }
    tracing::info!(
        message = "Settled backfill items of unknown outcome by key lookup.",
        job = ledger.job,
        items = unknown.len(),
        present = present.len(),
    );
    Ok(())
}

/// Batches of one mode each, in plan order, numbered.
fn layout(items: &[Item], batch: usize) -> Vec<Slot> {
    let batch = batch.max(1);
    (0..items.len())
        .step_by(batch)
        .flat_map(|start| {
            let chunk = start..(start + batch).min(items.len());
            [WriteMode::Insert, WriteMode::Upsert].map(|mode| {
                let picked: Vec<usize> = chunk.clone().filter(|&i| items[i].1 == mode).collect();
                (mode, picked)
            })
        })
        .filter(|(_, picked)| !picked.is_empty())
        .zip(0u64..)
        .map(|((mode, items), seq)| Slot { seq, mode, items })
        .collect()
}

/// Writes the plan's items in batches, recording each in the ledger first
/// (planned) and after (applied or failed). A crash between the write and
/// the record is harmless: the write is an upsert by key, so the next run
/// finds the record present and plans nothing for it. Before each batch
/// the run lock is verified: a lost lock stops the writes at once. A lost
/// connection records the batch in flight as `unknown` and ends the run;
/// the next run settles those items by key lookup.
///
/// Every batch is recorded as planned, one ledger row each, in one commit
/// before the first write (`planned` is then sent `()`: the state store is
/// free until the first outcome). The outcomes are recorded as the batches
/// return, always after their own write, while the next batches are
/// written ([`super::writer`]): the target never waits for the state
/// store. A crash leaves the batches not yet written planned, and the next
/// run supersedes them, as it would a dry run's plan.
pub async fn apply(
    ledger: &Ledger<'_>,
    target: &dyn Target,
    items: &[Item],
    planned: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<Vec<WriteOutcome>> {
    settle_unknown(ledger, target).await?;
    check_budget(ledger.job, target, items).await?;
    let layout = layout(items, target.write_batch());
    let rows: Vec<LedgerBatch> = layout.iter().map(|b| b.planned(items)).collect();
    ledger
        .state
        .ledger_step(ledger.plan_id, ledger.job, &[], &rows)
        .await?;
    drop(rows);
    if let Some(tx) = planned {
        let _ = tx.send(());
    }
    let abort_after = crate::faults::abort_after_items();
    let options = writer::Options {
        // With the test-only crash hook, one batch at a time, so that the
        // crash falls exactly after N items and before their record.
        in_flight: if abort_after.is_some() {
            1
        } else {
            WRITES_IN_FLIGHT
        },
        lock_every: std::time::Duration::ZERO,
        abort_after,
    };
    let batches = Batches {
        ledger,
        target,
        items,
        layout,
        mark_fails: crate::faults::ledger_mark_fails(),
    };
    let report = writer::run(&batches, options).await?;
    outcomes(ledger.job, items, &batches.layout, report)
}

/// The target's budget (API calls, quotas) must allow the plan.
async fn check_budget(job: &str, target: &dyn Target, items: &[Item]) -> Result<()> {
    let inserts = items
        .iter()
        .filter(|(_, m)| *m == WriteMode::Insert)
        .count();
    target
        .check_budget(inserts, items.len() - inserts)
        .await
        .with_context(|| format!("job `{job}`: before the backfill"))
}

/// The backfill's batches as [`writer::Work`]: a unit is a slot (its
/// number in the layout and its records, built as it is sent).
struct Batches<'a> {
    ledger: &'a Ledger<'a>,
    target: &'a dyn Target,
    items: &'a [Item],
    layout: Vec<Slot>,
    mark_fails: bool,
}

/// A batch's write as the target answered it.
type Written = std::result::Result<Vec<WriteOutcome>, ConnectorError>;

/// What is kept of a batch: its slot, and its items' outcomes, or how many
/// items are of unknown outcome.
type Kept = (usize, std::result::Result<Vec<WriteOutcome>, usize>);

impl writer::Work for Batches<'_> {
    type Unit = (usize, Vec<Record>);
    type Done = Written;
    type Mark = BatchOutcome;
    type Kept = Kept;
    /// The lost connection's message.
    type Trouble = String;

    fn units(&self) -> usize {
        self.layout.len()
    }

    fn prepare(&self, i: usize) -> (usize, Vec<Record>) {
        let records = self.layout[i].records(self.items);
        crate::ops::progress::wrote(records.len());
        (i, records)
    }

    async fn perform(&self, (i, records): &(usize, Vec<Record>)) -> Written {
        self.target.write(records, self.layout[*i].mode).await
    }

    fn settle(
        &self,
        (i, records): (usize, Vec<Record>),
        done: Written,
        lost: Option<&String>,
    ) -> Result<writer::Settled<Self>> {
        let slot = &self.layout[i];
        let unknown = |m: &str, trouble| writer::Settled {
            mark: slot.unknown(&records, m),
            items: 0,
            trouble,
            kept: (i, Err(records.len())),
        };
        Ok(match (done, lost) {
            (Ok(result), _) => writer::Settled {
                mark: slot.written(&records, &result),
                items: records.len(),
                trouble: None,
                kept: (i, Ok(result)),
            },
            // Once the connection is lost, whatever else fails in flight
            // is unknown too.
            (Err(_), Some(m)) => unknown(m, None),
            (Err(ConnectorError::ConnectionLost(m)), None) => unknown(&m, Some(m.clone())),
            // Refused whole (not a lost connection): the run ends; the
            // batches in flight stay planned, superseded next run.
            (Err(e), None) => return Err(e.into()),
        })
    }

    async fn record(&self, marks: Vec<BatchOutcome>) -> Result<()> {
        if self.mark_fails {
            // Test-only fault hook: the state store is lost.
            return Err(StateError::Invalid(
                "recording backfill outcomes: the state store went away (fault injection)".into(),
            )
            .into());
        }
        let (plan_id, job) = (self.ledger.plan_id, self.ledger.job);
        Ok(self
            .ledger
            .state
            .ledger_step(plan_id, job, &marks, &[])
            .await?)
    }

    async fn holds_lock(&self) -> Result<bool> {
        Ok(self.ledger.lock.verify().await?)
    }
}

/// Each item's outcome in plan order; the error of writes that stopped
/// early (lost connection, lost lock, stop request).
fn outcomes(
    job: &str,
    items: &[Item],
    layout: &[Slot],
    report: writer::Report<Batches<'_>>,
) -> Result<Vec<WriteOutcome>> {
    let (written, total) = (report.items, items.len());
    if let Some(m) = &report.trouble {
        let unknown: usize = report
            .kept
            .iter()
            .filter_map(|(_, k)| k.as_ref().err())
            .sum();
        bail!(
            "job `{job}`: {m}. {written} items were written before; the {unknown} in flight are recorded as unknown and the next run settles them by key lookup. Check the database, then run again"
        );
    }
    if report.lock_lost {
        bail!(
            "job `{job}`: lost the run lock (its session ended or another run took it over); stopped before writing more: {written} of {total} items were written. Check that no other run of this job is active, then run again"
        );
    }
    if report.interrupted {
        return Err(crate::interrupt::error(
            job,
            &format!(
                "during the backfill: stopped before writing more; {written} of {total} items were written and recorded"
            ),
        ));
    }
    // By item index (a slot knows its items): no key is hashed.
    let mut outcomes: Vec<Option<WriteOutcome>> = Vec::new();
    outcomes.resize_with(total, || None);
    for (i, kept) in report.kept {
        let Ok(result) = kept else { continue };
        for (&item, outcome) in layout[i].items.iter().zip(result) {
            outcomes[item] = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .zip(items)
        .map(|(o, (r, _))| o.ok_or_else(|| anyhow!("no outcome recorded for {}", r.key)))
        .collect()
}
