//! `awr`: run agent workflows and inspect what they did.
//!
//! This crate is the composition root: it parses the command line, builds the
//! concrete store, clock, id generator and providers, hands them to the
//! application's services, and presents the results. It holds no logic of
//! its own beyond presentation.
//!
//! Exit codes: 0 success, 1 the run failed (or the runtime did), 2 bad usage,
//! bad input or a storage error — and on 2 no run has been started —, 3
//! the run was paused (`awr resume` continues it), 130 / 143 cancelled by
//! SIGINT / SIGTERM.
//!
//! Output goes through [`say`] (stdout) and [`note`] (stderr) only: a reader
//! that closed its end of a pipe ends the program quietly, never a panic.

mod forms;
mod output;
mod progress;
mod serve;
mod signals;
mod terminal;
mod wiring;

use awr_cli::storage;

pub use output::{Failure, about_run, inert, note, report, say, stderr_color};

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Agent workflow runtime: runs workflows of AI agents and keeps a durable record of what they did.
#[derive(Debug, Parser)]
#[command(name = "awr", version, propagate_version = true)]
struct Cli {
    /// Where runs are kept: a directory (the file store, `runs/<run-id>/...`),
    /// `sqlite:PATH` (the SQLite store in the database file PATH) or
    /// `postgres://USER@HOST[:PORT]/DATABASE` (the PostgreSQL store).
    #[arg(
        long,
        global = true,
        env = "AWR_STORAGE",
        // A PostgreSQL URL may hold a password: help never shows it.
        hide_env_values = true,
        default_value = "storage",
        value_parser = storage::Storage::parse
    )]
    storage: storage::Storage,

    #[command(subcommand)]
    command: Command,
}

/// `awr trace ...`.
#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Print a run's spans as a tree: the run, its node runs, their
    /// provider calls and tools, with durations, tokens and cost.
    Show {
        /// Run id (a unique prefix is enough).
        run: String,
        /// Print the spans that have ended as one OTLP/JSON request
        /// (what `awr trace export` sends).
        #[arg(long)]
        json: bool,
    },
    /// Send runs' spans to an OpenTelemetry collector over OTLP: those
    /// that have ended, the same ids each time, so sending again after an
    /// outage duplicates nothing a collector cannot tell.
    Export {
        /// Run ids (a unique prefix is enough); none: with --since, every
        /// run active since then (its calls' runs with it).
        #[arg(required_unless_present = "since")]
        runs: Vec<String>,
        /// Only spans that ended at or after TIME: an RFC 3339 time, or a
        /// duration ago (`90m`, `2h`): what a collector that was down for
        /// that long missed.
        #[arg(long, value_name = "TIME", value_parser = forms::Since::parse)]
        since: Option<forms::Since>,
        /// Where the collector takes OTLP (default: the
        /// `OTEL_EXPORTER_OTLP_*` variables, else localhost); an HTTP URL
        /// without a path gets `/v1/traces`.
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// `grpc` or `http/protobuf` (default: the `OTEL_EXPORTER_OTLP_*`
        /// variables, else `http/protobuf`).
        #[arg(long)]
        protocol: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workflow file; prints the final output on stdout and the run id on stderr.
    Run {
        /// Workflow file (YAML or JSON).
        file: PathBuf,
        /// Input of the first agent: JSON text, or `@FILE` to read it from a file.
        /// Text that is not JSON is an error; use --input-text for a string.
        #[arg(long)]
        input: Option<String>,
        /// Input of the first agent: this text, as a string.
        #[arg(long, value_name = "TEXT", conflicts_with = "input")]
        input_text: Option<String>,
        /// Serve every agent from this recording (`record-fixtures --out`)
        /// instead of its provider: each request is checked against the
        /// one recorded, and calls left unserved fail the run.
        #[arg(long, value_name = "DIR")]
        replay_from: Option<PathBuf>,
    },
    /// Run a workflow and keep its provider calls as a recording in DIR
    /// (fixture files, causal events, a manifest) that `provider: mock`
    /// and `verify-determinism` replay. Exit codes as for `run`.
    RecordFixtures {
        /// Workflow file (YAML or JSON).
        file: PathBuf,
        /// Input of the first agent: JSON text, or `@FILE` to read it from a file.
        #[arg(long)]
        input: Option<String>,
        /// Input of the first agent: this text, as a string.
        #[arg(long, value_name = "TEXT", conflicts_with = "input")]
        input_text: Option<String>,
        /// The recording's directory (created; one that holds files is refused).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Run a recording twice through the mock and compare the two runs'
    /// canonical output byte for byte: exit 0 identical, 1 diverged (the
    /// first divergence on stderr), 2 an invalid recording, 3 a replay that
    /// cannot run.
    VerifyDeterminism {
        /// The recording's directory (`record-fixtures --out`).
        recording: PathBuf,
        /// Print the result (and the divergence) as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Queue a run of a workflow file for a worker (`awr worker`) and print
    /// its id at once. Needs the PostgreSQL store.
    Submit {
        /// Workflow file (YAML or JSON). It and every file it calls are
        /// stored with the run: workers read them from the store.
        file: PathBuf,
        /// Input of the first agent: JSON text, or `@FILE` to read it from a file.
        /// Text that is not JSON is an error; use --input-text for a string.
        #[arg(long)]
        input: Option<String>,
        /// Input of the first agent: this text, as a string.
        #[arg(long, value_name = "TEXT", conflicts_with = "input")]
        input_text: Option<String>,
        /// Claimed before runs of a lower priority (default 0; may be negative).
        #[arg(
            long,
            value_name = "N",
            default_value_t = 0,
            allow_negative_numbers = true
        )]
        priority: i32,
    },
    /// Claim queued runs, and runs whose writer is gone, and run each to its
    /// end, until SIGTERM or SIGINT: then claim nothing more, hand every run
    /// over at its next safe point (another worker continues it) and exit 0.
    /// Needs the PostgreSQL store.
    Worker {
        /// How many runs it runs at once.
        #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
        concurrency: u16,
        /// Its name, recorded in the runs it takes over (`flow:resumed`'s
        /// `by`) and in the leases it holds. Default: worker@HOST:PID.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// How long it waits before it looks again at an empty queue, e.g.
        /// 500ms, 2s.
        #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = forms::parse_age)]
        poll: std::time::Duration,
        /// How long a run stays leased to it unless renewed (heartbeats renew
        /// it three times a term): how long a worker that hangs keeps its
        /// runs from the others, e.g. 30s.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = forms::parse_lease)]
        lease: std::time::Duration,
    },
    /// Check a workflow file without running it.
    Validate {
        /// Workflow file (YAML or JSON).
        file: PathBuf,
        /// Also start (or reach) each MCP server an agent is granted tools
        /// of, and check every grant against the tools it lists.
        #[arg(long)]
        connect: bool,
    },
    /// List runs, newest first: id, workflow, status, started, duration.
    Runs(terminal::query::RunsArgs),
    /// Show a run's current state (its snapshot).
    Show {
        /// Run id (a unique prefix is enough).
        run: String,
        /// Print the snapshot as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a run's events.
    Events {
        /// Run id (a unique prefix is enough).
        run: String,
        /// Print only the events after this offset.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Keep waiting for new events until the run ends.
        #[arg(long)]
        follow: bool,
        /// Print each event as its JSON line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        filter: terminal::query::EventFilterArgs,
    },
    /// Print a run's causal events (who sent what to whom: tasks, tool
    /// calls and returns, answers, state transitions), one canonical JSON
    /// line each, parents first.
    Causal {
        /// Run id (a unique prefix is enough).
        run: String,
    },
    /// A run's OpenTelemetry trace, projected from its log and those of the
    /// runs it called (docs/observability.md).
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Play a run's recorded events again, in order, at the pace they were
    /// recorded (audit playback: nothing is executed again).
    Replay {
        /// Run id (a unique prefix is enough).
        run: String,
        /// How many times faster than recorded (0.5: half as fast).
        #[arg(long, default_value = "1", allow_negative_numbers = true, value_parser = application::replay::parse_speed)]
        speed: f64,
        /// Longest wait between two events, in seconds (after --speed).
        #[arg(long, value_name = "SECS", default_value = "5", allow_negative_numbers = true, value_parser = application::replay::parse_max_wait)]
        max_wait: std::time::Duration,
        /// Replay only the events after this offset.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Print each event as its JSON line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        filter: terminal::query::EventFilterArgs,
    },
    /// Continue a paused or interrupted run from its log: every node run
    /// that was in flight goes on (an agent in its own session, told
    /// MESSAGE), then the rest of the workflow. Exit codes as for `run`.
    Resume {
        /// Run id (a unique prefix is enough).
        run: String,
        /// What the agents that were in flight are told.
        #[arg(long, default_value = "continue")]
        message: String,
        /// The workflow file, when it moved since the run started (it must
        /// be the same definition).
        #[arg(long, value_name = "FILE", conflicts_with = "upgrade")]
        workflow: Option<PathBuf>,
        /// Go on under an edited definition, read from FILE: refused (exit
        /// 2) unless every node in flight is in it; recorded as
        /// `flow:upgraded` with both hashes.
        #[arg(long, value_name = "FILE")]
        upgrade: Option<PathBuf>,
    },
    /// Branch a new run off RUN after its event at OFFSET (a copy of its
    /// log up to there) and run it from that state; prints like `run`.
    Fork {
        /// Run id (a unique prefix is enough).
        run: String,
        /// The offset of RUN's last event the fork keeps (from 1).
        #[arg(long, value_name = "OFFSET")]
        at: u64,
        /// Input of the nodes that start after the fork point, replacing
        /// the run's: JSON text, or `@FILE` to read it from a file.
        #[arg(long)]
        input: Option<String>,
    },
    /// List the interrupted runs (their process died); with --all, resume each.
    Recover {
        /// Resume every interrupted run, one after another.
        #[arg(long)]
        all: bool,
    },
    /// Send a message to a node run's agent; it reads it after its turn.
    Send {
        /// Run id (a unique prefix is enough).
        run: String,
        /// The node run (`nodeRunId`) the message is for.
        #[arg(long, value_name = "ID")]
        node_run: String,
        /// The message.
        message: String,
    },
    /// Answer a node run's agent; it reads it after its turn.
    Reply {
        /// Run id (a unique prefix is enough).
        run: String,
        /// The node run (`nodeRunId`) the answer is for.
        #[arg(long, value_name = "ID")]
        node_run: String,
        /// The answer.
        message: String,
    },
    /// Pause a run: it stops where it is; `awr resume` continues it.
    Pause {
        /// Run id (a unique prefix is enough).
        run: String,
    },
    /// Cancel a run for good.
    Cancel {
        /// Run id (a unique prefix is enough).
        run: String,
        /// Why, for the record.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Serve the HTTP API and the timeline UI (docs/http.md) until SIGINT or
    /// SIGTERM, which pause the runs it writes (`awr resume` continues them).
    /// Every request needs a token: the one given, the named ones of a
    /// tokens file, or one the server makes and prints (docs/security.md).
    Serve(serve::Flags),
    /// Serve awr's MCP tools on stdin and stdout (docs/mcp.md): an agent
    /// that starts `awr mcp` starts, waits for, reads and commands runs,
    /// recorded as the local user. Runs it started and still writes are
    /// paused when the client closes the connection.
    Mcp {
        /// Directory a workflow `path` of `start_run` must be inside.
        #[arg(long, value_name = "DIR", default_value = ".")]
        root: std::path::PathBuf,
        /// Let a workflow a client sends inline run programs on this machine
        /// (command nodes, the shell tool, CLI agents, ...).
        #[arg(long)]
        allow_inline_code: bool,
    },
    /// Delete finished runs (completed, failed, cancelled) that ended longer
    /// ago than DURATION, with their child runs; prints each run deleted.
    Prune {
        /// Age by end time, e.g. 30d, 12h, 90min.
        #[arg(long, value_name = "DURATION", value_parser = forms::parse_age)]
        older_than: std::time::Duration,
        /// Only runs with this status (completed, failed, cancelled or
        /// paused; repeat or separate with commas). Default: the finished ones.
        #[arg(long, value_name = "S", value_delimiter = ',', value_parser = terminal::prune::parse_status)]
        status: Vec<domain::RunStatus>,
        /// Print what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Copy every run from one storage to another (a directory, sqlite:PATH
    /// or postgres://…, any way), byte for byte; runs already there are skipped.
    Migrate {
        /// The storage to copy from.
        #[arg(long, value_name = "STORAGE", value_parser = storage::Storage::parse)]
        from: storage::Storage,
        /// The storage to copy to (created if missing).
        #[arg(long, value_name = "STORAGE", value_parser = storage::Storage::parse)]
        to: storage::Storage,
    },
    /// Print a run's exchange transcript (prompts, replies, tools).
    Transcript {
        /// Run id (a unique prefix is enough).
        run: String,
        /// Keep waiting for new lines until the run ends.
        #[arg(long)]
        follow: bool,
        /// Print each line as written (JSONL).
        #[arg(long)]
        json: bool,
        /// Print the execution tree across the run's and its children's files.
        #[arg(long, conflicts_with_all = ["follow", "json"])]
        tree: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    wiring::hide_environment();
    let runtime = match runtime_for(&cli.command).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            note(&format!("awr: cannot start the async runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    let dispatched = runtime.block_on(async {
        let result = dispatch(cli).await;
        // What the live export holds goes out before the process ends.
        awr_cli::embed::flush_spans(SPAN_FLUSH).await;
        result
    });
    match dispatched {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            report(&failure);
            ExitCode::from(failure.code())
        }
    }
}

/// How long a process waits, before it exits, for the live export to send
/// the spans it holds (they are on record either way).
const SPAN_FLUSH: std::time::Duration = std::time::Duration::from_secs(10);

/// The runtime a command runs on. A run is one writer and its node runs,
/// which hand each event to each other: on one thread a hand-off is a
/// queue push, across threads a futex wake-up and a context switch, which
/// made a step through `awr run` cost 1.7 x what it does on one thread
/// (agents are other processes or sockets, so they lose nothing; the
/// store syncs inline). `awr serve` runs many runs and many streams at
/// once, so it keeps a thread per core.
fn runtime_for(command: &Command) -> tokio::runtime::Builder {
    match command {
        Command::Serve(_) | Command::Worker { .. } | Command::Mcp { .. } => {
            tokio::runtime::Builder::new_multi_thread()
        }
        _ => tokio::runtime::Builder::new_current_thread(),
    }
}

async fn dispatch(cli: Cli) -> Result<(), Failure> {
    let storage = cli.storage;
    match cli.command {
        Command::Run {
            file,
            input,
            input_text,
            replay_from,
        } => {
            let input = match (&input, &input_text) {
                (Some(json), _) => terminal::run::Input::Json(json),
                (None, Some(text)) => terminal::run::Input::Text(text),
                (None, None) => terminal::run::Input::Default,
            };
            terminal::run::run(&storage, &file, input, replay_from.as_deref()).await
        }
        Command::Submit {
            file,
            input,
            input_text,
            priority,
        } => {
            let input = match (&input, &input_text) {
                (Some(json), _) => terminal::run::Input::Json(json),
                (None, Some(text)) => terminal::run::Input::Text(text),
                (None, None) => terminal::run::Input::Default,
            };
            terminal::queue::submit(&storage, &file, input, priority).await
        }
        Command::Worker {
            concurrency,
            name,
            poll,
            lease,
        } => {
            let args = terminal::queue::WorkerArgs {
                concurrency: usize::from(concurrency),
                name,
                poll,
                lease,
            };
            terminal::queue::worker(&storage, args).await
        }
        Command::RecordFixtures {
            file,
            input,
            input_text,
            out,
        } => {
            let input = match (&input, &input_text) {
                (Some(json), _) => terminal::run::Input::Json(json),
                (None, Some(text)) => terminal::run::Input::Text(text),
                (None, None) => terminal::run::Input::Default,
            };
            terminal::record::record(&storage, &file, input, &out).await
        }
        Command::VerifyDeterminism { recording, json } => {
            terminal::verify::verify(&recording, json).await
        }
        Command::Validate { file, connect } => terminal::run::validate(&file, connect).await,
        Command::Runs(args) => terminal::query::runs(&storage, &args).await,
        Command::Show { run, json } => terminal::inspect::show(&storage, &run, json).await,
        Command::Events {
            run,
            offset,
            follow,
            json,
            filter,
        } => terminal::inspect::events(&storage, &run, offset, follow, json, &filter, None).await,
        Command::Causal { run } => terminal::causal::causal(&storage, &run).await,
        Command::Trace(TraceCommand::Show { run, json }) => {
            terminal::trace::show(&storage, &run, json).await
        }
        Command::Trace(TraceCommand::Export {
            runs,
            since,
            endpoint,
            protocol,
        }) => {
            let to = terminal::trace::To {
                endpoint: endpoint.as_deref(),
                protocol: protocol.as_deref(),
            };
            terminal::trace::export(&storage, &runs, since, to).await
        }
        Command::Replay {
            run,
            speed,
            max_wait,
            offset,
            json,
            filter,
        } => {
            let pace = application::replay::Pace::new(wiring::clock_and_ids().0, speed, max_wait);
            terminal::inspect::replay(&storage, &run, offset, json, &filter, pace).await
        }
        Command::Resume {
            run,
            message,
            workflow,
            upgrade,
        } => match upgrade {
            Some(file) => terminal::control::upgrade(&storage, &run, Some(message), &file).await,
            None => {
                terminal::control::resume(&storage, &run, Some(message), workflow.as_deref()).await
            }
        },
        Command::Fork { run, at, input } => {
            terminal::fork::fork(&storage, &run, at, input.as_deref()).await
        }
        Command::Recover { all } => terminal::control::recover(&storage, all).await,
        Command::Send {
            run,
            node_run,
            message,
        } => {
            let command = terminal::control::Command::Message {
                kind: "send",
                node_run: &node_run,
                message: &message,
            };
            terminal::control::command(&storage, &run, command).await
        }
        Command::Reply {
            run,
            node_run,
            message,
        } => {
            let command = terminal::control::Command::Message {
                kind: "reply",
                node_run: &node_run,
                message: &message,
            };
            terminal::control::command(&storage, &run, command).await
        }
        Command::Pause { run } => {
            terminal::control::command(&storage, &run, terminal::control::Command::Pause).await
        }
        Command::Cancel { run, reason } => {
            let command = terminal::control::Command::Cancel {
                reason: reason.as_deref(),
            };
            terminal::control::command(&storage, &run, command).await
        }
        Command::Serve(flags) => {
            let (listen, config) = flags.settings(storage)?;
            serve::serve(listen, config).await
        }
        Command::Mcp {
            root,
            allow_inline_code,
        } => {
            let mut config = serve::Config::new(storage, root, serve::access::Access::Open);
            config.allow_inline_code = allow_inline_code;
            serve::mcp::stdio(serve::App::new(config).await?).await
        }
        Command::Prune {
            older_than,
            status,
            dry_run,
        } => terminal::prune::prune(&storage, older_than, status, dry_run).await,
        Command::Migrate { from, to } => terminal::migrate::migrate(&from, &to).await,
        Command::Transcript {
            run,
            follow,
            json,
            tree,
        } => {
            let run = terminal::inspect::resolve_id(&storage, &run).await?;
            terminal::transcript::transcript(&storage, run, follow, json, tree).await
        }
    }
}

/// Logs go to stderr, filtered by `AWR_LOG` (default: warnings and errors),
/// coloured only per [`stderr_color`]. A log line that cannot be written is
/// dropped without a word (the subscriber would otherwise report it on the
/// same closed stderr, which panics).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AWR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(wiring::log_writer)
        .with_ansi(stderr_color())
        .log_internal_errors(false)
        .with_target(false)
        .init();
}
