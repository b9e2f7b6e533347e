//! Built-in tools the runtime runs for agents on HTTP providers, granted per
//! agent through `tools:`. File tools are confined to the run's workspace.

mod fs;
mod http_get;
mod shell;

pub use fs::{ListDir, ReadFile, WriteFile, confine};
