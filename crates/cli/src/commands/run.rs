//! `awr run` and `awr validate`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, anyhow};
use application::{Cancel, Executor, RunRequest};
use domain::workflow::{NodeKind, Provider};
use domain::{RunStatus, WorkflowDef, WorkflowError};
use serde_json::Value;

use crate::{Failure, progress::Progress, wiring};

/// How deeply `call_workflow` may nest: the top-level file is depth 1, so a
/// chain of at most this many files loads.
pub const MAX_CALL_DEPTH: usize = 64;

/// Reads and validates a workflow file and, recursively, the workflows its
/// `call_workflow` nodes name (relative to the file that names them), so a
/// bad child is refused before anything runs. Errors name the file (and
/// line:column when known); a workflow that calls itself, directly or not,
/// and a chain deeper than [`MAX_CALL_DEPTH`] are refused.
///
/// Each file is read, parsed and checked once per load, however many nodes
/// call it: a child is shared by canonical path and content hash.
pub fn load_workflow(file: &Path) -> Result<Arc<WorkflowDef>, Failure> {
    let project = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(|e| Failure::Input(anyhow!("cannot resolve the current directory: {e}")))?;
    let mut loader = Loader {
        fixtures: file.parent().unwrap_or(Path::new(".")).to_path_buf(),
        project,
        loaded: HashMap::new(),
        calling: Vec::new(),
    };
    loader.load(file)
}

/// State of one [`load_workflow`].
struct Loader {
    /// Where mock fixtures are found: the top-level file's directory (see
    /// `wiring::providers`).
    fixtures: PathBuf,
    /// The directory awr runs in, canonical; agents' `workdir`s stay inside.
    project: PathBuf,
    /// Files already loaded, by canonical path and content hash.
    loaded: HashMap<(PathBuf, String), Arc<WorkflowDef>>,
    /// The files being loaded, outermost first: a cycle and the depth.
    calling: Vec<PathBuf>,
}

impl Loader {
    fn load(&mut self, file: &Path) -> Result<Arc<WorkflowDef>, Failure> {
        let text = read_workflow_text(file)?;
        let canonical = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
        let key = (canonical, WorkflowDef::source_hash(&text));
        if let Some(done) = self.loaded.get(&key) {
            return Ok(Arc::clone(done));
        }
        let is_json = file.extension().is_some_and(|ext| ext == "json");
        let parsed = if is_json {
            WorkflowDef::from_json(&text)
        } else {
            WorkflowDef::from_yaml(&text)
        };
        let mut workflow = parsed.map_err(|e| Failure::Input(anyhow!("{}", located(file, &e))))?;
        check_tools(file, &workflow)?;
        check_workdirs(file, &workflow, &self.project)?;
        check_fixtures(file, &workflow, &self.fixtures)?;
        self.calling.push(key.0.clone());
        let children = self.load_children(file, &mut workflow);
        self.calling.pop();
        children?;
        let workflow = Arc::new(workflow);
        self.loaded.insert(key, Arc::clone(&workflow));
        Ok(workflow)
    }

    fn load_children(&mut self, file: &Path, workflow: &mut WorkflowDef) -> Result<(), Failure> {
        let dir = file.parent().unwrap_or(Path::new("."));
        for node in &mut workflow.nodes {
            let NodeKind::CallWorkflow {
                workflow: child,
                resolved,
            } = &mut node.kind
            else {
                continue;
            };
            let path = dir.join(&*child);
            let calls = |why: String| {
                Failure::Input(anyhow!(
                    "{}: node `{}` calls {}{why}",
                    file.display(),
                    node.id,
                    path.display()
                ))
            };
            let key = path.canonicalize().unwrap_or_else(|_| path.clone());
            if self.calling.contains(&key) {
                return Err(calls(
                    ", which is already being called: workflows must not call themselves".into(),
                ));
            }
            if self.calling.len() >= MAX_CALL_DEPTH {
                return Err(calls(format!(
                    ": `call_workflow` nests more than {MAX_CALL_DEPTH} workflows deep"
                )));
            }
            let loaded = self.load(&path).map_err(|f| match f {
                Failure::Input(e) => Failure::Input(e.context(format!(
                    "{}: node `{}` calls {}",
                    file.display(),
                    node.id,
                    path.display()
                ))),
                other => other,
            })?;
            *resolved = Some(loaded);
        }
        Ok(())
    }
}

/// The text of a workflow file.
fn read_workflow_text(file: &Path) -> Result<String, Failure> {
    infrastructure::fs::read_text_bounded(file, infrastructure::fs::MAX_WORKFLOW_FILE)
        .map_err(|e| Failure::Input(anyhow!(e)))
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

/// A `workdir` must lie inside the project directory (the domain has
/// already refused `/` and relative `..` escapes, which need no disk). A
/// directory that exists is judged by its real path, symlinks resolved,
/// whether it is named absolute or relative: `work -> /` leads out as surely
/// as `/` does.
fn check_workdirs(file: &Path, workflow: &WorkflowDef, project: &Path) -> Result<(), Failure> {
    for (name, agent) in &workflow.agents {
        let Some(dir) = agent.workdir.as_deref() else {
            continue;
        };
        if agent.allow_outside_project {
            continue;
        }
        let real = project.join(dir).canonicalize();
        let judged = real.as_deref().ok().and_then(Path::to_str).unwrap_or(dir);
        if let Some(why) = domain::workflow::workdir_outside(judged, project) {
            let via = if judged == dir {
                String::new()
            } else {
                format!("`{dir}` leads to {judged}: ")
            };
            return Err(Failure::Input(anyhow!(
                "{}: agents.{name}: `workdir`: {via}{why}; set `allow_outside_project: true` to allow it",
                file.display()
            )));
        }
    }
    Ok(())
}

/// Every node of a `mock` agent has its fixture file, where the mock
/// provider will look for it (`wiring::providers`): `<fixtures>/<node>.json`,
/// with `<fixtures>` the agent's `fixtures:` directory or
/// `fixtures/<workflow name>`, both under the top-level file's directory.
fn check_fixtures(file: &Path, workflow: &WorkflowDef, base: &Path) -> Result<(), Failure> {
    for node in &workflow.nodes {
        let Some((name, agent)) = workflow.agent_of(node) else {
            continue;
        };
        if agent.provider != Provider::Mock {
            continue;
        }
        let dir = match &agent.fixtures {
            Some(dir) => base.join(dir),
            None => base.join("fixtures").join(&workflow.name),
        };
        let fixture = dir.join(format!("{}.json", node.id));
        if !fixture.is_file() {
            return Err(Failure::Input(anyhow!(
                "{}: node `{}`: mock agent `{name}` has no fixture file {}",
                file.display(),
                node.id,
                fixture.display()
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

/// What `awr run` was given as input.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// None: the workflow's own `input`, else `null`.
    Default,
    /// `--input`: JSON text, or `@FILE` to read JSON from a file.
    Json(&'a str),
    /// `--input-text`: the text itself, as a string.
    Text(&'a str),
}

/// The run's input. JSON that does not parse is an error naming the problem,
/// never silently a string: a string is asked for with `--input-text`.
fn parse_input(input: Input<'_>, workflow: &WorkflowDef) -> Result<Value, Failure> {
    let raw = match input {
        Input::Default => return Ok(workflow.input.clone().unwrap_or(Value::Null)),
        Input::Text(text) => return Ok(Value::String(text.to_owned())),
        Input::Json(raw) => raw,
    };
    let (text, origin) = match raw.strip_prefix('@') {
        Some(path) => (
            infrastructure::fs::read_text_bounded(
                Path::new(path),
                infrastructure::fs::MAX_INPUT_FILE,
            )
            .map_err(|e| Failure::Input(anyhow!("--input @{path}: {e}")))?,
            format!("--input @{path}"),
        ),
        None => (raw.to_owned(), "--input".to_owned()),
    };
    serde_json::from_str(&text).map_err(|e| {
        Failure::Input(anyhow!(
            "{origin}: not JSON: {e} (to pass text as a string, use --input-text)"
        ))
    })
}

/// `awr run FILE [--input JSON | --input-text TEXT]`.
pub async fn run(storage: &Path, file: &Path, input: Input<'_>) -> Result<(), Failure> {
    // Everything that can be wrong with the input is checked before the store is touched.
    let workflow = load_workflow(file)?;
    let input = parse_input(input, &workflow)?;
    let workflow_dir = file.parent().unwrap_or(Path::new("."));
    let secrets = wiring::Secrets::of(&workflow);
    let store = secrets.store(wiring::store(storage)?);
    let (clock, ids) = wiring::clock_and_ids();
    let providers = wiring::providers(workflow_dir, &secrets, clock.clone(), ids.clone());
    let progress = Arc::new(Progress::new());
    let runner = Executor::new(store, Arc::new(providers), clock, ids)
        .with_transcripts(secrets.transcripts(wiring::transcripts(storage)))
        .with_commands(wiring::commands(&secrets))
        .with_observer(secrets.observer(progress.clone()));
    let run_id = runner
        .create()
        .await
        .context("cannot create the run")
        .map_err(Failure::Input)?;
    crate::note(&format!("run {run_id}"));
    let cancel = Cancel::new();
    let signals = crate::signals::cancel_on_signal(cancel.clone());
    let outcome = runner
        .run_cancellable(run_id, RunRequest { workflow, input }, cancel)
        .await
        .with_context(|| format!("run {run_id}"))
        .map_err(Failure::Run)?;
    progress.finish();
    match outcome.status {
        RunStatus::Completed => print_output(&secrets.value(outcome.output)),
        RunStatus::Cancelled => Err(Failure::Cancelled(
            signals.exit_code(),
            anyhow!(
                "run {run_id} cancelled: {}",
                outcome.error.unwrap_or_else(|| "no reason given".into())
            ),
        )),
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
