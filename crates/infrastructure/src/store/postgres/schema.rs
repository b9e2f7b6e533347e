//! The PostgreSQL store's schema: migration files applied in order, all in
//! one transaction, with the version in `awr_schema`. Several processes may
//! open one database at once (a server and its workers): an advisory lock
//! held for the transaction makes them migrate one after another, so the
//! second finds the work done.

use tokio_postgres::Client;

use super::PgOpenError;

/// Migration `k` (0-based) takes the schema from version `k` to `k + 1`.
/// Append only: a released migration is never edited.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_leases.sql"),
    include_str!("migrations/0003_definitions.sql"),
    include_str!("migrations/0004_snapshots.sql"),
    include_str!("migrations/0005_queue.sql"),
    include_str!("migrations/0006_commands.sql"),
    include_str!("migrations/0007_transcripts.sql"),
    include_str!("migrations/0008_waiting.sql"),
];

/// The schema version this build writes and reads.
pub const PG_SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The key of the advisory lock that serializes migrations: any constant
/// of awr's own (the bytes of `awr_mig`).
const MIGRATION_LOCK: i64 = 0x0061_7772_5f6d_6967;

/// Brings the database to [`PG_SCHEMA_VERSION`]: applies the migrations it
/// lacks in one transaction (a crash applies all or none), and refuses a
/// database written by a newer awr, whose schema this build cannot know.
pub(super) async fn migrate(client: &mut Client) -> Result<(), PgOpenError> {
    let sql = |what: &'static str| move |e| PgOpenError::Sql { what, source: e };
    let tx = client
        .transaction()
        .await
        .map_err(sql("begin the schema migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql("take the migration lock"))?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS awr_schema (version integer NOT NULL)")
        .await
        .map_err(sql("create the schema version table"))?;
    let found: i32 = tx
        .query_opt("SELECT version FROM awr_schema", &[])
        .await
        .map_err(sql("read the schema version"))?
        .map_or(0, |row| row.get(0));
    if found > PG_SCHEMA_VERSION {
        return Err(PgOpenError::Newer {
            found,
            known: PG_SCHEMA_VERSION,
        });
    }
    let from = usize::try_from(found).unwrap_or(0);
    for migration in MIGRATIONS.iter().skip(from) {
        tx.batch_execute(migration)
            .await
            .map_err(sql("apply a schema migration"))?;
    }
    if found != PG_SCHEMA_VERSION {
        tx.execute("DELETE FROM awr_schema", &[])
            .await
            .map_err(sql("set the schema version"))?;
        tx.execute(
            "INSERT INTO awr_schema (version) VALUES ($1)",
            &[&PG_SCHEMA_VERSION],
        )
        .await
        .map_err(sql("set the schema version"))?;
    }
    tx.commit()
        .await
        .map_err(sql("commit the schema migration"))
}
