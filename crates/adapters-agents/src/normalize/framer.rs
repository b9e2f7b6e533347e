//! Splits an agent's raw stdout bytes into lines, with a hard cap on line length.
//!
//! CLI agents print one JSON object per line, but a pipe read can end anywhere
//! inside a line, and a broken or hostile agent can print a "line" that never
//! ends. [`LineFramer`] buffers until `\n`, never holds more than
//! [`MAX_LINE_BYTES`] (plus a short preview) of one line, and tells the caller
//! what kind of line it got so oddities become warnings, not crashes.

/// The longest line kept whole. Real Claude Code lines are a few KiB; the
/// biggest legitimate ones carry a whole tool output or file (up to a few MiB).
/// 8 MiB leaves room for those while bounding what one line of a runaway agent
/// can make us allocate.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// How much of an over-long line is kept, so the warning can show its start.
pub const OVERSIZE_PREVIEW_BYTES: usize = 4 * 1024;

/// What kind of line the framer produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// A line that ended in `\n` (the newline is not included).
    Complete,
    /// A line longer than the cap: only its first bytes are kept.
    Oversize {
        /// The line's full length in bytes (without the newline).
        len: usize,
    },
    /// The last bytes of the stream, with no newline after them.
    Unterminated,
}

/// One framed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line's bytes (a preview for [`LineKind::Oversize`]).
    pub bytes: Vec<u8>,
    /// How the line ended.
    pub kind: LineKind,
}

/// Accumulates stdout bytes and yields complete lines.
#[derive(Debug)]
pub struct LineFramer {
    max: usize,
    buf: Vec<u8>,
    /// Length of the current line once it went over the cap; `buf` then holds
    /// only the preview and further bytes are counted, not stored.
    oversize_len: Option<usize>,
}

impl Default for LineFramer {
    fn default() -> Self {
        Self::new()
    }
}

impl LineFramer {
    /// A framer with the default cap, [`MAX_LINE_BYTES`].
    pub fn new() -> Self {
        Self::with_max(MAX_LINE_BYTES)
    }

    /// A framer that keeps lines of at most `max` bytes (at least 1).
    pub fn with_max(max: usize) -> Self {
        Self {
            max: max.max(1),
            buf: Vec::new(),
            oversize_len: None,
        }
    }

    /// Adds bytes; returns the lines they completed, in order.
    pub fn push(&mut self, mut data: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        while !data.is_empty() {
            let (segment, ends_line) = match data.iter().position(|&b| b == b'\n') {
                Some(i) => (&data[..i], true),
                None => (data, false),
            };
            self.append(segment);
            data = if ends_line {
                &data[segment.len() + 1..]
            } else {
                &[]
            };
            if ends_line {
                lines.push(self.take(LineKind::Complete));
            }
        }
        lines
    }

    /// Ends the stream: the bytes after the last newline, if any.
    pub fn finish(&mut self) -> Option<Line> {
        if self.buf.is_empty() && self.oversize_len.is_none() {
            return None;
        }
        Some(self.take(LineKind::Unterminated))
    }

    fn append(&mut self, segment: &[u8]) {
        if let Some(len) = self.oversize_len.as_mut() {
            *len += segment.len();
            return;
        }
        if self.buf.len() + segment.len() > self.max {
            let total = self.buf.len() + segment.len();
            let room = OVERSIZE_PREVIEW_BYTES.saturating_sub(self.buf.len());
            self.buf.truncate(OVERSIZE_PREVIEW_BYTES);
            self.buf
                .extend_from_slice(&segment[..room.min(segment.len())]);
            self.buf.shrink_to_fit();
            self.oversize_len = Some(total);
        } else {
            self.buf.extend_from_slice(segment);
        }
    }

    fn take(&mut self, end: LineKind) -> Line {
        let bytes = std::mem::take(&mut self.buf);
        let kind = match self.oversize_len.take() {
            Some(len) => LineKind::Oversize { len },
            None => end,
        };
        Line { bytes, kind }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_across_chunks_and_keeps_empty_lines() {
        let mut f = LineFramer::new();
        assert!(f.push(b"{\"a\"").is_empty());
        let lines = f.push(b":1}\n\n{\"b\":2}\n{\"c\"");
        let texts: Vec<&[u8]> = lines.iter().map(|l| l.bytes.as_slice()).collect();
        assert_eq!(texts, vec![&b"{\"a\":1}"[..], b"", b"{\"b\":2}"]);
        assert!(lines.iter().all(|l| l.kind == LineKind::Complete));
        let last = f.finish();
        assert_eq!(
            last,
            Some(Line {
                bytes: b"{\"c\"".to_vec(),
                kind: LineKind::Unterminated
            })
        );
        assert_eq!(f.finish(), None);
    }

    #[test]
    fn over_long_line_is_cut_to_a_preview_and_the_next_line_survives() {
        let mut f = LineFramer::with_max(10_000);
        let mut out = Vec::new();
        for _ in 0..10 {
            out.extend(f.push(&[b'x'; 3_000]));
        }
        assert!(out.is_empty());
        out.extend(f.push(b"\nok\n"));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].kind, LineKind::Oversize { len: 30_000 });
        assert_eq!(out[0].bytes.len(), OVERSIZE_PREVIEW_BYTES);
        assert_eq!(out[1].bytes, b"ok");
        assert_eq!(out[1].kind, LineKind::Complete);
    }

    #[test]
    fn over_long_unterminated_tail_is_reported_as_oversize() {
        let mut f = LineFramer::with_max(4);
        assert!(f.push(b"abcdefgh").is_empty());
        let last = f.finish();
        assert_eq!(last.map(|l| l.kind), Some(LineKind::Oversize { len: 8 }));
    }
}
