//! Reading a run's exchange transcript, once or following it while the run
//! is written: what `awr transcript` prints and `GET
//! /workflows/{id}/transcript` streams.

use std::sync::Arc;
use std::time::Duration;

use domain::RunId;
use domain::transcript::{ExchangeEvent, ExchangeType};
use futures::Stream;
use futures::stream::BoxStream;

use crate::ports::{Clock, RunStore, TranscriptError, TranscriptLines, TranscriptReader};

/// How often a follow looks for lines written by another process.
pub const FOLLOW_POLL: Duration = Duration::from_millis(100);

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
        let mut read = first;
        let mut shown = 0u64;
        let mut reported = 0usize;
        let mut last_read = false;
        loop {
            let already = shown;
            let ended = read.events.iter().any(|e| e.kind == ExchangeType::RunCompleted);
            for event in std::mem::take(&mut read.events).into_iter().filter(|e| e.seq > already) {
                shown = event.seq;
                yield Ok(Line::Event(event));
            }
            for problem in read.problems.iter().skip(reported) {
                yield Ok(Line::Bad(problem.clone()));
            }
            reported = reported.max(read.problems.len());
            let Some(follow) = follow.as_ref() else {
                return;
            };
            if ended || last_read {
                return;
            }
            follow.clock.sleep(FOLLOW_POLL).await;
            // Checked after the wait, then one more read: lines its last
            // writer wrote before it let go are shown.
            last_read = !follow.store.has_writer(run_id).await.unwrap_or(true);
            read = match reader.read(run_id).await {
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

        fn reader(&self) -> Arc<dyn TranscriptReader> {
            let lines = self.0.clone();
            let mut reader = MockTranscriptReader::new();
            reader.expect_read().returning(move |_| {
                let lines = lines.lock().unwrap();
                Ok(Some(TranscriptLines {
                    events: lines.events.clone(),
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

    /// A follow shows each line once as it comes, each bad line once, and
    /// ends at `run.completed`.
    #[tokio::test(start_paused = true)]
    async fn a_follow_shows_new_lines_once_until_the_run_completes() {
        let transcript = Growing::default();
        transcript.push(line(1, ExchangeType::RunStarted));
        let mut store = MockRunStore::new();
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
        let mut store = MockRunStore::new();
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
}
