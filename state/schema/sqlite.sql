-- schema at migration 16
-- The SQLite state schema as the migrations in state/migrations/sqlite/
-- leave it: every object of sqlite_master, in creation order, as SQLite
-- records it. A new store is created from this file in one step (see
-- state/src/migrate.rs). Generated from the migrations; never edit it.
-- After adding a migration, write it again with
--   RECON_WRITE_SCHEMA=1 cargo test -p recon-state squashed
-- and rebuild (until then new stores run the migrations one by one, and
-- the test squashed_sqlite_schema_is_what_the_migrations_make fails).

CREATE TABLE recon_runs (
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
, owner TEXT, summary TEXT);

CREATE INDEX recon_runs_job_started ON recon_runs (job, started_at);

CREATE INDEX recon_runs_started ON recon_runs (started_at);

CREATE TABLE recon_locks (
    job TEXT NOT NULL PRIMARY KEY,
    owner TEXT NOT NULL,
    acquired_at TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL
);

CREATE TABLE recon_plans (
    id TEXT NOT NULL PRIMARY KEY,
    job TEXT NOT NULL,
    window_start TEXT NOT NULL,
    window_end TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    items INTEGER NOT NULL,
    source_records INTEGER NOT NULL,
    read_at TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE "recon_ledger_items" (
    plan_id TEXT NOT NULL,
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
    status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (plan_id, external_id)
) WITHOUT ROWID;

CREATE TABLE recon_unknown_items (
    plan_id TEXT NOT NULL,
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    PRIMARY KEY (plan_id, external_id)
) WITHOUT ROWID;

CREATE INDEX recon_unknown_items_job ON recon_unknown_items (job);

CREATE TABLE recon_run_totals (
    run_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    source_records INTEGER NOT NULL,
    source_minor TEXT NOT NULL,
    target_records INTEGER NOT NULL,
    target_minor TEXT NOT NULL,
    PRIMARY KEY (run_id, currency)
) WITHOUT ROWID;

CREATE TABLE recon_discrepancy_streaks (
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
    first_seen_at TEXT NOT NULL,
    resolved_run TEXT NOT NULL,
    resolved_at TEXT NOT NULL,
    PRIMARY KEY (job, external_id, class, first_seen_at)
) WITHOUT ROWID;

CREATE TABLE recon_webhook_deliveries (
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    plan_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('planned', 'delivered', 'already_done', 'failed')),
    verified TEXT NOT NULL CHECK (verified IN ('no', 'created', 'not_created')),
    http_status INTEGER,
    attempts INTEGER NOT NULL,
    last_error TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (job, external_id)
) WITHOUT ROWID;

CREATE TABLE recon_ledger_batches (
    plan_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    job TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
    status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown')),
    attempts INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL,
    items INTEGER NOT NULL,
    keys TEXT NOT NULL,
    PRIMARY KEY (plan_id, seq)
) WITHOUT ROWID;

CREATE VIEW recon_backfill_items AS
SELECT plan_id, job, external_id, action, status, attempts, last_error, updated_at
FROM recon_ledger_items
UNION ALL
SELECT b.plan_id, b.job, k.value, b.action, b.status, b.attempts, NULL, b.updated_at
FROM recon_ledger_batches AS b, json_each(b.keys) AS k
WHERE NOT EXISTS (
    SELECT 1 FROM recon_ledger_items AS i
    WHERE i.plan_id = b.plan_id AND i.external_id = k.value
);

CREATE TABLE recon_history_marks (
    job TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    seen_at TEXT NOT NULL
);

CREATE TABLE recon_connector_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE "recon_discrepancies" (
    job TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class = 'gap' OR class = 'orphan' OR class = 'mismatch' OR class = 'duplicate'),
    external_id TEXT NOT NULL,
    first_seen_run TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    last_seen_run TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    resolved_at TEXT,
    resolved_run TEXT,
    PRIMARY KEY (job, class, external_id)
) WITHOUT ROWID;

CREATE TRIGGER recon_discrepancies_reopened
BEFORE UPDATE OF first_seen_at ON recon_discrepancies
WHEN OLD.resolved_at IS NOT NULL AND NEW.resolved_at IS NULL
BEGIN
    INSERT INTO recon_discrepancy_streaks (job, external_id, class, first_seen_at,
        resolved_run, resolved_at)
    VALUES (OLD.job, OLD.external_id, OLD.class, OLD.first_seen_at,
        COALESCE(OLD.resolved_run, ''), OLD.resolved_at)
    ON CONFLICT (job, external_id, class, first_seen_at) DO NOTHING;
END;

