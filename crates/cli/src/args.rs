//! The command line's grammar: every subcommand of `awr`, its flags and
//! their help, as clap reads them. `main` dispatches what they parse to.

use std::path::PathBuf;

use awr_cli::storage;
use clap::{Parser, Subcommand};

use crate::{forms, serve, terminal};

/// Agent workflow runtime: runs workflows of AI agents and keeps a durable record of what they did.
#[derive(Debug, Parser)]
#[command(name = "awr", version, propagate_version = true)]
pub(crate) struct Cli {
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
    pub(crate) storage: storage::Storage,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// `awr trace ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum TraceCommand {
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
pub(crate) enum Command {
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
    /// Approve what an approval node run asks (docs/approvals.md); a run
    /// that was waiting for it goes on in this process.
    Approve {
        /// Run id (a unique prefix is enough).
        run: String,
        /// The node run (`nodeRunId`) that asks.
        #[arg(long, value_name = "ID")]
        node_run: String,
        /// The answer's data, as JSON (checked against the approval's schema).
        #[arg(long, value_name = "JSON")]
        data: Option<String>,
    },
    /// Reject what an approval node run asks; a run that was waiting for it
    /// goes on in this process.
    Reject {
        /// Run id (a unique prefix is enough).
        run: String,
        /// The node run (`nodeRunId`) that asks.
        #[arg(long, value_name = "ID")]
        node_run: String,
        /// Why, for the record and the workflow.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// List the questions that wait for an answer: of every run, or of one.
    Approvals {
        /// Only this run's (a unique prefix is enough).
        #[arg(long)]
        run: Option<String>,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
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
        /// Serve only awr's permission prompt for node run `--node-run` of
        /// run `--run`: what awr gives a Claude Code agent whose grants ask a
        /// person (`requires_approval`).
        #[arg(long, requires_all = ["run", "node_run"], conflicts_with = "allow_inline_code")]
        permission_prompt: bool,
        /// The run (`--permission-prompt`).
        #[arg(long, value_name = "RUN", requires = "permission_prompt")]
        run: Option<String>,
        /// The node run (`--permission-prompt`).
        #[arg(long, value_name = "ID", requires = "permission_prompt")]
        node_run: Option<String>,
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
