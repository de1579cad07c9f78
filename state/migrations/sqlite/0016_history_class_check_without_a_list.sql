-- Step 16: the discrepancy history's class check written as comparisons.
-- Released: never edit this file; add a new migration instead.
-- SQLite evaluated `class IN ('gap', 'orphan', 'mismatch', 'duplicate')`
-- for every row a statement wrote: a third of a first run's history
-- insert (61,800 rows of the 2M bench files: 88 ms with the list, 60 ms
-- with these comparisons, 58 ms with no check at all). The same rule:
-- class is NOT NULL, so the comparisons accept exactly the listed four.
-- SQLite cannot alter a check in place: the table is rebuilt (the
-- documented procedure, https://www.sqlite.org/lang_altertable.html
-- section 7), its rows copied in key order, and its one trigger made
-- again as step 12 made it. No view or foreign key names the table.

CREATE TABLE recon_discrepancies_v16 (
    job TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class = 'gap' OR class = 'orphan' OR class = 'mismatch' OR class = 'duplicate'),
    external_id TEXT NOT NULL,
    first_seen_run TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    last_seen_run TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    resolved_at TEXT,
    resolved_run TEXT,
    PRIMARY KEY (job, class, external_id)
) WITHOUT ROWID;

INSERT INTO recon_discrepancies_v16 (job, class, external_id, first_seen_run, first_seen_at,
    last_seen_run, last_seen_at, resolved_at, resolved_run)
SELECT job, class, external_id, first_seen_run, first_seen_at, last_seen_run, last_seen_at,
    resolved_at, resolved_run
FROM recon_discrepancies ORDER BY job, class, external_id;

DROP TABLE recon_discrepancies;

ALTER TABLE recon_discrepancies_v16 RENAME TO recon_discrepancies;

CREATE TRIGGER recon_discrepancies_reopened
BEFORE UPDATE OF first_seen_at ON recon_discrepancies
WHEN OLD.resolved_at IS NOT NULL AND NEW.resolved_at IS NULL
BEGIN
    INSERT INTO recon_discrepancy_streaks (job, external_id, class, first_seen_at,
        resolved_run, resolved_at)
    VALUES (OLD.job, OLD.external_id, OLD.class, OLD.first_seen_at,
        COALESCE(OLD.resolved_run, ''), OLD.resolved_at)
    ON CONFLICT (job, external_id, class, first_seen_at) DO NOTHING;
END;
