//! Agent providers: everything that can answer an [`application::ports::QueryFn`] call.
//!
//! One module per provider, each mapping its native output into normalized
//! [`application::ports::AgentMessage`]s. The fixture-backed [`mock`] provider
//! is just another provider: it replays recorded calls with no network, which
//! is what makes runs reproducible in tests and examples. [`Providers`]
//! dispatches each call to the provider its agent names.
//!
//! CLI agents print JSONL: [`process`] runs each CLI in a process group of
//! its own (killed on timeout or cancel), [`normalize`] frames, repairs and
//! parses its output the same way for every provider, and each provider
//! supplies only its command line and a line decoder ([`claude`], [`codex`],
//! [`gemini`], [`copilot`]).
//!
//! Architecture invariant: providers never depend on each other, and nothing
//! here knows about stores or the CLI.

pub mod anthropic;
pub mod claude;
pub mod codex;
pub mod copilot;
pub mod gemini;
mod http;
pub mod mcp;
pub mod mock;
pub mod normalize;
pub mod openai;
pub mod process;
mod providers;

pub use http::KeySource;
pub use mock::MockQuery;
pub use providers::Providers;
