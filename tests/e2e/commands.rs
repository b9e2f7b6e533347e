//! Commands to a run from other processes (`awr send`, `reply`, `pause`,
//! `cancel`), end to end: each is recorded as `command:received` with its
//! raw payload; a message for a node run that is not in flight is refused
//! (exit 2); one for the right node run reaches its agent after its turn, in
//! the same session, and shows in the transcript as a `message.user`.
//!
//! The agent is a fake Claude Code that holds its first turn open until the
//! test lets it finish (a file appears), and answers a resumed session at once.

use std::path::PathBuf;
use std::process::{Child, Stdio};

use serde_json::{Value, json};

use crate::cancel::{wait_exit, wait_for};
use crate::util::{Awr, Output};

/// The run's prompt.
const PROMPT: &str = "Write the report.";

/// A live run of the fake agent, and where its gate and call log are.
pub(crate) struct Live {
    pub(crate) awr: Awr,
    child: Child,
    pub(crate) run: String,
    /// Created by the test to let the agent's first turn end.
    gate: PathBuf,
    /// One line per invocation of the agent: its arguments.
    calls: PathBuf,
}

impl Drop for Live {
    fn drop(&mut self) {
        // A failing test must not leave `awr run` (and its agent) behind.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = std::fs::write(&self.gate, "");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `awr run` of a one-agent workflow and waits until its agent is
/// in its first turn (`agent:start` on record).
pub(crate) fn start() -> Live {
    start_on(Awr::new())
}

/// [`start`] on the storage of `awr`.
pub(crate) fn start_on(awr: Awr) -> Live {
    let gate = awr.dir.path().join("go");
    let calls = awr.dir.path().join("calls.log");
    // `-p PROMPT ...`; `--session-id ID` for a new session, `--resume ID`
    // to continue one. Prompts here are plain text, safe inside JSON once
    // their newlines are escaped.
    let script = format!(
        r#"#!/bin/sh
prompt=$(printf '%s' "$2" | awk 'BEGIN {{ ORS = "" }} NR > 1 {{ print "\\n" }} {{ print }}')
echo "$*" >> '{calls}'
sid=""
resume=""
while [ $# -gt 0 ]; do
  case "$1" in
    --session-id) sid="$2"; shift ;;
    --resume) sid="$2"; resume=1; shift ;;
  esac
  shift
done
echo '{{"type":"system","subtype":"init","session_id":"'"$sid"'","model":"m"}}'
if [ -z "$resume" ]; then
  while [ ! -f '{gate}' ]; do sleep 0.02; done
fi
printf '%s\n' '{{"type":"result","subtype":"success","is_error":false,"result":"heard: '"$prompt"'","session_id":"'"$sid"'","num_turns":1,"duration_ms":5,"usage":{{"input_tokens":3,"output_tokens":2}}}}'
"#,
        calls = calls.display(),
        gate = gate.display(),
    );
    let flow = awr.claude_flow("commands", &script, "");
    let child = awr
        .command(&["run", flow.to_str().unwrap(), "--input-text", PROMPT])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn awr run");
    wait_for(30, "a run in the store", || !awr.run_ids().is_empty());
    let run = awr.run_ids().pop().unwrap();
    let live = Live {
        awr,
        child,
        run,
        gate,
        calls,
    };
    wait_for(30, "the agent in its turn", || {
        !live.of_type("agent:start").is_empty() && live.calls.exists()
    });
    live
}

impl Live {
    fn events(&self) -> Vec<Value> {
        self.awr.events_so_far(&self.run)
    }

    fn of_type(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    pub(crate) fn awr(&self, args: &[&str]) -> Output {
        self.awr.run_within(30, args)
    }

    /// The node run in flight, as `awr events RUN --json` shows it.
    fn node_run(&self) -> String {
        let out = self.awr(&["events", &self.run, "--json"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stdout
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["type"] == "agent:start")
            .and_then(|e| e["nodeRunId"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("no agent:start in\n{}", out.stdout))
    }

    /// Waits for `awr run` to end; its exit code and stdout, and a
    /// report for a failed assertion (its stderr and the events).
    pub(crate) fn wait(&mut self) -> (i32, String, String) {
        let code = wait_exit(&mut self.child, 30, "awr run to end");
        let mut stdout = String::new();
        std::io::Read::read_to_string(self.child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        let events: Vec<String> = self.events().iter().map(Value::to_string).collect();
        let report = format!("stderr:\n{stderr}\nevents:\n{}", events.join("\n"));
        (code, stdout, report)
    }

    /// Kills `awr run` with SIGKILL, as a crash would, and reaps it; its
    /// agent is left in its turn.
    pub(crate) fn kill_writer(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// The last `command:received`.
    fn last_command(&self) -> Value {
        self.of_type("command:received")
            .pop()
            .expect("a command:received")
    }
}

/// The offset `awr send` reports: `... at offset N)`.
fn offset_of(out: &Output) -> u64 {
    let text = format!("{}{}", out.stdout, out.stderr);
    let at = text.find("offset ").expect("an offset") + "offset ".len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn a_message_for_a_wrong_node_run_is_refused_and_one_for_the_right_one_reaches_the_agent() {
    let mut live = start();
    let run = live.run.clone();

    // A node run that does not exist: recorded, refused, exit 2.
    let stranger = "6f1c2a9e-0d3b-4c5a-8e7f-1a2b3c4d5e6f";
    let out = live.awr(&["send", &run, "--node-run", stranger, "hello?"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("rejected"), "{}", out.stderr);
    let refused = live.last_command();
    assert_eq!(refused["accepted"], false, "{refused}");
    assert_eq!(
        refused["command"],
        json!({"type": "send", "nodeRunId": stranger, "message": "hello?"}),
        "the raw payload"
    );
    assert!(
        refused["error"].as_str().unwrap().contains(stranger),
        "{refused}"
    );
    assert_eq!(offset_of(&out), refused["offset"].as_u64().unwrap());

    // No node run at all (an empty id), and one that is not an id: the same.
    for bad in ["", "not-a-node-run"] {
        let out = live.awr(&["reply", &run, "--node-run", bad, "hello?"]);
        assert_eq!(out.code, 2, "{bad:?}: {}{}", out.stdout, out.stderr);
        let refused = live.last_command();
        assert_eq!(refused["accepted"], false, "{refused}");
        assert_eq!(
            refused["command"],
            json!({"type": "reply", "nodeRunId": bad, "message": "hello?"})
        );
        assert!(refused["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    // Nothing refused waits for anyone.
    assert!(
        live.events()
            .iter()
            .all(|e| e["type"] != "agent:start" || e["inbox"].as_array().is_none_or(Vec::is_empty))
    );

    // The right one: accepted, and delivered after the turn.
    let node_run = live.node_run();
    let out = live.awr(&["send", &run, "--node-run", &node_run, "Add a summary."]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("accepted"), "{}", out.stdout);
    let sent = offset_of(&out);
    let out = live.awr(&["reply", &run, "--node-run", &node_run, "Yes, in English."]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let replied = offset_of(&out);
    let accepted = live.last_command();
    assert_eq!(accepted["accepted"], true, "{accepted}");
    assert_eq!(accepted["offset"].as_u64().unwrap(), replied);

    std::fs::write(&live.gate, "").unwrap();
    let (code, stdout, report) = live.wait();
    assert_eq!(code, 0, "the run completes: {report}");
    let expected = "Add a summary.\n\nYes, in English.";
    assert_eq!(stdout.trim(), format!("heard: {expected}"));

    let starts = live.of_type("agent:start");
    assert_eq!(starts.len(), 2, "{starts:#?}");
    let (first, second) = (&starts[0], &starts[1]);
    assert_eq!(second["nodeRunId"], node_run, "the same node run");
    assert_eq!(first["nodeRunId"], node_run);
    assert_eq!(second["prompt"], expected);
    assert_eq!(second["inbox"], json!([sent, replied]));
    assert_eq!(
        second["sessionId"], first["sessionId"],
        "the same provider session"
    );
    let calls = std::fs::read_to_string(&live.calls).unwrap();
    let session = first["sessionId"].as_str().unwrap();
    assert!(
        calls.starts_with(&format!("-p {PROMPT} "))
            && calls.contains(&format!("--session-id {session}\n-p {expected} "))
            && calls.ends_with(&format!("--resume {session}\n")),
        "the agent chose its session, then the message continued it: {calls}"
    );
    assert_eq!(live.of_type("node:completed").len(), 1);
    assert_eq!(live.events().last().unwrap()["type"], "flow:completed");

    // The transcript: the prompt, the first reply, the messages, the last reply.
    let out = live.awr(&["transcript", &run, "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let messages: Vec<(&str, String)> = lines
        .iter()
        .filter(|l| {
            l["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("message."))
        })
        .map(|l| {
            let text = l["payload"]["blocks"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (l["type"].as_str().unwrap(), text)
        })
        .collect();
    assert_eq!(
        messages,
        [
            ("message.user", PROMPT.to_owned()),
            ("message.assistant", format!("heard: {PROMPT}")),
            ("message.user", expected.to_owned()),
            ("message.assistant", format!("heard: {expected}")),
        ],
        "{}",
        out.stdout
    );
}

#[test]
fn cancel_ends_a_live_run_with_its_reason() {
    let mut live = start();
    let run = live.run.clone();
    let out = live.awr(&["cancel", &run, "--reason", "no longer needed"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (code, _, report) = live.wait();
    assert_ne!(code, 0, "a cancelled run does not succeed: {report}");
    let command = live.last_command();
    assert_eq!(command["accepted"], true);
    assert_eq!(
        command["command"],
        json!({"type": "cancel", "reason": "no longer needed"})
    );
    let last = live.events().pop().unwrap();
    assert_eq!(last["type"], "flow:cancelled", "{last}");
    assert_eq!(last["reason"], "no longer needed");
    assert_eq!(live.awr.show_json(&run)["status"], "cancelled");
}

#[test]
fn a_paused_run_exits_3_keeps_commands_and_a_cancel_ends_it() {
    let mut live = start();
    let run = live.run.clone();
    let out = live.awr(&["pause", &run]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (code, _, report) = live.wait();
    assert_eq!(code, 3, "awr run of a paused run exits 3: {report}");
    assert_eq!(live.events().last().unwrap()["type"], "flow:paused");
    assert_eq!(live.awr.show_json(&run)["status"], "paused");

    // No writer now: the command records itself, under the run's lock.
    let again = live.awr(&["pause", &run]);
    assert_eq!(again.code, 2, "{}{}", again.stdout, again.stderr);
    assert_eq!(live.last_command()["accepted"], false);
    let stranger = "6f1c2a9e-0d3b-4c5a-8e7f-1a2b3c4d5e6f";
    let out = live.awr(&["send", &run, "--node-run", stranger, "hello?"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(live.last_command()["accepted"], false);

    let out = live.awr(&["cancel", &run, "--reason", "changed my mind"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let events = live.events();
    let n = events.len();
    assert_eq!(
        events[n - 1]["type"],
        "flow:cancelled",
        "{:#?}",
        &events[n - 3..]
    );
    assert_eq!(events[n - 1]["reason"], "changed my mind");
    assert!(
        events[..n - 1]
            .iter()
            .rev()
            .find(|e| e["type"] == "command:received")
            .is_some_and(|e| e["command"]["type"] == "cancel" && e["accepted"] == true),
        "{:#?}",
        &events[n - 4..]
    );
    assert_eq!(live.awr.show_json(&run)["status"], "cancelled");
    // An ended run takes no more commands.
    let late = live.awr(&["cancel", &run]);
    assert_eq!(late.code, 2, "{}{}", late.stdout, late.stderr);
}
