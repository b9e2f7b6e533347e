//! Retention: pruning whole finished runs older than a given age, with their
//! sub-workflow children, on any store.
//!
//! - Only finished runs go: `completed`, `failed`, `cancelled` by default;
//!   `paused` only when asked for by name (it waits for `awr resume`).
//!   Never `running`, `pending` or interrupted, and never a run with a
//!   writer (the store refuses it, and a tree with one is left whole).
//! - Age is the end time: the timestamp of the run's last event.
//! - A child run (`call_workflow`) goes with its parent, never alone while
//!   its parent is kept: the tree is judged by its root, and deleted root
//!   first, so a crash midway leaves children whose parent is gone; those
//!   are roots of their own at the next prune and go then.
//! - Each run is deleted by the store's `delete_run` (whole or not at all,
//!   even across a crash), its files ([`RunFiles`]) after it. Files whose
//!   run is gone (a crash came between the two) go at a later prune, once
//!   they were last written longer ago than the age asked for and than
//!   [`ORPHAN_GRACE`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use domain::{EventKind, RunId, RunStatus, Timestamp};

use crate::inspect::{ShownStatus, run_view};
use crate::ports::{RunFiles, RunStore, StoreError};

/// Which runs to prune.
#[derive(Debug, Clone)]
pub struct PrunePolicy {
    /// Runs that ended longer ago than this.
    pub older_than: Duration,
    /// Statuses a root run must have; empty means every finished status
    /// (`completed`, `failed`, `cancelled`).
    pub statuses: Vec<RunStatus>,
    /// Report what would go, delete nothing.
    pub dry_run: bool,
}

impl PrunePolicy {
    /// The statuses a prune may select: `running` and `pending` never are.
    pub fn selectable(status: RunStatus) -> bool {
        status.is_terminal() || status == RunStatus::Paused
    }

    fn selects(&self, status: RunStatus) -> bool {
        if self.statuses.is_empty() {
            status.is_terminal()
        } else {
            Self::selectable(status) && self.statuses.contains(&status)
        }
    }
}

/// One run pruned (or that would be, on a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// The run.
    pub run_id: RunId,
    /// Its status.
    pub status: RunStatus,
    /// When it ended.
    pub ended_at: Timestamp,
    /// The run whose child it is, when it went with its parent.
    pub parent: Option<RunId>,
}

/// How long files without a run are left alone, whatever the age asked
/// for: a run's transcript may be created a moment before the store holds
/// the run.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(600);

/// What a prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Runs deleted (or, on a dry run, that would be), parents before children.
    pub pruned: Vec<Pruned>,
    /// Runs whose files were removed (or would be) because the run itself
    /// was gone.
    pub orphans: Vec<RunId>,
    /// Runs the policy selected but that were kept, and why: a tree with
    /// a run not finished, a run a writer holds.
    pub kept: Vec<(RunId, String)>,
    /// Runs that could not be read or deleted, and why: the store failed
    /// them, and the prune did not do all it was asked.
    pub failed: Vec<(RunId, String)>,
}

/// What the prune knows of one run.
struct Known {
    status: ShownStatus,
    ended_at: Option<Timestamp>,
    parent: Option<RunId>,
}

/// Deletes the runs `policy` selects, as of `now`, with their children.
/// A run that cannot be read is kept (and reported); only a store that
/// cannot list its runs fails the whole prune.
pub async fn prune(
    store: &dyn RunStore,
    files: &dyn RunFiles,
    policy: &PrunePolicy,
    now: Timestamp,
) -> Result<PruneReport, StoreError> {
    let mut report = PruneReport::default();
    let mut runs = BTreeMap::new();
    let mut ids = store.list_runs().await?;
    ids.sort();
    for run_id in ids {
        match known(store, run_id).await {
            Ok(k) => {
                runs.insert(run_id, k);
            }
            // Deleted meanwhile (another prune).
            Err(StoreError::NotFound(_)) => {}
            Err(e) => report.failed.push((run_id, format!("cannot be read: {e}"))),
        }
    }
    let mut children: HashMap<RunId, Vec<RunId>> = HashMap::new();
    for (id, k) in &runs {
        if let Some(parent) = k.parent.filter(|p| runs.contains_key(p)) {
            children.entry(parent).or_default().push(*id);
        }
    }
    let cutoff = now.as_millis().saturating_sub(millis(policy.older_than));
    let roots = runs
        .iter()
        .filter(|(_, k)| k.parent.is_none_or(|p| !runs.contains_key(&p)));
    for (root, k) in roots {
        let ShownStatus::Recorded(status) = k.status else {
            continue;
        };
        let old = k.ended_at.is_some_and(|t| t.as_millis() <= cutoff);
        if !policy.selects(status) || !old {
            continue;
        }
        let tree = tree(*root, &children);
        if let Some(why) = unfinished(&tree, &runs, policy) {
            report.kept.push((*root, why));
            continue;
        }
        for (run_id, parent) in tree {
            let k = &runs[&run_id];
            let ShownStatus::Recorded(status) = k.status else {
                continue;
            };
            if !policy.dry_run {
                match store.delete_run(run_id).await {
                    Ok(()) | Err(StoreError::NotFound(_)) => {}
                    // The rest of this tree waits for the next prune: its
                    // root is gone, so they are roots of their own then.
                    // A writer holds it: kept, as a live run is.
                    Err(e @ StoreError::Locked(_)) => {
                        report.kept.push((run_id, e.to_string()));
                        break;
                    }
                    Err(e) => {
                        report.failed.push((run_id, e.to_string()));
                        break;
                    }
                }
                if let Err(e) = files.remove(run_id).await {
                    tracing::warn!(run = %run_id, error = %e, "the run is deleted but not all its files");
                }
            }
            report.pruned.push(Pruned {
                run_id,
                status,
                ended_at: k.ended_at.unwrap_or(now),
                parent,
            });
        }
    }
    orphans(&runs, files, policy, now, &mut report).await;
    Ok(report)
}

/// Removes the files of runs the store does not hold, last written before
/// the cutoff and the grace. Listed after the runs were, so a run created
/// since has files newer than the grace and stays.
async fn orphans(
    runs: &BTreeMap<RunId, Known>,
    files: &dyn RunFiles,
    policy: &PrunePolicy,
    now: Timestamp,
    report: &mut PruneReport,
) {
    let age = millis(policy.older_than.max(ORPHAN_GRACE));
    let cutoff = now.as_millis().saturating_sub(age);
    let listed = match files.listed().await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the runs' files; files without a run stay");
            return;
        }
    };
    let unreadable: HashSet<RunId> = (report.kept.iter().chain(&report.failed))
        .map(|(id, _)| *id)
        .collect();
    for (run_id, written) in listed {
        if runs.contains_key(&run_id)
            || unreadable.contains(&run_id)
            || written.as_millis() > cutoff
        {
            continue;
        }
        if !policy.dry_run
            && let Err(e) = files.remove(run_id).await
        {
            tracing::warn!(run = %run_id, error = %e, "cannot remove the files of a deleted run");
            continue;
        }
        report.orphans.push(run_id);
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

async fn known(store: &dyn RunStore, run_id: RunId) -> Result<Known, StoreError> {
    let view = run_view(store, run_id).await?;
    let first = store.read(run_id, 0, 1).await?;
    let parent = first.first().and_then(|e| match &e.kind {
        EventKind::FlowStarted { parent_run_id, .. } => *parent_run_id,
        _ => None,
    });
    Ok(Known {
        status: view.status,
        ended_at: view.snapshot.updated_at,
        parent,
    })
}

/// `root` and its descendants, each before its children, with its parent.
fn tree(root: RunId, children: &HashMap<RunId, Vec<RunId>>) -> Vec<(RunId, Option<RunId>)> {
    let mut out = vec![(root, None)];
    let mut seen = HashSet::from([root]);
    let mut i = 0;
    while i < out.len() {
        let (id, _) = out[i];
        for child in children.get(&id).into_iter().flatten() {
            if seen.insert(*child) {
                out.push((*child, Some(id)));
            }
        }
        i += 1;
    }
    out
}

/// Why a tree must stay: a run in it has not finished, or is paused while
/// `paused` was not asked for (it waits for `awr resume`, child or not).
fn unfinished(
    tree: &[(RunId, Option<RunId>)],
    runs: &BTreeMap<RunId, Known>,
    policy: &PrunePolicy,
) -> Option<String> {
    tree.iter().find_map(|(id, _)| match runs[id].status {
        ShownStatus::Recorded(s) if s.is_terminal() => None,
        ShownStatus::Recorded(RunStatus::Paused)
            if policy.statuses.contains(&RunStatus::Paused) =>
        {
            None
        }
        other => Some(format!("its run {id} is {}", other.as_str())),
    })
}
