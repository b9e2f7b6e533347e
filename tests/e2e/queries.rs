//! `awr runs` and `awr events` with their filters, on the file store and on
//! SQLite alike: each flag, their combinations, and bad values refused by
//! name (exit 2).

use serde_json::Value;

use crate::cancel::{start, wait_for};
use crate::interrupted::Leftovers;
use crate::util::{Awr, Output};

/// Both stores, each in a scratch directory of its own.
fn stores() -> [Awr; 2] {
    [Awr::new(), Awr::sqlite()]
}

/// `awr runs ARGS --json`, which must exit 0: one object per line.
fn runs_json(awr: &Awr, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["runs", "--json"];
    all.extend_from_slice(args);
    let out = awr.run(&all);
    assert_eq!(out.code, 0, "awr {all:?}: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The ids `awr runs ARGS --json` lists, in order.
fn listed(awr: &Awr, args: &[&str]) -> Vec<String> {
    runs_json(awr, args)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Runs made one after another, oldest first: two `summarize` runs that
/// complete, one `failing` run, and a `market-brief` run with its child
/// (`summarize` again, started after its parent).
struct Made {
    summarize: [String; 2],
    failed: String,
    parent: String,
    child: String,
}

fn make_runs(awr: &Awr) -> Made {
    let first = awr.completed_run("examples/summarize.yaml");
    let second = awr.completed_run("examples/summarize.yaml");
    let flow = awr.api_error_flow();
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let failed = crate::util::run_id_of(&out);
    let parent = awr.completed_run("examples/market-brief.yaml");
    let ids = listed(awr, &[]);
    let child = ids
        .iter()
        .find(|id| ![&first, &second, &failed, &parent].contains(id))
        .expect("the child run")
        .clone();
    Made {
        summarize: [first, second],
        failed,
        parent,
        child,
    }
}

#[test]
fn runs_are_listed_newest_first_and_filtered_by_each_flag_and_together() {
    for awr in stores() {
        let m = make_runs(&awr);
        let [first, second] = m.summarize.clone();
        let all = vec![
            m.child.clone(),
            m.parent.clone(),
            m.failed.clone(),
            second.clone(),
            first.clone(),
        ];
        assert_eq!(listed(&awr, &[]), all);

        // The table: a header, then the same runs in the same order.
        let table = awr.run(&["runs"]);
        assert_eq!(table.code, 0, "{}", table.stderr);
        let rows: Vec<&str> = table.stdout.lines().skip(1).collect();
        assert_eq!(rows.len(), all.len(), "{}", table.stdout);
        for (row, id) in rows.iter().zip(&all) {
            assert!(row.starts_with(id.as_str()), "{row}");
        }

        assert_eq!(
            listed(&awr, &["--status", "failed"]),
            vec![m.failed.clone()]
        );
        assert_eq!(
            listed(&awr, &["--status", "failed,completed", "--limit", "2"]),
            vec![m.child.clone(), m.parent.clone()]
        );
        assert!(listed(&awr, &["--status", "running"]).is_empty());
        assert!(listed(&awr, &["--status", "interrupted"]).is_empty());
        assert_eq!(
            listed(&awr, &["--workflow", "summarize"]),
            vec![m.child.clone(), second.clone(), first.clone()]
        );
        assert!(listed(&awr, &["--workflow", "no-such-flow"]).is_empty());
        assert_eq!(listed(&awr, &["--limit", "1"]), vec![m.child.clone()]);
        assert_eq!(listed(&awr, &["--since", "1h"]), all);
        assert_eq!(listed(&awr, &["--since", "7d"]), all);
        assert!(listed(&awr, &["--since", "2999-01-01T00:00:00Z"]).is_empty());
        // Started at or after the second run's start: the second run and later.
        let second_start = runs_json(&awr, &["--workflow", "summarize"])[1]["startedAt"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            listed(&awr, &["--since", &second_start]),
            all[..4].to_vec(),
            "since {second_start}"
        );
        assert_eq!(
            listed(
                &awr,
                &[
                    "--status",
                    "completed",
                    "--workflow",
                    "summarize",
                    "--since",
                    &second_start,
                    "--limit",
                    "5",
                ]
            ),
            vec![m.child.clone(), second.clone()]
        );
        assert_eq!(
            listed(
                &awr,
                &["--workflow", "summarize", "--since", "1h", "--limit", "1"]
            ),
            vec![m.child.clone()]
        );

        // What --json says of a run: a child names its parent.
        let rows = runs_json(&awr, &["--limit", "3"]);
        let child = &rows[0];
        assert_eq!(child["workflow"], "summarize");
        assert_eq!(child["status"], "completed");
        assert_eq!(child["parent"], m.parent.as_str());
        assert!(child["startedAt"].is_string() && child["endedAt"].is_string());
        assert!(child["durationMs"].is_u64(), "{child}");
        assert_eq!(rows[1]["id"], m.parent.as_str());
        assert!(rows[1].get("parent").is_none(), "{}", rows[1]);
        assert_eq!(rows[2]["status"], "failed");
    }
}

#[test]
fn running_and_interrupted_are_told_apart_by_the_runs_lock() {
    for awr in stores() {
        let done = awr.completed_run("examples/summarize.yaml");
        let (mut child, _, agent, grandchild) = start(&awr);
        let _leftovers = Leftovers(vec![agent, grandchild]);
        let live = awr
            .run_ids()
            .into_iter()
            .find(|id| *id != done)
            .expect("the live run");
        assert_eq!(listed(&awr, &["--status", "running"]), vec![live.clone()]);
        assert!(listed(&awr, &["--status", "interrupted"]).is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        wait_for(20, "the killed run to be shown interrupted", || {
            listed(&awr, &["--status", "interrupted"]) == vec![live.clone()]
        });
        assert!(listed(&awr, &["--status", "running"]).is_empty());
        assert_eq!(
            listed(&awr, &["--status", "interrupted,completed"]),
            vec![live.clone(), done.clone()]
        );
        let rows = runs_json(&awr, &["--status", "interrupted"]);
        assert_eq!(rows[0]["status"], "interrupted");
        assert!(rows[0].get("endedAt").is_none(), "{}", rows[0]);
    }
}

/// `awr events RUN ARGS --json`, which must exit 0: the offsets printed.
fn event_offsets(awr: &Awr, run: &str, args: &[&str]) -> Vec<u64> {
    let mut all = vec!["events", run, "--json"];
    all.extend_from_slice(args);
    let out = awr.run_within(30, &all);
    assert_eq!(out.code, 0, "awr {all:?}: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["offset"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn events_are_filtered_by_type_node_and_time_with_offset_follow_and_json() {
    for awr in stores() {
        let run = awr.completed_run("examples/fan-out.yaml");
        let log = awr.events(&run);
        let offsets_where = |keep: &dyn Fn(&Value) -> bool| -> Vec<u64> {
            log.iter()
                .filter(|e| keep(e))
                .map(|e| e["offset"].as_u64().unwrap())
                .collect()
        };
        let started = offsets_where(&|e| e["type"] == "node:started");
        assert!(started.len() >= 4, "{started:?}");
        assert_eq!(
            event_offsets(&awr, &run, &["--type", "node:started"]),
            started
        );
        let ends =
            offsets_where(&|e| e["type"] == "node:completed" || e["type"] == "flow:completed");
        assert_eq!(
            event_offsets(&awr, &run, &["--type", "node:completed,flow:completed"]),
            ends
        );
        assert_eq!(
            event_offsets(
                &awr,
                &run,
                &["--type", "node:completed", "--type", "flow:completed"]
            ),
            ends
        );
        assert!(event_offsets(&awr, &run, &["--type", "flow:failed"]).is_empty());
        let decide = offsets_where(&|e| e["nodeId"] == "decide");
        assert!(!decide.is_empty());
        assert_eq!(event_offsets(&awr, &run, &["--node", "decide"]), decide);
        // A node the run does not have is a typo, not a node that did nothing.
        let out = awr.run(&["events", &run, "--node", "nobody"]);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(
            out.stderr.contains("nobody") && out.stderr.contains("decide"),
            "names it and the run's nodes: {}",
            out.stderr
        );

        // --since: an event's own time keeps it and what follows.
        let middle = &log[log.len() / 2];
        let at = middle["timestamp"].as_str().unwrap();
        let since = offsets_where(&|e| e["timestamp"].as_str().unwrap() >= at);
        assert_eq!(event_offsets(&awr, &run, &["--since", at]), since);
        assert_eq!(
            event_offsets(&awr, &run, &["--since", "1h"]).len(),
            log.len()
        );
        assert!(event_offsets(&awr, &run, &["--since", "2999-01-01T00:00:00Z"]).is_empty());

        // Together, and with --offset.
        let from = started[1];
        let want: Vec<u64> = started.iter().copied().filter(|o| *o > from).collect();
        assert_eq!(
            event_offsets(
                &awr,
                &run,
                &["--type", "node:started", "--offset", &from.to_string()]
            ),
            want
        );
        let decide_started =
            offsets_where(&|e| e["nodeId"] == "decide" && e["type"] == "node:started");
        assert_eq!(
            event_offsets(
                &awr,
                &run,
                &[
                    "--type",
                    "node:started,agent:start",
                    "--node",
                    "decide",
                    "--since",
                    "1h",
                    "--offset",
                    "1"
                ]
            ),
            offsets_where(&|e| e["nodeId"] == "decide"
                && (e["type"] == "node:started" || e["type"] == "agent:start"))
        );
        assert_eq!(decide_started.len(), 1);

        // --follow of an ended run prints the same and ends.
        assert_eq!(
            event_offsets(&awr, &run, &["--type", "node:started", "--follow"]),
            started
        );
        assert_eq!(
            event_offsets(
                &awr,
                &run,
                &["--node", "decide", "--follow", "--offset", "2"]
            ),
            decide
        );

        // The table form filters alike.
        let table = awr.run(&["events", &run, "--type", "node:started"]);
        assert_eq!(table.code, 0, "{}", table.stderr);
        // A header, then a line an event.
        let mut lines = table.stdout.lines();
        assert!(
            lines.next().unwrap().starts_with("OFFSET  TIME"),
            "{}",
            table.stdout
        );
        assert_eq!(lines.clone().count(), started.len());
        assert!(lines.all(|l| l.contains("node:started")));
    }
}

/// Exit 2, stderr naming `value` (and `also`, when given).
fn refused(out: &Output, value: &str, also: &str) {
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains(value), "{}", out.stderr);
    assert!(out.stderr.contains(also), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
}

#[test]
fn bad_filter_values_are_usage_errors_naming_the_value() {
    for awr in stores() {
        let run = awr.completed_run("examples/summarize.yaml");
        refused(
            &awr.run(&["runs", "--status", "bogus"]),
            "bogus",
            "interrupted",
        );
        refused(
            &awr.run(&["runs", "--status", "failed,nope"]),
            "nope",
            "completed",
        );
        refused(
            &awr.run(&["runs", "--since", "yesterday"]),
            "yesterday",
            "RFC 3339",
        );
        refused(
            &awr.run(&["runs", "--since", "2026-13-45T00:00:00Z"]),
            "2026-13-45",
            "",
        );
        refused(&awr.run(&["runs", "--limit", "0"]), "0", "--limit");
        refused(&awr.run(&["runs", "--limit", "many"]), "many", "--limit");
        refused(
            &awr.run(&["events", &run, "--type", "node:started,node:exploded"]),
            "node:exploded",
            "node:failed",
        );
        refused(
            &awr.run(&["events", &run, "--since", "soon"]),
            "soon",
            "duration",
        );
        refused(
            &awr.run(&["events", &run, "--node", "no such node"]),
            "no such node",
            "",
        );
    }
}
