//! A tiny harness so each end-to-end test reads as: a storage directory, an
//! `awr` command line, and what it must print and return.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use domain::{RunSnapshot, RuntimeEvent};
use serde_json::Value;

/// The `awr` binary, built once per test process ([`awr_tests::awr_bin`]).
pub fn awr_bin() -> &'static Path {
    awr_tests::awr_bin()
}

/// The examples that wait for a person to answer (docs/approvals.md):
/// they do not run to their end on their own, and `tests/e2e/approvals.rs`
/// answers them.
pub const WAITING_EXAMPLES: [&str; 1] = ["approval.yaml"];

/// The example workflows that run to their end on their own,
/// `examples/NAME.yaml` (relative to the repository root), in name order.
pub fn examples() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(repo_root().join("examples"))
        .expect("the examples directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| WAITING_EXAMPLES.iter().any(|w| n == *w))
        })
        .filter_map(|p| Some(format!("examples/{}", p.file_name()?.to_string_lossy())))
        .collect();
    found.sort();
    found
}

/// A shell command that waits until `gate` exists, then prints `then`.
pub fn gated(gate: &Path, then: &str) -> String {
    format!(
        "while [ ! -f '{}' ]; do sleep 0.05; done; echo {then}",
        gate.display()
    )
}

/// The repository root (where `examples/` lives).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `sh -c SCRIPT sh ARGS...` from the repository root, in a mount
/// namespace of its own (`unshare`, util-linux; the tests run as root):
/// what the script mounts is gone with it.
pub fn in_mount_namespace(script: &str, args: &[&std::ffi::OsStr]) -> Output {
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .args(args)
        .current_dir(repo_root())
        .env_remove("AWR_STORAGE")
        .stdin(Stdio::null())
        .output()
        .expect("run unshare (util-linux)");
    Output::from(out)
}

/// What a command did.
#[derive(Debug)]
pub struct Output {
    /// Exit code (-1 if killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// A scratch storage directory and a way to run `awr` against it.
pub struct Awr {
    /// Kept alive so the directory lasts as long as the test.
    pub dir: tempfile::TempDir,
    /// Whether runs are kept in a SQLite database (`sqlite:DIR/awr.db`)
    /// rather than the file store under [`Awr::storage`].
    sqlite: bool,
    /// The URL of the PostgreSQL database runs are kept in, if they are.
    postgres: Option<String>,
}

impl Awr {
    /// A fresh, empty storage directory.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            sqlite: false,
            postgres: None,
        }
    }

    /// A fresh scratch directory whose runs go to a fresh database on the
    /// test's PostgreSQL server; `None` (saying why) when there is none.
    pub fn postgres() -> Option<Self> {
        let url = crate::pg::fresh_database()?;
        Some(Self {
            postgres: Some(url),
            ..Self::new()
        })
    }

    /// The PostgreSQL database of this scratch, if its runs go to one.
    pub fn postgres_url(&self) -> Option<&str> {
        self.postgres.as_deref()
    }

    /// A fresh scratch directory whose runs go to a SQLite database in it.
    pub fn sqlite() -> Self {
        Self {
            sqlite: true,
            ..Self::new()
        }
    }

    /// The `--storage` value.
    pub fn storage_arg(&self) -> std::ffi::OsString {
        if let Some(url) = &self.postgres {
            return url.into();
        }
        if self.sqlite {
            format!("sqlite:{}", self.dir.path().join("awr.db").display()).into()
        } else {
            self.storage().into_os_string()
        }
    }

    /// The database of a SQLite scratch, if it exists yet.
    fn database(&self) -> Option<rusqlite::Connection> {
        let db = self.dir.path().join("awr.db");
        if !self.sqlite || !db.exists() {
            return None;
        }
        Some(rusqlite::Connection::open(db).expect("open the database"))
    }

    /// The JSON of a run's events in a SQLite scratch, read from its rows:
    /// none before the database exists. While a run is being polled
    /// (`settled` false), a database whose schema is still being made has
    /// none yet either; once it has settled, events that cannot be read
    /// fail the test.
    fn sqlite_events(&self, run: &str, settled: bool) -> Vec<Value> {
        let Some(db) = self.database() else {
            return Vec::new();
        };
        let stmt = db.prepare("SELECT json FROM run_events WHERE run_id = ?1 ORDER BY \"offset\"");
        let mut stmt = match stmt {
            Ok(stmt) => stmt,
            Err(e) if settled => panic!("read the events table: {e}"),
            Err(_) => return Vec::new(),
        };
        stmt.query_map([run], |r| r.get::<_, String>(0))
            .expect("query events")
            .map(|json| serde_json::from_str(&json.expect("a row")).expect("an event row"))
            .collect()
    }

    /// The storage directory.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// `awr --storage <storage> ARGS`, from the repository root, no stdin.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(awr_bin());
        command
            .arg("--storage")
            .arg(self.storage_arg())
            .args(args)
            .current_dir(repo_root())
            .env_remove("AWR_STORAGE")
            // Spans go where a test says, never to a collector of the
            // machine's.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            // This machine's files of a PostgreSQL store (transcripts,
            // control sockets) stay in the scratch directory.
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .stdin(Stdio::null());
        command
    }

    /// Runs `awr --storage <storage> ARGS` in `dir` with extra environment
    /// variables, and waits for it.
    pub fn run_in(&self, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut command = self.command(args);
        command.current_dir(dir).envs(env.iter().copied());
        Output::from(command.output().expect("run awr"))
    }

    /// `awr run FLOW` in the background: stdout dropped, stderr piped.
    pub fn spawn_run(&self, flow: &Path) -> std::process::Child {
        self.command(&["run", flow.to_str().expect("a UTF-8 path")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn awr")
    }

    /// The run whose log has started node `node`, once one has (at most
    /// 30 s), a child run's included.
    pub fn run_that_started(&self, node: &str) -> String {
        let mut found = None;
        crate::cancel::wait_for(30, &format!("node `{node}` to start"), || {
            found = self.run_ids().into_iter().find(|run| {
                self.events_so_far(run)
                    .iter()
                    .any(|e| e["type"] == "node:started" && e["nodeId"] == node)
            });
            found.is_some()
        });
        found.expect("waited for it")
    }

    /// Runs `awr --storage <storage> ARGS` and waits for it.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().expect("run awr");
        Output::from(out)
    }

    /// The run ids in the store.
    pub fn run_ids(&self) -> Vec<String> {
        if let Some(url) = &self.postgres {
            return crate::pg::strings(url, "SELECT run_id::text FROM awr_runs", None);
        }
        if self.sqlite {
            let Some(db) = self.database() else {
                return Vec::new();
            };
            // A database whose schema awr has not created yet holds no run.
            let Ok(mut stmt) = db.prepare("SELECT run_id FROM runs") else {
                return Vec::new();
            };
            return stmt
                .query_map([], |r| r.get::<_, String>(0))
                .expect("query runs")
                .map(|id| id.expect("a row"))
                .collect();
        }
        let Ok(entries) = std::fs::read_dir(self.storage().join("runs")) else {
            return Vec::new();
        };
        // A hidden entry (a deleted run's tombstone) is not a run.
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect()
    }

    /// The directory of a run.
    pub fn run_dir(&self, run: &str) -> PathBuf {
        self.storage().join("runs").join(run)
    }

    /// Writes a file under the scratch directory and returns its path.
    pub fn write(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, body).expect("write");
        path
    }
}

impl Awr {
    /// Writes an executable script under the scratch directory (a fake
    /// agent CLI) and returns its path.
    pub fn executable(&self, name: &str, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.write(name, script);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// A workflow `name` of one Claude Code agent, `coder`, whose executable
    /// is `script` (a fake CLI, written as `fake-claude`), with `settings`
    /// (YAML lines indented for the agent's mapping) as its extra settings.
    pub fn claude_flow(&self, name: &str, script: &str, settings: &str) -> PathBuf {
        let exe = self.executable("fake-claude", script);
        self.write(
            "flow.yaml",
            &format!(
                "name: {name}\nagents:\n  coder:\n    provider: claude-code\n    \
                 executable: '{}'\n{settings}steps: [{{agent: coder}}]\n",
                exe.display()
            ),
        )
    }

    /// The lines of a run's event log, as JSON; fails the test when the
    /// log is missing or a line is not JSON.
    pub fn events(&self, run: &str) -> Vec<Value> {
        if let Some(url) = &self.postgres {
            return crate::pg::events(url, run);
        }
        if self.sqlite {
            return self.sqlite_events(run, true);
        }
        read_json_lines(&self.run_dir(run).join("events.ndjson"))
    }

    /// The lines of a run's event log so far, as JSON: none while the run
    /// has no log yet (for polling a live run).
    pub fn events_so_far(&self, run: &str) -> Vec<Value> {
        if let Some(url) = &self.postgres {
            return crate::pg::events(url, run);
        }
        if self.sqlite {
            return self.sqlite_events(run, false);
        }
        let path = self.run_dir(run).join("events.ndjson");
        if path.exists() {
            read_json_lines(&path)
        } else {
            Vec::new()
        }
    }

    /// Replaces line `n` (from 0) of a run's log on the file store with
    /// text that is not JSON, as a damaged disk would; returns the log.
    pub fn corrupt_log_line(&self, run: &str, n: usize) -> PathBuf {
        let path = self.run_dir(run).join("events.ndjson");
        let text = std::fs::read_to_string(&path).expect("the log");
        let mut lines: Vec<&str> = text.lines().collect();
        lines[n] = "{ not an event";
        std::fs::write(&path, lines.join("\n") + "\n").expect("write the log");
        path
    }

    /// A run's event log, typed; fails the test on a missing log or a bad line.
    pub fn runtime_events(&self, run: &str) -> Vec<RuntimeEvent> {
        let path = self.run_dir(run).join("events.ndjson");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .lines()
            .map(|l| RuntimeEvent::from_json(l.as_bytes()).expect("an event line"))
            .collect()
    }

    /// The run's state: the fold of its log, as its `snapshot.json` would
    /// hold it (a short run on the file store saves none: readers fold).
    pub fn state(&self, run: &str) -> Value {
        let state = RunSnapshot::fold(&self.runtime_events(run)).expect("a foldable log");
        serde_json::from_slice(&state.to_json_vec().expect("a snapshot's JSON")).expect("JSON")
    }

    /// Saves the run's state as its `snapshot.json`, as a writer whose
    /// amortized rule asked for one would, and returns the file's path: for
    /// tests of what readers make of a saved snapshot.
    pub fn save_snapshot(&self, run: &str) -> PathBuf {
        let path = self.run_dir(run).join("snapshot.json");
        std::fs::write(&path, self.state(run).to_string()).expect("write snapshot.json");
        path
    }

    /// `awr show RUN --json`, parsed; fails the test unless it exits 0.
    pub fn show_json(&self, run: &str) -> Value {
        let show = self.run(&["show", run, "--json"]);
        assert_eq!(show.code, 0, "{}", show.stderr);
        serde_json::from_str(&show.stdout)
            .unwrap_or_else(|e| panic!("show --json: {e}:\n{}", show.stdout))
    }

    /// `awr run FILE`, which must complete (exit 0); its run id.
    pub fn completed_run(&self, file: &str) -> String {
        let out = self.run(&["run", file]);
        assert_eq!(out.code, 0, "awr run {file}: {}", out.stderr);
        run_id_of(&out)
    }

    /// A one-agent mock workflow whose only call fails with an `api_error`
    /// saying `slow down`, so its run fails.
    pub fn api_error_flow(&self) -> PathBuf {
        self.write(
            "fx/a.json",
            r#"{"calls": [{"output": {"error": {"errorType": "api_error", "message": "slow down"}}}]}"#,
        );
        self.write(
            "flow.yaml",
            "name: failing\nagents:\n  a: {provider: mock, fixtures: fx}\nsteps: [{agent: a}]\n",
        )
    }
}

/// The lines of a JSON Lines file; fails the test when the file is missing
/// or a line is not JSON.
pub fn read_json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

/// The events of type `kind`.
pub fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The run id `awr run` printed on stderr.
pub fn run_id_of(out: &Output) -> String {
    out.stderr
        .lines()
        .find_map(|l| l.strip_prefix("run "))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| panic!("no run id in stderr:\n{}", out.stderr))
}

impl Awr {
    /// Like [`Awr::run`], but kills the command and fails the test if it
    /// has not ended within `secs` (for commands that could wait forever).
    pub fn run_within(&self, secs: u64, args: &[&str]) -> Output {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn awr");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("`awr {}` did not end within {secs} s", args.join(" "));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Output::from(child.wait_with_output().expect("output"))
    }
}

impl From<std::process::Output> for Output {
    fn from(out: std::process::Output) -> Self {
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Starts `holder` (a `store-writer STORAGE RUN hold`), waits until it holds
/// `run`'s lock, and checks that `store` sees that writer and is refused the
/// lock; then kills it and checks that the kernel released the run.
pub async fn a_dead_holder_releases_its_run(
    store: &dyn application::ports::RunStore,
    run: domain::RunId,
    mut holder: Command,
) {
    use std::io::{BufRead, BufReader};

    use application::testing::store_conformance::assert_locked;

    let mut holder = holder
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert_eq!(said, "locked\n");
    assert!(
        store.has_writer(run).await.unwrap(),
        "another process holds it"
    );
    assert_locked(store.lock(run).await, run, "while another process holds it");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(!store.has_writer(run).await.unwrap(), "its writer died");
}
