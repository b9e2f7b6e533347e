//! Each recorded capture of a real CLI (`testdata/<cli>/<scenario>/`)
//! decoded and checked against the `expected.json` beside it.

use std::collections::BTreeMap;

use domain::event::{ModelUsage, Usage};

use super::*;

/// What a recorded capture decodes to: its `expected.json`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    /// The kinds, space-separated, a run of one kind of delta counted once.
    kinds: String,
    /// The session it names (first, or on its result).
    session: Option<String>,
    /// The model its session names.
    model: Option<String>,
    /// The first error it reports and goes on from: its type and a part of
    /// its message.
    reported: Option<(String, String)>,
    /// How the answer (the result's text) starts, for a completed run...
    answer: Option<String>,
    /// ...and its usage, as `agent:complete` records it.
    usage: Option<Usage>,
    /// The error type of a failed run...
    error: Option<String>,
    /// ...and a part of its message.
    message: Option<String>,
    /// The model turns of a completed run.
    turns: Option<u32>,
    /// Its cost in USD.
    cost: Option<f64>,
    /// Its wall time.
    duration_ms: Option<u64>,
    /// Its prompt and output tokens per model.
    models: Option<BTreeMap<String, (u64, u64)>>,
    /// A tool it ran.
    tool: Option<ExpectedTool>,
    /// Why it decodes so.
    #[serde(rename = "note")]
    _note: Option<String>,
}

/// A tool a capture ran: its [`AgentMessage::ToolUse`], then its
/// [`AgentMessage::Tool`].
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedTool {
    id: String,
    name: String,
    input: Value,
    output: Value,
    error: Option<String>,
}

/// Decodes the recorded capture `cli/scenario` under `testdata/` with its
/// recorded exit code.
pub(crate) fn recorded<D: Decoder + Default>(scenario: &str) -> Vec<Decoded> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(scenario);
    let stdout = std::fs::read(dir.join("stdout.jsonl")).unwrap();
    capture::<D>(&stdout, &std::fs::read_to_string(dir.join("rc")).unwrap())
}

/// Decodes every capture of `cli` (the folders under `testdata/cli/`) and
/// checks it against its `expected.json`.
pub(crate) fn assert_recorded<D: Decoder + Default>(cli: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut seen = 0;
    for entry in std::fs::read_dir(root.join(cli)).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let at = dir.strip_prefix(&root).unwrap().display().to_string();
        let path = dir.join("expected.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let expected: Expected =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let out = recorded::<D>(&at);
        assert_eq!(collapsed_kinds(&out).join(" "), expected.kinds, "{at}");
        let on_result = match out.last() {
            Some(Ok(AgentMessage::Completed(result))) => result.session_id.as_ref(),
            _ => None,
        };
        let session = match out.first() {
            Some(Ok(AgentMessage::Session { session_id, .. })) => {
                assert_eq!(
                    on_result, None,
                    "{at}: the result names an announced session"
                );
                Some(session_id)
            }
            _ => on_result,
        };
        let session = session.map(SessionId::as_str);
        assert_eq!(session, expected.session.as_deref(), "{at}");
        if let Some(model) = &expected.model {
            assert_eq!(self::session(&out).1, Some(model.as_str()), "{at}");
        }
        if let Some((error_type, part)) = &expected.reported {
            let first = out.iter().find_map(|d| match d {
                Ok(AgentMessage::Error {
                    error_type,
                    message,
                    ..
                }) => Some((error_type, message)),
                _ => None,
            });
            let (kind, message) = first.unwrap_or_else(|| panic!("{at}: no error reported"));
            assert_eq!(kind.as_str(), error_type, "{at}");
            assert!(message.contains(part.as_str()), "{at}: {message}");
        }
        if let Some(error_type) = &expected.error {
            let (kind, message) = agent_error(&out);
            assert_eq!(kind, error_type, "{at}");
            let part = expected.message.unwrap();
            assert!(message.contains(&part), "{at}: {message}");
        } else {
            assert_result(completed(&out), &expected, &at);
        }
        if let Some(want) = &expected.tool {
            let (id, name, input) = (Some(want.id.as_str()), &want.name, &want.input);
            let (output, error) = (want.output.clone(), want.error.as_deref());
            let ran = tool_of(id, name, input.clone(), output, error);
            let (messages, _) = split(out.clone());
            let at_tool = messages.iter().position(|m| *m == ran);
            let at_use = messages
                .iter()
                .position(|m| *m == use_of(id, name, input.clone()));
            let (Some(at_use), Some(at_tool)) = (at_use, at_tool) else {
                panic!("{at}: {ran:?}, and its use before it, in {messages:?}")
            };
            assert!(at_use < at_tool, "{at}: the call comes before its result");
        }
        seen += 1;
    }
    assert!(seen > 0, "no captures of {cli}");
}

/// Checks a completed run's result against what `expected.json` says of it.
#[track_caller]
fn assert_result(result: &AgentResult, expected: &Expected, at: &str) {
    let answer = expected.answer.as_deref().unwrap();
    assert!(result.text.starts_with(answer), "{at}: {}", result.text);
    assert_eq!(Some(&result.usage), expected.usage.as_ref(), "{at}");
    let models = result.model_usage.as_ref().map(|models| {
        let tokens = |u: &ModelUsage| (u.input_tokens, u.output_tokens);
        models.iter().map(|(m, u)| (m.clone(), tokens(u))).collect()
    });
    let got = (
        result.total_cost_usd,
        result.duration_ms,
        models,
        result.num_turns,
    );
    // What `expected.json` leaves out is not checked.
    let want = (
        expected.cost.or(got.0),
        expected.duration_ms.or(got.1),
        expected.models.clone().or_else(|| got.2.clone()),
        expected.turns.unwrap_or(got.3),
    );
    assert_eq!(got, want, "{at}: cost, time, per-model usage and turns");
}
