//! Timestamps as the event log writes them: RFC 3339, UTC, millisecond precision.
//!
//! The domain never reads the clock; a [`Timestamp`] is always handed in.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UTC instant, serialized as `2026-01-02T03:04:05.678Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    /// Wraps a chrono instant, truncated to milliseconds so a value survives a
    /// round trip through its text form unchanged.
    pub fn new(at: DateTime<Utc>) -> Self {
        let millis = at.timestamp_millis();
        Self(DateTime::from_timestamp_millis(millis).unwrap_or(at))
    }

    /// From milliseconds since the Unix epoch (out-of-range values clamp to the epoch).
    pub fn from_millis(millis: i64) -> Self {
        Self(DateTime::from_timestamp_millis(millis).unwrap_or_default())
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// The chrono value.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }

    /// `millis` later (saturating at the end of representable time).
    pub fn plus_millis(&self, millis: u128) -> Timestamp {
        let millis = i64::try_from(millis).unwrap_or(i64::MAX);
        Timestamp::from_millis(self.as_millis().saturating_add(millis))
    }

    /// Milliseconds from `earlier` to `self`, 0 if `earlier` is later.
    pub fn millis_since(&self, earlier: Timestamp) -> u64 {
        u64::try_from(self.as_millis() - earlier.as_millis()).unwrap_or(0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl Timestamp {
    /// Writes `YYYY-MM-DDTHH:MM:SS.mmmZ` into a stack buffer: every event
    /// carries a timestamp, and formatting through chrono's string builder
    /// costs an allocation per event on the append path.
    fn encode(&self, buf: &mut [u8; 24]) -> Option<()> {
        use chrono::{Datelike, Timelike};
        let t = self.0;
        let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
        let millis = t.timestamp_subsec_millis().min(999);
        let mut put = |at: usize, value: u32, width: usize| {
            let mut v = value;
            for i in (0..width).rev() {
                buf[at + i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, year, 4);
        put(5, t.month(), 2);
        put(8, t.day(), 2);
        put(11, t.hour(), 2);
        put(14, t.minute(), 2);
        put(17, t.second(), 2);
        put(20, millis, 3);
        for (at, sep) in [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
            (23, b'Z'),
        ] {
            buf[at] = sep;
        }
        Some(())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 24];
        match self.encode(&mut buf).map(|()| std::str::from_utf8(&buf)) {
            Some(Ok(text)) => s.serialize_str(text),
            // Years outside 0..=9999 take chrono's general path.
            _ => s.collect_str(self),
        }
    }
}

impl std::str::FromStr for Timestamp {
    type Err = chrono::ParseError;

    /// Any RFC 3339 time (`2026-01-02T03:04:05Z`, `...+02:00`), in UTC.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DateTime::parse_from_rfc3339(s).map(|t| Self::new(t.with_timezone(&Utc)))
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = std::borrow::Cow::<'de, str>::deserialize(d)?;
        DateTime::parse_from_rfc3339(&raw)
            .map(|t| Self::new(t.with_timezone(&Utc)))
            .map_err(|e| serde::de::Error::custom(format!("bad timestamp `{raw}`: {e}")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_encoding_matches_chrono() {
        for millis in [
            0,
            1,
            999,
            1_767_225_600_123,
            253_402_300_799_999,
            951_782_400_000,
        ] {
            let t = Timestamp::from_millis(millis);
            let fast = serde_json::to_string(&t).unwrap();
            assert_eq!(fast, format!("\"{t}\""), "{millis}");
        }
    }

    #[test]
    fn serializes_utc_millis() {
        let t = Timestamp::from_millis(1_767_225_600_123);
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-01-01T00:00:00.123Z\""
        );
        let back: Timestamp = serde_json::from_str("\"2026-01-01T01:00:00.123+01:00\"").unwrap();
        assert_eq!(back, t);
    }
}
