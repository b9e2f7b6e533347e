//! Durations in a workflow file (`timeout`, `retry.backoff`, `budget.deadline`,
//! ...): `90s`, `500ms`, `1h 30m`, or a whole number of seconds, each more
//! than 0 and at most [`Timeout::MAX`], with messages naming the field.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a call may take: `90s`, `10m`, `1h 30m`, or a number of seconds;
/// more than 0 and at most [`Timeout::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timeout(pub Duration);

impl Timeout {
    /// The longest timeout a workflow may give: 7 days. A deadline is the
    /// clock's now plus the timeout, and that sum must stay representable.
    pub const MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);

    /// `duration` as a timeout, or why it cannot be one.
    pub fn new(duration: Duration) -> Result<Self, String> {
        Self::named("timeout", duration)
    }

    /// [`Timeout::new`] for a duration written as `field`.
    pub(super) fn named(field: &str, duration: Duration) -> Result<Self, String> {
        if duration.is_zero() {
            Err(format!("`{field}` must be more than 0 s"))
        } else if duration > Self::MAX {
            Err(format!(
                "`{field}` must be at most 7 days ({} s), not {}",
                Self::MAX.as_secs(),
                humantime::format_duration(duration)
            ))
        } else {
            Ok(Timeout(duration))
        }
    }
}

impl Serialize for Timeout {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RawDuration::deserialize(d)?
            .resolve("timeout")
            .map_err(serde::de::Error::custom)
    }
}

/// A duration as written, checked once the field it belongs to is known.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawDuration {
    Seconds(u64),
    Negative(i64),
    Fraction(f64),
    Text(String),
}

impl RawDuration {
    /// The duration under the rules of a [`Timeout`], or why not, naming `field`.
    pub(super) fn resolve(&self, field: &str) -> Result<Timeout, String> {
        let duration = match self {
            RawDuration::Seconds(s) => Duration::from_secs(*s),
            RawDuration::Negative(n) => {
                return Err(format!("`{field}` must be more than 0 s, not {n}"));
            }
            RawDuration::Fraction(f) => {
                return Err(format!(
                    "bad `{field}` {f}: give whole seconds or text (e.g. `1.5s`, `90s`, `10m`)"
                ));
            }
            RawDuration::Text(t) => humantime::parse_duration(t)
                .map_err(|e| format!("bad `{field}` `{t}`: {e} (e.g. `90s`, `10m`)"))?,
        };
        Timeout::named(field, duration)
    }
}
