//! Keys end to end: a child process sees only the keys its node needs (not
//! in its environment, not through `/proc/<awr pid>/environ`), and no key
//! value reaches a file of the storage directory or what awr prints.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use awr_tests::fake_model::FakeModel;

use crate::util::{Awr, Output, awr_bin, run_id_of};

/// The key of the node under test (its `api_key_env`).
const OWN_KEY: &str = "sk-own-3b9e71c04d2a";
/// Keys of other providers and other agents, which no child needs here.
const OTHER_KEYS: [(&str, &str); 3] = [
    ("ANTHROPIC_API_KEY", "sk-ant-5c8d20e9f1b7"),
    ("GITHUB_TOKEN", "ghp-4e1a9c7b3d5f"),
    ("UNUSUAL_CREDENTIAL", "cred-8f2b6d0a4c91"),
];

/// Every file under `dir` that contains `needle`.
pub(crate) fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if String::from_utf8_lossy(&std::fs::read(&path).unwrap()).contains(needle) {
            found.push(path);
        }
    }
    found
}

/// `awr --storage STORAGE ARGS` in `dir` with `env`. As root it runs as
/// `nobody`: root's `CAP_SYS_PTRACE` reads any process's environment, and
/// what is tested is what an ordinary user's awr gives away.
fn run_unprivileged(awr: &Awr, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(awr_bin());
    command
        .arg("--storage")
        .arg(awr.storage())
        .args(args)
        .current_dir(dir)
        .env_remove("AWR_STORAGE")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    if is_root() {
        for path in [awr.dir.path(), dir] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        command.uid(65534).gid(65534);
    }
    Output::from(command.output().expect("run awr"))
}

fn is_root() -> bool {
    // The owner of a file this process just made is its effective uid.
    let probe = tempfile::NamedTempFile::new().unwrap();
    std::os::unix::fs::MetadataExt::uid(&probe.as_file().metadata().unwrap()) == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_tool_call_cannot_read_keys_from_its_env_nor_from_awr() {
    let server = FakeModel::start().await.expect("fake model");
    let awr = Awr::new();
    let workspace = awr.dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let command = "{ env; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ; } > seen.txt 2>&1";
    let prompt = format!(
        "CALLTOOL shell {}",
        serde_json::json!({ "command": command })
    );
    let yaml = format!(
        "name: keys\ninput: {}\nagents:\n  operator:\n    provider: openai\n    model: gpt-4o-mini\n    \
         base_url: {}/v1\n    api_key_env: OWN_SECRET\n    tools: [shell]\n  \
         other:\n    provider: openai\n    model: gpt-4o-mini\n    api_key_env: UNUSUAL_CREDENTIAL\n\
         steps: [{{agent: operator}}]\n",
        serde_json::Value::String(prompt),
        server.base_url()
    );
    let file = awr.write("keys.yaml", &yaml).display().to_string();
    let mut env = vec![("OWN_SECRET", OWN_KEY), ("AWR_PLAIN_SETTING", "visible")];
    env.extend(OTHER_KEYS);
    let out =
        tokio::task::block_in_place(|| run_unprivileged(&awr, &workspace, &env, &["run", &file]));
    assert_eq!(out.code, 0, "{}", out.stderr);

    let seen = std::fs::read_to_string(workspace.join("seen.txt")).unwrap();
    assert!(
        seen.contains("AWR_PLAIN_SETTING=visible"),
        "other variables pass: {seen}"
    );
    let (_, from_proc) = seen.split_once("---").unwrap();
    assert!(
        !from_proc.contains("AWR_PLAIN_SETTING"),
        "awr's /proc environ is not readable: {from_proc}"
    );
    for (name, value) in OTHER_KEYS.iter().chain([&("OWN_SECRET", OWN_KEY)]) {
        assert!(!seen.contains(value), "{name} reached the shell: {seen}");
    }
    // The node's key did reach the model server: awr itself uses it.
    let authorization = format!("Bearer {OWN_KEY}");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(authorization.as_str())
    );
}

#[test]
fn a_cli_that_prints_its_keys_leaves_none_in_storage_or_on_the_terminal() {
    let awr = Awr::new();
    // Prints both keys it was given on stderr, in its reply and its result;
    // with FAIL set it then exits 3, so stderr is attached to the error.
    let script = r#"#!/bin/sh
echo "using $ANTHROPIC_API_KEY and $MY_CLI_CREDENTIAL" >&2
say() { printf '%s\n' "$1"; }
say '{"type":"system","subtype":"init","session_id":"sess-keys","model":"m"}'
say "{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"content\":[{\"type\":\"text\",\"text\":\"my key is $ANTHROPIC_API_KEY\"}]}}"
[ -n "$FAIL" ] && exit 3
say "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"keys $ANTHROPIC_API_KEY $MY_CLI_CREDENTIAL\",\"session_id\":\"sess-keys\",\"num_turns\":1,\"duration_ms\":5,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}"
"#;
    let exe = awr.executable("fake-claude", script);
    let anthropic = OTHER_KEYS[0].1;
    let own = "cli-cred-6a0e4b2d8c17";
    for fail in ["", "1"] {
        let yaml = format!(
            "name: cli-keys\nagents:\n  coder:\n    provider: claude-code\n    executable: {}\n    \
             api_key_env: MY_CLI_CREDENTIAL\n    env: {{FAIL: '{fail}'}}\nsteps: [{{agent: coder}}]\n",
            exe.display()
        );
        let file = awr.write("cli-keys.yaml", &yaml).display().to_string();
        // Debug logs carry the CLI's stderr too.
        let env = [
            ("ANTHROPIC_API_KEY", anthropic),
            ("MY_CLI_CREDENTIAL", own),
            ("AWR_LOG", "debug"),
        ];
        let out = awr.run_in(awr.dir.path(), &env, &["run", &file]);
        let expected = if fail.is_empty() { 0 } else { 1 };
        assert_eq!(out.code, expected, "{}", out.stderr);
        let run = run_id_of(&out);
        for key in [anthropic, own] {
            assert!(
                !out.stdout.contains(key) && !out.stderr.contains(key),
                "printed: {out:?}"
            );
            let leaked = files_containing(&awr.storage(), key);
            assert!(leaked.is_empty(), "the key is in {leaked:?}");
        }
        // The key was printed by the CLI and recorded, redacted.
        let events = awr.run_dir(&run).join("events.ndjson");
        assert!(
            files_containing(&events, "my key is [redacted]").len() == 1,
            "{}",
            std::fs::read_to_string(&events).unwrap()
        );
        if fail.is_empty() {
            assert_eq!(out.stdout.trim(), "keys [redacted] [redacted]");
        } else {
            assert!(
                out.stderr.contains("using [redacted] and [redacted]"),
                "the error carries the redacted stderr: {}",
                out.stderr
            );
        }
    }
}
