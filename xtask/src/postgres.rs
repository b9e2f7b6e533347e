//! A throwaway PostgreSQL server for the test suite: a cluster made by
//! `initdb` in a directory of its own, on 127.0.0.1 and a free port, with
//! `fsync` off (nothing in it outlives the suite; on for benchmarks),
//! stopped when dropped.
//!
//! The server refuses to run as root: as root (CI), the cluster belongs to
//! the `postgres` user Debian's package creates, and its programs run
//! through `runuser`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// Where Debian puts a PostgreSQL version's programs; `AWR_PG_BIN` names
/// another directory.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";

/// The directory of the newest PostgreSQL's `initdb` and `pg_ctl`.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("AWR_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_ROOT)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// A running throwaway cluster.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    owner: Option<&'static str>,
    port: u16,
}

impl Cluster {
    /// Makes a cluster under `parent` and starts it. As root, `parent`
    /// must be a directory the `postgres` user can reach (the temporary
    /// directory, not a home that only root may enter).
    pub fn start(parent: &Path) -> anyhow::Result<Self> {
        Self::start_with(parent, false)
    }

    /// [`Cluster::start`], syncing commits when `durable` (for benchmarks,
    /// whose commits must cost what they cost in use).
    pub fn start_with(parent: &Path, durable: bool) -> anyhow::Result<Self> {
        let bin = bin_dir().context("no PostgreSQL server (initdb) on this machine")?;
        let dir = parent.join(format!("postgres-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let owner = crate::needs::root().then_some("postgres");
        if let Some(user) = owner {
            let mut chown = Command::new("chown");
            chown.args(["-R", &format!("{user}:")]).arg(&dir);
            crate::run(chown, "chown of the PostgreSQL cluster's directory")?;
        }
        let port = free_port()?;
        let cluster = Cluster {
            bin,
            dir,
            owner,
            port,
        };
        let data = cluster.dir.join("data");
        let mut initdb = cluster.program("initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"]);
        crate::run(initdb, "initdb")?;
        let options = format!(
            "-k {} -p {port} -c listen_addresses=127.0.0.1 -c fsync={} -c max_connections=200",
            cluster.dir.display(),
            if durable { "on" } else { "off" }
        );
        let mut start = cluster.program("pg_ctl");
        start
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(cluster.dir.join("log"))
            .args(["-w", "-o", &options, "start"]);
        if let Err(e) = crate::run(start, "pg_ctl start") {
            let log = std::fs::read_to_string(cluster.dir.join("log")).unwrap_or_default();
            bail!("{e}\n{log}");
        }
        eprintln!("xtask test: PostgreSQL on 127.0.0.1:{port}");
        Ok(cluster)
    }

    /// The URL tests connect with (`AWR_TEST_POSTGRES`).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A shell command line that restarts the server with a fast shutdown
    /// (`AWR_TEST_POSTGRES_RESTART`): the chaos test restarts it once under
    /// its workers, and runs in a test binary of its own, so no other
    /// test's connections are cut.
    pub fn restart_command(&self) -> String {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.dir.join("data");
        let owner = match self.owner {
            Some(user) => format!("runuser -u {user} -- "),
            None => String::new(),
        };
        format!(
            "{owner}'{}' -D '{}' -m fast -w restart -l '{}'",
            pg_ctl.display(),
            data.display(),
            self.dir.join("log").display()
        )
    }

    /// One of the server's programs, run as the cluster's owner.
    fn program(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        match self.owner {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }
}

impl Drop for Cluster {
    /// A fast shutdown, then the directory goes.
    fn drop(&mut self) {
        let mut stop = self.program("pg_ctl");
        stop.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "fast", "-w", "stop"]);
        if let Err(e) = crate::run(stop, "pg_ctl stop") {
            eprintln!("xtask test: {e}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port free on 127.0.0.1 now.
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_throwaway_cluster_answers_on_its_port_then_is_gone() {
        let Some(bin) = bin_dir() else {
            assert!(
                std::env::var_os("AWR_REQUIRE_POSTGRES").is_none(),
                "AWR_REQUIRE_POSTGRES is set but no PostgreSQL server is installed"
            );
            eprintln!("skipped: no PostgreSQL server (initdb) on this machine");
            return;
        };
        let cluster = Cluster::start(&std::env::temp_dir()).unwrap();
        assert!(cluster.url().starts_with("postgres://postgres@127.0.0.1:"));
        let ready = Command::new(bin.join("pg_isready"))
            .args(["-h", "127.0.0.1", "-p", &cluster.port.to_string()])
            .status()
            .unwrap();
        assert!(ready.success(), "the server does not answer");
        let dir = cluster.dir.clone();
        drop(cluster);
        assert!(!dir.exists(), "{} is left behind", dir.display());
    }
}
