//! `awr serve` as a process on 127.0.0.1, for the end-to-end suite and the
//! followers benchmark: started on a free port (`--addr 127.0.0.1:0`), its
//! address and the token it made read from the lines it prints, and
//! stopped with a signal.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `awr serve`.
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The token the server made (none when the flags gave one, or none).
    pub token: Option<String>,
    /// What it printed on stderr after its address, line by line.
    pub stderr: std::sync::mpsc::Receiver<String>,
}

impl Served {
    /// Starts `awr --storage STORAGE serve --addr 127.0.0.1:0 --root ROOT
    /// EXTRA...` in `root`, and waits until it listens.
    ///
    /// # Panics
    /// When it cannot start or exits before it listens.
    #[allow(clippy::expect_used)]
    pub fn start(awr: &Path, storage: impl AsRef<OsStr>, root: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(awr)
            .arg("--storage")
            .arg(storage)
            .args(["serve", "--addr", "127.0.0.1:0", "--root"])
            .arg(root)
            .args(extra)
            .current_dir(root)
            .env_remove("AWR_STORAGE")
            .env_remove("AWR_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn awr serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut next = || {
            lines
                .next()
                .expect("awr serve ended before it listened")
                .expect("read awr serve's stderr")
        };
        let base = loop {
            if let Some(address) = next().strip_prefix("awr: listening on ") {
                break address.to_owned();
            }
        };
        // Then the page's address, with the token it made in its fragment.
        let token = loop {
            if let Some(page) = next().strip_prefix("awr: open ") {
                break page.split_once("#token=").map(|(_, t)| t.to_owned());
            }
        };
        let (tx, stderr) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            base,
            token,
            stderr,
        }
    }

    /// A client that sends the token the server made with every request.
    ///
    /// # Panics
    /// When the client cannot be built.
    #[allow(clippy::expect_used)]
    pub fn client(&self) -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &self.token {
            let value = format!("Bearer {token}").parse().expect("a header value");
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("a reqwest client")
    }

    /// The process id, to signal it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit code (-1 for a signal's death).
    ///
    /// # Panics
    /// When it cannot be signalled or waited for.
    #[allow(clippy::expect_used)]
    pub fn terminate(&mut self) -> i32 {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success(), "kill -TERM failed");
        self.child
            .wait()
            .expect("wait for awr serve")
            .code()
            .unwrap_or(-1)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
