//! `awr serve` as the service it is for a team (docs/security.md), against
//! the real binary: HTTPS with rustls, no token or query secret in any log
//! line at any level, connections past the cap answered 503, and who did
//! what on record, from the command line too.

use std::path::Path;
use std::time::Duration;

use awr_tests::serve::Served;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::util::{Awr, awr_bin, gated};

/// A workflow whose one command step waits for `gate` to exist.
fn gated_flow(dir: &Path, gate: &Path) {
    let flow = format!(
        "name: gated\nsteps:\n  - id: wait\n    command: \"{}\"\n",
        gated(gate, "through").replace('"', "\\\"")
    );
    std::fs::write(dir.join("gated.yaml"), flow).unwrap();
}

/// The local user as the command line records it: `LOGIN@HOST`.
fn local_user() -> String {
    let login = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    format!("{}@{}", login.trim(), host.trim())
}

#[test]
fn the_command_line_records_the_local_user_as_who_started_and_commanded() {
    let awr = Awr::new();
    let gate = awr.dir.path().join("gate");
    gated_flow(awr.dir.path(), &gate);
    let mut writer = awr.spawn_run(&awr.dir.path().join("gated.yaml"));
    let run = awr.run_that_started("wait");
    let paused = awr.run(&["pause", &run]);
    assert_eq!(paused.code, 0, "{}", paused.stderr);
    let _ = writer.wait();
    let me = local_user();
    let events = awr.events(&run);
    assert_eq!(events[0]["startedBy"], me.as_str(), "{}", events[0]);
    let received: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "command:received")
        .collect();
    assert_eq!(received.len(), 1, "{events:?}");
    assert_eq!(received[0]["by"], me.as_str());
    std::fs::write(&gate, "").unwrap();
    let resumed = awr.run(&["resume", &run]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let resumed_event = awr
        .events(&run)
        .into_iter()
        .find(|e| e["type"] == "flow:resumed")
        .unwrap();
    assert_eq!(resumed_event["by"], me.as_str());
    let shown = awr.run(&["show", &run]);
    assert!(
        shown.stdout.contains(&format!(" by {me}")),
        "{}",
        shown.stdout
    );
    assert_eq!(awr.show_json(&run)["startedBy"], me.as_str());
}

/// A certificate for 127.0.0.1 and localhost, and its key, as PEM files.
fn certificate(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let pem = certified.cert.pem();
    std::fs::write(&cert, &pem).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    (cert, key, pem)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_certificate_the_server_speaks_https_only() {
    let awr = Awr::new();
    let (cert, key, pem) = certificate(awr.dir.path());
    let args = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &args);
    assert!(
        server.base.starts_with("https://127.0.0.1:"),
        "{}",
        server.base
    );
    let token = server.token.clone().unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let listed = trusting
        .get(format!("{}/workflows", server.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(
        listed.version(),
        reqwest::Version::HTTP_11,
        "ALPN offers HTTP/1.1 alone"
    );
    // A client that does not trust the certificate cannot talk to it at all.
    let _ = reqwest::Client::new()
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap_err();
    // Nor can one that speaks plain HTTP to it.
    let plain = server.base.replace("https://", "http://");
    let _ = reqwest::Client::new()
        .get(format!("{plain}/healthz"))
        .send()
        .await
        .unwrap_err();

    // A file that is no certificate is refused, naming it.
    let bad = awr.write("bad.pem", "not a certificate\n");
    let refused = awr.run(&[
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--tls-cert",
        bad.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(refused.code, 2);
    assert!(refused.stderr.contains("--tls-cert"), "{}", refused.stderr);
    assert!(refused.stderr.contains("bad.pem"), "{}", refused.stderr);
}

/// Tokens in a query string or a header reach no log line, at the most
/// verbose level, refused or let in; nor any error body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_reaches_a_log_line_or_an_error_body() {
    let awr = Awr::new();
    let token = "t0ken-the-server-knows-0123456789abcdef";
    let mut served = std::process::Command::new(awr_bin());
    served
        .arg("--storage")
        .arg(awr.storage())
        .args(["serve", "--addr", "127.0.0.1:0", "--token", token])
        .current_dir(awr.dir.path())
        .env("AWR_LOG", "trace")
        .env_remove("AWR_TOKEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = served.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, said) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let base = loop {
        let line = said.recv_timeout(Duration::from_secs(30)).unwrap();
        if let Some(address) = line.strip_prefix("awr: listening on ") {
            break address.to_owned();
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let wrong_query = "query-secret-aaaaaaaaaaaaaaaaaaaaaaaa";
    let wrong_header = "header-secret-bbbbbbbbbbbbbbbbbbbbbbb";
    let secrets = [token, wrong_query, wrong_header];
    let http = reqwest::Client::new();
    {
        let answers = [
            http.get(format!("{base}/workflows?access_token={wrong_query}")),
            http.get(format!("{base}/workflows"))
                .bearer_auth(wrong_header),
            http.get(format!("{base}/workflows?access_token={token}")),
            http.get(format!("{base}/workflows")).bearer_auth(token),
            http.get(format!("{base}/nowhere?access_token={token}&x=%ZZ")),
            http.get(format!("{base}/workflows?limit=zz&access_token={token}")),
            http.get(format!(
                "{base}/workflows/zzz/events?access_token={token}&offset=x"
            )),
        ];
        for answer in answers {
            let response = answer.send().await.unwrap();
            let body = response.text().await.unwrap();
            for secret in secrets {
                assert!(!body.contains(secret), "an answer quotes a token: {body}");
            }
        }
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let log: Vec<String> = said.try_iter().collect();
    assert!(
        log.iter().any(|l| l.contains("/workflows")),
        "the trace level logs requests: {log:?}"
    );
    for line in &log {
        for secret in secrets {
            assert!(!line.contains(secret), "a log line holds a token: {line}");
        }
    }
}

/// Past `--max-connections`, a connection is answered 503 with
/// `Retry-After`, never left to hang or crash the server; one that ends
/// gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_cap_is_answered_503() {
    let awr = Awr::new();
    let gate = awr.dir.path().join("gate");
    gated_flow(awr.dir.path(), &gate);
    let server = Served::start(
        awr_bin(),
        awr.storage(),
        awr.dir.path(),
        &["--max-connections", "1"],
    );
    let token = server.token.clone().unwrap();
    let addr = server.base.trim_start_matches("http://").to_owned();
    // The one place: a connection that holds a request open.
    let mut holding = tokio::net::TcpStream::connect(&addr).await.unwrap();
    holding
        .write_all(
            format!(
                "GET /workflows HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut head = [0u8; 12];
    holding.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let over = server
        .client()
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(over.status(), 503);
    assert_eq!(over.headers()["retry-after"], "1");
    let body: Value = serde_json::from_str(&over.text().await.unwrap()).unwrap();
    assert_eq!(body["error"], "unavailable");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("--max-connections"),
        "{body}"
    );
    drop(holding);
    // The server sees the close, and frees the place, when it next reads.
    let http = server.client();
    let url = format!("{}/healthz", server.base);
    let freed = async {
        loop {
            let response = http.get(&url).send().await.unwrap();
            if response.status() == 200 {
                break;
            }
            assert_eq!(response.status(), 503);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), freed)
        .await
        .expect("the place came free once its connection closed");
}

/// A connection that never sends a byte is closed after the head's
/// deadline, so silent connections cannot hold every place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_closed() {
    let awr = Awr::new();
    let server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), silent.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "a silent connection was held open for 30 s");
}

/// The server speaks HTTP/1.1 alone: a client that opens with HTTP/2's
/// preface (cleartext, prior knowledge) and then waits is closed within
/// the head's deadline, so it cannot hold its place for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_preface_holds_no_connection() {
    let awr = Awr::new();
    let server = Served::start(awr_bin(), awr.storage(), awr.dir.path(), &[]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut h2 = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // The preface, then an empty SETTINGS frame.
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), h2.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "an HTTP/2 preface held its connection for 30 s"
    );
    let mut partial = tokio::net::TcpStream::connect(&addr).await.unwrap();
    partial.write_all(b"PRI * HTTP/2").await.unwrap();
    let closed =
        tokio::time::timeout(Duration::from_secs(30), partial.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "half a preface held its connection for 30 s"
    );
}
