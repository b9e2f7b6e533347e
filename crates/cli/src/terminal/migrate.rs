//! `awr migrate`: copies every run from one storage to another, whole and
//! byte for byte (the service is `application::migrate`).

use anyhow::anyhow;
use application::migrate::{self, Migrated};

use crate::storage::Storage;
use crate::{Failure, note, say, wiring};

/// Copies the runs of `from` into `to`, one line per run on stdout:
/// `copied RUN (N events[, transcript])` or `present RUN`; a run that is
/// not copied is named on stderr, and makes the exit code 2.
pub async fn migrate(from: &Storage, to: &Storage) -> Result<(), Failure> {
    if from == to {
        return Err(Failure::Input(anyhow!(
            "--from and --to are the same storage ({from})"
        )));
    }
    let source = wiring::read_store(from).await?;
    let target = wiring::store(to).await?;
    let (from_files, to_files) = (wiring::run_files(from), wiring::run_files(to));
    let mut refused = 0usize;
    let mut closed = None;
    let outcomes = migrate::migrate(source, &*from_files, &*target, &*to_files, |run, m| {
        let line = match m {
            Migrated::Copied { events, transcript } => {
                let t = if *transcript { ", transcript" } else { "" };
                format!("copied {run} ({events} events{t})")
            }
            Migrated::Present { transcript: true } => {
                format!("present {run} (already in {to}; its transcript copied now)")
            }
            Migrated::Present { transcript: false } => format!("present {run} (already in {to})"),
            Migrated::Refused(why) => {
                refused += 1;
                note(&format!("awr: run {run} not copied: {why}"));
                return;
            }
        };
        if closed.is_none()
            && let Err(e) = say(&line)
        {
            closed = Some(e);
        }
    })
    .await
    .map_err(|e| Failure::Input(anyhow!("storage {from}: {e}")))?;
    if let Some(e) = closed {
        return Err(e);
    }
    note(&format!(
        "awr: {} runs from {from} to {to}: {} copied, {} already there, {refused} not copied",
        outcomes.len(),
        outcomes
            .iter()
            .filter(|(_, m)| matches!(m, Migrated::Copied { .. }))
            .count(),
        outcomes
            .iter()
            .filter(|(_, m)| matches!(m, Migrated::Present { .. }))
            .count(),
    ));
    if refused > 0 {
        return Err(Failure::Input(anyhow!(
            "{refused} runs were not copied (see above); run migrate again to copy them"
        )));
    }
    Ok(())
}
