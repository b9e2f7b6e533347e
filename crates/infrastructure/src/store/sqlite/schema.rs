//! The SQLite store's schema: migration files applied in order at open,
//! inside one transaction, with `PRAGMA user_version` as the version.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::{SqliteOpenError, sql_err};

/// Migration `k` (0-based) takes the schema from version `k` to `k + 1`.
/// Append only: a released migration is never edited.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_queries.sql"),
    include_str!("migrations/0003_snapshot_deltas.sql"),
    include_str!("migrations/0004_definitions.sql"),
    include_str!("migrations/0005_lean_indexes.sql"),
    include_str!("migrations/0006_writer_slots.sql"),
    include_str!("migrations/0007_events_by_run.sql"),
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database at `path` to [`SCHEMA_VERSION`]: applies the
/// migrations it lacks in one transaction (a crash applies all or none),
/// and refuses a database written by a newer awr, whose schema this build
/// cannot know.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), SqliteOpenError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| sql_err(path, "begin the schema migration", e))?;
    let found: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| sql_err(path, "read the schema version", e))?;
    if found > SCHEMA_VERSION {
        return Err(SqliteOpenError::Newer {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    let from = usize::try_from(found).unwrap_or(0);
    for (k, migration) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.execute_batch(migration)
            .map_err(|e| sql_err(path, &format!("apply schema migration {}", k + 1), e))?;
    }
    if found != SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(|e| sql_err(path, "set the schema version", e))?;
    }
    tx.commit()
        .map_err(|e| sql_err(path, "commit the schema migration", e))?;
    Ok(())
}

/// Refuses a database this build cannot read as it is, for a connection
/// that cannot migrate it: written by a newer awr, or by an older one and
/// not opened since where it can be written.
pub(super) fn check(conn: &Connection, path: &Path) -> Result<(), SqliteOpenError> {
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| sql_err(path, "read the schema version", e))?;
    match found {
        SCHEMA_VERSION => Ok(()),
        found if found > SCHEMA_VERSION => Err(SqliteOpenError::Newer {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        }),
        found => Err(SqliteOpenError::Older {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        }),
    }
}
