-- Each run's exchange transcript, so that no machine's disk holds a part of
-- a run: its lines in order, each exactly as a transcript file holds it
-- (newline included), and the large values that lines copied in from a
-- file refer to. Lines written here keep their values inline (PostgreSQL
-- compresses a large one and stores it out of line itself).
CREATE TABLE awr_transcript_lines (
    run_id uuid NOT NULL REFERENCES awr_runs (run_id) ON DELETE CASCADE,
    -- Its place in the transcript (1: the first line).
    line   bigint NOT NULL CHECK (line >= 1),
    -- Its `seq`; NULL for a line copied in that does not say one.
    seq    bigint,
    body   bytea NOT NULL,
    PRIMARY KEY (run_id, line)
);
-- Where a follower that has shown a `seq` reads on from.
CREATE INDEX awr_transcript_lines_seq ON awr_transcript_lines (run_id, seq);

CREATE TABLE awr_transcript_blobs (
    run_id uuid NOT NULL REFERENCES awr_runs (run_id) ON DELETE CASCADE,
    -- `sha256-<hex>`, as the lines' references name it.
    name   text NOT NULL,
    bytes  bytea NOT NULL,
    PRIMARY KEY (run_id, name)
);
