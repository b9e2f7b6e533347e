//! `awr mcp --permission-prompt`: awr's permission prompt for one node run
//! of one run, which awr gives a Claude Code agent whose grants ask a
//! person (`requires_approval`, docs/approvals.md). Claude Code calls its
//! one tool before a call it may not make unasked
//! (`--permission-prompt-tool`); the tool sends the run an `ask` command
//! for the node run, and answers as the run's record decides
//! ([`application::permission::answer`]): allowed at once, refused (not
//! granted), or the person's answer, waited for.
//!
//! It serves nothing else: the agent that runs it is given no other
//! power over awr.

use std::borrow::Cow;
use std::sync::Arc;

use application::permission::Verdict;
use application::ports::PERMISSION_TOOL;
use domain::{Caller, NodeRunId, RunId};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::{App, runs};
use crate::Failure;

/// What Claude Code asks with.
#[derive(Debug, Deserialize, JsonSchema)]
struct Asked {
    /// The tool it wants to call, as it names it (`Bash`, `mcp__fs__write_file`).
    tool_name: String,
    /// The arguments it would call it with.
    #[serde(default)]
    input: Value,
    /// Its id of the call.
    #[serde(default)]
    tool_use_id: Option<String>,
}

/// The permission prompt of node run `node_run` of run `run_id`.
#[derive(Clone)]
struct PermissionPrompt {
    app: App,
    by: Caller,
    run_id: RunId,
    node_run: NodeRunId,
}

impl ServerHandler for PermissionPrompt {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                "awr-approvals",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "awr's permission prompt: asks the run whether a tool call may go ahead, \
                 and waits for the person who answers when its grant says so.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut schema = match schemars::schema_for!(Asked).to_value() {
            Value::Object(schema) => schema,
            _ => serde_json::Map::new(),
        };
        schema.remove("$schema");
        let tool = Tool::new(
            PERMISSION_TOOL,
            "Whether a tool call may go ahead: the workflow's grant decides, or a person \
             does. Answers {\"behavior\": \"allow\", \"updatedInput\": …} or \
             {\"behavior\": \"deny\", \"message\": …}.",
            Arc::new(schema),
        )
        .with_annotations(ToolAnnotations::new().read_only(false).open_world(false));
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != PERMISSION_TOOL {
            return Err(ErrorData::invalid_params(
                format!("no tool `{}`", request.name),
                None,
            ));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let asked: Asked = serde_path_to_error::deserialize(arguments).map_err(|e| {
            ErrorData::invalid_params(
                format!("bad arguments at `{}`: {}", e.path(), e.inner()),
                None,
            )
        })?;
        let answer = match self.decide(&asked).await {
            Verdict::Allow => json!({"behavior": "allow", "updatedInput": asked.input}),
            Verdict::Deny(message) => json!({"behavior": "deny", "message": message}),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(answer.to_string())]).into())
    }
}

impl PermissionPrompt {
    /// Asks the run, then reads its answer off the record.
    async fn decide(&self, asked: &Asked) -> Verdict {
        let raw = json!({
            "type": "ask",
            "nodeRunId": self.node_run,
            "tool": {
                "callId": asked.tool_use_id.clone().unwrap_or_default(),
                "toolName": asked.tool_name,
                "toolInput": asked.input,
            },
        });
        let id = self.run_id.to_string();
        let accepted = match runs::command_run(&self.app, self.by.clone(), &id, raw).await {
            Ok(accepted) => accepted,
            Err(refused) => return Verdict::Deny(refused.message().to_owned()),
        };
        let store = Arc::clone(self.app.store());
        let clock = Arc::clone(self.app.clock());
        let offset = accepted.offset;
        match application::permission::answer(store, clock, self.run_id, self.node_run, offset)
            .await
        {
            Ok(verdict) => verdict,
            Err(e) => Verdict::Deny(format!("awr could not read the answer: {e}")),
        }
    }
}

/// Serves the permission prompt of node run `node_run` of run `run` on
/// stdin and stdout until the agent closes them.
pub async fn stdio(app: App, run: &str, node_run: &str) -> Result<(), Failure> {
    let bad = |what: &str, e: String| Failure::Input(anyhow::anyhow!("--{what}: {e}"));
    let run_id: RunId = run
        .parse()
        .map_err(|e: domain::IdError| bad("run", e.to_string()))?;
    let node_run: NodeRunId =
        (node_run.parse()).map_err(|e: domain::IdError| bad("node-run", e.to_string()))?;
    let by = crate::wiring::local_caller()
        .or_else(|| Caller::new("local").ok())
        .ok_or_else(|| Failure::Input(anyhow::anyhow!("no name for the local user")))?;
    let prompt = PermissionPrompt {
        app,
        by,
        run_id,
        node_run,
    };
    super::on_stdio(prompt).await
}
