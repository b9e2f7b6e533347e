//! `awr runs`, `awr show`, `awr events`: reading what runs did.

use std::path::Path;
use std::sync::Arc;

use anyhow::anyhow;
use application::inspect::current_snapshot;
use application::ports::{RunStore, StoreError};
use domain::{EventKind, RunId, RunSnapshot, RuntimeEvent};
use futures::StreamExt;

use crate::{Failure, wiring};

/// A run that is not there, or storage that cannot be read: exit 2.
fn store_failure(e: StoreError) -> Failure {
    Failure::Input(anyhow!(e))
}

/// Finds the run a user named by its id or a unique prefix of it.
async fn resolve(store: &dyn RunStore, wanted: &str) -> Result<RunId, Failure> {
    if let Ok(id) = wanted.parse::<RunId>() {
        return Ok(id);
    }
    let runs = store.list_runs().await.map_err(store_failure)?;
    let matches: Vec<RunId> = runs
        .into_iter()
        .filter(|id| !wanted.is_empty() && id.to_string().starts_with(wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(Failure::Input(anyhow!("no run matches `{wanted}`"))),
        _ => Err(Failure::Input(anyhow!(
            "`{wanted}` matches {} runs; give more of the id",
            matches.len()
        ))),
    }
}

/// Resolves a run id or prefix against the store under `storage`.
pub async fn resolve_id(storage: &Path, wanted: &str) -> Result<RunId, Failure> {
    let store = wiring::store(storage)?;
    resolve(store.as_ref(), wanted).await
}

/// `awr runs`.
pub async fn runs(storage: &Path) -> Result<(), Failure> {
    let store = wiring::store(storage)?;
    let mut rows: Vec<RunSnapshot> = Vec::new();
    for id in store.list_runs().await.map_err(store_failure)? {
        match current_snapshot(store.as_ref(), id).await {
            Ok(snapshot) => rows.push(snapshot),
            Err(e) => tracing::warn!(run = %id, error = %e, "skipping unreadable run"),
        }
    }
    rows.sort_by_key(|s| s.started_at);
    crate::say(&format!(
        "{:<36}  {:<24}  {:<9}  {:<24}  DURATION",
        "RUN", "WORKFLOW", "STATUS", "STARTED"
    ))?;
    for s in rows {
        let started = s.started_at.map(|t| t.to_string()).unwrap_or_default();
        let duration = match (s.started_at, s.updated_at) {
            (Some(a), Some(b)) => format!("{} ms", b.millis_since(a)),
            _ => String::new(),
        };
        crate::say(&format!(
            "{:<36}  {:<24}  {:<9}  {:<24}  {duration}",
            s.run_id.to_string(),
            s.workflow.name,
            s.status.as_str(),
            started
        ))?;
    }
    Ok(())
}

/// `awr show RUN`.
pub async fn show(storage: &Path, run: &str, json: bool) -> Result<(), Failure> {
    let store = wiring::store(storage)?;
    let id = resolve(store.as_ref(), run).await?;
    let s = current_snapshot(store.as_ref(), id)
        .await
        .map_err(store_failure)?;
    if s.last_offset == 0 {
        return Err(Failure::Input(anyhow!("run {id} has no events")));
    }
    if json {
        let text = serde_json::to_string_pretty(&s).map_err(|e| Failure::Run(anyhow!(e)))?;
        crate::say(&text)?;
        return Ok(());
    }
    crate::say(&format!("run       {}", s.run_id))?;
    crate::say(&format!(
        "workflow  {} ({})",
        s.workflow.name, s.workflow.hash
    ))?;
    crate::say(&format!("status    {}", s.status.as_str()))?;
    if let Some(t) = s.started_at {
        crate::say(&format!("started   {t}"))?;
    }
    crate::say(&format!("events    {}", s.last_offset))?;
    crate::say("nodes")?;
    for (node, status) in &s.node_status {
        let session = s
            .agent_sessions
            .get(node)
            .map(|sid| format!("  session {sid}"))
            .unwrap_or_default();
        crate::say(&format!(
            "  {node:<24} {:<8}{session}",
            format!("{status:?}").to_lowercase()
        ))?;
    }
    if !s.edge_status.is_empty() {
        crate::say("edges")?;
        for (edge, status) in &s.edge_status {
            let count = s
                .loop_counters
                .get(edge)
                .map(|n| format!("  iterations {n}"))
                .unwrap_or_default();
            crate::say(&format!(
                "  {edge:<24} {:<8}{count}",
                format!("{status:?}").to_lowercase()
            ))?;
        }
    }
    if !s.outputs.is_empty() {
        crate::say("outputs")?;
        for (node, output) in &s.outputs {
            crate::say(&format!("  {node}: {}", preview(&output["data"], 100)))?;
        }
    }
    Ok(())
}

/// `awr events RUN [--offset N] [--follow] [--json]`.
pub async fn events(
    storage: &Path,
    run: &str,
    offset: u64,
    follow: bool,
    json: bool,
) -> Result<(), Failure> {
    let store = wiring::store(storage)?;
    let id = resolve(store.as_ref(), run).await?;
    if follow {
        let mut stream = store.follow(id, offset).await.map_err(store_failure)?;
        while let Some(event) = stream.next().await {
            print_event(&event.map_err(store_failure)?, json)?;
        }
        return Ok(());
    }
    print_history(&store, id, offset, json).await
}

async fn print_history(
    store: &Arc<dyn RunStore>,
    id: RunId,
    mut after: u64,
    json: bool,
) -> Result<(), Failure> {
    const BATCH: usize = 1024;
    // Fail on a run that does not exist rather than printing nothing.
    store.last_offset(id).await.map_err(store_failure)?;
    loop {
        let batch = store.read(id, after, BATCH).await.map_err(store_failure)?;
        for event in &batch {
            print_event(event, json)?;
            after = event.offset.get();
        }
        if batch.len() < BATCH {
            return Ok(());
        }
    }
}

fn print_event(event: &RuntimeEvent, json: bool) -> Result<(), Failure> {
    let line = if json {
        event.to_json().map_err(|e| Failure::Run(anyhow!(e)))?
    } else {
        let mut body = match &event.kind {
            EventKind::Unknown { raw, .. } => serde_json::Value::Object(raw.clone()),
            kind => serde_json::to_value(kind).unwrap_or_default(),
        };
        if let Some(map) = body.as_object_mut() {
            map.remove("type");
        }
        let node = event.node_id.as_ref().map(|n| n.as_str()).unwrap_or("-");
        format!(
            "{:>6}  {}  {:<22} {:<16} {}",
            event.offset,
            event.timestamp,
            event.kind.type_name(),
            node,
            preview(&body, 120)
        )
    };
    crate::say(&line)
}

/// One line of at most `max` characters.
fn preview(value: &serde_json::Value, max: usize) -> String {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let flat = text.replace('\n', " ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}
