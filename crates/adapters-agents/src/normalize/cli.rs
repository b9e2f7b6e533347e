//! What every CLI decoder does with a parsed line besides its own mapping:
//! reading it into a wire type (a line that does not fit is kept as a
//! warning), keeping lines it does not know, announcing the session, and
//! ending the stream with exactly one outcome.

use application::ports::{AgentMessage, QueryError};
use domain::SessionId;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::errors::{DURING_EXECUTION, fatal};
use super::extra::{self, Known};
use super::text::{describe_exit, tail};
use super::{Decoded, STDERR_TAIL_CHARS, warning};
use domain::event::Extra;

/// A CLI by the name its messages use (`Claude Code`, `Codex`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cli(pub &'static str);

impl Cli {
    /// Reads `line` as a `T` and maps it with `then`; a line of a known
    /// `kind` whose fields do not fit is kept as a warning instead.
    pub fn read<T: DeserializeOwned>(
        self,
        kind: &str,
        line: &Value,
        then: impl FnOnce(T) -> Vec<Decoded>,
    ) -> Vec<Decoded> {
        self.read_in(kind, line, line, then)
    }

    /// Like [`Cli::read`] for the `part` of a line that holds its fields
    /// (Copilot's `data`); a warning keeps the whole line.
    pub fn read_in<T: DeserializeOwned>(
        self,
        kind: &str,
        part: &Value,
        line: &Value,
        then: impl FnOnce(T) -> Vec<Decoded>,
    ) -> Vec<Decoded> {
        match T::deserialize(part) {
            Ok(parsed) => then(parsed),
            Err(err) => self.malformed(kind, &err, line),
        }
    }

    /// A line of a known `kind` whose fields do not parse: kept as a warning.
    pub fn malformed(self, kind: &str, err: &serde_json::Error, line: &Value) -> Vec<Decoded> {
        vec![Ok(warning(
            format!("malformed {} `{kind}` line: {err}", self.0),
            json!({ "line": line }),
        ))]
    }

    /// A line (or part of one) of a type this version does not know: kept
    /// as a warning.
    pub fn unknown(self, what: &str, line: &Value) -> Vec<Decoded> {
        vec![Ok(warning(
            format!("unknown {} {what}; kept as is", self.0),
            json!({ "line": line }),
        ))]
    }

    /// A line whose `type` this version does not know.
    pub fn unknown_type(self, line: &Value) -> Vec<Decoded> {
        let what = match line.get("type").and_then(Value::as_str) {
            Some(kind) => format!("line type `{kind}`"),
            None => "line with no `type`".to_owned(),
        };
        self.unknown(&what, line)
    }
}

/// Announces a provider's session the first time a line names it. A later
/// line naming the same session is silent; one naming another session, or
/// none, is kept as a warning (`what` names the kind of line).
pub fn announce_session(
    known: &mut Option<SessionId>,
    id: Option<String>,
    model: Option<String>,
    what: &str,
    line: &Value,
) -> Vec<Decoded> {
    match (&*known, SessionId::new(id.unwrap_or_default())) {
        (None, Ok(session_id)) => {
            *known = Some(session_id.clone());
            vec![Ok(AgentMessage::Session { session_id, model })]
        }
        (Some(first), Ok(id)) if *first == id => Vec::new(),
        (Some(_), Ok(_)) => vec![Ok(warning(
            format!("a second {what} line names another session; the first one is kept"),
            json!({ "line": line }),
        ))],
        (_, Err(_)) => vec![Ok(warning(
            format!("{what} line without a session id"),
            json!({ "line": line }),
        ))],
    }
}

/// How a CLI's stream ends: the outcome its result line gave (held back so
/// it comes last), and whether the end was already decoded.
#[derive(Debug, Default)]
pub struct Ending {
    /// The outcome of the last result line.
    outcome: Option<Decoded>,
    /// What that line holds that the outcome does not map: sent with it.
    extra: Extra,
    /// [`Ending::finish`] ran.
    finished: bool,
}

impl Ending {
    /// A result line: read as a `T` and mapped to the outcome by `outcome`
    /// (an unreadable one is an `error_during_execution`). A second result
    /// line replaces the first, with a warning. What `known` does not map
    /// of the line goes with a result; an error keeps the whole line.
    pub fn result<T: DeserializeOwned>(
        &mut self,
        line: &Value,
        known: Known,
        outcome: impl FnOnce(T) -> Decoded,
    ) -> Vec<Decoded> {
        let mut out = Vec::new();
        if self.outcome.is_some() {
            out.push(Ok(warning(
                "a second result line; the last one is kept".to_owned(),
                json!({ "line": line }),
            )));
        }
        self.extra = extra::of_line(line, known);
        self.outcome = Some(match T::deserialize(line) {
            Ok(parsed) => outcome(parsed),
            Err(err) => Err(fatal(
                DURING_EXECUTION,
                format!("unreadable result line: {err}"),
                line,
            )),
        });
        out
    }

    /// What goes with the outcome besides its own line's (a CLI whose
    /// result is built from several lines: the one it takes its usage from).
    pub fn keep(&mut self, extra: Extra) {
        self.extra = extra;
    }

    /// A failure the CLI reported after its result line: the invocation
    /// failed all the same, so it is the outcome.
    pub fn fail(&mut self, error: QueryError) {
        self.outcome = Some(Err(error));
    }

    /// The end of the stream, once (later calls yield nothing): the result
    /// line's outcome, else `otherwise`'s, concluded by [`conclude`]. Calls
    /// still without a result were recorded as uses: nothing is added.
    pub fn finish(
        &mut self,
        cli: Cli,
        missing: &str,
        exit_code: Option<i32>,
        stderr_tail: &str,
        otherwise: impl FnOnce() -> Option<Decoded>,
    ) -> Vec<Decoded> {
        if std::mem::replace(&mut self.finished, true) {
            return Vec::new();
        }
        let outcome = self.outcome.take().or_else(otherwise);
        let extra = std::mem::take(&mut self.extra);
        let ended = conclude(cli.0, outcome, missing, exit_code, stderr_tail);
        extra::before_first(ended, extra)
    }
}

/// How every CLI's stream ends: exactly one outcome after whatever came
/// before. A result is passed on, after a warning when the process still
/// exited non-zero; an error is passed on; and no outcome at all (`missing`
/// names the line that never came) is an `error_during_execution` naming
/// the exit and the stderr tail.
pub fn conclude(
    cli: &str,
    outcome: Option<Decoded>,
    missing: &str,
    exit_code: Option<i32>,
    stderr_tail: &str,
) -> Vec<Decoded> {
    let stderr = tail(stderr_tail, STDERR_TAIL_CHARS);
    let details = json!({ "exit_code": exit_code, "stderr_tail": stderr });
    match outcome {
        Some(Ok(done)) if exit_code != Some(0) => vec![
            Ok(warning(
                format!(
                    "{cli} {} after a successful result",
                    describe_exit(exit_code)
                ),
                details,
            )),
            Ok(done),
        ],
        Some(outcome) => vec![outcome],
        None => {
            let stderr_note = if stderr.is_empty() {
                "stderr was empty".to_owned()
            } else {
                format!("stderr: {stderr}")
            };
            vec![Err(QueryError::Agent {
                error_type: DURING_EXECUTION.into(),
                message: format!(
                    "{cli} {} without {missing}; {stderr_note}",
                    describe_exit(exit_code)
                ),
                details: Some(details),
            })]
        }
    }
}
