//! `awr prune`: whole finished runs go with their children; running,
//! interrupted and young runs stay; a prune killed (SIGKILL) at any point
//! leaves only runs that read as whole, and the next prune finishes the
//! job. On the file store and on SQLite.

use std::process::Stdio;
use std::sync::Arc;

use application::ports::RunStore;
use domain::{EventKind, RunId, RunSnapshot, RuntimeEvent};
use futures::StreamExt;
use infrastructure::{FileRunStore, SqliteRunStore};

use crate::util::Awr;

/// The store of `a`, opened in this process as another process would.
fn store(a: &Awr, sqlite: bool) -> Arc<dyn RunStore> {
    if sqlite {
        Arc::new(SqliteRunStore::open(a.dir.path().join("awr.db")).unwrap())
    } else {
        Arc::new(FileRunStore::open(a.storage()).unwrap())
    }
}

/// The log of `run`.
async fn log(store: &dyn RunStore, run: RunId) -> Vec<RuntimeEvent> {
    store.read(run, 0, usize::MAX).await.unwrap()
}

/// `events` (the log of another run) as the log of `run`.
fn as_run(events: &[RuntimeEvent], run: RunId) -> Vec<RuntimeEvent> {
    events
        .iter()
        .cloned()
        .map(|mut e| {
            e.run_id = run;
            e
        })
        .collect()
}

/// Adds a copy of the run `template` (its log cut to `keep` events) under
/// a new id; its snapshot is the fold of what is kept.
async fn clone_run(store: &dyn RunStore, template: &[RuntimeEvent], keep: usize) -> RunId {
    let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let events = as_run(&template[..keep], run);
    let snapshot = RunSnapshot::fold(&events).unwrap();
    let batches = futures::stream::iter(vec![Ok(events)]).boxed();
    store
        .import_run(run, batches, Some(snapshot))
        .await
        .unwrap();
    run
}

/// The ids `awr runs` lists.
fn listed(a: &Awr) -> Vec<String> {
    let out = a.run(&["runs"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.len() >= 8 && w.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
        .map(str::to_owned)
        .collect()
}

async fn prune_selects_whole_finished_trees(sqlite: bool) {
    let a = if sqlite { Awr::sqlite() } else { Awr::new() };
    let parent = a.completed_run("examples/market-brief.yaml");
    let store = store(&a, sqlite);
    let parent_id: RunId = parent.parse().unwrap();
    let child = store
        .list_runs()
        .await
        .unwrap()
        .into_iter()
        .find(|r| *r != parent_id)
        .expect("the child run");
    let parent_log = log(&*store, parent_id).await;
    // Interrupted: its log stops before its end, nobody writes it.
    let interrupted = clone_run(&*store, &parent_log, 3).await;
    // Running: the same, locked by this process.
    let running = clone_run(&*store, &parent_log, 3).await;
    let _writer = store.lock(running).await.unwrap();
    let kept = [interrupted, running];

    // Young runs stay.
    let out = a.run(&["prune", "--older-than", "1h"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "", "nothing is an hour old");
    // A dry run deletes nothing and says what would go: the tree, parent first.
    let dry = a.run(&["prune", "--older-than", "0s", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let lines: Vec<&str> = dry.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", dry.stdout);
    assert!(
        lines[0].starts_with(&format!("would delete {parent} completed")),
        "{}",
        dry.stdout
    );
    assert!(
        lines[1].contains(&format!("{child} completed"))
            && lines[1].contains(&format!("child of {parent}")),
        "{}",
        dry.stdout
    );
    assert_eq!(listed(&a).len(), 4);
    // A status filter: no failed run here.
    let failed = a.run(&["prune", "--older-than", "0s", "--status", "failed"]);
    assert_eq!(
        (failed.code, failed.stdout.as_str()),
        (0, ""),
        "{}",
        failed.stderr
    );
    let never = a.run(&["prune", "--older-than", "0s", "--status", "running"]);
    assert_eq!(never.code, 2, "{}", never.stderr);

    let out = a.run(&["prune", "--older-than", "0s"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.matches("deleted ").count(), 2, "{}", out.stdout);
    let mut left: Vec<RunId> = store.list_runs().await.unwrap();
    left.sort();
    let mut expected = kept.to_vec();
    expected.sort();
    assert_eq!(
        left, expected,
        "only the interrupted and the running run stay"
    );
    let files = if sqlite {
        a.dir.path().join("awr.db-files")
    } else {
        a.storage()
    };
    for run in [&parent, &child.to_string()] {
        assert!(
            !files
                .join("transcripts")
                .join(format!("{run}.jsonl"))
                .exists()
        );
        assert_eq!(a.run(&["show", run]).code, 2);
    }

    // A completed child whose parent is interrupted stays with its parent.
    let tree_parent = clone_run(&*store, &parent_log, 3).await;
    let tree_child = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let mut events = as_run(&parent_log, tree_child);
    if let EventKind::FlowStarted { parent_run_id, .. } = &mut events[0].kind {
        *parent_run_id = Some(tree_parent);
    }
    let snapshot = RunSnapshot::fold(&events).unwrap();
    store
        .import_run(
            tree_child,
            futures::stream::iter(vec![Ok(events)]).boxed(),
            Some(snapshot),
        )
        .await
        .unwrap();
    let out = a.run(&["prune", "--older-than", "0s"]);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{}", out.stderr);
    assert!(store.list_runs().await.unwrap().contains(&tree_child));

    // A paused child under a completed parent waits for `awr resume`: the
    // tree stays unless `paused` is asked for by name.
    let done_parent = clone_run(&*store, &parent_log, parent_log.len()).await;
    let paused_child = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let mut events = as_run(&parent_log[..3], paused_child);
    if let EventKind::FlowStarted { parent_run_id, .. } = &mut events[0].kind {
        *parent_run_id = Some(done_parent);
    }
    let mut paused = events[2].clone();
    paused.offset = paused.offset.next();
    paused.node_id = None;
    paused.node_run_id = None;
    paused.kind = EventKind::FlowPaused {
        reason: None,
        waiting: false,
    };
    events.push(paused);
    let snapshot = RunSnapshot::fold(&events).unwrap();
    store
        .import_run(
            paused_child,
            futures::stream::iter(vec![Ok(events)]).boxed(),
            Some(snapshot),
        )
        .await
        .unwrap();
    let out = a.run(&["prune", "--older-than", "0s"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stdout.contains("deleted"), "{}", out.stdout);
    assert!(store.list_runs().await.unwrap().contains(&paused_child));
    let out = a.run(&[
        "prune",
        "--older-than",
        "0s",
        "--status",
        "completed,paused",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("deleted {done_parent}")),
        "{}",
        out.stdout
    );
    assert!(!store.list_runs().await.unwrap().contains(&paused_child));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_selects_whole_finished_trees_on_files() {
    prune_selects_whole_finished_trees(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_selects_whole_finished_trees_on_sqlite() {
    prune_selects_whole_finished_trees(true).await;
}

/// Runs made for each kill.
const RUNS: usize = 24;

async fn a_killed_prune_leaves_only_whole_runs(sqlite: bool) {
    let a = if sqlite { Awr::sqlite() } else { Awr::new() };
    let template = a.completed_run("examples/fan-out.yaml");
    let store = store(&a, sqlite);
    let template_id: RunId = template.parse().unwrap();
    let template_log = log(&*store, template_id).await;
    for kill_after in [0usize, 1, 3, 7, 12, 20] {
        while store.list_runs().await.unwrap().len() < RUNS {
            clone_run(&*store, &template_log, template_log.len()).await;
        }
        let mut prune = a
            .command(&["prune", "--older-than", "0s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait until `kill_after` runs are gone (or the prune ended), then kill.
        loop {
            let gone = RUNS.saturating_sub(store.list_runs().await.unwrap().len());
            if gone >= kill_after || prune.try_wait().unwrap().is_some() {
                break;
            }
            tokio::task::yield_now().await;
        }
        prune.kill().unwrap();
        prune.wait().unwrap();

        // Every run still listed reads as whole: its log ends in its
        // terminal event, and `awr show` reads it as completed.
        for run in listed(&a) {
            let shown = a.show_json(&run);
            assert_eq!(
                shown["status"], "completed",
                "kill after {kill_after}: run {run}: {shown}"
            );
            let id: RunId = run.parse().unwrap();
            let events = log(&*store, id).await;
            assert_eq!(
                events.len(),
                template_log.len(),
                "kill after {kill_after}: run {run}"
            );
            // A snapshot, where one was saved (a run this short saves
            // none), is the fold of the log.
            if let Some(saved) = store.load_snapshot(id).await.unwrap() {
                assert_eq!(RunSnapshot::fold(&events).unwrap(), saved);
            }
        }
        // The next prune finishes the job, and leaves nothing behind.
        let out = a.run(&["prune", "--older-than", "0s"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            store.list_runs().await.unwrap().is_empty(),
            "kill after {kill_after}"
        );
        assert!(listed(&a).is_empty());
        if !sqlite {
            let left: Vec<_> = std::fs::read_dir(a.storage().join("runs"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            assert!(left.is_empty(), "kill after {kill_after}: {left:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_prune_leaves_only_whole_runs_on_files() {
    a_killed_prune_leaves_only_whole_runs(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_prune_leaves_only_whole_runs_on_sqlite() {
    a_killed_prune_leaves_only_whole_runs(true).await;
}

/// A run deleted while its files stayed (a prune killed between the two)
/// leaves a transcript without a run: a later prune removes it once it was
/// last written longer ago than the grace, and says so; a younger one stays.
async fn files_without_a_run_go_at_a_later_prune(sqlite: bool) {
    let a = if sqlite { Awr::sqlite() } else { Awr::new() };
    let old = a.completed_run("examples/summarize.yaml");
    let young = a.completed_run("examples/summarize.yaml");
    let store = store(&a, sqlite);
    for run in [&old, &young] {
        store.delete_run(run.parse().unwrap()).await.unwrap();
    }
    let files = if sqlite {
        a.dir.path().join("awr.db-files")
    } else {
        a.storage()
    };
    let transcript = |run: &str| files.join("transcripts").join(format!("{run}.jsonl"));
    assert!(transcript(&old).is_file() && transcript(&young).is_file());
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(transcript(&old))
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();

    let dry = a.run(&["prune", "--older-than", "0s", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains(&format!(
            "would remove the files of {old} (its run is gone)"
        )),
        "{}",
        dry.stdout
    );
    assert!(transcript(&old).is_file(), "a dry run removes nothing");

    let out = a.run(&["prune", "--older-than", "0s"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("removed the files of {old} (its run is gone)")),
        "{}",
        out.stdout
    );
    assert!(!transcript(&old).exists());
    assert!(
        transcript(&young).is_file(),
        "files written within the grace stay"
    );
    assert!(!out.stdout.contains(&young), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_without_a_run_go_at_a_later_prune_on_files() {
    files_without_a_run_go_at_a_later_prune(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_without_a_run_go_at_a_later_prune_on_sqlite() {
    files_without_a_run_go_at_a_later_prune(true).await;
}

/// `awr serve --retention AGE` prunes at start (then periodically): a run
/// that ended longer ago than AGE goes, with its transcript; a run still
/// being written stays, whatever its age.
#[test]
fn serve_with_retention_prunes_finished_runs_and_keeps_running_ones() {
    use awr_tests::serve::Served;

    use crate::cancel::{wait_exit, wait_for};

    for awr in [Awr::new(), Awr::sqlite()] {
        let done = awr.completed_run("examples/summarize.yaml");
        let gate = awr.dir.path().join("gate");
        let flow = awr.write(
            "gated.yaml",
            &format!(
                "name: gated\nsteps:\n  - id: wait\n    command: 'while [ ! -f {} ]; do sleep 0.02; done'\n",
                gate.display()
            ),
        );
        let mut writer = awr
            .command(&["run", flow.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(30, "the gated run's step", || {
            awr.run_ids().iter().any(|run| {
                *run != done
                    && awr
                        .events_so_far(run)
                        .iter()
                        .any(|e| e["type"] == "node:started")
            })
        });
        let live = awr.run_ids().into_iter().find(|r| *r != done).unwrap();

        let server = Served::start(
            crate::util::awr_bin(),
            awr.storage_arg(),
            awr.dir.path(),
            &["--retention", "1ms"],
        );
        wait_for(30, "the finished run to be pruned", || {
            !awr.run_ids().contains(&done)
        });
        assert_eq!(awr.run_ids(), vec![live.clone()], "the live run stays");
        drop(server);
        std::fs::write(&gate, "").unwrap();
        assert_eq!(wait_exit(&mut writer, 30, "the gated run"), 0);
        assert_eq!(awr.show_json(&live)["status"], "completed");
    }
}

/// A run the store cannot read is not deleted, and the prune says it did
/// not do all it was asked: exit 2, naming the run, the others pruned.
#[test]
fn a_run_that_cannot_be_read_fails_the_prune_naming_it() {
    let a = Awr::new();
    let good = a.completed_run("examples/summarize.yaml");
    let bad = a.completed_run("examples/summarize.yaml");
    let log = a.corrupt_log_line(&bad, 2);
    let out = a.run(&["prune", "--older-than", "0s"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("could not prune run {bad}")),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.contains(&format!("deleted {good}")),
        "{}",
        out.stdout
    );
    assert!(log.exists(), "the run that could not be read is kept");
}
