//! What the driver does when a node run ends: record its end, route a
//! whole node's data along its edges, and close a `for_each` node once its
//! items are done.

use domain::{NodeId, NodeRunId};
use serde_json::{Value, json};

use super::{Driver, Stop};
use crate::run::node_run::NodeEnd;
use crate::run::recorder::Ctx;
use crate::run::{ExecutorError, routing};

impl Driver {
    /// Records how a node run ended and, for a whole node, routes its data.
    pub(super) async fn node_ended(
        &mut self,
        run: NodeRunId,
        node: &NodeId,
        end: NodeEnd,
    ) -> Result<Option<Stop>, ExecutorError> {
        let item = self.state().node_runs.get(&run).and_then(|r| r.item);
        let ctx: Ctx = (Some(node.clone()), Some(run));
        let continues = self
            .workflow
            .node(node)
            .is_some_and(|n| self.workflow.continues_on_error(n));
        let data = end.data.clone();
        let error = end.error.clone();
        self.rec.emit(ctx, end.into_event(continues)).await?;
        if let Some(error) = error.filter(|_| !continues) {
            let error = match item {
                Some(i) => format!("node `{node}` failed on item {i}: {error}"),
                None => format!("node `{node}` failed: {error}"),
            };
            return Ok(Some(Stop::Failed {
                node: Some(node.clone()),
                error,
            }));
        }
        if item.is_some() {
            // The node ends when all its items have (see `finish_items`).
            return Ok(None);
        }
        self.route(node, &data).await
    }

    /// Routes a node's data along its edges, then marks a step boundary.
    pub(super) async fn route(
        &mut self,
        node: &NodeId,
        data: &Value,
    ) -> Result<Option<Stop>, ExecutorError> {
        let edges = routing::route(self.state(), &self.workflow, node, data, &self.input);
        match edges {
            Ok(kinds) => {
                for kind in kinds {
                    self.rec.emit((Some(node.clone()), None), kind).await?;
                }
                // Flushed with what the next decisions record, before
                // anything can see either.
                self.rec.boundary().await?;
                Ok(None)
            }
            Err(error) => Ok(Some(Stop::Failed {
                node: Some(node.clone()),
                error,
            })),
        }
    }

    /// Every item of a `for_each` node finished: the node completes with
    /// their data in item order.
    pub(super) async fn finish_items(
        &mut self,
        node: &NodeId,
    ) -> Result<Option<Stop>, ExecutorError> {
        let state = self.state();
        let Some(run) = state
            .node_runs
            .iter()
            .find_map(|(id, r)| (&r.node_id == node && r.item.is_none()).then_some(*id))
        else {
            return Ok(None);
        };
        let outputs: Vec<Value> = state
            .for_each
            .get(node)
            .map(|p| p.outputs.values().cloned().collect())
            .unwrap_or_default();
        let agent_name = self
            .workflow
            .node(node)
            .and_then(|n| self.workflow.agent_of(n))
            .map(|(name, _)| name.to_owned());
        let started = state.node_runs.get(&run).and_then(|r| r.started_at);
        let elapsed = started.map_or(0, |at| self.ports.clock.now().millis_since(at));
        let mut metadata = json!({ "items": outputs.len(), "execution_time_ms": elapsed });
        if let Some(name) = agent_name {
            metadata["agent_name"] = Value::String(name);
        }
        let end = NodeEnd {
            data: Value::Array(outputs),
            metadata,
            error: None,
        };
        self.node_ended(run, node, end).await
    }
}
