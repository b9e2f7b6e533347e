//! One writer per run on PostgreSQL: leases.
//!
//! A run's lease is its row's `lease_owner`, `lease_epoch` (one more at
//! every taking, the fencing token every write checks),
//! `lease_expires_at` (on the database's clock) and `lease_presence`. It
//! can be taken when nobody holds it, when it expired, or when its holder's
//! session is gone. This instance also keeps the runs it leases in `held`,
//! so that a second lock of one of them is refused without asking the
//! server, and so that a dropped lock frees the run here at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use application::ports::{RunLock, StoreError};
use domain::RunId;
use futures::FutureExt;

use super::super::{locked_elsewhere, locked_here, not_locked};
use super::shared::{Hold, Inner, lease_lost, lock, pg_err, prepare_err};

/// A held lease, shared by the [`RunLock`]'s hold and its release.
struct Lease {
    inner: Arc<Inner>,
    run_id: RunId,
    epoch: i64,
    released: AtomicBool,
}

impl Lease {
    /// Frees the run here, and says whether this is the first release (the
    /// one that must free it on the server too).
    fn forget(&self) -> bool {
        if self.released.swap(true, Ordering::AcqRel) {
            return false;
        }
        let mut held = lock(&self.inner.held);
        if matches!(held.get(&self.run_id), Some(Hold::Held(e) | Hold::Lost(e)) if *e == self.epoch)
        {
            held.remove(&self.run_id);
            lock(&self.inner.upto).remove(&self.run_id);
        }
        let mut losses = lock(&self.inner.losses);
        if losses
            .get(&self.run_id)
            .is_some_and(|(e, _)| *e == self.epoch)
        {
            losses.remove(&self.run_id);
        }
        true
    }

    /// Clears the lease on the server, if it is still this one.
    async fn clear(inner: Arc<Inner>, run_id: RunId, epoch: i64) {
        let cleared = async {
            let client = inner.client().await?;
            client
                .execute(
                    &client
                        .prepare_cached(
                            "UPDATE awr_runs SET lease_owner = NULL, lease_presence = NULL, \
                     lease_expires_at = NULL \
                     WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3",
                        )
                        .await
                        .map_err(prepare_err)?,
                    &[&run_id.as_uuid(), &inner.owner, &epoch],
                )
                .await
                .map_err(|e| pg_err(format!("release run {run_id}"), e))
        };
        if let Err(e) = cleared.await {
            // It expires, or goes with this process's session.
            tracing::warn!(run = %run_id, error = %e, "cannot release a run's lease");
        }
    }
}

/// What a PostgreSQL [`RunLock`] holds: dropped without
/// [`RunLock::release`], it frees the run here at once and on the server in
/// the background.
struct Held(Arc<Lease>);

impl Drop for Held {
    fn drop(&mut self) {
        let lease = &self.0;
        if !lease.forget() {
            return;
        }
        let (inner, run_id, epoch) = (Arc::clone(&lease.inner), lease.run_id, lease.epoch);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(Lease::clear(inner, run_id, epoch));
            }
            // No runtime left (the process is ending): the session goes
            // with it, and with the session the lease.
            Err(_) => tracing::debug!(run = %run_id, "a lease left to its session"),
        }
    }
}

impl Inner {
    /// Clears the lease of `run_id` under `epoch` on the server, if it is
    /// still this instance's: a claim that could not be used.
    pub(super) async fn clear_lease(self: &Arc<Self>, run_id: RunId, epoch: i64) {
        Lease::clear(Arc::clone(self), run_id, epoch).await;
    }

    /// Marks `run_id` as being taken here; `Locked` if this instance holds
    /// it or is taking it already.
    pub(super) fn reserve(&self, run_id: RunId) -> Result<(), StoreError> {
        let mut held = lock(&self.held);
        match held.get(&run_id) {
            // A lock whose lease was lost is still held here until it is
            // dropped: a second one would let both write.
            Some(Hold::Taking | Hold::Held(_) | Hold::Lost(_)) => Err(locked_here(run_id)),
            _ => {
                held.insert(run_id, Hold::Taking);
                Ok(())
            }
        }
    }

    /// Ends a reservation: the lock of `epoch`, or nothing.
    pub(super) fn settle(self: &Arc<Self>, run_id: RunId, epoch: Option<i64>) -> Option<RunLock> {
        let mut held = lock(&self.held);
        let Some(epoch) = epoch else {
            held.remove(&run_id);
            return None;
        };
        held.insert(run_id, Hold::Held(epoch));
        let lost = tokio_util::sync::CancellationToken::new();
        lock(&self.losses).insert(run_id, (epoch, lost.clone()));
        let lease = Arc::new(Lease {
            inner: Arc::clone(self),
            run_id,
            epoch,
            released: AtomicBool::new(false),
        });
        let release = Arc::clone(&lease);
        Some(
            RunLock::with_release(run_id, Held(lease), move || {
                async move {
                    if release.forget() {
                        Lease::clear(Arc::clone(&release.inner), release.run_id, release.epoch)
                            .await;
                    }
                }
                .boxed()
            })
            .losable(lost)
            .fenced(epoch),
        )
    }

    /// The lease term as the server's interval arithmetic takes it.
    pub(super) fn ttl_millis(&self) -> f64 {
        self.config.lease_ttl.as_secs_f64() * 1000.0
    }

    /// Registers a new run, leased to this instance.
    pub(super) async fn create(self: &Arc<Self>, run_id: RunId) -> Result<RunLock, StoreError> {
        if self.reserve(run_id).is_err() {
            // Held or being taken here: it exists.
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        let created = async {
            let client = self.client().await?;
            let row = client
                .query_opt(
                    &client
                        .prepare_cached(
                            "INSERT INTO awr_runs (run_id, status, lease_owner, lease_presence, \
                     lease_epoch, lease_expires_at) \
                     VALUES ($1, 'pending', $2, $3, 1, now() + $4 * interval '1 millisecond') \
                     ON CONFLICT (run_id) DO NOTHING RETURNING lease_epoch",
                        )
                        .await
                        .map_err(prepare_err)?,
                    &[
                        &run_id.as_uuid(),
                        &self.owner,
                        &self.presence,
                        &self.ttl_millis(),
                    ],
                )
                .await
                .map_err(|e| pg_err(format!("create run {run_id}"), e))?;
            // The epoch is the fencing token: durable before it is used.
            if row.is_some() {
                self.sync(&client, None).await?;
            }
            Ok::<_, StoreError>(row.map(|row| row.get::<_, i64>(0)))
        }
        .await;
        match created {
            Ok(Some(epoch)) => Ok(self
                .settle(run_id, Some(epoch))
                .ok_or_else(|| locked_here(run_id))?),
            Ok(None) => {
                self.settle(run_id, None);
                Err(StoreError::Conflict(format!("run {run_id} already exists")))
            }
            Err(e) => {
                self.settle(run_id, None);
                Err(e)
            }
        }
    }

    /// Takes the lease of an existing run, if nobody alive holds it.
    pub(super) async fn take(self: &Arc<Self>, run_id: RunId) -> Result<RunLock, StoreError> {
        self.reserve(run_id)?;
        let taken = async {
            let client = self.client().await?;
            // `lease_owner = $2`: a lease of this instance's whose release
            // is still on its way is this instance's to take again.
            let row = client
                .query_opt(
                    &client
                        .prepare_cached(
                            "UPDATE awr_runs AS r SET lease_owner = $2, lease_presence = $3, \
                     lease_epoch = lease_epoch + 1, \
                     lease_expires_at = now() + $4 * interval '1 millisecond' \
                     WHERE run_id = $1 AND (lease_owner = $2 OR NOT coalesce(awr_leased(r), false)) \
                     RETURNING lease_epoch",
                        )
                        .await
                        .map_err(prepare_err)?,
                    &[
                        &run_id.as_uuid(),
                        &self.owner,
                        &self.presence,
                        &self.ttl_millis(),
                    ],
                )
                .await
                .map_err(|e| pg_err(format!("lock run {run_id}"), e))?;
            match row {
                Some(row) => {
                    // The epoch is the fencing token: durable before it is used.
                    self.sync(&client, None).await?;
                    Ok(row.get::<_, i64>(0))
                }
                None if self.exists(&client, run_id).await? => Err(locked_elsewhere(run_id)),
                None => Err(StoreError::NotFound(run_id)),
            }
        }
        .await;
        match taken {
            Ok(epoch) => self
                .settle(run_id, Some(epoch))
                .ok_or_else(|| locked_here(run_id)),
            Err(e) => {
                self.settle(run_id, None);
                Err(e)
            }
        }
    }

    /// Whether a writer that is still there holds the run.
    pub(super) async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached(
                        "SELECT lease_owner, coalesce(awr_leased(r), false) FROM awr_runs AS r WHERE run_id = $1",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("look up the writer of run {run_id}"), e))?
            .ok_or(StoreError::NotFound(run_id))?;
        let owner: Option<String> = row.get(0);
        if owner.as_deref() == Some(self.owner.as_str()) {
            // Ours: what this instance holds, whatever the server has yet
            // to hear of a release.
            return Ok(matches!(lock(&self.held).get(&run_id), Some(Hold::Held(_))));
        }
        Ok(row.get(1))
    }

    /// The epoch this instance may write `run_id` under: `Locked` unless it
    /// holds the run's lease.
    pub(super) fn epoch(&self, run_id: RunId) -> Result<i64, StoreError> {
        match lock(&self.held).get(&run_id) {
            Some(Hold::Held(epoch)) => Ok(*epoch),
            Some(Hold::Lost(_)) => Err(lease_lost(run_id)),
            _ => Err(not_locked(run_id)),
        }
    }

    /// Records that another writer took `run_id` over from `epoch`.
    pub(super) fn lost(&self, run_id: RunId, epoch: i64) {
        let mut held = lock(&self.held);
        if held.get(&run_id) == Some(&Hold::Held(epoch)) {
            held.insert(run_id, Hold::Lost(epoch));
            tracing::warn!(run = %run_id, epoch, "this writer's lease was taken over");
        }
        drop(held);
        if let Some((_, lost)) = lock(&self.losses).get(&run_id).filter(|(e, _)| *e == epoch) {
            lost.cancel();
        }
    }
}

/// Renews this instance's leases three times a term, on the database's
/// clock, until the store is gone; a lease it finds taken over is marked
/// lost, so the next write of its run is refused without a round trip.
pub(super) async fn heartbeat(inner: Weak<Inner>, ttl: Duration) {
    let every = (ttl / 3).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = renew(&inner).await {
            tracing::warn!(error = %e, "cannot renew this process's leases");
        }
    }
}

/// One heartbeat: renews every lease held here.
async fn renew(inner: &Inner) -> Result<(), StoreError> {
    let (runs, epochs): (Vec<uuid::Uuid>, Vec<i64>) = lock(&inner.held)
        .iter()
        .filter_map(|(run, hold)| match hold {
            Hold::Held(epoch) => Some((run.as_uuid(), *epoch)),
            _ => None,
        })
        .unzip();
    if runs.is_empty() {
        return Ok(());
    }
    let client = inner.client().await?;
    let renewed = client
        .query(
            &client.prepare_cached("UPDATE awr_runs AS r SET lease_expires_at = now() + $3 * interval '1 millisecond', \
             lease_presence = $4 \
             FROM unnest($1::uuid[], $2::int8[]) AS h(run_id, epoch) \
             WHERE r.run_id = h.run_id AND r.lease_epoch = h.epoch AND r.lease_owner = $5 \
             AND r.lease_expires_at > now() \
             RETURNING r.run_id").await.map_err(prepare_err)?,
            &[
                &runs,
                &epochs,
                &inner.ttl_millis(),
                &inner.presence,
                &inner.owner,
            ],
        )
        .await
        .map_err(|e| pg_err("renew leases".to_owned(), e))?;
    let renewed: std::collections::HashSet<uuid::Uuid> =
        renewed.iter().map(|row| row.get(0)).collect();
    for (run, epoch) in runs.into_iter().zip(epochs) {
        if !renewed.contains(&run)
            && let Ok(run_id) = RunId::new(run)
        {
            inner.lost(run_id, epoch);
        }
    }
    Ok(())
}
