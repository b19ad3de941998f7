//! `mozart start` (cli.md §2.1): start the conductor, in the foreground or detached.
//!
//! Unlike upstream (which returns before the daemon is up, §4.1 [QUIRK]), the background
//! start waits until `daemon.ready` answers, so a failure is reported to the user. It is
//! idempotent: with a conductor already running it says so (PID, socket) and succeeds, so
//! `mozart start && mozart run …` works the second time too (upstream exits 1).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use mozart_client::daemon;
use mozart_conductor::{ConductorSettings, DaemonConfig, RunState};
use mozart_ipc::paths::ConductorPaths;

use crate::conductor_client::{self, conductor_state};
use crate::{CliError, Globals, OutputMode};

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
    #[arg(short = 'l', long = "log-level", value_name = "LEVEL", ignore_case = true,
          value_parser = clap::builder::TypedValueParser::map(
              clap::builder::PossibleValuesParser::new(["debug", "info", "warning", "error"]),
              |s: String| s.to_lowercase()))]
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
        // Running, but not on the socket named for this start: said at once, with where it
        // listens (waiting for it to answer on the named one would wait for nothing).
        if let Some(err) =
            conductor_client::elsewhere(&paths, args.socket.is_some(), OutputMode::Human)
        {
            return Err(err);
        }
        if args.foreground || args.detached_child {
            println!("{} is already running (PID {pid})", paths.who());
            crate::selector::say(
                "  A foreground conductor cannot start beside it: stop it first (mozart stop).",
            );
            return Ok(1);
        }
        if let Some(code) = report_already_running(&paths, &pid)? {
            return Ok(code);
        }
    }
    if args.foreground || args.detached_child {
        run_here(config, paths, &args)
    } else {
        start_detached(globals, &args, &config, &paths)
    }
}

/// Load and validate the config (before any fork, so errors reach the user) and resolve
/// paths; the file's warnings (a key given twice) are said once, by the command the user ran
/// (not again by its detached child), as a score's are.
pub(crate) fn prepare(
    globals: &Globals,
    args: &Args,
) -> Result<(DaemonConfig, ConductorPaths), CliError> {
    let (config, paths, warnings) = prepare_noting(globals, args)?;
    if !args.detached_child {
        for warning in warnings {
            eprintln!("{warning}");
        }
    }
    Ok((config, paths))
}

/// [`prepare`], handing the file's warnings (`FILE: warning: …`) back instead of saying them.
pub(crate) fn prepare_noting(
    globals: &Globals,
    args: &Args,
) -> Result<(DaemonConfig, ConductorPaths, Vec<String>), CliError> {
    let home = mozart_ipc::paths::mozart_home().map_err(fail)?;
    // Before its conductor.yaml is read or its log opened: a home another user made is
    // theirs to fill (an instrument we would run, a config we would follow).
    mozart_conductor::lifecycle::check_home_is_ours(&home).map_err(|e| {
        CliError::failed(
            e.to_string(),
            e.hint().map(str::to_string).into_iter().collect(),
        )
    })?;
    let file = args
        .config
        .clone()
        .unwrap_or_else(|| home.join("conductor.yaml"));
    let (config, warnings) =
        DaemonConfig::load_noting(Some(&file), args.profile.as_deref()).map_err(fail)?;
    // Before `restart` stops the running conductor: a log or socket directory the new one
    // could not create is said now, naming the key and the file.
    let socket_named = args.socket.is_some()
        || std::env::var_os(mozart_ipc::paths::SOCKET_ENV).is_some_and(|v| !v.is_empty());
    let mut checked = config.clone();
    if globals.conductor_clone.is_some() {
        // A clone writes its own log, not `log_file`.
        checked.log_file = None;
    }
    checked.check_paths(&file, !socket_named).map_err(fail)?;
    let warnings = warnings
        .into_iter()
        .map(|w| format!("{}: warning: {w}", file.display()))
        .collect();
    let paths = ConductorPaths::resolve(
        &home,
        args.socket.as_deref(),
        config.socket.path.as_deref(),
        globals.conductor_clone.as_deref(),
    )
    // A running conductor keeps its socket until it is restarted, whatever the file says now.
    .follow_running(args.socket.is_some());
    mozart_ipc::paths::check_socket_path(&paths.socket).map_err(fail)?;
    Ok((config, paths, warnings))
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
                // The lock is free, so no conductor of this home runs; the PID may name
                // another process now (PID 1 after a reboot, a reused number).
                if runs(pid) {
                    println!(
                        "Cleaned up stale PID file (PID {pid} is running but is not this \
                         conductor: it does not hold the conductor's lock — the PID was reused, \
                         e.g. after a reboot)"
                    );
                } else {
                    println!("Cleaned up stale PID file (PID {pid} is no longer running)");
                }
            }
            Ok(None)
        }
    }
}

/// Whether process `pid` runs (exists and is not a zombie: a killed conductor's PID stays
/// in `/proc` until its parent reaps it).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// A background start with a conductor already running succeeds once that conductor is
/// ready (it may still be recovering its jobs), so the next command of a script finds it
/// accepting work.
/// `Some(0)` once the running conductor is ready; `None` when it turns out to be gone
/// while we wait (killed just before this start looked: its lock was still held for a few
/// milliseconds), so this start goes on and starts one.
fn report_already_running(paths: &ConductorPaths, pid: &str) -> Result<Option<i32>, CliError> {
    println!("{} is already running (PID {pid})", paths.who());
    println!("  Socket: {}", paths.socket.display());
    let deadline = std::time::Instant::now() + daemon::READY_TIMEOUT;
    loop {
        if daemon::probe_ready(&paths.socket).is_some_and(|r| r.is_ready()) {
            return Ok(Some(0));
        }
        if let RunState::Stopped { stale_pid } = conductor_state(paths, OutputMode::Human)? {
            if stale_pid.is_some() {
                let _ = std::fs::remove_file(&paths.pid_file);
            }
            println!("  It has stopped since (its lock is free): starting a new one");
            return Ok(None);
        }
        if std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(daemon::POLL);
    }
    Err(CliError::failed(
        format!(
            "The running conductor (PID {pid}) did not become ready within {}.",
            mozart_config::plural(daemon::READY_TIMEOUT.as_secs(), "second", "seconds")
        ),
        vec![
            "Check it with: mozart conductor-status".to_string(),
            "Restart it with: mozart restart".to_string(),
        ],
    ))
}

fn log_path(config: &DaemonConfig, paths: &ConductorPaths) -> PathBuf {
    paths.log_for(config.log_file.as_deref())
}

fn run_here(config: DaemonConfig, paths: ConductorPaths, args: &Args) -> Result<i32, CliError> {
    if std::env::var_os(daemon::ARENA_MARKER).is_some() {
        // glibc read it at startup; instruments inherit the environment, and the setting was
        // ours, not the user's. Still single-threaded here.
        std::env::remove_var("MALLOC_ARENA_MAX");
        std::env::remove_var(daemon::ARENA_MARKER);
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
        log_redaction: Some(mozart_conductor::logging::Redaction {
            text: mozart_backends::redact::redact_cow,
            secret_name: mozart_backends::redact::is_secret_name,
            placeholder: mozart_backends::redact::is_placeholder,
        }),
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

/// Start the conductor in the background (this program again, as a detached child) and
/// report it once it is ready; a conductor that exits during start-up is reported with the
/// error it logged.
fn start_detached(
    globals: &Globals,
    args: &Args,
    config: &DaemonConfig,
    paths: &ConductorPaths,
) -> Result<i32, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| fail(format!("cannot locate the mozart executable: {e}")))?;
    let launch = daemon::Launch {
        program: exe,
        args: child_args(globals, args, config, paths),
        log: log_path(config, paths),
        socket: paths.socket.clone(),
    };
    // The daemon outlives this command: it must not hold the caller's other descriptors
    // (a CI runner or `$(…)` waiting for a pipe's end would wait for the daemon's).
    mozart_conductor::keep_inherited_fds_from_children();
    match daemon::start_detached(&launch) {
        Ok(started) => {
            println!("{} started (PID {})", paths.who(), started.pid);
            println!("  Socket: {}", paths.socket.display());
            println!("  Log: {}", launch.log.display());
            if let Some(reason) = started.not_accepting {
                // It runs (jobs the disk allows go on), but new work is refused: said now,
                // with what to do, instead of a wait that cannot end in "ready".
                eprintln!("Warning: it is not accepting work: {reason}.");
                eprintln!(
                    "  Free some space; `mozart conductor-status` shows when it accepts work again."
                );
            }
            Ok(0)
        }
        Err(err) => Err(start_failure(err)),
    }
}

/// The arguments of the detached child: `start --detached-child` with this start's options.
fn child_args(
    globals: &Globals,
    args: &Args,
    config: &DaemonConfig,
    paths: &ConductorPaths,
) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    if let Some(clone) = &globals.conductor_clone {
        out.push(format!("--conductor-clone={clone}").into());
    }
    out.extend(["start".into(), "--detached-child".into()]);
    out.extend(["--socket".into(), paths.socket.clone().into_os_string()]);
    if let Some(config_file) = &config.config_file {
        out.extend(["--config".into(), config_file.clone().into_os_string()]);
    } else if let Some(file) = &args.config {
        out.extend(["--config".into(), absolute(file).into_os_string()]);
    }
    if let Some(profile) = &args.profile {
        out.extend(["--profile".into(), profile.into()]);
    }
    if let Some(level) = &args.log_level {
        out.extend(["--log-level".into(), level.into()]);
    }
    out
}

/// A background start that gave no ready conductor, as the user reads it: the child's own
/// error when it logged one, and where the log is.
fn start_failure(err: daemon::StartError) -> CliError {
    let see_log = |log: &Path| format!("See the log: {}", log.display());
    match err {
        daemon::StartError::Exited {
            reported: Some((message, mut hints)),
            log,
            ..
        } => {
            // (A conductor refused before it opened its log wrote none.)
            if log.exists() {
                hints.push(see_log(&log));
            }
            CliError::failed(format!("The conductor did not start: {message}"), hints)
        }
        daemon::StartError::Exited { ref log, .. }
        | daemon::StartError::NotReady { ref log, .. } => {
            let hints = vec![see_log(log)];
            CliError::failed(err.to_string(), hints)
        }
        other => fail(other),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
