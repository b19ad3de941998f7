//! Single-instance guard: an exclusive `flock` on the lock file, held for the conductor's
//! lifetime (not a PID guess), plus the informational PID file.

use std::fs::{File, OpenOptions};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::{ConductorError, ConductorPaths};

/// The held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct InstanceLock {
    _lock: Flock<File>,
}

/// Whether a conductor holds the lock, as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// The lock is held; the PID file's content if readable.
    Running {
        /// PID from the PID file.
        pid: Option<u32>,
    },
    /// Nobody holds the lock; a leftover PID file's content, if any (stale).
    Stopped {
        /// PID from a stale PID file.
        stale_pid: Option<u32>,
    },
}

/// Read a PID file (decimal, surrounding whitespace ignored).
pub fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Take the instance lock, retrying briefly so a concurrent status probe cannot make a
/// legitimate start fail.
pub fn acquire(paths: &ConductorPaths) -> Result<InstanceLock, ConductorError> {
    if let Some(dir) = paths.lock_file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| ConductorError::io("cannot create directory", dir, e))?;
    }
    let mut attempts = 0;
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&paths.lock_file)
            .map_err(|e| ConductorError::io("cannot open lock file", &paths.lock_file, e))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(InstanceLock { _lock: lock }),
            Err((_, Errno::EWOULDBLOCK)) if attempts < 5 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(ConductorError::AlreadyRunning {
                    who: paths.who().to_string(),
                    pid: read_pid(&paths.pid_file)
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "unknown".into()),
                })
            }
            Err((_, errno)) => {
                return Err(ConductorError::io(
                    "cannot lock",
                    &paths.lock_file,
                    std::io::Error::from(errno),
                ))
            }
        }
    }
}

/// Probe without disturbing a running conductor: is the lock held?
pub fn probe(paths: &ConductorPaths) -> RunState {
    let pid = read_pid(&paths.pid_file);
    let Ok(file) = File::open(&paths.lock_file) else {
        return RunState::Stopped { stale_pid: pid };
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(lock) => {
            drop(lock);
            RunState::Stopped { stale_pid: pid }
        }
        Err((_, Errno::EWOULDBLOCK)) => RunState::Running { pid },
        Err(_) => RunState::Stopped { stale_pid: pid },
    }
}

/// Write our PID (temp file + rename, refusing a symlinked target).
pub fn write_pid_file(path: &Path, pid: u32) -> Result<(), ConductorError> {
    if path.is_symlink() {
        return Err(ConductorError::Symlink {
            what: "PID file",
            path: path.to_path_buf(),
        });
    }
    let tmp = path.with_extension("pid.tmp");
    std::fs::write(&tmp, pid.to_string())
        .map_err(|e| ConductorError::io("cannot write PID file", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ConductorError::io("cannot write PID file", path, e))
}

/// Record the socket the conductor listens on (temp file + rename, refusing a symlinked
/// target), for clients whose configuration names another one since.
pub fn write_socket_record(path: &Path, socket: &Path) -> Result<(), ConductorError> {
    use std::os::unix::ffi::OsStrExt;
    if path.is_symlink() {
        return Err(ConductorError::Symlink {
            what: "socket record",
            path: path.to_path_buf(),
        });
    }
    let tmp = path.with_extension("socket.tmp");
    // Private like everything in the Mozart home (0600).
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(socket.as_os_str().as_bytes())
    };
    write().map_err(|e| ConductorError::io("cannot write socket record", &tmp, e))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| ConductorError::io("cannot write socket record", path, e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_admits_one_holder_and_probes_see_it() {
        let dir = tempfile::tempdir().unwrap();
        let paths = ConductorPaths::resolve(dir.path(), Some(&dir.path().join("s")), None, None);
        assert_eq!(probe(&paths), RunState::Stopped { stale_pid: None });
        let lock = acquire(&paths).unwrap();
        write_pid_file(&paths.pid_file, 4242).unwrap();
        assert_eq!(probe(&paths), RunState::Running { pid: Some(4242) });
        let err = acquire(&paths).unwrap_err().to_string();
        assert_eq!(err, "Mozart conductor is already running (PID 4242)");
        drop(lock);
        assert_eq!(
            probe(&paths),
            RunState::Stopped {
                stale_pid: Some(4242)
            }
        );
    }
}

/// Which signal [`signal_conductor`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// Graceful shutdown.
    Term,
    /// Immediate kill (`mozart stop --force`).
    Kill,
}

/// Send a stop signal to the conductor's PID.
pub fn signal_conductor(pid: u32, signal: StopSignal) -> Result<(), ConductorError> {
    let sig = match signal {
        StopSignal::Term => nix::sys::signal::Signal::SIGTERM,
        StopSignal::Kill => nix::sys::signal::Signal::SIGKILL,
    };
    let raw = i32::try_from(pid).map_err(|_| {
        ConductorError::io(
            "invalid PID in",
            "PID file",
            std::io::Error::other(format!("{pid} out of range")),
        )
    })?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), sig).map_err(|errno| {
        ConductorError::io(
            "cannot signal conductor",
            format!("PID {pid}"),
            errno.into(),
        )
    })
}

/// Whether `pid` holds a lock on `lock_file` (`/proc/locks`: the lock's holder and the file's
/// inode), so that a stop signals the conductor and nothing else: a PID file can name a
/// process that is not it (`echo 1 > conductor.pid`, a PID reused after a reboot), and
/// signalling that — init, with `--force` as root — is never right (architecture
/// invariant 5). `None` when the kernel does not say (no `/proc/locks`).
pub fn pid_holds_lock(pid: u32, lock_file: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(lock_file).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = pid.to_string();
    Some(locks.lines().any(|line| {
        // `1: FLOCK  ADVISORY  WRITE 2815 fe:00:5358587 0 EOF`; waiters have a `->` after
        // the id and do not hold the lock.
        let mut fields = line.split_whitespace();
        let (Some(_), Some(kind)) = (fields.next(), fields.next()) else {
            return false;
        };
        if kind == "->" {
            return false;
        }
        let rest: Vec<&str> = fields.collect();
        rest.get(2) == Some(&pid.as_str())
            && rest
                .get(3)
                .and_then(|dev_ino| dev_ino.rsplit(':').next())
                .and_then(|i| i.parse::<u64>().ok())
                == Some(inode)
    }))
}

/// True if a process with this PID exists (EPERM counts as alive, as upstream).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(errno) => errno == Errno::EPERM,
    }
}

/// Start a new session so a background conductor outlives the terminal that started it.
pub fn detach_session() -> Result<(), ConductorError> {
    nix::unistd::setsid().map(|_| ()).map_err(|errno| {
        ConductorError::io(
            "cannot start a new session for",
            "the conductor",
            errno.into(),
        )
    })
}

/// Mark every file descriptor above stderr close-on-exec, so what the conductor was started
/// with (a terminal's, a CI runner's or a supervisor's pipes) reaches no instrument and no
/// detached conductor: an instrument holding a stranger's pipe open keeps whoever waits for
/// that pipe's end waiting for as long as the instrument lives. Call it before any thread
/// exists and before the conductor opens its own files (those are close-on-exec already).
pub fn keep_inherited_fds_from_children() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: fcntl on a plain descriptor number touches no memory; a number that closed
        // since the listing (the listing's own) just fails with EBADF.
        #[allow(unsafe_code)]
        unsafe {
            let flags = nix::libc::fcntl(fd, nix::libc::F_GETFD);
            if flags >= 0 && flags & nix::libc::FD_CLOEXEC == 0 {
                nix::libc::fcntl(fd, nix::libc::F_SETFD, flags | nix::libc::FD_CLOEXEC);
            }
        }
    }
}

/// True if the process exists and has not exited: unlike [`pid_alive`], an exited but
/// unreaped (zombie) conductor counts as gone, since an orphaned conductor may never be
/// reaped by a minimal init.
pub fn pid_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => pid_alive(pid) && !std::path::Path::new("/proc/self").exists(),
    }
}
