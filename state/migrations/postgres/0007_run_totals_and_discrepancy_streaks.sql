-- Step 7: each run's money totals per currency (report.html charts the
-- money delta over a job's runs) and each discrepancy's closed streaks
-- (recon history tells one ID's whole story, not only its latest streak,
-- which recon_discrepancies overwrites when the ID comes back).
-- Released: never edit this file; add a new migration instead.
-- Sums are exact minor units as decimal text: a sum of 64-bit amounts can
-- exceed 64 bits. currency is the ISO 4217 code, '' for records without
-- an amount. A streak is written once, by the run that finds it resolved,
-- so open discrepancies cost nothing here however long they stay open.

CREATE TABLE recon_run_totals (
    run_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    source_records BIGINT NOT NULL,
    source_minor TEXT NOT NULL,
    target_records BIGINT NOT NULL,
    target_minor TEXT NOT NULL,
    PRIMARY KEY (run_id, currency)
);

CREATE TABLE recon_discrepancy_streaks (
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
    first_seen_at TEXT NOT NULL,
    resolved_run TEXT NOT NULL,
    resolved_at TEXT NOT NULL,
    PRIMARY KEY (job, external_id, class, first_seen_at)
);
