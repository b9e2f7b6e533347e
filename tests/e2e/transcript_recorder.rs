//! The exchange transcript recorder against real files (seed 000): numbering,
//! file mode and line endings, whole lines under concurrent writers (tasks
//! and processes), disk-first broadcast, drop-newest fan-out, close, the
//! tolerant reader, and continuing a file after a reopen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use application::ports::{Transcript, TranscriptError, Transcripts};
use domain::transcript::{
    ContentBlock, ExchangeDraft, ExchangeEvent, ExchangeType, Fidelity, message_payload,
    step_payload,
};
use domain::{RunId, Timestamp};
use infrastructure::{
    JsonlTranscript, JsonlTranscripts, read_transcript, read_transcript_lines, transcript_path,
};
use serde_json::json;
use uuid::Uuid;

/// Set to a file path, it makes [`child_appends_when_asked`] append to it.
const CHILD_ENV: &str = "AWR_TEST_CHILD_APPEND";

/// Lines each child process appends.
const CHILD_LINES: usize = 500;

fn new_run() -> RunId {
    RunId::new(Uuid::new_v4()).unwrap()
}

fn draft(kind: ExchangeType, path: &str) -> ExchangeDraft {
    ExchangeDraft {
        child_run_id: None,
        kind,
        path: path.to_owned(),
        iteration: 0,
        timestamp: Timestamp::from_millis(1_767_225_600_000),
        payload: step_payload(path, "agent", None, None),
    }
}

/// A `message.assistant` line of about `len` bytes of text.
fn text_draft(len: usize) -> ExchangeDraft {
    let blocks = [ContentBlock::Text {
        text: "x".repeat(len),
        fidelity: Fidelity::AgentEmitted,
        extra: Default::default(),
    }];
    ExchangeDraft {
        payload: message_payload("assistant", &blocks),
        ..draft(ExchangeType::MessageAssistant, "writer")
    }
}

fn seqs(events: &[ExchangeEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

#[tokio::test]
async fn seq_runs_from_one_in_a_private_lf_file() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = JsonlTranscripts::new(dir.path());
    let (run, parent) = (new_run(), new_run());
    let t = transcripts.open(run, Some(parent)).await.unwrap();
    for i in 0..10 {
        let e = t
            .append(draft(ExchangeType::StepStarted, &format!("s{i}")))
            .await
            .unwrap();
        assert_eq!(e.seq, i + 1);
        assert_eq!(e.parent_run_id, Some(parent));
    }
    t.close().await;

    let path = transcript_path(dir.path(), run);
    assert_eq!(
        path,
        dir.path().join("transcripts").join(format!("{run}.jsonl"))
    );
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let dir_mode = fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);

    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n') && !text.contains('\r'));
    assert_eq!(text.lines().count(), 10);
    for line in text.lines() {
        let raw: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(raw["parent_run_id"], json!(parent.to_string()), "{line}");
        assert!(
            raw.get("child_run_id").is_none(),
            "optional fields are omitted: {line}"
        );
    }
    let events = read_transcript(&path).unwrap();
    assert_eq!(seqs(&events), (1..=10).collect::<Vec<_>>());
    assert!(events.iter().all(|e| e.run_id == run));
}

#[tokio::test]
async fn opening_a_run_twice_shares_one_recorder() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = JsonlTranscripts::new(dir.path());
    let run = new_run();
    let a = transcripts.open_recorder(run, None).unwrap();
    let b = transcripts.open_recorder(run, None).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    a.append_line(draft(ExchangeType::RunStarted, "")).unwrap();
    assert_eq!(
        b.append_line(draft(ExchangeType::StepStarted, "s"))
            .unwrap()
            .seq,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_get_gapless_seq_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = JsonlTranscripts::new(dir.path());
    let run = new_run();
    let t = transcripts.open(run, None).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let t = Arc::clone(&t);
            tokio::spawn(async move {
                let mut got = Vec::new();
                for i in 0..100 {
                    // Some lines beyond PIPE_BUF, so the lock, not the
                    // kernel's small-write atomicity, is what is tested.
                    let len = if (task + i) % 7 == 0 { 9_000 } else { 100 };
                    let e = t.append(text_draft(len)).await.unwrap();
                    got.push(e.seq);
                    tokio::task::yield_now().await;
                }
                got
            })
        })
        .collect();
    let mut all = HashSet::new();
    for task in tasks {
        let got = task.await.unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "one task's seqs rise");
        all.extend(got);
    }
    assert_eq!(all, (1..=1600).collect::<HashSet<_>>());
    let events = read_transcript(transcript_path(dir.path(), run)).unwrap();
    assert_eq!(
        seqs(&events),
        (1..=1600).collect::<Vec<_>>(),
        "file order is seq order"
    );
}

/// Not a check on its own: the body of each child process of
/// [`processes_appending_to_one_file_leave_whole_lines`]; without the
/// variable it does nothing.
#[test]
fn child_appends_when_asked() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let t = JsonlTranscript::open(&path, new_run(), None).unwrap();
    for i in 0..CHILD_LINES {
        // Every 10th line is beyond PIPE_BUF (4096 bytes).
        let len = if i % 10 == 0 { 6_000 } else { 200 };
        t.append_line(text_draft(len)).unwrap();
    }
}

#[test]
fn processes_appending_to_one_file_leave_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.jsonl");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "transcript_recorder::child_appends_when_asked",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, &path)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let mut per_run = std::collections::HashMap::<RunId, usize>::new();
    for (n, line) in text.lines().enumerate() {
        let e: ExchangeEvent =
            serde_json::from_str(line).unwrap_or_else(|err| panic!("line {}: {err}", n + 1));
        *per_run.entry(e.run_id).or_default() += 1;
    }
    assert_eq!(per_run.len(), 4);
    assert!(per_run.values().all(|&n| n == CHILD_LINES), "{per_run:?}");
    // Four runs' seq series in one file break seed 000's one series per
    // file: the reader keeps every line it can and names the others by seq.
    let read = read_transcript_lines(&path).unwrap();
    assert!(
        read.problems.iter().all(|p| p.contains(": seq ")),
        "{:?}",
        read.problems
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_drops_alone_and_stats_count_it() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = JsonlTranscripts::new(dir.path());
    let run = new_run();
    let t = transcripts.open_recorder(run, None).unwrap();
    let stalled = t.subscribe_with_capacity(4);
    let mut draining = t.subscribe_with_capacity(4);
    let received = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&received);
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(e) = draining.recv().await {
            got.push(e.seq);
            seen.store(e.seq, Ordering::Release);
        }
        (got, draining.dropped())
    });
    for i in 1..=100 {
        t.append(draft(ExchangeType::StepStarted, &format!("s{i}")))
            .await
            .unwrap();
        // The draining subscriber takes each line before the next, so only
        // the stalled one can be full.
        while received.load(Ordering::Acquire) < i {
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
    }
    let stats = t.stats();
    assert_eq!(stats.written, 100);
    assert_eq!(stats.subscribers.len(), 2);
    assert_eq!(stats.subscribers[0].id, stalled.id());
    assert_eq!(stats.subscribers[0].capacity, 4);
    assert_eq!(
        stats.subscribers[0].dropped, 96,
        "drop-newest: the first 4 stay"
    );
    assert_eq!(stalled.dropped(), 96);
    assert_eq!(stats.subscribers[1].dropped, 0);
    assert_eq!(stats.dropped_total, 96);
    assert_eq!(t.dropped(), 96);

    t.close().await;
    let (got, dropped) = reader.await.unwrap();
    assert_eq!(got, (1..=100).collect::<Vec<_>>());
    assert_eq!(dropped, 0);

    // The stalled subscriber still holds the oldest lines, then ends.
    let mut stalled = stalled;
    let mut kept = Vec::new();
    while let Some(e) = stalled.recv().await {
        kept.push(e.seq);
    }
    assert_eq!(kept, vec![1, 2, 3, 4]);
    // The file is complete regardless.
    assert_eq!(read_transcript(t.path()).unwrap().len(), 100);
}

#[tokio::test]
async fn close_is_idempotent_and_ends_everything() {
    let dir = tempfile::tempdir().unwrap();
    let run = new_run();
    let t = JsonlTranscripts::new(dir.path())
        .open_recorder(run, None)
        .unwrap();
    let mut sub = t.subscribe();
    let mut gone = t.subscribe();
    t.append_line(draft(ExchangeType::RunStarted, "")).unwrap();

    gone.close();
    gone.close();
    assert_eq!(gone.recv().await, None, "a closed subscriber ends at once");
    t.append_line(draft(ExchangeType::StepStarted, "a"))
        .unwrap();
    assert_eq!(
        t.stats().subscribers.len(),
        1,
        "the writer forgot the closed subscriber"
    );

    t.close().await;
    t.close().await;
    assert!(t.is_closed());
    assert!(matches!(
        t.append(draft(ExchangeType::StepStarted, "b")).await,
        Err(TranscriptError::Closed(r)) if r == run
    ));
    assert_eq!(
        seqs(&[sub.recv().await.unwrap(), sub.recv().await.unwrap()]),
        vec![1, 2]
    );
    assert_eq!(sub.recv().await, None);
    sub.close();
    assert_eq!(sub.recv().await, None);
    let mut late = t.subscribe();
    assert_eq!(
        late.recv().await,
        None,
        "subscribing to a closed recorder yields an ended stream"
    );
}

#[tokio::test]
async fn a_failed_write_is_returned_not_broadcast_and_keeps_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    fs::write(&path, "").unwrap();
    // A read-only descriptor: every write() fails with EBADF.
    let file = File::open(&path).unwrap();
    let t = JsonlTranscript::from_file_for_tests(file, &path, new_run(), None);
    let mut sub = t.subscribe();
    let err = t
        .append(draft(ExchangeType::RunStarted, ""))
        .await
        .unwrap_err();
    match &err {
        TranscriptError::Io(msg) => assert!(msg.contains("t.jsonl"), "names the file: {msg}"),
        other => panic!("expected Io, got {other:?}"),
    }
    assert_eq!(t.stats().written, 0);
    t.close().await;
    assert_eq!(sub.recv().await, None, "nothing was broadcast");
    assert_eq!(fs::metadata(&path).unwrap().len(), 0);

    // The seq of the failed line is not consumed.
    let file = File::open(&path).unwrap();
    let t = JsonlTranscript::from_file_for_tests(file, &path, new_run(), None);
    assert!(t.append_line(draft(ExchangeType::RunStarted, "")).is_err());
    let ok = JsonlTranscript::open(&path, new_run(), None).unwrap();
    assert_eq!(
        ok.append_line(draft(ExchangeType::RunStarted, ""))
            .unwrap()
            .seq,
        1
    );
}

#[tokio::test]
async fn unknown_types_and_blocks_survive_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let run = new_run();
    let t = JsonlTranscripts::new(dir.path())
        .open_recorder(run, None)
        .unwrap();
    let future = ExchangeDraft {
        payload: json!({"role": "assistant", "blocks": [{"type": "smell", "odour": "ozone", "fidelity": "router"}]}),
        ..draft(ExchangeType::Unknown("message.hologram".into()), "a")
    };
    let written = t.append_line(future).unwrap();
    t.append_line(text_draft(10)).unwrap();
    let events = read_transcript(t.path()).unwrap();
    assert_eq!(events[0], written);
    assert_eq!(
        events[0].kind,
        ExchangeType::Unknown("message.hologram".into())
    );
    let block: ContentBlock =
        serde_json::from_value(events[0].payload["blocks"][0].clone()).unwrap();
    assert_eq!(block.type_name(), "smell");
    assert_eq!(events[1].kind, ExchangeType::MessageAssistant);
}

#[test]
fn the_reader_skips_a_torn_tail_and_names_a_corrupt_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let t = JsonlTranscript::open(&path, new_run(), None).unwrap();
    for _ in 0..3 {
        t.append_line(draft(ExchangeType::StepStarted, "s"))
            .unwrap();
    }
    drop(t);
    let good = fs::read_to_string(&path).unwrap();
    fs::write(&path, format!("{good}{{\"seq\":4,\"run")).unwrap();
    assert_eq!(seqs(&read_transcript(&path).unwrap()), vec![1, 2, 3]);

    let mut lines: Vec<&str> = good.lines().collect();
    lines[1] = "{\"seq\": oops";
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = read_transcript(&path).unwrap_err().to_string();
    assert!(err.contains(&format!("{}:2:", path.display())), "{err}");

    assert!(read_transcript(dir.path().join("missing.jsonl")).is_err());
}

#[test]
fn reopening_continues_seq_and_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = JsonlTranscripts::new(dir.path());
    let run = new_run();
    let t = transcripts.open_recorder(run, None).unwrap();
    for _ in 0..3 {
        t.append_line(draft(ExchangeType::StepStarted, "s"))
            .unwrap();
    }
    drop(t);
    let path = transcript_path(dir.path(), run);
    let mut torn = fs::read(&path).unwrap();
    torn.extend_from_slice(b"{\"seq\":4,\"ty");
    fs::write(&path, &torn).unwrap();

    let t = transcripts.open_recorder(run, None).unwrap();
    assert_eq!(
        t.append_line(draft(ExchangeType::StepStarted, "s"))
            .unwrap()
            .seq,
        4
    );
    drop(t);
    let t = transcripts.open_recorder(run, None).unwrap();
    assert_eq!(
        t.append_line(draft(ExchangeType::RunCompleted, ""))
            .unwrap()
            .seq,
        5
    );
    assert_eq!(seqs(&read_transcript(&path).unwrap()), vec![1, 2, 3, 4, 5]);
    assert!(
        fs::read_to_string(&path)
            .unwrap()
            .lines()
            .all(|l| !l.contains("\"ty\""))
    );
}

#[test]
fn a_torn_tail_is_left_alone_while_another_recorder_has_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let first = JsonlTranscript::open(&path, new_run(), None).unwrap();
    first
        .append_line(draft(ExchangeType::StepStarted, "s"))
        .unwrap();
    // What another writer's line in progress looks like to a reader.
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"seq\":2,");
    fs::write(&path, &bytes).unwrap();
    let second = JsonlTranscript::open(&path, new_run(), None).unwrap();
    assert_eq!(fs::read(&path).unwrap(), bytes, "nothing was cut");
    drop((first, second));
    let _third = JsonlTranscript::open(&path, new_run(), None).unwrap();
    assert_eq!(read_transcript(&path).unwrap().len(), 1);
    assert_eq!(
        fs::read(&path).unwrap().len(),
        bytes.len() - 9,
        "alone, it cuts"
    );
}
