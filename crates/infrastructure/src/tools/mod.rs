//! Built-in tools the runtime runs for agents on HTTP providers, granted per
//! agent through `tools:`. File tools are confined to the run's workspace.
//! `http_get` reaches beyond it, so no agent gets it by default. (`shell`,
//! which runs processes the way CLI agents are run, is in `adapters-agents`.)

mod fs;
mod http_get;

pub use fs::{ListDir, ReadFile, WriteFile, confine};
pub use http_get::HttpGet;
