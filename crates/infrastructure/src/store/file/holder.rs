//! Who holds a run's lock: the record a writer leaves on the file it locks
//! (an extended attribute of the run's log, `user.awr.writer`; on SQLite,
//! the run's row), and whether that writer still lives.
//!
//! A `flock` belongs to an open file description, and a child process
//! shares its parent's descriptions from its fork (or `posix_spawn`'s
//! clone) until it execs, when close-on-exec drops them. A writer killed in
//! that instant leaves its run's lock held by a process that is not a
//! writer, for as long as that process takes to exec (or for good, if it
//! never does). So a held lock alone is not proof of a live writer: each
//! writer records `<pid>:<start ticks>:<pid namespace>` as soon as it
//! holds the lock, and a lock held while its record names a process that is
//! gone (or a pid since reused, told apart by its start time) is held by
//! such a leftover copy, not by a writer. `/proc` answers, as it does for
//! the processes a dead writer left (`process::sweep` in `adapters-agents`).
//!
//! A record that is missing (a filesystem without extended attributes, an
//! older awr, a writer in the microseconds between its lock and its record)
//! or unreadable leaves the lock as the only evidence.

use std::fs::File;
use std::sync::OnceLock;

use rustix::fs::XattrFlags;

/// Bytes of a record read at most: `u32:u64:u64\n` is 52 at most.
const MAX_RECORD: usize = 64;

/// What a lock file says of its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Record {
    /// Nothing, or nothing this build reads: the lock is the evidence.
    Unknown,
    /// The writer that wrote it, and whether it still runs.
    Writer {
        /// Its process id.
        pid: u32,
        /// Whether that process (same pid, same start time) is alive.
        alive: bool,
    },
}

/// This process as a record names it: `<pid>:<start ticks>:<pid
/// namespace>\n`; `None` where `/proc` does not say when it started.
fn this_process() -> Option<&'static [u8]> {
    static RECORD: OnceLock<Option<String>> = OnceLock::new();
    RECORD
        .get_or_init(|| {
            let pid = std::process::id();
            let (_, ticks) = state_and_start(pid)?;
            Some(record(pid, ticks, pid_namespace()?))
        })
        .as_deref()
        .map(str::as_bytes)
}

/// A record's text.
pub(in crate::store) fn record(pid: u32, ticks: u64, namespace: u64) -> String {
    format!("{pid}:{ticks}:{namespace}\n")
}

/// The pid namespace of this process (the inode of `/proc/self/ns/pid`):
/// a pid names a process only in its own namespace, so a writer recorded
/// in another (a container sharing the storage) cannot be looked up, and
/// its lock stays the only evidence.
pub(in crate::store) fn pid_namespace() -> Option<u64> {
    static NAMESPACE: OnceLock<Option<u64>> = OnceLock::new();
    *NAMESPACE.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
    })
}

/// The extended attribute that holds the record, on the file whose lock
/// the writer holds (a run's log): the record needs no file of its own.
const RECORD_ATTR: &str = "user.awr.writer";

/// Writes this process's record onto `file`, the file it has just locked.
/// A failure (a filesystem without extended attributes, a full disk)
/// leaves no record, which readers take as no evidence beyond the lock:
/// safe, and logged.
pub(in crate::store) fn write_record(file: &File) {
    let Some(record) = this_process() else {
        return;
    };
    if let Err(e) = rustix::fs::fsetxattr(file, RECORD_ATTR, record, XattrFlags::empty()) {
        tracing::debug!(error = %std::io::Error::from(e), "cannot record the writer of a run");
        // Not the last writer's record either: it would name a process
        // that is gone while this one holds the run.
        let _ = rustix::fs::fremovexattr(file, RECORD_ATTR);
    }
}

/// Sets the record of the file at `path` to `text`, as a writer would.
#[cfg(test)]
pub(in crate::store) fn set_record(path: &std::path::Path, text: &str) {
    rustix::fs::setxattr(path, RECORD_ATTR, text.as_bytes(), XattrFlags::empty())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// This process's record, for a store that keeps it elsewhere than in a
/// lock file (the SQLite store's `runs.writer`).
pub(in crate::store) fn this_record() -> Option<&'static str> {
    this_process().and_then(|bytes| std::str::from_utf8(bytes).ok())
}

/// The record on the locked file `file`.
pub(in crate::store) fn read_record(file: &File) -> Record {
    let mut buf = [0u8; MAX_RECORD];
    match rustix::fs::fgetxattr(file, RECORD_ATTR, &mut buf[..]) {
        Ok(len) => judge(&buf[..len]),
        Err(_) => Record::Unknown,
    }
}

/// What the record `bytes` says of its writer.
pub(in crate::store) fn judge(bytes: &[u8]) -> Record {
    match parse(bytes) {
        Some((pid, ticks, namespace)) if Some(namespace) == pid_namespace() => Record::Writer {
            pid,
            alive: lives(pid, ticks),
        },
        _ => Record::Unknown,
    }
}

/// `<pid>:<ticks>:<namespace>\n`; `None` for anything else (a record
/// being written shows no newline yet).
fn parse(bytes: &[u8]) -> Option<(u32, u64, u64)> {
    let line = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let mut fields = line.split(':');
    let pid = fields.next()?.parse().ok()?;
    let ticks = fields.next()?.parse().ok()?;
    let namespace = fields.next()?.parse().ok()?;
    fields.next().is_none().then_some((pid, ticks, namespace))
}

/// Whether process `pid` runs and started at `ticks`: not a zombie (killed,
/// not yet reaped), not another process under the same pid.
fn lives(pid: u32, ticks: u64) -> bool {
    state_and_start(pid)
        .is_some_and(|(state, started)| !matches!(state, 'Z' | 'X') && started == ticks)
}

/// The state letter of `pid` and its start time in clock ticks after boot
/// (fields 3 and 22 of `/proc/<pid>/stat`).
pub(super) fn state_and_start(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and `)`; the fields after
    // its last `)` start at field 3, so field 22 is the 20th of them.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ticks = fields.nth(18)?.parse().ok()?;
    Some((state, ticks))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_this_process_alive_and_a_reaped_one_dead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.ndjson");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        assert_eq!(read_record(&file), Record::Unknown, "empty");
        write_record(&file);
        let me = std::process::id();
        assert_eq!(
            read_record(&file),
            Record::Writer {
                pid: me,
                alive: true
            }
        );

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let (_, ticks) = state_and_start(pid).unwrap_or(('R', 0));
        child.wait().unwrap();
        let namespace = pid_namespace().unwrap();
        set_record(&path, &record(pid, ticks, namespace));
        assert_eq!(read_record(&file), Record::Writer { pid, alive: false });
        // Another start time under a live pid: another process.
        let (_, mine) = state_and_start(me).unwrap();
        set_record(&path, &record(me, mine + 1, namespace));
        assert_eq!(
            read_record(&file),
            Record::Writer {
                pid: me,
                alive: false
            }
        );
        // This process, recorded in another pid namespace: not to be looked
        // up here, so the lock alone speaks.
        set_record(&path, &record(me, mine, namespace + 1));
        assert_eq!(read_record(&file), Record::Unknown);
        // Half a record (a write in progress) says nothing.
        let whole = record(me, mine, namespace);
        set_record(&path, whole.trim_end());
        assert_eq!(read_record(&file), Record::Unknown);
    }
}
