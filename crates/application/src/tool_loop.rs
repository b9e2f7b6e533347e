//! [`ToolLoop`]: an agent on an HTTP model, with the runtime running its tools.
//!
//! A CLI agent runs its own tools; a model behind an HTTP API only asks for
//! them. The loop sends the conversation to the [`ChatModel`], streams the
//! turn out as [`AgentMessage`]s, runs every tool call the turn ends with
//! through the [`ToolRouter`] (so each is granted, schema-checked and
//! recorded with fidelity `router`), appends the results and asks again —
//! until the model answers without tools or `max_turns` is reached.
//!
//! Transient failures (429, 5xx, a dropped connection) are retried with
//! exponential backoff and jitter, honouring `retry-after`, up to the agent's
//! `max_retries` — but only while nothing of the turn has been streamed: a
//! turn half shown cannot be taken back, so a failure after that ends the
//! node. Other failures end it at once with the provider's message.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use domain::SessionId;
use domain::event::{Extra, ModelUsage, Usage};
use futures::StreamExt;

use crate::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, ChatBlock, ChatError, ChatEvent,
    ChatMessage, ChatModel, ChatRequest, Clock, IdGen, QueryError, QueryFn, StopReason, ToolCall,
    ToolContext, ToolResult, TurnEnd,
};
use crate::tools::ToolRouter;

/// Attempts after the first for a transient failure, unless the agent says.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// How long to wait between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure; it doubles with each further one.
    pub initial: Duration,
    /// No wait is longer, whatever the attempt or `retry-after` says.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The wait before attempt `failed + 1`: what the provider asked for,
    /// else `initial · 2^(failed-1)` with "equal jitter" (half fixed, half
    /// random, so concurrent runs spread out but never retry at once).
    /// `random` is uniform in `[0, 1)`.
    pub fn delay(&self, failed: u32, retry_after: Option<Duration>, random: f64) -> Duration {
        if let Some(asked) = retry_after {
            return asked.min(self.max);
        }
        let exponent = failed.saturating_sub(1).min(20);
        let base = self.initial.saturating_mul(1 << exponent).min(self.max);
        base.mul_f64(0.5 + random.clamp(0.0, 1.0) / 2.0)
    }
}

/// Runs agents on one HTTP model, executing their tools through a router.
pub struct ToolLoop {
    model: Arc<dyn ChatModel>,
    router: Arc<ToolRouter>,
    workspace: PathBuf,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    backoff: Backoff,
}

impl ToolLoop {
    /// Agents on `model`, with `router`'s tools confined to `workspace`
    /// (an agent's relative `workdir` is taken inside it).
    pub fn new(
        model: Arc<dyn ChatModel>,
        router: Arc<ToolRouter>,
        workspace: PathBuf,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
    ) -> Self {
        Self {
            model,
            router,
            workspace,
            clock,
            ids,
            backoff: Backoff::default(),
        }
    }

    /// Sets the waits between attempts.
    #[must_use]
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

#[async_trait]
impl QueryFn for ToolLoop {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        // The run's own tools (its MCP servers') beside the runtime's.
        let router = match request.run_tools.is_empty() {
            true => Arc::clone(&self.router),
            false => Arc::new(
                (request.run_tools.0.iter())
                    .fold(ToolRouter::clone(&self.router), |router, tool| {
                        router.with(Arc::clone(tool))
                    }),
            ),
        };
        let run = Conversation {
            model: Arc::clone(&self.model),
            router,
            context: ToolContext::new(match &request.agent.workdir {
                Some(dir) => self.workspace.join(dir),
                None => self.workspace.clone(),
            })
            .hiding(request.agent.key_env().map(str::to_owned))
            .for_run(request.run_id),
            clock: Arc::clone(&self.clock),
            ids: Arc::clone(&self.ids),
            backoff: self.backoff,
        };
        Ok(run.into_stream(request))
    }
}

/// What one invocation needs, owned, so its stream is `'static`.
struct Conversation {
    model: Arc<dyn ChatModel>,
    router: Arc<ToolRouter>,
    context: ToolContext,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    backoff: Backoff,
}

/// One model turn, as streamed.
#[derive(Default)]
struct Turn {
    blocks: Vec<ChatBlock>,
    calls: Vec<ToolCall>,
    end: Option<TurnEnd>,
    /// What the API sent with the event that comes next and the adapter
    /// does not map ([`ChatEvent::Extra`]).
    pending: Extra,
    /// The pending fields of the message [`Turn::add`] just returned: sent
    /// just before it ([`AgentMessage::Extra`]).
    ready: Option<Extra>,
    /// Those of each call, by its place in `calls`: sent before its
    /// `ToolStarted`, the call's event.
    call_extras: Vec<Extra>,
    /// Those that came with the turn's end (its last chunk): sent with the
    /// next event, the call's `agent:complete` or the turn's first tool.
    end_extra: Extra,
}

impl Turn {
    /// Adds an event to the turn; returns what to show of it (and sets
    /// `ready` to what the API sent with it that is not mapped).
    fn add(&mut self, event: ChatEvent) -> Option<AgentMessage> {
        if matches!(
            event,
            ChatEvent::TextDelta(_) | ChatEvent::ThinkingDelta(_) | ChatEvent::ThinkingDone { .. }
        ) && !self.pending.is_empty()
        {
            self.ready = Some(std::mem::take(&mut self.pending));
        }
        match event {
            ChatEvent::Extra(fields) => {
                for (pointer, value) in fields {
                    self.pending.entry(pointer).or_insert(value);
                }
                None
            }
            ChatEvent::TextDelta(text) => {
                match self.blocks.last_mut() {
                    Some(ChatBlock::Text(open)) => open.push_str(&text),
                    _ => self.blocks.push(ChatBlock::Text(text.clone())),
                }
                Some(AgentMessage::TextDelta { content: text })
            }
            ChatEvent::ThinkingDelta(text) => {
                match self.blocks.last_mut() {
                    Some(ChatBlock::Thinking {
                        text: open,
                        signature: None,
                    }) => open.push_str(&text),
                    _ => self.blocks.push(ChatBlock::Thinking {
                        text: text.clone(),
                        signature: None,
                    }),
                }
                Some(AgentMessage::ThinkingDelta {
                    content: text,
                    token_count: None,
                })
            }
            ChatEvent::ThinkingDone { text, signature } => {
                if let Some(ChatBlock::Thinking {
                    signature: None, ..
                }) = self.blocks.last()
                {
                    self.blocks.pop();
                }
                self.blocks.push(ChatBlock::Thinking {
                    text: text.clone(),
                    signature: signature.clone(),
                });
                Some(AgentMessage::Thinking {
                    content: text,
                    token_count: None,
                    signature,
                })
            }
            ChatEvent::ToolCall(call) => {
                self.blocks.push(ChatBlock::ToolCall(call.clone()));
                self.calls.push(call);
                self.call_extras.push(std::mem::take(&mut self.pending));
                None
            }
            ChatEvent::Unknown { what, raw } => Some(AgentMessage::Warning {
                message: format!("{what}; kept as is"),
                details: Some(raw),
            }),
            ChatEvent::End(end) => {
                self.end = Some(end);
                self.end_extra = std::mem::take(&mut self.pending);
                None
            }
        }
    }

    fn text(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|b| match b {
                ChatBlock::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// The assistant message a model turn streamed as `events` becomes in the
/// conversation, built as the loop builds it: a replay that serves recorded
/// events can say what the next request must hold.
pub fn assistant_blocks(events: impl IntoIterator<Item = ChatEvent>) -> Vec<ChatBlock> {
    let mut turn = Turn::default();
    for event in events {
        turn.add(event);
    }
    turn.blocks
}

/// How a turn's attempts ended.
enum Attempted {
    /// The turn streamed to its end (boxed: a turn is large, and the
    /// other outcome is nothing).
    Done(Box<Turn>),
    /// It failed for good (the error is already yielded).
    Failed,
}

impl Conversation {
    fn into_stream(self, request: AgentRequest) -> AgentStream {
        Box::pin(async_stream::stream! {
            let agent = request.agent.clone();
            let tools = self.router.specs(&agent.tools);
            let model_name = agent.model.clone();
            // HTTP APIs keep no session: the runtime names the conversation
            // (with the id already on record, when the executor chose one),
            // and one that continues (its history rebuilt from the record)
            // keeps its name.
            let session_id = request
                .resume
                .clone()
                .or_else(|| request.session_id.clone())
                .unwrap_or_else(|| SessionId::from_uuid(self.ids.uuid()));
            yield Ok(AgentMessage::Session {
                session_id,
                model: model_name.clone(),
            });
            let mut messages = request.history.clone();
            // A turn left open (calls that waited for a person) is finished
            // first; otherwise the prompt is the next thing said.
            let mut pending = open_turn(&mut messages);
            // An empty prompt after a history says nothing: the invocation
            // only finishes the model's turn.
            if messages.is_empty() || !request.prompt.is_empty() {
                let prompt = ChatMessage::User(request.prompt.clone());
                match &mut pending {
                    Some(open) => open.then = Some(prompt),
                    None => messages.push(prompt),
                }
            }
            let mut approved = request.approved_call.clone();
            let mut usage = Usage::default();
            let mut reported_model = None;
            let mut turns = 0u32;
            loop {
                if let Some(mut open) = pending.take() {
                    let mut extras = std::mem::take(&mut open.extras).into_iter();
                    let calls = std::mem::take(&mut open.calls);
                    for (at, call) in calls.iter().enumerate() {
                        let extra = extras.next().unwrap_or_default();
                        if approved.as_deref() != Some(call.id.as_str()) && asks(&agent.tools, call) {
                            let rest = calls[at..].to_vec();
                            let extras = std::iter::once(extra).chain(extras).collect();
                            yield Ok(AgentMessage::ApprovalNeeded { calls: rest, extras });
                            return;
                        }
                        approved = None;
                        if !extra.is_empty() {
                            yield Ok(AgentMessage::Extra(extra));
                        }
                        yield Ok(AgentMessage::ToolStarted {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            input: call.input.clone(),
                        });
                        let started = self.clock.now();
                        let output = self
                            .router
                            .call(&call.name, call.input.clone(), &agent.tools, &self.context)
                            .await
                            .map_err(|e| e.to_string());
                        let duration_ms = self.clock.now().millis_since(started);
                        open.results.push(ToolResult::of(call, &output));
                        yield Ok(AgentMessage::ToolFinished {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            output,
                            duration_ms,
                        });
                    }
                    // Results in the order of the turn's calls.
                    let order: Vec<&str> = (open.blocks.iter())
                        .filter_map(|b| match b {
                            ChatBlock::ToolCall(call) => Some(call.id.as_str()),
                            _ => None,
                        })
                        .collect();
                    open.results.sort_by_key(|r| order.iter().position(|id| *id == r.call_id));
                    messages.push(ChatMessage::Assistant(open.blocks));
                    messages.push(ChatMessage::ToolResults(open.results));
                    messages.extend(open.then);
                }
                if let Some(max) = agent.max_turns.filter(|max| turns >= *max) {
                    yield Err(QueryError::Agent {
                        error_type: "error_max_turns".into(),
                        message: format!("the model still asked for tools after {turns} turns; max_turns is {max}"),
                        details: None,
                    });
                    return;
                }
                turns += 1;
                let ask = ChatRequest {
                    agent: agent.clone(),
                    system: agent.system_prompt.clone(),
                    messages: messages.clone(),
                    tools: tools.clone(),
                };
                let max_retries = agent.max_retries.unwrap_or(DEFAULT_MAX_RETRIES);
                let mut attempt = 0u32;
                let outcome = 'attempts: loop {
                    attempt += 1;
                    let mut turn = Turn::default();
                    let mut shown = false;
                    let failure = match self.model.turn(ask.clone()).await {
                        Err(error) => error,
                        Ok(mut stream) => loop {
                            match stream.next().await {
                                Some(Ok(event)) => {
                                    if let Some(message) = turn.add(event) {
                                        // A kept unknown is no model output: a retry stays possible.
                                        shown |= !matches!(message, AgentMessage::Warning { .. });
                                        if let Some(extra) = turn.ready.take() {
                                            yield Ok(AgentMessage::Extra(extra));
                                        }
                                        yield Ok(message);
                                    }
                                    if turn.end.is_some() {
                                        break 'attempts Attempted::Done(Box::new(turn));
                                    }
                                }
                                Some(Err(error)) => break error,
                                None => break ChatError::Network("the stream ended before the turn finished".into()),
                            }
                        },
                    };
                    if shown || !failure.is_transient() || attempt > max_retries {
                        yield Err(give_up(self.model.provider(), &failure, attempt));
                        break Attempted::Failed;
                    }
                    let retry_after = match &failure {
                        ChatError::RateLimited { retry_after, .. } => *retry_after,
                        _ => None,
                    };
                    let wait = self.backoff.delay(attempt, retry_after, self.random());
                    let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                    yield Ok(match &failure {
                        ChatError::RateLimited { .. } => AgentMessage::RateLimited {
                            provider: self.model.provider().to_owned(),
                            attempt,
                            retry_after_ms: Some(wait_ms),
                        },
                        other => AgentMessage::Warning {
                            message: format!("{}; attempt {attempt} of {}, retrying in {wait_ms} ms", other, max_retries + 1),
                            details: None,
                        },
                    });
                    self.clock.sleep(wait).await;
                };
                let Attempted::Done(turn) = outcome else {
                    return;
                };
                let mut turn = *turn;
                let mut end_extra = std::mem::take(&mut turn.end_extra);
                let Some(end) = turn.end.clone() else {
                    return;
                };
                add_usage(&mut usage, &end.usage);
                if end.model.is_some() {
                    reported_model.clone_from(&end.model);
                }
                if turn.calls.is_empty() {
                    match &end.stop {
                        StopReason::EndTurn | StopReason::ToolUse => {}
                        StopReason::MaxTokens => yield Ok(AgentMessage::Warning {
                            message: "the model stopped at max_tokens; its answer may be cut short".into(),
                            details: None,
                        }),
                        StopReason::Other(why) => yield Ok(AgentMessage::Warning {
                            message: format!("the model stopped: {why}"),
                            details: None,
                        }),
                    }
                    if !end_extra.is_empty() {
                        yield Ok(AgentMessage::Extra(end_extra));
                    }
                    let text = turn.text();
                    let model_usage = reported_model.or(model_name).map(|model| {
                        let per_model = ModelUsage {
                            extra: Default::default(),
                            input_tokens: usage.input_tokens,
                            output_tokens: usage.output_tokens,
                        };
                        [(model, per_model)].into_iter().collect()
                    });
                    yield Ok(AgentMessage::Completed(AgentResult {
                        text,
                        usage,
                        model_usage,
                        total_cost_usd: None,
                        duration_ms: None,
                        num_turns: turns,
                        session_id: None,
                    }));
                    return;
                }
                // The turn's first call carries the turn end's fields too.
                let mut extras = std::mem::take(&mut turn.call_extras);
                extras.resize_with(turn.calls.len(), Extra::default);
                if let Some(first) = extras.first_mut() {
                    for (pointer, value) in std::mem::take(&mut end_extra) {
                        first.entry(pointer).or_insert(value);
                    }
                }
                pending = Some(OpenTurn {
                    calls: std::mem::take(&mut turn.calls),
                    blocks: turn.blocks,
                    results: Vec::new(),
                    extras,
                    then: None,
                });
            }
        })
    }

    /// Uniform in `[0, 1)`, from the id port so tests can pin it.
    fn random(&self) -> f64 {
        (self.ids.uuid().as_u128() as u64 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A model turn whose calls are still to run: the latest, or one that
/// waited for a person (its calls without a result, read from the record).
struct OpenTurn {
    /// The calls to run, in order.
    calls: Vec<ToolCall>,
    /// The turn as the model gave it.
    blocks: Vec<ChatBlock>,
    /// The results it has already.
    results: Vec<ToolResult>,
    /// What the model sent with each call that awr does not map.
    extras: Vec<Extra>,
    /// What is said after its results (a prompt that came with it).
    then: Option<ChatMessage>,
}

/// The turn `messages` end with when some of its calls have no result
/// (they waited for a person): taken off, to be finished.
fn open_turn(messages: &mut Vec<ChatMessage>) -> Option<OpenTurn> {
    let results = match messages.last() {
        Some(ChatMessage::ToolResults(_)) => match messages.pop() {
            Some(ChatMessage::ToolResults(results)) => results,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let calls: Vec<ToolCall> = match messages.last() {
        Some(ChatMessage::Assistant(blocks)) => (blocks.iter())
            .filter_map(|b| match b {
                ChatBlock::ToolCall(call) if !results.iter().any(|r| r.call_id == call.id) => {
                    Some(call.clone())
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if calls.is_empty() {
        if !results.is_empty() {
            messages.push(ChatMessage::ToolResults(results));
        }
        return None;
    }
    let Some(ChatMessage::Assistant(blocks)) = messages.pop() else {
        return None;
    };
    Some(OpenTurn {
        extras: vec![Extra::default(); calls.len()],
        calls,
        blocks,
        results,
        then: None,
    })
}

/// Whether `call` waits for a person: its grant says `requires_approval`
/// of these arguments.
fn asks(grants: &[domain::workflow::ToolGrant], call: &ToolCall) -> bool {
    (grants.iter())
        .find(|grant| grant.grants(&call.name))
        .is_some_and(|grant| grant.asks(&call.input))
}

/// The node's failure after the last attempt.
fn give_up(provider: &str, error: &ChatError, attempts: u32) -> QueryError {
    if let ChatError::Mismatch(mismatch) = error {
        // Kept whole: the record names where the replay departed.
        return QueryError::Replay(mismatch.clone());
    }
    let message = match error {
        ChatError::RateLimited { message, .. } => {
            format!("rate limited by {provider} ({attempts} attempts): {message}")
        }
        other if attempts > 1 => format!("{other} (after {attempts} attempts)"),
        other => other.to_string(),
    };
    QueryError::Agent {
        error_type: error.kind(),
        message,
        details: None,
    }
}

fn add_usage(total: &mut Usage, turn: &Usage) {
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    total.input_tokens += turn.input_tokens;
    total.output_tokens += turn.output_tokens;
    total.cache_creation_input_tokens = add(
        total.cache_creation_input_tokens,
        turn.cache_creation_input_tokens,
    );
    total.cache_read_input_tokens =
        add(total.cache_read_input_tokens, turn.cache_read_input_tokens);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ports::{MockChatModel, MockClock, MockIdGen, MockTool, ToolError, ToolSpec};
    use domain::workflow::{AgentDef, Provider};
    use domain::{NodeId, NodeRunId, RunId, Timestamp};
    use serde_json::{Value, json};
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use uuid::Uuid;

    type Script = Result<Vec<Result<ChatEvent, ChatError>>, ChatError>;

    /// A model that answers each turn from a script and keeps every request.
    fn scripted(scripts: Vec<Script>) -> (Arc<dyn ChatModel>, Arc<Mutex<Vec<ChatRequest>>>) {
        let scripts = Mutex::new(VecDeque::from(scripts));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let mut model = MockChatModel::new();
        model.expect_provider().return_const("openai");
        model.expect_turn().returning(move |request| {
            log.lock().unwrap().push(request);
            let script = scripts
                .lock()
                .unwrap()
                .pop_front()
                .expect("a turn too many");
            script.map(|events| futures::stream::iter(events).boxed())
        });
        (Arc::new(model), seen)
    }

    fn echo_tool() -> MockTool {
        let mut tool = MockTool::new();
        tool.expect_spec().returning(|| ToolSpec {
            name: "echo".into(),
            description: "Says it back".into(),
            input_schema: json!({"type": "object", "required": ["text"],
                "properties": {"text": {"type": "string"}}}),
        });
        tool.expect_call()
            .returning(|input, _| match input["text"].as_str() {
                Some("boom") => Err(ToolError::Failed("boom".into())),
                Some(text) => Ok(json!(text)),
                None => Ok(Value::Null),
            });
        tool
    }

    fn tool_loop(model: Arc<dyn ChatModel>) -> ToolLoop {
        let mut clock = MockClock::new();
        clock
            .expect_now()
            .returning(|| Timestamp::from_millis(1_700_000_000_000));
        clock
            .expect_sleep()
            .returning(|d| Box::pin(tokio::time::sleep(d)));
        let mut ids = MockIdGen::new();
        ids.expect_uuid().returning(Uuid::new_v4);
        let router = ToolRouter::new().with(Arc::new(echo_tool()));
        ToolLoop::new(
            model,
            Arc::new(router),
            "/tmp".into(),
            Arc::new(clock),
            Arc::new(ids),
        )
    }

    fn request(agent: AgentDef) -> AgentRequest {
        AgentRequest {
            run_id: RunId::new(Uuid::new_v4()).unwrap(),
            workflow: "w".into(),
            node_id: NodeId::new("n").unwrap(),
            node_run_id: NodeRunId::new(Uuid::new_v4()),
            agent_name: "a".into(),
            agent,
            prompt: "do it".into(),
            resume: None,
            fork_session: false,
            session_id: None,
            session_usage: Default::default(),
            history: Vec::new(),
            approved_call: None,
            call_index: 0,
            instance: "0".into(),
            instance_call: 0,
            traceparent: None,
            run_tools: Default::default(),
            mcp_servers: Default::default(),
        }
    }

    fn agent() -> AgentDef {
        let mut agent = AgentDef::new(Provider::OpenAi);
        agent.model = Some("gpt-test".into());
        agent.tools = vec!["echo".into()];
        agent.max_retries = Some(2);
        agent
    }

    fn end(stop: StopReason, input: u64, output: u64) -> Result<ChatEvent, ChatError> {
        Ok(ChatEvent::End(TurnEnd {
            stop,
            usage: Usage {
                input_tokens: input,
                output_tokens: output,
                ..Usage::default()
            },
            model: Some("gpt-test-2025".into()),
            response_id: None,
        }))
    }

    fn call(id: &str, input: Value) -> Result<ChatEvent, ChatError> {
        Ok(ChatEvent::ToolCall(ToolCall {
            id: id.into(),
            name: "echo".into(),
            input,
        }))
    }

    fn text(t: &str) -> Result<ChatEvent, ChatError> {
        Ok(ChatEvent::TextDelta(t.into()))
    }

    async fn run(tool_loop: &ToolLoop, agent: AgentDef) -> Vec<Result<AgentMessage, QueryError>> {
        tool_loop
            .query(request(agent))
            .await
            .unwrap()
            .collect()
            .await
    }

    fn completed(messages: &[Result<AgentMessage, QueryError>]) -> &AgentResult {
        match messages.last() {
            Some(Ok(AgentMessage::Completed(result))) => result,
            other => panic!("not completed: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_text_turn_completes_with_its_usage() {
        let (model, _) = scripted(vec![Ok(vec![
            text("Hel"),
            text("lo"),
            end(StopReason::EndTurn, 10, 2),
        ])]);
        let out = run(&tool_loop(model), agent()).await;
        assert!(
            matches!(&out[0], Ok(AgentMessage::Session { model: Some(m), .. }) if m == "gpt-test")
        );
        let result = completed(&out);
        assert_eq!(result.text, "Hello");
        assert_eq!(result.num_turns, 1);
        assert_eq!(result.usage.input_tokens, 10);
        let per_model = result.model_usage.as_ref().unwrap();
        assert_eq!(per_model["gpt-test-2025"].output_tokens, 2);
    }

    #[tokio::test]
    async fn tool_calls_run_through_the_router_and_go_back_to_the_model() {
        let (model, seen) = scripted(vec![
            Ok(vec![
                Ok(ChatEvent::ThinkingDelta("hmm".into())),
                Ok(ChatEvent::ThinkingDone {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                }),
                call("c1", json!({"text": "hi"})),
                call("c2", json!({"text": 3})),
                call("c3", json!({"text": "boom"})),
                end(StopReason::ToolUse, 10, 5),
            ]),
            Ok(vec![text("done"), end(StopReason::EndTurn, 20, 1)]),
        ]);
        let out = run(&tool_loop(model), agent()).await;
        let finished: Vec<_> = out
            .iter()
            .filter_map(|m| match m {
                Ok(AgentMessage::ToolFinished {
                    call_id, output, ..
                }) => Some((call_id.as_str(), output.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(finished[0], ("c1", Ok(json!("hi"))));
        assert!(
            matches!(&finished[1], ("c2", Err(e)) if e.contains("/text")),
            "{finished:?}"
        );
        assert_eq!(finished[2], ("c3", Err("failed: boom".into())));
        let result = completed(&out);
        assert_eq!((result.num_turns, result.text.as_str()), (2, "done"));
        assert_eq!(
            (result.usage.input_tokens, result.usage.output_tokens),
            (30, 6)
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].tools[0].name, "echo");
        let ChatMessage::Assistant(blocks) = &seen[1].messages[1] else {
            panic!("{:?}", seen[1].messages);
        };
        assert_eq!(
            blocks[0],
            ChatBlock::Thinking {
                text: "hmm".into(),
                signature: Some("sig".into())
            }
        );
        let ChatMessage::ToolResults(results) = &seen[1].messages[2] else {
            panic!("{:?}", seen[1].messages);
        };
        assert_eq!(
            (results[0].content.as_str(), results[0].is_error),
            ("hi", false)
        );
        assert!(results[1].is_error && results[2].is_error);
    }

    /// An agent whose `echo` calls with the text "ask" wait for a person.
    fn gated() -> AgentDef {
        let mut agent = agent();
        agent.tools = domain::WorkflowDef::from_yaml(
            "name: w\nagents:\n  a:\n    provider: openai\n    model: m\n    \
             tools: [{name: echo, requires_approval: 'args.text == \"ask\"'}]\nsteps: [{agent: a}]\n",
        )
        .unwrap()
        .agents["a"]
            .tools
            .clone();
        agent
    }

    #[tokio::test]
    async fn a_gated_call_ends_the_invocation_with_the_calls_that_wait() {
        let (model, seen) = scripted(vec![Ok(vec![
            text("Let me check."),
            call("c1", json!({"text": "free"})),
            call("c2", json!({"text": "ask"})),
            call("c3", json!({"text": "after"})),
            end(StopReason::ToolUse, 10, 5),
        ])]);
        let out = run(&tool_loop(model), gated()).await;
        let ran: Vec<_> = (out.iter())
            .filter_map(|m| match m {
                Ok(AgentMessage::ToolFinished { call_id, .. }) => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        // The call before the gated one ran; it and those after it wait.
        assert_eq!(ran, ["c1"]);
        let Some(Ok(AgentMessage::ApprovalNeeded { calls, extras })) = out.last() else {
            panic!("{out:?}");
        };
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!((ids, extras.len()), (vec!["c2", "c3"], 2));
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "the model was asked nothing more"
        );
    }

    #[tokio::test]
    async fn an_open_turn_runs_its_calls_then_asks_the_model() {
        let (model, seen) = scripted(vec![Ok(vec![text("done"), end(StopReason::EndTurn, 1, 1)])]);
        let tool_loop = tool_loop(model);
        let calls = ["c1", "c2", "c3"].map(|id| ToolCall {
            id: id.into(),
            name: "echo".into(),
            input: json!({"text": if id == "c3" { "ask" } else { id }}),
        });
        let mut request = request(gated());
        request.prompt = String::new();
        request.history = vec![
            ChatMessage::User("do it".into()),
            ChatMessage::Assistant(calls.iter().cloned().map(ChatBlock::ToolCall).collect()),
            ChatMessage::ToolResults(vec![ToolResult {
                call_id: "c1".into(),
                name: "echo".into(),
                content: "c1".into(),
                is_error: false,
            }]),
        ];
        let mut approved = request.clone();
        let out: Vec<_> = tool_loop.query(request).await.unwrap().collect().await;
        // c2 runs; c3 asks, as nobody approved it.
        assert!(
            matches!(out.last(), Some(Ok(AgentMessage::ApprovalNeeded { calls, .. })) if calls[0].id == "c3"),
            "{out:?}"
        );
        let result = |id: &str| ToolResult {
            call_id: id.into(),
            name: "echo".into(),
            content: id.into(),
            is_error: false,
        };
        approved.history[2] = ChatMessage::ToolResults(vec![result("c1"), result("c2")]);
        approved.approved_call = Some("c3".into());
        let out: Vec<_> = tool_loop.query(approved).await.unwrap().collect().await;
        assert_eq!(completed(&out).text, "done");
        let seen = seen.lock().unwrap();
        // No user message was added; the results are in the calls' order.
        let messages = &seen[0].messages;
        assert_eq!(messages.len(), 3, "{messages:?}");
        let ChatMessage::ToolResults(results) = &messages[2] else {
            panic!("{messages:?}");
        };
        let ids: Vec<_> = results.iter().map(|r| r.call_id.as_str()).collect();
        assert_eq!(ids, ["c1", "c2", "c3"]);
        assert_eq!(results[2].content, "ask");
    }

    #[tokio::test]
    async fn max_turns_stops_a_model_that_keeps_asking_for_tools() {
        let asks = || {
            Ok(vec![
                call("c", json!({"text": "x"})),
                end(StopReason::ToolUse, 1, 1),
            ])
        };
        let (model, seen) = scripted(vec![asks(), asks()]);
        let mut agent = agent();
        agent.max_turns = Some(2);
        let out = run(&tool_loop(model), agent).await;
        assert!(
            matches!(out.last(), Some(Err(QueryError::Agent { error_type, .. })) if error_type == "error_max_turns")
        );
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_is_waited_out_then_retried() {
        let limited = ChatError::RateLimited {
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(2)),
        };
        let (model, seen) = scripted(vec![
            Err(limited),
            Ok(vec![text("ok"), end(StopReason::EndTurn, 1, 1)]),
        ]);
        let started = tokio::time::Instant::now();
        let out = run(&tool_loop(model), agent()).await;
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert!(out.iter().any(|m| matches!(
            m,
            Ok(AgentMessage::RateLimited {
                attempt: 1,
                retry_after_ms: Some(2000),
                ..
            })
        )));
        assert_eq!(completed(&out).text, "ok");
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_that_never_ends_fails_after_the_last_retry() {
        let limited = || {
            Err(ChatError::RateLimited {
                message: "slow down".into(),
                retry_after: None,
            })
        };
        let (model, seen) = scripted(vec![limited(), limited(), limited()]);
        let out = run(&tool_loop(model), agent()).await;
        let limits = out
            .iter()
            .filter(|m| matches!(m, Ok(AgentMessage::RateLimited { .. })))
            .count();
        assert_eq!(limits, 2);
        match out.last() {
            Some(Err(QueryError::Agent {
                error_type,
                message,
                ..
            })) => {
                assert_eq!(error_type, "rate_limit");
                assert!(
                    message.contains("rate limited by openai (3 attempts)"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_fail_at_once_and_server_errors_are_retried() {
        let bad = ChatError::Api {
            status: Some(400),
            message: "bad model".into(),
            retryable: false,
        };
        let (model, seen) = scripted(vec![Err(bad)]);
        let out = run(&tool_loop(model), agent()).await;
        assert!(
            matches!(out.last(), Some(Err(QueryError::Agent { error_type, message, .. }))
            if error_type == "api_error" && message.contains("bad model"))
        );
        assert_eq!(seen.lock().unwrap().len(), 1);

        // A reset before anything was shown is retried (a warning says so).
        let (model, _) = scripted(vec![
            Ok(vec![Err(ChatError::Network("reset".into()))]),
            Ok(vec![text("ok"), end(StopReason::EndTurn, 1, 1)]),
        ]);
        let out = run(&tool_loop(model), agent()).await;
        assert!(out.iter().any(|m| matches!(m, Ok(AgentMessage::Warning { message, .. }) if message.contains("retrying"))));
        assert_eq!(completed(&out).text, "ok");
    }

    #[tokio::test]
    async fn a_failure_after_part_of_the_turn_was_shown_is_not_retried() {
        let (model, seen) = scripted(vec![Ok(vec![
            text("Partial "),
            Err(ChatError::Api {
                status: None,
                message: "overloaded".into(),
                retryable: true,
            }),
        ])]);
        let out = run(&tool_loop(model), agent()).await;
        assert!(
            matches!(out.last(), Some(Err(QueryError::Agent { error_type, .. })) if error_type == "api_error")
        );
        assert_eq!(seen.lock().unwrap().len(), 1);
        // A stream that just stops is a network error.
        let (model, _) = scripted(vec![Ok(vec![text("Partial ")])]);
        let out = run(&tool_loop(model), agent()).await;
        assert!(
            matches!(out.last(), Some(Err(QueryError::Agent { error_type, .. })) if error_type == "network_error")
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_honours_retry_after_up_to_its_cap() {
        let b = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
        };
        assert_eq!(b.delay(1, None, 0.0), Duration::from_millis(500));
        assert!(b.delay(1, None, 0.999_999) < Duration::from_secs(1));
        assert_eq!(b.delay(3, None, 0.0), Duration::from_secs(2));
        assert_eq!(b.delay(30, None, 0.0), Duration::from_secs(5));
        let asked = Some(Duration::from_secs(3));
        assert_eq!(b.delay(1, asked, 0.5), Duration::from_secs(3));
        assert_eq!(b.delay(1, Some(Duration::from_secs(99)), 0.5), b.max);
    }
}
