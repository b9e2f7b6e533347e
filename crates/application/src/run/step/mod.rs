//! The executor's transitions as pure functions of the folded state: no
//! IO, no clock, no tokio. [`step`] is the one way in: given the state and
//! one [`Input`] (something that happened to the run), it says what to
//! record and what the driver must then do ([`Effect`]). The driver records
//! the events, in order, folding each into the state, and then carries out
//! the effects; an [`Effect::Then`] feeds the next input, decided on the
//! state with those events recorded (a node's edges, after its end).
//!
//! One file per transition, each with table tests of its own:
//!
//! - [`start`]: what the scheduler's starts and skips record;
//! - [`ended`]: what a node run's end records, and its node's edges;
//! - [`retry`]: whether a failed attempt is tried again, and after what
//!   wait;
//! - [`command`]: what a command received records, and the stop it asks
//!   for;
//! - [`budget`]: the first budget the state has crossed, and when the next
//!   deadline falls;
//! - [`pause`]: which node runs a pause stops at once, and how it ends;
//! - [`stop`]: how a run that stops before it completes records its stop
//!   (a node failure, a budget, a cancellation);
//! - [`resume`]: what a continued run finishes first: the stop or the step
//!   its last writer died in.
//!
//! The scheduler, `run::decide`, is the other pure half: which node runs
//! may start. A stop and a resume are sequences with waits between their
//! phases (for node runs to wind down, for the log to be read back): the
//! driver runs the phases, and each phase's decision is a function here.

use std::sync::Arc;

use domain::{Caller, EventKind, NodeId, NodeRunId, RunSnapshot, Timestamp, WorkflowDef};
use serde_json::Value;
use smallvec::{SmallVec, smallvec};

use crate::run::node_run::NodeEnd;
use crate::run::recorder::{Ctx, RUN_LEVEL};

pub(crate) mod approval;
pub(crate) mod budget;
pub(crate) mod command;
pub(crate) mod ended;
pub(crate) mod pause;
pub(crate) mod resume;
pub(crate) mod retry;
pub(crate) mod start;
pub(crate) mod stop;

#[cfg(test)]
mod tests;

use self::retry::{Failure, Retry};
use self::stop::Stop;

/// What the transitions are decided with besides the state: what the run
/// was started with, which does not change while it runs.
pub(crate) struct Given<'a> {
    pub workflow: &'a WorkflowDef,
    /// The run's input (`flow:started`'s).
    pub input: &'a Value,
    /// The positions of the nodes with a budget of their own
    /// ([`budget::budgeted`]).
    pub budgeted: &'a [usize],
}

/// Something that happened to a run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    /// The scheduler starts node run `run` of `node` (see
    /// [`start::started`]).
    Start {
        run: NodeRunId,
        node: NodeId,
        input: Result<Value, String>,
        item: Option<u32>,
        items: Option<u32>,
    },
    /// The scheduler skips `node` in this pass.
    Skip { node: NodeId, reason: &'static str },
    /// Node run `run` of `node` ended with `end`.
    NodeEnded {
        run: NodeRunId,
        node: NodeId,
        end: NodeEnd,
    },
    /// An agent's result was recorded at `at` for node run `run` of `node`,
    /// with the node run's `end` when no message waits for it (else the
    /// node run goes on). The budgets are checked as the result left them;
    /// one that is crossed stops the run, and the end is recorded without
    /// being routed.
    AgentCompleted {
        run: NodeRunId,
        node: NodeId,
        end: Option<NodeEnd>,
        at: Timestamp,
    },
    /// `node` ended whole with `data`, on record: its data goes along its
    /// edges. Follows [`Input::NodeEnded`].
    Ended { node: NodeId, data: Value },
    /// An attempt of node run `run` failed.
    AttemptFailed { run: NodeRunId, failure: Failure },
    /// A command `raw` from `by` reached the run's writer at `at`;
    /// `child`: the run is a child run, which pauses only with its parent.
    Command {
        raw: Value,
        by: Option<Caller>,
        child: bool,
        at: Timestamp,
    },
    /// This process cancelled the run (a signal, the library's `Cancel`).
    Cancelled(String),
    /// The parent of this child run paused.
    ParentPaused,
    /// Time passed, or spending grew: the budgets are checked at `now`.
    Tick { now: Timestamp },
    /// A resume found the writer before it dead in the middle of routing
    /// `node`: the edge events not `recorded` are recorded.
    RoutingUnfinished { node: NodeId, recorded: Vec<String> },
}

/// What the driver does once a step's events are recorded, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// Start the task of node run `run`, whose start is on record (and so
    /// its node), with `input`.
    Spawn { run: NodeRunId, input: Arc<Value> },
    /// Decide this input next, on the state with the events recorded.
    Then(Input),
    /// A step boundary, made durable with the next publication.
    Boundary,
    /// Make what is recorded durable now, before anything else happens.
    Checkpoint,
    /// Tell the node run that asked: a new attempt, after a wait. Boxed: it
    /// holds an event, and every step's effects are moved whole.
    Retry(Box<Retry>),
    /// Answer the command's sender; the offset is the step's first event's.
    Reply {
        accepted: bool,
        error: Option<String>,
    },
    /// Stop the run.
    Stop(Stop),
}

/// What one input leads to. Both lists are inline up to the most one input
/// needs but for edges, so deciding a step allocates nothing for them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Step {
    /// To record, in order.
    pub events: Events,
    /// Then to carry out, in order.
    pub effects: Effects,
}

/// The events of a [`Step`]: one but for a node's edges.
pub(crate) type Events = SmallVec<[(Ctx, EventKind); 1]>;

/// The effects of a [`Step`]: at most three (a command's).
pub(crate) type Effects = SmallVec<[Effect; 3]>;

impl Step {
    fn effects(effects: impl IntoIterator<Item = Effect>) -> Self {
        Self {
            events: SmallVec::new(),
            effects: effects.into_iter().collect(),
        }
    }

    fn stop(stop: Option<Stop>) -> Self {
        Self::effects(stop.map(Effect::Stop))
    }
}

/// The one transition: what `input` records on the run at `state`, and
/// what follows.
pub(crate) fn step(state: &RunSnapshot, given: &Given<'_>, input: Input) -> Step {
    match input {
        Input::Start {
            run,
            node,
            input,
            item,
            items,
        } => start::started(given.workflow, run, node, input, item, items),
        Input::Skip { node, reason } => start::skipped(given.workflow, node, reason),
        Input::NodeEnded { run, node, end } => {
            let (event, after) = ended::ended(state, given.workflow, run, &node, end);
            let effects = match after {
                ended::After::Stop(stop) => smallvec![Effect::Stop(stop)],
                // The node ends when all its items have.
                ended::After::Item => SmallVec::new(),
                ended::After::Route(data) => smallvec![Effect::Then(Input::Ended { node, data })],
            };
            Step {
                events: smallvec![event],
                effects,
            }
        }
        Input::AgentCompleted { run, node, end, at } => {
            let stop =
                budget::exceeded(state, given.workflow, given.budgeted, at).map(Stop::Budget);
            match (end, stop) {
                (None, stop) => Step::stop(stop),
                (Some(end), None) => {
                    Step::effects([Effect::Then(Input::NodeEnded { run, node, end })])
                }
                (Some(end), Some(stop)) => Step {
                    events: smallvec![((Some(node), Some(run)), end.into_event(false))],
                    effects: smallvec![Effect::Stop(stop)],
                },
            }
        }
        Input::Ended { node, data } => {
            match ended::routed(state, given.workflow, &node, &data, given.input) {
                // Flushed with what the next decisions record, before
                // anything can see either.
                Ok(events) => Step {
                    events: SmallVec::from_vec(events),
                    effects: smallvec![Effect::Boundary],
                },
                Err(stop) => Step::stop(Some(stop)),
            }
        }
        Input::AttemptFailed { run, failure } => Step::effects(
            retry::attempt_failed(state, given.workflow, run, &failure)
                .map(|retry| Effect::Retry(Box::new(retry))),
        ),
        Input::Command { raw, by, child, at } => {
            let received = command::received(state, given.workflow, raw, by, child, at);
            let mut effects = smallvec![
                Effect::Checkpoint,
                Effect::Reply {
                    accepted: received.error.is_none(),
                    error: received.error,
                },
            ];
            effects.extend(received.stop.map(Effect::Stop));
            let mut events = smallvec![(RUN_LEVEL, received.event)];
            if let Some((node, run, asked)) = received.asks {
                events.push(((Some(node), Some(run)), asked));
            }
            Step { events, effects }
        }
        Input::Cancelled(reason) => {
            let (received, stop) = command::cancelled_here(reason);
            recorded_stop(received, stop)
        }
        Input::ParentPaused => {
            let (received, stop) = command::paused_with_parent();
            recorded_stop(received, stop)
        }
        Input::Tick { now } => Step::stop(
            budget::exceeded(state, given.workflow, given.budgeted, now).map(Stop::Budget),
        ),
        Input::RoutingUnfinished { node, recorded } => {
            match resume::rest_of_routing(state, given.workflow, &node, &recorded, given.input) {
                Ok(None) => Step::default(),
                // The routing is done: a step boundary, as at the end of
                // `Ended`, made durable before the resume goes on.
                Ok(Some(events)) => Step {
                    events: SmallVec::from_vec(events),
                    effects: smallvec![Effect::Checkpoint],
                },
                Err(stop) => Step::stop(Some(stop)),
            }
        }
    }
}

/// A stop the runtime gave itself as a command: recorded and made durable
/// before it takes effect.
fn recorded_stop(received: EventKind, stop: Stop) -> Step {
    Step {
        events: smallvec![(RUN_LEVEL, received)],
        effects: smallvec![Effect::Checkpoint, Effect::Stop(stop)],
    }
}
