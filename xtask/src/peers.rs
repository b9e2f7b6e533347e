//! `cargo xtask bench --peers`: awr beside two peers on the same work.
//!
//! The work: a chain of 3 agents, each answering 300 bytes at once, N runs
//! (each a new run) per configuration. Three harnesses print one JSON line
//! per configuration:
//!
//! - awr's own, `tests/benches/peers.rs` (the benches' crate): the library's
//!   `Runtime` on the file store, the SQLite store and in memory;
//! - entelix's, `bench/peers/entelix` (pinned `entelix = "=0.6.1"`, its own
//!   workspace and `Cargo.lock`: awr never depends on a peer), on a minimal
//!   SQLite checkpointer and in memory;
//! - LangGraph's, `bench/peers/langgraph/harness.py`, with every package of
//!   `requirements.txt` pinned, in a virtualenv under
//!   `~/.cache/awr-peers-langgraph` made once per version of that file:
//!   SqliteSaver and MemorySaver.
//!
//! awr's harness also times two floors: what a run of the chain costs the
//! disk under awr's durability contract and nothing else (`floor-file`,
//! `floor-sqlite`, see `tests/benches/peers.rs`). A second table puts each
//! durable store over its floor, and each floor over entelix-sqlite.
//!
//! Every configuration runs as its own process, interleaved round by round
//! in one time window: in each round every configuration runs once, in an
//! order rotated by one each round. Each ratio is taken within a round: a
//! configuration's per-step median over awr-file's of the same round. The
//! table goes to stdout, the figures to `target/peers.json`.
//!
//! Options (or their environment variables): `--runs N` (`AWR_PEERS_RUNS`,
//! default 1000) and `--rounds R` (`AWR_PEERS_ROUNDS`, default 5).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// Runs of the chain per configuration and round, unless told.
const DEFAULT_RUNS: usize = 1_000;
/// Rounds, unless told.
const DEFAULT_ROUNDS: usize = 5;
/// The configuration every ratio is over.
const BASE: &str = "awr-file";

/// One configuration: its name and the command that measures it.
struct Config {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
}

/// `cargo xtask bench --peers [--runs N] [--rounds R]`, from the
/// workspace `root`, with cargo's `target` directory.
pub fn run(root: &Path, target: &Path, args: &[String]) -> anyhow::Result<()> {
    let runs = option(args, "--runs", "AWR_PEERS_RUNS", DEFAULT_RUNS)?;
    let rounds = option(args, "--rounds", "AWR_PEERS_ROUNDS", DEFAULT_ROUNDS)?;
    if runs == 0 || rounds == 0 {
        bail!("--runs and --rounds must be at least 1");
    }
    let awr = build_awr(root)?;
    let entelix = build_entelix(root, target)?;
    let python = langgraph_python(root)?;
    let harness = root.join("bench/peers/langgraph/harness.py");
    let runs_arg = runs.to_string();
    let with = |config: &str| {
        vec![
            "--config".into(),
            config.into(),
            "--runs".into(),
            runs_arg.clone(),
        ]
    };
    let python_args = |config: &str| {
        let mut a = vec![harness.display().to_string()];
        a.extend(with(config));
        a
    };
    let configs = [
        Config {
            name: "awr-file",
            program: awr.clone(),
            args: with("file"),
        },
        Config {
            name: "awr-sqlite",
            program: awr.clone(),
            args: with("sqlite"),
        },
        Config {
            name: "awr-memory",
            program: awr.clone(),
            args: with("memory"),
        },
        Config {
            name: "floor-file",
            program: awr.clone(),
            args: with("floor-file"),
        },
        Config {
            name: "floor-sqlite",
            program: awr,
            args: with("floor-sqlite"),
        },
        Config {
            name: "entelix-sqlite",
            program: entelix.clone(),
            args: with("sqlite"),
        },
        Config {
            name: "entelix-memory",
            program: entelix,
            args: with("memory"),
        },
        Config {
            name: "langgraph-sqlite",
            program: python.clone(),
            args: python_args("sqlite"),
        },
        Config {
            name: "langgraph-memory",
            program: python,
            args: python_args("memory"),
        },
    ];

    let load_before = loadavg();
    let started = std::time::Instant::now();
    let mut measured: Vec<BTreeMap<&str, Value>> = Vec::new();
    let mut orders = Vec::new();
    for round in 0..rounds {
        let mut order: Vec<&Config> = configs.iter().collect();
        order.rotate_left(round % configs.len());
        let mut results = BTreeMap::new();
        for config in &order {
            let line = measure(config)?;
            eprintln!(
                "peers: round {}/{rounds}: {:<16} {:>9.1} µs a step",
                round + 1,
                config.name,
                line["per_step_us_median"].as_f64().unwrap_or(f64::NAN)
            );
            results.insert(config.name, line);
        }
        orders.push(order.iter().map(|c| c.name).collect::<Vec<_>>());
        measured.push(results);
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;

    let mut summary = serde_json::Map::new();
    let mut table = Vec::new();
    for config in &configs {
        let steps: Vec<f64> = measured.iter().map(|r| per_step(r, config.name)).collect();
        let ratios: Vec<f64> = measured
            .iter()
            .map(|r| per_step(r, config.name) / per_step(r, BASE))
            .collect();
        let (step, ratio) = (median(&steps), median(&ratios));
        let first = measured
            .first()
            .and_then(|r| r.get(config.name))
            .unwrap_or(&Value::Null);
        summary.insert(
            config.name.into(),
            json!({
                "system": first["system"],
                "durability": first["durability"],
                "per_step_us_by_round": steps,
                "per_step_us_median_of_rounds": step,
                "ratio_by_round": ratios,
                "ratio_median": ratio,
            }),
        );
        table.push((config.name, step, steps, ratios, ratio));
    }

    println!(
        "\npeers: a 3-step chain of agents answering 300 B at once; {runs} runs per \
         configuration and round, {rounds} rounds in {minutes:.1} min; per step = a run's \
         cost / 3, median of the runs; ratio = over {BASE} of the same round\n"
    );
    let heads: Vec<String> = (1..=rounds).map(|r| format!("round {r}")).collect();
    println!(
        "| configuration | per step, median of rounds | {} | median ratio |",
        heads.join(" | ")
    );
    println!("|---|---:|{}---:|", "---:|".repeat(rounds));
    for (name, step, steps, ratios, ratio) in &table {
        let cells: Vec<String> = steps
            .iter()
            .zip(ratios)
            .map(|(us, r)| format!("{us:.1} µs, {}", times(*r)))
            .collect();
        println!(
            "| {name} | {step:.1} µs | {} | **{}** |",
            cells.join(" | "),
            times(*ratio)
        );
    }
    let floors = floors_table(&measured);
    let load_after = loadavg();
    println!("\nload average before / after: {load_before} / {load_after}");

    let figures = json!({
        "work": "a chain of 3 agents each answering 300 bytes at once; each run a new run",
        "runs": runs,
        "rounds": rounds,
        "steps_per_run": 3,
        "answer_bytes": 300,
        "base": BASE,
        "minutes": minutes,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "cores": std::thread::available_parallelism().map(usize::from).unwrap_or(0),
        "summary": summary,
        "floors": floors,
        "rounds_measured": measured.iter().zip(&orders).map(|(results, order)| {
            json!({"order": order, "results": results})
        }).collect::<Vec<_>>(),
    });
    let path = target.join("peers.json");
    std::fs::write(&path, serde_json::to_string_pretty(&figures)? + "\n")
        .with_context(|| format!("write {}", path.display()))?;
    println!("figures: {}", path.display());
    Ok(())
}

/// The ratios that say how far each durable store is from what its syncs
/// alone cost (its floor), and how far that floor is from entelix-sqlite,
/// within each round; printed as a table and returned for the JSON.
fn floors_table(measured: &[BTreeMap<&str, Value>]) -> Value {
    const PAIRS: [(&str, &str); 4] = [
        ("floor-file", "entelix-sqlite"),
        ("awr-file", "floor-file"),
        ("floor-sqlite", "entelix-sqlite"),
        ("awr-sqlite", "floor-sqlite"),
    ];
    println!(
        "\nthe durable stores beside their floors (what their syncs alone cost), \
         within each round:\n"
    );
    let heads: Vec<String> = (1..=measured.len()).map(|r| format!("round {r}")).collect();
    println!("| ratio | {} | median |", heads.join(" | "));
    println!("|---|{}---:|", "---:|".repeat(measured.len()));
    let mut json = serde_json::Map::new();
    for (over, under) in PAIRS {
        let ratios: Vec<f64> = measured
            .iter()
            .map(|r| per_step(r, over) / per_step(r, under))
            .collect();
        let cells: Vec<String> = ratios.iter().map(|r| times(*r)).collect();
        println!(
            "| {over} / {under} | {} | **{}** |",
            cells.join(" | "),
            times(median(&ratios))
        );
        json.insert(
            format!("{over} / {under}"),
            json!({"by_round": ratios, "median": median(&ratios)}),
        );
    }
    Value::Object(json)
}

/// A configuration's per-step median in one round (NaN if it has none).
fn per_step(round: &BTreeMap<&str, Value>, name: &str) -> f64 {
    round
        .get(name)
        .and_then(|line| line["per_step_us_median"].as_f64())
        .unwrap_or(f64::NAN)
}

/// The value of `--flag N` in `args`, else of the environment variable
/// `env`, else `default`.
fn option(args: &[String], flag: &str, env: &str, default: usize) -> anyhow::Result<usize> {
    let given = match args.iter().position(|a| a == flag) {
        Some(at) => Some(
            args.get(at + 1)
                .cloned()
                .with_context(|| format!("{flag} N"))?,
        ),
        None => std::env::var(env).ok(),
    };
    match given {
        Some(n) => n
            .trim()
            .parse()
            .with_context(|| format!("{flag} / {env}: not a count: {n}")),
        None => Ok(default),
    }
}

/// Runs `config`'s harness to its end and returns the JSON line it printed.
fn measure(config: &Config) -> anyhow::Result<Value> {
    let out = Command::new(&config.program)
        .args(&config.args)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {}", config.program.display()))?;
    if !out.status.success() {
        bail!("the {} harness failed ({})", config.name, out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("the {} harness printed no figures: {stdout}", config.name))?;
    let value: Value =
        serde_json::from_str(line).with_context(|| format!("{}: {line}", config.name))?;
    if value["config"] != config.name || !value["per_step_us_median"].is_number() {
        bail!(
            "the {} harness printed figures of something else: {line}",
            config.name
        );
    }
    Ok(value)
}

/// Builds awr's harness (the `peers` bench of the benches' crate, in the
/// `bench` profile) and returns its executable.
fn build_awr(root: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["bench", "-p", "awr-tests", "--bench", "peers", "--no-run"])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot start cargo")?;
    if !out.status.success() {
        bail!("building awr's peers harness failed ({})", out.status);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "peers")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo built no executable of the peers bench")
}

/// Builds the entelix harness from its own `Cargo.lock` (`--locked`) in a
/// target directory of its own, and returns its executable.
fn build_entelix(root: &Path, target: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let dir = target.join("peers-entelix");
    let status = Command::new(&cargo)
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(root.join("bench/peers/entelix/Cargo.toml"))
        .arg("--target-dir")
        .arg(&dir)
        .current_dir(root.join("bench/peers/entelix"))
        .status()
        .context("cannot start cargo")?;
    if !status.success() {
        bail!("building the entelix harness failed ({status})");
    }
    Ok(dir.join("release/peers-entelix"))
}

/// The Python of a virtualenv holding exactly `requirements.txt`'s pins,
/// made (with `python3 -m venv` and pip) when the cache has none for this
/// version of the file.
fn langgraph_python(root: &Path) -> anyhow::Result<PathBuf> {
    let requirements = root.join("bench/peers/langgraph/requirements.txt");
    let pins = std::fs::read_to_string(&requirements)
        .with_context(|| format!("read {}", requirements.display()))?;
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let dir = PathBuf::from(home)
        .join(".cache/awr-peers-langgraph")
        .join(format!("{:016x}", fnv1a(pins.as_bytes())));
    let python = dir.join("bin/python");
    // Written last: a virtualenv whose install failed is made again.
    let marker = dir.join("requirements.txt");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == pins) && python.exists() {
        return Ok(python);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    eprintln!(
        "peers: installing LangGraph's pinned packages into {}",
        dir.display()
    );
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&dir)
        .status()
        .context("cannot start python3")?;
    if !status.success() {
        bail!("python3 -m venv failed ({status}); on Debian it needs python3-venv");
    }
    let status = Command::new(dir.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements)
        .status()
        .context("cannot start pip")?;
    if !status.success() {
        bail!(
            "pip install -r {} failed ({status})",
            requirements.display()
        );
    }
    std::fs::write(&marker, &pins).with_context(|| format!("write {}", marker.display()))?;
    Ok(python)
}

/// FNV-1a, 64 bits: names a virtualenv after the pins it holds.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A ratio as the table shows it: two decimals, four below 0.1.
fn times(ratio: f64) -> String {
    if ratio < 0.095 {
        format!("{ratio:.4} ×")
    } else {
        format!("{ratio:.2} ×")
    }
}

/// The median of `values` (the upper one of an even count).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The 1-, 5- and 15-minute load averages, as Linux reports them.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{median, option};

    #[test]
    fn a_flag_wins_over_the_default() {
        let args: Vec<String> = ["--peers", "--runs", "20"].map(String::from).into();
        assert_eq!(
            option(&args, "--runs", "AWR_PEERS_TEST_UNSET", 1000).unwrap(),
            20
        );
        assert_eq!(
            option(&args, "--rounds", "AWR_PEERS_TEST_UNSET", 5).unwrap(),
            5
        );
        assert!(option(&["--runs".into()], "--runs", "AWR_PEERS_TEST_UNSET", 1).is_err());
    }

    #[test]
    fn the_median_of_an_even_count_is_the_upper_one() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(&[]).is_nan());
    }
}
