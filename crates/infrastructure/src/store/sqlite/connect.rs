//! Opening the SQLite store's connections: read-write in WAL mode, or
//! read-only for a database this process cannot write.

use std::path::{Path, PathBuf};

use application::ports::StoreError;
use rusqlite::{Connection, OpenFlags};

use super::{BUSY_TIMEOUT, sql_err};
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
