//! Live progress of `awr run` on stderr: one line per step, with the agent's
//! text streamed as it arrives when stderr is a terminal, plain lines otherwise.
//! Colour escapes only where [`crate::stderr_color`] allows them, and agent
//! text only [`crate::inert`]. Write errors
//! are ignored: a closed stderr is no reason to stop a run.
//!
//! A failure's message is not printed here when it ends the node: the error
//! that `awr` prints last carries it, so each error is printed once.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use application::ports::RunObserver;
use domain::{EventKind, NodeRunId, RunId, RuntimeEvent};

/// Prints events as they are recorded.
pub struct Progress {
    /// Stream agent text and use symbols (a person is watching) or not (a log file).
    live: bool,
    /// Dim the streamed text (a terminal that accepts colour).
    color: bool,
    /// Whether streamed text left the cursor mid-line, and how deep each run
    /// is (children of `call_workflow` nodes print indented under their
    /// parent). A std mutex: held only while printing one event, never
    /// across an await.
    state: Mutex<State>,
    /// Where the text goes: stderr, in one `write` per call.
    sink: Sink,
}

/// Takes what is printed, one call per `write`.
type Sink = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Writes `bytes` to stderr at once (it is unbuffered: each piece written
/// apart would be a `write` of its own).
fn to_stderr(bytes: &[u8]) {
    let _ = std::io::stderr().lock().write_all(bytes);
}

#[derive(Default)]
struct State {
    mid_line: bool,
    depth: HashMap<RunId, usize>,
    /// The time each node run's agent reported in `agent:complete`, until
    /// its node ends.
    reported: HashMap<NodeRunId, u64>,
}

impl Progress {
    /// Live mode when stderr is a terminal.
    pub fn new() -> Self {
        Self {
            live: std::io::stderr().is_terminal(),
            color: crate::stderr_color(),
            state: Mutex::new(State::default()),
            sink: Box::new(to_stderr),
        }
    }

    /// Ends a line left open by streamed text.
    pub fn finish(&self) {
        if let Ok(mut state) = self.state.lock()
            && state.mid_line
        {
            (self.sink)(b"\n");
            state.mid_line = false;
        }
    }

    /// The line shown for `event`, if any. Control characters from what an
    /// agent or tool wrote (a tool name, an error) are shown escaped
    /// (`\u{1b}`), so no escape sequence reaches the terminal or a log file.
    fn line(&self, event: &RuntimeEvent, state: &mut State) -> Option<String> {
        let line = self.describe(event, state)?;
        Some(
            line.chars()
                .fold(String::with_capacity(line.len()), |mut out, c| {
                    if c.is_control() {
                        out.extend(c.escape_default());
                    } else {
                        out.push(c);
                    }
                    out
                }),
        )
    }

    fn describe(&self, event: &RuntimeEvent, state: &mut State) -> Option<String> {
        let node = event.node_id.as_ref().map(|n| n.as_str()).unwrap_or("");
        let (ok, bad, arrow) = if self.live {
            ("✓", "✗", "▸")
        } else {
            ("completed", "failed", "started")
        };
        Some(match &event.kind {
            EventKind::NodeStarted { .. } if self.live => format!("{arrow} {node}"),
            EventKind::NodeStarted { .. } => format!("node {node} {arrow}"),
            EventKind::NodeCompleted { output } => {
                let ms = output["metadata"]["execution_time_ms"]
                    .as_u64()
                    .unwrap_or(0);
                let reported = event.node_run_id.and_then(|id| state.reported.remove(&id));
                let besides = reported_besides(ms, reported);
                if self.live {
                    format!("{ok} {node} ({ms} ms{besides})")
                } else {
                    format!("node {node} {ok} in {ms} ms{besides}")
                }
            }
            EventKind::NodeFailed {
                error,
                continued: true,
            } => format!("node {node} {bad} (continuing): {error}"),
            EventKind::NodeFailed { .. } => format!("node {node} {bad}"),
            EventKind::NodeSkipped { reason } => format!("node {node} skipped: {reason}"),
            EventKind::AgentToolUse { tool_name, .. } => format!("  tool {tool_name} {arrow}"),
            EventKind::AgentTool { tool_name, .. } => format!("  tool {tool_name}"),
            EventKind::ToolCompleted {
                tool_name,
                duration_ms,
                ..
            } => format!("  tool {tool_name} ({duration_ms} ms)"),
            EventKind::ToolFailed {
                tool_name, error, ..
            } => format!("  tool {tool_name} {bad}: {error}"),
            EventKind::RateLimited {
                provider,
                attempt,
                retry_after_ms,
            } => {
                let wait =
                    retry_after_ms.map_or_else(String::new, |ms| format!(", retrying in {ms} ms"));
                format!("  rate limited by {provider} (attempt {attempt}){wait}")
            }
            EventKind::AgentError { error_type, .. } => format!("  agent error {error_type}"),
            EventKind::Warning { message, .. } => format!("  warning: {message}"),
            EventKind::FlowResumed { .. } => format!("run {} resumes", event.run_id),
            EventKind::FlowCompleted { duration_ms, .. } => {
                format!("run completed in {duration_ms} ms")
            }
            EventKind::FlowFailed { duration_ms, .. } => {
                format!("run failed after {duration_ms} ms")
            }
            _ => return None,
        })
    }
}

/// What to say beside a node's own time (`ms`, as this run measured it)
/// of the time its agent reported (`agent:complete`'s `durationMs`), when
/// the two tell different stories: a `mock` agent reports the time its
/// recording took, a CLI the time of its own work. Nothing when they agree
/// within a second or a factor of two.
fn reported_besides(ms: u64, reported: Option<u64>) -> String {
    match reported {
        Some(reported)
            if reported.abs_diff(ms) > 1_000
                && (reported > ms.saturating_mul(2) || ms > reported.saturating_mul(2)) =>
        {
            format!("; the agent reported {reported} ms")
        }
        _ => String::new(),
    }
}

impl RunObserver for Progress {
    fn on_event(&self, event: &RuntimeEvent) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if let EventKind::FlowStarted { parent_run_id, .. } = &event.kind {
            let depth = parent_run_id
                .and_then(|p| state.depth.get(&p).copied())
                .map_or(0, |d| d + 1);
            state.depth.insert(event.run_id, depth);
        }
        if let (EventKind::AgentComplete { duration_ms, .. }, Some(run)) =
            (&event.kind, event.node_run_id)
        {
            state.reported.insert(run, *duration_ms);
        }
        let depth = state.depth.get(&event.run_id).copied().unwrap_or(0);
        // What one event prints is put together first and written once.
        let mut out = String::new();
        if self.live
            && let EventKind::AgentTextDelta { content, .. } | EventKind::AgentText { content, .. } =
                &event.kind
        {
            // Streamed text is dimmed so it reads apart from the step lines.
            let content = crate::inert(content);
            if self.color {
                out = format!("\x1b[2m{content}\x1b[0m");
            } else {
                out.push_str(&content);
            }
            state.mid_line = !content.ends_with('\n');
        } else if let Some(line) = self.line(event, &mut state) {
            if state.mid_line {
                out.push('\n');
                state.mid_line = false;
            }
            out.push_str(&"  ".repeat(depth));
            out.push_str(&crate::inert(&line));
            out.push('\n');
        }
        if !out.is_empty() {
            (self.sink)(out.as_bytes());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn plain() -> Progress {
        Progress {
            live: false,
            color: false,
            state: Mutex::new(State::default()),
            sink: Box::new(|_| {}),
        }
    }

    /// An event's line reaches stderr in one `write`, its indent and its
    /// newline included (the line of a child run is indented), and the
    /// newline that ends streamed text goes with the next line.
    #[test]
    fn each_event_prints_in_one_write() {
        let writes = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = std::sync::Arc::clone(&writes);
        let progress = Progress {
            live: true,
            sink: Box::new(move |b| seen.lock().unwrap().push(String::from_utf8_lossy(b).into())),
            ..plain()
        };
        let child = "33333333-3333-4333-8333-333333333333";
        let mut started = event(serde_json::json!({
            "type": "flow:started", "workflow": {"name": "w", "hash": "h"}, "input": null,
            "parentRunId": "22222222-2222-4222-8222-222222222222", "nodes": [], "edges": [],
        }));
        let parent = event(serde_json::json!({
            "type": "flow:started", "workflow": {"name": "w", "hash": "h"}, "input": null,
            "nodes": [], "edges": [],
        }));
        progress.on_event(&parent);
        started.run_id = child.parse().unwrap();
        progress.on_event(&started);
        let mut delta = event(serde_json::json!({"type": "agent:text:delta", "content": "hi"}));
        delta.run_id = started.run_id;
        progress.on_event(&delta);
        let mut node = event(serde_json::json!({
            "type": "node:started", "input": null, "attempt": 1,
        }));
        node.run_id = started.run_id;
        progress.on_event(&node);
        assert_eq!(*writes.lock().unwrap(), ["hi", "\n  ▸ writer\n"]);
    }

    fn event(kind: serde_json::Value) -> RuntimeEvent {
        let mut line = serde_json::json!({
            "id": "e1", "offset": 3, "timestamp": "2026-01-01T00:00:00.000Z",
            "runId": "22222222-2222-4222-8222-222222222222", "nodeId": "writer",
        });
        line.as_object_mut()
            .unwrap()
            .extend(kind.as_object().unwrap().clone());
        serde_json::from_value(line).unwrap()
    }

    /// A node's time is this run's; when its agent reported another (a
    /// `mock` agent replays its recording's), the line says both.
    #[test]
    fn a_node_line_says_the_time_its_agent_reported_when_it_differs() {
        let writes = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = std::sync::Arc::clone(&writes);
        let progress = Progress {
            sink: Box::new(move |b| seen.lock().unwrap().push(String::from_utf8_lossy(b).into())),
            ..plain()
        };
        let run = "44444444-4444-4444-8444-444444444444";
        for (reported, took) in [(9_412, 1), (950, 1)] {
            let mut complete = event(serde_json::json!({
                "type": "agent:complete", "result": "", "usage": {"inputTokens": 0, "outputTokens": 0},
                "durationMs": reported, "numTurns": 1,
            }));
            complete.node_run_id = Some(run.parse().unwrap());
            progress.on_event(&complete);
            let mut done = event(serde_json::json!({
                "type": "node:completed",
                "output": {"data": "x", "metadata": {"execution_time_ms": took}},
            }));
            done.node_run_id = Some(run.parse().unwrap());
            progress.on_event(&done);
        }
        let lines = writes.lock().unwrap().clone();
        assert_eq!(
            lines,
            [
                "node writer completed in 1 ms; the agent reported 9412 ms\n",
                "node writer completed in 1 ms\n",
            ]
        );
    }

    #[test]
    fn a_tool_call_gets_a_line_before_its_result() {
        let call = event(serde_json::json!({
            "type": "agent:tool:use", "toolUseId": "toolu_1", "toolName": "Read",
            "toolInput": {"path": "a.md"},
        }));
        assert_eq!(
            plain().line(&call, &mut State::default()).as_deref(),
            Some("  tool Read started")
        );
        let live = Progress {
            live: true,
            ..plain()
        };
        assert_eq!(
            live.line(&call, &mut State::default()).as_deref(),
            Some("  tool Read ▸")
        );
    }

    #[test]
    fn lines_carry_no_escapes_from_what_an_agent_wrote() {
        for kind in [
            serde_json::json!({"type": "agent:tool:use", "toolName": "Re\u{1b}[31mad\r", "toolInput": {}}),
            serde_json::json!({"type": "agent:tool", "toolName": "Re\u{1b}[2Jad", "toolInput": {}, "toolOutput": "x"}),
            serde_json::json!({"type": "warning", "message": "bad\u{1b}]0;title\u{7}\nnext"}),
        ] {
            let line = plain().line(&event(kind), &mut State::default()).unwrap();
            assert!(!line.chars().any(char::is_control), "{line:?}");
            assert!(line.contains("\\u{1b}"), "{line:?}");
        }
    }
}
