//! Keeps key values out of everything awr writes.
//!
//! [`Redactor`] replaces each secret value with `[redacted]` in text and in
//! every string (and object key) of a JSON value. Values shorter than
//! [`MIN_SECRET_LEN`] characters are left alone: a key is long, and
//! replacing a short value (`1`, `true`, `dev`) would deface unrelated text
//! everywhere. The decorators apply it where records are written — the run
//! store (events, snapshots), the transcripts, and the live observer — so
//! no writer has to remember it.

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use async_trait::async_trait;
use domain::definition::Definition;
use domain::snapshot::SnapshotDelta;
use domain::trace::{AttrValue, Attributes, Span, SpanStatus};
use domain::transcript::{ExchangeDraft, ExchangeEvent};
use domain::{RunId, RunSnapshot, RuntimeEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ports::{
    EventBatches, EventFilter, EventStream, RunLock, RunObserver, RunQuery, RunStore, RunSummary,
    SpanSink, SpanSlot, StoreError, Transcript, TranscriptError, Transcripts,
};

/// What a secret value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Shortest value redacted, in characters.
pub const MIN_SECRET_LEN: usize = 8;

/// Replaces secret values; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    matcher: Option<Arc<AhoCorasick>>,
}

impl Redactor {
    /// Redacts each of `secrets` at least [`MIN_SECRET_LEN`] characters long;
    /// where two overlap, the longer wins.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut values: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.chars().count() >= MIN_SECRET_LEN)
            .collect();
        values.sort();
        values.dedup();
        if values.is_empty() {
            return Self::default();
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&values)
            .map_err(|e| tracing::error!(error = %e, "cannot build the secret matcher"))
            .ok();
        Self {
            matcher: matcher.map(Arc::new),
        }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// `text` with every secret replaced.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.matcher {
            Some(m) if m.is_match(text) => {
                Cow::Owned(m.replace_all(text, &vec![REDACTED; m.patterns_len()]))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// Redacts every string and object key of `value` in place; says whether
    /// anything changed.
    pub fn value(&self, value: &mut Value) -> bool {
        if self.is_empty() {
            return false;
        }
        match value {
            Value::String(s) => match self.text(s) {
                Cow::Owned(new) => {
                    *s = new;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.value(item) | changed),
            Value::Object(map) => {
                let mut changed = false;
                let keys: Vec<String> = map.keys().cloned().collect();
                for key in keys {
                    if let Cow::Owned(new) = self.text(&key)
                        && let Some(item) = map.remove(&key)
                    {
                        map.insert(new, item);
                        changed = true;
                    }
                }
                map.values_mut()
                    .fold(changed, |changed, item| self.value(item) | changed)
            }
            _ => false,
        }
    }

    /// `record` with every secret replaced: unchanged records are borrowed.
    /// A record whose redacted form no longer reads as its type (a secret
    /// inside an id) is an error, never written as it was.
    pub fn record<'a, T: Serialize + DeserializeOwned + Clone>(
        &self,
        record: &'a T,
    ) -> Result<Cow<'a, T>, String> {
        if self.is_empty() {
            return Ok(Cow::Borrowed(record));
        }
        let mut value = serde_json::to_value(record).map_err(|e| e.to_string())?;
        if !self.value(&mut value) {
            return Ok(Cow::Borrowed(record));
        }
        serde_json::from_value(value)
            .map(Cow::Owned)
            .map_err(|e| format!("a key value sits where it cannot be redacted: {e}"))
    }
}

/// A [`RunStore`] that redacts events and snapshots before they are written.
pub struct RedactingStore {
    inner: Arc<dyn RunStore>,
    redactor: Redactor,
}

impl RedactingStore {
    /// Writes through `inner`, redacting with `redactor`.
    pub fn new(inner: Arc<dyn RunStore>, redactor: Redactor) -> Self {
        Self { inner, redactor }
    }
}

#[async_trait]
impl RunStore for RedactingStore {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.create_run(run_id).await
    }

    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.lock(run_id).await
    }

    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.inner.has_writer(run_id).await
    }

    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        let mut redacted: Option<Vec<RuntimeEvent>> = None;
        for (i, event) in events.iter().enumerate() {
            if let Cow::Owned(new) = self.redactor.record(event).map_err(StoreError::io_msg)? {
                redacted.get_or_insert_with(|| events.to_vec())[i] = new;
            }
        }
        self.inner
            .append(run_id, redacted.as_deref().unwrap_or(events))
            .await
    }

    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.flush(run_id).await
    }

    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read(run_id, after, limit).await
    }

    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        self.inner.last_offset(run_id).await
    }

    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.inner.follow(run_id, after).await
    }

    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        let snapshot = self.redactor.record(snapshot).map_err(StoreError::io_msg)?;
        self.inner.save_snapshot(&snapshot).await
    }

    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        let delta = self.redactor.record(delta).map_err(StoreError::io_msg)?;
        self.inner.save_snapshot_delta(&delta).await
    }

    fn needs_final_snapshot(&self) -> bool {
        self.inner.needs_final_snapshot()
    }

    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        self.inner.load_snapshot(run_id).await
    }

    /// As written: a workflow's files name the variables that hold keys,
    /// never their values.
    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        self.inner.save_definition(definition).await
    }

    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
        self.inner.load_definition(hash).await
    }

    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner.list_runs().await
    }

    async fn query_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.query_runs(query).await
    }

    async fn read_matching(
        &self,
        run_id: RunId,
        after: u64,
        filter: &EventFilter,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read_matching(run_id, after, filter, limit).await
    }

    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.delete_run(run_id).await
    }

    /// Not redacted: an import copies records that were redacted when written.
    async fn import_run(
        &self,
        run_id: RunId,
        events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.inner.import_run(run_id, events, snapshot).await
    }
}

/// [`Transcripts`] whose lines are redacted before they are written.
pub struct RedactingTranscripts {
    inner: Arc<dyn Transcripts>,
    redactor: Redactor,
}

impl RedactingTranscripts {
    /// Opens through `inner`, redacting with `redactor`.
    pub fn new(inner: Arc<dyn Transcripts>, redactor: Redactor) -> Self {
        Self { inner, redactor }
    }
}

#[async_trait]
impl Transcripts for RedactingTranscripts {
    async fn open(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<dyn Transcript>, TranscriptError> {
        let inner = self.inner.open(run_id, parent_run_id).await?;
        Ok(Arc::new(RedactingTranscript {
            inner,
            redactor: self.redactor.clone(),
        }))
    }
}

struct RedactingTranscript {
    inner: Arc<dyn Transcript>,
    redactor: Redactor,
}

#[async_trait]
impl Transcript for RedactingTranscript {
    async fn append(&self, mut draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError> {
        // The payload holds every text of a line; the rest are ids, a kind,
        // a step path of node names, a count and a time.
        self.redactor.value(&mut draft.payload);
        if let Cow::Owned(path) = self.redactor.text(&draft.path) {
            draft.path = path;
        }
        self.inner.append(draft).await
    }

    async fn flush(&self) -> Result<(), TranscriptError> {
        self.inner.flush().await
    }

    fn fence(&self, epoch: i64) {
        self.inner.fence(epoch);
    }

    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}

/// A [`SpanSink`] whose spans go out redacted: they are projected from
/// the events as recorded, before the store redacts them.
pub struct RedactingSpans {
    inner: Arc<dyn SpanSink>,
    redactor: Redactor,
}

impl RedactingSpans {
    /// Hands spans to `inner`, redacted with `redactor`.
    pub fn new(inner: Arc<dyn SpanSink>, redactor: Redactor) -> Self {
        Self { inner, redactor }
    }
}

impl SpanSink for RedactingSpans {
    fn reserve(&self) -> Option<Box<dyn SpanSlot>> {
        let inner = self.inner.reserve()?;
        Some(Box::new(RedactingSlot {
            inner,
            redactor: self.redactor.clone(),
        }))
    }

    fn captures_content(&self) -> bool {
        self.inner.captures_content()
    }
}

struct RedactingSlot {
    inner: Box<dyn SpanSlot>,
    redactor: Redactor,
}

impl SpanSlot for RedactingSlot {
    fn send(self: Box<Self>, mut span: Span) {
        let redactor = &self.redactor;
        let text = |s: &mut String| {
            if let Cow::Owned(redacted) = redactor.text(s) {
                *s = redacted;
            }
        };
        let attributes = |a: &mut Attributes| {
            for (_, value) in &mut a.0 {
                if let AttrValue::Str(s) = value {
                    text(s);
                }
            }
        };
        text(&mut span.name);
        attributes(&mut span.attributes);
        for event in &mut span.events {
            text(&mut event.name);
            attributes(&mut event.attributes);
        }
        if let SpanStatus::Error(message) = &mut span.status {
            text(message);
        }
        self.inner.send(span);
    }
}

/// A [`RunObserver`] that sees events redacted (it prints them).
pub struct RedactingObserver {
    inner: Arc<dyn RunObserver>,
    redactor: Redactor,
}

impl RedactingObserver {
    /// Shows `inner` events redacted with `redactor`.
    pub fn new(inner: Arc<dyn RunObserver>, redactor: Redactor) -> Self {
        Self { inner, redactor }
    }
}

impl RunObserver for RedactingObserver {
    fn on_event(&self, event: &RuntimeEvent) {
        match self.redactor.record(event) {
            Ok(event) => self.inner.on_event(&event),
            Err(e) => tracing::warn!(error = %e, "an event was not shown"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &str = "sk-test-0123456789";

    #[test]
    fn every_occurrence_in_text_and_json_is_replaced() {
        let r = Redactor::new([KEY.to_owned(), "short".to_owned()]);
        assert_eq!(
            r.text(&format!("a {KEY} b {KEY}")),
            "a [redacted] b [redacted]"
        );
        assert!(matches!(r.text("short and clean"), Cow::Borrowed(_)));
        let mut value = json!({"k": [format!("x{KEY}"), 3]});
        value[KEY] = json!({"n": KEY});
        assert!(r.value(&mut value));
        assert_eq!(
            value,
            json!({"k": ["x[redacted]", 3], "[redacted]": {"n": "[redacted]"}})
        );
    }

    /// A snapshot delta is redacted as a snapshot is, its outputs included,
    /// and still reads back as a delta.
    #[test]
    fn a_snapshot_delta_is_redacted_whole() {
        let r = Redactor::new([KEY.to_owned()]);
        let run: RunId = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap();
        let node = domain::NodeId::new("a").unwrap();
        let mut state = RunSnapshot::new(run);
        let output = json!({"data": format!("the key is {KEY}"), "metadata": {}});
        state
            .outputs
            .insert(node.clone(), domain::JsonText::from_value(&output));
        state.state.insert("k".into(), json!(KEY));
        let mut changes = domain::snapshot::Changes::default();
        let event = RuntimeEvent {
            id: "e".into(),
            offset: domain::Offset::FIRST,
            timestamp: domain::Timestamp::from_millis(0),
            run_id: run,
            node_id: Some(node.clone()),
            node_run_id: None,
            kind: domain::EventKind::NodeSkipped {
                reason: String::new(),
            },
            extra: Default::default(),
        };
        changes.note(&event);
        let delta = state.delta(0, &changes);
        let redacted = r.record(&delta).unwrap();
        let mut line = Vec::new();
        redacted.write_json(&mut line).unwrap();
        let text = String::from_utf8(line).unwrap();
        assert!(!text.contains(KEY) && text.contains(REDACTED), "{text}");
        assert!(SnapshotDelta::from_json(text.as_bytes()).is_ok());
    }

    #[test]
    fn the_longer_of_overlapping_secrets_wins() {
        let r = Redactor::new(["abcdefgh".to_owned(), "abcdefgh-longer".to_owned()]);
        assert_eq!(r.text("<abcdefgh-longer>"), "<[redacted]>");
    }

    #[test]
    fn values_shorter_than_the_minimum_are_not_redacted() {
        let r = Redactor::new(["1234567".to_owned(), String::new()]);
        assert!(r.is_empty());
        assert_eq!(r.text("1234567"), "1234567");
    }
}
