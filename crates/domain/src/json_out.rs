//! Writing JSON text straight into a buffer, for the record writers
//! (events, snapshots, transcript lines) that skip serde where the text is
//! known: what they write must be byte for byte what serde_json writes.

/// Whether a byte must be escaped in a JSON string, as serde_json decides:
/// control characters, the quote and the backslash.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Appends `text` as a JSON string that needs no escaping: ids, digits,
/// names of a closed vocabulary.
pub(crate) fn write_plain(buf: &mut Vec<u8>, text: &str) {
    buf.push(b'"');
    buf.extend_from_slice(text.as_bytes());
    buf.push(b'"');
}

/// Appends any `text` as a JSON string: plainly when nothing in it needs
/// escaping (the usual case, one scan), else as serde writes it.
pub(crate) fn write_str(buf: &mut Vec<u8>, text: &str) -> Result<(), serde_json::Error> {
    if text.bytes().any(needs_escape) {
        return serde_json::to_writer(buf, text);
    }
    write_plain(buf, text);
    Ok(())
}

/// Asserts that `write` writes each of `values` as serde_json does.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn assert_writes_as_serde<T: serde::Serialize>(
    values: &[T],
    write: impl Fn(&T, &mut Vec<u8>) -> Result<(), serde_json::Error>,
) {
    for value in values {
        let mut direct = Vec::new();
        write(value, &mut direct).unwrap();
        let serde = serde_json::to_vec(value).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&direct),
            String::from_utf8_lossy(&serde)
        );
    }
}
