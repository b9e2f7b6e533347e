//! Finding awr's processes by the variables they inherit, wherever they
//! went.
//!
//! A process group does not hold everything a child starts: a process may
//! move to a session of its own (`setsid`, a daemon's double fork, Node's
//! `detached: true`) and outlive the group's kill, holding the child's
//! output pipes open. Every process awr starts carries variables naming its
//! run, the awr process that started it and the start itself, and what it
//! starts inherits them; a sweep of `/proc` finds them by those names. A
//! process that clears its environment is beyond this.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{Pid, Signal, kill_process_group};

use super::state_and_start;

/// The variable naming the run in the environment of every process awr
/// starts for it (inherited by what those start in turn), so that a later
/// awr process finds them even when their start never reached the log.
pub const RUN_VAR: &str = "AWR_RUN_ID";

/// The variable naming the awr process that started a process for a run
/// (`<pid>:<start ticks>`, see [`writer_tag`]): a process whose writer
/// still lives is that writer's, not a leftover. The same run id can be
/// written by two live processes at once when its storage was copied.
pub const WRITER_VAR: &str = "AWR_WRITER";

/// The variable naming one start ([`spawn_tag`]), so that what left the
/// started process's group is found when that process ends.
pub const SPAWN_VAR: &str = "AWR_SPAWN";

/// This process, as [`WRITER_VAR`] names it.
pub fn writer_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        let ticks = state_and_start(pid).map_or(0, |(_, ticks)| ticks);
        format!("{pid}:{ticks}")
    })
}

/// A name for a new start, unique across the machine's live processes:
/// this process's [`writer_tag`] and a count.
pub fn spawn_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}/{}", writer_tag(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Whether the writer a [`writer_tag`] names still runs: the same pid with
/// the same start time.
fn writer_lives(tag: &[u8]) -> bool {
    let Some((pid, ticks)) = std::str::from_utf8(tag)
        .ok()
        .and_then(|t| t.split_once(':'))
        .and_then(|(p, t)| Some((p.parse::<u32>().ok()?, t.parse::<u64>().ok()?)))
    else {
        return false;
    };
    // A zombie is dead: killed, not yet reaped by its parent.
    state_and_start(pid)
        .is_some_and(|(state, started)| !matches!(state.as_str(), "Z" | "X") && started == ticks)
}

/// The variables that tag a process awr starts for `run_id`.
pub fn run_tags(run_id: &str) -> [(String, String); 2] {
    [
        (RUN_VAR.to_owned(), run_id.to_owned()),
        (WRITER_VAR.to_owned(), writer_tag().to_owned()),
    ]
}

/// The value of variable `name` in `environ` (`/proc/<pid>/environ`: NUL
/// separated `NAME=value`).
fn var<'a>(environ: &'a [u8], name: &str) -> Option<&'a [u8]> {
    environ
        .split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
}

/// Kills every process whose environment says `RUN_VAR=run_id` and whose
/// writer (`WRITER_VAR`) is gone, and its process group, save this process
/// and its own group; how many were found. Reads `/proc`: elsewhere it
/// finds nothing.
pub fn kill_run(run_id: &str) -> usize {
    sweep(|_, environ| {
        // Started by a live awr process: another writer's, not a leftover.
        var(environ, RUN_VAR) == Some(run_id.as_bytes())
            && !var(environ, WRITER_VAR).is_some_and(writer_lives)
    })
}

/// Kills every process the start named `tag` ([`spawn_tag`]) left, with its
/// process group, save this process and its own group; how many were found.
///
/// A process forked by one being killed may escape a single pass, so the
/// sweep is repeated until a pass finds nothing new.
pub fn kill_spawn(tag: &str) -> usize {
    let mut killed = std::collections::HashSet::new();
    for _ in 0..SPAWN_PASSES {
        let before = killed.len();
        sweep(|pid, environ| {
            var(environ, SPAWN_VAR) == Some(tag.as_bytes()) && killed.insert(pid.as_raw_pid())
        });
        if killed.len() == before {
            break;
        }
    }
    killed.len()
}

/// How many passes [`kill_spawn`] makes at most.
const SPAWN_PASSES: usize = 4;

/// Kills every process (save this one and its group) whose pid and
/// environment `matches`, with its process group; how many were found.
fn sweep(mut matches: impl FnMut(Pid, &[u8]) -> bool) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let (me, my_group) = (rustix::process::getpid(), rustix::process::getpgrp());
    let mut found = 0;
    // One buffer and one path for every process, and no `stat` before each
    // read (`fs::read` does one): a resume and every child's end wait for
    // this scan.
    let mut environ = Vec::with_capacity(8 << 10);
    let mut path = String::with_capacity(32);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let Some(pid) = name.parse::<i32>().ok().and_then(Pid::from_raw) else {
            continue;
        };
        if pid == me {
            continue;
        }
        path.clear();
        path.push_str("/proc/");
        path.push_str(name);
        path.push_str("/environ");
        environ.clear();
        // Gone meanwhile, or not ours to read: not one of ours.
        let read = std::fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut environ));
        if read.is_err() || !matches(pid, &environ) {
            continue;
        }
        found += 1;
        if let Ok(group) = rustix::process::getpgid(Some(pid))
            && group != my_group
        {
            let _ = kill_process_group(group, Signal::KILL);
        }
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::process::group::{Sandbox, Spawned, spawn};
    use std::collections::BTreeMap;
    use tokio::process::Command;

    #[tokio::test]
    async fn the_processes_of_a_run_are_found_by_its_tag_and_killed_with_their_groups() {
        use crate::process::testing::{ends_within, gone, pid_in};
        let dir = tempfile::tempdir().unwrap();
        let limit = std::time::Duration::from_secs(10);
        let start = |run: &str, file: &str| {
            let mut command = Command::new("sh");
            let path = dir.path().join(file);
            let script = format!("sleep 300 & echo $! > '{}'; wait", path.display());
            command.args(["-c", &script]);
            let sandbox = Sandbox {
                env: BTreeMap::from([(RUN_VAR.to_owned(), run.to_owned())]),
                ..Sandbox::default()
            };
            (spawn(command, &sandbox).unwrap(), path)
        };
        let (ours, ours_child) = start("run-a", "a.pid");
        let (theirs, theirs_child) = start("run-b", "b.pid");
        let ours_child = pid_in(&ours_child, limit).await.unwrap();
        let theirs_child = pid_in(&theirs_child, limit).await.unwrap();
        // The first one found takes its group along: the rest may be gone
        // by the time the scan reaches them.
        assert!(kill_run("run-a") >= 1);
        assert!(
            ends_within(ours_child, limit).await,
            "the run's child survived"
        );
        let Spawned {
            child: mut process, ..
        } = ours;
        assert!(!process.wait().await.unwrap().success());
        assert!(!gone(theirs_child), "another run's process was killed");
        assert_eq!(kill_run("run-c"), 0);
        drop(theirs);
        assert!(ends_within(theirs_child, limit).await);
    }

    /// The same run id written by two live awr processes (a copied
    /// storage): the sweep of one spares what the other, still alive,
    /// started, and kills what a dead writer left.
    #[tokio::test]
    async fn processes_whose_writer_lives_are_not_leftovers() {
        use crate::process::testing::{ends_within, pid_in, runs};
        let dir = tempfile::tempdir().unwrap();
        let limit = std::time::Duration::from_secs(10);
        let start = |writer: Option<&str>, file: &str| {
            let mut command = Command::new("sh");
            let path = dir.path().join(file);
            command.args([
                "-c",
                &format!("echo $$ > '{}'; exec sleep 300", path.display()),
            ]);
            let mut env = BTreeMap::from([(RUN_VAR.to_owned(), "run-w".to_owned())]);
            if let Some(writer) = writer {
                env.insert(WRITER_VAR.to_owned(), writer.to_owned());
            }
            let sandbox = Sandbox {
                env,
                ..Sandbox::default()
            };
            (spawn(command, &sandbox).unwrap(), path)
        };
        // A live writer other than this process: the test's own parent.
        let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32);
        let live = format!("{parent}:{}", state_and_start(parent).unwrap().1);
        let (_kept, kept_pid) = start(Some(&live), "live.pid");
        let (_dead, dead_pid) = start(Some(&format!("{parent}:1")), "dead.pid");
        let (_old, old_pid) = start(None, "old.pid");
        let kept_pid = pid_in(&kept_pid, limit).await.unwrap();
        let dead_pid = pid_in(&dead_pid, limit).await.unwrap();
        let old_pid = pid_in(&old_pid, limit).await.unwrap();
        // Each past its `exec`: the sweep reads what `/proc` shows of it.
        for pid in [kept_pid, dead_pid, old_pid] {
            assert!(runs(pid, "sleep", limit).await, "{pid} never ran sleep");
        }
        assert_eq!(
            kill_run("run-w"),
            2,
            "the dead writer's and the untagged one"
        );
        assert!(
            ends_within(dead_pid, limit).await,
            "a dead writer's process survived"
        );
        assert!(
            ends_within(old_pid, limit).await,
            "an untagged process survived"
        );
        assert!(
            !ends_within(kept_pid, std::time::Duration::from_millis(300)).await,
            "a live writer's process was killed"
        );
    }

    /// Starts a shell that moves a `sleep` to a session of its own and
    /// exits once that process has written its pid to `file`.
    fn leaving(dir: &std::path::Path, file: &str) -> (Spawned, std::path::PathBuf) {
        let path = dir.join(file);
        let script = format!(
            "setsid sh -c 'echo $$ > \"{p}\"; exec sleep 300' &\n\
             while [ ! -s '{p}' ]; do sleep 0.01; done",
            p = path.display()
        );
        let mut command = Command::new("sh");
        command.args(["-c", &script]);
        (spawn(command, &Sandbox::default()).unwrap(), path)
    }

    #[tokio::test]
    async fn what_left_the_group_is_killed_at_its_end_and_only_its_own() {
        use crate::process::testing::{ends_within, gone, pid_in, runs};
        let dir = tempfile::tempdir().unwrap();
        let limit = std::time::Duration::from_secs(10);
        let (mut ours, ours_pid) = leaving(dir.path(), "ours.pid");
        let (theirs, theirs_pid) = leaving(dir.path(), "theirs.pid");
        let ours_pid = pid_in(&ours_pid, limit).await.unwrap();
        let theirs_pid = pid_in(&theirs_pid, limit).await.unwrap();
        assert!(runs(ours_pid, "sleep", limit).await);
        assert!(ours.child.wait().await.unwrap().success());
        // Its own session: beyond the group's kill.
        ours.group.kill();
        assert!(
            !ends_within(ours_pid, std::time::Duration::from_millis(200)).await,
            "the process never left the group"
        );
        assert_eq!(ours.group.end().await, 1);
        assert!(ends_within(ours_pid, limit).await, "it survived the end");
        assert_eq!(ours.group.end().await, 0, "swept once");
        assert!(!gone(theirs_pid), "another start's process was killed");
        drop(theirs);
        assert!(
            ends_within(theirs_pid, limit).await,
            "dropping a group sweeps what left it"
        );
    }

    #[test]
    fn a_tag_nothing_carries_finds_nothing() {
        assert_eq!(kill_spawn(&spawn_tag()), 0);
        assert_ne!(spawn_tag(), spawn_tag());
        assert!(spawn_tag().starts_with(writer_tag()));
    }
}
