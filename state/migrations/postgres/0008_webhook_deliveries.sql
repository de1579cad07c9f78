-- Step 8: deliveries of `backfill.via = "webhook"` (issue 14).
-- Released: never edit this file; add a new migration instead.
-- One row per job and external ID: recorded `planned` before the POST, then
-- `delivered` (2xx), `already_done` (409) or `failed` (another 4xx, or
-- retries exhausted). A delivered or already_done item is never sent
-- again; a planned one (the process died mid-delivery) is sent again on the
-- next run with the same idempotency key. `verified` is what a key lookup in
-- the target found after the delivery: `no` (not checked yet), `created`,
-- `not_created` (the handler acknowledged but did not create the record).

CREATE TABLE recon_webhook_deliveries (
    job TEXT NOT NULL,
    external_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    plan_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('planned', 'delivered', 'already_done', 'failed')),
    verified TEXT NOT NULL CHECK (verified IN ('no', 'created', 'not_created')),
    http_status BIGINT,
    attempts BIGINT NOT NULL,
    last_error TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (job, external_id)
);
