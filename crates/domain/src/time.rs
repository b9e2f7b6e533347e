//! Timestamps as the event log writes them: RFC 3339, UTC, millisecond precision.
//!
//! The domain never reads the clock; a [`Timestamp`] is always handed in.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UTC instant, serialized as `2026-01-02T03:04:05.678Z`.
///
/// Held as milliseconds since the Unix epoch: every event is stamped,
/// written and read with one, and the calendar of the written form is a
/// few divisions from there, where chrono's date type recomputes months
/// and days from an ordinal at each field asked of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// Wraps a chrono instant, truncated to milliseconds so a value survives a
    /// round trip through its text form unchanged.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(at.timestamp_millis())
    }

    /// From milliseconds since the Unix epoch (out-of-range values clamp to the epoch).
    pub fn from_millis(millis: i64) -> Self {
        const RANGE: std::ops::RangeInclusive<i64> = DateTime::<Utc>::MIN_UTC.timestamp_millis()
            ..=DateTime::<Utc>::MAX_UTC.timestamp_millis();
        Self(if RANGE.contains(&millis) { millis } else { 0 })
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(&self) -> i64 {
        self.0
    }

    /// The chrono value.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.0).unwrap_or_default()
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
        f.write_str(
            &self
                .as_datetime()
                .to_rfc3339_opts(SecondsFormat::Millis, true),
        )
    }
}

impl Timestamp {
    /// Appends the timestamp as a JSON string, as its `Serialize` writes
    /// it: the usual form needs no escaping, so record writers skip
    /// serde's scan of it.
    pub(crate) fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let mut text = [0u8; 24];
        match self.encode(&mut text) {
            // ASCII digits and separators: nothing to escape.
            Some(()) => {
                buf.push(b'"');
                buf.extend_from_slice(&text);
                buf.push(b'"');
                Ok(())
            }
            None => serde_json::to_writer(buf, self),
        }
    }

    /// Writes `YYYY-MM-DDTHH:MM:SS.mmmZ` into a stack buffer: every event
    /// carries a timestamp, and formatting through chrono's string builder
    /// costs an allocation per event on the append path. `None` for a year
    /// outside 0..=9999, which that form cannot hold.
    fn encode(&self, buf: &mut [u8; 24]) -> Option<()> {
        // Counted from 0000-01-01 the instants of the form are not
        // negative, and unsigned division by a constant is a multiply.
        let since_year_0 = u64::try_from(self.0 - YEAR_0).ok()?;
        let days = u32::try_from(since_year_0 / MILLIS_A_DAY as u64).ok()?;
        // Under 86,400,000: fits.
        let of_day = (since_year_0 % MILLIS_A_DAY as u64) as u32;
        let (year, month, day) = civil_from_days(days);
        if year > 9999 {
            return None;
        }
        let seconds = of_day / 1000;
        // Two digits at a time, from a table: half the divisions.
        let mut pair = |at: usize, value: u32| {
            let i = 2 * value as usize;
            buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[i..i + 2]);
        };
        pair(0, year / 100);
        pair(2, year % 100);
        pair(5, month);
        pair(8, day);
        pair(11, seconds / 3600);
        pair(14, seconds / 60 % 60);
        pair(17, seconds % 60);
        let millis = of_day % 1000;
        pair(20, millis / 10);
        buf[22] = b'0' + (millis % 10) as u8;
        for (at, sep) in SEPARATORS {
            buf[at] = sep;
        }
        Some(())
    }
}

const MILLIS_A_DAY: i64 = 86_400_000;

/// `00`, `01`, … `99`, each two ASCII digits.
const DIGIT_PAIRS: [u8; 200] = {
    let mut table = [0; 200];
    let mut i = 0;
    while i < 100 {
        table[2 * i] = b'0' + (i / 10) as u8;
        table[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    table
};

/// 0000-01-01T00:00:00Z, in milliseconds from the Unix epoch.
const YEAR_0: i64 = -62_167_219_200_000;

/// The proleptic Gregorian date `days` after 0000-01-01, as (year, month,
/// day): H. Hinnant's `civil_from_days`, counting in 400-year eras of
/// 146,097 days from 0000-03-01 (day 60, year 0 being leap), so a leap day
/// ends its year.
fn civil_from_days(days: u32) -> (u32, u32, u32) {
    let Some(z) = days.checked_sub(60) else {
        // January and February of year 0.
        return if days < 31 {
            (0, 1, days + 1)
        } else {
            (0, 2, days - 30)
        };
    };
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u32::from(month <= 2), month, day)
}

/// Days from 1970-01-01 to a valid proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = i64::from(if month > 2 { month - 3 } else { month + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days in `month` (1..=12) of `year`, Gregorian.
fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
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
        let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
        let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
        let valid = (1..=12).contains(&month)
            && (1..=days_in_month(year, month)).contains(&day)
            && hour < 24
            && minute < 60
            && second < 60;
        if !valid {
            return None;
        }
        let seconds = i64::from(hour * 3600 + minute * 60 + second);
        let days = days_from_civil(i64::from(year), month, day);
        Some(Self(
            days * MILLIS_A_DAY + seconds * 1000 + i64::from(num(20, 3)?),
        ))
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
            // Year 0: its first day, the end of January, its leap day, 1 March.
            YEAR_0,
            YEAR_0 + 31 * MILLIS_A_DAY - 1,
            YEAR_0 + 59 * MILLIS_A_DAY,
            YEAR_0 + 60 * MILLIS_A_DAY,
            // The year before, in chrono's form.
            YEAR_0 - 1,
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

    /// Milliseconds from year -300 to year 10300: both sides of the
    /// written form's four-digit years.
    const AROUND_THE_FORM: std::ops::Range<i64> = -71_620_000_000_000..262_880_000_000_000;

    proptest::proptest! {
        #[test]
        fn any_instant_is_written_as_chrono_writes_it(millis in AROUND_THE_FORM) {
            let t = Timestamp::from_millis(millis);
            let chrono = DateTime::from_timestamp_millis(millis).unwrap();
            proptest::prop_assert_eq!(t.as_datetime(), chrono);
            let written = serde_json::to_string(&t).unwrap();
            proptest::prop_assert_eq!(
                &written,
                &format!("\"{}\"", chrono.to_rfc3339_opts(SecondsFormat::Millis, true))
            );
            let mut direct = Vec::new();
            t.write_json(&mut direct).unwrap();
            proptest::prop_assert_eq!(String::from_utf8(direct).unwrap(), written.clone());
            // RFC 3339 has four-digit years: only those are read back.
            let back = serde_json::from_str::<Timestamp>(&written).ok();
            let year = chrono::Datelike::year(&chrono);
            proptest::prop_assert_eq!(back, (0..=9999).contains(&year).then_some(t));
        }

        #[test]
        fn any_written_form_is_read_as_chrono_reads_it(
            (y, mo, d) in (0u32..=9999, 0u32..=13, 0u32..=32),
            (h, mi, s, ms) in (0u32..=25, 0u32..=61, 0u32..=61, 0u32..=999),
        ) {
            let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z");
            let chrono = DateTime::parse_from_rfc3339(&text)
                .ok()
                .map(|t| Timestamp::new(t.with_timezone(&Utc)));
            proptest::prop_assert_eq!(text.parse::<Timestamp>().ok(), chrono, "{}", text);
            // The direct reader takes all chrono takes but a leap second,
            // which chrono folds into the second before it.
            if s < 60 {
                proptest::prop_assert_eq!(Timestamp::decode(&text), chrono, "{}", text);
            }
        }
    }

    #[test]
    fn out_of_range_millis_clamp_to_the_epoch() {
        assert_eq!(Timestamp::from_millis(i64::MAX).as_millis(), 0);
        assert_eq!(Timestamp::from_millis(i64::MIN).as_millis(), 0);
        let max = DateTime::<Utc>::MAX_UTC.timestamp_millis();
        assert_eq!(Timestamp::from_millis(max).as_millis(), max);
        // A year past 9999 is written by chrono's general path.
        let far = Timestamp::from_millis(max);
        assert_eq!(serde_json::to_string(&far).unwrap(), format!("\"{far}\""));
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
