//! [`Providers`]: the one `QueryFn` the runner sees, routing each call by the
//! agent's `provider:` to the adapter that serves it. It lives in
//! `application` (the runtime builds it from the providers it is given);
//! the tests below run every CLI provider through it.

pub use application::runtime::Providers;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Each CLI provider, run as a real process that replays what the real
    //! CLI printed: the command is built, the output decoded, the run ends.

    use super::*;
    use crate::normalize::testing::{agent_request, replaying};
    use crate::{claude::ClaudeCode, codex::Codex, copilot::Copilot, gemini::Gemini};
    use application::ports::AgentMessage;
    use application::ports::QueryFn;
    use domain::workflow::Provider;
    use futures::StreamExt;
    use std::sync::Arc;

    fn providers() -> Providers {
        Providers::new()
            .with(Provider::ClaudeCode, Arc::new(ClaudeCode::default()))
            .with(Provider::Codex, Arc::new(Codex::default()))
            .with(Provider::Gemini, Arc::new(Gemini::default()))
            .with(Provider::Copilot, Arc::new(Copilot::default()))
    }

    #[tokio::test]
    async fn every_cli_provider_replays_its_recorded_tool_run() {
        let dir = tempfile::tempdir().unwrap();
        for (provider, cli) in [
            (Provider::ClaudeCode, "claude"),
            (Provider::Codex, "codex"),
            (Provider::Gemini, "gemini"),
            (Provider::Copilot, "copilot"),
        ] {
            let exe = replaying(dir.path(), cli, "tool");
            let mut request = agent_request(provider, Some(exe));
            request.prompt = "TOOLTEST run echo hi".into();
            let out: Vec<_> = providers().query(request).await.unwrap().collect().await;
            assert!(
                out.iter()
                    .any(|m| matches!(m, Ok(AgentMessage::Tool { .. }))),
                "{cli}: a tool call: {out:?}"
            );
            match out.last() {
                Some(Ok(AgentMessage::Completed(result))) => {
                    assert!(!result.text.is_empty(), "{cli}: final text")
                }
                other => panic!("{cli}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn an_unconfigured_provider_is_a_clear_error() {
        let request = agent_request(Provider::Gemini, None);
        let err = Providers::new().query(request).await.err().unwrap();
        assert!(err.to_string().contains("`gemini`"), "{err}");
    }
}
