//! The runtimes a worker (`awr worker`) runs its claims on: each run's
//! definition, read from the store, wired with the stock adapters over
//! the worker's own store instance, which holds the claims' leases.

use std::path::Path;
use std::sync::Arc;

use application::ports::RunStore;
use application::worker::Runtimes;
use application::{ExecutorError, Runtime};
use async_trait::async_trait;
use domain::WorkflowDef;
use domain::definition::Definition;

use crate::storage::Storage;

/// Wires each definition as `awr run` wires a file.
pub struct StockRuntimes {
    storage: Storage,
    store: Arc<dyn RunStore>,
}

impl StockRuntimes {
    /// Runtimes writing to `store` (the worker's queue), with what runs
    /// keep beside it where `storage` says.
    pub fn new(storage: Storage, store: Arc<dyn RunStore>) -> Self {
        Self { storage, store }
    }
}

#[async_trait]
impl Runtimes for StockRuntimes {
    async fn for_definition(
        &self,
        definition: &Definition,
    ) -> Result<(Runtime, Arc<WorkflowDef>), ExecutorError> {
        let workflow = super::load_kept(definition)
            .map_err(|e| ExecutorError::Refused(format!("{:#}", e.error())))?;
        let file = Path::new(&definition.root);
        let store = Arc::clone(&self.store);
        let wired = super::wire(&self.storage, store, file, &workflow, None, None);
        Ok((wired.runtime, workflow))
    }
}
