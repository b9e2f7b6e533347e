//! The forms of values that both front ends, the terminal and `awr
//! serve`, accept from a person: parsed one way, whichever way they came.

use std::time::Duration;

use domain::Timestamp;

/// A `--since` value: an instant, or how long ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// This instant.
    At(Timestamp),
    /// This long before now.
    Ago(Duration),
}

impl Since {
    /// An RFC 3339 time or a duration (`humantime`'s: `2h`, `7d`, `1h 30m`).
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Ok(at) = text.parse::<Timestamp>() {
            return Ok(Self::At(at));
        }
        humantime::parse_duration(text).map(Self::Ago).map_err(|e| {
            format!(
                "`{text}` is neither an RFC 3339 time (2026-01-02T03:04:05Z) nor a duration (2h, 7d): {e}"
            )
        })
    }

    /// The instant meant, `Ago` counted back from `now`.
    pub fn resolve(self, now: Timestamp) -> Timestamp {
        match self {
            Self::At(at) => at,
            Self::Ago(ago) => {
                let millis = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
                Timestamp::from_millis(now.as_millis().saturating_sub(millis))
            }
        }
    }
}

/// Parses a duration such as `30d`, `12h` or `90min`.
pub fn parse_age(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value).map_err(|e| format!("`{value}`: {e} (e.g. 30d, 12h, 90min)"))
}

/// A lease term: a duration of at least a second (a shorter one would be
/// spent renewing it) and at most a day.
pub fn parse_lease(value: &str) -> Result<Duration, String> {
    let lease = parse_age(value)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&lease) {
        return Err(format!("`{value}`: a lease lasts from 1s to 24h"));
    }
    Ok(lease)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn since_is_an_instant_or_how_long_ago() {
        let now = Timestamp::from_millis(1_767_225_600_000);
        let at = Since::parse("2026-01-01T00:00:00Z").map(|s| s.resolve(now));
        assert_eq!(at, Ok(now));
        let ago = Since::parse("2h").map(|s| s.resolve(now));
        assert_eq!(
            ago,
            Ok(Timestamp::from_millis(1_767_225_600_000 - 7_200_000))
        );
        let bad = Since::parse("yesterday").unwrap_err();
        assert!(
            bad.contains("`yesterday`") && bad.contains("RFC 3339"),
            "{bad}"
        );
    }

    #[test]
    fn an_age_is_a_duration_and_a_bad_one_says_how_to_write_it() {
        assert_eq!(parse_age("90min"), Ok(Duration::from_secs(5_400)));
        let bad = parse_age("soon").unwrap_err();
        assert!(bad.contains("`soon`") && bad.contains("30d"), "{bad}");
    }
}
