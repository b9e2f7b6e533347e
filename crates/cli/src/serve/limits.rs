//! The server's caps (docs/http.md, "Limits"): what one client, or all of
//! them, may hold open at once. Past a cap a request gets 503 with
//! `Retry-After`, never a queue that grows or a crash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use domain::Caller;

use super::ApiError;

/// The caps, set by `awr serve`'s flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once (`--max-connections`).
    pub connections: usize,
    /// Streams open at once, in all (`--max-streams`).
    pub streams: usize,
    /// Streams open at once per caller (`--max-streams-per-token`): one
    /// token cannot take every stream.
    pub streams_per_caller: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 1024,
            streams: 512,
            streams_per_caller: 64,
        }
    }
}

/// Seconds a client refused a stream is told to wait.
const RETRY_AFTER: u32 = 5;

/// The streams open now, in all and per caller.
#[derive(Debug)]
pub struct Streams {
    limits: Limits,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by: HashMap<Caller, usize>,
}

/// One open stream: held by its body, given back when the body ends.
#[derive(Debug)]
pub struct Slot {
    streams: Arc<Streams>,
    caller: Caller,
}

impl Streams {
    /// No stream open, under `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::new(Open::default()),
        })
    }

    /// A slot for a stream of `caller`, or 503 past a cap.
    pub fn take(self: &Arc<Self>, caller: &Caller) -> Result<Slot, ApiError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.limits.streams {
            return Err(ApiError::busy(
                format!(
                    "the server has {} streams open, its most (--max-streams); try again later",
                    open.total
                ),
                RETRY_AFTER,
            ));
        }
        let mine = open.by.get(caller).copied().unwrap_or(0);
        if mine >= self.limits.streams_per_caller {
            return Err(ApiError::busy(
                format!(
                    "`{caller}` has {mine} streams open, the most one token may (--max-streams-per-token); close one or try again later"
                ),
                RETRY_AFTER,
            ));
        }
        open.total += 1;
        *open.by.entry(caller.clone()).or_default() += 1;
        Ok(Slot {
            streams: Arc::clone(self),
            caller: caller.clone(),
        })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .streams
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                open.by.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_capped_per_caller_and_in_all_and_given_back() {
        let streams = Streams::new(Limits {
            connections: 10,
            streams: 3,
            streams_per_caller: 2,
        });
        let a = Caller::new("a").unwrap();
        let b = Caller::new("b").unwrap();
        let a1 = streams.take(&a).unwrap();
        let _a2 = streams.take(&a).unwrap();
        let refused = streams.take(&a).unwrap_err();
        assert_eq!(refused.status().as_u16(), 503);
        assert!(
            refused.message().contains("`a` has 2 streams"),
            "{}",
            refused.message()
        );
        let _b1 = streams.take(&b).unwrap();
        let refused = streams.take(&b).unwrap_err();
        assert!(
            refused.message().contains("--max-streams)"),
            "{}",
            refused.message()
        );
        drop(a1);
        assert_eq!(streams.open(), 2);
        assert!(streams.take(&b).is_ok(), "a slot given back is free again");
    }
}
