//! `awr transcript RUN [--follow] [--json] [--tree]`: the exchange transcript of a run.

use anyhow::anyhow;
use application::transcript::{Follow, Line, TreeLine, transcript_lines, transcript_tree};
use domain::RunId;
use domain::transcript::{ExchangeEvent, ExchangeType};
use futures::StreamExt;
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
    if tree {
        return print_tree(storage, run).await;
    }
    let follow = match follow {
        true => Some(Follow {
            store: wiring::read_store(storage).await?,
            clock: wiring::clock_and_ids().0,
        }),
        false => None,
    };
    let reader = wiring::transcript_reader(storage);
    let mut lines = transcript_lines(reader, run, follow)
        .await
        .map_err(|e| Failure::Input(anyhow!(e)))?
        .ok_or_else(|| no_transcript(storage, run))?;
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

/// `run` has no transcript under `storage`: bad input (exit 2).
fn no_transcript(storage: &Storage, run: RunId) -> Failure {
    Failure::Input(anyhow!("run {run} has no transcript under {storage}"))
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
        ExchangeType::ApprovalRequested => flat(&p["prompt"]),
        ExchangeType::ApprovalResolved => {
            let verdict = match p["approved"].as_bool() {
                Some(true) => "approved",
                _ => "rejected",
            };
            let by = p["by"].as_str().unwrap_or("nobody");
            let mut s = format!("{verdict} by {by} ({})", p["how"].as_str().unwrap_or("?"));
            if let Some(reason) = p["reason"].as_str() {
                s.push_str(&format!(": {}", flat(&Value::from(reason))));
            }
            if !p["data"].is_null() {
                s.push_str(&format!(" {}", flat(&p["data"])));
            }
            s
        }
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

/// Prints the execution tree of `run` ([`transcript_tree`]): the bad
/// lines skipped and the transcripts that cannot be read are counted in
/// the exit code.
async fn print_tree(storage: &Storage, run: RunId) -> Result<(), Failure> {
    let reader = wiring::transcript_reader(storage);
    let Some(tree) = transcript_tree(reader.as_ref(), run)
        .await
        .map_err(|e| Failure::Input(anyhow!(e)))?
    else {
        return Err(no_transcript(storage, run));
    };
    for problem in &tree.problems {
        crate::note(&format!("awr: skipping a bad line: {problem}"));
    }
    let mut bad = tree.problems.len();
    for line in &tree.lines {
        match line {
            TreeLine::Run {
                depth,
                run_id,
                name,
                outcome,
            } => say(&crate::inert(&format!(
                "{}run {run_id} {name} ({outcome})",
                "  ".repeat(*depth)
            )))?,
            TreeLine::Seen { depth, run_id } => say(&format!(
                "{}run {run_id} (already shown)",
                "  ".repeat(*depth)
            ))?,
            TreeLine::Unreadable {
                depth,
                run_id,
                error,
            } => {
                bad += 1;
                say(&crate::inert(&format!(
                    "{}run {run_id}: {error}",
                    "  ".repeat(*depth)
                )))?;
            }
            TreeLine::Step {
                depth,
                path,
                kind,
                iteration,
            } => {
                let iteration = match iteration {
                    0 => String::new(),
                    n => format!(" #{n}"),
                };
                say(&crate::inert(&format!(
                    "{}  {path} [{kind}]{iteration}",
                    "  ".repeat(*depth)
                )))?;
            }
        }
    }
    bad_lines(bad)
}
