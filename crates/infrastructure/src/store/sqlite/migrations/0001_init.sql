-- Schema version 1 of the SQLite run store (see docs/storage.md).

-- One row per run. status, workflow, started_at and updated_at are copied
-- from the run's last snapshot, so listing and querying runs reads this
-- table and its indexes only. Times are Unix milliseconds.
CREATE TABLE runs (
    run_id      TEXT PRIMARY KEY NOT NULL,
    created_at  INTEGER NOT NULL,
    status      TEXT,
    workflow    TEXT,
    started_at  INTEGER,
    updated_at  INTEGER
);
CREATE INDEX runs_by_status ON runs (status, updated_at);
CREATE INDEX runs_by_workflow ON runs (workflow, updated_at);
CREATE INDEX runs_by_updated ON runs (updated_at);

-- The logs: one row per event, its JSON exactly as the file store writes
-- the line (without the newline). type and node_id are copies, for queries.
CREATE TABLE events (
    run_id    TEXT NOT NULL,
    "offset"  INTEGER NOT NULL,
    type      TEXT NOT NULL,
    node_id   TEXT,
    json      TEXT NOT NULL,
    PRIMARY KEY (run_id, "offset")
);

-- The last snapshot of each run, as the file store writes snapshot.json.
CREATE TABLE snapshots (
    run_id  TEXT PRIMARY KEY NOT NULL,
    json    TEXT NOT NULL
);

-- One row, bumped by a flush: a commit that makes SQLite sync the WAL (with
-- synchronous=FULL for that commit), which makes every earlier commit
-- durable too.
CREATE TABLE sync_marks (
    id  INTEGER PRIMARY KEY,
    n   INTEGER NOT NULL
);
INSERT INTO sync_marks (id, n) VALUES (1, 0);
