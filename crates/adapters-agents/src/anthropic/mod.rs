//! The `anthropic` provider: the Anthropic Messages API.
