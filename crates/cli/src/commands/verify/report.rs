//! The first-divergence report of `awr verify-determinism`: where two
//! canonical outputs first differ, the JSON Pointer and both values there,
//! the causal chain that led to it and a short context diff.

use std::collections::HashMap;

use adapters_agents::mock::recording::first_difference;
use anyhow::anyhow;
use serde_json::{Value, json};

use crate::{Failure, say};

/// The first place two canonical outputs differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub(super) shape: String,
    pub(super) line: Option<usize>,
    pub(super) event: String,
    pub(super) node: String,
    pub(super) pointer: String,
    pub(super) a: Value,
    pub(super) b: Value,
    pub(super) chain: Vec<String>,
    pub(super) context: Vec<String>,
    pub(super) message: String,
}

impl Report {
    /// What the recording said (a divergence from the recording).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The first line where `a` and `b` differ, or `None` when they are equal.
pub fn first_divergence(a: &[String], b: &[String]) -> Option<Report> {
    let i = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let parse = |l: Option<&String>| l.and_then(|l| serde_json::from_str::<Value>(l).ok());
    let (va, vb) = (parse(a.get(i)), parse(b.get(i)));
    let shape = match (&va, &vb) {
        (Some(_), None) => "only-in-A",
        (None, Some(_)) => "only-in-B",
        _ => "changed",
    };
    let (pointer, left, right) = match (&va, &vb) {
        (Some(x), Some(y)) => first_difference(x, y).unwrap_or_default(),
        _ => (
            String::new(),
            va.clone().unwrap_or(Value::Null),
            vb.clone().unwrap_or(Value::Null),
        ),
    };
    let event = va.as_ref().or(vb.as_ref()).cloned().unwrap_or(Value::Null);
    let kind = event["type"].as_str().unwrap_or("?").to_owned();
    let node = event["nodeId"]
        .as_str()
        .or(event["agent_id"].as_str())
        .unwrap_or("")
        .to_owned();
    let chain = chain(a, &event);
    let lo = i.saturating_sub(3);
    let mut context = Vec::new();
    for j in lo..i {
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
    Some(Report {
        shape: shape.into(),
        line: Some(i + 1),
        event: kind,
        node,
        pointer,
        a: left,
        b: right,
        chain,
        context,
        message: String::new(),
    })
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

/// Prints the report (stderr; `--json` also on stdout) and fails with exit 1.
pub(super) fn diverged(report: Report, json_out: bool) -> Result<(), Failure> {
    let mut text = match report.line {
        Some(line) => format!(
            "verify-determinism: DIVERGED ({}) at canonical line {line}",
            report.shape
        ),
        None => format!("verify-determinism: DIVERGED ({})", report.shape),
    };
    text.push_str(&format!(
        "\n  event  {}  node={}",
        report.event, report.node
    ));
    if !report.message.is_empty() {
        text.push_str(&format!("\n  {}", report.message));
    }
    if report.line.is_some() {
        text.push_str(&format!(
            "\n  path   {}\n  run A  {}\n  run B  {}",
            if report.pointer.is_empty() {
                "/"
            } else {
                &report.pointer
            },
            report.a,
            report.b
        ));
    }
    if !report.chain.is_empty() {
        text.push_str(&format!("\n  chain  {}", report.chain.join(" > ")));
    }
    if !report.context.is_empty() {
        text.push_str("\n--- run A +++ run B\n");
        text.push_str(&report.context.join("\n"));
    }
    if json_out {
        say(&json!({
            "result": "diverged",
            "shape": report.shape,
            "line": report.line,
            "event": report.event,
            "node": report.node,
            "pointer": report.pointer,
            "a": report.a,
            "b": report.b,
            "chain": report.chain,
            "context": report.context,
            "message": report.message,
        })
        .to_string())?;
    }
    crate::note(&text);
    Err(Failure::Run(anyhow!(
        "the recording did not replay the same"
    )))
}
