//! Every child process awr starts, and the one way it starts them.
//!
//! A CLI agent ([`cli`]), a `shell` tool call ([`shell`]) and a `command`
//! node ([`command`]) all run through [`group::spawn`]: a process group of
//! their own, stdin closed, key variables withheld, and the whole group
//! killed on timeout, on cancel (the caller drops the future or stream) and
//! when the child ends, with whatever left the group for a session of its
//! own ([`sweep`]), so nothing they start outlives them. Their output is
//! read to its end with a cap ([`capture`]). The `shell` tool and the
//! command runner share one script runner ([`script`]), so they share one
//! sandbox.
//!
//! The `shell` tool lives here rather than with the other built-in tools in
//! `infrastructure` because adapters do not depend on each other and this
//! mechanism is needed by both the CLI agents and the shell.

pub mod capture;
pub mod cli;
pub mod command;
pub mod group;
pub(crate) mod mcp_config;
pub mod script;
pub mod shell;
pub mod sweep;
#[cfg(test)]
pub(crate) mod testing;

pub use cli::{
    CliAgent, CliCommand, CliProgram, Prepared, private_dir, prompt_with_system, run_cli,
};
pub(crate) use cli::{flag, print_args};
pub use command::ShellCommandRunner;
pub use group::{GroupId, OsProcesses, ProcessGroup, Sandbox, kill_leftover};
pub use shell::Shell;

/// The state letter (`R`, `S`, `Z`...) of `pid` and its start time in clock
/// ticks after boot, from `/proc/<pid>/stat`.
fn state_and_start(pid: u32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and `)`; the fields after
    // its last `)` start at field 3 (the state), so field 22 is the 20th.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.to_owned();
    let ticks = fields.nth(18)?.parse().ok()?;
    Some((state, ticks))
}
