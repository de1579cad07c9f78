//! The delivery ledger of `backfill.via = "webhook"` (`recon_webhook_deliveries`,
//! migration 8): one row per job and external ID.
//!
//! Exactly-once across crashes is the order of three steps: the item is
//! recorded `planned` (with its idempotency key) before its POST, the POST is
//! sent, and its outcome is recorded after. A process killed between the
//! first and the last leaves `planned`: the next run sends the item again
//! with the same key, which the handler deduplicates. An item recorded
//! `delivered` (2xx) or `already_done` (409) is never sent again, whatever
//! later runs find. `verified` is what a key lookup in the target found after
//! the delivery.

use std::collections::HashMap;

use jiff::Timestamp;
use sqlx::Row;

use crate::{json_text, ts_text, DeliveryLedger, StateError, StateStore, JSON_BATCH};

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryStatus {
    /// Recorded before the POST; its outcome is not known (yet).
    Planned,
    /// The endpoint answered 2xx.
    Delivered,
    /// The endpoint answered 409: its handler had already done it.
    AlreadyDone,
    /// Refused (a 4xx other than 409) or retries exhausted.
    Failed,
}

impl DeliveryStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Planned => "planned",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::AlreadyDone => "already_done",
            DeliveryStatus::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<DeliveryStatus> {
        Some(match s {
            "planned" => DeliveryStatus::Planned,
            "delivered" => DeliveryStatus::Delivered,
            "already_done" => DeliveryStatus::AlreadyDone,
            "failed" => DeliveryStatus::Failed,
            _ => return None,
        })
    }

    /// Whether the endpoint took the item: it is never sent again.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Delivered | DeliveryStatus::AlreadyDone
        )
    }
}

/// What a key lookup in the target found after a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verified {
    /// Not checked yet.
    No,
    /// The record is in the target.
    Created,
    /// The handler acknowledged the delivery but the record is not there.
    NotCreated,
}

impl Verified {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            Verified::No => "no",
            Verified::Created => "created",
            Verified::NotCreated => "not_created",
        }
    }

    fn parse(s: &str) -> Option<Verified> {
        Some(match s {
            "no" => Verified::No,
            "created" => Verified::Created,
            "not_created" => Verified::NotCreated,
            _ => return None,
        })
    }
}

/// One row of the delivery ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryRow {
    /// The record's external ID.
    pub external_id: String,
    /// The `Idempotency-Key` it is (and always was) sent with.
    pub idempotency_key: String,
    /// The run that last planned it.
    pub plan_id: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// What the target showed after delivery.
    pub verified: Verified,
    /// The last HTTP status, when there was one.
    pub http_status: Option<i64>,
    /// POSTs recorded (a crash may have sent one more).
    pub attempts: i64,
    /// Why it failed.
    pub last_error: Option<String>,
}

/// An outcome to record: external ID, status, HTTP status, error.
pub type DeliveryMark = (String, DeliveryStatus, Option<u16>, Option<String>);

/// Outcomes recorded by one statement: status, HTTP status, error.
type MarkGroup<'a> = (&'a str, Option<i64>, Option<&'a str>);

impl DeliveryLedger for StateStore {
    async fn webhook_unverified(&self, job: &str) -> Result<Vec<DeliveryRow>, StateError> {
        let context = "reading unverified webhook deliveries";
        let rows = sqlx::query(
            "SELECT external_id, idempotency_key, plan_id, status, verified, http_status, \
             attempts, last_error FROM recon_webhook_deliveries WHERE job = $1 \
             AND status IN ('delivered', 'already_done') AND verified <> 'created' \
             ORDER BY external_id",
        )
        .bind(job.to_string())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(context))?;
        rows.iter().map(|r| self.delivery_row(r, context)).collect()
    }

    async fn webhook_plan(
        &self,
        plan_id: &str,
        job: &str,
        items: &[(String, String)],
    ) -> Result<(), StateError> {
        if items.is_empty() {
            return Ok(());
        }
        let context = "recording planned webhook deliveries";
        let now = ts_text(Timestamp::now());
        let sql = format!(
            "INSERT INTO recon_webhook_deliveries (job, external_id, idempotency_key, plan_id, \
             status, verified, http_status, attempts, last_error, updated_at) \
             SELECT $1, v.external_id, v.idempotency_key, $2, 'planned', 'no', NULL, 0, NULL, $3 \
             FROM {} WHERE true ON CONFLICT (job, external_id) DO UPDATE SET \
             plan_id = excluded.plan_id, idempotency_key = excluded.idempotency_key, \
             status = 'planned', verified = 'no', updated_at = excluded.updated_at \
             WHERE recon_webhook_deliveries.status NOT IN ('delivered', 'already_done') \
             OR recon_webhook_deliveries.idempotency_key <> excluded.idempotency_key",
            self.json_rows("$4", &["external_id", "idempotency_key"])
        );
        let mut tx = self.begin_write(context).await?;
        for chunk in items.chunks(JSON_BATCH) {
            let rows: Vec<[&str; 2]> = chunk
                .iter()
                .map(|(k, i)| [k.as_str(), i.as_str()])
                .collect();
            sqlx::query(&sql)
                .bind(job.to_string())
                .bind(plan_id.to_string())
                .bind(now.clone())
                .bind(json_text(&rows))
                .execute(&mut *tx)
                .await
                .map_err(self.db(context))?;
        }
        tx.commit().await.map_err(self.db(context))
    }

    async fn webhook_mark(&self, job: &str, marks: &[DeliveryMark]) -> Result<(), StateError> {
        if marks.is_empty() {
            return Ok(());
        }
        let context = "recording webhook delivery outcomes";
        let now = ts_text(Timestamp::now());
        let mut groups: HashMap<MarkGroup<'_>, Vec<[&str; 1]>> = HashMap::new();
        for (k, status, http, error) in marks {
            groups
                .entry((status.as_str(), http.map(i64::from), error.as_deref()))
                .or_default()
                .push([k.as_str()]);
        }
        let sql = format!(
            "UPDATE recon_webhook_deliveries SET status = $2, http_status = $3, last_error = $4, \
             attempts = attempts + 1, updated_at = $5 WHERE job = $1 AND external_id {}",
            self.keys_in("$6")
        );
        let mut tx = self.begin_write(context).await?;
        for ((status, http, error), keys) in &groups {
            for chunk in keys.chunks(JSON_BATCH) {
                sqlx::query(&sql)
                    .bind(job.to_string())
                    .bind(status.to_string())
                    .bind(*http)
                    .bind(error.map(str::to_string))
                    .bind(now.clone())
                    .bind(json_text(&chunk))
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db(context))?;
            }
        }
        tx.commit().await.map_err(self.db(context))
    }

    async fn webhook_verify(
        &self,
        job: &str,
        results: &[(String, Verified)],
    ) -> Result<(), StateError> {
        if results.is_empty() {
            return Ok(());
        }
        let context = "recording webhook verifications";
        let now = ts_text(Timestamp::now());
        let mut groups: HashMap<&str, Vec<[&str; 1]>> = HashMap::new();
        for (k, v) in results {
            groups.entry(v.as_str()).or_default().push([k.as_str()]);
        }
        let sql = format!(
            "UPDATE recon_webhook_deliveries SET verified = $2, updated_at = $3 \
             WHERE job = $1 AND external_id {}",
            self.keys_in("$4")
        );
        let mut tx = self.begin_write(context).await?;
        for (verified, keys) in &groups {
            for chunk in keys.chunks(JSON_BATCH) {
                sqlx::query(&sql)
                    .bind(job.to_string())
                    .bind(verified.to_string())
                    .bind(now.clone())
                    .bind(json_text(&chunk))
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db(context))?;
            }
        }
        tx.commit().await.map_err(self.db(context))
    }
}

impl StateStore {
    pub(crate) fn delivery_row(
        &self,
        r: &sqlx::any::AnyRow,
        context: &str,
    ) -> Result<DeliveryRow, StateError> {
        let status: String = r.try_get(3).map_err(self.db(context))?;
        let verified: String = r.try_get(4).map_err(self.db(context))?;
        Ok(DeliveryRow {
            external_id: r.try_get(0).map_err(self.db(context))?,
            idempotency_key: r.try_get(1).map_err(self.db(context))?,
            plan_id: r.try_get(2).map_err(self.db(context))?,
            status: DeliveryStatus::parse(&status).ok_or_else(|| {
                self.corrupt(context, format!("unknown delivery status `{status}`"))
            })?,
            verified: Verified::parse(&verified).ok_or_else(|| {
                self.corrupt(context, format!("unknown verification `{verified}`"))
            })?,
            http_status: r.try_get(5).map_err(self.db(context))?,
            attempts: r.try_get(6).map_err(self.db(context))?,
            last_error: r.try_get(7).map_err(self.db(context))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    use recon_sql::testing::TestDb;
    use recon_sql::Dialect;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delivery_ledger_on_sqlite() {
        let db = TestDb::create(Dialect::Sqlite).await;
        planned_then_marked_then_verified_and_done_items_are_never_replanned(&db.url).await;
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delivery_ledger_on_postgres() {
        let db = TestDb::create(Dialect::Postgres).await;
        planned_then_marked_then_verified_and_done_items_are_never_replanned(&db.url).await;
        db.drop_db().await;
    }

    async fn planned_then_marked_then_verified_and_done_items_are_never_replanned(url: &str) {
        let s = StateStore::open(url).await.unwrap();
        let items = vec![
            ("a".to_string(), "recon-ka".to_string()),
            ("b".to_string(), "recon-kb".to_string()),
            ("c".to_string(), "recon-kc".to_string()),
        ];
        s.webhook_plan("p1", "j", &items).await.unwrap();
        s.webhook_mark(
            "j",
            &[
                ("a".into(), DeliveryStatus::Delivered, Some(200), None),
                ("b".into(), DeliveryStatus::AlreadyDone, Some(409), None),
                (
                    "c".into(),
                    DeliveryStatus::Failed,
                    Some(422),
                    Some("bad body".into()),
                ),
            ],
        )
        .await
        .unwrap();
        let keys: Vec<String> = ["a", "b", "c", "zz"].map(String::from).to_vec();
        let rows = s.webhook_rows("j", &keys).await.unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows["a"].status, DeliveryStatus::Delivered);
        assert_eq!(rows["a"].http_status, Some(200));
        assert_eq!(rows["b"].status, DeliveryStatus::AlreadyDone);
        assert_eq!(rows["c"].last_error.as_deref(), Some("bad body"));
        assert_eq!(rows["c"].attempts, 1);
        // Planning again: done items keep their state, the failed one is planned.
        s.webhook_plan("p2", "j", &items).await.unwrap();
        let rows = s.webhook_rows("j", &keys).await.unwrap();
        assert_eq!(rows["a"].status, DeliveryStatus::Delivered);
        assert_eq!(rows["a"].plan_id, "p1");
        assert_eq!(rows["c"].status, DeliveryStatus::Planned);
        assert_eq!(rows["c"].plan_id, "p2");
        let unverified: Vec<String> = s
            .webhook_unverified("j")
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.external_id)
            .collect();
        assert_eq!(unverified, ["a", "b"]);
        s.webhook_verify(
            "j",
            &[
                ("a".into(), Verified::Created),
                ("b".into(), Verified::NotCreated),
            ],
        )
        .await
        .unwrap();
        let unverified = s.webhook_unverified("j").await.unwrap();
        assert_eq!(unverified.len(), 1);
        assert_eq!(unverified[0].external_id, "b");
        assert_eq!(unverified[0].verified, Verified::NotCreated);
        // Another job sees none of it.
        assert!(s.webhook_rows("other", &keys).await.unwrap().is_empty());
    }
}
