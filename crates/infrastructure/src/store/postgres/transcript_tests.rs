//! Transcripts in a real PostgreSQL database: written, read back as a
//! file's are, followed from a `seq` on, by two writers at once, copied
//! in and out byte for byte, and gone with their run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use application::ports::{RunFileSet, RunFiles, RunStore, TranscriptReader, Transcripts};
use application::testing::store_conformance::new_run;
use domain::transcript::{ExchangeDraft, ExchangeEvent, ExchangeType};
use domain::{RunId, Timestamp};
use serde_json::json;

use super::tests::{fresh_database, store_with};
use super::{PgRunStore, PgTranscripts};

fn draft(text: &str) -> ExchangeDraft {
    ExchangeDraft {
        child_run_id: None,
        kind: ExchangeType::MessageAssistant,
        path: "step".into(),
        iteration: 0,
        timestamp: Timestamp::from_millis(1_700_000_000_000),
        payload: json!({ "text": text }),
    }
}

/// A store on a fresh database, its transcripts, and a run in it whose
/// lease the store holds while the lock lives (a transcript's writer
/// writes under its run's lease).
struct Setup {
    url: String,
    store: PgRunStore,
    transcripts: PgTranscripts,
    run: RunId,
    lock: Option<application::ports::RunLock>,
}

async fn setup() -> Option<Setup> {
    let url = fresh_database().await?;
    let store = store_with(&url, Duration::from_secs(60)).await;
    let transcripts = PgTranscripts::open(&url).await.unwrap();
    let run = new_run();
    let lock = Some(store.create_run(run).await.unwrap());
    Some(Setup {
        url,
        store,
        transcripts,
        run,
        lock,
    })
}

fn texts(lines: &application::ports::TranscriptLines) -> Vec<(u64, String)> {
    lines
        .events
        .iter()
        .map(|e| (e.seq, e.payload["text"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_are_numbered_read_back_and_followed_from_a_seq_on() {
    let Some(Setup {
        url,
        transcripts,
        run,
        store: _store,
        lock: _lock,
    }) = setup().await
    else {
        return;
    };
    let parent = new_run();
    let writer = transcripts.open(run, Some(parent)).await.unwrap();
    for text in ["a", "b", "c"] {
        let line = writer.append(draft(text)).await.unwrap();
        assert_eq!(line.parent_run_id, Some(parent));
    }
    // Taken, not written, until the flush that comes before their events.
    let elsewhere = PgTranscripts::open(&url).await.unwrap();
    assert!(elsewhere.read(run).await.unwrap().is_none());
    writer.flush().await.unwrap();
    // Another process, on the same database, reads what was written.
    let read = elsewhere.read(run).await.unwrap().unwrap();
    assert_eq!(
        texts(&read),
        [(1, "a".into()), (2, "b".into()), (3, "c".into())]
    );
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    let after = elsewhere.read_after(run, 2).await.unwrap().unwrap();
    assert_eq!(texts(&after), [(3, "c".into())]);
    // Nothing new: an empty read, not "no transcript".
    let none_new = elsewhere.read_after(run, 3).await.unwrap().unwrap();
    assert!(none_new.events.is_empty());
    assert!(elsewhere.read(new_run()).await.unwrap().is_none());

    // Reopened (a resume), the series goes on.
    writer.close().await;
    assert!(writer.append(draft("late")).await.is_err());
    let again = transcripts.open(run, Some(parent)).await.unwrap();
    assert_eq!(again.append(draft("d")).await.unwrap().seq, 4);
    again.flush().await.unwrap();
    again.flush().await.unwrap();
    let read = elsewhere.read_after(run, 3).await.unwrap().unwrap();
    assert_eq!(texts(&read), [(4, "d".into())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_of_one_run_never_repeat_a_seq() {
    let Some(Setup {
        url,
        transcripts,
        run,
        store: _store,
        lock: _lock,
    }) = setup().await
    else {
        return;
    };
    let other = PgTranscripts::open(&url).await.unwrap();
    let (a, b) = (
        transcripts.open(run, None).await.unwrap(),
        other.open(run, None).await.unwrap(),
    );
    let write = |writer: std::sync::Arc<dyn application::ports::Transcript>, tag: &'static str| {
        tokio::spawn(async move {
            for i in 0..20 {
                writer.append(draft(&format!("{tag}{i}"))).await.unwrap();
                if i % 3 == 2 {
                    writer.flush().await.unwrap();
                }
            }
            writer.flush().await.unwrap();
        })
    };
    let (ja, jb) = (write(a, "a"), write(b, "b"));
    ja.await.unwrap();
    jb.await.unwrap();
    let read = transcripts.read(run).await.unwrap().unwrap();
    let seqs: Vec<u64> = read.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
    assert!(read.problems.is_empty(), "{:?}", read.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_copied_in_and_out_keeps_every_byte_and_its_blobs() {
    let Some(Setup {
        store,
        transcripts,
        run,
        lock: _lock,
        url: _,
    }) = setup().await
    else {
        return;
    };
    // As a file holds it: a good line, a line whose large value is a blob,
    // a corrupt line in the middle, another good line, a torn tail.
    let big = serde_json::to_vec(&"x".repeat(70 * 1024)).unwrap();
    let hex = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(&big);
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let line = |seq: u64, payload: serde_json::Value| {
        let event = ExchangeEvent {
            seq,
            run_id: run,
            parent_run_id: None,
            child_run_id: None,
            kind: ExchangeType::MessageAssistant,
            path: "s".into(),
            iteration: 0,
            timestamp: Timestamp::from_millis(1_700_000_000_000),
            payload,
            extra: Default::default(),
        };
        let mut buf = Vec::new();
        event.write_json(&mut buf).unwrap();
        buf.push(b'\n');
        String::from_utf8(buf).unwrap()
    };
    let reference = json!({"text": {"$blob": format!("sha256:{hex}"), "bytes": big.len()}});
    let transcript = [
        line(1, json!({"text": "one"})),
        line(2, reference),
        "{not json\n".to_owned(),
        line(3, json!({"text": "three"})),
        "{\"seq\":4,\"tor".to_owned(),
    ]
    .concat()
    .into_bytes();
    let files = RunFileSet {
        transcript: transcript.clone(),
        blobs: vec![(format!("sha256-{hex}"), big.clone())],
    };
    transcripts.import(run, files.clone()).await.unwrap();
    assert!(transcripts.has_transcript(run).await.unwrap());
    assert_eq!(transcripts.export(run).await.unwrap(), Some(files.clone()));

    // Read as a file's reader reads it: the blob put back, the corrupt
    // line named by its place, the torn tail left out.
    let read = transcripts.read(run).await.unwrap().unwrap();
    let seqs: Vec<u64> = read.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(
        read.events[1].payload["text"].as_str().map(str::len),
        Some(70 * 1024)
    );
    assert_eq!(read.problems.len(), 1, "{:?}", read.problems);
    assert!(
        read.problems[0].contains(&format!("run {run}")) && read.problems[0].contains(":3:"),
        "{}",
        read.problems[0]
    );

    // A writer of the run cuts the torn tail and goes on after seq 3.
    let writer = transcripts.open(run, None).await.unwrap();
    assert_eq!(writer.append(draft("four")).await.unwrap().seq, 4);
    writer.flush().await.unwrap();

    // A blob the lines name and the database lacks is an error, not a
    // transcript without it.
    let client = transcripts.db.pool.get().await.unwrap();
    client
        .execute("DELETE FROM awr_transcript_blobs", &[])
        .await
        .unwrap();
    let missing = transcripts.export(run).await.unwrap_err().to_string();
    assert!(missing.contains(&hex), "{missing}");
    let read = transcripts.read(run).await.unwrap().unwrap();
    assert!(
        read.problems.iter().any(|p| p.contains(&hex)),
        "{:?}",
        read.problems
    );

    // Copying in replaces what the run had.
    transcripts.import(run, files.clone()).await.unwrap();
    assert_eq!(transcripts.export(run).await.unwrap(), Some(files));
    // A transcript for a run the store lacks is refused.
    let stray = transcripts.import(new_run(), RunFileSet::default()).await;
    assert!(stray.is_ok(), "an empty copy writes nothing: {stray:?}");
    let stray = RunFileSet {
        transcript: line(1, json!({})).into_bytes(),
        blobs: Vec::new(),
    };
    assert!(transcripts.import(new_run(), stray).await.is_err());
    drop(store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_goes_with_its_run_and_is_listed_while_there() {
    let Some(Setup {
        store,
        transcripts,
        run,
        mut lock,
        url: _,
    }) = setup().await
    else {
        return;
    };
    let writer = transcripts.open(run, None).await.unwrap();
    writer.append(draft("a")).await.unwrap();
    writer.flush().await.unwrap();
    let listed: Vec<RunId> = transcripts
        .listed()
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(listed, [run]);

    transcripts.remove(run).await.unwrap();
    assert!(!transcripts.has_transcript(run).await.unwrap());
    writer.append(draft("b")).await.unwrap();
    writer.flush().await.unwrap();
    assert!(transcripts.has_transcript(run).await.unwrap());

    drop(lock.take());
    store.delete_run(run).await.unwrap();
    assert!(transcripts.read(run).await.unwrap().is_none());
    assert!(transcripts.listed().await.unwrap().is_empty());
    // A line of a run that is gone is refused when written, and dropped.
    writer.append(draft("c")).await.unwrap();
    let after = writer.flush().await.unwrap_err().to_string();
    assert!(after.contains(&run.to_string()), "{after}");
    writer.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_could_not_be_written_leave_no_gap() {
    let Some(Setup {
        url,
        transcripts,
        run,
        store: _store,
        lock: _lock,
    }) = setup().await
    else {
        return;
    };
    let writer = transcripts.open(run, None).await.unwrap();
    writer.append(draft("a")).await.unwrap();
    writer.flush().await.unwrap();
    // The table refuses writes for a while (a database that fails).
    let client = transcripts.db.pool.get().await.unwrap();
    client
        .batch_execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON awr_transcript_lines \
             FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .await
        .unwrap();
    writer.append(draft("lost")).await.unwrap();
    let refused = writer.flush().await.unwrap_err().to_string();
    assert!(refused.contains("refused"), "{refused}");
    client
        .batch_execute("DROP TRIGGER refuse ON awr_transcript_lines")
        .await
        .unwrap();
    // The next line takes the place the dropped one would have had.
    assert_eq!(writer.append(draft("b")).await.unwrap().seq, 2);
    writer.flush().await.unwrap();
    let read = PgTranscripts::open(&url)
        .await
        .unwrap()
        .read(run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(texts(&read), [(1, "a".into()), (2, "b".into())]);
    assert!(read.problems.is_empty(), "{:?}", read.problems);
}

/// A writer that lost its run's lease writes no line, however it tries:
/// the new writer's lines are the only ones after the takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_lost_the_lease_writes_no_line() {
    let Some(Setup {
        url,
        store,
        transcripts,
        run,
        lock,
    }) = setup().await
    else {
        return;
    };
    let zombie = transcripts.open(run, None).await.unwrap();
    zombie.append(draft("before")).await.unwrap();
    zombie.flush().await.unwrap();
    super::tests::expire(&store, run).await;
    let other = store_with(&url, Duration::from_secs(60)).await;
    let _taken = other.lock(run).await.unwrap();
    let writer = PgTranscripts::open(&url)
        .await
        .unwrap()
        .open(run, None)
        .await
        .unwrap();
    writer.append(draft("after")).await.unwrap();
    writer.flush().await.unwrap();

    zombie.append(draft("zombie")).await.unwrap();
    let refused = zombie.flush().await.unwrap_err().to_string();
    assert!(refused.contains("lease was lost"), "{refused}");
    let read = transcripts.read(run).await.unwrap().unwrap();
    assert_eq!(texts(&read), [(1, "before".into()), (2, "after".into())]);
    drop(lock);
}

/// A writer that lost the lease before it opened the transcript writes
/// under the epoch of its own lock, not the new writer's the run has by
/// then: its line is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_opened_after_the_lease_was_lost_writes_no_line() {
    let Some(Setup {
        url,
        store,
        transcripts,
        run,
        lock,
    }) = setup().await
    else {
        return;
    };
    let epoch = lock
        .as_ref()
        .and_then(|l| l.epoch())
        .expect("a fenced lock");
    super::tests::expire(&store, run).await;
    let other = store_with(&url, Duration::from_secs(60)).await;
    let taken = other.lock(run).await.unwrap();
    assert_eq!(taken.epoch(), Some(epoch + 1));

    let zombie = transcripts.open(run, None).await.unwrap();
    zombie.fence(epoch);
    zombie.append(draft("zombie")).await.unwrap();
    let refused = zombie.flush().await.unwrap_err().to_string();
    assert!(refused.contains("lease was lost"), "{refused}");
    let read = transcripts.read(run).await.unwrap();
    assert!(
        read.as_ref().is_none_or(|r| r.events.is_empty()),
        "{read:?}"
    );
    drop(lock);
}
