//! The `http_get` tool.
