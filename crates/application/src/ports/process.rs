//! [`Processes`]: what a run needs of the operating system's processes
//! beyond starting them (the providers and the command runner do that).

use domain::RunId;

/// Finds and ends the process groups a dead writer left behind.
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
pub trait Processes: Send + Sync + 'static {
    /// Kills the process group whose leader is `pid`, if it is still the
    /// group `process:started` recorded: its leader started at
    /// `start_time`, or is gone while members remain (a pid is never given
    /// to a new process while a group of that id lives). Whether a group
    /// was signalled.
    fn kill_group(&self, pid: u32, start_time: u64) -> bool;

    /// Kills every process started for run `run_id` that still lives, with
    /// its group, whether or not its start reached the log (a writer can
    /// die between starting a process and recording it). How many were
    /// found.
    fn kill_run(&self, run_id: RunId) -> usize;

    /// This machine's name, recorded with each process group started
    /// (`process:started`'s `host`): only a writer on the same machine
    /// kills a group, or continues a CLI agent's session, on record.
    /// `None` when it cannot be told, which matches any machine.
    fn host(&self) -> Option<String> {
        None
    }
}
