//! The timeline UI: static files embedded in the binary, served as they
//! are (no build step). `GET /` is the page; `GET /ui/{file}` the files it
//! loads, from a fixed table: nothing outside it is ever read.

use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::ApiError;
use super::openapi::refusals::NotFound;

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
        "list.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/list.js"),
    ),
    (
        "blocks.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/blocks.js"),
    ),
    (
        "run.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/run.js"),
    ),
    (
        "approvals.js",
        "text/javascript; charset=utf-8",
        include_str!("ui/approvals.js"),
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
#[utoipa::path(
    get,
    path = "/",
    tag = "page",
    operation_id = "page",
    summary = "The timeline page",
    description = "The page to watch runs in a browser (with a token, open `/?token=TOKEN` \
        once). It holds no run data.",
    responses(
        (status = 200, description = "The page.", body = String, content_type = "text/html"),
    ),
    security(()),
)]
pub async fn index() -> Response {
    serve("index.html")
}

/// `GET /ui/{file}`.
#[utoipa::path(
    get,
    path = "/ui/{file}",
    tag = "page",
    operation_id = "pageFile",
    summary = "A file of the timeline page",
    description = "The page's scripts and style sheet, embedded in the binary. They hold no \
        run data.",
    params(("file" = String, Path, description = "The file's name, such as `app.js` or `app.css`.")),
    responses(
        (status = 200, description = "The file.", content(
            (String = "text/javascript"),
            (String = "text/css"),
            (String = "text/html"),
        )),
        (status = 404, response = NotFound),
    ),
    security(()),
)]
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

#[cfg(test)]
mod tests {
    use super::FILES;

    /// Every `./x.js` a served module imports is served too: a module left
    /// out of the table is a page that never loads.
    #[test]
    fn every_imported_module_is_served() {
        let served: Vec<&str> = FILES.iter().map(|(name, ..)| *name).collect();
        let mut imports = 0;
        for (name, _, body) in FILES.iter().filter(|(name, ..)| name.ends_with(".js")) {
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let Some(target) = line.split("from './").nth(1) else {
                    continue;
                };
                let target = target.trim_end_matches("';");
                assert!(served.contains(&target), "{name} imports {target}");
                imports += 1;
            }
        }
        assert!(imports >= 5, "the modules' imports were found: {imports}");
    }
}
