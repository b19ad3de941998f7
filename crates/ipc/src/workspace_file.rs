//! Reading a file of a workspace that another local user, or the instrument, may have put
//! there (docs/security.md "Files"): only a regular file is opened, and never in a way that
//! waits — a FIFO would block the reader until someone writes to it (a validation, a
//! `.iteration` read hung the conductor), and a device (a link to `/dev/...`) is not opened
//! at all (opening some has effects).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A workspace file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// There is something at the path, but not a regular file.
    #[error("{} is not a regular file ({kind})", path.display())]
    NotRegular {
        /// The path read.
        path: PathBuf,
        /// What is there instead: `a FIFO`, `a directory`, …
        kind: &'static str,
    },
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path read.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl ReadError {
    /// Nothing is at the path.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn kind_of(mode: u32) -> &'static str {
    match mode & libc_ifmt() {
        m if m == nix::sys::stat::SFlag::S_IFIFO.bits() => "a FIFO",
        m if m == nix::sys::stat::SFlag::S_IFDIR.bits() => "a directory",
        m if m == nix::sys::stat::SFlag::S_IFSOCK.bits() => "a socket",
        m if m == nix::sys::stat::SFlag::S_IFCHR.bits() => "a character device",
        m if m == nix::sys::stat::SFlag::S_IFBLK.bits() => "a block device",
        _ => "not a file",
    }
}

fn libc_ifmt() -> u32 {
    nix::sys::stat::SFlag::S_IFMT.bits()
}

/// Open `path` (links followed, as a user's own workspace may hold them) for reading,
/// only when it is a regular file: what is there is looked at through a handle that opens
/// nothing (`O_PATH`), and only a regular file is then opened, through that same handle —
/// swapping the path meanwhile changes nothing — and without waiting (`O_NONBLOCK`).
pub fn open_regular(path: &Path) -> Result<File, ReadError> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, Mode};
    let io_err = |e: nix::errno::Errno| ReadError::Io {
        path: path.to_path_buf(),
        source: io::Error::from_raw_os_error(e as i32),
    };
    let handle = open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).map_err(io_err)?;
    let st = fstat(&handle).map_err(io_err)?;
    if st.st_mode & libc_ifmt() != nix::sys::stat::SFlag::S_IFREG.bits() {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(st.st_mode),
        });
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = match open(
        format!("/proc/self/fd/{}", handle.as_raw_fd()).as_str(),
        flags,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // No /proc: the path again, not through a link, and it must be what was looked at.
        Err(nix::errno::Errno::ENOENT) => {
            let fd = open(path, flags | OFlag::O_NOFOLLOW, Mode::empty()).map_err(io_err)?;
            let again = fstat(&fd).map_err(io_err)?;
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
                return Err(ReadError::Io {
                    path: path.to_path_buf(),
                    source: io::Error::other("it was replaced while it was read"),
                });
            }
            fd
        }
        Err(e) => return Err(io_err(e)),
    };
    Ok(File::from(fd))
}

/// The bytes of the regular file `path` ([`open_regular`]).
pub fn read_regular(path: &Path) -> Result<Vec<u8>, ReadError> {
    let mut file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(bytes)
}

/// A file that could not be written in a directory ([`TrustedDir`]).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Another user can replace what is written there.
    #[error("{} {reason}: a file written there could be replaced before it is read (use a directory of yours)", path.display())]
    Untrusted {
        /// The directory.
        path: PathBuf,
        /// Whose it is, or who else may write it.
        reason: String,
    },
    /// A symbolic link is at the file's path.
    #[error("{} is a symbolic link: it is not written through (remove it, or use another directory)", path.display())]
    Link {
        /// The file's path.
        path: PathBuf,
    },
    /// Something other than a regular file of yours is at the file's path.
    #[error("{} is {what}: it is not written (remove it, or use another directory)", path.display())]
    NotYours {
        /// The file's path.
        path: PathBuf,
        /// What is there: `not a regular file (a FIFO)`, `another user's file (…)`.
        what: String,
    },
    /// The file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// A directory opened once it was found to be one only you (or root) can change: yours or
/// root's, and writable by no one else unless sticky (like `/tmp`, where nobody can remove or
/// rename another user's file). Files are read and written relative to it, never through a
/// link.
#[derive(Debug)]
pub struct TrustedDir {
    fd: std::os::fd::OwnedFd,
    path: PathBuf,
}

impl TrustedDir {
    /// Open `dir` (links in its path followed: the directory the user named) and check it.
    pub fn open(dir: &Path) -> Result<TrustedDir, WriteError> {
        use nix::fcntl::{open, OFlag};
        use nix::sys::stat::Mode;
        let io_err = |e: nix::errno::Errno| WriteError::Io {
            path: dir.to_path_buf(),
            source: io::Error::from_raw_os_error(e as i32),
        };
        let fd = open(
            dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        Self::checked(fd, dir.to_path_buf())
    }

    /// Open the directory `name` in `parent` (links in `parent`'s path followed: the
    /// directory the user named), creating it (mode 0755) when `create` and it is missing;
    /// `name` itself is never followed when it is a link, and it is checked as
    /// [`TrustedDir::open`] checks.
    pub fn open_in(parent: &Path, name: &str, create: bool) -> Result<TrustedDir, WriteError> {
        use nix::fcntl::{open, OFlag};
        let fd = open(
            parent,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| WriteError::Io {
            path: parent.to_path_buf(),
            source: io::Error::from_raw_os_error(e as i32),
        })?;
        Self::dir_at(&fd, parent, name, create)
    }

    /// The directory `name` in this one, as [`TrustedDir::open_in`] opens it.
    pub fn subdir(&self, name: &str, create: bool) -> Result<TrustedDir, WriteError> {
        Self::dir_at(&self.fd, &self.path, name, create)
    }

    /// The directory's path as it was named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path that reaches this very directory (through `/proc/self/fd`), for code that
    /// takes paths: what is created or renamed under it lands in the checked directory even
    /// when its named path is swapped meanwhile.
    pub fn handle_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// The names in the directory.
    pub fn names(&self) -> Result<Vec<String>, WriteError> {
        let entries = std::fs::read_dir(self.handle_path()).map_err(|source| WriteError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect())
    }

    fn dir_at(
        parent: &std::os::fd::OwnedFd,
        parent_path: &Path,
        name: &str,
        create: bool,
    ) -> Result<TrustedDir, WriteError> {
        use nix::fcntl::{openat, OFlag};
        use nix::sys::stat::Mode;
        let path = parent_path.join(name);
        let io_err = |e: nix::errno::Errno| WriteError::Io {
            path: path.clone(),
            source: io::Error::from_raw_os_error(e as i32),
        };
        if create {
            match nix::sys::stat::mkdirat(parent, name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => return Err(io_err(e)),
            }
        }
        let fd = match openat(
            parent,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ELOOP) => return Err(WriteError::Link { path }),
            Err(nix::errno::Errno::ENOTDIR) => {
                let link =
                    std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
                return Err(if link {
                    WriteError::Link { path }
                } else {
                    WriteError::NotYours {
                        path,
                        what: "not a directory".into(),
                    }
                });
            }
            Err(e) => return Err(io_err(e)),
        };
        Self::checked(fd, path)
    }

    fn checked(fd: std::os::fd::OwnedFd, dir: PathBuf) -> Result<TrustedDir, WriteError> {
        use nix::sys::stat::fstat;
        let st = fstat(&fd).map_err(|e| WriteError::Io {
            path: dir.clone(),
            source: io::Error::from_raw_os_error(e as i32),
        })?;
        let me = crate::trust::current_uid();
        let reason = if st.st_uid != me && st.st_uid != 0 {
            Some(format!(
                "belongs to {}",
                crate::trust::describe_user(st.st_uid)
            ))
        } else if crate::trust::sticky(st.st_mode) {
            None
        } else if st.st_mode & 0o002 != 0 {
            Some("can be written by every other user".to_string())
        } else if st.st_mode & 0o020 != 0 && st.st_gid != nix::unistd::getgid().as_raw() {
            // Writable by your own group (umask 002 with a group of your own, as Debian and
            // Ubuntu give each user: git's worktrees, `mkdir`) is yours; another group's
            // members could swap what is written.
            Some("can be written by its group, which is not yours".to_string())
        } else {
            None
        };
        match reason {
            Some(reason) => Err(WriteError::Untrusted { path: dir, reason }),
            None => Ok(TrustedDir { fd, path: dir }),
        }
    }

    /// Open `name` in the directory, not through a link and without waiting, and check that
    /// it is a regular file of yours (or root's).
    fn open_own(&self, name: &str, flags: nix::fcntl::OFlag) -> Result<Option<File>, WriteError> {
        use nix::fcntl::{openat, OFlag};
        use nix::sys::stat::{fstat, Mode};
        let path = self.path.join(name);
        let io_err = |e: nix::errno::Errno| WriteError::Io {
            path: path.clone(),
            source: io::Error::from_raw_os_error(e as i32),
        };
        let fd = match openat(
            &self.fd,
            name,
            flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => return Ok(None),
            Err(nix::errno::Errno::ELOOP) => return Err(WriteError::Link { path }),
            Err(e) => return Err(io_err(e)),
        };
        let st = fstat(&fd).map_err(io_err)?;
        if st.st_mode & libc_ifmt() != nix::sys::stat::SFlag::S_IFREG.bits() {
            return Err(WriteError::NotYours {
                what: format!("not a regular file ({})", kind_of(st.st_mode)),
                path,
            });
        }
        let me = crate::trust::current_uid();
        if st.st_uid != me && st.st_uid != 0 {
            return Err(WriteError::NotYours {
                what: format!("a file of {}", crate::trust::describe_user(st.st_uid)),
                path,
            });
        }
        Ok(Some(File::from(fd)))
    }

    /// What the file `name` holds (`None`: there is none); refused for a link or anything
    /// but a regular file of yours.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, WriteError> {
        let Some(mut file) = self.open_own(name, nix::fcntl::OFlag::O_RDONLY)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|source| WriteError::Io {
                path: self.path.join(name),
                source,
            })?;
        Ok(Some(bytes))
    }

    /// Write `bytes` as the file `name`: a new file (never through a link), or the regular
    /// file of yours already there, replaced.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, WriteError> {
        use nix::fcntl::{openat, OFlag};
        use std::io::Write;
        let path = self.path.join(name);
        let created = openat(
            &self.fd,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
        );
        let mut file = match created {
            Ok(fd) => File::from(fd),
            Err(nix::errno::Errno::EEXIST) => {
                self.open_own(name, OFlag::O_WRONLY)?
                    .ok_or_else(|| WriteError::Io {
                        path: path.clone(),
                        source: io::Error::other("it was removed while it was written"),
                    })?
            }
            Err(nix::errno::Errno::ELOOP) => return Err(WriteError::Link { path }),
            Err(e) => {
                return Err(WriteError::Io {
                    path,
                    source: io::Error::from_raw_os_error(e as i32),
                })
            }
        };
        let io_err = |source| WriteError::Io {
            path: path.clone(),
            source,
        };
        file.set_len(0).map_err(io_err)?;
        file.write_all(bytes).map_err(io_err)?;
        Ok(path)
    }

    /// Remove the file `name` (not what a link there points to).
    pub fn remove(&self, name: &str) -> Result<(), WriteError> {
        nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir).map_err(
            |e| WriteError::Io {
                path: self.path.join(name),
                source: io::Error::from_raw_os_error(e as i32),
            },
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "text").unwrap();
        assert_eq!(read_regular(&file).unwrap(), b"text");
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link).unwrap(), b"text", "a link is followed");
        let fifo = dir.path().join("fifo.txt");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_regular(&fifo).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{} is not a regular file (a FIFO)", fifo.display())
        );
        let err = read_regular(dir.path()).unwrap_err();
        assert!(err
            .to_string()
            .ends_with("is not a regular file (a directory)"));
        assert!(read_regular(&dir.path().join("none"))
            .unwrap_err()
            .is_not_found());
        assert!(read_regular(Path::new("/dev/null"))
            .unwrap_err()
            .to_string()
            .ends_with("(a character device)"));
    }

    #[test]
    fn a_trusted_directory_is_written_only_in_files_of_yours_never_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let trusted = TrustedDir::open(dir.path()).unwrap();
        assert_eq!(trusted.read("a.yaml").unwrap(), None);
        trusted.write("a.yaml", b"one").unwrap();
        assert_eq!(trusted.read("a.yaml").unwrap().unwrap(), b"one");
        trusted.write("a.yaml", b"t").unwrap();
        assert_eq!(std::fs::read(dir.path().join("a.yaml")).unwrap(), b"t");
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("l.yaml")).unwrap();
        let err = trusted.write("l.yaml", b"x").unwrap_err();
        assert!(
            err.to_string().contains("l.yaml is a symbolic link"),
            "{err}"
        );
        assert!(trusted.read("l.yaml").is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        nix::unistd::mkfifo(
            &dir.path().join("f.yaml"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let err = trusted.read("f.yaml").unwrap_err();
        assert!(
            err.to_string().contains("not a regular file (a FIFO)"),
            "{err}"
        );
        trusted.remove("a.yaml").unwrap();
        assert!(!dir.path().join("a.yaml").exists());
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = TrustedDir::open(dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("can be written by every other user"),
            "{err}"
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(
            TrustedDir::open(dir.path()).is_ok(),
            "a sticky directory is trusted"
        );
        // Writable by your own group (umask 002): yours; by another group: not.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(
            TrustedDir::open(dir.path()).is_ok(),
            "a directory your own group can write is trusted"
        );
        let other = if nix::unistd::getgid().as_raw() == 65534 {
            0
        } else {
            65534
        };
        if nix::unistd::chown(dir.path(), None, Some(nix::unistd::Gid::from_raw(other))).is_ok() {
            let err = TrustedDir::open(dir.path()).unwrap_err();
            assert!(
                err.to_string()
                    .contains("can be written by its group, which is not yours"),
                "{err}"
            );
        }
    }
}
