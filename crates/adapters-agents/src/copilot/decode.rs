//! Maps Copilot CLI `--output-format json` lines to normalized [`AgentMessage`]s.
//!
//! The CLI prints session bookkeeping (`session.*`), streamed text
//! (`assistant.message_delta`) and thinking (`assistant.reasoning_delta`)
//! followed by the complete `assistant.message` / `assistant.reasoning`, tool
//! calls (`toolRequests` of the message, then `tool.execution_start` /
//! `tool.execution_complete` sharing a `toolCallId`), failed model calls
//! (`model.call_failure`, retried; `session.error` when it gives up), and a
//! final `result` line carrying the session id — the only place it appears,
//! so it is returned in [`AgentResult::session_id`], not as an early
//! [`AgentMessage::Session`].
//!
//! [`CopilotDecoder`] streams deltas and skips the complete block a delta
//! stream already covered, emits each tool call where it is requested as an
//! [`AgentMessage::ToolUse`] with its `toolCallId` and its completion as an
//! [`AgentMessage::Tool`] (a call without a completion stays a use alone),
//! keeps whatever it does not understand as a warning, and holds the terminal
//! item back until [`Decoder::finish`]. Copilot reports
//! a shell command that exits non-zero as `success: true`; the real exit code
//! comes from `shellExecution.exitCode` (or the output's `exit code N`).
//! Token counts and cost are not printed on stdout (only with
//! `--usage-output-file`), so [`AgentResult::usage`] stays zero.

use std::collections::HashSet;

use application::ports::{AgentMessage, AgentResult, QueryError};
use domain::SessionId;
use domain::event::Usage;
use serde::Deserialize;
use serde_json::{Value, json};

use super::wire::{
    self, Failure, Message, MessageDelta, Reasoning, ReasoningDelta, ResultLine, ToolComplete,
    ToolStart,
};
use crate::normalize::errors::{
    DURING_EXECUTION, fatal, reported, session_missing, status_error_type,
};
use crate::normalize::extra::{self, At};
use crate::normalize::{
    Cli, Decoded, Decoder, Ending, PendingCall, ToolCalls, error_text, exit_code_in, exit_error,
    warning,
};
use domain::event::Extra;

const CLI: Cli = Cli("Copilot CLI");

/// How Copilot CLI says `--resume=ID` named a session it does not have.
const NO_SESSION: &str = "No session, task, or name matched";

/// Line types that carry nothing the runtime records.
const NOISE: &[&str] = &[
    "session.skills_loaded",
    "session.mcp_servers_loaded",
    "session.tools_updated",
    "session.background_tasks_changed",
    "session.info",
    "user.message",
    "assistant.turn_end",
    "assistant.turn_retry",
    "assistant.idle",
    "assistant.message_start",
    // Fragments of the `toolRequests` of the complete message.
    "assistant.tool_call_delta",
    "model.call_start",
    "model.call_finished",
    "model.call_final_result",
    // Output chunks repeated by `tool.execution_complete`.
    "tool.shell_output",
    "tool.execution_partial_result",
];

/// Decoder state for one Copilot CLI invocation.
#[derive(Debug, Default)]
pub struct CopilotDecoder {
    /// Tool calls and their completions.
    tools: ToolCalls,
    /// Messages and reasoning blocks that streamed deltas, by id.
    streamed: HashSet<String>,
    /// The last assistant text not followed by tool calls: the final answer.
    text: String,
    /// `assistant.turn_start` lines seen.
    turns: u32,
    /// The error of a `session.error` line: the invocation failed.
    fatal: Option<QueryError>,
    /// The outcome of the `result` line, emitted at [`Decoder::finish`].
    ending: Ending,
}

impl CopilotDecoder {
    fn message_delta(&mut self, delta: MessageDelta) -> Vec<Decoded> {
        self.streamed.extend(delta.message_id);
        vec![Ok(AgentMessage::TextDelta {
            content: delta.delta_content,
        })]
    }

    fn message(&mut self, message: Message) -> Vec<Decoded> {
        let streamed = self.streamed(message.message_id.as_ref());
        let mut out = Vec::new();
        if !streamed && !message.content.is_empty() {
            out.push(Ok(AgentMessage::Text {
                content: message.content.clone(),
            }));
        }
        if message.tool_requests.is_empty() {
            if !message.content.is_empty() {
                self.text = message.content;
            }
        } else {
            // Text before a tool call is commentary, not the final answer.
            self.text.clear();
        }
        for request in message.tool_requests {
            let call = self
                .tools
                .call(request.tool_call_id, request.name, request.arguments);
            out.push(Ok(call));
        }
        out
    }

    fn reasoning_delta(&mut self, delta: ReasoningDelta) -> Vec<Decoded> {
        self.streamed.extend(delta.reasoning_id);
        vec![Ok(AgentMessage::ThinkingDelta {
            content: delta.delta_content,
            token_count: None,
        })]
    }

    fn reasoning(&mut self, reasoning: Reasoning) -> Vec<Decoded> {
        if self.streamed(reasoning.reasoning_id.as_ref()) || reasoning.content.is_empty() {
            return Vec::new();
        }
        vec![Ok(AgentMessage::Thinking {
            content: reasoning.content,
            token_count: None,
            signature: None,
        })]
    }

    /// Whether the message or reasoning block `id` streamed deltas.
    fn streamed(&self, id: Option<&String>) -> bool {
        id.is_some_and(|id| self.streamed.contains(id))
    }

    fn tool_start(&mut self, start: ToolStart) -> Vec<Decoded> {
        // Usually announced by the message's `toolRequests` already.
        let name = start.tool_name.unwrap_or_else(|| "unknown".to_owned());
        self.tools
            .call_once(start.tool_call_id, name, start.arguments)
    }

    fn tool_complete(&mut self, done: ToolComplete, value: &Value) -> Vec<Decoded> {
        let id = done.tool_call_id.clone();
        let what = "tool.execution_complete";
        let finish = |call: PendingCall| completed_tool(call, done);
        vec![Ok(self.tools.complete(
            id.as_deref(),
            what,
            "line",
            value,
            finish,
        ))]
    }

    fn session_error(&mut self, value: &Value) -> Vec<Decoded> {
        let failure = data(value).and_then(|data| Failure::deserialize(data).ok());
        let status = failure.as_ref().and_then(|f| f.status_code);
        let message = failure
            .and_then(|f| f.message.or(f.error_message))
            .unwrap_or_else(|| "Copilot CLI reported a session error".to_owned());
        let mut out = Vec::new();
        if self.fatal.is_some() {
            out.push(Ok(warning(
                "a second session.error line; the last one is kept".to_owned(),
                json!({ "line": value }),
            )));
        }
        self.fatal = Some(fatal(error_type(status), message, value));
        out
    }
}

/// A completed tool with its output. Copilot reports a shell command that
/// exits non-zero as `success: true`: the exit code decides.
fn completed_tool(call: PendingCall, done: ToolComplete) -> AgentMessage {
    let output = done.result.map_or(Value::Null, |r| r.content);
    let exit_code = done
        .shell_execution
        .and_then(|s| s.exit_code)
        .or_else(|| output.as_str().and_then(exit_code_in));
    let error = match (done.success, &done.error) {
        (Some(false), Some(error)) => Some(error_text(error)),
        (Some(false), None) => {
            Some(exit_error(exit_code).unwrap_or_else(|| "tool failed".to_owned()))
        }
        _ => exit_error(exit_code),
    };
    call.done(output, error)
}

/// A failed model call the CLI retries.
fn call_failure(failure: Failure, value: &Value) -> Vec<Decoded> {
    let reason = failure
        .error_message
        .or(failure.message)
        .unwrap_or_else(|| "unknown error".to_owned());
    let status = failure
        .status_code
        .map_or_else(|| "no status".to_owned(), |s| format!("HTTP {s}"));
    let message = format!("model call failed ({status}): {reason}");
    vec![Ok(reported(
        error_type(failure.status_code),
        message,
        value,
    ))]
}

/// What the `result` line says, after a `session.error` (`fatal`) if any.
fn outcome(
    line: ResultLine,
    value: &Value,
    session_error: Option<QueryError>,
    text: &str,
    turns: u32,
) -> Decoded {
    if let Some(QueryError::Agent {
        error_type,
        message,
        details,
    }) = session_error
    {
        return Err(QueryError::Agent {
            error_type,
            message,
            details: Some(json!({ "error": details, "result": value })),
        });
    }
    if let Some(code) = line.exit_code.filter(|&code| code != 0) {
        let message = format!("Copilot CLI reported exit code {code} without an error line");
        return Err(fatal(DURING_EXECUTION, message, value));
    }
    let usage = line.usage.unwrap_or_default();
    Ok(AgentMessage::Completed(AgentResult {
        text: text.to_owned(),
        usage: Usage::default(),
        model_usage: None,
        total_cost_usd: None,
        duration_ms: usage.session_duration_ms,
        num_turns: turns,
        session_id: line.session_id.and_then(|id| SessionId::new(id).ok()),
    }))
}

/// The `data` of a line (`null` when it has none).
fn data(value: &Value) -> Option<&Value> {
    value.get("data")
}

impl Decoder for CopilotDecoder {
    fn line(&mut self, value: Value) -> Vec<Decoded> {
        let value = &value;
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        let mut out = self.mapped(kind, value);
        if kind == "assistant.message" {
            requests_extra(&mut out, value);
        }
        // What the line holds that its event does not map (the result's goes
        // with the result, at the end).
        match wire::known(kind).filter(|_| kind != "result") {
            Some(known) => extra::before_first(out, extra::of_line(value, known)),
            None => out,
        }
    }

    fn finish(&mut self, exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
        // A `session.error` the `result` line did not take: the CLI gave up
        // on the model without a result, or reported it after one. Either
        // way the invocation failed.
        if let Some(fatal) = self.fatal.take() {
            self.ending.fail(fatal);
        }
        let missing = "a result line";
        let otherwise = || session_missing(CLI.0, NO_SESSION, exit_code, stderr_tail).map(Err);
        self.ending
            .finish(CLI, missing, exit_code, stderr_tail, otherwise)
    }
}

/// Sends what each of a message's `toolRequests` holds unmapped before the
/// tool use it made (a message's uses come after its text, in order).
fn requests_extra(out: &mut Vec<Decoded>, value: &Value) {
    let Some(requests) = value
        .pointer("/data/toolRequests")
        .and_then(Value::as_array)
    else {
        return;
    };
    let root = At::ROOT;
    let data = root.key("data");
    let list = data.key("toolRequests");
    let uses: Vec<usize> = out
        .iter()
        .enumerate()
        .filter(|(_, d)| matches!(d, Ok(AgentMessage::ToolUse { .. })))
        .map(|(i, _)| i)
        .collect();
    // From the last, so the places found stay valid as extras go in.
    for (i, at) in uses.into_iter().enumerate().rev() {
        let Some(request) = requests.get(i) else {
            continue;
        };
        let mut kept = Extra::new();
        extra::unmapped(request, wire::TOOL_REQUEST, list.index(i), &mut kept);
        extra::insert_from(out, at, kept);
    }
}

impl CopilotDecoder {
    /// What a line of type `kind` maps to.
    fn mapped(&mut self, kind: &str, value: &Value) -> Vec<Decoded> {
        // Every line but `result` carries its fields in `data`.
        let data = data(value).unwrap_or(&Value::Null);
        match kind {
            "assistant.turn_start" => {
                self.turns = self.turns.saturating_add(1);
                Vec::new()
            }
            "assistant.message_delta" => CLI.read_in(kind, data, value, |d| self.message_delta(d)),
            "assistant.message" => CLI.read_in(kind, data, value, |d| self.message(d)),
            "assistant.reasoning_delta" => {
                CLI.read_in(kind, data, value, |d| self.reasoning_delta(d))
            }
            "assistant.reasoning" => CLI.read_in(kind, data, value, |d| self.reasoning(d)),
            "tool.execution_start" => CLI.read_in(kind, data, value, |d| self.tool_start(d)),
            "tool.execution_complete" => {
                CLI.read_in(kind, data, value, |d| self.tool_complete(d, value))
            }
            "model.call_failure" => CLI.read_in(kind, data, value, |d| call_failure(d, value)),
            "session.error" => self.session_error(value),
            "session.warning" => {
                let message = data
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("Copilot CLI warning")
                    .to_owned();
                vec![Ok(warning(message, json!({ "line": value })))]
            }
            "result" => {
                let (fatal, text, turns) = (&mut self.fatal, &self.text, self.turns);
                let outcome = |line| outcome(line, value, fatal.take(), text, turns);
                let known = wire::known("result").unwrap_or(crate::normalize::extra::ALL);
                self.ending.result(value, known, outcome)
            }
            kind if NOISE.contains(&kind) => Vec::new(),
            _ => CLI.unknown_type(value),
        }
    }
}

/// The stable error type of a failed model call: `rate_limit` for HTTP 429,
/// `api_error` for other 4xx/5xx, `error_during_execution` otherwise.
fn error_type(status: Option<u64>) -> &'static str {
    status
        .and_then(status_error_type)
        .unwrap_or(DURING_EXECUTION)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::normalize::testing::*;

    fn tools(out: &[Decoded]) -> Vec<(&str, &Value, &Value, Option<&str>)> {
        out.iter()
            .filter_map(|d| match d {
                Ok(AgentMessage::Tool {
                    name,
                    input,
                    output,
                    error,
                    ..
                }) => Some((name.as_str(), input, output, error.as_deref())),
                _ => None,
            })
            .collect()
    }

    const OK_RESULT: &str =
        r#"{"type":"result","sessionId":"s1","exitCode":0,"usage":{"sessionDurationMs":9}}"#;

    #[test]
    fn keeps_what_every_cli_decoder_promises() {
        assert_cli_basics::<CopilotDecoder>("copilot", &[], OK_RESULT);
    }

    #[test]
    fn a_failure_keeps_its_result_line() {
        let out = recorded::<CopilotDecoder>("copilot/BADREQ");
        let Some(Err(QueryError::Agent { details, .. })) = out.last() else {
            panic!()
        };
        assert_eq!(
            details.as_ref().unwrap()["result"]["sessionId"],
            "182dcdf4-19e0-426e-97fe-c2fa0298a658"
        );
    }

    #[test]
    fn rate_limits_and_odd_results() {
        let fail = r#"{"type":"session.error","data":{"errorType":"query","message":"429 slow","statusCode":429}}"#;
        let failed = r#"{"type":"result","sessionId":"s1","exitCode":2}"#;
        let unreadable = r#"{"type":"result","usage":"oops"}"#;
        assert_error_types::<CopilotDecoder>(
            &[],
            &[
                (fail, "rate_limit"),
                (failed, "error_during_execution"),
                (unreadable, "error_during_execution"),
            ],
        );
        let out = run::<CopilotDecoder>(&[OK_RESULT, OK_RESULT], Some(1), "");
        assert_eq!(collapsed_kinds(&out).join(" "), "warning warning completed");
        // A session error after the result still fails the invocation.
        let out = run::<CopilotDecoder>(&[OK_RESULT, fail], Some(0), "");
        assert!(
            matches!(out.last(), Some(Err(QueryError::Agent { error_type, .. })) if error_type == "rate_limit"),
            "{out:?}"
        );
    }

    #[test]
    fn hostile_input_does_not_stop_decoding() {
        let text =
            r#"{"type":"assistant.message_delta","data":{"messageId":"m1","deltaContent":"TEXT"}}"#;
        let after = [
            r#"{"type":"brand.new","data":{"x":1}}"#,
            r#"{"type":"assistant.message","data":{"messageId":"m2","content":"whole"}}"#,
            r#"{"type":"assistant.reasoning","data":{"reasoningId":"r1","content":"hmm"}}"#,
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"nope"}}"#,
            r#"{"type":"assistant.message","data":{"messageId":"m3","content":"","toolRequests":[{"toolCallId":"t1","name":"bash","arguments":{"command":"sleep 9"}}]}}"#,
            r#"{"type":"tool.execution_start","data":{"toolCallId":"t2","toolName":"view","arguments":{}}}"#,
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"t2","success":false,"error":{"message":"denied"}}}"#,
            r#"{"type":"assistant.message","data":"oops"}"#,
            OK_RESULT,
        ];
        let out = hostile::<CopilotDecoder>(&[], text, &after);
        assert_eq!(
            collapsed_kinds(&out).join(" "),
            "warning text_delta warning warning text_delta warning text thinking warning tool_use tool_use tool warning completed"
        );
        let Ok(AgentMessage::Warning { details, .. }) = &out[5] else {
            panic!()
        };
        assert_eq!(details.as_ref().unwrap()["line"]["data"]["x"], 1);
        assert_eq!(
            out[9].as_ref().unwrap(),
            &use_of(Some("t1"), "bash", json!({"command": "sleep 9"})),
            "t1 never completes: it stays a use alone"
        );
        let tools = tools(&out);
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].0, "view");
        assert_eq!(tools[0].3, Some("denied"));
        let result = completed(&out);
        assert_eq!(result.text, "", "text before a tool call is not the answer");
        assert_eq!(
            result.session_id.as_ref().map(SessionId::as_str),
            Some("s1")
        );
    }

    #[test]
    fn calls_keep_their_ids_order_and_missing_fields() {
        // Thinking, text and two requests in one message; text of the next
        // message before the first completion; a start without its
        // toolCallId (answered by a completion without one); a call that
        // never completes; a line of a newer CLI.
        let future = r#"{"type":"tool.execution_progress","data":{"toolCallId":"c1","pct":5}}"#;
        let out = run::<CopilotDecoder>(
            &[
                r#"{"type":"assistant.reasoning","data":{"reasoningId":"r1","content":"plan"}}"#,
                r#"{"type":"assistant.message","data":{"messageId":"m1","content":"running","toolRequests":[{"toolCallId":"c1","name":"bash","arguments":{"command":"echo a"}},{"toolCallId":"c2","name":"bash","arguments":{"command":"sleep 99"}}]}}"#,
                r#"{"type":"tool.execution_start","data":{"toolCallId":"c1","toolName":"bash","arguments":{"command":"echo a"}}}"#,
                r#"{"type":"tool.execution_start","data":{"toolName":"view","arguments":{"path":"a"}}}"#,
                future,
                r#"{"type":"assistant.message","data":{"messageId":"m2","content":"meanwhile"}}"#,
                r#"{"type":"tool.execution_complete","data":{"toolCallId":"c1","success":true,"result":{"content":"a"}}}"#,
                r#"{"type":"tool.execution_complete","data":{"success":true,"result":{"content":"file"}}}"#,
                OK_RESULT,
            ],
            Some(0),
            "",
        );
        let (mut messages, error) = split(out);
        assert!(error.is_none());
        assert!(matches!(messages.pop(), Some(AgentMessage::Completed(_))));
        let future: Value = serde_json::from_str(future).unwrap();
        assert_eq!(
            messages,
            [
                AgentMessage::Thinking {
                    content: "plan".into(),
                    token_count: None,
                    signature: None,
                },
                text_of("running"),
                use_of(Some("c1"), "bash", json!({"command": "echo a"})),
                use_of(Some("c2"), "bash", json!({"command": "sleep 99"})),
                use_of(None, "view", json!({"path": "a"})),
                warning_of(
                    "unknown Copilot CLI line type `tool.execution_progress`; kept as is",
                    json!({ "line": future })
                ),
                text_of("meanwhile"),
                tool_of(
                    Some("c1"),
                    "bash",
                    json!({"command": "echo a"}),
                    json!("a"),
                    None
                ),
                tool_of(None, "view", json!({"path": "a"}), json!("file"), None),
            ],
            "c2 stays a use alone: no result is made up for it"
        );
    }

    #[test]
    fn a_resume_of_a_session_it_never_saved_is_session_not_found() {
        // What Copilot CLI 1.0.102 printed for `--resume=ID` when it has no
        // session ID (exit 1, nothing on stdout).
        let stderr = "Error: No session, task, or name matched '22222222-2222-4333-8444-555555555555'.\n\nTo resume by session or task ID:  copilot --resume=<id>\nTo start a new session with ID:   copilot --session-id=<valid-uuid>\n";
        let out = crate::normalize::decode_all(CopilotDecoder::default(), b"", Some(1), stderr);
        let (error_type, message) = agent_error(&out);
        assert_eq!(error_type, "session_not_found");
        assert!(
            message.contains("No session, task, or name matched"),
            "{message}"
        );
        // Any other failure stays what it was.
        let out =
            crate::normalize::decode_all(CopilotDecoder::default(), b"", Some(1), "Error: boom\n");
        assert_eq!(agent_error(&out).0, "error_during_execution");
    }
}
