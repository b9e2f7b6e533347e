//! `GET /openapi.json`: the OpenAPI 3.1 description of every route,
//! generated from the handlers' `#[utoipa::path]` and the types they read
//! and send ([`super::answers`], the request bodies), so it cannot say
//! other than what the code does. Committed as `schema/openapi.json`; a
//! test fails when that file is stale, and another when a route of the
//! router is missing from it.
//!
//! What the annotations do not say, [`Layers`] adds to every operation at
//! once: the answers of the layers in front of every route ([`refusals`]),
//! the security schemes, and the scope each route needs, in words.

pub mod refusals;
mod schemas;

use std::sync::LazyLock;

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi};

pub use self::schemas::{
    CommandBody, ListedStatus, RunPath, ShownStatus, Snapshot, SseEvent, WorkflowSource,
};
use super::ApiError;
use super::error::ErrorBody;
use refusals::Internal;

/// The description: every route, with what [`Layers`] adds.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "awr serve",
        description = "The HTTP API of `awr serve` (docs/http.md): start runs, list and show \
            them, stream their events, transcripts and causal events, give them commands, fork \
            them; and the timeline page.\n\n\
            Every error is JSON, `{\"error\": kind, \"message\": why}`, whatever refused the \
            request; `error` is one kind per status. A route that does not exist is 404, a \
            method a path does not take 405 with `Allow` (`#/components/responses/NotFound`, \
            `#/components/responses/MethodNotAllowed`).\n\n\
            Every route but the page (`/`, `/ui/{file}`) and this description needs a token, \
            as `Authorization: Bearer TOKEN` or, on a GET, the query parameter \
            `access_token=TOKEN` (for `EventSource`, which cannot set headers); each token has scopes (`read`, \
            `control`, `start`), and each route names the one it needs.",
    ),
    paths(
        super::router::healthz,
        super::runs::start,
        super::runs::list,
        super::runs::show,
        super::stream::ndjson,
        super::stream::sse,
        super::runs::command,
        super::fork::fork,
        super::transcript::transcript,
        super::causal::causal,
        super::ui::index,
        super::ui::file,
        json,
    ),
    components(schemas(ErrorBody)),
    modifiers(&Layers),
    security(("bearer" = []), ("access_token" = [])),
    tags(
        (name = "runs", description = "Start, list, show, command and fork runs."),
        (name = "streams", description = "A run's events and transcript, as they are recorded."),
        (name = "page", description = "The timeline page: no token needed, no run data."),
        (name = "server", description = "The server itself."),
    ),
)]
struct Description;

/// What every operation gets besides its annotation.
struct Layers;

impl Modify for Layers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`Authorization: Bearer TOKEN`: a token of `--token`, `AWR_TOKEN` or `--tokens FILE`."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "access_token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "access_token",
                "The token as a query parameter of a GET, for clients that cannot set headers (`EventSource`).",
            ))),
        );
        components.responses.extend(refusals::all());
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                complete(operation);
            }
        }
    }
}

/// Adds to `operation` the refusals of the layers in front of it, and says
/// in its description which token it needs. An operation without a
/// security requirement needs none (`security: []`).
fn complete(operation: &mut Operation) {
    let scope = needs(operation);
    let mut refusals = refusals::ANY_ROUTE.to_vec();
    if scope.is_some() {
        refusals.extend(refusals::TOKEN_ROUTE);
    } else {
        operation.security = Some(Vec::new());
    }
    for (status, name) in refusals {
        operation
            .responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| RefOr::Ref(Ref::from_response_name(name)));
    }
    let words = match scope.as_deref() {
        None => "Needs no token.".to_owned(),
        Some("") => "Needs a token, of any scope.".to_owned(),
        Some(scope) => format!("Needs a token with the `{scope}` scope."),
    };
    let description = operation.description.get_or_insert_with(String::new);
    if !description.is_empty() {
        description.push_str("\n\n");
    }
    description.push_str(&words);
}

/// The scope `operation` needs (`""`: a token of any scope, as the
/// document's default requirement says), `None` when it needs no token:
/// read from its security requirements, each naming the scope as its role.
fn needs(operation: &Operation) -> Option<String> {
    let Some(requirements) = &operation.security else {
        return Some(String::new());
    };
    let requirements = serde_json::to_value(requirements).unwrap_or_default();
    let mut roles = requirements
        .as_array()?
        .iter()
        .filter_map(|requirement| requirement.as_object())
        .flat_map(|requirement| requirement.values())
        .peekable();
    roles.peek()?;
    let role = roles
        .filter_map(|role| role.as_array()?.first()?.as_str())
        .next()
        .unwrap_or_default();
    Some(role.to_owned())
}

/// The description as the committed `schema/openapi.json` holds it:
/// pretty JSON and a final newline.
pub fn document() -> Result<String, serde_json::Error> {
    Ok(Description::openapi().to_pretty_json()? + "\n")
}

/// The description's bytes, made once (or why they could not be).
static DOCUMENT: LazyLock<Result<Bytes, String>> =
    LazyLock::new(|| document().map(Bytes::from).map_err(|e| e.to_string()));

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "server",
    operation_id = "openapi",
    summary = "This description",
    description = "The OpenAPI 3.1 description of every route, generated from the server's \
        code (also `schema/openapi.json` in the repository).",
    responses(
        (status = 200, description = "The description.", body = Object, content_type = "application/json"),
        (status = 500, response = Internal),
    ),
    security(()),
)]
pub async fn json() -> Response {
    match &*DOCUMENT {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes.clone()).into_response(),
        Err(e) => ApiError::internal(format!("cannot describe the API: {e}")).into_response(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::PathBuf;

    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use serde_json::Value;
    use tower::ServiceExt;

    use super::document;
    use crate::serve::access::{Access, parse_tokens};
    use crate::serve::router::{api_routes, public_routes};
    use crate::serve::{App, Config, router};

    fn committed() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schema/openapi.json")
    }

    /// `schema/openapi.json` is what the code describes; `AWR_WRITE_SCHEMA=1`
    /// writes it again.
    #[test]
    fn the_committed_description_is_current() {
        let generated = document().unwrap();
        if std::env::var_os("AWR_WRITE_SCHEMA").is_some() {
            std::fs::write(committed(), &generated).unwrap();
        }
        let on_disk = std::fs::read_to_string(committed()).unwrap_or_default();
        assert!(
            on_disk == generated,
            "schema/openapi.json is stale; write it again with \
             `AWR_WRITE_SCHEMA=1 cargo test -p cli --bin awr serve::openapi`"
        );
    }

    /// A token of each scope, and one of all three.
    const TOKENS: [(&str, &str); 4] = [
        ("read", "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"),
        ("control", "cccccccccccccccccccccccccccccccccccc"),
        ("start", "ssssssssssssssssssssssssssssssssssss"),
        ("read,control,start", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    ];

    fn app() -> (tempfile::TempDir, App) {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = TOKENS
            .iter()
            .enumerate()
            .map(|(i, (scopes, secret))| format!("t{i} {scopes} {secret}"))
            .collect();
        let access = Access::Tokens(parse_tokens(&lines.join("\n")).unwrap());
        let storage = crate::storage::Storage::Files(dir.path().join("storage"));
        let config = Config::new(storage, dir.path().to_owned(), access);
        (
            dir,
            futures::executor::block_on(App::new(config)).ok().unwrap(),
        )
    }

    /// The status of `method uri` with `token` (none: `None`), and its body.
    async fn ask(
        app: &App,
        method: &Method,
        uri: &str,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "127.0.0.1");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        // An empty object: never a run started, whatever the route.
        let body = if *method == Method::GET { "" } else { "{}" };
        if !body.is_empty() {
            request = request.header("content-type", "application/json");
        }
        let response = router(app.clone())
            .oneshot(request.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// A request URI of `path`, its parameters filled in.
    fn uri(path: &str) -> String {
        path.replace("{id}", "0f").replace("{file}", "app.js")
    }

    const METHODS: [Method; 6] = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
    ];

    /// Every route of the router, and every method it takes there, is an
    /// operation of the description, and every operation is routed: a
    /// route added without its `#[utoipa::path]` fails here.
    #[tokio::test]
    async fn every_route_of_the_router_is_described() {
        let (_dir, app) = app();
        let doc: Value = serde_json::from_str(&document().unwrap()).unwrap();
        let all = TOKENS[3].1;
        let routes: Vec<&str> = public_routes()
            .into_iter()
            .chain(api_routes())
            .map(|(path, _)| path)
            .collect();
        assert!(routes.len() > 10, "{routes:?}");
        for path in &routes {
            let described = &doc["paths"][path];
            assert!(described.is_object(), "{path} is not described");
            for method in &METHODS {
                let (status, _) = ask(&app, method, &uri(path), Some(all)).await;
                let operation = &described[method.as_str().to_ascii_lowercase()];
                assert_eq!(
                    status != StatusCode::METHOD_NOT_ALLOWED,
                    operation.is_object(),
                    "{method} {path}: answered {status}"
                );
            }
        }
        let described: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
        assert_eq!(described.len(), routes.len(), "{described:?}");
    }

    /// The scope each operation names is the one the router asks for: a
    /// token without it is 403, naming it; and only the page and the
    /// description are served without a token.
    #[tokio::test]
    async fn each_operation_names_the_scope_the_router_asks_for() {
        let (_dir, app) = app();
        let doc: Value = serde_json::from_str(&document().unwrap()).unwrap();
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let method: Method = method.to_ascii_uppercase().parse().unwrap();
                let requirements = operation["security"].as_array().unwrap();
                let scope = requirements
                    .iter()
                    .find_map(|r| r["bearer"].as_array())
                    .map(|roles| roles.first().and_then(Value::as_str).unwrap_or(""));
                let (status, _) = ask(&app, &method, &uri(path), None).await;
                assert_eq!(
                    status == StatusCode::UNAUTHORIZED,
                    scope.is_some(),
                    "{method} {path} without a token: {status}"
                );
                let Some(scope) = scope else {
                    assert!(requirements.is_empty(), "{path}: {requirements:?}");
                    continue;
                };
                for (scopes, secret) in TOKENS {
                    let (status, body) = ask(&app, &method, &uri(path), Some(secret)).await;
                    let lacks = !scope.is_empty() && !scopes.split(',').any(|s| s == scope);
                    let refused = status == StatusCode::FORBIDDEN
                        && body["message"]
                            .as_str()
                            .is_some_and(|m| m.contains(&format!("lacks the `{scope}` scope")));
                    assert_eq!(
                        refused, lacks,
                        "{method} {path} with {scopes}: {status} {body}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 10 * TOKENS.len(), "{checked} checks");
    }

    /// Every status an operation lists has a description, and every error
    /// answer's body is an `Error` whose `error` is that status's kind.
    #[test]
    fn every_error_answer_is_an_error_of_its_status_kind() {
        let doc: Value = serde_json::from_str(&document().unwrap()).unwrap();
        let responses = doc["components"]["responses"].as_object().unwrap();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                for (status, response) in operation["responses"].as_object().unwrap() {
                    let code: u16 = status.parse().unwrap();
                    let response = match response["$ref"].as_str() {
                        Some(reference) => {
                            let name = reference.rsplit('/').next().unwrap();
                            &responses[name]
                        }
                        None => response,
                    };
                    assert!(
                        response["description"].is_string(),
                        "{method} {path} {status}"
                    );
                    if code < 400 {
                        continue;
                    }
                    let schema = &response["content"]["application/json"]["schema"];
                    assert_eq!(schema["allOf"][0]["$ref"], "#/components/schemas/Error");
                    let kind =
                        crate::serve::error::ErrorKind::of(StatusCode::from_u16(code).unwrap());
                    assert_eq!(
                        schema["allOf"][1]["properties"]["error"]["enum"][0],
                        serde_json::to_value(kind).unwrap(),
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
}
