//! `awr causal RUN`: the run's causal events (seed 002), one canonical JSON
//! line each, in topological order; projected from its log, as every run's
//! are (`domain::causal`).

use anyhow::anyhow;

use crate::storage::Storage;
use crate::terminal::inspect::resolve_run;
use crate::{Failure, say, wiring};

/// Prints the causal events of `run`.
pub async fn causal(storage: &Storage, run: &str) -> Result<(), Failure> {
    let id = resolve_run(storage, run).await?;
    let store = wiring::read_store(storage).await?;
    let events = store
        .read(id, 0, usize::MAX)
        .await
        .map_err(|e| Failure::Input(anyhow!("run {id}: {e}")))?;
    for event in domain::causal::project(&events, &id.to_string()) {
        let line =
            domain::canonical::jcs(&event).map_err(|e| Failure::Input(anyhow!("run {id}: {e}")))?;
        say(&String::from_utf8_lossy(&line))?;
    }
    Ok(())
}
