//! The bearer token of a request: `Authorization: Bearer TOKEN` or, for
//! the browser's `EventSource` (which cannot set headers), the query
//! parameter `access_token=TOKEN` of a GET. [`check`] names the caller ([`Granted`],
//! in the request's extensions) or refuses it (401); [`require`] refuses a
//! caller whose token lacks the route's scope (403, naming it).

use axum::extract::{Query, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::access::{Granted, Refusal, Scope};
use super::{ApiError, App};

/// Lets the request through, naming its caller, when it carries one of
/// the server's tokens (or none is needed).
pub async fn check(State(app): State<App>, mut request: Request, next: Next) -> Response {
    // In the query only where a browser's `EventSource` needs it, a GET: a
    // URL copied from a stream, or kept in a proxy's log, changes nothing.
    let readable = matches!(*request.method(), Method::GET | Method::HEAD);
    let presented = bearer(&request).or_else(|| readable.then(|| query_token(&request)).flatten());
    match app.config().access.check(presented.as_deref()) {
        Ok(granted) => {
            request.extensions_mut().insert(granted);
            next.run(request).await
        }
        Err(refusal) => {
            let (challenge, message) = match refusal {
                Refusal::Wrong => (
                    r#"Bearer error="invalid_token""#,
                    "the token is not one of the server's",
                ),
                Refusal::Missing => (
                    "Bearer",
                    "this server needs a token: send `Authorization: Bearer TOKEN` (or `access_token=TOKEN` in the query)",
                ),
            };
            let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
            // RFC 6750: how to authenticate, and why the token given failed.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static(challenge),
            );
            response
        }
    }
}

/// The layer of a route that needs `scope`: 403 for a caller without it.
pub async fn require(scope: Scope, request: Request, next: Next) -> Response {
    match request.extensions().get::<Granted>() {
        Some(granted) if granted.scopes.allow(scope) => next.run(request).await,
        Some(granted) => ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "the token of `{}` lacks the `{scope}` scope this needs",
                granted.name
            ),
        )
        .into_response(),
        // `check` runs first: a route reached without it is a wiring mistake.
        None => ApiError::internal("no caller was checked for this route").into_response(),
    }
}

/// The layer of the commands route: a caller with `approve` (which
/// `control` includes) gets through, to answer what a run asks; the
/// handler refuses it any other command ([`control_needed`]).
pub async fn require_answering(request: Request, next: Next) -> Response {
    match request.extensions().get::<Granted>() {
        Some(granted) if granted.scopes.allow(Scope::Approve) => next.run(request).await,
        Some(granted) => control_needed(granted).into_response(),
        None => ApiError::internal("no caller was checked for this route").into_response(),
    }
}

/// 403 for a caller without `control`.
pub fn control_needed(granted: &Granted) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "the token of `{}` lacks the `control` scope this needs (`approve` answers approvals only)",
            granted.name
        ),
    )
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(request: &Request) -> Option<String> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
}

/// The `access_token` query parameter, percent-decoded.
fn query_token(request: &Request) -> Option<String> {
    let Query(mut query) =
        Query::<std::collections::HashMap<String, String>>::try_from_uri(request.uri()).ok()?;
    query.remove("access_token")
}
