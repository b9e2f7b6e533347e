//! Loading a workflow: the file, then every workflow its `call_workflow`
//! nodes name, recursively, each parsed and checked before anything runs.
//!
//! Every front end (`awr run`, `awr validate`, a server) loads through
//! [`load_workflow`], so a workflow is accepted or refused the same way
//! everywhere. Files are read, and paths resolved, only through the
//! [`WorkflowSource`] port. Errors name the file (and line:column when the
//! parser knows them), the field, and for a child the chain of calls that
//! led to it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use domain::workflow::{McpTransport, NodeKind, Provider, ToolGrant};
use domain::{WorkflowDef, WorkflowError};

use crate::ports::{SourceError, WorkflowSource};

mod stored;
#[cfg(test)]
mod tests;

pub use stored::Stored;

/// How deeply `call_workflow` may nest: the top-level file is depth 1, so a
/// chain of at most this many files loads.
pub const MAX_CALL_DEPTH: usize = 64;

/// What a workflow is checked against besides its own text.
#[derive(Debug, Clone, Default)]
pub struct LoadRules {
    /// The directory awr runs in, canonical: agents' `workdir`s stay inside
    /// it unless they set `allow_outside_project`.
    pub project: PathBuf,
    /// The built-in tools an HTTP agent may be granted.
    pub tools: Vec<String>,
    /// A directory (canonical) every file a `call_workflow` names must lie
    /// in, symlinks resolved: a server's root, so that a workflow sent over
    /// HTTP reads no other file (its error would quote it). With it, a
    /// called file must also be named `.yaml`, `.yml` or `.json`.
    pub calls_within: Option<PathBuf>,
    /// Places (canonical) no called file may lie in, though inside
    /// `calls_within`: a server's storage, which keeps what clients send and
    /// what runs write, so none of it is ever run as the operator's own.
    pub calls_outside: Vec<PathBuf>,
}

/// The names a workflow file may have where [`LoadRules::calls_within`]
/// holds: what a workflow is, not any file a caller would like read.
pub const WORKFLOW_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Whether `file` is named as a workflow file ([`WORKFLOW_EXTENSIONS`]).
pub fn named_as_workflow(file: &Path) -> bool {
    file.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        WORKFLOW_EXTENSIONS
            .iter()
            .any(|w| e.eq_ignore_ascii_case(w))
    })
}

/// Why a workflow did not load. Every message names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] SourceError),
    /// The file is not a valid workflow.
    #[error("{}", located(file, error))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// What the parser or the domain's checks said.
        error: WorkflowError,
    },
    /// An HTTP agent is granted a tool that does not exist.
    #[error(
        "{}: agents.{agent}.tools: unknown tool `{tool}` (built-in tools: {})",
        file.display(),
        known.join(", ")
    )]
    UnknownTool {
        /// The file.
        file: PathBuf,
        /// The agent.
        agent: String,
        /// The tool it names.
        tool: String,
        /// The tools that exist.
        known: Vec<String>,
    },
    /// An agent's or a command's `workdir` leads out of the project directory.
    #[error(
        "{}: {agent}: `{field}`: {via}{why}; set `allow_outside_project: true` to allow it",
        file.display()
    )]
    WorkdirOutside {
        /// The file.
        file: PathBuf,
        /// The field as written (`workdir`, `command.workdir`).
        field: &'static str,
        /// Who names it: `agents.NAME` or ``node `ID` ``.
        agent: String,
        /// `` `dir` leads to REAL: `` when a symlink decided it, else empty.
        via: String,
        /// Why it lies outside.
        why: String,
    },
    /// A `mock` agent's node has no fixture file where the mock provider looks.
    #[error(
        "{}: node `{node}`: mock agent `{agent}` has no fixture file {}",
        file.display(),
        fixture.display()
    )]
    MissingFixture {
        /// The file.
        file: PathBuf,
        /// The node.
        node: String,
        /// Its agent.
        agent: String,
        /// The fixture file that is missing.
        fixture: PathBuf,
    },
    /// A workflow calls itself, directly or through others.
    #[error(
        "{}: node `{node}` calls {}, which is already being called: workflows must not call themselves",
        file.display(),
        callee.display()
    )]
    Cycle {
        /// The calling file.
        file: PathBuf,
        /// The `call_workflow` node.
        node: String,
        /// The file it calls.
        callee: PathBuf,
    },
    /// A called file that is not a workflow file inside
    /// [`LoadRules::calls_within`] and outside [`LoadRules::calls_outside`]
    /// (one that does not exist is told apart from one outside by nothing).
    #[error(
        "{}: node `{node}` calls {}, which is not a workflow file (.yaml, .yml or .json) under {}, outside the server's storage",
        file.display(),
        callee.display(),
        root.display()
    )]
    CallOutside {
        /// The calling file.
        file: PathBuf,
        /// The `call_workflow` node.
        node: String,
        /// The file it names.
        callee: PathBuf,
        /// The directory calls must stay in.
        root: PathBuf,
    },
    /// `call_workflow` nests deeper than [`MAX_CALL_DEPTH`].
    #[error(
        "{}: node `{node}` calls {}: `call_workflow` nests more than {MAX_CALL_DEPTH} workflows deep",
        file.display(),
        callee.display()
    )]
    TooDeep {
        /// The calling file.
        file: PathBuf,
        /// The `call_workflow` node.
        node: String,
        /// The file it calls.
        callee: PathBuf,
    },
    /// A called workflow did not load; `source` says why.
    #[error("{}: node `{node}` calls {}", file.display(), callee.display())]
    Child {
        /// The calling file.
        file: PathBuf,
        /// The `call_workflow` node.
        node: String,
        /// The file it calls.
        callee: PathBuf,
        /// Why the callee did not load.
        source: Box<LoadError>,
    },
}

impl LoadError {
    /// The file whose text the error quotes (for a called workflow's, that
    /// file, however deep): a parse error quotes what it could not read,
    /// whatever the file holds. A server relays the message of such an
    /// error only about what its client sent. The other errors are about a
    /// file that reads as a workflow, and name only its paths and ids.
    pub fn culprit(&self) -> Option<&Path> {
        match self {
            LoadError::Child { source, .. } => source.culprit(),
            LoadError::Invalid { file, .. } | LoadError::UnknownTool { file, .. } => Some(file),
            _ => None,
        }
    }
}

/// Reads and validates the workflow `file` and, recursively, the workflows
/// its `call_workflow` nodes name (relative to the file that names them), so
/// a bad child is refused before anything runs. A workflow that calls
/// itself, directly or not, and a chain deeper than [`MAX_CALL_DEPTH`] are
/// refused.
///
/// Each file is read, parsed and checked once per load, however many nodes
/// call it: children are shared by canonical path, so a diamond of calls
/// costs one load per file, not one per path through it.
pub fn load_workflow(
    source: &dyn WorkflowSource,
    file: &Path,
    rules: &LoadRules,
) -> Result<Arc<WorkflowDef>, LoadError> {
    let mut loader = Loader {
        source,
        rules,
        fixtures: file.parent().unwrap_or(Path::new(".")).to_path_buf(),
        loaded: HashMap::new(),
        calling: Vec::new(),
    };
    let key = loader.key(file);
    loader.load(file, key)
}

/// State of one [`load_workflow`].
struct Loader<'a> {
    source: &'a dyn WorkflowSource,
    rules: &'a LoadRules,
    /// Where mock fixtures are found: the top-level file's directory (where
    /// the mock provider looks for them).
    fixtures: PathBuf,
    /// Files already loaded, by canonical path.
    loaded: HashMap<PathBuf, Arc<WorkflowDef>>,
    /// The files being loaded, outermost first: a cycle and the depth.
    calling: Vec<PathBuf>,
}

impl Loader<'_> {
    /// Who `file` is: its canonical path, or the path itself when it does
    /// not resolve (reading it will then say why).
    fn key(&self, file: &Path) -> PathBuf {
        self.source
            .canonical(file)
            .unwrap_or_else(|| file.to_path_buf())
    }

    fn load(&mut self, file: &Path, key: PathBuf) -> Result<Arc<WorkflowDef>, LoadError> {
        if let Some(done) = self.loaded.get(&key) {
            return Ok(Arc::clone(done));
        }
        let text = self.source.read(file)?;
        let is_json = file.extension().is_some_and(|ext| ext == "json");
        let parsed = if is_json {
            WorkflowDef::from_json(&text)
        } else {
            WorkflowDef::from_yaml(&text)
        };
        let mut workflow = parsed.map_err(|error| LoadError::Invalid {
            file: file.to_path_buf(),
            error,
        })?;
        check_tools(file, &workflow, &self.rules.tools)?;
        self.check_workdirs(file, &workflow)?;
        self.check_fixtures(file, &workflow)?;
        self.calling.push(key.clone());
        let children = self.load_children(file, &mut workflow);
        self.calling.pop();
        children?;
        let workflow = Arc::new(workflow);
        self.loaded.insert(key, Arc::clone(&workflow));
        Ok(workflow)
    }

    fn load_children(&mut self, file: &Path, workflow: &mut WorkflowDef) -> Result<(), LoadError> {
        let dir = file.parent().unwrap_or(Path::new("."));
        for node in &mut workflow.nodes {
            let NodeKind::CallWorkflow {
                workflow: child,
                resolved,
            } = &mut node.kind
            else {
                continue;
            };
            let callee = dir.join(&*child);
            let file = file.to_path_buf();
            let node = node.id.to_string();
            let real = self.source.canonical(&callee);
            if let Some(root) = &self.rules.calls_within
                && !real.as_ref().is_some_and(|real| {
                    real.starts_with(root)
                        && !self.rules.calls_outside.iter().any(|o| real.starts_with(o))
                        && named_as_workflow(real)
                        && self.source.is_file(real)
                })
            {
                let root = root.clone();
                return Err(LoadError::CallOutside {
                    file,
                    node,
                    callee,
                    root,
                });
            }
            // Who the callee is, as [`Self::key`] says, from the one lookup.
            let key = real.unwrap_or_else(|| callee.clone());
            if self.calling.contains(&key) {
                return Err(LoadError::Cycle { file, node, callee });
            }
            if self.calling.len() >= MAX_CALL_DEPTH {
                return Err(LoadError::TooDeep { file, node, callee });
            }
            let loaded = self.load(&callee, key).map_err(|e| LoadError::Child {
                file: file.clone(),
                node: node.clone(),
                callee: callee.clone(),
                source: Box::new(e),
            })?;
            // A child run that stops waiting would be taken for a failure by
            // its parent: not supported yet (docs/approvals.md).
            if let Some(asks) =
                (loaded.nodes.iter()).find(|n| matches!(n.kind, NodeKind::Approval(_)))
            {
                return Err(LoadError::Invalid {
                    file,
                    error: WorkflowError::Invalid {
                        item: format!("node `{node}`"),
                        message: format!(
                            "calls `{}`, whose node `{}` is an approval: an approval in a called workflow is not supported yet",
                            callee.display(),
                            asks.id
                        ),
                    },
                });
            }
            *resolved = Some(loaded);
        }
        Ok(())
    }

    /// A `workdir` must lie inside the project directory (the domain has
    /// already refused `/` and relative `..` escapes, which need no disk). A
    /// directory that exists is judged by its real path, symlinks resolved,
    /// whether it is named absolute or relative: `work -> /` leads out as
    /// surely as `/` does.
    fn check_workdirs(&self, file: &Path, workflow: &WorkflowDef) -> Result<(), LoadError> {
        let project = &self.rules.project;
        for workdir in workflow.workdirs() {
            let dir = workdir.dir;
            if workdir.allow_outside_project {
                continue;
            }
            let real = self.source.canonical(&project.join(dir));
            let judged = real.as_deref().and_then(Path::to_str).unwrap_or(dir);
            if let Some(why) = domain::workflow::workdir_outside(judged, project) {
                let via = if judged == dir {
                    String::new()
                } else {
                    format!("`{dir}` leads to {judged}: ")
                };
                return Err(LoadError::WorkdirOutside {
                    file: file.to_path_buf(),
                    field: workdir.field,
                    agent: workdir.owner,
                    via,
                    why,
                });
            }
        }
        Ok(())
    }

    /// Every node of a `mock` agent has its fixture file, where the mock
    /// provider will look for it: `<fixtures>/<node>.json`, with
    /// `<fixtures>` the agent's `fixtures:` directory or
    /// `fixtures/<workflow name>`, both under the top-level file's directory.
    fn check_fixtures(&self, file: &Path, workflow: &WorkflowDef) -> Result<(), LoadError> {
        for (node, name, fixture) in own_fixtures(&self.fixtures, workflow) {
            if !self.source.is_file(&fixture) {
                return Err(LoadError::MissingFixture {
                    file: file.to_path_buf(),
                    node: node.to_string(),
                    agent: name.to_owned(),
                    fixture,
                });
            }
        }
        Ok(())
    }
}

/// The fixture file of each node of a `mock` agent in `workflow` alone:
/// (node, agent, file), `base` being the top-level file's directory.
fn own_fixtures<'w>(
    base: &Path,
    workflow: &'w WorkflowDef,
) -> impl Iterator<Item = (&'w domain::NodeId, &'w str, PathBuf)> {
    workflow.nodes.iter().filter_map(move |node| {
        let (name, agent) = workflow.agent_of(node)?;
        if agent.provider != Provider::Mock {
            return None;
        }
        let dir = match &agent.fixtures {
            Some(dir) => base.join(dir),
            None => base.join("fixtures").join(&workflow.name),
        };
        Some((&node.id, name, dir.join(format!("{}.json", node.id))))
    })
}

/// Every fixture file the mock provider will serve a run of the loaded
/// `workflow` (read from `top`) from, the workflows it calls included, each
/// once: what `awr validate` reads through, so that a fixture that does not
/// parse is found before a run.
pub fn mock_fixtures(top: &Path, workflow: &WorkflowDef) -> Vec<PathBuf> {
    let base = top.parent().unwrap_or(Path::new("."));
    let mut files = std::collections::BTreeSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![workflow];
    while let Some(workflow) = todo.pop() {
        if !seen.insert(std::ptr::from_ref(workflow)) {
            continue;
        }
        files.extend(own_fixtures(base, workflow).map(|(_, _, file)| file));
        for node in &workflow.nodes {
            if let NodeKind::CallWorkflow {
                resolved: Some(child),
                ..
            } = &node.kind
            {
                todo.push(child);
            }
        }
    }
    files.into_iter().collect()
}

/// Every tool granted to an HTTP agent must exist: a misspelt name would
/// otherwise just be a tool the model never sees.
fn check_tools(file: &Path, workflow: &WorkflowDef, known: &[String]) -> Result<(), LoadError> {
    for (name, agent) in &workflow.agents {
        let mcp = |g: &&ToolGrant| {
            g.mcp()
                .is_some_and(|m| workflow.mcp_servers.contains_key(m.server()))
        };
        if !agent.provider.is_http() {
            // A CLI agent runs its tools itself: awr holds a call only of
            // one that asks before it (Claude Code's permission prompt), and
            // only of a tool it names whole (not a rule like `Bash(git *)`).
            let asks = agent.provider == Provider::ClaudeCode;
            let gated = (agent.tools.iter())
                .find(|g| g.requires_approval.is_some() && (!asks || g.name.contains('(')));
            if let Some(grant) = gated {
                let message = match asks {
                    true => format!(
                        "`{}`: `requires_approval` takes a tool's name (`Bash`, `server/tool`), not a rule with a pattern",
                        grant.name
                    ),
                    false => format!(
                        "`{}`: `requires_approval` is honoured for agents whose tools awr runs (openai, anthropic) or that ask before a call (claude-code); a {} agent runs its own unasked",
                        grant.name,
                        agent.provider.as_str()
                    ),
                };
                return Err(LoadError::Invalid {
                    file: file.to_path_buf(),
                    error: WorkflowError::Invalid {
                        item: format!("agents.{name}.tools"),
                        message,
                    },
                });
            }
            // Not given to a CLI agent that cannot take them: it would be
            // told of tools it does not have.
            let configured = agent.provider.takes_mcp_servers();
            // A CLI that starts the server where it runs itself would lose
            // a `cwd`.
            let moved = (agent.tools.iter().filter(mcp))
                .filter(|_| !agent.provider.mcp_server_cwd())
                .filter_map(|g| g.mcp().map(|m| m.server()))
                .find(|server| {
                    workflow.mcp_servers.get(*server).is_some_and(|def| {
                        matches!(&def.transport, McpTransport::Stdio { cwd: Some(_), .. })
                    })
                });
            if let (true, Some(server)) = (configured, moved) {
                return Err(LoadError::Invalid {
                    file: file.to_path_buf(),
                    error: WorkflowError::Invalid {
                        item: format!("mcp_servers.{server}.cwd"),
                        message: format!(
                            "a {} agent starts its MCP servers where it runs itself (agents.{name} is granted tools of `{server}`): give no `cwd`, or set the agent's `workdir`",
                            agent.provider.as_str()
                        ),
                    },
                });
            }
            if let Some(grant) = agent.tools.iter().find(mcp).filter(|_| !configured) {
                return Err(LoadError::Invalid {
                    file: file.to_path_buf(),
                    error: WorkflowError::Invalid {
                        item: format!("agents.{name}.tools"),
                        message: format!(
                            "`{}`: a {} agent calls no tool, so it is given no tool of an \
                             MCP server",
                            grant.name,
                            agent.provider.as_str()
                        ),
                    },
                });
            }
            continue;
        }
        let unknown = (agent.tools.iter())
            .filter(|g| g.mcp().is_none())
            .find(|g| !known.contains(&g.name));
        if let Some(grant) = unknown {
            return Err(LoadError::UnknownTool {
                file: file.to_path_buf(),
                agent: name.clone(),
                tool: grant.name.clone(),
                known: known.to_vec(),
            });
        }
    }
    Ok(())
}

/// `file:line:col: message` when the parser knows the place, else `file: message`.
fn located(file: &Path, error: &WorkflowError) -> String {
    match error {
        WorkflowError::Parse { line: Some(_), .. } => format!("{}:{error}", file.display()),
        _ => format!("{}: {error}", file.display()),
    }
}
