//! What the driver does when a node run ends: it records what
//! `step::ended` decides (the end, then for a whole node its edges, or the
//! stop a failure asks for), and closes a `for_each` node once its items
//! are done.

use domain::{NodeId, NodeRunId};
use serde_json::Value;

use super::{Driver, Stop};
use crate::run::ExecutorError;
use crate::run::node_run::NodeEnd;
use crate::run::step::ended::{self, After};

impl Driver {
    /// Records how a node run ended and, for a whole node, routes its data.
    pub(super) async fn node_ended(
        &mut self,
        run: NodeRunId,
        node: &NodeId,
        end: NodeEnd,
    ) -> Result<Option<Stop>, ExecutorError> {
        let ((ctx, kind), after) = ended::ended(self.state(), &self.workflow, run, node, end);
        self.rec.emit(ctx, kind).await?;
        match after {
            After::Stop(stop) => Ok(Some(stop)),
            // The node ends when all its items have (see `finish_items`).
            After::Item => Ok(None),
            After::Route(data) => self.route(node, &data).await,
        }
    }

    /// Routes a node's data along its edges, then marks a step boundary.
    pub(super) async fn route(
        &mut self,
        node: &NodeId,
        data: &Value,
    ) -> Result<Option<Stop>, ExecutorError> {
        match ended::routed(self.state(), &self.workflow, node, data, &self.input) {
            Ok(edges) => {
                for (ctx, kind) in edges {
                    self.rec.emit(ctx, kind).await?;
                }
                // Flushed with what the next decisions record, before
                // anything can see either.
                self.rec.boundary().await?;
                Ok(None)
            }
            Err(stop) => Ok(Some(stop)),
        }
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
