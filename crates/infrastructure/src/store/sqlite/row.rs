//! What the `events` table's rows hold: the stored event of a row, checked
//! against where it was read, and offsets as SQLite integers; what reads,
//! filtered reads and imports share.

use domain::{RunId, RuntimeEvent};

/// The event a row's `json` holds, when it is the event of `run_id` at
/// `offset`; else what is wrong with it: what a read and a filtered read
/// check alike.
pub(super) fn row_event(json: &[u8], run_id: RunId, offset: u64) -> Result<RuntimeEvent, String> {
    let event = RuntimeEvent::from_json(json).map_err(|e| e.to_string())?;
    if event.offset.get() != offset || event.run_id != run_id {
        return Err(format!(
            "holds offset {} of run {}",
            event.offset, event.run_id
        ));
    }
    Ok(event)
}

/// An offset as SQLite's integer (offsets past `i64::MAX` never exist).
pub(super) fn offset_param(offset: u64) -> i64 {
    i64::try_from(offset).unwrap_or(i64::MAX)
}
