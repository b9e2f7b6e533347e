-- Runs, their logs and their snapshots, shared by every process and machine
-- that runs or reads them. A run's writer holds its lease: `lease_owner`
-- and `lease_epoch`, which every append checks in its own transaction, so a
-- writer that lost the lease cannot write one more event.

CREATE TABLE awr_runs (
    run_id           uuid PRIMARY KEY,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- The status of its last snapshot (`running`, `completed`, ...), for
    -- queries; `queued` for a run no worker has claimed yet.
    status           text NOT NULL,
    workflow         text,
    parent_run_id    uuid,
    started_at       timestamptz,
    updated_at       timestamptz,
    priority         integer NOT NULL DEFAULT 0,
    available_at     timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_epoch      bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    -- The offset the next appended event takes (offsets start at 1).
    next_offset      bigint NOT NULL DEFAULT 1 CHECK (next_offset >= 1),
    -- The latest snapshot, as its JSON text, and the offset it folds to.
    snapshot         text,
    snapshot_offset  bigint NOT NULL DEFAULT 0
);

-- Queued runs, in the order workers claim them.
CREATE INDEX awr_runs_queued ON awr_runs (priority DESC, available_at)
    WHERE status = 'queued';
-- Runs whose lease may expire, for the workers that take them over.
CREATE INDEX awr_runs_leased ON awr_runs (lease_expires_at)
    WHERE lease_owner IS NOT NULL;

CREATE TABLE awr_events (
    run_id  uuid NOT NULL REFERENCES awr_runs (run_id) ON DELETE CASCADE,
    "offset" bigint NOT NULL CHECK ("offset" >= 1),
    -- The lease epoch the event was written under.
    epoch   bigint NOT NULL,
    -- The event's type, for queries that read no body.
    kind    text NOT NULL,
    -- The event exactly as the log line that holds it (JSON text).
    body    text NOT NULL,
    PRIMARY KEY (run_id, "offset")
);
