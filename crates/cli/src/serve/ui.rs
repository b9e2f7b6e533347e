//! The timeline UI: static files embedded in the binary, served as they
//! are (no build step). `GET /` is the page; `GET /ui/{file}` the files it
//! loads, from a fixed table: nothing outside it is ever read.

use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// Every file the UI may load: name, content type, contents.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/app.js"),
    ),
    (
        "model.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/model.js"),
    ),
    (
        "util.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/util.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("ui/app.css"),
    ),
];

/// `GET /`: the page.
pub async fn index() -> Response {
    serve("index.html")
}

/// `GET /ui/{file}`.
pub async fn file(Path(name): Path<String>) -> Response {
    serve(&name)
}

fn serve(name: &str) -> Response {
    match FILES.iter().find(|(file, ..)| *file == name) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            *body,
        )
            .into_response(),
        None => ApiError::not_found(format!("no UI file `{name}`")).into_response(),
    }
}
