//! The `openai` provider: any OpenAI-compatible Chat Completions server.
