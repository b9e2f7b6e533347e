-- Schema version 7: a run's events are one range of the `run_events`
-- table. An event's key `id` is its run's lock_slot times 2^32 plus its offset, so a
-- run's rows sit together in the order of its log, and a new run's rows
-- and type index entries at the end of their trees: an append rewrites
-- the last pages of two trees instead of a page at a random place in each
-- of three (the rows, the (run_id, offset) key, the type index), about a
-- third fewer pages in the WAL. `run_id` and `offset` stay, for readers of
-- the table; the CHECK keeps them what the key says. The table has a new
-- name so that an older awr still connected fails (`no such table:
-- events`) instead of inserting rows without a key, which would land in
-- another run's range.

-- Events whose run has no runs row (none that awr wrote) get one, so the
-- copy below loses nothing; a run without a slot (none that awr wrote
-- since version 6) gets the next ones.
INSERT INTO runs (run_id, created_at)
    SELECT DISTINCT run_id, 0 FROM events
    WHERE run_id NOT IN (SELECT run_id FROM runs);
UPDATE runs SET lock_slot = (SELECT last FROM writer_slots WHERE id = 1) + rowid
    WHERE lock_slot IS NULL;
UPDATE writer_slots SET last = (SELECT max(lock_slot) FROM runs)
    WHERE id = 1 AND last < (SELECT max(lock_slot) FROM runs);

CREATE TABLE run_events (
    id        INTEGER PRIMARY KEY,
    run_id    TEXT NOT NULL,
    "offset"  INTEGER NOT NULL,
    type      TEXT NOT NULL,
    node_id   TEXT,
    json      TEXT NOT NULL,
    ts        INTEGER,
    CHECK ("offset" > 0 AND (id & 4294967295) = "offset")
);
INSERT INTO run_events (id, run_id, "offset", type, node_id, json, ts)
    SELECT (r.lock_slot << 32) | e."offset", e.run_id, e."offset", e.type, e.node_id, e.json, e.ts
    FROM events e JOIN runs r ON r.run_id = e.run_id
    ORDER BY r.lock_slot, e."offset";
DROP TABLE events;

-- A run's events of some types, in order, without reading the others.
CREATE INDEX events_by_type ON run_events ((id >> 32), type);
