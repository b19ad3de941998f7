//! Finding and talking to the conductor from CLI commands (cli.md §1.5): the connection and
//! call logic is `mozart_client::blocking`; here its [`ClientError`] becomes the CLI's
//! error, in one function ([`user_error`]).

use std::path::Path;

use mozart_client::{blocking, ClientError};
use mozart_ipc::paths::ConductorPaths;
use mozart_ipc::{BlockingClient, IpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{CliError, ErrorKind, Globals, OutputMode};

pub use mozart_client::hints::{NOT_RUNNING, START_HINT};

/// Paths of the conductor these globals address (clone-aware), with an optional `--socket`.
pub fn paths(globals: &Globals, socket: Option<&Path>) -> Result<ConductorPaths, CliError> {
    ConductorPaths::discover(socket, globals.conductor_clone.as_deref())
        .map_err(|err| CliError::failed(err.to_string(), vec![]))
}

/// The standard "not running" failure.
pub fn not_running(mode: OutputMode) -> CliError {
    user_error(ClientError::NotRunning, mode)
}

/// What the user is told about a failed conductor call (cli.md §1.5 table), printed in
/// `mode`.
pub fn user_error(err: ClientError, mode: OutputMode) -> CliError {
    let message = match err {
        ClientError::NotRunning => return not_running_here(mode),
        ClientError::Untrusted { problem, fix } => {
            return CliError::of(ErrorKind::Untrusted, problem, vec![fix], mode)
        }
        ClientError::Unsupported {
            method,
            not_implemented: true,
        } => format!("The conductor does not implement '{method}' yet."),
        ClientError::Unsupported { method, .. } => format!(
            "Conductor does not support '{method}'. Restart the conductor to pick up code changes: mozart restart"
        ),
        other => other.to_string(),
    };
    CliError::of(ErrorKind::Command, message, vec![], mode)
}

/// "Not running", said of the conductor this command selected (a clone by its name), or,
/// when that conductor runs but listens on another socket than the one named, where it
/// listens ([`elsewhere`]).
fn not_running_here(mode: OutputMode) -> CliError {
    let clone = crate::selector::clone();
    if let Ok(paths) = ConductorPaths::discover(None, clone) {
        if let Some(err) = elsewhere(&paths, false, mode) {
            return err;
        }
    }
    let message = match clone {
        None => NOT_RUNNING.to_string(),
        Some("") => "The default clone conductor is not running.".to_string(),
        Some(name) => format!("Clone conductor '{name}' is not running."),
    };
    CliError::of(
        ErrorKind::NotRunning,
        message,
        vec![START_HINT.to_string()],
        mode,
    )
}

/// Whether a socket was named for this command: `--socket` (`flag`) or `$MOZART_SOCKET`.
pub fn socket_named(flag: bool) -> bool {
    flag || std::env::var_os(mozart_ipc::paths::SOCKET_ENV).is_some_and(|v| !v.is_empty())
}

/// The conductor of `paths` (production, or the clone) runs — it holds its lock — but listens
/// on another socket than the one named (`--socket`: `flag`, else `$MOZART_SOCKET`), which
/// nothing answers: a home runs one conductor, so this command is told where it listens and
/// how to reach it, instead of "not running" (or a wait for it to answer there).
pub fn elsewhere(paths: &ConductorPaths, flag: bool, mode: OutputMode) -> Option<CliError> {
    let real = paths.running_socket()?;
    if real == paths.socket || blocking::health_pid(&paths.socket).ok().flatten().is_some() {
        return None;
    }
    let pid = match mozart_conductor::probe_instance(paths) {
        mozart_conductor::RunState::Running { pid: Some(pid) } => format!(" (PID {pid})"),
        _ => String::new(),
    };
    let who = match paths.who() {
        "clone conductor" => "The clone conductor",
        _ => "The Mozart conductor",
    };
    let (named_by, reach) = if flag {
        (
            "--socket",
            format!("Reach it with: --socket {}", real.display()),
        )
    } else {
        (
            "$MOZART_SOCKET",
            format!(
                "Reach it with: export MOZART_SOCKET={} (or unset MOZART_SOCKET)",
                real.display()
            ),
        )
    };
    Some(CliError::of(
        ErrorKind::Command,
        format!(
            "{who} of {}{pid} runs, listening on {}, not on {} (the socket {named_by} names)",
            paths.home.display(),
            real.display(),
            paths.socket.display()
        ),
        vec![
            reach,
            format!(
                "A Mozart home runs one conductor: for one on {}, start it with a home of its own (MOZART_HOME=DIR)",
                paths.socket.display()
            ),
        ],
        mode,
    ))
}

/// The failure for a connection that did not happen: the refusal of an untrusted socket
/// (who owns it, what to do), else the standard "not running".
pub fn connect_error(err: IpcError, mode: OutputMode) -> CliError {
    user_error(ClientError::from_connect(err), mode)
}

/// Connect to the conductor for these globals (human error output).
pub fn connect(globals: &Globals) -> Result<BlockingClient, CliError> {
    connect_in(globals, OutputMode::Human)
}

/// Connect to the conductor for these globals; its failure prints in `mode`.
pub fn connect_in(globals: &Globals, mode: OutputMode) -> Result<BlockingClient, CliError> {
    let paths = paths(globals, None)?;
    connect_socket(&paths.socket, mode)
}

/// Connect to a specific socket, after a `daemon.health` probe on its own connection.
pub fn connect_socket(socket: &Path, mode: OutputMode) -> Result<BlockingClient, CliError> {
    blocking::connect_probed(socket).map_err(|e| user_error(e, mode))
}

/// Connect for a call whose own answer says whether the conductor is there (`status`,
/// `list`, the job commands): no `daemon.health` probe first.
pub fn connect_direct(globals: &Globals, mode: OutputMode) -> Result<BlockingClient, CliError> {
    let paths = paths(globals, None)?;
    blocking::connect_direct(&paths.socket).map_err(|e| user_error(e, mode))
}

/// Connect and make one call, mapping every failure to a CLI error.
pub fn call<P: Serialize, R: DeserializeOwned>(
    globals: &Globals,
    method: &str,
    params: P,
    mode: OutputMode,
) -> Result<R, CliError> {
    let mut client = connect_in(globals, mode)?;
    blocking::call(&mut client, method, params).map_err(|e| user_error(e, mode))
}

/// Translate a failed call into what the user sees (cli.md §1.5 table).
pub fn call_error(err: IpcError, mode: OutputMode) -> CliError {
    user_error(ClientError::from_call(err), mode)
}

/// The conductor `paths` names, and whether the home's instance lock is that conductor's
/// (what `stop` waits to see released). With a socket named on the command line
/// (`--socket`) the conductor is the one answering there: the home's lock and PID file may
/// be another conductor's (one listening elsewhere), which `stop` must not signal and
/// `conductor-status` must not report; nothing answering there is "not running".
pub fn conductor_at(
    paths: &ConductorPaths,
    explicit_socket: bool,
    mode: OutputMode,
) -> Result<(mozart_conductor::RunState, bool), CliError> {
    use mozart_conductor::RunState;
    let probe = mozart_conductor::probe_instance(paths);
    let lock_pid = match probe {
        RunState::Running { pid } => Some(pid),
        RunState::Stopped { .. } => None,
    };
    // `$MOZART_SOCKET` naming another socket than the one the home's running conductor
    // recorded means the conductor there, as `--socket` does; naming its own (or with no
    // record yet: it is starting) the lock decides, so a hung conductor is still found.
    let env_elsewhere = socket_named(false)
        && paths
            .running_socket()
            .is_some_and(|real| real != paths.socket);
    if !explicit_socket && !env_elsewhere {
        return Ok((state_after(paths, probe, mode)?, lock_pid.is_some()));
    }
    match blocking::health_pid(&paths.socket).map_err(|e| user_error(e, mode))? {
        Some(pid) => Ok((
            RunState::Running { pid: Some(pid) },
            lock_pid == Some(Some(pid)),
        )),
        None => match elsewhere(paths, explicit_socket, mode) {
            Some(err) => Err(err),
            None => Ok((RunState::Stopped { stale_pid: None }, false)),
        },
    }
}

/// Is a conductor running at these paths? The instance lock decides; a conductor that
/// holds no lock of ours but answers on the socket (e.g. upstream's) counts as running. A
/// socket another user controls is an error (printed in `mode`): it is neither
/// our conductor nor free.
pub fn conductor_state(
    paths: &ConductorPaths,
    mode: OutputMode,
) -> Result<mozart_conductor::RunState, CliError> {
    state_after(paths, mozart_conductor::probe_instance(paths), mode)
}

/// [`conductor_state`] from a probe of the instance lock already made.
fn state_after(
    paths: &ConductorPaths,
    probe: mozart_conductor::RunState,
    mode: OutputMode,
) -> Result<mozart_conductor::RunState, CliError> {
    use mozart_conductor::RunState;
    match probe {
        RunState::Running { pid } => Ok(RunState::Running { pid }),
        stopped @ RunState::Stopped { .. } => {
            match blocking::health_pid(&paths.socket).map_err(|e| user_error(e, mode))? {
                Some(pid) => Ok(RunState::Running { pid: Some(pid) }),
                None => Ok(stopped),
            }
        }
    }
}

/// Hints for `mozart COMMAND ID --workspace DIR` when no conductor runs and `DIR` holds no
/// state of `ID`: every job's state (and attempt history) is in the conductor's registry, a
/// workspace holds a copy only for a score with `state_backend: json`; start the conductor.
pub fn no_workspace_state_hints(
    globals: &Globals,
    command: &str,
    id: &str,
    dir: &Path,
) -> Vec<String> {
    vec![
        format!(
            "{} has no {id}.json state file: a workspace holds one only for a score with `state_backend: json`; every job's state is in the conductor's registry ({})",
            dir.display(),
            registry_text(globals)
        ),
        format!("Start the conductor (mozart start), then run: mozart {command} {id}"),
    ]
}

/// Where the conductor's job registry is, in words (its path when the paths resolve).
pub fn registry_text(globals: &Globals) -> String {
    paths(globals, None).map_or_else(
        |_| "registry.db in the Mozart home".to_string(),
        |p| p.registry_db.display().to_string(),
    )
}
