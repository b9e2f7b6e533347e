//! Values that events carry besides plain JSON: which workflow a run
//! executes, what an agent was asked, and a tool call a person is asked
//! about.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The definition a run executes: its name and the hash of its source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRef {
    /// `name:` of the workflow file.
    #[serde(default)]
    pub name: String,
    /// `sha256:<hex>` of the file's bytes.
    #[serde(default)]
    pub hash: String,
    /// Fields this version does not know (a newer writer's), kept whole.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The prompt given to an agent: plain text or a list of provider messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// A single user prompt.
    Text(String),
    /// A list of messages in the provider's own shape.
    Messages(Vec<Value>),
}

/// A tool call an HTTP agent's model asked for, as `approval:requested`
/// records it when the call waits for a person (`requires_approval:`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskedCall {
    /// The model's id of the call.
    pub call_id: String,
    /// The tool, as the model named it.
    pub tool_name: String,
    /// The arguments it gave.
    #[serde(default)]
    pub tool_input: Value,
    /// What the model sent with the call that awr does not map
    /// ([`Extra`](super::Extra)).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}
