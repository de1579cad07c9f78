//! The schema of the state database and the runner that creates and
//! upgrades it.
//!
//! `recon_schema_version` lists the steps applied. Each step is a numbered
//! list of DDL statements per dialect; steps are only ever appended. The
//! runner applies the missing steps in one transaction that first takes a
//! database-wide lock (`BEGIN IMMEDIATE` on SQLite, a transaction-scoped
//! advisory lock on PostgreSQL), so running it twice, or from two processes
//! at once, applies each step exactly once.

use jiff::Timestamp;
use sqlx::{AnyPool, Row};

use super::{stable_hash, ts_text, Backend, StateError};

/// One schema step.
pub(crate) struct Step {
    /// Its number; steps are applied in order.
    pub version: i64,
    /// What it does, kept in `recon_schema_version`.
    pub name: &'static str,
    /// Its statements on SQLite.
    pub sqlite: &'static [&'static str],
    /// Its statements on PostgreSQL.
    pub postgres: &'static [&'static str],
}

/// Every step, oldest first. Append; never edit a released step.
pub(crate) const STEPS: &[Step] = &[Step {
    version: 1,
    name: "runs, backfill ledger, discrepancy history, run locks",
    sqlite: &[
        "CREATE TABLE recon_runs (
            id TEXT NOT NULL PRIMARY KEY,
            job TEXT NOT NULL,
            window_start TEXT NOT NULL,
            window_end TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            status TEXT NOT NULL CHECK (status IN ('running', 'clean', 'discrepancies', 'failed', 'crashed')),
            dry_run INTEGER NOT NULL CHECK (dry_run IN (0, 1)),
            counts TEXT,
            report_dir TEXT,
            error TEXT
        )",
        "CREATE INDEX recon_runs_job_started ON recon_runs (job, started_at)",
        "CREATE INDEX recon_runs_started ON recon_runs (started_at)",
        "CREATE TABLE recon_backfill_items (
            plan_id TEXT NOT NULL,
            job TEXT NOT NULL,
            external_id TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
            status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded')),
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, external_id)
        )",
        "CREATE INDEX recon_backfill_items_job_status ON recon_backfill_items (job, status)",
        "CREATE TABLE recon_discrepancies (
            job TEXT NOT NULL,
            class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
            external_id TEXT NOT NULL,
            first_seen_run TEXT NOT NULL,
            first_seen_at TEXT NOT NULL,
            last_seen_run TEXT NOT NULL,
            last_seen_at TEXT NOT NULL,
            resolved_at TEXT,
            PRIMARY KEY (job, class, external_id)
        )",
        "CREATE TABLE recon_locks (
            job TEXT NOT NULL PRIMARY KEY,
            owner TEXT NOT NULL,
            acquired_at TEXT NOT NULL,
            heartbeat_at TEXT NOT NULL
        )",
    ],
    postgres: &[
        "CREATE TABLE recon_runs (
            id TEXT NOT NULL PRIMARY KEY,
            job TEXT NOT NULL,
            window_start TEXT NOT NULL,
            window_end TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            status TEXT NOT NULL CHECK (status IN ('running', 'clean', 'discrepancies', 'failed', 'crashed')),
            dry_run BIGINT NOT NULL CHECK (dry_run IN (0, 1)),
            counts TEXT,
            report_dir TEXT,
            error TEXT
        )",
        "CREATE INDEX recon_runs_job_started ON recon_runs (job, started_at)",
        "CREATE INDEX recon_runs_started ON recon_runs (started_at)",
        "CREATE TABLE recon_backfill_items (
            plan_id TEXT NOT NULL,
            job TEXT NOT NULL,
            external_id TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
            status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded')),
            attempts BIGINT NOT NULL DEFAULT 0,
            last_error TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, external_id)
        )",
        "CREATE INDEX recon_backfill_items_job_status ON recon_backfill_items (job, status)",
        "CREATE TABLE recon_discrepancies (
            job TEXT NOT NULL,
            class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
            external_id TEXT NOT NULL,
            first_seen_run TEXT NOT NULL,
            first_seen_at TEXT NOT NULL,
            last_seen_run TEXT NOT NULL,
            last_seen_at TEXT NOT NULL,
            resolved_at TEXT,
            PRIMARY KEY (job, class, external_id)
        )",
        "CREATE TABLE recon_locks (
            job TEXT NOT NULL PRIMARY KEY,
            owner TEXT NOT NULL,
            acquired_at TEXT NOT NULL,
            heartbeat_at TEXT NOT NULL
        )",
    ],
}, Step {
    version: 2,
    name: "reviewed backfill plans (recon run --dry-run) with their digests",
    sqlite: &[
        "CREATE TABLE recon_plans (
            id TEXT NOT NULL PRIMARY KEY,
            job TEXT NOT NULL,
            window_start TEXT NOT NULL,
            window_end TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            items INTEGER NOT NULL,
            source_records INTEGER NOT NULL,
            read_at TEXT NOT NULL,
            created_at TEXT NOT NULL
        )",
    ],
    postgres: &[
        "CREATE TABLE recon_plans (
            id TEXT NOT NULL PRIMARY KEY,
            job TEXT NOT NULL,
            window_start TEXT NOT NULL,
            window_end TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            items BIGINT NOT NULL,
            source_records BIGINT NOT NULL,
            read_at TEXT NOT NULL,
            created_at TEXT NOT NULL
        )",
    ],
}, Step {
    version: 3,
    name: "unknown backfill outcomes (connection lost mid-write); run owners",
    sqlite: &[
        "CREATE TABLE recon_backfill_items_v3 (
            plan_id TEXT NOT NULL,
            job TEXT NOT NULL,
            external_id TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
            status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown')),
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, external_id)
        )",
        "INSERT INTO recon_backfill_items_v3 (plan_id, job, external_id, action, status, attempts, last_error, updated_at) \
         SELECT plan_id, job, external_id, action, status, attempts, last_error, updated_at FROM recon_backfill_items",
        "DROP TABLE recon_backfill_items",
        "ALTER TABLE recon_backfill_items_v3 RENAME TO recon_backfill_items",
        "CREATE INDEX recon_backfill_items_job_status ON recon_backfill_items (job, status)",
        "ALTER TABLE recon_runs ADD COLUMN owner TEXT",
    ],
    postgres: &[
        "ALTER TABLE recon_backfill_items DROP CONSTRAINT recon_backfill_items_status_check",
        "ALTER TABLE recon_backfill_items ADD CONSTRAINT recon_backfill_items_status_check \
         CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown'))",
        "ALTER TABLE recon_runs ADD COLUMN owner TEXT",
    ],
}, Step {
    version: 4,
    name: "ledger: status updates touch no index (only unknown items are indexed by job)",
    sqlite: &[
        "DROP INDEX recon_backfill_items_job_status",
        "CREATE INDEX recon_backfill_items_unknown ON recon_backfill_items (job) WHERE status = 'unknown'",
    ],
    postgres: &[
        "DROP INDEX recon_backfill_items_job_status",
        "CREATE INDEX recon_backfill_items_unknown ON recon_backfill_items (job) WHERE status = 'unknown'",
    ],
}, Step {
    version: 5,
    name: "SQLite: ledger and history clustered by their keys (WITHOUT ROWID)",
    // One b-tree per table instead of a rowid table plus its key index:
    // each planned item, outcome and sighting writes half the pages.
    sqlite: &[
        "CREATE TABLE recon_backfill_items_v5 (
            plan_id TEXT NOT NULL,
            job TEXT NOT NULL,
            external_id TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
            status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown')),
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (plan_id, external_id)
        ) WITHOUT ROWID",
        "INSERT INTO recon_backfill_items_v5 SELECT plan_id, job, external_id, action, status, attempts, last_error, updated_at FROM recon_backfill_items",
        "DROP TABLE recon_backfill_items",
        "ALTER TABLE recon_backfill_items_v5 RENAME TO recon_backfill_items",
        "CREATE INDEX recon_backfill_items_unknown ON recon_backfill_items (job) WHERE status = 'unknown'",
        "CREATE TABLE recon_discrepancies_v5 (
            job TEXT NOT NULL,
            class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
            external_id TEXT NOT NULL,
            first_seen_run TEXT NOT NULL,
            first_seen_at TEXT NOT NULL,
            last_seen_run TEXT NOT NULL,
            last_seen_at TEXT NOT NULL,
            resolved_at TEXT,
            PRIMARY KEY (job, class, external_id)
        ) WITHOUT ROWID",
        "INSERT INTO recon_discrepancies_v5 SELECT job, class, external_id, first_seen_run, first_seen_at, last_seen_run, last_seen_at, resolved_at FROM recon_discrepancies",
        "DROP TABLE recon_discrepancies",
        "ALTER TABLE recon_discrepancies_v5 RENAME TO recon_discrepancies",
    ],
    postgres: &[],
}];

/// The schema version this build writes.
pub(crate) fn latest() -> i64 {
    STEPS.last().map_or(0, |s| s.version)
}

/// Brings the schema up to date; see the module docs.
pub(crate) async fn run(pool: &AnyPool, backend: Backend, display: &str) -> Result<(), StateError> {
    let fail = |what: &str, e: sqlx::Error| StateError::Migrate {
        url: display.to_string(),
        message: format!("{what}: {e}"),
    };
    let mut tx = match backend {
        Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
        Backend::Postgres => pool.begin().await,
    }
    .map_err(|e| fail("starting the migration transaction", e))?;
    if backend == Backend::Postgres {
        // Serialises concurrent migrations, including the CREATE TABLE IF
        // NOT EXISTS below (which PostgreSQL does not make race-free).
        sqlx::query("SELECT COUNT(*) FROM (SELECT pg_advisory_xact_lock($1)) AS l")
            .bind(stable_hash("recon:schema-migrations"))
            .execute(&mut *tx)
            .await
            .map_err(|e| fail("waiting for the migration lock", e))?;
    }
    let version_ddl = match backend {
        Backend::Sqlite => {
            "CREATE TABLE IF NOT EXISTS recon_schema_version (
                version INTEGER NOT NULL PRIMARY KEY,
                name TEXT NOT NULL,
                applied_at TEXT NOT NULL
            )"
        }
        Backend::Postgres => {
            "CREATE TABLE IF NOT EXISTS recon_schema_version (
                version BIGINT NOT NULL PRIMARY KEY,
                name TEXT NOT NULL,
                applied_at TEXT NOT NULL
            )"
        }
    };
    sqlx::query(version_ddl)
        .execute(&mut *tx)
        .await
        .map_err(|e| fail("creating recon_schema_version", e))?;
    let current: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) FROM recon_schema_version")
        .fetch_one(&mut *tx)
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| fail("reading the schema version", e))?;
    if current > latest() {
        return Err(StateError::Migrate {
            url: display.to_string(),
            message: format!(
                "the database is at schema version {current}, newer than this recon understands ({}); \
                 upgrade recon, or point it at another state database",
                latest()
            ),
        });
    }
    let now = ts_text(Timestamp::now());
    for step in STEPS.iter().filter(|s| s.version > current) {
        let statements = match backend {
            Backend::Sqlite => step.sqlite,
            Backend::Postgres => step.postgres,
        };
        for sql in statements {
            sqlx::query(sql)
                .execute(&mut *tx)
                .await
                .map_err(|e| fail(&format!("schema step {} ({})", step.version, step.name), e))?;
        }
        sqlx::query(
            "INSERT INTO recon_schema_version (version, name, applied_at) VALUES ($1, $2, $3)",
        )
        .bind(step.version)
        .bind(step.name)
        .bind(now.clone())
        .execute(&mut *tx)
        .await
        .map_err(|e| fail("recording the schema version", e))?;
        tracing::debug!(
            message = "Applied a state schema step.",
            version = step.version,
            name = step.name
        );
    }
    tx.commit()
        .await
        .map_err(|e| fail("committing the schema", e))
}
