-- Schema version 4: workflow definitions (docs/storage.md, "Definitions"):
-- the files a run started with, by the content hash its `flow:started`
-- names, shared by the runs of one definition.
CREATE TABLE definitions (
    hash TEXT PRIMARY KEY,
    json TEXT NOT NULL
);
