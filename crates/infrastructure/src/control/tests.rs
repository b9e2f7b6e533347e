//! The Unix control channel against real sockets in a temporary directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::error::TryRecvError;

use super::*;
use crate::SystemClock;

fn run_id() -> RunId {
    RunId::new(uuid::Uuid::new_v4()).unwrap()
}

fn setup(config: ControlConfig) -> (tempfile::TempDir, UnixControl, RunId) {
    let tmp = tempfile::tempdir().unwrap();
    let control = UnixControl::with_config(tmp.path().join("control"), config);
    (tmp, control, run_id())
}

fn reply(offset: u64) -> CommandReply {
    CommandReply {
        accepted: true,
        offset,
        error: None,
    }
}

/// Reads until the endpoint closes; a hang is a failure, not a stuck test.
async fn read_to_end(stream: &mut UnixStream) -> String {
    let mut answer = String::new();
    let read = stream.read_to_string(&mut answer);
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the endpoint neither answered nor closed")
        .unwrap();
    answer
}

/// Connects as a foreign client, sends `bytes`, reads until the endpoint closes.
async fn raw_exchange(path: &Path, bytes: &[u8]) -> String {
    let mut stream = UnixStream::connect(path).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    read_to_end(&mut stream).await
}

/// Binds `path` itself and answers every connection with `answer`.
async fn fake_endpoint(path: &Path, answer: &'static [u8]) -> JoinHandle<()> {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (read, mut write) = stream.into_split();
            let _ = read_line(&mut BufReader::new(read), 1024).await;
            let _ = write.write_all(answer).await;
        }
    })
}

#[tokio::test]
async fn a_command_reaches_the_writer_and_its_answer_comes_back() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let mut listener = control.listen(run).await.unwrap();
    let command = json!({"type": "send", "nodeRunId": "n1", "message": "hi"});
    let writer = async {
        let d = listener.commands.recv().await.unwrap();
        assert_eq!(d.raw, command);
        d.reply
            .send(
                CommandReply {
                    accepted: false,
                    offset: 7,
                    error: Some("no such node run".into()),
                },
                &SystemClock,
            )
            .await;
    };
    let (answer, ()) = tokio::join!(control.deliver(run, &command, None), writer);
    assert_eq!(
        answer.unwrap(),
        CommandReply {
            accepted: false,
            offset: 7,
            error: Some("no such node run".into())
        }
    );
}

/// The sender's name travels with its command, and a bare line (an older
/// sender's, or one typed into the socket) is a command by nobody named.
#[tokio::test]
async fn who_sent_a_command_reaches_the_writer_with_it() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let mut listener = control.listen(run).await.unwrap();
    let pause = json!({"type": "pause"});
    let alice = domain::Caller::new("alice@host").unwrap();
    let writer = async {
        let d = listener.commands.recv().await.unwrap();
        assert_eq!(d.raw, pause, "the command as sent, not its envelope");
        assert_eq!(
            d.by.as_ref().map(domain::Caller::as_str),
            Some("alice@host")
        );
        d.reply
            .send(
                CommandReply {
                    accepted: true,
                    offset: 3,
                    error: None,
                },
                &SystemClock,
            )
            .await;
    };
    let (answer, ()) = tokio::join!(control.deliver(run, &pause, Some(alice.clone())), writer);
    assert!(answer.unwrap().accepted);

    assert_eq!(
        parse_line(br#"{"type":"pause"}"#),
        (json!({"type": "pause"}), None)
    );
    // A name no caller can have is dropped, the command kept.
    let (raw, by) = parse_line(br#"{"command":{"type":"pause"},"by":"a\nb"}"#);
    assert_eq!((raw, by), (json!({"type": "pause"}), None));
    // Another key beside `command`: not an envelope, recorded whole.
    let odd = json!({"command": 1, "type": "x"});
    assert_eq!(parse_line(odd.to_string().as_bytes()), (odd, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_clients_at_once_each_get_their_own_answer() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let mut listener = control.listen(run).await.unwrap();
    let clients: Vec<_> = (0..20u64)
        .map(|n| {
            let control = control.clone();
            tokio::spawn(async move { (n, control.deliver(run, &json!({ "n": n }), None).await) })
        })
        .collect();
    // Every command is taken before any is answered: all twenty are in flight
    // at once, none waits for another's answer.
    let mut held = Vec::new();
    while held.len() < 20 {
        held.push(listener.commands.recv().await.unwrap());
    }
    for d in held.into_iter().rev() {
        let n = d.raw["n"].as_u64().unwrap();
        d.reply.send(reply(n + 100), &SystemClock).await;
    }
    for client in clients {
        let (n, answer) = client.await.unwrap();
        assert_eq!(answer.unwrap(), reply(n + 100));
    }
}

#[tokio::test]
async fn the_socket_is_0600_in_a_0700_directory() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let _listener = control.listen(run).await.unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&control.dir), 0o700);
    assert_eq!(mode(&control.socket_path(run)), 0o600);
}

#[tokio::test]
async fn no_socket_means_no_writer() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let err = control.deliver(run, &json!({"type": "pause"}), None).await;
    assert!(
        matches!(err, Err(ControlError::NoWriter(r)) if r == run),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_stale_socket_means_no_writer_and_is_replaced_by_the_next_listener() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let path = control.socket_path(run);
    fs::create_dir_all(&control.dir).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "a dead writer leaves its socket file");

    let err = control.deliver(run, &json!({"type": "pause"}), None).await;
    assert!(matches!(err, Err(ControlError::NoWriter(_))), "{err:?}");

    let mut listener = control.listen(run).await.unwrap();
    let writer = async {
        let d = listener.commands.recv().await.unwrap();
        d.reply.send(reply(3), &SystemClock).await;
    };
    let pause = json!({"type": "pause"});
    let (answer, ()) = tokio::join!(control.deliver(run, &pause, None), writer);
    assert_eq!(answer.unwrap(), reply(3));
}

#[tokio::test]
async fn listen_leaves_a_file_that_is_not_a_socket_alone() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let path = control.socket_path(run);
    fs::create_dir_all(&control.dir).unwrap();
    fs::write(&path, "keep me").unwrap();
    let err = control.listen(run).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ControlError::Io(_)), "{text}");
    assert!(
        text.contains(&path.display().to_string()) && text.contains("not a socket"),
        "{text}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), "keep me");
}

#[tokio::test]
async fn a_line_that_is_not_json_is_delivered_as_a_string() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let mut listener = control.listen(run).await.unwrap();
    let path = control.socket_path(run);
    let writer = async {
        let d = listener.commands.recv().await.unwrap();
        assert_eq!(d.raw, Value::String("pause please".into()));
        d.reply.send(reply(5), &SystemClock).await;
    };
    let (answer, ()) = tokio::join!(raw_exchange(&path, b"pause please\r\n"), writer);
    assert_eq!(
        serde_json::from_str::<CommandReply>(&answer).unwrap(),
        reply(5)
    );
    assert!(answer.ends_with('\n'), "{answer:?}");
}

#[tokio::test]
async fn a_last_line_without_newline_is_still_a_command() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let mut listener = control.listen(run).await.unwrap();
    let path = control.socket_path(run);
    let mut stream = UnixStream::connect(&path).await.unwrap();
    stream.write_all(br#"{"type":"cancel"}"#).await.unwrap();
    stream.shutdown().await.unwrap();
    let d = listener.commands.recv().await.unwrap();
    assert_eq!(d.raw, json!({"type": "cancel"}));
    d.reply.send(reply(1), &SystemClock).await;
    let answer = read_to_end(&mut stream).await;
    assert_eq!(
        serde_json::from_str::<CommandReply>(&answer).unwrap(),
        reply(1)
    );
}

#[tokio::test]
async fn an_oversized_line_is_refused_and_never_delivered() {
    let config = ControlConfig {
        max_line: 1024,
        ..ControlConfig::default()
    };
    let (_tmp, control, run) = setup(config);
    let mut listener = control.listen(run).await.unwrap();
    let path = control.socket_path(run);

    let mut line = vec![b'x'; 2048];
    line.push(b'\n');
    let answer = raw_exchange(&path, &line).await;
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("longer than 1024 bytes"),
        "{answer}"
    );
    assert!(matches!(
        listener.commands.try_recv(),
        Err(TryRecvError::Empty)
    ));

    let big = json!({"type": "send", "message": "y".repeat(2000)});
    let err = control.deliver(run, &big, None).await.unwrap_err();
    assert!(matches!(err, ControlError::Protocol(_)), "{err}");
    assert!(err.to_string().contains("limit of 1024 bytes"), "{err}");
    assert!(matches!(
        listener.commands.try_recv(),
        Err(TryRecvError::Empty)
    ));
}

#[tokio::test]
async fn a_client_that_sends_nothing_is_dropped() {
    let config = ControlConfig {
        idle_timeout: Duration::from_millis(50),
        ..ControlConfig::default()
    };
    let (_tmp, control, run) = setup(config);
    let mut listener = control.listen(run).await.unwrap();
    let mut stream = UnixStream::connect(control.socket_path(run)).await.unwrap();
    let answer = read_to_end(&mut stream).await;
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("no command line"),
        "{answer}"
    );
    assert!(matches!(
        listener.commands.try_recv(),
        Err(TryRecvError::Empty)
    ));
}

#[tokio::test]
async fn dropping_the_listener_removes_the_socket_and_leaves_no_writer() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let listener = control.listen(run).await.unwrap();
    let path = control.socket_path(run);
    assert!(path.exists());
    drop(listener);
    assert!(!path.exists());
    let err = control.deliver(run, &json!({"type": "pause"}), None).await;
    assert!(matches!(err, Err(ControlError::NoWriter(_))), "{err:?}");
}

#[tokio::test]
async fn dropping_an_old_listener_keeps_a_newer_socket() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let old = control.listen(run).await.unwrap();
    fs::remove_file(control.socket_path(run)).unwrap();
    let mut new = control.listen(run).await.unwrap();
    drop(old);
    assert!(
        control.socket_path(run).exists(),
        "the newer socket was removed"
    );
    let writer = async {
        let d = new.commands.recv().await.unwrap();
        d.reply.send(reply(2), &SystemClock).await;
    };
    let pause = json!({"type": "pause"});
    let (answer, ()) = tokio::join!(control.deliver(run, &pause, None), writer);
    assert_eq!(answer.unwrap(), reply(2));
}

/// A writer that stops right after answering (a `pause`, then exit) must not
/// leave its client without the answer: the client would take the command as
/// undelivered and record it a second time. The writer here runs on a
/// runtime of its own that is shut down the moment the answer is handed
/// over, as a process exit would.
#[tokio::test]
async fn an_answer_is_passed_on_before_the_writer_can_exit() {
    for _ in 0..20 {
        let (_tmp, control, run) = setup(ControlConfig::default());
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let writer = {
            let control = control.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let mut listener = control.listen(run).await.unwrap();
                    ready_tx.send(()).unwrap();
                    let d = listener.commands.recv().await.unwrap();
                    d.reply.send(reply(9), &SystemClock).await;
                });
                rt.shutdown_background();
            })
        };
        ready.await.unwrap();
        let answer = control.deliver(run, &json!({"type": "pause"}), None).await;
        assert_eq!(answer.unwrap(), reply(9));
        writer.join().unwrap();
    }
}

#[tokio::test]
async fn a_dropped_reply_sender_means_no_writer() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let mut listener = control.listen(run).await.unwrap();
    let writer = async {
        let d = listener.commands.recv().await.unwrap();
        drop(d.reply);
    };
    let pause = json!({"type": "pause"});
    let (answer, ()) = tokio::join!(control.deliver(run, &pause, None), writer);
    assert!(
        matches!(answer, Err(ControlError::NoWriter(_))),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_command_still_queued_when_the_listener_drops_means_no_writer() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let listener = control.listen(run).await.unwrap();
    let client = {
        let control = control.clone();
        tokio::spawn(async move { control.deliver(run, &json!({"type": "pause"}), None).await })
    };
    while listener.commands.is_empty() {
        tokio::task::yield_now().await;
    }
    drop(listener);
    let answer = client.await.unwrap();
    assert!(
        matches!(answer, Err(ControlError::NoWriter(_))),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_writer_that_does_not_answer_in_time_is_an_io_error() {
    let config = ControlConfig {
        reply_timeout: Duration::from_millis(100),
        ..ControlConfig::default()
    };
    let (_tmp, control, run) = setup(config);
    let mut listener = control.listen(run).await.unwrap();
    let answer = control.deliver(run, &json!({"type": "pause"}), None).await;
    let held = listener.commands.try_recv().unwrap();
    let err = answer.unwrap_err();
    assert!(matches!(err, ControlError::Io(_)), "{err}");
    assert!(err.to_string().contains("no answer within"), "{err}");
    drop(held);
}

#[tokio::test]
async fn an_answer_that_is_not_a_reply_is_a_protocol_error() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let path = control.socket_path(run);
    let endpoint = fake_endpoint(&path, b"hello\n").await;
    let err = control
        .deliver(run, &json!({"type": "pause"}), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::Protocol(_)), "{err}");
    assert!(
        err.to_string().contains("not an answer: \"hello\""),
        "{err}"
    );
    endpoint.abort();
}

#[tokio::test]
async fn a_refusal_by_the_endpoint_is_a_protocol_error_naming_why() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let path = control.socket_path(run);
    let endpoint = fake_endpoint(&path, b"{\"error\":\"too slow\"}\n").await;
    let err = control
        .deliver(run, &json!({"type": "pause"}), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::Protocol(_)), "{err}");
    assert!(err.to_string().contains("refused: too slow"), "{err}");
    endpoint.abort();
}

#[tokio::test]
async fn an_answer_cut_short_is_an_io_error() {
    let (_tmp, control, run) = setup(ControlConfig::default());
    let path = control.socket_path(run);
    let endpoint = fake_endpoint(&path, b"{\"accepted\":tr").await;
    let err = control
        .deliver(run, &json!({"type": "pause"}), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::Io(_)), "{err}");
    assert!(err.to_string().contains("cut short"), "{err}");
    endpoint.abort();
}

#[tokio::test]
async fn a_path_too_long_for_a_socket_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d".repeat(120));
    let control = UnixControl::new(&dir);
    let run = run_id();
    let path = control.socket_path(run).display().to_string();
    for err in [
        control.listen(run).await.unwrap_err(),
        control
            .deliver(run, &json!({"type": "pause"}), None)
            .await
            .unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(matches!(err, ControlError::Io(_)), "{text}");
        assert!(
            text.contains(&path) && text.contains("shorter directory"),
            "{text}"
        );
    }
    assert!(
        !dir.exists(),
        "nothing is created for a path that cannot work"
    );
}
