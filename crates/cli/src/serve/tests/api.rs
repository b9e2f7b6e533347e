//! The API in process: bad input, tokens, starting, listing and showing
//! runs, and the embedded UI.

use super::*;
use crate::serve::access::Access;

#[tokio::test]
async fn bad_input_is_refused_with_a_json_error_never_a_panic() {
    let s = server();
    let run = s.run().await;
    let id = run.id();
    let message = error(
        s.get(&format!("/workflows/{id}/events?offset=ten")).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("offset: `ten`"), "{message}");
    let message = error(
        s.request(
            Request::get(format!("/workflows/{id}/events/sse"))
                .header("last-event-id", "x1")
                .body(Body::empty())
                .unwrap(),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("Last-Event-ID"), "{message}");
    for uri in [
        format!("/workflows/{}", uuid_like(999_999)),
        format!("/workflows/{}/events", uuid_like(999_999)),
        "/workflows/zzz".to_owned(),
        "/nowhere".to_owned(),
        "/ui/secret.txt".to_owned(),
    ] {
        error(s.get(&uri).await, StatusCode::NOT_FOUND, "not_found").await;
    }
    let message = error(
        s.post("/workflows", "{not json").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("line 1 column 2"), "{message}");
    let message = error(
        s.post("/workflows", r#"{"path": "x", "inputs": 1}"#).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("unknown field `inputs`"), "{message}");
    // An integer beyond 64 bits would be kept as the nearest float.
    let message = error(
        s.post(
            "/workflows",
            r#"{"path": "x", "input": {"id": 123456789012345678901234567890}}"#,
        )
        .await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        message.contains("123456789012345678901234567890") && message.contains("64 bits"),
        "{message}"
    );
    // A directory is no workflow; a bad file is named as the client named
    // it, never by where the root is on the server's disk.
    for (path, says, status, kind) in [
        (
            ".",
            "path: `.` is not named as a workflow file",
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            "examples",
            "path: `examples` is not named as a workflow file",
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            "tests/workflows/bad/call-missing-child.yaml",
            "tests/workflows/bad/call-missing-child.yaml: node `sub` calls",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
    ] {
        let body = json!({ "path": path });
        let message = error(s.post("/workflows", body.to_string()).await, status, kind).await;
        assert!(message.starts_with(says), "{message}");
        let root = std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).unwrap();
        assert!(!message.contains(&*root.to_string_lossy()), "{message}");
    }
    let bad = json!({"workflow": "name: x\nagents:\n  a: {provider: nope}\nsteps: [{agent: a}]\n"});
    let message = error(
        s.post("/workflows", bad.to_string()).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        message.starts_with("workflow:3:") && message.contains("agents.a.provider"),
        "{message}"
    );
    // A workflow sent over HTTP calls no file outside the root: its text
    // is never read, nor quoted back.
    let outside =
        json!({"workflow": "name: t\nnodes:\n  - id: c\n    call_workflow: /etc/passwd\n"});
    let message = error(
        s.post("/workflows", outside.to_string()).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        message.contains("calls /etc/passwd, which is not a workflow file")
            && !message.contains("root:"),
        "{message}"
    );
    for path in ["../../etc/passwd", "/etc/passwd"] {
        let body = json!({ "path": path });
        error(
            s.post("/workflows", body.to_string()).await,
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    }
    let huge = format!(
        r#"{{"workflow": "{}"}}"#,
        "x".repeat(crate::serve::BODY_LIMIT + 1)
    );
    error(
        s.post("/workflows", huge.clone()).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;
    // Refused on its `Content-Length` before it is read: JSON all the same.
    let declared = Request::post("/workflows")
        .header("content-length", huge.len())
        .body(Body::from(huge))
        .unwrap();
    error(
        s.request(declared).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;
    let message = error(
        s.post(&format!("/workflows/{id}/commands"), "[1]").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("must be a command"), "{message}");
    let message = error(
        s.get("/workflows?limit=lots").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("limit"), "{message}");
}

#[tokio::test]
async fn with_a_token_every_request_carries_it() {
    let s = server_with(Some("s3cret"), 16, Duration::from_secs(15));
    error(
        s.get("/healthz").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let wrong = Request::get("/healthz")
        .header("authorization", "Bearer s3cre")
        .body(Body::empty())
        .unwrap();
    error(
        s.request(wrong).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let right = Request::get("/healthz")
        .header("authorization", "Bearer s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(s.request(right).await.status(), StatusCode::OK);
    assert_eq!(
        s.get("/healthz?access_token=s3cret").await.status(),
        StatusCode::OK
    );
    // The UI's page, script and style hold no run data and load without
    // it (`/?token=T` is what a user opens); the runs they ask for do not.
    for page in ["/?token=s3cret", "/", "/ui/run.js", "/ui/util.js"] {
        assert_eq!(s.get(page).await.status(), StatusCode::OK, "{page}");
    }
    error(
        s.get("/workflows").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    error(
        s.get("/nowhere").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
}

#[tokio::test]
async fn no_auth_is_refused_on_a_non_loopback_bind() {
    let dir = tempfile::tempdir().unwrap();
    let storage = crate::storage::Storage::Files(dir.path().join("storage"));
    let config = Config::new(storage, dir.path().to_path_buf(), Access::Open);
    let listen = crate::serve::Listen {
        addr: "0.0.0.0:0".to_owned(),
        ..Default::default()
    };
    let Err(crate::Failure::Input(e)) = crate::serve::serve(listen, config).await else {
        panic!("--no-auth on a non-loopback bind must be refused");
    };
    assert!(e.to_string().contains("--no-auth is refused"), "{e}");
}

#[tokio::test]
async fn a_run_started_over_http_is_listed_shown_and_streamed_to_its_end() {
    let s = server();
    let response = s
        .post("/workflows", r#"{"path": "examples/summarize.yaml"}"#)
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let body = json_body(response).await;
    let id = body["runId"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/workflows/{id}"));
    assert_eq!(body["urls"]["sse"], format!("/workflows/{id}/events/sse"));
    let (offsets, end) = Reader::of(s.get(&format!("{location}/events")).await)
        .offsets_to_end()
        .await;
    let last = offsets.len() as u64;
    assert_eq!(offsets, (1..=last).collect::<Vec<_>>());
    assert_eq!(end.unwrap()["status"], "completed");
    let shown = json_body(s.get(&location).await).await;
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["lastOffset"], last);
    // By a prefix, as on the command line.
    let by_prefix = json_body(s.get(&format!("/workflows/{}", &id[..8])).await).await;
    assert_eq!(by_prefix["runId"], id);
    let list = json_body(s.get("/workflows?status=completed").await).await;
    assert_eq!(list["counts"]["completed"], 1);
    assert_eq!(list["runs"][0]["runId"], id);
    assert_eq!(list["runs"][0]["workflow"], "summarize");
    assert_eq!(list["next"], Value::Null);
    let message = error(
        s.post(&format!("{location}/commands"), r#"{"type":"pause"}"#)
            .await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    assert!(message.contains("has ended"), "{message}");
    let transcript = s.get(&format!("{location}/transcript")).await;
    let mut transcript = Reader::of(transcript);
    assert_eq!(transcript.line().await.unwrap()["type"], "run.started");
    // Its causal events (seed 002), parents first, as `awr causal` prints.
    let causal = s.get(&format!("{location}/causal")).await;
    assert_eq!(causal.status(), StatusCode::OK);
    assert_eq!(causal.headers()["content-type"], "application/x-ndjson");
    let bytes = axum::body::to_bytes(causal.into_body(), usize::MAX)
        .await
        .unwrap();
    let lines: Vec<Value> = String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() > 2, "{lines:?}");
    let mut seen = std::collections::HashSet::new();
    for line in &lines {
        if let Some(parent) = line["parent_event_id"].as_str() {
            assert!(seen.contains(parent), "a parent comes first: {line}");
        }
        seen.insert(line["event_id"].as_str().unwrap().to_owned());
    }
    assert!(
        lines.iter().any(|l| l["type"] == "response_sent"),
        "{lines:?}"
    );
    error(
        s.get("/workflows/00000000-0000-4000-8000-000000000000/causal")
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn the_list_pages_newest_first_with_counts_over_every_run() {
    let s = server();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let run = s.run().await;
        ids.push(run.id());
        run.append(completed()).await;
    }
    let first = json_body(s.get("/workflows?limit=2").await).await;
    assert_eq!(first["counts"]["completed"], 3);
    assert_eq!(first["runs"].as_array().unwrap().len(), 2);
    let next = first["next"].as_str().unwrap().to_owned();
    let second = json_body(s.get(&format!("/workflows?limit=2&after={next}")).await).await;
    assert_eq!(second["runs"].as_array().unwrap().len(), 1);
    assert_eq!(second["next"], Value::Null);
    let none = json_body(s.get("/workflows?status=failed").await).await;
    assert_eq!(none["runs"], json!([]));
    assert_eq!(none["counts"]["completed"], 3);
}

#[tokio::test]
async fn the_list_selects_by_workflow_and_start_and_refuses_bad_values() {
    let s = server();
    let plain = s.run().await;
    plain.append(completed()).await;
    let run_id: RunId = uuid_like(rand_u64()).parse().unwrap();
    let named = Writer {
        store: Arc::clone(s.app.store()),
        run_id,
        _lock: s.app.store().create_run(run_id).await.unwrap(),
    };
    let workflow = domain::event::WorkflowRef {
        name: "nightly".into(),
        ..Default::default()
    };
    named
        .append(EventKind::FlowStarted {
            workflow,
            input: Value::Null,
            parent_run_id: None,
            source: None,
            definition: None,
            nodes: vec![],
            edges: vec![],
            started_by: None,
        })
        .await;
    let nightly = json_body(s.get("/workflows?workflow=nightly").await).await;
    assert_eq!(nightly["runs"].as_array().unwrap().len(), 1, "{nightly}");
    assert_eq!(nightly["runs"][0]["runId"], run_id.to_string());
    assert_eq!(nightly["runs"][0]["status"], "running");
    assert_eq!(nightly["counts"]["completed"], 1);
    // The test's events are from 1970.
    let recent = json_body(s.get("/workflows?since=1h").await).await;
    assert_eq!(recent["runs"], json!([]));
    let old = json_body(
        s.get("/workflows?since=1970-01-01T00:00:00Z&status=completed")
            .await,
    )
    .await;
    assert_eq!(old["runs"][0]["runId"], plain.run_id.to_string());
    assert_eq!(old["runs"].as_array().unwrap().len(), 1);
    for (query, named) in [
        ("since=soon", "soon"),
        ("status=done", "done"),
        ("limit=0", "0"),
    ] {
        let message = error(
            s.get(&format!("/workflows?{query}")).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        )
        .await;
        assert!(message.contains(named), "{message}");
    }
}

#[tokio::test]
async fn the_ui_is_served_from_the_binary() {
    let s = server();
    let index = s.get("/").await;
    assert_eq!(index.status(), StatusCode::OK);
    assert!(
        index.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let js = s.get("/ui/app.js").await;
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
}

/// An approval answered over HTTP (`approve`, `reject` commands): a run
/// that waits for it goes on in the server's process; a second answer is
/// refused (409) and recorded.
#[tokio::test]
async fn an_approval_is_answered_over_http_and_its_waiting_run_goes_on() {
    let s = server();
    let workflow = "name: gate\nnodes:\n  - {id: ask, approval: 'Ship?'}\n";
    let body = serde_json::json!({"workflow": workflow}).to_string();
    let response = s.post("/workflows", body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let mut shown = json_body(s.get(&location).await).await;
    for _ in 0..500 {
        if shown["status"] == "waiting" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        shown = json_body(s.get(&location).await).await;
    }
    assert_eq!(shown["status"], "waiting", "{shown}");
    let node_run = (shown["nodeRuns"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap())
    .clone();
    let answer = serde_json::json!({"type": "approve", "nodeRunId": node_run, "data": {"ok": 1}});
    let response = s
        .post(&format!("{location}/commands"), answer.to_string())
        .await;
    assert!(response.status().is_success(), "{}", response.status());
    let mut shown = json_body(s.get(&location).await).await;
    for _ in 0..500 {
        if shown["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        shown = json_body(s.get(&location).await).await;
    }
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["outputs"]["ask"]["data"]["data"]["ok"], 1);
    let again = serde_json::json!({"type": "reject", "nodeRunId": node_run});
    let message = error(
        s.post(&format!("{location}/commands"), again.to_string())
            .await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    assert!(message.contains("has ended"), "{message}");
}
