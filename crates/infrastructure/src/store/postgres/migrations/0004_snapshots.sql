-- Snapshots in a table of their own: every append updates its run's row
-- (`next_offset`), and PostgreSQL writes a whole new version of the row it
-- updates, so a snapshot kept in that row was written again, to the table
-- and to the WAL, by every append.
CREATE TABLE awr_snapshots (
    run_id      uuid PRIMARY KEY REFERENCES awr_runs (run_id) ON DELETE CASCADE,
    -- The snapshot's JSON text, and the offset it folds to.
    body        text NOT NULL,
    last_offset bigint NOT NULL
);

INSERT INTO awr_snapshots (run_id, body, last_offset)
    SELECT run_id, snapshot, snapshot_offset FROM awr_runs WHERE snapshot IS NOT NULL;

ALTER TABLE awr_runs DROP COLUMN snapshot, DROP COLUMN snapshot_offset;
