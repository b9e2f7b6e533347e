//! The Codex CLI provider (`@openai/codex`, seen 0.169.0).
//!
//! Codex is run as `codex exec --json --skip-git-repo-check PROMPT` (resume:
//! `codex exec resume --json --skip-git-repo-check THREAD_ID PROMPT`) and
//! prints one JSON event per line; it runs its own tools, which we only
//! observe. This module maps that output into normalized
//! [`application::ports::AgentMessage`]s: [`wire`] declares the lines,
//! [`CodexDecoder`] maps them, and the shared [`crate::normalize`] layer
//! frames and repairs the raw bytes; [`Codex`] is the `QueryFn` that runs the
//! CLI through [`crate::process`]. Decoding is pure so it is tested on
//! recorded real output.

mod decode;
pub mod wire;

pub use decode::{CodexDecoder, SHELL_TOOL};

use application::ports::{AgentRequest, AgentStream, QueryError, QueryFn};
use application::secrets::KeyNames;
use async_trait::async_trait;

use crate::normalize::{Decoded, decode_all};
use crate::process::{CliCommand, prompt_with_system, run_cli};

/// Runs agents on the Codex CLI.
///
/// Codex reports a thread's cumulative usage after a resume; `agent:complete`
/// wants this invocation's, so the usage the thread's earlier invocations
/// recorded (`AgentRequest::session_usage`, from the run's log) is
/// subtracted.
#[derive(Debug, Clone, Default)]
pub struct Codex {
    /// Key names withheld from the CLI besides the fixed rules.
    keys: KeyNames,
}

impl Codex {
    /// Withholds `keys` from the CLI besides the fixed rules, except the
    /// ones its node needs.
    pub fn withholding(keys: KeyNames) -> Self {
        Self { keys }
    }

    /// The command line for one invocation. Codex has no system prompt flag in
    /// `exec` mode, so the agent's system prompt leads the prompt text.
    pub fn command(request: &AgentRequest) -> CliCommand {
        let agent = &request.agent;
        let mut args: Vec<String> = vec!["exec".into()];
        if request.resume.is_some() {
            args.push("resume".into());
        }
        args.extend(["--json".into(), "--skip-git-repo-check".into()]);
        if let Some(model) = &agent.model {
            args.extend(["--model".into(), model.clone()]);
        }
        args.extend(agent.args.iter().cloned());
        if let Some(thread) = &request.resume {
            args.push(thread.to_string());
        }
        // No system prompt flag in this mode: the system prompt leads the prompt.
        let prompt = prompt_with_system(request);
        args.push(prompt);
        CliCommand::for_agent(request, "codex", args)
    }
}

#[async_trait]
impl QueryFn for Codex {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        // After a resume Codex reports the thread's totals: the usage its
        // earlier invocations recorded in the run's log is subtracted.
        let decoder = match &request.resume {
            Some(_) => CodexDecoder::with_previous_usage(request.session_usage.clone()),
            None => CodexDecoder::new(),
        };
        run_cli(Self::command(&request).withholding(&self.keys), decoder)
    }
}

/// Decodes a whole captured Codex run (stdout, exit code, stderr tail).
///
/// Usage is reported as Codex prints it; after a resume that is the thread's
/// cumulative usage. Use [`CodexDecoder::with_previous_usage`] with
/// [`decode_all`] to get the usage of this invocation alone.
pub fn decode_output(stdout: &[u8], exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
    decode_all(CodexDecoder::new(), stdout, exit_code, stderr_tail)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod process_tests {
    //! The provider against fake executables printing what the real CLI printed.

    use super::*;
    use crate::normalize::testing::{agent_request, completed};
    use application::ports::AgentMessage;
    use domain::SessionId;
    use domain::workflow::Provider;
    use futures::StreamExt;
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
        let Some(session_id) = first.iter().find_map(|m| match m {
            Ok(AgentMessage::Session { session_id, .. }) => Some(session_id.clone()),
            _ => None,
        }) else {
            panic!("{first:?}")
        };
        assert_eq!(completed(&first).usage.input_tokens, 240);
        // What the run's log holds for the thread: the first invocation's usage.
        let mut resumed = request(replaying(dir.path(), "resume"), Some(session_id));
        resumed.session_usage = completed(&first).usage.clone();
        let second: Vec<Decoded> = codex.query(resumed).await.unwrap().collect().await;
        let usage = &completed(&second).usage;
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (120, 25),
            "not the thread's 360/75"
        );
    }
}
