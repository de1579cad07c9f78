-- Step 9: the discrepancy history is updated in place.
-- Released: never edit this file; add a new migration instead.
-- PostgreSQL leaves room on the history's pages for in-place updates
-- (fillfactor 60). SQLite's WITHOUT ROWID b-tree has no such setting:
-- nothing changes here; the step keeps both backends' versions paired.

SELECT 1;
