//! A second process that tries to write a run of a store (a file store
//! directory, or `sqlite:PATH`), so the stores' tests can check that one
//! writer per run holds across processes, not just within one:
//!
//! `store-writer STORAGE RUN_ID append OFFSET` locks the run, appends one
//! warning at `OFFSET` and exits 0; if the lock is refused it prints the
//! error, tries the append anyway (which must be refused too) and exits 3.
//!
//! `store-writer STORAGE RUN_ID hold` locks the run, prints `locked`, and
//! holds the lock until killed or until its stdin closes.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use application::ports::RunStore;
use domain::{EventKind, Offset, RunId, RuntimeEvent, Timestamp};
use infrastructure::{FileRunStore, SqliteRunStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("store-writer: {message}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &[String]) -> Result<ExitCode, String> {
    let [storage, run, mode, rest @ ..] = args else {
        return Err("usage: store-writer STORAGE RUN_ID (append OFFSET | hold)".into());
    };
    let run: RunId = run.parse().map_err(|e| format!("run id `{run}`: {e:?}"))?;
    let store: Box<dyn RunStore> = match storage.strip_prefix("sqlite:") {
        Some(db) => Box::new(SqliteRunStore::open(db).map_err(|e| e.to_string())?),
        None => Box::new(FileRunStore::open(storage).map_err(|e| e.to_string())?),
    };
    match (mode.as_str(), rest) {
        ("append", [offset]) => {
            let offset: u64 = offset.parse().map_err(|e| format!("offset: {e}"))?;
            let event = warning(run, offset)?;
            let lock = store.lock(run).await;
            if let Err(e) = &lock {
                eprintln!("lock: {e}");
            }
            match store.append(run, &[event]).await {
                Ok(_) => store.flush(run).await.map_err(|e| e.to_string())?,
                Err(e) => eprintln!("append: {e}"),
            }
            Ok(if lock.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        ("hold", []) => {
            let _lock = store.lock(run).await.map_err(|e| format!("lock: {e}"))?;
            println!("locked");
            std::io::stdout().flush().map_err(|e| e.to_string())?;
            // Held until stdin reaches its end (or the process is killed).
            for line in std::io::stdin().lock().lines() {
                line.map_err(|e| e.to_string())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(format!("unknown mode `{mode}`")),
    }
}

fn warning(run: RunId, offset: u64) -> Result<RuntimeEvent, String> {
    Ok(RuntimeEvent {
        id: format!("second-process-{offset}"),
        offset: Offset::new(offset).map_err(|e| format!("offset: {e:?}"))?,
        timestamp: Timestamp::from_millis(1_767_225_600_000),
        run_id: run,
        node_id: None,
        node_run_id: None,
        kind: EventKind::Warning {
            message: "from a second process".into(),
            details: None,
        },
        extra: Default::default(),
    })
}
