//! What `report.html` and `recon history` read back from the store (tables
//! of migration 7): each run's money totals per currency, and each
//! discrepancy's closed streaks (first seen, resolved by which run), beside
//! what the other tables already keep (runs, ledger items, the latest
//! streak of each discrepancy, which is overwritten when an ID comes back).

use std::collections::HashMap;

use jiff::Timestamp;
use recon_core::Currency;
use sqlx::Row;

use crate::{json_text, Class, ItemStatus, RunRow, StateError};
use crate::{StateStore, JSON_BATCH};

/// One currency's totals of one run, both sides, in exact minor units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunTotals {
    /// The currency; `None` for records without an amount.
    pub currency: Option<Currency>,
    /// Source records of this currency.
    pub source_records: u64,
    /// Their amounts' sum, minor units.
    pub source_minor: i128,
    /// Target records of this currency.
    pub target_records: u64,
    /// Their amounts' sum, minor units.
    pub target_minor: i128,
}

/// A stretch of runs in which a discrepancy was open, now over, as
/// `recon_discrepancy_streaks` keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClosedStreak {
    /// Its class.
    pub class: Class,
    /// When it was first seen (the start of the run that saw it).
    pub first_seen_at: Timestamp,
    /// The run that found it gone.
    pub resolved_run: String,
    /// When.
    pub resolved_at: Timestamp,
}

/// The latest streak of one discrepancy (`recon_discrepancies`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscrepancyStreak {
    /// Its class.
    pub class: Class,
    /// The run that first saw it (in this streak).
    pub first_seen_run: String,
    /// When.
    pub first_seen_at: Timestamp,
    /// The last run that saw it.
    pub last_seen_run: String,
    /// When.
    pub last_seen_at: Timestamp,
    /// When a run found it gone, if one did.
    pub resolved_at: Option<Timestamp>,
}

/// One ledger item of an ID, with its plan (the run that planned it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemRecord {
    /// The plan's id (the run that made it).
    pub plan_id: String,
    /// `insert` or `update`.
    pub action: String,
    /// Where the item stands.
    pub status: ItemStatus,
    /// Write attempts.
    pub attempts: i64,
    /// The error of the last attempt, if it failed.
    pub last_error: Option<String>,
    /// When its status last changed.
    pub updated_at: Timestamp,
}

/// Everything the store knows about one external ID of one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IdRecords {
    /// The job's runs, oldest first.
    pub runs: Vec<RunRow>,
    /// The latest streak of each class the ID had.
    pub streaks: Vec<DiscrepancyStreak>,
    /// Its closed streaks, oldest first (kept since migration 7).
    pub closed: Vec<ClosedStreak>,
    /// Its ledger items, in run order.
    pub items: Vec<ItemRecord>,
}

impl StateStore {
    /// The latest streak of each class `external_id` had in `job`.
    pub(crate) async fn streaks_of(
        &self,
        job: &str,
        external_id: &str,
    ) -> Result<Vec<DiscrepancyStreak>, StateError> {
        let context = "reading an ID's history";
        let rows = sqlx::query(
            // An open row was last seen by the job's latest recording run
            // (migration 13), its own last sighting on an older store; a
            // row written since leaves its own empty while it is open (a
            // mark is written with it: its first sighting, failing one).
            "SELECT d.class, d.first_seen_run, d.first_seen_at, \
             CASE WHEN d.resolved_at IS NULL \
             THEN COALESCE(m.run_id, NULLIF(d.last_seen_run, ''), d.first_seen_run) \
             ELSE d.last_seen_run END, \
             CASE WHEN d.resolved_at IS NULL \
             THEN COALESCE(m.seen_at, NULLIF(d.last_seen_at, ''), d.first_seen_at) \
             ELSE d.last_seen_at END, \
             d.resolved_at FROM recon_discrepancies d \
             LEFT JOIN recon_history_marks m ON m.job = d.job WHERE d.job = $1 \
             AND d.class IN ('gap', 'orphan', 'mismatch', 'duplicate') AND d.external_id = $2 \
             ORDER BY d.first_seen_at, d.class",
        )
        .bind(job.to_string())
        .bind(external_id.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        let mut streaks = Vec::with_capacity(rows.len());
        for r in &rows {
            let text =
                |i: usize| -> Result<String, StateError> { r.try_get(i).map_err(self.db(context)) };
            let class: Class = text(0)?
                .parse()
                .map_err(|e: StateError| self.corrupt(context, e.to_string()))?;
            let resolved: Option<String> = r.try_get(5).map_err(self.db(context))?;
            streaks.push(DiscrepancyStreak {
                class,
                first_seen_run: text(1)?,
                first_seen_at: self.parse_ts(context, &text(2)?)?,
                last_seen_run: text(3)?,
                last_seen_at: self.parse_ts(context, &text(4)?)?,
                resolved_at: resolved.map(|t| self.parse_ts(context, &t)).transpose()?,
            });
        }
        Ok(streaks)
    }

    /// The closed streaks of `external_id` in `job`, oldest first.
    pub(crate) async fn closed_streaks_of(
        &self,
        job: &str,
        external_id: &str,
    ) -> Result<Vec<ClosedStreak>, StateError> {
        let context = "reading an ID's history";
        // Closed streaks: the ones copied when the ID came back, and the
        // latest one, still in its history row (migration 12); a streak
        // resolved before then was copied when it was resolved.
        let rows = sqlx::query(
            "SELECT class, first_seen_at, resolved_run, resolved_at FROM recon_discrepancy_streaks \
             WHERE job = $1 AND external_id = $2 \
             UNION \
             SELECT class, first_seen_at, resolved_run, resolved_at FROM recon_discrepancies \
             WHERE job = $1 AND external_id = $2 AND resolved_at IS NOT NULL \
             AND resolved_run IS NOT NULL \
             ORDER BY first_seen_at, class",
        )
        .bind(job.to_string())
        .bind(external_id.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        let mut closed = Vec::with_capacity(rows.len());
        for r in &rows {
            let text =
                |i: usize| -> Result<String, StateError> { r.try_get(i).map_err(self.db(context)) };
            closed.push(ClosedStreak {
                class: text(0)?
                    .parse()
                    .map_err(|e: StateError| self.corrupt(context, e.to_string()))?,
                first_seen_at: self.parse_ts(context, &text(1)?)?,
                resolved_run: text(2)?,
                resolved_at: self.parse_ts(context, &text(3)?)?,
            });
        }
        Ok(closed)
    }

    /// The ledger items of `external_id` in the plans of `runs` (oldest
    /// first), in run order.
    pub(crate) async fn items_of(
        &self,
        runs: &[RunRow],
        external_id: &str,
    ) -> Result<Vec<ItemRecord>, StateError> {
        let context = "reading an ID's history";
        // The item's own rows, and the batches that hold it (migration 10)
        // where it has none: a batch's keys are searched as text first
        // (the key as JSON, quotes included), then exactly.
        let plans = self.json_rows("$1", &["plan_id"]);
        let (found_in, keys) = self.dialect.key_in_batch();
        let sql = format!(
            "SELECT plan_id, action, status, attempts, last_error, updated_at \
             FROM recon_ledger_items WHERE external_id = $2 \
             AND plan_id IN (SELECT v.plan_id FROM {plans}) \
             UNION ALL \
             SELECT b.plan_id, b.action, b.status, b.attempts, NULL, b.updated_at \
             FROM recon_ledger_batches AS b WHERE b.plan_id IN (SELECT v.plan_id FROM {plans}) \
             AND {found_in} AND EXISTS (SELECT 1 FROM {keys} WHERE k.value = $2) \
             AND NOT EXISTS (SELECT 1 FROM recon_ledger_items AS i \
             WHERE i.plan_id = b.plan_id AND i.external_id = $2)"
        );
        let quoted = serde_json::to_string(external_id).unwrap_or_default();
        let order: HashMap<&str, usize> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.as_str(), i))
            .collect();
        let mut items = Vec::new();
        for chunk in runs.chunks(JSON_BATCH) {
            let ids: Vec<[&str; 1]> = chunk.iter().map(|r| [r.id.as_str()]).collect();
            let found = sqlx::query(&sql)
                .bind(json_text(&ids))
                .bind(external_id.to_string())
                .bind(quoted.clone())
                .fetch_all(&self.pool)
                .await
                .map_err(self.db(context))?;
            for r in &found {
                let text = |i: usize| -> Result<String, StateError> {
                    r.try_get(i).map_err(self.db(context))
                };
                items.push(ItemRecord {
                    plan_id: text(0)?,
                    action: text(1)?,
                    status: text(2)?
                        .parse()
                        .map_err(|e: StateError| self.corrupt(context, e.to_string()))?,
                    attempts: r.try_get(3).map_err(self.db(context))?,
                    last_error: r.try_get(4).map_err(self.db(context))?,
                    updated_at: self.parse_ts(context, &text(5)?)?,
                });
            }
        }
        items.sort_by_key(|i| order.get(i.plan_id.as_str()).copied());
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;
    use recon_core::Window;
    use recon_sql::testing::TestDb;
    use recon_sql::Dialect;
    use sqlx::Connection;

    async fn round_trip(dialect: Dialect) {
        let db = TestDb::create(dialect).await;
        let store = StateStore::open(&db.url).await.unwrap();
        let day = Window {
            start: "2026-11-28T05:00:00Z".parse().unwrap(),
            end: "2026-11-29T05:00:00Z".parse().unwrap(),
        };
        let usd = Currency::parse("USD").unwrap();
        let r1 = store.start_run("j", day, false).await.unwrap();
        // Sums beyond 64 bits and counts survive exactly; again replaces.
        let totals = [
            RunTotals {
                currency: Some(usd),
                source_records: 3,
                source_minor: i128::from(i64::MAX) * 3,
                target_records: 2,
                target_minor: -5,
            },
            RunTotals {
                currency: None,
                source_records: 1,
                source_minor: 0,
                target_records: 0,
                target_minor: 0,
            },
        ];
        store.record_run_totals(&r1, &totals[..1]).await.unwrap();
        store.record_run_totals(&r1, &totals).await.unwrap();
        let got = store
            .run_totals(&[r1.clone(), "other".into()])
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        let mut back = got[&r1].clone();
        back.sort_by_key(|t| t.currency);
        let mut want = totals.to_vec();
        want.sort_by_key(|t| t.currency);
        assert_eq!(back, want);

        // Run 1 sees a gap and plans its write; run 2 finds it resolved.
        let t1: Timestamp = "2026-11-30T06:00:00Z".parse().unwrap();
        let gap = [(Class::Gap, "ch_1".to_string())];
        store
            .update_discrepancies("j", &r1, t1, &gap)
            .await
            .unwrap();
        store
            .record_plan(&r1, "j", &[("ch_1".into(), "insert")])
            .await
            .unwrap();
        store
            .mark_items(&r1, &[("ch_1".into(), ItemStatus::Applied, None)])
            .await
            .unwrap();
        store
            .finish_run(
                &r1,
                "discrepancies",
                &serde_json::json!({"gaps": 1}),
                None,
                None,
            )
            .await
            .unwrap();
        let r2 = store.start_run("j", day, false).await.unwrap();
        let t2: Timestamp = "2026-12-01T06:00:00Z".parse().unwrap();
        store.update_discrepancies("j", &r2, t2, &[]).await.unwrap();
        // The history's own write records the streak it ends.
        let closed = store.id_records("j", "ch_1").await.unwrap().closed;
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert_eq!((closed[0].first_seen_at, closed[0].resolved_at), (t1, t2));
        assert_eq!(closed[0].resolved_run, r2);

        let r = store.id_records("j", "ch_1").await.unwrap();
        assert_eq!(
            r.runs.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
            [r1.as_str(), r2.as_str()]
        );
        assert_eq!(
            r.closed,
            [ClosedStreak {
                class: Class::Gap,
                first_seen_at: t1,
                resolved_run: r2.clone(),
                resolved_at: t2,
            }]
        );
        assert_eq!(r.streaks.len(), 1);
        assert_eq!(r.streaks[0].first_seen_run, r1);
        assert_eq!(r.streaks[0].resolved_at, Some(t2));
        assert_eq!(r.items.len(), 1);
        assert_eq!(r.items[0].plan_id, r1);
        assert_eq!(r.items[0].status, ItemStatus::Applied);
        assert_eq!(r.items[0].attempts, 1);
        let none = store.id_records("j", "ch_2").await.unwrap();
        assert!(none.streaks.is_empty() && none.closed.is_empty() && none.items.is_empty());
        store.close().await;
        db.drop_db().await;
    }

    /// Migration 12: resolving writes no streak row (the history row keeps
    /// it, with the run that resolved it); the trigger copies it when the
    /// ID comes back, and every closed streak is told, in order, with the
    /// run that ended it.
    async fn streaks_copied_when_reopened(dialect: Dialect) {
        let db = TestDb::create(dialect).await;
        let store = StateStore::open(&db.url).await.unwrap();
        let day = Window {
            start: "2026-11-28T05:00:00Z".parse().unwrap(),
            end: "2026-11-29T05:00:00Z".parse().unwrap(),
        };
        let at = |h: u32| -> Timestamp { format!("2026-12-01T{h:02}:00:00Z").parse().unwrap() };
        let gap = |id: &str| (Class::Gap, id.to_string());
        let mut runs = Vec::new();
        // Seen, gone, back, gone again; ch_2 seen throughout.
        for (h, current) in [
            (1, vec![gap("ch_1"), gap("ch_2")]),
            (2, vec![gap("ch_2")]),
            (3, vec![gap("ch_1"), gap("ch_2")]),
            (4, vec![gap("ch_2")]),
        ] {
            let run = store.start_run("j", day, false).await.unwrap();
            store
                .update_discrepancies("j", &run, at(h), &current)
                .await
                .unwrap();
            runs.push(run);
            if h == 2 {
                let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
                let copied: i64 = sqlx::query("SELECT COUNT(*) FROM recon_discrepancy_streaks")
                    .fetch_one(&mut conn)
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(copied, 0, "resolving copies nothing");
            }
        }
        let r = store.id_records("j", "ch_1").await.unwrap();
        assert_eq!(
            r.closed,
            [
                ClosedStreak {
                    class: Class::Gap,
                    first_seen_at: at(1),
                    resolved_run: runs[1].clone(),
                    resolved_at: at(2),
                },
                ClosedStreak {
                    class: Class::Gap,
                    first_seen_at: at(3),
                    resolved_run: runs[3].clone(),
                    resolved_at: at(4),
                },
            ]
        );
        assert_eq!(r.streaks.len(), 1);
        assert_eq!(r.streaks[0].first_seen_run, runs[2]);
        let open = store.id_records("j", "ch_2").await.unwrap();
        assert!(open.closed.is_empty(), "{:?}", open.closed);
        assert_eq!(open.streaks[0].resolved_at, None);
        store.close().await;
        db.drop_db().await;
    }

    /// A streak resolved before migration 12 was copied when it was resolved,
    /// and its row has no `resolved_run`: it is told once, and reopening the
    /// row copies nothing twice.
    async fn streak_resolved_before_migration_12(dialect: Dialect) {
        let db = TestDb::create(dialect).await;
        let store = StateStore::open(&db.url).await.unwrap();
        let day = Window {
            start: "2026-11-28T05:00:00Z".parse().unwrap(),
            end: "2026-11-29T05:00:00Z".parse().unwrap(),
        };
        let at = |h: u32| -> Timestamp { format!("2026-12-01T{h:02}:00:00Z").parse().unwrap() };
        let gap = vec![(Class::Gap, "ch_1".to_string())];
        let mut runs = Vec::new();
        for (h, current) in [(1, gap.clone()), (2, Vec::new())] {
            let run = store.start_run("j", day, false).await.unwrap();
            store
                .update_discrepancies("j", &run, at(h), &current)
                .await
                .unwrap();
            runs.push(run);
        }
        // What the release before migration 12 left: the streak copied at
        // resolve time, the row without the resolving run.
        let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
        sqlx::query("UPDATE recon_discrepancies SET resolved_run = NULL")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO recon_discrepancy_streaks (job, external_id, class, first_seen_at, \
             resolved_run, resolved_at) VALUES ('j', 'ch_1', 'gap', $1, $2, $3)",
        )
        .bind(crate::ts_text(at(1)))
        .bind(runs[1].clone())
        .bind(crate::ts_text(at(2)))
        .execute(&mut conn)
        .await
        .unwrap();
        let once = ClosedStreak {
            class: Class::Gap,
            first_seen_at: at(1),
            resolved_run: runs[1].clone(),
            resolved_at: at(2),
        };
        let closed = store.id_records("j", "ch_1").await.unwrap().closed;
        assert_eq!(closed, std::slice::from_ref(&once));
        // Back, then gone again: the old streak is still told once.
        for (h, current) in [(3, gap.clone()), (4, Vec::new())] {
            let run = store.start_run("j", day, false).await.unwrap();
            store
                .update_discrepancies("j", &run, at(h), &current)
                .await
                .unwrap();
            runs.push(run);
        }
        let closed = store.id_records("j", "ch_1").await.unwrap().closed;
        assert_eq!(
            closed,
            [
                once,
                ClosedStreak {
                    class: Class::Gap,
                    first_seen_at: at(3),
                    resolved_run: runs[3].clone(),
                    resolved_at: at(4),
                }
            ]
        );
        let copied: i64 = sqlx::query("SELECT COUNT(*) FROM recon_discrepancy_streaks")
            .fetch_one(&mut conn)
            .await
            .unwrap()
            .get(0);
        assert_eq!(copied, 1, "the reopen found the streak already copied");
        drop(conn);
        store.close().await;
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streak_resolved_before_migration_12_sqlite() {
        streak_resolved_before_migration_12(Dialect::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streak_resolved_before_migration_12_postgres() {
        streak_resolved_before_migration_12(Dialect::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streaks_copied_when_reopened_sqlite() {
        streaks_copied_when_reopened(Dialect::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streaks_copied_when_reopened_postgres() {
        streaks_copied_when_reopened(Dialect::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn totals_closed_streaks_and_an_ids_records_sqlite() {
        round_trip(Dialect::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn totals_closed_streaks_and_an_ids_records_postgres() {
        round_trip(Dialect::Postgres).await;
    }
}
