-- Schema version 6: a run's one writer holds a lock on one byte of the
-- `<db>-writers` file, the byte its row's lock_slot names, instead of a
-- lock file per run; its record (`PID:START:PIDNS`, see docs/storage.md)
-- is the writer column while it holds the run. Upgrade every process that
-- writes a database together: an older awr locks the files of
-- `<db>-locks/` instead.
ALTER TABLE runs ADD COLUMN lock_slot INTEGER;
ALTER TABLE runs ADD COLUMN writer TEXT;
UPDATE runs SET lock_slot = rowid;
-- The last slot given out. Slots only grow: a deleted run's byte, which a
-- process it started may still hold for a moment, is never given again.
CREATE TABLE writer_slots (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    last  INTEGER NOT NULL
);
INSERT INTO writer_slots (id, last) SELECT 1, coalesce(max(lock_slot), 0) FROM runs;
