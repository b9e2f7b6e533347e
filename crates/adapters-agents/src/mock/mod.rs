//! The fixture-backed mock provider of seed 001 §7: a `QueryFn` that replays
//! recorded calls instead of calling a model.
//!
//! Fixtures live in one directory per workflow, one file per node
//! (`<node-id>.json`, seed 001 §7.2): by default `fixtures/<workflow name>/`
//! next to the workflow file, so a child workflow's nodes have files of their
//! own. Each call of a node takes the next recorded call of its file, yields
//! its recorded events, then its output as the result. A missing file or
//! call is an error that names the node, the call index and the file, never
//! a guess.
//!
//! The call index is `AgentRequest::call_index`: the number of calls the
//! node made before in the same run (across its node runs and their
//! attempts, as the recording saved them), which the executor counts from
//! the run's log. So the mock keeps no counter: two runs in one process, a
//! child run of the same workflow, or a run continued by another process
//! each take the call their own log says comes next.

mod fixture;
pub mod turns;

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use application::ports::{AgentMessage, AgentRequest, AgentStream, QueryError, QueryFn};
use application::recording::request;
use async_trait::async_trait;
use domain::recording::{Mismatch, MismatchKind};
use lru::LruCache;

pub use fixture::{FixtureCall, FixtureFile, FixtureOutput, RecordedTurn};
pub use turns::TurnReplay;

/// Serves agent calls from fixture files.
pub struct MockQuery {
    /// Directory that relative `fixtures:` settings are resolved against (the workflow's).
    base_dir: PathBuf,
    /// Where fixture directories are, one per workflow name, when an agent
    /// names no `fixtures:` directory.
    default_root: PathBuf,
    /// The files parsed last, by path: a node's calls (a loop, a retry)
    /// come close together, and a long workflow's files are not all held
    /// at once. A std mutex: it is never held across an await, and the
    /// critical sections are tiny.
    files: Mutex<LruCache<PathBuf, Arc<FixtureFile>>>,
    /// Serving a recording: every agent's calls come from `default_root`,
    /// whatever its `fixtures:` says.
    recording: bool,
    /// Replays an HTTP agent's calls turn by turn through the tool loop,
    /// when set; else as a whole, as a CLI agent's.
    turns: Option<TurnReplay>,
}

/// Parsed fixture files kept at most: a run's memory does not grow with
/// its number of nodes, and a file is read again only after this many
/// others were used since.
const KEPT_FILES: NonZeroUsize = NonZeroUsize::new(64).unwrap();

impl MockQuery {
    /// A mock whose agents' `fixtures:` paths are relative to `base_dir`,
    /// defaulting to `<default_root>/<workflow name>`.
    pub fn new(base_dir: impl Into<PathBuf>, default_root: impl Into<PathBuf>) -> Self {
        Self {
            base_dir: base_dir.into(),
            default_root: default_root.into(),
            files: Mutex::new(LruCache::new(KEPT_FILES)),
            recording: false,
            turns: None,
        }
    }

    /// Replays HTTP agents' calls turn by turn: the tool loop runs again,
    /// on recorded turns and recorded tool results, and each turn's request
    /// is checked against the recording.
    #[must_use]
    pub fn with_turns(mut self, replay: TurnReplay) -> Self {
        self.turns = Some(replay);
        self
    }

    /// A mock serving the recording in `dir` (`awr record-fixtures`): each
    /// workflow's nodes from `dir/nodes/<workflow name>/`.
    pub fn recording(dir: &Path) -> Self {
        Self {
            recording: true,
            ..Self::new(dir, dir.join("nodes"))
        }
    }

    fn fixture_path(&self, request: &AgentRequest) -> PathBuf {
        let dir = match &request.agent.fixtures {
            Some(dir) if !self.recording => self.base_dir.join(dir),
            _ => self.default_root.join(&request.workflow),
        };
        dir.join(format!("{}.json", request.node_id))
    }

    /// The parsed fixture file at `path`, read once.
    fn file(&self, path: &Path) -> Result<Arc<FixtureFile>, QueryError> {
        let cached = {
            let mut files = self.files.lock().map_err(|_| poisoned())?;
            files.get(path).cloned()
        };
        if let Some(file) = cached {
            return Ok(file);
        }
        let file =
            Arc::new(FixtureFile::load(path).map_err(|e| QueryError::Fixture(e.to_string()))?);
        let mut files = self.files.lock().map_err(|_| poisoned())?;
        Ok(Arc::clone(files.get_or_insert(path.to_owned(), || file)))
    }
}

/// Refuses a call whose request is not the one recorded: the workflow (a
/// prompt, a system prompt, the model, the tools) or an earlier answer
/// changed. The error names the call, the JSON Pointer of the first
/// difference and both values.
fn check_request(
    request: &AgentRequest,
    call: &FixtureCall,
    recorded: &str,
    path: &Path,
) -> Result<(), QueryError> {
    let prompt = domain::event::Prompt::Text(request.prompt.clone());
    let was = call.input.clone().unwrap_or(serde_json::Value::Null);
    let sent = request::as_recorded(request::request(&prompt, &request.agent), &was);
    // The request recorded is checked whole, not only by its hash: an edit
    // of the recorded request is a mismatch too, named where it is.
    let sent_hash = request::request_hash(&sent);
    if sent_hash == recorded && request::request_hash(&was) == sent_hash {
        return Ok(());
    }
    let (pointer, left, right) = request::first_difference(&was, &sent)
        .unwrap_or_else(|| (String::new(), serde_json::Value::Null, sent.clone()));
    let mut refused = mismatch(MismatchKind::Request, request, path);
    (refused.pointer, refused.recorded, refused.sent) = (pointer, left, right);
    Err(QueryError::Replay(Box::new(refused)))
}

/// A mismatch of `request`'s call with the node file at `path`, nothing
/// compared yet (no pointer, no values).
pub(crate) fn mismatch(kind: MismatchKind, request: &AgentRequest, path: &Path) -> Mismatch {
    Mismatch {
        kind,
        node: request.node_id.to_string(),
        call: request.call_index,
        instance: request.instance.clone(),
        instance_call: request.instance_call,
        turn: None,
        file: path.display().to_string(),
        pointer: String::new(),
        recorded: serde_json::Value::Null,
        sent: serde_json::Value::Null,
        recorded_calls: None,
        recorded_turns: None,
    }
}

/// A call the node file does not hold: refused with the request it sent,
/// never answered with a guess.
fn extra_call(request: &AgentRequest, path: &Path, recorded: usize) -> QueryError {
    let prompt = domain::event::Prompt::Text(request.prompt.clone());
    let mut refused = mismatch(MismatchKind::ExtraCall, request, path);
    refused.pointer = format!("/calls/{recorded}");
    refused.sent = request::request(&prompt, &request.agent);
    refused.recorded_calls = Some(u32::try_from(recorded).unwrap_or(u32::MAX));
    QueryError::Replay(Box::new(refused))
}

fn poisoned() -> QueryError {
    QueryError::Fixture("fixture state is unusable after an earlier panic".into())
}

#[async_trait]
impl QueryFn for MockQuery {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let path = self.fixture_path(&request);
        let file = match self.file(&path) {
            Ok(file) => file,
            // A recording without a file for this node holds none of its
            // calls: this one is a call too many.
            Err(_) if self.recording && !path.exists() => {
                return Err(extra_call(&request, &path, 0));
            }
            Err(e) => return Err(e),
        };
        // The runner names the node; the error says which call.
        let call = file
            .call_for(&request)
            .ok_or_else(|| extra_call(&request, &path, file.calls.len()))?;
        if let Some(recorded) = &call.request_hash {
            check_request(&request, call, recorded, &path)?;
        }
        if let Some(replay) = self
            .turns
            .as_ref()
            .filter(|_| request.agent.provider.is_http())
        {
            let at = mismatch(MismatchKind::Turn, &request, &path);
            let call = call.clone();
            return turns::replay(replay, request, &call, at).await;
        }
        let messages: Vec<Result<AgentMessage, QueryError>> = call.messages();
        Ok(Box::pin(futures::stream::iter(messages)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use domain::workflow::{AgentDef, Provider};
    use domain::{NodeId, NodeRunId, RunId};
    use futures::StreamExt;

    fn request(node: &str, fixtures: Option<&str>) -> AgentRequest {
        AgentRequest {
            run_id: RunId::new(uuid_v4()).unwrap(),
            workflow: "wf".into(),
            node_id: NodeId::new(node).unwrap(),
            node_run_id: NodeRunId::new(uuid_v4()),
            agent_name: node.into(),
            agent: AgentDef {
                fixtures: fixtures.map(str::to_owned),
                ..AgentDef::new(Provider::Mock)
            },
            prompt: "hi".into(),
            resume: None,
            fork_session: false,
            session_id: None,
            session_usage: Default::default(),
            history: Vec::new(),
            approved_call: None,
            call_index: 0,
            instance: "0".into(),
            instance_call: 0,
            traceparent: None,
            run_tools: Default::default(),
            mcp_servers: Default::default(),
        }
    }

    fn uuid_v4() -> uuid::Uuid {
        uuid::Builder::from_random_bytes([7; 16]).into_uuid()
    }

    /// A base directory holding the fixture file `dir/file`.
    fn with_fixture(dir: &str, file: &str, body: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), body).unwrap();
        tmp
    }

    /// What `mock` replays for `request`.
    async fn replay(
        mock: &MockQuery,
        request: AgentRequest,
    ) -> Vec<Result<AgentMessage, QueryError>> {
        mock.query(request).await.unwrap().collect().await
    }

    /// A long workflow's fixture files are not all held in memory: only
    /// the last few used, and a file dropped is read again when needed.
    #[tokio::test]
    async fn only_the_files_used_last_are_kept_parsed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wf");
        std::fs::create_dir_all(&dir).unwrap();
        let nodes = KEPT_FILES.get() * 2;
        for n in 0..nodes {
            let body = format!(r#"{{"calls": [{{"output": {{"text": "answer {n}"}}}}]}}"#);
            std::fs::write(dir.join(format!("n{n}.json")), body).unwrap();
        }
        let mock = MockQuery::new(tmp.path(), tmp.path());
        for n in (0..nodes).chain([0]) {
            let out = replay(&mock, request(&format!("n{n}"), None)).await;
            match out.last().unwrap() {
                Ok(AgentMessage::Completed(r)) => assert_eq!(r.text, format!("answer {n}")),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(mock.files.lock().unwrap().len(), KEPT_FILES.get());
    }

    #[tokio::test]
    async fn replays_calls_in_order_then_names_the_missing_one() {
        let tmp = with_fixture(
            "wf",
            "writer.json",
            r#"{"calls": [
                {"output": {"text": "first", "sessionId": "s1", "usage": {"inputTokens": 1, "outputTokens": 2}},
                 "events": [{"type": "agent:start", "sessionId": "s1"}, {"type": "agent:text:delta", "content": "fir"}]},
                {"output": {"text": "second"}}
            ]}"#,
        );
        let mock = MockQuery::new(tmp.path(), tmp.path());
        let first = replay(&mock, request("writer", None)).await;
        assert!(
            matches!(&first[0], Ok(AgentMessage::Session { session_id, .. }) if session_id.as_str() == "s1")
        );
        assert!(matches!(&first[1], Ok(AgentMessage::TextDelta { content }) if content == "fir"));
        match first.last().unwrap() {
            Ok(AgentMessage::Completed(r)) => {
                assert_eq!(r.text, "first");
                assert_eq!(r.usage.output_tokens, 2);
            }
            other => panic!("{other:?}"),
        }
        let mut next = request("writer", None);
        next.call_index = 1;
        let second = replay(&mock, next.clone()).await;
        assert!(
            matches!(second.last(), Some(Ok(AgentMessage::Completed(r))) if r.text == "second")
        );
        next.call_index = 2;
        let Err(err) = mock.query(next).await else {
            panic!("third call should fail")
        };
        // The runner names the node (`node `writer` failed: ...`); the
        // error names the call and the file.
        let msg = err.to_string();
        assert!(
            msg.contains("call 2") && msg.contains("writer.json") && !msg.contains("`writer`"),
            "{msg}"
        );
    }

    /// The mock keeps no counter: the index comes with the request (the
    /// executor counts it from the run's log), so a second run, or the same
    /// run continued by another process, is served the call its log says
    /// comes next, whatever this process served before.
    #[tokio::test]
    async fn the_call_served_is_the_one_the_request_names() {
        let tmp = with_fixture(
            "wf",
            "writer.json",
            r#"{"calls": [{"output": {"text": "first"}}, {"output": {"text": "second"}}]}"#,
        );
        let mock = MockQuery::new(tmp.path(), tmp.path());
        let text = |out: &[Result<AgentMessage, QueryError>]| match out.last() {
            Some(Ok(AgentMessage::Completed(r))) => r.text.clone(),
            other => panic!("{other:?}"),
        };
        let one = request("writer", None);
        let mut two = request("writer", None);
        two.run_id = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let mut continued = one.clone();
        continued.call_index = 1;
        let first = replay(&mock, one.clone()).await;
        let other_run = replay(&mock, two).await;
        let again = replay(&mock, one).await;
        let next = replay(&mock, continued).await;
        assert_eq!(text(&first), "first");
        assert_eq!(
            text(&other_run),
            "first",
            "another run starts at its call 0"
        );
        assert_eq!(text(&again), "first", "the same index is the same call");
        assert_eq!(text(&next), "second");
    }

    /// Items of a `for_each` running at once call in any order: a
    /// recording's calls are served by node run and call within it, not by
    /// the order the node's calls arrive in.
    #[tokio::test]
    async fn a_recording_serves_each_node_run_its_own_calls_in_any_order() {
        let tmp = with_fixture(
            "wf",
            "review.json",
            r#"{"calls": [
                {"call": 0, "instance": "0#0", "instanceCall": 0, "output": {"text": "item 0"}},
                {"call": 1, "instance": "0#1", "instanceCall": 0, "output": {"text": "item 1"}},
                {"call": 2, "instance": "0#1", "instanceCall": 1, "output": {"text": "item 1 again"}}
            ]}"#,
        );
        let mock = MockQuery::new(tmp.path(), tmp.path());
        let ask = |instance: &str, k: u32, arrived: u32| {
            let mut r = request("review", None);
            r.instance = instance.into();
            r.instance_call = k;
            r.call_index = arrived;
            r
        };
        let text = |out: Vec<Result<AgentMessage, QueryError>>| match out.last() {
            Some(Ok(AgentMessage::Completed(r))) => r.text.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(text(replay(&mock, ask("0#1", 0, 0)).await), "item 1");
        assert_eq!(text(replay(&mock, ask("0#1", 1, 1)).await), "item 1 again");
        assert_eq!(text(replay(&mock, ask("0#0", 0, 2)).await), "item 0");
        let Err(err) = mock.query(ask("0#2", 0, 3)).await else {
            panic!("an item with no recorded call is served nothing")
        };
        let msg = err.to_string();
        assert!(
            msg.contains("instance 0#2") && msg.contains("review.json"),
            "{msg}"
        );
    }

    /// A changed sampling setting is another request; a recording made
    /// before sampling was hashed is checked on what it holds.
    #[tokio::test]
    async fn a_changed_temperature_is_a_mismatch_and_older_recordings_still_match() {
        let asked = request("writer", None);
        let prompt = domain::event::Prompt::Text(asked.prompt.clone());
        let input = request::request(&prompt, &asked.agent);
        let mut older = input.clone();
        older.as_object_mut().unwrap().remove("sampling");
        let entry = |input: &serde_json::Value| {
            serde_json::json!({"input": input, "requestHash": request::request_hash(input),
                "output": {"text": "ok"}})
        };
        for (recorded, temperature, fails) in [
            (&input, None, false),
            (&input, Some(0.5), true),
            (&older, Some(0.5), false),
        ] {
            let body = serde_json::json!({"calls": [entry(recorded)]}).to_string();
            let tmp = with_fixture("wf", "writer.json", &body);
            let mock = MockQuery::new(tmp.path(), tmp.path());
            let mut r = asked.clone();
            r.agent.temperature = temperature;
            match mock.query(r).await {
                Err(e) if fails => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("at /sampling/temperature recorded null sent 0.5"),
                        "{msg}"
                    );
                }
                Ok(_) if !fails => {}
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("a changed temperature was served"),
            }
        }
    }

    #[tokio::test]
    async fn missing_and_broken_files_are_clear_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let mock = MockQuery::new(tmp.path(), tmp.path().join("none"));
        let Err(err) = mock.query(request("ghost", None)).await else {
            panic!("expected an error")
        };
        assert!(err.to_string().contains("ghost.json"), "{err}");

        let tmp = with_fixture("wf", "bad.json", "{\"calls\": [ {\"output\": 3} ]}");
        let mock = MockQuery::new(tmp.path(), tmp.path());
        let Err(err) = mock.query(request("bad", None)).await else {
            panic!("expected an error")
        };
        let msg = err.to_string();
        assert!(msg.contains("bad.json") && msg.contains("line 1"), "{msg}");
    }

    #[tokio::test]
    async fn agent_fixtures_setting_is_relative_to_the_base_dir() {
        let tmp = with_fixture("fx", "a.json", r#"{"calls": [{"output": {"text": "ok"}}]}"#);
        let mock = MockQuery::new(tmp.path(), tmp.path().join("elsewhere"));
        let out = replay(&mock, request("a", Some("fx"))).await;
        assert!(matches!(out.last(), Some(Ok(AgentMessage::Completed(r))) if r.text == "ok"));
    }

    #[tokio::test]
    async fn a_recorded_error_fails_the_call() {
        let tmp = with_fixture(
            "wf",
            "a.json",
            r#"{"calls": [{"output": {"error": {"errorType": "rate_limit", "message": "slow down"}}}]}"#,
        );
        let mock = MockQuery::new(tmp.path(), tmp.path());
        let out = replay(&mock, request("a", None)).await;
        match out.last().unwrap() {
            Err(QueryError::Agent { error_type, .. }) => assert_eq!(error_type, "rate_limit"),
            other => panic!("{other:?}"),
        }
    }
}
