//! The server's routes, each with the scope it needs, and the layers every
//! request goes through, outermost first.

use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use axum::routing::{MethodRouter, get, post};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use super::access::Scope;
use super::guard::{self, Guard};
use super::{
    ApiError, App, BODY_LIMIT, REQUEST_TIMEOUT, answers, auth, causal, error, fork, openapi, runs,
    stream, transcript, ui,
};

/// Every route of the server, with its layers, outermost first: request
/// tracing (path and status, never a query or a header), every error as
/// `{error, message}`, a timeout on the response head, a body limit, the
/// [`guard`] (Host, Origin, JSON bodies), CORS for `--allow-origin`
/// origins alone, the token ([`auth`]; not for the page, its files and
/// the API's description, which hold no run data), and each route's scope.
pub fn router(app: App) -> Router {
    use tower_http::limit::RequestBodyLimitLayer;
    use tower_http::timeout::TimeoutLayer;

    let page = routed(public_routes());
    // awr's MCP server, for any token: each tool checks the scope its
    // HTTP route needs.
    let mcp = axum::routing::any_service(super::mcp::http_service(app.clone()));
    let api = routed(api_routes())
        .route("/mcp", mcp)
        .fallback(not_found)
        .with_state(app.clone())
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            auth::check,
        ));
    let mut router = page.with_state(app.clone()).merge(api);
    if let Some(cors) = cors(&app.config().guard) {
        router = router.layer(cors);
    }
    // The JSON errors outside the limits, so their refusals are JSON too.
    hardened(router.layer(axum::middleware::from_fn_with_state(app, guard::check)))
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(axum::middleware::map_response(error::as_json))
        .layer(traced())
}

/// The routes anyone may call: the page, its files and the API's
/// description, which hold no run data. The description must name each
/// route of this list and of [`api_routes`] (a test of `openapi` checks).
pub(super) fn public_routes() -> Vec<(&'static str, MethodRouter<App>)> {
    vec![
        ("/", get(ui::index)),
        ("/ui/{file}", get(ui::file)),
        ("/openapi.json", get(openapi::json)),
    ]
}

/// The routes that need a token, each with the scope it needs.
pub(super) fn api_routes() -> Vec<(&'static str, MethodRouter<App>)> {
    vec![
        ("/healthz", get(healthz)),
        (
            "/workflows",
            scoped(Scope::Start, post(runs::start)).merge(scoped(Scope::Read, get(runs::list))),
        ),
        ("/workflows/{id}", scoped(Scope::Read, get(runs::show))),
        (
            "/workflows/{id}/events",
            scoped(Scope::Read, get(stream::ndjson)),
        ),
        (
            "/workflows/{id}/events/sse",
            scoped(Scope::Read, get(stream::sse)),
        ),
        (
            "/workflows/{id}/commands",
            post(runs::command).route_layer(axum::middleware::from_fn(auth::require_answering)),
        ),
        (
            "/workflows/{id}/fork",
            scoped(Scope::Control, post(fork::fork)),
        ),
        (
            "/workflows/{id}/transcript",
            scoped(Scope::Read, get(transcript::transcript)),
        ),
        (
            "/workflows/{id}/causal",
            scoped(Scope::Read, get(causal::causal)),
        ),
    ]
}

/// A router of `routes`.
fn routed(routes: Vec<(&'static str, MethodRouter<App>)>) -> Router<App> {
    routes
        .into_iter()
        .fold(Router::new(), |router, (path, route)| {
            router.route(path, route)
        })
}

/// Headers on every answer that keep a browser from misusing it: no page
/// may frame the timeline (a click on Cancel made for another page), it
/// loads nothing but its own files, nothing is sniffed as another type,
/// and no address leaves as a `Referer`.
fn hardened(router: Router) -> Router {
    use axum::http::header;
    let headers = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    headers.into_iter().fold(router, |router, (name, value)| {
        router.layer(SetResponseHeaderLayer::if_not_present(
            name,
            HeaderValue::from_static(value),
        ))
    })
}

/// `route`, for callers whose token has `scope` (403 otherwise).
fn scoped(scope: Scope, route: MethodRouter<App>) -> MethodRouter<App> {
    route.route_layer(axum::middleware::from_fn(move |request, next| {
        auth::require(scope, request, next)
    }))
}

/// CORS answers for the `--allow-origin` origins; none without them, so a
/// browser lets no other page read an answer.
fn cors(guard: &Guard) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{HeaderName, HeaderValue, Method, header};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins: Vec<HeaderValue> = guard
        .origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([header::LOCATION, header::RETRY_AFTER])
            .max_age(Duration::from_secs(600)),
    )
}

/// Request tracing that names the method, the path and the status: never
/// the query (`access_token=`) nor a header (`Authorization`).
fn traced()
-> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, fn(&HttpRequest) -> tracing::Span> {
    fn span(request: &HttpRequest) -> tracing::Span {
        tracing::info_span!(
            "request",
            method = %request.method(),
            path = request.uri().path(),
        )
    }
    TraceLayer::new_for_http().make_span_with(span as fn(&_) -> _)
}

/// A request as the router takes it.
type HttpRequest = axum::http::Request<axum::body::Body>;

/// `GET /healthz`.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "server",
    operation_id = "health",
    summary = "Whether the server answers",
    description = "`{\"status\":\"ok\"}`: the server answers, and the token is one of its own.",
    responses((status = 200, description = "The server answers.", body = answers::Health)),
    security(("bearer" = []), ("access_token" = [])),
)]
pub(super) async fn healthz() -> axum::Json<answers::Health> {
    axum::Json(answers::Health::OK)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route {}", uri.path()))
}
