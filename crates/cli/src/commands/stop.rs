//! `mozart stop` (cli.md §2.2): graceful stop via `daemon.shutdown`, SIGTERM as fallback,
//! SIGKILL with `--force`; waits until the conductor is gone (upstream does not wait).
//!
//! With jobs running it asks first; `--yes` answers for a script, and without a terminal
//! and without `--yes` it refuses and names `--yes` (upstream reads an empty answer and
//! prints "Aborted."). The prompt says what really happens — upstream's "may corrupt job
//! state" is not true here: every transition is checkpointed, and an interrupted sheet runs
//! again on the next start without spending a retry.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mozart_conductor::{RunState, StopSignal};
use mozart_ipc::paths::ConductorPaths;
use mozart_ipc::types::{ReadyResult, ShutdownParams, ShutdownResult};
use mozart_ipc::{methods, BlockingClient, ClientTimeouts};

use crate::conductor_client::{self, conductor_at};
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart stop`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Kill immediately (SIGKILL) and skip the running-jobs prompt.
    #[arg(long = "force")]
    pub force: bool,
    /// Stop even when jobs are running, without asking (needed when there is no terminal
    /// to ask on). Running sheets get shutdown_timeout_seconds to finish; one still running
    /// then runs again on the next start.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Socket path of the conductor to stop.
    #[arg(long = "socket", value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// What [`stop_conductor`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopOutcome {
    /// Nothing was running.
    NotRunning,
    /// The conductor stopped.
    Stopped,
    /// The user declined the prompt.
    Aborted,
}

/// Run `mozart stop`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let paths = conductor_client::paths(globals, args.socket.as_deref())?;
    // What the refusal's hint suggests names the same conductor (the `--conductor-clone`
    // flag is added where it is printed).
    let command = match &args.socket {
        Some(socket) => format!("stop --socket {}", socket.display()),
        None => "stop".to_string(),
    };
    match stop_conductor(
        &paths,
        args.socket.is_some(),
        args.force,
        args.yes,
        &command,
    )? {
        StopOutcome::NotRunning => {
            println!("{} is not running", paths.who());
            Ok(1)
        }
        StopOutcome::Aborted => {
            println!("Aborted.");
            Ok(1)
        }
        StopOutcome::Stopped => Ok(0),
    }
}

/// Stop the conductor at `paths` (the one answering on its socket when that was named:
/// `explicit_socket`) and wait until it is gone. `yes` skips the running-jobs question;
/// `command` (`stop`, `restart`) is named in the refusal, the error when jobs are running,
/// nobody can be asked (no terminal) and `--yes` was not given.
pub(crate) fn stop_conductor(
    paths: &ConductorPaths,
    explicit_socket: bool,
    force: bool,
    yes: bool,
    command: &str,
) -> Result<StopOutcome, CliError> {
    // Our conductors hold the instance lock until their last moment; a foreign one (found
    // only through the socket) is watched through its PID instead.
    let (state, locked) = conductor_at(paths, explicit_socket, OutputMode::Human)?;
    let pid = match state {
        RunState::Stopped { stale_pid } => {
            if stale_pid.is_some() {
                let _ = std::fs::remove_file(&paths.pid_file);
            }
            return Ok(StopOutcome::NotRunning);
        }
        RunState::Running { pid } => pid,
    };
    // A PID file can name another process (edited, or a PID reused after a reboot): only
    // the process holding our conductor's lock is ever signalled, never PID 0 or 1.
    let not_it = pid.filter(|p| {
        *p <= 1 || locked && mozart_conductor::pid_holds_lock(*p, &paths.lock_file) == Some(false)
    });
    let pid = pid.filter(|p| Some(*p) != not_it);
    let unknown_pid = |what: &str| {
        let why = match not_it {
            Some(other) => format!(
                "{what}: {} names PID {other}, which is not the conductor (it does not hold its lock {}), so it is not signalled.",
                paths.pid_file.display(),
                paths.lock_file.display()
            ),
            None => format!("{what}: the conductor's PID is unknown."),
        };
        CliError::failed(why, vec![format!("Check {}", paths.pid_file.display())])
    };
    let shown = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    // The grace the running conductor gives its sheets (it may have been started with
    // `-c FILE`, or the file changed since): asked before it stops answering.
    let grace = shutdown_grace(paths);
    if force {
        let pid = pid.ok_or_else(|| unknown_pid("Cannot force-stop"))?;
        mozart_conductor::signal_conductor(pid, StopSignal::Kill)
            .map_err(|e| CliError::failed(e.to_string(), vec![]))?;
        println!("Sent SIGKILL to {} (PID {pid})", paths.who());
    } else {
        match confirm_if_jobs_running(paths, yes, command, grace)? {
            Confirm::Go => {}
            Confirm::Declined => return Ok(StopOutcome::Aborted),
        }
        if !ask_to_shut_down(paths) {
            let pid = pid
                .ok_or_else(|| unknown_pid("The conductor did not accept the shutdown request"))?;
            mozart_conductor::signal_conductor(pid, StopSignal::Term)
                .map_err(|e| CliError::failed(e.to_string(), vec![]))?;
            println!("Sent SIGTERM to {} (PID {pid})", paths.who());
        } else {
            println!("Stopping {} (PID {shown})...", paths.who());
        }
    }
    wait_until_gone(paths, pid, locked, force, grace)?;
    if force {
        // SIGKILL leaves the PID file and socket behind; nobody holds the lock now.
        let _ = std::fs::remove_file(&paths.pid_file);
        let _ = std::fs::remove_file(&paths.socket);
        let _ = std::fs::remove_file(paths.socket_record());
    }
    println!("{} stopped", paths.who());
    Ok(StopOutcome::Stopped)
}

fn quick_client(paths: &ConductorPaths) -> Option<BlockingClient> {
    BlockingClient::connect_with(
        &paths.socket,
        ClientTimeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(5),
        },
    )
    .ok()
}

/// How many jobs run, as far as can be told before stopping.
enum Running {
    /// As the conductor answered.
    Known(u64),
    /// As its registry records them (the conductor did not answer).
    Recorded(u64),
    /// Neither could be read.
    Unknown,
}

/// The answer to "stop with jobs running?".
enum Confirm {
    /// Stop.
    Go,
    /// The user answered no (or nothing).
    Declined,
}

/// `shutdown_timeout_seconds` as the running conductor has it (`daemon.config`), else as
/// the home's conductor.yaml says (a conductor that does not answer).
fn shutdown_grace(paths: &ConductorPaths) -> f64 {
    let live = quick_client(paths)
        .and_then(|mut c| c.call_value(methods::DAEMON_CONFIG, ()).ok())
        .and_then(|doc| doc.get("shutdown_timeout_seconds")?.as_f64())
        .filter(|g| g.is_finite() && *g >= 0.0);
    live.unwrap_or_else(|| {
        mozart_conductor::DaemonConfig::load(Some(&paths.config_file), None)
            .unwrap_or_default()
            .shutdown_timeout_seconds
    })
}

/// What stopping does to running jobs, in words that are true of this conductor.
fn consequences(grace: f64) -> String {
    format!(
        "Nothing new starts; running sheets get up to {grace:.0}s (shutdown_timeout_seconds) to finish, then are stopped."
    )
}

/// cli.md §2.2 step 2: with jobs running, ask (a terminal), take `--yes`, or refuse (the
/// error names `--yes`).
fn confirm_if_jobs_running(
    paths: &ConductorPaths,
    yes: bool,
    command: &str,
    grace: f64,
) -> Result<Confirm, CliError> {
    use std::io::IsTerminal;
    if yes {
        return Ok(Confirm::Go);
    }
    let asked = quick_client(paths)
        .and_then(|mut c| c.call::<_, ReadyResult>(methods::DAEMON_READY, ()).ok())
        .map(|ready| ready.running_jobs);
    // A conductor that does not answer (stopped, hung) may still run jobs: its registry
    // says which it last recorded as running; when that cannot be read either, nobody can
    // tell, and stopping is not taken as harmless.
    let running = match asked {
        Some(n) => Running::Known(n),
        None => mozart_state::Registry::open_reader(&paths.registry_db)
            .and_then(|r| r.count_jobs_by_status())
            .map_or(Running::Unknown, |counts| {
                Running::Recorded(counts.get("running").copied().unwrap_or(0))
            }),
    };
    let (headline, warning) = match running {
        Running::Known(0) | Running::Recorded(0) => return Ok(Confirm::Go),
        Running::Known(n) => (
            format!("{} running", jobs_are(n)),
            format!(
                "{} currently running.",
                mozart_config::plural(n, "job", "jobs")
            ),
        ),
        Running::Recorded(n) => (
            format!(
                "The conductor does not answer, and its registry records {} as running",
                mozart_config::plural(n, "job", "jobs")
            ),
            format!(
                "The conductor does not answer; its registry records {} as running.",
                mozart_config::plural(n, "job", "jobs")
            ),
        ),
        Running::Unknown => (
            "The conductor does not answer, and whether jobs are running cannot be read"
                .to_string(),
            "The conductor does not answer; whether jobs are running cannot be read.".to_string(),
        ),
    };
    let what = format!(
        "{} Nothing is lost: completed sheets stay completed, and an interrupted sheet runs again on the next 'mozart start' without spending a retry.",
        consequences(grace)
    );
    if !std::io::stdin().is_terminal() {
        return Err(CliError::failed(
            format!("{headline}; not stopping the conductor without confirmation."),
            vec![
                format!("Go ahead anyway: mozart {command} --yes"),
                what,
                "See what runs: mozart list".to_string(),
            ],
        ));
    }
    println!("⚠ Warning: {warning} {what}");
    print!("Proceed with stop? [y/N]: ");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(Confirm::Go)
    } else {
        Ok(Confirm::Declined)
    }
}

/// "1 job is", "2 jobs are".
fn jobs_are(n: u64) -> String {
    let verb = mozart_config::noun(&n, "is", "are");
    format!("{} {verb}", mozart_config::plural(n, "job", "jobs"))
}

fn ask_to_shut_down(paths: &ConductorPaths) -> bool {
    let Some(mut client) = quick_client(paths) else {
        return false;
    };
    client
        .call::<_, ShutdownResult>(methods::DAEMON_SHUTDOWN, ShutdownParams { graceful: true })
        .map(|r| r.shutting_down)
        .unwrap_or(false)
}

/// Wait for the lock to be released (the conductor's last act). Graceful shutdown may wait
/// for running jobs up to `grace` (the running conductor's `shutdown_timeout_seconds`), so
/// allow that plus a margin.
fn wait_until_gone(
    paths: &ConductorPaths,
    pid: Option<u32>,
    locked: bool,
    force: bool,
    grace: f64,
) -> Result<(), CliError> {
    let limit = if force {
        Duration::from_secs(10)
    } else {
        Duration::try_from_secs_f64(grace).unwrap_or(Duration::from_secs(300))
            + Duration::from_secs(30)
    };
    let deadline = Instant::now() + limit;
    loop {
        let lock_free = matches!(
            mozart_conductor::probe_instance(paths),
            RunState::Stopped { .. }
        );
        // A dead but unreaped conductor still "exists" for kill(0); its lock is gone though.
        let exited = pid.is_none_or(|p| !mozart_conductor::pid_running(p));
        let gone = if locked { lock_free && exited } else { exited };
        if gone {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CliError::failed(
                format!(
                    "The conductor did not exit within {}.",
                    mozart_config::plural(limit.as_secs(), "second", "seconds")
                ),
                vec!["Try 'mozart stop --force' to send SIGKILL.".to_string()],
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
