//! A recording is held to what its run said: an answer, its causal
//! events or its workflow edited after the fact no longer verify, and a
//! call that failed and was retried is recorded as its error.

use serde_json::Value;

use crate::determinism::{edit_json, recorded, verify};
use crate::util::Awr;

/// A recording edited after the fact (an answer, its causal events, the
/// workflow it was made from) no longer verifies: the replay is held to
/// what the recorded run said, not only to itself.
#[test]
fn a_recording_edited_after_the_fact_diverges_from_it() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/summarize.yaml");
    let fresh = |name: &str| {
        let to = a.dir.path().join(name);
        let status = std::process::Command::new("cp")
            .args(["-r", &rec.display().to_string(), &to.display().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        to
    };
    assert_eq!(verify(&a, &rec).code, 0);

    // The last node's answer, whose text no later request carries.
    let answer = fresh("answer");
    edit_json(&answer.join("nodes/summarize/fact-checker.json"), |v| {
        v["calls"][0]["output"]["text"] = Value::String("HACKED".into());
    });
    let out = verify(&a, &answer);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("DIVERGED (recorded-causal)"),
        "{}",
        out.stderr
    );

    // The causal events cut short, or emptied.
    for keep in [5, 0] {
        let cut = fresh(&format!("cut{keep}"));
        let path = cut.join("causal.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        let kept: String = text.lines().take(keep).map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, kept).unwrap();
        let out = verify(&a, &cut);
        assert_eq!(out.code, 1, "keep {keep}: {}", out.stderr);
        assert!(
            out.stderr.contains("only-in-B") || out.stderr.contains("(recorded-causal)"),
            "{}",
            out.stderr
        );
    }

    // Its workflow file changed since: named with both hashes.
    let moved = fresh("moved");
    let flow = a.write(
        "moved/summarize.yaml",
        &format!(
            "{}# edited\n",
            std::fs::read_to_string(crate::util::repo_root().join("examples/summarize.yaml"))
                .unwrap()
        ),
    );
    // (with the fixtures `awr validate` looks for beside it)
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(crate::util::repo_root().join("examples/fixtures"))
        .arg(&moved)
        .status()
        .unwrap();
    assert!(status.success());
    edit_json(&moved.join("manifest.json"), |v| {
        v["workflow"]["path"] = Value::String(flow.display().to_string());
    });
    let out = verify(&a, &moved);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("DIVERGED (workflow)")
            && out.stderr.contains("changed since it was recorded"),
        "{}",
        out.stderr
    );
}

/// A call that failed with a transient error and was retried is recorded
/// as that error, so the replay retries as the run did and verifies.
#[test]
fn a_retried_call_is_recorded_as_its_error() {
    let a = Awr::new();
    a.write(
        "fixtures/rt/a.json",
        r#"{"calls":[{"output":{"error":{"errorType":"rate_limit","message":"slow down"}}},{"output":{"text":"ok after retry"}}]}"#,
    );
    let flow = a.write(
        "rt.yaml",
        "name: rt\nagents:\n  a: {provider: mock}\nsteps:\n  - agent: a\n    retry: {max_attempts: 2, backoff: 10ms}\n",
    );
    let rec = recorded(&a, &flow.display().to_string());
    let calls: Value =
        serde_json::from_str(&std::fs::read_to_string(rec.join("nodes/rt/a.json")).unwrap())
            .unwrap();
    assert_eq!(
        calls["calls"][0]["output"],
        serde_json::json!({"error": {"errorType": "rate_limit", "message": "slow down"}})
    );
    assert_eq!(calls["calls"][1]["output"]["text"], "ok after retry");
    let out = verify(&a, &rec);
    assert_eq!(out.code, 0, "{}", out.stderr);
}
