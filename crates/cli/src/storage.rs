//! `--storage`: where runs are kept, parsed in this one place.
//!
//! | form          | store                                             |
//! |---------------|---------------------------------------------------|
//! | `DIR`         | the file store under `DIR`                        |
//! | `sqlite:PATH` | the SQLite store in the database file `PATH`      |
//!
//! Any other `SCHEME://...` (`postgres://` one day) is refused by name, so
//! a new store is one more arm here and in `embed::open_store`. What stays
//! files whatever the store (transcripts, control sockets) lives in
//! [`Storage::files`].

use std::fmt;
use std::path::PathBuf;

/// Where runs are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// The file store: a directory.
    Files(PathBuf),
    /// The SQLite store: a database file.
    Sqlite(PathBuf),
}

impl Storage {
    /// Parses a `--storage` value (see the module doc).
    pub fn parse(value: &str) -> Result<Self, String> {
        if let Some(path) = value.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("`sqlite:` needs the path of a database file: sqlite:PATH".into());
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = value.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(format!(
                "storage `{scheme}://` is not supported: use a directory or sqlite:PATH"
            ));
        }
        if value.is_empty() {
            return Err("--storage needs a directory or sqlite:PATH".into());
        }
        Ok(Self::Files(PathBuf::from(value)))
    }

    /// The directory of what is kept as files beside any store: transcripts
    /// (`transcripts/`) and the control sockets of live runs (`control/`).
    /// The storage directory itself for the file store; `PATH-files` beside
    /// a SQLite database (the database's real path, symlinks resolved).
    pub fn files(&self) -> PathBuf {
        match self {
            Self::Files(dir) => dir.clone(),
            Self::Sqlite(db) => {
                // Beside the real file, symlinks resolved, as its locks are:
                // another name for the database finds the same sockets.
                let db = std::fs::canonicalize(db).unwrap_or_else(|_| db.clone());
                let mut dir = db.into_os_string();
                dir.push("-files");
                PathBuf::from(dir)
            }
        }
    }
}

impl fmt::Display for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Files(dir) => write!(f, "{}", dir.display()),
            Self::Sqlite(db) => write!(f, "sqlite:{}", db.display()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn storage_forms_parse_in_one_place() {
        let parse = |s: &str| Storage::parse(s);
        assert_eq!(parse("storage"), Ok(Storage::Files("storage".into())));
        assert_eq!(parse("/a/b"), Ok(Storage::Files("/a/b".into())));
        assert_eq!(
            parse("sqlite:runs.db"),
            Ok(Storage::Sqlite("runs.db".into()))
        );
        assert_eq!(
            parse("sqlite:///var/awr.db"),
            Ok(Storage::Sqlite("/var/awr.db".into()))
        );
        assert!(parse("sqlite:").is_err());
        assert!(parse("").is_err());
        let postgres = parse("postgres://localhost/awr").unwrap_err();
        assert!(postgres.contains("postgres://"), "{postgres}");
        // A directory whose name has a colon is still a directory.
        assert_eq!(parse("a:b"), Ok(Storage::Files("a:b".into())));
        assert_eq!(
            Storage::Sqlite("x/runs.db".into()).files(),
            PathBuf::from("x/runs.db-files")
        );
        assert_eq!(Storage::Files("d".into()).files(), PathBuf::from("d"));
        // Through a symlink, beside the real database.
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.db");
        std::fs::write(&real, "").unwrap();
        let alias = dir.path().join("alias.db");
        std::os::unix::fs::symlink(&real, &alias).unwrap();
        let mut expected = real.canonicalize().unwrap().into_os_string();
        expected.push("-files");
        assert_eq!(Storage::Sqlite(alias).files(), PathBuf::from(expected));
    }
}
