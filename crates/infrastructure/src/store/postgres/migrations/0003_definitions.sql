-- Workflow definitions: the files a run started with, by the content hash
-- its `flow:started` names, shared by the runs of one definition, so a
-- worker on any machine continues a run from what it started with.
CREATE TABLE awr_definitions (
    hash text PRIMARY KEY,
    body text NOT NULL
);
