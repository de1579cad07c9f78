//! The run log (`recon_runs`): one row per run, `running` until
//! finished. A run still `running` when the next run of its job starts
//! died (the run lock guarantees none is live), so starting a run marks it
//! `crashed` and supersedes its planned backfill items.

use jiff::Timestamp;
use recon_core::Window;
use sqlx::{Any, Row, Transaction};

use crate::lock;
use crate::{random_u64, ts_text, RunLog, RunStatus, StateError, StateStore};

impl RunLog for StateStore {
    async fn start_run(
        &self,
        job: &str,
        window: Window,
        dry_run: bool,
    ) -> Result<String, StateError> {
        self.start_run_as(job, window, dry_run, None).await
    }

    async fn start_run_as(
        &self,
        job: &str,
        window: Window,
        dry_run: bool,
        owner: Option<&str>,
    ) -> Result<String, StateError> {
        if job.is_empty() {
            return Err(StateError::Invalid("a run needs a job name".into()));
        }
        self.refuse_if_owner_alive(job).await?;
        let now = Timestamp::now();
        let id = format!(
            "{job}-{}-{:08x}",
            now.strftime("%Y%m%dT%H%M%SZ"),
            random_u64() as u32
        );
        let context = "recording the start of a run";
        let mut tx = self.begin_write(context).await?;
        let (superseded, crashed) = self.settle_running(&mut tx, job, &id, now).await?;
        sqlx::query(
            "INSERT INTO recon_runs (id, job, window_start, window_end, started_at, finished_at, \
             status, dry_run, counts, report_dir, error, owner) \
             VALUES ($1, $2, $3, $4, $5, NULL, 'running', $6, NULL, NULL, NULL, $7)",
        )
        .bind(id.clone())
        .bind(job.to_string())
        .bind(ts_text(window.start))
        .bind(ts_text(window.end))
        .bind(ts_text(now))
        .bind(i64::from(dry_run))
        .bind(owner.map(str::to_string))
        .execute(&mut *tx)
        .await
        .map_err(self.db(context))?;
        tx.commit().await.map_err(self.db(context))?;
        if !crashed.is_empty() {
            tracing::warn!(
                message = "Earlier runs of this job never finished; marked them crashed.",
                job,
                runs = %crashed.join(", "),
                superseded_items = superseded,
            );
        }
        Ok(id)
    }

    fn finish_run<S>(
        &self,
        run_id: &str,
        status: S,
        counts: &serde_json::Value,
        report_dir: Option<&str>,
        error: Option<&str>,
    ) -> impl std::future::Future<Output = Result<(), StateError>> + Send
    where
        S: TryInto<RunStatus>,
        StateError: From<S::Error>,
    {
        // Converted before the future: `S` need not be `Send`.
        let status: Result<RunStatus, StateError> = status.try_into().map_err(StateError::from);
        async move {
            let status = status?;
            if !status.is_final() {
                return Err(StateError::Invalid(format!(
                    "a run cannot finish with status `{status}`; use one of clean, discrepancies, failed, crashed"
                )));
            }
            // JSON `null` is stored as SQL NULL: no counts.
            let counts =
                match counts {
                    serde_json::Value::Null => None,
                    c => Some(serde_json::to_string(c).map_err(|e| {
                        StateError::Invalid(format!("run counts are not JSON: {e}"))
                    })?),
                };
            let done = sqlx::query(
                "UPDATE recon_runs SET finished_at = $1, status = $2, counts = $3, \
                 report_dir = $4, error = $5 WHERE id = $6",
            )
            .bind(ts_text(Timestamp::now()))
            .bind(status.as_str().to_string())
            .bind(counts)
            .bind(report_dir.map(str::to_string))
            // Scrubbed: a connector's error may echo a secret in its own words.
            .bind(error.map(|e| recon_core::scrub(e).into_owned()))
            .bind(run_id.to_string())
            .execute(&self.pool)
            .await
            .map_err(self.db("recording the end of a run"))?;
            if done.rows_affected() == 0 {
                return Err(StateError::UnknownRun(run_id.to_string()));
            }
            Ok(())
        }
    }

    async fn save_summary(&self, run_id: &str, json: &str) -> Result<(), StateError> {
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(json) {
            return Err(StateError::Invalid(format!(
                "the summary of run {run_id} is not JSON ({e}); pass the text summary.json holds"
            )));
        }
        let done = sqlx::query("UPDATE recon_runs SET summary = $1 WHERE id = $2")
            .bind(json.to_string())
            .bind(run_id.to_string())
            .execute(&self.pool)
            .await
            .map_err(self.db("saving a run's summary"))?;
        if done.rows_affected() == 0 {
            return Err(StateError::UnknownRun(run_id.to_string()));
        }
        Ok(())
    }

    async fn last_success_end(&self, job: &str) -> Result<Option<Timestamp>, StateError> {
        let context = "reading the last successful run";
        let row = sqlx::query(
            "SELECT window_end FROM recon_runs WHERE job = $1 AND dry_run = 0 \
             AND status IN ('clean', 'discrepancies') ORDER BY started_at DESC, id DESC LIMIT 1",
        )
        .bind(job.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(context))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let text: String = r.try_get(0).map_err(self.db(context))?;
                self.parse_ts(context, &text).map(Some)
            }
        }
    }

    async fn check_writable(&self, job: &str) -> Result<(), StateError> {
        let mut tx = self
            .begin_write("checking that the store takes writes")
            .await?;
        let now = jiff::Timestamp::now().to_string();
        let id = format!("recon-check-{}-{now}", std::process::id());
        sqlx::query(
            "INSERT INTO recon_runs (id, job, window_start, window_end, started_at, status, dry_run) \
             VALUES ($1, $2, $3, $3, $3, 'running', 1)",
        )
        .bind(id)
        .bind(job.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(self.db("writing a test run row (rolled back)"))?;
        tx.rollback()
            .await
            .map_err(self.db("rolling back the test run row"))?;
        Ok(())
    }
}

impl StateStore {
    /// Refuses to start a run of `job` while an earlier run still marked
    /// `running` has a live process on this host.
    async fn refuse_if_owner_alive(&self, job: &str) -> Result<(), StateError> {
        let context = "reading the runs still marked running";
        let running = sqlx::query(
            "SELECT id, owner, started_at FROM recon_runs WHERE job = $1 AND status = 'running'",
        )
        .bind(job.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        for row in &running {
            let id: String = row.try_get(0).map_err(self.db(context))?;
            let holder: Option<String> = row.try_get(1).map_err(self.db(context))?;
            let since: String = row.try_get(2).map_err(self.db(context))?;
            if let Some(holder) = holder.filter(|h| lock::holder_is_alive_here(h)) {
                return Err(StateError::Locked {
                    job: job.to_string(),
                    owner: holder,
                    since,
                    hint: format!(
                        "run {id} lost its run lock but its process is still alive; it stops before its next write. Run again once it has ended"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Marks the job's runs still `running` as `crashed` (found by run
    /// `id`) and their planned ledger items superseded; returns how many
    /// items and which runs.
    async fn settle_running(
        &self,
        tx: &mut Transaction<'static, Any>,
        job: &str,
        id: &str,
        now: Timestamp,
    ) -> Result<(u64, Vec<String>), StateError> {
        let context = "recording the start of a run";
        let now_s = ts_text(now);
        let crashed_plans = "job = $2 AND status = 'planned' AND plan_id IN \
             (SELECT id FROM recon_runs WHERE job = $2 AND status = 'running')";
        let mut superseded = sqlx::query(&format!(
            "UPDATE recon_ledger_items SET status = 'superseded', updated_at = $1 \
             WHERE {crashed_plans}"
        ))
        .bind(now_s.clone())
        .bind(job.to_string())
        .execute(&mut **tx)
        .await
        .map_err(self.db(context))?
        .rows_affected();
        // A batch planned but never marked: its write may or may not have
        // reached the target; the next run's diff decides what is missing.
        let batches = sqlx::query(&format!(
            "UPDATE recon_ledger_batches SET status = 'superseded', updated_at = $1 \
             WHERE {crashed_plans} RETURNING items"
        ))
        .bind(now_s.clone())
        .bind(job.to_string())
        .fetch_all(&mut **tx)
        .await
        .map_err(self.db(context))?;
        for b in &batches {
            superseded += b.try_get::<i64, _>(0).map_err(self.db(context))? as u64;
        }
        let crashed = sqlx::query(
            "UPDATE recon_runs SET status = 'crashed', error = COALESCE(error, $1) \
             WHERE job = $2 AND status = 'running' RETURNING id",
        )
        .bind(format!(
            "the run ended without finishing (process killed or machine lost); found by run {id} at {now}"
        ))
        .bind(job.to_string())
        .fetch_all(&mut **tx)
        .await
        .map_err(self.db(context))?;
        let ids = crashed
            .iter()
            .filter_map(|r| r.try_get::<String, _>(0).ok())
            .collect();
        Ok((superseded, ids))
    }
}
