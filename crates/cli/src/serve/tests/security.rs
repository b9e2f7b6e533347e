//! What a web page, a wrong token or a client's workflow must not get from
//! the server (docs/security.md): each refusal, and who is recorded as
//! doing what is let through.

use super::*;
use crate::serve::access::{Access, parse_tokens};

/// `{"workflow": …}` of a workflow whose one node runs `touch FILE`.
fn touching(file: &std::path::Path) -> String {
    let yaml = format!(
        "name: touch\nsteps:\n  - {{id: touch, command: \"touch {}\"}}\n",
        file.display()
    );
    json!({ "workflow": yaml }).to_string()
}

/// How many runs the server's storage holds.
async fn runs(s: &Server) -> usize {
    s.app.store().list_runs().await.unwrap().len()
}

/// The request a web page on another origin sends with
/// `fetch(…, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}})`:
/// a simple request, sent without a preflight.
#[tokio::test]
async fn a_cross_site_post_of_an_inline_workflow_is_refused_and_runs_nothing() {
    let s = server();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let request = Request::post("/workflows")
        .header("host", "127.0.0.1:8080")
        .header("origin", "http://evil.example")
        .header("content-type", "text/plain")
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "no-cors")
        .body(Body::from(touching(&marker)))
        .unwrap();
    let message = error(s.request(request).await, StatusCode::FORBIDDEN, "forbidden").await;
    assert!(message.contains("http://evil.example"), "{message}");
    // A form's POST carries the page's origin too.
    let form = Request::post("/workflows")
        .header("host", "127.0.0.1:8080")
        .header("origin", "null")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("workflow=x"))
        .unwrap();
    error(s.request(form).await, StatusCode::FORBIDDEN, "forbidden").await;
    // The same body from the server's own origin, still not JSON: 415.
    let same_origin = Request::post("/workflows")
        .header("host", "127.0.0.1:8080")
        .header("origin", "http://127.0.0.1:8080")
        .header("content-type", "text/plain")
        .body(Body::from(touching(&marker)))
        .unwrap();
    error(
        s.request(same_origin).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    assert_eq!(runs(&s).await, 0, "no run is created");
    assert!(!marker.exists(), "nothing ran");
}

/// A page on a rebinding name (`attacker.example` pointed at 127.0.0.1)
/// reaches the server as its own origin: its Host gives it away.
#[tokio::test]
async fn a_request_for_a_foreign_host_is_refused_on_every_route() {
    let s = server();
    let run = s.run().await;
    let id = run.id();
    let routes = [
        ("GET", "/".to_owned()),
        ("GET", "/ui/app.js".to_owned()),
        ("GET", "/openapi.json".to_owned()),
        ("GET", "/healthz".to_owned()),
        ("GET", "/workflows".to_owned()),
        ("POST", "/workflows".to_owned()),
        ("GET", format!("/workflows/{id}")),
        ("GET", format!("/workflows/{id}/events")),
        ("GET", format!("/workflows/{id}/events/sse")),
        ("GET", format!("/workflows/{id}/transcript")),
        ("GET", format!("/workflows/{id}/causal")),
        ("POST", format!("/workflows/{id}/commands")),
        ("POST", format!("/workflows/{id}/fork")),
        ("GET", "/nowhere".to_owned()),
    ];
    for (method, path) in routes {
        let request = Request::builder()
            .method(method)
            .uri(&path)
            .header("host", "attacker.example:8080")
            .header("content-type", "application/json")
            .body(Body::from(r#"{"type": "pause"}"#))
            .unwrap();
        let message = error(
            s.request(request).await,
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_request",
        )
        .await;
        assert!(
            message.contains("attacker.example"),
            "{method} {path}: {message}"
        );
    }
    let named = Request::get("/workflows")
        .header("host", "localhost:8080")
        .body(Body::empty())
        .unwrap();
    assert_eq!(s.request(named).await.status(), StatusCode::OK);
}

/// A browser's `EventSource` from another origin sends its `Origin`.
#[tokio::test]
async fn a_stream_opened_from_another_origin_is_refused() {
    let s = server();
    let run = s.run().await;
    let request = Request::get(format!("/workflows/{}/events/sse", run.id()))
        .header("origin", "http://127.0.0.1:9999")
        .body(Body::empty())
        .unwrap();
    error(s.request(request).await, StatusCode::FORBIDDEN, "forbidden").await;
    // Without CORS headers a browser lets no other page read an answer.
    let own = Request::get("/workflows")
        .header("origin", "http://127.0.0.1")
        .body(Body::empty())
        .unwrap();
    let response = s.request(own).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        !response
            .headers()
            .contains_key("access-control-allow-origin")
    );
}

#[tokio::test]
async fn an_allowed_origin_gets_cors_answers_and_others_none() {
    let s = configured(Access::Open, |config| {
        config.guard.origins = vec!["https://ui.example.com".to_owned()];
    });
    let preflight = Request::options("/workflows")
        .header("origin", "https://ui.example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .body(Body::empty())
        .unwrap();
    let response = s.request(preflight).await;
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://ui.example.com"
    );
    let foreign = Request::options("/workflows")
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .body(Body::empty())
        .unwrap();
    let response = s.request(foreign).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(
        !response
            .headers()
            .contains_key("access-control-allow-origin")
    );
}

/// A root holding one workflow whose node waits, so a run is still going
/// when the test commands it.
fn waiting_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join("wait.yaml"),
        "name: wait\nsteps:\n  - {id: wait, command: \"sleep 30\"}\n",
    )
    .unwrap();
    root
}

const READER: &str = "r0000000000000000000000000000000000000000";
const OPS: &str = "o0000000000000000000000000000000000000000";
const STARTER: &str = "s0000000000000000000000000000000000000000";

fn team(root: &std::path::Path) -> Server {
    let tokens = parse_tokens(&format!(
        "reader read {READER}\nops read,control {OPS}\nstarter start,read {STARTER}\n"
    ))
    .unwrap();
    let root = root.to_path_buf();
    configured(Access::Tokens(tokens), move |config| config.root = root)
}

/// A token of the `approve` scope alone answers what a run asks, recorded
/// under its name, and may give no other command.
#[tokio::test]
async fn an_approve_token_answers_questions_and_commands_nothing_else() {
    const REVIEWER: &str = "v0000000000000000000000000000000000000000";
    let root = waiting_root();
    let tokens = parse_tokens(&format!(
        "starter start,read {STARTER}\nreviewer approve,read {REVIEWER}\n"
    ))
    .unwrap();
    let dir = root.path().to_path_buf();
    let s = configured(Access::Tokens(tokens), move |config| config.root = dir);
    let started = s
        .request(post_as(STARTER, "/workflows", r#"{"path": "wait.yaml"}"#))
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    let id = json_body(started).await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let commands = format!("/workflows/{id}/commands");
    for command in [r#"{"type": "pause"}"#, r#"{"type": "cancel"}"#, "{}"] {
        let message = error(
            s.request(post_as(REVIEWER, &commands, command)).await,
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
        assert!(
            message.contains("`reviewer`") && message.contains("`control`"),
            "{command}: {message}"
        );
    }
    // An answer gets through to the run, which judges it: nothing asks
    // here, so it is refused (409), on record under the reviewer's name.
    let answer = r#"{"type": "approve", "nodeRunId": "6f1c2a9e-0d3b-4c5a-8e7f-1a2b3c4d5e6f"}"#;
    let refused = s.request(post_as(REVIEWER, &commands, answer)).await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    let offset = json_body(refused).await["offset"].as_u64().unwrap();
    let mut events = Reader::of(
        s.request(with_token(
            REVIEWER,
            Request::get(format!("/workflows/{id}/events")),
        ))
        .await,
    );
    let received = loop {
        let line = events.line().await.unwrap();
        if line["offset"] == offset {
            break line;
        }
    };
    assert_eq!(received["type"], "command:received");
    assert_eq!(received["by"], "reviewer", "{received}");
    assert_eq!(received["accepted"], false);
}

fn with_token(token: &str, request: axum::http::request::Builder) -> Request<Body> {
    request
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::empty())
        .unwrap()
}

fn post_as(token: &str, uri: &str, body: &str) -> Request<Body> {
    let mut request = with_token(token, Request::post(uri));
    *request.body_mut() = Body::from(body.to_owned());
    request
}

#[tokio::test]
async fn each_token_does_what_its_scopes_allow_and_its_name_is_recorded() {
    let root = waiting_root();
    let s = team(root.path());
    // `control` cannot start a run; `start` can, and is named its starter.
    let message = error(
        s.request(post_as(OPS, "/workflows", r#"{"path": "wait.yaml"}"#))
            .await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    assert!(
        message.contains("`ops`") && message.contains("`start`"),
        "{message}"
    );
    let started = s
        .request(post_as(STARTER, "/workflows", r#"{"path": "wait.yaml"}"#))
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    let id = json_body(started).await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    // A paused run's stream stays open: it is read as far as needed.
    let mut events = Reader::of(
        s.request(with_token(
            READER,
            Request::get(format!("/workflows/{id}/events")),
        ))
        .await,
    );
    let first = events.line().await.unwrap();
    assert_eq!(first["type"], "flow:started");
    assert_eq!(first["startedBy"], "starter", "{first}");
    let shown = json_body(
        s.request(with_token(READER, Request::get(format!("/workflows/{id}"))))
            .await,
    )
    .await;
    assert_eq!(shown["startedBy"], "starter", "{shown}");
    // `read` cannot pause it; `control` can, and its name is on record.
    let commands = format!("/workflows/{id}/commands");
    let message = error(
        s.request(post_as(READER, &commands, r#"{"type": "pause"}"#))
            .await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    assert!(
        message.contains("`reader`") && message.contains("`control`"),
        "{message}"
    );
    // The run may not listen yet: a command then waits for its writer.
    let paused = s
        .request(post_as(OPS, &commands, r#"{"type": "pause"}"#))
        .await;
    assert_eq!(paused.status(), StatusCode::ACCEPTED);
    let offset = json_body(paused).await["offset"].as_u64().unwrap();
    let received = loop {
        let line = events.line().await.unwrap();
        if line["offset"] == offset {
            break line;
        }
    };
    assert_eq!(received["type"], "command:received");
    assert_eq!(received["by"], "ops", "{received}");
    assert_eq!(received["accepted"], true);
    // A token in the query is taken on a GET alone (what `EventSource`
    // needs): a URL copied from a stream commands nothing.
    let by_query = Request::post(format!("{commands}?access_token={OPS}"))
        .header("content-type", "application/json")
        .body(Body::from(r#"{"type": "cancel"}"#))
        .unwrap();
    error(
        s.request(by_query).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    // Its resume (here, in the server) names who resumed it.
    let resumed = s
        .request(post_as(OPS, &commands, r#"{"type": "resume"}"#))
        .await;
    assert_eq!(resumed.status(), StatusCode::ACCEPTED);
    let resumed = loop {
        let line = events.line().await.unwrap();
        if line["type"] == "flow:resumed" {
            break line;
        }
    };
    assert_eq!(resumed["by"], "ops", "{resumed}");
    // No token, a wrong one: 401, which names no token, and says how to
    // authenticate (RFC 6750).
    let bare = s.get("/workflows").await;
    assert_eq!(bare.headers()["www-authenticate"], "Bearer");
    error(bare, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let wrong = with_token("x".repeat(40).as_str(), Request::get("/workflows"));
    let wrong = s.request(wrong).await;
    assert_eq!(
        wrong.headers()["www-authenticate"],
        r#"Bearer error="invalid_token""#
    );
    let message = error(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert!(!message.contains(&"x".repeat(40)), "{message}");
}

#[tokio::test]
async fn an_inline_workflow_that_runs_code_needs_allow_inline_code() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let s = server();
    let message = error(
        s.post("/workflows", touching(&marker)).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    assert!(message.contains("node `touch`"), "{message}");
    assert!(message.contains("--allow-inline-code"), "{message}");
    let shell = json!({"workflow": "name: sh\nagents:\n  a: {provider: openai, model: m, tools: [shell]}\nsteps:\n  - {id: one, agent: a}\n"});
    let message = error(
        s.post("/workflows", shell.to_string()).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    assert!(message.contains("agent `a`: the `shell` tool"), "{message}");
    assert_eq!(runs(&s).await, 0);
    assert!(!marker.exists());
    // The operator's own workflow, by path, runs what it says.
    let root = waiting_root();
    let own = configured(Access::Open, |config| {
        config.root = root.path().to_path_buf()
    });
    let started = own.post("/workflows", r#"{"path": "wait.yaml"}"#).await;
    assert_eq!(started.status(), StatusCode::CREATED);
    // And with --allow-inline-code, a client's may.
    let trusting = configured(Access::Open, |config| config.allow_inline_code = true);
    let started = trusting.post("/workflows", touching(&marker)).await;
    assert_eq!(started.status(), StatusCode::CREATED);
    let id = json_body(started).await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, end) = Reader::of(trusting.get(&format!("/workflows/{id}/events")).await)
        .offsets_to_end()
        .await;
    assert_eq!(end.unwrap()["status"], "completed");
    assert!(marker.exists(), "the trusted inline workflow ran");
}

#[tokio::test]
async fn streams_past_a_tokens_cap_are_refused_with_retry_after() {
    let s = configured(Access::Open, |config| config.limits.streams_per_caller = 2);
    let run = s.run().await;
    let uri = format!("/workflows/{}/events", run.id());
    let one = s.get(&uri).await;
    let two = s.get(&uri).await;
    assert_eq!(
        (one.status(), two.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let third = s.get(&uri).await;
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(third.headers()["retry-after"], "5");
    let message = error(third, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert!(message.contains("--max-streams-per-token"), "{message}");
    // A stream that ends gives its place back.
    drop(one);
    assert_eq!(s.get(&uri).await.status(), StatusCode::OK);
}

/// A root with the server's storage inside it, as `awr serve` run in a
/// project with the defaults (`--root .`, `./storage`) has it; `files`
/// are written under the root.
fn project(files: &[(&str, &str)]) -> (tempfile::TempDir, Server) {
    let root = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(root.path().join(name), text).unwrap();
    }
    let dir = root.path().to_path_buf();
    let s = configured(Access::Open, move |config| {
        config.storage = crate::storage::Storage::Files(dir.join("storage"));
        config.root = dir;
    });
    (root, s)
}

/// A refused inline workflow leaves no file behind, and nothing the
/// storage holds (a client's workflow, a run's input kept as a file) can
/// be started by `path` or called as the operator's own.
#[tokio::test]
async fn nothing_in_the_storage_runs_as_the_operators_own() {
    let (root, s) = project(&[]);
    let marker = root.path().join("ran");
    let refused = s.post("/workflows", touching(&marker)).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let kept = root.path().join("storage/workflows");
    let left: Vec<_> = std::fs::read_dir(&kept)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a refused workflow is not kept: {left:?}");
    // Were it kept (or written there some other way), it would not run.
    std::fs::create_dir_all(&kept).unwrap();
    let planted = kept.join("planted.yaml");
    let yaml = format!(
        "name: planted\nsteps:\n  - {{id: touch, command: \"touch {}\"}}\n",
        marker.display()
    );
    std::fs::write(&planted, yaml).unwrap();
    let message = error(
        s.post(
            "/workflows",
            r#"{"path": "storage/workflows/planted.yaml"}"#,
        )
        .await,
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    assert!(message.contains("storage"), "{message}");
    let calling =
        json!({"workflow": "name: c\nnodes:\n  - {id: c, call_workflow: planted.yaml}\n"});
    let message = error(
        s.post("/workflows", calling.to_string()).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        message.contains("outside the server's storage"),
        "{message}"
    );
    assert!(!marker.exists(), "nothing ran");
}

/// A file of the server's that a client names is never quoted back:
/// one not named as a workflow is refused unread, and a workflow file that
/// does not load is named, its text not shown.
#[tokio::test]
async fn a_file_of_the_servers_is_not_quoted_to_a_client() {
    let secret = "sk-secret-0123456789";
    let (_root, s) = project(&[
        (".env", &format!("OPENAI_API_KEY={secret}\n")),
        ("keys.yaml", &format!("{secret}\n")),
        ("odd.json", &format!("{{\"{secret}\": 1}}")),
    ]);
    for path in [".env", "keys.yaml", "odd.json", "../etc/passwd"] {
        let body = json!({ "path": path }).to_string();
        let response = s.post("/workflows", body).await;
        let status = response.status();
        let body = json_body(response).await;
        assert!(status.is_client_error(), "{path}: {status}");
        let message = body["message"].as_str().unwrap();
        assert!(!message.contains(secret), "{path}: {message}");
    }
    // An inline workflow's calls resolve from where the server keeps it.
    let calling =
        json!({"workflow": "name: c\nnodes:\n  - {id: c, call_workflow: ../../keys.yaml}\n"});
    let message = error(
        s.post("/workflows", calling.to_string()).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.starts_with("keys.yaml does not load"), "{message}");
    assert!(!message.contains(secret), "{message}");
    // What the client sent itself is answered in full, line and field.
    let own = json!({"workflow": "name: w\nagents:\n  a: {provider: nope}\nsteps: [{agent: a}]\n"});
    let message = error(
        s.post("/workflows", own.to_string()).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.starts_with("workflow:3:"), "{message}");
    assert!(message.contains("nope"), "{message}");
}

/// No other page may frame the timeline (a click on Cancel it did not
/// mean), and the page loads nothing but its own files.
#[tokio::test]
async fn every_answer_forbids_framing_and_foreign_content() {
    let s = server();
    for uri in ["/", "/ui/app.js", "/workflows", "/nowhere"] {
        let response = s.get(uri).await;
        let headers = response.headers();
        assert_eq!(headers["x-frame-options"], "DENY", "{uri}");
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("frame-ancestors 'none'"), "{uri}: {policy}");
        assert!(policy.contains("default-src 'self'"), "{uri}: {policy}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{uri}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{uri}");
    }
}
