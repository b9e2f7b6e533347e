//! The projection of logs into spans, on logs built event by event: each
//! kind of span, its parent, its ids, its links and how it ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::event::{Prompt, Usage, WorkflowRef};
use crate::ids::{NodeRunId, Offset, SessionId};
use crate::{EventKind, RuntimeEvent};

/// What the spans of these logs count for in the metrics.
mod metrics_of;

fn run_id(n: u128) -> RunId {
    RunId::new(Uuid::from_u128(0x4000_8000_0000_0000_0000 | n)).unwrap()
}

/// The first call of session `session` to `model`, sending `prompt`.
fn agent_start(session: &str, model: Option<&str>, prompt: &str) -> EventKind {
    EventKind::AgentStart {
        session_id: SessionId::new(session).unwrap(),
        model: model.map(str::to_owned),
        prompt: Prompt::Text(prompt.into()),
        provisional: false,
        inbox: Vec::new(),
        call_index: Some(0),
        instance: None,
        instance_call: None,
        restart: None,
    }
}

/// Builds a log, one event at a time, a second apart.
struct Log {
    run: RunId,
    events: Vec<RuntimeEvent>,
}

impl Log {
    fn new(run: RunId) -> Self {
        Self {
            run,
            events: Vec::new(),
        }
    }

    fn at(&mut self, node: Option<(&str, NodeRunId)>, kind: EventKind) -> &mut Self {
        let offset = self.events.len() as u64 + 1;
        self.events.push(RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(1_700_000_000_000 + offset as i64 * 1000),
            run_id: self.run,
            node_id: node.map(|(n, _)| NodeId::new(n).unwrap()),
            node_run_id: node.map(|(_, r)| r),
            kind,
            extra: Default::default(),
        });
        self
    }

    fn started(&mut self) -> &mut Self {
        self.at(
            None,
            EventKind::FlowStarted {
                workflow: WorkflowRef {
                    name: "research".into(),
                    hash: "sha256:00".into(),
                    extra: Default::default(),
                },
                input: json!("the secret prompt"),
                parent_run_id: None,
                source: None,
                definition: None,
                nodes: Vec::new(),
                edges: Vec::new(),
                started_by: None,
            },
        )
    }

    fn node(&mut self, node: &str, run: NodeRunId, attempt: u32) -> &mut Self {
        self.at(
            Some((node, run)),
            EventKind::NodeStarted {
                input: std::sync::Arc::new(json!({"data": "the secret prompt"})),
                attempt: Some(attempt),
                item: None,
                items: None,
            },
        )
    }

    fn call(&mut self, node: &str, run: NodeRunId, tokens: (u64, u64)) -> &mut Self {
        self.at(
            Some((node, run)),
            agent_start(&format!("s-{node}"), Some("m-1"), "the secret prompt"),
        )
        .at(
            Some((node, run)),
            EventKind::AgentComplete {
                result: "the secret answer".into(),
                structured_output: None,
                usage: Usage {
                    input_tokens: tokens.0,
                    output_tokens: tokens.1,
                    ..Default::default()
                },
                model_usage: None,
                total_cost_usd: Some(0.25),
                duration_ms: 1000,
                num_turns: 1,
                session_id: None,
                extra: Default::default(),
            },
        )
    }

    fn done(&mut self, node: &str, run: NodeRunId) -> &mut Self {
        self.at(
            Some((node, run)),
            EventKind::NodeCompleted {
                output: json!({"data": "the secret answer"}),
            },
        )
    }

    fn completed(&mut self) -> &mut Self {
        self.at(
            None,
            EventKind::FlowCompleted {
                output: Value::Null,
                duration_ms: 9,
            },
        )
    }

    /// A run whose node run `a` (`plan`) failed a call (`rate_limit`),
    /// was retried, and failed, failing the run.
    fn retried(run: RunId, a: NodeRunId) -> Self {
        let mut log = Log::new(run);
        log.started().node("plan", a, 1);
        log.at(Some(("plan", a)), agent_start("s", None, "p")).at(
            Some(("plan", a)),
            EventKind::AgentError {
                error_type: "rate_limit".into(),
                message: "slow down".into(),
                details: None,
            },
        );
        log.node("plan", a, 2)
            .at(
                Some(("plan", a)),
                EventKind::NodeFailed {
                    error: "gave up".into(),
                    continued: false,
                },
            )
            .at(
                None,
                EventKind::FlowFailed {
                    error: "plan failed".into(),
                    failed_node: None,
                    duration_ms: 1,
                },
            );
        log
    }

    /// The projection of the log, checked against the live one
    /// ([`live_agrees`]): every test's log is a case of it.
    fn project(&self) -> Projection {
        let projection = project(&self.events, &TraceInput::default());
        live_agrees(&self.events, &projection);
        projection
    }
}

/// The spans a [`LiveTrace`] gives, event by event, are the ended spans of
/// `projection`, each once and equal field for field, given as their end
/// is folded.
fn live_agrees(events: &[RuntimeEvent], projection: &Projection) {
    let Some(first) = events.first() else {
        return;
    };
    let mut live = LiveTrace::new(first.run_id, TraceInput::default());
    let mut given: Vec<Span> = Vec::new();
    for event in events {
        for span in live.push(event) {
            assert_eq!(span.end, Some(span.end.unwrap().max(span.start)));
            assert!(
                span.end.unwrap() <= event.timestamp.max(span.start),
                "{span:?}"
            );
            given.push(span);
        }
    }
    let mut ended: Vec<&Span> = projection
        .spans
        .iter()
        .filter(|s| s.end.is_some())
        .collect();
    ended.sort_by_key(|s| s.span_id);
    given.sort_by_key(|s| s.span_id);
    assert_eq!(given.iter().collect::<Vec<_>>(), ended);
    let open = projection.spans.iter().filter(|s| s.end.is_none()).count();
    assert_eq!(live.open(), open);
    assert_eq!(live.children(), projection.children.as_slice());
}

fn named<'a>(p: &'a Projection, name: &str) -> Vec<&'a Span> {
    p.spans.iter().filter(|s| s.name == name).collect()
}

fn int(span: &Span, key: &str) -> i64 {
    match span.attributes.get(key) {
        Some(AttrValue::Int(n)) => *n,
        other => panic!("{key} of {}: {other:?}", span.name),
    }
}

#[test]
fn a_run_is_a_root_span_over_its_node_runs_their_calls_and_tools() {
    let run = run_id(1);
    let (a, b) = (
        NodeRunId::new(Uuid::from_u128(11)),
        NodeRunId::new(Uuid::from_u128(12)),
    );
    let mut log = Log::new(run);
    log.started().node("plan", a, 1).call("plan", a, (100, 20));
    log.at(
        Some(("plan", a)),
        EventKind::ToolStarted {
            call_id: "c1".into(),
            tool_name: "read_file".into(),
            tool_input: json!({"path": "secret.txt"}),
            extra: Default::default(),
        },
    )
    .at(
        Some(("plan", a)),
        EventKind::ToolCompleted {
            call_id: "c1".into(),
            tool_name: "read_file".into(),
            tool_output: json!("the secret file"),
            duration_ms: 3,
        },
    );
    log.done("plan", a)
        .node("write", b, 1)
        .call("write", b, (7, 3));
    log.done("write", b).completed();
    let p = log.project();

    let root = named(&p, "invoke_workflow research")[0];
    assert_eq!(root.parent, None);
    assert_eq!(root.trace_id, TraceId::of_run(run));
    assert_eq!(
        root.trace_id.to_string(),
        run.as_uuid().simple().to_string()
    );
    assert_eq!(root.span_id, root_span_id(run));
    let plan = named(&p, "invoke_agent plan")[0];
    let write = named(&p, "invoke_agent write")[0];
    assert_eq!(
        (plan.parent, write.parent),
        (Some(root.span_id), Some(root.span_id))
    );
    let chats = named(&p, "chat m-1");
    assert_eq!(chats.len(), 2);
    assert_eq!(chats[0].parent, Some(plan.span_id));
    assert_eq!(chats[0].kind, SpanKind::Client);
    assert_eq!(int(chats[0], "gen_ai.usage.input_tokens"), 100);
    assert_eq!(int(chats[1], "gen_ai.usage.output_tokens"), 3);
    assert_eq!(
        chats[1].attributes.get("gen_ai.conversation.id"),
        Some(&AttrValue::Str("s-write".into()))
    );
    let tool = named(&p, "execute_tool read_file")[0];
    assert_eq!(
        tool.parent,
        Some(plan.span_id),
        "the call had ended: under its node run"
    );
    assert_eq!(p.spans.len(), 6);
    for span in &p.spans {
        let end = span.end.unwrap_or_else(|| panic!("{} ended", span.name));
        assert!(span.start <= end, "{}", span.name);
        assert_eq!(span.status, SpanStatus::Unset, "{}", span.name);
    }
    // Every id is distinct, and projecting again gives the same spans.
    let ids: std::collections::HashSet<SpanId> = p.spans.iter().map(|s| s.span_id).collect();
    assert_eq!(ids.len(), p.spans.len());
    assert_eq!(log.project(), p);
    // Content is not captured: no prompt, answer or tool data in any span.
    let shown = format!("{:?}", p.spans);
    assert!(!shown.contains("secret"), "{shown}");

    // Captured, it is in the conventions' attributes, and the spans are
    // otherwise the same.
    let input = TraceInput {
        capture_content: true,
        ..TraceInput::default()
    };
    let captured = project(&log.events, &input);
    let text = |span: &Span, key: &str| match span.attributes.get(key) {
        Some(AttrValue::Str(s)) => s.clone(),
        other => panic!("{key} of {}: {other:?}", span.name),
    };
    let chat = named(&captured, "chat m-1")[0];
    let sent: Value = serde_json::from_str(&text(chat, "gen_ai.input.messages")).unwrap();
    assert_eq!(
        sent,
        json!([{"role": "user", "parts": [{"type": "text", "content": "the secret prompt"}]}])
    );
    let answered: Value = serde_json::from_str(&text(chat, "gen_ai.output.messages")).unwrap();
    assert_eq!(answered[0]["parts"][0]["content"], "the secret answer");
    assert_eq!(answered[0]["role"], "assistant");
    let tool = named(&captured, "execute_tool read_file")[0];
    assert_eq!(
        text(tool, "gen_ai.tool.call.arguments"),
        r#"{"path":"secret.txt"}"#
    );
    assert_eq!(text(tool, "gen_ai.tool.call.result"), "the secret file");
    let ids = |p: &Projection| p.spans.iter().map(|s| s.span_id).collect::<Vec<_>>();
    assert_eq!(ids(&captured), ids(&p));
}

#[test]
fn a_retry_links_to_its_failed_attempt_and_failures_are_errors() {
    let run = run_id(2);
    let a = NodeRunId::new(Uuid::from_u128(21));
    let log = Log::retried(run, a);
    let p = log.project();
    let attempts = named(&p, "invoke_agent plan");
    assert_eq!(attempts.len(), 2);
    assert_eq!(int(attempts[1], "awr.attempt"), 2);
    assert_eq!(attempts[1].links.len(), 1);
    assert_eq!(attempts[1].links[0].span_id, attempts[0].span_id);
    assert_eq!(
        attempts[1].links[0].attributes.get("awr.link"),
        Some(&AttrValue::Str("retry_of".into()))
    );
    // The first attempt failed of its call's error, and ended with it,
    // not with the wait before the retry.
    let failed_at = log.events[3].timestamp;
    assert_eq!(attempts[0].end, Some(failed_at));
    assert_eq!(attempts[0].status, SpanStatus::Error("slow down".into()));
    let chat = named(&p, "chat")[0];
    assert_eq!(chat.status, SpanStatus::Error("slow down".into()));
    assert_eq!(
        chat.attributes.get("error.type"),
        Some(&AttrValue::Str("rate_limit".into()))
    );
    assert_eq!(chat.events[0].name, "exception");
    assert_eq!(attempts[1].status, SpanStatus::Error("gave up".into()));
    let root = &p.spans[0];
    assert_eq!(root.status, SpanStatus::Error("plan failed".into()));
}

#[test]
fn a_resume_ends_what_was_in_flight_where_the_log_stopped_and_links_its_continuation() {
    let run = run_id(3);
    let a = NodeRunId::new(Uuid::from_u128(31));
    let mut log = Log::new(run);
    log.started().node("plan", a, 1);
    let stopped = log.events.last().unwrap().timestamp;
    log.at(
        None,
        EventKind::FlowResumed {
            message: None,
            by: Some(crate::Caller::new("worker-2").unwrap()),
        },
    );
    log.call("plan", a, (5, 5)).done("plan", a).completed();
    let p = log.project();
    let spans = named(&p, "invoke_agent plan");
    assert_eq!(spans.len(), 2);
    let (before, after) = (spans[0], spans[1]);
    assert_eq!(before.end, Some(stopped));
    assert_eq!(
        before.attributes.get("awr.interrupted"),
        Some(&AttrValue::Bool(true))
    );
    assert_eq!(after.links[0].span_id, before.span_id);
    assert_eq!(
        after.links[0].attributes.get("awr.link"),
        Some(&AttrValue::Str("resumed_from".into()))
    );
    assert!(after.end.is_some());
    assert_eq!(named(&p, "chat m-1")[0].parent, Some(after.span_id));
    let resumed = &p.spans[0].events[0];
    assert_eq!(resumed.name, "awr.resumed");
    assert_eq!(
        resumed.attributes.get("awr.resumed.by"),
        Some(&AttrValue::Str("worker-2".into()))
    );
}

/// A node run that starts afresh after a resume (a new attempt) is one
/// span linked to the part cut short, not an empty continuation and a retry.
#[test]
fn a_fresh_attempt_after_a_resume_continues_the_interrupted_span() {
    let run = run_id(10);
    let a = NodeRunId::new(Uuid::from_u128(101));
    let mut log = Log::new(run);
    log.started().node("plan", a, 1);
    log.at(
        None,
        EventKind::FlowResumed {
            message: None,
            by: None,
        },
    );
    log.node("plan", a, 2)
        .call("plan", a, (1, 1))
        .done("plan", a)
        .completed();
    let p = log.project();
    let spans = named(&p, "invoke_agent plan");
    assert_eq!(spans.len(), 2, "{spans:#?}");
    assert_eq!(
        spans[0].attributes.get("awr.interrupted"),
        Some(&AttrValue::Bool(true))
    );
    assert_eq!(spans[1].links.len(), 1);
    assert_eq!(spans[1].links[0].span_id, spans[0].span_id);
    assert_eq!(
        spans[1].links[0].attributes.get("awr.link"),
        Some(&AttrValue::Str("resumed_from".into()))
    );
    assert_eq!(spans[1].status, SpanStatus::Unset);
    assert!(p.spans.iter().all(|s| s.end.is_some()));
}

#[test]
fn a_fork_links_to_its_parent_and_a_child_run_hangs_under_its_caller() {
    let (parent, child) = (run_id(4), run_id(5));
    let a = NodeRunId::new(Uuid::from_u128(41));
    let mut log = Log::new(parent);
    log.started().node("call", a, 1);
    log.at(
        Some(("call", a)),
        EventKind::SubflowStarted {
            child_run_id: child,
            workflow: "inner".into(),
        },
    );
    let p = project(
        &log.events,
        &TraceInput {
            parent: None,
            nodes: BTreeMap::from([(
                NodeId::new("call").unwrap(),
                NodeFacts {
                    kind: Some("call_workflow".into()),
                    provider: None,
                },
            )]),
            capture_content: false,
        },
    );
    let caller = named(&p, "call_workflow call")[0];
    assert_eq!(p.children, [(child, caller.span_id)]);
    assert_eq!(caller.end, None, "still in flight");

    let mut inner = Log::new(child);
    inner.started().completed();
    let q = project(
        &inner.events,
        &TraceInput {
            parent: Some((TraceId::of_run(parent), caller.span_id)),
            nodes: BTreeMap::new(),
            capture_content: false,
        },
    );
    assert_eq!(q.spans[0].trace_id, TraceId::of_run(parent));
    assert_eq!(q.spans[0].parent, Some(caller.span_id));

    let mut fork = Log::new(run_id(6));
    fork.started().at(
        None,
        EventKind::FlowForked {
            parent_run_id: parent,
            parent_offset: Offset::new(2).unwrap(),
            input: None,
            by: None,
        },
    );
    let f = fork.project();
    assert_eq!(f.spans[0].links[0].span_id, root_span_id(parent));
    assert_eq!(f.spans[0].links[0].trace_id, TraceId::of_run(parent));
}

#[test]
fn a_cli_agents_tools_span_from_their_use_or_their_duration() {
    let run = run_id(7);
    let a = NodeRunId::new(Uuid::from_u128(71));
    let mut log = Log::new(run);
    log.started().node("code", a, 1);
    log.at(
        Some(("code", a)),
        EventKind::AgentToolUse {
            tool_use_id: Some("u1".into()),
            tool_name: "Bash".into(),
            tool_input: json!({}),
            extra: Default::default(),
        },
    );
    let used = log.events.last().unwrap().timestamp;
    let tool = |id: Option<&str>, error: Option<&str>| EventKind::AgentTool {
        tool_use_id: id.map(str::to_owned),
        tool_name: "Bash".into(),
        tool_input: json!({}),
        tool_output: json!(""),
        duration_ms: Some(1500),
        error: error.map(str::to_owned),
        extra: Default::default(),
    };
    log.at(Some(("code", a)), tool(Some("u1"), None));
    log.at(Some(("code", a)), tool(None, Some("exit 1")));
    let reported = log.events.last().unwrap().timestamp;
    let long = |kind: EventKind| match kind {
        EventKind::AgentTool {
            tool_use_id,
            tool_name,
            tool_input,
            tool_output,
            error,
            extra,
            ..
        } => EventKind::AgentTool {
            tool_use_id,
            tool_name,
            tool_input,
            tool_output,
            duration_ms: Some(3_600_000),
            error,
            extra,
        },
        other => other,
    };
    log.at(Some(("code", a)), long(tool(None, None)));
    let p = log.project();
    let node = named(&p, "invoke_agent code")[0];
    let tools = named(&p, "execute_tool Bash");
    assert_eq!(tools.len(), 3);
    assert_eq!(
        tools[2].start, node.start,
        "never before what it is part of"
    );
    assert_eq!(tools[0].start, used);
    assert_eq!(
        tools[1].start,
        Timestamp::from_millis(reported.as_millis() - 1500)
    );
    assert_eq!(tools[1].status, SpanStatus::Error("exit 1".into()));
    assert!(tools.iter().all(|t| t.end.is_some()));
    // The run has not ended: its root and node run are open.
    assert_eq!(p.spans[0].end, None);
    assert_eq!(named(&p, "invoke_agent code")[0].end, None);
}

#[test]
fn span_ids_depend_on_the_run_and_the_place_only() {
    let (a, b) = (run_id(8), run_id(9));
    assert_eq!(span_id(a, "3"), span_id(a, "3"));
    assert_ne!(span_id(a, "3"), span_id(b, "3"));
    assert_ne!(span_id(a, "3"), span_id(a, "4"));
    assert_ne!(root_span_id(a), span_id(a, "1"));
    assert!(project(&[], &TraceInput::default()).spans.is_empty());
}

/// An agent error of no node run in progress opens no span.
#[test]
fn an_error_of_no_node_run_in_progress_opens_nothing() {
    let mut log = Log::new(run_id(11));
    log.started().at(
        Some(("gone", NodeRunId::new(Uuid::from_u128(111)))),
        EventKind::AgentError {
            error_type: "network_error".into(),
            message: "reset".into(),
            details: None,
        },
    );
    let p = log.project();
    assert_eq!(p.spans.len(), 1, "{:#?}", p.spans);
}
