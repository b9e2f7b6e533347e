//! `cargo xtask fuzz-api`: schemathesis against a live `awr serve`, driven
//! by the server's own OpenAPI description (`/openapi.json`), so a 5xx, a
//! status, content type, header or body the description does not list
//! fails CI.
//!
//! The server runs on 127.0.0.1 over a storage and a `--root` of its own
//! under `target/fuzz-api/`, with one token of every scope, and one run
//! that has ended, made over the API, for the fuzzer to aim at: a run id it
//! could not guess. Schemathesis is installed once, pinned, into a
//! virtualenv under `target/`.
//!
//! Streams: a run's event stream ends only when the run does, and a replay
//! paces the history; so the run the fuzzer aims at has ended, its replays
//! are fast (`speeds`), and the NDJSON stream is left out of the stateful
//! phase, whose sequences may pause a run (its stream then stays open, by
//! design, until a resume). Server-sent events are read up to the request
//! timeout, which schemathesis does not count as an error.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::{cargo, run, workspace_root};

/// The schemathesis release the fuzzing is pinned to.
const SCHEMATHESIS: &str = "4.32.5";

/// Test cases per operation and phase: enough to reach each route's
/// answers, within about five minutes on two cores.
const EXAMPLES: &str = "100";

/// Seconds a request may take. Streams of the ended run end at once; a
/// server-sent event stream of a run still going is cut there.
const REQUEST_TIMEOUT: &str = "5";

/// The workflow the fuzzer starts runs of, with its mock fixtures (no
/// network, no key): copied from `examples/` into the server's root.
const WORKFLOW: &str = "examples/summarize.yaml";
const FIXTURES: &str = "examples/fixtures/summarize";

/// A workflow whose runs go on for a few seconds, so that the commands of
/// the stateful phase find them running (pause, cancel, send, resume).
const SLOW: (&str, &str) = (
    "slow.yaml",
    "name: slow\nsteps:\n  - id: wait\n    command: \"sleep 3\"\n  - id: done\n    command: \"echo done\"\n",
);

/// The checks: no server error, every answer as described (status,
/// content type, headers, body), a method a path does not take answered
/// 405, and the `Allow` of that answer naming the methods the description
/// gives its path.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
    response_headers_conformance,response_schema_conformance,unsupported_method,\
    allow_header_conformance";

/// The files the page serves (`crates/cli/src/serve/ui.rs`).
const UI_FILES: [&str; 8] = [
    "index.html",
    "app.js",
    "list.js",
    "blocks.js",
    "run.js",
    "model.js",
    "util.js",
    "app.css",
];

/// Builds `awr`, serves a fresh storage, fuzzes it, stops it; fails with
/// what schemathesis found, or when the server does not stop cleanly.
pub fn fuzz_api() -> anyhow::Result<()> {
    let started = Instant::now();
    cargo(&["build", "-p", "cli", "--bin", "awr"])?;
    let target = super::target_dir()?;
    let work = target.join("fuzz-api");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("remove {}", work.display()))?;
    }
    let root = work.join("root");
    lay_out_root(&root)?;
    let token = secret()?;
    let tokens = work.join("tokens");
    write_private(&tokens, &format!("fuzz read,control,start {token}\n"))?;
    let schemathesis = install(target)?;

    let mut server = Server::start(&target.join("debug/awr"), &work, &tokens, &root)?;
    let run_id = ended_run(&server.addr, &token)?;
    let config = work.join("schemathesis.toml");
    std::fs::write(&config, settings(&token, &run_id))
        .with_context(|| format!("write {}", config.display()))?;
    let mut command = Command::new(&schemathesis);
    command
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("http://{}/openapi.json", server.addr)])
        .args(["--checks", CHECKS])
        .args(["--max-examples", EXAMPLES])
        .args(["--request-timeout", REQUEST_TIMEOUT])
        .args(["--generation-database", "none"])
        .args(["--report", "junit,har", "--report-dir", "report"])
        .arg("--no-color")
        .current_dir(&work);
    // A failing run names its seed; `AWR_FUZZ_SEED` runs it again.
    if let Ok(seed) = std::env::var("AWR_FUZZ_SEED") {
        command.args(["--seed", seed.trim()]);
    }
    let fuzzed = run(command, "schemathesis run");
    let stopped = server.stop()?;
    println!(
        "fuzz-api: {:.0} s in all; the server's log is {}",
        started.elapsed().as_secs_f64(),
        work.join("server.log").display()
    );
    fuzzed.context("schemathesis found answers the description does not allow (above)")?;
    if !stopped.success() {
        bail!("`awr serve` did not stop cleanly on SIGTERM ({stopped})");
    }
    Ok(())
}

/// The server's root: the workflow and its fixtures.
fn lay_out_root(root: &Path) -> anyhow::Result<()> {
    let source = workspace_root();
    let fixtures = root.join(FIXTURES);
    std::fs::create_dir_all(&fixtures).with_context(|| format!("create {}", fixtures.display()))?;
    std::fs::copy(source.join(WORKFLOW), root.join(WORKFLOW))
        .with_context(|| format!("copy {WORKFLOW}"))?;
    for entry in std::fs::read_dir(source.join(FIXTURES)).context(FIXTURES)? {
        let entry = entry?;
        std::fs::copy(entry.path(), fixtures.join(entry.file_name()))
            .with_context(|| format!("copy {}", entry.path().display()))?;
    }
    let (name, text) = SLOW;
    std::fs::write(root.join(name), text).with_context(|| format!("write {name}"))
}

/// A token: 128 bits from the OS, as hex.
fn secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("read /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `file`, readable by its owner alone (`awr serve --tokens`
/// refuses it otherwise).
fn write_private(file: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .with_context(|| format!("create {}", file.display()))?;
    out.write_all(text.as_bytes())
        .with_context(|| format!("write {}", file.display()))
}

/// The `schemathesis` of a virtualenv under `target/`, installed there
/// with pip the first time (the virtualenv is named after the version, so
/// a new pin installs afresh).
fn install(target: &Path) -> anyhow::Result<PathBuf> {
    let venv = target.join(format!("schemathesis-{SCHEMATHESIS}"));
    let bin = venv.join("bin/schemathesis");
    let installed = Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(SCHEMATHESIS));
    if installed {
        return Ok(bin);
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("remove {}", venv.display()))?;
    }
    let mut python = Command::new("python3");
    python.args(["-m", "venv"]).arg(&venv);
    run(python, "python3 -m venv (on Debian it needs python3-venv)")?;
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!("schemathesis=={SCHEMATHESIS}"));
    run(pip, &format!("pip install schemathesis=={SCHEMATHESIS}"))?;
    Ok(bin)
}

/// `awr serve` on a port of its own, stopped (SIGTERM) when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// Starts `awr` and waits for the address it prints on stderr; the
    /// rest of its stderr goes to `work/server.log`.
    fn start(awr: &Path, work: &Path, tokens: &Path, root: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(awr)
            .args(["serve", "--addr", "127.0.0.1:0", "--tokens"])
            .arg(tokens)
            .arg("--root")
            .arg(root)
            .arg("--storage")
            .arg(work.join("storage"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", awr.display()))?;
        let stderr = child.stderr.take().context("no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let mut log = std::fs::File::create(work.join("server.log")).context("server.log")?;
        let mut addr = None;
        for line in lines.by_ref() {
            let line = line.context("read the server's stderr")?;
            writeln!(log, "{line}").context("server.log")?;
            if let Some(bound) = line.strip_prefix("awr: listening on http://") {
                addr = Some(bound.trim().to_owned());
                break;
            }
        }
        let server = Self {
            child,
            addr: addr.unwrap_or_default(),
        };
        if server.addr.is_empty() {
            bail!(
                "`awr serve` ended without listening; see {}",
                work.join("server.log").display()
            );
        }
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
            }
        });
        Ok(server)
    }

    /// SIGTERM, then its exit status (SIGKILL after 30 s).
    fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill()?;
        Ok(self.child.wait()?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Starts the workflow over the API and waits for the run to end; its id.
fn ended_run(addr: &str, token: &str) -> anyhow::Result<String> {
    let body = json!({"path": WORKFLOW}).to_string();
    let (status, started) = request(addr, "POST", "/workflows", token, Some(&body))?;
    if status != 201 {
        bail!("POST /workflows answered {status}: {started}");
    }
    let run_id = started["runId"]
        .as_str()
        .context("POST /workflows named no runId")?
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, run) = request(addr, "GET", &format!("/workflows/{run_id}"), token, None)?;
        match run["status"].as_str() {
            Some("completed") => return Ok(run_id),
            Some("running") | None if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => bail!("the run {run_id} did not complete: {other:?}"),
        }
    }
}

/// One HTTP/1.1 request to `addr` with the bearer `token`: its status and
/// its JSON body (`null` when it has none). The server's answers here are
/// never streamed, so the body is read to the connection's end.
fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, Value)> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connect to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .with_context(|| format!("read the answer to {method} {path}"))?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{method} {path}: no status in {head:?}"))?;
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// schemathesis's settings: the token, and values it could not guess.
fn settings(token: &str, run_id: &str) -> String {
    let files: Vec<String> = UI_FILES.iter().map(|f| format!("{f:?}")).collect();
    format!(
        r#"headers = {{ Authorization = "Bearer {token}" }}

# The run that has ended: its streams end at once.
[dictionaries.runs]
values = ["{run_id}"]

[dictionaries.files]
values = [{files}]

[dictionaries.workflows]
values = ["{WORKFLOW}", "{slow}"]

[parameters]
"path.id" = {{ dictionary = "runs", probability = 1.0 }}
# A replay fast enough to end within the request timeout: a slower one
# paces the history with waits of up to 5 s, as it should. A value, not a
# dictionary, since generation does not hold to a dictionary in every phase.
"query.replay" = 100000
"path.file" = {{ dictionary = "files", probability = 0.8 }}
"body.path" = {{ dictionary = "workflows", probability = 0.5 }}

# A stateful sequence may pause a run: its NDJSON stream then stays open.
[[operations]]
include-path = "/workflows/{{id}}/events"
include-method = "GET"
phases.stateful.enabled = false
"#,
        files = files.join(", "),
        slow = SLOW.0,
    )
}
