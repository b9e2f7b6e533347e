//! Concrete adapters for the application's ports: where runs are stored,
//! where time and ids come from, and how commands reach a run's writer.
//!
//! - [`store::FileRunStore`]: the durable [`application::ports::RunStore`] —
//!   one directory per run holding an append-only `events.ndjson`, a derived
//!   offset index (`events.idx`) and an atomically replaced `snapshot.json`
//!   (design §4). Appends are one `write` each; syncing follows a
//!   [`store::SyncPolicy`] and shares `fdatasync`s between concurrent flushers.
//! - [`store::SqliteRunStore`]: the same contract in one SQLite database
//!   (WAL): a row per event holding the file store's JSON line, a snapshot
//!   row and a `runs` row per run, a `flock`ed lock file per run beside it.
//! - [`store::MemoryRunStore`]: the same contract in memory, for tests and
//!   embedders that do not need durability.
//! - [`transcript::JsonlTranscripts`]: the exchange transcript
//!   ([`application::ports::Transcripts`], seed 000) — one append-only
//!   `transcripts/<run-id>.jsonl` per run, one `write` per line, then a
//!   bounded, drop-newest fan-out to live subscribers.
//! - [`blobs`]: large values (over 64 KiB) of any record stored once, as
//!   content-addressed files beside the run's log, and put back on reading.
//! - [`control::UnixControl`]: the [`application::ports::ControlChannel`] —
//!   one Unix socket per run, one JSON line each way, through which another
//!   process hands a command to the run's writer and gets its answer.
//! - [`clock`]: the system clock and random ids, and deterministic ones
//!   ([`clock::FixedClock`], [`clock::SeededIds`]) so replays and tests can
//!   pin time and ids.
//!
//! Architecture invariant: nothing here knows about workflows or providers;
//! the stores move opaque [`domain::RuntimeEvent`]s and snapshots, and every
//! store passes the one conformance suite,
//! `application::testing::store_conformance`, run from the store's own tests.

pub mod blobs;
pub mod clock;
pub mod control;
pub mod fs;
pub mod otlp;
pub mod run_files;
pub mod store;
pub mod tools;
pub mod transcript;

pub use clock::{FixedClock, RandomIds, SeededIds, SystemClock};
pub use control::{ControlConfig, UnixControl};
pub use run_files::RunFilesDir;
pub use store::{
    FileRunStore, FileStoreConfig, MemoryRunStore, SCHEMA_VERSION, SqliteOpenError, SqliteRunStore,
    SqliteStoreConfig, SyncPolicy,
};
pub use transcript::{
    JsonlTranscript, JsonlTranscripts, TranscriptLines, TranscriptStats, TranscriptSubscriber,
    read_transcript, read_transcript_lines, transcript_path,
};
