//! Test fixture: the schema steps of the hand-written runner that preceded
//! the sqlx migrations, verbatim, and a store built the way that runner
//! built it (`recon_schema_version` plus the steps' DDL). Tests use it to
//! prove that such a store upgrades in place and that the migration files
//! mean the same as these steps. Never used outside tests.

use sqlx::{AnyConnection, Connection};

use crate::store::normalize_url;
use crate::Backend;

/// One schema step of the old runner.
pub(crate) struct Step {
    /// Its number; steps were applied in order.
    pub version: i64,
    /// What it does, as kept in `recon_schema_version`.
    pub name: &'static str,
    /// Its statements on SQLite.
    pub sqlite: &'static [&'static str],
    /// Its statements on PostgreSQL.
    pub postgres: &'static [&'static str],
}

/// Every step of the old runner, oldest first, exactly as released.
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

/// The old runner's version table, per backend, exactly as it created it.
fn version_table(backend: Backend) -> &'static str {
    match backend {
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
    }
}

/// Builds at `url` the store the old runner left after steps 1 to
/// `through`: the steps' DDL in one transaction with their rows in
/// `recon_schema_version` (applied at `2026-11-0Nt00:00:00Z` for step N).
/// Returns an open connection to fill it with data.
pub(crate) async fn create(url: &str, through: i64) -> AnyConnection {
    let backend = normalize_url(url).expect("a state URL").0;
    let mut conn = connect(url).await;
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query(version_table(backend))
        .execute(&mut *tx)
        .await
        .expect("recon_schema_version");
    for step in STEPS.iter().filter(|s| s.version <= through) {
        let statements = match backend {
            Backend::Sqlite => step.sqlite,
            Backend::Postgres => step.postgres,
        };
        for sql in statements {
            sqlx::query(sql)
                .execute(&mut *tx)
                .await
                .unwrap_or_else(|e| panic!("step {}: {sql}: {e}", step.version));
        }
        sqlx::query(
            "INSERT INTO recon_schema_version (version, name, applied_at) VALUES ($1, $2, $3)",
        )
        .bind(step.version)
        .bind(step.name)
        .bind(format!("2026-11-{:02}T00:00:00.000000000Z", step.version))
        .execute(&mut *tx)
        .await
        .expect("recording the step");
    }
    tx.commit().await.expect("commit");
    conn
}

/// A plain connection to the store at `url`, outside [`StateStore`].
///
/// [`StateStore`]: crate::StateStore
pub(crate) async fn connect(url: &str) -> AnyConnection {
    sqlx::any::install_default_drivers();
    let (_, url) = normalize_url(url).expect("a state URL");
    AnyConnection::connect(&url).await.expect("connect")
}
