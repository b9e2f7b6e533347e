//! docs/library.md as a new user reads it: its `toml consumer` block (the
//! dependencies) and its `rust consumer` block (a whole `src/main.rs`)
//! become a crate outside the workspace, under `target/consumer/`, which
//! `cargo xtask test` builds with its own target directory and runs.
//!
//! The page is the one source: the crate is written from it on every run,
//! its blocks byte for byte, the only change the checkout's path in place
//! of `../awr` (where the page has the user clone awr). So a snippet that
//! names a crate the way only the workspace does (`application::`), a
//! missing `use` or dependency, or an API the page has wrong fails CI
//! there. The page's other Rust snippets are doctests' visible lines,
//! checked by this module's tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

/// The page, from the workspace root.
pub const PAGE: &str = "docs/library.md";

/// Where the page's dependency paths lead: awr cloned beside the user's crate.
pub const CHECKOUT: &str = "../awr/";

/// The info strings of the two blocks the crate is made of.
const MANIFEST_BLOCK: &str = "toml consumer";
const MAIN_BLOCK: &str = "rust consumer";

/// One fenced code block of a Markdown page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// What follows the opening fence (`rust`, `toml consumer`).
    pub info: String,
    /// The lines between the fences, each with its newline.
    pub text: String,
    /// The line of the opening fence, from 1.
    pub line: usize,
}

/// Every fenced block of `page` (fences of three backticks at the start
/// of a line), in order.
pub fn blocks(page: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in page.lines().enumerate() {
        match open.take() {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some(Block {
                        info: info.trim().to_owned(),
                        text: String::new(),
                        line: n + 1,
                    });
                }
            }
            Some(mut block) => {
                if line.trim_end() == "```" {
                    blocks.push(block);
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                    open = Some(block);
                }
            }
        }
    }
    blocks
}

/// The consumer crate's files, from the page's blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crate {
    /// `Cargo.toml`: a package of its own around the page's block.
    pub manifest: String,
    /// `src/main.rs`: the page's block as it stands.
    pub main: String,
}

/// The one block of `page` whose info string is `info`.
fn the_block(page: &str, info: &str) -> anyhow::Result<Block> {
    let mut found: Vec<Block> = blocks(page)
        .into_iter()
        .filter(|b| b.info == info)
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        n => bail!("{PAGE} must have exactly one ```{info} block, it has {n}"),
    }
}

/// The crate `page` describes, its dependencies on the checkout at `root`.
pub fn from_page(page: &str, root: &Path) -> anyhow::Result<Crate> {
    let deps = the_block(page, MANIFEST_BLOCK)?;
    let main = the_block(page, MAIN_BLOCK)?;
    let paths = deps.text.matches("path = \"").count();
    let on_checkout = deps.text.matches(&format!("path = \"{CHECKOUT}")).count();
    if paths == 0 || paths != on_checkout {
        bail!(
            "{PAGE} line {}: every `path` of the ```{MANIFEST_BLOCK} block must start with \
             {CHECKOUT:?} (awr cloned beside the user's crate)",
            deps.line
        );
    }
    let root = root
        .to_str()
        .context("the checkout's path is not UTF-8")?
        .trim_end_matches('/');
    let manifest = format!(
        "# Written by `cargo xtask test` from {PAGE}; edit the page, not this file.\n\
         [package]\n\
         name = \"awr-consumer\"\n\
         version = \"0.0.0\"\n\
         edition = \"2024\"\n\
         publish = false\n\
         \n\
         # A workspace of its own, not a member of awr's.\n\
         [workspace]\n\
         \n\
         # No debug info: the build is checked, not debugged.\n\
         [profile.dev]\n\
         debug = false\n\
         \n\
         {}",
        deps.text.replace(
            &format!("path = \"{CHECKOUT}"),
            &format!("path = \"{root}/")
        )
    );
    Ok(Crate {
        manifest,
        main: main.text,
    })
}

/// Writes `contents` to `path` unless it holds them already (an unchanged
/// file keeps its time, so cargo does not rebuild for nothing).
fn write_if_changed(path: &Path, contents: &str) -> anyhow::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == contents) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::write(path, contents).with_context(|| format!("write {}", path.display()))
}

/// Writes the crate `page` describes into `dir`, with the workspace's
/// `Cargo.lock`, so it builds with the versions awr is tested with.
pub fn write(page: &str, root: &Path, dir: &Path) -> anyhow::Result<Crate> {
    let krate = from_page(page, root)?;
    write_if_changed(&dir.join("Cargo.toml"), &krate.manifest)?;
    write_if_changed(&dir.join("src/main.rs"), &krate.main)?;
    let lock = std::fs::read_to_string(root.join("Cargo.lock"))
        .with_context(|| format!("read {}", root.join("Cargo.lock").display()))?;
    write_if_changed(&dir.join("Cargo.lock"), &lock)?;
    Ok(krate)
}

/// Writes the consumer crate into `<target>/consumer`, then builds and
/// runs it there with its own target directory (kept between runs: only
/// awr's crates are rebuilt once the dependencies are). Fails if it does
/// not build or does not exit 0.
pub fn run(root: &Path, target: &Path) -> anyhow::Result<()> {
    let dir = target.join("consumer");
    let page = std::fs::read_to_string(root.join(PAGE))
        .with_context(|| format!("read {}", root.join(PAGE).display()))?;
    write(&page, root, &dir)?;
    let started = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args(["run", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", consumer_target(&dir))
        .current_dir(&dir);
    let what = format!("the consumer crate of {PAGE} ({})", dir.display());
    crate::run(command, &what)?;
    println!(
        "{what}: built and ran in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The consumer crate's own target directory, inside it.
fn consumer_target(dir: &Path) -> PathBuf {
    dir.join("target")
}

#[cfg(test)]
mod tests {
    //! The crate is the page: a block edited, added or lost shows in the
    //! crate, or fails; and the page's snippets name crates, dependencies
    //! and doctests that exist.

    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::{CHECKOUT, MAIN_BLOCK, MANIFEST_BLOCK, PAGE, blocks, from_page, write};
    use crate::workspace_root;

    fn page() -> String {
        std::fs::read_to_string(workspace_root().join(PAGE)).unwrap()
    }

    /// A directory of this test's own under the target directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = crate::target_dir()
            .unwrap()
            .join("tmp")
            .join(format!("xtask-consumer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The crate written from the page is its blocks byte for byte: the
    /// main block as `src/main.rs`, the dependency block in `Cargo.toml`
    /// with only the checkout's path put for `../awr/`.
    #[test]
    fn the_crate_is_the_pages_blocks_byte_for_byte() {
        let root = workspace_root();
        let dir = scratch("bytes");
        write(&page(), &root, &dir).unwrap();
        let all = blocks(&page());
        let block = |info: &str| all.iter().find(|b| b.info == info).unwrap().text.clone();
        let main = std::fs::read_to_string(dir.join("src/main.rs")).unwrap();
        assert_eq!(main, block(MAIN_BLOCK));
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let root = root.to_str().unwrap();
        let as_on_the_page = manifest.replace(&format!("\"{root}/"), &format!("\"{CHECKOUT}"));
        assert!(
            as_on_the_page.ends_with(&block(MANIFEST_BLOCK)),
            "Cargo.toml must end with the page's block:\n{manifest}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An edit of the page is an edit of the crate; a page without its
    /// blocks, or with a dependency off the checkout, makes no crate.
    #[test]
    fn the_crate_follows_the_page_and_nothing_else() {
        let root = workspace_root();
        let page = page();
        let edited = page.replace(
            "#[tokio::main]\nasync fn main()",
            "/// Edited.\n#[tokio::main]\nasync fn main()",
        );
        assert_ne!(
            edited, page,
            "the page's main block has `#[tokio::main] async fn main()`"
        );
        let krate = from_page(&edited, &root).unwrap();
        assert!(krate.main.contains("/// Edited.\n#[tokio::main]"));

        let without = page.replace(&format!("```{MAIN_BLOCK}\n"), "```rust\n");
        let error = from_page(&without, &root).unwrap_err().to_string();
        assert!(
            error.contains("exactly one ```rust consumer block, it has 0"),
            "{error}"
        );
        let twice = format!("{page}\n```{MAIN_BLOCK}\nfn main() {{}}\n```\n");
        assert!(from_page(&twice, &root).is_err());
        let elsewhere = page.replace("path = \"../awr/crates/domain\"", "path = \"/opt/awr\"");
        let error = from_page(&elsewhere, &root).unwrap_err().to_string();
        assert!(error.contains("must start with \"../awr/\""), "{error}");
    }

    /// Each path dependency of the block is a crate of the checkout under
    /// its package's name, and every awr crate the main block names is a
    /// dependency, under the name a consumer sees (never the workspace's
    /// `application`, `domain`, ...).
    #[test]
    fn the_page_names_the_crates_as_a_consumer_sees_them() {
        let all = blocks(&page());
        let deps = &all.iter().find(|b| b.info == MANIFEST_BLOCK).unwrap().text;
        let manifest: toml::Table = toml::from_str(deps).unwrap();
        let mut names = BTreeSet::new();
        for table in ["dependencies", "dev-dependencies"] {
            for (key, dep) in manifest[table].as_table().unwrap() {
                let Some(path) = dep.get("path").and_then(|p| p.as_str()) else {
                    continue;
                };
                let crate_dir = workspace_root().join(path.strip_prefix(CHECKOUT).unwrap());
                let theirs: toml::Table =
                    toml::from_str(&std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap())
                        .unwrap();
                let package = dep.get("package").and_then(|p| p.as_str()).unwrap_or(key);
                assert_eq!(theirs["package"]["name"].as_str(), Some(package), "{path}");
                names.insert(key.replace('-', "_"));
            }
        }
        let main = &all.iter().find(|b| b.info == MAIN_BLOCK).unwrap().text;
        for line in main.lines().filter(|l| l.starts_with("use ")) {
            let krate = line["use ".len()..].split("::").next().unwrap();
            let workspace_alias = ["application", "domain", "infrastructure", "adapters_agents"];
            assert!(
                !workspace_alias.contains(&krate),
                "{PAGE}: `{line}` names a workspace alias"
            );
            if krate.starts_with("awr_") {
                assert!(
                    names.contains(krate),
                    "{PAGE}: `{line}`: no dependency on {krate}"
                );
            }
        }
    }

    /// Every other Rust block of the page is the visible part of a doctest
    /// of the workspace's crates, word for word: what the page shows
    /// compiles and runs in `cargo test`.
    #[test]
    fn every_other_rust_block_of_the_page_is_a_doctest() {
        let doctests = doctests(&workspace_root().join("crates"));
        assert!(doctests.len() >= 15, "{} doctests found", doctests.len());
        for block in blocks(&page()) {
            if block.info != "rust" {
                continue;
            }
            assert!(
                doctests.contains(&block.text),
                "{PAGE} line {}: this snippet is no doctest's visible lines; copy them \
                 from the doctest it shows, or make it one:\n{}",
                block.line,
                block.text
            );
        }
    }

    /// The visible lines of every doctest (` ``` ` blocks of `///` and `//!`
    /// comments that are Rust) in the `.rs` files under `dir`.
    fn doctests(dir: &Path) -> Vec<String> {
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let mut open: Option<(bool, String)> = None;
            for line in text.lines() {
                let trimmed = line.trim_start();
                let Some(doc) = trimmed
                    .strip_prefix("///")
                    .or_else(|| trimmed.strip_prefix("//!"))
                else {
                    open = None;
                    continue;
                };
                let doc = doc.strip_prefix(' ').unwrap_or(doc);
                match open.take() {
                    None => {
                        if let Some(info) = doc.strip_prefix("```") {
                            let rust = info.is_empty() || info.split(',').any(|w| w == "rust");
                            open = Some((rust, String::new()));
                        }
                    }
                    Some((rust, mut visible)) => {
                        if doc.trim_end() == "```" {
                            if rust {
                                found.push(visible);
                            }
                        } else {
                            let hidden =
                                doc.trim_start() == "#" || doc.trim_start().starts_with("# ");
                            if !hidden {
                                visible.push_str(doc);
                                visible.push('\n');
                            }
                            open = Some((rust, visible));
                        }
                    }
                }
            }
        }
        found
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
}
