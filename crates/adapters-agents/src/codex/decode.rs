//! Maps Codex `exec --json` lines to normalized [`AgentMessage`]s.
//!
//! Codex prints `thread.started`, then per turn `turn.started`, items
//! (`item.started` / `item.updated` / `item.completed`) and `turn.completed`
//! or `turn.failed`. [`CodexDecoder`] emits text and thinking when their item
//! completes, a tool item's start as an [`AgentMessage::ToolUse`] and its
//! completion as an [`AgentMessage::Tool`], both with the `item.id` (Codex
//! names no call id; the item id is its own id of the call), so a call that
//! never completes stays a use alone. It keeps whatever it does not
//! understand as a warning and holds the terminal item back until
//! [`Decoder::finish`], so that it is always last.
//!
//! Usage: Codex reports no cost, and after a resume `turn.completed.usage` is
//! cumulative for the whole thread, not for this invocation. A decoder sees
//! one invocation only, so it reports the usage as Codex printed it; the
//! shared [`crate::process::CliAgent`] subtracts what the thread's earlier
//! invocations recorded ([`crate::process::CliProgram::REPORTS_SESSION_TOTALS`]).

use application::ports::{AgentMessage, AgentResult, QueryError};
use domain::SessionId;
use serde::Deserialize;
use serde_json::{Value, json};

use super::wire::{
    self, CommandExecution, ErrorItem, ErrorMessage, ItemHead, ItemLine, McpToolCall, TextItem,
    ThreadStarted, TurnCompleted, TurnFailed,
};
use crate::normalize::errors::{API_ERROR, DURING_EXECUTION, RATE_LIMIT, fatal, reported};
use crate::normalize::extra;
use crate::normalize::usage::TokenCounts;
use crate::normalize::{
    Answer, Cli, Decoded, Decoder, Ending, STDERR_TAIL_CHARS, ToolCalls, announce_session,
    error_text, tail, unpaired_result, warning,
};

const CLI: Cli = Cli("Codex");

/// The tool name given to `command_execution` items (Codex names none).
pub const SHELL_TOOL: &str = "shell";

/// The item types that become [`AgentMessage::Tool`]s.
const TOOL_ITEMS: [&str; 5] = [
    "command_execution",
    "file_change",
    "mcp_tool_call",
    "web_search",
    "todo_list",
];

/// Decoder state for one Codex invocation.
#[derive(Debug, Default)]
pub struct CodexDecoder {
    /// The thread announced with [`AgentMessage::Session`].
    session: Option<SessionId>,
    /// Tool items started and not completed, in start order.
    tools: ToolCalls,
    /// Text of the last `agent_message`: the final text.
    last_text: Option<String>,
    /// `turn.completed` lines seen.
    turns: u32,
    /// Usage of the last `turn.completed` (cumulative, so the last one counts).
    usage: Option<TokenCounts>,
    /// The first `turn.failed`, emitted at [`Decoder::finish`].
    failure: Option<QueryError>,
    /// Holds the end back until [`Decoder::finish`].
    ending: Ending,
}

impl CodexDecoder {
    /// The thread id, once `thread.started` announced it.
    pub fn session_id(&self) -> Option<&SessionId> {
        self.session.as_ref()
    }

    fn item(&mut self, event: &str, line: ItemLine, value: &Value) -> Vec<Decoded> {
        let item = line.item;
        let head = match ItemHead::deserialize(&item) {
            Ok(head) => head,
            Err(err) => return CLI.malformed(event, &err, value),
        };
        let kind = head.kind.as_deref().unwrap_or("");
        if TOOL_ITEMS.contains(&kind) {
            return self.tool_item(event, head.id, &item);
        }
        if event != "item.completed" {
            // Text, thinking and warnings are emitted whole, on completion.
            return Vec::new();
        }
        match kind {
            "agent_message" => CLI.read_in("agent_message item", &item, &item, |t: TextItem| {
                self.last_text = Some(t.text.clone());
                vec![Ok(AgentMessage::Text { content: t.text })]
            }),
            "reasoning" => CLI.read_in("reasoning item", &item, &item, |t: TextItem| {
                vec![Ok(AgentMessage::Thinking {
                    content: t.text,
                    token_count: None,
                    signature: None,
                })]
            }),
            "error" => {
                let message = ErrorItem::deserialize(&item)
                    .map(|e| e.message)
                    .unwrap_or_default();
                vec![Ok(warning(
                    format!("Codex reported: {message}"),
                    json!({ "item": item }),
                ))]
            }
            other => vec![Ok(warning(
                format!("unknown Codex item type {other:?}; kept as is"),
                json!({ "item": item }),
            ))],
        }
    }

    fn tool_item(&mut self, event: &str, id: Option<String>, item: &Value) -> Vec<Decoded> {
        if event != "item.completed" {
            // `item.started` announces the call; `item.updated` only adds output.
            let AgentMessage::Tool { name, input, .. } = tool_message(id.clone(), item) else {
                return Vec::new();
            };
            return self.tools.call_once(id, name, input);
        }
        match self.tools.answer(id.as_deref()) {
            // Codex may report a tool only once it is done: the whole call.
            Answer::Call(_) | Answer::Unknown => vec![Ok(tool_message(id, item))],
            repeated @ Answer::Repeated => vec![Ok(unpaired_result(
                &repeated,
                "item.completed",
                "item",
                item,
            ))],
        }
    }

    fn turn_completed(&mut self, line: TurnCompleted) -> Vec<Decoded> {
        self.turns = self.turns.saturating_add(1);
        if line.usage.is_some() {
            self.usage = line.usage;
        }
        Vec::new()
    }

    fn turn_failed(&mut self, value: &Value) -> Vec<Decoded> {
        let message = TurnFailed::deserialize(value)
            .ok()
            .and_then(|l| l.error)
            .and_then(|e| e.message)
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "Codex reported a failed turn".to_owned());
        if self.failure.is_some() {
            return vec![Ok(warning(
                "a second turn.failed line; the first one is kept".to_owned(),
                json!({ "line": value }),
            ))];
        }
        self.failure = Some(fatal(classify(&message), message, value));
        Vec::new()
    }
}

impl Decoder for CodexDecoder {
    fn line(&mut self, value: Value) -> Vec<Decoded> {
        let value = &value;
        let kind = value.get("type").and_then(Value::as_str);
        let out = self.mapped(kind, value);
        let Some(known) = kind.and_then(|k| wire::known(k, value)) else {
            return out;
        };
        let extra = extra::of_line(value, known);
        if kind == Some("turn.completed") {
            // The last turn's usage is the result's: so are its other fields.
            self.ending.keep(extra);
            return out;
        }
        extra::before_first(out, extra)
    }

    fn finish(&mut self, exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
        self.end(exit_code, stderr_tail)
    }
}

impl CodexDecoder {
    /// What a line of type `kind` maps to.
    fn mapped(&mut self, kind: Option<&str>, value: &Value) -> Vec<Decoded> {
        match kind {
            Some(kind @ "thread.started") => CLI.read(kind, value, |line: ThreadStarted| {
                announce_session(&mut self.session, line.thread_id, None, kind, value)
            }),
            Some("turn.started") => Vec::new(),
            Some(event @ ("item.started" | "item.updated" | "item.completed")) => {
                CLI.read(event, value, |line| self.item(event, line, value))
            }
            Some(kind @ "turn.completed") => CLI.read(kind, value, |l| self.turn_completed(l)),
            Some("turn.failed") => self.turn_failed(value),
            Some("error") => {
                let message = ErrorMessage::deserialize(value)
                    .ok()
                    .and_then(|l| l.message)
                    .unwrap_or_else(|| "Codex reported an error".to_owned());
                let error_type = match classify(&message) {
                    RATE_LIMIT => RATE_LIMIT,
                    _ => "network_error",
                };
                vec![Ok(reported(error_type, message, value))]
            }
            _ => CLI.unknown_type(value),
        }
    }

    /// The end of the stream: its pending items and its one outcome.
    fn end(&mut self, exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
        // Tool items that never completed were recorded as uses: nothing to add.
        let outcome = if let Some(err) = self.failure.take() {
            Some(Err(err))
        } else if self.turns > 0 {
            Some(Ok(AgentMessage::Completed(AgentResult {
                text: self.last_text.take().unwrap_or_default(),
                usage: self.usage.unwrap_or_default().cached_inside(),
                model_usage: None,
                total_cost_usd: None,
                duration_ms: None,
                num_turns: self.turns,
                session_id: None,
            })))
        } else {
            None
        };
        let missing = "turn.completed or turn.failed";
        self.ending
            .finish(CLI, missing, exit_code, stderr_tail, || outcome)
    }
}

/// A tool item as an [`AgentMessage::Tool`] (its name and input are also
/// what the item's start announces).
fn tool_message(id: Option<String>, item: &Value) -> AgentMessage {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    let status = item.get("status").and_then(Value::as_str);
    let failed = matches!(status, Some("failed" | "declined"));
    match kind {
        "command_execution" => {
            let cmd = CommandExecution::deserialize(item).unwrap_or(CommandExecution {
                command: item.get("command").cloned().unwrap_or(Value::Null),
                aggregated_output: String::new(),
                exit_code: None,
                status: None,
            });
            let error = match (cmd.exit_code, cmd.status.as_deref()) {
                (Some(code), _) if code != 0 => Some(command_error(
                    &format!("command exited with code {code}"),
                    &cmd.aggregated_output,
                )),
                (_, Some(status @ ("failed" | "declined"))) => Some(command_error(
                    &format!("command {status}"),
                    &cmd.aggregated_output,
                )),
                _ => None,
            };
            AgentMessage::Tool {
                id,
                name: SHELL_TOOL.to_owned(),
                input: json!({ "command": cmd.command }),
                output: json!({ "output": cmd.aggregated_output, "exit_code": cmd.exit_code }),
                duration_ms: None,
                error,
            }
        }
        "mcp_tool_call" => match McpToolCall::deserialize(item) {
            Ok(call) => {
                let error = match &call.error {
                    Value::Null => failed.then(|| "MCP tool call failed".to_owned()),
                    error => Some(error_text(error)),
                };
                AgentMessage::Tool {
                    id,
                    name: call.tool.clone().unwrap_or_else(|| kind.to_owned()),
                    input: json!({
                        "server": call.server,
                        "tool": call.tool,
                        "arguments": call.arguments,
                    }),
                    output: call.result,
                    duration_ms: None,
                    error,
                }
            }
            Err(_) => generic_tool(id, kind, item, failed),
        },
        _ => generic_tool(id, kind, item, failed),
    }
}

/// `file_change`, `web_search`, `todo_list`: the item itself is the record.
fn generic_tool(id: Option<String>, kind: &str, item: &Value, failed: bool) -> AgentMessage {
    AgentMessage::Tool {
        id,
        name: kind.to_owned(),
        input: item.clone(),
        output: item.clone(),
        duration_ms: None,
        error: failed.then(|| format!("{kind} failed")),
    }
}

/// `"{what}: {output tail}"`, or just `what` when there is no output.
fn command_error(what: &str, output: &str) -> String {
    let output = tail(output, STDERR_TAIL_CHARS);
    if output.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {output}")
    }
}

/// The stable error type of a Codex error message.
fn classify(message: &str) -> &'static str {
    let lower = message.to_lowercase();
    let has_status = |first: char| {
        lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.len() == 3 && w.starts_with(first) && w.bytes().all(|b| b.is_ascii_digit()))
    };
    if lower.contains("rate limit")
        || lower.contains("rate_limit")
        || lower.contains("too many requests")
        || lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w == "429")
    {
        RATE_LIMIT
    } else if has_status('5')
        || [
            "stream",
            "server error",
            "internal error",
            "service unavailable",
            "overloaded",
            "high demand",
            "bad gateway",
        ]
        .iter()
        .any(|needle| lower.contains(needle))
    {
        API_ERROR
    } else {
        DURING_EXECUTION
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::normalize::testing::*;
    use domain::event::Usage;

    fn error_types(out: &[Decoded]) -> Vec<&str> {
        out.iter()
            .filter_map(|d| match d {
                Ok(AgentMessage::Error { error_type, .. }) => Some(error_type.as_str()),
                _ => None,
            })
            .collect()
    }

    fn usage(input: u64, cached: u64, output: u64) -> Usage {
        Usage {
            extra: Default::default(),
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: Some(0),
            cache_read_input_tokens: Some(cached),
        }
    }

    #[test]
    fn keeps_what_every_cli_decoder_promises() {
        assert_cli_basics::<CodexDecoder>("codex", &[THREAD], DONE);
    }

    #[test]
    fn reconnects_are_network_errors_before_the_end() {
        for scenario in ["codex/ERRTEST", "codex/MIDERR", "codex/MIDERR_retry"] {
            let out = recorded::<CodexDecoder>(scenario);
            assert!(error_types(&out).iter().all(|t| *t == "network_error"));
        }
        assert_eq!(
            error_types(&recorded::<CodexDecoder>("codex/RATETEST")),
            ["rate_limit"]
        );
    }

    #[test]
    fn tool_capture_pairs_start_and_completion() {
        let out = recorded::<CodexDecoder>("codex/tool");
        let command = json!({ "command": "/bin/bash -lc 'echo hi'" });
        let (messages, _) = split(out.clone());
        assert_eq!(
            messages[1..5],
            [
                thinking_of("Running echo hi with the shell tool.", None),
                text_of("I will run a command."),
                use_of(Some("item_2"), SHELL_TOOL, command.clone()),
                tool_of(
                    Some("item_2"),
                    SHELL_TOOL,
                    command,
                    json!({ "output": "hi\n", "exit_code": 0 }),
                    None
                ),
            ]
        );
        let result = completed(&out);
        assert!(result.text.ends_with("Output:\nhi"), "{}", result.text);
    }

    #[test]
    fn resume_capture_usage_is_the_threads_total() {
        let stdout = include_bytes!("../../testdata/codex/resume/stdout.jsonl");
        let rc = include_str!("../../testdata/codex/resume/rc");
        let out = capture::<CodexDecoder>(stdout, rc);
        assert_kinds(&out, "session text completed");
        // The resumed thread is the one of the tool capture.
        assert_eq!(
            session(&out),
            ("01a2014c-3f7a-76c0-8a95-919d9bc7d411", None)
        );
        // The thread's totals: `CliAgent` subtracts what was recorded before.
        assert_eq!(completed(&out).usage, usage(300, 60, 75));
    }

    const THREAD: &str = r#"{"type":"thread.started","thread_id":"t1"}"#;
    const DONE: &str = r#"{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":1,"output_tokens":2}}"#;

    #[test]
    fn calls_keep_their_item_ids_and_order_and_a_dangling_one_stays_a_use() {
        let out = run::<CodexDecoder>(
            &[
                THREAD,
                r#"{"type":"turn.started"}"#,
                r#"{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"plan"}}"#,
                r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"echo a","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
                r#"{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"meanwhile"}}"#,
                r#"{"type":"item.started","item":{"type":"command_execution","command":"echo b","status":"in_progress"}}"#,
                r#"{"type":"item.started","item":{"id":"item_3","type":"command_execution","command":"sleep 99","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
                r#"{"type":"item.updated","item":{"id":"item_3","type":"command_execution","command":"sleep 99","aggregated_output":"zz","exit_code":null,"status":"in_progress"}}"#,
                r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"echo a","aggregated_output":"a\n","exit_code":0,"status":"completed"}}"#,
                r#"{"type":"item.completed","item":{"type":"command_execution","command":"echo b","aggregated_output":"b\n","exit_code":0,"status":"completed"}}"#,
            ],
            Some(137),
            "Killed\n",
        );
        let (messages, error) = split(out);
        let cmd = |c: &str| json!({ "command": c });
        let ran = |o: &str| json!({ "output": o, "exit_code": 0 });
        assert_eq!(
            messages,
            [
                session_of("t1", None),
                thinking_of("plan", None),
                use_of(Some("item_1"), SHELL_TOOL, cmd("echo a")),
                text_of("meanwhile"),
                use_of(None, SHELL_TOOL, cmd("echo b")),
                use_of(Some("item_3"), SHELL_TOOL, cmd("sleep 99")),
                tool_of(Some("item_1"), SHELL_TOOL, cmd("echo a"), ran("a\n"), None),
                tool_of(None, SHELL_TOOL, cmd("echo b"), ran("b\n"), None),
            ],
            "item_3 stays a use alone: no result is made up for it"
        );
        assert_killed(error.as_ref());
    }

    #[test]
    fn unknown_items_and_lines_are_kept_as_warnings() {
        let out = run::<CodexDecoder>(
            &[
                THREAD,
                r#"{"type":"item.completed","item":{"id":"i9","type":"hologram","beam":2}}"#,
                r#"{"type":"item.completed","item":"not an object"}"#,
                r#"{"type":"item.completed","item":{"id":"i1","type":"error","message":"fell back to HTTPS"}}"#,
                r#"{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"hi"}}"#,
                DONE,
            ],
            Some(0),
            "",
        );
        assert_kinds(&out, "session warning warning warning text completed");
        let Ok(AgentMessage::Warning { details, .. }) = &out[1] else {
            panic!()
        };
        assert_eq!(details.as_ref().unwrap()["item"]["beam"], 2);
        let Ok(AgentMessage::Warning { message, .. }) = &out[3] else {
            panic!()
        };
        assert!(message.contains("fell back to HTTPS"), "{message}");
        let result = completed(&out);
        assert_eq!(result.text, "hi");
        assert_eq!(
            result.usage,
            usage_of(4, 2, None, Some(1)),
            "the cached token taken out"
        );
    }

    #[test]
    fn hostile_bytes_do_not_stop_decoding() {
        let text =
            r#"{"type":"item.completed","item":{"id":"i0","type":"agent_message","text":"TEXT"}}"#;
        let out = hostile::<CodexDecoder>(&[THREAD], text, &[DONE]);
        assert_kinds(&out, "session warning text warning warning text completed");
        assert_eq!(completed(&out).text.len(), 1 << 20, "the last message");
    }

    #[test]
    fn other_tool_items_become_tools() {
        let out = run::<CodexDecoder>(
            &[
                THREAD,
                r#"{"type":"item.started","item":{"id":"f","type":"file_change","changes":[{"path":"a.txt","kind":"add"}],"status":"in_progress"}}"#,
                r#"{"type":"item.completed","item":{"id":"f","type":"file_change","changes":[{"path":"a.txt","kind":"add"}],"status":"completed"}}"#,
                r#"{"type":"item.completed","item":{"id":"m","type":"mcp_tool_call","server":"docs","tool":"lookup","arguments":{"q":"x"},"result":{"content":[]},"error":null,"status":"completed"}}"#,
                r#"{"type":"item.completed","item":{"id":"m2","type":"mcp_tool_call","server":"docs","tool":"lookup","arguments":{},"error":{"message":"nope"},"status":"failed"}}"#,
                r#"{"type":"item.completed","item":{"id":"w","type":"web_search","query":"rust"}}"#,
                r#"{"type":"item.started","item":{"id":"t","type":"todo_list","items":[{"text":"a","completed":false}]}}"#,
                r#"{"type":"item.completed","item":{"id":"t","type":"todo_list","items":[{"text":"a","completed":true}]}}"#,
                r#"{"type":"item.completed","item":{"id":"c","type":"command_execution","command":"x","aggregated_output":"","exit_code":null,"status":"declined"}}"#,
                DONE,
            ],
            Some(0),
            "",
        );
        assert_kinds(
            &out,
            "session tool_use tool tool tool tool tool_use tool tool completed",
        );
        let (name, input, _, error) = tool(&out[2]);
        assert_eq!((name, error), ("file_change", None));
        assert_eq!(input["changes"][0]["path"], "a.txt");
        let (name, input, output, error) = tool(&out[3]);
        assert_eq!((name, error), ("lookup", None));
        assert_eq!(input["arguments"], json!({ "q": "x" }));
        assert_eq!(output, &json!({ "content": [] }));
        assert_eq!(tool(&out[4]).3, Some("nope"));
        assert_eq!(tool(&out[5]).0, "web_search");
        let (name, _, output, _) = tool(&out[7]);
        assert_eq!(name, "todo_list");
        assert_eq!(output["items"][0]["completed"], true);
        assert_eq!(tool(&out[8]).3, Some("command declined"));
        assert_eq!(completed(&out).text, "");
    }

    #[test]
    fn turn_failed_wins_and_completed_with_bad_exit_warns() {
        let out = run::<CodexDecoder>(
            &[
                THREAD,
                DONE,
                r#"{"type":"turn.failed","error":{"message":"unexpected status 503 Service Unavailable"}}"#,
                r#"{"type":"turn.failed"}"#,
            ],
            Some(1),
            "",
        );
        assert_kinds(&out, "session warning ERR");
        assert_eq!(agent_error(&out).0, "api_error");
        let out = run::<CodexDecoder>(
            &[
                THREAD,
                r#"{"type":"turn.failed","error":{"message":"model refused"}}"#,
            ],
            Some(1),
            "",
        );
        assert_eq!(agent_error(&out).0, "error_during_execution");
        let out = run::<CodexDecoder>(&[THREAD, DONE, DONE], Some(1), "oops");
        assert_kinds(&out, "session warning completed");
        assert_eq!(completed(&out).num_turns, 2);
    }

    #[test]
    fn finish_is_idempotent_and_bad_thread_ids_warn() {
        let mut decoder = CodexDecoder::default();
        assert!(decoder.line(json!({"type":"thread.started"})).len() == 1);
        assert!(decoder.session_id().is_none());
        assert_eq!(
            kinds(&decoder.line(serde_json::from_str(THREAD).unwrap())),
            ["session"]
        );
        assert!(
            decoder
                .line(serde_json::from_str(THREAD).unwrap())
                .is_empty()
        );
        assert_eq!(
            kinds(&decoder.line(json!({"type":"thread.started","thread_id":"t2"}))),
            ["warning"]
        );
        assert_eq!(decoder.session_id().map(SessionId::as_str), Some("t1"));
        assert_eq!(kinds(&decoder.finish(Some(0), "")), ["ERR"]);
        assert!(decoder.finish(Some(0), "").is_empty());
    }
}
