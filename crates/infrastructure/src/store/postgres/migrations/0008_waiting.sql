-- When a `waiting` run next has a question to settle (an answer on record
-- that nothing acted on, or the earliest deadline), as its last snapshot
-- says; NULL otherwise. A worker claims a submitted waiting run once it is
-- due, so a deadline fires with no server watching (docs/approvals.md).
ALTER TABLE awr_runs ADD COLUMN due_at timestamptz;

CREATE INDEX awr_runs_due ON awr_runs (due_at)
    WHERE submission IS NOT NULL AND status = 'waiting';
