-- Schema version 6: a run's one writer holds a lock on one byte of the
-- `<db>-writers` file, the byte its row's lock_slot names, instead of a
-- lock file per run; its record (`PID:START:PIDNS`, see docs/storage.md)
-- is the writer column. Upgrade every process that writes a database
-- together: an older awr locks the files of `<db>-locks/` instead.
ALTER TABLE runs ADD COLUMN lock_slot INTEGER;
ALTER TABLE runs ADD COLUMN writer TEXT;
UPDATE runs SET lock_slot = rowid;
-- One run a byte; and the largest in use is where the next one goes.
CREATE UNIQUE INDEX runs_by_lock_slot ON runs (lock_slot);
