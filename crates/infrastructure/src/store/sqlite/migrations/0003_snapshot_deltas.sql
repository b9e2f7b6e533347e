-- Schema version 3: snapshot deltas (see docs/events.md, "Snapshot deltas").
-- What a run's state gained since its snapshot, one row a delta, read in
-- the order of `last_offset`; saving a snapshot deletes the run's rows.
CREATE TABLE snapshot_deltas (
    run_id       TEXT NOT NULL,
    last_offset  INTEGER NOT NULL,
    json         TEXT NOT NULL,
    PRIMARY KEY (run_id, last_offset)
);
