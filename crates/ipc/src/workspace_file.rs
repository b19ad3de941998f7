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
}
