-- Step 11: nothing to do on SQLite.
-- Released: never edit this file; add a new migration instead.
-- On PostgreSQL this step leaves room on the discrepancy history's pages
-- for a new version of every row (fillfactor 45); SQLite updates rows in
-- place. The step exists so that both backends have the same migration
-- numbers.

SELECT 1;
