//! [`WorkflowRunner`]: executes a validated workflow graph and records it.
//!
//! The runner's only state is the run's [`RunSnapshot`], and the only way it
//! changes that state is by recording an event and folding it in with
//! [`RunSnapshot::apply`]. Scheduling decisions read the snapshot. So the log,
//! the snapshot on disk and the runner's own view can never disagree, and a
//! later resume can continue from a loaded snapshot with the same code.
//!
//! Order of effects per step: `node:started` is recorded before the provider
//! is called; each agent message becomes an event as it arrives; at the step
//! boundary the snapshot is written, `state:saved` recorded and the log
//! flushed (one sync per step under the default policy). The terminal event
//! is the log's last line; the final snapshot reflects it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use domain::event::{Prompt, WorkflowRef};
use domain::output::parse_structured;
use domain::workflow::{EdgeDef, NodeDef, NodeKind, OnLimit};
use domain::{
    EdgeStatus, EventKind, NodeId, NodeRunId, NodeStatus, Offset, RunId, RunSnapshot, RunStatus,
    RuntimeEvent, SessionId, Timestamp, WorkflowDef,
};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use domain::transcript::{
    ContentBlock, ExchangeDraft, ExchangeType, Fidelity, message_payload, step_payload,
};

use crate::ports::{
    AgentMessage, AgentRequest, AgentResult, Clock, IdGen, QueryError, QueryFn, RunObserver,
    RunStore, StoreError, Transcript, TranscriptError, Transcripts,
};

/// What to run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The validated workflow.
    pub workflow: Arc<WorkflowDef>,
    /// Input of the entry nodes (`data` of their input).
    pub input: Value,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The run.
    pub run_id: RunId,
    /// `Completed` or `Failed`.
    pub status: RunStatus,
    /// The final output (`data` of the last node, or a map when several branches end).
    pub output: Value,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The final snapshot.
    pub snapshot: RunSnapshot,
}

/// The runtime itself could not go on (not an agent failure: those fail the run normally).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The store refused or failed an operation.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The exchange transcript could not be written.
    #[error(transparent)]
    Transcript(#[from] TranscriptError),
}

/// When the runner writes a snapshot at a step boundary.
///
/// The log is flushed at every step boundary; the snapshot is only a cache of
/// `fold(events)`, so writing it less often loses nothing: a reader folds
/// the events after its `lastOffset`. It matters for speed: replacing a file
/// by rename adds a journal commit to the step's sync, which on ext4 doubles
/// it. So a snapshot is written when enough has happened since the last one —
/// for agents that think for seconds that is every step, for fast steps it
/// bounds both the extra syncs and the events a resume must fold. The first
/// (after `flow:started`) and the final snapshot are always written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Write one once this many events were recorded since the last.
    pub max_events: u64,
    /// Write one once this much time passed since the last (milliseconds).
    pub max_interval_ms: u64,
}

impl CheckpointPolicy {
    /// A snapshot at every step boundary.
    pub const EVERY_STEP: CheckpointPolicy = CheckpointPolicy {
        max_events: 0,
        max_interval_ms: 0,
    };
}

impl Default for CheckpointPolicy {
    /// At most 128 events (a resume folds well under a millisecond of events)
    /// or 100 ms behind.
    fn default() -> Self {
        Self {
            max_events: 128,
            max_interval_ms: 100,
        }
    }
}

/// Executes workflows against the ports it was built with.
pub struct WorkflowRunner {
    store: Arc<dyn RunStore>,
    query: Arc<dyn QueryFn>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
    observer: Option<Arc<dyn RunObserver>>,
    transcripts: Option<Arc<dyn Transcripts>>,
    checkpoints: CheckpointPolicy,
}

impl WorkflowRunner {
    /// A runner over the given ports.
    pub fn new(
        store: Arc<dyn RunStore>,
        query: Arc<dyn QueryFn>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
    ) -> Self {
        Self {
            store,
            query,
            clock,
            ids,
            observer: None,
            transcripts: None,
            checkpoints: CheckpointPolicy::default(),
        }
    }

    /// Also writes each run's exchange transcript (seed 000).
    #[must_use]
    pub fn with_transcripts(mut self, transcripts: Arc<dyn Transcripts>) -> Self {
        self.transcripts = Some(transcripts);
        self
    }

    /// Sets when snapshots are written at step boundaries.
    #[must_use]
    pub fn with_checkpoints(mut self, policy: CheckpointPolicy) -> Self {
        self.checkpoints = policy;
        self
    }

    /// Shows every recorded event to `observer` (after it is stored).
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn RunObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Allocates a run id and creates the run in the store; call [`Self::run`] next.
    /// Split in two so a caller can show the run id before the run starts.
    pub async fn create(&self) -> Result<RunId, RunnerError> {
        let run_id = loop {
            if let Ok(id) = RunId::new(self.ids.uuid()) {
                break id;
            }
        };
        // Released at once: `run` takes the run's lock for as long as it writes.
        drop(self.store.create_run(run_id).await?);
        Ok(run_id)
    }

    /// Runs the workflow to its end under `run_id` (created with [`Self::create`]).
    ///
    /// Agent failures end the run with `flow:failed` and an `Ok` outcome;
    /// `Err` means the runtime itself failed (the store, a broken condition),
    /// in which case `system:error` and `flow:failed` are recorded if possible.
    pub async fn run(&self, run_id: RunId, request: RunRequest) -> Result<RunOutcome, RunnerError> {
        self.run_under(run_id, None, request).await
    }

    /// [`Self::run`] as the child of `parent` (a `call_workflow` node).
    async fn run_under(
        &self,
        run_id: RunId,
        parent: Option<RunId>,
        request: RunRequest,
    ) -> Result<RunOutcome, RunnerError> {
        // One writer per run: held until this run's last record is written.
        let _lock = self.store.lock(run_id).await?;
        let mut exec = Execution {
            runner: self,
            parent,
            workflow: request.workflow,
            input: request.input,
            snapshot: RunSnapshot::new(run_id),
            started: self.clock.now(),
            steps_started: 0,
            last_done: None,
            last_snapshot: None,
            candidates: BTreeSet::new(),
            transcript: None,
            reply: Vec::new(),
            open_tool_uses: Vec::new(),
            executions: BTreeMap::new(),
            drops_reported: 0,
            announced_session: None,
            announced_model: None,
        };
        match exec.drive().await {
            Ok(outcome) => Ok(outcome),
            Err(error) => {
                exec.record_system_failure(&error).await;
                Err(error)
            }
        }
    }
}

/// One run in progress.
struct Execution<'r> {
    runner: &'r WorkflowRunner,
    /// The run that called this one, for a child run.
    parent: Option<RunId>,
    workflow: Arc<WorkflowDef>,
    input: Value,
    /// The run's state; changed only through [`Execution::emit`].
    snapshot: RunSnapshot,
    started: Timestamp,
    /// Node executions started so far (`metadata.step_index` of the next one).
    steps_started: u64,
    /// Agent name of the node that completed last (`metadata.previous_agent`).
    last_done: Option<String>,
    /// Offset and time of the last snapshot written (none yet: `None`).
    last_snapshot: Option<(u64, Timestamp)>,
    /// Positions of the nodes whose readiness may have changed: every node at
    /// first, then the target of each edge that resolves. Scheduling then
    /// costs what a step touches, not the size of the graph.
    candidates: BTreeSet<usize>,
    /// The run's exchange transcript, when the runner has one.
    transcript: Option<Arc<dyn Transcript>>,
    /// Blocks of the agent reply in progress, in the order the agent produced them.
    reply: Vec<ContentBlock>,
    /// Ids of the tool calls the agent announced in the reply in progress
    /// (`agent:tool:use`) that have no result yet.
    open_tool_uses: Vec<Option<String>>,
    /// Executions started per node: the transcript's `iteration` of the next one.
    executions: BTreeMap<NodeId, u32>,
    /// Subscriber drops already recorded as `warning` events.
    drops_reported: u64,
    /// The session id `agent:start` named for the invocation in progress.
    announced_session: Option<SessionId>,
    /// The model named in the current agent's `agent:start`, for pricing.
    announced_model: Option<String>,
}

/// One node execution in progress: who it is, where it sits in the transcript.
struct Step {
    ctx: Ctx,
    path: String,
    iteration: u32,
}

/// How a node execution ended, whatever kind of node it was.
struct Finished {
    /// Step kind in the transcript (`agent`, `call_workflow`).
    kind: &'static str,
    /// The node's output data (`null` when it failed).
    data: Value,
    /// `metadata` of the node's output.
    metadata: Value,
    /// Why it failed, if it did.
    error: Option<String>,
    /// Whether a failure lets the run go on.
    continue_on_error: bool,
    /// Agent name, for the next node's `previous_agent`.
    label: Option<String>,
}

impl Finished {
    fn failed(kind: &'static str, error: String) -> Self {
        Finished {
            kind,
            data: Value::Null,
            metadata: json!({}),
            error: Some(error),
            continue_on_error: false,
            label: None,
        }
    }
}

/// Where the scheduler stands with one node.
enum Readiness {
    Run,
    Skip,
    Wait,
}

/// Which node and node execution an event concerns.
type Ctx = (Option<NodeId>, Option<NodeRunId>);

/// Events about the run as a whole.
const RUN_LEVEL: Ctx = (None, None);

/// A node execution that failed, with the message that ends up in `node:failed`.
struct NodeFailure(String);

impl Execution<'_> {
    async fn drive(&mut self) -> Result<RunOutcome, RunnerError> {
        let wf = Arc::clone(&self.workflow);
        self.emit(
            RUN_LEVEL,
            EventKind::FlowStarted {
                workflow: WorkflowRef {
                    extra: Default::default(),
                    name: wf.name.clone(),
                    hash: wf.hash.clone(),
                },
                input: self.input.clone(),
                parent_run_id: self.parent,
                nodes: wf.nodes.iter().map(|n| n.id.clone()).collect(),
                edges: wf.edges.iter().map(|e| e.id.clone()).collect(),
            },
        )
        .await?;
        if let Some(transcripts) = &self.runner.transcripts {
            self.transcript = Some(transcripts.open(self.snapshot.run_id, self.parent).await?);
        }
        let started = step_payload(&wf.name, "workflow", None, None);
        self.record(ExchangeType::RunStarted, "", 0, started)
            .await?;
        self.checkpoint().await?;
        self.candidates = (0..wf.nodes.len()).collect();

        while let Some((node, readiness)) = self.next_node(&wf) {
            match readiness {
                Readiness::Skip => self.skip(&wf, node, "no incoming edge fired").await?,
                Readiness::Run => {
                    if let Err(failure) = self.execute(&wf, node).await? {
                        return self.fail(Some(node.id.clone()), failure.0).await;
                    }
                    self.checkpoint().await?;
                }
                Readiness::Wait => {
                    // Nothing can make progress: what is left can never run.
                    let stuck: Vec<&NodeDef> = wf
                        .nodes
                        .iter()
                        .filter(|n| self.status(&n.id) == NodeStatus::Pending)
                        .collect();
                    for n in stuck {
                        self.skip(&wf, n, "unreachable: its inputs can never resolve")
                            .await?;
                    }
                }
            }
        }
        self.complete(&wf).await
    }

    /// The first node (in file order) that can run or must be skipped; when
    /// none can but some are still pending, one of those with [`Readiness::Wait`].
    fn next_node<'w>(&mut self, wf: &'w WorkflowDef) -> Option<(&'w NodeDef, Readiness)> {
        while let Some(position) = self.candidates.pop_first() {
            let Some(node) = wf.nodes.get(position) else {
                continue;
            };
            if self.status(&node.id) != NodeStatus::Pending {
                continue;
            }
            match self.readiness(wf, &node.id) {
                // Back in the candidates when one of its incoming edges resolves.
                Readiness::Wait => continue,
                ready => return Some((node, ready)),
            }
        }
        wf.nodes
            .iter()
            .find(|n| self.status(&n.id) == NodeStatus::Pending)
            .map(|n| (n, Readiness::Wait))
    }

    fn readiness(&self, wf: &WorkflowDef, node: &NodeId) -> Readiness {
        let mut forward_in = 0;
        let mut any_fired = false;
        for edge in wf.incoming(node) {
            let status = self.edge_status(&edge.id);
            if !edge.is_loop() {
                forward_in += 1;
                if status == EdgeStatus::Pending {
                    return Readiness::Wait;
                }
            }
            any_fired |= status == EdgeStatus::Fired;
        }
        if forward_in == 0 || any_fired {
            Readiness::Run
        } else {
            Readiness::Skip
        }
    }

    /// Runs one node; `Ok(Err(_))` is a failure that stops the run.
    async fn execute(
        &mut self,
        wf: &WorkflowDef,
        node: &NodeDef,
    ) -> Result<Result<(), NodeFailure>, RunnerError> {
        let node_run = NodeRunId::new(self.runner.ids.uuid());
        let (data, previous_agent) = self.gather_input(wf, &node.id);
        let input = json!({
            "data": data,
            "metadata": { "step_index": self.steps_started, "previous_agent": previous_agent },
        });
        self.steps_started += 1;
        let ctx = (Some(node.id.clone()), Some(node_run));
        self.emit(ctx.clone(), EventKind::NodeStarted { input })
            .await?;
        let iteration = {
            let count = self.executions.entry(node.id.clone()).or_insert(0);
            *count += 1;
            *count - 1
        };
        let step = Step {
            ctx,
            path: node.id.to_string(),
            iteration,
        };
        let finished = match &node.kind {
            NodeKind::Agent { .. } => self.agent_step(wf, node, &step, &data).await?,
            NodeKind::CallWorkflow { workflow, resolved } => {
                self.subflow_step(node, &step, workflow, resolved.clone(), &data)
                    .await?
            }
            NodeKind::Command(_) => {
                Finished::failed("command", "command nodes are not supported yet".into())
            }
        };
        let Finished {
            kind,
            data,
            mut metadata,
            error,
            continue_on_error,
            label,
        } = finished;
        let done = step_payload(node.id.as_str(), kind, error.as_deref(), Some(&data));
        self.record(ExchangeType::StepCompleted, &step.path, iteration, done)
            .await?;
        if let Some(error) = error {
            self.emit(
                step.ctx.clone(),
                EventKind::NodeFailed {
                    error: error.clone(),
                    continued: continue_on_error,
                },
            )
            .await?;
            if !continue_on_error {
                return Ok(Err(NodeFailure(format!(
                    "node `{}` failed: {error}",
                    node.id
                ))));
            }
            metadata["error"] = Value::String(error);
        } else {
            let output = json!({ "data": data, "metadata": metadata });
            self.emit(step.ctx.clone(), EventKind::NodeCompleted { output })
                .await?;
        }
        self.last_done = label;
        self.route(wf, node, &data).await
    }

    /// An agent node: the agent seam of the transcript, then the invocation.
    async fn agent_step(
        &mut self,
        wf: &WorkflowDef,
        node: &NodeDef,
        step: &Step,
        data: &Value,
    ) -> Result<Finished, RunnerError> {
        let Some((agent_name, agent)) = wf.agent_of(node) else {
            // Validation guarantees every agent node names a known agent.
            return Ok(Finished::failed(
                "agent",
                format!("node `{}` has no agent", node.id),
            ));
        };
        let step_started = step_payload(node.id.as_str(), "agent", None, None);
        self.record(
            ExchangeType::StepStarted,
            &step.path,
            step.iteration,
            step_started,
        )
        .await?;
        let prompt = render_prompt(data);
        let mut asked = vec![ContentBlock::Text {
            text: prompt.clone(),
            fidelity: Fidelity::Router,
        }];
        if !agent.system_prompt.is_empty() {
            asked.push(ContentBlock::Text {
                text: agent.system_prompt.clone(),
                fidelity: Fidelity::Router,
            });
        }
        let user = message_payload("user", &asked);
        self.record(ExchangeType::MessageUser, &step.path, step.iteration, user)
            .await?;
        self.reply.clear();
        self.open_tool_uses.clear();
        let started = self.runner.clock.now();
        let request = AgentRequest {
            run_id: self.snapshot.run_id,
            workflow: wf.name.clone(),
            node_id: node.id.clone(),
            node_run_id: step
                .ctx
                .1
                .unwrap_or_else(|| NodeRunId::new(self.runner.ids.uuid())),
            agent_name: agent_name.to_owned(),
            agent: agent.clone(),
            prompt,
            resume: None,
        };
        let result = self.invoke(&step.ctx, request).await?;
        let elapsed = self.runner.clock.now().millis_since(started);
        let reply = std::mem::take(&mut self.reply);
        if !reply.is_empty() {
            let assistant = message_payload("assistant", &reply);
            self.record(
                ExchangeType::MessageAssistant,
                &step.path,
                step.iteration,
                assistant,
            )
            .await?;
        }
        let (data, tool_calls, error) = match result {
            Ok((data, tool_calls)) => (data, tool_calls, None),
            Err(failure) => (Value::Null, 0, Some(failure.0)),
        };
        Ok(Finished {
            kind: "agent",
            data,
            metadata: json!({
                "agent_name": agent_name,
                "execution_time_ms": elapsed,
                "tool_calls_count": tool_calls,
            }),
            error,
            continue_on_error: agent.policy.continue_on_error,
            label: Some(agent_name.to_owned()),
        })
    }

    /// A `call_workflow` node: the child is a run of its own (own id, log,
    /// snapshot and transcript, linked both ways); its output is this node's.
    async fn subflow_step(
        &mut self,
        node: &NodeDef,
        step: &Step,
        reference: &str,
        child: Option<Arc<WorkflowDef>>,
        data: &Value,
    ) -> Result<Finished, RunnerError> {
        let step_started = step_payload(node.id.as_str(), "call_workflow", None, None);
        self.record(
            ExchangeType::StepStarted,
            &step.path,
            step.iteration,
            step_started,
        )
        .await?;
        let Some(child) = child else {
            let error = format!("workflow `{reference}` was not loaded before the run");
            return Ok(Finished::failed("call_workflow", error));
        };
        let started = self.runner.clock.now();
        let child_id = self.runner.create().await?;
        self.emit(
            step.ctx.clone(),
            EventKind::SubflowStarted {
                child_run_id: child_id,
                workflow: child.name.clone(),
            },
        )
        .await?;
        let called = step_payload(node.id.as_str(), "call_workflow", None, None);
        self.record_linked(
            ExchangeType::CallWorkflowStarted,
            &step.path,
            step.iteration,
            called,
            Some(child_id),
        )
        .await?;
        let parent = Some(self.snapshot.run_id);
        let request = RunRequest {
            workflow: Arc::clone(&child),
            input: data.clone(),
        };
        // Boxed: a child run is this same machinery one level down.
        let outcome = Box::pin(self.runner.run_under(child_id, parent, request)).await?;
        let elapsed = self.runner.clock.now().millis_since(started);
        self.emit(
            step.ctx.clone(),
            EventKind::SubflowCompleted {
                child_run_id: child_id,
                status: outcome.status,
            },
        )
        .await?;
        let returned = step_payload(
            node.id.as_str(),
            "call_workflow",
            outcome.error.as_deref(),
            Some(&outcome.output),
        );
        self.record_linked(
            ExchangeType::CallWorkflowCompleted,
            &step.path,
            step.iteration,
            returned,
            Some(child_id),
        )
        .await?;
        Ok(Finished {
            kind: "call_workflow",
            data: outcome.output,
            metadata: json!({
                "workflow": child.name,
                "child_run_id": child_id.to_string(),
                "execution_time_ms": elapsed,
                "tool_calls_count": 0,
            }),
            error: outcome
                .error
                .map(|e| format!("child run {child_id} failed: {e}")),
            continue_on_error: false,
            label: None,
        })
    }

    /// Calls the agent and records its messages; returns its output data and tool count.
    async fn invoke(
        &mut self,
        ctx: &Ctx,
        request: AgentRequest,
    ) -> Result<Result<(Value, u64), NodeFailure>, RunnerError> {
        let agent = request.agent.clone();
        let prompt = request.prompt.clone();
        let started = self.runner.clock.now();
        let mut stream = match self.runner.query.query(request).await {
            Ok(stream) => stream,
            Err(error) => return self.agent_failed(ctx, &error).await,
        };
        let mut announced = false;
        let mut tool_calls = 0u64;
        while let Some(item) = stream.next().await {
            let message = match item {
                Ok(message) => message,
                Err(error) => return self.agent_failed(ctx, &error).await,
            };
            if !announced {
                announced = true;
                let (session_id, model) = match &message {
                    AgentMessage::Session { session_id, model } => {
                        (session_id.clone(), model.clone())
                    }
                    AgentMessage::Completed(AgentResult {
                        session_id: Some(s),
                        ..
                    }) => (s.clone(), agent.model.clone()),
                    // The provider names no session: the runtime's own id stands in.
                    _ => (self.runtime_session_id(), agent.model.clone()),
                };
                let model = model.or_else(|| agent.model.clone());
                let prompt = Prompt::Text(prompt.clone());
                self.announced_session = Some(session_id.clone());
                self.announced_model.clone_from(&model);
                self.emit(
                    ctx.clone(),
                    EventKind::AgentStart {
                        session_id,
                        model,
                        prompt,
                    },
                )
                .await?;
                if matches!(message, AgentMessage::Session { .. }) {
                    continue;
                }
            }
            let kind = match message {
                AgentMessage::Session { .. } => continue,
                AgentMessage::ThinkingDelta {
                    content,
                    token_count,
                } => EventKind::AgentThinkingDelta {
                    content,
                    token_count,
                },
                AgentMessage::Thinking {
                    content,
                    token_count,
                    signature,
                } => EventKind::AgentThinking {
                    content,
                    token_count,
                    signature,
                },
                AgentMessage::TextDelta { content } => EventKind::AgentTextDelta { content },
                AgentMessage::Text { content } => EventKind::AgentText { content },
                AgentMessage::ToolUse { id, name, input } => {
                    tool_calls += 1;
                    EventKind::AgentToolUse {
                        tool_use_id: id,
                        tool_name: name,
                        tool_input: input,
                    }
                }
                AgentMessage::Tool {
                    id,
                    name,
                    input,
                    output,
                    duration_ms,
                    error,
                } => {
                    // A call announced by its use was counted then.
                    if !self.open_tool_uses.contains(&id) {
                        tool_calls += 1;
                    }
                    EventKind::AgentTool {
                        tool_use_id: id,
                        tool_name: name,
                        tool_input: input,
                        tool_output: output,
                        duration_ms,
                        error,
                    }
                }
                AgentMessage::Error {
                    error_type,
                    message,
                    details,
                } => EventKind::AgentError {
                    error_type,
                    message,
                    details,
                },
                AgentMessage::Warning { message, details } => {
                    EventKind::Warning { message, details }
                }
                AgentMessage::ToolStarted {
                    call_id,
                    name,
                    input,
                } => EventKind::ToolStarted {
                    call_id,
                    tool_name: name,
                    tool_input: input,
                },
                AgentMessage::ToolFinished {
                    call_id,
                    name,
                    output,
                    duration_ms,
                } => {
                    tool_calls += 1;
                    match output {
                        Ok(tool_output) => EventKind::ToolCompleted {
                            call_id,
                            tool_name: name,
                            tool_output,
                            duration_ms,
                        },
                        Err(error) => EventKind::ToolFailed {
                            call_id,
                            tool_name: name,
                            error,
                            duration_ms,
                        },
                    }
                }
                AgentMessage::RateLimited {
                    provider,
                    attempt,
                    retry_after_ms,
                } => EventKind::RateLimited {
                    provider,
                    attempt,
                    retry_after_ms,
                },
                AgentMessage::Completed(result) => {
                    let elapsed = self.runner.clock.now().millis_since(started);
                    return self
                        .agent_completed(ctx, &agent, result, elapsed, tool_calls)
                        .await;
                }
            };
            self.emit(ctx.clone(), kind).await?;
        }
        let error = QueryError::Agent {
            error_type: "error_during_execution".into(),
            message: "the agent's output ended without a result".into(),
            details: None,
        };
        self.agent_failed(ctx, &error).await
    }

    /// Checks the result against the agent's limits and schema, then records `agent:complete`.
    async fn agent_completed(
        &mut self,
        ctx: &Ctx,
        agent: &domain::workflow::AgentDef,
        result: AgentResult,
        elapsed_ms: u64,
        tool_calls: u64,
    ) -> Result<Result<(Value, u64), NodeFailure>, RunnerError> {
        if let Some(max) = agent.max_turns.filter(|max| result.num_turns > *max) {
            let error = QueryError::Agent {
                error_type: "error_max_turns".into(),
                message: format!(
                    "the agent took {} turns; max_turns is {max}",
                    result.num_turns
                ),
                details: None,
            };
            return self.agent_failed(ctx, &error).await;
        }
        let structured = match &agent.output_schema {
            Some(schema) => match parse_structured(&result.text, schema) {
                Ok(value) => Some(value),
                Err(e) => {
                    let error = QueryError::Agent {
                        error_type: "error_output_schema".into(),
                        message: e.to_string(),
                        details: None,
                    };
                    return self.agent_failed(ctx, &error).await;
                }
            },
            None => None,
        };
        let total_cost_usd = result.total_cost_usd.or_else(|| self.price(&result));
        let data = structured
            .clone()
            .unwrap_or_else(|| Value::String(result.text.clone()));
        let streamed_text = self
            .reply
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { .. }));
        if !streamed_text && !result.text.is_empty() {
            self.reply.push(ContentBlock::Text {
                text: result.text.clone(),
                fidelity: Fidelity::AgentEmitted,
            });
        }
        self.emit(
            ctx.clone(),
            EventKind::AgentComplete {
                result: result.text,
                structured_output: structured,
                usage: result.usage,
                model_usage: result.model_usage,
                total_cost_usd,
                duration_ms: result.duration_ms.unwrap_or(elapsed_ms),
                num_turns: result.num_turns,
                session_id: result
                    .session_id
                    .filter(|s| Some(s) != self.announced_session.as_ref()),
            },
        )
        .await?;
        Ok(Ok((data, tool_calls)))
    }

    /// The cost of a result whose provider reported none, from the
    /// workflow's price table: by the one model the usage names, else the
    /// model the agent started with. Unknown price: no cost.
    fn price(&self, result: &AgentResult) -> Option<f64> {
        let reported = match &result.model_usage {
            Some(models) if models.len() == 1 => models.keys().next(),
            _ => None,
        };
        let model = reported.or(self.announced_model.as_ref())?;
        self.workflow.pricing.cost(model, &result.usage)
    }

    async fn agent_failed<T>(
        &mut self,
        ctx: &Ctx,
        error: &QueryError,
    ) -> Result<Result<T, NodeFailure>, RunnerError> {
        let (message, details) = match error {
            QueryError::Agent {
                message, details, ..
            } => (message.clone(), details.clone()),
            other => (other.to_string(), None),
        };
        self.emit(
            ctx.clone(),
            EventKind::AgentError {
                error_type: error.error_type().to_owned(),
                message,
                details,
            },
        )
        .await?;
        Ok(Err(NodeFailure(error.to_string())))
    }

    /// Decides each outgoing edge of a finished node. A loop edge that fires
    /// takes precedence: the loop body goes back to pending and the node's
    /// other edges stay undecided until it finishes again. A condition that
    /// cannot be evaluated fails the run, naming the edge: guessing a branch
    /// would hide a bug in the workflow.
    async fn route(
        &mut self,
        wf: &WorkflowDef,
        node: &NodeDef,
        data: &Value,
    ) -> Result<Result<(), NodeFailure>, RunnerError> {
        let edges: Vec<&EdgeDef> = wf.outgoing(&node.id).collect();
        // Building the variables copies every output so far: only when some edge asks.
        let vars = if edges.iter().any(|e| e.when.is_some()) {
            self.condition_vars(data)
        } else {
            Map::new()
        };
        let mut decisions = Vec::with_capacity(edges.len());
        for edge in &edges {
            match evaluate(edge, &vars) {
                Ok(holds) => decisions.push(holds),
                Err(failure) => return Ok(Err(failure)),
            }
        }
        for (edge, holds) in edges.iter().zip(&decisions) {
            let Some(limit) = edge.max_iterations else {
                continue;
            };
            let count = self
                .snapshot
                .loop_counters
                .get(&edge.id)
                .copied()
                .unwrap_or(0);
            if *holds && count < limit {
                let body = wf.loop_body(edge);
                self.emit(
                    (Some(node.id.clone()), None),
                    EventKind::EdgeFired {
                        edge_id: edge.id.clone(),
                        from: edge.from.clone(),
                        to: edge.to.clone(),
                        iteration: Some(count + 1),
                        reset_nodes: body.nodes,
                        reset_edges: body.edges,
                    },
                )
                .await?;
                return Ok(Ok(()));
            }
        }
        // No loop edge fired: one that still holds at its limit ends the run
        // unless it says `on_limit: continue`.
        let exhausted = edges.iter().zip(&decisions).find_map(|(edge, holds)| {
            let limit = edge.max_iterations.filter(|_| *holds)?;
            (edge.on_limit == OnLimit::Fail).then_some((edge, limit))
        });
        if let Some((edge, limit)) = exhausted {
            return Ok(Err(NodeFailure(format!(
                "edge `{}` reached its loop limit (max_iterations: {limit}) and its condition still holds; \
                 give it `on_limit: continue` to go on instead",
                edge.id
            ))));
        }
        for (edge, holds) in edges.iter().zip(decisions) {
            let ctx = (Some(node.id.clone()), None);
            let kind = if edge.is_loop() {
                let reason = if holds {
                    "loop limit reached"
                } else {
                    "condition false"
                };
                skipped(edge, reason)
            } else if holds {
                EventKind::EdgeFired {
                    edge_id: edge.id.clone(),
                    from: edge.from.clone(),
                    to: edge.to.clone(),
                    iteration: None,
                    reset_nodes: Vec::new(),
                    reset_edges: Vec::new(),
                }
            } else {
                skipped(edge, "condition false")
            };
            self.emit(ctx, kind).await?;
        }
        Ok(Ok(()))
    }

    /// `output` (the finished node's data), `outputs` (every finished node's data), `input`.
    fn condition_vars(&self, data: &Value) -> Map<String, Value> {
        let outputs: Map<String, Value> = self
            .snapshot
            .outputs
            .iter()
            .map(|(id, out)| {
                (
                    id.to_string(),
                    out.get("data").cloned().unwrap_or(Value::Null),
                )
            })
            .collect();
        let mut vars = Map::new();
        vars.insert("output".into(), data.clone());
        vars.insert("outputs".into(), Value::Object(outputs));
        vars.insert("input".into(), self.input.clone());
        vars
    }

    /// The input of a node: the run input for entry nodes, else the data of
    /// the edges that fired into it (a loop edge's data wins: it is the newest).
    fn gather_input(&self, wf: &WorkflowDef, node: &NodeId) -> (Value, Option<String>) {
        let fired: Vec<&EdgeDef> = wf
            .incoming(node)
            .filter(|e| self.edge_status(&e.id) == EdgeStatus::Fired)
            .collect();
        let chosen: Vec<&EdgeDef> = match fired.iter().find(|e| e.is_loop()) {
            Some(loop_edge) => vec![*loop_edge],
            None => fired,
        };
        let data_of = |id: &NodeId| {
            self.snapshot
                .outputs
                .get(id)
                .and_then(|o| o.get("data"))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let agent_of = |id: &NodeId| {
            wf.node(id)
                .and_then(|n| wf.agent_of(n))
                .map(|(name, _)| name.to_owned())
        };
        match chosen.as_slice() {
            [] => (self.input.clone(), None),
            [edge] => (data_of(&edge.from), agent_of(&edge.from)),
            many => {
                let merged: Map<String, Value> = many
                    .iter()
                    .map(|e| (e.from.to_string(), data_of(&e.from)))
                    .collect();
                (Value::Object(merged), self.last_done.clone())
            }
        }
    }

    async fn skip(
        &mut self,
        wf: &WorkflowDef,
        node: &NodeDef,
        reason: &str,
    ) -> Result<(), RunnerError> {
        let ctx = (Some(node.id.clone()), None);
        self.emit(
            ctx.clone(),
            EventKind::NodeSkipped {
                reason: reason.to_owned(),
            },
        )
        .await?;
        let edges: Vec<&EdgeDef> = wf.outgoing(&node.id).collect();
        for edge in edges {
            self.emit(ctx.clone(), skipped(edge, "source skipped"))
                .await?;
        }
        Ok(())
    }

    async fn complete(&mut self, wf: &WorkflowDef) -> Result<RunOutcome, RunnerError> {
        let output = self.final_output(wf);
        let done = step_payload(&wf.name, "workflow", None, Some(&output));
        self.record(ExchangeType::RunCompleted, "", 0, done).await?;
        let duration_ms = self.runner.clock.now().millis_since(self.started);
        self.emit(
            RUN_LEVEL,
            EventKind::FlowCompleted {
                output: output.clone(),
                duration_ms,
            },
        )
        .await?;
        self.finish().await?;
        Ok(RunOutcome {
            run_id: self.snapshot.run_id,
            status: RunStatus::Completed,
            output,
            error: None,
            snapshot: self.snapshot.clone(),
        })
    }

    async fn fail(
        &mut self,
        node: Option<NodeId>,
        error: String,
    ) -> Result<RunOutcome, RunnerError> {
        let duration_ms = self.runner.clock.now().millis_since(self.started);
        let name = self.workflow.name.clone();
        let done = step_payload(&name, "workflow", Some(&error), None);
        self.record(ExchangeType::RunCompleted, "", 0, done).await?;
        self.emit(
            RUN_LEVEL,
            EventKind::FlowFailed {
                error: error.clone(),
                failed_node: node,
                duration_ms,
            },
        )
        .await?;
        self.finish().await?;
        Ok(RunOutcome {
            run_id: self.snapshot.run_id,
            status: RunStatus::Failed,
            output: Value::Null,
            error: Some(error),
            snapshot: self.snapshot.clone(),
        })
    }

    /// The data of the nodes where execution ended (done, and none of their
    /// edges fired): one such node gives its data, several give a map by node id.
    fn final_output(&self, wf: &WorkflowDef) -> Value {
        let mut leaves: BTreeMap<String, Value> = BTreeMap::new();
        for node in &wf.nodes {
            if self.status(&node.id) != NodeStatus::Done {
                continue;
            }
            let passed_on = wf
                .outgoing(&node.id)
                .any(|e| self.edge_status(&e.id) == EdgeStatus::Fired);
            if !passed_on {
                let data = self
                    .snapshot
                    .outputs
                    .get(&node.id)
                    .and_then(|o| o.get("data"));
                leaves.insert(node.id.to_string(), data.cloned().unwrap_or(Value::Null));
            }
        }
        match leaves.len() {
            0 => Value::Null,
            1 => leaves.into_values().next().unwrap_or(Value::Null),
            _ => Value::Object(leaves.into_iter().collect()),
        }
    }

    /// Step boundary: the snapshot and its `state:saved` marker when one is
    /// due (see [`CheckpointPolicy`]), then one flush for all of it.
    async fn checkpoint(&mut self) -> Result<(), RunnerError> {
        self.report_drops().await?;
        let now = self.runner.clock.now();
        let policy = self.runner.checkpoints;
        let due = match self.last_snapshot {
            None => true,
            Some((offset, at)) => {
                self.snapshot.last_offset - offset >= policy.max_events
                    || now.millis_since(at) >= policy.max_interval_ms
            }
        };
        if due {
            self.runner.store.save_snapshot(&self.snapshot).await?;
            self.last_snapshot = Some((self.snapshot.last_offset, now));
            let snapshot_offset = Offset::new(self.snapshot.last_offset)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            self.emit(RUN_LEVEL, EventKind::StateSaved { snapshot_offset })
                .await?;
        }
        self.runner.store.flush(self.snapshot.run_id).await?;
        Ok(())
    }

    /// Records, as a `warning`, events live transcript subscribers missed
    /// since the last report: the audit trail shows a consumer saw less.
    async fn report_drops(&mut self) -> Result<(), RunnerError> {
        let dropped = self.transcript.as_ref().map_or(0, |t| t.dropped());
        if dropped > self.drops_reported {
            let missed = dropped - self.drops_reported;
            self.drops_reported = dropped;
            let message = format!("live transcript subscribers missed {missed} event(s)");
            let details = Some(json!({ "dropped": missed, "droppedTotal": dropped }));
            self.emit(RUN_LEVEL, EventKind::Warning { message, details })
                .await?;
        }
        Ok(())
    }

    /// After the terminal event: the log made durable, then the final
    /// snapshot (no marker follows the terminal event). Once the terminal
    /// event is durable the run's outcome is recorded: a snapshot that cannot
    /// be saved then (a full disk) is only a stale cache, which readers bring
    /// up to date from the log (design §4.2), so it is a warning, not a
    /// failure that would contradict the log.
    async fn finish(&mut self) -> Result<(), RunnerError> {
        let run_id = self.snapshot.run_id;
        self.runner.store.flush(run_id).await?;
        if let Err(e) = self.runner.store.save_snapshot(&self.snapshot).await {
            tracing::warn!(run = %run_id, error = %e, "cannot save the final snapshot; the event log holds the outcome");
        }
        if let Some(transcript) = self.transcript.take() {
            transcript.close().await;
        }
        Ok(())
    }

    /// Writes one transcript line, when the run has a transcript.
    async fn record(
        &mut self,
        kind: ExchangeType,
        path: &str,
        iteration: u32,
        payload: Value,
    ) -> Result<(), RunnerError> {
        self.record_linked(kind, path, iteration, payload, None)
            .await
    }

    /// [`Self::record`], naming a child run (`step.call_workflow.*`).
    async fn record_linked(
        &mut self,
        kind: ExchangeType,
        path: &str,
        iteration: u32,
        payload: Value,
        child_run_id: Option<RunId>,
    ) -> Result<(), RunnerError> {
        let Some(transcript) = &self.transcript else {
            return Ok(());
        };
        let draft = ExchangeDraft {
            child_run_id,
            kind,
            path: path.to_owned(),
            iteration,
            timestamp: self.runner.clock.now(),
            payload,
        };
        transcript.append(draft).await?;
        Ok(())
    }

    /// Adds an agent event to the reply in progress (deltas join the block
    /// they continue) and writes the transcript lines of a tool the agent ran.
    async fn collect_reply(&mut self, event: &RuntimeEvent) -> Result<(), RunnerError> {
        let fidelity = Fidelity::AgentEmitted;
        match &event.kind {
            EventKind::AgentThinkingDelta { content, .. } => {
                if let Some(ContentBlock::Thinking { thinking, .. }) = self.reply.last_mut() {
                    thinking.push_str(content);
                } else {
                    self.reply.push(ContentBlock::Thinking {
                        thinking: content.clone(),
                        signature: None,
                        fidelity,
                    });
                }
            }
            EventKind::AgentThinking {
                content, signature, ..
            } => match self.reply.last_mut() {
                // The whole block after its deltas: it only adds the signature.
                Some(ContentBlock::Thinking {
                    thinking,
                    signature: pending @ None,
                    ..
                }) if thinking == content => pending.clone_from(signature),
                _ => self.reply.push(ContentBlock::Thinking {
                    thinking: content.clone(),
                    signature: signature.clone(),
                    fidelity,
                }),
            },
            EventKind::AgentTextDelta { content } => {
                if let Some(ContentBlock::Text { text, .. }) = self.reply.last_mut() {
                    text.push_str(content);
                } else {
                    self.reply.push(ContentBlock::Text {
                        text: content.clone(),
                        fidelity,
                    });
                }
            }
            EventKind::AgentText { content } => self.reply.push(ContentBlock::Text {
                text: content.clone(),
                fidelity,
            }),
            EventKind::AgentToolUse {
                tool_use_id,
                tool_name,
                tool_input,
            } => {
                self.open_tool_uses.push(tool_use_id.clone());
                self.agent_tool_use(event, tool_use_id, tool_name, tool_input)
                    .await?;
            }
            EventKind::AgentTool {
                tool_use_id,
                tool_name,
                tool_input,
                tool_output,
                error,
                ..
            } => {
                // The use is already in place when the agent announced it;
                // a provider that reports only the whole call gets it here.
                match self.open_tool_uses.iter().position(|id| id == tool_use_id) {
                    Some(at) => {
                        self.open_tool_uses.remove(at);
                    }
                    None => {
                        self.agent_tool_use(event, tool_use_id, tool_name, tool_input)
                            .await?;
                    }
                }
                let tool_id = tool_use_id.clone().unwrap_or_default();
                self.reply.push(ContentBlock::ToolResult {
                    tool_id,
                    tool_content: if error.is_some() {
                        Value::Null
                    } else {
                        tool_output.clone()
                    },
                    fidelity,
                });
                let (path, iteration) = self.transcript_place(event);
                let mut result =
                    json!({"name": tool_name, "output": tool_output, "fidelity": fidelity});
                if let Some(id) = tool_use_id {
                    result["call_id"] = Value::String(id.clone());
                }
                if let Some(error) = error {
                    result["error"] = Value::String(error.clone());
                }
                self.record(ExchangeType::ToolResult, &path, iteration, result)
                    .await?;
            }
            EventKind::ToolStarted {
                call_id,
                tool_name,
                tool_input,
            } => {
                let fidelity = Fidelity::Router;
                self.reply.push(ContentBlock::ToolUse {
                    tool_name: tool_name.clone(),
                    tool_id: call_id.clone(),
                    tool_input: tool_input.clone(),
                    fidelity,
                });
                let call = json!({"name": tool_name, "call_id": call_id, "input": tool_input, "fidelity": fidelity});
                let (path, iteration) = self.transcript_place(event);
                self.record(ExchangeType::ToolCall, &path, iteration, call)
                    .await?;
            }
            EventKind::ToolCompleted {
                call_id,
                tool_name,
                tool_output,
                duration_ms,
            } => {
                let result = json!({"name": tool_name, "call_id": call_id, "output": tool_output,
                    "duration_ms": duration_ms, "fidelity": Fidelity::Router});
                self.router_result(event, call_id, tool_output.clone(), result)
                    .await?;
            }
            EventKind::ToolFailed {
                call_id,
                tool_name,
                error,
                duration_ms,
            } => {
                let result = json!({"name": tool_name, "call_id": call_id, "output": null,
                    "error": error, "duration_ms": duration_ms, "fidelity": Fidelity::Router});
                self.router_result(event, call_id, Value::Null, result)
                    .await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The `tool_use` block and the `tool.call` line of a tool call the
    /// agent made, with the provider's own id (none when it gave none: an id
    /// is never invented, it is how a reader joins a call to its result).
    async fn agent_tool_use(
        &mut self,
        event: &RuntimeEvent,
        tool_use_id: &Option<String>,
        tool_name: &str,
        tool_input: &Value,
    ) -> Result<(), RunnerError> {
        let fidelity = Fidelity::AgentEmitted;
        self.reply.push(ContentBlock::ToolUse {
            tool_name: tool_name.to_owned(),
            tool_id: tool_use_id.clone().unwrap_or_default(),
            tool_input: tool_input.clone(),
            fidelity,
        });
        let mut call = json!({"name": tool_name, "input": tool_input, "fidelity": fidelity});
        if let Some(id) = tool_use_id {
            call["call_id"] = Value::String(id.clone());
        }
        let (path, iteration) = self.transcript_place(event);
        self.record(ExchangeType::ToolCall, &path, iteration, call)
            .await
    }

    /// The reply block and the `tool.result` line of a tool the runtime ran.
    async fn router_result(
        &mut self,
        event: &RuntimeEvent,
        call_id: &str,
        content: Value,
        line: Value,
    ) -> Result<(), RunnerError> {
        self.reply.push(ContentBlock::ToolResult {
            tool_id: call_id.to_owned(),
            tool_content: content,
            fidelity: Fidelity::Router,
        });
        let (path, iteration) = self.transcript_place(event);
        self.record(ExchangeType::ToolResult, &path, iteration, line)
            .await
    }

    /// The transcript's step path and iteration of an agent's event.
    fn transcript_place(&self, event: &RuntimeEvent) -> (String, u32) {
        let path = event
            .node_id
            .as_ref()
            .map(|n| n.to_string())
            .unwrap_or_default();
        let iteration = event
            .node_id
            .as_ref()
            .and_then(|n| self.executions.get(n))
            .map_or(0, |n| n.saturating_sub(1));
        (path, iteration)
    }

    /// Records the runtime's own failure, best effort: the store may be what failed.
    async fn record_system_failure(&mut self, error: &RunnerError) {
        if self.snapshot.status.is_terminal() || self.snapshot.last_offset == 0 {
            return;
        }
        let message = error.to_string();
        let duration_ms = self.runner.clock.now().millis_since(self.started);
        let attempt = async {
            self.emit(
                RUN_LEVEL,
                EventKind::SystemError {
                    message: message.clone(),
                    details: None,
                },
            )
            .await?;
            self.emit(
                RUN_LEVEL,
                EventKind::FlowFailed {
                    error: message.clone(),
                    failed_node: None,
                    duration_ms,
                },
            )
            .await?;
            self.finish().await
        };
        if let Err(e) = attempt.await {
            tracing::error!(run = %self.snapshot.run_id, error = %e, "could not record the runtime failure");
        }
    }

    /// Records one event: builds the envelope, appends it, folds it into the snapshot, shows it.
    async fn emit(
        &mut self,
        (node_id, node_run_id): Ctx,
        kind: EventKind,
    ) -> Result<(), RunnerError> {
        let offset = Offset::new(self.snapshot.last_offset + 1)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let event = RuntimeEvent {
            id: self.runner.ids.uuid().to_string(),
            offset,
            timestamp: self.runner.clock.now(),
            run_id: self.snapshot.run_id,
            node_id,
            node_run_id,
            kind,
            extra: Default::default(),
        };
        self.runner
            .store
            .append(self.snapshot.run_id, std::slice::from_ref(&event))
            .await?;
        self.snapshot.apply(&event);
        if let EventKind::EdgeFired { to, .. } | EventKind::EdgeSkipped { to, .. } = &event.kind
            && let Some(position) = self.workflow.position(to)
        {
            self.candidates.insert(position);
        }
        if let Some(observer) = &self.runner.observer {
            observer.on_event(&event);
        }
        let type_name = event.kind.type_name();
        if type_name.starts_with("agent:") || type_name.starts_with("tool:") {
            self.collect_reply(&event).await?;
        }
        Ok(())
    }

    fn runtime_session_id(&self) -> SessionId {
        SessionId::from_uuid(self.runner.ids.uuid())
    }

    fn status(&self, node: &NodeId) -> NodeStatus {
        self.snapshot
            .node_status
            .get(node)
            .copied()
            .unwrap_or(NodeStatus::Pending)
    }

    fn edge_status(&self, edge: &str) -> EdgeStatus {
        self.snapshot
            .edge_status
            .get(edge)
            .copied()
            .unwrap_or(EdgeStatus::Pending)
    }
}

fn evaluate(edge: &EdgeDef, vars: &Map<String, Value>) -> Result<bool, NodeFailure> {
    let Some(condition) = &edge.when else {
        return Ok(true);
    };
    condition.evaluate(vars).map_err(|e| {
        NodeFailure(format!(
            "edge `{}`: condition could not be evaluated: {e}",
            edge.id
        ))
    })
}

fn skipped(edge: &EdgeDef, reason: &str) -> EventKind {
    EventKind::EdgeSkipped {
        edge_id: edge.id.clone(),
        from: edge.from.clone(),
        to: edge.to.clone(),
        reason: reason.to_owned(),
    }
}

/// What the agent is asked: text as is, anything else as pretty JSON.
fn render_prompt(data: &Value) -> String {
    match data {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ports::{MockClock, MockIdGen, MockQueryFn, MockRunStore};
    use domain::event::Usage;
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// What each node's agent does, by node id: one script per call.
    type Scripts = HashMap<&'static str, Vec<Vec<Result<AgentMessage, QueryError>>>>;

    struct Harness {
        runner: WorkflowRunner,
        events: Arc<Mutex<Vec<RuntimeEvent>>>,
        snapshots: Arc<Mutex<Vec<RunSnapshot>>>,
        prompts: Arc<Mutex<Vec<(String, String)>>>,
        /// Makes saving a snapshot of an ended run fail (a full disk).
        fail_final_save: Arc<std::sync::atomic::AtomicBool>,
    }

    fn done(text: &str) -> Result<AgentMessage, QueryError> {
        Ok(AgentMessage::Completed(AgentResult {
            text: text.into(),
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            },
            num_turns: 1,
            ..AgentResult::default()
        }))
    }

    fn session(id: &str) -> Result<AgentMessage, QueryError> {
        Ok(AgentMessage::Session {
            session_id: SessionId::new(id).unwrap(),
            model: None,
        })
    }

    fn harness(scripts: Scripts, fail_append_at: Option<u64>) -> Harness {
        let events = Arc::new(Mutex::new(Vec::new()));
        let snapshots = Arc::new(Mutex::new(Vec::new()));
        let prompts = Arc::new(Mutex::new(Vec::new()));

        let mut store = MockRunStore::new();
        store
            .expect_create_run()
            .returning(|id| Ok(crate::ports::RunLock::new(id, ())));
        store
            .expect_lock()
            .returning(|id| Ok(crate::ports::RunLock::new(id, ())));
        let log = Arc::clone(&events);
        store.expect_append().returning(move |_, batch| {
            let mut log = log.lock().unwrap();
            for e in batch {
                if Some(e.offset.get()) == fail_append_at {
                    return Err(StoreError::Io("disk full".into()));
                }
                assert_eq!(
                    e.offset.get(),
                    log.len() as u64 + 1,
                    "offsets must have no gaps"
                );
                log.push(e.clone());
            }
            Ok(())
        });
        store.expect_flush().returning(|_| Ok(()));
        let saved = Arc::clone(&snapshots);
        let fail_final_save = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fail_final = Arc::clone(&fail_final_save);
        store.expect_save_snapshot().returning(move |s| {
            if s.status.is_terminal() && fail_final.load(Ordering::SeqCst) {
                return Err(StoreError::Io("disk full".into()));
            }
            saved.lock().unwrap().push(s.clone());
            Ok(())
        });

        let scripts = Mutex::new(scripts);
        let seen = Arc::clone(&prompts);
        let mut query = MockQueryFn::new();
        query.expect_query().returning(move |req| {
            seen.lock()
                .unwrap()
                .push((req.node_id.to_string(), req.prompt.clone()));
            let mut scripts = scripts.lock().unwrap();
            let calls = scripts
                .get_mut(req.node_id.as_str())
                .expect("unscripted node");
            let script = calls.remove(0);
            Ok(Box::pin(futures::stream::iter(script)))
        });

        let now = AtomicU64::new(1_767_225_600_000);
        let mut clock = MockClock::new();
        clock
            .expect_now()
            .returning(move || Timestamp::from_millis(now.fetch_add(1, Ordering::SeqCst) as i64));
        let counter = AtomicU64::new(1);
        let mut ids = MockIdGen::new();
        ids.expect_uuid().returning(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let mut bytes = [0u8; 16];
            bytes[8..].copy_from_slice(&n.to_be_bytes());
            uuid::Builder::from_random_bytes(bytes).into_uuid()
        });

        Harness {
            runner: WorkflowRunner::new(
                Arc::new(store),
                Arc::new(query),
                Arc::new(clock),
                Arc::new(ids),
            )
            .with_checkpoints(CheckpointPolicy::EVERY_STEP),
            events,
            snapshots,
            prompts,
            fail_final_save,
        }
    }

    async fn run(h: &Harness, yaml: &str, input: Value) -> Result<RunOutcome, RunnerError> {
        let workflow = Arc::new(WorkflowDef::from_yaml(yaml).unwrap());
        let run_id = h.runner.create().await.unwrap();
        h.runner.run(run_id, RunRequest { workflow, input }).await
    }

    fn types(h: &Harness) -> Vec<String> {
        h.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.kind.type_name().to_owned())
            .collect()
    }

    fn of_type(h: &Harness, t: &str) -> Vec<RuntimeEvent> {
        h.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind.type_name() == t)
            .cloned()
            .collect()
    }

    const CHAIN: &str = "
name: chain
agents:
  a: {provider: mock, system_prompt: first}
  b: {provider: mock, system_prompt: second}
  c: {provider: mock, system_prompt: third}
steps: [{agent: a}, {agent: b}, {agent: c}]
";

    #[tokio::test]
    async fn a_chain_passes_each_output_to_the_next_agent() {
        let h = harness(
            HashMap::from([
                ("a", vec![vec![session("s-a"), done("from a")]]),
                ("b", vec![vec![done("from b")]]),
                ("c", vec![vec![done("from c")]]),
            ]),
            None,
        );
        let outcome = run(&h, CHAIN, json!("topic")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Completed);
        assert_eq!(outcome.output, json!("from c"));
        assert_eq!(
            *h.prompts.lock().unwrap(),
            vec![
                ("a".to_owned(), "topic".to_owned()),
                ("b".to_owned(), "from a".to_owned()),
                ("c".to_owned(), "from b".to_owned())
            ]
        );
        let t = types(&h);
        assert_eq!(t.first().map(String::as_str), Some("flow:started"));
        assert_eq!(t.last().map(String::as_str), Some("flow:completed"));
        assert_eq!(of_type(&h, "node:started").len(), 3);
        assert_eq!(of_type(&h, "agent:start").len(), 3);
        assert_eq!(of_type(&h, "agent:complete").len(), 3);
        // The provider's session id is used when given, a runtime id otherwise.
        assert_eq!(
            outcome.snapshot.agent_sessions[&NodeId::new("a").unwrap()].as_str(),
            "s-a"
        );
        assert_eq!(outcome.snapshot.agent_sessions.len(), 3);
        // Input shape of design §5.
        let EventKind::NodeStarted { input } = &of_type(&h, "node:started")[1].kind else {
            panic!()
        };
        assert_eq!(
            input["metadata"],
            json!({"step_index": 1, "previous_agent": "a"})
        );
        let EventKind::NodeCompleted { output } = &of_type(&h, "node:completed")[0].kind else {
            panic!()
        };
        assert_eq!(output["data"], json!("from a"));
        assert_eq!(output["metadata"]["agent_name"], json!("a"));
        assert_eq!(output["metadata"]["tool_calls_count"], json!(0));
    }

    #[tokio::test]
    async fn every_saved_snapshot_is_the_fold_of_the_events_before_it() {
        let h = harness(
            HashMap::from([
                ("a", vec![vec![done("1")]]),
                ("b", vec![vec![done("2")]]),
                ("c", vec![vec![done("3")]]),
            ]),
            None,
        );
        run(&h, CHAIN, json!("x")).await.unwrap();
        let events = h.events.lock().unwrap();
        let snapshots = h.snapshots.lock().unwrap();
        assert_eq!(
            snapshots.len(),
            5,
            "after start, after each of 3 steps, final"
        );
        for snapshot in snapshots.iter() {
            let upto = snapshot.last_offset as usize;
            assert_eq!(RunSnapshot::fold(&events[..upto]).as_ref(), Some(snapshot));
            // Each non-final snapshot is followed by its state:saved marker.
            if let Some(next) = events.get(upto) {
                assert!(matches!(
                    next.kind,
                    EventKind::StateSaved { snapshot_offset } if snapshot_offset.get() == upto as u64
                ));
            }
        }
        assert_eq!(snapshots.last().unwrap().last_offset as usize, events.len());
    }

    #[tokio::test]
    async fn snapshots_follow_the_checkpoint_policy_and_the_log_is_flushed_every_step() {
        let scripts = || {
            HashMap::from([
                ("a", vec![vec![done("1")]]),
                ("b", vec![vec![done("2")]]),
                ("c", vec![vec![done("3")]]),
            ])
        };
        // Each step records 5 events and the clock moves 1 ms per reading.
        let h = harness(scripts(), None);
        let h = Harness {
            runner: h.runner.with_checkpoints(CheckpointPolicy {
                max_events: 10,
                max_interval_ms: 1_000,
            }),
            ..h
        };
        run(&h, CHAIN, json!("x")).await.unwrap();
        let offsets: Vec<u64> = h
            .snapshots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.last_offset)
            .collect();
        let events = h.events.lock().unwrap();
        assert_eq!(offsets.first(), Some(&1), "always right after flow:started");
        assert_eq!(
            offsets.last(),
            Some(&(events.len() as u64)),
            "always at the end"
        );
        assert!(offsets.len() < 5, "not at every step: {offsets:?}");
        for pair in offsets.windows(2).take(offsets.len().saturating_sub(2)) {
            assert!(pair[1] - pair[0] >= 10, "{offsets:?}");
        }
    }

    /// The harness, writing its transcripts where the test can read them.
    fn with_recorded_transcript(
        h: Harness,
        drops: u64,
    ) -> (Harness, Arc<Mutex<Vec<ExchangeDraft>>>) {
        let (transcripts, lines) = recording_transcripts(drops);
        let h = Harness {
            runner: h.runner.with_transcripts(Arc::new(transcripts)),
            ..h
        };
        (h, lines)
    }

    /// A transcript that keeps every draft and reports `drops` missed events.
    fn recording_transcripts(
        drops: u64,
    ) -> (
        crate::ports::MockTranscripts,
        Arc<Mutex<Vec<ExchangeDraft>>>,
    ) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&lines);
        let mut transcripts = crate::ports::MockTranscripts::new();
        transcripts.expect_open().returning(move |run_id, parent| {
            assert!(parent.is_none());
            let kept = Arc::clone(&kept);
            let mut t = crate::ports::MockTranscript::new();
            let seq = AtomicU64::new(0);
            t.expect_append().returning(move |draft| {
                kept.lock().unwrap().push(draft.clone());
                Ok(domain::transcript::ExchangeEvent {
                    seq: seq.fetch_add(1, Ordering::SeqCst) + 1,
                    run_id,
                    parent_run_id: None,
                    child_run_id: draft.child_run_id,
                    kind: draft.kind,
                    path: draft.path,
                    iteration: draft.iteration,
                    timestamp: draft.timestamp,
                    payload: draft.payload,
                    extra: Default::default(),
                })
            });
            t.expect_dropped().returning(move || drops);
            t.expect_close().returning(|| ());
            Ok(Arc::new(t) as Arc<dyn Transcript>)
        });
        (transcripts, lines)
    }

    #[tokio::test]
    async fn the_transcript_records_every_seam_in_order() {
        let h = harness(
            HashMap::from([
                (
                    "a",
                    vec![vec![
                        Ok(AgentMessage::ThinkingDelta {
                            content: "hm".into(),
                            token_count: None,
                        }),
                        Ok(AgentMessage::TextDelta {
                            content: "fro".into(),
                        }),
                        Ok(AgentMessage::TextDelta {
                            content: "m a".into(),
                        }),
                        Ok(AgentMessage::Tool {
                            id: Some("toolu_1".into()),
                            name: "search".into(),
                            input: json!({"q": 1}),
                            output: json!("found"),
                            duration_ms: None,
                            error: None,
                        }),
                        done("from a"),
                    ]],
                ),
                ("b", vec![vec![done("from b")]]),
                ("c", vec![vec![done("from c")]]),
            ]),
            None,
        );
        let (h, lines) = with_recorded_transcript(h, 3);
        run(&h, CHAIN, json!("topic")).await.unwrap();
        let lines = lines.lock().unwrap();
        let kinds: Vec<&str> = lines.iter().map(|l| l.kind.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"run.started"));
        assert_eq!(kinds.last(), Some(&"run.completed"));
        assert_eq!(
            &kinds[1..8],
            [
                "step.started",
                "message.user",
                "tool.call",
                "tool.result",
                "message.assistant",
                "step.completed",
                "step.started"
            ]
        );
        let user = &lines[2].payload;
        assert_eq!(
            user["blocks"][0],
            json!({"type": "text", "text": "topic", "fidelity": "router"})
        );
        assert_eq!(
            user["blocks"][1]["text"], "first",
            "the system prompt, verbatim"
        );
        let reply = &lines[5].payload["blocks"];
        let types: Vec<&str> = reply
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["thinking", "text", "tool_use", "tool_result"]);
        assert_eq!(reply[1]["text"], "from a", "deltas join one block");
        assert_eq!(
            (&reply[2]["tool_id"], &reply[3]["tool_id"]),
            (&json!("toolu_1"), &json!("toolu_1"))
        );
        assert_eq!(lines[3].payload["call_id"], "toolu_1");
        assert_eq!(lines[4].payload["call_id"], "toolu_1");
        assert!(
            reply
                .as_array()
                .unwrap()
                .iter()
                .all(|b| b["fidelity"] == "agent_emitted")
        );
        assert_eq!(lines[3].payload["fidelity"], "agent_emitted");
        assert_eq!(lines[6].payload["result"], "from a");
        // The drops subscribers suffered are in the run's log.
        let warnings = of_type(&h, "warning");
        assert_eq!(warnings.len(), 1);
        assert!(
            matches!(&warnings[0].kind, EventKind::Warning { message, .. } if message.contains("missed 3"))
        );
    }

    #[tokio::test]
    async fn tools_the_runtime_ran_are_router_events_lines_and_blocks() {
        let started = |id: &str, input: Value| {
            Ok(AgentMessage::ToolStarted {
                call_id: id.into(),
                name: "shell".into(),
                input,
            })
        };
        let finished = |id: &str, output: Result<Value, String>| {
            Ok(AgentMessage::ToolFinished {
                call_id: id.into(),
                name: "shell".into(),
                output,
                duration_ms: 4,
            })
        };
        let limited = Ok(AgentMessage::RateLimited {
            provider: "openai".into(),
            attempt: 1,
            retry_after_ms: Some(1000),
        });
        let script = vec![
            session("conv-1"),
            limited,
            started("c1", json!({"command": "echo hi"})),
            finished("c1", Ok(json!({"exit_code": 0, "stdout": "hi\n"}))),
            started("c2", json!({"command": 3})),
            finished("c2", Err("invalid input".into())),
            done("hi"),
        ];
        let h = harness(HashMap::from([("a", vec![script])]), None);
        let (h, lines) = with_recorded_transcript(h, 0);
        let yaml = "name: t\nagents:\n  a: {provider: mock, model: my-model-v2}\n\
            pricing:\n  my-model: {input: 1000000, output: 2000000}\nsteps: [{agent: a}]\n";
        let outcome = run(&h, yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Completed);
        let types = types(&h);
        let tool_types: Vec<&str> = types
            .iter()
            .map(String::as_str)
            .filter(|t| t.starts_with("tool:") || *t == "rate:limited")
            .collect();
        assert_eq!(
            tool_types,
            [
                "rate:limited",
                "tool:started",
                "tool:completed",
                "tool:started",
                "tool:failed"
            ]
        );
        let failed = &of_type(&h, "tool:failed")[0];
        assert!(
            matches!(&failed.kind, EventKind::ToolFailed { call_id, duration_ms: 4, .. } if call_id == "c2")
        );
        let complete = &of_type(&h, "agent:complete")[0];
        // 10 input tokens at $1 and 5 output tokens at $2 per token: the
        // workflow's price of `my-model` covers `my-model-v2`.
        assert!(
            matches!(&complete.kind, EventKind::AgentComplete { total_cost_usd: Some(c), .. } if (*c - 20.0).abs() < 1e-9),
            "{complete:?}"
        );
        let node = &of_type(&h, "node:completed")[0];
        assert!(
            serde_json::to_string(node)
                .unwrap()
                .contains(r#""tool_calls_count":2"#),
            "{node:?}"
        );
        let lines = lines.lock().unwrap();
        let tool_lines: Vec<&ExchangeDraft> = lines
            .iter()
            .filter(|l| matches!(l.kind, ExchangeType::ToolCall | ExchangeType::ToolResult))
            .collect();
        assert_eq!(tool_lines.len(), 4);
        assert!(tool_lines.iter().all(|l| l.payload["fidelity"] == "router"));
        assert_eq!(tool_lines[1].payload["output"]["stdout"], "hi\n");
        assert_eq!(tool_lines[3].payload["error"], "invalid input");
        let reply = lines
            .iter()
            .find(|l| l.kind == ExchangeType::MessageAssistant)
            .unwrap();
        let blocks = reply.payload["blocks"].as_array().unwrap();
        let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["tool_use", "tool_result", "tool_use", "tool_result", "text"]
        );
        assert_eq!(blocks[0]["tool_id"], "c1");
        assert!(blocks[..4].iter().all(|b| b["fidelity"] == "router"));
    }

    #[tokio::test]
    async fn agent_tool_calls_keep_the_provider_ids_and_order_and_dangling_uses_stay_alone() {
        let use_of = |id: Option<&str>, command: &str| {
            Ok(AgentMessage::ToolUse {
                id: id.map(str::to_owned),
                name: "shell".into(),
                input: json!({ "command": command }),
            })
        };
        let text = |t: &str| Ok(AgentMessage::Text { content: t.into() });
        let script = vec![
            Ok(AgentMessage::Thinking {
                content: "plan".into(),
                token_count: None,
                signature: None,
            }),
            text("running a"),
            use_of(Some("toolu_A"), "echo a"),
            text("and b"),
            use_of(Some("toolu_B"), "sleep 99"),
            use_of(None, "echo c"),
            Ok(AgentMessage::Tool {
                id: Some("toolu_A".into()),
                name: "shell".into(),
                input: json!({"command": "echo a"}),
                output: json!({"output": "oops", "exit_code": 3}),
                duration_ms: None,
                error: Some("command exited with code 3".into()),
            }),
            Ok(AgentMessage::Tool {
                id: None,
                name: "shell".into(),
                input: json!({"command": "echo c"}),
                output: json!("c"),
                duration_ms: None,
                error: None,
            }),
            // A provider that reports only the whole call.
            Ok(AgentMessage::Tool {
                id: Some("item_9".into()),
                name: "web_search".into(),
                input: json!({"q": "x"}),
                output: json!("found"),
                duration_ms: None,
                error: None,
            }),
            done("1"),
        ];
        let h = harness(
            HashMap::from([
                ("a", vec![script]),
                ("b", vec![vec![done("2")]]),
                ("c", vec![vec![done("3")]]),
            ]),
            None,
        );
        let (h, lines) = with_recorded_transcript(h, 0);
        run(&h, CHAIN, json!("x")).await.unwrap();
        let lines = lines.lock().unwrap();
        let reply = lines
            .iter()
            .find(|l| l.kind == ExchangeType::MessageAssistant)
            .unwrap();
        let fidelity = "agent_emitted";
        let tool_use = |id: &str, command: &str| {
            let mut b = json!({"type": "tool_use", "tool_name": "shell",
                "tool_input": {"command": command}, "fidelity": fidelity});
            if !id.is_empty() {
                b["tool_id"] = json!(id);
            }
            b
        };
        assert_eq!(
            reply.payload["blocks"],
            json!([
                {"type": "thinking", "thinking": "plan", "fidelity": fidelity},
                {"type": "text", "text": "running a", "fidelity": fidelity},
                tool_use("toolu_A", "echo a"),
                {"type": "text", "text": "and b", "fidelity": fidelity},
                tool_use("toolu_B", "sleep 99"),
                tool_use("", "echo c"),
                {"type": "tool_result", "tool_id": "toolu_A", "tool_content": null, "fidelity": fidelity},
                {"type": "tool_result", "tool_content": "c", "fidelity": fidelity},
                {"type": "tool_use", "tool_name": "web_search", "tool_id": "item_9",
                    "tool_input": {"q": "x"}, "fidelity": fidelity},
                {"type": "tool_result", "tool_id": "item_9", "tool_content": "found", "fidelity": fidelity},
            ])
        );
        let tool_lines: Vec<(&str, Option<&str>)> = lines
            .iter()
            .filter(|l| matches!(l.kind, ExchangeType::ToolCall | ExchangeType::ToolResult))
            .map(|l| (l.kind.as_str(), l.payload["call_id"].as_str()))
            .collect();
        assert_eq!(
            tool_lines,
            [
                ("tool.call", Some("toolu_A")),
                ("tool.call", Some("toolu_B")),
                ("tool.call", None),
                ("tool.result", Some("toolu_A")),
                ("tool.result", None),
                ("tool.call", Some("item_9")),
                ("tool.result", Some("item_9")),
            ],
            "no result is invented for toolu_B"
        );
        let tools: Vec<(String, Option<String>)> = h
            .events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::AgentToolUse { tool_use_id, .. } => {
                    Some(("use".into(), tool_use_id.clone()))
                }
                EventKind::AgentTool { tool_use_id, .. } => {
                    Some(("tool".into(), tool_use_id.clone()))
                }
                _ => None,
            })
            .collect();
        let id = |s: &str| Some(s.to_owned());
        assert_eq!(
            tools,
            [
                ("use".into(), id("toolu_A")),
                ("use".into(), id("toolu_B")),
                ("use".into(), None),
                ("tool".into(), id("toolu_A")),
                ("tool".into(), None),
                ("tool".into(), id("item_9")),
            ]
        );
        let EventKind::NodeCompleted { output } = &of_type(&h, "node:completed")[0].kind else {
            panic!()
        };
        assert_eq!(output["metadata"]["tool_calls_count"], json!(4));
    }

    #[tokio::test]
    async fn thinking_signatures_reach_the_log_and_the_transcript() {
        let thinking = Ok(AgentMessage::Thinking {
            content: "ponder".into(),
            token_count: None,
            signature: Some("c2ln".into()),
        });
        let h = harness(
            HashMap::from([
                ("a", vec![vec![thinking, done("1")]]),
                ("b", vec![vec![done("2")]]),
                ("c", vec![vec![done("3")]]),
            ]),
            None,
        );
        let (h, lines) = with_recorded_transcript(h, 0);
        run(&h, CHAIN, json!("x")).await.unwrap();
        assert!(matches!(&of_type(&h, "agent:thinking")[0].kind,
            EventKind::AgentThinking { signature: Some(s), .. } if s == "c2ln"));
        let lines = lines.lock().unwrap();
        let reply = lines
            .iter()
            .find(|l| l.kind == ExchangeType::MessageAssistant)
            .unwrap();
        assert_eq!(reply.payload["blocks"][0]["signature"], "c2ln");
    }

    #[tokio::test]
    async fn a_session_id_known_only_at_the_end_is_the_one_saved() {
        let late = Ok(AgentMessage::Completed(AgentResult {
            text: "done".into(),
            num_turns: 1,
            session_id: Some(SessionId::new("late-session").unwrap()),
            ..AgentResult::default()
        }));
        let h = harness(
            HashMap::from([
                (
                    "a",
                    vec![vec![
                        Ok(AgentMessage::TextDelta {
                            content: "d".into(),
                        }),
                        late,
                    ]],
                ),
                ("b", vec![vec![done("2")]]),
                ("c", vec![vec![done("3")]]),
            ]),
            None,
        );
        let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
        let a = NodeId::new("a").unwrap();
        assert_eq!(outcome.snapshot.agent_sessions[&a].as_str(), "late-session");
        let complete = &of_type(&h, "agent:complete")[0];
        assert!(
            matches!(&complete.kind, EventKind::AgentComplete { session_id: Some(s), .. } if s.as_str() == "late-session")
        );
        let b = &of_type(&h, "agent:complete")[1];
        assert!(
            matches!(
                &b.kind,
                EventKind::AgentComplete {
                    session_id: None,
                    ..
                }
            ),
            "no repeat when unchanged"
        );
    }

    #[tokio::test]
    async fn a_failing_agent_fails_the_run_and_stops_it() {
        let failure = Err(QueryError::Agent {
            error_type: "rate_limit".into(),
            message: "slow down".into(),
            details: None,
        });
        let h = harness(HashMap::from([("a", vec![vec![failure]])]), None);
        let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Failed);
        assert!(outcome.error.unwrap().contains("slow down"));
        let err = &of_type(&h, "agent:error")[0];
        assert!(
            matches!(&err.kind, EventKind::AgentError { error_type, .. } if error_type == "rate_limit")
        );
        assert_eq!(types(&h).last().map(String::as_str), Some("flow:failed"));
        assert_eq!(h.prompts.lock().unwrap().len(), 1, "b and c never ran");
    }

    #[tokio::test]
    async fn continue_on_error_lets_the_run_go_on_with_null_data() {
        let yaml = "
name: lenient
agents:
  a: {provider: mock, policy: {continue_on_error: true}}
  b: {provider: mock}
steps: [{agent: a}, {agent: b}]
";
        let h = harness(
            HashMap::from([
                (
                    "a",
                    vec![vec![Ok(AgentMessage::TextDelta {
                        content: "par".into(),
                    })]],
                ),
                ("b", vec![vec![done("recovered")]]),
            ]),
            None,
        );
        let outcome = run(&h, yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Completed);
        let failed = &of_type(&h, "node:failed")[0];
        assert!(matches!(
            failed.kind,
            EventKind::NodeFailed {
                continued: true,
                ..
            }
        ));
        assert_eq!(h.prompts.lock().unwrap()[1].1, "", "b received null data");
        assert_eq!(
            outcome.snapshot.node_status[&NodeId::new("a").unwrap()],
            NodeStatus::Failed
        );
    }

    #[tokio::test]
    async fn max_turns_and_output_schema_are_enforced() {
        let yaml = r#"
name: strict
agents:
  a: {provider: mock, max_turns: 2}
  b:
    provider: mock
    output_schema: {type: object, required: [score], properties: {score: {type: number}}}
steps: [{agent: a}]
"#;
        let too_long = Ok(AgentMessage::Completed(AgentResult {
            text: "x".into(),
            num_turns: 3,
            ..AgentResult::default()
        }));
        let h = harness(HashMap::from([("a", vec![vec![too_long]])]), None);
        let outcome = run(&h, yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Failed);
        assert!(matches!(&of_type(&h, "agent:error")[0].kind,
            EventKind::AgentError { error_type, .. } if error_type == "error_max_turns"));

        let yaml = yaml.replace("steps: [{agent: a}]", "steps: [{agent: b}]");
        let h = harness(
            HashMap::from([("b", vec![vec![done("```json\n{\"score\": 0.9}\n```")]])]),
            None,
        );
        let outcome = run(&h, &yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.output, json!({"score": 0.9}));
        assert!(matches!(&of_type(&h, "agent:complete")[0].kind,
            EventKind::AgentComplete { structured_output: Some(v), .. } if v == &json!({"score": 0.9})));

        let h = harness(
            HashMap::from([("b", vec![vec![done("no json here")]])]),
            None,
        );
        let outcome = run(&h, &yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Failed);
    }

    #[tokio::test]
    async fn conditions_pick_a_branch_and_skip_the_other() {
        let yaml = r#"
name: branch
agents:
  judge: {provider: mock}
  yes: {provider: mock}
  no: {provider: mock}
nodes: [{id: judge, agent: judge}, {id: yes, agent: yes}, {id: no, agent: no}]
edges:
  - {from: judge, to: yes, when: 'output.contains("APPROVED")'}
  - {from: judge, to: no, when: '!output.contains("APPROVED")'}
"#;
        let h = harness(
            HashMap::from([
                ("judge", vec![vec![done("APPROVED")]]),
                ("yes", vec![vec![done("shipped")]]),
            ]),
            None,
        );
        let outcome = run(&h, yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.output, json!("shipped"));
        let s = &outcome.snapshot;
        assert_eq!(
            s.node_status[&NodeId::new("no").unwrap()],
            NodeStatus::Skipped
        );
        assert_eq!(s.edge_status["judge->yes"], EdgeStatus::Fired);
        assert_eq!(s.edge_status["judge->no"], EdgeStatus::Skipped);
    }

    #[tokio::test]
    async fn a_loop_edge_repeats_its_body_up_to_its_limit() {
        let yaml = r#"
name: refine
agents:
  writer: {provider: mock}
  critic: {provider: mock}
  publish: {provider: mock}
nodes: [{id: writer, agent: writer}, {id: critic, agent: critic}, {id: publish, agent: publish}]
edges:
  - {from: writer, to: critic}
  - {from: critic, to: writer, when: '!output.contains("OK")', max_iterations: 2, on_limit: continue}
  - {from: critic, to: publish}
"#;
        let h = harness(
            HashMap::from([
                (
                    "writer",
                    vec![
                        vec![done("draft 1")],
                        vec![done("draft 2")],
                        vec![done("draft 3")],
                    ],
                ),
                (
                    "critic",
                    vec![
                        vec![done("again")],
                        vec![done("again")],
                        vec![done("still bad")],
                    ],
                ),
                ("publish", vec![vec![done("published")]]),
            ]),
            None,
        );
        let outcome = run(&h, yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Completed);
        assert_eq!(outcome.output, json!("published"));
        assert_eq!(outcome.snapshot.loop_counters["critic->writer"], 2);
        let writer_prompts: Vec<String> = h
            .prompts
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == "writer")
            .map(|(_, p)| p.clone())
            .collect();
        assert_eq!(writer_prompts, ["x", "again", "again"]);
        let EventKind::EdgeSkipped { reason, .. } = &of_type(&h, "edge:skipped")[0].kind else {
            panic!()
        };
        assert_eq!(reason, "loop limit reached");
    }

    #[tokio::test]
    async fn a_loop_edge_at_its_limit_fails_the_run_by_default() {
        let yaml = r#"
name: refine
agents:
  writer: {provider: mock}
  critic: {provider: mock}
  publish: {provider: mock}
nodes: [{id: writer, agent: writer}, {id: critic, agent: critic}, {id: publish, agent: publish}]
edges:
  - {from: writer, to: critic}
  - {from: critic, to: writer, id: revise, when: '!output.contains("OK")', max_iterations: 1}
  - {from: critic, to: publish}
"#;
        let h = harness(
            HashMap::from([
                ("writer", vec![vec![done("draft 1")], vec![done("draft 2")]]),
                ("critic", vec![vec![done("again")], vec![done("still bad")]]),
                ("publish", vec![vec![done("published")]]),
            ]),
            None,
        );
        let outcome = run(&h, yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Failed);
        let error = outcome.error.unwrap();
        assert!(
            error.contains("edge `revise` reached its loop limit (max_iterations: 1)"),
            "{error}"
        );
        assert_eq!(outcome.snapshot.loop_counters["revise"], 1);
        let failed = of_type(&h, "flow:failed");
        let EventKind::FlowFailed { failed_node, .. } = &failed[0].kind else {
            panic!()
        };
        assert_eq!(failed_node.as_ref().map(NodeId::as_str), Some("critic"));
        assert!(
            h.prompts
                .lock()
                .unwrap()
                .iter()
                .all(|(n, _)| n != "publish"),
            "publish never ran"
        );
    }

    #[tokio::test]
    async fn a_condition_that_cannot_be_evaluated_fails_the_run_naming_the_edge() {
        let yaml = r#"
name: typo
agents:
  a: {provider: mock}
  b: {provider: mock}
nodes: [{id: a, agent: a}, {id: b, agent: b}]
edges: [{from: a, to: b, when: 'output.score > 1'}]
"#;
        let h = harness(
            HashMap::from([("a", vec![vec![done("not an object")]])]),
            None,
        );
        let outcome = run(&h, yaml, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Failed);
        assert!(outcome.error.unwrap().contains("edge `a->b`"));
        assert_eq!(h.prompts.lock().unwrap().len(), 1, "b never ran");
    }

    #[tokio::test]
    async fn a_stream_that_ends_without_a_result_is_a_failure() {
        let h = harness(
            HashMap::from([(
                "a",
                vec![vec![Ok(AgentMessage::Text {
                    content: "half".into(),
                })]],
            )]),
            None,
        );
        let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Failed);
        assert_eq!(of_type(&h, "agent:text").len(), 1, "what arrived is kept");
    }

    #[tokio::test]
    async fn a_final_snapshot_that_cannot_be_saved_does_not_undo_the_recorded_outcome() {
        let h = harness(
            HashMap::from([
                ("a", vec![vec![done("1")]]),
                ("b", vec![vec![done("2")]]),
                ("c", vec![vec![done("3")]]),
            ]),
            None,
        );
        h.fail_final_save.store(true, Ordering::SeqCst);
        let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
        assert_eq!(outcome.status, RunStatus::Completed);
        assert_eq!(outcome.output, json!("3"));
        assert_eq!(types(&h).last().map(String::as_str), Some("flow:completed"));
    }

    #[tokio::test]
    async fn a_store_failure_is_a_runtime_error() {
        let h = harness(
            HashMap::from([("a", vec![vec![done("1")]]), ("b", vec![vec![done("2")]])]),
            Some(6),
        );
        let err = run(&h, CHAIN, json!("x")).await.unwrap_err();
        assert!(
            matches!(err, RunnerError::Store(StoreError::Io(_))),
            "{err}"
        );
        assert_eq!(
            h.events.lock().unwrap().len(),
            5,
            "nothing after the failed append"
        );
    }
}
