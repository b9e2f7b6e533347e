-- Commands on their way to a run's writer, wherever it runs: the sender
-- inserts one and waits for its `reply`; the writer takes it (`taken_at`),
-- records it in the run's log, and writes the reply. A command nobody took
-- is withdrawn by its sender, who then records it itself; one a writer took
-- and did not answer may be on record, and is never sent again. The row
-- goes once the sender has read its reply. Both sides are woken by a notification on
-- `awr_log` (`RUN:c` for a command, `RUN:r` for a reply).
CREATE TABLE awr_commands (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id   uuid NOT NULL REFERENCES awr_runs (run_id) ON DELETE CASCADE,
    -- The command exactly as sent (JSON text), and who sent it.
    raw      text NOT NULL,
    sent_by  text,
    sent_at  timestamptz NOT NULL DEFAULT now(),
    taken_at timestamptz,
    -- The run's lease epoch when a writer took it: a command taken by a
    -- writer that has since lost the run is known unanswerable.
    taken_epoch bigint,
    -- The writer's answer (JSON text), once the command is recorded.
    reply    text
);
CREATE INDEX awr_commands_open ON awr_commands (run_id, id) WHERE taken_at IS NULL;
