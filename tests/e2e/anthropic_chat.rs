//! The `anthropic` chat adapter against the fake model server.
