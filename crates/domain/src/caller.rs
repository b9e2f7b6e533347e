//! [`Caller`]: who caused an event, so a run's log says who started,
//! resumed, forked, paused, cancelled or messaged it (design §5.3).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The name of whoever caused an event: a named token of `awr serve`
/// (`ci-bot`, or `token` for the server's single token), or a local user of
/// the command line (`alice@build-7`, login and host).
///
/// Read back as it was written, whatever its text, so a log of another
/// version never fails to load for a name; [`Caller::new`] checks a name
/// this version records.
///
/// ```
/// use awr_domain::Caller;
///
/// let who = Caller::new("ci-bot")?;
/// assert_eq!(who.as_str(), "ci-bot");
/// assert!(Caller::new("two\nlines").is_err());
/// # Ok::<(), awr_domain::caller::CallerError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Caller(String);

/// Why a name cannot be a [`Caller`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallerError {
    /// Empty, too long, or holding a control character (it is printed on
    /// one line of `awr show` and of a terminal).
    #[error(
        "`{0}` cannot name a caller: use 1 to {max} characters, none of them a control character",
        max = Caller::MAX_LEN
    )]
    Bad(String),
}

impl Caller {
    /// The longest name recorded, in characters.
    pub const MAX_LEN: usize = 128;

    /// `name`, checked: 1 to [`Caller::MAX_LEN`] characters, no control
    /// character.
    pub fn new(name: impl Into<String>) -> Result<Self, CallerError> {
        let name = name.into();
        let length = name.chars().count();
        if length == 0 || length > Self::MAX_LEN || name.chars().any(char::is_control) {
            return Err(CallerError::Bad(name.escape_debug().to_string()));
        }
        Ok(Self(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_printable_line_of_bounded_length() {
        assert!(Caller::new("alice@build-7").is_ok());
        assert!(Caller::new("x".repeat(Caller::MAX_LEN)).is_ok());
        for bad in ["", "a\nb", "tab\there", "\u{1b}[31mred"] {
            assert!(Caller::new(bad).is_err(), "{bad:?}");
        }
        assert!(Caller::new("x".repeat(Caller::MAX_LEN + 1)).is_err());
    }

    #[test]
    fn it_is_written_and_read_as_a_plain_string() {
        let who = Caller::new("ci-bot").unwrap();
        assert_eq!(serde_json::to_string(&who).unwrap(), r#""ci-bot""#);
        // A log of another version is read whatever the name holds.
        let read: Caller = serde_json::from_str(r#""""#).unwrap();
        assert_eq!(read.as_str(), "");
    }
}
