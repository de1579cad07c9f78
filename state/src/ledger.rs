//! The backfill ledger: `recon_backfill_items`, a view of one row per item
//! over `recon_ledger_batches` (one row per write batch) and
//! `recon_ledger_items` (the items whose outcome differs from their
//! batch's); every planned write and its outcome, so that a run started
//! again after a crash writes each missing record exactly once. A plan's
//! id is the id of the run that made it; that link is how a crashed run's
//! `planned` items become `superseded`. And the reviewed plans
//! (`recon_plans`) that `recon apply --plan` checks a plan file against.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use recon_core::Window;
use sqlx::{Any, Row, Transaction};

use crate::types::ACTIONS;
use crate::{json_text, ts_text, BackfillLedger, BatchOutcome, ItemStatus, LedgerBatch};
use crate::{LedgerItem, PlanRecord, StateError, StateStore, JSON_BATCH};

impl BackfillLedger for StateStore {
    async fn record_plan(
        &self,
        plan_id: &str,
        job: &str,
        items: &[(String, &str)],
    ) -> Result<(), StateError> {
        self.item_step(plan_id, job, &[], items).await
    }

    async fn mark_items(
        &self,
        plan_id: &str,
        outcomes: &[(String, ItemStatus, Option<String>)],
    ) -> Result<(), StateError> {
        self.item_step(plan_id, "", outcomes, &[]).await
    }

    async fn ledger_step(
        &self,
        plan_id: &str,
        job: &str,
        done: &[BatchOutcome],
        planned: &[LedgerBatch<'_>],
    ) -> Result<(), StateError> {
        let actions = done
            .iter()
            .map(|b| b.action)
            .chain(planned.iter().map(|b| b.action));
        if let Some(action) = actions.into_iter().find(|a| !ACTIONS.contains(a)) {
            return Err(StateError::Invalid(format!(
                "a backfill batch has action `{action}`; expected insert or update"
            )));
        }
        if done.is_empty() && planned.is_empty() {
            return Ok(());
        }
        let context = match (done.is_empty(), planned.is_empty()) {
            (true, _) => "recording a backfill plan",
            (false, true) => "recording backfill outcomes",
            (false, false) => "recording backfill outcomes and the next planned batches",
        };
        let now_s = ts_text(Timestamp::now());
        let mut tx = self.begin_write(context).await?;
        let unmatched = self
            .mark_batches(&mut tx, context, plan_id, job, &now_s, done)
            .await?;
        self.plan_batches(&mut tx, context, plan_id, job, &now_s, planned)
            .await?;
        tx.commit().await.map_err(self.db(context))?;
        if !unmatched.is_empty() {
            tracing::warn!(
                message = "Some backfill outcomes name batches that are not in the plan; they were not recorded.",
                plan = plan_id,
                batches = ?unmatched,
            );
        }
        Ok(())
    }

    async fn unknown_items(&self, job: &str) -> Result<Vec<(String, String)>, StateError> {
        let context = "reading backfill items of unknown outcome";
        let rows = sqlx::query(
            "SELECT plan_id, external_id FROM recon_unknown_items \
             WHERE job = $1 ORDER BY plan_id, external_id",
        )
        .bind(job.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(self.db(context))?,
                    r.try_get(1).map_err(self.db(context))?,
                ))
            })
            .collect()
    }

    async fn plan_items(&self, plan_id: &str) -> Result<Vec<LedgerItem>, StateError> {
        let context = "reading a backfill plan";
        let rows = sqlx::query(
            "SELECT external_id, action, status, attempts, last_error FROM recon_backfill_items \
             WHERE plan_id = $1 ORDER BY external_id",
        )
        .bind(plan_id.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        rows.iter()
            .map(|r| {
                let status: String = r.try_get(2).map_err(self.db(context))?;
                Ok(LedgerItem {
                    external_id: r.try_get(0).map_err(self.db(context))?,
                    action: r.try_get(1).map_err(self.db(context))?,
                    status: status
                        .parse()
                        .map_err(|e: StateError| self.corrupt(context, e.to_string()))?,
                    attempts: r.try_get(3).map_err(self.db(context))?,
                    last_error: r.try_get(4).map_err(self.db(context))?,
                })
            })
            .collect()
    }

    async fn save_plan(&self, plan: &PlanRecord) -> Result<(), StateError> {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO recon_plans (id, job, window_start, window_end, sha256, items, \
             source_records, read_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(plan.id.clone())
        .bind(plan.job.clone())
        .bind(ts_text(plan.window.start))
        .bind(ts_text(plan.window.end))
        .bind(plan.sha256.clone())
        .bind(count(plan.items))
        .bind(count(plan.source_records))
        .bind(ts_text(plan.read_at))
        .bind(ts_text(plan.created_at))
        .execute(&self.pool)
        .await
        .map_err(self.db("recording a reviewed backfill plan"))?;
        Ok(())
    }

    async fn saved_plan(&self, id: &str) -> Result<Option<PlanRecord>, StateError> {
        let context = "reading a reviewed backfill plan";
        let row = sqlx::query(
            "SELECT id, job, window_start, window_end, sha256, items, source_records, read_at, \
             created_at FROM recon_plans WHERE id = $1",
        )
        .bind(id.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(context))?;
        let Some(r) = row else {
            return Ok(None);
        };
        let text =
            |i: usize| -> Result<String, StateError> { r.try_get(i).map_err(self.db(context)) };
        let count = |i: usize| -> Result<u64, StateError> {
            let n: i64 = r.try_get(i).map_err(self.db(context))?;
            u64::try_from(n).map_err(|_| self.corrupt(context, format!("negative count {n}")))
        };
        Ok(Some(PlanRecord {
            id: text(0)?,
            job: text(1)?,
            window: Window {
                start: self.parse_ts(context, &text(2)?)?,
                end: self.parse_ts(context, &text(3)?)?,
            },
            sha256: text(4)?,
            items: count(5)?,
            source_records: count(6)?,
            read_at: self.parse_ts(context, &text(7)?)?,
            created_at: self.parse_ts(context, &text(8)?)?,
        }))
    }
}

impl StateStore {
    /// Outcomes ([`Self::mark_items`]) then planned items
    /// ([`Self::record_plan`]), one row per item, in one transaction.
    async fn item_step(
        &self,
        plan_id: &str,
        job: &str,
        outcomes: &[(String, ItemStatus, Option<String>)],
        planned: &[(String, &str)],
    ) -> Result<(), StateError> {
        if let Some((id, action)) = planned.iter().find(|(_, a)| !ACTIONS.contains(a)) {
            return Err(StateError::Invalid(format!(
                "backfill item `{id}` has action `{action}`; expected insert or update"
            )));
        }
        if outcomes.is_empty() && planned.is_empty() {
            return Ok(());
        }
        let context = if outcomes.is_empty() {
            "recording a backfill plan"
        } else {
            "recording backfill outcomes"
        };
        let now_s = ts_text(Timestamp::now());
        let mut tx = self.begin_write(context).await?;
        let (matched, unique) = self
            .mark_in(&mut tx, context, plan_id, &now_s, outcomes)
            .await?;
        self.plan_in(&mut tx, context, plan_id, job, &now_s, planned)
            .await?;
        tx.commit().await.map_err(self.db(context))?;
        if matched < unique {
            tracing::warn!(
                message = "Some backfill outcomes name items that are not in the plan; they were not recorded.",
                plan = plan_id,
                outcomes = unique,
                recorded = matched,
            );
        }
        Ok(())
    }

    /// Marks each written batch with its outcome and records its
    /// exceptions; returns the batches that are not in the plan.
    async fn mark_batches(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        job: &str,
        now_s: &str,
        done: &[BatchOutcome],
    ) -> Result<Vec<u64>, StateError> {
        let mut unmatched = Vec::new();
        for b in done {
            let marked = sqlx::query(
                "UPDATE recon_ledger_batches SET status = $3, attempts = attempts + 1, \
                 updated_at = $4 WHERE plan_id = $1 AND seq = $2",
            )
            .bind(plan_id.to_string())
            .bind(b.seq as i64)
            .bind(b.status.as_str().to_string())
            .bind(now_s.to_string())
            .execute(&mut **tx)
            .await
            .map_err(self.db(context))?
            .rows_affected();
            if marked == 0 {
                unmatched.push(b.seq);
                continue;
            }
            self.except_in(tx, context, plan_id, job, now_s, b).await?;
        }
        Ok(unmatched)
    }

    /// Records the next batches as planned (a batch already recorded stays).
    async fn plan_batches(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        job: &str,
        now_s: &str,
        planned: &[LedgerBatch<'_>],
    ) -> Result<(), StateError> {
        if planned.is_empty() {
            return Ok(());
        }
        if let Some(setup) = self.dialect.before_planned_batches() {
            sqlx::query(setup)
                .fetch_optional(&mut **tx)
                .await
                .map_err(self.db(context))?;
        }
        // Many batches a statement, up to JSON_BATCH keys (a statement a
        // batch cost a round trip each: 50 for 200,000 gaps, 90 ms). Each
        // batch's keys are bound as their own text parameter: inside one
        // JSON array of rows, the server parsed every key list again for
        // each column it took out of a row (30 ms a statement).
        for chunk in by_keys(planned, JSON_BATCH) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let p = 4 + 4 * i;
                    format!(
                        "($1, ${}, $2, ${}, 'planned', 0, $3, ${}, ${})",
                        p,
                        p + 1,
                        p + 2,
                        p + 3
                    )
                })
                .collect();
            let insert = format!(
                "INSERT INTO recon_ledger_batches (plan_id, seq, job, action, status, \
                 attempts, updated_at, items, keys) VALUES {} \
                 ON CONFLICT (plan_id, seq) DO NOTHING",
                rows.join(", ")
            );
            let mut q = sqlx::query(&insert)
                .bind(plan_id.to_string())
                .bind(job.to_string())
                .bind(now_s.to_string());
            for b in chunk {
                q = q
                    .bind(b.seq as i64)
                    .bind(b.action.to_string())
                    .bind(b.keys.len() as i64)
                    .bind(json_text(&b.keys));
            }
            q.execute(&mut **tx).await.map_err(self.db(context))?;
        }
        Ok(())
    }

    /// The items of a marked batch whose outcome differs from the batch's:
    /// a row each in `recon_ledger_items` (which wins over the batch), and
    /// the unknown ones listed in `recon_unknown_items`.
    async fn except_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        job: &str,
        now_s: &str,
        batch: &BatchOutcome,
    ) -> Result<(), StateError> {
        if batch.exceptions.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO recon_ledger_items (plan_id, job, external_id, action, status, \
             attempts, last_error, updated_at) SELECT $1, $2, v.external_id, $3, v.status, 1, \
             v.last_error, $4 FROM {} WHERE true ON CONFLICT (plan_id, external_id) DO UPDATE \
             SET status = excluded.status, attempts = recon_ledger_items.attempts + 1, \
             last_error = excluded.last_error, updated_at = excluded.updated_at",
            self.json_rows("$5", &["external_id", "status", "last_error"])
        );
        let list = format!(
            "INSERT INTO recon_unknown_items (plan_id, job, external_id) \
             SELECT $1, $2, v.external_id FROM {} WHERE v.status = 'unknown' \
             ON CONFLICT (plan_id, external_id) DO NOTHING",
            self.json_rows("$3", &["external_id", "status"])
        );
        for chunk in batch.exceptions.chunks(JSON_BATCH) {
            let rows: Vec<(&str, &str, Option<&str>)> = chunk
                .iter()
                .map(|(id, status, error)| (id.as_str(), status.as_str(), error.as_deref()))
                .collect();
            let rows = json_text(&rows);
            sqlx::query(&sql)
                .bind(plan_id.to_string())
                .bind(job.to_string())
                .bind(batch.action.to_string())
                .bind(now_s.to_string())
                .bind(rows.clone())
                .execute(&mut **tx)
                .await
                .map_err(self.db(context))?;
            if chunk
                .iter()
                .any(|(_, status, _)| *status == ItemStatus::Unknown)
            {
                sqlx::query(&list)
                    .bind(plan_id.to_string())
                    .bind(job.to_string())
                    .bind(rows)
                    .execute(&mut **tx)
                    .await
                    .map_err(self.db(context))?;
            }
        }
        Ok(())
    }

    /// Inserts planned items (existing ones keep their state).
    async fn plan_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        job: &str,
        now_s: &str,
        items: &[(String, &str)],
    ) -> Result<(), StateError> {
        if items.is_empty() {
            return Ok(());
        }
        // Set-wise: one bound JSON array per chunk, expanded by the database
        // (json_each / json_array_elements), instead of thousands of bound
        // parameters per statement.
        let sql = format!(
            "INSERT INTO recon_ledger_items (plan_id, job, external_id, action, status, \
             attempts, last_error, updated_at) SELECT $1, $2, v.external_id, v.action, 'planned', \
             0, NULL, $3 FROM {} WHERE true ON CONFLICT (plan_id, external_id) DO NOTHING",
            self.json_rows("$4", &["external_id", "action"])
        );
        for chunk in items.chunks(JSON_BATCH) {
            let rows: Vec<[&str; 2]> = chunk.iter().map(|(id, a)| [id.as_str(), *a]).collect();
            sqlx::query(&sql)
                .bind(plan_id.to_string())
                .bind(job.to_string())
                .bind(now_s.to_string())
                .bind(json_text(&rows))
                .execute(&mut **tx)
                .await
                .map_err(self.db(context))?;
        }
        Ok(())
    }

    /// Records outcomes; returns (rows matched, distinct ids).
    async fn mark_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        plan_id: &str,
        now_s: &str,
        outcomes: &[(String, ItemStatus, Option<String>)],
    ) -> Result<(u64, u64), StateError> {
        if outcomes.is_empty() {
            return Ok((0, 0));
        }
        let (groups, unique) = group_outcomes(outcomes);
        let mut matched = 0u64;
        let keys = self.keys_in("$5");
        let sql = format!(
            "UPDATE recon_ledger_items SET status = $2, attempts = attempts + 1, \
             last_error = $3, updated_at = $4 WHERE plan_id = $1 AND external_id {keys}"
        );
        // Items of unknown outcome are also listed in `recon_unknown_items`
        // (no index on the ledger's status: see migration 6); an item
        // leaves that list when it gets any other status.
        let listed = sqlx::query("SELECT 1 FROM recon_unknown_items WHERE plan_id = $1 LIMIT 1")
            .bind(plan_id.to_string())
            .fetch_optional(&mut **tx)
            .await
            .map_err(self.db(context))?
            .is_some();
        let list = format!(
            "INSERT INTO recon_unknown_items (plan_id, job, external_id) \
             SELECT i.plan_id, i.job, i.external_id FROM recon_ledger_items i \
             WHERE i.plan_id = $1 AND i.external_id {} ON CONFLICT (plan_id, external_id) DO NOTHING",
            keys.replace("$5", "$2")
        );
        let unlist = format!(
            "DELETE FROM recon_unknown_items WHERE plan_id = $1 AND external_id {}",
            keys.replace("$5", "$2")
        );
        for ((status, error), ids) in &groups {
            for chunk in ids.chunks(JSON_BATCH) {
                let rows: Vec<[&str; 1]> = chunk.iter().map(|id| [*id]).collect();
                let keys_json = json_text(&rows);
                matched += sqlx::query(&sql)
                    .bind(plan_id.to_string())
                    .bind(status.to_string())
                    .bind(error.map(str::to_string))
                    .bind(now_s.to_string())
                    .bind(keys_json.clone())
                    .execute(&mut **tx)
                    .await
                    .map_err(self.db(context))?
                    .rows_affected();
                let side = if *status == ItemStatus::Unknown.as_str() {
                    Some(&list)
                } else {
                    listed.then_some(&unlist)
                };
                if let Some(side) = side {
                    sqlx::query(side)
                        .bind(plan_id.to_string())
                        .bind(keys_json)
                        .execute(&mut **tx)
                        .await
                        .map_err(self.db(context))?;
                }
            }
        }
        Ok((matched, unique))
    }
}

/// Outcomes grouped by (status, error), each id once with its last
/// outcome, and how many distinct ids there are.
fn group_outcomes(outcomes: &[(String, ItemStatus, Option<String>)]) -> (OutcomeGroups<'_>, u64) {
    // The last outcome per id, in first-seen order.
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(outcomes.len());
    let mut unique: Vec<&(String, ItemStatus, Option<String>)> = Vec::new();
    for o in outcomes {
        match index.get(o.0.as_str()) {
            Some(&i) => unique[i] = o,
            None => {
                index.insert(o.0.as_str(), unique.len());
                unique.push(o);
            }
        }
    }
    // Outcomes grouped by (status, error): one UPDATE per group and
    // chunk, its keys in one bound JSON array probed through the primary
    // key (`IN (SELECT … FROM json_each)`), so the database never scans
    // the ledger. Most items share `applied` with no error.
    let mut groups: BTreeMap<(&str, Option<&str>), Vec<&str>> = BTreeMap::new();
    for (id, status, error) in unique.iter().copied() {
        groups
            .entry((status.as_str(), error.as_deref()))
            .or_default()
            .push(id.as_str());
    }
    (groups, unique.len() as u64)
}

/// Ids by (status, error).
type OutcomeGroups<'a> = BTreeMap<(&'a str, Option<&'a str>), Vec<&'a str>>;

/// `batches` in runs of at most `limit` keys in all (a larger batch alone).
fn by_keys<'b, 'k>(
    mut batches: &'b [LedgerBatch<'k>],
    limit: usize,
) -> impl Iterator<Item = &'b [LedgerBatch<'k>]> {
    std::iter::from_fn(move || {
        let first = batches.first()?;
        let mut keys = first.keys.len();
        let n = 1 + batches[1..]
            .iter()
            .take_while(|b| {
                keys += b.keys.len();
                keys <= limit
            })
            .count();
        let (chunk, rest) = batches.split_at(n);
        batches = rest;
        Some(chunk)
    })
}

#[cfg(test)]
mod by_keys_tests {
    use super::*;

    #[test]
    fn runs_stay_under_the_limit_and_keep_every_batch_once() {
        let keys = ["k"; 7];
        let batch = |seq: u64, n: usize| LedgerBatch {
            seq,
            action: "insert",
            keys: keys[..n].to_vec(),
        };
        let batches = [
            batch(0, 3),
            batch(1, 2),
            batch(2, 7),
            batch(3, 1),
            batch(4, 4),
        ];
        let runs: Vec<Vec<u64>> = by_keys(&batches, 5)
            .map(|c| c.iter().map(|b| b.seq).collect())
            .collect();
        // 3+2 fit; 7 alone (over the limit by itself); 1+4 fit.
        assert_eq!(runs, [vec![0, 1], vec![2], vec![3, 4]]);
        assert_eq!(by_keys(&batches[..0], 5).count(), 0);
        assert_eq!(by_keys(&batches, 100).count(), 1);
    }
}
