//! The `shell` tool.
