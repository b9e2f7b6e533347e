//! Repairs the bytes of one stdout line so it can be parsed as JSON.
//!
//! The transcript spec requires tolerating invalid UTF-8 and raw NUL bytes in
//! an agent's JSONL output. Invalid UTF-8 is replaced (lossy, U+FFFD); a raw
//! NUL byte, which JSON forbids inside strings, is turned into the escape
//! `\u0000`, so a string that contained a NUL still parses and keeps it. Each
//! repair is reported so the caller can record a warning: nothing is silently
//! altered.

use serde::Serialize;

/// One kind of repair applied to a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "repair", rename_all = "snake_case")]
pub enum Repair {
    /// Invalid UTF-8 sequences were replaced by U+FFFD.
    InvalidUtf8 {
        /// How many invalid sequences were replaced.
        sequences: usize,
    },
    /// Raw NUL bytes were written as the JSON escape `\u0000`.
    NulBytes {
        /// How many NUL bytes were escaped.
        count: usize,
    },
}

/// Returns the line as text, and what had to be repaired (empty when nothing).
pub fn repair_line(bytes: &[u8]) -> (String, Vec<Repair>) {
    let mut text = String::with_capacity(bytes.len());
    let mut invalid = 0usize;
    let mut nuls = 0usize;
    for chunk in bytes.utf8_chunks() {
        for part in chunk.valid().split('\0').enumerate() {
            let (i, piece) = part;
            if i > 0 {
                text.push_str("\\u0000");
                nuls += 1;
            }
            text.push_str(piece);
        }
        if !chunk.invalid().is_empty() {
            text.push(char::REPLACEMENT_CHARACTER);
            invalid += 1;
        }
    }
    let mut repairs = Vec::new();
    if invalid > 0 {
        repairs.push(Repair::InvalidUtf8 { sequences: invalid });
    }
    if nuls > 0 {
        repairs.push(Repair::NulBytes { count: nuls });
    }
    (text, repairs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn nul_bytes_are_escaped_and_invalid_utf8_replaced() {
        let cases: [(&[u8], &str, Vec<Repair>); 3] = [
            (b"{\"a\":\"\xc3\xa9\"}", "\u{e9}", vec![]),
            (
                b"{\"a\":\"x\0y\0\"}",
                "x\u{0}y\u{0}",
                vec![Repair::NulBytes { count: 2 }],
            ),
            (
                b"{\"a\":\"x\xff\xfey\"}",
                "x\u{fffd}\u{fffd}y",
                vec![Repair::InvalidUtf8 { sequences: 2 }],
            ),
        ];
        for (line, a, expected) in cases {
            let (text, repairs) = repair_line(line);
            assert_eq!(repairs, expected, "{text}");
            if repairs.is_empty() {
                assert_eq!(text.as_bytes(), line, "a clean line is untouched");
            }
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["a"], a, "{text}");
        }
    }
}
