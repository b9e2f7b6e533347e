//! The user's own files a front end reads and writes (an input file, a
//! recording), through the same bounded, atomic file functions the stores
//! use: a FIFO or a device never hangs a read, and a file written is
//! whole or absent.

use std::path::Path;

pub use infrastructure::fs::MAX_INPUT_FILE;

/// The text of the regular file at `path`, at most `limit` bytes; the
/// error names the file.
pub fn read_text(path: &Path, limit: u64) -> Result<String, String> {
    infrastructure::fs::read_text_bounded(path, limit).map_err(|e| e.to_string())
}

/// `bytes` as the file at `path`, whole or not at all: a temp file (0600)
/// synced, renamed into place, its directory synced.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    infrastructure::fs::write_whole(path, bytes)
}

/// Whether `text` (the file at `path`) is a mock fixture file; the error
/// names the file and what is wrong.
pub fn check_fixture(text: &str, path: &Path) -> Result<(), String> {
    adapters_agents::mock::FixtureFile::parse(text, path)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// What a check of a recording needs of a call of a fixture file.
#[derive(Debug, Clone)]
pub struct FixtureCall {
    /// The node run that made it (`"0"`, `"0#3"`) and its index there.
    pub instance: Option<String>,
    /// The index of the call within that node run.
    pub instance_call: Option<u32>,
    /// The request recorded for it.
    pub input: Option<serde_json::Value>,
}

/// The calls of the mock fixture file at `path`, read as the mock provider
/// reads it; the error names the file and what is wrong.
pub fn fixture_calls(path: &Path) -> Result<Vec<FixtureCall>, String> {
    let fixture = adapters_agents::mock::FixtureFile::load(path).map_err(|e| e.to_string())?;
    Ok(fixture
        .calls
        .into_iter()
        .map(|call| FixtureCall {
            instance: call.instance,
            instance_call: call.instance_call,
            input: call.input,
        })
        .collect())
}
