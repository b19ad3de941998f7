//! Starting a conductor in the background: launching it detached with its output appended to
//! its log, waiting until it answers `daemon.ready`, and, when it exits during start-up,
//! reading why from the log (issue 26: start-up is client logic, not a CLI command's).
//!
//! The caller says which program to run and with which arguments (the CLI re-runs itself as
//! `mozart start --detached-child`); this module owns the log, the wait and the error.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use mozart_ipc::types::ReadyResult;
use mozart_ipc::{methods, BlockingClient};

/// How long a background start waits for the conductor to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Set beside `MALLOC_ARENA_MAX` when Mozart (or its systemd unit) chose it, so the conductor
/// can keep the setting out of the instruments' environment.
pub const ARENA_MARKER: &str = "MOZART_MALLOC_ARENA_MAX_SET";

/// How often a start-up wait looks again.
pub const POLL: Duration = Duration::from_millis(50);

/// What to launch: the conductor's program and arguments, its log and its socket.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The program (the `mozart` executable).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The log its stdout and stderr are appended to (created 0600 in a 0700 directory: it
    /// holds prompts and instrument output).
    pub log: PathBuf,
    /// The socket it will listen on.
    pub socket: PathBuf,
}

/// A conductor that started and answers `daemon.ready` as ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Its process ID.
    pub pid: u32,
    /// Why it runs but does not accept work (e.g. the disk is full), when it does not.
    pub not_accepting: Option<String>,
}

/// Why a background start did not give a ready conductor.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The log's directory cannot be created.
    #[error("cannot create log directory {}: {source}", dir.display())]
    LogDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The log cannot be opened for appending.
    #[error("cannot open log file {}: {source}", log.display())]
    LogFile {
        /// The log.
        log: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The program could not be run.
    #[error("cannot start the conductor: {0}")]
    Spawn(std::io::Error),
    /// The conductor exited before it was ready; `reported` is the error it printed to the
    /// log, when it printed one.
    #[error("The conductor exited during startup ({status}).")]
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// Its own `Error:` message and hints, read from the log.
        reported: Option<(String, Vec<String>)>,
        /// The log.
        log: PathBuf,
    },
    /// The conductor runs but did not become ready in time.
    #[error("The conductor (PID {pid}) did not become ready within {} seconds.", READY_TIMEOUT.as_secs())]
    NotReady {
        /// Its process ID.
        pid: u32,
        /// The log.
        log: PathBuf,
    },
}

/// Launch the conductor detached (stdin closed, stdout and stderr appended to the log) and
/// wait up to [`READY_TIMEOUT`] until it is ready. The child inherits the caller's other
/// descriptors unless they are close-on-exec: a caller that may hold some (a CI runner's
/// pipe) marks them so first, or whoever waits for that pipe's end waits for the daemon's.
pub fn start_detached(launch: &Launch) -> Result<Started, StartError> {
    open_log_dir(&launch.log)?;
    let mut command = Command::new(&launch.program);
    command.args(&launch.args);
    // glibc gives every thread that allocates its own heap arena; a conductor's threads
    // hand data to each other, so memory freed in one arena stays resident while another
    // grows. One arena keeps a long-running conductor smaller (docs/performance.md); the
    // child also tunes its allocator, this covers glibc's start-up before it does.
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        command.env("MALLOC_ARENA_MAX", "1");
        command.env(ARENA_MARKER, "1");
    }
    command
        .stdin(Stdio::null())
        .stdout(open_log(&launch.log)?)
        .stderr(open_log(&launch.log)?);
    // Where this start's lines begin in the (appended) log: a child that fails prints its
    // error there, and that is what the user must see.
    let log_start = std::fs::metadata(&launch.log).map_or(0, |m| m.len());
    let mut child = command.spawn().map_err(StartError::Spawn)?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(StartError::Exited {
                status,
                reported: startup_error(&launch.log, log_start),
                log: launch.log.clone(),
            });
        }
        match probe_ready(&launch.socket) {
            Some(r) if r.is_ready() => {
                return Ok(Started {
                    pid: child.id(),
                    not_accepting: None,
                })
            }
            // Started, but refusing work for a reason that waiting does not cure (the disk
            // is full): said at once, not after the whole wait as "not ready".
            Some(r)
                if !r.shutting_down
                    && r.reason.as_deref() != Some(mozart_ipc::types::ReadyResult::STARTING_UP) =>
            {
                return Ok(Started {
                    pid: child.id(),
                    not_accepting: r.reason,
                })
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(StartError::NotReady {
                pid: child.id(),
                log: launch.log.clone(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// One `daemon.ready` call: `None` when nothing answers.
pub fn probe_ready(socket: &Path) -> Option<ReadyResult> {
    let mut client = BlockingClient::connect(socket).ok()?;
    client.call(methods::DAEMON_READY, ()).ok()
}

/// The log's directory, created private (0700) when missing.
fn open_log_dir(log: &Path) -> Result<(), StartError> {
    let Some(dir) = log.parent() else {
        return Ok(());
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| StartError::LogDir {
            dir: dir.to_path_buf(),
            source,
        })
}

/// The log opened for appending, created 0600.
fn open_log(log: &Path) -> Result<std::fs::File, StartError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(|source| StartError::LogFile {
            log: log.to_path_buf(),
            source,
        })
}

/// The error a failed detached conductor printed to the log after `from` (its last
/// `Error: <message>` line and the `  - <hint>` lines under it, as the CLI prints an error),
/// so a start says why instead of only that the conductor exited.
pub fn startup_error(log: &Path, from: u64) -> Option<(String, Vec<String>)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(log).ok()?;
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut text = String::new();
    // Bounded: a startup writes a few lines; a huge tail is not worth reading.
    file.take(1 << 20).read_to_string(&mut text).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().rposition(|l| l.starts_with("Error: "))?;
    let message = lines[at].trim_start_matches("Error: ").to_string();
    let hints = lines[at + 1..]
        .iter()
        .filter_map(|l| l.strip_prefix("  - "))
        .map(str::to_string)
        .collect();
    Some((message, hints))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_start_up_error_is_the_last_one_after_the_offset_with_its_hints() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("mozart.log");
        let old = "Error: an earlier start\n  - old hint\n";
        std::fs::write(
            &log,
            format!("{old}starting\nError: socket in use\n\nHints:\n  - Stop it: mozart stop\n  - Or use --socket\n"),
        )
        .unwrap();
        let (message, hints) = startup_error(&log, old.len() as u64).unwrap();
        assert_eq!(message, "socket in use");
        assert_eq!(hints, vec!["Stop it: mozart stop", "Or use --socket"]);
        // Nothing printed after the offset: no error of this start.
        let end = std::fs::metadata(&log).unwrap().len();
        assert_eq!(startup_error(&log, end), None);
    }

    #[test]
    fn a_program_that_exits_at_once_is_reported_with_its_logged_error() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/conductor.log");
        let launch = Launch {
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "echo 'Error: cannot bind'; echo '  - free the socket'; exit 3".into(),
            ],
            log: log.clone(),
            socket: dir.path().join("nobody.sock"),
        };
        match start_detached(&launch) {
            Err(StartError::Exited {
                status, reported, ..
            }) => {
                assert_eq!(status.code(), Some(3));
                assert_eq!(
                    reported,
                    Some((
                        "cannot bind".to_string(),
                        vec!["free the socket".to_string()]
                    ))
                );
            }
            other => panic!("expected an exit during start-up, got {other:?}"),
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&log), 0o600);
        assert_eq!(mode(log.parent().unwrap()), 0o700);
    }
}
