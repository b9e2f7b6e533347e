//! Test helpers: whether a process has ended, waited for on that condition.

use std::time::{Duration, Instant};

/// True once `pid` no longer runs: absent, or a zombie nobody reaped yet
/// (a container may have no init that reaps orphans).
pub fn gone(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    if rustix::process::test_kill_process(pid).is_err() {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).is_ok_and(|stat| {
        // The state follows the command name, which may hold `)`.
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        state.starts_with('Z') || state.starts_with('X')
    })
}

/// Waits until `pid` is [`gone`], or `limit` passes. A killed process is not
/// gone at once: SIGKILL is acted on when the kernel next schedules it, so a
/// check made right after the kill races with its exit.
pub async fn ends_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !gone(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Waits until `path` holds a pid (a script wrote it), or `limit` passes.
pub async fn pid_in(path: &std::path::Path, limit: Duration) -> Option<u32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
            && let Ok(pid) = text.trim().parse()
        {
            return Some(pid);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until process `pid` runs the program `name` (its `exec` is done:
/// while one is under way, what `/proc` shows of it may be neither the old
/// program's nor the new one's).
pub async fn runs(pid: u32, name: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for the pid a script writes to `path`, then for that process to
/// end; says which step did not happen.
pub async fn ends(path: &std::path::Path) -> Result<u32, String> {
    let limit = Duration::from_secs(10);
    let pid = pid_in(path, limit)
        .await
        .ok_or_else(|| format!("no pid in {}", path.display()))?;
    if ends_within(pid, limit).await {
        Ok(pid)
    } else {
        Err(format!(
            "process {pid} (from {}) is still running",
            path.display()
        ))
    }
}
