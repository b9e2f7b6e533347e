//! Workflow definitions in the file store: `<root>/definitions/<hex>.json`,
//! one file per content hash, written whole (a temporary file synced, then
//! renamed into place, then the directory synced) before the run that names
//! it records `flow:started`.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use application::ports::{StoreError, definition_at};
use domain::definition::Definition;

use super::DIR_MODE;
use super::log::{FILE_MODE, io_err};

/// The file of the definition `hash` under `root`; `None` for a hash that
/// is not `sha256:` and hex (it names no file, and no path outside).
fn path(root: &Path, hash: &str) -> Option<PathBuf> {
    let hex = hash.strip_prefix("sha256:")?;
    let hex_only =
        !hex.is_empty() && hex.len() <= 128 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    hex_only.then(|| root.join("definitions").join(format!("{hex}.json")))
}

/// Keeps `definition` under `root`, once.
pub(super) fn save(root: &Path, definition: &Definition) -> Result<String, StoreError> {
    let hash = definition.hash();
    let Some(path) = path(root, &hash) else {
        return Err(StoreError::io_msg(format!(
            "definition hash {hash} is not sha256"
        )));
    };
    if path.is_file() {
        return Ok(hash);
    }
    let dir = root.join("definitions");
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(&dir)
        .map_err(|e| io_err("create", &dir, e))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        uuid::Uuid::new_v4().simple(),
        std::process::id()
    ));
    let written = (|| -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)?;
        file.write_all(definition.to_json().as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(&dir)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err("write", &path, e));
    }
    Ok(hash)
}

/// The definition `hash` under `root`, if it is there.
pub(super) fn load(root: &Path, hash: &str) -> Result<Option<Definition>, StoreError> {
    let Some(path) = path(root, hash) else {
        return Ok(None);
    };
    match fs::read(&path) {
        Ok(json) => definition_at(hash, &json, &path.display().to_string()).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", &path, e)),
    }
}
