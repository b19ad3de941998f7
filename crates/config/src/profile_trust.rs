//! Whose instrument profiles are read (docs/security.md, "Files").
//!
//! A profile names a program Mozart runs as the user who reads it: `mozart instruments
//! check` runs its `--version`, a job plays it. So a profile, and the directories it is
//! found through, must be the user's own (or root's), and not writable by every other user:
//! a `./.mozart/instruments/` another local user made in a shared directory — or one a
//! cloned repository carries, made by whoever unpacked it — would otherwise run their
//! program as you (as root, for root). The Mozart home's profiles get the same rule.

use std::fs::Metadata;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A profile file that is not read.
#[derive(Debug, Error)]
pub enum ProfileFileError {
    /// It could not be read.
    #[error("cannot read instrument profile {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// It is another user's, or others may write it (or it is no regular file).
    #[error("instrument profile {} is not loaded: {why}", path.display())]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Who owns it or may write it, and what to do.
        why: String,
    },
}

fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn trusted(uid: u32) -> bool {
    uid == me() || uid == 0
}

/// `mozart-intruder (uid 1001)`, or `uid 1001` for an account without a name.
fn user(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("{} (uid {uid})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// The owners accepted: `you (root, uid 0)`, `you (alice, uid 1000) or root`.
fn accepted() -> String {
    let me = me();
    let you = match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(me)) {
        Ok(Some(u)) => format!("you ({}, uid {me})", u.name),
        _ => format!("you (uid {me})"),
    };
    if me == 0 {
        you
    } else {
        format!("{you} or root")
    }
}

/// Why `path` (whose metadata, links followed, is `meta`) is not to be trusted.
fn distrust(path: &Path, meta: &Metadata) -> Option<String> {
    if !trusted(meta.uid()) {
        return Some(format!(
            "{} belongs to {}, not to {}",
            path.display(),
            user(meta.uid()),
            accepted()
        ));
    }
    let mode = meta.mode();
    // A sticky directory (like /tmp): others may add entries, which are theirs and so
    // refused one by one, but not replace ours.
    if mode & 0o002 != 0 && !(meta.is_dir() && mode & 0o1000 != 0) {
        return Some(format!(
            "every other user may write {} (mode {:o})",
            path.display(),
            mode & 0o7777
        ));
    }
    None
}

/// A symbolic link another user made (the link itself, not what it names).
fn foreign_link(path: &Path) -> Option<String> {
    let link = std::fs::symlink_metadata(path).ok()?;
    (link.file_type().is_symlink() && !trusted(link.uid())).then(|| {
        format!(
            "{} is a symbolic link of {}, not of {}",
            path.display(),
            user(link.uid()),
            accepted()
        )
    })
}

/// `path` made absolute against the current directory, without resolving links (whose
/// link it is matters).
fn absolute(path: &Path) -> PathBuf {
    crate::paths::against_cwd(path)
}

/// Why the instrument profiles in `dir` must not be read: it, the directory holding it, or
/// — for a `.mozart/instruments` — the project directory above that, belongs to another
/// user (not you, not root), is another user's symbolic link, or every other user may
/// write it (a sticky directory excepted). `None` when they may be read, or `dir` is not
/// there (nothing to read).
pub fn untrusted_profile_dir(dir: &Path) -> Option<String> {
    let dir = absolute(dir);
    std::fs::symlink_metadata(&dir).ok()?;
    let mut chain = vec![dir.clone()];
    if let Some(parent) = dir.parent() {
        chain.push(parent.to_path_buf());
        if parent.file_name().is_some_and(|n| n == ".mozart") {
            if let Some(project) = parent.parent() {
                chain.push(project.to_path_buf());
            }
        }
    }
    chain.iter().find_map(|p| {
        foreign_link(p).or_else(|| {
            let meta = std::fs::metadata(p).ok()?;
            distrust(p, &meta)
        })
    })
}

/// Read one profile file if it is the user's (or root's) and not writable by every other
/// user: a symbolic link of another user's is refused, and the file opened is checked
/// itself (`fstat`), so that what is read is what was checked. Opened non-blocking: a FIFO
/// put in its place is refused, not waited on.
pub fn read_profile_file(path: &Path) -> Result<String, ProfileFileError> {
    use std::io::Read;
    let read = |source| ProfileFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let untrusted = |why| ProfileFileError::Untrusted {
        path: path.to_path_buf(),
        why,
    };
    if let Some(why) = foreign_link(path) {
        return Err(untrusted(why));
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(read)?;
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(untrusted(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if let Some(why) = distrust(path, &meta) {
        return Err(untrusted(why));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(read)?;
    Ok(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn own_directories_and_files_are_read() {
        let project = tempfile::tempdir().unwrap();
        let dir = project.path().join(".mozart/instruments");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), "name: a\n").unwrap();
        assert_eq!(untrusted_profile_dir(&dir), None);
        assert_eq!(read_profile_file(&dir.join("a.yaml")).unwrap(), "name: a\n");
        assert_eq!(untrusted_profile_dir(&project.path().join("missing")), None);
    }

    #[test]
    fn world_writable_ones_are_not() {
        let project = tempfile::tempdir().unwrap();
        let dir = project.path().join(".mozart/instruments");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.yaml");
        std::fs::write(&file, "name: a\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = read_profile_file(&file).unwrap_err().to_string();
        assert!(
            err.contains("every other user may write") && err.contains("a.yaml"),
            "{err}"
        );
        std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = untrusted_profile_dir(&dir).unwrap();
        assert!(why.contains("mode 777"), "{why}");
        // Sticky, like /tmp: others' entries are refused one by one.
        std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(untrusted_profile_dir(&dir), None);
    }

    #[test]
    fn a_fifo_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("a.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_profile_file(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
