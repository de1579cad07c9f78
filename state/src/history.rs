//! The discrepancy history (`recon_discrepancies`): when each open
//! discrepancy was first and last seen, and when it was resolved, so that
//! reports can say "new", "open since …" and "resolved".

use std::borrow::Cow;

use jiff::Timestamp;
use sqlx::{Any, Transaction};

use crate::types::OpenIds;
use crate::{json_text, ts_text, Class, DiscrepancyDelta, DiscrepancyHistory, OpenHistory};
use crate::{RunTotals, StateError, StateStore, JSON_BATCH};

/// Rows of the open discrepancy history read per statement (SQLite).
pub(crate) const OPEN_CHUNK: i64 = 20_000;

/// External IDs of a chunk of the open history, borrowed from their JSON
/// text where nothing is escaped.
#[derive(serde::Deserialize)]
pub(crate) struct OpenIdsJson<'a>(#[serde(borrow)] pub Vec<Cow<'a, str>>);

/// The open history as a backend reads it, row by row.
#[derive(Default)]
pub(crate) struct OpenBuilder {
    open: [OpenIds; 4],
    /// Most rows of a history share a few first sightings: each is parsed once.
    last_ts: Option<(String, Timestamp)>,
}

impl OpenBuilder {
    /// Adds one open discrepancy, as stored.
    pub(crate) fn add(
        &mut self,
        store: &StateStore,
        context: &str,
        class: &str,
        id: String,
        at: Cow<'_, str>,
    ) -> Result<(), StateError> {
        let class: Class = class
            .parse()
            .map_err(|e: StateError| store.corrupt(context, e.to_string()))?;
        self.add_to(store, context, class, id, &at)
    }

    /// Adds one open discrepancy of `class`, first seen at `at` (as stored).
    pub(crate) fn add_to(
        &mut self,
        store: &StateStore,
        context: &str,
        class: Class,
        id: String,
        at: &str,
    ) -> Result<(), StateError> {
        let first = match &self.last_ts {
            Some((text, ts)) if text == at => *ts,
            _ => {
                let ts = store.parse_ts(context, at)?;
                self.last_ts = Some((at.to_string(), ts));
                ts
            }
        };
        self.open[class as usize].push(id, first);
        Ok(())
    }

    /// The open set read, each class sorted by ID.
    pub(crate) fn finish(mut self) -> OpenHistory {
        for ids in &mut self.open {
            ids.sort();
        }
        OpenHistory(self.open)
    }
}

impl DiscrepancyHistory for StateStore {
    async fn update_discrepancies(
        &self,
        job: &str,
        run_id: &str,
        now: Timestamp,
        current: &[(Class, String)],
    ) -> Result<DiscrepancyDelta, StateError> {
        let delta = self.discrepancy_delta(job, current).await?;
        self.write_discrepancies(job, run_id, now, &delta).await?;
        Ok(delta)
    }

    async fn discrepancy_delta(
        &self,
        job: &str,
        current: &[(Class, String)],
    ) -> Result<DiscrepancyDelta, StateError> {
        Ok(self.open_history(job).await?.delta(current))
    }

    async fn open_history(&self, job: &str) -> Result<OpenHistory, StateError> {
        let mut open = OpenBuilder::default();
        self.dialect.read_open_history(self, job, &mut open).await?;
        Ok(open.finish())
    }

    // Records in the history of `job` what run `run_id` found at `now`, as
    // `delta` says ([`OpenHistory::delta`], read under the same run
    // lock), in one transaction:
    //
    // - a new discrepancy is inserted, first seen in this run; one
    //   resolved before that reappears is reopened by the same upsert, and
    //   migration 12's trigger first copies its closed streak into
    //   `recon_discrepancy_streaks`. Its own last sighting is left empty
    //   (''): while it is open, readers take the job's mark, written in
    //   this same transaction, and it is set when the row is resolved. The
    //   run's ID and instant twice more made a first run's row 160 bytes
    //   where 98 hold it: 61,800 new rows of the 2M bench files, 12.9 MB
    //   of WAL to write and sync before the run could end, now 8.5 MB;
    // - one that persists is not written at all: an open row was last seen
    //   by the job's latest recording run, which `recon_history_marks`
    //   keeps once per job (migration 13);
    // - one resolved ends its streak in place: resolved at `now` by
    //   `run_id`, last seen by the run before (the job's mark).
    //
    // Statements are multi-row (50,000 rows each), in key order. If the
    // job's history holds no resolved row, no new discrepancy has a row
    // at all, and they are inserted without the upsert's conflict check (a
    // first run over a long history: 40% less work per row on
    // PostgreSQL); a conflict then fails the write, never silently.
    async fn write_discrepancies(
        &self,
        job: &str,
        run_id: &str,
        now: Timestamp,
        delta: &DiscrepancyDelta,
    ) -> Result<(), StateError> {
        let context = "updating the discrepancy history";
        let now_s = ts_text(now);
        // Key order (the delta's own): neighbouring rows land on the same
        // B-tree pages, and each class is one run of rows.
        let new: Vec<(Class, &str)> = delta.new.iter().map(|(c, id)| (*c, id.as_str())).collect();
        let mut tx = self.begin_write(context).await?;
        let reopen = !new.is_empty() && self.has_resolved(&mut tx, context, job).await?;
        self.resolve_in(&mut tx, context, job, run_id, &now_s, delta)
            .await?;
        self.insert_new_in(&mut tx, context, job, run_id, &now_s, &new, reopen)
            .await?;
        self.mark_seen_in(&mut tx, context, job, run_id, now_s)
            .await?;
        tx.commit().await.map_err(self.db(context))
    }

    async fn record_run_totals(
        &self,
        run_id: &str,
        totals: &[RunTotals],
    ) -> Result<(), StateError> {
        let context = "recording a run's totals";
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let mut tx = self.begin_write(context).await?;
        for t in totals {
            sqlx::query(
                "INSERT INTO recon_run_totals (run_id, currency, source_records, source_minor, \
                 target_records, target_minor) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (run_id, currency) DO UPDATE SET \
                 source_records = excluded.source_records, source_minor = excluded.source_minor, \
                 target_records = excluded.target_records, target_minor = excluded.target_minor",
            )
            .bind(run_id.to_string())
            .bind(t.currency.map(|c| c.code().to_string()).unwrap_or_default())
            .bind(count(t.source_records))
            .bind(t.source_minor.to_string())
            .bind(count(t.target_records))
            .bind(t.target_minor.to_string())
            .execute(&mut *tx)
            .await
            .map_err(self.db(context))?;
        }
        tx.commit().await.map_err(self.db(context))
    }
}

impl StateStore {
    /// Whether the job's history holds a resolved row (then a new
    /// discrepancy may have a row to reopen).
    async fn has_resolved(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        job: &str,
    ) -> Result<bool, StateError> {
        Ok(sqlx::query(
            "SELECT 1 FROM recon_discrepancies WHERE job = $1 AND resolved_at IS NOT NULL \
             LIMIT 1",
        )
        .bind(job.to_string())
        .fetch_optional(&mut **tx)
        .await
        .map_err(self.db(context))?
        .is_some())
    }

    /// Ends the streak of every open discrepancy this run did not see.
    async fn resolve_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        job: &str,
        run_id: &str,
        now_s: &str,
        delta: &DiscrepancyDelta,
    ) -> Result<(), StateError> {
        // Every open one this run did not see ends its streak first (the
        // new ones have no open row to match): the row keeps it, with the
        // run that ended it, until the ID comes back. Last seen by the run
        // before: the job's mark, still unmoved (a store older than
        // migration 13 has none, and every row then holds its own).
        if delta.resolved.is_empty() {
            return Ok(());
        }
        let resolve = "UPDATE recon_discrepancies SET resolved_at = $1, resolved_run = $3, \
             last_seen_run = COALESCE((SELECT m.run_id FROM recon_history_marks m \
             WHERE m.job = $2), NULLIF(last_seen_run, ''), first_seen_run), \
             last_seen_at = COALESCE((SELECT m.seen_at FROM recon_history_marks m \
             WHERE m.job = $2), NULLIF(last_seen_at, ''), first_seen_at) \
             WHERE job = $2 AND resolved_at IS NULL";
        let by_key = format!(
            "{resolve} AND (class, external_id) IN (SELECT v.class, v.external_id FROM {})",
            self.json_rows("$4", &["class", "external_id"])
        );
        // Nothing persists: every open row is resolved, found by scan in
        // one statement; else by key, a chunk at a time.
        let (sql, lists) = if delta.persisting.is_empty() {
            (resolve, vec![None])
        } else {
            let mut keys: Vec<[&str; 2]> = delta
                .resolved
                .iter()
                .map(|(c, id, _)| [c.as_str(), id.as_str()])
                .collect();
            keys.sort_unstable();
            let lists = keys.chunks(JSON_BATCH).map(|c| Some(json_text(&c)));
            (by_key.as_str(), lists.collect())
        };
        for list in lists {
            let mut q = sqlx::query(sql)
                .bind(now_s.to_string())
                .bind(job.to_string())
                .bind(run_id.to_string());
            if let Some(list) = list {
                q = q.bind(list);
            }
            q.execute(&mut **tx).await.map_err(self.db(context))?;
        }
        Ok(())
    }

    /// Inserts (or, with `reopen`, upserts) the new discrepancies.
    #[allow(clippy::too_many_arguments)]
    async fn insert_new_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        job: &str,
        run_id: &str,
        now_s: &str,
        new: &[(Class, &str)],
        reopen: bool,
    ) -> Result<(), StateError> {
        // New ones with no row at all are inserted as they are; when the job
        // has resolved rows, some may come back: upserted (the same rows,
        // with the conflict clause).
        // One class at a time (`new` is sorted by class): the class is
        // bound once, the keys are a flat JSON array.
        let insert = format!(
            "INSERT INTO recon_discrepancies (job, class, external_id, first_seen_run, \
             first_seen_at, last_seen_run, last_seen_at, resolved_at) \
             SELECT $1, $5, v.external_id, $2, $3, '', '', NULL FROM {}",
            self.dialect.json_keys("$4")
        );
        let upsert = format!(
            "{insert} WHERE true \
             ON CONFLICT (job, class, external_id) DO UPDATE SET \
             first_seen_run = CASE WHEN recon_discrepancies.resolved_at IS NULL \
             THEN recon_discrepancies.first_seen_run ELSE excluded.first_seen_run END, \
             first_seen_at = CASE WHEN recon_discrepancies.resolved_at IS NULL \
             THEN recon_discrepancies.first_seen_at ELSE excluded.first_seen_at END, \
             last_seen_run = excluded.last_seen_run, last_seen_at = excluded.last_seen_at, \
             resolved_at = NULL, resolved_run = NULL"
        );
        let sql = if reopen { &upsert } else { &insert };
        // Classes in the table's own key order (by their text: duplicate,
        // gap, mismatch, orphan), each class's IDs sorted: every row goes
        // after the last one, never into the middle of a class inserted
        // before (309,000 new rows of the 10M bench files: 18% less time
        // inserting than in the classes' declaration order).
        let mut classes: Vec<&[(Class, &str)]> = new.chunk_by(|a, b| a.0 == b.0).collect();
        classes.sort_by_key(|c| c[0].0.as_str());
        for class in classes {
            for chunk in class.chunks(JSON_BATCH) {
                let keys: Vec<&str> = chunk.iter().map(|(_, id)| *id).collect();
                sqlx::query(sql)
                    .bind(job.to_string())
                    .bind(run_id.to_string())
                    .bind(now_s.to_string())
                    .bind(json_text(&keys))
                    .bind(chunk[0].0.as_str().to_string())
                    .execute(&mut **tx)
                    .await
                    .map_err(self.db(context))?;
            }
        }
        Ok(())
    }

    /// Records this run as the last that saw every open discrepancy.
    async fn mark_seen_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        context: &str,
        job: &str,
        run_id: &str,
        now_s: String,
    ) -> Result<(), StateError> {
        // This run is now the last that saw every open discrepancy.
        sqlx::query(
            "INSERT INTO recon_history_marks (job, run_id, seen_at) VALUES ($1, $2, $3) \
             ON CONFLICT (job) DO UPDATE SET run_id = excluded.run_id, seen_at = excluded.seen_at",
        )
        .bind(job.to_string())
        .bind(run_id.to_string())
        .bind(now_s)
        .execute(&mut **tx)
        .await
        .map_err(self.db(context))?;
        Ok(())
    }
}
