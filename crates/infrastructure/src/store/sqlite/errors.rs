//! How the SQLite store's failures read: why a database could not be
//! opened ([`SqliteOpenError`]), and SQLite's and the file system's errors
//! as [`StoreError`]s that name the database and keep their kind.

use std::path::{Path, PathBuf};

use application::ports::StoreError;

/// Why a SQLite store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SqliteOpenError {
    /// The database was written by a newer awr.
    #[error(
        "{}: the database has schema version {found}, newer than this awr knows ({known}); \
         open it with a newer awr",
        path.display()
    )]
    Newer {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// [`SCHEMA_VERSION`](super::SCHEMA_VERSION).
        known: i64,
    },
    /// The database has an older schema and cannot be written to bring it
    /// up to date.
    #[error(
        "{}: the database has schema version {found}, older than this awr reads ({known}), \
         and cannot be written to upgrade it; open it once where it can be written",
        path.display()
    )]
    Older {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// [`SCHEMA_VERSION`](super::SCHEMA_VERSION).
        known: i64,
    },
    /// Anything else (naming the file).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A SQLite failure as a [`StoreError`] naming the database and the action.
/// Its source has the nearest [`std::io::ErrorKind`] (a full disk is
/// `StorageFull`), so callers branch on SQLite's failures as on a file's.
pub(super) fn sql_err(path: &Path, what: &str, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    use std::io::ErrorKind;
    let kind = match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => ErrorKind::StorageFull,
        Some(ErrorCode::PermissionDenied) => ErrorKind::PermissionDenied,
        Some(ErrorCode::ReadOnly) => ErrorKind::ReadOnlyFilesystem,
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => ErrorKind::ResourceBusy,
        Some(ErrorCode::OutOfMemory) => ErrorKind::OutOfMemory,
        _ => ErrorKind::Other,
    };
    StoreError::io(
        format!("{}: cannot {what}", path.display()),
        std::io::Error::new(kind, e),
    )
}

/// An I/O failure on a file beside the database, naming it.
pub(super) fn io_err(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::io(format!("cannot {what} {}", path.display()), e)
}
