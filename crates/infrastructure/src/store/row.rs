//! What the database stores' event rows hold (SQLite's `events`,
//! PostgreSQL's `awr_events`): the event's JSON exactly as the file store
//! writes its line, checked against where it was read, and offsets as SQL
//! integers; what appends, reads, filtered reads and imports share.

use application::ports::StoreError;
use domain::{RunId, RuntimeEvent};

/// The event a row's `json` holds, when it is the event of `run_id` at
/// `offset`; else what is wrong with it: what a read and a filtered read
/// check alike.
pub(crate) fn row_event(json: &[u8], run_id: RunId, offset: u64) -> Result<RuntimeEvent, String> {
    let event = RuntimeEvent::from_json(json).map_err(|e| e.to_string())?;
    if event.offset.get() != offset || event.run_id != run_id {
        return Err(format!(
            "holds offset {} of run {}",
            event.offset, event.run_id
        ));
    }
    Ok(event)
}

/// An offset as an SQL integer (offsets past `i64::MAX` never exist).
pub(crate) fn offset_param(offset: u64) -> i64 {
    i64::try_from(offset).unwrap_or(i64::MAX)
}

/// `event` as its row's `json` (its line in the file store), written into
/// `buf`: what an append and an import store alike.
pub(crate) fn event_json<'b>(
    run_id: RunId,
    event: &RuntimeEvent,
    buf: &'b mut Vec<u8>,
) -> Result<&'b str, StoreError> {
    buf.clear();
    event.write_json(buf).map_err(|e| {
        StoreError::io(
            format!(
                "cannot serialize event {} (offset {}) of run {run_id}",
                event.id, event.offset
            ),
            e.into(),
        )
    })?;
    std::str::from_utf8(buf).map_err(|e| {
        StoreError::io(
            format!("event {} is not UTF-8", event.id),
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })
}
