//! Hostile input against the built binary: what an agent, a storage
//! directory or the machine can throw at `awr` must end in a clear error or
//! a truthful record, never a panic, a hang or a terminal taken over.

use std::path::Path;

use crate::util::{Awr, Output, awr_bin, repo_root, run_id_of};

/// Text an agent may return to take over a terminal: colour, a window
/// title (OSC ending in BEL), a carriage return and an erase-line, DEL and
/// a C1 control (CSI).
const EVIL: &str = "evil \u{1b}[31mRED\u{1b}]0;pwned\u{7} \r\u{1b}[2K\u{7f}\u{9b}2J end";

/// A workflow whose one mock agent answers with [`EVIL`] (`fails: true`: its
/// call fails with [`EVIL`] as the error message instead).
fn evil_flow(awr: &Awr, fails: bool) -> String {
    let output = if fails {
        serde_json::json!({"error": {"errorType": "evil", "message": EVIL}})
    } else {
        serde_json::json!({"text": EVIL})
    };
    let calls = serde_json::json!({"calls": [{"output": output}]});
    awr.write("fixtures/evil/a.json", &calls.to_string());
    awr.write(
        "flow.yaml",
        "name: evil\nagents:\n  a: {provider: mock}\nsteps: [{agent: a}]\n",
    )
    .display()
    .to_string()
}

/// Whether `text` holds a control character a terminal acts on.
fn has_terminal_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

fn assert_inert(what: &str, out: &Output) {
    assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
    for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !has_terminal_controls(text),
            "{what}: {stream} carries control characters: {text:?}"
        );
    }
}

#[test]
fn agent_text_reaches_no_terminal_as_control_characters() {
    let awr = Awr::new();
    let flow = evil_flow(&awr, false);
    let out = awr.run_in(awr.dir.path(), &[], &["run", &flow]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The run's own output is the agent's answer, byte for byte: data for a pipe.
    assert_eq!(out.stdout.trim_end(), EVIL);
    let run = run_id_of(&out);
    for args in [
        &["show", run.as_str()][..],
        &["events", &run],
        &["transcript", &run],
        &["transcript", &run, "--tree"],
    ] {
        let out = awr.run(args);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert!(out.stdout.contains("evil"), "{args:?}: {}", out.stdout);
        assert_inert(&format!("{args:?}"), &out);
    }
    // The JSON forms stay exact JSON, escapes and all.
    let snapshot = awr.show_json(&run);
    assert_eq!(snapshot["outputs"]["a"]["data"], EVIL);
}

#[test]
fn an_agent_error_reaches_no_terminal_as_control_characters() {
    let awr = Awr::new();
    let flow = evil_flow(&awr, true);
    let out = awr.run_in(awr.dir.path(), &[], &["run", &flow]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("evil"), "{}", out.stderr);
    assert_inert("awr run", &out);
    let run = run_id_of(&out);
    for args in [&["show", run.as_str()][..], &["transcript", &run]] {
        let out = awr.run(args);
        assert!(out.stdout.contains("evil"), "{args:?}: {}", out.stdout);
        assert_inert(&format!("{args:?}"), &out);
    }
}

/// A small tmpfs mounted for the life of the value (root only).
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self(dir))
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn a_full_disk_fails_the_run_truthfully_and_leaves_no_temporary_snapshot() {
    let awr = Awr::new();
    let disk = awr.dir.path().join("disk");
    let Some(_mounted) = Tmpfs::mount(&disk, "1m") else {
        awr_tests::skipped(
            "mounting a 1 MiB tmpfs needs root",
            "sudo -E cargo test -p awr-tests full_disk",
        );
        return;
    };
    let storage = disk.join("storage");
    let pad = disk.join("pad");
    // From room for the whole run down to room for almost nothing: the disk
    // fills at every step of the run in turn.
    let awr_on_disk = |args: &[&str]| {
        let mut command = std::process::Command::new(awr_bin());
        command
            .arg("--storage")
            .arg(&storage)
            .args(args)
            .current_dir(repo_root())
            .env_remove("AWR_STORAGE");
        Output::from(command.output().unwrap())
    };
    for kib in 990..=1023 {
        let _ = std::fs::remove_dir_all(&storage);
        std::fs::write(&pad, vec![0u8; kib * 1024]).ok();
        let out = awr_on_disk(&["run", "examples/summarize.yaml"]);
        assert!(
            !out.stderr.contains("panicked"),
            "{kib} KiB: {}",
            out.stderr
        );
        assert!(matches!(out.code, 0..=2), "{kib} KiB: {}", out.stderr);
        let Ok(runs) = std::fs::read_dir(storage.join("runs")) else {
            continue;
        };
        for run in runs.flatten() {
            let tmp = run.path().join("snapshot.json.tmp");
            assert!(
                !tmp.exists(),
                "{kib} KiB (exit {}): {} left behind; {}",
                out.code,
                tmp.display(),
                out.stderr
            );
        }
        if out.code != 0 {
            let listed = awr_on_disk(&["runs"]);
            assert!(
                !listed.stdout.contains("completed"),
                "{kib} KiB: a run that failed is listed as completed: {}",
                listed.stdout
            );
        }
    }
}

#[test]
fn a_relative_workdir_that_is_a_symlink_out_of_the_project_is_refused() {
    let awr = Awr::new();
    let project = awr.dir.path().join("proj");
    std::fs::create_dir_all(project.join("real")).unwrap();
    std::os::unix::fs::symlink("/", project.join("innocent")).unwrap();
    std::os::unix::fs::symlink("/etc", project.join("real/deeper")).unwrap();
    std::os::unix::fs::symlink("real", project.join("inside")).unwrap();
    let flow = |workdir: &str, extra: &str| {
        let yaml = format!(
            "name: t\nagents:\n  a: {{provider: codex, workdir: '{workdir}'{extra}}}\nsteps: [{{agent: a}}]\n"
        );
        std::fs::write(project.join("flow.yaml"), yaml).unwrap();
        awr.run_in(&project, &[], &["validate", "flow.yaml"])
    };
    for workdir in ["innocent", "real/deeper", "./innocent/tmp"] {
        let out = flow(workdir, "");
        assert_eq!(out.code, 2, "{workdir}: {}", out.stderr);
        assert!(
            out.stderr.contains("allow_outside_project"),
            "{workdir}: {}",
            out.stderr
        );
    }
    for workdir in ["inside", "real", "not-yet-made"] {
        let out = flow(workdir, "");
        assert_eq!(out.code, 0, "{workdir}: {}", out.stderr);
    }
    let out = flow("innocent", ", allow_outside_project: true");
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn a_transcript_of_another_run_is_reported_not_shown_as_this_one() {
    let awr = Awr::new();
    let first = awr.completed_run("examples/summarize.yaml");
    let second = awr.completed_run("examples/triage.yaml");
    let transcripts = awr.storage().join("transcripts");
    std::fs::copy(
        transcripts.join(format!("{second}.jsonl")),
        transcripts.join(format!("{first}.jsonl")),
    )
    .unwrap();
    for args in [
        &["transcript", first.as_str()][..],
        &["transcript", &first, "--json"],
        &["transcript", &first, "--tree"],
    ] {
        let out = awr.run(args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("belongs to run {second}")),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stdout.contains("triage"), "{args:?}: {}", out.stdout);
    }
}

/// An agent whose structured output nests deeper than the log can read
/// back fails its node, saying why; the run's log stays readable whole.
#[test]
fn structured_output_too_deep_for_the_log_fails_the_node_and_the_log_reads_back() {
    let awr = Awr::new();
    let deep = format!("{}{}", "[".repeat(127), "]".repeat(127));
    let calls = serde_json::json!({"calls": [{"output": {"text": deep}}]});
    awr.write("fixtures/deep/a.json", &calls.to_string());
    let flow = awr.write(
        "flow.yaml",
        "name: deep\nagents:\n  a: {provider: mock, output_schema: {type: array}}\nsteps: [{agent: a}]\n",
    );
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("nests arrays and objects deeper than 100 levels"),
        "{}",
        out.stderr
    );
    let run = run_id_of(&out);
    for read in [&["events", run.as_str()][..], &["show", run.as_str()]] {
        let shown = awr.run(read);
        assert_eq!(shown.code, 0, "{read:?}: {}", shown.stderr);
    }
}

/// The start of a fake Claude Code script that names `session` and prints
/// a successful result, `done`; what it does next follows.
fn answers_done(session: &str) -> String {
    format!(
        "#!/bin/sh\n\
         echo '{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"{session}\",\"model\":\"m\"}}'\n\
         echo '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\",\"num_turns\":1,\"usage\":{{\"input_tokens\":1,\"output_tokens\":2}},\"session_id\":\"{session}\"}}'\n"
    )
}

/// A CLI that exits after its result, leaving a process in a session of
/// its own that holds its output open: the run ends with the result, and
/// that process is killed when the CLI exits (it carries the start's tag),
/// so the run neither waits on the pipe nor leaves it running.
#[test]
fn a_cli_that_leaves_its_output_held_open_still_ends_with_its_result() {
    let awr = Awr::new();
    let pid = awr.dir.path().join("held.pid");
    let script = format!(
        "{}setsid sh -c 'echo $$ > \"{pid}\"; exec sleep 60' &\n\
         while [ ! -s '{pid}' ]; do sleep 0.01; done\n\
         exit 0\n",
        answers_done("s-held"),
        pid = pid.display()
    );
    let flow = awr.claude_flow("held", &script, "");
    let out = awr.run_within(30, &["run", flow.to_str().unwrap()]);
    let held = std::fs::read_to_string(&pid).unwrap_or_default();
    let _leftovers = crate::interrupted::Leftovers(vec![held.trim().to_owned()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "done");
    assert!(
        crate::cancel::gone(held.trim()),
        "the process that left the CLI's group outlived the run"
    );
    assert!(
        !out.stderr.contains("holds its output open"),
        "the run waited on the pipe: {}",
        out.stderr
    );
}

/// A CLI that prints its result, closes its output and keeps running (no
/// `timeout` set): the run ends with the result, a warning saying the CLI
/// was killed, instead of waiting on it for good.
#[test]
fn a_cli_that_closes_its_output_and_lingers_is_ended_with_its_result() {
    let awr = Awr::new();
    let pid = awr.dir.path().join("lingering.pid");
    let script = format!(
        "{}exec >&- 2>&-\n\
         echo $$ > '{pid}'\n\
         exec sleep 60\n",
        answers_done("s-linger"),
        pid = pid.display()
    );
    let flow = awr.claude_flow("linger", &script, "");
    let out = awr.run_within(40, &["run", flow.to_str().unwrap()]);
    let lingering = std::fs::read_to_string(&pid).unwrap_or_default();
    let _leftovers = crate::interrupted::Leftovers(vec![lingering.trim().to_owned()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "done");
    let run = run_id_of(&out);
    let warned = awr.events(&run).iter().any(|e| {
        e["type"] == "warning"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("after a successful result"))
    });
    assert!(warned, "the kill is said");
}

/// A run's log removed while the run is written: its writer says so and
/// exits 1, where it synced to nowhere and said `completed` (exit 0).
#[test]
fn a_log_removed_under_its_writer_is_said_and_the_run_does_not_claim_success() {
    let awr = Awr::new();
    let gate = awr.dir.path().join("gate");
    let flow = awr.write(
        "gated.yaml",
        &format!(
            "name: gated\nnodes:\n  - id: wait\n    command: \"{}\"\n  - id: after\n    command: echo after\nedges:\n  - {{from: wait, to: after}}\n",
            crate::util::gated(&gate, "ok")
        ),
    );
    let mut running = awr.spawn_run(&flow);
    let run = awr.run_that_started("wait");
    std::fs::remove_file(awr.run_dir(&run).join("events.ndjson")).unwrap();
    std::fs::write(&gate, "").unwrap();
    let code = crate::cancel::wait_exit(&mut running, 60, "the run to end");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut running.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("removed while the run was written"),
        "{stderr}"
    );
}
