//! Opening a workspace log to show it (`mozart logs --sheet`, `diagnose --include-logs`,
//! the MCP server, the conductor's live output stream): docs/security.md, "Files".
//!
//! A workspace may be writable by others (a shared `/tmp` directory), and what an instrument
//! runs can write it too. Whoever can write it can put a `logs` link to a directory of their
//! own (a fake "all tests passed" shown as the sheet's output), a `hooks/leak.log` link to a
//! file only you can read (inlined into a report made for sharing), or a FIFO in place of a
//! log (every reader hangs). So a log is shown only when every directory from the one above
//! its `logs` (or `hooks`) down to the file is no symbolic link and is yours (or root's),
//! and the file itself — opened without following a link and without waiting — is a regular
//! file of yours (or root's), checked on the open file. Otherwise the error says which part
//! is not and why.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

/// Why a workspace log is not shown.
#[derive(Debug, thiserror::Error)]
pub enum ShownLogError {
    /// It could not be opened (missing, permissions).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The log.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Something in its place is not what Mozart (or a hook of yours) writes.
    #[error("{} is not shown: {why} — Mozart writes logs only as files of yours in directories of yours that are no symbolic links; whoever can write the workspace may have put this one there", path.display())]
    Refused {
        /// The log.
        path: PathBuf,
        /// Which part is not trusted, and whose it is.
        why: String,
    },
}

impl ShownLogError {
    /// The log is not there (nothing to show, and nothing to warn about).
    pub fn is_missing(&self) -> bool {
        matches!(self, ShownLogError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn trusted(uid: u32) -> bool {
    uid == mozart_ipc::trust::current_uid() || uid == 0
}

/// Who owns what is at `path` (not following a link), for a message.
fn owner_of(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .map(|m| mozart_ipc::trust::describe_user(m.uid()))
        .unwrap_or_else(|_| "another user".to_string())
}

/// The directory a log's checks start from: the one above its nearest `logs` or `hooks`
/// ancestor (the workspace), else the file's own directory.
fn base_of(path: &Path) -> (PathBuf, Vec<&OsStr>) {
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let parent = |p: &Path| {
        p.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    // Below the file's own name: the nearest `logs`/`hooks`.
    let at = names
        .iter()
        .take(names.len().saturating_sub(1))
        .rposition(|n| *n == "logs" || *n == "hooks");
    match at {
        Some(i) => {
            let mut base = path.to_path_buf();
            for _ in i..names.len() {
                base = parent(&base);
            }
            (base, names[i..].to_vec())
        }
        None => (parent(path), names.last().copied().into_iter().collect()),
    }
}

/// Open the log at `path` to show it, if it may be (see the module's doc). Opened
/// non-blocking: a FIFO is refused, not waited on.
pub fn open_shown_log(path: &Path) -> Result<File, ShownLogError> {
    let read = |source: std::io::Error| ShownLogError::Read {
        path: path.to_path_buf(),
        source,
    };
    let refused = |why: String| ShownLogError::Refused {
        path: path.to_path_buf(),
        why,
    };
    let (base, names) = base_of(path);
    let Some((file_name, dirs)) = names.split_last() else {
        return Err(read(std::io::Error::from(std::io::ErrorKind::NotFound)));
    };
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let mut dir: OwnedFd = nix::fcntl::open(&base, flags | OFlag::O_DIRECTORY, Mode::empty())
        .map_err(|e| read(e.into()))?;
    let mut at = base.clone();
    for name in dirs {
        at.push(name);
        let next = match openat(
            &dir,
            *name,
            flags | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(refused(format!(
                    "{} is a symbolic link (or no directory) of {}",
                    at.display(),
                    owner_of(&at)
                )))
            }
            Err(e) => return Err(read(e.into())),
        };
        let st = fstat(&next).map_err(|e| read(e.into()))?;
        if !trusted(st.st_uid) {
            return Err(refused(format!(
                "{} belongs to {}, not to {}",
                at.display(),
                mozart_ipc::trust::describe_user(st.st_uid),
                mozart_ipc::trust::describe_you(mozart_ipc::trust::current_uid())
            )));
        }
        dir = next;
    }
    let fd = match openat(
        &dir,
        *file_name,
        flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ELOOP) => {
            return Err(refused(format!(
                "it is a symbolic link of {}",
                owner_of(path)
            )))
        }
        Err(e) => return Err(read(e.into())),
    };
    let st = fstat(&fd).map_err(|e| read(e.into()))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(refused(
            "it is not a regular file (a FIFO or a device would never end)".to_string(),
        ));
    }
    if !trusted(st.st_uid) {
        return Err(refused(format!(
            "it belongs to {}, not to {}",
            mozart_ipc::trust::describe_user(st.st_uid),
            mozart_ipc::trust::describe_you(mozart_ipc::trust::current_uid())
        )));
    }
    Ok(File::from(fd))
}

/// The whole of a log [`open_shown_log`] opens.
pub fn read_shown_log(path: &Path) -> Result<Vec<u8>, ShownLogError> {
    use std::io::Read;
    let mut file = open_shown_log(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| ShownLogError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_log_of_ours_is_read() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("logs/job")).unwrap();
        let log = ws.path().join("logs/job/sheet-01.stdout.log");
        std::fs::write(&log, "real\n").unwrap();
        assert_eq!(read_shown_log(&log).unwrap(), b"real\n");
        assert!(read_shown_log(&ws.path().join("logs/none.log"))
            .unwrap_err()
            .is_missing());
    }

    #[test]
    fn links_and_fifos_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("fake")).unwrap();
        std::fs::write(ws.path().join("fake/sheet-01.stdout.log"), "FAKE\n").unwrap();
        std::os::unix::fs::symlink("fake", ws.path().join("logs")).unwrap();
        let err = read_shown_log(&ws.path().join("logs/sheet-01.stdout.log"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is not shown") && err.contains("symbolic link"),
            "{err}"
        );
        std::fs::create_dir_all(ws.path().join("hooks")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", ws.path().join("hooks/leak.log")).unwrap();
        let err = read_shown_log(&ws.path().join("hooks/leak.log"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("symbolic link"), "{err}");
        let fifo = ws.path().join("hooks/fifo.log");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_shown_log(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
