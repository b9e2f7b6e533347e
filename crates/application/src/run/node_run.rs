//! [`NodeTask`]: one node run, a future the run's driver polls (see
//! `driver`).
//!
//! A node run never writes the log: it sends what happened to the run's
//! recorder over the run's channel ([`Msg`]), in order, and ends with
//! [`Msg::Ended`]. An event that must be on record before its effect (the
//! `node:started` of a retry) is sent with an acknowledgement the task waits
//! for; whether there is a retry at all the run decides, from the attempts
//! on record ([`Msg::AttemptFailed`]). Cancelling the node run drops the provider stream or the command
//! future, which kills its process group (the port contracts); a child run
//! is cancelled through its own token instead, so it can record its end.

use std::sync::Arc;

use domain::event::Usage;
use domain::workflow::{NodeDef, NodeKind};
use domain::{EventKind, NodeId, NodeRunId, RunId, SessionId, WorkflowDef};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::Ports;
use super::control::Cancel;
use super::step::retry::{Failure, Retry};
use crate::mcp::McpServers;
use crate::ports::{ChatMessage, CommandRequest};

/// The recorder's answer to an event sent with an acknowledgement, once
/// the event is stored.
#[derive(Debug, Default)]
pub(crate) struct Ack {
    /// The `callIndex` the event was recorded with (an `agent:start`).
    pub call_index: u32,
    /// Its node run's position (`instance`), for an `agent:start`.
    pub instance: String,
    /// Its number among its node run's calls (`instanceCall`).
    pub instance_call: u32,
    /// The trace context of the call's span, for an `agent:start` of a
    /// run whose spans are exported live.
    pub traceparent: Option<String>,
}

/// What a node run tells its run's recorder.
// `Completed` is large (an event and an end): a box would cost an
// allocation per node run, for a channel of at most `CHANNEL` slots.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Msg {
    /// Record this event of node run `run`; `ack` is answered once it is
    /// stored.
    Event {
        run: NodeRunId,
        node: NodeId,
        kind: EventKind,
        ack: Option<oneshot::Sender<Ack>>,
    },
    /// An agent's result (`agent:complete`), and how the node run ends with
    /// it. The recorder records the result, then either ends the node run
    /// with `end` at once, or, when messages accepted for the node run
    /// wait, answers with the invocation that delivers them (the node run
    /// goes on, and `end` is dropped). `answer` tells the task which:
    /// `None`, it has ended. The end travels with the result so that a
    /// result that crosses a budget is followed by its node run's end, and
    /// an agent's last turn costs one hand-off between the tasks, not two.
    Completed {
        run: NodeRunId,
        node: NodeId,
        kind: EventKind,
        end: NodeEnd,
        answer: oneshot::Sender<Option<Continuation>>,
    },
    /// An attempt of node run `run` failed: `answer` is told the new
    /// attempt ([`step::retry`](super::step::retry)), or dropped when the
    /// node run fails with the error.
    AttemptFailed {
        run: NodeRunId,
        failure: Failure,
        answer: oneshot::Sender<Retry>,
    },
    /// The node run ended.
    Ended {
        run: NodeRunId,
        node: NodeId,
        end: NodeEnd,
    },
}

/// How a node run ended, whatever kind of node it was.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeEnd {
    /// Its output data (`null` when it failed).
    pub data: Value,
    /// `metadata` of its output.
    pub metadata: Value,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

impl NodeEnd {
    /// The event that records this end: `node:completed` with `{data,
    /// metadata}`, or `node:failed` (`continued` when the run goes on past it).
    pub fn into_event(self, continued: bool) -> EventKind {
        match self.error {
            None => EventKind::NodeCompleted {
                output: super::routing::envelope(self.data, self.metadata),
            },
            Some(error) => EventKind::NodeFailed { error, continued },
        }
    }

    /// A failure before anything ran.
    pub fn failed(error: impl Into<String>) -> Self {
        Self {
            data: Value::Null,
            metadata: json!({}),
            error: Some(error.into()),
        }
    }
}

/// One node run in progress.
pub(crate) struct NodeTask {
    pub ports: Arc<Ports>,
    pub workflow: Arc<WorkflowDef>,
    pub run_id: RunId,
    pub node: NodeDef,
    pub run: NodeRunId,
    /// How its agent's first invocation continues what an earlier process
    /// began (a resume); `None` starts afresh.
    pub resume: Option<Continuation>,
    /// Its input (`{data, metadata}`), as `node:started` recorded it.
    pub input: Arc<Value>,
    pub tx: mpsc::Sender<Msg>,
    pub cancel: Cancel,
    /// The run is pausing: an agent stops at its next safe point, with no
    /// tool call in flight (see `agent::invoke`).
    pub pausing: Cancel,
    /// The run's MCP servers, when its workflow declares any and the
    /// runtime starts them.
    pub mcp: Option<Arc<McpServers>>,
}

impl NodeTask {
    /// Sends one event to the recorder.
    pub async fn send(&self, kind: EventKind) {
        let msg = Msg::Event {
            run: self.run,
            node: self.node.id.clone(),
            kind,
            ack: None,
        };
        // A closed channel means the run is over: nothing is left to record.
        let _ = self.tx.send(msg).await;
    }

    /// Sends one event and waits until it is stored; `None` when the run is over.
    pub async fn record(&self, kind: EventKind) -> Option<Ack> {
        let (ack, stored) = oneshot::channel();
        let msg = Msg::Event {
            run: self.run,
            node: self.node.id.clone(),
            kind,
            ack: Some(ack),
        };
        self.tx.send(msg).await.ok()?;
        stored.await.ok()
    }

    /// Sends an agent's result and how the node run ends with it (see
    /// [`Msg::Completed`]): `Some(None)` when the node run has ended,
    /// `Some(next)` when it goes on with `next`; `None` when the run is over.
    pub async fn complete(&self, kind: EventKind, end: NodeEnd) -> Option<Option<Continuation>> {
        let (answer, told) = oneshot::channel();
        let msg = Msg::Completed {
            run: self.run,
            node: self.node.id.clone(),
            kind,
            end,
            answer,
        };
        self.tx.send(msg).await.ok()?;
        told.await.ok()
    }

    /// Asks whether the attempt that failed with `failure` is tried again,
    /// and how; `None` when the node run fails (or the run is over).
    pub async fn attempt_failed(&self, failure: Failure) -> Option<Retry> {
        let (answer, told) = oneshot::channel();
        let msg = Msg::AttemptFailed {
            run: self.run,
            failure,
            answer,
        };
        self.tx.send(msg).await.ok()?;
        told.await.ok()
    }

    /// The `data` of its input.
    pub fn data(&self) -> &Value {
        self.input.get("data").unwrap_or(&Value::Null)
    }
}

/// How an agent invocation continues a conversation that began earlier:
/// after a resume, or to deliver messages (`send`/`reply`) after a turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Continuation {
    /// The provider session to continue (CLI agents).
    pub session: Option<SessionId>,
    /// What that session's earlier invocations recorded.
    pub session_usage: Usage,
    /// The conversation so far (HTTP agents).
    pub history: Vec<ChatMessage>,
    /// The next user message; empty when the invocation only finishes
    /// the model's open turn (its calls that waited for a person).
    pub message: String,
    /// The call of that open turn a person approved (HTTP agents).
    pub approved_call: Option<String>,
    /// Offsets of the inbox messages it delivers.
    pub inbox: Vec<u64>,
    /// Those messages' texts (also in `message`): what a node run that
    /// must start afresh still owes its agent.
    pub notes: Vec<String>,
    /// The provider call it redoes, when an earlier process began it and
    /// died before its end: it keeps its index (the mock provider serves
    /// the same recorded call again).
    pub call_index: Option<u32>,
    /// The child run a `call_workflow` node run had started: it is
    /// continued, not started again.
    pub child: Option<RunId>,
    /// `session` is a forked run's parent's: the invocation goes on in a
    /// copy of it (`AgentRequest::fork_session`), never in it.
    pub fork: bool,
    /// Why the invocation starts afresh rather than in its node run's
    /// session (`agent:start`'s `restart`).
    pub restart: Option<String>,
}

/// The most of a failed command's standard error quoted in `node:failed`.
const STDERR_TAIL: usize = 2_000;

/// A `command` node: its output data is `{exit_code, stdout, stderr}`; a
/// non-zero exit or a timeout fails the node, quoting the end of stderr.
pub(super) async fn command(task: &NodeTask) -> NodeEnd {
    let NodeKind::Command(def) = &task.node.kind else {
        return NodeEnd::failed("not a command node");
    };
    let Some(runner) = &task.ports.commands else {
        return NodeEnd::failed("this awr has no command runner: `command` nodes cannot run");
    };
    let request = CommandRequest {
        run_id: task.run_id,
        node_id: task.node.id.clone(),
        node_run_id: task.run,
        script: def.run.clone(),
        workdir: def.workdir.clone(),
        allow_outside_project: def.allow_outside_project,
        env: def.env.clone(),
        timeout: def.timeout.map(|t| t.0),
    };
    let outcome = match runner.run(request).await {
        Ok(outcome) => outcome,
        Err(e) => return NodeEnd::failed(e.to_string()),
    };
    let data = json!({
        "exit_code": outcome.exit_code,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
    });
    let metadata = json!({
        "execution_time_ms": outcome.duration_ms,
        "truncated": outcome.truncated,
        "tool_calls_count": 0,
    });
    let error = if outcome.timed_out {
        Some("the command ran past its timeout and was killed".to_owned())
    } else {
        match outcome.exit_code {
            Some(0) => None,
            Some(code) => Some(format!("the command exited with code {code}")),
            None => Some("the command was ended by a signal".to_owned()),
        }
    };
    match error {
        None => NodeEnd {
            data,
            metadata,
            error: None,
        },
        Some(error) => {
            let stderr = outcome.stderr.trim_end();
            let tail_start = stderr
                .char_indices()
                .rev()
                .nth(STDERR_TAIL)
                .map_or(0, |(i, _)| i);
            let tail = &stderr[tail_start..];
            let error = if tail.is_empty() {
                error
            } else {
                format!("{error}: {tail}")
            };
            NodeEnd {
                data: Value::Null,
                metadata,
                error: Some(error),
            }
        }
    }
}
