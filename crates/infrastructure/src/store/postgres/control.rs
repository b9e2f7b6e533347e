//! [`PgControl`]: commands to a run whose writer is another process, on
//! this machine or another, through the database.
//!
//! The sender inserts the command (`awr_commands`) and waits for its reply;
//! the writer's listener takes it, hands it to the run, and writes the
//! answer the run gives once the command is recorded. A notification on
//! `awr_log` wakes either side (a hint: each re-reads its rows), and a slow
//! poll is the safety net. Exactly once: a command is taken by one writer
//! (`FOR UPDATE SKIP LOCKED`); one that no writer took is withdrawn by its
//! sender, who then records it itself under the run's lock, as with no
//! writer at all; one a writer took and could not hand on is given back.

use std::sync::Arc;
use std::time::Duration;

use application::ports::{CommandReply, ControlChannel, ControlError, Delivery, Listener};
use async_trait::async_trait;
use domain::{Caller, RunId};
use serde_json::Value;
use tokio::sync::mpsc;

use super::PgRunStore;
use super::shared::{CHANNEL, Inner};

/// How long a sender waits for a live writer's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// Commands over the PostgreSQL store's database.
#[derive(Debug, Clone)]
pub struct PgControl {
    inner: Arc<Inner>,
}

impl PgControl {
    /// Commands through `store`'s database, its session waking both sides.
    pub fn new(store: &PgRunStore) -> Self {
        Self {
            inner: Arc::clone(&store.inner),
        }
    }
}

/// A failed statement, as the channel reports it, with its cause (a
/// client error's says what the server said).
fn io(what: &str, e: impl std::error::Error) -> ControlError {
    match e.source() {
        Some(cause) => ControlError::Io(format!("PostgreSQL: cannot {what}: {e}: {cause}")),
        None => ControlError::Io(format!("PostgreSQL: cannot {what}: {e}")),
    }
}

impl Inner {
    /// Runs `check` and, unless it found what it looks for, waits until the
    /// run's commands are notified of, or `poll` passed.
    async fn wait_on(&self, run_id: RunId, poll: Duration, check: impl AsyncFnOnce() -> bool) {
        let notify = self.notifies.of_commands(run_id);
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if check().await {
            return;
        }
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep(poll) => {}
        }
    }

    /// Takes the oldest command of `run_id` no writer took yet, noting the
    /// lease epoch the run is written under now (this writer's).
    async fn take_command(
        &self,
        run_id: RunId,
    ) -> Result<Option<(i64, String, Option<String>)>, ControlError> {
        let client = self.client().await.map_err(|e| io("connect", e))?;
        let row = client
            .query_opt(
                "UPDATE awr_commands SET taken_at = now(), \
                   taken_epoch = (SELECT lease_epoch FROM awr_runs WHERE run_id = $1) \
                 WHERE id = ( \
                   SELECT id FROM awr_commands WHERE run_id = $1 AND taken_at IS NULL \
                   ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) \
                 RETURNING id, raw, sent_by",
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| io("take a command", e))?;
        Ok(row.map(|row| (row.get(0), row.get(1), row.get(2))))
    }

    /// Writes the answer to command `id` (`Some`), or gives it back to be
    /// taken again (`None`: it never reached the run).
    async fn settle_command(
        &self,
        run_id: RunId,
        id: i64,
        reply: Option<&CommandReply>,
    ) -> Result<(), ControlError> {
        let client = self.client().await.map_err(|e| io("connect", e))?;
        let (sql, text) = match reply {
            Some(reply) => (
                "WITH c AS (UPDATE awr_commands SET reply = $2 WHERE id = $1 RETURNING run_id) \
                 SELECT pg_notify($3, c.run_id::text || ':r') FROM c",
                serde_json::to_string(reply).map_err(|e| io("write a reply", e))?,
            ),
            None => (
                "WITH c AS (UPDATE awr_commands SET taken_at = NULL, taken_epoch = NULL \
                   WHERE id = $1 AND $2 = '' RETURNING run_id) \
                 SELECT pg_notify($3, c.run_id::text || ':c') FROM c",
                String::new(),
            ),
        };
        client
            .query(sql, &[&id, &text, &CHANNEL])
            .await
            .map_err(|e| io(&format!("answer a command to run {run_id}"), e))?;
        Ok(())
    }
}

/// The writer's side: takes the run's commands one at a time and hands
/// each to the run, until the run drops its listener. It is never aborted
/// between taking a command and settling it: it ends by itself once the
/// listener is gone, so a command it took is answered or given back.
async fn serve(inner: Arc<Inner>, run_id: RunId, tx: mpsc::Sender<Delivery>) {
    let poll = inner.config.follow_poll;
    loop {
        let mut taken = None;
        let waited = inner.wait_on(run_id, poll, async || {
            taken = match inner.take_command(run_id).await {
                Ok(taken) => taken,
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "cannot look for the run's commands");
                    None
                }
            };
            taken.is_some()
        });
        tokio::select! {
            () = waited => {}
            // The run is gone: nothing was taken meanwhile (a take is
            // settled below before the loop comes back here).
            () = tx.closed() => {}
        }
        let Some((id, raw, by)) = taken else {
            if tx.is_closed() {
                return;
            }
            continue;
        };
        let raw: Value = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
        let by = by.and_then(|by| Caller::new(by).ok());
        let (delivery, answer) = Delivery::new(raw, by);
        let settled = match tx.send(delivery).await {
            // The run never had it: another writer may take it.
            Err(_) => inner.settle_command(run_id, id, None).await,
            Ok(()) => match answer.recv().await {
                Some((reply, handover)) => {
                    let settled = inner.settle_command(run_id, id, Some(&reply)).await;
                    // The run goes on once its answer is passed on.
                    drop(handover);
                    settled
                }
                // The run had it and gave no answer (it ended, or failed
                // while recording it): whether it is on record, only the
                // log says. Left taken: its sender says so, never sends it
                // again.
                None => Ok(()),
            },
        };
        if let Err(e) = settled {
            tracing::warn!(run = %run_id, command = id, error = %e, "cannot answer a command");
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// Where a command stands, as its sender reads it.
struct Standing {
    /// The writer's answer, once given.
    reply: Option<String>,
    /// The lease epoch of the writer that took it, once taken.
    taken_epoch: Option<i64>,
    /// The run's lease epoch now.
    epoch: i64,
    taken: bool,
}

#[async_trait]
impl ControlChannel for PgControl {
    async fn listen(&self, run_id: RunId) -> Result<Listener, ControlError> {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(serve(Arc::clone(&self.inner), run_id, tx));
        Ok(Listener::new(rx, ()))
    }

    async fn deliver(
        &self,
        run_id: RunId,
        raw: &Value,
        by: Option<Caller>,
    ) -> Result<CommandReply, ControlError> {
        let inner = &self.inner;
        let writer = |e| io(&format!("look up the writer of run {run_id}"), e);
        if !inner.has_writer(run_id).await.map_err(writer)? {
            return Err(ControlError::NoWriter(run_id));
        }
        let client = inner.client().await.map_err(|e| io("connect", e))?;
        let text = serde_json::to_string(raw).map_err(|e| io("send a command", e))?;
        let by = by.map(|by| by.as_str().to_owned());
        let row = client
            .query_one(
                "WITH c AS (INSERT INTO awr_commands (run_id, raw, sent_by) VALUES ($1, $2, $3) \
                   RETURNING id) \
                 SELECT c.id, pg_notify($4, $1::text || ':c')::text FROM c",
                &[&run_id.as_uuid(), &text, &by, &CHANNEL],
            )
            .await
            .map_err(|e| io(&format!("send a command to run {run_id}"), e))?;
        let id: i64 = row.get(0);
        drop(client);
        match self.answer(run_id, id).await {
            Ok(Answered::Reply(reply)) => Ok(reply),
            Ok(Answered::NotSent(e)) => Err(e),
            Ok(Answered::Unknown(why)) => {
                self.forget(id).await;
                Err(unknown(run_id, why))
            }
            // Not sent after all, if nobody took it; else it may be on
            // record, and is never sent twice.
            Err(e) => match self.withdraw(id).await {
                Ok(true) => Err(e),
                _ => {
                    self.forget(id).await;
                    Err(unknown(run_id, &e.to_string()))
                }
            },
        }
    }
}

/// How a command sent ended.
enum Answered {
    /// The writer's answer.
    Reply(CommandReply),
    /// Withdrawn before any writer took it: not on record.
    NotSent(ControlError),
    /// Taken by a writer that gave no answer, for this reason: it may be
    /// on record.
    Unknown(&'static str),
}

/// The error of a command a writer took and did not answer: it may be on
/// record, so it is neither sent again nor recorded here.
fn unknown(run_id: RunId, why: &str) -> ControlError {
    ControlError::Io(format!(
        "run {run_id}: {why}; whether the command was recorded, the run's log says \
         (awr events {run_id} --type command:received)"
    ))
}

impl PgControl {
    /// Waits for the answer to command `id`: `NoWriter` when no writer took
    /// it and none is left (it is withdrawn, for the caller to record). An
    /// error leaves the command where it stands.
    async fn answer(&self, run_id: RunId, id: i64) -> Result<Answered, ControlError> {
        let inner = &self.inner;
        let writer = |e| io(&format!("look up the writer of run {run_id}"), e);
        let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
        loop {
            let mut standing = Ok(None);
            inner
                .wait_on(run_id, Duration::from_millis(200), async || {
                    standing = self.standing(id).await;
                    matches!(&standing, Ok(Some(s)) if s.reply.is_some())
                })
                .await;
            let Some(standing) = standing? else {
                return Err(ControlError::Protocol(format!(
                    "run {run_id}: the command was removed before it was answered"
                )));
            };
            if let Some(reply) = standing.reply {
                self.forget(id).await;
                return serde_json::from_str(&reply)
                    .map(Answered::Reply)
                    .map_err(|e| ControlError::Protocol(format!("a reply to run {run_id}: {e}")));
            }
            let late = tokio::time::Instant::now() >= deadline;
            if standing.taken {
                if standing.taken_epoch.is_some_and(|e| e != standing.epoch) {
                    return Ok(Answered::Unknown(
                        "the writer that took the command lost the run",
                    ));
                }
                if !inner.has_writer(run_id).await.map_err(writer)? {
                    return Ok(Answered::Unknown(
                        "its writer took the command and ended without answering",
                    ));
                }
                if late {
                    return Ok(Answered::Unknown(
                        "its writer took the command and gave no answer in time",
                    ));
                }
                continue;
            }
            let gone = !inner.has_writer(run_id).await.map_err(writer)?;
            if (gone || late) && self.withdraw(id).await? {
                return Ok(Answered::NotSent(match gone {
                    true => ControlError::NoWriter(run_id),
                    false => ControlError::Io(format!(
                        "run {run_id}: its writer took no command for {} s",
                        ANSWER_WITHIN.as_secs()
                    )),
                }));
            }
        }
    }

    /// Where command `id` stands; `None` when its row is gone.
    async fn standing(&self, id: i64) -> Result<Option<Standing>, ControlError> {
        let client = self.inner.client().await.map_err(|e| io("connect", e))?;
        let row = client
            .query_opt(
                "SELECT c.reply, c.taken_at IS NOT NULL, c.taken_epoch, r.lease_epoch \
                 FROM awr_commands AS c JOIN awr_runs AS r ON r.run_id = c.run_id WHERE c.id = $1",
                &[&id],
            )
            .await
            .map_err(|e| io("read a command's reply", e))?;
        Ok(row.map(|row| Standing {
            reply: row.get(0),
            taken: row.get(1),
            taken_epoch: row.get(2),
            epoch: row.get(3),
        }))
    }

    /// Takes back command `id` if no writer took it; says whether it did.
    async fn withdraw(&self, id: i64) -> Result<bool, ControlError> {
        let client = self.inner.client().await.map_err(|e| io("connect", e))?;
        let n = client
            .execute(
                "DELETE FROM awr_commands WHERE id = $1 AND taken_at IS NULL",
                &[&id],
            )
            .await
            .map_err(|e| io("withdraw a command", e))?;
        Ok(n == 1)
    }

    /// Removes command `id`, answered and read.
    async fn forget(&self, id: i64) {
        let removed = async {
            let client = self.inner.client().await.map_err(|e| io("connect", e))?;
            client
                .execute("DELETE FROM awr_commands WHERE id = $1", &[&id])
                .await
                .map_err(|e| io("remove an answered command", e))
        };
        if let Err(e) = removed.await {
            tracing::debug!(command = id, error = %e, "an answered command is left");
        }
    }
}

/// A [`PgControl`] over a store of its own, opened on first use: what a
/// program wires before it knows whether it will send or take a command.
#[derive(Debug)]
pub struct PgControlOn {
    url: String,
    control: tokio::sync::OnceCell<PgControl>,
}

impl PgControlOn {
    /// Commands through the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            control: tokio::sync::OnceCell::new(),
        }
    }

    async fn get(&self) -> Result<&PgControl, ControlError> {
        self.control
            .get_or_try_init(async || {
                let store = PgRunStore::open(&self.url)
                    .await
                    .map_err(|e| ControlError::Io(e.to_string()))?;
                Ok(PgControl::new(&store))
            })
            .await
    }
}

#[async_trait]
impl ControlChannel for PgControlOn {
    async fn listen(&self, run_id: RunId) -> Result<Listener, ControlError> {
        self.get().await?.listen(run_id).await
    }

    async fn deliver(
        &self,
        run_id: RunId,
        raw: &Value,
        by: Option<Caller>,
    ) -> Result<CommandReply, ControlError> {
        self.get().await?.deliver(run_id, raw, by).await
    }
}
