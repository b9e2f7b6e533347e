//! Large values stored once: content-addressed blob files beside a run's
//! records (its event log, snapshot and transcript).
//!
//! Before a line is written, every JSON value in it whose serialized form is
//! larger than [`INLINE_LIMIT`] is written to
//! `<storage>/runs/<run-id>/blobs/sha256-<hex>` (the value's JSON, `<hex>`
//! the SHA-256 of those bytes) and replaced in the line by a reference,
//! `{"$blob":"sha256:<hex>","bytes":N}`. Readers put the value back before
//! parsing, so everything above the file layer sees full values.
//!
//! Why it is shaped this way:
//! - A run's input reaches `flow:started`, `node:started`, `agent:start`, the
//!   transcript's `message.user` and often outputs and the snapshot: naming
//!   blobs by their content stores it once however many lines carry it.
//! - Only lines longer than [`INLINE_LIMIT`] (or mentioning `"$blob"`) are
//!   looked at, so the common small line costs one substring search.
//! - A blob is written to a temporary file and renamed into place, and (when
//!   the records are synced) synced before the line that refers to it is
//!   appended: a line on disk never names a blob that is not. The temporary
//!   files a crash leaves are removed by the run's next writer.
//! - Blobs never contain references: a container is stored whole only when
//!   none of its parts was, so resolving is one level deep. A value of the
//!   reference's own shape that came from a user is always stored as a blob,
//!   so every reference-shaped object on disk is a reference.
//! - Reading checks the size against the reference before reading (memory
//!   stays bounded by [`MAX_BLOB_BYTES`]) and the hash after: a missing or
//!   damaged blob is an error naming its file, never a wrong value.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

mod files;
mod resolve;
mod text;

pub use self::files::referenced;
pub use self::resolve::{BlobSource, HeldBlobs, resolve_from};

use self::text::{is_ref_shaped, json_len, long_strings, mentions_ref, reference_text};

/// Values whose serialized JSON is longer than this (64 KiB) are stored as
/// blobs: large enough that ordinary prompts, outputs and tool results stay
/// inline and readable in the log, small enough that a large payload is not
/// copied into every line that carries it.
pub const INLINE_LIMIT: usize = 64 * 1024;

/// The largest value (serialized JSON) that is written or read: 256 MiB. A
/// larger one is refused when written, and a reference naming a larger one
/// is refused when read, so no record makes a reader allocate more.
pub const MAX_BLOB_BYTES: u64 = 256 * 1024 * 1024;

/// Prefix of the temporary file a blob is written to before its rename.
const TEMP_PREFIX: &str = ".tmp-";
/// A temporary blob file untouched this long (1 hour) was left by a crash:
/// no write of even [`MAX_BLOB_BYTES`] takes that long, and a younger one may
/// be a blob another writer of the run (its transcript, its snapshot) is
/// writing right now.
pub const STALE_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Key of a reference object.
const REF_KEY: &str = "$blob";
/// Key of the referenced blob's size in bytes.
const BYTES_KEY: &str = "bytes";
/// How `$blob` appears in serialized JSON; a line without it holds no reference.
const REF_NEEDLE: &[u8] = b"\"$blob\"";
/// How a reference written by this module begins.
const REF_OPEN: &[u8] = b"{\"$blob\":\"sha256:";
/// Prefix of a reference's hash.
const HASH_PREFIX: &str = "sha256:";
/// Mode of blob files and of the `blobs` directory.
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// Why a value could not be stored or put back.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// A file operation failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A blob file is missing or damaged.
    #[error("{}: {why}", path.display())]
    Corrupt {
        /// The blob file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A reference object is malformed.
    #[error("bad blob reference {0}")]
    BadReference(String),
    /// A value is larger than [`MAX_BLOB_BYTES`].
    #[error("a value of {bytes} bytes is larger than the payload limit of {MAX_BLOB_BYTES} bytes")]
    TooLarge {
        /// Its serialized size.
        bytes: u64,
    },
    /// The line itself is not JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl BlobError {
    /// Whether the medium failed (as opposed to the data being wrong).
    pub fn is_io(&self) -> bool {
        matches!(self, Self::Io { .. })
    }
}

/// `<root>/runs/<run-id>/blobs`: where the blobs of a run's records live.
pub fn run_blob_dir(root: &Path, run_id: impl std::fmt::Display) -> PathBuf {
    root.join("runs").join(run_id.to_string()).join("blobs")
}

/// The blob directory of the transcript at `<root>/transcripts/<run-id>.jsonl`:
/// the run's own, so the log and the transcript share their blobs.
pub fn transcript_blob_dir(transcript: &Path) -> PathBuf {
    let run = transcript.file_stem().unwrap_or_default();
    let root = transcript
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    root.join("runs").join(run).join("blobs")
}

/// One run's blob directory, and whether blobs written there are synced.
#[derive(Debug, Clone)]
pub struct BlobDir {
    dir: PathBuf,
    sync: bool,
    /// A directory whose blob of the same content is linked, not copied.
    share_from: Option<PathBuf>,
    /// Whether large objects and arrays are stored too, not only large
    /// strings (see [`BlobDir::strings_only`]).
    containers: bool,
}

impl BlobDir {
    /// Blobs in `dir` (created on the first blob written), synced to disk
    /// before [`BlobDir::externalize`] returns when `sync` is set.
    pub fn new(dir: impl Into<PathBuf>, sync: bool) -> Self {
        Self {
            dir: dir.into(),
            sync,
            share_from: None,
            containers: true,
        }
    }

    /// The same directory, storing large strings only, found by scanning
    /// the text: a large object or array stays in the document. For a
    /// document that is a state, not a message (a run's snapshot): its
    /// size comes from many small parts, and finding large containers
    /// means building the whole document's tree, ten times its size in
    /// memory, for a blob that would change with every snapshot anyway.
    pub fn strings_only(mut self) -> Self {
        self.containers = false;
        self
    }

    /// The same directory, taking a blob that `other` holds already as a
    /// hard link to it rather than a copy: a run's snapshot carries values
    /// its log stored, and they are stored once.
    pub fn sharing_from(mut self, other: &BlobDir) -> Self {
        self.share_from = Some(other.dir.clone());
        self
    }

    /// The same directory with another sync setting.
    pub fn with_sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of the blob whose SHA-256 is `hex`.
    pub fn path_of(&self, hex: &str) -> PathBuf {
        self.dir.join(format!("sha256-{hex}"))
    }

    /// Rewrites the JSON document `buf[start..]` in place, each large value
    /// replaced by a reference to its blob (written first). A document that
    /// needs nothing is left untouched, byte for byte.
    ///
    /// Long strings are cut out of the serialized text as they are (a
    /// string's JSON is the same bytes wherever serde_json writes it), which
    /// costs one scan; only a document that is still large after that (a
    /// big array of small items), or that mentions `"$blob"`, is parsed.
    pub fn externalize_tail(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), BlobError> {
        let doc = buf.get(start..).unwrap_or_default();
        let has_refs = mentions_ref(doc);
        if doc.len() <= INLINE_LIMIT && !has_refs {
            return Ok(());
        }
        let mut created = false;
        let mut rewritten = None;
        if !has_refs {
            let spans = long_strings(doc);
            if !spans.is_empty() {
                let mut out = Vec::with_capacity(doc.len().min(INLINE_LIMIT * 2));
                let mut at = 0;
                for (from, to) in spans {
                    out.extend_from_slice(&doc[at..from]);
                    let content = &doc[from..to];
                    let (hex, new) = self.put(content)?;
                    created |= new;
                    out.extend_from_slice(reference_text(&hex, content.len() as u64).as_bytes());
                    at = to;
                }
                out.extend_from_slice(&doc[at..]);
                rewritten = Some(out);
            }
        }
        let current = rewritten.as_deref().unwrap_or(doc);
        if (self.containers && current.len() > INLINE_LIMIT) || has_refs {
            let mut value: Value = serde_json::from_slice(current)?;
            let mut writer = Writer {
                blobs: self,
                changed: false,
                created: false,
                // Without `"$blob"` in the original, every reference is ours.
                trust_refs: !has_refs,
            };
            writer.walk(&mut value, true)?;
            created |= writer.created;
            if writer.changed {
                rewritten = Some(serde_json::to_vec(&value)?);
            }
        }
        if created && self.sync {
            sync_dir(&self.dir)?;
        }
        if let Some(out) = rewritten {
            buf.truncate(start);
            buf.extend_from_slice(&out);
        }
        Ok(())
    }

    /// [`BlobDir::externalize_tail`] of a whole document.
    pub fn externalize(&self, mut doc: Vec<u8>) -> Result<Vec<u8>, BlobError> {
        self.externalize_tail(&mut doc, 0)?;
        Ok(doc)
    }

    /// [`BlobDir::externalize`] of a document whose writer says none of its
    /// values is longer than `longest` bytes. Storing strings only, a
    /// directory then has nothing to move out of a document whose values
    /// are all under the limit, and reads it only for a reference in it
    /// (data shaped like one, which is escaped): the scan for long strings
    /// cost a large snapshot more than writing it.
    pub fn externalize_measured(&self, doc: Vec<u8>, longest: usize) -> Result<Vec<u8>, BlobError> {
        if self.keeps_whole(longest) && !mentions_ref(&doc) {
            return Ok(doc);
        }
        self.externalize(doc)
    }

    /// Whether a document none of whose values is longer than `longest`
    /// bytes, and that mentions no reference ([`RefScan`]), is stored as
    /// it is: what [`BlobDir::externalize_measured`] returns unchanged.
    pub fn keeps_whole(&self, longest: usize) -> bool {
        !self.containers && longest <= INLINE_LIMIT
    }

    /// The JSON document `doc` with every reference replaced by its value;
    /// borrowed as is when it holds none (see [`resolve_from`]).
    pub fn resolve<'a>(&self, doc: &'a [u8]) -> Result<Cow<'a, [u8]>, BlobError> {
        resolve_from(self, doc)
    }
}

/// Whether a document handed over in parts mentions a reference's key
/// (`"$blob"`), one cut between two parts included.
#[derive(Debug, Default)]
pub struct RefScan {
    /// The last bytes of what was fed, shorter than the key.
    tail: Vec<u8>,
    found: bool,
}

impl RefScan {
    /// Scans the next part.
    pub fn feed(&mut self, part: &[u8]) {
        if self.found {
            return;
        }
        let keep = REF_NEEDLE.len() - 1;
        self.tail.extend_from_slice(&part[..part.len().min(keep)]);
        self.found = mentions_ref(&self.tail) || mentions_ref(part);
        if part.len() >= keep {
            self.tail.clear();
            self.tail.extend_from_slice(&part[part.len() - keep..]);
        } else {
            let cut = self.tail.len().saturating_sub(keep);
            self.tail.drain(..cut);
        }
    }

    /// Whether any part fed so far, or two of them together, mention it.
    pub fn found(&self) -> bool {
        self.found
    }
}

/// [`BlobError::BadReference`], showing the reference and what is wrong.
fn bad_reference(shown: String, why: &str) -> BlobError {
    BlobError::BadReference(format!("{shown}: {why}"))
}

/// The state of one [`BlobDir::externalize_tail`].
struct Writer<'a> {
    blobs: &'a BlobDir,
    /// Whether any value was replaced.
    changed: bool,
    /// Whether a new blob file was created (its directory entry needs a sync).
    created: bool,
    /// Whether reference-shaped objects are references this write made
    /// (rather than user values to be escaped).
    trust_refs: bool,
}

impl Writer<'_> {
    /// Externalizes what is large inside `value`, smallest parts first;
    /// returns the serialized size of `value` afterwards. The document
    /// itself (`top`) stays a document.
    fn walk(&mut self, value: &mut Value, top: bool) -> Result<usize, BlobError> {
        let size = match value {
            // A user's object of the reference's shape is stored as a blob,
            // so that reading does not take it for a reference.
            Value::Object(map) if !top && is_ref_shaped(map) => {
                if self.trust_refs {
                    self.changed = true;
                    return Ok(json_len(value));
                }
                return self.replace(value);
            }
            // Bigger than the limit even before escaping: no need to count.
            Value::String(s) if s.len() + 2 > INLINE_LIMIT => return self.replace(value),
            Value::Object(map) => {
                let before = self.changed;
                self.changed = false;
                let mut size = 2 + map.len().saturating_sub(1);
                for (key, child) in map.iter_mut() {
                    size += json_len(key) + 1 + self.walk(child, false)?;
                }
                let inner_changed = self.changed;
                self.changed |= before;
                if inner_changed {
                    // Never store a container that holds references.
                    return Ok(size);
                }
                size
            }
            Value::Array(items) => {
                let before = self.changed;
                self.changed = false;
                let mut size = 2 + items.len().saturating_sub(1);
                for child in items.iter_mut() {
                    size += self.walk(child, false)?;
                }
                let inner_changed = self.changed;
                self.changed |= before;
                if inner_changed {
                    return Ok(size);
                }
                size
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => json_len(value),
        };
        if !top && size > INLINE_LIMIT {
            return self.replace(value);
        }
        Ok(size)
    }

    /// Stores `value` as a blob and puts a reference in its place.
    fn replace(&mut self, value: &mut Value) -> Result<usize, BlobError> {
        let content = serde_json::to_vec(value)?;
        let (hex, created) = self.blobs.put(&content)?;
        self.created |= created;
        let text = reference_text(&hex, content.len() as u64);
        *value = serde_json::from_str(&text)?;
        self.changed = true;
        Ok(text.len())
    }
}

/// Lowercase hex SHA-256 of `bytes`.
fn hex_digest(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// Makes the names of newly created blobs durable.
fn sync_dir(dir: &Path) -> Result<(), BlobError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| BlobError::Io {
            what: "sync",
            path: dir.to_path_buf(),
            source,
        })?;
    // The `blobs` directory may be new too: its name lives in the run's directory.
    if let Some(parent) = dir.parent() {
        File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|source| BlobError::Io {
                what: "sync",
                path: parent.to_path_buf(),
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blobs() -> (tempfile::TempDir, BlobDir) {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobDir::new(dir.path().join("blobs"), true);
        (dir, blobs)
    }

    fn files(blobs: &BlobDir) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(blobs.dir()) else {
            return Vec::new();
        };
        entries.map(|e| e.unwrap().path()).collect()
    }

    fn big(c: char) -> String {
        std::iter::repeat_n(c, INLINE_LIMIT + 10).collect()
    }

    #[test]
    fn a_reference_key_cut_between_parts_is_found() {
        let doc = br#"{"a":{"$blob":"sha256:00"}}"#;
        for first in 0..=doc.len() {
            for second in first..=doc.len() {
                let mut scan = RefScan::default();
                scan.feed(&doc[..first]);
                scan.feed(&doc[first..second]);
                scan.feed(&doc[second..]);
                assert!(scan.found(), "cut at {first} and {second}");
            }
        }
        // Byte by byte, and an escaped quote is no key.
        let mut scan = RefScan::default();
        for byte in br#"{"a":"$blo","b":"$blob\"","c":"x$blob"}"# {
            scan.feed(std::slice::from_ref(byte));
        }
        assert!(!scan.found());
    }

    #[test]
    fn a_small_line_is_left_byte_for_byte() {
        let (_d, blobs) = blobs();
        let line = br#"{"b":1,"a":"x"}"#.to_vec();
        assert_eq!(blobs.externalize(line.clone()).unwrap(), line);
        assert!(files(&blobs).is_empty());
        assert!(matches!(blobs.resolve(&line).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn large_values_round_trip_and_are_stored_once() {
        let (_d, blobs) = blobs();
        let text = big('x');
        let docs = [
            json!({"type": "flow:started", "input": text}),
            json!({"type": "node:started", "input": {"data": text, "metadata": {"step_index": 0}}}),
            json!({"type": "agent:start", "prompt": text, "list": [1, 2, {"deep": text}]}),
        ];
        for doc in &docs {
            let line = blobs.externalize(serde_json::to_vec(doc).unwrap()).unwrap();
            assert!(line.len() < 400, "{}", String::from_utf8_lossy(&line));
            let resolved: Value = serde_json::from_slice(&blobs.resolve(&line).unwrap()).unwrap();
            assert_eq!(&resolved, doc);
        }
        assert_eq!(files(&blobs).len(), 1, "one content, one file");
    }

    #[test]
    fn escapes_and_long_keys_survive_and_both_paths_share_a_blob() {
        let (_d, blobs) = blobs();
        let tricky: String = std::iter::repeat_n("a\"b\\\"\\n\u{1}é{\"$x\":", 8_000).collect();
        let key = big('k');
        let plain = json!({"t": tricky, "nested": [{"again": tricky}], key.clone(): 1});
        let line = blobs
            .externalize(serde_json::to_vec(&plain).unwrap())
            .unwrap();
        let stored: Value = serde_json::from_slice(&line).unwrap();
        assert!(stored["t"]["$blob"].is_string(), "the string was cut out");
        assert_eq!(stored[key.as_str()], 1, "a long key stays a key");
        let back: Value = serde_json::from_slice(&blobs.resolve(&line).unwrap()).unwrap();
        assert_eq!(back, plain);
        // The same string in a document that is parsed (it mentions `$blob`).
        let parsed = json!({"t": tricky, "note": "$blob"});
        let line = blobs
            .externalize(serde_json::to_vec(&parsed).unwrap())
            .unwrap();
        let back: Value = serde_json::from_slice(&blobs.resolve(&line).unwrap()).unwrap();
        assert_eq!(back, parsed);
        assert_eq!(
            files(&blobs).len(),
            1,
            "one string, one blob, whichever path stored it"
        );
    }

    #[test]
    fn a_large_container_of_small_parts_is_stored_whole() {
        let (_d, blobs) = blobs();
        let items: Vec<Value> = (0..20_000).map(|i| json!({"i": i})).collect();
        let doc = json!({"type": "t", "input": {"items": items}});
        let line = blobs
            .externalize(serde_json::to_vec(&doc).unwrap())
            .unwrap();
        let reference: Value = serde_json::from_slice(&line).unwrap();
        assert!(
            reference["input"]["items"]["$blob"].is_string(),
            "{reference}"
        );
        let resolved: Value = serde_json::from_slice(&blobs.resolve(&line).unwrap()).unwrap();
        assert_eq!(resolved, doc);
    }

    #[test]
    fn a_container_that_holds_a_reference_is_not_stored() {
        let (_d, blobs) = blobs();
        let filler: Vec<Value> = (0..8_000).map(|i| json!(format!("item {i}"))).collect();
        let doc = json!({"input": {"big": big('y'), "filler": filler}});
        let line = blobs
            .externalize(serde_json::to_vec(&doc).unwrap())
            .unwrap();
        let stored: Value = serde_json::from_slice(&line).unwrap();
        assert!(stored["input"]["big"]["$blob"].is_string());
        assert!(stored["input"]["filler"]["$blob"].is_string());
        for file in files(&blobs) {
            let content = std::fs::read(file).unwrap();
            assert!(!mentions_ref(&content), "a blob never holds a reference");
        }
        let resolved: Value = serde_json::from_slice(&blobs.resolve(&line).unwrap()).unwrap();
        assert_eq!(resolved, doc);
    }

    #[test]
    fn a_user_object_shaped_like_a_reference_stays_what_it_was() {
        let (_d, blobs) = blobs();
        let fake = json!({"$blob": "sha256:not-a-hash", "bytes": 3});
        let doc = json!({"input": fake, "other": {"$blob": 1, "bytes": 2, "more": 3}});
        let line = blobs
            .externalize(serde_json::to_vec(&doc).unwrap())
            .unwrap();
        let resolved: Value = serde_json::from_slice(&blobs.resolve(&line).unwrap()).unwrap();
        assert_eq!(resolved, doc);
    }

    #[test]
    fn a_missing_blob_is_reported_naming_its_file() {
        let (_d, blobs) = blobs();
        let doc = json!({"input": big('z')});
        let line = blobs
            .externalize(serde_json::to_vec(&doc).unwrap())
            .unwrap();
        let [file] = files(&blobs).try_into().unwrap();
        std::fs::remove_file(&file).unwrap();
        let err = blobs.resolve(&line).unwrap_err();
        assert!(matches!(err, BlobError::Corrupt { .. }), "{err:?}");
        assert!(
            err.to_string().contains(&file.display().to_string()),
            "{err}"
        );
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn a_damaged_blob_is_reported_naming_its_file() {
        let (_d, blobs) = blobs();
        let doc = json!({"input": big('z')});
        let line = blobs
            .externalize(serde_json::to_vec(&doc).unwrap())
            .unwrap();
        let [file] = files(&blobs).try_into().unwrap();
        let mut content = std::fs::read(&file).unwrap();
        content[5] = b'q';
        std::fs::write(&file, &content).unwrap();
        let err = blobs.resolve(&line).unwrap_err().to_string();
        assert!(err.contains(&file.display().to_string()), "{err}");
        assert!(err.contains("does not match its hash"), "{err}");

        content.truncate(100);
        std::fs::write(&file, &content).unwrap();
        let err = blobs.resolve(&line).unwrap_err().to_string();
        assert!(
            err.contains(&file.display().to_string()) && err.contains("holds 100 bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_fifo_in_place_of_a_blob_is_refused_without_waiting() {
        let (_d, blobs) = blobs();
        let doc = json!({"input": big('f')});
        let line = blobs
            .externalize(serde_json::to_vec(&doc).unwrap())
            .unwrap();
        let [file] = files(&blobs).try_into().unwrap();
        std::fs::remove_file(&file).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &file,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .unwrap();
        let err = blobs.resolve(&line).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn malformed_and_oversized_references_are_errors() {
        let (_d, blobs) = blobs();
        let bad = br#"{"input":{"$blob":"md5:abc","bytes":3}}"#;
        let err = blobs.resolve(bad).unwrap_err().to_string();
        assert!(err.contains("md5:abc"), "{err}");
        let hash = "0".repeat(64);
        let huge = format!(
            r#"{{"input":{{"$blob":"sha256:{hash}","bytes":{}}}}}"#,
            MAX_BLOB_BYTES + 1
        );
        let err = blobs.resolve(huge.as_bytes()).unwrap_err();
        assert!(matches!(err, BlobError::TooLarge { .. }), "{err:?}");
        assert!(blobs.resolve(br#"{"$blob" not json"#).is_err());
    }

    #[test]
    fn blobs_are_private_files() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, blobs) = blobs();
        blobs
            .externalize(serde_json::to_vec(&json!({"input": big('p')})).unwrap())
            .unwrap();
        let dir_mode = std::fs::metadata(blobs.dir()).unwrap().permissions().mode();
        assert_eq!(dir_mode & 0o777, DIR_MODE);
        for file in files(&blobs) {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, FILE_MODE, "{}", file.display());
            assert!(
                !file
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(".tmp")
            );
        }
    }
}

/// The blobs as the file store and the transcript use them.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod record_tests {
    use std::sync::Arc;

    use application::ports::{RunStore, StoreError, Transcripts};
    use domain::transcript::{ContentBlock, ExchangeDraft, ExchangeType, Fidelity};
    use domain::{EventKind, NodeId, Offset, RunId, RunSnapshot, RuntimeEvent, Timestamp};
    use serde_json::json;

    use super::*;
    use crate::store::FileRunStore;
    use crate::transcript::{JsonlTranscripts, read_transcript};

    const PAYLOAD_BYTES: usize = 3 * 1024 * 1024;

    fn payload() -> String {
        (0..PAYLOAD_BYTES)
            .map(|i| char::from(b'a' + (i % 23) as u8))
            .collect()
    }

    fn event(run: RunId, offset: u64, node: Option<&str>, kind: EventKind) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(0),
            run_id: run,
            node_id: node.map(|n| NodeId::new(n).unwrap()),
            node_run_id: None,
            kind,
            extra: Default::default(),
        }
    }

    fn events(run: RunId, text: &str) -> Vec<RuntimeEvent> {
        vec![
            event(
                run,
                1,
                None,
                EventKind::FlowStarted {
                    workflow: domain::event::WorkflowRef::default(),
                    input: json!(text),
                    parent_run_id: None,
                    source: None,
                    definition: None,
                    nodes: vec![NodeId::new("a").unwrap()],
                    edges: vec![],
                    started_by: None,
                },
            ),
            event(
                run,
                2,
                Some("a"),
                EventKind::NodeStarted {
                    input:
                        json!({"data": text, "metadata": {"step_index": 0, "previous_agent": null}})
                            .into(),
                    attempt: Some(1),
                    item: None,
                    items: None,
                },
            ),
            event(
                run,
                3,
                Some("a"),
                EventKind::NodeCompleted {
                    output: json!({"data": text, "metadata": {"agent_name": "a"}}),
                },
            ),
            event(
                run,
                4,
                None,
                EventKind::FlowCompleted {
                    output: json!(text),
                    duration_ms: 1,
                },
            ),
        ]
    }

    /// Every file under `dir` and its size.
    /// Every file under `dir` with its size, a file with several names
    /// (hard links) counted once: what it takes on disk.
    fn tree(dir: &Path) -> Vec<(PathBuf, u64)> {
        fn walk(
            dir: &Path,
            seen: &mut std::collections::HashSet<(u64, u64)>,
        ) -> Vec<(PathBuf, u64)> {
            use std::os::unix::fs::MetadataExt;
            let mut out = Vec::new();
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let meta = entry.metadata().unwrap();
                if meta.is_dir() {
                    out.extend(walk(&entry.path(), seen));
                } else if seen.insert((meta.dev(), meta.ino())) {
                    out.push((entry.path(), meta.len()));
                }
            }
            out
        }
        walk(dir, &mut std::collections::HashSet::new())
    }

    fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
        memchr::memmem::find_iter(haystack, needle).count()
    }

    #[tokio::test]
    async fn a_run_that_carries_a_large_value_everywhere_stores_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let transcripts = JsonlTranscripts::new(dir.path());
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let text = payload();
        let _lock = store.create_run(run).await.unwrap();
        let written = events(run, &text);
        store.append(run, &written).await.unwrap();
        store.flush(run).await.unwrap();
        let snapshot = RunSnapshot::fold(&written).unwrap();
        store.save_snapshot(&snapshot).await.unwrap();
        let transcript = transcripts.open(run, None).await.unwrap();
        transcript
            .append(ExchangeDraft {
                kind: ExchangeType::MessageUser,
                path: "a".into(),
                iteration: 0,
                timestamp: Timestamp::from_millis(0),
                payload: json!({"role": "user", "blocks": [
                    serde_json::to_value(ContentBlock::Text { text: text.clone(), fidelity: Fidelity::Router, extra: Default::default()  }).unwrap()
                ]}),
                child_run_id: None,
            })
            .await
            .unwrap();
        transcript.close().await;

        let files = tree(dir.path());
        let total: u64 = files.iter().map(|(_, n)| n).sum();
        assert!(
            total < PAYLOAD_BYTES as u64 * 12 / 10,
            "{total} bytes on disk for a {PAYLOAD_BYTES}-byte value: {files:?}"
        );
        let needle = &text.as_bytes()[..4096];
        let holding: Vec<_> = files
            .iter()
            .filter(|(path, _)| occurrences(&std::fs::read(path).unwrap(), needle) > 0)
            .collect();
        assert_eq!(holding.len(), 1, "{holding:?}");
        assert_eq!(
            occurrences(&std::fs::read(&holding[0].0).unwrap(), text.as_bytes()),
            1
        );

        assert_eq!(store.read(run, 0, 100).await.unwrap(), written);
        assert_eq!(store.load_snapshot(run).await.unwrap().unwrap(), snapshot);
        let lines = read_transcript(transcripts.path(run)).unwrap();
        let block = &lines[0].payload["blocks"][0];
        assert_eq!(block["text"].as_str(), Some(text.as_str()));

        // A second store (another process) reads the same values.
        let other = FileRunStore::open(dir.path()).unwrap();
        assert_eq!(other.read(run, 0, 100).await.unwrap(), written);
    }

    /// A temporary file modified `age` ago.
    fn temp_file(dir: &Path, name: &str, age: std::time::Duration) -> PathBuf {
        let path = dir.join(name);
        let file = File::create(&path).unwrap();
        file.set_modified(std::time::SystemTime::now() - age)
            .unwrap();
        path
    }

    #[tokio::test]
    async fn the_writer_that_opens_a_log_removes_stale_blob_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let text = payload();
        let created = store.create_run(run).await.unwrap();
        let written = events(run, &text);
        store.append(run, &written[..2]).await.unwrap();
        store.flush(run).await.unwrap();
        drop((created, store));
        let blobs = run_blob_dir(dir.path(), run);
        let day = std::time::Duration::from_secs(24 * 3600);
        // What a crash mid-write leaves, a blob being written right now, and
        // a file of another name.
        let stale = temp_file(&blobs, ".tmp-crashed", day);
        let fresh = temp_file(&blobs, ".tmp-in-flight", std::time::Duration::ZERO);
        let other = temp_file(&blobs, "notes", day);
        let kept: Vec<_> = tree(&blobs).into_iter().map(|(p, _)| p).collect();

        // Readers leave them alone.
        let reader = FileRunStore::open(dir.path()).unwrap();
        assert_eq!(reader.read(run, 0, 10).await.unwrap(), written[..2]);
        assert!(stale.exists());

        let writer = FileRunStore::open(dir.path()).unwrap();
        let _lock = writer.lock(run).await.unwrap();
        writer.append(run, &written[2..]).await.unwrap();
        assert!(!stale.exists(), "{:?}", tree(&blobs));
        assert!(fresh.exists() && other.exists());
        let mut left: Vec<_> = tree(&blobs).into_iter().map(|(p, _)| p).collect();
        left.push(stale);
        left.sort();
        let mut kept = kept;
        kept.sort();
        assert_eq!(left, kept);
        assert_eq!(writer.read(run, 0, 10).await.unwrap(), written);
    }

    #[tokio::test]
    async fn a_missing_blob_is_reported_with_the_log_line_and_the_blob_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let _lock = store.create_run(run).await.unwrap();
        let written = events(run, &big_text());
        store.append(run, &written[..1]).await.unwrap();
        let blob_dir = run_blob_dir(dir.path(), run);
        let [(blob, _)] = tree(&blob_dir).try_into().unwrap();
        std::fs::remove_file(&blob).unwrap();
        let fresh = FileRunStore::open(dir.path()).unwrap();
        let err = fresh.read(run, 0, 10).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("events.ndjson line 1"), "{msg}");
        assert!(msg.contains(&blob.display().to_string()), "{msg}");
    }

    #[tokio::test]
    async fn a_transcript_refers_to_the_blob_its_log_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let transcripts = Arc::new(JsonlTranscripts::new(dir.path()));
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let recorder = transcripts.open_recorder(run, None).unwrap();
        let text = big_text();
        recorder
            .append_line(ExchangeDraft {
                kind: ExchangeType::RunCompleted,
                path: String::new(),
                iteration: 0,
                timestamp: Timestamp::from_millis(0),
                payload: json!({"name": "w", "kind": "workflow", "result": text}),
                child_run_id: None,
            })
            .unwrap();
        let line = std::fs::read_to_string(transcripts.path(run)).unwrap();
        assert!(
            line.len() < 400 && line.contains("\"$blob\":\"sha256:"),
            "{line}"
        );
        assert!(run_blob_dir(dir.path(), run).is_dir());
        let read = read_transcript(transcripts.path(run)).unwrap();
        assert_eq!(read[0].payload["result"].as_str(), Some(text.as_str()));
    }

    fn big_text() -> String {
        "b".repeat(INLINE_LIMIT * 2)
    }
}
