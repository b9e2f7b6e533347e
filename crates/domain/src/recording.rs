//! The manifest of a recording (`<recording>/manifest.json`): what was run,
//! with what input, and whether the recording is whole.
//!
//! A recording is a directory: this manifest, one fixture file per node
//! (`nodes/<workflow name>/<node id>.json`, seed 001 §7.2 extended) and the
//! run's causal events (`causal.jsonl`). `docs/determinism.md` is the
//! format's reference; this type is its first file.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RunId;

/// The format version this awr writes.
pub const FORMAT_VERSION: u32 = 1;

/// `manifest.json` of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`FORMAT_VERSION`] when written; a newer one is refused on load.
    pub format_version: u32,
    /// Written `true` last, once every other file is in place: a recording
    /// whose writer died says `false` and is refused.
    pub complete: bool,
    /// The workflow that was run.
    pub workflow: RecordedWorkflow,
    /// The run's input, as given.
    #[serde(default)]
    pub input: Value,
    /// The recorded run.
    pub run_id: RunId,
    /// What a replay pins time and ids to.
    pub seeds: Seeds,
    /// What the recording holds and what it does not, by channel
    /// (`model`, `tools`, `commands`, `filesystem`, ...): `recorded`,
    /// `live` (re-run on replay) or `not-captured`.
    #[serde(default)]
    pub capture: BTreeMap<String, String>,
}

/// The workflow of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedWorkflow {
    /// Its `name:`.
    pub name: String,
    /// Its file, relative to the recording directory when it can be, so a
    /// recording committed beside its workflow moves with it.
    pub path: String,
    /// `sha256:<hex>` of the file's text when recorded.
    pub content_hash: String,
}

/// What a replay starts its logical clock and derives its ids from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seeds {
    /// The logical clock's start, in milliseconds since the Unix epoch.
    pub clock_start_ms: i64,
    /// Mixed into every id derived from a causal position.
    pub id_seed: String,
}
