//! Built-in tools the runtime runs for agents on HTTP providers, granted per
//! agent through `tools:`. File tools are confined to the run's workspace.
//! `shell` and `http_get` reach beyond it, so no agent gets them by default.

mod fs;
mod http_get;
mod shell;

pub use fs::{ListDir, ReadFile, WriteFile, confine};
pub use http_get::HttpGet;
pub use shell::Shell;
