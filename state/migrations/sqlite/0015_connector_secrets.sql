-- Step 15: secrets connectors keep between runs.
-- Released: never edit this file; add a new migration instead.
-- One row per name: what a connector must remember from one run to the
-- next, such as the newest OAuth refresh token QuickBooks Online issued
-- (it rotates on every refresh, and the one configured stops working).
-- `value` is opaque to the store: the connector encrypts it first, so
-- no token is ever stored in clear.
CREATE TABLE recon_connector_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
