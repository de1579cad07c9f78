//! What reports read ([`ReportReads`]), on either backend.

use std::collections::HashMap;

use recon_core::Currency;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::webhook::DeliveryRow;
use crate::{json_text, lock, IdRecords, ReportReads, RunRow, RunStatus, RunTotals};
use crate::{StateError, StateStore, JSON_BATCH};

impl ReportReads for StateStore {
    async fn recent_runs(
        &self,
        job: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRow>, StateError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let context = "listing runs";
        let columns = "id, job, window_start, window_end, started_at, finished_at, status, \
                       dry_run, counts, report_dir, error";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = match job {
            Some(_) => format!(
                "SELECT {columns} FROM recon_runs WHERE job = $1 \
                 ORDER BY started_at DESC, id DESC LIMIT $2"
            ),
            None => format!(
                "SELECT {columns} FROM recon_runs ORDER BY started_at DESC, id DESC LIMIT $1"
            ),
        };
        let query = match job {
            Some(job) => sqlx::query(&sql).bind(job.to_string()).bind(limit),
            None => sqlx::query(&sql).bind(limit),
        };
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(self.db(context))?;
        rows.iter().map(|r| self.run_row(r)).collect()
    }

    async fn run_status(&self, run_id: &str) -> Result<Option<RunStatus>, StateError> {
        let context = "reading a run's status";
        let row = sqlx::query("SELECT status FROM recon_runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(self.db(context))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let text: String = r.try_get(0).map_err(self.db(context))?;
                Ok(Some(text.parse()?))
            }
        }
    }

    async fn summary(&self, run_id: &str) -> Result<Option<String>, StateError> {
        let row = sqlx::query("SELECT summary FROM recon_runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(self.db("reading a run's summary"))?;
        match row {
            None => Ok(None),
            Some(r) => r.try_get(0).map_err(self.db("reading a run's summary")),
        }
    }

    async fn run_owner_alive_here(&self, run_id: &str) -> Result<bool, StateError> {
        let context = "reading a run's owner";
        let owner: Option<String> = sqlx::query("SELECT owner FROM recon_runs WHERE id = $1")
            .bind(run_id.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(self.db(context))?
            .map(|r| r.try_get::<Option<String>, _>(0))
            .transpose()
            .map_err(self.db(context))?
            .flatten();
        Ok(owner.is_some_and(|o| lock::holder_is_alive_here(&o)))
    }

    async fn lock_holder_gone(&self, job: &str) -> Result<bool, StateError> {
        self.dialect.lock_holder_gone(self, job).await
    }

    async fn run_totals(
        &self,
        run_ids: &[String],
    ) -> Result<HashMap<String, Vec<RunTotals>>, StateError> {
        let context = "reading runs' totals";
        let mut out: HashMap<String, Vec<RunTotals>> = HashMap::new();
        let sql = format!(
            "SELECT run_id, currency, source_records, source_minor, target_records, target_minor \
             FROM recon_run_totals WHERE run_id IN (SELECT v.run_id FROM {}) \
             ORDER BY run_id, currency",
            self.json_rows("$1", &["run_id"])
        );
        for chunk in run_ids.chunks(JSON_BATCH) {
            let rows: Vec<[&str; 1]> = chunk.iter().map(|id| [id.as_str()]).collect();
            let found = sqlx::query(&sql)
                .bind(json_text(&rows))
                .fetch_all(&self.pool)
                .await
                .map_err(self.db(context))?;
            for r in &found {
                let run_id: String = r.try_get(0).map_err(self.db(context))?;
                let code: String = r.try_get(1).map_err(self.db(context))?;
                let currency = match code.as_str() {
                    "" => None,
                    c => Some(Currency::parse(c).map_err(|e| {
                        self.corrupt(context, format!("currency `{c}` of run {run_id}: {e}"))
                    })?),
                };
                let records = |i: usize| -> Result<u64, StateError> {
                    let n: i64 = r.try_get(i).map_err(self.db(context))?;
                    u64::try_from(n)
                        .map_err(|_| self.corrupt(context, format!("negative count {n}")))
                };
                let minor = |i: usize| -> Result<i128, StateError> {
                    let t: String = r.try_get(i).map_err(self.db(context))?;
                    t.parse().map_err(|_| {
                        self.corrupt(context, format!("`{t}` is not a sum in minor units"))
                    })
                };
                out.entry(run_id).or_default().push(RunTotals {
                    currency,
                    source_records: records(2)?,
                    source_minor: minor(3)?,
                    target_records: records(4)?,
                    target_minor: minor(5)?,
                });
            }
        }
        Ok(out)
    }

    async fn id_records(&self, job: &str, external_id: &str) -> Result<IdRecords, StateError> {
        let mut runs = self.recent_runs(Some(job), usize::MAX).await?;
        runs.reverse();
        let streaks = self.streaks_of(job, external_id).await?;
        let closed = self.closed_streaks_of(job, external_id).await?;
        let items = self.items_of(&runs, external_id).await?;
        Ok(IdRecords {
            runs,
            streaks,
            closed,
            items,
        })
    }

    async fn webhook_rows(
        &self,
        job: &str,
        keys: &[String],
    ) -> Result<HashMap<String, DeliveryRow>, StateError> {
        let context = "reading webhook deliveries";
        let sql = format!(
            "SELECT external_id, idempotency_key, plan_id, status, verified, http_status, \
             attempts, last_error FROM recon_webhook_deliveries WHERE job = $1 AND external_id {}",
            self.keys_in("$2")
        );
        let mut out = HashMap::new();
        for chunk in keys.chunks(JSON_BATCH) {
            let rows: Vec<[&str; 1]> = chunk.iter().map(|k| [k.as_str()]).collect();
            let found = sqlx::query(&sql)
                .bind(job.to_string())
                .bind(json_text(&rows))
                .fetch_all(&self.pool)
                .await
                .map_err(self.db(context))?;
            for r in &found {
                let row = self.delivery_row(r, context)?;
                out.insert(row.external_id.clone(), row);
            }
        }
        Ok(out)
    }
}

impl StateStore {
    fn run_row(&self, r: &AnyRow) -> Result<RunRow, StateError> {
        let context = "reading a run";
        let text =
            |i: usize| -> Result<String, StateError> { r.try_get(i).map_err(self.db(context)) };
        let opt = |i: usize| -> Result<Option<String>, StateError> {
            r.try_get(i).map_err(self.db(context))
        };
        let counts =
            match opt(8)? {
                None => None,
                Some(c) => Some(serde_json::from_str(&c).map_err(|e| {
                    self.corrupt(context, format!("counts `{c}` are not JSON ({e})"))
                })?),
            };
        let finished_at = match opt(5)? {
            None => None,
            Some(t) => Some(self.parse_ts(context, &t)?),
        };
        Ok(RunRow {
            id: text(0)?,
            job: text(1)?,
            window_start: self.parse_ts(context, &text(2)?)?,
            window_end: self.parse_ts(context, &text(3)?)?,
            started_at: self.parse_ts(context, &text(4)?)?,
            finished_at,
            status: text(6)?
                .parse()
                .map_err(|e: StateError| self.corrupt(context, e.to_string()))?,
            dry_run: r.try_get::<i64, _>(7).map_err(self.db(context))? != 0,
            counts,
            report_dir: opt(9)?,
            error: opt(10)?,
        })
    }
}
