//! Stage 8: the discrepancy history (new, persisting, resolved), written
//! while the backfill writes the target.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use jiff::Timestamp;
use recon_core::{format_timestamp, WriteOutcome};
use tracing::Instrument;

use super::backfill::{self, Guard, Item, Ledger};
use super::read::Sides;
use crate::diff::{DiffOutcome, Records};
use crate::report::{GapsFile, GapsWriting, HistoryMap, ResolvedRow};
use crate::state::prelude::*;
use crate::state::{Class, DeltaBuilder, DiscrepancyDelta, OpenHistory, StateError, StateStore};

/// The delta of one run, and the first sightings of its gaps and orphans
/// in their lists' order.
#[derive(Default)]
pub struct RunDelta {
    /// What the history says of this run's discrepancies.
    pub delta: Arc<DiscrepancyDelta>,
    /// First sightings in report order.
    pub in_order: InOrder,
}

pub use crate::report::InOrder;

/// The discrepancies one run found, as the delta needs them: the gap and
/// orphan lists (encoded; cloning one copies its offsets, not its
/// records) and the other classes' keys.
struct Found {
    gaps: Records,
    orphans: Records,
    mismatches: Vec<String>,
    duplicates: Vec<String>,
}

impl Found {
    fn of(outcome: &DiffOutcome) -> Found {
        Found {
            gaps: outcome.gaps.clone(),
            orphans: outcome.orphans.clone(),
            mismatches: outcome.mismatches.iter().map(|m| m.key.clone()).collect(),
            duplicates: outcome.duplicates.iter().map(|d| d.key.clone()).collect(),
        }
    }
}

/// What this run's open discrepancies change in the history: each is
/// told to the delta by reference (gap and orphan keys decoded on the
/// stack), so a persisting one costs no string (a nightly dry run of the
/// 10M bench files tells 309,000 of them), and in its list's order, sorted
/// by key as the history's open set is: each is a step along that list,
/// not a hash look-up ([`DeltaBuilder::see`]). The first sightings of the
/// gaps, orphans and mismatches are kept in their lists' order for the
/// reports. Past [`DELTA_SPLIT_MIN`] discrepancies, mismatches and
/// duplicates are told on a thread of their own while gaps and orphans
/// are told here.
fn delta(
    open: OpenHistory,
    (gaps, orphans): (&Records, &Records),
    mismatches: impl ExactSizeIterator<Item = impl AsRef<str>> + Send,
    duplicates: impl ExactSizeIterator<Item = impl AsRef<str>> + Send,
) -> RunDelta {
    let expected = gaps.len() + orphans.len() + mismatches.len() + duplicates.len();
    let mut delta = open.delta_builder(expected);
    let tell_lists = |delta: &mut DeltaBuilder| {
        let mut gaps_in_order = Vec::with_capacity(gaps.len());
        let mut orphans_in_order = Vec::with_capacity(orphans.len());
        gaps.for_each_key(|k| gaps_in_order.push(delta.see(Class::Gap, k)));
        orphans.for_each_key(|k| orphans_in_order.push(delta.see(Class::Orphan, k)));
        (gaps_in_order, orphans_in_order)
    };
    let tell_keys = |delta: &mut DeltaBuilder| {
        let mismatches: Vec<_> = mismatches
            .map(|k| delta.see(Class::Mismatch, k.as_ref()))
            .collect();
        for k in duplicates {
            delta.see(Class::Duplicate, k.as_ref());
        }
        mismatches
    };
    let ((gaps, orphans), mismatches) = if expected < DELTA_SPLIT_MIN {
        (tell_lists(&mut delta), tell_keys(&mut delta))
    } else {
        let mut part = delta.split_off(&[Class::Mismatch, Class::Duplicate]);
        let told = std::thread::scope(|scope| {
            let other = scope.spawn(|| tell_keys(&mut part));
            let lists = tell_lists(&mut delta);
            let keys = other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (lists, keys)
        });
        delta.merge(part);
        told
    };
    let in_order = InOrder {
        gaps,
        orphans,
        mismatches,
    };
    RunDelta {
        delta: Arc::new(delta.finish()),
        in_order,
    }
}

/// Discrepancies past which [`delta`] tells them on two threads (a 2M-row
/// nightly dry run tells 61,800: 40 ms on one thread).
const DELTA_SPLIT_MIN: usize = 20_000;

/// [`delta`] of an outcome, on this thread.
fn delta_of(open: OpenHistory, outcome: &DiffOutcome) -> RunDelta {
    let mismatches = outcome.mismatches.iter().map(|m| m.key.as_str());
    let duplicates = outcome.duplicates.iter().map(|d| d.key.as_str());
    delta(
        open,
        (&outcome.gaps, &outcome.orphans),
        mismatches,
        duplicates,
    )
}

/// The history's write, when it runs beside the reports: started once
/// nothing else needs the state store's writer ([`Recording::start`]) and
/// awaited before the report folder is committed ([`Recording::finish`]).
#[must_use = "the history is recorded only when awaited"]
pub struct Recording(Write);

enum Write {
    /// Already recorded (PostgreSQL: beside the backfill).
    Done,
    /// Not started yet: what it records.
    Deferred(Box<Deferred>),
    /// Running on its own task.
    Running(tokio::task::JoinHandle<Result<(), StateError>>),
}

struct Deferred {
    state: StateStore,
    job: String,
    run: String,
    now: Timestamp,
    delta: Arc<DiscrepancyDelta>,
}

impl Recording {
    /// Whether the write is running now, on its own task.
    pub fn is_running(&self) -> bool {
        matches!(self.0, Write::Running(_))
    }

    /// Starts the write on its own task, its log lines in the current span
    /// (SQLite has one writer: after the backfill and the webhook
    /// deliveries, whose ledger needs it between batches, and while the
    /// reports are rendered).
    pub fn start(self) -> Recording {
        match self.0 {
            Write::Deferred(d) => Recording(Write::Running(tokio::spawn(
                async move {
                    d.state
                        .write_discrepancies(&d.job, &d.run, d.now, &d.delta)
                        .await
                }
                .in_current_span(),
            ))),
            other => Recording(other),
        }
    }

    /// Waits for the history to be recorded (starting it if it was not).
    pub async fn finish(self) -> Result<()> {
        if let Write::Running(handle) = self.start().0 {
            handle
                .await
                .map_err(|e| anyhow!("recording the discrepancy history: {e}"))??;
        }
        Ok(())
    }
}

/// The history's open set, read on its own task while the run reads its
/// sides (a nightly run over exports with 309,000 open discrepancies: a
/// third of a second of reading, now beside the diff). Dropped unfinished
/// (the run failed before needing it), the read is stopped.
pub struct Prefetch(tokio::task::JoinHandle<Result<OpenHistory, StateError>>);

impl Prefetch {
    /// Starts reading the open discrepancies of `job`.
    pub fn start(state: &StateStore, job: &str) -> Prefetch {
        let (state, job) = (state.clone(), job.to_string());
        Prefetch(tokio::spawn(async move { state.open_history(&job).await }))
    }

    /// The open set, once read.
    pub async fn finish(mut self) -> Result<OpenHistory> {
        (&mut self.0)
            .await
            .map_err(|e| anyhow!("reading the discrepancy history: {e}"))?
            .map_err(Into::into)
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads what the history says of this run's discrepancies (new,
/// persisting, resolved: the reports need it) and, when the guard allows,
/// applies the backfill; the history itself is written beside the work
/// that takes longest: while the target is written. SQLite has one
/// writer: there the history waits until the backfill's plan is committed
/// (its outcomes then wait for the history, the target writes do not).
/// Without a backfill into the target (a dry run, a webhook route), the
/// history is written on its own task, at once; with webhook deliveries
/// to make (`deliveries`), SQLite records it after them (their ledger
/// needs the one writer), while the reports are rendered ([`Recording`]).
///
/// With a backfill, gaps.csv is made (`gaps_file`, [`GapsFile`]) and
/// written beside the writes too, once the first sightings are known.
#[allow(clippy::too_many_arguments)]
pub async fn update_while_applying(
    ledger: &Ledger<'_>,
    open: Prefetch,
    sides: &Sides,
    outcome: &DiffOutcome,
    items: &[Item],
    guard: &Guard,
    now: Timestamp,
    deliveries: bool,
    gaps_file: impl FnOnce() -> Result<GapsFile>,
) -> Result<Applied> {
    let state = ledger.state;
    let open = open.finish().await?;
    let Some(target) = sides.writer().filter(|_| guard.write) else {
        let run = delta_of(open, outcome);
        // No backfill to run beside: the write runs on its own task while
        // the reports are rendered, awaited before their folder is
        // committed. On SQLite it starts after a webhook route's deliveries
        // (their ledger needs the one writer first, [`Recording::start`]);
        // PostgreSQL starts it now, in this phase. A first dry run of the
        // 10M bench files with PostgreSQL state inserts 309,000 rows there
        // (1.4 s, written before the reports until now).
        let write = Deferred {
            state: state.clone(),
            job: ledger.job.to_string(),
            run: ledger.plan_id.to_string(),
            now,
            delta: Arc::clone(&run.delta),
        };
        let recording = Recording(Write::Deferred(Box::new(write)));
        // SQLite's one writer is free now unless webhook deliveries follow:
        // the write starts at once (a first dry run of the 10M bench files
        // inserts 309,000 rows in about half a second, which the reports
        // then no longer wait for).
        let recording = if state.concurrent_writes() || !deliveries {
            recording.start()
        } else {
            recording
        };
        let (history, resolved) = for_report(run, now);
        return Ok(Applied {
            history: Arc::new(history),
            resolved,
            outcomes: None,
            recording,
            gaps_written: None,
        });
    };
    let gaps_file = gaps_file()?;
    // Beside the backfill: on PostgreSQL at once, on SQLite (one writer)
    // once the backfill's plan is committed.
    let (planned, plan_committed) = tokio::sync::oneshot::channel();
    let backfill = backfill::apply(ledger, target, items, Some(planned));
    // The delta is made on a thread of its own while the backfill starts
    // (its plan, its first batches): a 200,000-gap backfill waited 60 ms
    // for it. Also when the backfill stopped before its plan: what the run
    // found is recorded either way.
    // The reports' form of it too (a rerun's 200,000 resolved rows), and
    // gaps.csv is started with it.
    let found = Found::of(outcome);
    let history = async {
        let (history, resolved) = tokio::task::spawn_blocking(move || {
            let Found {
                gaps,
                orphans,
                mismatches,
                duplicates,
            } = found;
            let run = delta(
                open,
                (&gaps, &orphans),
                mismatches.iter(),
                duplicates.iter(),
            );
            for_report(run, now)
        })
        .await
        .map_err(|e| anyhow!("comparing with the discrepancy history: {e}"))?;
        let history = Arc::new(history);
        let gaps_written = gaps_file.start(Arc::clone(&history))?;
        if !state.concurrent_writes() {
            let _ = plan_committed.await;
        }
        state
            .write_discrepancies(ledger.job, ledger.plan_id, now, &history.delta)
            .await?;
        anyhow::Ok((history, resolved, gaps_written))
    };
    let (run, outcomes) = tokio::join!(history, backfill);
    // When both fail, the backfill's error names the cause (a lost run
    // lock, a refused batch); the history's is then its consequence (the
    // same state sessions terminated).
    let outcomes = outcomes?;
    let (history, resolved, gaps_written) = match run {
        Ok(run) => run,
        // The backfill's last batch may have finished before the sessions
        // were terminated: the lock, asked now, names the cause.
        Err(e) => return Err(lost_lock_or(ledger.lock, ledger.job, e).await),
    };
    Ok(Applied {
        history,
        resolved,
        outcomes: Some(outcomes),
        recording: Recording(Write::Done),
        gaps_written: Some(gaps_written),
    })
}

/// What the history and backfill stage hands the reports.
pub struct Applied {
    /// The history as the reports show it ([`for_report`]).
    pub history: Arc<HistoryMap>,
    /// The discrepancies of earlier runs that are gone now.
    pub resolved: Vec<ResolvedRow>,
    /// The write outcomes, when the backfill ran.
    pub outcomes: Option<Vec<WriteOutcome>>,
    /// The history's write, when it runs beside the reports.
    pub recording: Recording,
    /// gaps.csv, when it was written beside the backfill.
    pub gaps_written: Option<GapsWriting>,
}

/// A failed history write's error, or the lost run lock that caused it
/// (the state store's sessions terminated: the write fails on its own
/// session before any lock check could see it).
pub async fn lost_lock_or(
    lock: &recon_state::RunLock,
    job: &str,
    error: anyhow::Error,
) -> anyhow::Error {
    match backfill::ensure_lock(lock, job, "recording the discrepancy history").await {
        Err(lost) => lost,
        Ok(()) => error,
    }
}

/// The history as the reports show it: first sightings of the persisting
/// discrepancies, and the resolved ones.
pub fn for_report(run: RunDelta, now: Timestamp) -> (HistoryMap, Vec<ResolvedRow>) {
    let RunDelta { delta, in_order } = run;
    let delta = &delta;
    // Formatted once per distinct first sighting, not once per row.
    let mut firsts: HashMap<Timestamp, String> = HashMap::new();
    let firsts_of = delta
        .persisting
        .values()
        .chain(delta.resolved.iter().map(|(_, _, first)| first));
    for first in firsts_of {
        firsts
            .entry(*first)
            .or_insert_with(|| format_timestamp(*first));
    }
    let now_s = format_timestamp(now);
    let resolved = delta
        .resolved
        .iter()
        .map(|(class, key, first)| ResolvedRow {
            class: class.as_str().to_string(),
            key: key.clone(),
            first_seen: firsts[first].clone(),
            resolved_at: now_s.clone(),
        })
        .collect();
    let history = HistoryMap {
        now: now_s,
        delta: Arc::clone(delta),
        firsts,
        in_order,
    };
    (history, resolved)
}

#[cfg(test)]
mod tests {
    use recon_core::{Record, Value};

    use super::*;

    fn records(prefix: &str, n: usize) -> Records {
        let list: Vec<Record> = (0..n)
            .map(|i| Record {
                key: format!("{prefix}_{i:06}"),
                values: vec![Value::Text("x".into())],
            })
            .collect();
        list.into()
    }

    /// Past the split (mismatches and duplicates told on a thread of
    /// their own), the delta and the first sightings in list order are what one
    /// builder told everything in turn makes: half of each class open
    /// before, with first sightings of their own, the rest new, and open
    /// ones not seen now resolved.
    #[test]
    fn delta_told_on_two_threads_is_the_one_builders() {
        let n = DELTA_SPLIT_MIN / 2 + 5;
        let (gaps, orphans) = (records("g", n), records("o", n));
        let mismatches: Vec<String> = (0..n).map(|i| format!("m_{i:06}")).collect();
        let duplicates: Vec<String> = (0..50).map(|i| format!("d_{i:06}")).collect();
        let at = |i: usize| Timestamp::from_second(1_700_000_000 + i as i64).unwrap();
        let open = || -> OpenHistory {
            let mut rows = Vec::new();
            for (class, p) in [
                (Class::Gap, "g"),
                (Class::Orphan, "o"),
                (Class::Mismatch, "m"),
                (Class::Duplicate, "d"),
            ] {
                // Every other ID open before, and some no longer found.
                for i in (0..n + 40).step_by(2) {
                    rows.push((class, format!("{p}_{i:06}"), at(i)));
                }
            }
            rows.into_iter().collect()
        };
        let split = delta(
            open(),
            (&gaps, &orphans),
            mismatches.iter(),
            duplicates.iter(),
        );
        let mut one = open().delta_builder(0);
        let mut in_order = InOrder::default();
        gaps.for_each_key(|k| in_order.gaps.push(one.see(Class::Gap, k)));
        orphans.for_each_key(|k| in_order.orphans.push(one.see(Class::Orphan, k)));
        for k in &mismatches {
            one.see(Class::Mismatch, k);
        }
        for k in &duplicates {
            one.see(Class::Duplicate, k);
        }
        let one = one.finish();
        assert_eq!(*split.delta, one);
        assert_eq!(split.in_order.gaps, in_order.gaps);
        assert_eq!(split.in_order.orphans, in_order.orphans);
        assert_eq!(split.in_order.gaps[2], Some(at(2)));
        assert_eq!(split.in_order.orphans[3], None);
        assert!(one.resolved.len() > 60 && one.new.len() > n && one.persisting.len() > n);
    }
}
