//! What `cargo xtask test` needs beyond Rust, checked before anything is
//! built: `jq` (the transcript recipes' tests), Node.js with npm (the agent
//! CLIs, the page's tests), Chromium (the page in a real browser) and a
//! PostgreSQL server (the PostgreSQL store's tests). None of
//! their tests may skip, so a missing one would fail the suite after many
//! minutes of building; it is named at once instead.
//!
//! On a machine where `apt-get` can install them (root on Debian or Ubuntu,
//! as CI's machine is), the missing packages are installed; elsewhere the
//! task stops with the one command that installs them.

use std::path::Path;
use std::process::Command;

use anyhow::bail;

/// A program the suite drives.
struct Need {
    /// What it is, as a user knows it.
    what: &'static str,
    /// Whether it is here.
    here: fn() -> bool,
    /// The Debian packages that bring it, if Debian's will do.
    packages: &'static [&'static str],
}

/// The browser the page's tests drive (`AWR_CHROMIUM` names another).
fn chromium_here() -> bool {
    let path = std::env::var("AWR_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    Path::new(&path).is_file()
}

/// Whether `program --version` runs.
fn answers(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

const NEEDS: [Need; 4] = [
    Need {
        what: "jq",
        here: || answers("jq"),
        packages: &["jq"],
    },
    Need {
        what: "Chromium (/usr/bin/chromium, or AWR_CHROMIUM)",
        here: chromium_here,
        packages: &["chromium", "fonts-liberation"],
    },
    Need {
        what: "a PostgreSQL server (initdb, pg_ctl; AWR_PG_BIN names their directory)",
        here: || crate::postgres::bin_dir().is_some(),
        packages: &["postgresql"],
    },
    // Debian's Node.js may be older than the agent CLIs take: not installed here.
    Need {
        what: "Node.js 20 or later, with npm",
        here: || answers("node") && answers("npm"),
        packages: &[],
    },
];

/// Checks every need, installs what `apt-get` can as root, and fails at
/// once, naming what is missing and how to install it, for the rest.
pub fn ensure() -> anyhow::Result<()> {
    let missing = || {
        NEEDS
            .iter()
            .filter(|need| !(need.here)())
            .collect::<Vec<_>>()
    };
    let packages: Vec<&str> = missing()
        .iter()
        .flat_map(|need| need.packages.iter().copied())
        .collect();
    if !packages.is_empty() && root() && answers("apt-get") {
        eprintln!("xtask test: installing {}", packages.join(" "));
        let update = Command::new("apt-get").args(["update", "-qq"]).status()?;
        let install = update.success()
            && Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&packages)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()?
                .success();
        if !install {
            eprintln!(
                "xtask test: apt-get could not install {}",
                packages.join(" ")
            );
        }
    }
    let missing = missing();
    if missing.is_empty() {
        return Ok(());
    }
    bail!("{}", refusal(&missing))
}

/// What to tell a user who lacks `missing`: what, and how to install it.
fn refusal(missing: &[&Need]) -> String {
    let names: Vec<&str> = missing.iter().map(|need| need.what).collect();
    let packages: Vec<&str> = missing
        .iter()
        .flat_map(|need| need.packages.iter().copied())
        .collect();
    let mut how = String::new();
    if !packages.is_empty() {
        how.push_str(&format!(
            "\n  sudo apt-get install -y --no-install-recommends {}",
            packages.join(" ")
        ));
    }
    if missing.iter().any(|need| need.packages.is_empty()) {
        how.push_str(
            "\n  Node.js 20 or later with npm: https://nodejs.org (or your package manager)",
        );
    }
    format!(
        "the test suite needs {} (no test of theirs may skip); install {}:{how}",
        names.join(", "),
        if missing.len() == 1 { "it" } else { "them" },
    )
}

/// Whether this process runs as root (`id -u` says 0).
pub fn root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_need_is_named_with_the_command_that_installs_it() {
        let all: Vec<&Need> = NEEDS.iter().collect();
        let said = refusal(&all);
        assert!(said.contains("jq, Chromium"), "{said}");
        assert!(
            said.contains(
                "sudo apt-get install -y --no-install-recommends jq chromium fonts-liberation"
            ),
            "{said}"
        );
        assert!(said.contains("Node.js 20"), "{said}");
        let one = refusal(&[&NEEDS[0]]);
        assert!(one.contains("install it:"), "{one}");
        assert!(!one.contains("Node.js"), "{one}");
    }
}
