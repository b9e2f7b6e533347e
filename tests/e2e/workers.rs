//! The queue and its workers on PostgreSQL: `awr submit` queues a run and
//! prints its id at once, `awr runs` lists it `queued`, `awr worker` runs
//! it; a worker killed mid-run has its run taken over by another through
//! the resume path (`flow:resumed` naming the new worker), and a worker
//! told SIGTERM hands its runs over unended and exits 0; a run waiting for
//! a person is claimed again once a deadline of it passes.

use std::process::{Child, Stdio};

use awr_tests::serve::Served;
use serde_json::{Value, json};

use crate::cancel::{wait_exit, wait_for};
use crate::util::{Awr, awr_bin, examples, gated};

/// `awr worker --name NAME` in the background, running `concurrency` runs
/// at once, looking at the queue often.
fn worker_of(awr: &Awr, name: &str, concurrency: &str) -> Worker {
    awr.command(&[
        "worker",
        "--name",
        name,
        "--poll",
        "50ms",
        "--concurrency",
        concurrency,
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn awr worker")
    .into()
}

/// An `awr worker` process, killed if the test ends before it does (a
/// failed assertion must not leave it running).
pub(crate) struct Worker(Child);

impl From<Child> for Worker {
    fn from(child: Child) -> Self {
        Self(child)
    }
}

impl std::ops::Deref for Worker {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Worker {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// [`worker_of`], two runs at once.
pub(crate) fn worker(awr: &Awr, name: &str) -> Worker {
    worker_of(awr, name, "2")
}

/// `awr submit ARGS`: the run id it printed.
pub(crate) fn submit(awr: &Awr, args: &[&str]) -> String {
    let mut all = vec!["submit"];
    all.extend_from_slice(args);
    let out = awr.run(&all);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_owned();
    assert_eq!(id.len(), 36, "a run id: {}", out.stdout);
    id
}

/// The run's events, read from its rows.
pub(crate) fn events(awr: &Awr, run: &str) -> Vec<Value> {
    crate::pg::events(awr.postgres_url().expect("a PostgreSQL scratch"), run)
}

/// The events of `run` of type `kind`.
pub(crate) fn of_type(events: &[Value], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .cloned()
        .collect()
}

/// Whether the run's log has ended with `flow:completed`.
pub(crate) fn completed(awr: &Awr, run: &str) -> bool {
    events(awr, run)
        .last()
        .is_some_and(|e| e["type"] == "flow:completed")
}

/// A workflow whose first node waits for the file `go` of the scratch.
pub(crate) fn gated_flow(awr: &Awr) -> (String, std::path::PathBuf) {
    let gate = awr.dir.path().join("go");
    let flow = awr.write(
        "gated.yaml",
        &format!(
            "name: gated\nnodes:\n  - id: wait\n    command: \"{}\"\n  - id: after\n    command: echo after\nedges:\n  - from: wait\n    to: after\n",
            gated(&gate, "opened")
        ),
    );
    (flow.to_str().expect("a UTF-8 path").to_owned(), gate)
}

/// Every event of the run was written under an epoch no older than the
/// one before it: nothing was written by a writer that had lost the run.
pub(crate) fn epochs_never_go_back(awr: &Awr, run: &str) {
    let url = awr.postgres_url().expect("a PostgreSQL scratch");
    let stale = crate::pg::strings(
        url,
        "SELECT count(*)::text FROM awr_events AS e \
         WHERE e.run_id::text = $1 AND e.epoch < (SELECT max(p.epoch) FROM awr_events AS p \
           WHERE p.run_id = e.run_id AND p.\"offset\" < e.\"offset\")",
        Some(run),
    );
    assert_eq!(stale, ["0"], "events written under a stale epoch");
}

#[test]
fn the_queue_needs_postgres_and_says_so() {
    let awr = Awr::new();
    for args in [vec!["submit", "examples/summarize.yaml"], vec!["worker"]] {
        let out = awr.run(&args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("needs the PostgreSQL store"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert!(!awr.storage().exists(), "nothing was created");
    let bad = awr.run(&["submit", "examples/summarize.yaml", "--priority", "high"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let bad = awr.run(&["submit", "examples/summarize.yaml", "--input", "{not json"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--input"), "{}", bad.stderr);
    let zero = awr.run(&["worker", "--concurrency", "0"]);
    assert_eq!(zero.code, 2, "{}", zero.stderr);
}

#[test]
fn submitted_runs_are_queued_until_a_worker_runs_them_to_their_end() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let mut runs = Vec::new();
    for example in examples() {
        runs.push(submit(&awr, &[&example]));
    }
    let urgent = submit(&awr, &["examples/summarize.yaml", "--priority", "7"]);
    runs.push(urgent.clone());
    let listed = awr.run(&["runs", "--status", "queued"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    for run in &runs {
        assert!(listed.stdout.contains(run), "{run}: {}", listed.stdout);
    }
    let shown = awr.run(&["show", &urgent]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(shown.stdout.contains("queued"), "{}", shown.stdout);

    // One at a time, so the order of their starts is the order of the claims.
    let mut working = worker_of(&awr, "w1", "1");
    wait_for(120, "every submitted run to complete", || {
        runs.iter().all(|run| completed(&awr, run))
    });
    terminate(&working);
    assert_eq!(wait_exit(&mut working, 30, "the worker to drain"), 0);

    // The highest priority went first.
    let started = |run: &str| {
        events(&awr, run)[0]["timestamp"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(runs.iter().all(|run| started(&urgent) <= started(run)));
    for run in &runs {
        let log = events(&awr, run);
        let first = &log[0];
        assert_eq!(first["type"], "flow:started", "{run}");
        assert!(first["startedBy"].is_string(), "{run}: {first}");
        assert!(first["definition"].is_string(), "{run}: {first}");
        assert!(of_type(&log, "flow:resumed").is_empty(), "{run}");
        epochs_never_go_back(&awr, run);
    }
    let listed = awr.run(&["runs", "--status", "queued"]);
    assert_eq!(listed.stdout.trim().lines().count(), 1, "{}", listed.stdout);
}

#[test]
fn a_worker_claims_a_waiting_run_once_its_deadline_passes_and_settles_it_once() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let flow = awr.write(
        "deadline.yaml",
        "name: deadline\n\
         nodes:\n\
         - {id: ask, approval: {prompt: 'Ship?', timeout: 2s, on_timeout: approve}}\n\
         - {id: ship, command: 'echo shipped'}\n\
         edges: [{from: ask, to: ship, when: 'output.approved'}]\n",
    );
    let run = submit(&awr, &[flow.to_str().unwrap()]);
    let mut working = worker(&awr, "w");
    wait_for(30, "the run to wait", || {
        awr.show_json(&run)["status"] == "waiting"
    });
    // Nothing runs it while it waits; the worker claims it again once the
    // deadline has passed, with no server watching.
    wait_for(30, "the deadline to fire", || completed(&awr, &run));
    terminate(&working);
    assert_eq!(wait_exit(&mut working, 30, "the worker to drain"), 0);
    let log = events(&awr, &run);
    let resolved = of_type(&log, "approval:resolved");
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["how"], "timed_out");
    assert_eq!(resolved[0]["approved"], true);
    assert_eq!(of_type(&log, "approval:requested").len(), 1, "asked once");
    let resumed = of_type(&log, "flow:resumed");
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0]["by"], "w");
    epochs_never_go_back(&awr, &run);
}

#[test]
fn a_run_of_a_killed_worker_is_taken_over_by_another_and_completes() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let (flow, gate) = gated_flow(&awr);
    let run = submit(&awr, &[&flow]);
    let mut first = worker(&awr, "first");
    wait_for(30, "the first worker to start the node", || {
        !of_type(&events(&awr, &run), "node:started").is_empty()
    });
    first.kill().expect("SIGKILL the first worker");
    first.wait().expect("reap it");

    let mut second = worker(&awr, "second");
    wait_for(30, "the second worker to take the run over", || {
        !of_type(&events(&awr, &run), "flow:resumed").is_empty()
    });
    std::fs::write(&gate, "").expect("open the gate");
    wait_for(30, "the run to complete", || completed(&awr, &run));
    terminate(&second);
    assert_eq!(wait_exit(&mut second, 30, "the second worker to drain"), 0);

    let log = events(&awr, &run);
    let resumed = of_type(&log, "flow:resumed");
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0]["by"], "second");
    // The node in flight ran again, as a new attempt: at least once.
    let attempts: Vec<Value> = of_type(&log, "node:started")
        .iter()
        .filter(|e| e["nodeId"] == "wait")
        .map(|e| e["attempt"].clone())
        .collect();
    assert_eq!(attempts, [1, 2]);
    epochs_never_go_back(&awr, &run);
    let shown = awr.show_json(&run);
    assert_eq!(shown["status"], "completed", "{shown}");
}

#[test]
fn sigterm_drains_a_worker_its_runs_handed_over_unended() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let (flow, gate) = gated_flow(&awr);
    let run = submit(&awr, &[&flow]);
    let mut draining = worker(&awr, "draining");
    wait_for(30, "the worker to start the node", || {
        !of_type(&events(&awr, &run), "node:started").is_empty()
    });
    terminate(&draining);
    assert_eq!(wait_exit(&mut draining, 30, "the worker to drain"), 0);
    let mut stderr = String::new();
    std::io::Read::read_to_string(draining.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("handed over"), "{stderr}");

    // Released, not failed: no end recorded, nobody writes it.
    let log = events(&awr, &run);
    let last = log.last().unwrap();
    assert!(
        !last["type"].as_str().unwrap().starts_with("flow:"),
        "{last}"
    );
    assert_eq!(awr.show_json(&run)["status"], "interrupted");
    let listed = awr.run(&["runs", "--status", "interrupted"]);
    assert!(listed.stdout.contains(&run), "{}", listed.stdout);

    let mut heir = worker(&awr, "heir");
    wait_for(30, "the heir to take the run over", || {
        !of_type(&events(&awr, &run), "flow:resumed").is_empty()
    });
    std::fs::write(&gate, "").expect("open the gate");
    wait_for(30, "the run to complete", || completed(&awr, &run));
    terminate(&heir);
    assert_eq!(wait_exit(&mut heir, 30, "the heir to drain"), 0);
    assert_eq!(
        of_type(&events(&awr, &run), "flow:resumed")[0]["by"],
        "heir"
    );
    epochs_never_go_back(&awr, &run);
}

/// The lines `child` prints on stderr, as they come.
fn lines_of(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("a piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Sends SIGTERM to `child`, as a service manager stopping it would.
pub(crate) fn terminate(child: &Child) {
    signal(child, rustix::process::Signal::TERM);
}

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, signal).expect("signal the worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_a_queue_queues_what_it_is_asked_to_start() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let root = crate::util::repo_root();
    let mut server = Served::start(awr_bin(), awr.storage_arg(), &root, &["--queue"]);
    let http = server.client();
    let post = |body: Value| {
        http.post(format!("{}/workflows", server.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let started = post(json!({"path": "examples/summarize.yaml", "priority": 3}))
        .await
        .unwrap();
    assert_eq!(started.status(), 201);
    let started: Value = serde_json::from_str(&started.text().await.unwrap()).unwrap();
    assert_eq!(started["status"], "queued", "{started}");
    let run = started["runId"].as_str().unwrap().to_owned();

    let list = http
        .get(format!("{}/workflows?status=queued", server.base))
        .send()
        .await
        .unwrap();
    let list: Value = serde_json::from_str(&list.text().await.unwrap()).unwrap();
    assert_eq!(list["runs"][0]["runId"], run.as_str(), "{list}");
    assert_eq!(list["runs"][0]["status"], "queued", "{list}");
    assert_eq!(list["counts"]["queued"], 1, "{list}");

    let mut working = worker(&awr, "behind-the-server");
    let stream = http
        .get(format!("{}/workflows/{run}/events", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let body = stream.text().await.unwrap();
    let frames: Vec<Value> = body
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let end = frames.last().unwrap();
    assert_eq!(end["status"], "completed", "{body}");
    let streamed = &frames[..frames.len() - 1];
    assert_eq!(streamed, events(&awr, &run).as_slice());
    terminate(&working);
    assert_eq!(wait_exit(&mut working, 30, "the worker to drain"), 0);
    assert_eq!(server.terminate(), 0);

    // A server that runs what it starts has no priorities.
    let plain = Served::start(awr_bin(), awr.storage_arg(), &root, &[]);
    let refused = plain
        .client()
        .post(format!("{}/workflows", plain.base))
        .header("content-type", "application/json")
        .body(json!({"path": "examples/summarize.yaml", "priority": 1}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let text = refused.text().await.unwrap();
    assert!(text.contains("--queue"), "{text}");
}

/// A worker stopped (SIGSTOP) past its lease is a zombie: another worker
/// takes its run over, and once it runs again (SIGCONT) it learns it lost
/// the run, stops it at once, and writes nothing more.
#[test]
fn a_stopped_worker_loses_its_run_and_writes_nothing_when_it_wakes() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let (flow, gate) = gated_flow(&awr);
    let run = submit(&awr, &[&flow]);
    let lease = ["--lease", "1s"];
    let spawn = |name: &str| {
        let mut args = vec!["worker", "--name", name, "--poll", "50ms"];
        args.extend_from_slice(&lease);
        Worker::from(
            awr.command(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn awr worker"),
        )
    };
    let mut zombie = spawn("zombie");
    wait_for(30, "the zombie to start the node", || {
        !of_type(&events(&awr, &run), "node:started").is_empty()
    });
    signal(&zombie, rustix::process::Signal::STOP);
    let mut heir = spawn("heir");
    wait_for(30, "the heir to take the run over", || {
        !of_type(&events(&awr, &run), "flow:resumed").is_empty()
    });
    let before = events(&awr, &run);
    let lines = lines_of(&mut zombie);
    signal(&zombie, rustix::process::Signal::CONT);
    let mut said = Vec::new();
    wait_for(30, "the zombie to learn it lost the run", || {
        said.extend(lines.try_iter());
        said.iter().any(|l| l.contains("lost to another worker"))
    });
    terminate(&zombie);
    assert_eq!(wait_exit(&mut zombie, 30, "the zombie to exit"), 0);
    // Nothing of the zombie's after the takeover: every event since is the heir's.
    let after = events(&awr, &run);
    assert_eq!(after[..before.len()], before[..]);

    std::fs::write(&gate, "").expect("open the gate");
    wait_for(30, "the run to complete", || completed(&awr, &run));
    terminate(&heir);
    assert_eq!(wait_exit(&mut heir, 30, "the heir to drain"), 0);
    let log = events(&awr, &run);
    let resumed = of_type(&log, "flow:resumed");
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0]["by"], "heir");
    epochs_never_go_back(&awr, &run);
}

/// `awr migrate` from PostgreSQL copies no queued run (a queue stays in
/// its database), says so, exits 2, and leaves the run queued for the
/// workers.
#[test]
fn a_queued_run_is_not_migrated_and_stays_queued() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let run = submit(&awr, &["examples/summarize.yaml", "--input-text", "hi"]);
    let url = awr.postgres_url().expect("a database").to_owned();
    let to = awr.dir.path().join("copy");
    let copied = awr.run(&["migrate", "--from", &url, "--to", &to.display().to_string()]);
    assert_eq!(copied.code, 2, "{}", copied.stderr);
    assert!(
        copied.stderr.contains(&run) && copied.stderr.contains("queued"),
        "{}",
        copied.stderr
    );
    assert_eq!(awr.show_json(&run)["status"], "queued");
    let _working = worker(&awr, "after-migrate");
    wait_for(120, "the queued run to complete", || completed(&awr, &run));
}
