//! `awr run` and `awr validate`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow};
use application::{RunRequest, WorkflowRunner};
use domain::workflow::NodeKind;
use domain::{RunStatus, WorkflowDef, WorkflowError};
use serde_json::Value;

use crate::{Failure, progress::Progress, wiring};

/// Reads and validates a workflow file and, recursively, the workflows its
/// `call_workflow` nodes name (relative to the file that names them), so a
/// bad child is refused before anything runs. Errors name the file (and
/// line:column when known); a workflow that calls itself, directly or not,
/// is refused.
pub fn load_workflow(file: &Path) -> Result<WorkflowDef, Failure> {
    load_tree(file, &mut Vec::new())
}

fn load_tree(file: &Path, calling: &mut Vec<PathBuf>) -> Result<WorkflowDef, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::Input(anyhow!("cannot read {}: {e}", file.display())))?;
    let is_json = file.extension().is_some_and(|ext| ext == "json");
    let parsed = if is_json {
        WorkflowDef::from_json(&text)
    } else {
        WorkflowDef::from_yaml(&text)
    };
    let mut workflow = parsed.map_err(|e| Failure::Input(anyhow!("{}", located(file, &e))))?;
    check_tools(file, &workflow)?;
    let canonical = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    calling.push(canonical);
    let dir = file.parent().unwrap_or(Path::new("."));
    for node in &mut workflow.nodes {
        if let NodeKind::CallWorkflow {
            workflow: child,
            resolved,
        } = &mut node.kind
        {
            let path = dir.join(&*child);
            let key = path.canonicalize().unwrap_or_else(|_| path.clone());
            if calling.contains(&key) {
                return Err(Failure::Input(anyhow!(
                    "{}: node `{}` calls {}, which is already being called: workflows must not call themselves",
                    file.display(),
                    node.id,
                    path.display()
                )));
            }
            let loaded = load_tree(&path, calling).map_err(|f| match f {
                Failure::Input(e) => Failure::Input(e.context(format!(
                    "{}: node `{}` calls {}",
                    file.display(),
                    node.id,
                    path.display()
                ))),
                other => other,
            })?;
            *resolved = Some(Arc::new(loaded));
        }
    }
    calling.pop();
    Ok(workflow)
}

/// Every tool granted to an HTTP agent must exist: a misspelt name would
/// otherwise just be a tool the model never sees.
fn check_tools(file: &Path, workflow: &WorkflowDef) -> Result<(), Failure> {
    let known = wiring::tools().names();
    for (name, agent) in &workflow.agents {
        if !agent.provider.is_http() {
            continue;
        }
        if let Some(tool) = agent.tools.iter().find(|t| !known.contains(t)) {
            return Err(Failure::Input(anyhow!(
                "{}: agents.{name}.tools: unknown tool `{tool}` (built-in tools: {})",
                file.display(),
                known.join(", ")
            )));
        }
    }
    Ok(())
}

fn located(file: &Path, error: &WorkflowError) -> String {
    match error {
        WorkflowError::Parse { line: Some(_), .. } => format!("{}:{error}", file.display()),
        _ => format!("{}: {error}", file.display()),
    }
}

/// `awr validate FILE`.
pub fn validate(file: &Path) -> Result<(), Failure> {
    let workflow = load_workflow(file)?;
    crate::say(&format!(
        "{}: ok ({} agents, {} nodes, {} edges)",
        file.display(),
        workflow.agents.len(),
        workflow.nodes.len(),
        workflow.edges.len()
    ))
}

/// Parses `--input`: JSON text, `@FILE`, or else the text as a string.
fn parse_input(raw: Option<&str>, workflow: &WorkflowDef) -> Result<Value, Failure> {
    let Some(raw) = raw else {
        return Ok(workflow.input.clone().unwrap_or(Value::Null));
    };
    let (text, origin) = match raw.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| Failure::Input(anyhow!("--input @{path}: {e}")))?,
            Some(path),
        ),
        None => (raw.to_owned(), None),
    };
    match (serde_json::from_str(&text), origin) {
        (Ok(value), _) => Ok(value),
        (Err(_), None) => Ok(Value::String(text)),
        (Err(e), Some(path)) => Err(Failure::Input(anyhow!("--input @{path}: not JSON: {e}"))),
    }
}

/// `awr run FILE [--input ...]`.
pub async fn run(storage: &Path, file: &Path, input: Option<&str>) -> Result<(), Failure> {
    // Everything that can be wrong with the input is checked before the store is touched.
    let workflow = load_workflow(file)?;
    let input = parse_input(input, &workflow)?;
    let workflow_dir = file.parent().unwrap_or(Path::new("."));
    let store = wiring::store(storage)?;
    let (clock, ids) = wiring::clock_and_ids();
    let providers = wiring::providers(workflow_dir, clock.clone(), ids.clone());
    let progress = Arc::new(Progress::new());
    let runner = WorkflowRunner::new(store, Arc::new(providers), clock, ids)
        .with_transcripts(wiring::transcripts(storage))
        .with_observer(progress.clone());
    let run_id = runner
        .create()
        .await
        .context("cannot create the run")
        .map_err(Failure::Input)?;
    crate::note(&format!("run {run_id}"));
    let outcome = runner
        .run(
            run_id,
            RunRequest {
                workflow: Arc::new(workflow),
                input,
            },
        )
        .await
        .with_context(|| format!("run {run_id}"))
        .map_err(Failure::Run)?;
    progress.finish();
    match outcome.status {
        RunStatus::Completed => print_output(&outcome.output),
        _ => Err(Failure::Run(anyhow!(
            "run {run_id} failed: {}",
            outcome.error.unwrap_or_else(|| "unknown error".into())
        ))),
    }
}

fn print_output(output: &Value) -> Result<(), Failure> {
    match output {
        Value::String(text) => crate::say(text),
        other => {
            crate::say(&serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()))
        }
    }
}
