//! Reading a run's exchange transcript, once or following it while the run
//! is written: what `awr transcript` prints and `GET
//! /workflows/{id}/transcript` streams.

use std::sync::Arc;
use std::time::Duration;

use domain::RunId;
use domain::transcript::{ExchangeEvent, ExchangeType};
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};

use crate::ports::{
    Clock, EventStream, RunStore, TranscriptError, TranscriptLines, TranscriptReader,
};

/// How often a follow looks for lines written by another process when
/// nothing woke it: a writer appends the events its lines come from after
/// it writes the lines, and the store's follow of the log (woken by
/// `NOTIFY` on PostgreSQL) wakes the transcript's follow at once. This is
/// the safety net beneath.
pub const FOLLOW_POLL: Duration = Duration::from_secs(1);

/// A line of a transcript as [`transcript_lines`] reads it.
#[derive(Debug)]
pub enum Line {
    /// A good line.
    Event(ExchangeEvent),
    /// A bad line, named with where it is and what is wrong with it.
    Bad(String),
}

/// The lines [`transcript_lines`] yields; an unreadable transcript ends
/// them with its error.
pub type Lines = BoxStream<'static, Result<Line, TranscriptError>>;

/// What to follow a transcript with: the run's store, whose lock tells
/// whether a process still writes the run, and the clock to wait on.
pub struct Follow {
    /// The store of the run.
    pub store: Arc<dyn RunStore>,
    /// What the polls wait on.
    pub clock: Arc<dyn Clock>,
}

/// The lines of the transcript of `run_id`, each once (`Ok(None)`: the run
/// has no transcript). With `follow`, then the lines written later, until
/// its `run.completed` line, or until no process writes the run any more
/// (it paused, its process died, or a command ended it without a writer,
/// which writes no transcript line), read once more then.
pub async fn transcript_lines(
    reader: Arc<dyn TranscriptReader>,
    run_id: RunId,
    follow: Option<Follow>,
) -> Result<Option<Lines>, TranscriptError> {
    let Some(first) = reader.read(run_id).await? else {
        return Ok(None);
    };
    Ok(Some(Box::pin(lines(reader, run_id, first, follow))))
}

fn lines(
    reader: Arc<dyn TranscriptReader>,
    run_id: RunId,
    first: TranscriptLines,
    follow: Option<Follow>,
) -> impl Stream<Item = Result<Line, TranscriptError>> + Send + 'static {
    async_stream::stream! {
        // The log's live events, only as a wake-up: none when the store
        // cannot follow (the poll alone then).
        let mut log = match follow.as_ref() {
            Some(follow) => match follow.store.last_offset(run_id).await {
                Ok(at) => follow.store.follow(run_id, at).await.ok(),
                Err(_) => None,
            },
            None => None,
        };
        let mut read = first;
        let mut shown = 0u64;
        // A later read may report a bad line again: each is shown once.
        let mut reported = std::collections::HashSet::new();
        let mut last_read = false;
        loop {
            let already = shown;
            let ended = read.events.iter().any(|e| e.kind == ExchangeType::RunCompleted);
            for event in std::mem::take(&mut read.events).into_iter().filter(|e| e.seq > already) {
                shown = event.seq;
                yield Ok(Line::Event(event));
            }
            for problem in std::mem::take(&mut read.problems) {
                if reported.insert(problem.clone()) {
                    yield Ok(Line::Bad(problem));
                }
            }
            let Some(follow) = follow.as_ref() else {
                return;
            };
            if ended || last_read {
                return;
            }
            log = woken(log, follow.clock.as_ref()).await;
            // Checked after the wait, then one more read: lines its last
            // writer wrote before it let go are shown.
            last_read = !follow.store.has_writer(run_id).await.unwrap_or(true);
            read = match reader.read_after(run_id, shown).await {
                Ok(Some(read)) => read,
                // Deleted meanwhile (`prune`): nothing more to show.
                Ok(None) => return,
                Err(e) => {
                    yield Err(e);
                    return;
                }
            };
        }
    }
}

/// Waits until `log` has new events (taking all there are at once) or
/// [`FOLLOW_POLL`] has passed; the log as it is left, `None` once it ended.
async fn woken(log: Option<EventStream>, clock: &dyn Clock) -> Option<EventStream> {
    let Some(mut log) = log else {
        clock.sleep(FOLLOW_POLL).await;
        return None;
    };
    tokio::select! {
        () = clock.sleep(FOLLOW_POLL) => Some(log),
        next = log.next() => match next {
            Some(Ok(_)) => loop {
                match log.next().now_or_never() {
                    Some(Some(Ok(_))) => {}
                    // Nothing more yet.
                    None => break Some(log),
                    // Ended or failed: never polled again.
                    Some(_) => break None,
                }
            },
            // Ended (the run did) or failed: the poll alone from now on.
            _ => None,
        },
    }
}

/// One line of a run's execution tree ([`transcript_tree`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeLine {
    /// A run at `depth`: its workflow's name and how its transcript says it
    /// ended (`completed`, `failed`, or `running` without a last line).
    Run {
        /// How deep in the tree (0: the run asked for; a child is 2 deeper
        /// than the run that called it).
        depth: usize,
        /// The run.
        run_id: RunId,
        /// Its workflow's name, `?` when its first line does not say.
        name: String,
        /// How it ended.
        outcome: &'static str,
    },
    /// A run already shown above: a run calls none twice into a loop.
    Seen {
        /// How deep in the tree.
        depth: usize,
        /// The run.
        run_id: RunId,
    },
    /// A run whose transcript cannot be read, and why.
    Unreadable {
        /// How deep in the tree.
        depth: usize,
        /// The run.
        run_id: RunId,
        /// Why.
        error: String,
    },
    /// A step of the run above it.
    Step {
        /// The depth of its run.
        depth: usize,
        /// Where the step is (`path`).
        path: String,
        /// What kind of step (`agent`, `command`, ...), `?` when not said.
        kind: String,
        /// Which pass of a loop (0: the first).
        iteration: u32,
    },
}

/// A run's execution tree: the run, its steps, and the runs they called,
/// followed through `child_run_id` into the children's own transcripts.
#[derive(Debug, Default)]
pub struct Tree {
    /// The lines, in the order shown: each child right after the step that
    /// called it.
    pub lines: Vec<TreeLine>,
    /// The bad lines skipped in the transcripts read, each naming its file
    /// and line (a transcript that cannot be read is a line of its own).
    pub problems: Vec<String>,
}

/// What is left to show of a tree: a run to open, or the rest of a run's
/// lines after the step that called a child.
enum Frame {
    Open(usize, RunId, Option<TranscriptLines>),
    Rest(usize, std::vec::IntoIter<ExchangeEvent>),
}

/// The execution tree of `run_id` (`Ok(None)`: the run has no transcript).
pub async fn transcript_tree(
    reader: &dyn TranscriptReader,
    run_id: RunId,
) -> Result<Option<Tree>, TranscriptError> {
    let Some(first) = reader.read(run_id).await? else {
        return Ok(None);
    };
    let mut tree = Tree::default();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![Frame::Open(0, run_id, Some(first))];
    while let Some(frame) = stack.pop() {
        let (depth, mut rest) = match frame {
            Frame::Rest(depth, rest) => (depth, rest),
            Frame::Open(depth, run_id, read) => {
                if !seen.insert(run_id) {
                    tree.lines.push(TreeLine::Seen { depth, run_id });
                    continue;
                }
                let read = match read {
                    Some(read) => Ok(Some(read)),
                    None => reader.read(run_id).await,
                };
                let read = match read {
                    Ok(Some(read)) => read,
                    Ok(None) => {
                        let error = "it has no transcript".to_owned();
                        tree.lines.push(TreeLine::Unreadable {
                            depth,
                            run_id,
                            error,
                        });
                        continue;
                    }
                    Err(e) => {
                        let error = e.to_string();
                        tree.lines.push(TreeLine::Unreadable {
                            depth,
                            run_id,
                            error,
                        });
                        continue;
                    }
                };
                tree.problems.extend(read.problems);
                tree.lines.push(run_line(depth, run_id, &read.events));
                (depth, read.events.into_iter())
            }
        };
        while let Some(event) = rest.next() {
            match event.kind {
                ExchangeType::StepStarted => tree.lines.push(TreeLine::Step {
                    depth,
                    kind: event.payload["kind"].as_str().unwrap_or("?").to_owned(),
                    path: event.path,
                    iteration: event.iteration,
                }),
                ExchangeType::CallWorkflowStarted => {
                    if let Some(child) = event.child_run_id {
                        // The child's whole tree, then the rest of this run.
                        stack.push(Frame::Rest(depth, rest));
                        stack.push(Frame::Open(depth + 2, child, None));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(Some(tree))
}

/// The line of a run: its workflow's name and how it ended, from its lines.
fn run_line(depth: usize, run_id: RunId, events: &[ExchangeEvent]) -> TreeLine {
    let name = events
        .iter()
        .find(|e| e.kind == ExchangeType::RunStarted)
        .and_then(|e| e.payload["name"].as_str())
        .unwrap_or("?")
        .to_owned();
    let outcome = match events.iter().find(|e| e.kind == ExchangeType::RunCompleted) {
        Some(end) if end.payload.get("error").is_some() => "failed",
        Some(_) => "completed",
        None => "running",
    };
    TreeLine::Run {
        depth,
        run_id,
        name,
        outcome,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use domain::Timestamp;
    use futures::StreamExt;

    use super::*;
    use crate::ports::{MockRunStore, MockTranscriptReader};
    use crate::testing::TokioClock;

    fn run_id() -> RunId {
        "00000000-0000-4000-8000-000000000001".parse().unwrap()
    }

    fn line(seq: u64, kind: ExchangeType) -> ExchangeEvent {
        ExchangeEvent {
            seq,
            run_id: run_id(),
            parent_run_id: None,
            child_run_id: None,
            kind,
            path: String::new(),
            iteration: 0,
            timestamp: Timestamp::from_millis(0),
            payload: serde_json::Value::Null,
            extra: serde_json::Map::new(),
        }
    }

    /// A transcript that grows as the test says, read through the port.
    #[derive(Clone, Default)]
    struct Growing(Arc<Mutex<TranscriptLines>>);

    impl Growing {
        fn push(&self, event: ExchangeEvent) {
            self.0.lock().unwrap().events.push(event);
        }

        fn bad(&self, problem: &str) {
            self.0.lock().unwrap().problems.push(problem.into());
        }

        /// Reads every line first, then, as a reader that reads from a
        /// line on, those after the one asked for and every problem again.
        fn reader(&self) -> Arc<dyn TranscriptReader> {
            let (lines, later) = (self.0.clone(), self.0.clone());
            let mut reader = MockTranscriptReader::new();
            reader.expect_read().returning(move |_| {
                let lines = lines.lock().unwrap();
                Ok(Some(TranscriptLines {
                    events: lines.events.clone(),
                    problems: lines.problems.clone(),
                }))
            });
            reader.expect_read_after().returning(move |_, after| {
                let lines = later.lock().unwrap();
                Ok(Some(TranscriptLines {
                    events: lines
                        .events
                        .iter()
                        .filter(|e| e.seq > after)
                        .cloned()
                        .collect(),
                    problems: lines.problems.clone(),
                }))
            });
            Arc::new(reader)
        }
    }

    fn shown(line: Result<Line, TranscriptError>) -> String {
        match line.unwrap() {
            Line::Event(e) => e.seq.to_string(),
            Line::Bad(problem) => problem,
        }
    }

    #[tokio::test]
    async fn a_run_without_a_transcript_has_no_lines() {
        let mut reader = MockTranscriptReader::new();
        reader.expect_read().returning(|_| Ok(None));
        let lines = transcript_lines(Arc::new(reader), run_id(), None)
            .await
            .unwrap();
        assert!(lines.is_none());
    }

    #[tokio::test]
    async fn without_follow_the_lines_as_they_stand_are_read_once() {
        let transcript = Growing::default();
        transcript.push(line(1, ExchangeType::RunStarted));
        transcript.bad("t.jsonl:2: not JSON");
        transcript.push(line(2, ExchangeType::StepStarted));
        let lines = transcript_lines(transcript.reader(), run_id(), None)
            .await
            .unwrap()
            .unwrap();
        let got: Vec<String> = lines.map(shown).collect().await;
        assert_eq!(got, ["1", "2", "t.jsonl:2: not JSON"]);
    }

    /// A store whose log of the run gets no new event: the follow polls.
    fn quiet_log() -> MockRunStore {
        let mut store = MockRunStore::new();
        store.expect_last_offset().returning(|_| Ok(0));
        store
            .expect_follow()
            .returning(|_, _| Ok(futures::stream::pending().boxed()));
        store
    }

    /// An event appended to the run's log wakes the follow at once: the
    /// line written before it is shown without waiting for the poll.
    #[tokio::test(start_paused = true)]
    async fn an_append_to_the_log_wakes_the_follow_before_its_poll() {
        let transcript = Growing::default();
        transcript.push(line(1, ExchangeType::RunStarted));
        let (appended, log) = futures::channel::mpsc::unbounded();
        let log = std::sync::Mutex::new(Some(log));
        let mut store = MockRunStore::new();
        store.expect_last_offset().returning(|_| Ok(1));
        store.expect_follow().returning(move |_, after| {
            assert_eq!(after, 1, "from where the log stands");
            Ok(log.lock().unwrap().take().unwrap().boxed())
        });
        store.expect_has_writer().returning(|_| Ok(true));
        let follow = Follow {
            store: Arc::new(store),
            clock: Arc::new(TokioClock::new()),
        };
        let mut lines = transcript_lines(transcript.reader(), run_id(), Some(follow))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(shown(lines.next().await.unwrap()), "1");
        let start = tokio::time::Instant::now();
        transcript.push(line(2, ExchangeType::StepStarted));
        let event = crate::testing::store_conformance::warning(run_id(), 2);
        appended.unbounded_send(Ok(event)).unwrap();
        assert_eq!(shown(lines.next().await.unwrap()), "2");
        assert!(start.elapsed() < FOLLOW_POLL, "{:?}", start.elapsed());
    }

    /// A follow shows each line once as it comes, each bad line once, and
    /// ends at `run.completed`.
    #[tokio::test(start_paused = true)]
    async fn a_follow_shows_new_lines_once_until_the_run_completes() {
        let transcript = Growing::default();
        transcript.push(line(1, ExchangeType::RunStarted));
        let mut store = quiet_log();
        store.expect_has_writer().returning(|_| Ok(true));
        let follow = Follow {
            store: Arc::new(store),
            clock: Arc::new(TokioClock::new()),
        };
        let mut lines = transcript_lines(transcript.reader(), run_id(), Some(follow))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(shown(lines.next().await.unwrap()), "1");
        transcript.push(line(2, ExchangeType::StepStarted));
        transcript.bad("t.jsonl:3: not JSON");
        assert_eq!(shown(lines.next().await.unwrap()), "2");
        assert_eq!(shown(lines.next().await.unwrap()), "t.jsonl:3: not JSON");
        transcript.push(line(3, ExchangeType::RunCompleted));
        assert_eq!(shown(lines.next().await.unwrap()), "3");
        assert!(lines.next().await.is_none(), "ends at run.completed");
    }

    /// A run whose writer is gone without a last line ends the follow,
    /// after one more read for the lines it wrote before it let go.
    #[tokio::test(start_paused = true)]
    async fn a_follow_ends_one_read_after_the_writer_is_gone() {
        let transcript = Growing::default();
        transcript.push(line(1, ExchangeType::RunStarted));
        let writer = Arc::new(AtomicBool::new(true));
        let mut store = quiet_log();
        let probed = Arc::clone(&writer);
        store
            .expect_has_writer()
            .returning(move |_| Ok(probed.load(Ordering::SeqCst)));
        let follow = Follow {
            store: Arc::new(store),
            clock: Arc::new(TokioClock::new()),
        };
        let mut lines = transcript_lines(transcript.reader(), run_id(), Some(follow))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(shown(lines.next().await.unwrap()), "1");
        transcript.push(line(2, ExchangeType::StepStarted));
        writer.store(false, Ordering::SeqCst);
        assert_eq!(shown(lines.next().await.unwrap()), "2", "its last lines");
        assert!(lines.next().await.is_none());
    }
    fn called(seq: u64, child: RunId) -> ExchangeEvent {
        ExchangeEvent {
            child_run_id: Some(child),
            ..line(seq, ExchangeType::CallWorkflowStarted)
        }
    }

    fn step(seq: u64, path: &str, iteration: u32) -> ExchangeEvent {
        ExchangeEvent {
            path: path.into(),
            iteration,
            payload: serde_json::json!({"kind": "agent"}),
            ..line(seq, ExchangeType::StepStarted)
        }
    }

    /// Each child right after the step that called it, then the rest of
    /// its caller; a run called again is named, not walked twice; a child
    /// without a transcript is a line of its own.
    #[tokio::test]
    async fn a_tree_walks_into_each_child_where_it_was_called() {
        let child: RunId = "00000000-0000-4000-8000-000000000002".parse().unwrap();
        let gone: RunId = "00000000-0000-4000-8000-000000000003".parse().unwrap();
        let mut runs = std::collections::HashMap::new();
        runs.insert(
            run_id(),
            vec![
                step(1, "a", 0),
                called(2, child),
                step(3, "b", 2),
                called(4, gone),
                called(5, child),
            ],
        );
        runs.insert(child, vec![step(1, "c", 0), called(2, run_id())]);
        let mut reader = MockTranscriptReader::new();
        reader.expect_read().returning(move |run| {
            Ok(runs.get(&run).map(|events| TranscriptLines {
                events: events.clone(),
                problems: vec![format!("{run}.jsonl:9: not JSON")],
            }))
        });
        let tree = transcript_tree(&reader, run_id()).await.unwrap().unwrap();
        let shown: Vec<String> = tree
            .lines
            .iter()
            .map(|line| match line {
                TreeLine::Run { depth, run_id, .. } => format!("{depth} run {run_id}"),
                TreeLine::Seen { depth, run_id } => format!("{depth} seen {run_id}"),
                TreeLine::Unreadable { depth, run_id, .. } => format!("{depth} gone {run_id}"),
                TreeLine::Step {
                    depth,
                    path,
                    iteration,
                    ..
                } => format!("{depth} step {path}#{iteration}"),
            })
            .collect();
        let (root, child, gone) = (run_id(), child, gone);
        assert_eq!(
            shown,
            [
                format!("0 run {root}"),
                "0 step a#0".into(),
                format!("2 run {child}"),
                "2 step c#0".into(),
                format!("4 seen {root}"),
                "0 step b#2".into(),
                format!("2 gone {gone}"),
                format!("2 seen {child}"),
            ]
        );
        assert_eq!(tree.problems.len(), 2, "each transcript's bad line, once");
        let mut none = MockTranscriptReader::new();
        none.expect_read().returning(|_| Ok(None));
        assert!(transcript_tree(&none, root).await.unwrap().is_none());
    }
}
