-- Schema version 5: the indexes of schema version 1 go. Every listing
-- orders by (started_at, run_id) since version 2, so no query reads them,
-- while each status change of every run rewrote an entry in each of them
-- (their key holds updated_at): three pages more in the WAL per change.
DROP INDEX IF EXISTS runs_by_status;
DROP INDEX IF EXISTS runs_by_workflow;
DROP INDEX IF EXISTS runs_by_updated;
