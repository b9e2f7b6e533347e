//! Values that events carry besides plain JSON: which workflow a run
//! executes, and what an agent was asked.

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
