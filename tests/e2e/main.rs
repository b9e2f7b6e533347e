//! The end-to-end suite, one binary: each module is one area.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod anthropic_chat;
mod cancel;
mod cli;
mod cli_agents;
mod commands;
mod crash;
mod docs;
mod errors;
mod examples;
mod exits;
mod fake_model;
mod file_store;
mod fold_property;
mod fork;
mod hostile;
mod http_agents;
mod interrupted;
mod migrate;
mod openai_chat;
mod payloads;
mod prune;
mod queries;
mod real_clis;
mod records;
mod replay;
mod resume_cli;
mod resume_http;
mod secrets;
mod serve;
mod sqlite_storage;
mod stopping;
mod subflow;
mod transcript_cli;
mod transcript_recorder;
mod util;
