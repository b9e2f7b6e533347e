//! The Gemini CLI provider (`@google/gemini-cli`, seen 0.61.0).
//!
//! Gemini CLI is run as `gemini -p PROMPT --output-format stream-json -m
//! MODEL --yolo [--resume SESSION_ID]` and prints one JSON object per line;
//! it runs its own tools, which we only observe. This module maps that output
//! into normalized [`application::ports::AgentMessage`]s: [`wire`] declares
//! the lines, [`GeminiDecoder`] maps them, and the shared
//! [`crate::normalize`] layer frames and repairs the raw bytes. The decoder's
//! [`CliProgram`] impl is its command line, which [`Gemini`] (the shared
//! [`crate::process::CliAgent`]) runs. Decoding is pure, so it is tested on
//! recorded real output.

mod decode;
pub mod wire;

pub use decode::GeminiDecoder;

use application::ports::AgentRequest;

use crate::process::{CliAgent, CliProgram, flag, print_args};

/// Runs agents on the Gemini CLI. Name a model: the default `auto` makes an
/// extra routing call first.
pub type Gemini = CliAgent<GeminiDecoder>;

impl CliProgram for GeminiDecoder {
    const EXECUTABLE: &'static str = "gemini";

    fn args(request: &AgentRequest) -> Vec<String> {
        let agent = &request.agent;
        // No system prompt flag in this mode: the system prompt leads the prompt.
        // `--yolo`: without it the shell tool is not even offered.
        let mut args = print_args(request, "stream-json", "--yolo");
        let tools =
            Some(agent.tool_names().collect::<Vec<_>>().join(",")).filter(|t| !t.is_empty());
        args.extend(flag("-m", agent.model.as_ref()));
        args.extend(flag("--allowed-tools", tools));
        args.extend(flag("--resume", request.resume.as_ref()));
        args.extend(agent.args.iter().cloned());
        args
    }
}
