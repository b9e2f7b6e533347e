//! Causal events (seed 002): the committed JSON Schema is the one the Rust
//! types generate, it accepts each of the six types and refuses what is
//! not one, and every causal event of every example run validates against
//! it, parents first, the same each time the run is projected.
//!
//! To write the schema again after changing the types:
//! `AWR_WRITE_SCHEMA=1 cargo test -p awr-tests --test e2e causal::the_committed`.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::util::{Awr, examples, repo_root};

fn schema_path() -> std::path::PathBuf {
    repo_root().join("schema/causal-event.schema.json")
}

fn committed() -> Value {
    let text = std::fs::read_to_string(schema_path()).expect("schema/causal-event.schema.json");
    serde_json::from_str(&text).expect("the committed schema is JSON")
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&committed()).expect("the committed schema compiles")
}

#[test]
fn the_committed_schema_is_the_one_the_types_generate() {
    let generated = serde_json::to_string_pretty(&domain::causal::schema()).unwrap() + "\n";
    if std::env::var_os("AWR_WRITE_SCHEMA").is_some() {
        std::fs::write(schema_path(), &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(schema_path()).unwrap_or_default();
    assert!(
        on_disk == generated,
        "schema/causal-event.schema.json is stale; write it again with \
         `AWR_WRITE_SCHEMA=1 cargo test -p awr-tests --test e2e causal::the_committed`"
    );
}

fn event(kind: &str) -> Value {
    let mut e = json!({
        "type": kind,
        "event_id": "0b6d2a7e-3c4f-4a5b-8c6d-7e8f9a0b1c2d",
        "agent_id": "review",
        "parent_event_id": null,
        "timestamp_ns": 1_795_484_687_207_000_000u64,
        "payload_hash": "0123456789abcdef",
    });
    if kind == "task_sent" {
        e["recipient_agent_id"] = json!("review");
        e["payload_ref"] = json!("review/input");
    }
    e
}

#[test]
fn the_schema_accepts_the_six_types_and_refuses_what_is_not_one() {
    let v = validator();
    for kind in [
        "task_sent",
        "task_received",
        "tool_call",
        "tool_return",
        "response_sent",
        "state_transition",
    ] {
        let good = event(kind);
        assert!(v.is_valid(&good), "{kind}: {good}");
        let mut child = good.clone();
        child["parent_event_id"] = json!("1c7e3b8f-4d5a-4b6c-9d7e-8f9a0b1c2d3e");
        assert!(v.is_valid(&child), "{kind} with a parent");
    }
    let bad = |edit: &dyn Fn(&mut Value), why: &str| {
        let mut e = event("tool_call");
        edit(&mut e);
        assert!(!v.is_valid(&e), "{why}: {e}");
    };
    bad(
        &|e| drop(e.as_object_mut().unwrap().remove("agent_id")),
        "no agent_id",
    );
    bad(
        &|e| drop(e.as_object_mut().unwrap().remove("payload_hash")),
        "no payload_hash",
    );
    bad(&|e| e["type"] = json!("task_forgotten"), "an unknown type");
    bad(
        &|e| e["event_id"] = json!("0b6d2a7e-3c4f-1a5b-8c6d-7e8f9a0b1c2d"),
        "a v1 UUID",
    );
    bad(
        &|e| e["parent_event_id"] = json!("not-a-uuid"),
        "a parent that is no UUID",
    );
    bad(
        &|e| e["payload_hash"] = json!("0123456789abcde"),
        "15 hex digits",
    );
    bad(
        &|e| e["payload_hash"] = json!("0123456789abcdef0"),
        "17 hex digits",
    );
    bad(
        &|e| e["payload_hash"] = json!("0123456789ABCDEF"),
        "uppercase",
    );
    bad(&|e| e["timestamp_ns"] = json!(-1), "a negative time");
    let mut task = event("task_sent");
    task.as_object_mut().unwrap().remove("recipient_agent_id");
    assert!(!v.is_valid(&task), "a task_sent without its recipient");
}

/// `awr causal RUN`, parsed.
fn causal(a: &Awr, run: &str) -> Vec<Value> {
    let out = a.run(&["causal", run]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn every_causal_event_of_every_example_run_validates() {
    let v = validator();
    let a = Awr::new();
    for example in examples() {
        let run = a.completed_run(&example);
        let events = causal(&a, &run);
        assert!(events.len() >= 3, "{example}: {events:?}");
        let mut seen = HashSet::new();
        for e in &events {
            let errors: Vec<String> = v.iter_errors(e).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{example}: {e}: {errors:?}");
            // Parents first, and every id once.
            if let Some(parent) = e["parent_event_id"].as_str() {
                assert!(seen.contains(parent), "{example}: parent after child: {e}");
            }
            assert!(
                seen.insert(e["event_id"].as_str().unwrap().to_owned()),
                "{example}: {e}"
            );
        }
        assert_eq!(events[0]["type"], "state_transition", "{example}");
        assert_eq!(
            events,
            causal(&a, &run),
            "{example}: projected the same twice"
        );
        let tasks = events.iter().filter(|e| e["type"] == "task_sent").count();
        let answers = events
            .iter()
            .filter(|e| e["type"] == "response_sent")
            .count();
        assert_eq!(tasks, answers, "{example}: every task answered");
    }
}

#[test]
fn a_tool_loop_run_has_its_calls_and_returns_under_its_agent() {
    let a = Awr::new();
    let run = a.completed_run("examples/research-pipeline.yaml");
    let events = causal(&a, &run);
    let calls: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool_call").collect();
    let returns: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_return")
        .collect();
    assert!(!calls.is_empty(), "{events:#?}");
    assert_eq!(calls.len(), returns.len());
    for r in &returns {
        let parent = events
            .iter()
            .find(|e| e["event_id"] == r["parent_event_id"])
            .unwrap();
        assert_eq!(
            parent["agent_id"], r["agent_id"],
            "a return follows its agent's event"
        );
    }
}
