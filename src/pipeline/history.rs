//! Stage 8: the discrepancy history (new, persisting, resolved), written
//! while the backfill writes the target.

use anyhow::Result;
use jiff::Timestamp;
use recon_core::{format_timestamp, WriteOutcome};

use super::backfill::{self, Guard, Item, Ledger};
use super::read::Sides;
use crate::diff::DiffOutcome;
use crate::report::{HistoryMap, ResolvedRow};
use crate::state::{Backend, Class, DiscrepancyDelta};

/// Every open discrepancy of this run, by class and key.
fn current(outcome: &DiffOutcome) -> Vec<(Class, String)> {
    let mut current: Vec<(Class, String)> = Vec::new();
    current.extend(outcome.gaps.iter().map(|r| (Class::Gap, r.key.clone())));
    current.extend(
        outcome
            .orphans
            .iter()
            .map(|r| (Class::Orphan, r.key.clone())),
    );
    current.extend(
        outcome
            .mismatches
            .iter()
            .map(|m| (Class::Mismatch, m.key.clone())),
    );
    current.extend(
        outcome
            .duplicates
            .iter()
            .map(|d| (Class::Duplicate, d.key.clone())),
    );
    current
}

/// Updates the history and, when the guard allows, applies the backfill.
/// The two are independent: a PostgreSQL state store writes the history
/// while the target is written; SQLite has one writer, whose lock waits
/// would cost more than they save.
pub async fn update_while_applying(
    ledger: &Ledger<'_>,
    sides: &Sides,
    outcome: &DiffOutcome,
    items: &[Item],
    guard: &Guard,
    now: Timestamp,
) -> Result<(DiscrepancyDelta, Option<Vec<WriteOutcome>>)> {
    let current = current(outcome);
    let backfill = async {
        match (guard.write, sides.writer()) {
            (true, Some(target)) => backfill::apply(ledger, target, items).await.map(Some),
            _ => Ok(None),
        }
    };
    let history = ledger
        .state
        .update_discrepancies(ledger.job, ledger.plan_id, now, &current);
    let (delta, outcomes) = match ledger.state.backend() {
        Backend::Postgres => tokio::join!(history, backfill),
        Backend::Sqlite => {
            let delta = history.await;
            (delta, backfill.await)
        }
    };
    let delta = delta?;
    // Its changes (seen anew, resolved) for `recon history`.
    ledger
        .state
        .record_discrepancy_events(ledger.job, ledger.plan_id, now, &delta)
        .await?;
    Ok((delta, outcomes?))
}

/// The history as the reports show it: first sightings of the persisting
/// discrepancies, and the resolved ones.
pub fn for_report(delta: DiscrepancyDelta, now: Timestamp) -> (HistoryMap, Vec<ResolvedRow>) {
    let history = HistoryMap {
        now: format_timestamp(now),
        persisting: delta
            .persisting
            .iter()
            .map(|((class, key), first)| {
                (
                    (class.as_str().to_string(), key.clone()),
                    format_timestamp(*first),
                )
            })
            .collect(),
    };
    let resolved = delta
        .resolved
        .iter()
        .map(|(class, key, first)| ResolvedRow {
            class: class.as_str().to_string(),
            key: key.clone(),
            first_seen: format_timestamp(*first),
            resolved_at: format_timestamp(now),
        })
        .collect();
    (history, resolved)
}
