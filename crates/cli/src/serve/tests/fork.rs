//! `POST /workflows/{id}/fork`: a fork made and run by the server, linked to
//! its parent; a bad request names its problem and makes no run.

use axum::http::StatusCode;
use serde_json::Value;

use super::{Reader, error, json_body, server};

/// The events of the run at `location`, to its end.
async fn events(s: &super::Server, location: &str) -> Vec<Value> {
    let mut reader = Reader::of(s.get(&format!("{location}/events")).await);
    let mut events = Vec::new();
    while let Some(line) = reader.line().await {
        if line.get("offset").is_none() {
            break;
        }
        events.push(line);
    }
    events
}

#[tokio::test]
async fn a_fork_over_http_runs_the_nodes_after_its_offset_and_names_its_parent() {
    let s = server();
    let started = s
        .post(
            "/workflows",
            r#"{"path": "examples/research-pipeline.yaml"}"#,
        )
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    let parent = json_body(started).await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let parent_events = events(&s, &format!("/workflows/{parent}")).await;
    let at = parent_events
        .iter()
        .find(|e| e["type"] == "node:completed" && e["nodeId"] == "researcher")
        .unwrap()["offset"]
        .as_u64()
        .unwrap();

    let response = s
        .post(
            &format!("/workflows/{parent}/fork"),
            format!(r#"{{"at": {at}}}"#),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let body = json_body(response).await;
    let fork = body["runId"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/workflows/{fork}"));
    assert_eq!(body["forkedFrom"]["runId"], parent.as_str());
    let fork_events = events(&s, &location).await;
    assert_eq!(fork_events.last().unwrap()["type"], "flow:completed");
    let forked = &fork_events[usize::try_from(at).unwrap()];
    assert_eq!(forked["type"], "flow:forked");
    assert_eq!(forked["parentOffset"], at);
    let again: Vec<&str> = fork_events
        .iter()
        .filter(|e| e["type"] == "agent:start" && e["offset"].as_u64().unwrap() > at)
        .map(|e| e["nodeId"].as_str().unwrap())
        .collect();
    assert_eq!(again, ["analyst", "writer"]);
    let shown = json_body(s.get(&location).await).await;
    assert_eq!(shown["forkedFrom"]["runId"], parent.as_str());
    assert_eq!(shown["forkedFrom"]["offset"], at);

    let uri = format!("/workflows/{parent}/fork");
    for (body, says) in [
        (r#"{"at": 0}"#.to_owned(), "offset 0"),
        (r#"{"at": 100000}"#.to_owned(), "beyond the end"),
        (r#"{"input": 1}"#.to_owned(), "at"),
        (format!(r#"{{"at": {at}, "inptu": 1}}"#), "inptu"),
    ] {
        let message = error(
            s.post(&uri, body).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        )
        .await;
        assert!(message.contains(says), "{says}: {message}");
    }
    let unknown = "/workflows/7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e/fork";
    error(
        s.post(unknown, r#"{"at": 1}"#).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    let list = json_body(s.get("/workflows").await).await;
    assert_eq!(
        list["runs"].as_array().unwrap().len(),
        2,
        "no other run was made"
    );
}
