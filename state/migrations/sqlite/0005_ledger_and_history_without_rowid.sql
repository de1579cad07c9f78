-- Step 5: SQLite: ledger and history clustered by their keys (WITHOUT ROWID).
-- Released: never edit this file; add a new migration instead.
-- One b-tree per table instead of a rowid table plus its key index: each
-- planned item, outcome and sighting writes half the pages.

CREATE TABLE recon_backfill_items_v5 (
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

INSERT INTO recon_backfill_items_v5 SELECT plan_id, job, external_id, action, status, attempts, last_error, updated_at FROM recon_backfill_items;

DROP TABLE recon_backfill_items;

ALTER TABLE recon_backfill_items_v5 RENAME TO recon_backfill_items;

CREATE INDEX recon_backfill_items_unknown ON recon_backfill_items (job) WHERE status = 'unknown';

CREATE TABLE recon_discrepancies_v5 (
    job TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
    external_id TEXT NOT NULL,
    first_seen_run TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    last_seen_run TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    resolved_at TEXT,
    PRIMARY KEY (job, class, external_id)
) WITHOUT ROWID;

INSERT INTO recon_discrepancies_v5 SELECT job, class, external_id, first_seen_run, first_seen_at, last_seen_run, last_seen_at, resolved_at FROM recon_discrepancies;

DROP TABLE recon_discrepancies;

ALTER TABLE recon_discrepancies_v5 RENAME TO recon_discrepancies;
