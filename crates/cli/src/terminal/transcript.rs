//! `awr transcript RUN [--follow] [--json] [--tree]`: the exchange transcript of a run.

use std::collections::HashSet;

use anyhow::anyhow;
use application::transcript::{Follow, Line, transcript_lines};
use domain::RunId;
use domain::transcript::{ExchangeEvent, ExchangeType};
use futures::StreamExt;
use infrastructure::{read_transcript_lines, transcript_path};
use serde_json::Value;

use crate::storage::Storage;
use crate::{Failure, say, wiring};

/// Prints the transcript of `run` (its file under `storage`).
pub async fn transcript(
    storage: &Storage,
    run: RunId,
    follow: bool,
    json: bool,
    tree: bool,
) -> Result<(), Failure> {
    let no_transcript = || {
        let path = transcript_path(storage.files(), run);
        Failure::Input(anyhow!(
            "run {run} has no transcript ({} not found)",
            path.display()
        ))
    };
    if tree {
        if !transcript_path(storage.files(), run).exists() {
            return Err(no_transcript());
        }
        let mut bad = 0;
        print_tree(storage, run, 0, &mut HashSet::new(), &mut bad)?;
        return bad_lines(bad);
    }
    let follow = match follow {
        true => Some(Follow {
            store: wiring::read_store(storage)?,
            clock: wiring::clock_and_ids().0,
        }),
        false => None,
    };
    let reader = wiring::transcript_reader(storage);
    let mut lines = transcript_lines(reader, run, follow)
        .await
        .map_err(|e| Failure::Input(anyhow!(e)))?
        .ok_or_else(no_transcript)?;
    let mut bad = 0usize;
    while let Some(item) = lines.next().await {
        match item {
            Ok(Line::Event(event)) => say(&render(&event, json)?)?,
            Ok(Line::Bad(problem)) => {
                bad += 1;
                crate::note(&format!("awr: skipping a bad line: {problem}"));
            }
            Err(e) => return Err(Failure::Input(anyhow!(e))),
        }
    }
    bad_lines(bad)
}

/// Bad lines were reported (each on stderr, with its file and line): exit 2
/// once everything readable is printed.
fn bad_lines(count: usize) -> Result<(), Failure> {
    match count {
        0 => Ok(()),
        n => Err(Failure::Input(anyhow!(
            "{n} line(s) of the transcript are corrupt"
        ))),
    }
}

fn render(event: &ExchangeEvent, json: bool) -> Result<String, Failure> {
    if json {
        return serde_json::to_string(event).map_err(|e| Failure::Run(anyhow!(e)));
    }
    let path = if event.path.is_empty() {
        "-"
    } else {
        &event.path
    };
    let line = format!(
        "{:>5}  {}  {:<28} {:<16} {}",
        event.seq,
        event.timestamp,
        event.kind.as_str(),
        path,
        summary(event)
    );
    Ok(crate::inert(&line).into_owned())
}

/// One line saying what the payload holds.
fn summary(event: &ExchangeEvent) -> String {
    let p = &event.payload;
    let text = match &event.kind {
        ExchangeType::MessageUser | ExchangeType::MessageAssistant => p["blocks"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .map(|b| {
                        let kind = b["type"].as_str().unwrap_or("?");
                        let body = b
                            .get("text")
                            .or_else(|| b.get("thinking"))
                            .or_else(|| b.get("tool_name"))
                            .or_else(|| b.get("command"))
                            .map(flat)
                            .unwrap_or_default();
                        format!("[{kind}] {body}")
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default(),
        ExchangeType::ToolCall | ExchangeType::ToolResult => format!(
            "{} ({}) {}",
            p["name"].as_str().unwrap_or("?"),
            p["fidelity"].as_str().unwrap_or("?"),
            flat(
                p.get("input")
                    .or_else(|| p.get("output"))
                    .unwrap_or(&Value::Null)
            )
        ),
        ExchangeType::Unknown(_) => format!("(unknown type) {}", flat(p)),
        _ => {
            let mut s = format!(
                "{} {}",
                p["kind"].as_str().unwrap_or(""),
                p["name"].as_str().unwrap_or("")
            );
            if let Some(child) = event.child_run_id {
                s.push_str(&format!(" child {child}"));
            }
            if let Some(error) = p.get("error") {
                s.push_str(&format!(" error: {}", flat(error)));
            }
            s
        }
    };
    cut(&text, 140)
}

fn flat(v: &Value) -> String {
    match v {
        Value::String(s) => s.replace('\n', " "),
        other => other.to_string(),
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}…", text.chars().take(max).collect::<String>())
    } else {
        text.to_owned()
    }
}

/// The execution tree: the run, its steps, and the runs they called,
/// followed through `child_run_id` into the children's own files.
/// `bad` counts the bad lines found (reported on stderr).
fn print_tree(
    storage: &Storage,
    run: RunId,
    depth: usize,
    seen: &mut HashSet<RunId>,
    bad: &mut usize,
) -> Result<(), Failure> {
    let indent = "  ".repeat(depth);
    if !seen.insert(run) {
        return say(&format!("{indent}run {run} (already shown)"));
    }
    let path = transcript_path(storage.files(), run);
    let events = match read_transcript_lines(&path) {
        Ok(read) => {
            for problem in &read.problems {
                crate::note(&format!("awr: skipping a bad line: {problem}"));
            }
            *bad += read.problems.len();
            read.events
        }
        Err(e) => {
            *bad += 1;
            return say(&crate::inert(&format!("{indent}run {run}: {e}")));
        }
    };
    let name = events
        .iter()
        .find(|e| e.kind == ExchangeType::RunStarted)
        .and_then(|e| e.payload["name"].as_str())
        .unwrap_or("?");
    let outcome = events
        .iter()
        .find(|e| e.kind == ExchangeType::RunCompleted)
        .map(|e| {
            if e.payload.get("error").is_some() {
                "failed"
            } else {
                "completed"
            }
        })
        .unwrap_or("running");
    say(&crate::inert(&format!(
        "{indent}run {run} {name} ({outcome})"
    )))?;
    for event in &events {
        match &event.kind {
            ExchangeType::StepStarted => {
                let kind = event.payload["kind"].as_str().unwrap_or("?");
                let iteration = if event.iteration > 0 {
                    format!(" #{}", event.iteration)
                } else {
                    String::new()
                };
                say(&crate::inert(&format!(
                    "{indent}  {} [{kind}]{iteration}",
                    event.path
                )))?;
            }
            ExchangeType::CallWorkflowStarted => {
                if let Some(child) = event.child_run_id {
                    print_tree(storage, child, depth + 2, seen, bad)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}
