//! A command to a run (design §7) from outside its writer: handed to the
//! process that writes it, over the control channel, or, when none does,
//! recorded here under the run's lock. Either way it is on record, with
//! who sent it, before the answer.

use std::sync::Arc;

use domain::{Caller, RunId, WorkflowDef};
use serde_json::Value;

use super::{Executor, ExecutorError, driver};
use crate::ports::{CommandReply, ControlError, StoreError};

/// How often [`Executor::command`] tries to reach a writer or take the lock.
const COMMAND_TRIES: u32 = 40;

impl Executor {
    /// Gives a command (design §7; the raw JSON of a [`RuntimeCommand`](domain::RuntimeCommand)) to
    /// a run: to the process writing it, over the control channel; when no
    /// process does, this one takes the run's lock and records it itself
    /// (`workflow` is then needed: the run's definition). Either way the
    /// command is on record, accepted or rejected, before the answer, with
    /// `by`, who sent it.
    pub async fn command(
        &self,
        run_id: RunId,
        raw: &Value,
        by: Option<&Caller>,
        workflow: impl AsyncFnOnce() -> Result<Arc<WorkflowDef>, ExecutorError>,
    ) -> Result<CommandReply, ExecutorError> {
        // A writer may be between taking the lock and listening, or between
        // its end and its lock's release: try a few times.
        let mut lock = None;
        for _ in 0..COMMAND_TRIES {
            if let Some(control) = &self.ports.control {
                match control.deliver(run_id, raw, by.cloned()).await {
                    Ok(reply) => return Ok(reply),
                    Err(ControlError::NoWriter(_)) => {}
                    Err(e) => return Err(ExecutorError::Control(e)),
                }
            }
            match self.ports.store.lock(run_id).await {
                Ok(held) => {
                    lock = Some(held);
                    break;
                }
                Err(StoreError::Locked(_)) => {
                    self.ports
                        .clock
                        .sleep(std::time::Duration::from_millis(50))
                        .await;
                }
                // A run that ended takes no command whatever its storage
                // says: that refusal first, before a lock the process may
                // not be able to take (storage it may read, not write).
                Err(e) => return Err(self.ended_or(run_id, e, "it takes no more commands").await),
            }
        }
        let Some(lock) = lock else {
            return Err(ExecutorError::Refused(format!(
                "run {run_id} is locked by a process that takes no commands"
            )));
        };
        let state = crate::inspect::current_snapshot(self.ports.store.as_ref(), run_id).await?;
        if state.last_offset == 0 {
            return Err(ExecutorError::Refused(format!(
                "run {run_id} never started; it takes no commands"
            )));
        }
        if state.status.is_terminal() {
            // Its log ends with its terminal event: nothing is appended after it.
            return Err(ExecutorError::Refused(format!(
                "run {run_id} has ended ({}); it takes no more commands",
                state.status.as_str()
            )));
        }
        let workflow = workflow().await?;
        driver::Driver::record_command(
            Arc::clone(&self.ports),
            lock,
            workflow,
            state,
            raw.clone(),
            by.cloned(),
        )
        .await
    }
}
