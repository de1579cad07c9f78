-- schema at migration 16
-- The PostgreSQL state schema as the migrations in state/migrations/postgres/
-- leave it, for a new store in one step (see state/src/migrate.rs): pg_dump
-- --schema-only --no-owner --no-privileges of a store migrated one migration
-- at a time, without its SET lines, sqlx's own table and the qualifier
-- `public.` (a store may live in any schema). Generated; never edit it.
-- After adding a migration, write it again with
--   RECON_WRITE_SCHEMA=1 cargo test -p recon-state squashed
-- (pg_dump on PATH) and rebuild (until then new stores run the migrations
-- one by one, and squashed_postgres_schema_is_what_the_migrations_make fails).

CREATE FUNCTION recon_discrepancies_reopened() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO recon_discrepancy_streaks (job, external_id, class, first_seen_at,
        resolved_run, resolved_at)
    VALUES (OLD.job, OLD.external_id, OLD.class, OLD.first_seen_at,
        COALESCE(OLD.resolved_run, ''), OLD.resolved_at)
    ON CONFLICT (job, external_id, class, first_seen_at) DO NOTHING;
    RETURN NEW;
END
$$;

CREATE TABLE recon_ledger_batches (
    plan_id text NOT NULL,
    seq bigint NOT NULL,
    job text NOT NULL,
    action text NOT NULL,
    status text NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    updated_at text NOT NULL,
    items bigint NOT NULL,
    keys text NOT NULL,
    CONSTRAINT recon_ledger_batches_action_check CHECK ((action = ANY (ARRAY['insert'::text, 'update'::text]))),
    CONSTRAINT recon_ledger_batches_status_check CHECK ((status = ANY (ARRAY['planned'::text, 'applied'::text, 'failed'::text, 'superseded'::text, 'unknown'::text])))
);

CREATE TABLE recon_ledger_items (
    plan_id text NOT NULL,
    job text NOT NULL,
    external_id text NOT NULL,
    action text NOT NULL,
    status text NOT NULL,
    attempts bigint DEFAULT 0 NOT NULL,
    last_error text,
    updated_at text NOT NULL,
    CONSTRAINT recon_backfill_items_action_check CHECK ((action = ANY (ARRAY['insert'::text, 'update'::text]))),
    CONSTRAINT recon_backfill_items_status_check CHECK ((status = ANY (ARRAY['planned'::text, 'applied'::text, 'failed'::text, 'superseded'::text, 'unknown'::text])))
)
WITH (fillfactor='60');

CREATE VIEW recon_backfill_items AS
 SELECT recon_ledger_items.plan_id,
    recon_ledger_items.job,
    recon_ledger_items.external_id,
    recon_ledger_items.action,
    recon_ledger_items.status,
    recon_ledger_items.attempts,
    recon_ledger_items.last_error,
    recon_ledger_items.updated_at
   FROM recon_ledger_items
UNION ALL
 SELECT b.plan_id,
    b.job,
    k.value AS external_id,
    b.action,
    b.status,
    b.attempts,
    NULL::text AS last_error,
    b.updated_at
   FROM (recon_ledger_batches b
     CROSS JOIN LATERAL json_array_elements_text((b.keys)::json) k(value))
  WHERE (NOT (EXISTS ( SELECT 1
           FROM recon_ledger_items i
          WHERE ((i.plan_id = b.plan_id) AND (i.external_id = k.value)))));

CREATE TABLE recon_connector_secrets (
    name text NOT NULL,
    value text NOT NULL,
    updated_at text NOT NULL
);

CREATE TABLE recon_discrepancies (
    job text NOT NULL,
    class text NOT NULL,
    external_id text NOT NULL,
    first_seen_run text NOT NULL,
    first_seen_at text NOT NULL,
    last_seen_run text NOT NULL,
    last_seen_at text NOT NULL,
    resolved_at text,
    resolved_run text,
    CONSTRAINT recon_discrepancies_class_check CHECK ((class = ANY (ARRAY['gap'::text, 'orphan'::text, 'mismatch'::text, 'duplicate'::text])))
)
WITH (fillfactor='45');

CREATE TABLE recon_discrepancy_streaks (
    job text NOT NULL,
    external_id text NOT NULL,
    class text NOT NULL,
    first_seen_at text NOT NULL,
    resolved_run text NOT NULL,
    resolved_at text NOT NULL,
    CONSTRAINT recon_discrepancy_streaks_class_check CHECK ((class = ANY (ARRAY['gap'::text, 'orphan'::text, 'mismatch'::text, 'duplicate'::text])))
);

CREATE TABLE recon_history_marks (
    job text NOT NULL,
    run_id text NOT NULL,
    seen_at text NOT NULL
);

CREATE TABLE recon_locks (
    job text NOT NULL,
    owner text NOT NULL,
    acquired_at text NOT NULL,
    heartbeat_at text NOT NULL
);

CREATE TABLE recon_plans (
    id text NOT NULL,
    job text NOT NULL,
    window_start text NOT NULL,
    window_end text NOT NULL,
    sha256 text NOT NULL,
    items bigint NOT NULL,
    source_records bigint NOT NULL,
    read_at text NOT NULL,
    created_at text NOT NULL
);

CREATE TABLE recon_run_totals (
    run_id text NOT NULL,
    currency text NOT NULL,
    source_records bigint NOT NULL,
    source_minor text NOT NULL,
    target_records bigint NOT NULL,
    target_minor text NOT NULL
);

CREATE TABLE recon_runs (
    id text NOT NULL,
    job text NOT NULL,
    window_start text NOT NULL,
    window_end text NOT NULL,
    started_at text NOT NULL,
    finished_at text,
    status text NOT NULL,
    dry_run bigint NOT NULL,
    counts text,
    report_dir text,
    error text,
    owner text,
    summary text,
    CONSTRAINT recon_runs_dry_run_check CHECK ((dry_run = ANY (ARRAY[(0)::bigint, (1)::bigint]))),
    CONSTRAINT recon_runs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'clean'::text, 'discrepancies'::text, 'failed'::text, 'crashed'::text])))
);

CREATE TABLE recon_unknown_items (
    plan_id text NOT NULL,
    job text NOT NULL,
    external_id text NOT NULL
);

CREATE TABLE recon_webhook_deliveries (
    job text NOT NULL,
    external_id text NOT NULL,
    idempotency_key text NOT NULL,
    plan_id text NOT NULL,
    status text NOT NULL,
    verified text NOT NULL,
    http_status bigint,
    attempts bigint NOT NULL,
    last_error text,
    updated_at text NOT NULL,
    CONSTRAINT recon_webhook_deliveries_status_check CHECK ((status = ANY (ARRAY['planned'::text, 'delivered'::text, 'already_done'::text, 'failed'::text]))),
    CONSTRAINT recon_webhook_deliveries_verified_check CHECK ((verified = ANY (ARRAY['no'::text, 'created'::text, 'not_created'::text])))
);

ALTER TABLE ONLY recon_ledger_items
    ADD CONSTRAINT recon_backfill_items_pkey PRIMARY KEY (plan_id, external_id);

ALTER TABLE ONLY recon_connector_secrets
    ADD CONSTRAINT recon_connector_secrets_pkey PRIMARY KEY (name);

ALTER TABLE ONLY recon_discrepancies
    ADD CONSTRAINT recon_discrepancies_pkey PRIMARY KEY (job, class, external_id);

ALTER TABLE ONLY recon_discrepancy_streaks
    ADD CONSTRAINT recon_discrepancy_streaks_pkey PRIMARY KEY (job, external_id, class, first_seen_at);

ALTER TABLE ONLY recon_history_marks
    ADD CONSTRAINT recon_history_marks_pkey PRIMARY KEY (job);

ALTER TABLE ONLY recon_ledger_batches
    ADD CONSTRAINT recon_ledger_batches_pkey PRIMARY KEY (plan_id, seq);

ALTER TABLE ONLY recon_locks
    ADD CONSTRAINT recon_locks_pkey PRIMARY KEY (job);

ALTER TABLE ONLY recon_plans
    ADD CONSTRAINT recon_plans_pkey PRIMARY KEY (id);

ALTER TABLE ONLY recon_run_totals
    ADD CONSTRAINT recon_run_totals_pkey PRIMARY KEY (run_id, currency);

ALTER TABLE ONLY recon_runs
    ADD CONSTRAINT recon_runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY recon_unknown_items
    ADD CONSTRAINT recon_unknown_items_pkey PRIMARY KEY (plan_id, external_id);

ALTER TABLE ONLY recon_webhook_deliveries
    ADD CONSTRAINT recon_webhook_deliveries_pkey PRIMARY KEY (job, external_id);

CREATE INDEX recon_runs_job_started ON recon_runs USING btree (job, started_at);

CREATE INDEX recon_runs_started ON recon_runs USING btree (started_at);

CREATE INDEX recon_unknown_items_job ON recon_unknown_items USING btree (job);

CREATE TRIGGER recon_discrepancies_reopened BEFORE UPDATE OF first_seen_at ON recon_discrepancies FOR EACH ROW WHEN (((old.resolved_at IS NOT NULL) AND (new.resolved_at IS NULL))) EXECUTE FUNCTION recon_discrepancies_reopened();
