-- Schema version 2: what `awr runs` and `awr events` filter by, indexed
-- (see docs/storage.md, "Queries").

-- The runs row follows the log: status, workflow, started_at and
-- parent_run_id are written in the transaction that appends a status
-- change (flow:started, flow:paused, ...), not only with snapshots.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;

-- Newest first, by status, by workflow, or all: (started_at, run_id)
-- descending is the order of every listing.
CREATE INDEX runs_by_status_started ON runs (status, started_at, run_id);
CREATE INDEX runs_by_workflow_started ON runs (workflow, started_at, run_id);
CREATE INDEX runs_by_started ON runs (started_at, run_id);

-- An event's time (Unix milliseconds), copied like type and node_id.
ALTER TABLE events ADD COLUMN ts INTEGER;
-- A run's events of some types, in order, without reading the others.
CREATE INDEX events_by_type ON events (run_id, type, "offset");

-- Rows written by schema version 1: derive the new columns from the rows
-- themselves. A row whose JSON is damaged keeps NULL (its reader reports it).
UPDATE events SET ts = CAST(round(
        (julianday(json_extract(json, '$.timestamp')) - 2440587.5) * 86400000.0
    ) AS INTEGER)
    WHERE json_valid(json);

UPDATE runs SET
    parent_run_id = (
        SELECT json_extract(e.json, '$.parentRunId') FROM events e
        WHERE e.run_id = runs.run_id AND e.type = 'flow:started' AND json_valid(e.json)
        ORDER BY e."offset" DESC LIMIT 1),
    workflow = coalesce((
        SELECT json_extract(e.json, '$.workflow.name') FROM events e
        WHERE e.run_id = runs.run_id AND e.type = 'flow:started' AND json_valid(e.json)
        ORDER BY e."offset" DESC LIMIT 1), workflow),
    started_at = coalesce((
        SELECT e.ts FROM events e
        WHERE e.run_id = runs.run_id AND e.type = 'flow:started'
        ORDER BY e."offset" DESC LIMIT 1), started_at),
    updated_at = coalesce((
        SELECT e.ts FROM events e WHERE e.run_id = runs.run_id
        ORDER BY e."offset" DESC LIMIT 1), updated_at),
    status = coalesce((
        SELECT CASE e.type
            WHEN 'flow:started' THEN 'running'
            WHEN 'flow:resumed' THEN 'running'
            WHEN 'flow:paused' THEN 'paused'
            WHEN 'flow:completed' THEN 'completed'
            WHEN 'flow:failed' THEN 'failed'
            WHEN 'flow:cancelled' THEN 'cancelled'
        END FROM events e
        WHERE e.run_id = runs.run_id AND e.type IN ('flow:started', 'flow:resumed',
            'flow:paused', 'flow:completed', 'flow:failed', 'flow:cancelled')
        ORDER BY e."offset" DESC LIMIT 1), status, 'pending');
