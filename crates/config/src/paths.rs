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
///
/// One `readlink` per component while the path so far is real: a component that is no
/// symlink keeps a real path real, so only a symlink needs the whole path resolved again
/// (a `canonicalize` of every prefix made it one `readlink` per component of every prefix,
/// two dozen for a workspace five levels deep, on `mozart run`'s path and the conductor's
/// submission, issue 24).
pub fn resolve_path(path: &Path) -> PathBuf {
    let absolute = against_cwd(path);
    let mut out = PathBuf::from("/");
    // Whether `out` is what `canonicalize` would make of it (it exists, no symlinks). Once
    // a component cannot be resolved, no longer path through it can be either, until a
    // `..` steps back out of it.
    let mut real = true;
    let mut unreal_depth = 0usize;
    for comp in absolute.components() {
        match comp {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
                if unreal_depth > 0 {
                    unreal_depth -= 1;
                    real = unreal_depth == 0;
                }
            }
            Component::Normal(part) => {
                out.push(part);
                if !real {
                    unreal_depth += 1;
                    continue;
                }
                match std::fs::symlink_metadata(&out) {
                    Ok(meta) if !meta.file_type().is_symlink() => {}
                    Ok(_) => match std::fs::canonicalize(&out) {
                        Ok(resolved) => out = resolved,
                        // A dangling or looping link: kept as written, like `canonicalize`
                        // failing did.
                        Err(_) => {
                            real = false;
                            unreal_depth = 1;
                        }
                    },
                    Err(_) => {
                        real = false;
                        unreal_depth = 1;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::resolve_path;
    use std::path::{Path, PathBuf};

    /// What `resolve_path` did before it read one link per component: a `canonicalize`
    /// of every prefix. The two must agree on every path.
    fn by_prefixes(path: &Path) -> PathBuf {
        let mut out = PathBuf::from("/");
        for comp in super::against_cwd(path).components() {
            match comp {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::Normal(part) => {
                    out.push(part);
                    if let Ok(real) = std::fs::canonicalize(&out) {
                        out = real;
                    }
                }
                _ => {}
            }
        }
        out
    }

    #[test]
    fn resolves_like_a_canonicalize_of_every_prefix() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/c")).expect("dirs");
        std::fs::write(root.join("a/file"), "x").expect("file");
        std::os::unix::fs::symlink(root.join("a/b"), root.join("link")).expect("link");
        std::os::unix::fs::symlink("b/c", root.join("a/rel")).expect("relative link");
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).expect("dangling");
        std::os::unix::fs::symlink(root.join("loop"), root.join("loop")).expect("loop");
        for tail in [
            "a/b/c",
            "a/b/c/new/deeper",
            "link/c",
            "link/../file",
            "link/c/../../b/./c",
            "a/rel/x",
            "a/rel/..",
            "missing/../a/b",
            "missing/more/../../link/c",
            "a/file/under",
            "dangling/x",
            "dangling/../a",
            "loop/x",
            "../..",
        ] {
            let path = root.join(tail);
            assert_eq!(resolve_path(&path), by_prefixes(&path), "{tail}");
        }
    }
}
