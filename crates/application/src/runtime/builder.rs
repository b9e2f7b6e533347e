//! [`RuntimeBuilder`]: the ports a [`Runtime`] is built with, each set by
//! a call of its own, and the wiring `build` does (HTTP models behind the
//! tool loop, observers fanned out).

use std::path::PathBuf;
use std::sync::Arc;

use domain::RuntimeEvent;
use domain::workflow::Provider;

use super::{Providers, Runtime};
use crate::ports::{
    ChatModel, Clock, CommandRunner, ControlChannel, IdGen, McpConnector, Processes, QueryFn,
    RunObserver, RunStore, SpanSink, Tool, Transcripts,
};
use crate::run::{CheckpointPolicy, Executor};
use crate::tool_loop::ToolLoop;
use crate::tools::ToolRouter;

/// Collects the ports of a [`Runtime`]; see [`Runtime::builder`].
pub struct RuntimeBuilder {
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    providers: Providers,
    models: Vec<(Provider, Arc<dyn ChatModel>)>,
    tools: ToolRouter,
    workspace: PathBuf,
    observers: Vec<Arc<dyn RunObserver>>,
    transcripts: Option<Arc<dyn Transcripts>>,
    spans: Option<Arc<dyn SpanSink>>,
    mcp: Option<Arc<dyn McpConnector>>,
    permission_prompt: Option<domain::workflow::McpServerDef>,
    commands: Option<Arc<dyn CommandRunner>>,
    control: Option<Arc<dyn ControlChannel>>,
    processes: Option<Arc<dyn Processes>>,
    checkpoints: CheckpointPolicy,
}

impl RuntimeBuilder {
    /// Every port at its default but the three it needs.
    pub(super) fn new(
        store: Arc<dyn RunStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
    ) -> Self {
        Self {
            store,
            clock,
            ids,
            providers: Providers::new(),
            models: Vec::new(),
            tools: ToolRouter::new(),
            workspace: PathBuf::from("."),
            observers: Vec::new(),
            transcripts: None,
            spans: None,
            mcp: None,
            permission_prompt: None,
            commands: None,
            control: None,
            processes: None,
            checkpoints: CheckpointPolicy::default(),
        }
    }

    /// Serves the agents of `provider` with `query`; replaces what served
    /// it before. An agent whose provider nobody serves fails its node run.
    #[must_use]
    pub fn provider(mut self, provider: Provider, query: Arc<dyn QueryFn>) -> Self {
        self.models.retain(|(p, _)| *p != provider);
        self.providers = self.providers.with(provider, query);
        self
    }

    /// Serves the agents of `provider` with `model`, through the runtime's
    /// tool loop (turns, tool calls through the registered [`Tool`]s,
    /// retries): what an HTTP provider needs.
    #[must_use]
    pub fn chat_model(mut self, provider: Provider, model: Arc<dyn ChatModel>) -> Self {
        self.models.push((provider, model));
        self
    }

    /// Registers a tool agents on chat models may be granted (by name);
    /// a later tool of the same name replaces an earlier one.
    #[must_use]
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools = self.tools.with(tool);
        self
    }

    /// The directory tools are confined to, and an agent's relative
    /// `workdir` is taken in (default: the working directory, `.`).
    #[must_use]
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = dir.into();
        self
    }

    /// Shows every event to `observer` once it is stored, in offset order;
    /// observers are called in the order they were added.
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn RunObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    /// Writes each run's exchange transcript to `transcripts`.
    #[must_use]
    pub fn transcripts(mut self, transcripts: Arc<dyn Transcripts>) -> Self {
        self.transcripts = Some(transcripts);
        self
    }

    /// Hands each run's spans to `sink` as they end (a live export; see
    /// [`SpanSink`]).
    #[must_use]
    pub fn spans(mut self, sink: Arc<dyn SpanSink>) -> Self {
        self.spans = Some(sink);
        self
    }

    /// Starts the MCP servers a workflow declares (`mcp_servers:`) with
    /// `connector`, so its HTTP agents can call their tools. Without one
    /// awr starts no server and HTTP agents see no MCP tool, as in a
    /// replay (a CLI agent is still told of its servers, and starts them
    /// itself).
    #[must_use]
    pub fn mcp(mut self, connector: Arc<dyn McpConnector>) -> Self {
        self.mcp = Some(connector);
        self
    }

    /// Gives CLI agents whose grants ask a person (`requires_approval`)
    /// awr's permission prompt, started as `server` (`awr mcp
    /// --permission-prompt` on this storage).
    #[must_use]
    pub fn permission_prompt(mut self, server: domain::workflow::McpServerDef) -> Self {
        self.permission_prompt = Some(server);
        self
    }

    /// Starts no MCP server: what a replay, which serves their recorded
    /// results, is built with.
    #[must_use]
    pub fn without_mcp(mut self) -> Self {
        self.mcp = None;
        self
    }

    /// Runs `command` nodes with `runner` (without one they fail).
    #[must_use]
    pub fn commands(mut self, runner: Arc<dyn CommandRunner>) -> Self {
        self.commands = Some(runner);
        self
    }

    /// Takes commands from other processes for the runs it writes, and
    /// delivers commands to runs other processes write.
    #[must_use]
    pub fn control(mut self, control: Arc<dyn ControlChannel>) -> Self {
        self.control = Some(control);
        self
    }

    /// Kills the process groups a dead writer of a resumed run left behind.
    #[must_use]
    pub fn processes(mut self, processes: Arc<dyn Processes>) -> Self {
        self.processes = Some(processes);
        self
    }

    /// Sets when snapshots are written at step boundaries.
    #[must_use]
    pub fn checkpoints(mut self, policy: CheckpointPolicy) -> Self {
        self.checkpoints = policy;
        self
    }

    /// The runtime.
    pub fn build(self) -> Runtime {
        let tools = Arc::new(self.tools);
        let mut providers = self.providers;
        for (provider, model) in self.models {
            let tool_loop = ToolLoop::new(
                model,
                Arc::clone(&tools),
                self.workspace.clone(),
                Arc::clone(&self.clock),
                Arc::clone(&self.ids),
            );
            providers = providers.with(provider, Arc::new(tool_loop));
        }
        let mut executor = Executor::new(
            Arc::clone(&self.store),
            Arc::new(providers),
            self.clock,
            self.ids,
        )
        .with_checkpoints(self.checkpoints);
        if let Some(transcripts) = self.transcripts {
            executor = executor.with_transcripts(transcripts);
        }
        if let Some(runner) = self.commands {
            executor = executor.with_commands(runner);
        }
        if let Some(sink) = self.spans {
            executor = executor.with_spans(sink);
        }
        if let Some(connector) = self.mcp {
            executor = executor.with_mcp(connector);
        }
        if let Some(server) = self.permission_prompt {
            executor = executor.with_permission_prompt(server);
        }
        if let Some(control) = self.control {
            executor = executor.with_control(control);
        }
        if let Some(processes) = self.processes {
            executor = executor.with_processes(processes);
        }
        let mut observers = self.observers;
        match observers.len() {
            0 => {}
            1 => executor = executor.with_observer(observers.remove(0)),
            _ => executor = executor.with_observer(Arc::new(Observers(observers))),
        }
        Runtime {
            executor,
            store: self.store,
            tools,
        }
    }
}

/// Several observers, each shown every event in turn.
struct Observers(Vec<Arc<dyn RunObserver>>);

impl RunObserver for Observers {
    fn on_event(&self, event: &RuntimeEvent) {
        for observer in &self.0 {
            observer.on_event(event);
        }
    }
}
