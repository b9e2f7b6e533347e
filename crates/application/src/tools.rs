//! [`ToolRouter`]: the one seam through which the runtime runs tools.
//!
//! Every call is checked before the tool sees it — the tool must exist, be
//! granted to the agent, and the input must match its JSON Schema — and a
//! refusal comes back as a [`ToolError`] for the model to read, never as a
//! crash. The tool then runs with the agent's grant of it in its
//! [`ToolContext`], so per-grant settings (`http_get`'s `allow:`) reach the
//! one tool they belong to without widening the [`Tool`] port.
//! Built-in tools and tools a library user registers plug in the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use domain::output::validate;
use domain::workflow::ToolGrant;
use serde_json::Value;

use crate::ports::{Tool, ToolContext, ToolError, ToolSpec};

/// The registered tools, by name.
#[derive(Clone, Default)]
pub struct ToolRouter {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRouter {
    /// No tools yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a later tool of the same name replaces an earlier one.
    #[must_use]
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.spec().name, tool);
        self
    }

    /// What the model is told about the tools granted to an agent, in the
    /// order granted (a grant of every tool of an MCP server, `server/*`,
    /// gives its tools in name order); names that are not registered are
    /// skipped, and a tool granted twice is told once.
    pub fn specs(&self, granted: &[ToolGrant]) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = Vec::new();
        for grant in granted {
            let tools: Box<dyn Iterator<Item = &Arc<dyn Tool>>> = match grant.mcp() {
                None => Box::new(self.tools.get(&grant.name).into_iter()),
                Some(_) => Box::new(
                    (self.tools.iter())
                        .filter(|(name, _)| grant.grants(name))
                        .map(|(_, tool)| tool),
                ),
            };
            for tool in tools {
                let spec = tool.spec();
                if !specs.iter().any(|s| s.name == spec.name) {
                    specs.push(spec);
                }
            }
        }
        specs
    }

    /// Names of every registered tool.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Runs `name` with `input` for an agent granted `granted`, under its
    /// grant of `name` (in the context the tool sees).
    pub async fn call(
        &self,
        name: &str,
        input: Value,
        granted: &[ToolGrant],
        context: &ToolContext,
    ) -> Result<Value, ToolError> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| ToolError::Unknown(name.to_owned()))?;
        let grant = granted
            .iter()
            .find(|g| g.grants(name))
            .ok_or_else(|| ToolError::NotGranted(name.to_owned()))?;
        let spec = tool.spec();
        validate(&input, &spec.input_schema).map_err(|e| ToolError::InvalidInput {
            tool: name.to_owned(),
            message: e.to_string(),
        })?;
        let context = context.clone().granting(grant.clone());
        tool.call(input, &context).await
    }
}

/// Output bytes (of a command, a download) as text for a model or a record:
/// invalid UTF-8 replaced, and a character cut in half at the end by a size
/// cap (`truncated`) dropped rather than replaced.
pub fn lossy_text(mut bytes: Vec<u8>, truncated: bool) -> String {
    // `error_len() == None`: the bytes end inside a character.
    if truncated
        && let Err(e) = std::str::from_utf8(&bytes)
        && e.error_len().is_none()
    {
        bytes.truncate(e.valid_up_to());
    }
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::ports::MockTool;
    use serde_json::json;

    fn echo_tool(calls: usize) -> MockTool {
        let mut tool = MockTool::new();
        tool.expect_spec().returning(|| ToolSpec {
            name: "echo".into(),
            description: "Says it back".into(),
            input_schema: json!({"type": "object", "required": ["text"],
                "properties": {"text": {"type": "string"}}, "additionalProperties": false}),
        });
        tool.expect_call()
            .times(calls)
            .returning(|input, _| Ok(input["text"].clone()));
        tool
    }

    fn context() -> ToolContext {
        ToolContext::new("/tmp/ws")
    }

    #[tokio::test]
    async fn a_valid_call_reaches_the_tool() {
        let router = ToolRouter::new().with(Arc::new(echo_tool(1)));
        let granted = vec![ToolGrant::new("echo")];
        let out = router
            .call("echo", json!({"text": "hi"}), &granted, &context())
            .await
            .unwrap();
        assert_eq!(out, json!("hi"));
        assert_eq!(router.specs(&granted)[0].name, "echo");
        assert!(router.specs(&["nope".into()]).is_empty());
    }

    #[tokio::test]
    async fn the_tool_runs_under_its_own_grant() {
        let allowed = ToolGrant::new("echo").allowing(["10.0.0.0/8".parse().unwrap()]);
        let mut tool = echo_tool(0);
        let expected = allowed.clone();
        tool.expect_call()
            .times(1)
            .withf(move |_, context| context.grant.as_ref() == Some(&expected))
            .returning(|_, _| Ok(json!("seen")));
        let router = ToolRouter::new().with(Arc::new(tool));
        let granted = [ToolGrant::new("other"), allowed];
        let out = router
            .call("echo", json!({"text": "x"}), &granted, &context())
            .await;
        assert_eq!(out, Ok(json!("seen")));
    }

    #[tokio::test]
    async fn invalid_unknown_and_ungranted_calls_never_reach_a_tool() {
        let router = ToolRouter::new().with(Arc::new(echo_tool(0)));
        let granted = vec![ToolGrant::new("echo")];
        let err = router
            .call("echo", json!({"text": 3}), &granted, &context())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::InvalidInput { message, .. } if message.contains("/text")),
            "{err}"
        );
        let err = router
            .call(
                "echo",
                json!({"text": "x", "extra": 1}),
                &granted,
                &context(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput { .. }));
        assert_eq!(
            router.call("rm", json!({}), &granted, &context()).await,
            Err(ToolError::Unknown("rm".into()))
        );
        assert_eq!(
            router
                .call("echo", json!({"text": "x"}), &[], &context())
                .await,
            Err(ToolError::NotGranted("echo".into()))
        );
    }

    #[test]
    fn a_character_cut_by_the_cap_is_dropped() {
        assert_eq!(lossy_text("hé".as_bytes()[..2].to_vec(), true), "h");
        assert_eq!(lossy_text(vec![b'a', 0xff, b'b'], false), "a\u{fffd}b");
    }
}
