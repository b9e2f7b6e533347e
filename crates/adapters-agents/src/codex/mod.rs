//! The Codex CLI provider (`@openai/codex`, seen 0.169.0).
//!
//! Codex is run as `codex exec --json --skip-git-repo-check PROMPT` (resume:
//! `codex exec resume --json --skip-git-repo-check THREAD_ID PROMPT`) and
//! prints one JSON event per line; it runs its own tools, which we only
//! observe. This module maps that output into normalized
//! [`application::ports::AgentMessage`]s: [`wire`] declares the lines,
//! [`CodexDecoder`] maps them, and the shared [`crate::normalize`] layer
//! frames and repairs the raw bytes; the decoder's [`CliProgram`] impl is its
//! command line, which [`Codex`] (the shared [`crate::process::CliAgent`])
//! runs. Decoding is pure
//! so it is tested on recorded real output.

mod decode;
pub mod wire;

pub use decode::{CodexDecoder, SHELL_TOOL};

use application::ports::AgentRequest;

use crate::process::{CliAgent, CliProgram, flag, prompt_with_system};

/// Runs agents on the Codex CLI.
pub type Codex = CliAgent<CodexDecoder>;

impl CliProgram for CodexDecoder {
    const EXECUTABLE: &'static str = "codex";

    /// A resumed thread's `turn.completed` usage is the thread's total.
    const REPORTS_SESSION_TOTALS: bool = true;

    /// Codex has no system prompt flag in `exec` mode, so the agent's
    /// system prompt leads the prompt text.
    fn args(request: &AgentRequest) -> Vec<String> {
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
        args
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod process_tests {
    //! The provider against fake executables printing what the real CLI printed.

    use super::*;
    use crate::normalize::Decoded;
    use crate::normalize::testing::{agent_request, completed};
    use application::ports::AgentMessage;
    use application::ports::QueryFn;
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
        assert_eq!(
            completed(&first).usage.input_tokens,
            200,
            "240 less 40 cached"
        );
        // What the run's log holds for the thread: the first invocation's usage.
        let mut resumed = request(replaying(dir.path(), "resume"), Some(session_id));
        resumed.session_usage = completed(&first).usage.clone();
        let second: Vec<Decoded> = codex.query(resumed).await.unwrap().collect().await;
        let usage = &completed(&second).usage;
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (100, 25),
            "not the thread's 300/75"
        );
    }
}
