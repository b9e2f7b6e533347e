//! The live export ([`LiveExport`]): spans that runs hand over as they end
//! wait in one bounded queue, and one thread sends them in batches over the
//! OTLP exporter, as the OpenTelemetry SDK's batch span processor does,
//! with its settings (`OTEL_BSP_*`), and counts them in the metrics it
//! sends ([`Metrics`]). A thread of its own, as the SDK's processor has:
//! translating and encoding spans, measuring them and the requests are off
//! the runs' thread (`awr run` drives its run on one), so a run pays only
//! for handing a span over.
//!
//! Why it is not the SDK's processor: a run reserves room for a span when
//! the event that ends it is recorded and sends it once that event is
//! stored, and counts the spans there was no room for in its own log
//! (`application::ports::SpanSink`). A processor takes spans and drops
//! them out of sight.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use application::ports::{SpanSink, SpanSlot};
use domain::trace::Span;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::export::{ExportError, Exporter, signal_wanted};
use super::metrics::Metrics;

/// How the queue and its batches are sized, and how long a span waits for
/// others to go with it: `OTEL_BSP_MAX_QUEUE_SIZE` (2048),
/// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), `OTEL_BSP_SCHEDULE_DELAY` (5000
/// ms), the specification's variables and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    /// Spans the queue holds; one more is dropped.
    pub max_queue: usize,
    /// Spans sent in one request at most.
    pub max_batch: usize,
    /// How long the first span of a batch waits for more.
    pub delay: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            max_queue: 2048,
            max_batch: 512,
            delay: Duration::from_millis(5000),
        }
    }
}

impl QueueSettings {
    /// The settings the `OTEL_BSP_*` variables give; one that is not a
    /// positive whole number names itself in the error.
    pub fn from_env() -> Result<Self, ExportError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, ExportError> {
        let read = |name: &str, default: u64| -> Result<u64, ExportError> {
            match var(name).filter(|v| !v.trim().is_empty()) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        ExportError::Build(format!("{name}={v}: expected a positive whole number"))
                    }),
            }
        };
        let defaults = Self::default();
        let max_queue = read("OTEL_BSP_MAX_QUEUE_SIZE", defaults.max_queue as u64)?;
        let max_batch = read("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", defaults.max_batch as u64)?;
        let delay = read("OTEL_BSP_SCHEDULE_DELAY", 5000)?;
        let max_queue = usize::try_from(max_queue).unwrap_or(usize::MAX);
        Ok(Self {
            max_queue,
            // A batch larger than the queue is the queue.
            max_batch: usize::try_from(max_batch)
                .unwrap_or(usize::MAX)
                .min(max_queue),
            delay: Duration::from_millis(delay),
        })
    }
}

/// Whether the standard variables ask for spans to be exported: an OTLP
/// endpoint is named (`OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and neither `OTEL_SDK_DISABLED=true`
/// nor `OTEL_TRACES_EXPORTER=none` turns it off.
pub fn wanted() -> bool {
    wanted_by(|name| std::env::var(name).ok())
}

fn wanted_by(var: impl Fn(&str) -> Option<String>) -> bool {
    signal_wanted(
        var,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_TRACES_EXPORTER",
    )
}

/// Whether spans are to carry the content of calls, as the conventions'
/// variable says: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` set
/// to `true`, `SPAN_ONLY` or `SPAN_AND_EVENT` (any case). Off otherwise.
pub fn captures_content() -> bool {
    captures_content_by(|name| std::env::var(name).ok())
}

fn captures_content_by(var: impl Fn(&str) -> Option<String>) -> bool {
    var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT").is_some_and(|v| {
        let v = v.trim();
        ["true", "span_only", "span_and_event"]
            .iter()
            .any(|on| v.eq_ignore_ascii_case(on))
    })
}

/// Where the live export sends: spans, metrics, or both.
#[derive(Debug, Default)]
pub struct Outlets {
    /// The spans' exporter; `None` when only metrics are wanted.
    pub spans: Option<Exporter>,
    /// The metrics; `None` when only spans are wanted.
    pub metrics: Option<Metrics>,
}

/// A span in the queue, and whether it counts in the metrics (a fork's
/// copied spans were counted in their parent run).
#[derive(Debug)]
struct Ended {
    span: Span,
    counted: bool,
}

/// Spans queued by the runs of this process, sent by one task.
#[derive(Debug)]
pub struct LiveExport {
    /// Whether the runs' spans carry the content of calls.
    capture_content: bool,
    queue: mpsc::Sender<Ended>,
    stop: CancellationToken,
    /// Fired by the sending thread once it has sent what was queued.
    done: Mutex<Option<oneshot::Receiver<()>>>,
}

impl LiveExport {
    /// Starts the thread that sends the queued spans and their metrics
    /// with the exporters `make` builds (there: a gRPC exporter belongs to
    /// the runtime it was built on). Its error, or a thread that cannot
    /// start, is returned.
    pub fn start(
        make: impl FnOnce() -> Result<Outlets, ExportError> + Send + 'static,
        settings: QueueSettings,
    ) -> Result<Arc<Self>, ExportError> {
        let (queue, spans) = mpsc::channel(settings.max_queue.max(1));
        let stop = CancellationToken::new();
        let (done_tx, done) = oneshot::channel();
        let (built_tx, built) = std::sync::mpsc::channel();
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("awr-span-export".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = built_tx.send(Err(ExportError::Build(e.to_string())));
                        return;
                    }
                };
                let outlets = match runtime.block_on(async { make() }) {
                    Ok(outlets) => outlets,
                    Err(e) => {
                        let _ = built_tx.send(Err(e));
                        return;
                    }
                };
                let _ = built_tx.send(Ok(()));
                runtime.block_on(send_queued(spans, outlets, settings, stopped));
                let _ = done_tx.send(());
            })
            .map_err(|e| ExportError::Build(format!("cannot start the export thread: {e}")))?;
        built
            .recv()
            .map_err(|_| ExportError::Build("the export thread ended at once".into()))??;
        Ok(Arc::new(Self {
            capture_content: captures_content(),
            queue,
            stop,
            done: Mutex::new(Some(done)),
        }))
    }

    /// Sends what is queued, then stops; gives up after `within` (what is
    /// left is on record: `awr trace export` sends it).
    pub async fn shutdown(&self, within: Duration) {
        self.stop.cancel();
        let done = match self.done.lock() {
            Ok(mut done) => done.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(done) = done
            && tokio::time::timeout(within, done).await.is_err()
        {
            tracing::warn!(
                within_ms = within.as_millis() as u64,
                "the span export did not finish in time; `awr trace export` sends the runs' spans"
            );
        }
    }
}

impl SpanSink for LiveExport {
    fn reserve(&self) -> Option<Box<dyn SpanSlot>> {
        if self.stop.is_cancelled() {
            return None;
        }
        let permit = self.queue.clone().try_reserve_owned().ok()?;
        Some(Box::new(Slot(permit)))
    }

    fn captures_content(&self) -> bool {
        self.capture_content
    }
}

/// Room for one span in the queue.
struct Slot(mpsc::OwnedPermit<Ended>);

impl SpanSlot for Slot {
    fn send(self: Box<Self>, span: Span) {
        self.0.send(Ended {
            span,
            counted: true,
        });
    }

    fn send_copied(self: Box<Self>, span: Span) {
        self.0.send(Ended {
            span,
            counted: false,
        });
    }
}

/// The longest a span waits in the queue, whatever `OTEL_BSP_SCHEDULE_DELAY`
/// says: the queue is read at least this often, so that it holds a busy
/// server's spans between two reads (2,048 spans take 5 s of 400 spans a
/// second at the specification's delay, a fifth of a second here).
const LONGEST_WAIT: Duration = Duration::from_millis(200);

/// The sending thread's loop: every `delay` (at most [`LONGEST_WAIT`]) what
/// is queued is counted and goes out, in batches of up to `max_batch`; the
/// metrics every interval of theirs; once stopped, what is left of both.
/// The queue is read on a timer, never woken by a run: handing a span over
/// costs a run no wake-up of this thread (a system call).
async fn send_queued(
    mut spans: mpsc::Receiver<Ended>,
    outlets: Outlets,
    settings: QueueSettings,
    stop: CancellationToken,
) {
    let tick = settings.delay.min(LONGEST_WAIT);
    let mut batch = Vec::with_capacity(settings.max_batch.min(64));
    let mut metrics_due = outlets
        .metrics
        .as_ref()
        .map(|m| tokio::time::Instant::now() + m.interval());
    loop {
        let stopping = tokio::select! {
            biased;
            () = stop.cancelled() => true,
            () = tokio::time::sleep(tick) => false,
        };
        while let Ok(Ended { span, counted }) = spans.try_recv() {
            if let (Some(metrics), true) = (&outlets.metrics, counted) {
                metrics.record(&span);
            }
            if let Some(exporter) = &outlets.spans {
                batch.push(span);
                if batch.len() >= settings.max_batch {
                    send(exporter, &mut batch).await;
                }
            }
        }
        let metrics = match (&outlets.metrics, metrics_due.as_mut()) {
            (Some(metrics), Some(due)) if stopping || tokio::time::Instant::now() >= *due => {
                *due = tokio::time::Instant::now() + metrics.interval();
                Some(metrics)
            }
            _ => None,
        };
        // Side by side: a collector slow to take one does not hold the
        // other back (at exit, both have the same time left).
        tokio::join!(
            async {
                if let Some(exporter) = &outlets.spans {
                    send(exporter, &mut batch).await;
                }
            },
            async {
                if let Some(metrics) = metrics {
                    metrics.send().await;
                }
            }
        );
        if stopping {
            if let Some(metrics) = &outlets.metrics {
                metrics.shutdown();
            }
            return;
        }
    }
}

/// Sends `batch` and empties it; a failure is logged with the runs whose
/// spans it held (their logs keep them for `awr trace export`).
async fn send(exporter: &Exporter, batch: &mut Vec<Span>) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    if let Err(e) = exporter.export(super::span_data(&spans)).await {
        let runs: BTreeSet<String> = spans
            .iter()
            .map(|s| uuid::Uuid::from_bytes(s.trace_id.0).to_string())
            .collect();
        tracing::warn!(
            spans = spans.len(),
            runs = %runs.into_iter().collect::<Vec<_>>().join(" "),
            error = %e,
            "spans were not exported; `awr trace export RUN` sends them again"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::export::vars;
    use super::*;

    #[test]
    fn an_endpoint_turns_the_export_on_and_the_standard_switches_turn_it_off() {
        assert!(!wanted_by(vars(&[])));
        assert!(!wanted_by(vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert!(wanted_by(vars(&[on])));
        assert!(wanted_by(vars(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4318/v1/traces"
        )])));
        assert!(!wanted_by(vars(&[on, ("OTEL_SDK_DISABLED", "TRUE")])));
        assert!(!wanted_by(vars(&[on, ("OTEL_TRACES_EXPORTER", "none")])));
        assert!(wanted_by(vars(&[on, ("OTEL_TRACES_EXPORTER", "otlp")])));
    }

    #[test]
    fn content_is_captured_only_when_the_conventions_variable_says_so() {
        let var = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
        assert!(!captures_content_by(vars(&[])));
        for on in ["true", "TRUE", "span_only", "SPAN_AND_EVENT"] {
            assert!(captures_content_by(vars(&[(var, on)])), "{on}");
        }
        for off in ["false", "NO_CONTENT", "EVENT_ONLY", "yes please"] {
            assert!(!captures_content_by(vars(&[(var, off)])), "{off}");
        }
    }

    #[test]
    fn queue_settings_come_from_the_bsp_variables_and_a_bad_one_is_named() {
        assert_eq!(
            QueueSettings::from_vars(vars(&[])).unwrap(),
            QueueSettings::default()
        );
        let set = QueueSettings::from_vars(vars(&[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "10"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ]))
        .unwrap();
        assert_eq!(
            set,
            QueueSettings {
                max_queue: 10,
                max_batch: 10,
                delay: Duration::from_millis(20)
            }
        );
        for bad in ["0", "-1", "lots"] {
            let e =
                QueueSettings::from_vars(vars(&[("OTEL_BSP_MAX_QUEUE_SIZE", bad)])).unwrap_err();
            assert!(e.to_string().contains("OTEL_BSP_MAX_QUEUE_SIZE"), "{e}");
        }
    }
}
