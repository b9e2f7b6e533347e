//! The Claude Code provider (`@anthropic-ai/claude-code`, seen 2.1.330).
//!
//! Claude Code is run as `claude -p PROMPT --output-format stream-json
//! --verbose ...` and prints one JSON object per line; it runs its own tools,
//! which we only observe. This module maps that output into normalized
//! [`application::ports::AgentMessage`]s: [`wire`] declares the lines,
//! [`ClaudeDecoder`] maps them, and the shared [`crate::normalize`] layer
//! frames and repairs the raw bytes. Spawning the CLI (the `QueryFn`) comes
//! later; decoding is pure so it is tested on recorded real output.

mod decode;
pub mod wire;

pub use decode::{ClaudeDecoder, DANGLING_TOOL_ERROR};

use crate::normalize::{Decoded, decode_all};

/// Decodes a whole captured Claude Code run (stdout, exit code, stderr tail).
pub fn decode_output(stdout: &[u8], exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
    decode_all(ClaudeDecoder::new(), stdout, exit_code, stderr_tail)
}
