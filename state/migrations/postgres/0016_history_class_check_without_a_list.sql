-- Step 16: nothing to do on PostgreSQL.
-- Released: never edit this file; add a new migration instead.
-- On SQLite this step writes the discrepancy history's class check as
-- comparisons instead of an IN list, which SQLite evaluated for every row
-- written (a third of a first run's history insert); PostgreSQL's check
-- costs nothing comparable. The step exists so that both backends have
-- the same migration numbers.

SELECT 1;
