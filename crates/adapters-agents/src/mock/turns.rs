//! Turn by turn replay of an HTTP agent's recorded call.
//!
//! awr runs an HTTP agent's tool loop itself, so a recording of one is
//! replayed through the same [`ToolLoop`]: a [`ChatModel`] serves each turn
//! the model streamed (split from the call's recorded events at its tool
//! calls), and a tool router of recorded tools answers each tool call with
//! the result recorded for it. Each turn after the first is checked against
//! what the recording says it added to the conversation (`turns`): the
//! model's previous turn and its tools' results. An edited recorded tool
//! result, or a recorded answer that no longer leads to the recorded next
//! request, is a replay mismatch naming the turn and the JSON Pointer, not
//! a different run shown as if nothing happened.

use std::sync::{Arc, Mutex};

use application::ports::{
    AgentRequest, AgentStream, ChatError, ChatEvent, ChatMessage, ChatModel, ChatRequest,
    ChatStream, Clock, IdGen, QueryError, QueryFn, StopReason, Tool, ToolContext, ToolError,
    ToolSpec, TurnEnd,
};
use application::tool_loop::ToolLoop;
use application::tools::ToolRouter;
use async_trait::async_trait;
use domain::ErrorKind;
use domain::event::Usage;
use domain::recording::{Mismatch, MismatchKind};
use domain::workflow::{MCP_PREFIX, ToolGrant};
use futures::StreamExt;
use serde_json::{Value, json};

use super::fixture::{FixtureCall, RecordedTurn};
use application::recording::request;
use application::recording::turns::{Outcome, Turn, message_json, recorded_extra, split};
use domain::event::Extra;

/// What a replay of HTTP agents needs besides the recording: the tools
/// their specs come from, and the clock and ids of the run.
#[derive(Clone)]
pub struct TurnReplay {
    /// The tools a live run would have (only their specs are used).
    pub tools: Arc<ToolRouter>,
    /// The run's clock.
    pub clock: Arc<dyn Clock>,
    /// The run's ids.
    pub ids: Arc<dyn IdGen>,
}

/// Replays `call` of `request`'s node through the tool loop.
pub(super) async fn replay(
    replay: &TurnReplay,
    request: AgentRequest,
    call: &FixtureCall,
    at: Mismatch,
) -> Result<AgentStream, QueryError> {
    let turns = split(&call.events);
    let outcomes = turns
        .iter()
        .flat_map(|t| t.calls.iter().cloned().map(Some))
        .collect();
    let model = RecordedModel {
        turns,
        checks: call.turns.clone(),
        output: call.output.clone(),
        at,
        complete_extra: call
            .events
            .iter()
            .find(|e| e["type"] == "agent:complete")
            .and_then(recorded_extra),
        state: Mutex::new(Served::default()),
    };
    let tools = Arc::new(Mutex::new(outcomes));
    let every: Vec<ToolGrant> = replay
        .tools
        .names()
        .into_iter()
        .map(ToolGrant::new)
        .collect();
    // Tools of MCP servers are not started in a replay: the recording
    // names them, and holds their results.
    let mut specs = replay.tools.specs(&every);
    for (call, _) in outcomes_of(&tools) {
        if call.name.starts_with(MCP_PREFIX) && !specs.iter().any(|s| s.name == call.name) {
            specs.push(ToolSpec {
                name: call.name,
                description: String::new(),
                input_schema: json!({"type": "object"}),
            });
        }
    }
    let router = specs.into_iter().fold(ToolRouter::new(), |router, spec| {
        router.with(Arc::new(RecordedTool {
            spec,
            outcomes: Arc::clone(&tools),
        }))
    });
    let tool_loop = ToolLoop::new(
        Arc::new(model),
        Arc::new(router),
        std::env::temp_dir(),
        Arc::clone(&replay.clock),
        Arc::clone(&replay.ids),
    );
    let failure = call.output.error.clone();
    let stream = tool_loop.query(request).await?;
    // A call recorded as failed ends in its recorded error, not in the
    // stand-in the loop reports for it.
    Ok(Box::pin(stream.map(move |item| match (item, &failure) {
        (Err(QueryError::Agent { error_type, .. }), Some(recorded))
            if error_type != ErrorKind::Fixture =>
        {
            Err(QueryError::Agent {
                error_type: recorded.error_type.clone().into(),
                message: recorded.message.clone(),
                details: None,
            })
        }
        (item, _) => item,
    })))
}

/// Where a replayed call is: the turn next asked, and how much of the
/// conversation the last request held.
#[derive(Default)]
struct Served {
    turn: usize,
    seen: usize,
}

/// A model that answers each turn of one call from its recording.
struct RecordedModel {
    turns: Vec<Turn>,
    checks: Vec<RecordedTurn>,
    output: super::FixtureOutput,
    /// The call, as a mismatch names it (node, call, file): each refused
    /// turn fills in the rest.
    at: Mismatch,
    /// What the call's result held unmapped (its recorded `agent:complete`).
    complete_extra: Option<Extra>,
    state: Mutex<Served>,
}

impl RecordedModel {
    /// Checks what turn `turn` adds to the conversation against the
    /// recording: `added` starts at message `from`.
    fn check(&self, turn: usize, from: usize, added: &[ChatMessage]) -> Result<(), ChatError> {
        let Some(recorded) = self.checks.iter().find(|c| c.turn as usize == turn) else {
            return Ok(());
        };
        let sent: Vec<Value> = added.iter().map(message_json).collect();
        let sent = json!({"messages": sent});
        let was = json!({"messages": recorded.messages});
        let hash = request::request_hash(&sent);
        if hash == recorded.request_hash && request::request_hash(&was) == hash {
            return Ok(());
        }
        let (pointer, left, right) = request::first_difference(&was, &sent)
            .unwrap_or_else(|| (String::new(), Value::Null, sent.clone()));
        let mut refused = self.refused(MismatchKind::Turn, turn);
        // The pointer into the whole request: its messages from the first.
        refused.pointer = absolute(&pointer, from);
        (refused.recorded, refused.sent) = (left, right);
        Err(ChatError::Mismatch(Box::new(refused)))
    }

    /// The call's mismatch of `kind` at `turn`, nothing compared yet.
    fn refused(&self, kind: MismatchKind, turn: usize) -> Mismatch {
        Mismatch {
            kind,
            turn: Some(u32::try_from(turn).unwrap_or(u32::MAX)),
            ..self.at.clone()
        }
    }

    /// The stream of turn `turn`, ending as the recording did.
    fn serve(&self, turn: usize) -> Vec<Result<ChatEvent, ChatError>> {
        let Some(recorded) = self.turns.get(turn) else {
            return Vec::new();
        };
        let mut out: Vec<Result<ChatEvent, ChatError>> =
            recorded.stream.iter().cloned().map(Ok).collect();
        for (i, (call, _)) in recorded.calls.iter().enumerate() {
            if let Some(Some(extra)) = recorded.call_extras.get(i) {
                out.push(Ok(ChatEvent::Extra(extra.clone())));
            }
            out.push(Ok(ChatEvent::ToolCall(call.clone())));
        }
        let last = turn + 1 == self.turns.len();
        if !recorded.calls.is_empty() {
            out.push(Ok(ChatEvent::End(TurnEnd {
                stop: StopReason::ToolUse,
                usage: Usage::default(),
                model: None,
                response_id: None,
            })));
        } else if let Some(error) = self.output.error.as_ref().filter(|_| last) {
            out.push(Err(ChatError::Api {
                status: None,
                message: error.message.clone(),
                retryable: false,
            }));
        } else {
            // What the result held unmapped goes with the call's end.
            out.extend(self.complete_extra.clone().map(|e| Ok(ChatEvent::Extra(e))));
            // The call's usage is recorded whole: its last turn carries it.
            out.push(Ok(ChatEvent::End(TurnEnd {
                stop: StopReason::EndTurn,
                usage: self.output.usage.clone(),
                model: self
                    .output
                    .model_usage
                    .as_ref()
                    .and_then(|m| m.keys().next().cloned()),
                response_id: None,
            })));
        }
        out
    }
}

/// `pointer` (into `{"messages": [added...]}`) as a pointer into the
/// whole request, whose messages before `from` were not part of the check.
fn absolute(pointer: &str, from: usize) -> String {
    let mut parts = pointer.splitn(4, '/');
    let (_, field, index, rest) = (parts.next(), parts.next(), parts.next(), parts.next());
    match (field, index.and_then(|i| i.parse::<usize>().ok())) {
        (Some("messages"), Some(i)) => match rest {
            Some(rest) => format!("/messages/{}/{rest}", from + i),
            None => format!("/messages/{}", from + i),
        },
        _ if pointer.is_empty() => "/messages".into(),
        _ => pointer.to_owned(),
    }
}

#[async_trait]
impl ChatModel for RecordedModel {
    fn provider(&self) -> &'static str {
        "recording"
    }

    async fn turn(&self, request: ChatRequest) -> Result<ChatStream, ChatError> {
        let (turn, from) = {
            let mut state = self
                .state
                .lock()
                .map_err(|_| ChatError::Replay("the replay state is unusable".into()))?;
            let at = (state.turn, state.seen);
            state.turn += 1;
            state.seen = request.messages.len();
            at
        };
        if let Some(error) = self
            .output
            .error
            .as_ref()
            .filter(|_| turn == self.turns.len())
        {
            // The call failed asking for this turn (nothing of it streamed).
            return Err(ChatError::Api {
                status: None,
                message: error.message.clone(),
                retryable: false,
            });
        }
        if turn >= self.turns.len() {
            // A turn too many: refused with the conversation it sends.
            let mut refused = self.refused(MismatchKind::ExtraTurn, turn);
            refused.pointer = "/messages".into();
            refused.sent = request.messages.iter().map(message_json).collect();
            refused.recorded_turns = Some(u32::try_from(self.turns.len()).unwrap_or(u32::MAX));
            return Err(ChatError::Mismatch(Box::new(refused)));
        }
        if turn > 0 {
            self.check(turn, from, request.messages.get(from..).unwrap_or(&[]))?;
        }
        Ok(futures::stream::iter(self.serve(turn)).boxed())
    }
}

/// A tool that answers with the outcomes recorded for its calls: the
/// first not yet served with its name and arguments.
struct RecordedTool {
    spec: ToolSpec,
    outcomes: Arc<Mutex<Vec<Option<Outcome>>>>,
}

/// A recorded tool call and how it ended.

#[async_trait]
impl Tool for RecordedTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, input: Value, _: &ToolContext) -> Result<Value, ToolError> {
        let mut outcomes = self
            .outcomes
            .lock()
            .map_err(|_| ToolError::Failed("the replay state is unusable".into()))?;
        let found = outcomes.iter_mut().find(|o| {
            o.as_ref()
                .is_some_and(|(call, _)| call.name == self.spec.name && call.input == input)
        });
        match found.and_then(Option::take) {
            Some((_, Ok(output))) => Ok(output),
            Some((_, Err(error))) => Err(recorded_error(error)),
            None => Err(ToolError::Failed(format!(
                "the recording holds no result of `{}` for {input}",
                self.spec.name
            ))),
        }
    }
}

/// The recorded calls not served yet.
fn outcomes_of(outcomes: &Mutex<Vec<Option<Outcome>>>) -> Vec<Outcome> {
    match outcomes.lock() {
        Ok(outcomes) => outcomes.iter().flatten().cloned().collect(),
        Err(_) => Vec::new(),
    }
}

/// A recorded tool error as the error that prints as it did.
fn recorded_error(error: String) -> ToolError {
    if let Some(rest) = error.strip_prefix("failed: ") {
        return ToolError::Failed(rest.to_owned());
    }
    if let Some(rest) = error.strip_prefix("refused: ") {
        return ToolError::Denied(rest.to_owned());
    }
    ToolError::Failed(error)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::mock::{FixtureFile, MockQuery};
    use application::ports::AgentMessage;
    use application::recording::turns::recorded_turns;
    use domain::Timestamp;
    use domain::workflow::Provider;
    use futures::future::BoxFuture;

    struct Still;
    impl Clock for Still {
        fn now(&self) -> Timestamp {
            Timestamp::from_millis(0)
        }
        fn sleep(&self, _: std::time::Duration) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
    }
    struct Ids;
    impl IdGen for Ids {
        fn uuid(&self) -> uuid::Uuid {
            uuid::Uuid::from_u128(7)
        }
    }

    /// An echo tool's spec, as the live router would have it.
    struct Echo;
    #[async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "echo".into(),
                description: "Says it back".into(),
                input_schema: json!({"type": "object"}),
            }
        }
        async fn call(&self, _: Value, _: &ToolContext) -> Result<Value, ToolError> {
            panic!("a replay never runs a tool")
        }
    }

    fn events() -> Vec<Value> {
        serde_json::from_value(json!([
            {"type": "agent:start", "sessionId": "s"},
            {"type": "agent:text:delta", "content": "let me "},
            {"type": "agent:text:delta", "content": "check"},
            {"type": "agent:text", "content": "let me check"},
            {"type": "agent:tool", "toolUseId": "c1", "toolName": "echo", "toolInput": {"text": "hi"}, "toolOutput": "hi"},
            {"type": "agent:text:delta", "content": "it said hi"},
        ]))
        .unwrap()
    }

    fn mock(dir: &std::path::Path) -> MockQuery {
        MockQuery::recording(dir).with_turns(TurnReplay {
            tools: Arc::new(ToolRouter::new().with(Arc::new(Echo))),
            clock: Arc::new(Still),
            ids: Arc::new(Ids),
        })
    }

    /// A call of node `coder`, an OpenAI agent granted `echo`.
    fn request() -> AgentRequest {
        let mut request = crate::normalize::testing::agent_request(Provider::OpenAi, None);
        request.agent.tools = vec!["echo".into()];
        request
    }

    /// What replaying `call`, recorded as node `coder`'s only call, yields.
    async fn replayed(call: Value) -> Vec<Result<AgentMessage, QueryError>> {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nodes/wf");
        std::fs::create_dir_all(&dir).unwrap();
        let body = json!({"calls": [call]});
        serde_json::from_str::<FixtureFile>(&body.to_string()).unwrap();
        std::fs::write(dir.join("coder.json"), body.to_string()).unwrap();
        mock(tmp.path())
            .query(request())
            .await
            .unwrap()
            .collect()
            .await
    }

    #[test]
    fn a_call_splits_into_turns_at_its_tool_calls() {
        let turns = split(&events());
        assert_eq!(turns.len(), 2);
        assert_eq!(
            turns[0].stream,
            vec![
                ChatEvent::TextDelta("let me ".into()),
                ChatEvent::TextDelta("check".into())
            ]
        );
        assert_eq!(turns[0].calls[0].0.name, "echo");
        assert_eq!(turns[0].calls[0].1, Ok(json!("hi")));
        assert!(turns[1].calls.is_empty());
        let recorded = recorded_turns(&events());
        assert_eq!(recorded.len(), 1);
        assert_eq!(
            recorded[0]["messages"],
            json!([
                {"role": "assistant", "content": [
                    {"type": "text", "text": "let me check"},
                    {"type": "tool_call", "id": "c1", "name": "echo", "input": {"text": "hi"}}]},
                {"role": "tool", "results": [{"callId": "c1", "name": "echo", "content": "hi", "isError": false}]}
            ])
        );
    }

    /// The loop runs again on the recorded turns: the tool's recorded
    /// result is served (the tool itself never runs), the deltas stream as
    /// recorded, and the call ends with the recorded text and usage.
    #[tokio::test]
    async fn a_recorded_tool_loop_replays_turn_by_turn() {
        let call = json!({
            "events": events(),
            "turns": recorded_turns(&events()),
            "output": {"text": "it said hi", "usage": {"inputTokens": 5, "outputTokens": 3}}
        });
        let out = replayed(call).await;
        let deltas: Vec<&str> = out
            .iter()
            .filter_map(|m| match m {
                Ok(AgentMessage::TextDelta { content }) => Some(content.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["let me ", "check", "it said hi"]);
        assert!(out.iter().any(|m| matches!(m,
            Ok(AgentMessage::ToolFinished { output: Ok(v), .. }) if v == "hi")));
        match out.last() {
            Some(Ok(AgentMessage::Completed(r))) => {
                assert_eq!((r.text.as_str(), r.usage.output_tokens), ("it said hi", 3));
                assert_eq!(r.num_turns, 2);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A stream that broke off with an error replays its deltas, then that
    /// error, as recorded.
    #[tokio::test]
    async fn a_stream_that_ended_in_an_error_replays_that_error() {
        let call = json!({
            "events": [{"type": "agent:text:delta", "content": "half"}],
            "output": {"error": {"errorType": "network_error", "message": "connection reset"}}
        });
        let out = replayed(call).await;
        assert!(matches!(&out[1], Ok(AgentMessage::TextDelta { content }) if content == "half"));
        match out.last() {
            Some(Err(QueryError::Agent {
                error_type,
                message,
                ..
            })) => assert_eq!(
                (error_type.as_str(), message.as_str()),
                ("network_error", "connection reset")
            ),
            other => panic!("{other:?}"),
        }
    }

    /// A call that failed asking for its next turn, after its tools ran,
    /// replays its turns and tools, then that error.
    #[tokio::test]
    async fn a_call_that_failed_between_turns_replays_that_error() {
        let mut recorded = events();
        recorded.pop();
        let call = json!({
            "events": recorded,
            "output": {"error": {"errorType": "rate_limit", "message": "slow down"}}
        });
        let out = replayed(call).await;
        assert!(
            out.iter()
                .any(|m| matches!(m, Ok(AgentMessage::ToolFinished { .. })))
        );
        match out.last() {
            Some(Err(QueryError::Agent { error_type, .. })) => assert_eq!(error_type, "rate_limit"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pointers_are_into_the_whole_request() {
        assert_eq!(
            absolute("/messages/1/results/0/content", 3),
            "/messages/4/results/0/content"
        );
        assert_eq!(absolute("/messages/0", 2), "/messages/2");
        assert_eq!(absolute("", 2), "/messages");
    }
}
