//! The Codex CLI provider (`@openai/codex`, seen 0.169.0).
//!
//! Codex is run as `codex exec --json --skip-git-repo-check PROMPT` (resume:
//! `codex exec resume --json --skip-git-repo-check THREAD_ID PROMPT`) and
//! prints one JSON event per line; it runs its own tools, which we only
//! observe. This module maps that output into normalized
//! [`application::ports::AgentMessage`]s: [`wire`] declares the lines,
//! [`CodexDecoder`] maps them, and the shared [`crate::normalize`] layer
//! frames and repairs the raw bytes; [`CodexCli`] is its command line, which
//! [`Codex`] (the shared [`crate::process::CliAgent`]) runs. Decoding is pure
//! so it is tested on recorded real output.

mod decode;
pub mod wire;

pub use decode::{CodexDecoder, SHELL_TOOL};

use application::ports::{AgentMessage, AgentRequest, AgentStream, QueryError};
use futures::StreamExt;

use crate::normalize::usage::{SessionTotals, plus};
use crate::process::{CliAgent, CliCommand, CliProgram, flag, prompt_with_system, run_cli};

/// Runs agents on the Codex CLI.
pub type Codex = CliAgent<CodexCli>;

/// The Codex CLI: its command line, its decoder, and the usage its threads
/// reported.
///
/// Codex reports a thread's cumulative usage after a resume; `agent:complete`
/// wants this invocation's. The provider remembers each thread's totals it
/// has seen (in this process) and subtracts them on the next resume; see
/// [`crate::normalize::usage`] for what the run's log holds instead.
#[derive(Debug, Clone, Default)]
pub struct CodexCli {
    /// Cumulative usage last reported per thread id.
    totals: SessionTotals,
}

impl CliProgram for CodexCli {
    type Decoder = CodexDecoder;

    /// Codex has no system prompt flag in `exec` mode, so the agent's
    /// system prompt leads the prompt text.
    fn command(request: &AgentRequest) -> CliCommand {
        let agent = &request.agent;
        let mut args: Vec<String> = vec!["exec".into()];
        if request.resume.is_some() {
            args.push("resume".into());
        }
        args.extend(["--json".into(), "--skip-git-repo-check".into()]);
        args.extend(flag("--model", agent.model.as_ref()));
        args.extend(agent.args.iter().cloned());
        if let Some(thread) = &request.resume {
            args.push(thread.to_string());
        }
        args.push(prompt_with_system(request));
        CliCommand::for_agent(request, "codex", args)
    }

    /// Decodes with the thread's previous totals subtracted, and records
    /// the new totals when the run completes.
    fn start(&self, request: AgentRequest, command: CliCommand) -> Result<AgentStream, QueryError> {
        let previous = request
            .resume
            .as_ref()
            .and_then(|thread| self.totals.get(thread.as_str()));
        let decoder = match previous.clone() {
            Some(usage) => CodexDecoder::with_previous_usage(usage),
            None => CodexDecoder::default(),
        };
        let stream = run_cli(command, decoder)?;
        let totals = self.totals.clone();
        let mut thread = request.resume.map(|t| t.to_string());
        Ok(Box::pin(stream.map(move |item| {
            match &item {
                Ok(AgentMessage::Session { session_id, .. }) => {
                    thread = Some(session_id.to_string());
                }
                Ok(AgentMessage::Completed(result)) => {
                    if let Some(thread) = &thread {
                        let before = previous.clone().unwrap_or_default();
                        totals.set(thread.clone(), plus(&before, &result.usage));
                    }
                }
                _ => {}
            }
            item
        })))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod process_tests {
    //! The provider against fake executables printing what the real CLI printed.

    use super::*;
    use crate::normalize::Decoded;
    use crate::normalize::testing::{agent_request, completed};
    use application::ports::QueryFn;
    use domain::SessionId;
    use domain::workflow::Provider;
    use std::path::Path;

    fn replaying(dir: &Path, scenario: &str) -> String {
        crate::normalize::testing::replaying(dir, "codex", scenario)
    }

    fn request(executable: String, resume: Option<SessionId>) -> AgentRequest {
        let mut request = agent_request(Provider::Codex, Some(executable));
        request.agent.system_prompt = "Be brief.".into();
        request.resume = resume;
        request
    }

    #[test]
    fn resume_uses_exec_resume_with_the_thread_id() {
        let cmd = Codex::command(&request(
            "codex".into(),
            Some(SessionId::new("th-1").unwrap()),
        ));
        assert_eq!(
            cmd.args,
            [
                "exec",
                "resume",
                "--json",
                "--skip-git-repo-check",
                "th-1",
                "Be brief.\n\nrun echo hi"
            ]
        );
    }

    #[tokio::test]
    async fn usage_after_a_resume_is_this_invocations_own() {
        let dir = tempfile::tempdir().unwrap();
        let codex = Codex::default();
        let first: Vec<Decoded> = codex
            .query(request(replaying(dir.path(), "tool"), None))
            .await
            .unwrap()
            .collect()
            .await;
        let Some(Ok(AgentMessage::Session { session_id, .. })) = first.first() else {
            panic!("{first:?}")
        };
        assert_eq!(completed(&first).usage.input_tokens, 240);
        let second: Vec<Decoded> = codex
            .query(request(
                replaying(dir.path(), "resume"),
                Some(session_id.clone()),
            ))
            .await
            .unwrap()
            .collect()
            .await;
        let usage = &completed(&second).usage;
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (120, 25),
            "not the thread's 360/75"
        );
    }
}
