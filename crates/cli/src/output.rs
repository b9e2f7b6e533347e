//! What `awr` prints and how a command fails: every line goes through
//! [`say`] (stdout) or [`note`] (stderr), and a [`Failure`] decides the
//! exit code.

/// How a command failed, which decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage, bad input, or storage that cannot be read or written: exit 2.
    Input(anyhow::Error),
    /// The run failed or the runtime did: exit 1.
    Run(anyhow::Error),
    /// A signal cancelled the run: exit 128 + the signal's number (130 for
    /// SIGINT, 143 for SIGTERM), as a shell reports a process it killed.
    Cancelled(u8, anyhow::Error),
    /// The run was paused: it stopped where it was, to be resumed (exit 3).
    Paused(anyhow::Error),
    /// The run waits for a person's answer (an `approval` node), holding
    /// nothing: an answer continues it (exit 4).
    Waiting(anyhow::Error),
    /// A recording's replay cannot run at all (`verify-determinism`: its
    /// workflow is gone or no longer loads): exit 3.
    Replay(anyhow::Error),
}

impl Failure {
    /// What went wrong, whatever the exit code.
    pub fn error(&self) -> &anyhow::Error {
        let (Failure::Input(e)
        | Failure::Run(e)
        | Failure::Cancelled(_, e)
        | Failure::Paused(e)
        | Failure::Waiting(e)
        | Failure::Replay(e)) = self;
        e
    }

    /// The same failure (same exit code), its error passed through `f`.
    #[must_use]
    pub fn map(self, f: impl FnOnce(anyhow::Error) -> anyhow::Error) -> Self {
        match self {
            Failure::Input(e) => Failure::Input(f(e)),
            Failure::Run(e) => Failure::Run(f(e)),
            Failure::Cancelled(code, e) => Failure::Cancelled(code, f(e)),
            Failure::Paused(e) => Failure::Paused(f(e)),
            Failure::Waiting(e) => Failure::Waiting(f(e)),
            Failure::Replay(e) => Failure::Replay(f(e)),
        }
    }

    pub(crate) fn code(&self) -> u8 {
        match self {
            Failure::Input(_) => 2,
            Failure::Run(_) => 1,
            Failure::Cancelled(code, _) => *code,
            Failure::Paused(_) | Failure::Replay(_) => 3,
            Failure::Waiting(_) => 4,
        }
    }
}

/// Writes one line to stdout. A closed pipe (`awr events RUN | head`) ends
/// the program quietly with success, as a reader that stopped reading wants.
pub fn say(line: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}") {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(Failure::Run(anyhow::anyhow!("cannot write to stdout: {e}"))),
    }
}

/// Prints why a command failed: one `awr: ...` line on stderr, its cause
/// chain on one line, secrets masked.
pub fn report(failure: &Failure) {
    let chain = format!("{:#}", failure.error());
    note(&format!(
        "awr: {}",
        one_line(&crate::wiring::redact_printed(&chain))
    ));
}

/// `error`, naming `run_id` once: the application's errors name the run
/// where they know it (not found, refused, locked, the workflow of run X),
/// so the run is added as context only to those that do not (an I/O error).
pub fn about_run(run_id: domain::RunId, error: anyhow::Error) -> anyhow::Error {
    if format!("{error:#}").contains(&run_id.to_string()) {
        error
    } else {
        error.context(format!("run {run_id}"))
    }
}

/// An error's cause chain (`{:#}`: outermost first, `: ` between causes)
/// on one line: a cause that spans lines, such as an agent's stderr, has its
/// lines joined by spaces, so the error stays one line for `tail -1` and logs.
fn one_line(chain: &str) -> String {
    chain
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes one line to stderr, [`inert`]. An error is ignored: with stderr
/// gone there is nowhere left to report it, and it is no reason to stop a run.
pub fn note(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{}", inert(line));
}

/// Text that an agent, a file or a server controls, made safe to show on a
/// terminal: every control character but newline and tab (ESC, CR, BEL,
/// DEL, the C1 range) is shown as its escape (`\u{1b}`), so hostile output
/// cannot colour, move the cursor, rewrite a line or retitle the window,
/// whatever `NO_COLOR` says. Data meant for pipes (`awr run`'s output, the
/// `--json` forms) is printed as it is, never through this.
pub fn inert(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether stderr may carry colour escapes: it is a terminal and `NO_COLOR`
/// (<https://no-color.org>) is unset or empty.
pub fn stderr_color() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
