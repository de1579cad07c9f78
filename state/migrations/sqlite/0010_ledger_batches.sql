-- Step 10: the backfill ledger records a write batch in one row.
-- Released: never edit this file; add a new migration instead.
-- Each item was one ledger row, inserted as planned before its write and
-- updated after it: 400,000 row writes for a backfill of 200,000 gaps,
-- more than the target's own. A write batch is now one row: its keys as
-- a JSON array, recorded as planned (committed) before the batch is
-- written and marked once after. An item whose outcome differs from its
-- batch's (failed, unknown, settled later) keeps a row of its own in
-- recon_ledger_items, which wins. recon_backfill_items becomes the view
-- that joins the two, one row per item, as before.

ALTER TABLE recon_backfill_items RENAME TO recon_ledger_items;

CREATE TABLE recon_ledger_batches (
    plan_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    job TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('insert', 'update')),
    status TEXT NOT NULL CHECK (status IN ('planned', 'applied', 'failed', 'superseded', 'unknown')),
    attempts INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL,
    items INTEGER NOT NULL,
    keys TEXT NOT NULL,
    PRIMARY KEY (plan_id, seq)
) WITHOUT ROWID;

CREATE VIEW recon_backfill_items AS
SELECT plan_id, job, external_id, action, status, attempts, last_error, updated_at
FROM recon_ledger_items
UNION ALL
SELECT b.plan_id, b.job, k.value, b.action, b.status, b.attempts, NULL, b.updated_at
FROM recon_ledger_batches AS b, json_each(b.keys) AS k
WHERE NOT EXISTS (
    SELECT 1 FROM recon_ledger_items AS i
    WHERE i.plan_id = b.plan_id AND i.external_id = k.value
);
