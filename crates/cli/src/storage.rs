//! `--storage`: where runs are kept, parsed in this one place.
//!
//! | form                 | store                                      |
//! |----------------------|--------------------------------------------|
//! | `DIR`                | the file store under `DIR`                 |
//! | `sqlite:PATH`        | the SQLite store in the database file `PATH` |
//! | `postgres://…`       | the PostgreSQL store in that database      |
//!
//! Any other `SCHEME://...` is refused by name, so a new store is one more
//! arm here and in `embed::open_store`. What stays files whatever the store
//! (transcripts, control sockets) lives in [`Storage::files`].

use std::fmt;
use std::path::PathBuf;

/// Where runs are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// The file store: a directory.
    Files(PathBuf),
    /// The SQLite store: a database file.
    Sqlite(PathBuf),
    /// The PostgreSQL store: the database's URL (`postgres://` or
    /// `postgresql://`), which may hold a password: shown without it.
    Postgres(String),
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
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            return Ok(Self::Postgres(value.to_owned()));
        }
        if let Some((scheme, _)) = value.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(format!(
                "storage `{scheme}://` is not supported: use a directory, sqlite:PATH or \
                 postgres://USER@HOST/DATABASE"
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
    /// a SQLite database (the database's real path, symlinks resolved); for
    /// PostgreSQL, a directory of this machine's per database (see
    /// [`postgres_files`]).
    pub fn files(&self) -> PathBuf {
        match self {
            Self::Files(dir) => dir.clone(),
            Self::Postgres(url) => postgres_files(url),
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

/// This machine's directory of the files kept beside the PostgreSQL
/// database `url`: `awr/pg/DIGEST` under `$XDG_STATE_HOME`
/// (`~/.local/state` when unset), where the control sockets of the runs
/// this machine writes, and their transcripts, are. `DIGEST` names the
/// host, port and database (never the user or password) in 16 hex digits:
/// short, since a socket's path is bounded (`SUN_LEN`).
pub fn postgres_files(url: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split('?').next().unwrap_or_default();
    let place = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let digest = Sha256::digest(place.as_bytes());
    let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    state.join("awr").join("pg").join(name)
}

/// `url` with its password, if any, replaced by `***`: what messages show.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl Storage {
    /// The `--storage` value that names this storage from any directory
    /// (a path made absolute), as given: a PostgreSQL URL keeps its
    /// password, so this is for a child process's environment, never for
    /// showing.
    pub fn value(&self) -> String {
        let absolute = |path: &std::path::Path| {
            std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
        };
        match self {
            Self::Files(dir) => absolute(dir).display().to_string(),
            Self::Sqlite(db) => format!("sqlite:{}", absolute(db).display()),
            Self::Postgres(url) => url.clone(),
        }
    }
}

impl fmt::Display for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Files(dir) => write!(f, "{}", dir.display()),
            Self::Sqlite(db) => write!(f, "sqlite:{}", db.display()),
            Self::Postgres(url) => f.write_str(&without_password(url)),
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
        assert_eq!(
            parse("postgres://me@db:5433/awr"),
            Ok(Storage::Postgres("postgres://me@db:5433/awr".into()))
        );
        assert!(matches!(
            parse("postgresql://db/awr"),
            Ok(Storage::Postgres(_))
        ));
        let other = parse("mysql://localhost/awr").unwrap_err();
        assert!(
            other.contains("mysql://") && other.contains("postgres://"),
            "{other}"
        );
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

    #[test]
    fn a_postgres_url_is_shown_without_its_password() {
        let storage = Storage::Postgres("postgres://me:s3cret@db:5433/awr?sslmode=disable".into());
        let shown = storage.to_string();
        assert_eq!(shown, "postgres://me:***@db:5433/awr?sslmode=disable");
        assert_eq!(
            without_password("postgres://me@db/awr"),
            "postgres://me@db/awr"
        );
        assert_eq!(without_password("postgres://db"), "postgres://db");
        // The files of one database are in one place whoever connects,
        // named without the password.
        let files = storage.files();
        assert_eq!(files, postgres_files("postgres://you@db:5433/awr"));
        assert_ne!(files, postgres_files("postgres://me@db:5433/other"));
        assert_eq!(files.file_name().unwrap().len(), 16);
        assert!(!files.to_string_lossy().contains("s3cret"));
    }
}
