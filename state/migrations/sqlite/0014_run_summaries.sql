-- Step 14: a summary per run.
-- Released: never edit this file; add a new migration instead.
-- Each run's summary (summary.json), as JSON text: what `recon runs`, the
-- report page, metrics and notifications read instead of re-reading files.
-- NULL for a run still running, one that failed before its summary, and
-- every run before this migration.
ALTER TABLE recon_runs ADD COLUMN summary TEXT;
