//! The `openai` chat adapter against the fake model server.
