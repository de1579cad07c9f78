-- Step 9: the discrepancy history is updated in place.
-- Released: never edit this file; add a new migration instead.
-- Every run rewrites the history rows it sees (last seen) and resolves the
-- ones it does not (resolved_at); no index covers those columns, so
-- PostgreSQL can update a row on its own page (a HOT update: no new index
-- entry) when the page has room, which fillfactor 60 leaves on new pages.
-- A rerun resolving 200,000 discrepancies spent 2.6 s in that UPDATE.

ALTER TABLE recon_discrepancies SET (fillfactor = 60);
