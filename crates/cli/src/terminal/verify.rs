//! `awr verify-determinism RECORDING [--json]`: runs a recording twice
//! through the mock and compares the two runs' canonical output byte for
//! byte.
//!
//! Each run goes into a fresh in-memory store, with a logical clock that
//! starts at the recording's `clockStartMs` and ids from its `idSeed`;
//! every agent, whatever its provider, is served from the recording (no
//! provider is built, no socket opened); `command` nodes run live. A call
//! whose request is not the one recorded, or recorded calls left unserved,
//! is a divergence from the recording. Exit 0 identical, 1 diverged (a
//! first-divergence report on stderr; `--json` prints it on stdout), 2 the
//! recording is invalid, 3 the replay cannot run (e.g. its workflow is gone).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;
use application::ports::RunStore;
pub use application::recording::canonical::canonical;
use application::recording::canonical::{causal_lines, id_seed, jcs};
use application::recording::report::Kind;
pub use application::recording::report::{Report, first_divergence};
use domain::causal::{CausalEvent, order};
use domain::recording::{FORMAT_VERSION, Manifest, Mismatch};
use domain::{ErrorKind, EventKind, RunId, RuntimeEvent};
use serde_json::{Value, json};

use crate::wiring::load_workflow;
use crate::{Failure, say, wiring};

/// Verifies the recording in `dir`.
pub async fn verify(dir: &Path, json_out: bool) -> Result<(), Failure> {
    let manifest = check_recording(dir)?;
    let file = workflow_file(dir, &manifest);
    if !file.is_file() {
        return Err(Failure::Replay(anyhow!(
            "recording {}: its workflow {} is gone",
            dir.display(),
            file.display()
        )));
    }
    let workflow = load_workflow(&file).map_err(|f| Failure::Replay(anyhow!("{}", f.error())))?;
    if workflow.hash != manifest.workflow.content_hash {
        return diverged(changed_workflow(&file, &manifest, &workflow.hash), json_out);
    }
    if workflow.name != manifest.workflow.name {
        return Err(invalid(
            dir,
            format!(
                "manifest.json: workflow `{}`, and its file {} names workflow `{}`",
                manifest.workflow.name,
                file.display(),
                workflow.name
            ),
        ));
    }
    let recorded = recorded_causal(dir)?;
    let mut passes = Vec::new();
    let mut last = Vec::new();
    for _ in 0..2 {
        let events = replay(dir, &manifest, Arc::clone(&workflow)).await?;
        if let Some(report) = against_recording(dir, &events)? {
            return diverged(report, json_out);
        }
        // What the recorded run's causal events say (its own, not its
        // children's), the replay's run must say: a recorded answer edited
        // after the fact shows there first.
        let seed = &manifest.seeds.id_seed;
        // The run's own events come first (`run_events`), its children's after.
        let own = events.first().map_or(0, |first| {
            events
                .iter()
                .take_while(|e| e.run_id == first.run_id)
                .count()
        });
        let replayed = causal_lines(&events[..own], seed);
        if let Some(mut report) = first_divergence(&recorded, &replayed) {
            report.shape = "recorded-causal".into();
            report.message =
                "run A is the recording's causal.jsonl, run B the replay's causal events".into();
            report.call = report
                .call
                .or_else(|| causal_call(&recorded, &replayed, &report, &events[..own]));
            return diverged(report, json_out);
        }
        passes.push(canonical(&events, seed));
        last = events;
    }
    let (a, b) = (&passes[0], &passes[1]);
    match first_divergence(a, b) {
        None => {
            crate::note(&format!(
                "verify-determinism: IDENTICAL ({} canonical lines, twice)",
                a.len()
            ));
            if json_out {
                say(&json!({"result": "identical", "lines": a.len()}).to_string())?;
            }
            Ok(())
        }
        Some(mut report) => {
            report.call = report.call.or_else(|| causal_call(a, b, &report, &last));
            diverged(report, json_out)
        }
    }
}

/// The provider call behind the causal event a report is about: the
/// nearest `task_received` of its agent in its chain is one of the agent's
/// `agent:start`s, the k-th of that agent's in causal order and in the
/// replay's log alike (an agent's own events form one line of descent).
/// `None` for a line that is not a causal event, or follows from no call
/// (a `command` node, the run's own transitions).
fn causal_call(
    a: &[String],
    b: &[String],
    report: &Report,
    events: &[RuntimeEvent],
) -> Option<u32> {
    let line = report.line? - 1;
    let (lines, at) = match b.get(line) {
        Some(at) => (b, at),
        None => (a, a.get(line)?),
    };
    let parsed: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let at: Value = serde_json::from_str(at).ok()?;
    let agent = at["agent_id"].as_str()?;
    let by_id: HashMap<&str, &Value> = parsed
        .iter()
        .filter_map(|v| Some((v["event_id"].as_str()?, v)))
        .collect();
    // The agent's call: its nearest `task_received`, up its chain.
    let mut up = Some(&at);
    let mut steps = 0;
    let received = loop {
        let event = up?;
        if event["type"] == "task_received" && event["agent_id"] == agent {
            break event["event_id"].as_str()?;
        }
        steps += 1;
        if steps > lines.len() {
            return None;
        }
        up = event["parent_event_id"]
            .as_str()
            .and_then(|p| by_id.get(p).copied());
    };
    let k = parsed
        .iter()
        .filter(|v| v["type"] == "task_received" && v["agent_id"] == agent)
        .position(|v| v["event_id"] == received)?;
    // The same agent's `agent:start`s in the replay's log.
    let (node, item) = (report.node.as_str(), report.item);
    let mut items: HashMap<domain::NodeRunId, Option<u64>> = HashMap::new();
    let mut starts = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::NodeStarted { item, .. } => {
                if let Some(run) = e.node_run_id {
                    items.insert(run, item.map(|i| i as u64));
                }
            }
            EventKind::AgentStart { call_index, .. }
                if e.node_id.as_ref().is_some_and(|n| n.as_str() == node)
                    && e.node_run_id.and_then(|r| items.get(&r).copied().flatten()) == item =>
            {
                starts.push(call_index.unwrap_or(0));
            }
            _ => {}
        }
    }
    starts.get(k).copied()
}

/// The report of a workflow file that is not the one recorded: both
/// hashes, at the manifest's pointer.
fn changed_workflow(file: &Path, manifest: &Manifest, now: &str) -> Report {
    Report {
        shape: "workflow".into(),
        kind: Kind::Workflow,
        event: "flow:started".into(),
        file: Some(file.display().to_string()),
        pointer: "/workflow/contentHash".into(),
        recorded: Value::String(manifest.workflow.content_hash.clone()),
        actual: Value::String(now.to_owned()),
        message: format!(
            "the workflow {} changed since it was recorded: contentHash {}, the file's now {now}",
            file.display(),
            manifest.workflow.content_hash
        ),
        ..Report::default()
    }
}

/// The recording's causal events in the canonical form (RFC 8785, without
/// `timestamp_ns`), as [`canonical()`] writes a replay's.
fn recorded_causal(dir: &Path) -> Result<Vec<String>, Failure> {
    let path = dir.join("causal.jsonl");
    let text = wiring::files::read_text(&path, 256 << 20).map_err(|e| invalid(dir, e))?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut value: Value = serde_json::from_str(line)
            .map_err(|e| invalid(dir, format!("causal.jsonl line {}: {e}", i + 1)))?;
        if let Some(map) = value.as_object_mut() {
            map.remove("timestamp_ns");
        }
        lines.push(jcs(&value));
    }
    Ok(lines)
}

fn invalid(dir: &Path, what: impl std::fmt::Display) -> Failure {
    Failure::Input(anyhow!("recording {}: {what}", dir.display()))
}

/// The recording in `dir`, checked whole: its manifest (complete, a
/// format this awr reads), every node file and its causal events.
pub(crate) fn check_recording(dir: &Path) -> Result<Manifest, Failure> {
    let manifest = manifest(dir)?;
    check_files(dir)?;
    Ok(manifest)
}

fn manifest(dir: &Path) -> Result<Manifest, Failure> {
    let path = dir.join("manifest.json");
    let text = wiring::files::read_text(&path, 1 << 20).map_err(|e| invalid(dir, e))?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| invalid(dir, format!("manifest.json: {e}")))?;
    if manifest.format_version == 0 {
        return Err(invalid(
            dir,
            format!("manifest.json: format 0 is no recording format (1 to {FORMAT_VERSION})"),
        ));
    }
    if manifest.format_version > FORMAT_VERSION {
        return Err(invalid(
            dir,
            format!(
                "manifest.json: format {} is newer than this awr reads ({FORMAT_VERSION})",
                manifest.format_version
            ),
        ));
    }
    if !manifest.complete {
        return Err(invalid(
            dir,
            "manifest.json says complete: false: its recorder stopped before the end",
        ));
    }
    Ok(manifest)
}

/// Every node file parses, and the causal events form a graph.
fn check_files(dir: &Path) -> Result<(), Failure> {
    let nodes = dir.join("nodes");
    // A workflow without agents records no node file.
    let flows = match std::fs::read_dir(&nodes) {
        Ok(flows) => flows.collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(invalid(dir, format!("nodes/: {e}"))),
    };
    for flow in flows {
        let flow = flow.map_err(|e| invalid(dir, e))?.path();
        for file in std::fs::read_dir(&flow).map_err(|e| invalid(dir, e))? {
            let file = file.map_err(|e| invalid(dir, e))?.path();
            // Bounded, and refused unless a regular file: a FIFO or a
            // device in a recording never hangs the check.
            let text = wiring::files::read_text(&file, 256 << 20).map_err(|e| invalid(dir, e))?;
            wiring::files::check_fixture(&text, &file).map_err(|e| invalid(dir, e))?;
        }
    }
    let path = dir.join("causal.jsonl");
    let text = wiring::files::read_text(&path, 256 << 20).map_err(|e| invalid(dir, e))?;
    let mut events = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let event: CausalEvent = serde_json::from_str(line)
            .map_err(|e| invalid(dir, format!("causal.jsonl line {}: {e}", i + 1)))?;
        events.push(event);
    }
    order(events).map_err(|e| invalid(dir, format!("causal.jsonl: {e}")))?;
    Ok(())
}

fn workflow_file(dir: &Path, manifest: &Manifest) -> PathBuf {
    let path = PathBuf::from(&manifest.workflow.path);
    if path.is_absolute() {
        path
    } else {
        dir.join(path)
    }
}

/// One replay of the recording: the events of its run and child runs.
async fn replay(
    dir: &Path,
    manifest: &Manifest,
    workflow: Arc<domain::WorkflowDef>,
) -> Result<Vec<RuntimeEvent>, Failure> {
    let seed = id_seed(&manifest.seeds.id_seed);
    let (store, run_id) = wiring::replay_recording(dir, manifest, seed, workflow)
        .await
        .map_err(|e| Failure::Replay(anyhow!("the replay cannot run: {e}")))?;
    run_events(&store, run_id).await
}

/// The events of run `run` and of its child runs, each run's in order.
pub(crate) async fn run_events(
    store: &Arc<dyn RunStore>,
    run: RunId,
) -> Result<Vec<RuntimeEvent>, Failure> {
    let mut events = Vec::new();
    let mut runs = VecDeque::from([run]);
    while let Some(run) = runs.pop_front() {
        let log = store
            .read(run, 0, usize::MAX)
            .await
            .map_err(|e| Failure::Replay(anyhow!("run {run}: {e}")))?;
        for e in &log {
            if let EventKind::SubflowStarted { child_run_id, .. } = &e.kind {
                runs.push_back(*child_run_id);
            }
        }
        events.extend(log);
    }
    Ok(events)
}

/// A call the recording refused (another request than recorded, or one
/// too many), or recorded calls the replay never made.
pub(crate) fn against_recording(
    dir: &Path,
    events: &[RuntimeEvent],
) -> Result<Option<Report>, Failure> {
    let mut flows: HashMap<RunId, String> = HashMap::new();
    let mut served: BTreeMap<(String, String), u32> = BTreeMap::new();
    for e in events {
        match &e.kind {
            EventKind::FlowStarted { workflow, .. } => {
                flows.insert(e.run_id, workflow.name.clone());
            }
            EventKind::AgentError {
                error_type,
                message,
                details,
            } if ErrorKind::parse(error_type) == ErrorKind::Fixture => {
                // The mock's refusal, field by field; a node file it could
                // not read is only a sentence.
                let refused = details
                    .clone()
                    .and_then(|d| serde_json::from_value::<Mismatch>(d).ok());
                return Ok(Some(match refused {
                    Some(mismatch) => Report::refused(mismatch, message.clone()),
                    None => Report {
                        shape: "recording".into(),
                        kind: Kind::Recording,
                        event: "agent:error".into(),
                        node: e
                            .node_id
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                        message: message.clone(),
                        ..Report::default()
                    },
                }));
            }
            EventKind::AgentStart { call_index, .. } => {
                if let (Some(flow), Some(node)) = (flows.get(&e.run_id), &e.node_id) {
                    let n = served.entry((flow.clone(), node.to_string())).or_default();
                    *n = (*n).max(call_index.unwrap_or(0) + 1);
                }
            }
            _ => {}
        }
    }
    let nodes = dir.join("nodes");
    let mut flows: Vec<String> = flows.into_values().collect();
    flows.sort();
    flows.dedup();
    for flow in flows {
        let Ok(files) = std::fs::read_dir(nodes.join(&flow)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = files.flatten().map(|f| f.path()).collect();
        files.sort();
        for file in files {
            let calls = wiring::files::fixture_calls(&file).map_err(|e| invalid(dir, e))?;
            let recorded = calls.len();
            let node = file
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let made = served
                .get(&(flow.clone(), node.clone()))
                .copied()
                .unwrap_or(0) as usize;
            if made < recorded {
                let message = format!(
                    "shortfall: node {node} of {flow} made {made} call(s); the recording has {recorded}: call {made} was never made"
                );
                // The first call never made, with the request recorded for it.
                let never = &calls[made];
                let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                return Ok(Some(Report {
                    shape: "shortfall".into(),
                    kind: Kind::MissingCall,
                    event: "agent:start".into(),
                    node,
                    call: Some(count(made)),
                    instance: never.instance.clone(),
                    instance_call: never.instance_call,
                    file: Some(file.display().to_string()),
                    pointer: format!("/calls/{made}"),
                    recorded: never.input.clone().unwrap_or(Value::Null),
                    recorded_calls: Some(count(recorded)),
                    message,
                    ..Report::default()
                }));
            }
        }
    }
    Ok(None)
}

/// Prints the report (stderr; `--json` also on stdout) and fails with exit 1.
fn diverged(report: Report, json_out: bool) -> Result<(), Failure> {
    if json_out {
        say(&report.to_json().to_string())?;
    }
    crate::note(&report.to_string());
    Err(Failure::Run(anyhow!(
        "the recording did not replay the same"
    )))
}
