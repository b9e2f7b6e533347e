//! `awr runs` and its filters (status, workflow, start, limit), and the
//! filters of `awr events` (type, node, time). The store selects
//! (`application::query`, an index where the store has one); this module
//! parses the flags, refusing a bad value by name (exit 2), and prints.

use anyhow::anyhow;
use application::inspect::ShownStatus;
use application::ports::{Clock, EventFilter};
use application::query::{Listed, RunFilter, STATUS_NAMES, find_runs, parse_status};
use domain::event::KNOWN_TYPES;
use domain::{NodeId, Timestamp};
use serde_json::{Map, Value, json};

use crate::forms::Since;
use crate::storage::Storage;
use crate::{Failure, say, wiring};

/// The flags of `awr runs`.
#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    /// Only runs with this status: pending, queued, running, paused,
    /// waiting, completed, failed, cancelled or interrupted (several:
    /// comma-separated).
    #[arg(long, value_name = "STATUS[,STATUS]", value_delimiter = ',', value_parser = status_arg)]
    status: Vec<ShownStatus>,
    /// Only runs of the workflow with this name.
    #[arg(long, value_name = "NAME")]
    workflow: Option<String>,
    /// Only runs started at or after TIME: an RFC 3339 time, or a duration
    /// (`90m`, `2h`, `7d`) meaning "started within".
    #[arg(long, value_name = "TIME", value_parser = Since::parse)]
    since: Option<Since>,
    /// At most N runs, the newest.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// One JSON object per line and run.
    #[arg(long)]
    json: bool,
}

/// The filter flags of `awr events`.
#[derive(Debug, Default, clap::Args)]
pub struct EventFilterArgs {
    /// Only events of these types (`node:failed`, `agent:text`, ...;
    /// several: comma-separated).
    #[arg(long = "type", value_name = "KIND[,KIND]", value_delimiter = ',', value_parser = kind_arg)]
    types: Vec<String>,
    /// Only events of this node.
    #[arg(long, value_name = "ID", value_parser = node_arg)]
    node: Option<NodeId>,
    /// Only events at or after TIME: an RFC 3339 time, or a duration ago
    /// (`10m`, `2h`).
    #[arg(long, value_name = "TIME", value_parser = Since::parse)]
    since: Option<Since>,
}

impl EventFilterArgs {
    /// The filter, `--since` taken from `now`.
    pub fn filter(&self, now: Timestamp) -> EventFilter {
        EventFilter {
            types: self.types.clone(),
            node: self.node.clone(),
            since: self.since.map(|s| s.resolve(now)),
        }
    }
}

fn status_arg(text: &str) -> Result<ShownStatus, String> {
    parse_status(text).ok_or_else(|| {
        format!(
            "`{text}` is not a status (known: {})",
            STATUS_NAMES.join(", ")
        )
    })
}

fn kind_arg(text: &str) -> Result<String, String> {
    if KNOWN_TYPES.contains(&text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not an event kind (known: {})",
            KNOWN_TYPES.join(", ")
        ))
    }
}

fn node_arg(text: &str) -> Result<NodeId, String> {
    NodeId::new(text).map_err(|e| format!("`{text}` is not a node id: {e}"))
}

/// `awr runs [--status S] [--workflow NAME] [--since T] [--limit N] [--json]`:
/// newest first. A run whose records are corrupt is listed with the status
/// `corrupt`, its problem goes to stderr, and the command exits 2 after
/// listing every run.
pub async fn runs(storage: &Storage, args: &RunsArgs) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let (clock, _) = wiring::clock_and_ids();
    let filter = RunFilter {
        statuses: args.status.clone(),
        workflow: args.workflow.clone(),
        started_since: args.since.map(|s| s.resolve(clock.now())),
        after: None,
        limit: args.limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    };
    let listed = find_runs(store.as_ref(), &filter)
        .await
        .map_err(|e| Failure::Input(anyhow!(e)))?;
    if !args.json {
        say(&format!(
            "{:<36}  {:<24}  {:<11}  {:<24}  DURATION",
            "RUN", "WORKFLOW", "STATUS", "STARTED"
        ))?;
    }
    let mut corrupt = Vec::new();
    for run in &listed {
        if let Err(e) = &run.view {
            corrupt.push(format!("run {}: {e}", run.run_id()));
        }
        if args.json {
            let line =
                serde_json::to_string(&run_json(run)).map_err(|e| Failure::Run(anyhow!(e)))?;
            say(&line)?;
        } else {
            say(&run_line(run))?;
        }
    }
    if corrupt.is_empty() {
        return Ok(());
    }
    for problem in &corrupt {
        crate::note(&format!("awr: {problem}"));
    }
    Err(Failure::Input(anyhow!(
        "{} of the runs listed cannot be read (status `corrupt`)",
        corrupt.len()
    )))
}

/// What a listed run shows: workflow, start and last update, from its
/// state when it can be read, else from the store's summary.
fn shown(run: &Listed) -> (String, Option<Timestamp>, Option<Timestamp>) {
    match &run.view {
        Ok(view) => (
            view.snapshot.workflow.name.clone(),
            view.snapshot.started_at,
            view.snapshot.updated_at,
        ),
        Err(_) => (
            run.summary.workflow.clone().unwrap_or_default(),
            run.summary.started_at,
            None,
        ),
    }
}

/// One line of the table.
fn run_line(run: &Listed) -> String {
    let (workflow, started, updated) = shown(run);
    let duration = match (started, updated) {
        (Some(a), Some(b)) => format!("{} ms", b.millis_since(a)),
        _ => String::new(),
    };
    let workflow = match &run.view {
        Ok(_) => crate::inert(&workflow).into_owned(),
        Err(_) => "?".into(),
    };
    format!(
        "{:<36}  {:<24}  {:<11}  {:<24}  {duration}",
        run.run_id().to_string(),
        workflow,
        run.status(),
        started.map(|t| t.to_string()).unwrap_or_default(),
    )
}

/// One run as `--json` prints it: `endedAt` once it ended, `durationMs`
/// up to its end or its last event, `parent` for a child run.
fn run_json(run: &Listed) -> Value {
    let (workflow, started, updated) = shown(run);
    let ended = run
        .view
        .as_ref()
        .is_ok_and(|v| v.snapshot.status.is_terminal());
    let mut out = Map::new();
    out.insert("id".into(), json!(run.run_id()));
    out.insert("workflow".into(), json!(workflow));
    out.insert("status".into(), json!(run.status()));
    out.insert("startedAt".into(), json!(started));
    if ended {
        out.insert("endedAt".into(), json!(updated));
    }
    if let (Some(a), Some(b)) = (started, updated) {
        out.insert("durationMs".into(), json!(b.millis_since(a)));
    }
    if let Some(parent) = run.summary.parent {
        out.insert("parent".into(), json!(parent));
    }
    Value::Object(out)
}
