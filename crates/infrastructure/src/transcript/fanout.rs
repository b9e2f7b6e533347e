//! Live fan-out of transcript lines (seed 000, "Live subscribers"): one
//! bounded channel per subscriber, drop-newest when it is full, so a slow or
//! stalled consumer costs the writer one failed `try_send` and never a wait.
//!
//! The writer owns the sending side ([`Slot`]s, kept under the recorder's
//! lock so lines reach every subscriber in `seq` order); a subscriber owns the
//! receiving side ([`TranscriptSubscriber`]). Lines travel as
//! `Arc<ExchangeEvent>`: the writer pays a reference count per subscriber,
//! and each receiver pays for its own copy when it takes one.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use domain::transcript::ExchangeEvent;
use tokio::sync::mpsc::{self, error::TrySendError};

/// Events buffered per subscriber unless it asks otherwise (seed 000): a
/// step's burst of stream chunks and tool lines fits, so a consumer that
/// keeps up on average loses nothing, while a stalled one pins at most a few
/// hundred events of memory.
pub const DEFAULT_SUBSCRIBER_CAPACITY: usize = 256;

/// At most one drop warning per subscriber per this interval (seed 000: "a
/// rate-limited WARN (1/s)"): a stalled consumer drops every line, and a
/// warning per line would flood the log it is meant to inform.
const WARN_INTERVAL: Duration = Duration::from_secs(1);

/// What a subscriber and the writer both see.
#[derive(Debug)]
struct Shared {
    /// Stable id, for [`SubscriberStats`] and log lines.
    id: u64,
    /// Lines dropped for this subscriber because its buffer was full.
    dropped: AtomicU64,
    /// Set by [`TranscriptSubscriber::close`]; the writer then forgets the slot.
    closed: AtomicBool,
}

/// The writer's end of one subscription; lives in the recorder's locked state.
#[derive(Debug)]
pub(super) struct Slot {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Arc<ExchangeEvent>>,
    capacity: usize,
    /// When this subscriber's last drop warning was logged.
    last_warn: Option<Instant>,
    /// Drops since that warning, reported by the next one.
    unreported: u64,
}

/// A new subscription: the writer's slot and the consumer's end.
pub(super) fn subscription(id: u64, capacity: usize) -> (Slot, TranscriptSubscriber) {
    // tokio's bounded channel needs at least one place.
    let capacity = capacity.max(1);
    let (tx, rx) = mpsc::channel(capacity);
    let shared = Arc::new(Shared {
        id,
        dropped: AtomicU64::new(0),
        closed: AtomicBool::new(false),
    });
    let slot = Slot {
        shared: Arc::clone(&shared),
        tx,
        capacity,
        last_warn: None,
        unreported: 0,
    };
    (slot, TranscriptSubscriber { rx, shared })
}

/// Offers `event` to every subscriber without waiting; forgets subscribers
/// that closed or went away. Returns the event (for the caller of `append`)
/// and how many drops it caused.
pub(super) fn broadcast(
    slots: &mut Vec<Slot>,
    event: ExchangeEvent,
    file: &Path,
) -> (Delivered, u64) {
    let mut drops = 0;
    // Fast path when no subscriber has room (typically: only stalled ones):
    // count the drops without putting the event behind an `Arc`, so a
    // stalled subscriber costs the writer as little as possible.
    if slots.iter().all(|slot| slot.tx.capacity() == 0) {
        slots.retain_mut(|slot| {
            if slot.is_gone() {
                return false;
            }
            drops += 1;
            slot.record_drop(event.seq, file);
            true
        });
        return (Delivered::Alone(event), drops);
    }
    let shared = Arc::new(event);
    slots.retain_mut(|slot| {
        if slot.shared.closed.load(Ordering::Acquire) {
            return false;
        }
        match slot.tx.try_send(Arc::clone(&shared)) {
            Ok(()) => true,
            Err(TrySendError::Closed(_)) => false,
            Err(TrySendError::Full(_)) => {
                drops += 1;
                slot.record_drop(shared.seq, file);
                true
            }
        }
    });
    (Delivered::Shared(shared), drops)
}

/// A broadcast line, handed back to the writer.
#[derive(Debug)]
pub(super) enum Delivered {
    /// No subscriber took it.
    Alone(ExchangeEvent),
    /// Subscribers hold it too.
    Shared(Arc<ExchangeEvent>),
}

impl Delivered {
    /// The line; a copy if subscribers still hold it, which the writer makes
    /// after releasing its lock.
    pub(super) fn into_event(self) -> ExchangeEvent {
        match self {
            Self::Alone(event) => event,
            Self::Shared(shared) => Arc::unwrap_or_clone(shared),
        }
    }
}

impl Slot {
    /// Whether the subscriber closed or was dropped.
    fn is_gone(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire) || self.tx.is_closed()
    }

    /// Counts a drop and warns if this subscriber has not been warned about
    /// within [`WARN_INTERVAL`].
    fn record_drop(&mut self, seq: u64, file: &Path) {
        let total = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        self.unreported += 1;
        let now = Instant::now();
        if self
            .last_warn
            .is_some_and(|at| now.duration_since(at) < WARN_INTERVAL)
        {
            return;
        }
        self.last_warn = Some(now);
        tracing::warn!(
            file = %file.display(),
            subscriber = self.shared.id,
            seq,
            dropped = self.unreported,
            dropped_total = total,
            capacity = self.capacity,
            "transcript subscriber is not keeping up; dropping its newest events"
        );
        self.unreported = 0;
    }

    /// This subscription's figures.
    pub(super) fn stats(&self) -> SubscriberStats {
        SubscriberStats {
            id: self.shared.id,
            capacity: self.capacity,
            dropped: self.shared.dropped.load(Ordering::Relaxed),
        }
    }
}

/// One live subscriber's figures in [`TranscriptStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriberStats {
    /// The subscriber ([`TranscriptSubscriber::id`]).
    pub id: u64,
    /// Its buffer size in events.
    pub capacity: usize,
    /// Lines it missed because its buffer was full.
    pub dropped: u64,
}

/// The fan-out's figures (seed 000's `FanOut.Stats()`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TranscriptStats {
    /// Lines this recorder has written.
    pub written: u64,
    /// Live subscribers, oldest first.
    pub subscribers: Vec<SubscriberStats>,
    /// Drops across all subscribers ever, including ones gone since.
    pub dropped_total: u64,
}

/// A live view of a transcript: the lines appended after it subscribed, in
/// `seq` order, minus those dropped while its buffer was full.
#[derive(Debug)]
pub struct TranscriptSubscriber {
    rx: mpsc::Receiver<Arc<ExchangeEvent>>,
    shared: Arc<Shared>,
}

impl TranscriptSubscriber {
    /// The next line; `None` once this subscriber is closed, or once the
    /// recorder is closed and the buffered lines have been received.
    pub async fn recv(&mut self) -> Option<ExchangeEvent> {
        if self.shared.closed.load(Ordering::Acquire) {
            return None;
        }
        self.rx.recv().await.map(Arc::unwrap_or_clone)
    }

    /// Lines this subscriber missed because its buffer was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Its id in [`TranscriptStats`].
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Stops this subscription: `recv` returns `None` from now on (buffered
    /// lines are discarded) and the writer forgets it at its next line.
    /// Idempotent; dropping the subscriber has the same effect.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::transcript::ExchangeType;
    use domain::{RunId, Timestamp};

    use super::*;

    fn event(seq: u64) -> ExchangeEvent {
        ExchangeEvent {
            seq,
            run_id: RunId::new(uuid::Uuid::new_v4()).unwrap(),
            parent_run_id: None,
            child_run_id: None,
            kind: ExchangeType::RunStarted,
            path: String::new(),
            iteration: 0,
            timestamp: Timestamp::from_millis(0),
            payload: serde_json::Value::Null,
            extra: Default::default(),
        }
    }

    #[test]
    fn drops_warn_at_most_once_a_second_per_subscriber() {
        let (slot, sub) = subscription(1, 1);
        let mut slots = vec![slot];
        let file = Path::new("t.jsonl");
        assert_eq!(broadcast(&mut slots, event(1), file).1, 0);
        assert_eq!(broadcast(&mut slots, event(2), file).1, 1);
        let first_warning = slots[0].last_warn.unwrap();
        assert_eq!(slots[0].unreported, 0, "the first drop is reported at once");
        for seq in 3..6 {
            assert_eq!(broadcast(&mut slots, event(seq), file).1, 1);
        }
        assert_eq!(
            slots[0].last_warn,
            Some(first_warning),
            "no second warning within 1 s"
        );
        assert_eq!(slots[0].unreported, 3);
        assert_eq!(sub.dropped(), 4);
        // An interval later, the next drop warns and reports the backlog.
        slots[0].last_warn = first_warning.checked_sub(WARN_INTERVAL);
        broadcast(&mut slots, event(6), file);
        assert_eq!(slots[0].unreported, 0);
        drop(sub);
        assert_eq!(broadcast(&mut slots, event(7), file).1, 0);
        assert!(slots.is_empty(), "a dropped subscriber is forgotten");
    }

    #[test]
    fn capacity_zero_means_one() {
        let (slot, _sub) = subscription(1, 0);
        assert_eq!(slot.stats().capacity, 1);
    }
}
