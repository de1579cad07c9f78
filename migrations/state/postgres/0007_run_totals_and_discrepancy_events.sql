-- Step 7: each run's money totals per currency (report.html charts the
-- money delta over a job's runs) and each discrepancy's transitions
-- (recon history tells one ID's story: every time it appeared or was
-- resolved, not only its latest streak).
-- Released: never edit this file; add a new migration instead.
-- Sums are exact minor units as decimal text: a sum of 64-bit amounts can
-- exceed 64 bits. currency is the ISO 4217 code, '' for records without
-- an amount. Events are written only on a change (seen anew, resolved), so
-- a discrepancy open for many runs costs two rows, not one per run.

CREATE TABLE recon_run_totals (
    run_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    source_records BIGINT NOT NULL,
    source_minor TEXT NOT NULL,
    target_records BIGINT NOT NULL,
    target_minor TEXT NOT NULL,
    PRIMARY KEY (run_id, currency)
);

CREATE TABLE recon_discrepancy_events (
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('gap', 'orphan', 'mismatch', 'duplicate')),
    run_id TEXT NOT NULL,
    at TEXT NOT NULL,
    event TEXT NOT NULL CHECK (event IN ('seen', 'resolved')),
    PRIMARY KEY (job, external_id, run_id, class)
);
