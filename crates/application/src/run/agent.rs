//! An agent node run: the provider call, its messages as `agent:*` events,
//! the checks on its result, and retries of transient failures.

use domain::event::{Extra, Prompt};
use domain::output::parse_structured;
use domain::workflow::AgentDef;
use domain::{ErrorKind, EventKind, SessionId, Timestamp};
use std::mem::take;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

mod servers;

use super::node_run::{Continuation, NodeEnd, NodeTask};
use super::step::retry::Failure;
use super::transcript::render_prompt;
use crate::ports::{AgentMessage, AgentRequest, AgentResult, QueryError, RunTools};

/// Runs the agent of `task` until it succeeds, fails for good, or runs out
/// of attempts; messages accepted for the node run during a turn are
/// delivered after it, in the same conversation, before the node run ends.
/// A success ends the node run with the last `agent:complete`, which the
/// recorder records with it (`None`); a failure is returned.
pub(super) async fn run(task: &mut NodeTask) -> Option<NodeEnd> {
    let Some((agent_name, agent)) = task
        .workflow
        .agent_of(&task.node)
        .map(|(name, agent)| (name.to_owned(), agent.clone()))
    else {
        // Validation guarantees every agent node names a known agent.
        return Some(NodeEnd::failed(format!(
            "node `{}` has no agent",
            task.node.id
        )));
    };
    let started = task.ports.clock.now();
    let prompt = render_prompt(task.data());
    let mut tool_calls = 0u64;
    let mut turn = task.resume.take();
    let error = loop {
        // Between invocations is a safe point.
        if task.pausing.is_cancelled() {
            break paused();
        }
        let call = Call {
            agent_name: &agent_name,
            agent: &agent,
            prompt: &prompt,
            started,
        };
        let continued = turn.as_ref().is_some_and(|t| t.session.is_some());
        // Messages the invocation delivers, owed again if it must start afresh.
        let owed = turn
            .as_ref()
            .map(|t| (t.inbox.clone(), t.notes.clone()))
            .unwrap_or_default();
        let error = match invoke(task, &call, turn.take(), &mut tool_calls).await {
            // The recorder ended the node run with the result.
            Ok(None) => return None,
            Ok(next) => {
                turn = next;
                continue;
            }
            Err(error) => error,
        };
        if task.pausing.is_cancelled() {
            break error;
        }
        if !owed.0.is_empty() {
            // A new attempt starts afresh: it delivers them with the prompt.
            let (inbox, notes) = owed;
            let message = std::iter::once(prompt.clone())
                .chain(notes.iter().cloned())
                .collect::<Vec<_>>()
                .join("\n\n");
            turn = Some(Continuation {
                message,
                inbox,
                notes,
                ..Continuation::default()
            });
        }
        let failure = Failure {
            kind: error.kind(),
            continued,
        };
        let Some(retry) = task.attempt_failed(failure).await else {
            break error;
        };
        // A pause does not wait out the backoff: the attempt not begun is
        // not recorded, and the resume starts it.
        let waited = tokio::select! {
            biased;
            () = task.pausing.cancelled() => false,
            () = task.ports.clock.sleep(retry.wait) => true,
        };
        if !waited || task.record(retry.started).await.is_none() {
            break error;
        }
    };
    Some(NodeEnd {
        data: Value::Null,
        metadata: metadata(task, &agent_name, started, tool_calls),
        error: Some(error.to_string()),
    })
}

/// `metadata` of an agent node run's output, now.
fn metadata(task: &NodeTask, agent_name: &str, started: Timestamp, tool_calls: u64) -> Value {
    let elapsed = task.ports.clock.now().millis_since(started);
    json!({
        "agent_name": agent_name,
        "execution_time_ms": elapsed,
        "tool_calls_count": tool_calls,
    })
}

/// What every invocation of one node run shares.
struct Call<'a> {
    agent_name: &'a str,
    agent: &'a AgentDef,
    /// The node run's prompt, for an invocation that starts afresh.
    prompt: &'a str,
    /// When the node run began.
    started: Timestamp,
}

/// The run ended while an invocation was being recorded.
fn run_over() -> QueryError {
    QueryError::Agent {
        error_type: "cancelled".into(),
        message: "the run ended before the agent could be called".into(),
        details: None,
    }
}

/// The run paused: the node run stays in flight, nothing is recorded for it.
fn paused() -> QueryError {
    QueryError::Agent {
        error_type: "paused".into(),
        message: "the run paused".into(),
        details: None,
    }
}

/// One invocation: `agent:start` on record first (with the session it runs
/// in when that is known), then the call, its messages as events, and
/// `agent:complete` or the error (already recorded as `agent:error`).
async fn invoke(
    task: &NodeTask,
    call: &Call<'_>,
    turn: Option<Continuation>,
    tool_calls: &mut u64,
) -> Result<Option<Continuation>, QueryError> {
    let agent = call.agent;
    let turn = turn.unwrap_or_else(|| Continuation {
        message: call.prompt.to_owned(),
        ..Continuation::default()
    });
    let resume = turn.session.clone();
    let fork_session = turn.fork && resume.is_some();
    let (session, provisional, new_session) = match &resume {
        // A fork's copy of the session gets an id of its own, on record first.
        Some(_) if fork_session => {
            let session = SessionId::from_uuid(task.ports.ids.uuid());
            (session.clone(), false, Some(session))
        }
        Some(session) => (session.clone(), false, None),
        None if agent.provider.takes_session_id() => {
            let session = SessionId::from_uuid(task.ports.ids.uuid());
            (session.clone(), false, Some(session))
        }
        // The provider names its session once it runs: the runtime's own
        // id stands in until then.
        None => (SessionId::from_uuid(task.ports.ids.uuid()), true, None),
    };
    let start = EventKind::AgentStart {
        session_id: session.clone(),
        model: agent.model.clone(),
        prompt: Prompt::Text(turn.message.clone()),
        provisional,
        inbox: turn.inbox.clone(),
        call_index: turn.call_index,
        instance: None,
        instance_call: None,
        restart: turn.restart.clone(),
    };
    let ack = task.record(start).await.ok_or_else(run_over)?;
    let run_tools = match task.mcp.as_ref().filter(|_| agent.provider.is_http()) {
        // A pause does not wait for a server to start.
        Some(servers) => match tokio::select! {
            biased;
            () = task.pausing.cancelled() => return Err(paused()),
            tools = servers.tools(&agent.tools) => tools,
        } {
            Ok(tools) => tools,
            Err(e) => {
                let error = QueryError::Agent {
                    error_type: ErrorKind::McpServer,
                    message: e.to_string(),
                    details: None,
                };
                return failed(task, error).await;
            }
        },
        None => RunTools::default(),
    };
    let request = AgentRequest {
        run_id: task.run_id,
        workflow: task.workflow.name.clone(),
        node_id: task.node.id.clone(),
        node_run_id: task.run,
        agent_name: call.agent_name.to_owned(),
        agent: agent.clone(),
        prompt: turn.message,
        resume,
        fork_session,
        session_id: new_session,
        session_usage: turn.session_usage,
        history: turn.history,
        approved_call: turn.approved_call,
        call_index: ack.call_index,
        instance: ack.instance,
        instance_call: ack.instance_call,
        traceparent: ack.traceparent,
        run_tools,
        mcp_servers: match agent.provider.is_http() {
            true => Default::default(),
            false => servers::of_cli_agent(task, agent),
        },
    };
    let started = task.ports.clock.now();
    let mut silence = Silence::new(task, agent);
    let called = tokio::select! {
        biased;
        called = task.ports.query.query(request) => called,
        error = silence.expired() => Err(error),
    };
    let mut stream = match called {
        Ok(stream) => stream,
        Err(error) => return failed(task, error).await,
    };
    // The session and model on record; `named` once the provider's own
    // session id is (a provisional start has only the runtime's).
    let mut current = (session, agent.model.clone());
    let mut named = !provisional;
    let mut open_tool_uses: Vec<Option<String>> = Vec::new();
    // Tools the runtime runs for the agent (HTTP agents), started and not finished.
    let mut running_tools = 0usize;
    // What the adapter sent for the next message's event: the fields the
    // agent emitted with it that the adapter does not map.
    let mut extra = Extra::new();
    let pausing = task.pausing.fired();
    tokio::pin!(pausing);
    loop {
        // A pause stops the agent only while no tool call is in flight:
        // dropping the stream then kills no tool halfway.
        // What the adapter sent wins over its silence: the node run is
        // polled by its driver, which may have been busy (a slow disk)
        // while the message waited, past the silence's deadline.
        let item = if open_tool_uses.is_empty() && running_tools == 0 {
            tokio::select! {
                biased;
                () = pausing.as_mut() => return Err(paused()),
                item = stream.next() => item,
                error = silence.expired() => return failed(task, error).await,
            }
        } else {
            tokio::select! {
                biased;
                item = stream.next() => item,
                error = silence.expired() => return failed(task, error).await,
            }
        };
        silence.reset(task);
        let Some(item) = item else { break };
        let message = match item {
            Ok(message) => message,
            Err(error) => return failed(task, error).await,
        };
        let kind = match message {
            AgentMessage::Extra(fields) => {
                for (pointer, value) in fields {
                    extra.entry(pointer).or_insert(value);
                }
                continue;
            }
            AgentMessage::Session { session_id, model } => {
                let model = model.or_else(|| current.1.clone());
                // The session on record already: nothing to say, unless its
                // line held more than the session (kept on this event).
                if named && session_id == current.0 && extra.is_empty() {
                    current.1 = model;
                    continue;
                }
                named = true;
                current = (session_id.clone(), model.clone());
                EventKind::AgentSession {
                    session_id,
                    model,
                    extra: take(&mut extra),
                }
            }
            AgentMessage::Process { pid, start_time } => EventKind::ProcessStarted {
                pid,
                start_time,
                host: task.ports.processes.as_ref().and_then(|p| p.host()),
            },
            AgentMessage::ThinkingDelta {
                content,
                token_count,
            } => EventKind::AgentThinkingDelta {
                content,
                token_count,
                extra: take(&mut extra),
            },
            AgentMessage::Thinking {
                content,
                token_count,
                signature,
            } => EventKind::AgentThinking {
                content,
                token_count,
                signature,
                extra: take(&mut extra),
            },
            AgentMessage::TextDelta { content } => EventKind::AgentTextDelta {
                content,
                extra: take(&mut extra),
            },
            AgentMessage::Text { content } => EventKind::AgentText {
                content,
                extra: take(&mut extra),
            },
            AgentMessage::ToolUse { id, name, input } => {
                *tool_calls += 1;
                open_tool_uses.push(id.clone());
                EventKind::AgentToolUse {
                    tool_use_id: id,
                    tool_name: name,
                    tool_input: input,
                    extra: take(&mut extra),
                }
            }
            AgentMessage::Tool {
                id,
                name,
                input,
                output,
                duration_ms,
                error,
            } => {
                // A call announced by its use was counted then.
                match open_tool_uses.iter().position(|open| *open == id) {
                    Some(at) => {
                        open_tool_uses.remove(at);
                    }
                    None => *tool_calls += 1,
                }
                EventKind::AgentTool {
                    tool_use_id: id,
                    tool_name: name,
                    tool_input: input,
                    tool_output: output,
                    duration_ms,
                    error,
                    extra: take(&mut extra),
                }
            }
            AgentMessage::Error {
                error_type,
                message,
                details,
            } => EventKind::AgentError {
                error_type: error_type.to_string(),
                message,
                details,
            },
            AgentMessage::Warning { message, details } => EventKind::Warning { message, details },
            AgentMessage::ToolStarted {
                call_id,
                name,
                input,
            } => {
                running_tools += 1;
                EventKind::ToolStarted {
                    call_id,
                    tool_name: name,
                    tool_input: input,
                    extra: take(&mut extra),
                }
            }
            AgentMessage::ToolFinished {
                call_id,
                name,
                output,
                duration_ms,
            } => {
                *tool_calls += 1;
                running_tools = running_tools.saturating_sub(1);
                match output {
                    Ok(tool_output) => EventKind::ToolCompleted {
                        call_id,
                        tool_name: name,
                        tool_output,
                        duration_ms,
                    },
                    Err(error) => EventKind::ToolFailed {
                        call_id,
                        tool_name: name,
                        error,
                        duration_ms,
                    },
                }
            }
            AgentMessage::RateLimited {
                provider,
                attempt,
                retry_after_ms,
            } => EventKind::RateLimited {
                provider,
                attempt,
                retry_after_ms,
            },
            AgentMessage::ApprovalNeeded { calls, mut extras } => {
                // The turn waits for a person, holding nothing: the node
                // run's task ends here, and the answer continues it.
                if let Some(first) = extras.first_mut() {
                    for (pointer, value) in take(&mut extra) {
                        first.entry(pointer).or_insert(value);
                    }
                }
                let question =
                    super::step::approval::tool_question(call.agent_name, &calls, extras);
                let Some(asked) = question else { continue };
                task.send(asked).await;
                return Ok(None);
            }
            AgentMessage::Completed(result) => {
                let elapsed = task.ports.clock.now().millis_since(started);
                let ended = (result, take(&mut extra));
                return completed(task, call, ended, elapsed, &current, *tool_calls).await;
            }
        };
        task.send(kind).await;
    }
    let error = QueryError::Agent {
        error_type: "error_during_execution".into(),
        message: "the agent's output ended without a result".into(),
        details: None,
    };
    failed(task, error).await
}

/// How much longer than an agent's `timeout` the runtime lets its adapter
/// stay silent. The stock adapters enforce the timeout themselves (and say
/// what they killed); this margin lets them, so the runtime's own limit
/// only catches an adapter that hangs.
const SILENCE_GRACE: Duration = Duration::from_secs(2);

/// The runtime's limit on an adapter that stops answering: with a
/// `timeout`, a call that sends nothing for longer than it (plus
/// [`SILENCE_GRACE`]) is abandoned, its stream dropped, and the node run
/// fails with error type `timeout`. Each message starts the wait afresh,
/// so an agent that keeps working is never cut short here.
struct Silence {
    limit: Option<Duration>,
    wait: Option<BoxFuture<'static, ()>>,
}

impl Silence {
    fn new(task: &NodeTask, agent: &AgentDef) -> Self {
        let limit = agent.timeout.map(|t| t.0.saturating_add(SILENCE_GRACE));
        let mut silence = Self { limit, wait: None };
        silence.reset(task);
        silence
    }

    /// Starts the wait afresh: a message came.
    fn reset(&mut self, task: &NodeTask) {
        self.wait = self.limit.map(|limit| task.ports.clock.sleep(limit));
    }

    /// Completes, with the error to record, once the adapter has been
    /// silent too long; never without a `timeout`.
    async fn expired(&mut self) -> QueryError {
        match (&mut self.wait, self.limit) {
            (Some(wait), Some(limit)) => {
                wait.await;
                self.wait = Some(Box::pin(std::future::pending()));
                QueryError::Agent {
                    error_type: "timeout".into(),
                    message: format!(
                        "the agent's adapter sent nothing for {} s, past the agent's timeout; \
                         the call was abandoned",
                        limit.as_secs()
                    ),
                    details: None,
                }
            }
            _ => std::future::pending().await,
        }
    }
}

/// Checks the result against the agent's limits and schema, then records
/// `agent:complete` and learns whether messages wait for the node run; if
/// none do, the recorder ends the node run with it ([`NodeTask::complete`]).
async fn completed(
    task: &NodeTask,
    call: &Call<'_>,
    (result, extra): (AgentResult, Extra),
    elapsed_ms: u64,
    (session, model): &(SessionId, Option<String>),
    tool_calls: u64,
) -> Result<Option<Continuation>, QueryError> {
    let agent = call.agent;
    if let Some(max) = agent.max_turns.filter(|max| result.num_turns > *max) {
        let error = QueryError::Agent {
            error_type: "error_max_turns".into(),
            message: format!(
                "the agent took {} turns; max_turns is {max}",
                result.num_turns
            ),
            details: None,
        };
        return failed(task, error).await;
    }
    let structured = match &agent.output_schema {
        Some(schema) => match parse_structured(&result.text, schema) {
            Ok(value) => Some(value),
            Err(e) => {
                let error = QueryError::Agent {
                    error_type: "error_output_schema".into(),
                    message: e.to_string(),
                    details: None,
                };
                return failed(task, error).await;
            }
        },
        None => None,
    };
    let total_cost_usd = result
        .total_cost_usd
        .or_else(|| price(task, &result, model.as_deref()));
    let data = structured
        .clone()
        .unwrap_or_else(|| Value::String(result.text.clone()));
    let complete = EventKind::AgentComplete {
        result: result.text,
        structured_output: structured,
        usage: result.usage,
        model_usage: result.model_usage,
        total_cost_usd,
        duration_ms: result.duration_ms.unwrap_or(elapsed_ms),
        num_turns: result.num_turns,
        session_id: result.session_id.filter(|s| s != session),
        extra,
    };
    let end = NodeEnd {
        data,
        metadata: metadata(task, call.agent_name, call.started, tool_calls),
        error: None,
    };
    task.complete(complete, end).await.ok_or_else(run_over)
}

/// The cost of a result whose provider reported none, from the
/// workflow's price table: by the one model the usage names, else the
/// model the agent started with. Unknown price: no cost.
fn price(task: &NodeTask, result: &AgentResult, announced_model: Option<&str>) -> Option<f64> {
    let reported = match &result.model_usage {
        Some(models) if models.len() == 1 => models.keys().next().map(String::as_str),
        _ => None,
    };
    let model = reported.or(announced_model)?;
    task.workflow.pricing.cost(model, &result.usage)
}

/// Records `agent:error` for `error` and returns it.
async fn failed<T>(task: &NodeTask, error: QueryError) -> Result<T, QueryError> {
    let (message, details) = match &error {
        QueryError::Agent {
            message, details, ..
        } => (message.clone(), details.clone()),
        // Where the replay departed from its recording, field by field.
        QueryError::Replay(mismatch) => (error.to_string(), serde_json::to_value(mismatch).ok()),
        other => (other.to_string(), None),
    };
    task.send(EventKind::AgentError {
        error_type: error.kind().to_string(),
        message,
        details,
    })
    .await;
    Err(error)
}
