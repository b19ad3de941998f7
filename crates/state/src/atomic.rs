//! Crash-safe file replacement, reusable by any crate that writes files users rely on.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::error::{Result, StateError};

/// Replaces `path` with `bytes` so that, after a crash at any instant, the file holds either
/// its old content or the new content, never a prefix: write a temp file in the same
/// directory, fsync it, rename it over the target, then fsync the directory so the rename
/// itself is durable. Creates the parent directory if missing.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let io = |action: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |source| StateError::Io {
            action,
            path: p,
            source,
        }
    };
    std::fs::create_dir_all(dir).map_err(io("creating directory", dir))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Same directory as the target: rename is only atomic within one filesystem.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{file_name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io("creating temp file in", dir))?;
    tmp.write_all(bytes)
        .map_err(io("writing temp file for", path))?;
    tmp.as_file()
        .sync_all()
        .map_err(io("syncing temp file for", path))?;
    tmp.persist(path).map_err(|e| StateError::Io {
        action: "renaming temp file onto",
        path: path.to_path_buf(),
        source: e.error,
    })?;
    sync_dir(dir)
}

/// Fsyncs a directory so renames and creations inside it survive a power loss.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StateError::Io {
            action: "syncing directory",
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/state.json");
        atomic_write(&target, b"first").unwrap();
        atomic_write(&target, b"second").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    #[test]
    fn names_the_path_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"x").unwrap();
        let err = atomic_write(&blocker.join("child.json"), b"y").unwrap_err();
        assert!(err.to_string().contains("file"), "{err}");
    }
}
