//! [`RunQueue`]: runs submitted to whichever worker claims them first
//! (`awr submit`, `awr worker`).
//!
//! A queued run is a run of the store with no event yet and a
//! [`Submission`]: all a worker on any machine needs to start it, read from
//! the store (the definition by its hash, never a file on one machine's
//! disk). Claiming it leases it to the worker, as [`RunStore::lock`] does,
//! so from there on it is an ordinary run with one writer: the worker
//! starts it (its `flow:started` records the submission), and a worker
//! that claims it after another died continues it through the resume path,
//! as `awr recover` would.

use async_trait::async_trait;
use domain::{Caller, RunId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::store::{RunLock, RunStore, StoreError};

/// What a queued run is to run, as the store keeps it with the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Submission {
    /// The hash of the workflow definition, saved in the store first.
    pub definition: String,
    /// The workflow's name, for listings.
    pub workflow: String,
    /// The run's input.
    pub input: Value,
    /// The workflow file as it was read (`flow:started`'s `source`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Who submitted it (`flow:started`'s `startedBy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<Caller>,
    /// Claimed before runs of a lower priority; runs of one priority in
    /// the order they were submitted.
    #[serde(default)]
    pub priority: i32,
}

/// A run a worker claimed: its lock, and what to run.
#[derive(Debug)]
pub struct Claim {
    /// The run's lock, leased to the worker's store instance.
    pub lock: RunLock,
    /// What the run was submitted with.
    pub submission: Submission,
    /// Whether its log holds events: a worker that claimed it before died
    /// or handed it over, and it is continued from its log, not started.
    pub started: bool,
}

/// A queue of runs on a store that workers on many machines share.
///
/// The contract, which every implementation meets:
/// - [`RunQueue::submit`] creates the run (`Conflict` if it exists) with no
///   event, and returns without waiting for a worker;
/// - [`RunQueue::claim`] leases one claimable run to this store instance,
///   as [`RunStore::lock`] does, so two claims never get one run: a queued
///   run of the highest priority, the oldest first; or a submitted run
///   whose writer is gone (its process died, its lease expired) and whose
///   log has not ended and is not paused. `None` when there is none.
#[async_trait]
pub trait RunQueue: RunStore {
    /// Queues `run_id` to run `submission`.
    async fn submit(&self, run_id: RunId, submission: &Submission) -> Result<(), StoreError>;

    /// Claims the next claimable run, if any.
    async fn claim(&self) -> Result<Option<Claim>, StoreError>;

    /// Keeps `run_id` from being claimed for `delay`: a run that could not
    /// run where it was claimed (its definition does not load there, the
    /// store failed) waits rather than be claimed again at once.
    async fn defer(&self, run_id: RunId, delay: std::time::Duration) -> Result<(), StoreError>;
}
