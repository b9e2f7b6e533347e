//! Every example runs offline, and the run is its log: folding a run's
//! events gives exactly the final snapshot the executor wrote (its state).

use domain::{RunId, RunSnapshot};
use serde_json::Value;

use crate::util::{Awr, examples, run_id_of};

#[test]
fn every_example_runs_and_its_log_folds_to_its_final_state() {
    let all = examples();
    assert!(all.len() >= 8, "{all:?}");
    for example in all {
        let awr = Awr::new();
        let out = awr.run(&["run", &example]);
        assert_eq!(out.code, 0, "{example}: {}", out.stderr);
        let main = run_id_of(&out);
        for run in awr.run_ids() {
            let log = awr.runtime_events(&run);
            let folded = RunSnapshot::fold(&log).unwrap();
            let id: RunId = run.parse().unwrap();
            // A short run saves no snapshot; one that is saved is the fold.
            if let Ok(bytes) = std::fs::read(awr.run_dir(&run).join("snapshot.json")) {
                let saved = RunSnapshot::from_json(&bytes, id).unwrap();
                assert_eq!(folded, saved, "{example}: run {run} (main run {main})");
            }
            assert!(
                folded.status.is_terminal(),
                "{example}: {:?}",
                folded.status
            );
            assert!(
                folded.node_runs.is_empty(),
                "{example}: node runs left in flight"
            );
        }
    }
}

#[test]
fn judge_refine_loops_until_accepted_and_each_writer_turn_sees_the_previous_draft() {
    let awr = Awr::new();
    let out = awr.run(&["run", "examples/judge-refine.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = run_id_of(&out);
    let transcript = std::fs::read_to_string(
        awr.storage()
            .join("transcripts")
            .join(format!("{run}.jsonl")),
    )
    .unwrap();
    let lines: Vec<Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let asked: Vec<Value> = lines
        .iter()
        .filter(|l| l["type"] == "message.user" && l["path"] == "write")
        .map(|l| serde_json::from_str(l["payload"]["blocks"][0]["text"].as_str().unwrap()).unwrap())
        .collect();
    let answered: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "message.assistant" && l["path"] == "write")
        .map(|l| l["payload"]["blocks"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(asked.len(), 3, "the judge asked for two revisions");
    assert!(asked[0].get("previous_draft").is_none());
    for turn in 1..3 {
        assert_eq!(
            asked[turn]["previous_draft"],
            answered[turn - 1],
            "turn {turn}"
        );
        assert!(asked[turn]["critique"].as_str().unwrap().len() > 10);
    }
    let iterations: Vec<u64> = lines
        .iter()
        .filter(|l| l["type"] == "message.user" && l["path"] == "write")
        .map(|l| l["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [0, 1, 2]);
    assert_eq!(
        out.stdout.trim(),
        answered[2],
        "the accepted draft is published"
    );
}
