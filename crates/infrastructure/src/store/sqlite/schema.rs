//! The SQLite store's schema: migration files applied in order at open,
//! inside one transaction, with `PRAGMA user_version` as the version.

use std::path::Path;

use application::ports::StoreError;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::rows::MAX_SLOT;
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
    include_str!("migrations/0007_run_events.sql"),
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
        if k + 1 == 7 {
            check_keys(&tx, path)?;
        }
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

/// Before migration 7, which keys each event by its run's slot and its
/// offset: refuses what such a key cannot hold (an offset outside 1 to
/// 2^32 - 1, a slot out of range or shared by two runs), naming the run,
/// rather than let two events share a key or one land in another run's
/// range. Nothing awr wrote is refused.
fn check_keys(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let what = "check the keys of schema migration 7";
    let first = |sql: &str| -> Result<Option<(String, i64)>, StoreError> {
        conn.query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()
            .map_err(|e| sql_err(path, what, e))
    };
    let refuse = |detail: String| {
        Err(StoreError::Corrupt(format!(
            "{}: cannot upgrade to schema version 7: {detail}",
            path.display()
        )))
    };
    if let Some((run, offset)) = first(
        "SELECT run_id, \"offset\" FROM events \
         WHERE \"offset\" < 1 OR \"offset\" > 4294967295 LIMIT 1",
    )? {
        return refuse(format!(
            "run {run} has an event at offset {offset}, outside 1 to 4294967295"
        ));
    }
    if let Some((run, slot)) = first(&format!(
        "SELECT run_id, lock_slot FROM runs WHERE lock_slot < 1 OR lock_slot > {MAX_SLOT} \
         UNION ALL SELECT min(run_id), lock_slot FROM runs WHERE lock_slot IS NOT NULL \
         GROUP BY lock_slot HAVING count(*) > 1 LIMIT 1"
    ))? {
        return refuse(format!(
            "run {run} has lock slot {slot}, out of range or another run's too"
        ));
    }
    // A run that gets its slot now (one without, or the new row of events
    // whose run had none) gets the last slot given out plus its row id.
    let highest: i64 = conn
        .query_row(
            "SELECT coalesce((SELECT last FROM writer_slots WHERE id = 1), 0) \
             + coalesce((SELECT max(rowid) FROM runs), 0) \
             + (SELECT count(DISTINCT run_id) FROM events \
                WHERE run_id NOT IN (SELECT run_id FROM runs))",
            [],
            |row| row.get(0),
        )
        .map_err(|e| sql_err(path, what, e))?;
    if highest > MAX_SLOT {
        return refuse(format!(
            "the runs given a lock slot now would reach slot {highest}, past {MAX_SLOT}"
        ));
    }
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
