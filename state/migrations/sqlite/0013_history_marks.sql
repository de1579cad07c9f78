-- Step 13: a discrepancy that persists is not written again.
-- Released: never edit this file; add a new migration instead.
-- Every run rewrote the history row of every discrepancy it saw again,
-- only to set last_seen_run and last_seen_at: a nightly run over exports
-- with 309,000 open discrepancies spent 1 s on it (SQLite), and PostgreSQL
-- made a new version of each row every night. A run resolves every open
-- discrepancy it does not see, so an open row was always last seen by the
-- latest run that recorded the job's history: that run is now kept once
-- per job, here, in the same transaction as the history. The row's own
-- last_seen_* is set when the row is written (first sighting, reopening)
-- and, when it is resolved, to the run before (this table's row then).
-- For an open row, readers take this table's run (the row's own when the
-- job has none yet: every row was written by every run before step 13).

CREATE TABLE recon_history_marks (
    job TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    seen_at TEXT NOT NULL
);
