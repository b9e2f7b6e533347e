//! What a run must keep out of everything it writes and awr prints: the
//! values of its key variables.

use std::sync::Arc;

use application::ports::{RunObserver, RunStore, SpanSink, Transcripts};
use application::redact::{
    RedactingObserver, RedactingSpans, RedactingStore, RedactingTranscripts, Redactor,
};
use application::secrets::KeyNames;
use domain::WorkflowDef;

/// The key variables of a run and the redactor of their values: everything
/// a run writes (events, snapshot, transcript, progress, its output) goes
/// through it, and it becomes the redactor of logs and the last error.
pub struct Secrets {
    keys: KeyNames,
    redactor: Redactor,
}

impl Secrets {
    /// The key names `workflow` configures and the values awr's environment
    /// and the workflow's agents give them.
    pub fn of(workflow: &WorkflowDef) -> Self {
        let keys = KeyNames::of_workflow(workflow);
        let redactor = Redactor::new(keys.secret_values(env_vars(), Some(workflow)));
        set_printed(&redactor);
        Self { keys, redactor }
    }

    /// The key variables of the workflow, which child processes do not
    /// inherit unless their node needs them.
    pub fn keys(&self) -> &KeyNames {
        &self.keys
    }

    /// `store`, redacting what is written to it.
    pub fn store(&self, store: Arc<dyn RunStore>) -> Arc<dyn RunStore> {
        if self.redactor.is_empty() {
            return store;
        }
        Arc::new(RedactingStore::new(store, self.redactor.clone()))
    }

    /// `transcripts`, redacting every line.
    pub fn transcripts(&self, transcripts: Arc<dyn Transcripts>) -> Arc<dyn Transcripts> {
        if self.redactor.is_empty() {
            return transcripts;
        }
        Arc::new(RedactingTranscripts::new(
            transcripts,
            self.redactor.clone(),
        ))
    }

    /// `sink`, given spans redacted.
    pub fn spans(&self, sink: Arc<dyn SpanSink>) -> Arc<dyn SpanSink> {
        if self.redactor.is_empty() {
            return sink;
        }
        Arc::new(RedactingSpans::new(sink, self.redactor.clone()))
    }

    /// `observer`, shown redacted events.
    pub fn observer(&self, observer: Arc<dyn RunObserver>) -> Arc<dyn RunObserver> {
        if self.redactor.is_empty() {
            return observer;
        }
        Arc::new(RedactingObserver::new(observer, self.redactor.clone()))
    }

    /// `value` redacted, for printing.
    pub fn value(&self, mut value: serde_json::Value) -> serde_json::Value {
        self.redactor.value(&mut value);
        value
    }
}

/// The redactor of what awr prints besides a run's records (logs, the last
/// error): process-wide, as the log subscriber is. Built from awr's
/// environment at first use; a run's [`Secrets`] replace it with theirs,
/// which also know the workflow's configured key names.
static PRINTED: std::sync::RwLock<Option<Redactor>> = std::sync::RwLock::new(None);

fn printed() -> Redactor {
    if let Ok(guard) = PRINTED.read()
        && let Some(redactor) = guard.as_ref()
    {
        return redactor.clone();
    }
    let redactor = Redactor::new(KeyNames::default().secret_values(env_vars(), None));
    set_printed(&redactor);
    redactor
}

fn set_printed(redactor: &Redactor) {
    if let Ok(mut guard) = PRINTED.write() {
        *guard = Some(redactor.clone());
    }
}

/// `text` (an error about to be printed, whatever command it came from)
/// with key values redacted.
pub fn redact_printed(text: &str) -> String {
    printed().text(text).into_owned()
}

/// Where logs go: stderr, key values redacted. The log subscriber formats
/// each event whole and writes it in one call, so no value is split.
pub fn log_writer() -> RedactedStderr {
    RedactedStderr(printed())
}

/// Stderr through the process-wide redactor.
pub struct RedactedStderr(Redactor);

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(self.0.text(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// awr's environment, the variables that are text.
fn env_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
}
