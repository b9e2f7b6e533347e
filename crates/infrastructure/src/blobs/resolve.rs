//! Putting large values back: the sources blobs are read from (a run's
//! directory, or blobs a database gave) and the resolution of a document's
//! references against one, checked against size and hash.

use super::text::{is_hex_hash, is_ref_shaped, mentions_ref, parse_reference};
use super::*;

/// Where the blobs that references name are read from: a run's blob
/// directory ([`BlobDir`]), or blobs a database gave ([`HeldBlobs`]).
pub trait BlobSource {
    /// The bytes stored as blob `hex`, which its reference says are
    /// `bytes` long; a source may refuse, unread, one of another size.
    /// Errors name where the blob is ([`BlobSource::place_of`]).
    fn fetch(&self, hex: &str, bytes: u64) -> Result<Vec<u8>, BlobError>;

    /// Where blob `hex` is, for errors.
    fn place_of(&self, hex: &str) -> PathBuf;
}

impl BlobSource for BlobDir {
    fn fetch(&self, hex: &str, bytes: u64) -> Result<Vec<u8>, BlobError> {
        let path = self.path_of(hex);
        let corrupt = |why: String| BlobError::Corrupt {
            path: path.clone(),
            why,
        };
        // Non-blocking and not following links: a FIFO or a symlink planted
        // in place of a blob is refused, never waited on.
        let flags = (rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOFOLLOW).bits();
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(flags as i32)
            .open(&path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => corrupt("missing (a record refers to it)".into()),
                _ => BlobError::Io {
                    what: "open",
                    path: path.clone(),
                    source: e,
                },
            })?;
        let meta = file.metadata().map_err(|e| BlobError::Io {
            what: "stat",
            path: path.clone(),
            source: e,
        })?;
        if !meta.is_file() {
            return Err(corrupt("not a regular file".into()));
        }
        if meta.len() != bytes {
            return Err(corrupt(format!(
                "holds {} bytes; the reference says {bytes}",
                meta.len()
            )));
        }
        let mut content = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0));
        file.take(bytes)
            .read_to_end(&mut content)
            .map_err(|e| BlobError::Io {
                what: "read",
                path: path.clone(),
                source: e,
            })?;
        Ok(content)
    }

    fn place_of(&self, hex: &str) -> PathBuf {
        self.path_of(hex)
    }
}

/// Blobs held in memory by name (`sha256-<hex>`), as a database row gave
/// them, with `place` naming where they came from in errors.
#[derive(Debug, Default)]
pub struct HeldBlobs {
    place: String,
    blobs: std::collections::HashMap<String, Vec<u8>>,
}

impl HeldBlobs {
    /// `blobs` (name and bytes) from `place`.
    pub fn new(
        place: impl Into<String>,
        blobs: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Self {
        Self {
            place: place.into(),
            blobs: blobs.into_iter().collect(),
        }
    }
}

impl BlobSource for HeldBlobs {
    fn fetch(&self, hex: &str, _bytes: u64) -> Result<Vec<u8>, BlobError> {
        self.blobs
            .get(&format!("sha256-{hex}"))
            .cloned()
            .ok_or_else(|| BlobError::Corrupt {
                path: self.place_of(hex),
                why: "missing (a record refers to it)".into(),
            })
    }

    fn place_of(&self, hex: &str) -> PathBuf {
        PathBuf::from(format!("{}: blob sha256-{hex}", self.place))
    }
}

/// The JSON document `doc` with every reference replaced by its value
/// from `source`; borrowed as is when it holds none.
///
/// References in the form this module writes are replaced in the text,
/// by the blob's bytes; a document that mentions `"$blob"` any other way
/// is parsed and judged value by value.
pub fn resolve_from<'a>(
    source: &dyn BlobSource,
    doc: &'a [u8],
) -> Result<Cow<'a, [u8]>, BlobError> {
    if !mentions_ref(doc) {
        return Ok(Cow::Borrowed(doc));
    }
    if let Some(spliced) = splice(source, doc)? {
        return Ok(Cow::Owned(spliced));
    }
    let mut value: Value = serde_json::from_slice(doc)?;
    if !resolve_value(source, &mut value, true)? {
        return Ok(Cow::Borrowed(doc));
    }
    Ok(Cow::Owned(serde_json::to_vec(&value)?))
}

/// `doc` with its references replaced in the text, or `None` when it
/// mentions `"$blob"` other than in references of the written form.
///
/// In valid JSON the bytes `{"$blob":` can only open an object (inside a
/// string, a `"` is escaped), so a match is a reference, never text.
fn splice(source: &dyn BlobSource, doc: &[u8]) -> Result<Option<Vec<u8>>, BlobError> {
    let mentions = memchr::memmem::find_iter(doc, REF_NEEDLE).count();
    let found: Vec<_> = memchr::memmem::find_iter(doc, REF_OPEN)
        .filter_map(|at| parse_reference(doc, at))
        .collect();
    if found.len() != mentions {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut at = 0;
    for found in found {
        out.extend_from_slice(&doc[at..found.from]);
        out.extend_from_slice(&read_checked(source, &found.hex, found.bytes)?);
        at = found.to;
    }
    out.extend_from_slice(&doc[at..]);
    Ok(Some(out))
}

/// Replaces the references inside `value`; whether there were any.
fn resolve_value(source: &dyn BlobSource, value: &mut Value, top: bool) -> Result<bool, BlobError> {
    match value {
        Value::Object(map) if !top && is_ref_shaped(map) => {
            *value = load(source, map)?;
            Ok(true)
        }
        Value::Object(map) => {
            let mut any = false;
            for child in map.values_mut() {
                any |= resolve_value(source, child, false)?;
            }
            Ok(any)
        }
        Value::Array(items) => {
            let mut any = false;
            for child in items {
                any |= resolve_value(source, child, false)?;
            }
            Ok(any)
        }
        _ => Ok(false),
    }
}

/// The value a reference object names, checked against its size and hash.
fn load(source: &dyn BlobSource, reference: &Map<String, Value>) -> Result<Value, BlobError> {
    let shown = || Value::Object(reference.clone()).to_string();
    let hex = reference
        .get(REF_KEY)
        .and_then(Value::as_str)
        .and_then(|h| h.strip_prefix(HASH_PREFIX))
        .filter(|h| is_hex_hash(h.as_bytes()))
        .ok_or_else(|| bad_reference(shown(), "`$blob` is not `sha256:` and 64 hex digits"))?
        .to_ascii_lowercase();
    let bytes = reference
        .get(BYTES_KEY)
        .and_then(Value::as_u64)
        .ok_or_else(|| bad_reference(shown(), "`bytes` is not a byte count"))?;
    let content = read_checked(source, &hex, bytes)?;
    serde_json::from_slice(&content).map_err(|e| BlobError::Corrupt {
        path: source.place_of(&hex),
        why: format!("not JSON: {e}"),
    })
}

/// The bytes of blob `hex`, checked against the size its reference gives
/// (before reading: memory stays bounded) and against its hash.
fn read_checked(source: &dyn BlobSource, hex: &str, bytes: u64) -> Result<Vec<u8>, BlobError> {
    if bytes > MAX_BLOB_BYTES {
        return Err(BlobError::TooLarge { bytes });
    }
    let content = source.fetch(hex, bytes)?;
    let corrupt = |why: String| BlobError::Corrupt {
        path: source.place_of(hex),
        why,
    };
    if content.len() as u64 != bytes {
        return Err(corrupt(format!(
            "holds {} bytes; the reference says {bytes}",
            content.len()
        )));
    }
    if hex_digest(&content) != hex {
        return Err(corrupt("content does not match its hash".into()));
    }
    Ok(content)
}
