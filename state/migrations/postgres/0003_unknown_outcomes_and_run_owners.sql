-- Step 3: unknown backfill outcomes (connection lost mid-write); run owners.
-- Released: never edit this file; add a new migration instead.

ALTER TABLE recon_backfill_items DROP CONSTRAINT recon_backfill_items_status_check;

ALTER TABLE recon_backfill_items ADD CONSTRAINT recon_backfill_items_status_check
CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown'));

ALTER TABLE recon_runs ADD COLUMN owner TEXT;
