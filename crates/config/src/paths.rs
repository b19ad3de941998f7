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

/// [`resolve_path`] for a path Mozart creates files in (the workspace): refused, naming the
/// link, when a symbolic link on the way is one the user cannot trust — another user's, or
/// not the user's in a directory others may write ([`mozart_ipc::own_path`]).
pub fn resolve_own_path(path: &Path) -> Result<PathBuf, mozart_ipc::own_path::ForeignLink> {
    match mozart_ipc::own_path::foreign_link(path) {
        Some(link) => Err(link),
        None => Ok(resolve_path(path)),
    }
}

/// Where a `run_job` hook's relative `job_path` (placeholders already expanded) is found for
/// a score in `score_dir`: beside the score, else from the directories above it (upstream's
/// own scores name their chained score from the project root: `examples/x.yaml` in
/// `examples/x.yaml`). `Err` holds the path beside the score, which the failure names.
/// An absolute `job_path` is taken as it is, found or not.
pub fn chained_score(score_dir: &Path, job_path: &Path) -> Result<PathBuf, PathBuf> {
    if job_path.is_absolute() {
        return Ok(job_path.to_path_buf());
    }
    let beside = score_dir.join(job_path);
    if beside.exists() {
        return Ok(beside);
    }
    from_project_root(score_dir, job_path).ok_or(beside)
}

/// `rel` looked for in the directories above `score_dir` (nearest first). The walk stops at
/// the first directory that is not the user's own or that others may write to (`/tmp`,
/// `/home`, a shared directory), and only a file the user owns is taken: what another local
/// user could put there is never run as the next score.
fn from_project_root(score_dir: &Path, rel: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    for dir in score_dir.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else {
            return None;
        };
        if meta.uid() != uid || meta.mode() & 0o022 != 0 {
            return None;
        }
        let candidate = dir.join(rel);
        if std::fs::metadata(&candidate).is_ok_and(|m| m.is_file() && m.uid() == uid) {
            return Some(candidate);
        }
    }
    None
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

    /// A chained score named from the project root is found above the score's directory,
    /// but never through a directory others may write to, nor as a file another user owns.
    #[test]
    fn a_job_path_is_looked_for_only_in_the_users_own_directories_above() {
        use super::from_project_root;
        use std::os::unix::fs::PermissionsExt;
        use std::path::Path;
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("project");
        let examples = project.join("examples");
        std::fs::create_dir_all(&examples).unwrap();
        let set_mode = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        set_mode(root.path(), 0o755);
        set_mode(&project, 0o755);
        std::fs::write(examples.join("next.yaml"), "name: next\n").unwrap();
        let rel = Path::new("examples/next.yaml");
        assert_eq!(
            from_project_root(&examples, rel),
            Some(examples.join("next.yaml"))
        );
        // Only in a directory above a shared (group- or world-writable) one: not taken.
        std::fs::remove_file(examples.join("next.yaml")).unwrap();
        std::fs::create_dir_all(root.path().join("examples")).unwrap();
        std::fs::write(root.path().join("examples/next.yaml"), "name: planted\n").unwrap();
        set_mode(&project, 0o777);
        assert_eq!(from_project_root(&examples, rel), None);
        // Through the user's own directories it is found again.
        set_mode(&project, 0o755);
        assert_eq!(
            from_project_root(&examples, rel),
            Some(root.path().join("examples/next.yaml"))
        );
        assert_eq!(
            from_project_root(&examples, Path::new("examples/none.yaml")),
            None
        );
    }
}
