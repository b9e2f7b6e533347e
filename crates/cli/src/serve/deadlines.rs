//! `awr serve` watches the deadlines of the runs waiting in its store
//! (docs/approvals.md): a run that is `waiting` past the deadline of one of
//! its questions is continued in the server's process, as `awr recover`
//! would, which settles the question as its `on_timeout` says, once.
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
        // Runs that could not be continued (their definition is gone, say):
        // named once, then left to `awr recover`, which says why.
        let mut given_up = std::collections::HashSet::new();
        loop {
            let now = clock.now();
            let store = std::sync::Arc::clone(app.store());
            match query::overdue_runs(store.as_ref(), now).await {
                Ok(overdue) => {
                    for listed in overdue {
                        let run_id = listed.run_id();
                        if app.writes(run_id) || given_up.contains(&run_id) {
                            continue;
                        }
                        tracing::info!(run = %run_id, "a deadline of a waiting run passed: continuing it");
                        if let Err(e) = super::runs::recover(&app, run_id).await {
                            tracing::warn!(run = %run_id, error = ?e, "cannot continue a waiting run past its deadline; `awr recover` will say why");
                            given_up.insert(run_id);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot list the waiting runs"),
            }
            let now = clock.now();
            let next = match query::next_waiting_deadline(store.as_ref()).await {
                // Past, once every run past one was continued: only runs
                // given up on are left past theirs.
                Ok(Some(at)) if at > now => Duration::from_millis(at.millis_since(now)),
                Ok(_) | Err(_) => LOOK_AT_LEAST,
            };
            tokio::time::sleep(next.clamp(LOOK_AT_MOST, LOOK_AT_LEAST)).await;
        }
    }))
}
