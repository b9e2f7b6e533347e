//! The text form of blob references: finding, writing and measuring them in
//! serialized JSON without parsing it, so a line with a 50 MB value is
//! handled by scanning, not by building and walking its tree.

use std::io::{self, Write};

use serde_json::{Map, Value};

use super::{BYTES_KEY, HASH_PREFIX, INLINE_LIMIT, REF_KEY, REF_NEEDLE, REF_OPEN};

/// A reference as this module writes it (and as serde_json would write the
/// same object: keys in sorted order, compact).
pub(super) fn reference_text(hex: &str, bytes: u64) -> String {
    format!(r#"{{"{REF_KEY}":"{HASH_PREFIX}{hex}","{BYTES_KEY}":{bytes}}}"#)
}

/// A reference found in a document's text.
pub(super) struct Found {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) hex: String,
    pub(super) bytes: u64,
}

/// The reference of the written form at `doc[at..]`, if there is one.
pub(super) fn parse_reference(doc: &[u8], at: usize) -> Option<Found> {
    let rest = doc.get(at + REF_OPEN.len()..)?;
    let hex = rest.get(..64).filter(|h| is_hex_hash(h))?;
    let rest = rest[64..].strip_prefix(br#"","bytes":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b'}') {
        return None;
    }
    let bytes = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let to = doc.len() - rest.len() + digits + 1;
    Some(Found {
        from: at,
        to,
        hex: String::from_utf8_lossy(hex).to_ascii_lowercase(),
        bytes,
    })
}

/// 64 hex digits.
pub(super) fn is_hex_hash(h: &[u8]) -> bool {
    h.len() == 64 && h.iter().all(u8::is_ascii_hexdigit)
}

/// Byte ranges (quotes included) of the string *values* of the serialized
/// document `doc` longer than [`INLINE_LIMIT`]; object keys are left alone.
/// A document that ends inside a string yields what was found before it.
pub(super) fn long_strings(doc: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(open) = doc.get(at..).and_then(|d| memchr::memchr(b'"', d)) {
        let open = at + open;
        let mut pos = open + 1;
        let close = loop {
            match doc.get(pos..).and_then(|d| memchr::memchr2(b'"', b'\\', d)) {
                None => return spans,
                Some(k) if doc[pos + k] == b'\\' => pos += k + 2,
                Some(k) => break pos + k,
            }
        };
        let end = close + 1;
        let next = doc[end..].iter().find(|b| !b.is_ascii_whitespace());
        if end - open > INLINE_LIMIT && next != Some(&b':') {
            spans.push((open, end));
        }
        at = end;
    }
    spans
}

/// Whether `map` has exactly the keys of a reference.
pub(super) fn is_ref_shaped(map: &Map<String, Value>) -> bool {
    map.len() == 2 && map.contains_key(REF_KEY) && map.contains_key(BYTES_KEY)
}

/// Whether a serialized document may hold a reference.
///
/// Asked of every line appended and read: the searcher is built once, where
/// `memmem::find` builds one per call (a third of the search's cost on a
/// 300-byte line).
pub(super) fn mentions_ref(doc: &[u8]) -> bool {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(REF_NEEDLE));
    FINDER.find(doc).is_some()
}

/// Length of the compact JSON serialization of `value`.
pub(super) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a `Value` or a string into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
