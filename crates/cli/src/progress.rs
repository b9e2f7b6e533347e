//! Live progress of `awr run` on stderr: one line per step, with the agent's
//! text streamed as it arrives when stderr is a terminal, plain lines otherwise.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use application::ports::RunObserver;
use domain::{EventKind, RuntimeEvent};

/// Prints events as they are recorded.
pub struct Progress {
    /// Stream agent text and use symbols (a person is watching) or not (a log file).
    live: bool,
    /// Whether streamed text left the cursor mid-line. A std mutex: held only
    /// while formatting one event, never across an await.
    mid_line: Mutex<bool>,
}

impl Progress {
    /// Live mode when stderr is a terminal.
    pub fn new() -> Self {
        Self {
            live: std::io::stderr().is_terminal(),
            mid_line: Mutex::new(false),
        }
    }

    /// Ends a line left open by streamed text.
    pub fn finish(&self) {
        if let Ok(mut mid) = self.mid_line.lock()
            && *mid
        {
            eprintln!();
            *mid = false;
        }
    }

    fn line(&self, event: &RuntimeEvent) -> Option<String> {
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
                if self.live {
                    format!("{ok} {node} ({ms} ms)")
                } else {
                    format!("node {node} {ok} in {ms} ms")
                }
            }
            EventKind::NodeFailed { error, continued } => {
                let tail = if *continued { " (continuing)" } else { "" };
                format!("node {node} {bad}: {error}{tail}")
            }
            EventKind::NodeSkipped { reason } => format!("node {node} skipped: {reason}"),
            EventKind::AgentTool { tool_name, .. } => format!("  tool {tool_name}"),
            EventKind::AgentError {
                error_type,
                message,
                ..
            } => format!("  agent error {error_type}: {message}"),
            EventKind::Warning { message, .. } => format!("  warning: {message}"),
            EventKind::FlowCompleted { duration_ms, .. } => {
                format!("run completed in {duration_ms} ms")
            }
            EventKind::FlowFailed { error, .. } => format!("run failed: {error}"),
            _ => return None,
        })
    }
}

impl RunObserver for Progress {
    fn on_event(&self, event: &RuntimeEvent) {
        let Ok(mut mid) = self.mid_line.lock() else {
            return;
        };
        let mut err = std::io::stderr().lock();
        if self.live
            && let EventKind::AgentTextDelta { content } | EventKind::AgentText { content } =
                &event.kind
        {
            // Streamed text is dimmed so it reads apart from the step lines.
            // Errors writing progress are not worth failing a run over.
            let _ = write!(err, "\x1b[2m{content}\x1b[0m");
            let _ = err.flush();
            *mid = !content.ends_with('\n');
            return;
        }
        if let Some(line) = self.line(event) {
            if *mid {
                let _ = writeln!(err);
                *mid = false;
            }
            let _ = writeln!(err, "{line}");
        }
    }
}
