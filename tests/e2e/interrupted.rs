//! A run whose process dies without a word (SIGKILL) is shown `interrupted`
//! by `awr runs` and `awr show`, while its log still says `running`; a
//! follower of its log ends, saying how to continue it, instead of waiting
//! forever.

use std::io::Read;
use std::process::Stdio;

use domain::RuntimeEvent;

use crate::cancel::{gone, start, wait_exit};
use crate::util::Awr;

/// Kills the agent processes the dead `awr` left behind, and a follower
/// that failed to end, however the test ends.
pub(crate) struct Leftovers(pub(crate) Vec<String>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for pid in &self.0 {
            if !gone(pid) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", pid])
                    .status();
            }
        }
    }
}

/// A run whose `awr` was killed (SIGKILL) mid-call: interrupted. What its
/// dead writer left running is killed when this is dropped.
pub(crate) struct Killed {
    /// The run's id.
    pub(crate) run: String,
    /// The run's directory.
    pub(crate) dir: std::path::PathBuf,
    _leftovers: Leftovers,
}

/// Starts a run ([`start`]) and kills its `awr` mid-call.
pub(crate) fn killed(awr: &Awr) -> Killed {
    let (mut child, dir, agent, grandchild) = start(awr);
    let leftovers = Leftovers(vec![agent, grandchild]);
    let run = dir.file_name().unwrap().to_str().unwrap().to_owned();
    child.kill().unwrap();
    child.wait().unwrap();
    Killed {
        run,
        dir,
        _leftovers: leftovers,
    }
}

#[test]
fn a_killed_run_is_shown_interrupted_and_its_followers_end() {
    let awr = Awr::new();
    let (mut child, run_dir, agent, grandchild) = start(&awr);
    let mut leftovers = Leftovers(vec![agent, grandchild]);
    let run = run_dir.file_name().unwrap().to_str().unwrap().to_owned();

    let show = awr.run(&["show", &run]);
    assert!(show.stdout.contains("status    running"), "{}", show.stdout);
    let mut follower = awr
        .command(&["events", &run, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the follower");
    leftovers.0.push(follower.id().to_string());

    child.kill().unwrap();
    child.wait().unwrap();

    let code = wait_exit(&mut follower, 20, "the follower of the dead run to end");
    let mut said = String::new();
    follower
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    let mut shown = String::new();
    follower
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("interrupted"), "{said}");
    assert!(said.contains(&format!("awr resume {run}")), "{said}");
    assert!(
        shown.contains("flow:started"),
        "the events were shown: {shown}"
    );

    // Started after the death, a follower ends too.
    let late = awr.run_within(20, &["events", &run, "--follow"]);
    assert_eq!(late.code, 0, "{}", late.stderr);
    assert!(late.stderr.contains("interrupted"), "{}", late.stderr);

    let runs = awr.run(&["runs"]);
    assert_eq!(runs.code, 0, "{}", runs.stderr);
    let row = runs.stdout.lines().find(|l| l.starts_with(&run)).unwrap();
    assert!(row.contains("interrupted"), "{row}");
    let show = awr.run(&["show", &run]);
    assert!(
        show.stdout.contains("status    interrupted"),
        "{}",
        show.stdout
    );
    let value = awr.show_json(&run);
    assert_eq!(value["status"], "interrupted", "{value}");

    // Derived, never written: the log still ends without a terminal event.
    let log = std::fs::read_to_string(run_dir.join("events.ndjson")).unwrap();
    let last: RuntimeEvent = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert!(!last.kind.is_terminal(), "{last:?}");
    assert!(!log.contains("interrupted"));
}
