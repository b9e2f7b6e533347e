//! `awr prune`: deletes whole finished runs older than an age, with their
//! children (the retention service, `application::retention`).

use std::time::Duration;

use anyhow::anyhow;
use application::ports::Clock;
use application::retention::{self, PrunePolicy, PruneReport};
use domain::RunStatus;

use crate::storage::Storage;
use crate::{Failure, note, say, wiring};

/// Parses `--status`: a finished status, or `paused`; never one of a run
/// that may still go on.
pub fn parse_status(value: &str) -> Result<RunStatus, String> {
    let status: RunStatus = serde_json::from_value(serde_json::Value::String(value.into()))
        .map_err(|_| {
            format!("unknown status `{value}`: use completed, failed, cancelled or paused")
        })?;
    if !PrunePolicy::selectable(status) {
        return Err(format!(
            "a {value} run is never pruned: use completed, failed, cancelled or paused"
        ));
    }
    Ok(status)
}

/// Prunes `storage` once and prints each run deleted (or, with `dry_run`,
/// that would be), one line each: `deleted RUN STATUS ended TIME`.
pub async fn prune(
    storage: &Storage,
    older_than: Duration,
    statuses: Vec<RunStatus>,
    dry_run: bool,
) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let files = wiring::run_files(storage);
    let (clock, _) = wiring::clock_and_ids();
    let policy = PrunePolicy {
        older_than,
        statuses,
        dry_run,
    };
    let report = retention::prune(&*store, &*files, &policy, clock.now())
        .await
        .map_err(|e| Failure::Input(anyhow!("storage {storage}: {e}")))?;
    print(&report, dry_run)
}

fn print(report: &PruneReport, dry_run: bool) -> Result<(), Failure> {
    let verb = if dry_run { "would delete" } else { "deleted" };
    for run in &report.pruned {
        let child = run
            .parent
            .map(|p| format!(" (child of {p})"))
            .unwrap_or_default();
        say(&format!(
            "{verb} {} {} ended {}{child}",
            run.run_id,
            run.status.as_str(),
            run.ended_at
        ))?;
    }
    let files_verb = if dry_run { "would remove" } else { "removed" };
    for run in &report.orphans {
        say(&format!(
            "{files_verb} the files of {run} (its run is gone)"
        ))?;
    }
    for (run, why) in &report.kept {
        note(&format!("awr: kept run {run}: {why}"));
    }
    for (run, why) in &report.failed {
        note(&format!("awr: could not prune run {run}: {why}"));
    }
    let n = report.pruned.len();
    let runs = if n == 1 { "run" } else { "runs" };
    note(&format!("awr: {verb} {n} {runs}"));
    match report.failed.len() {
        0 => Ok(()),
        n => Err(Failure::Input(anyhow!(
            "{n} run(s) could not be pruned (see above): the storage failed them"
        ))),
    }
}
