//! The fold of a run's log into its spans: all at once ([`project`]), or
//! as the events come, each span once it has ended ([`LiveTrace`]).

mod calls;
mod content;
mod live;
mod tools;

use std::collections::HashMap;

use super::{
    AttrValue, Attributes, NodeFacts, Projection, Span, SpanEvent, SpanId, SpanKind, SpanLink,
    SpanStatus, TraceId, TraceInput, root_span_id, span_id,
};
use crate::{EventKind, NodeId, NodeRunId, RunId, RuntimeEvent, Timestamp};

pub use live::LiveTrace;

/// The spans of the run whose log is `events` (in offset order), placed
/// in its trace by `input`. Spans whose ending the log does not hold yet
/// (a run in flight, or one whose writer died) have no end.
pub fn project(events: &[RuntimeEvent], input: &TraceInput) -> Projection {
    let Some(first) = events.first() else {
        return Projection::default();
    };
    let mut fold = Fold::new(first.run_id, input.clone());
    for event in events {
        fold.event(event);
    }
    let dropped = fold.dropped;
    Projection {
        spans: (fold.spans.into_iter().enumerate())
            .filter(|(i, _)| !dropped.contains(i))
            .map(|(_, span)| span)
            .collect(),
        children: fold.children,
    }
}

/// A node run's span and what is open inside it.
struct OpenNode {
    /// Index of its span in `spans`.
    span: usize,
    /// Its provider call in progress.
    chat: Option<usize>,
    /// Its tool calls in progress, by call id.
    tools: HashMap<String, usize>,
    /// Why its latest provider call failed (`agent:error`): what a retry's
    /// earlier attempt failed of.
    failure: Option<(String, String)>,
    /// For the span that continues a node run after a resume, until the
    /// node run records anything: the span it continues. A node run that
    /// starts afresh then (a new attempt) links to that span instead.
    resumed_from: Option<SpanId>,
}

impl OpenNode {
    fn new(span: usize) -> Self {
        Self {
            span,
            chat: None,
            tools: HashMap::new(),
            failure: None,
            resumed_from: None,
        }
    }
}

struct Fold {
    run: RunId,
    trace: TraceId,
    input: TraceInput,
    spans: Vec<Span>,
    children: Vec<(RunId, SpanId)>,
    root: Option<usize>,
    /// Node runs in progress.
    open: HashMap<NodeRunId, OpenNode>,
    /// The span of each node run's latest attempt (or continuation), for
    /// the link of the next.
    last: HashMap<NodeRunId, SpanId>,
    /// When the event before the current one was recorded: where spans an
    /// interruption cut short end.
    previous: Option<Timestamp>,
    /// Spans left out of the projection: a continuation that a new attempt
    /// replaced before anything happened in it.
    dropped: std::collections::HashSet<usize>,
    /// Spans ended since [`LiveTrace::push`] last took them.
    ended: Vec<usize>,
}

impl Fold {
    fn new(run: RunId, input: TraceInput) -> Self {
        let trace = input
            .parent
            .map_or_else(|| TraceId::of_run(run), |(trace, _)| trace);
        Self {
            run,
            trace,
            input,
            spans: Vec::new(),
            children: Vec::new(),
            root: None,
            open: HashMap::new(),
            last: HashMap::new(),
            previous: None,
            dropped: std::collections::HashSet::new(),
            ended: Vec::new(),
        }
    }

    fn open_span(
        &mut self,
        id: SpanId,
        parent: Option<SpanId>,
        name: String,
        kind: SpanKind,
        start: Timestamp,
        attributes: Attributes,
    ) -> usize {
        self.spans.push(Span {
            trace_id: self.trace,
            span_id: id,
            parent,
            name,
            kind,
            start,
            end: None,
            attributes,
            status: SpanStatus::Unset,
            events: Vec::new(),
            links: Vec::new(),
        });
        self.spans.len() - 1
    }

    fn close(&mut self, index: usize, at: Timestamp) {
        if let Some(span) = self.spans.get_mut(index)
            && span.end.is_none()
        {
            span.end = Some(at.max(span.start));
            self.ended.push(index);
        }
    }

    /// Marks `span` failed with `message`, as an `exception` event too.
    fn fail(&mut self, span: usize, at: Timestamp, kind: &str, message: &str) {
        let Some(span) = self.spans.get_mut(span) else {
            return;
        };
        span.status = SpanStatus::Error(message.to_owned());
        span.attributes.text("error.type", kind);
        let mut attributes = Attributes::default();
        attributes.text("exception.type", kind);
        attributes.text("exception.message", message);
        span.events.push(SpanEvent {
            name: "exception".into(),
            time: at,
            attributes,
        });
    }

    fn facts(&self, node: Option<&NodeId>) -> NodeFacts {
        node.and_then(|n| self.input.nodes.get(n))
            .cloned()
            .unwrap_or_default()
    }

    fn event(&mut self, event: &RuntimeEvent) {
        let at = event.timestamp;
        if !matches!(event.kind, EventKind::NodeStarted { .. })
            && let Some(node) = event.node_run_id.and_then(|n| self.open.get_mut(&n))
        {
            node.resumed_from = None;
        }
        match &event.kind {
            EventKind::FlowStarted { workflow, .. } => self.started(event, &workflow.name),
            EventKind::FlowForked {
                parent_run_id,
                parent_offset,
                ..
            } => {
                if let Some(root) = self.root_span() {
                    let mut attributes = Attributes::default();
                    attributes.text("awr.link", "forked_from");
                    attributes.int("awr.offset", parent_offset.get());
                    root.links.push(SpanLink {
                        trace_id: TraceId::of_run(*parent_run_id),
                        span_id: root_span_id(*parent_run_id),
                        attributes,
                    });
                }
                self.interrupted(event);
            }
            EventKind::FlowResumed { by, .. } => {
                if let Some(root) = self.root_span() {
                    let mut attributes = Attributes::default();
                    attributes.int("awr.offset", event.offset.get());
                    if let Some(by) = by {
                        attributes.text("awr.resumed.by", by.to_string());
                    }
                    root.events.push(SpanEvent {
                        name: "awr.resumed".into(),
                        time: at,
                        attributes,
                    });
                }
                self.interrupted(event);
            }
            EventKind::FlowCompleted { .. } => self.ended(at, None),
            EventKind::FlowFailed { error, .. } => self.ended(at, Some(("flow_failed", error))),
            EventKind::FlowCancelled { reason } => {
                if let Some(root) = self.root_span() {
                    root.attributes.text("awr.status", "cancelled");
                    if let Some(reason) = reason {
                        root.attributes.text("awr.cancel.reason", reason.clone());
                    }
                }
                self.ended(at, None);
            }
            EventKind::NodeStarted { attempt, item, .. } => {
                self.node_started(event, attempt.unwrap_or(1), *item)
            }
            EventKind::NodeCompleted { .. } => self.node_ended(event, None),
            EventKind::NodeFailed { error, .. } => self.node_ended(event, Some(error)),
            EventKind::AgentStart {
                session_id,
                model,
                prompt,
                ..
            } => self.chat_started(event, session_id.to_string(), model.as_deref(), prompt),
            EventKind::AgentSession {
                session_id, model, ..
            } => {
                if let Some(chat) = self.chat_of(event) {
                    let span = &mut self.spans[chat];
                    span.attributes
                        .text("gen_ai.conversation.id", session_id.to_string());
                    if let Some(model) = model {
                        span.attributes.text("gen_ai.response.model", model.clone());
                    }
                }
            }
            EventKind::AgentComplete {
                result,
                usage,
                model_usage,
                total_cost_usd,
                num_turns,
                session_id,
                ..
            } => {
                if let Some(chat) = self.chat_of(event) {
                    let capture = self.input.capture_content;
                    let span = &mut self.spans[chat];
                    let a = &mut span.attributes;
                    if capture {
                        a.text("gen_ai.output.messages", content::output_messages(result));
                    }
                    a.int("gen_ai.usage.input_tokens", usage.input_tokens);
                    a.int("gen_ai.usage.output_tokens", usage.output_tokens);
                    if let Some(n) = usage.cache_read_input_tokens {
                        a.int("gen_ai.usage.cache_read.input_tokens", n);
                    }
                    if let Some(n) = usage.cache_creation_input_tokens {
                        a.int("gen_ai.usage.cache_creation.input_tokens", n);
                    }
                    // The model that answered, when the session did not
                    // say: the one that wrote the most.
                    let main = model_usage.as_ref().and_then(|m| {
                        m.iter()
                            .max_by_key(|(_, usage)| usage.output_tokens)
                            .map(|(model, _)| model.clone())
                    });
                    if let (Some(model), None) = (main, a.get("gen_ai.response.model")) {
                        a.text("gen_ai.response.model", model);
                    }
                    if let Some(session) = session_id {
                        a.text("gen_ai.conversation.id", session.to_string());
                    }
                    if let Some(cost) = total_cost_usd {
                        a.set("awr.cost_usd", AttrValue::Float(*cost));
                    }
                    a.int("awr.turns", u64::from(*num_turns));
                    self.close(chat, at);
                    if let Some(node) = self.open_node(event) {
                        node.chat = None;
                    }
                }
            }
            EventKind::AgentError {
                error_type,
                message,
                ..
            } => {
                if let Some(chat) = self.chat_of(event) {
                    self.fail(chat, at, error_type, message);
                    self.close(chat, at);
                }
                // Only a node run in progress: an error of none opens no span.
                if let Some(node) = event.node_run_id.and_then(|n| self.open.get_mut(&n)) {
                    node.chat = None;
                    node.failure = Some((error_type.clone(), message.clone()));
                }
            }
            EventKind::AgentToolUse {
                tool_use_id: Some(id),
                tool_name,
                tool_input,
                ..
            } => self.tool_started(event, id, tool_name, "agent", tool_input),
            EventKind::AgentTool {
                tool_use_id,
                tool_name,
                tool_input,
                tool_output,
                duration_ms,
                error,
                ..
            } => self.agent_tool(
                event,
                tool_use_id.as_deref(),
                tool_name,
                (tool_input, tool_output),
                *duration_ms,
                error,
            ),
            EventKind::ToolStarted {
                call_id,
                tool_name,
                tool_input,
                ..
            } => self.tool_started(event, call_id, tool_name, "awr", tool_input),
            EventKind::ToolCompleted {
                call_id,
                tool_output,
                ..
            } => self.tool_ended(event, call_id, Ok(tool_output)),
            EventKind::ToolFailed { call_id, error, .. } => {
                self.tool_ended(event, call_id, Err(error));
            }
            EventKind::SubflowStarted { child_run_id, .. } => {
                let under = event
                    .node_run_id
                    .and_then(|n| self.open.get(&n))
                    .map(|node| self.spans[node.span].span_id)
                    .or_else(|| self.root.map(|r| self.spans[r].span_id));
                if let Some(under) = under {
                    self.children.push((*child_run_id, under));
                }
                if let Some(node) = event.node_run_id.and_then(|n| self.open.get(&n)) {
                    let span = &mut self.spans[node.span];
                    span.attributes
                        .text("awr.child_run.id", child_run_id.to_string());
                }
            }
            _ => {}
        }
        self.previous = Some(at);
    }

    fn root_span(&mut self) -> Option<&mut Span> {
        self.root.and_then(|r| self.spans.get_mut(r))
    }

    fn started(&mut self, event: &RuntimeEvent, workflow: &str) {
        if self.root.is_some() {
            return;
        }
        let mut attributes = Attributes::for_span();
        attributes.text("gen_ai.operation.name", "invoke_workflow");
        attributes.text("gen_ai.workflow.name", workflow);
        attributes.text("awr.run.id", self.run.to_string());
        let parent = self.input.parent.map(|(_, span)| span);
        let root = self.open_span(
            root_span_id(self.run),
            parent,
            format!("invoke_workflow {workflow}"),
            SpanKind::Internal,
            event.timestamp,
            attributes,
        );
        self.root = Some(root);
    }

    /// The run ended: every span still open ends with it.
    fn ended(&mut self, at: Timestamp, failure: Option<(&str, &str)>) {
        self.close_open_nodes(at);
        if let Some(root) = self.root {
            if let Some((kind, message)) = failure {
                self.fail(root, at, kind, message);
            }
            self.close(root, at);
        }
    }

    fn close_open_nodes(&mut self, at: Timestamp) -> Vec<(NodeRunId, usize)> {
        let mut closed: Vec<(NodeRunId, usize)> = self
            .open
            .iter()
            .map(|(id, node)| (*id, node.span))
            .collect();
        // In the order they were opened, whatever the map's order.
        closed.sort_by_key(|(_, span)| *span);
        for (_, node) in std::mem::take(&mut self.open) {
            for span in node.chat.into_iter().chain(node.tools.into_values()) {
                self.close(span, at);
            }
            self.close(node.span, at);
        }
        closed
    }

    /// The writer stopped (a pause, a crash) and the run goes on from
    /// here: the node runs that were in flight end where the log stopped,
    /// and each goes on in a span of its own that links to the one before.
    fn interrupted(&mut self, event: &RuntimeEvent) {
        let stopped = self.previous.unwrap_or(event.timestamp);
        let cut = self.close_open_nodes(stopped);
        for (node_run, before) in cut {
            let mut span = self.spans[before].clone();
            span.attributes
                .set("awr.interrupted", AttrValue::Bool(true));
            self.spans[before].attributes = span.attributes.clone();
            let place = format!("{}/{node_run}", event.offset.get());
            let id = span_id(self.run, &place);
            let mut attributes = span.attributes;
            attributes.set("awr.interrupted", AttrValue::Bool(false));
            attributes.int("awr.offset", event.offset.get());
            let continued = self.open_span(
                id,
                span.parent,
                span.name,
                span.kind,
                event.timestamp,
                attributes,
            );
            self.link(continued, span.span_id, "resumed_from");
            self.last.insert(node_run, id);
            let mut node = OpenNode::new(continued);
            node.resumed_from = Some(span.span_id);
            self.open.insert(node_run, node);
        }
    }

    fn link(&mut self, span: usize, to: SpanId, why: &str) {
        let mut attributes = Attributes::default();
        attributes.text("awr.link", why);
        let trace_id = self.trace;
        if let Some(span) = self.spans.get_mut(span) {
            span.links.push(SpanLink {
                trace_id,
                span_id: to,
                attributes,
            });
        }
    }

    fn node_started(&mut self, event: &RuntimeEvent, attempt: u32, item: Option<u32>) {
        let (Some(node), Some(node_run)) = (&event.node_id, event.node_run_id) else {
            return;
        };
        // A new attempt of a node run still open here (no end between
        // attempts): the one before failed, and ended where the log last
        // said something (not with the wait before the retry).
        let mut resumed_from = None;
        if let Some(before) = self.open.remove(&node_run) {
            let at = self.previous.unwrap_or(event.timestamp);
            for span in before.chat.into_iter().chain(before.tools.into_values()) {
                self.close(span, at);
            }
            match before.resumed_from {
                // A continuation nothing happened in: this attempt is it.
                Some(interrupted) => {
                    self.dropped.insert(before.span);
                    resumed_from = Some(interrupted);
                    self.last.insert(node_run, interrupted);
                }
                None => {
                    let (kind, message) = before.failure.unwrap_or_else(|| {
                        ("retried".to_owned(), "the attempt was retried".to_owned())
                    });
                    self.fail(before.span, at, &kind, &message);
                    self.close(before.span, at);
                }
            }
        }
        let facts = self.facts(Some(node));
        let mut attributes = Attributes::for_span();
        let operation = match facts.kind.as_deref() {
            Some("agent") | None => "invoke_agent",
            Some(other) => other,
        };
        let name = format!("{operation} {node}");
        if operation == "invoke_agent" {
            attributes.text("gen_ai.operation.name", "invoke_agent");
            attributes.text("gen_ai.agent.name", node.to_string());
        }
        if let Some(provider) = facts.provider {
            attributes.text("gen_ai.provider.name", provider);
        }
        if let Some(kind) = facts.kind {
            attributes.text("awr.node.kind", kind);
        }
        attributes.text("awr.node.id", node.to_string());
        attributes.text("awr.node_run.id", node_run.to_string());
        attributes.int("awr.attempt", u64::from(attempt));
        attributes.int("awr.offset", event.offset.get());
        if let Some(item) = item {
            attributes.int("awr.item", u64::from(item));
        }
        let parent = self.root.map(|r| self.spans[r].span_id);
        let id = span_id(self.run, &event.offset.get().to_string());
        let span = self.open_span(
            id,
            parent,
            name,
            SpanKind::Internal,
            event.timestamp,
            attributes,
        );
        match resumed_from {
            Some(interrupted) => self.link(span, interrupted, "resumed_from"),
            None if attempt > 1 => {
                if let Some(previous) = self.last.get(&node_run).copied() {
                    self.link(span, previous, "retry_of");
                }
            }
            None => {}
        }
        self.last.insert(node_run, id);
        self.open.insert(node_run, OpenNode::new(span));
    }

    fn node_ended(&mut self, event: &RuntimeEvent, error: Option<&String>) {
        let Some(node) = event.node_run_id.and_then(|n| self.open.remove(&n)) else {
            return;
        };
        let at = event.timestamp;
        for span in node.chat.into_iter().chain(node.tools.into_values()) {
            self.close(span, at);
        }
        if let Some(error) = error {
            self.fail(node.span, at, "node_failed", error);
        }
        self.close(node.span, at);
    }

    /// The node run of `event`, opened on first sight when its start is
    /// not in this log; `None` for an event of no node run.
    fn open_node(&mut self, event: &RuntimeEvent) -> Option<&mut OpenNode> {
        let node_run = event.node_run_id?;
        let orphan = match self.open.contains_key(&node_run) {
            true => None,
            false => Some(self.orphan_span(event, node_run)),
        };
        Some(
            self.open
                .entry(node_run)
                .or_insert_with(|| OpenNode::new(orphan.unwrap_or_default())),
        )
    }

    /// The span of a node run whose `node:started` this log does not hold.
    fn orphan_span(&mut self, event: &RuntimeEvent, node_run: NodeRunId) -> usize {
        let parent = self.root.map(|r| self.spans[r].span_id);
        let node = event.node_id.clone();
        let mut attributes = Attributes::default();
        if let Some(node) = &node {
            attributes.text("awr.node.id", node.to_string());
        }
        attributes.text("awr.node_run.id", node_run.to_string());
        let name = node.map_or_else(|| "node".to_owned(), |n| format!("invoke_agent {n}"));
        let id = span_id(self.run, &format!("{}/{node_run}", event.offset.get()));
        self.open_span(
            id,
            parent,
            name,
            SpanKind::Internal,
            event.timestamp,
            attributes,
        )
    }
}
