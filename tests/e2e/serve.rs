//! `awr serve` over loopback: a real server process, real runs, reqwest
//! clients. A run streams live from its start to its terminal frame and a
//! reconnect continues it exactly; a run another `awr run` process writes
//! streams live too, and a client that leaves never cancels it; a shutdown
//! pauses the server's runs, ends open streams with their frame, exits 0,
//! and `awr resume` continues the run; a non-loopback bind needs a token.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use awr_tests::serve::Served;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::cancel::{wait_exit, wait_for};
use crate::util::{Awr, awr_bin, repo_root};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A JSON body, said to be JSON (the server refuses any other).
fn post_json(http: &reqwest::Client, url: String, body: &Value) -> reqwest::RequestBuilder {
    http.post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
}

/// A response body read a line (NDJSON) or an event (SSE) at a time.
struct Reader {
    body: futures::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buffer: Vec<u8>,
}

impl Reader {
    fn of(response: reqwest::Response) -> Self {
        Self {
            body: response.bytes_stream().boxed(),
            buffer: Vec::new(),
        }
    }

    async fn next_until(&mut self, separator: &[u8]) -> Option<String> {
        loop {
            if let Some(at) = self
                .buffer
                .windows(separator.len())
                .position(|w| w == separator)
            {
                let chunk: Vec<u8> = self.buffer.drain(..at + separator.len()).collect();
                return Some(String::from_utf8_lossy(&chunk[..at]).into_owned());
            }
            match self.body.next().await {
                Some(Ok(data)) => self.buffer.extend_from_slice(&data),
                _ => return None,
            }
        }
    }

    async fn line(&mut self) -> Option<Value> {
        let line = self.next_until(b"\n").await?;
        Some(serde_json::from_str(&line).unwrap())
    }

    async fn sse(&mut self) -> Option<String> {
        self.next_until(b"\n\n").await
    }

    /// Events (as JSON) up to the end frame, and the frame.
    async fn until_end(&mut self) -> (Vec<Value>, Option<Value>) {
        let mut events = Vec::new();
        while let Some(line) = self.line().await {
            match line["type"].as_str() {
                Some("end") => return (events, Some(line)),
                Some("heartbeat") => {}
                _ => events.push(line),
            }
        }
        (events, None)
    }
}

async fn json_of(response: reqwest::Response) -> Value {
    serde_json::from_str(&response.text().await.unwrap()).unwrap()
}

fn sse_id(event: &str) -> Option<u64> {
    event
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .map(|id| id.parse().unwrap())
}

/// A workflow whose one command step waits for `gate` to exist.
fn gated_flow(dir: &Path, gate: &Path) -> PathBuf {
    let flow = dir.join("gated.yaml");
    std::fs::write(
        &flow,
        format!(
            "name: gated\nsteps:\n  - id: wait\n    command: 'while [ ! -f {} ]; do sleep 0.02; done; echo through'\n",
            gate.display()
        ),
    )
    .unwrap();
    flow
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_live_to_its_terminal_frame_and_a_reconnect_continues_exactly() {
    streams_live_and_a_reconnect_continues_exactly(Awr::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_run_streams_live_and_a_reconnect_continues_exactly() {
    streams_live_and_a_reconnect_continues_exactly(Awr::sqlite()).await;
}

async fn streams_live_and_a_reconnect_continues_exactly(awr: Awr) {
    let server = Served::start(awr_bin(), awr.storage_arg(), &repo_root(), &[]);
    let http = server.client();
    let started = post_json(
        &http,
        format!("{}/workflows", server.base),
        &json!({"path": "examples/summarize.yaml"}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(started.status(), 201);
    let run = json_of(started).await["runId"].as_str().unwrap().to_owned();
    let events = http
        .get(format!("{}/workflows/{run}/events", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(events.headers()["content-type"], "application/x-ndjson");
    let (streamed, end) = Reader::of(events).until_end().await;
    let end = end.expect("a terminal frame");
    assert_eq!(end["status"], "completed");
    // Exactly the log, in order.
    assert_eq!(streamed, awr.events(&run));
    let last = streamed.len() as u64;
    assert_eq!(end["lastOffset"], last);

    let k = 5;
    let sse = format!("{}/workflows/{run}/events/sse?offset=0", server.base);
    let mut first = Reader::of(http.get(&sse).send().await.unwrap());
    for expected in 1..=k {
        assert_eq!(sse_id(&first.sse().await.unwrap()), Some(expected));
    }
    drop(first);
    let again = http
        .get(&sse)
        .header("Last-Event-ID", k.to_string())
        .send()
        .await
        .unwrap();
    let mut again = Reader::of(again);
    let mut ids = Vec::new();
    while let Some(event) = again.sse().await {
        match sse_id(&event) {
            Some(id) => ids.push(id),
            None => {
                assert!(event.starts_with("event: end\n"), "{event}");
                break;
            }
        }
    }
    assert_eq!(ids, (k + 1..=last).collect::<Vec<_>>());
    // Caught up with a finished run: nothing more will come.
    let done = http
        .get(&sse)
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_another_process_writes_streams_live_and_a_leaving_client_does_not_cancel_it() {
    another_process_streams_live(Awr::new()).await;
}

/// SQLite: the server sees another process's appends by polling the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_run_another_process_writes_streams_live() {
    another_process_streams_live(Awr::sqlite()).await;
}

async fn another_process_streams_live(awr: Awr) {
    let gate = awr.dir.path().join("gate");
    let flow = gated_flow(awr.dir.path(), &gate);
    let server = Served::start(awr_bin(), awr.storage_arg(), awr.dir.path(), &[]);
    let mut writer = awr
        .command(&["run", flow.to_str().unwrap()])
        .current_dir(awr.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(30, "the run's command step", || {
        awr.run_ids().first().is_some_and(|run| {
            awr.events_so_far(run)
                .iter()
                .any(|e| e["type"] == "node:started")
        })
    });
    let run = awr.run_ids().pop().unwrap();
    let http = server.client();
    let url = format!("{}/workflows/{run}/events/sse", server.base);
    // One client leaves mid-run; the other stays to the end.
    let mut leaving = Reader::of(http.get(&url).send().await.unwrap());
    assert_eq!(sse_id(&leaving.sse().await.unwrap()), Some(1));
    drop(leaving);
    let mut staying = Reader::of(http.get(&url).send().await.unwrap());
    let mut ids = Vec::new();
    let mut opened = false;
    let end = loop {
        let event = staying.sse().await.expect("the stream ends with its frame");
        if event.starts_with("event: heartbeat\n") {
            continue;
        }
        let Some(id) = sse_id(&event) else {
            break event;
        };
        ids.push(id);
        if !opened && event.contains("\"node:started\"") {
            // Live: the rest is written only now, by the other process.
            opened = true;
            std::fs::write(&gate, "").unwrap();
        }
    };
    assert!(opened);
    assert!(end.contains("\"status\":\"completed\""), "{end}");
    let last = awr.events(&run).len() as u64;
    assert_eq!(ids, (1..=last).collect::<Vec<_>>());
    assert_eq!(wait_exit(&mut writer, 30, "awr run"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_pauses_the_servers_runs_ends_streams_and_resume_continues() {
    let awr = Awr::new();
    let gate = awr.dir.path().join("gate");
    gated_flow(awr.dir.path(), &gate);
    let mut server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    let http = server.client();
    let started = post_json(
        &http,
        format!("{}/workflows", server.base),
        &json!({"path": "gated.yaml"}),
    )
    .send()
    .await
    .unwrap();
    let started = json_of(started).await;
    let run = started["runId"].as_str().unwrap().to_owned();
    let mut stream = Reader::of(
        http.get(format!("{}/workflows/{run}/events", server.base))
            .send()
            .await
            .unwrap(),
    );
    loop {
        let line = stream.line().await.unwrap();
        if line["type"] == "node:started" {
            break;
        }
    }
    let code = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    let (_, end) = stream.until_end().await;
    let end = end.expect("a terminal frame at shutdown");
    assert_eq!(end["reason"], "server shutting down");
    assert_eq!(end["status"], "paused");
    assert_eq!(code, 0, "awr serve exits 0 after a graceful shutdown");
    let kinds: Vec<Value> = awr
        .events(&run)
        .into_iter()
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(kinds.last().unwrap(), "flow:paused");
    assert_eq!(end["lastOffset"], kinds.len());
    std::fs::write(&gate, "").unwrap();
    let resumed = awr.run_in(awr.dir.path(), &[], &["resume", &run]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(awr.show_json(&run)["status"], "completed");
}

/// Without a token given, the server makes one and prints the page's
/// address with it; every request needs it. `--no-auth` is refused on an
/// address other machines reach, and warned of on loopback; a non-loopback
/// address without TLS is warned of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_makes_a_token_unless_told_and_asks_it_of_every_request() {
    let awr = Awr::new();
    let refused = awr.run(&["serve", "--addr", "0.0.0.0:0", "--no-auth"]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("--no-auth is refused"),
        "{}",
        refused.stderr
    );
    let server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    let token = server
        .token
        .clone()
        .expect("the server prints the token it made");
    assert_eq!(token.len(), 64, "256 bits as hex: {token}");
    let url = format!("{}/workflows", server.base);
    let bare = client().get(&url).send().await.unwrap();
    assert_eq!(bare.status(), 401);
    assert_eq!(json_of(bare).await["error"], "unauthorized");
    let carried = client().get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(carried.status(), 200);
    // Another start makes another token.
    let again = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    assert_ne!(again.token, server.token);

    let given = Served::start(
        awr_bin(),
        awr.storage(),
        awr.dir.path(),
        &["--token", GIVEN],
    );
    assert_eq!(given.token, None, "a token given is not printed");
    let carried = client()
        .get(url.replace(&server.base, &given.base))
        .bearer_auth(GIVEN)
        .send()
        .await
        .unwrap();
    assert_eq!(carried.status(), 200);
    // A short token is refused, from the flag or from the environment.
    let short = awr.run(&["serve", "--addr", "127.0.0.1:0", "--token", "s3cret"]);
    assert_eq!(short.code, 2, "{}", short.stderr);
    assert!(short.stderr.contains("at least 32"), "{}", short.stderr);
    let dir = awr.dir.path();
    let short = awr.run_in(
        dir,
        &[("AWR_TOKEN", "s3cret")],
        &["serve", "--addr", "127.0.0.1:0"],
    );
    assert_eq!(short.code, 2, "{}", short.stderr);

    let open = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &["--no-auth"]);
    let bare = client()
        .get(format!("{}/workflows", open.base))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 200);
    let unguarded = awr
        .command(&["serve", "--addr", "127.0.0.1:0", "--no-auth"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let said = first_lines(unguarded, 3);
    assert!(said.contains("warning: --no-auth"), "{said}");

    let everywhere = awr
        .command(&["serve", "--addr", "0.0.0.0:0", "--token", GIVEN])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let said = first_lines(everywhere, 4);
    assert!(said.contains("without TLS"), "{said}");
    assert!(
        said.contains("--token is in this process's command line"),
        "{said}"
    );
}

/// A token given to the server in the tests below: long enough.
const GIVEN: &str = "given-token-0123456789abcdef-0123456789";

/// The first `n` lines `child` prints on stderr; then it is killed.
fn first_lines(mut child: std::process::Child, n: usize) -> String {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let lines: Vec<String> = std::io::BufReader::new(stderr)
        .lines()
        .take(n)
        .map_while(Result::ok)
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    lines.join("\n")
}

/// A client that never finishes its request's head (slowloris) is cut off
/// after the head's deadline, while other clients are served meanwhile;
/// and a shutdown does not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_never_finished_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let awr = Awr::new();
    let mut server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let healthz = server
        .client()
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200, "others are served meanwhile");
    // Cut off: the read ends (a 408, then the close), where it waited for
    // as long as the client liked.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        slow.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the half-sent request was never cut off");
    let code = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    assert_eq!(code, 0);
}

/// A client that stops reading its stream (its socket full: the run's
/// history is tens of megabytes) does not hold a shutdown for the whole
/// 30 s grace: once the runs are paused, the process exits, 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_hold_a_shutdown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let awr = Awr::new();
    let big = serde_json::to_string(&"x".repeat(8_000_000)).unwrap();
    let input = awr.write("big.json", &big);
    let input = format!("@{}", input.display());
    let out = awr.run(&["run", "examples/summarize.yaml", "--input", &input]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let mut server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let token = server.token.clone().unwrap();
    let request = format!(
        "GET /workflows/{run}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    idle.write_all(request.as_bytes()).await.unwrap();
    // The stream has begun; then nothing more is read.
    let mut head = [0u8; 12];
    idle.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let started = std::time::Instant::now();
    let code = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(code, 0);
    assert!(
        took < std::time::Duration::from_secs(15),
        "the shutdown waited {took:?} on a client that does not read"
    );
    drop(idle);
}

/// An idle server exits at once on SIGTERM, even with a kept-alive
/// connection and one that has sent nothing yet: neither has anything to
/// hand over, so neither waits for the 3 s the streams get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_exits_at_once_on_sigterm() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let awr = Awr::new();
    let mut server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let token = server.token.clone().unwrap();
    let mut kept = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    kept.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let _silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let started = std::time::Instant::now();
    let code = tokio::task::spawn_blocking(move || {
        let code = server.terminate();
        (code, server.stderr.try_iter().collect::<Vec<_>>())
    })
    .await
    .unwrap();
    let took = started.elapsed();
    let (code, said) = code;
    assert_eq!(code, 0);
    assert!(
        !said.iter().any(|l| l.contains("did not take the end")),
        "{said:?}"
    );
    assert!(
        took < std::time::Duration::from_millis(2500),
        "an idle server took {took:?} to exit: it waited for a client"
    );
}
