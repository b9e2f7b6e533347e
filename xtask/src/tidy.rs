//! The tidy test: architecture invariants, checked on every `cargo test`.
//!
//! - crate dependencies point inward only (design §2);
//! - `domain` depends on nothing that does IO and never reads the clock;
//! - every source file opens with a `//!` doc saying why it exists;
//! - no should-panic tests, ignored tests or debug-print macros anywhere:
//!   tests assert behaviour, and slow tests are gated on an environment
//!   variable instead;
//! - no merge-conflict markers left in any source, doc or example.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    files_ending(dir, &["rs"], out);
}

/// Files under `dir` whose extension is one of `extensions`, skipping
/// `target`, `node_modules` and hidden entries.
fn files_ending(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == "node_modules" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            files_ending(&path, extensions, out);
        } else if path
            .extension()
            .is_some_and(|e| extensions.iter().any(|x| e == *x))
        {
            out.push(path);
        }
    }
}

fn all_sources() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["crates", "tests", "xtask"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        !files.is_empty(),
        "no sources found under {}",
        root.display()
    );
    files
}

/// The workspace crates a crate's `[dependencies]` name.
fn internal_deps(krate: &str) -> BTreeSet<String> {
    const INTERNAL: [&str; 5] = [
        "domain",
        "application",
        "infrastructure",
        "adapters-agents",
        "cli",
    ];
    let manifest = workspace_root()
        .join("crates")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap_or_default();
    let parsed: toml::Table = toml::from_str(&text).unwrap_or_default();
    parsed
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|deps| {
            deps.keys()
                .filter(|k| INTERNAL.contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn dependencies_point_inward() {
    let allowed: [(&str, &[&str]); 5] = [
        ("domain", &[]),
        ("application", &["domain"]),
        ("infrastructure", &["domain", "application"]),
        ("adapters-agents", &["domain", "application"]),
        (
            "cli",
            &["domain", "application", "infrastructure", "adapters-agents"],
        ),
    ];
    for (krate, allowed) in allowed {
        for dep in internal_deps(krate) {
            assert!(
                allowed.contains(&dep.as_str()),
                "crates/{krate} must not depend on {dep} (arrows point inward: design §2)"
            );
        }
    }
}

#[test]
fn domain_does_no_io_and_reads_no_clock() {
    let manifest = workspace_root().join("crates/domain/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap_or_default();
    for io_crate in [
        "tokio",
        "reqwest",
        "rusqlite",
        "tokio-postgres",
        "axum",
        "hyper",
        "mio",
        "async-std",
    ] {
        let parsed: toml::Table = toml::from_str(&text).unwrap_or_default();
        let deps = parsed.get("dependencies").and_then(|d| d.as_table());
        assert!(
            deps.is_none_or(|d| !d.contains_key(io_crate)),
            "domain must not depend on `{io_crate}`"
        );
    }
    let mut files = Vec::new();
    rust_files(&workspace_root().join("crates/domain/src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        // Test modules may build fixtures however they like; production code may not.
        let production = text.split("#[cfg(test)]").next().unwrap_or("");
        for banned in [
            "std::fs",
            "std::net",
            "std::process",
            "std::io::stdin",
            "SystemTime",
            "Instant::now",
            "Utc::now",
            "Local::now",
            "tokio::",
            "thread::sleep",
            "std::env",
        ] {
            assert!(
                !production.contains(banned),
                "{}: domain code must not use `{banned}` (no IO, no clock)",
                file.display()
            );
        }
    }
}

#[test]
fn every_source_file_says_why_it_exists() {
    for file in all_sources() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            text.trim_start().starts_with("//!"),
            "{} must open with a `//!` doc comment saying why it exists",
            file.display()
        );
    }
}

#[test]
fn no_escape_hatches_in_tests_or_code() {
    let banned = [
        concat!("#[should", "_panic"),
        concat!("#[ig", "nore"),
        concat!("db", "g!("),
    ];
    for file in all_sources() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for pattern in banned {
            assert!(
                !text.contains(pattern),
                "{}: `{pattern}` is not allowed (gate slow tests on an environment variable)",
                file.display()
            );
        }
    }
}

#[test]
fn no_merge_conflict_markers() {
    const TEXT: [&str; 10] = [
        "rs", "md", "toml", "yaml", "yml", "json", "js", "mjs", "html", "css",
    ];
    let root = workspace_root();
    let mut files = Vec::new();
    files_ending(&root, &TEXT, &mut files);
    assert!(
        files.len() > 10,
        "no text files found under {}",
        root.display()
    );
    let markers = [
        concat!("<<<<<", "<< "),
        concat!(">>>>>", ">> "),
        concat!("=====", "==\n"),
    ];
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in text.split_inclusive('\n') {
            assert!(
                !markers
                    .iter()
                    .any(|m| line.starts_with(m) && (m.ends_with(' ') || line == *m)),
                "{}: a merge-conflict marker is left in: {}",
                file.display(),
                line.trim_end()
            );
        }
    }
}
