//! Reading a child's output with a size cap, to its end.
//!
//! The pipe is always drained to its end, past the cap, so a chatty child
//! never blocks on a full pipe; only what is kept is bounded. A command's
//! output keeps its head (what it printed first explains the rest); a CLI
//! agent's stderr keeps its tail (the last lines say why it stopped). The
//! bytes are read into a [`Captured`] the caller owns, so what was read
//! before a timeout is still there after the read is abandoned.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes read per call; a pipe's default capacity.
const CHUNK: usize = 64 * 1024;

/// Which part of the output to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first `n` bytes.
    Head(usize),
    /// The last `n` bytes.
    Tail(usize),
}

/// What was kept of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    keep: Keep,
    bytes: Vec<u8>,
    truncated: bool,
}

impl Captured {
    /// Nothing read yet.
    pub fn new(keep: Keep) -> Self {
        Self {
            keep,
            bytes: Vec::new(),
            truncated: false,
        }
    }

    /// Whether anything read was not kept.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes as text: invalid UTF-8 replaced, and a character cut
    /// in half by the cap dropped rather than replaced.
    pub fn text(&self) -> String {
        let bytes = match self.keep {
            Keep::Tail(_) if self.truncated => skip_partial_char(&self.bytes),
            _ => &self.bytes,
        };
        application::tools::lossy_text(bytes.to_vec(), self.truncated)
    }

    fn push(&mut self, chunk: &[u8]) {
        match self.keep {
            Keep::Head(cap) => {
                let room = cap.saturating_sub(self.bytes.len());
                self.truncated |= chunk.len() > room;
                self.bytes
                    .extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Keep::Tail(cap) => {
                self.bytes.extend_from_slice(chunk);
                if self.bytes.len() > cap {
                    self.truncated = true;
                    self.bytes.drain(..self.bytes.len() - cap);
                }
            }
        }
    }

    /// Reads `stream` to its end (or its first read error) into `self`.
    pub async fn read_from(&mut self, mut stream: impl AsyncRead + Unpin) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => self.push(&buf[..n]),
                Err(e) => {
                    tracing::debug!(error = %e, "reading a child's output failed");
                    break;
                }
            }
        }
    }
}

/// `bytes` less the continuation bytes a cut at their start left over.
fn skip_partial_char(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count();
    &bytes[skip..]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    async fn read(keep: Keep, input: &[u8]) -> Captured {
        let mut captured = Captured::new(keep);
        captured.read_from(input).await;
        captured
    }

    #[tokio::test]
    async fn the_head_or_the_tail_is_kept_and_the_cut_is_marked() {
        let head = read(Keep::Head(4), b"abcdef").await;
        assert_eq!((head.text().as_str(), head.truncated()), ("abcd", true));
        let tail = read(Keep::Tail(4), b"abcdef").await;
        assert_eq!((tail.text().as_str(), tail.truncated()), ("cdef", true));
        let whole = read(Keep::Head(6), b"abcdef").await;
        assert_eq!(
            (whole.text().as_str(), whole.truncated()),
            ("abcdef", false)
        );
    }

    #[tokio::test]
    async fn a_character_cut_by_the_cap_is_dropped_at_either_end() {
        assert_eq!(read(Keep::Head(2), "hé".as_bytes()).await.text(), "h");
        assert_eq!(read(Keep::Tail(2), "éh".as_bytes()).await.text(), "h");
        assert_eq!(read(Keep::Head(9), b"a\xffb").await.text(), "a\u{fffd}b");
    }
}
