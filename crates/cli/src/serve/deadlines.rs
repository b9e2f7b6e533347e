//! `awr serve` watches the deadlines of the runs waiting in its store
//! (docs/approvals.md): a run that is `waiting` past the deadline of one of
//! its questions, or with an answer on record that nothing acted on (its
//! answerer's process died before continuing it), is continued in the
//! server's process, as `awr recover` would, which settles the question,
//! once.
//!
//! The deadline is on record, not in a timer: this only decides when the
//! server looks. It looks at the nearest deadline of the runs waiting, and
//! at least every [`LOOK_AT_LEAST`] for runs that started waiting since.

use std::time::Duration;

use application::ports::Clock;
use application::query;

use super::App;
use super::retention::AbortOnDrop;

/// The longest the server goes without looking at its waiting runs.
const LOOK_AT_LEAST: Duration = Duration::from_secs(30);

/// The least time between two looks: a deadline passes, then its run is
/// continued, and the next look must not find it again before then.
const LOOK_AT_MOST: Duration = Duration::from_millis(200);

/// Starts the watcher; it stops when the returned handle is dropped.
pub fn spawn(app: &App) -> AbortOnDrop {
    let app = app.clone();
    let (clock, _) = crate::wiring::clock_and_ids();
    AbortOnDrop::new(tokio::spawn(async move {
        // Runs whose definition cannot be read, at the offset they were
        // found at: named once, then left to `awr recover`, which says why,
        // until they change.
        let mut given_up = std::collections::HashSet::new();
        loop {
            let store = std::sync::Arc::clone(app.store());
            let mut next = LOOK_AT_LEAST;
            match query::waiting_due(store.as_ref()).await {
                Ok(waiting) => {
                    let now = clock.now();
                    for (run_id, offset, at) in waiting {
                        if app.writes(run_id) || given_up.contains(&(run_id, offset)) {
                            continue;
                        }
                        if at > now {
                            next = next.min(Duration::from_millis(at.millis_since(now)));
                            continue;
                        }
                        tracing::info!(run = %run_id, "a waiting run has a question to settle: continuing it");
                        if let Err(e) = super::runs::recover(&app, run_id).await {
                            tracing::warn!(run = %run_id, error = ?e, "cannot continue a waiting run; `awr recover` will say why");
                            given_up.insert((run_id, offset));
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot list the waiting runs"),
            }
            tokio::time::sleep(next.max(LOOK_AT_MOST)).await;
        }
    }))
}
