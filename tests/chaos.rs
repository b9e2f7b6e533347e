//! Workers under chaos: 8 `awr worker` processes run 1,000 queued runs (a
//! few steps each, parallel branches and `for_each` among them) while a
//! random worker is killed with SIGKILL every 2 seconds and another
//! started, PostgreSQL is restarted once, and one worker is stopped past
//! its lease and then woken. After it every run has completed, every log is
//! gap-free and folds to its snapshot, no node run started twice under one
//! attempt, nothing was written under a stale epoch, and the woken worker's
//! attempt to go on was refused and logged.
//!
//! A test binary of its own: it restarts the suite's PostgreSQL server
//! (`AWR_TEST_POSTGRES_RESTART`, set by `cargo xtask test`), which would cut
//! the connections of any test running beside it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use application::ports::RunStore;
use domain::RunSnapshot;
use infrastructure::store::PgRunStore;

/// Runs in all.
const RUNS: usize = 1_000;
/// Workers alive at once.
const WORKERS: usize = 8;
/// Their lease: short, so the stopped worker's runs are taken over soon.
const LEASE: &str = "2s";

/// A workflow of command nodes: a step, two branches side by side, a
/// `for_each` over three items, then a join.
const CHAOS_FLOW: &str = r#"name: chaos
input: {items: [1, 2, 3]}
nodes:
  - id: first
    command: sleep 0.05; echo first
  - id: left
    command: sleep 0.1; echo left
  - id: right
    command: sleep 0.1; echo right
  - id: join
    join: all
    command: echo joined
edges:
  - {from: first, to: left}
  - {from: first, to: right}
  - {from: left, to: join}
  - {from: right, to: join}
"#;

struct Scratch {
    dir: tempfile::TempDir,
    url: String,
}

impl Scratch {
    fn awr(&self, args: &[&str]) -> Command {
        let mut command = Command::new(awr_tests::awr_bin());
        command
            .arg("--storage")
            .arg(&self.url)
            .args(args)
            .current_dir(repo_root())
            .env_remove("AWR_STORAGE")
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .stdin(Stdio::null());
        command
    }

    /// `awr worker --name NAME`, its stderr in `NAME.log`.
    fn worker(&self, name: &str) -> Worker {
        let log = self.dir.path().join(format!("{name}.log"));
        let child = self
            .awr(&[
                "worker",
                "--name",
                name,
                "--concurrency",
                "4",
                "--poll",
                "100ms",
                "--lease",
                LEASE,
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("spawn awr worker");
        Worker {
            child,
            log,
            name: name.to_owned(),
        }
    }

    fn submit(&self, flow: &str) {
        let out = self.awr(&["submit", flow]).output().expect("awr submit");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The first column of `sql`'s rows, as text; a server that is
    /// restarting is waited for (at most a minute).
    fn strings(&self, sql: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.try_strings(sql) {
                Ok(rows) => return rows,
                Err(e) => {
                    assert!(Instant::now() < deadline, "{sql}: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    fn try_strings(&self, sql: &str) -> Result<Vec<String>, tokio_postgres::Error> {
        let url = self.url.clone();
        let sql = sql.to_owned();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (client, connection) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                let rows = client.query(&sql, &[]).await?;
                Ok(rows.iter().map(|row| row.get(0)).collect())
            })
        })
        .join()
        .unwrap()
    }

    fn count(&self, sql: &str) -> u64 {
        self.strings(sql)[0].parse().unwrap()
    }
}

struct Worker {
    child: Child,
    log: PathBuf,
    name: String,
}

impl Drop for Worker {
    /// A failed assertion must not leave a worker running.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Worker {
    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A fresh database on the test server, or `None` after saying why.
fn fresh_database() -> Option<String> {
    let Ok(base) = std::env::var("AWR_TEST_POSTGRES") else {
        assert!(
            std::env::var_os("AWR_REQUIRE_POSTGRES").is_none(),
            "AWR_REQUIRE_POSTGRES is set but AWR_TEST_POSTGRES names no server"
        );
        awr_tests::skipped(
            "no PostgreSQL server (AWR_TEST_POSTGRES)",
            "cargo xtask test",
        );
        return None;
    };
    let name = format!("awr_chaos_{}", uuid::Uuid::new_v4().simple());
    let (server, _) = base.rsplit_once('/').unwrap();
    let scratch = Scratch {
        dir: tempfile::tempdir().unwrap(),
        url: base.clone(),
    };
    scratch.strings(&format!("CREATE DATABASE {name}"));
    Some(format!("{server}/{name}"))
}

/// Restarts the test server (`pg_ctl restart -m fast`), if the suite said how.
fn restart_postgres() -> bool {
    let Ok(command) = std::env::var("AWR_TEST_POSTGRES_RESTART") else {
        assert!(
            std::env::var_os("AWR_REQUIRE_POSTGRES").is_none(),
            "AWR_REQUIRE_POSTGRES is set but AWR_TEST_POSTGRES_RESTART says no way to restart it"
        );
        awr_tests::skipped(
            "the server is not restarted (AWR_TEST_POSTGRES_RESTART is not set)",
            "cargo xtask test",
        );
        return false;
    };
    let status = Command::new("sh")
        .args(["-c", &command])
        .stdout(Stdio::null())
        .status()
        .expect("restart PostgreSQL");
    assert!(status.success(), "`{command}` failed");
    true
}

#[test]
fn eight_workers_run_a_thousand_runs_through_kills_a_restart_and_a_zombie() {
    let Some(url) = fresh_database() else {
        return;
    };
    let scratch = Scratch {
        dir: tempfile::tempdir().unwrap(),
        url,
    };
    let chaos = scratch.dir.path().join("chaos.yaml");
    std::fs::write(&chaos, CHAOS_FLOW).unwrap();
    let flows = [
        chaos.to_str().unwrap().to_owned(),
        "examples/fan-out.yaml".to_owned(),
        "examples/for-each.yaml".to_owned(),
        "examples/summarize.yaml".to_owned(),
    ];
    // One submission of each, then as many again of each as make 1,000:
    // the rows are the submissions `awr submit` made, copied.
    for flow in &flows {
        scratch.submit(flow);
    }
    let copies = RUNS / flows.len() - 1;
    scratch.strings(&format!(
        "INSERT INTO awr_runs (run_id, status, submission, priority) \
         SELECT gen_random_uuid(), 'queued', r.submission, 0 \
         FROM awr_runs AS r, generate_series(1, {copies}) RETURNING 'x'"
    ));
    assert_eq!(
        scratch.count("SELECT count(*)::text FROM awr_runs WHERE status = 'queued'"),
        RUNS as u64
    );

    let mut generation = 0;
    let mut next_name = || {
        generation += 1;
        format!("w{generation}")
    };
    let mut workers: Vec<Worker> = (0..WORKERS).map(|_| scratch.worker(&next_name())).collect();
    let mut retired: Vec<Worker> = Vec::new();
    let completed =
        || scratch.count("SELECT count(*)::text FROM awr_events WHERE kind = 'flow:completed'");
    let started = Instant::now();
    let deadline = started + Duration::from_secs(900);
    let mut kills = 0;
    let mut restarted = false;
    let mut zombie: Option<(usize, Instant)> = None;
    let mut woken = None;
    let mut woken_at: Option<Instant> = None;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next_kill = started + Duration::from_secs(2);
    while completed() < RUNS as u64 {
        assert!(Instant::now() < deadline, "the runs did not all complete");
        std::thread::sleep(Duration::from_millis(100));
        let elapsed = started.elapsed();
        // One worker stopped past its lease, then woken.
        if zombie.is_none() && woken.is_none() && elapsed > Duration::from_secs(3) {
            workers[0].signal(rustix::process::Signal::STOP);
            zombie = Some((0, Instant::now()));
        }
        if let Some((at, since)) = zombie
            && since.elapsed() > Duration::from_secs(5)
        {
            workers[at].signal(rustix::process::Signal::CONT);
            woken = Some(workers[at].name.clone());
            woken_at = Some(Instant::now());
            zombie = None;
        }
        // The restart once the zombie has met the fence (or had 5 s to):
        // restarted while it is stopped, its connections are gone when it
        // wakes, and its first statement fails on them before any lease
        // is checked.
        if !restarted && let Some(name) = &woken {
            let zombie_said = (workers.iter().chain(&retired))
                .find(|w| &w.name == name)
                .is_some_and(|w| {
                    let said = w.said();
                    said.contains("lease was taken over") || said.contains("lease was lost")
                });
            if zombie_said
                || woken_at.is_some_and(|t: Instant| t.elapsed() > Duration::from_secs(5))
            {
                restart_postgres();
                restarted = true;
            }
        }
        if Instant::now() >= next_kill {
            next_kill += Duration::from_secs(2);
            // A random worker other than the zombie, killed and replaced.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut at = (seed % workers.len() as u64) as usize;
            if at == 0 && woken.is_none() {
                at = 1;
            }
            if woken.as_deref() == Some(workers[at].name.as_str()) {
                at = (at + 1) % workers.len();
            }
            let mut victim = workers.remove(at);
            victim.signal(rustix::process::Signal::KILL);
            let _ = victim.child.wait();
            retired.push(victim);
            kills += 1;
            workers.push(scratch.worker(&next_name()));
        }
    }
    let took = started.elapsed();
    for worker in &workers {
        // A process signalled before it listens for signals dies of it:
        // each is told once it has said it works.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !worker.said().contains("claiming runs") {
            assert!(Instant::now() < deadline, "{} never started", worker.name);
            std::thread::sleep(Duration::from_millis(20));
        }
        worker.signal(rustix::process::Signal::TERM);
    }
    for worker in &mut workers {
        let status = worker.child.wait().unwrap();
        assert!(
            status.success(),
            "{} exited {status}: {}",
            worker.name,
            worker.said()
        );
    }
    let takeovers = scratch.count(
        "SELECT count(*)::text FROM awr_events WHERE kind = 'flow:resumed' AND body::jsonb ? 'by'",
    );
    eprintln!(
        "chaos: {RUNS} runs by {WORKERS} workers in {:.1} s, {kills} workers killed, \
         {takeovers} runs taken over",
        took.as_secs_f64()
    );
    assert!(kills >= 5, "only {kills} kills");
    // Workers died mid-run, and others went on with their runs.
    assert!(takeovers > 0, "no run was taken over");

    // Every run completed, once.
    assert_eq!(
        scratch.count(
            "SELECT count(*)::text FROM awr_runs AS r WHERE NOT EXISTS \
             (SELECT 1 FROM awr_events AS e WHERE e.run_id = r.run_id AND e.kind = 'flow:completed')"
        ),
        0
    );
    assert_eq!(completed(), RUNS as u64);
    // No (run, node run, attempt) started twice.
    assert_eq!(
        scratch.strings(
            "SELECT run_id::text FROM awr_events WHERE kind = 'node:started' \
             GROUP BY run_id, body::jsonb->>'nodeRunId', body::jsonb->>'attempt' \
             HAVING count(*) > 1"
        ),
        Vec::<String>::new()
    );
    // Nothing written under an epoch older than one before it.
    assert_eq!(
        scratch.count(
            "SELECT count(*)::text FROM awr_events AS e WHERE e.epoch < \
             (SELECT max(p.epoch) FROM awr_events AS p \
              WHERE p.run_id = e.run_id AND p.\"offset\" < e.\"offset\")"
        ),
        0
    );
    // Gap-free logs, each folding to its snapshot.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = PgRunStore::open_existing(&scratch.url).await.unwrap();
        let runs = store.list_runs().await.unwrap();
        assert_eq!(runs.len(), RUNS);
        for run in runs {
            let log = store.read(run, 0, usize::MAX).await.unwrap();
            let offsets: Vec<u64> = log.iter().map(|e| e.offset.get()).collect();
            let expected: Vec<u64> = (1..=log.len() as u64).collect();
            assert_eq!(offsets, expected, "run {run}: a gap");
            let folded = RunSnapshot::fold(&log).unwrap();
            let saved = store.load_snapshot(run).await.unwrap().unwrap();
            assert_eq!(folded, saved, "run {run}: the snapshot is not the fold");
        }
    });
    // The zombie learned it had lost its runs, and said so.
    let woken = woken.expect("a worker was stopped and woken");
    let zombie = workers
        .iter()
        .chain(&retired)
        .find(|w| w.name == woken)
        .expect("the woken worker");
    let said = zombie.said();
    assert!(
        said.contains("lease was taken over") || said.contains("lease was lost"),
        "{said}"
    );
}
