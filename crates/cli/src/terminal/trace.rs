//! `awr trace show RUN`: the run's spans (`application::trace`) as a tree
//! with durations, tokens and cost, or as one OTLP/JSON request.

use std::collections::HashMap;

use anyhow::anyhow;
use application::ports::Clock as _;
use domain::trace::{AttrValue, Span, SpanId, SpanStatus};

use crate::forms::Since;
use crate::storage::Storage;
use crate::terminal::inspect::resolve_run;
use crate::{Failure, say, wiring};

/// Prints the trace of `run`.
pub async fn show(storage: &Storage, run: &str, json: bool) -> Result<(), Failure> {
    let id = resolve_run(storage, run).await?;
    let store = wiring::read_store(storage).await?;
    let parse = |definition: &domain::definition::Definition| wiring::load_kept(definition).ok();
    let capture = wiring::captures_content();
    let spans = application::trace::trace(store.as_ref(), id, &parse, capture)
        .await
        .map_err(|e| Failure::Input(anyhow!("run {id}: {e}")))?;
    if json {
        return say(&wiring::otlp_json(&spans)?);
    }
    for line in tree(&spans) {
        say(&line)?;
    }
    Ok(())
}

/// Where `awr trace export` sends: `--endpoint` and `--protocol`.
pub struct To<'a> {
    pub endpoint: Option<&'a str>,
    pub protocol: Option<&'a str>,
}

/// Sends the spans of each of `runs` that have ended (since `since`, when
/// given), one request a run, saying how many went; with no run named,
/// those of every run at the root of its trace that was active since
/// `since`. A collector that does not take them is exit 1.
pub async fn export(
    storage: &Storage,
    runs: &[String],
    since: Option<Since>,
    to: To<'_>,
) -> Result<(), Failure> {
    let exporter = wiring::otlp_exporter(to.endpoint, to.protocol)?;
    let store = wiring::read_store(storage).await?;
    let parse = |definition: &domain::definition::Definition| wiring::load_kept(definition).ok();
    let (clock, _) = wiring::clock_and_ids();
    let since = since.map(|s| s.resolve(clock.now()));
    let mut ids = Vec::with_capacity(runs.len());
    for run in runs {
        ids.push(resolve_run(storage, run).await?);
    }
    if let (true, Some(since)) = (runs.is_empty(), since) {
        let all = store
            .query_runs(&application::ports::RunQuery::default())
            .await
            .map_err(|e| Failure::Input(anyhow!(e)))?;
        // A called run's spans go with its root's.
        ids.extend(
            all.iter()
                .filter(|run| run.parent.is_none())
                .filter(|run| {
                    // One still running may have ended spans since, whatever
                    // its record's last change of status says.
                    run.updated_at.or(run.started_at) >= Some(since)
                        || run.status == Some(domain::RunStatus::Running)
                })
                .map(|run| run.run_id),
        );
        if ids.is_empty() {
            say("no run was active since then")?;
        }
    }
    let capture = wiring::captures_content();
    for id in ids {
        let mut spans = application::trace::trace(store.as_ref(), id, &parse, capture)
            .await
            .map_err(|e| Failure::Input(anyhow!("run {id}: {e}")))?;
        if let Some(since) = since {
            spans.retain(|span| span.end.is_some_and(|end| end >= since));
        }
        let sent = exporter
            .send(&spans)
            .await
            .map_err(|e| Failure::Run(anyhow!("run {id}: {e}")))?;
        say(&format!("run {id}: {sent} spans exported"))?;
    }
    Ok(())
}

/// Tokens and cost of a span and everything under it.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    input: i64,
    output: i64,
    cost: f64,
    calls: usize,
}

/// The lines of the tree: each span under its parent, in the order the
/// log opened them.
fn tree(spans: &[Span]) -> Vec<String> {
    let known: HashMap<SpanId, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id, i))
        .collect();
    let mut children: HashMap<Option<SpanId>, Vec<usize>> = HashMap::new();
    for (i, span) in spans.iter().enumerate() {
        let parent = span.parent.filter(|p| known.contains_key(p));
        children.entry(parent).or_default().push(i);
    }
    let mut totals = vec![Totals::default(); spans.len()];
    // Children come after their parents: summed from the last up.
    for i in (0..spans.len()).rev() {
        let own = own_totals(&spans[i]);
        let mut sum = own;
        for &child in children
            .get(&Some(spans[i].span_id))
            .map_or(&[][..], Vec::as_slice)
        {
            sum.input += totals[child].input;
            sum.output += totals[child].output;
            sum.cost += totals[child].cost;
            sum.calls += totals[child].calls;
        }
        totals[i] = sum;
    }
    let mut lines = Vec::new();
    let mut stack: Vec<(usize, String, String)> = children
        .get(&None)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .rev()
        .map(|&i| (i, String::new(), String::new()))
        .collect();
    while let Some((i, lead, indent)) = stack.pop() {
        lines.push(format!("{lead}{}", describe(&spans[i], totals[i])));
        let kids = children
            .get(&Some(spans[i].span_id))
            .map_or(&[][..], Vec::as_slice);
        for (n, &child) in kids.iter().enumerate().rev() {
            let last = n + 1 == kids.len();
            let (branch, more) = if last {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            stack.push((
                child,
                format!("{indent}{branch}"),
                format!("{indent}{more}"),
            ));
        }
    }
    lines
}

fn own_totals(span: &Span) -> Totals {
    let int = |key: &str| match span.attributes.get(key) {
        Some(AttrValue::Int(n)) => *n,
        _ => 0,
    };
    let is_call = span.name.starts_with("chat");
    Totals {
        input: int("gen_ai.usage.input_tokens"),
        output: int("gen_ai.usage.output_tokens"),
        cost: match span.attributes.get("awr.cost_usd") {
            Some(AttrValue::Float(x)) => *x,
            _ => 0.0,
        },
        calls: usize::from(is_call),
    }
}

/// One span's line: its name, how long it took, what it spent, how it ended.
fn describe(span: &Span, totals: Totals) -> String {
    let mut line = span.name.clone();
    match span.end {
        Some(end) => {
            let ms = (end.as_millis() - span.start.as_millis()).max(0);
            line.push_str(&format!("  {}", duration(ms)));
        }
        None => line.push_str("  running"),
    }
    if totals.calls > 0 || totals.input > 0 || totals.output > 0 {
        line.push_str(&format!("  in {} out {}", totals.input, totals.output));
    }
    if totals.cost > 0.0 {
        line.push_str(&format!("  ${:.4}", totals.cost));
    }
    for link in &span.links {
        if let Some(AttrValue::Str(why)) = link.attributes.get("awr.link") {
            line.push_str(&format!("  [{}]", why.replace('_', " ")));
        }
    }
    if span.attributes.get("awr.interrupted") == Some(&AttrValue::Bool(true)) {
        line.push_str("  [interrupted]");
    }
    if let SpanStatus::Error(message) = &span.status {
        let first = message.lines().next().unwrap_or_default();
        line.push_str(&format!("  ✗ {first}"));
    }
    line
}

/// `850ms`, `2.40s`, `3m05s`.
fn duration(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.2}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::Timestamp;
    use domain::trace::{Attributes, SpanKind, TraceId, root_span_id, span_id};

    use super::*;

    fn span(name: &str, id: SpanId, parent: Option<SpanId>, ms: (i64, Option<i64>)) -> Span {
        let run = "00000000-0000-4000-8000-000000000001".parse().unwrap();
        Span {
            trace_id: TraceId::of_run(run),
            span_id: id,
            parent,
            name: name.into(),
            kind: SpanKind::Internal,
            start: Timestamp::from_millis(ms.0),
            end: ms.1.map(Timestamp::from_millis),
            attributes: Attributes::default(),
            status: SpanStatus::Unset,
            events: Vec::new(),
            links: Vec::new(),
        }
    }

    #[test]
    fn the_tree_nests_spans_and_sums_what_their_calls_spent() {
        let run = "00000000-0000-4000-8000-000000000001".parse().unwrap();
        let root = root_span_id(run);
        let (a, b, c) = (span_id(run, "2"), span_id(run, "3"), span_id(run, "9"));
        let mut chat = span("chat m", b, Some(a), (1_100, Some(2_000)));
        chat.attributes.int("gen_ai.usage.input_tokens", 10);
        chat.attributes.int("gen_ai.usage.output_tokens", 4);
        chat.attributes.set("awr.cost_usd", AttrValue::Float(0.5));
        let mut failed = span("invoke_agent w", c, Some(root), (2_000, None));
        failed.status = SpanStatus::Error("no\nmore".into());
        let spans = [
            span("invoke_workflow r", root, None, (1_000, Some(200_000))),
            span("invoke_agent p", a, Some(root), (1_000, Some(2_050))),
            chat,
            span(
                "execute_tool t",
                span_id(run, "4"),
                Some(b),
                (1_200, Some(1_212)),
            ),
            failed,
        ];
        assert_eq!(
            tree(&spans),
            [
                "invoke_workflow r  3m19s  in 10 out 4  $0.5000",
                "├─ invoke_agent p  1.05s  in 10 out 4  $0.5000",
                "│  └─ chat m  900ms  in 10 out 4  $0.5000",
                "│     └─ execute_tool t  12ms",
                "└─ invoke_agent w  running  ✗ no",
            ]
        );
    }
}
