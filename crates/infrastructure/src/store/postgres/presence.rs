//! The session that says a store instance is there, and listens.
//!
//! Each [`super::PgRunStore`] keeps one connection of its own (a pool's
//! connections come and go) holding an advisory lock of awr's class under a
//! key of its own, the key its leases record as `lease_presence`. The server
//! ends the session when the process dies, and the lock with it, so others
//! know at once that its leases are dead (`awr_present` in the schema). The
//! same session `LISTEN`s for appends and wakes this instance's followers.
//!
//! When the connection is lost (the server restarted) the session comes
//! back with the same key, and every follower is woken to re-read, since
//! notifications sent meanwhile are lost.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::task::{AbortHandle, JoinHandle};
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{AsyncMessage, Client, NoTls, Socket};

use super::shared::{CHANNEL, Notifies};
use super::{PgDatabase, PgOpenError};

/// The advisory lock class of presence keys: the bytes of `awrp`, as the
/// schema's `awr_present` reads it.
const CLASS: i32 = 0x6177_7270;

/// The longest wait between attempts to bring a lost session back.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Opens this instance's session: its presence key, and the task that
/// keeps the session (aborted with the store).
pub(super) async fn start(
    db: &PgDatabase,
    notifies: Arc<Notifies>,
) -> Result<(i32, AbortHandle), PgOpenError> {
    let (key, client, driver) =
        session(db, None, &notifies)
            .await
            .map_err(|source| PgOpenError::Sql {
                what: "open the session that holds this process's leases",
                source,
            })?;
    let db = db.clone();
    let task = tokio::spawn(keep(db, key, notifies, client, driver));
    Ok((key, task.abort_handle()))
}

/// A session holding the presence lock of `key` (a new key of its own when
/// `None`) and listening on [`CHANNEL`], and the task that reads its
/// notifications, which ends when the connection does.
async fn session(
    db: &PgDatabase,
    key: Option<i32>,
    notifies: &Arc<Notifies>,
) -> Result<(i32, Client, JoinHandle<()>), tokio_postgres::Error> {
    let (client, connection) = db.config.connect(NoTls).await?;
    let driver = tokio::spawn(drive(connection, Arc::clone(notifies)));
    let key = match key {
        // Our own key: its last session may linger a moment on the server.
        Some(key) => {
            client
                .execute("SELECT pg_advisory_lock($1, $2)", &[&CLASS, &key])
                .await?;
            key
        }
        None => loop {
            let key = fresh_key();
            let row = client
                .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&CLASS, &key])
                .await?;
            if row.get::<_, bool>(0) {
                break key;
            }
        },
    };
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    Ok((key, client, driver))
}

/// A random positive key (positive, so it reads the same as an `oid`).
fn fresh_key() -> i32 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let key = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) & i32::MAX;
    key.max(1)
}

/// Reads the session's messages, waking the followers of every run an
/// append notified; ends when the connection does.
async fn drive(
    mut connection: tokio_postgres::Connection<Socket, NoTlsStream>,
    notifies: Arc<Notifies>,
) {
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(note)) => {
                // `RUN:NEXT_OFFSET` for an append, `RUN:c` for a command
                // sent, `RUN:r` for one answered or given back.
                let (run, what) = note
                    .payload()
                    .split_once(':')
                    .unwrap_or((note.payload(), ""));
                match (run.parse(), what) {
                    (Ok(run), "c" | "r") => notifies.wake_commands(run),
                    (Ok(run), _) => notifies.wake(run),
                    (Err(_), _) => {}
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the PostgreSQL session of this process was lost");
                return;
            }
        }
    }
}

/// Keeps the session: when its connection ends, opens it again with the
/// same key, waiting longer after each failure, and wakes every follower.
async fn keep(
    db: PgDatabase,
    key: i32,
    notifies: Arc<Notifies>,
    client: Client,
    driver: JoinHandle<()>,
) {
    let mut held = (client, driver);
    loop {
        let (client, driver) = held;
        let _ = driver.await;
        drop(client);
        let mut backoff = Duration::from_millis(50);
        held = loop {
            match session(&db, Some(key), &notifies).await {
                Ok((_, client, driver)) => break (client, driver),
                Err(e) => {
                    tracing::warn!(target = %db.target, error = %e, "cannot reopen the PostgreSQL session; trying again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        };
        tracing::info!(target = %db.target, "the PostgreSQL session is back");
        notifies.wake_all();
    }
}
