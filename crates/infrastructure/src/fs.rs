//! Bounded, typed file reads: the one way awr reads a file a user named (a
//! workflow, an `--input @FILE`) or a file found in storage (a snapshot, a
//! transcript, an index).
//!
//! A path can name a FIFO (a read waits for a writer forever), a device
//! (`/dev/zero` never ends) or a symlink to one, or a file far larger than
//! anything awr writes. So a file is opened with `O_NONBLOCK` (opening a FIFO
//! then returns at once instead of waiting for a writer), its type is checked
//! on the opened descriptor (no race with a rename), and at most `limit + 1`
//! bytes are ever read: every read ends in bounded time and memory, with an
//! error that names the file.
//!
//! [`WorkflowFiles`] is the application's [`WorkflowSource`] over these reads.
//! [`write_whole`] is the one way awr replaces a whole file beside a run.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use application::ports::{SourceError, StoreError, WorkflowSource};

/// Largest workflow file (YAML or JSON) awr reads: 4 MiB, a thousand times a
/// large hand-written workflow.
pub const MAX_WORKFLOW_FILE: u64 = 4 << 20;

/// Largest `--input @FILE` awr reads: 64 MiB. A run's input is held in
/// memory and written to its records (once: large values are blobs).
pub const MAX_INPUT_FILE: u64 = 64 << 20;

/// Largest `snapshot.json` awr reads: 1 GiB. A larger one is an error, not a
/// reason to rebuild the state from the log.
pub const MAX_SNAPSHOT_FILE: u64 = 1 << 30;

/// Largest single line of an event log or transcript awr reads: 256 MiB. The
/// files themselves may be any size; they are read a line or a batch at a time.
pub const MAX_RECORD_LINE: u64 = 256 << 20;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    /// Nothing at that path.
    #[error("{}: no such file", path.display())]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// A FIFO, device, socket or directory (or a symlink to one).
    #[error("{}: not a regular file (a {kind})", path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than the limit for its kind of file.
    #[error("{}: {size} is larger than the limit of {limit} bytes", path.display())]
    TooBig {
        /// The path.
        path: PathBuf,
        /// How big it is: `N bytes`, or `more than N bytes` when it grew while read.
        size: String,
        /// The limit that applies.
        limit: u64,
    },
    /// It could not be opened (for reading or for writing: a file the
    /// process may not write says so here, not as a failed read).
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The medium failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl FileReadError {
    /// The [`io::ErrorKind`] a caller branches on: the medium's own for
    /// [`FileReadError::Io`], the nearest one otherwise.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Self::NotFound { .. } => io::ErrorKind::NotFound,
            Self::NotRegular { .. } => io::ErrorKind::InvalidInput,
            Self::TooBig { .. } => io::ErrorKind::FileTooLarge,
            Self::Open { source, .. } | Self::Io { source, .. } => source.kind(),
        }
    }

    /// An open that failed: [`FileReadError::NotFound`] or
    /// [`FileReadError::Open`].
    fn open(path: &Path, source: io::Error) -> Self {
        match Self::io(path, source) {
            Self::Io { path, source } => Self::Open { path, source },
            other => other,
        }
    }

    fn io(path: &Path, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            Self::NotFound {
                path: path.to_path_buf(),
            }
        } else {
            Self::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}

/// Of [`FileReadError::kind`], with the whole message: for an error about
/// something more than the read (`cannot lock run …`).
impl From<FileReadError> for io::Error {
    fn from(e: FileReadError) -> Self {
        io::Error::new(e.kind(), e)
    }
}

/// A [`StoreError::Io`] that keeps the medium's error, so
/// [`StoreError::io_kind`] tells what failed.
impl From<FileReadError> for StoreError {
    fn from(e: FileReadError) -> Self {
        match e {
            FileReadError::Io { path, source } => {
                StoreError::io(format!("cannot read {}", path.display()), source)
            }
            FileReadError::Open { path, source } => {
                StoreError::io(format!("cannot open {}", path.display()), source)
            }
            other => StoreError::io_msg(other.to_string()),
        }
    }
}

/// Writes `bytes` as the whole of `path`, or leaves what was there: into a
/// new temp file beside it (mode 0600, its directory created 0700), synced,
/// renamed over `path`, the directory synced. A reader sees the old file or
/// the new one, never a part; a crash leaves at most a hidden temp file.
pub fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir).and_then(|d| d.sync_all())
}

/// Opens `path` with `options` plus `O_NONBLOCK`, and refuses anything that is
/// not a regular file once opened. For regular files `O_NONBLOCK` changes
/// nothing, so the file may be used as usual afterwards.
pub fn open_regular_with(mut options: OpenOptions, path: &Path) -> Result<File, FileReadError> {
    let nonblock = rustix::fs::OFlags::NONBLOCK.bits();
    options.custom_flags(i32::try_from(nonblock).unwrap_or(0));
    let file = options
        .open(path)
        .map_err(|e| FileReadError::open(path, e))?;
    let kind = file
        .metadata()
        .map_err(|e| FileReadError::io(path, e))?
        .file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let kind = if kind.is_fifo() {
        "FIFO"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_dir() {
        "directory"
    } else {
        "special file"
    };
    Err(FileReadError::NotRegular {
        path: path.to_path_buf(),
        kind,
    })
}

/// Opens a regular file for reading (see [`open_regular_with`]).
pub fn open_regular(path: &Path) -> Result<File, FileReadError> {
    let mut options = OpenOptions::new();
    options.read(true);
    open_regular_with(options, path)
}

/// The bytes of the regular file at `path`, if it holds at most `limit`.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, FileReadError> {
    let file = open_regular(path)?;
    let too_big = |size: String| FileReadError::TooBig {
        path: path.to_path_buf(),
        size,
        limit,
    };
    let len = file
        .metadata()
        .map_err(|e| FileReadError::io(path, e))?
        .len();
    if len > limit {
        return Err(too_big(format!("{len} bytes")));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // The file may grow after the check: never read past the limit.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FileReadError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(format!("more than {limit} bytes")));
    }
    Ok(bytes)
}

/// [`read_bounded`] for text: the file must be UTF-8.
pub fn read_text_bounded(path: &Path, limit: u64) -> Result<String, FileReadError> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        // Where, as an editor shows it: the line and the column (in
        // characters) of the first byte that is not UTF-8.
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        let start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |n| n + 1);
        let column = String::from_utf8_lossy(&valid[start..]).chars().count() + 1;
        let byte = e.as_bytes().get(valid.len()).copied().unwrap_or_default();
        FileReadError::Io {
            path: path.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line {line}, column {column}: not UTF-8 (byte {byte:#04x})"),
            ),
        }
    })
}

/// Workflow files on disk, read with [`read_text_bounded`] up to
/// [`MAX_WORKFLOW_FILE`]: the [`WorkflowSource`] of every front end.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkflowFiles;

impl WorkflowSource for WorkflowFiles {
    fn read(&self, path: &Path) -> Result<String, SourceError> {
        read_text_bounded(path, MAX_WORKFLOW_FILE).map_err(|e| SourceError(e.to_string()))
    }

    fn canonical(&self, path: &Path) -> Option<PathBuf> {
        path.canonicalize().ok()
    }

    fn is_file(&self, path: &Path) -> bool {
        path.is_file()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn text_that_is_not_utf8_is_refused_at_its_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.yaml");
        std::fs::write(&path, b"name: a\nid: \xc3\xa9t\xff\n").unwrap();
        let e = read_text_bounded(&path, 100).unwrap_err().to_string();
        assert!(
            e.ends_with("line 2, column 7: not UTF-8 (byte 0xff)"),
            "{e}"
        );
    }

    #[test]
    fn an_open_that_fails_says_open_not_read() {
        let dir = tempfile::tempdir().unwrap();
        // A directory cannot be opened for writing (EISDIR), even by root.
        let mut options = OpenOptions::new();
        options.write(true);
        let e = open_regular_with(options, dir.path()).unwrap_err();
        assert!(matches!(e, FileReadError::Open { .. }), "{e:?}");
        assert!(e.to_string().starts_with("cannot open "), "{e}");
        let e = StoreError::from(e).to_string();
        assert!(
            e.contains("cannot open ") && !e.contains("cannot read"),
            "{e}"
        );
    }

    #[test]
    fn regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "hello").unwrap();
        assert_eq!(read_bounded(&path, 5).unwrap(), b"hello");
        assert!(matches!(
            read_bounded(&path, 4),
            Err(FileReadError::TooBig { limit: 4, .. })
        ));
        assert!(matches!(
            read_bounded(&dir.path().join("nope"), 4),
            Err(FileReadError::NotFound { .. })
        ));
    }

    #[test]
    fn devices_directories_and_symlinks_to_them_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        for path in [Path::new("/dev/zero"), &link, dir.path()] {
            let err = read_bounded(path, 10).unwrap_err();
            assert!(
                matches!(err, FileReadError::NotRegular { .. }),
                "{}: {err}",
                path.display()
            );
        }
    }

    #[test]
    fn workflow_files_are_read_bounded_and_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.yaml");
        std::fs::write(&path, "name: w").unwrap();
        assert_eq!(WorkflowFiles.read(&path).unwrap(), "name: w");
        assert!(WorkflowFiles.is_file(&path));
        assert!(!WorkflowFiles.is_file(dir.path()));
        assert_eq!(
            WorkflowFiles.canonical(&dir.path().join(".").join("w.yaml")),
            Some(path.canonicalize().unwrap())
        );
        let err = WorkflowFiles.read(Path::new("/dev/zero")).unwrap_err();
        assert!(
            err.to_string().starts_with("/dev/zero: not a regular file"),
            "{err}"
        );
        let big = dir.path().join("big.yaml");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(MAX_WORKFLOW_FILE + 1).unwrap();
        let err = WorkflowFiles.read(&big).unwrap_err();
        assert!(err.to_string().contains("larger than the limit"), "{err}");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let err = read_bounded(&fifo, 10).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
    }
}
