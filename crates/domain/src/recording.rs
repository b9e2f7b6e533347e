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

/// Where and how a replayed call departed from its recording, field by
/// field: what the mock refuses a call with, what `agent:error` keeps in
/// its `details` (so the run's log holds it, not only a sentence), and
/// what `verify-determinism --json` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mismatch {
    /// What departed.
    pub kind: MismatchKind,
    /// The node that made the call.
    pub node: String,
    /// The call's index among the node's calls in the run.
    pub call: u32,
    /// The node run the call belongs to (`"0"`, `"2"`, `"0#3"`).
    pub instance: String,
    /// The call's index within that node run.
    pub instance_call: u32,
    /// The turn of an HTTP agent's tool loop (from 1; the first turn's
    /// request is the call's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The node file of the recording.
    pub file: String,
    /// JSON Pointer of the first difference in the request (`""`: the whole).
    pub pointer: String,
    /// What the recording holds there (`null`: nothing).
    #[serde(default)]
    pub recorded: Value,
    /// What the replay sent there.
    #[serde(default)]
    pub sent: Value,
    /// How many calls the node file records (a call too many).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_calls: Option<u32>,
    /// How many turns the recorded call holds (a turn too many).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_turns: Option<u32>,
}

/// The ways a replayed call departs from its recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MismatchKind {
    /// The call sends another request than recorded.
    Request,
    /// A turn of an HTTP agent's call sends another conversation than recorded.
    Turn,
    /// A call the node file does not hold.
    ExtraCall,
    /// A turn the recorded call does not hold.
    ExtraTurn,
}

impl MismatchKind {
    /// The kind's name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            MismatchKind::Request => "request",
            MismatchKind::Turn => "turn",
            MismatchKind::ExtraCall => "extra-call",
            MismatchKind::ExtraTurn => "extra-turn",
        }
    }
}

impl Mismatch {
    /// How messages name the call: its index in the node, and its place
    /// in its node run when that is not the first pass.
    pub fn call_name(&self) -> String {
        match self.instance.as_str() {
            "" | "0" => format!("call {}", self.call),
            at => format!(
                "call {} (instance {at}, call {})",
                self.call, self.instance_call
            ),
        }
    }
}

/// The sentence of each kind, as the mock has always said it (the runner
/// names the node of a call too many itself).
impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (node, call, file) = (&self.node, self.call_name(), &self.file);
        let pointer = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        let (recorded, sent) = (shorten(&self.recorded), shorten(&self.sent));
        let turn = self.turn.unwrap_or(0);
        match self.kind {
            MismatchKind::Request => write!(
                f,
                "replay mismatch: node {node} {call} sends another request than {file} recorded: at {pointer} recorded {recorded} sent {sent}"
            ),
            MismatchKind::Turn => write!(
                f,
                "replay mismatch: node {node} {call} in {file} turn {turn} sends another request than recorded: at {pointer} recorded {recorded} sent {sent}"
            ),
            MismatchKind::ExtraCall => write!(
                f,
                "no fixture for {call} in {file} (it records {} call(s))",
                self.recorded_calls.unwrap_or(0)
            ),
            MismatchKind::ExtraTurn => write!(
                f,
                "no recorded turn {turn} of node {node} {call} in {file} (it records {} turn(s))",
                self.recorded_turns.unwrap_or(0)
            ),
        }
    }
}

/// A value for a message: long ones cut at 200 characters, with their length.
pub fn shorten(value: &Value) -> String {
    let text = value.to_string();
    let n = text.chars().count();
    if n <= 200 {
        return text;
    }
    let head: String = text.chars().take(200).collect();
    format!("{head}… ({n} chars)")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mismatch(kind: MismatchKind) -> Mismatch {
        Mismatch {
            kind,
            node: "writer".into(),
            call: 2,
            instance: "0#1".into(),
            instance_call: 1,
            turn: None,
            file: "nodes/wf/writer.json".into(),
            pointer: "/prompt".into(),
            recorded: json!("a"),
            sent: json!("b"),
            recorded_calls: Some(2),
            recorded_turns: None,
        }
    }

    /// The sentence names the call and both values; the JSON keeps each
    /// in a field of its own and reads back whole.
    #[test]
    fn a_mismatch_says_where_and_keeps_each_field() {
        let m = mismatch(MismatchKind::Request);
        assert_eq!(
            m.to_string(),
            "replay mismatch: node writer call 2 (instance 0#1, call 1) sends another request than nodes/wf/writer.json recorded: at /prompt recorded \"a\" sent \"b\""
        );
        let value = serde_json::to_value(&m).unwrap();
        assert_eq!(value["kind"], "request");
        assert_eq!(value["instanceCall"], 1);
        assert_eq!(serde_json::from_value::<Mismatch>(value).unwrap(), m);
        let extra = mismatch(MismatchKind::ExtraCall);
        assert_eq!(
            extra.to_string(),
            "no fixture for call 2 (instance 0#1, call 1) in nodes/wf/writer.json (it records 2 call(s))"
        );
    }

    #[test]
    fn long_values_are_cut_with_their_length() {
        let long = json!("x".repeat(300));
        let short = shorten(&long);
        assert!(short.ends_with("… (302 chars)"), "{short}");
    }
}
