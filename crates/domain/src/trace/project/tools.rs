//! Tool calls: the spans of the tools awr runs and of those a CLI agent
//! reports.

use serde_json::Value;

use super::{Fold, content};
use crate::trace::{Attributes, SpanKind, span_id};
use crate::{RuntimeEvent, Timestamp};

impl Fold {
    pub(super) fn tool_started(
        &mut self,
        event: &RuntimeEvent,
        call: &str,
        tool: &str,
        by: &str,
        input: &Value,
    ) {
        let Some(node) = self.open_node(event) else {
            return;
        };
        let under = node.chat.unwrap_or(node.span);
        let parent = self.spans[under].span_id;
        let mut attributes = Attributes::for_span();
        attributes.text("gen_ai.operation.name", "execute_tool");
        attributes.text("gen_ai.tool.name", tool);
        attributes.text("gen_ai.tool.call.id", call);
        attributes.text("awr.tool.run_by", by);
        attributes.int("awr.offset", event.offset.get());
        if self.input.capture_content {
            attributes.text("gen_ai.tool.call.arguments", content::text_of(input));
        }
        let id = span_id(self.run, &event.offset.get().to_string());
        let span = self.open_span(
            id,
            Some(parent),
            format!("execute_tool {tool}"),
            SpanKind::Internal,
            event.timestamp,
            attributes,
        );
        let before = self
            .open_node(event)
            .and_then(|node| node.tools.insert(call.to_owned(), span));
        // A call id used again: the call before it ends here.
        if let Some(before) = before {
            self.close(before, event.timestamp);
        }
    }

    /// Tool call `call` ended with its output, or failed with an error.
    pub(super) fn tool_ended(
        &mut self,
        event: &RuntimeEvent,
        call: &str,
        outcome: Result<&Value, &String>,
    ) {
        let Some(span) = self.open_node(event).and_then(|n| n.tools.remove(call)) else {
            return;
        };
        match outcome {
            Ok(output) if self.input.capture_content => self.spans[span]
                .attributes
                .text("gen_ai.tool.call.result", content::text_of(output)),
            Ok(_) => {}
            Err(error) => self.fail(span, event.timestamp, "tool_failed", error),
        }
        self.close(span, event.timestamp);
    }

    /// A tool a CLI agent ran, reported when it returned: its span began
    /// at its `agent:tool:use`, or its duration before now.
    pub(super) fn agent_tool(
        &mut self,
        event: &RuntimeEvent,
        call: Option<&str>,
        tool: &str,
        (input, output): (&Value, &Value),
        duration_ms: Option<u64>,
        error: &Option<String>,
    ) {
        let known = call.is_some_and(|c| {
            self.open_node(event)
                .is_some_and(|n| n.tools.contains_key(c))
        });
        let call = match call {
            Some(call) if known => call.to_owned(),
            _ => {
                let call = call.map_or_else(|| format!("@{}", event.offset.get()), str::to_owned);
                self.tool_started(event, &call, tool, "agent", input);
                let found = self
                    .open_node(event)
                    .and_then(|n| Some((n.tools.get(&call).copied()?, n.chat.unwrap_or(n.span))));
                if let (Some(ms), Some((span, under))) = (duration_ms, found) {
                    // Never before what it is part of: a replayed call
                    // reports the durations of the recorded one.
                    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                    let start =
                        Timestamp::from_millis(event.timestamp.as_millis().saturating_sub(ms));
                    self.spans[span].start = start.max(self.spans[under].start);
                }
                call
            }
        };
        let outcome = match error {
            Some(error) => Err(error),
            None => Ok(output),
        };
        self.tool_ended(event, &call, outcome);
    }
}
