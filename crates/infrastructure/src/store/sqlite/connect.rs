//! Opening the SQLite store's connections: read-write in WAL mode, or
//! read-only for a database this process cannot write.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use application::ports::StoreError;
use rusqlite::{Connection, OpenFlags};

use super::{BUSY_TIMEOUT, FILE_MODE, io_err, lock, sql_err};
use crate::store::SyncPolicy;

/// A connection in WAL mode with the policy's `synchronous` setting.
pub(super) fn connection(path: &Path, sync: SyncPolicy) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| sql_err(path, "open the database", e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| sql_err(path, "set the busy timeout", e))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
        .map_err(|e| sql_err(path, "enable WAL", e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::io_msg(format!(
            "{}: cannot enable WAL (journal mode is {mode})",
            path.display()
        )));
    }
    let synchronous = match sync {
        SyncPolicy::Always => "FULL",
        SyncPolicy::StepBoundary => "NORMAL",
        SyncPolicy::Never => "OFF",
    };
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(|e| sql_err(path, "set synchronous", e))?;
    // Room for every statement the store prepares (rusqlite keeps 16): a
    // statement pushed out is parsed again at its next use.
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// A connection that only reads, and writes nothing beside the database.
/// A database in WAL mode is read through its `-shm` index. Where there is
/// one, a writer is (or was) at work, and the connection shares it. Where
/// there is none, no writer is at work (a writer holds that file while
/// connected), and the database is opened `immutable`, read as a file
/// nobody changes: SQLite would otherwise create the index and an empty
/// `-wal`, owned by this user, which would keep the database's owner from
/// writing it, and which a read-only directory or medium cannot hold.
pub(super) fn read_only_connection(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let open = |target: &Path, flags: OpenFlags| {
        let conn = Connection::open_with_flags(target, flags)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))?;
        Ok::<_, rusqlite::Error>(conn)
    };
    match shm_of(path).exists() {
        true => open(path, flags),
        false => open(&immutable_uri(path), flags | OpenFlags::SQLITE_OPEN_URI),
    }
    .map_err(|e| sql_err(path, "open the database read-only", e))
}

/// Whether this process may write the file at `path` (not on a read-only
/// medium, and permitted).
pub(super) fn writable(path: &Path) -> bool {
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok()
}

/// `PATH-shm`, SQLite's WAL index of the database at `path`.
fn shm_of(path: &Path) -> PathBuf {
    let mut shm = path.as_os_str().to_owned();
    shm.push("-shm");
    PathBuf::from(shm)
}

/// `file:PATH?immutable=1`, the path escaped as a URI's.
pub(super) fn immutable_uri(path: &Path) -> PathBuf {
    use percent_encoding::{CONTROLS, percent_encode};
    use std::os::unix::ffi::OsStrExt;
    const ESCAPED: &percent_encoding::AsciiSet = &CONTROLS.add(b'%').add(b'?').add(b'#');
    let escaped = percent_encode(path.as_os_str().as_bytes(), ESCAPED);
    PathBuf::from(format!("file:{escaped}?immutable=1"))
}

/// A write transaction begun and ended by cached statements: rusqlite's
/// `Transaction` sends `BEGIN` and `COMMIT` through `execute_batch`, which
/// parses them anew each time, twice an append. Dropped before
/// [`WriteTx::commit`], it rolls back, as rusqlite's does.
pub(super) struct WriteTx<'c> {
    conn: &'c Connection,
}

impl<'c> WriteTx<'c> {
    /// `BEGIN IMMEDIATE`: the database's write lock is taken now, so a busy
    /// database is waited for (or refused) here, not at the first write.
    pub(super) fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self { conn })
    }

    /// Commits; on failure the drop rolls back what is still open.
    pub(super) fn commit(self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        // Committed (or ended by SQLite itself, after some errors): nothing open.
        if self.conn.is_autocommit() {
            return;
        }
        if let Err(e) = self.conn.execute_batch("ROLLBACK") {
            tracing::warn!(error = %e, "cannot roll back a write transaction");
        }
    }
}

/// Held while this process creates a database file, and taken by every
/// open of one before SQLite opens it (see [`create_private`]).
pub(super) static CREATING: Mutex<()> = Mutex::new(());

/// Creates the database file at `path` unless it exists, private from its
/// first byte; an existing file is checked, never opened. SQLite's locks are
/// POSIX record locks, which a process loses on a file as soon as it closes
/// any descriptor of it: a descriptor of ours, closed while another store of
/// this process had the database open, would drop that store's locks, and
/// another process would then take itself for the last connection,
/// checkpoint and remove the WAL that store still appends to and syncs. The
/// new file's descriptor is closed under [`CREATING`], which every open
/// takes first, so no store of this process has the file open by then.
pub(super) fn create_private(path: &Path) -> Result<(), StoreError> {
    let _creating = lock(&CREATING);
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let open_for_writing = |e| io_err("open for writing", path, e);
            let meta = std::fs::metadata(path).map_err(open_for_writing)?;
            if !meta.is_file() {
                return Err(StoreError::io_msg(format!(
                    "cannot open {} for writing: not a file",
                    path.display()
                )));
            }
            rustix::fs::access(path, rustix::fs::Access::WRITE_OK)
                .map_err(|e| open_for_writing(e.into()))
        }
        Err(e) => Err(io_err("create", path, e)),
    }
}
