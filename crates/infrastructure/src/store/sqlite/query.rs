//! Queries of the SQLite store, served by its indexes (migration 0002):
//! runs by status, workflow and start from `runs` and its
//! `(status | workflow, started_at, run_id)` indexes, newest first; a run's
//! events by type from `events_by_type (slot, type)` (schema 7: the slot is
//! `id >> 32`), by node and time within the run's own range of `id`s.
//! Neither reads the rows of other runs.
//!
//! The `runs` row follows the log: [`index_run`] writes a status change
//! in the transaction that appends it.

use std::path::Path;

use application::ports::{EventFilter, RunCursor, RunQuery, RunSummary, StoreError};
use domain::{RunId, RunStatus, RuntimeEvent, Timestamp};
use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, params_from_iter};

use super::super::row::{offset_param, row_event};
use super::{Inner, READ_BUDGET, lock, slot_keys, sql_err};

/// The statuses as the `runs` table spells them.
const STATUSES: [RunStatus; 7] = RunStatus::ALL;

/// A column's text; `None` for NULL and for what is not text (a row some
/// other program wrote), which a listing shows as unknown rather than fail.
pub(super) fn text(value: ValueRef<'_>) -> Option<String> {
    match value {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
        _ => None,
    }
}

/// A column's integer; `None` for NULL and for anything else.
fn int(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Integer(n) => Some(n),
        _ => None,
    }
}

/// A run's status as its `status` column says: NULL is a run not yet
/// started, and a value this build does not know is unreadable (`None`).
fn status_of(value: ValueRef<'_>) -> Option<RunStatus> {
    match value {
        ValueRef::Null => Some(RunStatus::Pending),
        ValueRef::Text(name) => STATUSES.into_iter().find(|s| s.as_str().as_bytes() == name),
        _ => None,
    }
}

/// The statement and parameters selecting the runs of `query`.
pub(super) fn runs_sql(query: &RunQuery) -> (String, Vec<Value>) {
    let mut sql = String::from(
        "SELECT run_id, status, workflow, started_at, updated_at, parent_run_id FROM runs",
    );
    let mut conditions = Vec::new();
    let mut values = Vec::new();
    if !query.statuses.is_empty() {
        let marks = vec!["?"; query.statuses.len()].join(", ");
        conditions.push(format!("status IN ({marks})"));
        values.extend(
            query
                .statuses
                .iter()
                .map(|s| Value::Text(s.as_str().into())),
        );
    }
    if let Some(workflow) = &query.workflow {
        conditions.push("workflow = ?".into());
        values.push(Value::Text(workflow.clone()));
    }
    if let Some(since) = query.started_since {
        conditions.push("started_at >= ?".into());
        values.push(Value::Integer(since.as_millis()));
    }
    match query.after {
        Some(RunCursor {
            started_at: Some(at),
            run_id,
        }) => {
            // Runs not started sort after every started one.
            let unstarted = if query.started_since.is_some() {
                ""
            } else {
                " OR started_at IS NULL"
            };
            conditions.push(format!(
                "(started_at < ? OR (started_at = ? AND run_id < ?){unstarted})"
            ));
            values.extend([
                Value::Integer(at.as_millis()),
                Value::Integer(at.as_millis()),
                Value::Text(run_id.to_string()),
            ]);
        }
        Some(RunCursor {
            started_at: None,
            run_id,
        }) => {
            conditions.push("started_at IS NULL AND run_id < ?".into());
            values.push(Value::Text(run_id.to_string()));
        }
        None => {}
    }
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    sql.push_str(" ORDER BY started_at DESC, run_id DESC");
    if let Some(limit) = query.limit {
        sql.push_str(" LIMIT ?");
        values.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    }
    (sql, values)
}

/// The statement and parameters selecting up to `limit` events of the run
/// at `slot`
/// after `after` that `filter` lets through.
pub(super) fn events_sql(
    slot: i64,
    after: u64,
    filter: &EventFilter,
    limit: usize,
) -> (String, Vec<Value>) {
    // Without statistics SQLite would rather walk the run's rows in offset
    // order than search the type index and sort what it finds; the index
    // reads only the matches, so it is named.
    let (first, end) = slot_keys(slot);
    let after = first + offset_param(after.min(u64::from(u32::MAX)));
    let mut sql = String::from("SELECT \"offset\", json FROM run_events");
    let mut values = Vec::new();
    if !filter.types.is_empty() {
        sql.push_str(" INDEXED BY events_by_type WHERE (id >> 32) = ? AND");
        values.push(Value::Integer(slot));
    } else {
        sql.push_str(" WHERE");
    }
    sql.push_str(" id > ? AND id < ?");
    values.extend([Value::Integer(after), Value::Integer(end)]);
    if !filter.types.is_empty() {
        let marks = vec!["?"; filter.types.len()].join(", ");
        sql.push_str(&format!(" AND type IN ({marks})"));
        values.extend(filter.types.iter().map(|t| Value::Text(t.clone())));
    }
    if let Some(node) = &filter.node {
        sql.push_str(" AND node_id = ?");
        values.push(Value::Text(node.as_str().into()));
    }
    if let Some(since) = filter.since {
        sql.push_str(" AND ts >= ?");
        values.push(Value::Integer(since.as_millis()));
    }
    sql.push_str(" ORDER BY id LIMIT ?");
    values.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    (sql, values)
}

/// What an append does to the run's writer record, beside its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecordChange {
    Keep,
    /// The run is settled or paused: its writer is about to let go.
    Clear,
    /// The run runs again under a writer whose record was cleared.
    Write(&'static str),
}

impl RecordChange {
    /// The change for a run whose status becomes `status`, where `recorded`
    /// says whether the row holds its writer's record: a record is kept
    /// while the run runs, and cleared with the status that ends its
    /// writer's work, in that append's own transaction, so that letting go
    /// of the run commits nothing more. Until the lock goes, a held run
    /// without a record reads as held (`Record::Unknown`).
    pub(super) fn on(status: RunStatus, recorded: bool) -> Self {
        match status {
            RunStatus::Pending | RunStatus::Running if recorded => Self::Keep,
            RunStatus::Pending | RunStatus::Running => {
                super::super::file::holder::this_record().map_or(Self::Keep, Self::Write)
            }
            _ if recorded => Self::Clear,
            _ => Self::Keep,
        }
    }

    /// Whether the row holds the writer's record once the change is made.
    pub(super) fn recorded(self, before: bool) -> bool {
        match self {
            Self::Keep => before,
            Self::Clear => false,
            Self::Write(_) => true,
        }
    }
}

/// The `UPDATE` of a runs row, setting only what changes: SQLite rewrites
/// the entry of every index holding a column the statement sets, even to
/// the same value, so a status change alone leaves the workflow's and the
/// start's indexes untouched. `?1` is the run, `?2` its status, `?3` its
/// last event's time; a start adds `?4` to `?6`, a record `?7`.
fn index_sql(started: bool, record: RecordChange) -> &'static str {
    macro_rules! update {
        ($($set:literal),*) => {
            concat!("UPDATE runs SET status = ?2, updated_at = ?3" $(, $set)*, " WHERE run_id = ?1")
        };
    }
    match (started, record) {
        (false, RecordChange::Keep) => update!(),
        (false, RecordChange::Clear) => update!(", writer = NULL"),
        (false, RecordChange::Write(_)) => update!(", writer = ?7"),
        (true, RecordChange::Keep) => {
            update!(", workflow = ?4, started_at = ?5, parent_run_id = coalesce(?6, parent_run_id)")
        }
        (true, RecordChange::Clear) => {
            update!(
                ", workflow = ?4, started_at = ?5, parent_run_id = coalesce(?6, parent_run_id)",
                ", writer = NULL"
            )
        }
        (true, RecordChange::Write(_)) => {
            update!(
                ", workflow = ?4, started_at = ?5, parent_run_id = coalesce(?6, parent_run_id)",
                ", writer = ?7"
            )
        }
    }
}

/// Records in the run's `runs` row what `events` change of its status,
/// workflow and start, inside the append's transaction `conn`: the index
/// never lags the log. Nothing to do for events that change none of it.
/// `recorded` says whether the row holds this writer's record; returns
/// whether it does after the append (see [`RecordChange::on`]).
pub(super) fn index_run(
    conn: &Connection,
    path: &Path,
    run_id: RunId,
    events: &[RuntimeEvent],
    recorded: bool,
) -> Result<bool, StoreError> {
    let mut summary = RunSummary::unreadable(run_id);
    let mut changed = false;
    for event in events {
        changed |= summary.apply(event);
    }
    // Only a `flow:started` of these events sets it.
    let started = summary.started_at.is_some();
    let (true, Some(status)) = (changed, summary.status) else {
        return Ok(recorded);
    };
    let record = RecordChange::on(status, recorded);
    let sql = index_sql(started, record);
    let mut values: Vec<Value> = vec![
        Value::Text(run_id.to_string()),
        Value::Text(status.as_str().into()),
        summary
            .updated_at
            .map_or(Value::Null, |t| Value::Integer(t.as_millis())),
    ];
    if started {
        let text = |v: Option<String>| v.map_or(Value::Null, Value::Text);
        values.push(text(summary.workflow));
        values.push(
            summary
                .started_at
                .map_or(Value::Null, |t| Value::Integer(t.as_millis())),
        );
        values.push(text(summary.parent.map(|p| p.to_string())));
    }
    if let RecordChange::Write(text) = record {
        // `?7` follows `?6`: a record without a start leaves `?4`–`?6` unset.
        values.resize(6, Value::Null);
        values.push(Value::Text(text.into()));
    }
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute(params_from_iter(values)))
        .map_err(|e| sql_err(path, &format!("index run {run_id}"), e))?;
    Ok(record.recorded(recorded))
}

impl Inner {
    pub(super) fn query_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        let path = &self.path;
        let (sql, values) = runs_sql(query);
        let conn = lock(&self.reader);
        let mut stmt = conn
            .prepare_cached(&sql)
            .map_err(|e| sql_err(path, "prepare a query of runs", e))?;
        let rows = stmt
            .query_map(params_from_iter(values), |row| {
                Ok((
                    text(row.get_ref(0)?),
                    row.get_ref(1).map(status_of)?,
                    text(row.get_ref(2)?),
                    int(row.get_ref(3)?),
                    int(row.get_ref(4)?),
                    text(row.get_ref(5)?),
                ))
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| sql_err(path, "query runs", e))?;
        let mut found = Vec::with_capacity(rows.len());
        for (id, status, workflow, started_at, updated_at, parent) in rows {
            let Some(run_id) = id.as_deref().and_then(|id| id.parse::<RunId>().ok()) else {
                tracing::warn!(db = %path.display(), id, "a runs row is not a run id; skipped");
                continue;
            };
            found.push(RunSummary {
                run_id,
                status,
                workflow,
                started_at: started_at.map(Timestamp::from_millis),
                updated_at: updated_at.map(Timestamp::from_millis),
                parent: parent.and_then(|p| p.parse().ok()),
            });
        }
        Ok(found)
    }

    pub(super) fn read_matching(
        &self,
        run_id: RunId,
        after: u64,
        filter: &EventFilter,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        let path = &self.path;
        let conn = lock(&self.reader);
        let slot = self.slot(&conn, run_id)?;
        if limit == 0 || after >= i64::MAX as u64 {
            return Ok(Vec::new());
        }
        let (sql, values) = events_sql(slot, after, filter, limit);
        let mut stmt = conn
            .prepare_cached(&sql)
            .map_err(|e| sql_err(path, "prepare a filtered read", e))?;
        let mut rows = stmt
            .query(params_from_iter(values))
            .map_err(|e| sql_err(path, &format!("read run {run_id}"), e))?;
        let mut events = Vec::new();
        let mut bytes = 0;
        while let Some(row) = rows
            .next()
            .map_err(|e| sql_err(path, &format!("read run {run_id}"), e))?
        {
            let offset: i64 = row
                .get(0)
                .map_err(|e| sql_err(path, &format!("read run {run_id}"), e))?;
            let parsed = row
                .get_ref(1)
                .map_err(|e| e.to_string())
                .and_then(|json| json.as_bytes().map_err(|e| e.to_string()))
                .and_then(|json| {
                    bytes += json.len();
                    row_event(json, run_id, u64::try_from(offset).unwrap_or(0))
                });
            match parsed {
                Ok(event) => events.push(event),
                // The matches before the bad row first.
                Err(_) if !events.is_empty() => break,
                Err(detail) => {
                    return Err(StoreError::BadEvent {
                        offset: u64::try_from(offset).unwrap_or(0),
                        detail: format!(
                            "{} events row (run {run_id}, offset {offset}): {detail}",
                            path.display()
                        ),
                    });
                }
            }
            if bytes >= READ_BUDGET {
                break;
            }
        }
        Ok(events)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The plans SQLite picks: searches of an index, never a scan of the
    //! `runs` or `events` table.

    use super::*;
    use domain::NodeId;
    use rusqlite::params;

    /// `EXPLAIN QUERY PLAN` of `sql` on a database at the current schema.
    fn plan(sql: &str, values: Vec<Value>) -> String {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::SqliteRunStore::open(dir.path().join("runs.db")).unwrap();
        let conn = lock(&store.inner.reader);
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let lines: Vec<String> = stmt
            .query_map(params_from_iter(values), |row| row.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        lines.join("\n")
    }

    fn assert_searches(plan: &str, index: &str) {
        assert!(
            plan.contains(&format!("SEARCH runs USING INDEX {index}"))
                || plan.contains(&format!("SEARCH run_events USING INDEX {index}"))
                || plan.contains(&format!("SEARCH run_events USING COVERING INDEX {index}")),
            "expected a search of {index}:\n{plan}"
        );
        assert!(
            !plan.contains("SCAN runs") && !plan.contains("SCAN run_events"),
            "{plan}"
        );
    }

    /// A database written by schema version 1 (no `ts`, no parent, a runs
    /// row whose status no snapshot ever set) is migrated at open, and
    /// its runs and events are found by the new queries.
    #[tokio::test]
    async fn a_version_1_database_is_migrated_and_queried() {
        use application::ports::RunStore;
        use application::testing::store_conformance::{at_minute, started, warning};
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("runs.db");
        let parent = run();
        let child: RunId = "0b9e3c2d-6a4f-4e1b-9c8d-7f6e5d4c3b2a".parse().unwrap();
        {
            let conn = Connection::open(&db).unwrap();
            conn.execute_batch(include_str!("migrations/0001_init.sql"))
                .unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute(
                "INSERT INTO runs (run_id, created_at) VALUES (?1, 0)",
                [child.to_string()],
            )
            .unwrap();
            let mut failed = warning(child, 3);
            failed.kind = domain::EventKind::FlowFailed {
                error: "boom".into(),
                failed_node: None,
                duration_ms: 1,
            };
            failed.timestamp = at_minute(9);
            let mut w = warning(child, 2);
            w.timestamp = at_minute(5);
            for e in [started(child, 1, "legacy", Some(parent), 1), w, failed] {
                conn.execute(
                    "INSERT INTO events (run_id, \"offset\", type, node_id, json) \
                     VALUES (?1, ?2, ?3, NULL, ?4)",
                    params![
                        child.to_string(),
                        e.offset.get() as i64,
                        e.kind.type_name(),
                        e.to_json().unwrap()
                    ],
                )
                .unwrap();
            }
        }
        let store = super::super::SqliteRunStore::open(&db).unwrap();
        let found = store
            .query_runs(&RunQuery {
                statuses: vec![RunStatus::Failed],
                workflow: Some("legacy".into()),
                started_since: Some(at_minute(1)),
                ..RunQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].run_id, child);
        assert_eq!(found[0].parent, Some(parent));
        assert_eq!(found[0].started_at, Some(at_minute(1)));
        assert_eq!(found[0].updated_at, Some(at_minute(9)));
        let recent = EventFilter {
            since: Some(at_minute(5)),
            ..EventFilter::default()
        };
        let events = store.read_matching(child, 0, &recent, 10).await.unwrap();
        let offsets: Vec<u64> = events.iter().map(|e| e.offset.get()).collect();
        assert_eq!(offsets, vec![2, 3]);
    }

    fn run() -> RunId {
        "6f1c2a9e-0d3b-4c5a-8e7f-1a2b3c4d5e6f".parse().unwrap()
    }

    #[test]
    fn runs_by_status_search_the_status_index_in_order() {
        let query = RunQuery {
            statuses: vec![RunStatus::Failed],
            limit: Some(10),
            ..RunQuery::default()
        };
        let (sql, values) = runs_sql(&query);
        let plan = plan(&sql, values);
        assert_searches(&plan, "runs_by_status_started");
        // One status: the index gives the order, no sort of what it found.
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    #[test]
    fn runs_by_several_statuses_a_workflow_a_start_and_a_page_search_an_index() {
        let after = RunCursor {
            started_at: Some(Timestamp::from_millis(1_767_225_600_000)),
            run_id: run(),
        };
        let since = Some(Timestamp::from_millis(1_767_000_000_000));
        for query in [
            RunQuery {
                statuses: vec![RunStatus::Failed, RunStatus::Cancelled],
                limit: Some(10),
                ..RunQuery::default()
            },
            RunQuery {
                workflow: Some("nightly".into()),
                after: Some(after),
                limit: Some(10),
                ..RunQuery::default()
            },
            RunQuery {
                statuses: vec![RunStatus::Running],
                workflow: Some("nightly".into()),
                started_since: since,
                after: Some(after),
                ..RunQuery::default()
            },
            RunQuery {
                started_since: since,
                limit: Some(5),
                ..RunQuery::default()
            },
        ] {
            let (sql, values) = runs_sql(&query);
            let plan = plan(&sql, values);
            assert!(plan.contains("SEARCH runs USING"), "{query:?}:\n{plan}");
            assert!(!plan.contains("SCAN runs"), "{query:?}:\n{plan}");
        }
    }

    #[test]
    fn a_read_searches_the_runs_range_of_keys() {
        let values = vec![
            Value::Text(run().to_string()),
            Value::Integer(5),
            Value::Integer(10),
        ];
        let plan = plan(super::super::rows::READ_SQL, values);
        assert!(
            plan.contains("SEARCH run_events USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
            "{plan}"
        );
        assert!(
            !plan.contains("SCAN") && !plan.contains("TEMP B-TREE"),
            "{plan}"
        );
    }

    #[test]
    fn events_by_type_search_the_type_index_and_other_filters_the_runs_rows() {
        let filter = EventFilter {
            types: vec!["node:failed".into(), "node:completed".into()],
            ..EventFilter::default()
        };
        let (sql, values) = events_sql(7, 0, &filter, 100);
        assert_searches(&plan(&sql, values), "events_by_type");

        let filter = EventFilter {
            node: Some(NodeId::new("review").unwrap()),
            since: Some(Timestamp::from_millis(1_767_225_600_000)),
            ..EventFilter::default()
        };
        let (sql, values) = events_sql(7, 10, &filter, 100);
        let plan = plan(&sql, values);
        // The run's own rows, from the offset on, by the primary key.
        assert!(
            plan.contains("SEARCH run_events USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
            "{plan}"
        );
        assert!(!plan.contains("SCAN run_events"), "{plan}");
    }
}
