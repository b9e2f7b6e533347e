//! How `awr` ends: exit codes, the one error line, closed pipes, colour.
//!
//! Pipes are closed before `awr` starts (the read end dropped first), so
//! every write to them fails with `EPIPE`: deterministic, no race with the
//! reader.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::util::{Awr, Output};

/// A pipe whose read end is already closed.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

/// Runs `command` to its end and returns its output.
fn output(mut command: Command) -> Output {
    Output::from(command.output().expect("run awr"))
}

/// A workflow whose only agent has no fixture file, so the run fails.
fn failing_flow(awr: &Awr) -> String {
    let flow = awr.write(
        "flow.yaml",
        "name: nofix\nagents:\n  lonely: {provider: mock, fixtures: fx}\nsteps: [{agent: lonely}]\n",
    );
    // The fixture file exists (validation checks that) but records no call,
    // so the run itself fails.
    awr.write("fx/lonely.json", r#"{"calls": []}"#);
    flow.to_str().unwrap().to_owned()
}

#[test]
fn help_and_version_exit_0_and_usage_errors_exit_2() {
    let awr = Awr::new();
    for args in [
        &["--help"][..],
        &["--version"],
        &["run", "--help"],
        &["help"],
    ] {
        let out = awr.run(args);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
    for args in [
        &[][..],
        &["frobnicate"],
        &["show"],
        &["events", "x", "--offset", "-1"],
    ] {
        assert_eq!(awr.run(args).code, 2, "{args:?}");
    }
}

/// A storage directory that cannot be opened is a storage error: exit 2,
/// one `awr:` line naming it, for every command that opens it.
#[test]
fn a_storage_that_cannot_be_opened_exits_2() {
    let awr = Awr::new();
    let file = awr.write("not-a-dir", "");
    let storage = file.to_str().unwrap();
    for args in [
        &["run", "examples/research-pipeline.yaml"][..],
        &["runs"],
        &["show", "00000000-0000-4000-8000-000000000000"],
        &["events", "00000000-0000-4000-8000-000000000000"],
    ] {
        let mut command = awr.command(args);
        command.arg("--storage").arg(storage);
        let out = output(command);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.starts_with("awr: ") && out.stderr.contains(storage),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// The cause of a failed run is printed once, on the last line, with its
/// chain; the progress lines above it name what failed without repeating it.
#[test]
fn a_failed_run_prints_its_error_once() {
    let awr = Awr::new();
    let out = awr.run(&["run", &failing_flow(&awr)]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("no fixture for call 0").count(),
        1,
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.matches("`lonely`").count(), 1, "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("awr: run ") && last.contains("node `lonely` failed: "),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("node lonely failed\n"),
        "{}",
        out.stderr
    );
}

/// `awr ... | head -0`: every command ends with exit 0 and no panic when
/// its reader has gone.
#[test]
fn every_command_ends_quietly_on_a_closed_stdout() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "examples/research-pipeline.yaml"],
        vec!["validate", "examples/research-pipeline.yaml"],
        vec!["runs"],
        vec!["show", &run],
        vec!["show", &run, "--json"],
        vec!["events", &run],
        vec!["events", &run, "--json"],
        vec!["events", &run, "--follow"],
        vec!["transcript", &run],
        vec!["transcript", &run, "--json"],
        vec!["transcript", &run, "--tree"],
        vec!["--help"],
        vec!["--version"],
    ];
    for args in cases {
        let mut command = awr.command(&args);
        command.stdout(closed_pipe());
        let out = output(command);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.stderr);
    }
}

/// `awr run ... 2>&1 | true`: progress and errors on a closed stderr neither
/// panic nor change the exit code.
#[test]
fn a_closed_stderr_changes_no_exit_code() {
    let awr = Awr::new();
    let failing = failing_flow(&awr);
    let cases: [(&[&str], i32); 4] = [
        (&["run", "examples/research-pipeline.yaml"], 0),
        (&["run", &failing], 1),
        (&["show", "nothing-like-a-run"], 2),
        (&["frobnicate"], 2),
    ];
    for (args, code) in cases {
        let mut command = awr.command(args);
        command.stdout(closed_pipe()).stderr(closed_pipe());
        assert_eq!(output(command).code, code, "{args:?}");
    }
}

/// A run whose event log has no offset index logs (at debug level) that it
/// scans the log instead: a log line to look at.
fn logging_command(awr: &Awr) -> Command {
    let run = awr.completed_run("examples/research-pipeline.yaml");
    // A short run keeps none; a longer one's is removed.
    let _ = std::fs::remove_file(awr.run_dir(&run).join("events.idx"));
    let mut command = awr.command(&["events", &run]);
    command.env("AWR_LOG", "debug").env_remove("NO_COLOR");
    command
}

#[test]
fn logs_on_a_pipe_carry_no_colour_escapes() {
    let awr = Awr::new();
    let out = output(logging_command(&awr));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("DEBUG"), "{}", out.stderr);
    assert!(!out.stderr.contains('\x1b'), "{:?}", out.stderr);
}

/// What `command` writes on stderr when stderr is a terminal (a pty).
fn stderr_on_a_terminal(mut command: Command) -> (i32, String) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("pts path"))
        .expect("open pts");
    command.stdout(Stdio::null()).stderr(Stdio::from(slave));
    let mut child = command.spawn().expect("spawn awr");
    // Only the child holds the terminal now, so reading ends when it exits.
    drop(command);
    let reader = std::thread::spawn(move || {
        let mut master = std::fs::File::from(master);
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // Linux reports EIO once the last holder of the terminal closed it.
        while let Ok(n @ 1..) = master.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let code = child.wait().expect("wait").code().unwrap_or(-1);
    (code, reader.join().expect("pty reader"))
}

/// On a terminal, logs, streamed agent text and usage errors are coloured,
/// unless `NO_COLOR` is set.
#[test]
fn no_color_turns_escapes_off_on_a_terminal() {
    let awr = Awr::new();
    let (code, coloured) = stderr_on_a_terminal(logging_command(&awr));
    assert_eq!(code, 0, "{coloured}");
    assert!(coloured.contains('\x1b'), "{coloured:?}");
    let mut command = logging_command(&awr);
    command.env("NO_COLOR", "1");
    let (code, plain) = stderr_on_a_terminal(command);
    assert_eq!(code, 0, "{plain}");
    assert!(plain.contains("DEBUG"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");

    let mut command = awr.command(&["run", "examples/research-pipeline.yaml"]);
    command.env("NO_COLOR", "1");
    let (code, progress) = stderr_on_a_terminal(command);
    assert_eq!(code, 0, "{progress}");
    assert!(progress.contains("✓ writer"), "{progress:?}");
    assert!(!progress.contains('\x1b'), "{progress:?}");

    let mut command = awr.command(&["frobnicate"]);
    command.env("NO_COLOR", "1");
    let (code, usage) = stderr_on_a_terminal(command);
    assert_eq!(code, 2, "{usage}");
    assert!(usage.contains("frobnicate"), "{usage:?}");
    assert!(!usage.contains('\x1b'), "{usage:?}");
}

/// A cause that spans lines (a CLI's stderr) still ends on one `awr:` line.
#[test]
fn an_error_is_one_line_even_when_its_cause_spans_several() {
    let awr = Awr::new();
    let flow = awr.claude_flow(
        "cli",
        "#!/bin/sh\necho 'first line' >&2\necho 'second line' >&2\nexit 3\n",
        "    system_prompt: x\n",
    );
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("awr: run ") && last.contains("first line second line"),
        "{}",
        out.stderr
    );
}
