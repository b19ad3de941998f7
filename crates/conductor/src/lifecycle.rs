//! The daemon's life: lock, PID, socket, recovery, READY, signals, reload, shutdown
//! (conductor.md §4.2, §5).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mozart_ipc::{RpcModule, ServerLimits};
use nix::sys::socket::{self, AddressFamily, Backlog, SockFlag, SockType, UnixAddr};
use nix::sys::stat::{umask, Mode};
use tokio::signal::unix::{signal, SignalKind};

use crate::logging::{self, LogHandle};
use crate::{daemon_methods, instance, jobs, notify};
use crate::{ConductorCtx, ConductorError, ConductorPaths, DaemonConfig, JobEngine};

/// Clients served at once (`socket.backlog` is not used: see [`run_locked`]).
pub const MAX_CONNECTIONS: usize = 1024;

/// Everything needed to run one conductor.
#[derive(Debug, Clone)]
pub struct ConductorSettings {
    /// Validated configuration (profile merged).
    pub config: DaemonConfig,
    /// Resolved paths (clone-aware).
    pub paths: ConductorPaths,
    /// Also log to stderr.
    pub foreground: bool,
    /// `--log-level`, overriding the file's `log_level` at start (§3.1 step 6).
    pub log_level: Option<String>,
    /// The job engine (`mozart start` wires in `mozart-jobs`); `None` for a bare daemon.
    pub jobs: Option<Arc<dyn JobEngine>>,
    /// Applied to every text of the conductor's log lines before they are written
    /// (`mozart start` hands in the backends' credential redaction); `None` redacts only the
    /// secret field names every log redacts.
    pub log_redaction: Option<logging::Redaction>,
}

/// The conductor daemon.
#[derive(Debug)]
pub struct Conductor;

impl Conductor {
    /// Run until a signal or `daemon.shutdown` stops it. Returns once the socket, PID file
    /// and lock are released.
    pub async fn run(settings: ConductorSettings) -> Result<(), ConductorError> {
        let ConductorSettings {
            mut config,
            paths,
            foreground,
            log_level,
            jobs,
            log_redaction,
        } = settings;
        if let Some(level) = log_level {
            config.log_level = level.to_ascii_lowercase();
        }
        let log_file = paths.log_for(config.log_file.as_deref());
        if paths.clone_stem.is_some() {
            // A clone does not use `log_file` (it writes its own log): `daemon.config` and
            // `config show` say so.
            config.log_file = None;
        }
        // The home holds prompts, instrument output and error text: everything the conductor
        // creates while starting up (home, logs, registry, learning store) is private. The
        // umask is restored once they exist, so instruments create files as the user expects.
        let user_umask = umask(Mode::from_bits_truncate(0o077));
        check_home_is_ours(&paths.home)?;
        std::fs::create_dir_all(&paths.home)
            .map_err(|e| ConductorError::io("cannot create Mozart home", &paths.home, e))?;
        std::fs::set_permissions(&paths.home, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| ConductorError::io("cannot restrict Mozart home", &paths.home, e))?;
        let log = logging::init(&log_file, &config.log_level, foreground, log_redaction)?;
        mozart_ipc::paths::check_socket_path(&paths.socket)?;

        let lock = instance::acquire(&paths)?;
        // A record a killed conductor left names its socket, not ours: gone until ours listens.
        let socket_record = paths.socket_record();
        remove_quietly(&socket_record);
        // Always the home's PID file: `mozart stop` must find it without reading the config.
        let pid_file = paths.pid_file.clone();
        instance::write_pid_file(&pid_file, std::process::id())?;
        let result = run_locked(config, paths.clone(), jobs.as_deref(), &log, user_umask).await;
        remove_quietly(&socket_record);
        remove_quietly(&pid_file);
        drop(lock);
        match &result {
            Ok(()) => tracing::info!("daemon.stopped"),
            Err(err) => tracing::error!(error = %err, "daemon.failed"),
        }
        result
    }
}

/// Run the conductor on a fresh tokio runtime with few worker threads (idle RSS budget).
pub fn run_blocking(settings: ConductorSettings) -> Result<(), ConductorError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .enable_all()
        .build()
        .map_err(|e| ConductorError::io("cannot start the runtime for", &settings.paths.home, e))?;
    runtime.block_on(Conductor::run(settings))
}

async fn run_locked(
    config: DaemonConfig,
    paths: ConductorPaths,
    engine: Option<&dyn JobEngine>,
    log: &LogHandle,
    user_umask: Mode,
) -> Result<(), ConductorError> {
    for (field, note) in config.unimplemented_fields() {
        tracing::warn!(field, note, "config.reserved_field_ignored");
    }
    let ctx = ConductorCtx::new(config, paths.clone());
    let mut module = RpcModule::new(ctx.clone());
    daemon_methods::register_daemon_methods(&mut module)?;
    let installed = jobs::install(engine, &ctx, &mut module);
    umask(user_umask);
    installed?;

    // Install handlers before binding so a signal during startup is not fatal.
    let sig = |kind: SignalKind, name: &'static str| {
        signal(kind).map_err(|e| ConductorError::io("cannot install handler for", name, e))
    };
    let mut sigterm = sig(SignalKind::terminate(), "SIGTERM")?;
    let mut sigint = sig(SignalKind::interrupt(), "SIGINT")?;
    let mut sighup = sig(SignalKind::hangup(), "SIGHUP")?;

    let listener = bind_socket(&paths.socket)?;
    // Clients find this socket through the record even after `socket.path` changes in the
    // file (the conductor keeps its socket until it is restarted).
    // Best effort but for a link planted there: a full disk must not keep the conductor
    // from starting (its jobs are held until space returns); clients then look where their
    // configuration says, which is where it listens unless `socket.path` changed since.
    match instance::write_socket_record(&paths.socket_record(), &paths.socket) {
        Ok(()) => {}
        Err(e @ ConductorError::Symlink { .. }) => return Err(e),
        Err(e) => tracing::warn!(error = %e, "cannot record the socket the conductor listens on"),
    }
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    // A connection costs one small task, so the cap is generous: a handful of clients that
    // connect and never speak (each held until the idle timeout) must not lock the CLI out.
    // So `socket.backlog` (upstream's cap, §7.3: 5 there) is not used (docs/conductor.md).
    let limits = ServerLimits {
        max_connections: MAX_CONNECTIONS,
        ..ServerLimits::default()
    };
    let server = tokio::spawn(mozart_ipc::serve(listener, module, limits, async {
        let _ = server_stopped.await;
    }));
    tracing::info!(socket = %paths.socket.display(), pid = ctx.pid, "daemon.listening");

    // Recovery runs after the socket is bound (health answers meanwhile) and before READY.
    let recovered = match ctx.job_host() {
        Some(host) => host.recover(&ctx).await,
        None => Ok(()),
    };
    if let Err(err) = recovered {
        let _ = stop_server.send(());
        let _ = server.await;
        remove_quietly(&paths.socket);
        return Err(err);
    }
    ctx.set_ready();
    notify::sd_notify("READY=1");
    tracing::info!(version = mozart_ipc::VERSION, "daemon.started");

    let mut shutdown = ctx.shutdown_receiver();
    loop {
        tokio::select! {
            _ = sigterm.recv() => ctx.request_shutdown(true),
            _ = sigint.recv() => ctx.request_shutdown(true),
            _ = sighup.recv() => reload(&ctx, log),
            changed = shutdown.changed() => if changed.is_err() { break },
        }
        if ctx.is_shutting_down() {
            break;
        }
    }
    let graceful = shutdown.borrow().map(|r| r.graceful).unwrap_or(true);
    notify::sd_notify("STOPPING=1");
    tracing::info!(graceful, "daemon.stopping");
    if let Some(host) = ctx.job_host() {
        let timeout = Duration::from_secs_f64(ctx.config().shutdown_timeout_seconds);
        host.shutdown(graceful, timeout).await;
    }
    let _ = stop_server.send(());
    if let Ok(Err(err)) = server.await {
        tracing::warn!(error = %err, "ipc.server_error");
    }
    remove_quietly(&paths.socket);
    Ok(())
}

/// SIGHUP: re-read conductor.yaml, keeping what cannot change while running (§5.3, avoiding
/// upstream's [BUG] of adopting the file's socket/PID paths).
fn reload(ctx: &Arc<ConductorCtx>, log: &LogHandle) {
    let current = ctx.config();
    // A conductor started without a file still reloads one created since (`mozart config
    // set` writes `<home>/conductor.yaml`).
    let file = current
        .config_file
        .clone()
        .unwrap_or_else(|| ctx.paths.config_file.clone());
    if !file.exists() {
        tracing::info!("daemon.sighup_no_config_file");
        return;
    }
    let mut fresh = match DaemonConfig::load_noting(Some(&file), None) {
        Ok((config, warnings)) => {
            for warning in warnings {
                tracing::warn!(file = %file.display(), warning, "daemon.sighup_config_warning");
            }
            config
        }
        Err(err) => {
            tracing::warn!(error = %err, "daemon.sighup_reload_failed");
            return;
        }
    };
    if fresh.socket != current.socket || fresh.pid_file != current.pid_file {
        tracing::warn!("daemon.sighup_non_reloadable_changed");
    }
    fresh.socket = current.socket.clone();
    fresh.pid_file = current.pid_file.clone();
    fresh.state_db_path = current.state_db_path.clone();
    fresh.log_file = current.log_file.clone();
    fresh.config_file = current.config_file.clone().or(fresh.config_file);
    if fresh.log_level != current.log_level {
        log.set_level(&fresh.log_level);
    }
    if let Some(host) = ctx.job_host() {
        host.config_reloaded(&fresh);
    }
    ctx.set_config(fresh);
    tracing::info!(file = %file.display(), "daemon.config_reloaded");
}

/// Refuse a Mozart home that another user made (they could create it in `/tmp` before
/// us): the home itself, or anything in it or in its `instruments` and `logs` directories,
/// that belongs to another user (not us, not root) — or is a symbolic link another user
/// made. Their `instruments/shell.yaml` would be run by us, their `logs/conductor.log`
/// would receive our log, their symbolic link would have us make a directory of their
/// choosing private.
pub fn check_home_is_ours(home: &Path) -> Result<(), ConductorError> {
    use mozart_ipc::trust::{describe_user, describe_you, user_name};
    use std::os::unix::fs::MetadataExt;
    let me = mozart_ipc::trust::current_uid();
    let refuse = |path: &Path, owner: u32, what: &str| {
        let owner_name = user_name(owner).unwrap_or_else(|| format!("uid {owner}"));
        ConductorError::UnsafeHome {
            path: path.to_path_buf(),
            problem: format!(
                "Refusing to start: {} {what} belongs to {}, not to {}; whoever owns it could have the conductor run their program or read what it writes.",
                path.display(),
                describe_user(owner),
                describe_you(me)
            ),
            fix: format!(
                "Have {} removed ({owner_name} or root can), or set MOZART_HOME to a directory of yours.",
                path.display()
            ),
        }
    };
    // Ours, or root's (root can do anything to us anyway: a file a `sudo mozart` left).
    let trusted = |uid: u32| uid == me || uid == 0;
    // The link itself, not what it names: whose link it is matters.
    let Ok(meta) = std::fs::symlink_metadata(home) else {
        return Ok(()); // Not there yet: created below, ours.
    };
    if !trusted(meta.uid()) {
        let what = if meta.file_type().is_symlink() {
            "(a symbolic link, the Mozart home)"
        } else {
            "(the Mozart home)"
        };
        return Err(refuse(home, meta.uid(), what));
    }
    if let Ok(target) = std::fs::metadata(home) {
        if !trusted(target.uid()) {
            return Err(refuse(
                home,
                target.uid(),
                "(what the Mozart home links to)",
            ));
        }
    }
    for dir in [
        home.to_path_buf(),
        home.join("instruments"),
        home.join("logs"),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if let Ok(m) = std::fs::symlink_metadata(&path) {
                if !trusted(m.uid()) {
                    return Err(refuse(&path, m.uid(), "(in the Mozart home)"));
                }
            }
        }
    }
    Ok(())
}

/// Make sure the socket's directory is ours and private before binding in it (§4.2 step 6,
/// invariant 6, issue 21).
///
/// Whoever can write the directory can swap the socket for their own, and whoever owns it
/// can chmod it so: the directory must belong to us, or to root and then be writable by
/// nobody else unless sticky (like `/tmp`, where nobody can remove our socket). Our own
/// directory is made private (0700) when others could write it, and always when it is the
/// default `/tmp/mozart-$UID` or `$XDG_RUNTIME_DIR/mozart`, which must be ours: another user
/// who created it first would otherwise receive every `mozart` command of ours.
fn secure_socket_dir(dir: &Path, is_default: bool) -> Result<(), ConductorError> {
    use mozart_ipc::trust::{describe_user, describe_you, sticky, user_name, writable_by_others};
    use std::os::unix::fs::MetadataExt;
    // A symbolic link another user made (`/tmp/mozart-0` → a directory of their choosing)
    // is refused, not followed: following it, we would make its target private.
    if let Ok(link) = std::fs::symlink_metadata(dir) {
        let me = mozart_ipc::trust::current_uid();
        if link.file_type().is_symlink() && link.uid() != me {
            let owner = link.uid();
            let owner_name = user_name(owner).unwrap_or_else(|| format!("uid {owner}"));
            return Err(ConductorError::UnsafeSocketDir {
                dir: dir.to_path_buf(),
                owner,
                problem: format!(
                    "Refusing to start: the socket directory {} is a symbolic link made by {}, not by {}; it would have your socket (and its directory's mode) wherever they point it.",
                    dir.display(),
                    describe_user(owner),
                    describe_you(me)
                ),
                fix: format!(
                    "Have {} removed ({owner_name} or root can), {}.",
                    dir.display(),
                    mozart_ipc::trust::private_socket_fix()
                ),
            });
        }
    }
    let meta = std::fs::metadata(dir)
        .map_err(|e| ConductorError::io("cannot inspect socket directory", dir, e))?;
    if !meta.is_dir() {
        return Err(ConductorError::io(
            "cannot use socket directory",
            dir,
            std::io::Error::from(std::io::ErrorKind::NotADirectory),
        ));
    }
    let mode = meta.mode();
    let owner = meta.uid();
    let me = mozart_ipc::trust::current_uid();
    let shown = dir.display();
    let private_fix = mozart_ipc::trust::private_socket_fix();
    if owner != me && (is_default || owner != 0) {
        let owner_name = user_name(owner).unwrap_or_else(|| format!("uid {owner}"));
        let why = if is_default {
            "another user created it before you did, and whatever they put there would receive your mozart commands"
        } else {
            "its owner could replace the socket with a program of their own that receives your mozart commands"
        };
        return Err(ConductorError::UnsafeSocketDir {
            dir: dir.to_path_buf(),
            owner,
            problem: format!(
                "Refusing to start: the socket directory {shown} belongs to {}, not to {}; {why}.",
                describe_user(owner),
                describe_you(me)
            ),
            fix: format!("Have {shown} removed ({owner_name} or root can), {private_fix}."),
        });
    }
    if owner == me {
        // A sticky directory others can write (`/tmp` itself, for a root conductor with
        // MOZART_SOCKET=/tmp/x.sock) is safe as it is and shared: never chmod it.
        if (is_default && mode & 0o7777 != 0o700) || (writable_by_others(mode) && !sticky(mode)) {
            if writable_by_others(mode) {
                tracing::warn!(dir = %shown, mode = format!("{:04o}", mode & 0o7777), "socket directory was writable by others; made it private (0700)");
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| ConductorError::io("cannot restrict socket directory", dir, e))?;
        }
        return Ok(());
    }
    // Root's directory: usable if nobody else can swap our socket in it.
    if writable_by_others(mode) && !sticky(mode) {
        return Err(ConductorError::UnsafeSocketDir {
            dir: dir.to_path_buf(),
            owner,
            problem: format!(
                "Refusing to start: the socket directory {shown} (owner {}) can be written by other users (mode {:04o}) and is not sticky, so any of them could replace the socket.",
                describe_user(owner),
                mode & 0o7777
            ),
            fix: format!("Have root run chmod go-w {shown} (or chmod +t), {private_fix}."),
        });
    }
    Ok(())
}

fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener, ConductorError> {
    mozart_ipc::paths::check_socket_path(path)?;
    if path.is_symlink() {
        return Err(ConductorError::Symlink {
            what: "Socket path",
            path: path.to_path_buf(),
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| ConductorError::io("cannot create socket directory", dir, e))?;
        }
        // Checked after creating it too: another user may have created it first (the
        // recursive create succeeds on an existing directory), and that is what to catch.
        secure_socket_dir(dir, dir == mozart_ipc::paths::default_socket_dir())?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ConductorError::SocketInUse(path.to_path_buf()));
        }
        tracing::info!(socket = %path.display(), "daemon.stale_socket_removed");
        std::fs::remove_file(path)
            .map_err(|e| ConductorError::io("cannot remove stale socket", path, e))?;
    }
    let io =
        |e: nix::Error| ConductorError::io("cannot bind socket", path, std::io::Error::from(e));
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(io)?;
    let addr = UnixAddr::new(path).map_err(io)?;
    // The socket is created 0600 from the start: no window where others could connect.
    let old = umask(Mode::from_bits_truncate(0o177));
    let bound = socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr);
    umask(old);
    bound.map_err(io)?;
    // A deep accept queue: we accept only when a connection slot is free (§7.3).
    let backlog = Backlog::new(1024).unwrap_or(Backlog::MAXCONN);
    socket::listen(&fd, backlog).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| ConductorError::io("cannot restrict socket", path, e))?;
    let std_listener = std::os::unix::net::UnixListener::from(fd);
    tokio::net::UnixListener::from_std(std_listener)
        .map_err(|e| ConductorError::io("cannot register socket", path, e))
}

fn remove_quietly(path: &Path) {
    if let Err(err) = std::fs::remove_file(path) {
        if err.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %err, "daemon.cleanup_failed");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The directory belongs to another (non-root) user: refused, naming that user and the
    /// way out. Needs root to hand a directory to someone else.
    #[test]
    fn a_socket_directory_of_another_user_is_refused_with_its_owner() {
        if !nix::unistd::geteuid().is_root() {
            // CI runs the tests as root: there a skip would hide a missing check.
            assert!(
                std::env::var_os("CI").is_none(),
                "needs root to give a directory to another user"
            );
            eprintln!("SKIPPED: needs root to give a directory to another user");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("squatted");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        for is_default in [false, true] {
            let err = secure_socket_dir(&dir, is_default).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("uid 65534") && text.contains("Refusing to start"),
                "{text}"
            );
            assert!(err.hint().unwrap().contains("MOZART_SOCKET"), "{err:?}");
        }
    }

    #[test]
    fn our_own_default_directory_is_made_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("mine");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        secure_socket_dir(&dir, false).unwrap();
        let mode = |d: &Path| std::fs::metadata(d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            mode(&dir),
            0o755,
            "a directory nobody else can write stays as is"
        );
        secure_socket_dir(&dir, true).unwrap();
        assert_eq!(mode(&dir), 0o700, "the default directory is always private");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        secure_socket_dir(&dir, false).unwrap();
        assert_eq!(
            mode(&dir),
            0o700,
            "a directory others could write is tightened"
        );
        // A shared sticky directory of ours (`/tmp` for root) is safe and never chmodded:
        // tightening /tmp to 0700 locked every other user out of it.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        secure_socket_dir(&dir, false).unwrap();
        assert_eq!(
            mode(&dir),
            0o1777,
            "a sticky shared directory stays as it is"
        );
    }
}
