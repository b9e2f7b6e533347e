//! awr as an MCP server: `awr mcp` over stdio, and `/mcp` on `awr serve`
//! over streamable HTTP. A front end like the HTTP API, over the same
//! state ([`App`]) and the same operations (`runs`, `fork`): a run started
//! or commanded through a tool is started or commanded exactly as through
//! `POST /workflows`, and recorded with who asked.
//!
//! Who asks: over HTTP, the token's name, checked by the server's auth
//! before the request reaches this module, each tool needing the scope its
//! HTTP route needs; over stdio, the local user, as for the command line.
//! Tool arguments are untrusted: each is parsed against its schema and a
//! bad one is an error result naming the field.

mod permission;
mod reads;
mod tools;

pub use permission::stdio as permission_prompt;

use std::borrow::Cow;
use std::sync::Arc;

use axum::http::request::Parts;
use domain::Caller;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use super::access::{Granted, Scope};
use super::{ApiError, App};
use crate::Failure;

/// The MCP server of one [`App`]; one per connection (stdio) or request
/// (HTTP, stateless).
#[derive(Clone)]
pub struct AwrMcp {
    app: App,
    /// Who calls over stdio; over HTTP each request names its own.
    local: Option<Caller>,
}

impl AwrMcp {
    /// The tools and resources of `app`.
    pub fn new(app: App, local: Option<Caller>) -> Self {
        Self { app, local }
    }

    /// Who makes the request, and whether it may do what `scope` allows:
    /// the checked token over HTTP, the local user over stdio.
    fn caller(&self, context: &RequestContext<RoleServer>, scope: Scope) -> Result<Caller, String> {
        let granted =
            (context.extensions.get::<Parts>()).and_then(|parts| parts.extensions.get::<Granted>());
        match (granted, &self.local) {
            (Some(granted), _) if granted.scopes.allow(scope) => Ok(granted.name.clone()),
            (Some(granted), _) => Err(format!(
                "the token of `{}` lacks the `{scope}` scope this tool needs",
                granted.name
            )),
            (None, Some(local)) => Ok(local.clone()),
            (None, None) => Err("no caller was checked for this request".into()),
        }
    }
}

impl ServerHandler for AwrMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("awr", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Start awr workflow runs, wait for them, read their events and transcripts, \
                 and command them (send, reply, pause, cancel, resume, fork). Every run and \
                 command is recorded with who asked.",
            )
    }

    /// Versions with an `initialize` handshake only: every request of a
    /// connection is then made by the caller the handshake checked.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = tools::Name::of(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no tool `{}`", request.name),
                None,
            ));
        };
        let by = match self.caller(&context, tool.scope()) {
            Ok(by) => by,
            Err(why) => return Ok(refused("forbidden", &why).into()),
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let answered = tools::call(&self.app, by, tool, arguments, &context.ct).await;
        Ok(match answered {
            Ok(answer) => CallToolResult::structured(answer),
            Err(Refusal::Input(why)) => refused("bad_request", &why),
            Err(Refusal::Api(e)) => api_refusal(&e),
        }
        .into())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.caller(&context, Scope::Read).map_err(forbidden)?;
        reads::resources(&self.app).await.map_err(internal)
    }

    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            reads::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.caller(&context, Scope::Read).map_err(forbidden)?;
        match reads::read(&self.app, &request.uri).await {
            Ok(read) => Ok(read.into()),
            Err(Refusal::Input(why)) => Err(ErrorData::invalid_params(why, None)),
            Err(Refusal::Api(e)) if e.status() == axum::http::StatusCode::NOT_FOUND => {
                Err(ErrorData::resource_not_found(
                    e.message().to_owned(),
                    Some(json!({"uri": request.uri})),
                ))
            }
            Err(Refusal::Api(e)) => Err(internal(e.message())),
        }
    }
}

/// Why a tool did not do what it was asked.
#[derive(Debug)]
enum Refusal {
    /// Its arguments are wrong: which, and how.
    Input(String),
    /// The operation refused or failed, as the HTTP API would answer.
    Api(ApiError),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

/// An error result the calling model reads: `{error, message}` as the
/// HTTP API's, and the message as text.
fn refused(kind: &str, message: &str) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(message.to_owned())]);
    result.structured_content = Some(json!({"error": kind, "message": message}));
    result
}

/// An operation's refusal as a tool error: the HTTP API's error body, with
/// where a refused command was recorded.
fn api_refusal(e: &ApiError) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(e.message().to_owned())]);
    result.structured_content = serde_json::to_value(e.body()).ok();
    result
}

fn forbidden(why: String) -> ErrorData {
    ErrorData::invalid_request(why, None)
}

fn internal(why: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(why.to_string(), None)
}

/// `/mcp` on `awr serve`: stateless streamable HTTP, each POST answered
/// with its JSON (no session is kept, so no client holds server memory
/// between requests). Host and Origin are checked by the server's guard
/// in front, with the hosts it was told, so the SDK's own check is off.
pub fn http_service(app: App) -> StreamableHttpService<AwrMcp, NeverSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(super::BODY_LIMIT);
    config.sse_keep_alive = None;
    StreamableHttpService::new(
        move || Ok(AwrMcp::new(app.clone(), None)),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// `awr mcp`: serves the MCP tools on stdin and stdout until the client
/// closes them, then pauses the runs this process writes (`awr resume`
/// continues them), as `awr serve` does at shutdown.
pub async fn stdio(app: App) -> Result<(), Failure> {
    // As the command line records its user: `local` when it has no name.
    let local = crate::wiring::local_caller().or_else(|| Caller::new("local").ok());
    let served = on_stdio(AwrMcp::new(app.clone(), local)).await;
    app.shut_down().await;
    served
}

/// Serves `handler` on stdin and stdout until the client closes them.
async fn on_stdio(handler: impl ServerHandler) -> Result<(), Failure> {
    let served = match handler.serve(rmcp::transport::stdio()).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    served.map_err(|e| Failure::Run(anyhow::anyhow!("the MCP connection failed: {e}")))
}
