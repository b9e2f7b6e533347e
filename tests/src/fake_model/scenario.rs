//! Decides what the fake server answers, from the request alone, so a test
//! scripts the server just by the words it puts in its prompt.
//!
//! Keywords in the newest user text (checked in this order):
//! - `RATEONCE` → HTTP 429 with `retry-after: 1` for the first such request
//!   this server sees; every later one is answered as if the keyword were
//!   absent (plain text, or the tool scenarios below), so a client's retry
//!   succeeds;
//! - `BADREQ` → HTTP 400 (not retryable);
//! - `RATETEST` → HTTP 429 with `retry-after`;
//! - `ERRTEST` → HTTP 500;
//! - `MIDERR` → the stream starts, then an error event arrives inside it;
//! - `CUTSTREAM` → the stream starts (status 200, a few text deltas of
//!   [`CUT_TEXT`]) and the body then ends cleanly at the HTTP level but
//!   without the format's terminal event: no `[DONE]`, `message_stop`,
//!   `response.completed` or Gemini chunk with a `finishReason`. A
//!   non-streaming request gets its JSON reply cut in half;
//! - `CALLTOOL <name> <json>` → if the request offers a tool `<name>`: one
//!   call of it with the rest of that line as its arguments, verbatim (Chat
//!   Completions and Responses carry arguments as a string, so even JSON that
//!   does not parse goes through as written; Anthropic and Gemini get the
//!   parsed value, `{}` when it does not parse); once the tool result comes
//!   back, `Tool said: <output>`. Lets a test make the model call any tool
//!   with any, possibly invalid, arguments. A tool of a Responses
//!   `namespace` (Codex's MCP servers) is named `NAMESPACE__TOOL` and called
//!   as `TOOL` in that namespace. Several `CALLTOOL` lines are
//!   called one a turn, in order (the next is the one after as many as
//!   there are tool results since the prompt), then `Tool said: <output>`
//!   of the last. `$LAST_UUID` in a line's arguments becomes the last UUID
//!   the previous tool result holds (a run id a tool answered with);
//! - `TOOLTEST` → if the request offers a shell-like tool: one call of it
//!   running `echo hi`; once the tool result comes back, the final text
//!   `Tool said: <output>`;
//! - `TOOLFAIL` → the same, with a command that exits 3;
//! - otherwise → the plain text [`PLAIN_TEXT`].
//!
//! Stateless on purpose, except for `RATEONCE` (see [`State`]): the real
//! CLIs resend the whole conversation, so the newest turn says whether the
//! tool result has arrived.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

/// The reply of the plain-text scenario.
pub(super) const PLAIN_TEXT: &str = "Hello from the fake server.";

/// What `CUTSTREAM` streams before the body ends without its terminal event.
pub(super) const CUT_TEXT: &str = "This reply is cut off";

/// What one server remembers between requests, for the scenarios that
/// cannot be decided from the request alone.
#[derive(Debug, Default)]
pub(super) struct State {
    /// `RATEONCE` requests seen so far; only the first gets a 429. An
    /// atomic rather than a lock: one counter, bumped once per request,
    /// and `fetch_add` makes "first" exact even for concurrent requests.
    rate_once_seen: AtomicU64,
}

/// Shell tool names the real clients use, most specific first (Claude Code,
/// Codex, Gemini CLI, Copilot CLI), tried before any name containing "shell".
const SHELL_TOOL_PREFERENCE: [&str; 8] = [
    "Bash",
    "shell_command",
    "shell",
    "exec_command",
    "run_shell_command",
    "bash",
    "execute_command",
    "run_command",
];

/// Which wire format a request body is in; the scenario keywords are the
/// same, but messages and tools sit in different fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    /// Anthropic Messages (`messages`, `tools[].input_schema`).
    Anthropic,
    /// OpenAI Responses (`input` items, `tools[].parameters`).
    Responses,
    /// OpenAI Chat Completions (`messages`, `tools[].function`).
    Chat,
    /// Gemini (`contents[].parts`, `tools[].functionDeclarations`).
    Gemini,
}

/// What to answer.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Scenario {
    /// A plain text reply (also the final reply after a tool result).
    Text(String),
    /// Some text, then one call of the named tool with these arguments.
    Tool {
        /// The tool's name as the request offered it.
        name: String,
        /// Arguments built from the tool's schema, with the shell command
        /// (or those a `CALLTOOL` line gave, `{}` when they do not parse).
        args: Value,
        /// For `CALLTOOL`: the arguments exactly as written, which the
        /// formats that carry arguments as a string send instead of `args`.
        raw_args: Option<String>,
    },
    /// An HTTP error status with the provider's error body.
    Error(u16),
    /// A stream that breaks with an in-stream error event.
    MidErr,
    /// A stream whose body ends after a few deltas, without a terminal event.
    CutStream,
}

/// The text that precedes a tool call, like a model announcing its action.
pub(super) const TOOL_PREAMBLE: &str = "I will run a command.";

/// What a request says about itself: the newest user text, whether the last
/// turn is a tool result (and its output), and the offered tools.
struct Analysis {
    latest_text: String,
    tool_output: Option<String>,
    /// Tool results since the newest user text.
    results: usize,
    tools: Vec<(String, Value)>,
}

/// Picks the scenario for a request body in the given wire format;
/// `state` is the server's memory for `RATEONCE`.
pub(super) fn choose(api: Api, body: &Value, state: &State) -> Scenario {
    let a = analyse(api, body);
    let latest = a.latest_text.as_str();
    if latest.contains("RATEONCE") && state.rate_once_seen.fetch_add(1, Ordering::Relaxed) == 0 {
        return Scenario::Error(429);
    }
    if latest.contains("BADREQ") {
        return Scenario::Error(400);
    }
    if latest.contains("RATETEST") {
        return Scenario::Error(429);
    }
    if latest.contains("ERRTEST") {
        return Scenario::Error(500);
    }
    if latest.contains("MIDERR") {
        return Scenario::MidErr;
    }
    if latest.contains("CUTSTREAM") {
        return Scenario::CutStream;
    }
    let lines = call_tool_lines(latest);
    let offered = |name: &str| a.tools.iter().any(|(n, _)| n == name);
    if lines.iter().any(|(name, _)| offered(name)) {
        match lines.get(a.results) {
            Some((name, raw)) if offered(name) => {
                // `$LAST_UUID`: the id the previous tool answered with.
                let raw = match a.tool_output.as_deref().and_then(last_uuid) {
                    Some(id) => raw.replace("$LAST_UUID", id),
                    None => (*raw).to_owned(),
                };
                return Scenario::Tool {
                    name: (*name).to_owned(),
                    args: serde_json::from_str(&raw).unwrap_or_else(|_| json!({})),
                    raw_args: Some(raw),
                };
            }
            None => {
                if let Some(out) = a.tool_output {
                    return tool_said(&out);
                }
            }
            Some(_) => {}
        }
    }
    let failing = latest.contains("TOOLFAIL");
    if (failing || latest.contains("TOOLTEST")) && !a.tools.is_empty() {
        if let Some(out) = a.tool_output {
            return tool_said(&out);
        }
        if let Some((name, schema)) = pick_shell_tool(&a.tools) {
            let command = if failing {
                "echo oops >&2; exit 3"
            } else {
                "echo hi"
            };
            return Scenario::Tool {
                name: name.to_owned(),
                args: shell_args(schema, command),
                raw_args: None,
            };
        }
    }
    Scenario::Text(PLAIN_TEXT.to_owned())
}

/// The final reply once a tool result is back, quoting (the start of) it.
fn tool_said(output: &str) -> Scenario {
    let out: String = output.trim().chars().take(200).collect();
    Scenario::Text(format!("Tool said: {out}"))
}

/// The tool name and the raw argument text of each `CALLTOOL <name> <json>`
/// line: the arguments are the rest of the line after the name, trimmed.
fn call_tool_lines(text: &str) -> Vec<(&str, &str)> {
    text.split("CALLTOOL")
        .skip(1)
        .filter_map(|after| {
            let line = after.lines().next().unwrap_or_default().trim();
            let (name, raw) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            (!name.is_empty()).then(|| (name, raw.trim()))
        })
        .collect()
}

fn analyse(api: Api, body: &Value) -> Analysis {
    let mut a = Analysis {
        latest_text: String::new(),
        tool_output: None,
        results: 0,
        tools: Vec::new(),
    };
    let tools = array(body, "tools");
    match api {
        Api::Anthropic => {
            let msgs = array(body, "messages");
            a.latest_text = latest_user_text(
                msgs.iter()
                    .filter(|m| role(m) == Some("user"))
                    .map(|m| &m["content"]),
            );
            a.results = since_text(msgs, |m| role(m) == Some("user"), |m| &m["content"])
                .iter()
                .flat_map(|m| m["content"].as_array().into_iter().flatten())
                .filter(|b| b["type"] == "tool_result")
                .count();
            if let Some(last) = msgs.last().filter(|m| role(m) == Some("user")) {
                for block in last["content"].as_array().into_iter().flatten() {
                    if block["type"] == "tool_result" {
                        let c = &block["content"];
                        a.tool_output = Some(match c.as_str() {
                            Some(s) => s.to_owned(),
                            None => texts_of(c).into_iter().next().unwrap_or_default(),
                        });
                    }
                }
            }
            for t in tools {
                push_tool(&mut a.tools, &t["name"], &t["input_schema"]);
            }
        }
        Api::Responses => {
            let input = &body["input"];
            let items: Vec<Value> = match input.as_str() {
                Some(s) => vec![json!({"type": "message", "role": "user", "content": s})],
                None => input.as_array().cloned().unwrap_or_default(),
            };
            let is_user_message = |it: &&Value| {
                it["type"].as_str().unwrap_or("message") == "message" && role(it) == Some("user")
            };
            a.latest_text =
                latest_user_text(items.iter().filter(is_user_message).map(|m| &m["content"]));
            a.results = since_text(&items, |m| is_user_message(&m), |m| &m["content"])
                .iter()
                .filter(|it| it["type"].as_str().is_some_and(|t| t.ends_with("_output")))
                .count();
            if let Some(last) = items.last() {
                let kind = last["type"].as_str().unwrap_or_default();
                if matches!(
                    kind,
                    "function_call_output" | "custom_tool_call_output" | "local_shell_call_output"
                ) {
                    let o = &last["output"];
                    a.tool_output = Some(o.as_str().map_or_else(|| o.to_string(), str::to_owned));
                }
            }
            for t in tools {
                if t["type"] == "function" {
                    push_tool(&mut a.tools, &t["name"], &t["parameters"]);
                } else if t["type"] == "namespace" {
                    // Codex offers each MCP server's tools in a namespace
                    // (`mcp__SERVER`): offered here as `NAMESPACE__TOOL`.
                    for f in array(t, "tools") {
                        if let (Some(ns), Some(name)) = (t["name"].as_str(), f["name"].as_str()) {
                            push_tool(
                                &mut a.tools,
                                &json!(format!("{ns}__{name}")),
                                &f["parameters"],
                            );
                        }
                    }
                } else if t["type"] != "local_shell" {
                    // Hosted tools (web_search, …) count as "tools offered"
                    // but are never picked: their names contain no "shell".
                    let name = if t["name"].is_string() {
                        &t["name"]
                    } else {
                        &t["type"]
                    };
                    push_tool(&mut a.tools, name, &Value::Null);
                }
            }
        }
        Api::Chat => {
            let msgs = array(body, "messages");
            a.latest_text = latest_user_text(
                msgs.iter()
                    .filter(|m| role(m) == Some("user"))
                    .map(|m| &m["content"]),
            );
            a.results = since_text(msgs, |m| role(m) == Some("user"), |m| &m["content"])
                .iter()
                .filter(|m| role(m) == Some("tool"))
                .count();
            if let Some(last) = msgs.last().filter(|m| role(m) == Some("tool")) {
                let c = &last["content"];
                a.tool_output = Some(
                    c.as_str()
                        .map_or_else(|| texts_of(c).join("\n"), str::to_owned),
                );
            }
            for t in tools {
                push_tool(
                    &mut a.tools,
                    &t["function"]["name"],
                    &t["function"]["parameters"],
                );
            }
        }
        Api::Gemini => {
            let contents = array(body, "contents");
            let user = contents
                .iter()
                .filter(|c| c["role"].as_str().unwrap_or("user") == "user");
            a.latest_text = latest_user_text(user.map(|c| &c["parts"]));
            let is_user = |c: &Value| c["role"].as_str().unwrap_or("user") == "user";
            a.results = since_text(contents, is_user, |c| &c["parts"])
                .iter()
                .flat_map(|c| c["parts"].as_array().into_iter().flatten())
                .filter(|p| p.get("functionResponse").is_some())
                .count();
            if let Some(last) = contents.last() {
                for p in last["parts"].as_array().into_iter().flatten() {
                    if let Some(fr) = p.get("functionResponse") {
                        a.tool_output = Some(fr["response"].to_string());
                    }
                }
            }
            for t in tools {
                for fd in array(t, "functionDeclarations") {
                    let schema = match fd.get("parametersJsonSchema") {
                        Some(s) => s,
                        None => &fd["parameters"],
                    };
                    push_tool(&mut a.tools, &fd["name"], schema);
                }
            }
        }
    }
    a
}

/// The last UUID (8-4-4-4-12 hex digits) in `text`.
fn last_uuid(text: &str) -> Option<&str> {
    let is_uuid = |c: &str| {
        c.len() == 36
            && c.char_indices().all(|(i, ch)| match i {
                8 | 13 | 18 | 23 => ch == '-',
                _ => ch.is_ascii_hexdigit(),
            })
    };
    (0..text.len().saturating_sub(35))
        .rev()
        .filter(|&at| text.is_char_boundary(at) && text.is_char_boundary(at + 36))
        .map(|at| &text[at..at + 36])
        .find(|c| is_uuid(c))
}

/// The items after the newest one from the user that holds text (by
/// `is_user` and its content at `content`): what came since the prompt.
fn since_text(
    items: &[Value],
    is_user: impl Fn(&Value) -> bool,
    content: impl Fn(&Value) -> &Value,
) -> &[Value] {
    let newest = items
        .iter()
        .rposition(|m| is_user(m) && texts_of(content(m)).iter().any(|t| !t.trim().is_empty()));
    newest.map_or(items, |at| &items[at + 1..])
}

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v[key].as_array().map_or(&[], Vec::as_slice)
}

fn role(m: &Value) -> Option<&str> {
    m["role"].as_str()
}

fn push_tool(tools: &mut Vec<(String, Value)>, name: &Value, schema: &Value) {
    if let Some(name) = name.as_str() {
        tools.push((name.to_owned(), schema.clone()));
    }
}

/// The text of the newest content value that has any non-blank text.
fn latest_user_text<'a>(contents: impl Iterator<Item = &'a Value>) -> String {
    let mut latest = String::new();
    for c in contents {
        let text = texts_of(c).join("\n");
        if !text.trim().is_empty() {
            latest = text;
        }
    }
    latest
}

/// Collects the text pieces of a content value in any of the four formats:
/// a string, or a list of strings / text blocks / Gemini parts (thoughts skipped).
fn texts_of(content: &Value) -> Vec<String> {
    match content {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => {
                    let kind = o.get("type").and_then(Value::as_str);
                    let thought = o.get("thought").and_then(Value::as_bool).unwrap_or(false);
                    let is_text = matches!(kind, Some("text" | "input_text"))
                        || (kind.is_none() && o.contains_key("text") && !thought);
                    is_text.then(|| {
                        o.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    })
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn pick_shell_tool(tools: &[(String, Value)]) -> Option<(&str, &Value)> {
    SHELL_TOOL_PREFERENCE
        .iter()
        .find_map(|pref| tools.iter().find(|(n, _)| n == pref))
        .or_else(|| {
            tools.iter().find(|(n, _)| {
                let n = n.to_lowercase();
                n.contains("shell") || n.contains("bash")
            })
        })
        .map(|(n, s)| (n.as_str(), s))
}

/// Fills the tool's schema: the command goes into `command`/`cmd` (as an argv
/// array when the schema wants one), every other required field gets a
/// harmless default, so the client's own validation accepts the call.
fn shell_args(schema: &Value, command: &str) -> Value {
    let empty = Map::new();
    let props = schema["properties"].as_object().unwrap_or(&empty);
    let mut args = Map::new();
    for (k, p) in props {
        if k == "command" || k == "cmd" {
            let v = if p["type"] == "array" {
                json!(["bash", "-lc", command])
            } else {
                json!(command)
            };
            args.insert(k.clone(), v);
        }
    }
    if args.is_empty() {
        args.insert("command".to_owned(), json!(command));
    }
    for k in array(schema, "required").iter().filter_map(Value::as_str) {
        if !args.contains_key(k) {
            args.insert(
                k.to_owned(),
                default_for(k, &props.get(k).cloned().unwrap_or_default()),
            );
        }
    }
    if props.contains_key("description") && !args.contains_key("description") {
        args.insert("description".to_owned(), json!("Print hi"));
    }
    Value::Object(args)
}

fn default_for(name: &str, schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if name == "description" {
        return json!("Print hi");
    }
    match schema["type"]
        .as_str()
        .unwrap_or("string")
        .to_lowercase()
        .as_str()
    {
        "boolean" => json!(false),
        "integer" | "number" => {
            let n = name.to_lowercase();
            json!(if n.contains("timeout") || n.contains("ms") {
                10000
            } else {
                10
            })
        }
        "array" => json!([]),
        "object" => json!({}),
        _ => json!("fake"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn bash_tool() -> Value {
        json!([{"name": "Bash", "input_schema": {"type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"},
                           "timeout": {"type": "number"}},
            "required": ["command"]}}])
    }

    fn choose(api: Api, body: &Value) -> Scenario {
        super::choose(api, body, &State::default())
    }

    #[test]
    fn tooltest_calls_the_shell_tool_then_reports_its_output() {
        let first =
            json!({"messages": [{"role": "user", "content": "TOOLTEST"}], "tools": bash_tool()});
        assert_eq!(
            choose(Api::Anthropic, &first),
            Scenario::Tool {
                name: "Bash".into(),
                args: json!({"command": "echo hi", "description": "Print hi"}),
                raw_args: None,
            }
        );
        let second = json!({"messages": [
            {"role": "user", "content": "TOOLTEST"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "hi\n"}]}
        ], "tools": bash_tool()});
        assert_eq!(
            choose(Api::Anthropic, &second),
            Scenario::Text("Tool said: hi".into())
        );
    }

    #[test]
    fn codex_exec_command_gets_cmd() {
        let body = json!({"input": [{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "TOOLFAIL"}]}],
            "tools": [{"type": "function", "name": "exec_command", "parameters": {
                "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
                {"type": "web_search"}]});
        assert_eq!(
            choose(Api::Responses, &body),
            Scenario::Tool {
                name: "exec_command".into(),
                args: json!({"cmd": "echo oops >&2; exit 3"}),
                raw_args: None,
            }
        );
    }

    #[test]
    fn error_keywords_win_and_no_tools_means_text() {
        let body = |t: &str| json!({"contents": [{"role": "user", "parts": [{"text": t}]}]});
        assert_eq!(choose(Api::Gemini, &body("BADREQ")), Scenario::Error(400));
        assert_eq!(
            choose(Api::Gemini, &body("ERRTEST RATETEST")),
            Scenario::Error(429)
        );
        assert_eq!(choose(Api::Gemini, &body("ERRTEST")), Scenario::Error(500));
        assert_eq!(choose(Api::Gemini, &body("MIDERR")), Scenario::MidErr);
        assert_eq!(
            choose(Api::Gemini, &body("TOOLTEST")),
            Scenario::Text(PLAIN_TEXT.into())
        );
    }

    #[test]
    fn rateonce_refuses_the_first_request_of_each_server_only() {
        let body = json!({"messages": [{"role": "user", "content": "RATEONCE TOOLTEST"}],
            "tools": bash_tool()});
        let state = State::default();
        assert_eq!(
            super::choose(Api::Anthropic, &body, &state),
            Scenario::Error(429)
        );
        for _ in 0..2 {
            assert!(matches!(
                super::choose(Api::Anthropic, &body, &state),
                Scenario::Tool { name, .. } if name == "Bash"
            ));
        }
        let plain = json!({"messages": [{"role": "user", "content": "RATEONCE"}]});
        assert_eq!(
            super::choose(Api::Chat, &plain, &state),
            Scenario::Text(PLAIN_TEXT.into())
        );
        assert_eq!(
            super::choose(Api::Chat, &plain, &State::default()),
            Scenario::Error(429)
        );
    }

    #[test]
    fn cutstream_is_chosen_in_every_format() {
        let chat = json!({"messages": [{"role": "user", "content": "CUTSTREAM"}]});
        assert_eq!(choose(Api::Chat, &chat), Scenario::CutStream);
        assert_eq!(choose(Api::Anthropic, &chat), Scenario::CutStream);
        let responses = json!({"input": "please CUTSTREAM"});
        assert_eq!(choose(Api::Responses, &responses), Scenario::CutStream);
        let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "CUTSTREAM"}]}]});
        assert_eq!(choose(Api::Gemini, &gemini), Scenario::CutStream);
    }

    fn read_file_tool() -> Value {
        json!([{"type": "function", "function": {"name": "read_file", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])
    }

    #[test]
    fn calltool_calls_the_named_tool_with_the_arguments_as_written() {
        let first = json!({"messages": [{"role": "user",
            "content": "Do this.\nCALLTOOL read_file {\"path\": \"../secret.txt\"}\nThanks."}],
            "tools": read_file_tool()});
        assert_eq!(
            choose(Api::Chat, &first),
            Scenario::Tool {
                name: "read_file".into(),
                args: json!({"path": "../secret.txt"}),
                raw_args: Some(r#"{"path": "../secret.txt"}"#.into()),
            }
        );
        let mut second = first.clone();
        second["messages"].as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1",
                "content": "refused: `../secret.txt` leaves the workspace"}),
        ]);
        assert_eq!(
            choose(Api::Chat, &second),
            Scenario::Text("Tool said: refused: `../secret.txt` leaves the workspace".into())
        );
    }

    #[test]
    fn calltool_passes_unparsable_arguments_raw_and_needs_the_tool_offered() {
        let body = |text: &str| {
            json!({"messages": [{"role": "user", "content": text}],
            "tools": read_file_tool()})
        };
        assert_eq!(
            choose(Api::Chat, &body("CALLTOOL read_file {not json")),
            Scenario::Tool {
                name: "read_file".into(),
                args: json!({}),
                raw_args: Some("{not json".into()),
            }
        );
        assert_eq!(
            choose(Api::Chat, &body("CALLTOOL read_file")),
            Scenario::Tool {
                name: "read_file".into(),
                args: json!({}),
                raw_args: Some(String::new()),
            }
        );
        assert_eq!(
            choose(Api::Chat, &body("CALLTOOL write_file {}")),
            Scenario::Text(PLAIN_TEXT.into())
        );
        assert_eq!(
            choose(Api::Chat, &body("CALLTOOL")),
            Scenario::Text(PLAIN_TEXT.into())
        );
    }

    #[test]
    fn several_calltool_lines_are_called_one_a_turn_in_order() {
        let tools = json!([{"name": "a", "input_schema": {"type": "object"}},
            {"name": "b", "input_schema": {"type": "object"}}]);
        let prompt = "CALLTOOL a {\"n\": 1}\nCALLTOOL b {\"n\": 2}";
        let mut messages = vec![json!({"role": "user", "content": prompt})];
        let body = |messages: &[Value]| json!({"messages": messages, "tools": tools.clone()});
        let call = |name: &str, n: u8| Scenario::Tool {
            name: name.into(),
            args: json!({"n": n}),
            raw_args: Some(format!("{{\"n\": {n}}}")),
        };
        assert_eq!(choose(Api::Anthropic, &body(&messages)), call("a", 1));
        for (id, said) in [("t1", "one"), ("t2", "two")] {
            messages.push(json!({"role": "assistant",
                "content": [{"type": "tool_use", "id": id, "name": "x", "input": {}}]}));
            messages.push(json!({"role": "user",
                "content": [{"type": "tool_result", "tool_use_id": id, "content": said}]}));
            if id == "t1" {
                assert_eq!(choose(Api::Anthropic, &body(&messages)), call("b", 2));
            }
        }
        assert_eq!(
            choose(Api::Anthropic, &body(&messages)),
            Scenario::Text("Tool said: two".into())
        );
        // A new prompt starts the count again.
        messages.push(json!({"role": "assistant", "content": "Tool said: two"}));
        messages.push(json!({"role": "user", "content": prompt}));
        assert_eq!(choose(Api::Anthropic, &body(&messages)), call("a", 1));
    }

    #[test]
    fn last_uuid_takes_the_id_a_tool_answered_with() {
        let id = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";
        assert_eq!(last_uuid(&format!("{{\"runId\":\"{id}\"}}")), Some(id));
        assert_eq!(last_uuid("no id"), None);
        assert_eq!(
            last_uuid("é0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6fé"),
            Some(id)
        );
    }
}
