//! The bearer token: with one set, every request carries it, as
//! `Authorization: Bearer TOKEN` or, for the browser's `EventSource` (which
//! cannot set headers), as the query parameter `access_token=TOKEN`.
//! Compared in constant time, so the time a refusal takes tells nothing of
//! how much of a guess was right.

use axum::extract::{Query, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::{ApiError, App};

/// Lets the request through when no token is set or it carries the token.
pub async fn check(State(app): State<App>, request: Request, next: Next) -> Response {
    let Some(token) = app.config().token.as_deref().filter(|t| !t.is_empty()) else {
        return next.run(request).await;
    };
    let given = bearer(&request).or_else(|| query_token(&request));
    match given {
        Some(given) if bool::from(given.as_bytes().ct_eq(token.as_bytes())) => {
            next.run(request).await
        }
        Some(_) => ApiError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "the token is not the server's",
        )
        .into_response(),
        None => ApiError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "this server needs a token: send `Authorization: Bearer TOKEN` (or `access_token=TOKEN` in the query)",
        )
        .into_response(),
    }
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
