//! `mozart start` (cli.md §2.1): start the conductor, in the foreground or detached.
//!
//! Unlike upstream (which returns before the daemon is up, §4.1 [QUIRK]), the background
//! start waits until `daemon.ready` answers, so a failure is reported to the user. It is
//! idempotent: with a conductor already running it says so (PID, socket) and succeeds, so
//! `mozart start && mozart run …` works the second time too (upstream exits 1).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mozart_conductor::{ConductorSettings, DaemonConfig, RunState};
use mozart_ipc::paths::ConductorPaths;
use mozart_ipc::types::ReadyResult;
use mozart_ipc::{methods, BlockingClient};

use crate::conductor_client::conductor_state;
use crate::{CliError, Globals, OutputMode};

/// How long a background start waits for the conductor to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Arguments of `mozart start`.
///
/// In the background (the default) the command returns once the conductor is ready; when one
/// is already running it prints its PID and socket and exits 0 (upstream exits 1), so
/// scripts can start it unconditionally. A foreground start (`-f`) beside a running conductor
/// exits 1: it cannot run.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Conductor config file (default: <MOZART_HOME>/conductor.yaml).
    #[arg(short = 'c', long = "config", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Do not daemonize; log to stderr too.
    #[arg(short = 'f', long = "foreground")]
    pub foreground: bool,
    /// Conductor log level: debug, info, warning, error (overrides the config file).
    #[arg(short = 'l', long = "log-level", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Built-in config profile: dev, intensive, minimal.
    #[arg(short = 'p', long = "profile", value_name = "NAME")]
    pub profile: Option<String>,
    /// Socket path (default: $MOZART_SOCKET, socket.path, $XDG_RUNTIME_DIR/mozart/mozart.sock).
    #[arg(long = "socket", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Internal: this process is the detached child of a background start.
    #[arg(long = "detached-child", hide = true)]
    pub detached_child: bool,
}

/// Run `mozart start`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let (config, paths) = prepare(globals, &args)?;
    if let Some(pid) = already_running(&paths)? {
        if args.foreground || args.detached_child {
            println!("{} is already running (PID {pid})", paths.who());
            println!(
                "  A foreground conductor cannot start beside it: stop it first (mozart stop)."
            );
            return Ok(1);
        }
        return report_already_running(&paths, &pid);
    }
    if args.foreground || args.detached_child {
        run_here(config, paths, &args)
    } else {
        start_detached(globals, &args, &config, &paths)
    }
}

/// Load and validate the config (before any fork, so errors reach the user) and resolve paths.
pub(crate) fn prepare(
    globals: &Globals,
    args: &Args,
) -> Result<(DaemonConfig, ConductorPaths), CliError> {
    let home = mozart_ipc::paths::mozart_home().map_err(fail)?;
    let file = args
        .config
        .clone()
        .unwrap_or_else(|| home.join("conductor.yaml"));
    let config = DaemonConfig::load(Some(&file), args.profile.as_deref()).map_err(fail)?;
    let paths = ConductorPaths::resolve(
        &home,
        args.socket.as_deref(),
        config.socket.path.as_deref(),
        globals.conductor_clone.as_deref(),
    );
    mozart_ipc::paths::check_socket_path(&paths.socket).map_err(fail)?;
    Ok((config, paths))
}

fn fail(err: impl std::fmt::Display) -> CliError {
    CliError::failed(err.to_string(), vec![])
}

/// The running conductor's PID (as text, `unknown` when it has none), or None after
/// cleaning a stale PID file.
fn already_running(paths: &ConductorPaths) -> Result<Option<String>, CliError> {
    match conductor_state(paths, OutputMode::Human)? {
        RunState::Running { pid } => Ok(Some(
            pid.map_or_else(|| "unknown".to_string(), |p| p.to_string()),
        )),
        RunState::Stopped { stale_pid } => {
            if let Some(pid) = stale_pid {
                let _ = std::fs::remove_file(&paths.pid_file);
                println!("Cleaned up stale PID file (PID {pid} is no longer running)");
            }
            Ok(None)
        }
    }
}

/// A background start with a conductor already running succeeds once that conductor is
/// ready (it may still be recovering its jobs), so the next command of a script finds it
/// accepting work.
fn report_already_running(paths: &ConductorPaths, pid: &str) -> Result<i32, CliError> {
    println!("{} is already running (PID {pid})", paths.who());
    println!("  Socket: {}", paths.socket.display());
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match probe_ready(&paths.socket) {
            Some(ready) if ready.is_ready() => return Ok(0),
            _ if Instant::now() >= deadline => {
                return Err(CliError::failed(
                    format!(
                        "The running conductor (PID {pid}) did not become ready within {} seconds.",
                        READY_TIMEOUT.as_secs()
                    ),
                    vec![
                        "Check it with: mozart conductor-status".to_string(),
                        "Restart it with: mozart restart".to_string(),
                    ],
                ));
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn log_path(config: &DaemonConfig, paths: &ConductorPaths) -> PathBuf {
    config
        .log_file
        .clone()
        .unwrap_or_else(|| paths.log_file.clone())
}

/// Set beside `MALLOC_ARENA_MAX` when this program (or its systemd unit) chose it, so the
/// conductor can keep the setting out of the instruments' environment.
const ARENA_MARKER: &str = "MOZART_MALLOC_ARENA_MAX_SET";

fn run_here(config: DaemonConfig, paths: ConductorPaths, args: &Args) -> Result<i32, CliError> {
    if std::env::var_os(ARENA_MARKER).is_some() {
        // glibc read it at startup; instruments inherit the environment, and the setting was
        // ours, not the user's. Still single-threaded here.
        std::env::remove_var("MALLOC_ARENA_MAX");
        std::env::remove_var(ARENA_MARKER);
    }
    mozart_conductor::memory::tune_allocator();
    mozart_conductor::keep_inherited_fds_from_children();
    if args.detached_child {
        mozart_conductor::detach_session().map_err(fail)?;
    }
    if config.dashboard.enabled {
        start_dashboard(&config.dashboard, &paths);
    }
    let settings = ConductorSettings {
        config,
        paths,
        // The detached child's stderr already is the log file: log there once.
        foreground: args.foreground && !args.detached_child,
        log_level: args.log_level.clone(),
        jobs: Some(std::sync::Arc::new(mozart_jobs::Jobs)),
        log_redactor: Some(mozart_backends::redact),
    };
    // The secret values of the conductor's environment are learned now, before any
    // instrument runs (the environment is final: adjusted above while single-threaded).
    mozart_backends::redact::prime();
    match mozart_conductor::run_blocking(settings) {
        Ok(()) => Ok(0),
        Err(mozart_conductor::ConductorError::AlreadyRunning { who, pid }) => {
            println!("{who} is already running (PID {pid})");
            Ok(1)
        }
        Err(err) => Err(CliError::failed(
            err.to_string(),
            err.hint().map(str::to_string).into_iter().collect(),
        )),
    }
}

/// Serve the dashboard from this process (`dashboard:` in conductor.yaml), on its own
/// thread and runtime so it never competes with the conductor's; it finds the socket once
/// the conductor listens. A dashboard that cannot start is logged, not fatal.
fn start_dashboard(d: &mozart_conductor::config::DashboardConfig, paths: &ConductorPaths) {
    let Ok(host) = d.host.parse() else {
        return;
    };
    let options = mozart_dashboard::Options {
        host,
        port: d.port,
        token: d.token.clone(),
        home: paths.home.clone(),
        socket: paths.socket.clone(),
        learning_db: paths.learning_db.clone(),
    };
    mozart_dashboard::spawn_background(options);
}

fn start_detached(
    globals: &Globals,
    args: &Args,
    config: &DaemonConfig,
    paths: &ConductorPaths,
) -> Result<i32, CliError> {
    let log = log_path(config, paths);
    // The log holds prompts and instrument output: private, like the rest of the home.
    if let Some(dir) = log.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                fail(format!(
                    "cannot create log directory {}: {e}",
                    dir.display()
                ))
            })?;
    }
    let open_log = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log)
            .map_err(|e| fail(format!("cannot open log file {}: {e}", log.display())))
    };
    let exe = std::env::current_exe()
        .map_err(|e| fail(format!("cannot locate the mozart executable: {e}")))?;
    let mut command = Command::new(exe);
    if let Some(clone) = &globals.conductor_clone {
        command.arg(format!("--conductor-clone={clone}"));
    }
    command.arg("start").arg("--detached-child");
    command.arg("--socket").arg(&paths.socket);
    if let Some(config_file) = &config.config_file {
        command.arg("--config").arg(config_file);
    } else if let Some(file) = &args.config {
        command.arg("--config").arg(absolute(file));
    }
    if let Some(profile) = &args.profile {
        command.arg("--profile").arg(profile);
    }
    if let Some(level) = &args.log_level {
        command.arg("--log-level").arg(level);
    }
    // glibc gives every thread that allocates its own heap arena; a conductor's threads
    // hand data to each other, so memory freed in one arena stays resident while another
    // grows. One arena keeps a long-running conductor smaller (docs/performance.md); the
    // child also calls `tune_allocator`, this covers glibc's start-up before it does.
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        command.env("MALLOC_ARENA_MAX", "1");
        command.env(ARENA_MARKER, "1");
    }
    command
        .stdin(Stdio::null())
        .stdout(open_log()?)
        .stderr(open_log()?);
    // The daemon outlives this command: it must not hold the caller's other descriptors
    // (a CI runner or `$(…)` waiting for a pipe's end would wait for the daemon's).
    mozart_conductor::keep_inherited_fds_from_children();
    // Where this start's lines begin in the (appended) log: a child that fails prints its
    // error there, and that is what the user must see.
    let log_start = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let mut child = command
        .spawn()
        .map_err(|e| fail(format!("cannot start the conductor: {e}")))?;

    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let see_log = format!("See the log: {}", log.display());
            return Err(match startup_error(&log, log_start) {
                Some((message, mut hints)) => {
                    hints.push(see_log);
                    CliError::failed(format!("The conductor did not start: {message}"), hints)
                }
                None => CliError::failed(
                    format!("The conductor exited during startup ({status})."),
                    vec![see_log],
                ),
            });
        }
        if let Some(ready) = probe_ready(&paths.socket) {
            if ready.is_ready() {
                println!("{} started (PID {})", paths.who(), child.id());
                println!("  Socket: {}", paths.socket.display());
                println!("  Log: {}", log.display());
                return Ok(0);
            }
        }
        if Instant::now() >= deadline {
            return Err(CliError::failed(
                format!(
                    "The conductor (PID {}) did not become ready within {} seconds.",
                    child.id(),
                    READY_TIMEOUT.as_secs()
                ),
                vec![format!("See the log: {}", log.display())],
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The error a failed detached child printed to the log after `from` (its last
/// `Error: <message>` line and the `  - <hint>` lines under it, as [`CliError::report`]
/// writes them), so `mozart start` says why instead of only that the conductor exited.
fn startup_error(log: &Path, from: u64) -> Option<(String, Vec<String>)> {
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

fn probe_ready(socket: &Path) -> Option<ReadyResult> {
    let mut client = BlockingClient::connect(socket).ok()?;
    client.call(methods::DAEMON_READY, ()).ok()
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
