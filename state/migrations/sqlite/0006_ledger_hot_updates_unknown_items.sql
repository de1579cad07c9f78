-- Step 6: ledger outcomes are recorded without touching an index.
-- Released: never edit this file; add a new migration instead.
-- Items of unknown outcome (rare: a connection lost mid-write) are listed
-- in their own small table instead of a partial index on the ledger's
-- status, so that marking an item applied changes no indexed column.

CREATE TABLE recon_unknown_items (
    plan_id TEXT NOT NULL,
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    PRIMARY KEY (plan_id, external_id)
) WITHOUT ROWID;

CREATE INDEX recon_unknown_items_job ON recon_unknown_items (job);

INSERT INTO recon_unknown_items (plan_id, job, external_id)
SELECT plan_id, job, external_id FROM recon_backfill_items WHERE status = 'unknown';

DROP INDEX recon_backfill_items_unknown;
