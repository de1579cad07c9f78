-- Step 2: reviewed backfill plans (recon run --dry-run) with their digests.
-- Released: never edit this file; add a new migration instead.

CREATE TABLE recon_plans (
    id TEXT NOT NULL PRIMARY KEY,
    job TEXT NOT NULL,
    window_start TEXT NOT NULL,
    window_end TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    items BIGINT NOT NULL,
    source_records BIGINT NOT NULL,
    read_at TEXT NOT NULL,
    created_at TEXT NOT NULL
);
