//! A run holds its current state, not its history (design §9): the state
//! folded from the log of a 10,000-step chain of agents, counted by the
//! allocator (not timed), stays within a few hundred bytes per finished
//! node, and a finished node's output is held as its text, not as a tree.
//!
//! Its own test binary: the counting allocator is the process's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awr_domain::{RunSnapshot, RuntimeEvent};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const STEPS: usize = 10_000;
const RUN: &str = "54d84b44-a553-4ccb-879f-c58b5cfb54e1";

/// The log lines of step `i` of the chain, as the mock agent's run writes
/// them (`awr run` of a `steps:` chain), from offset `at`.
fn step_lines(i: usize, at: usize) -> Vec<String> {
    let text = format!(
        "Step {i}: the summary of the previous step, condensed into a sentence or two of plain text for the next one."
    );
    let envelope = |n: usize, kind: &str| {
        format!(
            r#""id":"00000000-0000-4000-8000-{:012}","offset":{},"timestamp":"2026-11-23T20:30:39.262Z","runId":"{RUN}","nodeId":"s{i}","nodeRunId":"91513205-88a2-4bc2-8ac1-{:012}","type":"{kind}""#,
            at + n,
            at + n,
            i
        )
    };
    vec![
        format!(
            r#"{{{},"input":{{"data":"{text}","metadata":{{"previous_agent":"w","step_index":{i}}}}},"attempt":1}}"#,
            envelope(0, "node:started")
        ),
        format!(
            r#"{{{},"sessionId":"3d268878-4ab5-43ec-bed2-{i:012}","prompt":"{text}","provisional":true,"callIndex":0}}"#,
            envelope(1, "agent:start")
        ),
        format!(
            r#"{{{},"sessionId":"sess-{i}","model":"claude-sonnet-4-5"}}"#,
            envelope(2, "agent:session")
        ),
        format!(
            r#"{{{},"content":"{text}"}}"#,
            envelope(3, "agent:text:delta")
        ),
        format!(
            r#"{{{},"result":"{text}","usage":{{"inputTokens":140,"outputTokens":70}},"totalCostUsd":0.00147,"durationMs":0,"numTurns":1}}"#,
            envelope(4, "agent:complete")
        ),
        format!(
            r#"{{{},"output":{{"data":"{text}","metadata":{{"agent_name":"w","execution_time_ms":0,"tool_calls_count":0}}}}}}"#,
            envelope(5, "node:completed")
        ),
        format!(
            r#"{{"id":"00000000-0000-4000-9000-{:012}","offset":{},"timestamp":"2026-11-23T20:30:39.263Z","runId":"{RUN}","nodeId":"s{i}","type":"edge:fired","edgeId":"s{i}->s{}","from":"s{i}","to":"s{}"}}"#,
            at + 6,
            at + 6,
            i + 1,
            i + 1
        ),
    ]
}

fn flow_started() -> String {
    let nodes: Vec<String> = (0..STEPS).map(|i| format!("\"s{i}\"")).collect();
    let edges: Vec<String> = (1..STEPS)
        .map(|i| format!("\"s{}->s{i}\"", i - 1))
        .collect();
    format!(
        r#"{{"id":"00000000-0000-4000-8000-000000000000","offset":1,"timestamp":"2026-11-23T20:30:39.133Z","runId":"{RUN}","type":"flow:started","workflow":{{"name":"long","hash":"sha256:00"}},"input":null,"nodes":[{}],"edges":[{}]}}"#,
        nodes.join(","),
        edges.join(",")
    )
}

/// Bytes the heap holds now.
fn held() -> usize {
    dhat::HeapStats::get().curr_bytes
}

/// One profiler at a time: the tests of this file take turns.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The state of the chain once its 10,000 steps are folded, read and folded
/// line by line as a load folds a log.
fn folded() -> RunSnapshot {
    let first = RuntimeEvent::from_json(flow_started().as_bytes()).unwrap();
    let mut state = RunSnapshot::new(first.run_id);
    state.apply(&first);
    drop(first);
    let mut at = 2;
    for i in 0..STEPS {
        for line in step_lines(i, at) {
            state.apply(&RuntimeEvent::from_json(line.as_bytes()).unwrap());
        }
        at += 7;
    }
    assert_eq!(state.outputs.len(), STEPS);
    assert_eq!(state.last_offset, at as u64 - 1);
    state
}

#[test]
fn a_fold_of_10000_finished_nodes_holds_a_few_hundred_bytes_per_node() {
    let _turn = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _profiler = dhat::Profiler::builder().testing().build();
    let before = held();
    let state = folded();
    let per_node = (held() - before) / STEPS;
    // Per node: its output's ~190 bytes of text and one entry in each of
    // the state's per-node maps (status, passes, calls, spent, session,
    // and its edge's status), the maps sharing one copy of its id. An
    // output as a `Value` tree alone costs ~1.3 KB more.
    eprintln!("the state holds {per_node} bytes per finished node");
    assert!(
        per_node < 700,
        "the state holds {per_node} bytes per finished node"
    );
    drop(state);
}

#[test]
fn loading_the_snapshot_of_10000_finished_nodes_builds_no_tree_per_output() {
    let _turn = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let bytes = serde_json::to_vec(&folded()).unwrap();
    let run_id = RUN.parse().unwrap();
    let _profiler = dhat::Profiler::builder().testing().build();
    let (blocks, bytes_before) = {
        let stats = dhat::HeapStats::get();
        (stats.total_blocks, stats.curr_bytes)
    };
    let state = RunSnapshot::from_json(&bytes, run_id).unwrap();
    let stats = dhat::HeapStats::get();
    let per_node = (stats.total_blocks - blocks) as usize / STEPS;
    let held_per_node = (stats.curr_bytes - bytes_before) / STEPS;
    assert_eq!(state.outputs.len(), STEPS);
    // Per node: its id once (shared by the maps it keys, as in a folded
    // state), its output's text, its session's and its edge's ids: four.
    // Each map's own copy of the id made it nine; an output read as a
    // `Value` tree adds five, and reading the object through a buffer of
    // untyped content (`serde(flatten)`) doubles the whole.
    eprintln!(
        "loading the snapshot allocates {per_node} blocks per node and holds {held_per_node} bytes per node"
    );
    assert!(
        per_node <= 5,
        "loading the snapshot allocates {per_node} blocks per node"
    );
    assert!(
        held_per_node < 1_000,
        "the loaded state holds {held_per_node} bytes per node"
    );
}

#[test]
fn reading_a_steps_log_lines_allocates_no_copy_of_the_envelope_text() {
    let _turn = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let lines = step_lines(7, 50);
    const ROUNDS: u64 = 100;
    let _profiler = dhat::Profiler::builder().testing().build();
    let before = dhat::HeapStats::get().total_blocks;
    for _ in 0..ROUNDS {
        let events: Vec<RuntimeEvent> = lines
            .iter()
            .map(|line| RuntimeEvent::from_json(line.as_bytes()).unwrap())
            .collect();
        assert_eq!(events.len(), 7);
    }
    // Counted over many rounds: the allocator counts the whole process,
    // and the test harness's own threads allocate now and then.
    let blocks = (dhat::HeapStats::get().total_blocks - before) as f64 / ROUNDS as f64;
    // 66: per line, the list of its fields, the event's id and node id,
    // and the values its kind holds. The kind is read by its name from the
    // fields' raw text; through the internally tagged derive, which copies
    // every field into serde's untyped buffer first: 97. The envelope is
    // read from the line's text in place; read through serde, its
    // timestamp was copied first (serde's `Cow<str>` always copies): 104.
    eprintln!("reading a step's 7 lines allocates {blocks} blocks");
    assert!(
        blocks <= 70.0,
        "reading a step's 7 lines allocates {blocks} blocks"
    );
}

#[test]
fn loading_a_10000_node_definition_peaks_under_1850_bytes_a_node() {
    let _turn = TURN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut yaml = String::from("name: chain\nagents:\n  a: {provider: mock}\nnodes:\n");
    for i in 0..STEPS {
        yaml += &format!("  - {{id: n{i}, agent: a}}\n");
    }
    yaml += "edges:\n";
    for i in 1..STEPS {
        yaml += &format!("  - {{from: n{}, to: n{i}}}\n", i - 1);
    }
    let _profiler = dhat::Profiler::builder().testing().build();
    let before = held();
    let flow = awr_domain::WorkflowDef::from_yaml(&yaml).unwrap();
    assert_eq!(flow.nodes.len(), STEPS);
    let peak = (dhat::HeapStats::get().max_bytes - before) / STEPS;
    // The peak is while the YAML parser holds every event of the file
    // (~1.3 KB a node and its edge) beside the file's raw items. A raw node
    // keeps its rare parts (command, for_each, retry, budget) boxed: inline,
    // they made it 360 bytes, and the peak 2,050 bytes a node.
    eprintln!("loading the definition peaks at {peak} bytes a node");
    assert!(
        peak < 1_850,
        "loading the definition peaks at {peak} bytes a node"
    );
    drop(flow);
}
