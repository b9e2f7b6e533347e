//! Maps Gemini CLI `stream-json` lines to normalized [`AgentMessage`]s.
//!
//! The CLI prints an `init` line (session and model), the user's prompt echoed
//! as a `message`, the assistant's text as streamed `message` chunks
//! (`delta: true`), `tool_use` / `tool_result` pairs sharing a `tool_id`, and a
//! final `result` line with `stats`. [`GeminiDecoder`] streams text chunks as
//! [`AgentMessage::TextDelta`], emits each `tool_use` where it appears as an
//! [`AgentMessage::ToolUse`] and its `tool_result`, paired by `tool_id`, as an
//! [`AgentMessage::Tool`] (a call without a result stays a use alone), keeps
//! whatever it does not understand as a warning, and holds the terminal item
//! back until [`Decoder::finish`], so it is always last.
//!
//! Gemini reports a shell command that exits non-zero as `status: "success"`;
//! when the tool output names the exit code (`Exit Code: 3`), the tool is
//! recorded as failed with that code. (Gemini CLI 0.61.0 prints only the
//! command's output there, so the code is usually not visible on stdout.)
//! Thoughts are not printed by the CLI and costs are not reported.

use application::ports::{AgentMessage, AgentResult};
use domain::SessionId;
use serde_json::{Value, json};

use super::wire::{
    self, ErrorLine, InitLine, MessageLine, ResultLine, ToolResultLine, ToolUseLine, WireError,
};
use crate::normalize::errors::{
    API_ERROR, DURING_EXECUTION, RATE_LIMIT, fatal, reported, session_missing, status_error_type,
};
use crate::normalize::extra;
use crate::normalize::usage::{model_usage, usage};
use crate::normalize::{
    Cli, Decoded, Decoder, Ending, PendingCall, ToolCalls, announce_session, exit_code_in,
    exit_error, failure_text, warning,
};

const CLI: Cli = Cli("Gemini CLI");

/// How Gemini CLI says `--resume` named a session it has no file for.
const NO_SESSION: &str = "Error resuming session:";

/// Decoder state for one Gemini CLI invocation.
#[derive(Debug, Default)]
pub struct GeminiDecoder {
    /// The session announced with [`AgentMessage::Session`].
    session: Option<SessionId>,
    /// Tool calls and their results.
    tools: ToolCalls,
    /// Assistant text since the last tool call: the final answer.
    text: String,
    /// Model turns seen so far.
    turns: u32,
    /// A model turn is under way (closed by a tool result).
    in_turn: bool,
    /// The outcome of the `result` line, emitted at [`Decoder::finish`].
    ending: Ending,
}

impl GeminiDecoder {
    fn message(&mut self, line: MessageLine, value: &Value) -> Vec<Decoded> {
        match line.role.as_deref() {
            // The user's own prompt echoed back: the runtime already knows it.
            Some("user") => Vec::new(),
            Some("assistant") => {
                self.start_turn();
                self.text.push_str(&line.content);
                let content = line.content;
                if line.delta {
                    vec![Ok(AgentMessage::TextDelta { content })]
                } else {
                    vec![Ok(AgentMessage::Text { content })]
                }
            }
            other => CLI.unknown(&format!("message role {other:?}"), value),
        }
    }

    fn start_turn(&mut self) {
        if !self.in_turn {
            self.in_turn = true;
            self.turns = self.turns.saturating_add(1);
        }
    }

    fn tool_use(&mut self, line: ToolUseLine) -> Vec<Decoded> {
        self.start_turn();
        // Text before a tool call is commentary, not the final answer.
        self.text.clear();
        let call = self
            .tools
            .call(line.tool_id, line.tool_name, line.parameters);
        vec![Ok(call)]
    }

    fn tool_result(&mut self, line: ToolResultLine, value: &Value) -> Vec<Decoded> {
        let id = line.tool_id.as_deref();
        let in_turn = &mut self.in_turn;
        let done = |call: PendingCall| {
            *in_turn = false;
            let failed = line.status.as_deref().is_some_and(|s| s != "success");
            let error = if failed {
                let message = line.error.and_then(|e| e.message);
                Some(message.unwrap_or_else(|| failure_text(&line.output)))
            } else {
                exit_error(line.output.as_str().and_then(exit_code_in))
            };
            call.done(line.output, error)
        };
        vec![Ok(self.tools.complete(
            id,
            "tool_result",
            "line",
            value,
            done,
        ))]
    }
}

/// What the `result` line says: the invocation's result, or its error.
fn outcome(line: ResultLine, value: &Value, text: &str, turns: u32) -> Decoded {
    if line.status.as_deref() != Some("success") {
        let error = line.error.unwrap_or_default();
        let message = error
            .message
            .clone()
            .unwrap_or_else(|| format!("Gemini CLI reported an error (status {:?})", line.status));
        return Err(fatal(error_type(Some(&error), &message), message, value));
    }
    let stats = line.stats.unwrap_or_default();
    let cached = stats.cached;
    let input_tokens = stats.input.unwrap_or_else(|| {
        stats
            .input_tokens
            .unwrap_or(0)
            .saturating_sub(cached.unwrap_or(0))
    });
    Ok(AgentMessage::Completed(AgentResult {
        text: text.to_owned(),
        usage: usage(Some(input_tokens), stats.output_tokens, None, cached),
        model_usage: model_usage(stats.models),
        total_cost_usd: None,
        duration_ms: stats.duration_ms,
        num_turns: turns,
        session_id: None,
    }))
}

/// An `error` line: a warning, or an error the CLI went on from.
fn error_line(line: ErrorLine, value: &Value) -> Vec<Decoded> {
    let message = line
        .message
        .unwrap_or_else(|| "Gemini CLI reported an error".to_owned());
    if line.severity.as_deref() == Some("warning") {
        return vec![Ok(warning(message, json!({ "line": value })))];
    }
    vec![Ok(reported(error_type(None, &message), message, value))]
}

impl Decoder for GeminiDecoder {
    fn line(&mut self, value: Value) -> Vec<Decoded> {
        let value = &value;
        let kind = value.get("type").and_then(Value::as_str);
        let out = self.mapped(kind, value);
        // What the line holds that its event does not map (the result's goes
        // with the result, at the end).
        match kind.filter(|k| *k != "result").and_then(wire::known) {
            Some(known) => extra::before_first(out, extra::of_line(value, known)),
            None => out,
        }
    }

    fn finish(&mut self, exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
        let missing = "a result line";
        let unsaved = || session_missing(CLI.0, NO_SESSION, exit_code, stderr_tail).map(Err);
        self.ending
            .finish(CLI, missing, exit_code, stderr_tail, unsaved)
    }
}

impl GeminiDecoder {
    /// What a line of type `kind` maps to.
    fn mapped(&mut self, kind: Option<&str>, value: &Value) -> Vec<Decoded> {
        match kind {
            Some("init") => CLI.read("init", value, |line: InitLine| {
                let (id, model) = (line.session_id, line.model);
                announce_session(&mut self.session, id, model, "init", value)
            }),
            Some("message") => CLI.read("message", value, |line| self.message(line, value)),
            Some("tool_use") => CLI.read("tool_use", value, |line| self.tool_use(line)),
            Some("tool_result") => {
                CLI.read("tool_result", value, |line| self.tool_result(line, value))
            }
            Some("error") => CLI.read("error", value, |line| error_line(line, value)),
            Some("result") => {
                let (text, turns) = (&self.text, self.turns);
                let outcome = |line| outcome(line, value, text, turns);
                self.ending.result(value, wire::RESULT, outcome)
            }
            _ => CLI.unknown_type(value),
        }
    }
}

/// The stable error type of a failed invocation: `rate_limit` for HTTP 429 or
/// quota errors, `api_error` for other API failures, `error_during_execution`
/// otherwise.
fn error_type(error: Option<&WireError>, message: &str) -> &'static str {
    let status = error
        .and_then(|e| e.code.as_ref())
        .and_then(Value::as_u64)
        .or_else(|| api_status_in(message));
    if message.contains("RESOURCE_EXHAUSTED") {
        return RATE_LIMIT;
    }
    match status.and_then(status_error_type) {
        Some(error_type) => error_type,
        None if message.contains("API Error") => API_ERROR,
        None => DURING_EXECUTION,
    }
}

/// The HTTP status in an API error body embedded in a message
/// (`... {"error":{"code":400, ...}} ...`).
fn api_status_in(message: &str) -> Option<u64> {
    let key = "\"code\":";
    let start = message.find(key)? + key.len();
    let digits: String = message[start..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|s| (100..600).contains(s))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::normalize::decode_all;
    use crate::normalize::testing::*;

    const INIT: &str = r#"{"type":"init","session_id":"s1","model":"gemini-2.5-pro"}"#;
    const OK_RESULT: &str = r#"{"type":"result","status":"success","stats":{"input_tokens":10,"output_tokens":2,"cached":4,"input":6,"duration_ms":5}}"#;

    #[test]
    fn keeps_what_every_cli_decoder_promises() {
        assert_cli_basics::<GeminiDecoder>("gemini", &[INIT], OK_RESULT);
    }

    #[test]
    fn exit_code_in_tool_output_marks_the_tool_failed() {
        let out = run::<GeminiDecoder>(
            &[
                INIT,
                r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t1","parameters":{"command":"exit 3"}}"#,
                r#"{"type":"tool_result","tool_id":"t1","status":"success","output":"Output: oops\nExit Code: 3\nProcess Group PGID: 1"}"#,
                r#"{"type":"tool_use","tool_name":"read_file","tool_id":"t2","parameters":{}}"#,
                r#"{"type":"tool_result","tool_id":"t2","status":"error","output":"","error":{"type":"file_not_found","message":"no such file"}}"#,
                r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t3","parameters":{}}"#,
                r#"{"type":"tool_result","tool_id":"t3","status":"success","output":"Exit Code: 0"}"#,
                OK_RESULT,
            ],
            Some(0),
            "",
        );
        assert_kinds(
            &out,
            "session tool_use tool tool_use tool tool_use tool completed",
        );
        assert_eq!(tool(&out[2]).3, Some("command exited with code 3"));
        assert_eq!(tool(&out[4]).3, Some("no such file"));
        assert_eq!(tool(&out[6]).3, None);
        assert_eq!(exit_code_in("exit code -1"), Some(-1));
        assert_eq!(exit_code_in("exit codes"), None);
    }

    #[test]
    fn errtest_capture_without_result_names_exit_code_and_stderr() {
        let out = decode_all(
            GeminiDecoder::default(),
            include_bytes!("../../testdata/gemini/ERRTEST/stdout.jsonl"),
            Some(
                include_str!("../../testdata/gemini/ERRTEST/rc")
                    .trim()
                    .parse()
                    .unwrap(),
            ),
            "at async Turn.run (chunk.js:1:2) {\n  status: 500\n}\n",
        );
        let out = without_extra(out);
        assert_kinds(&out, "session ERR");
        let (error_type, message) = agent_error(&out);
        assert_eq!(error_type, "error_during_execution");
        assert!(message.contains("exited with code 124"), "{message}");
        assert!(message.contains("status: 500"), "{message}");
    }

    #[test]
    fn result_errors_map_to_stable_types() {
        let cases = [
            (
                r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":429,\"message\":\"slow down\",\"status\":\"RESOURCE_EXHAUSTED\"}}]"}}"#,
                "rate_limit",
            ),
            (
                r#"{"type":"result","status":"error","error":{"message":"[API Error: {\"error\":{\"code\": 503}}]"}}"#,
                "api_error",
            ),
            (
                r#"{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"max turns"}}"#,
                "error_during_execution",
            ),
            (
                r#"{"type":"result","status":"error"}"#,
                "error_during_execution",
            ),
            (
                r#"{"type":"result","stats":"oops"}"#,
                "error_during_execution",
            ),
        ];
        assert_error_types::<GeminiDecoder>(&[INIT], &cases);
    }

    #[test]
    fn calls_keep_their_ids_order_and_missing_fields() {
        // Text after a call and before its result, a call without its id
        // (answered by a result without one), a call that never returns, and
        // a line of a newer CLI.
        let future = r#"{"type":"tool_progress","tool_id":"t1","percent":50}"#;
        let out = run::<GeminiDecoder>(
            &[
                INIT,
                r#"{"type":"message","role":"assistant","content":"first ","delta":true}"#,
                r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t1","parameters":{"command":"echo a"}}"#,
                r#"{"type":"message","role":"assistant","content":"meanwhile","delta":true}"#,
                r#"{"type":"tool_use","tool_name":"read_file","parameters":{"path":"a"}}"#,
                r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t3","parameters":{"command":"sleep 99"}}"#,
                future,
                r#"{"type":"tool_result","tool_id":"t1","status":"success","output":"a"}"#,
                r#"{"type":"tool_result","status":"success","output":"file"}"#,
            ],
            Some(137),
            "",
        );
        let (messages, error) = split(out);
        let delta = |c: &str| AgentMessage::TextDelta { content: c.into() };
        let shell = "run_shell_command";
        let future: Value = serde_json::from_str(future).unwrap();
        assert_eq!(
            messages,
            [
                AgentMessage::Session {
                    session_id: SessionId::new("s1").unwrap(),
                    model: Some("gemini-2.5-pro".into()),
                },
                delta("first "),
                use_of(Some("t1"), shell, json!({"command": "echo a"})),
                delta("meanwhile"),
                use_of(None, "read_file", json!({"path": "a"})),
                use_of(Some("t3"), shell, json!({"command": "sleep 99"})),
                warning_of(
                    "unknown Gemini CLI line type `tool_progress`; kept as is",
                    json!({ "line": future })
                ),
                tool_of(
                    Some("t1"),
                    shell,
                    json!({"command": "echo a"}),
                    json!("a"),
                    None
                ),
                tool_of(None, "read_file", json!({"path": "a"}), json!("file"), None),
            ],
            "t3 stays a use alone: no result is made up for it"
        );
        assert!(error.is_some());
    }

    #[test]
    fn hostile_input_does_not_stop_decoding() {
        let text = r#"{"type":"message","role":"assistant","content":"TEXT","delta":true}"#;
        let after = [
            r#"{"type":"brand_new","x":1}"#,
            r#"{"type":"message","role":"assistant","content":"whole"}"#,
            r#"{"type":"tool_result","tool_id":"nope","status":"success"}"#,
            r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"t9","parameters":{"command":"sleep 9"}}"#,
            OK_RESULT,
        ];
        let out = hostile::<GeminiDecoder>(&[INIT], text, &after);
        assert_kinds(
            &out,
            "session warning text_delta warning warning text_delta warning text warning tool_use completed",
        );
        let Ok(AgentMessage::Warning { details, .. }) = &out[6] else {
            panic!()
        };
        assert_eq!(details.as_ref().unwrap()["line"]["x"], 1);
        assert_eq!(
            out[9].as_ref().unwrap(),
            &use_of(
                Some("t9"),
                "run_shell_command",
                json!({"command": "sleep 9"})
            ),
            "a call without its result stays a use alone"
        );
        let result = completed(&out);
        assert_eq!(result.usage, usage_of(6, 2, None, Some(4)));
        assert_eq!(result.text, "", "text before a tool call is not the answer");
    }

    #[test]
    fn a_result_with_a_failing_exit_warns_and_comes_last() {
        let mut decoder = GeminiDecoder::default();
        let value: Value = serde_json::from_str(OK_RESULT).unwrap();
        assert!(decoder.line(value).is_empty());
        let out = decoder.finish(Some(2), "");
        assert_kinds(&out, "warning completed");
        assert!(decoder.finish(Some(0), "").is_empty());
    }

    #[test]
    fn error_lines_and_odd_messages() {
        let out = run::<GeminiDecoder>(
            &[
                INIT,
                INIT,
                r#"{"type":"init","session_id":"other"}"#,
                r#"{"type":"init"}"#,
                r#"{"type":"error","severity":"warning","message":"loop detected"}"#,
                r#"{"type":"error","severity":"error","message":"API Error: 500"}"#,
                r#"{"type":"message","role":"system","content":"?"}"#,
                r#"{"type":"message","role":"user","content":"prompt"}"#,
                r#"{"type":"tool_use","tool_id":"x"}"#,
                OK_RESULT,
                OK_RESULT,
            ],
            Some(0),
            "",
        );
        assert_kinds(
            &out,
            "session warning warning warning error warning warning warning completed",
        );
        assert!(
            matches!(&out[4], Ok(AgentMessage::Error { error_type, .. }) if error_type == "api_error")
        );
    }

    #[test]
    fn a_resume_of_a_session_it_never_saved_is_session_not_found() {
        // What Gemini CLI 0.61.0 printed for `--resume ID` when it has no
        // file for ID (exit 42, nothing on stdout).
        for stderr in [
            "Ripgrep is not available. Falling back to GrepTool.\nError resuming session: Invalid session identifier \"33333333-2222-4333-8444-555555555555\".\n  Searched for sessions in /h/.gemini/tmp/work/chats.\n  Use --list-sessions to see available sessions, then use --resume {number}, --resume {uuid}, or --resume latest.\n",
            "Error resuming session: No previous sessions found for this project.\n",
        ] {
            let out = crate::normalize::decode_all(GeminiDecoder::default(), b"", Some(42), stderr);
            let (error_type, message) = agent_error(&out);
            assert_eq!(error_type, "session_not_found", "{stderr}");
            assert!(message.contains("Error resuming session"), "{message}");
        }
    }
}
