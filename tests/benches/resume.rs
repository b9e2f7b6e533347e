//! Resuming a run: the time from `Executor::resume` to the provider call,
//! beside the raw operations it is judged against (design §11: under 1 ms).
//!
//! Set-up, outside the timing: the real executor runs a 101-node chain of
//! Claude Code agents on the real file store (default sync policy, as `awr`
//! opens it) with an agent that answers 100 calls at once and never answers
//! the 101st. Once that call is entered its run is dropped, as a killed
//! writer leaves it: 100 steps done, the last node run in flight with its
//! `node:started` and `agent:start` on record and no end, the lock free, no
//! `events.idx`, the last snapshot where the checkpoint policy left it. Each
//! iteration copies that storage afresh and opens a new store over it, as
//! `awr resume` does in a new process.
//!
//! Timed: `Executor::resume` from the call until the agent's `query` is
//! entered, on a current-thread runtime driven by `block_on` as `awr`
//! drives it. `bare` wires the store and the agent only; `as_awr` also wires what
//! `awr resume` does (transcripts, the control socket, the sweep for
//! processes a dead writer left). Every port call is timed on the way, and
//! the medians of those parts are printed after the group and written to
//! `target/criterion/resume/parts.json` for `cargo xtask bench-report`.
//! Raw references in the same run: reading the run's log file; reading and
//! parsing (as untyped JSON) its snapshot, and the log lines after it; and
//! a `write` + `fdatasync` of one line.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use awr_tests::bench::{chain, median};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapters_agents::process::OsProcesses;
use application::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, CommandReply, ControlChannel,
    ControlError, EventStream, Listener, Processes, QueryError, QueryFn, RunLock, RunStore,
    StoreError, Transcript, TranscriptError, Transcripts,
};
use application::{Cancel, Executor, RunRequest};
use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use domain::{RunId, RunSnapshot, RuntimeEvent, WorkflowDef};
use infrastructure::{FileRunStore, JsonlTranscripts, RandomIds, SystemClock, UnixControl};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

/// Steps completed before the writer dies; the chain has one node more.
const DONE: usize = 100;

/// An agent that answers `DONE` calls at once and never answers the next
/// one; `entered` is told when that call is made.
struct DiesMidCall {
    calls: AtomicUsize,
    entered: Arc<Notify>,
}

#[async_trait]
impl QueryFn for DiesMidCall {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < DONE {
            return Ok(answer(&request));
        }
        self.entered.notify_one();
        Ok(Box::pin(futures::stream::pending()))
    }
}

/// The resumed run's agent: says it was called, then never answers (the
/// resume is dropped by then).
struct Entered(Mutex<Option<oneshot::Sender<(AgentRequest, Instant)>>>);

#[async_trait]
impl QueryFn for Entered {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let at = Instant::now();
        let tell = self.0.lock().ok().and_then(|mut s| s.take());
        if let Some(tell) = tell {
            let _ = tell.send((request, at));
        }
        Ok(Box::pin(futures::stream::pending()))
    }
}

fn answer(request: &AgentRequest) -> AgentStream {
    let done = AgentMessage::Completed(AgentResult {
        text: format!("answer of {}", request.node_id),
        num_turns: 1,
        ..AgentResult::default()
    });
    Box::pin(futures::stream::iter([Ok(done)]))
}

/// Time spent in each port operation during one resume, by name; and the
/// calls in order (name, start, duration) for one resume's trace.
#[derive(Default)]
struct Parts(
    Mutex<BTreeMap<&'static str, (Duration, u32)>>,
    Mutex<Vec<(&'static str, Instant, Duration)>>,
);

impl Parts {
    fn add(&self, what: &'static str, took: Duration) {
        let now = Instant::now();
        if let Ok(mut parts) = self.0.lock() {
            let entry = parts.entry(what).or_default();
            entry.0 += took;
            entry.1 += 1;
        }
        if let Ok(mut trace) = self.1.lock() {
            trace.push((what, now - took, took));
        }
    }

    fn trace(&self) -> Vec<(&'static str, Instant, Duration)> {
        self.1
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default()
    }

    fn take(&self) -> BTreeMap<&'static str, (Duration, u32)> {
        self.0
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }
}

/// Times `body` into `parts` under `what`.
async fn timed<T>(parts: &Parts, what: &'static str, body: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let out = body.await;
    parts.add(what, start.elapsed());
    out
}

/// A store that times every call into the store it wraps.
struct TimedStore {
    inner: FileRunStore,
    parts: Arc<Parts>,
}

#[async_trait]
impl RunStore for TimedStore {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.create_run(run_id).await
    }
    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        timed(&self.parts, "store.lock", self.inner.lock(run_id)).await
    }
    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.inner.has_writer(run_id).await
    }
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        timed(
            &self.parts,
            "store.append",
            self.inner.append(run_id, events),
        )
        .await
    }
    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        timed(&self.parts, "store.flush", self.inner.flush(run_id)).await
    }
    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        timed(
            &self.parts,
            "store.read",
            self.inner.read(run_id, after, limit),
        )
        .await
    }
    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        timed(
            &self.parts,
            "store.last_offset",
            self.inner.last_offset(run_id),
        )
        .await
    }
    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.inner.follow(run_id, after).await
    }
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        timed(
            &self.parts,
            "store.save_snapshot",
            self.inner.save_snapshot(snapshot),
        )
        .await
    }
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        timed(
            &self.parts,
            "store.load_snapshot",
            self.inner.load_snapshot(run_id),
        )
        .await
    }
    async fn save_definition(
        &self,
        definition: &domain::definition::Definition,
    ) -> Result<String, StoreError> {
        self.inner.save_definition(definition).await
    }
    async fn load_definition(
        &self,
        hash: &str,
    ) -> Result<Option<domain::definition::Definition>, StoreError> {
        self.inner.load_definition(hash).await
    }
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner.list_runs().await
    }
    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.delete_run(run_id).await
    }
    async fn import_run(
        &self,
        run_id: RunId,
        events: application::ports::EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.inner.import_run(run_id, events, snapshot).await
    }
}

/// The process sweep `awr` wires, timed.
struct TimedProcesses(Arc<Parts>);

impl Processes for TimedProcesses {
    fn kill_group(&self, pid: u32, start_time: u64) -> bool {
        let start = Instant::now();
        let killed = OsProcesses.kill_group(pid, start_time);
        self.0.add("processes.kill_group", start.elapsed());
        killed
    }
    fn kill_run(&self, run_id: RunId) -> usize {
        let start = Instant::now();
        let found = OsProcesses.kill_run(run_id);
        self.0.add("processes.kill_run", start.elapsed());
        found
    }
}

/// Transcripts, their opening timed.
struct TimedTranscripts(JsonlTranscripts, Arc<Parts>);

#[async_trait]
impl Transcripts for TimedTranscripts {
    async fn open(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<dyn Transcript>, TranscriptError> {
        timed(
            &self.1,
            "transcripts.open",
            self.0.open(run_id, parent_run_id),
        )
        .await
    }
}

/// The control socket, its opening timed.
struct TimedControl(UnixControl, Arc<Parts>);

#[async_trait]
impl ControlChannel for TimedControl {
    async fn listen(&self, run_id: RunId) -> Result<Listener, ControlError> {
        timed(&self.1, "control.listen", self.0.listen(run_id)).await
    }
    async fn deliver(
        &self,
        run_id: RunId,
        raw: &Value,
        by: Option<domain::Caller>,
    ) -> Result<CommandReply, ControlError> {
        self.0.deliver(run_id, raw, by).await
    }
}

/// A storage holding one run whose writer died mid-call, as described above.
struct Interrupted {
    storage: PathBuf,
    run_id: RunId,
    workflow: Arc<WorkflowDef>,
}

fn interrupted_run(rt: &tokio::runtime::Runtime, storage: PathBuf) -> Interrupted {
    let workflow = Arc::new(chain("resume-bench", "provider: claude-code", DONE + 1));
    let store = Arc::new(FileRunStore::open(&storage).expect("store"));
    let entered = Arc::new(Notify::new());
    let agent = DiesMidCall {
        calls: AtomicUsize::new(0),
        entered: Arc::clone(&entered),
    };
    let executor = Executor::new(
        store.clone(),
        Arc::new(agent),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    )
    .with_transcripts(Arc::new(JsonlTranscripts::new(&storage)));
    let run_id = rt.block_on(executor.create()).expect("create");
    let request = RunRequest {
        workflow: Arc::clone(&workflow),
        input: json!("go"),
        source: None,
        started_by: None,
    };
    rt.block_on(async {
        let run = executor.run(run_id, request);
        tokio::select! {
            _ = run => panic!("the run ended; its last call should never answer"),
            () = entered.notified() => {}
        }
        // The run is dropped here: its node runs are aborted and its lock
        // released, as the death of its process would.
    });
    assert!(
        !rt.block_on(store.has_writer(run_id)).expect("has_writer"),
        "the dead writer's lock is still held"
    );
    Interrupted {
        storage,
        run_id,
        workflow,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
            // On disk, as the dead writer's synced log was: the resume's
            // own sync must not pay for writing the copy.
            std::fs::File::open(&target)
                .and_then(|f| f.sync_all())
                .expect("sync copy");
        }
    }
    std::fs::File::open(to)
        .and_then(|d| d.sync_all())
        .expect("sync dir");
}

/// What a resume is wired with.
#[derive(Clone, Copy)]
enum Wiring {
    /// The store and the agent.
    Bare,
    /// Also transcripts, the control socket, the process sweep, as `awr resume`.
    AsAwr,
}

/// One resume of a fresh copy of `run` under `scratch`: the time to the
/// provider call, and the request the agent got.
fn resume_once(
    rt: &tokio::runtime::Runtime,
    run: &Interrupted,
    scratch: &Path,
    wiring: Wiring,
    parts: &Arc<Parts>,
) -> (Duration, AgentRequest, Instant) {
    let _ = std::fs::remove_dir_all(scratch);
    copy_dir(&run.storage, scratch);
    let store = TimedStore {
        inner: FileRunStore::open(scratch).expect("store"),
        parts: Arc::clone(parts),
    };
    let (tell, told) = oneshot::channel();
    let mut executor = Executor::new(
        Arc::new(store),
        Arc::new(Entered(Mutex::new(Some(tell)))),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    );
    if let Wiring::AsAwr = wiring {
        executor = executor
            .with_transcripts(Arc::new(TimedTranscripts(
                JsonlTranscripts::new(scratch),
                Arc::clone(parts),
            )))
            .with_control(Arc::new(TimedControl(
                UnixControl::new(scratch.join("control")),
                Arc::clone(parts),
            )))
            .with_processes(Arc::new(TimedProcesses(Arc::clone(parts))));
    }
    parts.take();
    parts.trace();
    let workflow = Arc::clone(&run.workflow);
    rt.block_on(async {
        let start = Instant::now();
        let resume = executor.resume(run.run_id, workflow, None, None, Cancel::new());
        tokio::select! {
            biased;
            told = told => {
                let (request, at) = told.expect("the agent was called");
                (at - start, request, start)
            }
            outcome = resume => panic!("the resume ended before calling the agent: {outcome:?}"),
        }
    })
}

/// Medians of the parts of `samples`, in microseconds, with the calls per resume.
fn medians(samples: &[BTreeMap<&'static str, (Duration, u32)>]) -> BTreeMap<String, Value> {
    let mut by_part: BTreeMap<&'static str, Vec<(f64, u32)>> = BTreeMap::new();
    for sample in samples {
        for (what, (took, calls)) in sample {
            by_part
                .entry(what)
                .or_default()
                .push((took.as_secs_f64() * 1e6, *calls));
        }
    }
    by_part
        .into_iter()
        .map(|(what, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (us, calls) = v[v.len() / 2];
            (what.to_owned(), json!({ "median_us": us, "calls": calls }))
        })
        .collect()
}

fn bench_resume(c: &mut Criterion) {
    // As `awr resume` builds it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let run = interrupted_run(&rt, dir.path().join("dead"));
    let scratch = dir.path().join("s");
    let parts = Arc::new(Parts::default());

    // What the dead writer left, and what a resume writes before the call.
    let snapshot_at = rt
        .block_on(
            FileRunStore::open(&run.storage)
                .expect("store")
                .load_snapshot(run.run_id),
        )
        .expect("snapshot")
        .map_or(0, |s| s.last_offset);
    let log_path = FileRunStore::open(&run.storage)
        .expect("store")
        .run_dir(run.run_id)
        .join("events.ndjson");
    let log = std::fs::read(&log_path).expect("log");
    let lines = log.iter().filter(|b| **b == b'\n').count();
    // The trace is of a warm resume, as the timed ones are: the first
    // also starts the runtime's blocking thread and fills the page cache.
    for _ in 0..3 {
        resume_once(&rt, &run, &scratch, Wiring::AsAwr, &parts);
    }
    let (took, request, start) = resume_once(&rt, &run, &scratch, Wiring::AsAwr, &parts);
    parts.take();
    println!(
        "resume: one warm resume as awr wires it, {:.1} µs to the call:",
        took.as_secs_f64() * 1e6
    );
    for (what, at, dur) in parts.trace() {
        println!(
            "  at {:>8.1} µs  {what:<22} {:>8.1} µs",
            (at - start).as_secs_f64() * 1e6,
            dur.as_secs_f64() * 1e6
        );
    }
    let after = rt
        .block_on(
            FileRunStore::open(&scratch)
                .expect("store")
                .read(run.run_id, lines as u64, 100),
        )
        .expect("read");
    let snapshot_bytes =
        std::fs::metadata(log_path.with_file_name("snapshot.json")).map_or(0, |m| m.len());
    println!("resume: snapshot.json is {snapshot_bytes} bytes");
    let written: Vec<&str> = after.iter().map(|e| e.kind.type_name()).collect();
    println!(
        "resume: the dead writer left {lines} events ({} bytes), its last snapshot at offset {snapshot_at}; \
         a resume wrote {written:?} before calling `{}` (resuming session {:?})",
        log.len(),
        request.node_id,
        request.resume.as_ref().map(ToString::to_string),
    );

    let mut group = c.benchmark_group("resume");
    group.sample_size(50);
    for (name, wiring) in [("bare", Wiring::Bare), ("as_awr", Wiring::AsAwr)] {
        let mut samples = Vec::new();
        group.bench_function(format!("{name}_{DONE}_steps"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (took, _, _) = resume_once(&rt, &run, &scratch, wiring, &parts);
                    total += took;
                    samples.push((took, parts.take()));
                }
                total
            })
        });
        let total = median(
            &samples
                .iter()
                .map(|s| s.0.as_secs_f64() * 1e6)
                .collect::<Vec<_>>(),
        );
        let split: Vec<_> = samples.into_iter().map(|s| s.1).collect();
        let split = medians(&split);
        println!("resume/{name}: median {total:.1} µs to the provider call; medians of its parts:");
        for (what, m) in &split {
            println!(
                "  {what:<22} {:>9.1} µs  ({} call(s))",
                m["median_us"].as_f64().unwrap_or_default(),
                m["calls"]
            );
        }
        let out = awr_tests::bench::criterion_dir().join("resume");
        if std::fs::create_dir_all(&out).is_ok() {
            let body = json!({ "total_us": total, "parts": split });
            let _ = std::fs::write(out.join(format!("parts_{name}.json")), body.to_string());
        }
    }
    group.finish();

    // The raw figures a resume is judged against.
    let mut raw = c.benchmark_group("resume_raw");
    raw.sample_size(50);
    raw.bench_function("read_log", |b| {
        b.iter(|| std::fs::read(&log_path).expect("read"))
    });
    let snapshot_path = log_path.with_file_name("snapshot.json");
    raw.bench_function("read_parse_snapshot", |b| {
        b.iter(|| {
            let bytes = std::fs::read(&snapshot_path).expect("read");
            serde_json::from_slice::<Value>(&bytes).expect("parse")
        })
    });
    // The lines a resume folds: those after the snapshot's offset.
    let tail = usize::try_from(snapshot_at).expect("offset");
    raw.bench_function("read_parse_tail", |b| {
        b.iter(|| {
            let bytes = std::fs::read(&log_path).expect("read");
            bytes
                .split(|b| *b == b'\n')
                .skip(tail)
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice::<Value>(l).expect("parse"))
                .collect::<Vec<Value>>()
        })
    });
    let path = dir.path().join("raw.log");
    let mut file = awr_tests::bench::append_file(&path);
    let line = awr_tests::bench::raw_line();
    raw.bench_function("write_300B_fdatasync", |b| {
        b.iter(|| {
            file.write_all(&line).expect("write");
            file.sync_data().expect("fdatasync");
        })
    });
    raw.finish();
}

criterion_group!(benches, bench_resume);
criterion_main!(benches);
