//! Running a shell script to its end: `sh -c SCRIPT` in a process group of
//! its own, output captured with a cap, the whole group killed when the
//! script exits, when its time is up, or when the caller drops the future.
//!
//! Both the `shell` tool and the `command` node runner are this, so they
//! share one sandbox and one set of rules. Killing the group when `sh`
//! exits matters twice: nothing it started in the background outlives it,
//! and those background children, which hold the output pipes, do not keep
//! the read waiting.

use std::path::Path;
use std::time::{Duration, Instant};

use super::capture::{Captured, Keep};
use super::group::{GroupId, Sandbox, command, spawn};

/// How long to go on reading after a timeout killed the group: the pipes
/// close as soon as the killed processes are gone, unless something escaped
/// the group and its sweep (`setsid` with a cleared environment) and holds
/// them, whose output is then given up.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// One script to run.
#[derive(Debug, Clone)]
pub struct Script<'a> {
    /// The text for `sh -c`.
    pub text: &'a str,
    /// The directory it runs in.
    pub dir: &'a Path,
    /// Its environment, narrowed from awr's.
    pub sandbox: &'a Sandbox,
    /// Kill the group after this long.
    pub timeout: Option<Duration>,
    /// Bytes kept of stdout and of stderr each (their first bytes).
    pub max_output_bytes: usize,
}

/// What a script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptOutcome {
    /// The exit code; `None` when a signal ended it (a timeout included).
    pub exit_code: Option<i32>,
    /// Standard output, lossily decoded, cut at the cap.
    pub stdout: String,
    /// Standard error, likewise.
    pub stderr: String,
    /// Either stream went past the cap.
    pub truncated: bool,
    /// The timeout passed and the group was killed.
    pub timed_out: bool,
    /// Wall time from the start to the end of the reads.
    pub duration: Duration,
    /// The group it ran in.
    pub group: Option<GroupId>,
}

/// Runs `script`; an error is a script that could not be started at all
/// (or whose exit status could not be read).
pub async fn run_script(script: Script<'_>) -> std::io::Result<ScriptOutcome> {
    let started = Instant::now();
    let mut sh = command("sh");
    sh.arg("-c").arg(script.text).current_dir(script.dir);
    let spawned = spawn(sh, script.sandbox)?;
    let (mut child, group) = (spawned.child, spawned.group);
    let id = group.id();
    let keep = Keep::Head(script.max_output_bytes);
    let (mut out, mut err) = (Captured::new(keep), Captured::new(keep));
    let mut timed_out = false;
    let status = {
        let wait = async {
            let status = child.wait().await;
            // Background children would keep the pipes open; they go too,
            // with those that left the group.
            group.end().await;
            status
        };
        let all = async {
            let (status, (), ()) = tokio::join!(
                wait,
                out.read_from(spawned.stdout),
                err.read_from(spawned.stderr)
            );
            status
        };
        tokio::pin!(all);
        match script.timeout {
            None => Some(all.await),
            Some(limit) => match tokio::time::timeout(limit, &mut all).await {
                Ok(status) => Some(status),
                Err(_) => {
                    timed_out = true;
                    group.kill();
                    tokio::time::timeout(DRAIN_AFTER_KILL, &mut all).await.ok()
                }
            },
        }
    };
    group.end().await;
    let exit_code = match status {
        Some(status) if !timed_out => status?.code(),
        _ => None,
    };
    Ok(ScriptOutcome {
        exit_code,
        truncated: out.truncated() || err.truncated(),
        stdout: out.text(),
        stderr: err.text(),
        timed_out,
        duration: started.elapsed(),
        group: id,
    })
}
