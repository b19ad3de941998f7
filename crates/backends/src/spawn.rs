//! Starting an instrument process with `posix_spawn` directly, and waiting for it on a pidfd
//! (issue 24).
//!
//! Every attempt's process carries its own tag in its environment ([`crate::descendants`]).
//! `std::process::Command` can only add a variable by copying the whole environment into a
//! fresh map and building every `NAME=value` string again on every spawn — 67 k
//! instructions a sheet with a 43-variable environment, an eighth of the conductor's work on a
//! fan-out. Here the conductor's own environment is turned into C strings once, and a spawn
//! hands `posix_spawn` that list with the tag appended: pointers, no copies.
//!
//! The child is set up as std sets it up: its own process group (`POSIX_SPAWN_SETPGROUP`,
//! group 0), an empty signal mask, `SIGPIPE` back to its default (the Rust runtime ignores it
//! in the conductor, and an ignored signal survives `exec`), stdin from `/dev/null` or a pipe,
//! stdout and stderr to pipes, the working directory changed in the child before `exec`
//! (`posix_spawn_file_actions_addchdir_np`, glibc ≥ 2.29). Every descriptor of ours is
//! close-on-exec, so the child gets exactly 0, 1 and 2.
//!
//! The child is waited for by pid (never `waitpid(-1)`, see [`crate::subreaper`]) when its
//! pidfd turns readable; where the kernel has no pidfds (before Linux 5.3) by polling.
//! A [`Child`] dropped before its exit was collected hands the wait to a task, as tokio's
//! reaper does for its own children: no zombie is left.
//!
//! `nix` wraps neither `addchdir_np` nor pidfds, so this is one of the few modules with
//! `unsafe`: the calls to `posix_spawn*` and `pidfd_open`, each with the reason it is sound.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::LazyLock;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::libc;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use crate::descendants::ATTEMPT_VAR;
use crate::env::ChildEnv;

/// What to start.
pub(crate) struct Spawn<'a> {
    /// The executable, as `exec` takes it (a path; relative ones to `cwd`).
    pub program: &'a Path,
    /// `argv[0]`.
    pub arg0: &'a str,
    /// `argv[1..]`.
    pub args: &'a [String],
    /// The child's working directory; `None` keeps the conductor's.
    pub cwd: Option<&'a Path>,
    /// The child's environment, before the tag.
    pub env: &'a ChildEnv,
    /// The attempt's tag (`MOZART_ATTEMPT`'s value).
    pub tag: &'a str,
    /// A pipe for stdin (else `/dev/null`).
    pub piped_stdin: bool,
}

/// A spawned child: its pid, its pipes, and how to wait for it.
#[derive(Debug)]
pub(crate) struct Child {
    pid: i32,
    /// Its pidfd, readable once it has exited (`None`: no pidfds here, poll).
    pidfd: Option<AsyncFd<OwnedFd>>,
    /// Its exit, once collected (then its pid is no longer ours to signal).
    exit: Option<ExitStatus>,
    /// The write end of its stdin, when piped.
    pub stdin: Option<pipe::Sender>,
    /// The read end of its stdout.
    pub stdout: Option<pipe::Receiver>,
    /// The read end of its stderr.
    pub stderr: Option<pipe::Receiver>,
}

/// The conductor's environment as `NAME=value` C strings, without a tag of its own (a
/// conductor started by an instrument inherited one), read at the first spawn: the
/// conductor changes its environment only at start, before any instrument runs
/// (`mozart start` drops its allocator marker). A program embedding this crate that changes
/// its environment after its first spawn does not change its instruments'.
static INHERITED: LazyLock<Vec<CString>> = LazyLock::new(|| {
    std::env::vars_os()
        .filter(|(k, _)| k != ATTEMPT_VAR)
        .filter_map(|(k, v)| pair(&k, &v))
        .collect()
});

/// `NAME=value` as a C string (`None` for one holding a NUL, which no environment has).
fn pair(name: &OsStr, value: &OsStr) -> Option<CString> {
    let mut bytes = Vec::with_capacity(name.len() + value.len() + 1);
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value.as_bytes());
    CString::new(bytes).ok()
}

/// What a NUL byte inside an argument, path or variable gives (a C string cannot hold it).
fn nul_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "an argument, path or environment variable holds a NUL byte",
    )
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| nul_error())
}

/// `fd` moved to a descriptor above 2, close-on-exec (a pipe created while 0, 1 or 2 was
/// closed would otherwise be overwritten by the child's own dup2s).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let raw = fcntl(&fd, FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A pipe, both ends close-on-exec and above 2: (read end, write end).
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// `/dev/null`, opened once per process (close-on-exec, as std opens files), dup'd onto the
/// child's stdin.
static DEV_NULL: LazyLock<Option<std::fs::File>> =
    LazyLock::new(|| std::fs::File::open("/dev/null").ok());

/// An errno from a `posix_spawn*` call (they return it instead of setting `errno`).
fn check(ret: libc::c_int) -> io::Result<()> {
    match ret {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// The attributes and file actions of one spawn, destroyed when dropped.
struct Plan {
    attr: libc::posix_spawnattr_t,
    actions: libc::posix_spawn_file_actions_t,
}

impl Plan {
    fn new() -> io::Result<Box<Plan>> {
        // SAFETY: both are plain C structs that their init functions fill in; zeroed memory
        // is a valid place to initialise them (boxed so they never move after init).
        let mut plan = Box::new(unsafe { std::mem::zeroed::<Plan>() });
        // SAFETY: pointers to the boxed, writable structs.
        check(unsafe { libc::posix_spawnattr_init(&mut plan.attr) })?;
        if let Err(e) = check(unsafe { libc::posix_spawn_file_actions_init(&mut plan.actions) }) {
            // SAFETY: initialised just above, destroyed once.
            unsafe { libc::posix_spawnattr_destroy(&mut plan.attr) };
            return Err(e);
        }
        Ok(plan)
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: both were initialised by `Plan::new` and are destroyed only here.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attr);
        }
    }
}

/// Start `spawn`'s program. Errors are the `exec`'s or the set-up's (`NotFound` for a
/// missing program or working directory, as std reports them).
pub(crate) fn spawn(spawn: &Spawn<'_>) -> io::Result<Child> {
    let program = c_string(spawn.program.as_os_str().as_bytes())?;
    let mut argv_owned = Vec::with_capacity(spawn.args.len() + 1);
    argv_owned.push(c_string(spawn.arg0.as_bytes())?);
    for arg in spawn.args {
        argv_owned.push(c_string(arg.as_bytes())?);
    }
    let tag = pair(OsStr::new(ATTEMPT_VAR), OsStr::new(spawn.tag)).ok_or_else(nul_error)?;
    let exact: Vec<CString>;
    let base: &[CString] = match spawn.env {
        ChildEnv::Inherit => &INHERITED,
        ChildEnv::Exact(vars) => {
            exact = vars
                .iter()
                .filter(|(k, _)| k != ATTEMPT_VAR)
                .map(|(k, v)| pair(k, v).ok_or_else(nul_error))
                .collect::<io::Result<_>>()?;
            &exact
        }
    };
    let cwd = spawn
        .cwd
        .map(|d| c_string(d.as_os_str().as_bytes()))
        .transpose()?;

    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    let stdin_pipe = if spawn.piped_stdin {
        Some(pipe_pair()?)
    } else {
        None
    };
    let null_fd: Option<RawFd> = DEV_NULL.as_ref().map(AsRawFd::as_raw_fd);

    let mut plan = Plan::new()?;
    let mut argv: Vec<*mut libc::c_char> =
        argv_owned.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: Vec<*mut libc::c_char> = Vec::with_capacity(base.len() + 2);
    envp.extend(base.iter().map(|v| v.as_ptr().cast_mut()));
    envp.push(tag.as_ptr().cast_mut());
    envp.push(std::ptr::null_mut());

    let mut pid: libc::pid_t = 0;
    // SAFETY: `plan`'s structs were initialised by `Plan::new` and live (boxed) until after
    // the spawn; every pointer handed over (`cwd`, `program`, the strings behind `argv` and
    // `envp`, `/dev/null` and the pipes' descriptors) stays alive until the call returns,
    // and `argv`/`envp` end with a null pointer. glibc's `posix_spawn` returns only after
    // the child has called `exec` (or failed to), so nothing is used after that.
    unsafe {
        let actions = &mut plan.actions;
        if let Some(dir) = &cwd {
            check(libc::posix_spawn_file_actions_addchdir_np(
                actions,
                dir.as_ptr(),
            ))?;
        }
        match (&stdin_pipe, null_fd) {
            (Some((r, _)), _) => check(libc::posix_spawn_file_actions_adddup2(
                actions,
                r.as_raw_fd(),
                0,
            ))?,
            (None, Some(null)) => {
                check(libc::posix_spawn_file_actions_adddup2(actions, null, 0))?;
            }
            (None, None) => check(libc::posix_spawn_file_actions_addopen(
                actions,
                0,
                c"/dev/null".as_ptr(),
                libc::O_RDONLY,
                0,
            ))?,
        }
        check(libc::posix_spawn_file_actions_adddup2(
            actions,
            out_w.as_raw_fd(),
            1,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            actions,
            err_w.as_raw_fd(),
            2,
        ))?;

        let attr = &mut plan.attr;
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        check(libc::posix_spawnattr_setsigmask(attr, &set))?;
        libc::sigaddset(&mut set, libc::SIGPIPE);
        check(libc::posix_spawnattr_setsigdefault(attr, &set))?;
        check(libc::posix_spawnattr_setpgroup(attr, 0))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        check(libc::posix_spawnattr_setflags(attr, flags as libc::c_short))?;

        check(libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            &plan.actions,
            &plan.attr,
            argv.as_ptr(),
            envp.as_ptr(),
        ))?;
    }
    drop(plan);
    // The child's ends are its own now.
    drop((out_w, err_w));
    let mut child = Child {
        pid,
        pidfd: pidfd_open(pid),
        exit: None,
        stdin: None,
        stdout: None,
        stderr: None,
    };
    // Should the runtime refuse a pipe (no descriptor left), the child does not run on
    // unwatched: its group is killed, and dropping it reaps it.
    if let Err(err) = child.attach(out_r, err_r, stdin_pipe) {
        let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
        return Err(err);
    }
    Ok(child)
}

/// A pidfd for our child `pid`, registered with the runtime; `None` where the kernel has
/// none (then the wait polls).
fn pidfd_open(pid: i32) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: a plain system call with two integers; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = RawFd::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the kernel just returned this descriptor (close-on-exec); nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Registering needs a runtime (a spawn outside one waits by polling, inside one).
    tokio::runtime::Handle::try_current().ok()?;
    // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which owns it until it is dropped:
    // the descriptor stays open and the same for the registration's whole life.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
}

/// The exit of our child `pid` if it has ended (its status collected: the pid is free).
fn try_reap(pid: i32) -> io::Result<Option<ExitStatus>> {
    Ok(
        match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG))? {
            WaitStatus::Exited(_, code) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
            WaitStatus::Signaled(_, signal, core) => Some(ExitStatus::from_raw(
                signal as i32 | if core { 0x80 } else { 0 },
            )),
            _ => None,
        },
    )
}

/// Wait until our child `pid` has ended and collect its exit.
async fn reap(pid: i32, pidfd: Option<&AsyncFd<OwnedFd>>) -> io::Result<ExitStatus> {
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = try_reap(pid)? {
            return Ok(status);
        }
        match pidfd {
            Some(fd) => {
                let mut ready = fd.readable().await?;
                // Readable means exited; a spurious wake-up reads "still alive" above.
                ready.clear_ready();
            }
            None => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        }
    }
}

impl Child {
    /// Hand our ends of its pipes to the runtime.
    fn attach(
        &mut self,
        out: OwnedFd,
        err: OwnedFd,
        stdin: Option<(OwnedFd, OwnedFd)>,
    ) -> io::Result<()> {
        self.stdout = Some(pipe::Receiver::from_owned_fd(out)?);
        self.stderr = Some(pipe::Receiver::from_owned_fd(err)?);
        if let Some((theirs, ours)) = stdin {
            drop(theirs);
            self.stdin = Some(pipe::Sender::from_owned_fd(ours)?);
        }
        Ok(())
    }

    /// Its process id.
    pub(crate) fn id(&self) -> i32 {
        self.pid
    }

    /// Wait for it to exit (cancel-safe: dropping the future leaves it to a later wait).
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.exit {
            return Ok(status);
        }
        let status = reap(self.pid, self.pidfd.as_ref()).await?;
        self.exit = Some(status);
        Ok(status)
    }

    /// SIGKILL to it (the leader alone), unless its exit was collected already.
    pub(crate) fn start_kill(&mut self) -> io::Result<()> {
        if self.exit.is_some() {
            return Ok(());
        }
        kill(Pid::from_raw(self.pid), Signal::SIGKILL).map_err(io::Error::from)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.exit.is_some() {
            return;
        }
        // Not collected yet (the attempt was cancelled mid-wait): collect it later, so it
        // does not stay a zombie. Its group is ended by the attempt's guard.
        let (pid, pidfd) = (self.pid, self.pidfd.take());
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let _ = reap(pid, pidfd.as_ref()).await;
                });
            }
            Err(_) => {
                drop(pidfd);
                std::thread::spawn(move || {
                    let _ = waitpid(Pid::from_raw(pid), None);
                });
            }
        }
    }
}
