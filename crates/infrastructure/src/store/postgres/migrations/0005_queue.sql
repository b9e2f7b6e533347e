-- The queue. A run submitted to workers (`awr submit`) keeps what it was
-- submitted with, as JSON text: its definition's hash, its input, who
-- submitted it. It is NULL for a run a process started for itself
-- (`awr run`), which no worker claims.
ALTER TABLE awr_runs ADD COLUMN submission text;

-- The submitted runs a worker may have to claim: queued, or running (whose
-- writer may be gone), in the order workers claim them.
DROP INDEX awr_runs_queued;
CREATE INDEX awr_runs_claimable ON awr_runs (priority DESC, available_at, run_id)
    WHERE submission IS NOT NULL AND status IN ('queued', 'pending', 'running');
