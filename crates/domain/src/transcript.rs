//! The exchange transcript's vocabulary (seed 000): [`ExchangeEvent`], one
//! line of `transcripts/<run-id>.jsonl`, and the [`ContentBlock`]s it carries.
//!
//! Writers use only the closed vocabularies; readers are tolerant: a line of
//! an unknown `type` and a block of an unknown `type` are kept whole
//! ([`ExchangeType::Unknown`], [`ContentBlock::Unknown`]) and written back
//! unchanged, so a file from a newer awr never breaks an older reader.
//!
//! What a line must have (seed 000): `seq`, `run_id`, `type`, `path`,
//! `timestamp` and `payload`. awr's own additions (`iteration`) are optional
//! on read, and envelope fields this version does not know are kept in
//! [`ExchangeEvent::extra`]. A block of a known type that carries fields
//! this version does not know, or lacks one it needs, is kept whole as
//! [`ContentBlock::Unknown`] rather than trimmed or refused. A block an
//! agent emitted keeps, in `extra`, what the agent sent with it that awr
//! does not map (its event's `extra`, [`crate::event::Extra`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::ids::RunId;
use crate::json_out::write_str;
use crate::time::Timestamp;

/// The closed vocabulary of line types, plus whatever a newer writer used.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExchangeType {
    /// The run began.
    RunStarted,
    /// The run ended (success or failure).
    RunCompleted,
    /// A step began.
    StepStarted,
    /// A step ended.
    StepCompleted,
    /// A parent began a child run; carries `child_run_id`.
    CallWorkflowStarted,
    /// A parent saw its child run end; carries `child_run_id`.
    CallWorkflowCompleted,
    /// The agent seam: resolved prompt and composed system prompt.
    MessageUser,
    /// The agent's reply, as normalized blocks.
    MessageAssistant,
    /// A tool invocation began.
    ToolCall,
    /// A tool invocation ended.
    ToolResult,
    /// An approval node asked a person (docs/approvals.md).
    ApprovalRequested,
    /// The person answered, or the question was settled without them.
    ApprovalResolved,
    /// A type this version does not know.
    Unknown(String),
}

impl ExchangeType {
    /// The `type` string.
    pub fn as_str(&self) -> &str {
        match self {
            Self::RunStarted => "run.started",
            Self::RunCompleted => "run.completed",
            Self::StepStarted => "step.started",
            Self::StepCompleted => "step.completed",
            Self::CallWorkflowStarted => "step.call_workflow.started",
            Self::CallWorkflowCompleted => "step.call_workflow.completed",
            Self::MessageUser => "message.user",
            Self::MessageAssistant => "message.assistant",
            Self::ToolCall => "tool.call",
            Self::ToolResult => "tool.result",
            Self::ApprovalRequested => "approval.requested",
            Self::ApprovalResolved => "approval.resolved",
            Self::Unknown(other) => other,
        }
    }

    /// Parses a `type` string; anything outside the vocabulary is `Unknown`.
    pub fn parse(s: &str) -> Self {
        match s {
            "run.started" => Self::RunStarted,
            "run.completed" => Self::RunCompleted,
            "step.started" => Self::StepStarted,
            "step.completed" => Self::StepCompleted,
            "step.call_workflow.started" => Self::CallWorkflowStarted,
            "step.call_workflow.completed" => Self::CallWorkflowCompleted,
            "message.user" => Self::MessageUser,
            "message.assistant" => Self::MessageAssistant,
            "tool.call" => Self::ToolCall,
            "tool.result" => Self::ToolResult,
            "approval.requested" => Self::ApprovalRequested,
            "approval.resolved" => Self::ApprovalResolved,
            other => Self::Unknown(other.to_owned()),
        }
    }
}

impl fmt::Display for ExchangeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ExchangeType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ExchangeType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Self::parse(&raw))
    }
}

/// Who vouches for a block: the runtime's own seam, or the agent's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Produced at the runtime's seam: authoritative.
    Router,
    /// Reported by the agent (a CLI's stream, a fixture).
    AgentEmitted,
}

/// One typed piece of a message or tool payload.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ContentBlock {
    /// Plain text, verbatim.
    Text {
        /// The text.
        text: String,
        /// Provenance.
        fidelity: Fidelity,
        /// What the agent emitted with it that awr does not map, by JSON
        /// Pointer, as its event keeps it ([`crate::event::Extra`]).
        extra: crate::event::Extra,
    },
    /// Reasoning output; `signature` when the provider signs it.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// Provider signature, kept so it can be sent back.
        signature: Option<String>,
        /// Provenance.
        fidelity: Fidelity,
        /// What the agent emitted with it that awr does not map, by JSON
        /// Pointer, as its event keeps it ([`crate::event::Extra`]).
        extra: crate::event::Extra,
    },
    /// A tool invocation.
    ToolUse {
        /// Tool name.
        tool_name: String,
        /// The provider's id of the call, linking the use to its result
        /// (empty, and not written, when the provider gave none).
        tool_id: String,
        /// Arguments.
        tool_input: Value,
        /// Provenance.
        fidelity: Fidelity,
        /// What the agent emitted with it that awr does not map, by JSON
        /// Pointer, as its event keeps it ([`crate::event::Extra`]).
        extra: crate::event::Extra,
    },
    /// A tool's output (`null` content on error).
    ToolResult {
        /// The use it answers.
        tool_id: String,
        /// Output.
        tool_content: Value,
        /// Provenance.
        fidelity: Fidelity,
        /// What the agent emitted with it that awr does not map, by JSON
        /// Pointer, as its event keeps it ([`crate::event::Extra`]).
        extra: crate::event::Extra,
    },
    /// A shell command a step ran.
    Command {
        /// The resolved command.
        command: String,
        /// Exit code, when known.
        exit_code: Option<i64>,
        /// Provenance.
        fidelity: Fidelity,
    },
    /// One provider stream chunk, for replays that keep partials.
    Stream {
        /// The chunk.
        chunk: Value,
        /// Provenance.
        fidelity: Fidelity,
    },
    /// A block type this version does not know, kept whole.
    Unknown(serde_json::Map<String, Value>),
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum KnownBlock {
    Text {
        text: String,
        fidelity: Fidelity,
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        extra: crate::event::Extra,
    },
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        fidelity: Fidelity,
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        extra: crate::event::Extra,
    },
    ToolUse {
        tool_name: String,
        // Empty when the provider named no id: omitted, never invented.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        tool_id: String,
        tool_input: Value,
        fidelity: Fidelity,
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        extra: crate::event::Extra,
    },
    ToolResult {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        tool_id: String,
        tool_content: Value,
        fidelity: Fidelity,
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        extra: crate::event::Extra,
    },
    Command {
        command: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i64>,
        fidelity: Fidelity,
    },
    Stream {
        chunk: Value,
        fidelity: Fidelity,
    },
}

/// Each known block type with every field it may carry.
const BLOCK_FIELDS: [(&str, &[&str]); 6] = [
    ("text", &["type", "text", "fidelity", "extra"]),
    (
        "thinking",
        &["type", "thinking", "signature", "fidelity", "extra"],
    ),
    (
        "tool_use",
        &[
            "type",
            "tool_name",
            "tool_id",
            "tool_input",
            "fidelity",
            "extra",
        ],
    ),
    (
        "tool_result",
        &["type", "tool_id", "tool_content", "fidelity", "extra"],
    ),
    ("command", &["type", "command", "exit_code", "fidelity"]),
    ("stream", &["type", "chunk", "fidelity"]),
];

impl ContentBlock {
    /// The block's `type`.
    pub fn type_name(&self) -> &str {
        match self {
            Self::Text { .. } => "text",
            Self::Thinking { .. } => "thinking",
            Self::ToolUse { .. } => "tool_use",
            Self::ToolResult { .. } => "tool_result",
            Self::Command { .. } => "command",
            Self::Stream { .. } => "stream",
            Self::Unknown(raw) => raw.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    fn to_known(&self) -> Option<KnownBlock> {
        Some(match self.clone() {
            Self::Text {
                text,
                fidelity,
                extra,
            } => KnownBlock::Text {
                text,
                fidelity,
                extra,
            },
            Self::Thinking {
                thinking,
                signature,
                fidelity,
                extra,
            } => KnownBlock::Thinking {
                thinking,
                signature,
                fidelity,
                extra,
            },
            Self::ToolUse {
                tool_name,
                tool_id,
                tool_input,
                fidelity,
                extra,
            } => KnownBlock::ToolUse {
                tool_name,
                tool_id,
                tool_input,
                fidelity,
                extra,
            },
            Self::ToolResult {
                tool_id,
                tool_content,
                fidelity,
                extra,
            } => KnownBlock::ToolResult {
                tool_id,
                tool_content,
                fidelity,
                extra,
            },
            Self::Command {
                command,
                exit_code,
                fidelity,
            } => KnownBlock::Command {
                command,
                exit_code,
                fidelity,
            },
            Self::Stream { chunk, fidelity } => KnownBlock::Stream { chunk, fidelity },
            Self::Unknown(_) => return None,
        })
    }

    fn from_known(block: KnownBlock) -> Self {
        match block {
            KnownBlock::Text {
                text,
                fidelity,
                extra,
            } => Self::Text {
                text,
                fidelity,
                extra,
            },
            KnownBlock::Thinking {
                thinking,
                signature,
                fidelity,
                extra,
            } => Self::Thinking {
                thinking,
                signature,
                fidelity,
                extra,
            },
            KnownBlock::ToolUse {
                tool_name,
                tool_id,
                tool_input,
                fidelity,
                extra,
            } => Self::ToolUse {
                tool_name,
                tool_id,
                tool_input,
                fidelity,
                extra,
            },
            KnownBlock::ToolResult {
                tool_id,
                tool_content,
                fidelity,
                extra,
            } => Self::ToolResult {
                tool_id,
                tool_content,
                fidelity,
                extra,
            },
            KnownBlock::Command {
                command,
                exit_code,
                fidelity,
            } => Self::Command {
                command,
                exit_code,
                fidelity,
            },
            KnownBlock::Stream { chunk, fidelity } => Self::Stream { chunk, fidelity },
        }
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self, self.to_known()) {
            (_, Some(known)) => known.serialize(s),
            (Self::Unknown(raw), None) => raw.serialize(s),
            (_, None) => s.serialize_none(),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = serde_json::Map::<String, Value>::deserialize(d)?;
        let fields = raw
            .get("type")
            .and_then(Value::as_str)
            .and_then(|t| BLOCK_FIELDS.iter().find(|(name, _)| *name == t))
            .map(|(_, fields)| *fields);
        let exact = fields.is_some_and(|fields| raw.keys().all(|k| fields.contains(&k.as_str())));
        if !exact {
            return Ok(Self::Unknown(raw));
        }
        let value = Value::Object(raw);
        match KnownBlock::deserialize(&value) {
            Ok(known) => Ok(Self::from_known(known)),
            Err(_) => match value {
                Value::Object(raw) => Ok(Self::Unknown(raw)),
                _ => Err(serde::de::Error::custom("a block must be an object")),
            },
        }
    }
}

/// One line of a transcript file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeEvent {
    /// Position in the file: from 1, strictly monotonic, no gaps.
    pub seq: u64,
    /// The run the file belongs to.
    pub run_id: RunId,
    /// The run that called this one, on every line of a child's file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// The child run, on `step.call_workflow.*` lines of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<RunId>,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: ExchangeType,
    /// Dot-separated step path; empty for run-level lines.
    pub path: String,
    /// Zero-based loop or retry iteration (awr's addition; 0 when absent).
    #[serde(default)]
    pub iteration: u32,
    /// When it was emitted (UTC).
    pub timestamp: Timestamp,
    /// Shape chosen by `type`; kept as JSON so unknown shapes survive.
    pub payload: Value,
    /// Envelope fields this version does not know (a newer writer's), kept so
    /// they are shown and written back unchanged. Empty for lines awr writes.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

impl ExchangeEvent {
    /// Appends this line's JSON to `buf` (no newline), byte for byte what
    /// its `Serialize` writes. The envelope is written straight into the
    /// buffer (ids, numbers, the timestamp and the vocabulary's types need
    /// no escaping, which was half of a line's cost through serde's
    /// flattened map); the payload, a path or a type that needs escaping,
    /// and a line with a newer writer's fields go through serde.
    pub fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        if !self.extra.is_empty() {
            return serde_json::to_writer(buf, self);
        }
        let ExchangeEvent {
            seq,
            run_id,
            parent_run_id,
            child_run_id,
            kind,
            path,
            iteration,
            timestamp,
            payload,
            extra: _,
        } = self;
        buf.extend_from_slice(b"{\"seq\":");
        buf.extend_from_slice(itoa::Buffer::new().format(*seq).as_bytes());
        buf.extend_from_slice(b",\"run_id\":");
        run_id.write_json(buf);
        if let Some(parent) = parent_run_id {
            buf.extend_from_slice(b",\"parent_run_id\":");
            parent.write_json(buf);
        }
        if let Some(child) = child_run_id {
            buf.extend_from_slice(b",\"child_run_id\":");
            child.write_json(buf);
        }
        buf.extend_from_slice(b",\"type\":");
        write_str(buf, kind.as_str())?;
        buf.extend_from_slice(b",\"path\":");
        write_str(buf, path)?;
        buf.extend_from_slice(b",\"iteration\":");
        buf.extend_from_slice(itoa::Buffer::new().format(*iteration).as_bytes());
        buf.extend_from_slice(b",\"timestamp\":");
        timestamp.write_json(buf)?;
        buf.extend_from_slice(b",\"payload\":");
        serde_json::to_writer(&mut *buf, payload)?;
        buf.push(b'}');
        Ok(())
    }
}

/// A transcript line before the recorder gives it its `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeDraft {
    /// See [`ExchangeEvent::child_run_id`].
    pub child_run_id: Option<RunId>,
    /// See [`ExchangeEvent::kind`].
    pub kind: ExchangeType,
    /// See [`ExchangeEvent::path`].
    pub path: String,
    /// See [`ExchangeEvent::iteration`].
    pub iteration: u32,
    /// See [`ExchangeEvent::timestamp`].
    pub timestamp: Timestamp,
    /// See [`ExchangeEvent::payload`].
    pub payload: Value,
}

impl ExchangeDraft {
    /// The line this draft becomes in the transcript of `run_id` (a child
    /// of `parent_run_id`, if any), numbered `seq`: what every transcript
    /// writer does with a draft it takes.
    pub fn into_event(
        self,
        seq: u64,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> ExchangeEvent {
        ExchangeEvent {
            seq,
            run_id,
            parent_run_id,
            child_run_id: self.child_run_id,
            kind: self.kind,
            path: self.path,
            iteration: self.iteration,
            timestamp: self.timestamp,
            payload: self.payload,
            extra: Default::default(),
        }
    }
}

/// Step payload (`run.*`, `step.*`).
pub fn step_payload(name: &str, kind: &str, error: Option<&str>, result: Option<&Value>) -> Value {
    let mut p = serde_json::Map::new();
    p.insert("name".into(), Value::String(name.to_owned()));
    p.insert("kind".into(), Value::String(kind.to_owned()));
    if let Some(error) = error {
        p.insert("error".into(), Value::String(error.to_owned()));
    }
    if let Some(result) = result {
        p.insert("result".into(), result.clone());
    }
    Value::Object(p)
}

/// Message payload (`message.*`).
pub fn message_payload(role: &str, blocks: &[ContentBlock]) -> Value {
    serde_json::json!({ "role": role, "blocks": blocks })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_serialize_with_type_and_fidelity() {
        let b = ContentBlock::ToolUse {
            tool_name: "shell".into(),
            tool_id: "t1".into(),
            tool_input: json!({"cmd": "echo hi"}),
            fidelity: Fidelity::AgentEmitted,
            extra: Default::default(),
        };
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            json!({"type": "tool_use", "tool_name": "shell", "tool_id": "t1",
                   "tool_input": {"cmd": "echo hi"}, "fidelity": "agent_emitted"})
        );
    }

    /// The line writer writes the envelope itself: every line must come
    /// out byte for byte as serde writes it.
    #[test]
    fn the_direct_writer_writes_what_serde_writes() {
        let run: RunId = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap();
        let base = ExchangeEvent {
            seq: 12,
            run_id: run,
            parent_run_id: None,
            child_run_id: None,
            kind: ExchangeType::MessageAssistant,
            path: "fan.writer".into(),
            iteration: 3,
            timestamp: crate::time::Timestamp::from_millis(1_767_225_600_123),
            payload: json!({"role": "assistant", "blocks": [{"type": "text",
                "text": "a \"quote\", a \\ and a \n", "fidelity": "router"}]}),
            extra: serde_json::Map::new(),
        };
        let mut lines = vec![base.clone()];
        for kind in [
            "run.started",
            "run.completed",
            "step.started",
            "step.completed",
            "step.call_workflow.started",
            "step.call_workflow.completed",
            "message.user",
            "tool.call",
            "tool.result",
            "odd \"type\"",
        ] {
            let mut line = base.clone();
            line.kind = ExchangeType::parse(kind);
            line.parent_run_id = Some(run);
            line.child_run_id = Some(run);
            lines.push(line);
        }
        for path in ["", "a\\b", "q\"", "tab\t", "é"] {
            let mut line = base.clone();
            line.path = path.into();
            lines.push(line);
        }
        let mut far = base.clone();
        far.timestamp = crate::time::Timestamp::from_millis(400_000_000_000_000);
        lines.push(far);
        let mut newer = base;
        newer.extra.insert("future".into(), json!([1]));
        lines.push(newer);
        crate::json_out::assert_writes_as_serde(&lines, ExchangeEvent::write_json);
    }

    #[test]
    fn unknown_types_and_blocks_round_trip() {
        let line = json!({"seq": 4, "run_id": "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f", "type": "message.hologram",
            "path": "a", "iteration": 0, "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": {"role": "assistant", "blocks": [{"type": "smell", "odour": "ozone"}]}});
        let e: ExchangeEvent = serde_json::from_value(line.clone()).unwrap();
        assert_eq!(e.kind, ExchangeType::Unknown("message.hologram".into()));
        assert_eq!(serde_json::to_value(&e).unwrap(), line);
        let block: ContentBlock =
            serde_json::from_value(line["payload"]["blocks"][0].clone()).unwrap();
        assert!(matches!(&block, ContentBlock::Unknown(_)));
        assert_eq!(block.type_name(), "smell");
        assert_eq!(
            serde_json::to_value(&block).unwrap(),
            json!({"type": "smell", "odour": "ozone"})
        );
    }

    #[test]
    fn block_field_table_matches_what_blocks_write() {
        let full = [
            json!({"type": "text", "text": "t", "fidelity": "router"}),
            json!({"type": "thinking", "thinking": "t", "signature": "s", "fidelity": "router"}),
            json!({"type": "tool_use", "tool_name": "n", "tool_id": "i", "tool_input": {}, "fidelity": "router"}),
            json!({"type": "tool_result", "tool_id": "i", "tool_content": "c", "fidelity": "router"}),
            json!({"type": "command", "command": "ls", "exit_code": 0, "fidelity": "router"}),
            json!({"type": "stream", "chunk": {}, "fidelity": "router"}),
        ];
        assert_eq!(full.len(), BLOCK_FIELDS.len());
        for value in full {
            let block: ContentBlock = serde_json::from_value(value.clone()).unwrap();
            assert!(!matches!(block, ContentBlock::Unknown(_)), "{value}");
            assert_eq!(serde_json::to_value(&block).unwrap(), value);
        }
    }

    #[test]
    fn known_blocks_a_newer_or_older_writer_shaped_differently_are_kept_whole() {
        for value in [
            json!({"type": "text", "text": "y", "fidelity": "agent_emitted", "citations": [1]}),
            json!({"type": "tool_result", "tool_id": "t1", "fidelity": "router"}),
            json!({"type": "text", "text": "no fidelity"}),
        ] {
            let block: ContentBlock = serde_json::from_value(value.clone()).unwrap();
            assert!(matches!(block, ContentBlock::Unknown(_)), "{value}");
            assert_eq!(serde_json::to_value(&block).unwrap(), value);
        }
    }

    #[test]
    fn lines_without_awr_additions_and_with_unknown_fields_read_and_round_trip() {
        let older = json!({"seq": 1, "run_id": "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f", "type": "run.started",
            "path": "", "timestamp": "2026-01-01T00:00:00.000Z", "payload": null});
        let e: ExchangeEvent = serde_json::from_value(older).unwrap();
        assert_eq!(e.iteration, 0);
        let newer = json!({"seq": 1, "run_id": "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f", "type": "run.started",
            "path": "", "iteration": 0, "timestamp": "2026-01-01T00:00:00.000Z", "payload": null,
            "span_id": "s-1", "trace": {"a": 1}});
        let e: ExchangeEvent = serde_json::from_value(newer.clone()).unwrap();
        assert_eq!(serde_json::to_value(&e).unwrap(), newer);
    }

    #[test]
    fn nul_bytes_survive_as_escapes() {
        let b = ContentBlock::Text {
            text: "a\0b".into(),
            fidelity: Fidelity::AgentEmitted,
            extra: Default::default(),
        };
        let s = serde_json::to_string(&b).unwrap();
        assert!(s.contains("a\\u0000b"), "{s}");
        assert_eq!(serde_json::from_str::<ContentBlock>(&s).unwrap(), b);
    }
}
