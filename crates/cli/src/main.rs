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

mod args;
mod forms;
mod output;
mod progress;
mod serve;
mod signals;
mod terminal;
mod wiring;

use awr_cli::storage;

pub use output::{Failure, about_run, inert, note, report, say, stderr_color};

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command, TraceCommand};

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
        Command::Approve {
            run,
            node_run,
            data,
        } => terminal::approvals::answer(&storage, &run, &node_run, Ok(data.as_deref())).await,
        Command::Reject {
            run,
            node_run,
            reason,
        } => terminal::approvals::answer(&storage, &run, &node_run, Err(reason.as_deref())).await,
        Command::Approvals { run, json } => {
            terminal::approvals::list(&storage, run.as_deref(), json).await
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
            permission_prompt,
            run,
            node_run,
        } => {
            let mut config = serve::Config::new(storage, root, serve::access::Access::Open);
            config.allow_inline_code = allow_inline_code;
            let app = serve::App::new(config).await?;
            match (permission_prompt, run, node_run) {
                (true, Some(run), Some(node_run)) => {
                    serve::mcp::permission_prompt(app, &run, &node_run).await
                }
                _ => serve::mcp::stdio(app).await,
            }
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
