//! What the MCP server reads: waiting for a run (bounded), its events and
//! its transcript a page at a time, and the resources (each run's snapshot
//! and transcript).

use std::time::Duration;

use application::inspect::{ShownStatus, run_view};
use application::ports::EventFilter;
use application::transcript::{Line, transcript_lines};
use domain::event::KNOWN_TYPES;
use domain::{Caller, EventKind, RunId, RunStatus};
use futures::StreamExt;
use rmcp::model::{ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::super::runs::show_run;
use super::super::stream::{resolve, store_error};
use super::super::{ApiError, App};
use super::Refusal;

/// The longest a `wait_run` waits: an HTTP answer must begin within the
/// server's request timeout (60 s).
const MAX_WAIT: u32 = 50;

/// Events or lines per page unless the caller says, and at most.
const DEFAULT_PAGE: u32 = 100;
const MAX_PAGE: u32 = 1000;

/// The most a page of events or transcript lines holds, in bytes of JSON
/// (past its first item), and the largest transcript read as a resource:
/// an answer is held whole in memory, maybe three times over.
const PAGE_BYTES: usize = 4 << 20;

/// Runs listed as resources, newest first.
const LISTED_RUNS: usize = 50;

/// `wait_run`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct WaitArgs {
    /// The run's id, or a unique prefix of it.
    pub run_id: String,
    /// How long to wait at most, in seconds: 0 to 50 (default 30). The
    /// answer then says the run's status whatever it is; call again to
    /// wait longer.
    #[schemars(range(max = 50))]
    pub timeout_seconds: Option<u32>,
}

/// `events_since`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct EventsArgs {
    /// The run's id, or a unique prefix of it.
    pub run_id: String,
    /// The events after this offset (default 0: from the first); the
    /// previous answer's `nextOffset` pages on.
    pub offset: Option<u64>,
    /// At most this many events, 1 to 1000 (default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// Only events of these types (`node:completed`, `tool:completed`, ...).
    pub types: Option<Vec<String>>,
}

/// `transcript_since`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct TranscriptArgs {
    /// The run's id, or a unique prefix of it.
    pub run_id: String,
    /// The lines after this `seq` (default 0: from the first); the previous
    /// answer's `nextSeq` pages on.
    pub seq: Option<u64>,
    /// At most this many lines, 1 to 1000 (default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
}

/// Whether a run in `status` will change without being asked to: one that
/// runs, or waits to be started.
fn unsettled(status: ShownStatus) -> bool {
    matches!(
        status,
        ShownStatus::Recorded(RunStatus::Running | RunStatus::Pending) | ShownStatus::Queued
    )
}

/// `wait_run`: the run's status once it ends or pauses, or once the
/// timeout passes, whichever comes first (a run whose writer died shows
/// `interrupted` at once; one that dies while waited for, at the timeout).
pub(super) async fn wait(
    app: &App,
    by: &Caller,
    args: WaitArgs,
    cancelled: &CancellationToken,
) -> Result<Value, Refusal> {
    let within = args.timeout_seconds.unwrap_or(30);
    if within > MAX_WAIT {
        return Err(Refusal::Input(format!(
            "wait_run: timeoutSeconds: {within} is more than {MAX_WAIT}; call again to wait longer"
        )));
    }
    // A wait follows the run's log as a stream does, under the same caps.
    let _slot = app.streams().take(by)?;
    let run_id = resolve(app, &args.run_id).await?;
    let store = app.store();
    // Followed from before the status is read: nothing it does after is missed.
    let from = store.last_offset(run_id).await.map_err(store_error)?;
    let status = shown(app, run_id).await?;
    let mut timed_out = false;
    if unsettled(status) && within > 0 {
        let mut events = store.follow(run_id, from).await.map_err(store_error)?;
        let settled = async {
            while let Some(event) = events.next().await {
                if let Ok(event) = event
                    && (event.kind.is_terminal()
                        || matches!(event.kind, EventKind::FlowPaused { .. }))
                {
                    return;
                }
            }
        };
        let mut stopping = app.stopping();
        timed_out = tokio::select! {
            () = settled => false,
            _ = tokio::time::sleep(Duration::from_secs(u64::from(within))) => true,
            () = cancelled.cancelled() => true,
            _ = stopping.wait_for(|stop| *stop) => true,
        };
    }
    let status = shown(app, run_id).await?;
    let last = store.last_offset(run_id).await.map_err(store_error)?;
    let done = matches!(status, ShownStatus::Recorded(s) if s.is_terminal());
    let mut answer = json!({
        "runId": run_id,
        "status": status.as_str(),
        "done": done,
        "timedOut": timed_out && unsettled(status),
        "lastOffset": last,
    });
    let ended = match done {
        true => store
            .read(run_id, last.saturating_sub(1), 1)
            .await
            .map_err(store_error)?,
        false => Vec::new(),
    };
    if let Some(end) = ended.first()
        && let Ok(json) = end.to_json()
        && let Ok(Value::Object(end)) = serde_json::from_str(&json)
    {
        for key in ["output", "error", "reason"] {
            if let Some(value) = end.get(key) {
                answer[key] = value.clone();
            }
        }
    }
    Ok(answer)
}

/// The status of `run_id` as shown; `pending` for a run created that has
/// recorded nothing yet (`start_run` answers before its first event).
async fn shown(app: &App, run_id: RunId) -> Result<ShownStatus, Refusal> {
    match run_view(app.store().as_ref(), run_id).await {
        Ok(view) => Ok(view.status),
        Err(application::ports::StoreError::NotFound(_)) => {
            Ok(ShownStatus::Recorded(RunStatus::Pending))
        }
        Err(e) => Err(store_error(e).into()),
    }
}

/// `events_since`: a page of the log after `offset`, of some types only.
pub(super) async fn events(app: &App, args: EventsArgs) -> Result<Value, Refusal> {
    let limit = page(args.limit, "events_since")?;
    let types = args.types.unwrap_or_default();
    if let Some(unknown) = types.iter().find(|t| !KNOWN_TYPES.contains(&t.as_str())) {
        return Err(Refusal::Input(format!(
            "events_since: types: `{unknown}` is not an event type (known: {})",
            KNOWN_TYPES.join(", ")
        )));
    }
    let run_id = resolve(app, &args.run_id).await?;
    let store = app.store();
    let last = store.last_offset(run_id).await.map_err(store_error)?;
    let after = args.offset.unwrap_or(0);
    let filter = EventFilter {
        types,
        ..EventFilter::default()
    };
    let batch = store
        .read_matching(run_id, after, &filter, limit as usize)
        .await
        .map_err(store_error)?;
    let mut events = Vec::with_capacity(batch.len());
    let mut bytes = 0;
    let mut next = after;
    for event in &batch {
        let json = event
            .to_json()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        bytes += json.len();
        // A page is cut at its byte budget, after its first event.
        if bytes > PAGE_BYTES && !events.is_empty() {
            break;
        }
        events.push(
            serde_json::from_str::<Value>(&json).map_err(|e| ApiError::internal(e.to_string()))?,
        );
        next = event.offset.get();
    }
    // A store may answer a short page, and only an empty one says nothing
    // matches after it: with a filter, `more` may be true once for nothing.
    let more = !events.is_empty() && next < last;
    Ok(json!({"events": events, "nextOffset": next, "lastOffset": last, "more": more}))
}

/// `transcript_since`: a page of the transcript after line `seq`.
pub(super) async fn transcript(app: &App, args: TranscriptArgs) -> Result<Value, Refusal> {
    let limit = page(args.limit, "transcript_since")? as usize;
    let after = args.seq.unwrap_or(0);
    let run_id = resolve(app, &args.run_id).await?;
    let (lines, more) = transcript_page(app, run_id, after, limit, PAGE_BYTES).await?;
    let next = lines
        .last()
        .and_then(|l| l["seq"].as_u64())
        .unwrap_or(after);
    Ok(json!({"lines": lines, "nextSeq": next, "more": more}))
}

/// Up to `limit` lines of the transcript of `run_id` after `after`, at
/// most `budget` bytes of JSON of them after the first, and whether more
/// follow.
async fn transcript_page(
    app: &App,
    run_id: RunId,
    after: u64,
    limit: usize,
    budget: usize,
) -> Result<(Vec<Value>, bool), Refusal> {
    let reader = crate::wiring::transcript_reader(app.storage());
    let Some(lines) = transcript_lines(reader, run_id, None)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    else {
        return Err(ApiError::not_found(format!("run {run_id} has no transcript")).into());
    };
    let mut lines = std::pin::pin!(lines);
    let mut page = Vec::new();
    let mut bytes = 0;
    while let Some(line) = lines.next().await {
        match line {
            Ok(Line::Event(event)) if event.seq > after => {
                let value =
                    serde_json::to_value(&event).map_err(|e| ApiError::internal(e.to_string()))?;
                bytes += value.to_string().len();
                if page.len() == limit || (bytes > budget && !page.is_empty()) {
                    return Ok((page, true));
                }
                page.push(value);
            }
            Ok(Line::Event(_)) => {}
            Ok(Line::Bad(problem)) => {
                tracing::warn!(run = %run_id, %problem, "skipping a bad line of the transcript");
            }
            Err(e) => return Err(ApiError::internal(e.to_string()).into()),
        }
    }
    Ok((page, false))
}

fn page(limit: Option<u32>, tool: &str) -> Result<u32, Refusal> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        n => Err(Refusal::Input(format!(
            "{tool}: limit: {n} is not from 1 to {MAX_PAGE}"
        ))),
    }
}

/// The resources of a run: its snapshot and its transcript.
pub(super) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new("awr://runs/{runId}/snapshot", "run snapshot")
            .with_description("A run's state, as `awr show RUN --json` prints it.")
            .with_mime_type("application/json"),
        ResourceTemplate::new("awr://runs/{runId}/transcript", "run transcript")
            .with_description("A run's exchange transcript, one JSON line each.")
            .with_mime_type("application/x-ndjson"),
    ]
}

/// The snapshot and transcript of the newest runs.
pub(super) async fn resources(app: &App) -> Result<rmcp::model::ListResourcesResult, String> {
    let filter = application::query::RunFilter {
        limit: Some(LISTED_RUNS),
        ..Default::default()
    };
    let runs = application::query::find_runs(app.store().as_ref(), &filter)
        .await
        .map_err(|e| e.to_string())?;
    let resources = runs
        .iter()
        .flat_map(|run| {
            let id = run.run_id();
            let name = run
                .summary
                .workflow
                .clone()
                .unwrap_or_else(|| "run".to_owned());
            [
                Resource::new(
                    format!("awr://runs/{id}/snapshot"),
                    format!("{name} {id} snapshot"),
                )
                .with_mime_type("application/json"),
                Resource::new(
                    format!("awr://runs/{id}/transcript"),
                    format!("{name} {id} transcript"),
                )
                .with_mime_type("application/x-ndjson"),
            ]
        })
        .collect();
    Ok(rmcp::model::ListResourcesResult::with_all_items(resources))
}

/// The resource at `uri`.
pub(super) async fn read(app: &App, uri: &str) -> Result<ReadResourceResult, Refusal> {
    let bad = || {
        Refusal::Input(format!(
            "`{uri}` is not a resource of awr (awr://runs/RUN/snapshot or awr://runs/RUN/transcript)"
        ))
    };
    let rest = uri.strip_prefix("awr://runs/").ok_or_else(bad)?;
    let (id, what) = rest.split_once('/').ok_or_else(bad)?;
    let text = match what {
        "snapshot" => show_run(app, id).await?,
        "transcript" => {
            let run_id = resolve(app, id).await?;
            let (lines, more) = transcript_page(app, run_id, 0, usize::MAX, PAGE_BYTES).await?;
            if more {
                return Err(Refusal::Input(format!(
                    "the transcript of run {run_id} is larger than {PAGE_BYTES} bytes: read it a page at a time with transcript_since"
                )));
            }
            lines.iter().map(|l| format!("{l}\n")).collect()
        }
        _ => return Err(bad()),
    };
    let mime = match what {
        "snapshot" => "application/json",
        _ => "application/x-ndjson",
    };
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri.to_owned()).with_mime_type(mime),
    ]))
}

/// `list_approvals`: the open questions of run `run` (an id or a prefix),
/// or of every run that may have one.
pub(super) async fn approvals(app: &App, run: Option<String>) -> Result<Value, Refusal> {
    let store = app.store();
    let open = match run {
        Some(run) => {
            let run_id = resolve(app, &run).await?;
            let state = application::inspect::current_snapshot(store.as_ref(), run_id)
                .await
                .map_err(store_error)?;
            application::query::questions_of(&state)
        }
        None => {
            let (open, _unreadable) = application::query::open_questions(store.as_ref())
                .await
                .map_err(store_error)?;
            open
        }
    };
    Ok(json!({ "approvals": open }))
}
