//! Helpers shared by the providers' tests: every provider's test decodes
//! captures and reads a decoded stream the same way (its kinds, its end,
//! its tools), and runs fake CLIs the same way. What every CLI decoder
//! promises is checked once, here ([`assert_cli_basics`]), each recorded
//! capture against the `expected.json` beside it.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use application::ports::{
    AgentMessage, AgentRequest, AgentResult, ChatError, ChatEvent, ChatMessage, ChatModel,
    ChatRequest, QueryError, ToolCall, TurnEnd,
};
use domain::event::Usage;
use domain::workflow::{AgentDef, Provider};
use domain::{NodeId, NodeRunId, RunId, SessionId};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use crate::http::TurnDecoder;

use super::{Decoded, Decoder, decode_all};

mod recorded;

pub(crate) use recorded::{assert_recorded, recorded};

/// What a decoded item is: its message's variant in snake case
/// (`text_delta`), `ERR` for the error.
pub(crate) fn kind(d: &Decoded) -> String {
    let Ok(message) = d else {
        return "ERR".to_owned();
    };
    let debug = format!("{message:?}");
    let variant = debug.split([' ', '(']).next().unwrap_or_default();
    let mut kind = String::new();
    for c in variant.chars() {
        if c.is_uppercase() && !kind.is_empty() {
            kind.push('_');
        }
        kind.push(c.to_ascii_lowercase());
    }
    kind
}

pub(crate) fn kinds(out: &[Decoded]) -> Vec<String> {
    out.iter().map(kind).collect()
}

pub(crate) fn completed(out: &[Decoded]) -> &AgentResult {
    match out.last() {
        Some(Ok(AgentMessage::Completed(result))) => result,
        other => panic!("expected Completed last, got {other:?}"),
    }
}

pub(crate) fn agent_error(out: &[Decoded]) -> (&str, &str) {
    match out.last() {
        Some(Err(QueryError::Agent {
            error_type,
            message,
            ..
        })) => (error_type.as_str(), message.as_str()),
        other => panic!("expected an agent error last, got {other:?}"),
    }
}

pub(crate) fn tool(d: &Decoded) -> (&str, &Value, &Value, Option<&str>) {
    match d {
        Ok(AgentMessage::Tool {
            name,
            input,
            output,
            error,
            ..
        }) => (name.as_str(), input, output, error.as_deref()),
        other => panic!("expected a tool, got {other:?}"),
    }
}

/// The messages of a decoded stream, all of them, and the error that ends
/// it, if any: tests compare whole sequences, not samples.
pub(crate) fn split(out: Vec<Decoded>) -> (Vec<AgentMessage>, Option<QueryError>) {
    let mut messages = Vec::new();
    let mut error = None;
    for (i, d) in out.into_iter().enumerate() {
        match d {
            Ok(m) => {
                assert!(error.is_none(), "message {i} after the error: {m:?}");
                messages.push(m);
            }
            Err(e) => {
                assert!(error.is_none(), "a second error at {i}: {e:?}");
                error = Some(e);
            }
        }
    }
    (messages, error)
}

/// An [`AgentMessage::ToolUse`].
pub(crate) fn use_of(id: Option<&str>, name: &str, input: Value) -> AgentMessage {
    AgentMessage::ToolUse {
        id: id.map(str::to_owned),
        name: name.to_owned(),
        input,
    }
}

/// An [`AgentMessage::Tool`] without a duration.
pub(crate) fn tool_of(
    id: Option<&str>,
    name: &str,
    input: Value,
    output: Value,
    error: Option<&str>,
) -> AgentMessage {
    AgentMessage::Tool {
        id: id.map(str::to_owned),
        name: name.to_owned(),
        input,
        output,
        duration_ms: None,
        error: error.map(str::to_owned),
    }
}

/// An [`AgentMessage::Text`].
pub(crate) fn text_of(content: &str) -> AgentMessage {
    AgentMessage::Text {
        content: content.to_owned(),
    }
}

/// An [`AgentMessage::Warning`] with its details.
pub(crate) fn warning_of(message: &str, details: Value) -> AgentMessage {
    AgentMessage::Warning {
        message: message.to_owned(),
        details: Some(details),
    }
}

/// Decodes a copied capture with its recorded exit code (the `rc` file),
/// without the fields it keeps unmapped ([`without_extra`]).
pub(crate) fn capture<D: Decoder + Default>(stdout: &[u8], rc: &str) -> Vec<Decoded> {
    let out = decode_all(D::default(), stdout, Some(rc.trim().parse().unwrap()), "");
    without_extra(out)
}

/// A decoded stream without its [`AgentMessage::Extra`]s: what the
/// mapping made of the lines. The tests of what is kept unmapped read
/// them apart ([`run_with_extra`]).
pub(crate) fn without_extra(out: Vec<Decoded>) -> Vec<Decoded> {
    out.into_iter()
        .filter(|d| !matches!(d, Ok(AgentMessage::Extra(_))))
        .collect()
}

/// The turn's events without its [`ChatEvent::Extra`]s (see [`without_extra`]).
pub(crate) fn chat_without_extra(
    events: Vec<Result<ChatEvent, ChatError>>,
) -> Vec<Result<ChatEvent, ChatError>> {
    events
        .into_iter()
        .filter(|e| !matches!(e, Ok(ChatEvent::Extra(_))))
        .collect()
}

/// The kinds of a decoded stream, a run of one kind of delta counted once
/// (tests do not count chunks).
pub(crate) fn collapsed_kinds(out: &[Decoded]) -> Vec<String> {
    let mut kinds: Vec<String> = Vec::new();
    for k in out.iter().map(kind) {
        if k.ends_with("_delta") && kinds.last() == Some(&k) {
            continue;
        }
        kinds.push(k);
    }
    kinds
}

/// Decodes these stdout lines, each ended by a newline.
pub(crate) fn run<D: Decoder + Default>(
    lines: &[&str],
    exit_code: Option<i32>,
    stderr: &str,
) -> Vec<Decoded> {
    without_extra(run_with_extra::<D>(lines, exit_code, stderr))
}

/// [`run`], with what the lines hold unmapped ([`AgentMessage::Extra`]).
pub(crate) fn run_with_extra<D: Decoder + Default>(
    lines: &[&str],
    exit_code: Option<i32>,
    stderr: &str,
) -> Vec<Decoded> {
    let stdout: String = lines.iter().map(|l| format!("{l}\n")).collect();
    decode_all(D::default(), stdout.as_bytes(), exit_code, stderr)
}

/// Asserts the kinds of a decoded stream, space-separated, all of them.
#[track_caller]
pub(crate) fn assert_kinds(out: &[Decoded], expected: &str) {
    assert_eq!(kinds(out).join(" "), expected);
}

/// The session the stream announces first, and its model.
pub(crate) fn session(out: &[Decoded]) -> (&str, Option<&str>) {
    match &out[0] {
        Ok(AgentMessage::Session { session_id, model }) => (session_id.as_str(), model.as_deref()),
        other => panic!("expected a session first, got {other:?}"),
    }
}

/// The streamed text, joined.
pub(crate) fn deltas(out: &[Decoded]) -> String {
    out.iter()
        .filter_map(|d| match d {
            Ok(AgentMessage::TextDelta { content }) => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

/// Decodes the stdout of a CLI whose output goes bad, with exit code 0:
/// the `before` lines, then `text_line` (a line with `TEXT` where its text
/// goes) holding a NUL byte and invalid UTF-8, a line of binary garbage,
/// `text_line` holding a mebibyte of text, and the `after` lines, the last
/// one without a newline. Decoding goes on whatever the CLI: the text is
/// repaired (with a warning before it), the garbage is two warnings (it was
/// repaired, and it is not JSON), the big line decodes whole.
pub(crate) fn hostile<D: Decoder + Default>(
    before: &[&str],
    text_line: &str,
    after: &[&str],
) -> Vec<Decoded> {
    let big = "y".repeat(1 << 20);
    let (head, tail) = text_line.split_once("TEXT").unwrap();
    let mut lines: Vec<Vec<u8>> = before.iter().map(|l| l.as_bytes().to_vec()).collect();
    lines.push([head.as_bytes(), b"a\0b\xffc", tail.as_bytes()].concat());
    lines.push(b"garbage \x00\xfe not json".to_vec());
    lines.push(text_line.replace("TEXT", &big).into_bytes());
    lines.extend(after.iter().map(|l| l.as_bytes().to_vec()));
    let out = without_extra(decode_all(D::default(), &lines.join(&b'\n'), Some(0), ""));
    let text = |d: &Decoded| match d {
        Ok(AgentMessage::Text { content } | AgentMessage::TextDelta { content }) => {
            Some(content.clone())
        }
        _ => None,
    };
    let at = out
        .iter()
        .position(|d| text(d).is_some())
        .unwrap_or_else(|| panic!("no text: {out:?}"));
    assert_eq!(text(&out[at]).unwrap(), "a\u{0}b\u{fffd}c");
    assert_eq!(
        kinds(&out[at - 1..at + 3]),
        ["warning", &kind(&out[at]), "warning", "warning"]
    );
    assert_eq!(text(&out[at + 3]), Some(big), "the big line, whole");
    out
}

/// What every CLI decoder does, whatever its CLI: each recorded capture
/// of `cli` decodes as its `expected.json` says; a CLI that printed
/// nothing fails naming its exit code and stderr (or the signal), once
/// however often the stream is finished; and a line of a type it does not
/// know, or of none, is kept whole as a warning between the `first` lines
/// and `last` (a result line).
pub(crate) fn assert_cli_basics<D: Decoder + Default>(cli: &str, first: &[&str], last: &str) {
    assert_recorded::<D>(cli);

    let out = decode_all(D::default(), b"", Some(2), "boom: no API key");
    let (error_type, message) = agent_error(&out);
    assert_eq!(
        (kinds(&out).join(" "), error_type),
        ("ERR".to_owned(), "error_during_execution")
    );
    assert!(message.contains("exited with code 2"), "{message}");
    assert!(message.contains("boom: no API key"), "{message}");
    let mut decoder = D::default();
    assert!(
        agent_error(&decoder.finish(None, ""))
            .1
            .contains("killed by a signal")
    );
    assert!(decoder.finish(None, "").is_empty(), "finished once");

    let unknown = [r#"{"type":"brand_new","x":1}"#, r#"{"no_type":true}"#];
    let lines: Vec<&str> = [first, &unknown, &[last]].concat();
    let (messages, error) = split(run::<D>(&lines, Some(0), ""));
    assert!(error.is_none(), "{error:?}");
    for line in unknown {
        let kept = serde_json::json!({ "line": serde_json::from_str::<Value>(line).unwrap() });
        let warned = |m: &AgentMessage| matches!(m, AgentMessage::Warning { details: Some(d), .. } if *d == kept);
        assert!(messages.iter().any(warned), "{line} kept: {messages:?}");
    }
}

/// Each line of `cases`, after the `first` lines, ends the stream in an
/// error of its stable type.
#[track_caller]
pub(crate) fn assert_error_types<D: Decoder + Default>(first: &[&str], cases: &[(&str, &str)]) {
    for (line, expected) in cases {
        let out = run::<D>(&[first, &[*line]].concat(), Some(1), "");
        assert_eq!(agent_error(&out).0, *expected, "{line}");
    }
}

/// The error that ends a stream: its type and message.
pub(crate) fn fatal_of(error: Option<&QueryError>) -> (&str, &str) {
    match error {
        Some(QueryError::Agent {
            error_type,
            message,
            ..
        }) => (error_type.as_str(), message.as_str()),
        other => panic!("expected an agent error, got {other:?}"),
    }
}

/// The error that ends the stream of a CLI killed with exit code 137
/// (stderr `Killed`): an execution error naming both.
#[track_caller]
pub(crate) fn assert_killed(error: Option<&QueryError>) {
    let (error_type, message) = fatal_of(error);
    assert_eq!(error_type, "error_during_execution");
    assert!(
        message.contains("code 137") && message.contains("Killed"),
        "{message}"
    );
}

/// An [`AgentMessage::Session`].
pub(crate) fn session_of(id: &str, model: Option<&str>) -> AgentMessage {
    AgentMessage::Session {
        session_id: SessionId::new(id).unwrap(),
        model: model.map(str::to_owned),
    }
}

/// An [`AgentMessage::Thinking`] without a token count.
pub(crate) fn thinking_of(content: &str, signature: Option<&str>) -> AgentMessage {
    AgentMessage::Thinking {
        content: content.to_owned(),
        token_count: None,
        signature: signature.map(str::to_owned),
    }
}

/// A [`Usage`] with these counts and nothing else.
pub(crate) fn usage_of(
    input_tokens: u64,
    output_tokens: u64,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
) -> Usage {
    Usage {
        extra: Default::default(),
        input_tokens,
        output_tokens,
        cache_creation_input_tokens,
        cache_read_input_tokens,
    }
}

/// A request of `provider`'s agent `coder` in a new run, running
/// `executable` when given.
pub(crate) fn agent_request(provider: Provider, executable: Option<String>) -> AgentRequest {
    AgentRequest {
        run_id: RunId::new(uuid::Uuid::new_v4()).unwrap(),
        workflow: "wf".into(),
        node_id: NodeId::new("coder").unwrap(),
        node_run_id: NodeRunId::new(uuid::Uuid::new_v4()),
        agent_name: "coder".into(),
        agent: AgentDef {
            executable,
            ..AgentDef::new(provider)
        },
        prompt: "run echo hi".into(),
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

/// Runs `pieces` of an SSE body through the real framing and `decoder`, as
/// a network would deliver them, and collects what the turn yields.
pub(crate) async fn sse_turn<D: TurnDecoder>(
    decoder: D,
    pieces: Vec<Vec<u8>>,
) -> Vec<Result<ChatEvent, ChatError>> {
    let pieces = pieces.into_iter().map(Ok::<_, std::convert::Infallible>);
    let events = futures::stream::iter(pieces)
        .eventsource()
        .map(|e| e.map_err(|e| ChatError::Network(e.to_string())));
    chat_without_extra(crate::http::decode(decoder, events).collect().await)
}

/// The events of a turn in which nothing failed.
pub(crate) fn ok(events: Vec<Result<ChatEvent, ChatError>>) -> Vec<ChatEvent> {
    events.into_iter().map(Result::unwrap).collect()
}

/// The end a turn's events close with.
pub(crate) fn end(events: &[ChatEvent]) -> &TurnEnd {
    match events.last() {
        Some(ChatEvent::End(end)) => end,
        other => panic!("the turn does not end with End: {other:?}"),
    }
}

/// A turn whose one event is `<html>` and 1000 `x`s, not JSON, fails at
/// once with a final API error that quotes the start of it, and no more.
#[track_caller]
pub(crate) fn assert_not_json_named(events: &[Result<ChatEvent, ChatError>]) {
    assert_eq!(events.len(), 1);
    let Err(ChatError::Api {
        status: None,
        message,
        retryable: false,
    }) = &events[0]
    else {
        panic!("expected an API error: {events:?}");
    };
    assert!(message.contains("not JSON: <html>xxx"), "{message}");
    assert!(message.chars().count() < 300, "{message}");
}

/// Each agent's turn is refused before any request, with a configuration
/// error naming what is wrong (the case's text); returns the errors.
pub(crate) async fn assert_refused<const N: usize>(
    chat: &impl ChatModel,
    cases: [(AgentDef, &str); N],
) -> Vec<ChatError> {
    let mut errors = Vec::new();
    for (agent, part) in cases {
        let error = match chat.turn(chat_request(agent)).await {
            Err(error) => error,
            Ok(_) => panic!("the turn started: {part}"),
        };
        assert!(
            matches!(&error, ChatError::Config(m) if m.contains(part)),
            "{part}: {error:?}"
        );
        errors.push(error);
    }
    errors
}

/// A [`ToolCall`] of a chat turn.
pub(crate) fn call_of(id: &str, name: &str, input: Value) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        name: name.to_owned(),
        input,
    }
}

/// A [`ChatEvent::ThinkingDone`].
pub(crate) fn thought_of(text: &str, signature: Option<&str>) -> ChatEvent {
    ChatEvent::ThinkingDone {
        text: text.to_owned(),
        signature: signature.map(str::to_owned),
    }
}

/// A chat turn of `agent` that says "hi", with no system prompt or tools.
pub(crate) fn chat_request(agent: AgentDef) -> ChatRequest {
    ChatRequest {
        agent,
        system: String::new(),
        messages: vec![ChatMessage::User("hi".into())],
        tools: Vec::new(),
    }
}

/// An executable shell script `name` in `dir` running `body`: a fake CLI.
pub(crate) fn fake_cli(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// A fake CLI that prints the recorded stdout of `cli`'s `scenario`.
pub(crate) fn replaying(dir: &Path, cli: &str, scenario: &str) -> String {
    let capture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(cli)
        .join(scenario)
        .join("stdout.jsonl");
    let body = format!("cat '{}'", capture.display());
    fake_cli(dir, &format!("fake-{cli}-{scenario}"), &body)
}
