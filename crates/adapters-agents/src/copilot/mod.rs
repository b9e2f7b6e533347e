//! The Copilot CLI provider (`@github/copilot`, seen 1.0.102).
//!
//! Copilot CLI is run as `copilot -p PROMPT --output-format json
//! --allow-all-tools --no-ask-user [--resume=SESSION_ID]` and prints one JSON
//! object per line; it runs its own tools, which we only observe. This module
//! maps that output into normalized [`application::ports::AgentMessage`]s:
//! [`wire`] declares the lines, [`CopilotDecoder`] maps them, and the shared
//! [`crate::normalize`] layer frames and repairs the raw bytes; [`Copilot`] is
//! the `QueryFn` that runs the CLI through [`crate::process`]. Decoding is
//! pure, so it is tested on recorded real output.

mod decode;
pub mod wire;

pub use decode::{CopilotDecoder, DANGLING_TOOL_ERROR};

use application::ports::{AgentRequest, AgentStream, QueryError, QueryFn};
use async_trait::async_trait;

use crate::normalize::{Decoded, decode_all};
use crate::process::{CliCommand, prompt_with_system, run_cli};
/// Runs agents on the GitHub Copilot CLI. Its session id appears only on the
/// final line; token counts are not printed on stdout.
#[derive(Debug, Clone, Copy, Default)]
pub struct Copilot;

impl Copilot {
    /// The command line for one invocation.
    pub fn command(request: &AgentRequest) -> CliCommand {
        let agent = &request.agent;
        // No system prompt flag in this mode: the system prompt leads the prompt.
        let prompt = prompt_with_system(request);
        let mut args: Vec<String> = vec![
            "-p".into(),
            prompt,
            "--output-format".into(),
            "json".into(),
            "--no-ask-user".into(),
        ];
        if agent.tools.is_empty() {
            args.push("--allow-all-tools".into());
        } else {
            for tool in &agent.tools {
                args.extend(["--allow-tool".into(), tool.clone()]);
            }
        }
        if let Some(model) = &agent.model {
            args.extend(["--model".into(), model.clone()]);
        }
        if let Some(session) = &request.resume {
            args.push(format!("--resume={session}"));
        }
        args.extend(agent.args.iter().cloned());
        CliCommand::for_agent(request, "copilot", args)
    }
}

#[async_trait]
impl QueryFn for Copilot {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        run_cli(Self::command(&request), CopilotDecoder::new())
    }
}

/// Decodes a whole captured Copilot CLI run (stdout, exit code, stderr tail).
pub fn decode_output(stdout: &[u8], exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
    decode_all(CopilotDecoder::new(), stdout, exit_code, stderr_tail)
}
