//! PostgreSQL: many writers at once, JSON through `json_array_elements`,
//! the run lock as a session-level advisory lock on a connection of its own.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::TryStreamExt;
use jiff::Timestamp;
use sqlx::migrate::Migrator;
use sqlx::{AnyConnection, AnyPool, Connection, Row};

use crate::backend::{Dialect, Squashed};
use crate::history::OpenBuilder;
use crate::lock::{lock_row, RunLock};
use crate::{stable_hash, ts_text, Backend, StateError, StateStore};

/// The PostgreSQL dialect.
pub(crate) struct Postgres;

/// The PostgreSQL migrations, without sqlx's lock (see [`crate::migrate`]).
static MIGRATOR: Migrator = Migrator {
    locking: false,
    ..sqlx::migrate!("migrations/postgres")
};

/// A new store's schema in one step (see [`crate::migrate`]). One by one,
/// the 16 migrations are 16 savepoints, 16 records and their updates, and
/// tables built and altered again: a first backfill of 200,000 gaps with a
/// new PostgreSQL state store spent 70 ms migrating before it took its
/// lock, 42 ms in one step (32 of them the DDL).
static SQUASHED: Squashed = Squashed {
    sql: include_str!("../schema/postgres.sql"),
    // Relations and functions of the schema new objects go to (a new
    // database's `public` has none; a store anywhere else runs the
    // migrations one by one).
    objects: "SELECT (SELECT COUNT(*) FROM pg_class \
              WHERE relnamespace = to_regnamespace(current_schema())) \
              + (SELECT COUNT(*) FROM pg_proc \
              WHERE pronamespace = to_regnamespace(current_schema()))",
    record: "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
             execution_time) SELECT CAST(value->>0 AS BIGINT), value->>1, TRUE, \
             decode(value->>2, 'hex'), 0 FROM json_array_elements(CAST($1 AS JSON))",
};

impl Dialect for Postgres {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn name(&self) -> &'static str {
        "PostgreSQL"
    }

    fn connect_hint(&self) -> &'static str {
        "check that PostgreSQL is running, the database exists and the URL is right"
    }

    fn session_setup(&self) -> &'static [&'static str] {
        &[]
    }

    fn store_setup(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    fn begin_write(&self) -> Option<&'static str> {
        None
    }

    fn concurrent_writes(&self) -> bool {
        true
    }

    fn json_rows(&self, param: &str, columns: &[&str]) -> String {
        let cols: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("value ->> {i} AS {c}"))
            .collect();
        format!(
            "(SELECT {} FROM json_array_elements(CAST({param} AS json)) AS e(value)) AS v",
            cols.join(", ")
        )
    }

    fn json_keys(&self, param: &str) -> String {
        format!(
            "(SELECT value AS external_id FROM json_array_elements_text(CAST({param} AS json)) AS e(value)) AS v"
        )
    }

    /// PostgreSQL probes the primary key only for `= ANY(array)`; an
    /// `IN (subquery)` would be planned as a scan of the whole table.
    fn keys_in(&self, param: &str) -> String {
        format!(
            "= ANY(ARRAY(SELECT v.external_id FROM {}))",
            self.json_rows(param, &["external_id"])
        )
    }

    /// A batch's keys are one TOASTed value (4,000 keys: 130 KB of random
    /// IDs, which barely compress); pglz spends 3-4 ms on each, 0.2 s for a
    /// 200,000-gap plan that the first write waits for. lz4 takes half that
    /// (psql A/B of the same 50 rows: 0.15 s instead of 0.32 s). For this
    /// transaction only, and only where the server has it (PostgreSQL 14+,
    /// built with lz4): otherwise no row, nothing set.
    fn before_planned_batches(&self) -> Option<&'static str> {
        Some(
            "SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_settings \
             WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)",
        )
    }

    fn key_in_batch(&self) -> (&'static str, &'static str) {
        (
            "strpos(b.keys, $3) > 0",
            "json_array_elements_text(CAST(b.keys AS json)) AS k(value)",
        )
    }

    fn migrator(&self) -> &'static Migrator {
        &MIGRATOR
    }

    fn folder(&self) -> &'static str {
        "state/migrations/postgres"
    }

    /// Transaction-scoped, under the key the old runner used, so that an
    /// older recon migrating at the same moment waits too.
    fn migration_lock(&self) -> Option<&'static str> {
        Some("SELECT COUNT(*) FROM (SELECT pg_advisory_xact_lock($1)) AS l")
    }

    fn legacy_table_count(&self) -> &'static str {
        "SELECT COUNT(to_regclass('recon_schema_version'))"
    }

    fn legacy_import(&self) -> &'static str {
        "INSERT INTO _sqlx_migrations \
         (version, description, installed_on, success, checksum, execution_time) \
         VALUES ($1, $2, CAST($3 AS TIMESTAMPTZ), TRUE, $4, 0) ON CONFLICT (version) DO NOTHING"
    }

    fn squashed(&self) -> Option<&'static Squashed> {
        Some(&SQUASHED)
    }

    /// Streamed, row by row (0.19 s for 200,000).
    fn read_open_history<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
        open: &'a mut OpenBuilder,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let context = "reading the discrepancy history";
            let mut rows = sqlx::query(
                "SELECT class, external_id, first_seen_at FROM recon_discrepancies \
                 WHERE job = $1 AND resolved_at IS NULL",
            )
            .bind(job.to_string())
            .fetch(&store.pool);
            while let Some(row) = rows.try_next().await.map_err(store.db(context))? {
                let text = |i: usize| -> Result<String, StateError> {
                    row.try_get(i).map_err(store.db(context))
                };
                open.add(store, context, &text(0)?, text(1)?, text(2)?.into())?;
            }
            Ok(())
        })
    }

    fn acquire_lock<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
        owner: String,
        _stale_after: Duration,
        every: Duration,
    ) -> BoxFuture<'a, Result<RunLock, StateError>> {
        Box::pin(acquire(store, job, owner, every))
    }

    /// Proof: nobody holds the job's advisory lock (it dies with its
    /// session).
    fn lock_holder_gone<'a>(
        &'a self,
        store: &'a StateStore,
        job: &'a str,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(async move {
            let held = advisory_holders(&store.pool, advisory_key(job), None)
                .await
                .map_err(store.db("checking the run lock's holder"))?;
            Ok(held == 0)
        })
    }
}

/// The PostgreSQL advisory lock key of a job's run lock.
pub(crate) fn advisory_key(job: &str) -> i64 {
    stable_hash(&format!("recon:run-lock:{job}"))
}

/// How many sessions of this database hold the advisory lock `key` (only
/// session `pid`'s, when given). A bigint key shows in `pg_locks` as its
/// high half (classid) and low half (objid), objsubid 1:
/// https://www.postgresql.org/docs/current/view-pg-locks.html
pub(crate) async fn advisory_holders(
    pool: &AnyPool,
    key: i64,
    pid: Option<i32>,
) -> Result<i64, sqlx::Error> {
    let key = key as u64;
    sqlx::query(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1 \
         AND (CAST($3 AS INTEGER) IS NULL OR pid = CAST($3 AS INTEGER))",
    )
    .bind((key >> 32) as i64)
    .bind((key & 0xffff_ffff) as i64)
    .bind(pid)
    .fetch_one(pool)
    .await
    .and_then(|r| r.try_get(0))
}

async fn acquire(
    store: &StateStore,
    job: &str,
    owner: String,
    every: Duration,
) -> Result<RunLock, StateError> {
    let context = "acquiring the run lock";
    let key = advisory_key(job);
    let mut conn =
        AnyConnection::connect(&store.url)
            .await
            .map_err(|source| StateError::Connect {
                url: store.display.clone(),
                hint: "check that PostgreSQL is running and accepts one more connection".into(),
                source,
            })?;
    let got: bool = sqlx::query("SELECT pg_try_advisory_lock($1)")
        .bind(key)
        .fetch_one(&mut conn)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(store.db(context))?;
    if !got {
        let _ = conn.close().await;
        let (holder, since) = match lock_row(store, job).await? {
            Some((o, s, _)) => (o, s),
            None => ("unknown".into(), "an unknown time".into()),
        };
        return Err(StateError::Locked {
            job: job.to_string(),
            owner: holder,
            since,
            hint: "if that run died, the lock expires as soon as its PostgreSQL session ends \
                   (stop the process, or end its session with pg_terminate_backend); \
                   then run again"
                .into(),
        });
    }
    let backend_pid: i32 = sqlx::query("SELECT pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(store.db(context))?;
    let now = Timestamp::now();
    let previous = lock_row(store, job).await?;
    sqlx::query(
        "INSERT INTO recon_locks (job, owner, acquired_at, heartbeat_at) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (job) DO UPDATE SET owner = excluded.owner, \
         acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at",
    )
    .bind(job.to_string())
    .bind(owner.clone())
    .bind(ts_text(now))
    .execute(&mut conn)
    .await
    .map_err(store.db(context))?;
    if let Some((old_owner, since, heartbeat)) = previous {
        tracing::warn!(
            message = "The previous holder of this run lock ended without releasing it; it probably died.",
            job,
            previous_owner = %old_owner,
            previous_since = %since,
            last_heartbeat = %heartbeat,
        );
    }
    let mut lock = RunLock::start(store, job, owner, now, Some(key), Some(conn), every);
    lock.backend_pid = Some(backend_pid);
    Ok(lock)
}
