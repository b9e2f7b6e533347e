//! The first-divergence report of `awr verify-determinism`: what kind of
//! divergence it is, where (node, call, JSON Pointer), both values (what
//! the recording or run A holds, what the replay or run B did), the causal
//! chain that led to it and a short context diff. Every kind carries the
//! same fields, so a reader of `--json` never parses a sentence.

use std::collections::HashMap;

use domain::recording::Mismatch;
use serde_json::{Value, json};

use super::request::first_difference;

/// The first place a replay departs from its recording or from the other
/// replay. `docs/determinism.md` lists each field of its JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Which comparison failed: `workflow`, `recording`, `shortfall`,
    /// `recorded-causal`, `changed`, `only-in-A`, `only-in-B`.
    pub shape: String,
    /// What diverged: see [`Kind`].
    pub kind: Kind,
    /// The canonical line (from 1), for a comparison of canonical lines.
    pub line: Option<usize>,
    /// The event type at the divergence.
    pub event: String,
    /// The node (or `workflow`), empty when none.
    pub node: String,
    /// The `for_each` item of a causal event's agent (`node[item]`).
    pub item: Option<u64>,
    /// The node's call (its index among the node's calls), when a provider
    /// call is behind the divergence.
    pub call: Option<u32>,
    /// The node run of that call (`"0"`, `"0#3"`) and its index there.
    pub instance: Option<String>,
    /// The index of the call within that node run.
    pub instance_call: Option<u32>,
    /// The turn of an HTTP agent's tool loop.
    pub turn: Option<u32>,
    /// The file of the recording (a node file, the workflow file).
    pub file: Option<String>,
    /// JSON Pointer of the first difference (`""`: the whole value).
    pub pointer: String,
    /// What the recording (or run A) holds there; `null` when nothing.
    pub recorded: Value,
    /// What the replay (or run B) did there; `null` when nothing.
    pub actual: Value,
    /// How many calls the node file records, for a call too many or too few.
    pub recorded_calls: Option<u32>,
    /// How many turns the recorded call holds, for a turn too many.
    pub recorded_turns: Option<u32>,
    /// The causal ancestors of the event, oldest first.
    pub chain: Vec<String>,
    /// A few lines of context diff (`-` run A, `+` run B).
    pub context: Vec<String>,
    /// A sentence (the mock's refusal, the shortfall, what run A is).
    pub message: String,
}

/// What diverged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kind {
    /// The workflow file is not the one recorded.
    Workflow,
    /// A call sent another request than recorded.
    Request,
    /// A turn of an HTTP agent's call sent another conversation.
    Turn,
    /// A call the recording does not hold.
    ExtraCall,
    /// A turn the recorded call does not hold.
    ExtraTurn,
    /// Recorded calls the replay never made.
    MissingCall,
    /// An answer (an agent's, a tool's, a command's) is not the same.
    Output,
    /// Another event at the same place.
    #[default]
    Event,
    /// The same events in another order.
    Order,
    /// An event run A (the recording) has and run B does not.
    MissingEvent,
    /// An event run B (the replay) has and run A does not.
    ExtraEvent,
    /// The recording cannot serve the call (an unreadable node file).
    Recording,
}

impl Kind {
    /// The name `--json` and the human report use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Workflow => "workflow",
            Kind::Request => "request",
            Kind::Turn => "turn",
            Kind::ExtraCall => "extra-call",
            Kind::ExtraTurn => "extra-turn",
            Kind::MissingCall => "missing-call",
            Kind::Output => "output",
            Kind::Event => "event",
            Kind::Order => "order",
            Kind::MissingEvent => "missing-event",
            Kind::ExtraEvent => "extra-event",
            Kind::Recording => "recording",
        }
    }

    fn of(mismatch: &Mismatch) -> Self {
        use domain::recording::MismatchKind as M;
        match mismatch.kind {
            M::Request => Kind::Request,
            M::Turn => Kind::Turn,
            M::ExtraCall => Kind::ExtraCall,
            M::ExtraTurn => Kind::ExtraTurn,
        }
    }
}

impl Report {
    /// What the recording said (a divergence from the recording).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The report of a call the mock refused, from the mismatch its
    /// `agent:error` keeps.
    pub fn refused(mismatch: Mismatch, message: String) -> Self {
        Report {
            shape: "recording".into(),
            kind: Kind::of(&mismatch),
            event: "agent:error".into(),
            node: mismatch.node,
            call: Some(mismatch.call),
            instance: Some(mismatch.instance),
            instance_call: Some(mismatch.instance_call),
            turn: mismatch.turn,
            file: Some(mismatch.file),
            pointer: mismatch.pointer,
            recorded: mismatch.recorded,
            actual: mismatch.sent,
            recorded_calls: mismatch.recorded_calls,
            recorded_turns: mismatch.recorded_turns,
            message,
            ..Report::default()
        }
    }

    /// The report as one JSON object (`--json`).
    pub fn to_json(&self) -> Value {
        json!({
            "result": "diverged",
            "shape": self.shape,
            "kind": self.kind.as_str(),
            "line": self.line,
            "event": self.event,
            "node": self.node,
            "item": self.item,
            "call": self.call,
            "instance": self.instance,
            "instanceCall": self.instance_call,
            "turn": self.turn,
            "file": self.file,
            "pointer": self.pointer,
            "recorded": self.recorded,
            "actual": self.actual,
            "recordedCalls": self.recorded_calls,
            "recordedTurns": self.recorded_turns,
            // The first report's names of the two values, kept for its readers.
            "a": self.recorded,
            "b": self.actual,
            "chain": self.chain,
            "context": self.context,
            "message": self.message,
        })
    }
}

/// The first line where `a` and `b` differ, or `None` when they are equal.
///
/// A run's own `state_transition` (its output, its status) follows from
/// its agents' answers but is parented on the run's start, so it may sort
/// before the answer it carries: when such a line differs and an agent's
/// event differs too, the agent's is reported, the cause before its echo.
pub fn first_divergence(a: &[String], b: &[String]) -> Option<Report> {
    let differs = |i: &usize| a.get(*i) != b.get(*i);
    let first = (0..a.len().max(b.len())).find(differs)?;
    let parse = |l: Option<&String>| l.and_then(|l| serde_json::from_str::<Value>(l).ok());
    let pair = |i: usize| (parse(a.get(i)), parse(b.get(i)));
    let echo = |(x, y): &(Option<Value>, Option<Value>)| match (x, y) {
        (Some(x), Some(y)) => {
            x["event_id"] == y["event_id"]
                && x["type"] == "state_transition"
                && x["agent_id"] == "workflow"
        }
        _ => false,
    };
    let cause = |(x, y): &(Option<Value>, Option<Value>)| match (x, y) {
        (Some(x), Some(y)) => x["event_id"] == y["event_id"] && x["agent_id"] != "workflow",
        _ => false,
    };
    let i = if echo(&pair(first)) {
        (first + 1..a.len().min(b.len()))
            .filter(differs)
            .find(|&j| cause(&pair(j)))
            .unwrap_or(first)
    } else {
        first
    };
    let (va, vb) = pair(i);
    let (shape, kind) = match (&va, &vb) {
        (Some(_), None) => ("only-in-A", Kind::MissingEvent),
        (None, Some(_)) => ("only-in-B", Kind::ExtraEvent),
        _ if moved(a, b, i) => ("changed", Kind::Order),
        _ => ("changed", Kind::Event),
    };
    let event = va.as_ref().or(vb.as_ref()).cloned().unwrap_or(Value::Null);
    let kind = match kind {
        Kind::Event if is_output(&event) => Kind::Output,
        other => other,
    };
    let (pointer, left, right) = match (&va, &vb, kind) {
        (Some(x), Some(y), Kind::Event | Kind::Output) => {
            first_difference(x, y).unwrap_or_default()
        }
        _ => (
            String::new(),
            va.clone().unwrap_or(Value::Null),
            vb.clone().unwrap_or(Value::Null),
        ),
    };
    let type_name = event["type"].as_str().unwrap_or("?").to_owned();
    let (node, item) = node_of(&event);
    let chain = chain(if va.is_some() { a } else { b }, &event);
    Some(Report {
        shape: shape.into(),
        kind,
        line: Some(i + 1),
        event: type_name,
        node,
        item,
        call: event["callIndex"]
            .as_u64()
            .and_then(|c| u32::try_from(c).ok()),
        pointer,
        recorded: left,
        actual: right,
        chain,
        context: context(a, b, i),
        ..Report::default()
    })
}

/// Whether line `i` differs because the lines moved: each side's line is
/// found elsewhere on the other side.
fn moved(a: &[String], b: &[String], i: usize) -> bool {
    match (a.get(i), b.get(i)) {
        (Some(x), Some(y)) => b.contains(x) && a.contains(y),
        _ => false,
    }
}

/// Whether `event` (a canonical line) is an answer: an agent's, a tool's,
/// a node's or the run's output.
fn is_output(event: &Value) -> bool {
    matches!(
        event["type"].as_str().unwrap_or(""),
        "response_sent"
            | "tool_return"
            | "agent:text"
            | "agent:text:delta"
            | "agent:thinking"
            | "agent:thinking:delta"
            | "agent:tool"
            | "agent:complete"
            | "tool:completed"
            | "tool:failed"
            | "node:completed"
            | "flow:completed"
    )
}

/// The node a canonical line is about, and its `for_each` item: a run
/// event's `nodeId`, or a causal event's `agent_id` (`node[item]`).
fn node_of(event: &Value) -> (String, Option<u64>) {
    if let Some(node) = event["nodeId"].as_str() {
        return (node.to_owned(), None);
    }
    let agent = event["agent_id"].as_str().unwrap_or("");
    match agent.strip_suffix(']').and_then(|a| a.rsplit_once('[')) {
        Some((node, item)) if item.parse::<u64>().is_ok() => (node.to_owned(), item.parse().ok()),
        _ => (agent.to_owned(), None),
    }
}

/// The context diff around line `i`: three lines before, then `-` run A /
/// `+` run B.
fn context(a: &[String], b: &[String], i: usize) -> Vec<String> {
    let mut context = Vec::new();
    for j in i.saturating_sub(3)..i {
        if let Some(l) = a.get(j) {
            context.push(format!("  {}", short(l)));
        }
    }
    for j in i..(i + 4).min(a.len().max(b.len())) {
        match (a.get(j), b.get(j)) {
            (Some(x), Some(y)) if x == y => context.push(format!("  {}", short(x))),
            (x, y) => {
                if let Some(x) = x {
                    context.push(format!("- {}", short(x)));
                }
                if let Some(y) = y {
                    context.push(format!("+ {}", short(y)));
                }
            }
        }
    }
    context
}

/// The causal ancestors of `event` (a causal event), oldest first.
fn chain(lines: &[String], event: &Value) -> Vec<String> {
    let by_id: HashMap<String, Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["event_id"].as_str()?.to_owned(), v)))
        .collect();
    let mut out = Vec::new();
    let mut at = event.clone();
    while let Some(id) = at["event_id"].as_str() {
        out.push(format!(
            "{} {}",
            at["type"].as_str().unwrap_or("?"),
            &id[..8.min(id.len())]
        ));
        match at["parent_event_id"].as_str().and_then(|p| by_id.get(p)) {
            Some(parent) if out.len() < 64 => at = parent.clone(),
            _ => break,
        }
    }
    out.reverse();
    out
}

/// A line for the context diff: one over 300 characters cut at 200, with
/// its length and hash.
fn short(line: &str) -> String {
    let n = line.chars().count();
    if n <= 300 {
        return line.to_owned();
    }
    let head: String = line.chars().take(200).collect();
    let hash = domain::canonical::sha256_hex(line.as_bytes());
    format!("{head}… ({n} chars, sha256 {})", &hash[..16])
}

impl std::fmt::Display for Report {
    /// The human report: a header, then one labelled line per field the
    /// divergence has, its sentence, and the context diff.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&human(self))
    }
}

fn human(report: &Report) -> String {
    let mut text = match report.line {
        Some(line) => format!(
            "verify-determinism: DIVERGED ({}) at canonical line {line}",
            report.shape
        ),
        None => format!("verify-determinism: DIVERGED ({})", report.shape),
    };
    let mut field = |label: &str, value: &str| text.push_str(&format!("\n  {label:<10}{value}"));
    field("kind", report.kind.as_str());
    field("event", &report.event);
    if !report.node.is_empty() {
        field("node", &report.node);
    }
    if let Some(item) = report.item {
        field("item", &item.to_string());
    }
    if let Some(call) = report.call {
        let mut call = call.to_string();
        if let (Some(at), Some(k)) = (&report.instance, report.instance_call)
            && !matches!(at.as_str(), "" | "0")
        {
            call.push_str(&format!(" (instance {at}, call {k})"));
        }
        field("call", &call);
    }
    if let Some(turn) = report.turn {
        field("turn", &turn.to_string());
    }
    if let Some(file) = &report.file {
        field("file", file);
    }
    let pointer = if report.pointer.is_empty() {
        "/"
    } else {
        &report.pointer
    };
    field("path", pointer);
    // Canonical lines compare two outputs (run A may be the recording);
    // the rest compare the replay with the recording.
    let (was, now) = match report.line {
        Some(_) => ("run A", "run B"),
        None => ("recorded", "actual"),
    };
    field(was, &short(&report.recorded.to_string()));
    field(now, &short(&report.actual.to_string()));
    if !report.chain.is_empty() {
        field("chain", &report.chain.join(" > "));
    }
    if !report.message.is_empty() {
        text.push_str(&format!("\n  {}", report.message));
    }
    if !report.context.is_empty() {
        text.push_str("\n--- run A +++ run B\n");
        text.push_str(&report.context.join("\n"));
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lines(values: &[Value]) -> Vec<String> {
        values.iter().map(Value::to_string).collect()
    }

    fn causal(id: &str, agent: &str, kind: &str, hash: &str) -> Value {
        json!({"event_id": id, "agent_id": agent, "type": kind, "payload_hash": hash})
    }

    /// The same lines in another order are an order divergence, with both
    /// whole events; a changed one is named by its pointer and values.
    #[test]
    fn moved_lines_are_an_order_and_changed_ones_a_pointer() {
        let x = causal("1", "a", "task_received", "h1");
        let y = causal("2", "b", "task_received", "h2");
        let report = first_divergence(
            &lines(&[x.clone(), y.clone()]),
            &lines(&[y.clone(), x.clone()]),
        )
        .unwrap();
        assert_eq!((report.kind, report.pointer.as_str()), (Kind::Order, ""));
        assert_eq!((report.recorded, report.actual), (x.clone(), y.clone()));
        let z = causal("2", "b", "response_sent", "h3");
        let w = causal("2", "b", "response_sent", "h4");
        let report = first_divergence(&lines(&[x.clone(), z]), &lines(&[x, w])).unwrap();
        assert_eq!(
            (report.kind, report.pointer.as_str()),
            (Kind::Output, "/payload_hash")
        );
        assert_eq!((report.recorded, report.actual), (json!("h3"), json!("h4")));
        assert_eq!(report.node, "b");
    }

    /// The run's own output transition is reported after the agent's
    /// answer it echoes, whatever order their ids sort them in.
    #[test]
    fn an_agents_answer_is_reported_before_the_runs_echo_of_it() {
        let a = lines(&[
            causal("0", "workflow", "state_transition", "h0"),
            causal("1", "review[2]", "response_sent", "h1"),
        ]);
        let b = lines(&[
            causal("0", "workflow", "state_transition", "g0"),
            causal("1", "review[2]", "response_sent", "g1"),
        ]);
        let report = first_divergence(&a, &b).unwrap();
        assert_eq!(report.line, Some(2));
        assert_eq!((report.node.as_str(), report.item), ("review", Some(2)));
        assert_eq!(report.kind, Kind::Output);
    }

    #[test]
    fn a_line_one_side_lacks_is_missing_or_extra() {
        let x = causal("1", "a", "task_received", "h1");
        let one = lines(std::slice::from_ref(&x));
        let report = first_divergence(&one, &[]).unwrap();
        assert_eq!(
            (report.kind, report.recorded, report.actual),
            (Kind::MissingEvent, x.clone(), Value::Null)
        );
        let report = first_divergence(&[], &one).unwrap();
        assert_eq!(
            (report.kind, report.recorded, report.actual),
            (Kind::ExtraEvent, Value::Null, x)
        );
    }
}
