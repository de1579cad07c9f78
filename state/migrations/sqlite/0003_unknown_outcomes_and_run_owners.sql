-- Step 3: unknown backfill outcomes (connection lost mid-write); run owners.
-- Released: never edit this file; add a new migration instead.
-- SQLite cannot change a CHECK constraint: the ledger is rebuilt.

CREATE TABLE recon_backfill_items_v3 (
    plan_id TEXT NOT NULL,
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
    status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (plan_id, external_id)
);

INSERT INTO recon_backfill_items_v3 (plan_id, job, external_id, action, status, attempts, last_error, updated_at)
SELECT plan_id, job, external_id, action, status, attempts, last_error, updated_at FROM recon_backfill_items;

DROP TABLE recon_backfill_items;

ALTER TABLE recon_backfill_items_v3 RENAME TO recon_backfill_items;

CREATE INDEX recon_backfill_items_job_status ON recon_backfill_items (job, status);

ALTER TABLE recon_runs ADD COLUMN owner TEXT;
