//! The driver as an effect runner: [`Driver::apply`] hands one input to
//! `step::step`, records the events it decides, then carries out its
//! effects. Everything that happens to a running run goes through here: a
//! node run's end, a failed attempt, a command, a cancellation, the budgets.

use domain::{NodeId, NodeRunId};
use tokio::sync::oneshot;

use super::{Driver, Stop};
use crate::ports::{CommandReply, ReplyTo};
use crate::run::ExecutorError;
use crate::run::node_run::NodeEnd;
use crate::run::step::ended;
use crate::run::step::retry::Retry;
use crate::run::step::{self, Effect, Given, Input};

/// Who waits for the outcome of an input: the node run that asked whether
/// to try again, or the sender of a command.
#[derive(Default)]
pub(super) enum Asker {
    #[default]
    None,
    NodeRun(oneshot::Sender<Retry>),
    Sender(ReplyTo),
}

impl Driver {
    /// Decides `input` and the inputs it leads to, recording their events
    /// and carrying out their effects; the stop one of them asks for.
    /// `asker` is answered if a step says so, and dropped unanswered if not.
    pub(super) async fn apply(
        &mut self,
        input: Input,
        mut asker: Asker,
    ) -> Result<Option<Stop>, ExecutorError> {
        let mut next = Some(input);
        let mut stop = None;
        while let Some(input) = next.take() {
            let given = Given {
                workflow: &self.workflow,
                input: &self.input,
                budgeted: &self.budgeted,
            };
            let step = step::step(&self.rec.state, &given, input);
            let mut first = None;
            for (ctx, kind) in step.events {
                let recorded = self.rec.emit(ctx, kind).await?;
                first.get_or_insert(recorded.offset);
            }
            for effect in step.effects {
                match effect {
                    Effect::Spawn { run, input } => {
                        let def = (self.rec.state.node_runs.get(&run))
                            .and_then(|r| self.workflow.node(&r.node_id))
                            .cloned();
                        if let Some(def) = def {
                            self.spawn_task(run, def, input, None).await?;
                        }
                    }
                    Effect::Then(input) => next = Some(input),
                    Effect::Boundary => self.rec.boundary().await?,
                    Effect::Checkpoint => self.rec.checkpoint().await?,
                    Effect::Retry(retry) => {
                        if let Asker::NodeRun(answer) = std::mem::take(&mut asker) {
                            let _ = answer.send(*retry);
                        }
                    }
                    Effect::Reply { accepted, error } => {
                        if let Asker::Sender(sender) = std::mem::take(&mut asker) {
                            let reply = CommandReply {
                                accepted,
                                offset: first.map_or(0, |o| o.get()),
                                error,
                            };
                            // A sender that stopped waiting learns the
                            // outcome from the log.
                            sender.send(reply, self.ports.clock.as_ref()).await;
                        }
                    }
                    Effect::Stop(s) => stop = Some(s),
                }
            }
        }
        Ok(stop)
    }

    /// Node run `run` of `node` ended with `end` ([`Input::NodeEnded`]).
    pub(super) async fn node_ended(
        &mut self,
        run: NodeRunId,
        node: &NodeId,
        end: NodeEnd,
    ) -> Result<Option<Stop>, ExecutorError> {
        let node = node.clone();
        self.apply(Input::NodeEnded { run, node, end }, Asker::None)
            .await
    }

    /// Every item of a `for_each` node finished: the node completes with
    /// their data in item order.
    pub(super) async fn finish_items(
        &mut self,
        node: &NodeId,
    ) -> Result<Option<Stop>, ExecutorError> {
        let clock = &self.ports.clock;
        match ended::items_end(self.state(), &self.workflow, node, || clock.now()) {
            Some((run, end)) => self.node_ended(run, node, end).await,
            None => Ok(None),
        }
    }
}
