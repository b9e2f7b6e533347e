//! `awr record-fixtures FLOW --out DIR`: a live run, kept as a recording
//! that `provider: mock` and `awr verify-determinism` replay.
//!
//! The run goes to the storage as any run does; its calls are then
//! projected from its log (`application::recording::project`) into
//! `DIR/nodes/<workflow>/<node>.json`, with its causal events in
//! `DIR/causal.jsonl`. `DIR/manifest.json` is written first with
//! `complete: false` and last with `complete: true`, every file 0600 by
//! temp file and rename, so a recorder killed midway leaves a recording
//! that says so. Keys never reach it: the log it is projected from was
//! written through the run's redactor.

use std::collections::{BTreeMap, VecDeque};
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use application::Cancel;
use application::recording::project as recording;
use domain::recording::{FORMAT_VERSION, Manifest, RecordedWorkflow, Seeds};
use domain::workflow::NodeKind;
use domain::{EventKind, RunId, WorkflowDef};
use serde_json::json;

use crate::storage::Storage;
use crate::terminal::run::{Input, Wired, parse_input};
use crate::wiring::load_workflow;
use crate::wiring::{request, source_of};
use crate::{Failure, wiring};

/// Records a run of `file` into `out`.
pub async fn record(
    storage: &Storage,
    file: &Path,
    input: Input<'_>,
    out: &Path,
) -> Result<(), Failure> {
    let workflow = load_workflow(file)?;
    let input = parse_input(input, &workflow)?;
    let text =
        std::fs::read(file).map_err(|e| Failure::Input(anyhow!("{}: {e}", file.display())))?;
    start_dir(out)?;
    let wired = Wired::new(storage, file, &workflow).await?;
    let run_id = wired
        .runtime
        .create()
        .await
        .context("cannot create the run")
        .map_err(Failure::Input)?;
    crate::note(&format!("run {run_id}, recorded into {}", out.display()));
    let mut manifest = Manifest {
        format_version: FORMAT_VERSION,
        complete: false,
        workflow: RecordedWorkflow {
            name: workflow.name.clone(),
            path: source_of(file),
            content_hash: format!("sha256:{}", domain::canonical::sha256_hex(&text)),
        },
        input: wired.redacted(input.clone()),
        run_id,
        seeds: Seeds {
            clock_start_ms: 1_767_225_600_000,
            id_seed: run_id.to_string(),
        },
        capture: BTreeMap::from([
            ("model".into(), "recorded".into()),
            ("tools".into(), "recorded".into()),
            ("commands".into(), "live".into()),
            ("filesystem".into(), "not-captured".into()),
        ]),
    };
    write_json(&out.join("manifest.json"), &manifest)?;
    let cancel = Cancel::new();
    let signals = crate::signals::cancel_on_signal(cancel.clone());
    let request = request(
        Arc::clone(&workflow),
        input,
        file,
        crate::wiring::local_caller(),
    );
    let outcome = match wired.runtime.run_created(run_id, request, cancel).await {
        Ok(outcome) => outcome,
        Err(e) => {
            return Err(crate::terminal::run::failed(storage, &wired.runtime, run_id, e).await);
        }
    };
    write_recording(storage, &workflow, run_id, out).await?;
    manifest.complete = true;
    write_json(&out.join("manifest.json"), &manifest)?;
    wired.finish(outcome, &signals)
}

/// `out`, created empty (0700); one that holds anything is refused, so a
/// recording is never overwritten.
fn start_dir(out: &Path) -> Result<(), Failure> {
    if let Ok(mut entries) = std::fs::read_dir(out)
        && entries.next().is_some()
    {
        return Err(Failure::Input(anyhow!(
            "--out {}: the directory holds files already; a recording is never overwritten",
            out.display()
        )));
    }
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(out)
        .map_err(|e| Failure::Input(anyhow!("--out {}: {e}", out.display())))
}

/// The node files and causal events of the run and its child runs.
async fn write_recording(
    storage: &Storage,
    workflow: &Arc<WorkflowDef>,
    run_id: RunId,
    out: &Path,
) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let mut workflows = BTreeMap::new();
    collect(workflow, &mut workflows);
    let mut runs = VecDeque::from([run_id]);
    let mut written = std::collections::HashSet::new();
    while let Some(run) = runs.pop_front() {
        let events = store
            .read(run, 0, usize::MAX)
            .await
            .map_err(|e| Failure::Input(anyhow!("run {run}: {e}")))?;
        if run == run_id {
            let mut lines = Vec::new();
            for event in domain::causal::project(&events, &run_id.to_string()) {
                lines.extend(
                    domain::canonical::jcs(&event).map_err(|e| Failure::Input(anyhow!(e)))?,
                );
                lines.push(b'\n');
            }
            write_file(&out.join("causal.jsonl"), &lines)?;
        }
        let mut name = None;
        for e in &events {
            match &e.kind {
                EventKind::FlowStarted { workflow, .. } => name = Some(workflow.name.clone()),
                EventKind::SubflowStarted { child_run_id, .. } => runs.push_back(*child_run_id),
                _ => {}
            }
        }
        let Some(flow) = name.and_then(|n| workflows.get(&n).cloned()) else {
            continue;
        };
        // A workflow called twice is recorded from its first run: the mock
        // serves each of its runs from the same files.
        if !written.insert(flow.name.clone()) {
            continue;
        }
        let calls = recording::calls(&events, |node| {
            flow.node(node)
                .and_then(|n| flow.agent_of(n))
                .map(|(_, a)| a)
        });
        for (node, calls) in calls {
            let path = out
                .join("nodes")
                .join(&flow.name)
                .join(format!("{node}.json"));
            let body = serde_json::to_vec_pretty(&json!({ "calls": calls }))
                .map_err(|e| Failure::Input(anyhow!(e)))?;
            write_file(&path, &body)?;
        }
    }
    Ok(())
}

/// Every workflow of the tree, by name.
fn collect(workflow: &Arc<WorkflowDef>, into: &mut BTreeMap<String, Arc<WorkflowDef>>) {
    into.entry(workflow.name.clone())
        .or_insert_with(|| Arc::clone(workflow));
    for node in &workflow.nodes {
        if let NodeKind::CallWorkflow {
            resolved: Some(child),
            ..
        } = &node.kind
        {
            collect(child, into);
        }
    }
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), Failure> {
    let mut body = serde_json::to_vec_pretty(value).map_err(|e| Failure::Input(anyhow!(e)))?;
    body.push(b'\n');
    write_file(path, &body)
}

/// `bytes` as the file at `path`, whole or not at all: a temp file (0600)
/// synced, renamed into place, its directory synced.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    wiring::files::write_whole(path, bytes)
        .map_err(|e| Failure::Input(anyhow!("cannot write {}: {e}", path.display())))
}
