-- Step 1: runs, backfill ledger, discrepancy history, run locks.
-- Released: never edit this file; add a new migration instead.

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
);

CREATE INDEX recon_runs_job_started ON recon_runs (job, started_at);

CREATE INDEX recon_runs_started ON recon_runs (started_at);

CREATE TABLE recon_backfill_items (
    plan_id TEXT NOT NULL,
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
    status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (plan_id, external_id)
);

CREATE INDEX recon_backfill_items_job_status ON recon_backfill_items (job, status);

CREATE TABLE recon_discrepancies (
    job TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
    external_id TEXT NOT NULL,
    first_seen_run TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    last_seen_run TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    resolved_at TEXT,
    PRIMARY KEY (job, class, external_id)
);

CREATE TABLE recon_locks (
    job TEXT NOT NULL PRIMARY KEY,
    owner TEXT NOT NULL,
    acquired_at TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL
);
