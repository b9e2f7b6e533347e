//! A run's OpenTelemetry spans, projected from its log (design §5.2): the
//! run is the root span, each node run a span under it, each provider call
//! a `chat` span and each tool call an `execute_tool` span, named and
//! attributed as the GenAI semantic conventions say, awr's own fields
//! under `awr.`.
//!
//! Why it is shaped this way:
//! - A pure function of the log ([`project`]), like the transcript: spans
//!   exported live, after the fact, or again after an outage are the same
//!   spans, and no second record can disagree with the first.
//! - Ids come from the run and the offsets of the events that open each
//!   span ([`span_id`]), never from a clock or a random source: exporting
//!   a run twice gives the same ids, so a collector can deduplicate.
//! - The trace is the root run's: its id is the root run's id, and a child
//!   run's spans hang under the span of the node run that called it.
//! - Exporters (OTLP over gRPC or HTTP, a terminal tree) only translate
//!   these spans; none decides what a span is.

pub mod metrics;
mod project;

#[cfg(test)]
mod tests;

use std::fmt;

use sha2::{Digest, Sha256};

use crate::{NodeId, RunId, Timestamp};

pub use project::{LiveTrace, project};

/// A trace's id: the id of the run at its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub [u8; 16]);

impl TraceId {
    /// The trace whose root is `run`.
    pub fn of_run(run: RunId) -> Self {
        Self(*run.as_uuid().as_bytes())
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// A span's id, unique within its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId(pub [u8; 8]);

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// The id of the span of `run` that `place` names (`run`, or the offset of
/// the event that opened it and what it is): the first 8 bytes of a
/// SHA-256, never all zero (OpenTelemetry's invalid id).
pub fn span_id(run: RunId, place: &str) -> SpanId {
    let digest = Sha256::new()
        .chain_update(b"awr span\0")
        .chain_update(run.as_uuid().as_bytes())
        .chain_update(place.as_bytes())
        .finalize();
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    SpanId(id)
}

/// The root span of `run`.
pub fn root_span_id(run: RunId) -> SpanId {
    span_id(run, "run")
}

/// What a span is to its caller, as OpenTelemetry's span kinds say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside awr (the run, a node run, a tool it runs).
    Internal,
    /// A call to a model provider.
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// Text.
    Str(String),
    /// A whole number.
    Int(i64),
    /// A number with a fraction (a cost).
    Float(f64),
    /// Yes or no.
    Bool(bool),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Str(s) => f.write_str(s),
            Self::Int(n) => write!(f, "{n}"),
            Self::Float(x) => write!(f, "{x}"),
            Self::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// Attributes in the order they were set; a key set again replaces its value.
/// Keys are the conventions' names, known when awr is built: a span costs
/// no allocation per key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attributes(pub Vec<(&'static str, AttrValue)>);

impl Attributes {
    /// Room for the attributes of a span of any kind, set without growing
    /// (a node run's or a call's hold about a dozen).
    pub fn for_span() -> Self {
        Self(Vec::with_capacity(16))
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &'static str, value: AttrValue) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }

    /// Sets `key` to the text `value`.
    pub fn text(&mut self, key: &'static str, value: impl Into<String>) {
        self.set(key, AttrValue::Str(value.into()));
    }

    /// Sets `key` to the number `value` (saturated to `i64`).
    pub fn int(&mut self, key: &'static str, value: u64) {
        self.set(
            key,
            AttrValue::Int(i64::try_from(value).unwrap_or(i64::MAX)),
        );
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&AttrValue> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// How a span ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanStatus {
    /// Not an error (OpenTelemetry's default: success is not asserted).
    Unset,
    /// An error, with its message.
    Error(String),
}

/// Something that happened within a span (an exception, a resume).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    /// Its name (`exception`, ...).
    pub name: String,
    /// When.
    pub time: Timestamp,
    /// What it says.
    pub attributes: Attributes,
}

/// A span this one follows from without being its child: the failed
/// attempt a retry repeats, the span a resume continues, a fork's parent.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanLink {
    /// The linked span's trace.
    pub trace_id: TraceId,
    /// The linked span.
    pub span_id: SpanId,
    /// Why (`awr.link`: `retry_of`, `resumed_from`, `forked_from`).
    pub attributes: Attributes,
}

/// One span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Its trace: the root run's.
    pub trace_id: TraceId,
    /// Its id.
    pub span_id: SpanId,
    /// The span it is part of; `None` for the root of the trace.
    pub parent: Option<SpanId>,
    /// `invoke_workflow NAME`, `invoke_agent NODE`, `chat MODEL`, ...
    pub name: String,
    /// Internal work, or a call to a provider.
    pub kind: SpanKind,
    /// When it began: the time of the event that opened it.
    pub start: Timestamp,
    /// When it ended; `None` while the run has not ended it.
    pub end: Option<Timestamp>,
    /// What it is about.
    pub attributes: Attributes,
    /// Whether it failed.
    pub status: SpanStatus,
    /// What happened within it.
    pub events: Vec<SpanEvent>,
    /// What it follows from.
    pub links: Vec<SpanLink>,
}

/// What the definition says of a node, which its log does not: what kind
/// of node it is and which provider its agent uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// `agent`, `command`, `call_workflow`, ...
    pub kind: Option<String>,
    /// The provider of its agent (`claude_code`, `openai`, ...).
    pub provider: Option<String>,
}

/// Where a run's spans go in a trace, and what is known of its nodes.
#[derive(Debug, Clone, Default)]
pub struct TraceInput {
    /// For a child run: its parent's trace and the span of the node run
    /// that called it. `None` for a run at the root of its trace.
    pub parent: Option<(TraceId, SpanId)>,
    /// What the definition says of each node, when it is known.
    pub nodes: std::collections::BTreeMap<NodeId, NodeFacts>,
    /// Whether spans carry the content of calls: the messages a provider
    /// call sent and got, a tool call's arguments and result. Off unless
    /// asked for (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).
    pub capture_content: bool,
}

/// A run's spans, and the child runs it called, each with the span its
/// own spans hang under.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Projection {
    /// The spans, in the order their opening events were recorded.
    pub spans: Vec<Span>,
    /// The child runs, in the order they were called.
    pub children: Vec<(RunId, SpanId)>,
}

impl NodeFacts {
    /// What `workflow` says of each of its nodes.
    pub fn of_workflow(
        workflow: &crate::WorkflowDef,
    ) -> std::collections::BTreeMap<NodeId, NodeFacts> {
        use crate::workflow::NodeKind;
        workflow
            .nodes
            .iter()
            .map(|node| {
                let facts = match &node.kind {
                    NodeKind::Agent { agent } => NodeFacts {
                        kind: Some("agent".into()),
                        provider: workflow
                            .agents
                            .get(agent)
                            .map(|a| provider_name(a.provider).to_owned()),
                    },
                    NodeKind::Command(_) => NodeFacts {
                        kind: Some("command".into()),
                        provider: None,
                    },
                    NodeKind::CallWorkflow { .. } => NodeFacts {
                        kind: Some("call_workflow".into()),
                        provider: None,
                    },
                    NodeKind::Approval(_) => NodeFacts {
                        kind: Some("approval".into()),
                        provider: None,
                    },
                };
                (node.id.clone(), facts)
            })
            .collect()
    }
}

/// `gen_ai.provider.name` of `provider`: the conventions' name of the
/// model's maker where it has one (a CLI agent's models are its maker's),
/// awr's own otherwise.
pub fn provider_name(provider: crate::workflow::Provider) -> &'static str {
    use crate::workflow::Provider;
    match provider {
        Provider::ClaudeCode | Provider::Anthropic => "anthropic",
        Provider::Codex | Provider::OpenAi => "openai",
        Provider::Gemini => "gcp.gemini",
        Provider::Copilot => "github.copilot",
        Provider::Mock => "awr.mock",
    }
}
