//! Decides what the fake server answers, from the request alone, so a test
//! scripts the server just by the words it puts in its prompt.
//!
//! Keywords in the newest user text (checked in this order):
//! - `BADREQ` → HTTP 400 (not retryable);
//! - `RATETEST` → HTTP 429 with `retry-after`;
//! - `ERRTEST` → HTTP 500;
//! - `MIDERR` → the stream starts, then an error event arrives inside it;
//! - `TOOLTEST` → if the request offers a shell-like tool: one call of it
//!   running `echo hi`; once the tool result comes back, the final text
//!   `Tool said: <output>`;
//! - `TOOLFAIL` → the same, with a command that exits 3;
//! - otherwise → the plain text [`PLAIN_TEXT`].
//!
//! Stateless on purpose: the real CLIs resend the whole conversation, so the
//! newest turn says whether the tool result has arrived.

use serde_json::{Map, Value, json};

/// The reply of the plain-text scenario.
pub(super) const PLAIN_TEXT: &str = "Hello from the fake server.";

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
        /// Arguments built from the tool's schema, with the shell command.
        args: Value,
    },
    /// An HTTP error status with the provider's error body.
    Error(u16),
    /// A stream that breaks with an in-stream error event.
    MidErr,
}

/// The text that precedes a tool call, like a model announcing its action.
pub(super) const TOOL_PREAMBLE: &str = "I will run a command.";

/// What a request says about itself: the newest user text, whether the last
/// turn is a tool result (and its output), and the offered tools.
struct Analysis {
    latest_text: String,
    tool_output: Option<String>,
    tools: Vec<(String, Value)>,
}

/// Picks the scenario for a request body in the given wire format.
pub(super) fn choose(api: Api, body: &Value) -> Scenario {
    let a = analyse(api, body);
    let latest = a.latest_text.as_str();
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
    let failing = latest.contains("TOOLFAIL");
    if (failing || latest.contains("TOOLTEST")) && !a.tools.is_empty() {
        if let Some(out) = a.tool_output {
            let out: String = out.trim().chars().take(200).collect();
            return Scenario::Text(format!("Tool said: {out}"));
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
            };
        }
    }
    Scenario::Text(PLAIN_TEXT.to_owned())
}

fn analyse(api: Api, body: &Value) -> Analysis {
    let mut a = Analysis {
        latest_text: String::new(),
        tool_output: None,
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
mod tests {
    use super::*;

    fn bash_tool() -> Value {
        json!([{"name": "Bash", "input_schema": {"type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"},
                           "timeout": {"type": "number"}},
            "required": ["command"]}}])
    }

    #[test]
    fn tooltest_calls_the_shell_tool_then_reports_its_output() {
        let first =
            json!({"messages": [{"role": "user", "content": "TOOLTEST"}], "tools": bash_tool()});
        assert_eq!(
            choose(Api::Anthropic, &first),
            Scenario::Tool {
                name: "Bash".into(),
                args: json!({"command": "echo hi", "description": "Print hi"})
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
                args: json!({"cmd": "echo oops >&2; exit 3"})
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
}
