//! Workflow definitions in the SQLite store: the `definitions` table, one
//! row per content hash, written once and synced before the run that names
//! it records `flow:started`.

use std::sync::atomic::Ordering;

use application::ports::{StoreError, definition_at};
use domain::definition::Definition;
use rusqlite::{OptionalExtension, params};

use super::super::file::sync::off_the_runtime;
use super::{Inner, SyncPolicy, lock, sql_err};

impl Inner {
    pub(super) fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        let hash = definition.hash();
        // Kept already (every run of a workflow but its first): no write, no sync.
        let kept = lock(&self.reader)
            .prepare_cached("SELECT 1 FROM definitions WHERE hash = ?1")
            .and_then(|mut stmt| stmt.exists([&hash]))
            .map_err(|e| sql_err(&self.path, &format!("look up definition {hash}"), e))?;
        if kept {
            return Ok(hash);
        }
        let json = definition.to_json();
        off_the_runtime(|| {
            lock(&self.writer)
                .execute(
                    "INSERT OR IGNORE INTO definitions (hash, json) VALUES (?1, ?2)",
                    params![hash, json],
                )
                .map_err(|e| sql_err(&self.path, &format!("save definition {hash}"), e))
        })?;
        self.committed.fetch_add(1, Ordering::AcqRel);
        // Durable before the run that names it records `flow:started`.
        if self.config.sync == SyncPolicy::StepBoundary {
            off_the_runtime(|| self.sync())?;
        }
        Ok(hash)
    }

    pub(super) fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
        let json: Option<Vec<u8>> = lock(&self.reader)
            .prepare_cached("SELECT CAST(json AS BLOB) FROM definitions WHERE hash = ?1")
            .and_then(|mut stmt| stmt.query_row([hash], |row| row.get(0)).optional())
            .map_err(|e| sql_err(&self.path, &format!("read definition {hash}"), e))?;
        json.map(|json| {
            let place = format!("{} definitions row {hash}", self.path.display());
            definition_at(hash, &json, &place)
        })
        .transpose()
    }
}
