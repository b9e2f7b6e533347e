//! The peers bench's entelix harness (`cargo xtask bench --peers`).
//!
//! The work: a chain of 3 agents, each answering 300 bytes at once, run N
//! times, each a new run (a new thread). Every run of the chain is timed
//! alone; the figure is a run's cost / 3, the median over the N runs.
//!
//! `--config sqlite`: the graph checkpoints after every node (entelix's
//! default, `CheckpointGranularity::PerNode`) into a minimal SQLite
//! checkpointer of this file: WAL, `synchronous=FULL`, one committed
//! insert per checkpoint, so each step is synced before the next starts.
//! `--config memory`: entelix's own `InMemoryCheckpointer`.
//!
//! The storage is made in a fresh directory before the first run is timed
//! and removed after the last one. Prints one JSON line of results.
//!
//! Usage: `peers-entelix --config sqlite|memory [--runs N]`

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use entelix::{
    Checkpoint, CheckpointId, Checkpointer, CompiledGraph, Error, ExecutionContext,
    InMemoryCheckpointer, Result, Runnable, RunnableLambda, StateGraph, TenantId, ThreadKey,
};
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

/// Steps of the chain.
const STEPS: usize = 3;
/// Bytes of each agent's answer.
const ANSWER_BYTES: usize = 300;

/// The chain's state: its input and each agent's answer so far.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Chain {
    input: String,
    answers: Vec<String>,
}

/// A stub agent: answers 300 bytes at once.
fn answer(step: usize) -> String {
    let mut text = format!("answer of a{step}: ");
    text.extend(std::iter::repeat_n('x', ANSWER_BYTES - text.len()));
    text
}

/// The chain `a0 -> a1 -> a2` over `checkpointer`.
fn chain(checkpointer: Arc<dyn Checkpointer<Chain>>) -> Result<CompiledGraph<Chain>> {
    let mut graph = StateGraph::new();
    for step in 0..STEPS {
        let agent = RunnableLambda::new(move |mut state: Chain, _ctx| async move {
            state.answers.push(answer(step));
            Ok::<_, Error>(state)
        });
        graph = graph.add_node(format!("a{step}"), agent);
        if step > 0 {
            graph = graph.add_edge(format!("a{}", step - 1), format!("a{step}"));
        }
    }
    graph
        .set_entry_point("a0")
        .add_finish_point(format!("a{}", STEPS - 1))
        .with_checkpointer(checkpointer)
        .compile()
}

/// A minimal checkpointer in one SQLite database: WAL, `synchronous=FULL`,
/// each `put` one committed (so synced) insert of the state as JSON.
struct SqliteCheckpointer {
    db: Mutex<Connection>,
}

fn sqlite_error(e: rusqlite::Error) -> Error {
    Error::config(format!("sqlite checkpointer: {e}"))
}

impl SqliteCheckpointer {
    fn open(path: &Path) -> Result<Self> {
        let db = Connection::open(path).map_err(sqlite_error)?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS checkpoints (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT,
                 id TEXT NOT NULL UNIQUE,
                 tenant_id TEXT NOT NULL,
                 thread_id TEXT NOT NULL,
                 parent_id TEXT,
                 step INTEGER NOT NULL,
                 state TEXT NOT NULL,
                 next_node TEXT,
                 ts_ms INTEGER NOT NULL
             );
             CREATE INDEX IF NOT EXISTS checkpoints_thread
                 ON checkpoints (tenant_id, thread_id, seq);",
        )
        .map_err(sqlite_error)?;
        Ok(Self { db: Mutex::new(db) })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Rows of `key`'s thread matching `filter` (SQL after `AND`), newest first.
    fn select(
        &self,
        key: &ThreadKey,
        filter: &str,
        arg: &str,
        limit: usize,
    ) -> Result<Vec<Checkpoint<Chain>>> {
        let db = self.db();
        let sql = format!(
            "SELECT id, parent_id, step, state, next_node, ts_ms FROM checkpoints
             WHERE tenant_id = ?1 AND thread_id = ?2 AND {filter} ORDER BY seq DESC LIMIT ?4"
        );
        let mut statement = db.prepare_cached(&sql).map_err(sqlite_error)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = statement
            .query_map(
                params![key.tenant_id().as_str(), key.thread_id(), arg, limit],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, String>(3)?,
                        row.get::<_, Option<String>>(4)?,
                        row.get::<_, i64>(5)?,
                    ))
                },
            )
            .map_err(sqlite_error)?;
        let mut found = Vec::new();
        for row in rows {
            let (id, parent, step, state, next_node, ts_ms) = row.map_err(sqlite_error)?;
            let uuid = |s: &str| {
                uuid::Uuid::parse_str(s)
                    .map(CheckpointId::from_uuid)
                    .map_err(|e| Error::config(format!("checkpoint id {s}: {e}")))
            };
            let parent = parent.as_deref().map(uuid).transpose()?;
            found.push(Checkpoint::from_parts(
                uuid(&id)?,
                key,
                parent,
                usize::try_from(step).unwrap_or_default(),
                serde_json::from_str(&state)?,
                next_node,
                chrono::DateTime::from_timestamp_millis(ts_ms).unwrap_or_default(),
            ));
        }
        Ok(found)
    }
}

#[async_trait]
impl Checkpointer<Chain> for SqliteCheckpointer {
    async fn put(&self, checkpoint: Checkpoint<Chain>) -> Result<()> {
        let state = serde_json::to_string(&checkpoint.state)?;
        let db = self.db();
        let mut insert = db
            .prepare_cached(
                "INSERT INTO checkpoints
                 (id, tenant_id, thread_id, parent_id, step, state, next_node, ts_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(sqlite_error)?;
        // Autocommit: one transaction, synced (WAL, synchronous=FULL) before it returns.
        insert
            .execute(params![
                checkpoint.id.to_hyphenated_string(),
                checkpoint.tenant_id.as_str(),
                checkpoint.thread_id,
                checkpoint
                    .parent_id
                    .as_ref()
                    .map(CheckpointId::to_hyphenated_string),
                i64::try_from(checkpoint.step).unwrap_or(i64::MAX),
                state,
                checkpoint.next_node,
                checkpoint.timestamp.timestamp_millis(),
            ])
            .map_err(sqlite_error)?;
        Ok(())
    }

    async fn get_latest(&self, key: &ThreadKey) -> Result<Option<Checkpoint<Chain>>> {
        Ok(self.select(key, "?3 = ?3", "", 1)?.pop())
    }

    async fn get_by_id(
        &self,
        key: &ThreadKey,
        id: &CheckpointId,
    ) -> Result<Option<Checkpoint<Chain>>> {
        Ok(self
            .select(key, "id = ?3", &id.to_hyphenated_string(), 1)?
            .pop())
    }

    async fn list_history(&self, key: &ThreadKey, limit: usize) -> Result<Vec<Checkpoint<Chain>>> {
        self.select(key, "?3 = ?3", "", limit)
    }

    async fn update_state(
        &self,
        key: &ThreadKey,
        parent_id: &CheckpointId,
        new_state: Chain,
    ) -> Result<CheckpointId> {
        let parent = self
            .get_by_id(key, parent_id)
            .await?
            .ok_or_else(|| Error::invalid_request("update_state: unknown parent_id"))?;
        let checkpoint = Checkpoint::new(key, parent.step + 1, new_state, parent.next_node)
            .with_parent(parent_id.clone());
        let id = checkpoint.id.clone();
        self.put(checkpoint).await?;
        Ok(id)
    }
}

/// A fresh directory for this process's storage.
fn fresh_dir() -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("peers-entelix-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let last = sorted.len().saturating_sub(1);
    let at = (p * last as f64).round() as usize;
    sorted.get(at.min(last)).copied().unwrap_or(f64::NAN)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut config, mut runs) = (String::new(), 1_000usize);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--config" => config = args.next().unwrap_or_default(),
            "--runs" => runs = args.next().unwrap_or_default().parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let dir = fresh_dir()?;
    let (name, durability, checkpointer): (_, _, Arc<dyn Checkpointer<Chain>>) =
        match config.as_str() {
            "sqlite" => (
                "entelix-sqlite",
                "each node's checkpoint one committed insert, WAL + synchronous=FULL",
                Arc::new(SqliteCheckpointer::open(&dir.join("checkpoints.db"))?),
            ),
            "memory" => (
                "entelix-memory",
                "InMemoryCheckpointer: nothing on disk",
                Arc::new(InMemoryCheckpointer::<Chain>::new()),
            ),
            _ => return Err("usage: peers-entelix --config sqlite|memory [--runs N]".into()),
        };
    // Current-thread, as awr's harness drives its runs.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let graph = chain(Arc::clone(&checkpointer))?;
    let mut per_step = Vec::with_capacity(runs);
    let started = Instant::now();
    for run in 0..runs {
        let ctx = ExecutionContext::new()
            .with_tenant_id(TenantId::new("bench"))
            .with_thread_id(format!("run-{run}"));
        let input = Chain {
            input: "go".to_owned(),
            answers: Vec::new(),
        };
        let t = Instant::now();
        let done = rt.block_on(graph.invoke(input, &ctx))?;
        per_step.push(t.elapsed().as_secs_f64() * 1e6 / STEPS as f64);
        if done.answers.len() != STEPS || done.answers.iter().any(|a| a.len() != ANSWER_BYTES) {
            return Err(format!("run {run} ended with {:?}", done.answers).into());
        }
    }
    let wall = started.elapsed().as_secs_f64();
    // The last run's checkpoints are on record: one per step.
    let key = ThreadKey::new(TenantId::new("bench"), format!("run-{}", runs - 1));
    let history = rt.block_on(checkpointer.list_history(&key, usize::MAX))?;
    if history.len() != STEPS {
        return Err(format!("{} checkpoints of the last run, not {STEPS}", history.len()).into());
    }
    drop((graph, checkpointer));
    std::fs::remove_dir_all(&dir)?;
    per_step.sort_by(f64::total_cmp);
    let line = serde_json::json!({
        "config": name,
        "system": "entelix 0.6.1",
        "durability": durability,
        "runs": runs,
        "steps_per_run": STEPS,
        "answer_bytes": ANSWER_BYTES,
        "per_step_us_median": percentile(&per_step, 0.5),
        "per_step_us_p10": percentile(&per_step, 0.1),
        "per_step_us_p90": percentile(&per_step, 0.9),
        "wall_s": wall,
    });
    println!("{line}");
    Ok(())
}
