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
    /// Appends the timestamp as a JSON string, as its `Serialize` writes
    /// it: the usual form needs no escaping, so record writers skip
    /// serde's scan of it.
    pub(crate) fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let mut text = [0u8; 24];
        match self.encode(&mut text).map(|()| std::str::from_utf8(&text)) {
            Some(Ok(text)) => {
                crate::json_out::write_plain(buf, text);
                Ok(())
            }
            _ => serde_json::to_writer(buf, self),
        }
    }

    /// Writes `YYYY-MM-DDTHH:MM:SS.mmmZ` into a stack buffer: every event
    /// carries a timestamp, and formatting through chrono's string builder
    /// costs an allocation per event on the append path.
    fn encode(&self, buf: &mut [u8; 24]) -> Option<()> {
        use chrono::{Datelike, Timelike};
        // The calendar fields of the naive UTC time: asked of the zoned
        // value, each one converts it to local time again (chrono's
        // `naive_local`), six conversions per event.
        let t = self.0.naive_utc();
        let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
        let millis = (t.nanosecond() / 1_000_000).min(999);
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
        for (at, sep) in SEPARATORS {
            buf[at] = sep;
        }
        Some(())
    }
}

/// Where `YYYY-MM-DDTHH:MM:SS.mmmZ` has its separators, and which.
const SEPARATORS: [(usize, u8); 7] = [
    (4, b'-'),
    (7, b'-'),
    (10, b'T'),
    (13, b':'),
    (16, b':'),
    (19, b'.'),
    (23, b'Z'),
];

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

impl Timestamp {
    /// Reads the form [`Timestamp::encode`] writes, `YYYY-MM-DDTHH:MM:SS.mmmZ`,
    /// without chrono's general RFC 3339 parser (a quarter of reading an
    /// event's envelope); `None` for any other form, which takes that parser.
    fn decode(text: &str) -> Option<Self> {
        let b: &[u8; 24] = text.as_bytes().try_into().ok()?;
        if SEPARATORS.iter().any(|&(at, sep)| b[at] != sep) {
            return None;
        }
        let num = |from: usize, width: usize| {
            b[from..from + width].iter().try_fold(0u32, |n, d| {
                d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
            })
        };
        let year = i32::try_from(num(0, 4)?).ok()?;
        let date = chrono::NaiveDate::from_ymd_opt(year, num(5, 2)?, num(8, 2)?)?;
        let at = date.and_hms_milli_opt(num(11, 2)?, num(14, 2)?, num(17, 2)?, num(20, 3)?)?;
        Some(Self(at.and_utc()))
    }

    /// Any RFC 3339 time, the written form first.
    fn parse_text(text: &str) -> Result<Self, chrono::ParseError> {
        match Self::decode(text) {
            Some(t) => Ok(t),
            None => DateTime::parse_from_rfc3339(text).map(|t| Self::new(t.with_timezone(&Utc))),
        }
    }
}

impl std::str::FromStr for Timestamp {
    type Err = chrono::ParseError;

    /// Any RFC 3339 time (`2026-01-02T03:04:05Z`, `...+02:00`), in UTC.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_text(s)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    /// Parsed from the text as the reader has it (no copy first: every
    /// event has a timestamp).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 timestamp")
            }
            fn visit_str<E: serde::de::Error>(self, raw: &str) -> Result<Timestamp, E> {
                Timestamp::parse_text(raw)
                    .map_err(|e| E::custom(format!("bad timestamp `{raw}`: {e}")))
            }
        }
        d.deserialize_str(Text)
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
    fn the_fast_decoding_matches_chrono() {
        for text in [
            "2026-01-01T00:00:00.123Z",
            "1970-01-01T00:00:00.000Z",
            "9999-12-31T23:59:59.999Z",
            "2000-02-29T12:34:56.789Z",
        ] {
            let fast = Timestamp::decode(text).unwrap();
            let slow = DateTime::parse_from_rfc3339(text).unwrap();
            assert_eq!(fast, Timestamp::new(slow.with_timezone(&Utc)), "{text}");
        }
        // Other forms are chrono's to read, or to refuse.
        for text in [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00.123+01:00",
            "2026-02-30T00:00:00.000Z",
            "2026-01-01T00:00:60.000Z",
            "2026-01-01 00:00:00.000Z",
            "2026-01-01T00:00:0x.000Z",
        ] {
            assert_eq!(Timestamp::decode(text), None, "{text}");
            assert_eq!(
                text.parse::<Timestamp>().ok(),
                DateTime::parse_from_rfc3339(text)
                    .ok()
                    .map(|t| Timestamp::new(t.with_timezone(&Utc))),
                "{text}"
            );
        }
        assert!(serde_json::from_str::<Timestamp>("\"yesterday\"").is_err());
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
