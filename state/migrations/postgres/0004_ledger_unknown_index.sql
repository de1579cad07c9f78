-- Step 4: ledger status updates touch no index (only unknown items are
-- indexed by job).
-- Released: never edit this file; add a new migration instead.

DROP INDEX recon_backfill_items_job_status;

CREATE INDEX recon_backfill_items_unknown ON recon_backfill_items (job) WHERE status = 'unknown';
