//! A tiny harness so each end-to-end test reads as: a storage directory, an
//! `awr` command line, and what it must print and return.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The `awr` binary, built once per test process.
///
/// The binary belongs to another package, so cargo does not hand its path to
/// this test binary; it is built here (cargo has released its build lock by
/// the time tests run) and found next to this test's own executable.
pub fn awr_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "cli", "--bin", "awr"])
            .current_dir(repo_root())
            .status()
            .expect("cargo build -p cli");
        assert!(status.success(), "building awr failed");
        let exe = std::env::current_exe().expect("current exe");
        // target/<profile>/deps/e2e-<hash> -> target/<profile>/awr
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target profile dir");
        profile_dir.join("awr")
    })
}

/// The repository root (where `examples/` lives).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
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
}

impl Awr {
    /// A fresh, empty storage directory.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
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
            .arg(self.storage())
            .args(args)
            .current_dir(repo_root())
            .env_remove("AWR_STORAGE")
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

    /// Runs `awr --storage <storage> ARGS` and waits for it.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().expect("run awr");
        Output::from(out)
    }

    /// The run ids in the store.
    pub fn run_ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.storage().join("runs")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
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
