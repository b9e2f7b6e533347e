//! Starting a child in a process group of its own, and the guard that kills
//! that whole group.
//!
//! Every child awr starts (a CLI agent, a `shell` tool call, a `command`
//! node) goes through [`spawn`]: stdin closed, stdout and stderr piped, its
//! own group, and the key variables of awr's environment withheld. The
//! returned [`ProcessGroup`] kills the group with SIGKILL when it is dropped,
//! so a cancelled call (a dropped future or stream) leaves nothing behind,
//! not even what the child started in the background.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use application::ports::Processes;
use application::secrets::KeyNames;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::state_and_start;
use super::sweep::{SPAWN_VAR, kill_run, kill_spawn, spawn_tag};

/// Which variables of awr's environment a child must not inherit: every key
/// variable `keys` recognizes, except those in `keep`, and the names in
/// `hidden` whatever they are.
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    /// Recognizes key variables.
    pub keys: KeyNames,
    /// Key variables the child needs (a CLI agent's own API key).
    pub keep: Vec<String>,
    /// Further variables to remove (an HTTP agent's key, hidden from its shell).
    pub hidden: Vec<String>,
    /// Variables set last, over what is inherited.
    pub env: BTreeMap<String, String>,
}

impl Sandbox {
    /// The names to remove from the environment `inherited`.
    fn withheld(&self, inherited: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
        let mut names = self.keys.withheld(inherited, &self.keep);
        names.extend(self.hidden.iter().map(OsString::from));
        names
    }

    /// Applies the sandbox to `command`, against awr's own environment.
    fn apply(&self, command: &mut Command) {
        for name in self.withheld(std::env::vars_os().map(|(name, _)| name)) {
            command.env_remove(name);
        }
        command.envs(&self.env);
    }
}

/// Names a process group so that a later awr process can find it again: the
/// group id (the pid of its first process) and that process's start time,
/// which tells it from a later process that reuses the pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupId {
    /// The process group id.
    pub pgid: u32,
    /// When the group's first process started, in clock ticks after boot
    /// (field 22 of `/proc/<pid>/stat`); `None` where there is no `/proc`.
    pub start_ticks: Option<u64>,
}

impl GroupId {
    fn of(pid: u32) -> Self {
        Self {
            pgid: pid,
            start_ticks: start_ticks(pid),
        }
    }
}

/// The start time of `pid` in clock ticks after boot, from `/proc`.
fn start_ticks(pid: u32) -> Option<u64> {
    state_and_start(pid).map(|(_, ticks)| ticks)
}

/// Kills the process group a dead awr process left behind, named by what
/// `process:started` recorded: its leader's `pid` and start time. When the
/// leader lives with another start time, the pid was reused and the group
/// is not ours; when it is gone, the group (if any member lives) still is,
/// since the kernel gives no new process a pid that is a live group's id.
pub fn kill_leftover(pid: u32, start_time: u64) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if start_ticks(pid).is_some_and(|t| t != start_time) {
        return false;
    }
    match Pid::from_raw(raw) {
        Some(pid) => kill_process_group(pid, Signal::KILL).is_ok(),
        None => false,
    }
}

/// The [`Processes`] port on this machine's processes.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsProcesses;

impl Processes for OsProcesses {
    fn kill_group(&self, pid: u32, start_time: u64) -> bool {
        kill_leftover(pid, start_time)
    }

    fn kill_run(&self, run_id: domain::RunId) -> usize {
        kill_run(&run_id.to_string())
    }

    fn host(&self) -> Option<String> {
        static HOST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        HOST.get_or_init(|| {
            let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
            let name = name.trim();
            (!name.is_empty()).then(|| name.to_owned())
        })
        .clone()
    }
}

/// A running process group, killed (SIGKILL to every member) when dropped or
/// asked to, with what its processes moved out of it (see [`super::sweep`]).
/// Killing twice, or a group that already ended, is harmless.
///
/// The group is killed once at most: after that its id may be reused.
#[derive(Debug)]
pub struct ProcessGroup {
    /// The group id until it is killed, then 0. Atomic so that `kill` takes
    /// `&self`: the task that waits on the child and the one that enforces
    /// the timeout may both kill the group.
    pid: AtomicI32,
    id: Option<GroupId>,
    /// The start's [`SPAWN_VAR`], which its processes inherit.
    tag: String,
    /// Whether what left the group was swept ([`Self::end`]).
    swept: AtomicBool,
}

impl ProcessGroup {
    /// Which group this is, for the record; `None` if the child had already
    /// been reaped when it was started (it cannot have, in practice).
    pub fn id(&self) -> Option<GroupId> {
        self.id
    }

    /// Kills every process of the group now.
    pub fn kill(&self) {
        if let Some(pid) = Pid::from_raw(self.pid.swap(0, Ordering::SeqCst)) {
            // The group may already be gone; nothing to do about an error.
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }

    /// Kills the group and every process that moved out of it (a session of
    /// its own) but still carries this start's tag: once the child has
    /// exited, nothing it started is left running or holding its output
    /// open. How many escaped processes were found.
    pub async fn end(&self) -> usize {
        self.kill();
        if self.swept.swap(true, Ordering::SeqCst) {
            return 0;
        }
        let tag = self.tag.clone();
        // A scan of `/proc`: a blocking read per process. A runtime shutting
        // down refuses the task, and the scan is done here instead.
        let found = match tokio::task::spawn_blocking(move || kill_spawn(&tag)).await {
            Ok(found) => found,
            Err(_) => kill_spawn(&self.tag),
        };
        if found > 0 {
            tracing::info!(found, pgid = ?self.id.map(|g| g.pgid), "killed processes that left the child's group");
        }
        found
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
        // Dropped before its end (a cancelled call): the sweep is done here,
        // where nothing can be awaited.
        if !self.swept.swap(true, Ordering::SeqCst) {
            kill_spawn(&self.tag);
        }
    }
}

/// A child just started by [`spawn`], its pipes taken out.
#[derive(Debug)]
pub struct Spawned {
    /// The child, to wait on (it is killed too if dropped).
    pub child: Child,
    /// Its standard output.
    pub stdout: ChildStdout,
    /// Its standard error.
    pub stderr: ChildStderr,
    /// Its process group, killed when this is dropped.
    pub group: ProcessGroup,
}

/// A command for `program`, for [`spawn`] to start: the one place awr makes
/// a `Command` (`cargo xtask tidy` holds it so), so every process it starts
/// is in a group of its own that a dead writer's successor can sweep.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    Command::new(program)
}

/// Starts `command` in a process group of its own, stdin closed, stdout and
/// stderr piped, its environment narrowed by `sandbox`.
pub fn spawn(command: Command, sandbox: &Sandbox) -> std::io::Result<Spawned> {
    let (mut child, group) = start(command, sandbox, Stdio::null())?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("the output pipes were not created"));
    };
    Ok(Spawned {
        child,
        stdout,
        stderr,
        group,
    })
}

/// A child started by [`spawn_piped`], every pipe taken out: a program
/// awr speaks to on its stdin and stdout (an MCP server).
#[derive(Debug)]
pub struct Piped {
    /// The child, to wait on (it is killed too if dropped).
    pub child: Child,
    /// Its standard input.
    pub stdin: ChildStdin,
    /// Its standard output.
    pub stdout: ChildStdout,
    /// Its standard error.
    pub stderr: ChildStderr,
    /// Its process group, killed when this is dropped.
    pub group: ProcessGroup,
}

/// [`spawn`], with stdin piped too.
pub fn spawn_piped(command: Command, sandbox: &Sandbox) -> std::io::Result<Piped> {
    let (mut child, group) = start(command, sandbox, Stdio::piped())?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("the pipes were not created"));
    };
    Ok(Piped {
        child,
        stdin,
        stdout,
        stderr,
        group,
    })
}

/// Starts `command` in a group of its own, narrowed by `sandbox`, stdout
/// and stderr piped, stdin as `stdin` says.
fn start(
    mut command: Command,
    sandbox: &Sandbox,
    stdin: Stdio,
) -> std::io::Result<(Child, ProcessGroup)> {
    sandbox.apply(&mut command);
    let tag = spawn_tag();
    command
        .env(SPAWN_VAR, &tag)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = spawn_when_not_busy(&mut command)?;
    let raw = child.id();
    let group = ProcessGroup {
        pid: AtomicI32::new(raw.and_then(|id| i32::try_from(id).ok()).unwrap_or(0)),
        id: raw.map(GroupId::of),
        tag,
        swept: AtomicBool::new(false),
    };
    if let Some(id) = group.id {
        tracing::debug!(pgid = id.pgid, start_ticks = ?id.start_ticks, "process group started");
    }
    Ok((child, group))
}

/// How often a start that finds the executable busy is tried again.
const BUSY_ATTEMPTS: u32 = 8;

/// Starts `command`, trying again a few times when the executable is "busy".
///
/// `ETXTBSY` is transient: an executable just written in this process (or
/// another) is still open for writing in a child forked at that moment,
/// until that child calls `exec`. Waiting a few milliseconds is enough; a
/// file that stays busy is reported as it is.
fn spawn_when_not_busy(command: &mut Command) -> std::io::Result<Child> {
    let mut attempt = 0;
    loop {
        match command.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                attempt += 1;
                if attempt >= BUSY_ATTEMPTS {
                    return Err(e);
                }
                tracing::debug!(attempt, "the executable is busy; starting it again");
                std::thread::sleep(std::time::Duration::from_millis(1 << attempt));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn key_variables_are_withheld_except_those_kept_and_hidden_names_always() {
        let sandbox = Sandbox {
            keys: KeyNames::new(["MY_TOKEN_VAR".to_owned()]),
            keep: vec!["ANTHROPIC_API_KEY".into()],
            hidden: vec!["HOME".into()],
            env: BTreeMap::new(),
        };
        let inherited = [
            "PATH",
            "MY_TOKEN_VAR",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
        ]
        .map(OsString::from);
        assert_eq!(
            sandbox.withheld(inherited),
            ["MY_TOKEN_VAR", "OPENAI_API_KEY", "HOME"].map(OsString::from)
        );
    }

    /// An executable still open for writing elsewhere (`ETXTBSY`), closed
    /// a moment later, starts: a start is not lost to that race.
    #[tokio::test]
    async fn an_executable_busy_for_a_moment_still_starts() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("busy");
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&exe)
            .unwrap();
        writer.write_all(b"#!/bin/sh\necho started\n").unwrap();
        writer.flush().unwrap();
        let held = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(writer);
        });
        let spawned = spawn(Command::new(&exe), &Sandbox::default()).unwrap();
        held.join().unwrap();
        let mut out = String::new();
        let mut stdout = spawned.stdout;
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut out)
            .await
            .unwrap();
        assert_eq!(out, "started\n");
    }

    #[tokio::test]
    async fn an_executable_that_stays_busy_is_reported_as_busy() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("busy");
        let _writer = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&exe)
            .unwrap();
        let err = spawn(Command::new(&exe), &Sandbox::default()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ExecutableFileBusy, "{err}");
    }

    #[tokio::test]
    async fn a_leftover_group_is_killed_only_if_it_is_still_the_recorded_one() {
        let dir = tempfile::tempdir().unwrap();
        let background = dir.path().join("child.pid");
        let mut command = Command::new("sh");
        let script = format!("sleep 30 & echo $! > '{}'; wait", background.display());
        command.args(["-c", &script]);
        let spawned = spawn(command, &Sandbox::default()).unwrap();
        let id = spawned.group.id().unwrap();
        let start = id.start_ticks.unwrap();
        let child =
            crate::process::testing::pid_in(&background, std::time::Duration::from_secs(10))
                .await
                .unwrap();
        // Another start time: a reused pid, not ours.
        assert!(!kill_leftover(id.pgid, start + 1));
        assert!(!crate::process::testing::gone(child), "still running");
        assert!(kill_leftover(id.pgid, start));
        let Spawned {
            child: mut process,
            group: _group,
            ..
        } = spawned;
        let status = process.wait().await.unwrap();
        assert!(!status.success(), "killed by a signal: {status:?}");
        assert!(
            crate::process::testing::ends_within(child, std::time::Duration::from_secs(10)).await,
            "the group's background child survived"
        );
    }

    #[tokio::test]
    async fn the_group_id_is_the_child_pid_with_its_start_time() {
        let mut command = Command::new("sh");
        command.arg("-c").arg("echo $$; exec sleep 60");
        let mut spawned = spawn(command, &Sandbox::default()).unwrap();
        let id = spawned.group.id().unwrap();
        assert_eq!(id.pgid, spawned.child.id().unwrap());
        // The start time survives `exec`: it names the process, not the program.
        assert_eq!(id.start_ticks, start_ticks(id.pgid));
        assert!(id.start_ticks.is_some());
        let mut line = String::new();
        tokio::io::AsyncBufReadExt::read_line(
            &mut tokio::io::BufReader::new(&mut spawned.stdout),
            &mut line,
        )
        .await
        .unwrap();
        assert_eq!(line.trim(), id.pgid.to_string());
        drop(spawned);
        assert!(
            super::super::testing::ends_within(id.pgid, std::time::Duration::from_secs(10)).await
        );
    }
}
