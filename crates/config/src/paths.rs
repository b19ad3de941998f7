//! Paths as upstream's Python resolves them (`pathlib`): a leaf, so that loading a score
//! and reading its task list share it without importing each other.

use std::path::{Component, Path, PathBuf};

/// `path` made absolute against the CWD (the CWD unknown: against `/`).
pub(crate) fn against_cwd(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    }
}

/// Python `Path.resolve()` (non-strict): absolute against the CWD, symlinks of existing
/// components resolved, `.`/`..` collapsed.
pub fn resolve_path(path: &Path) -> PathBuf {
    let absolute = against_cwd(path);
    let mut out = PathBuf::from("/");
    for comp in absolute.components() {
        match comp {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => {
                out.push(part);
                if let Ok(real) = std::fs::canonicalize(&out) {
                    out = real;
                }
            }
        }
    }
    out
}
