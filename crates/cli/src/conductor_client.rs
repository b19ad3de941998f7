//! Finding and talking to the conductor from CLI commands (cli.md §1.5).
//!
//! `connect` probes `daemon.health` on one connection and hands back a fresh connection for
//! the real call, as upstream's CLI does; anything that fails before the probe answers is
//! the standard "Mozart conductor is not running." failure. `status`, `list` and the job
//! commands connect without the probe ([`connect_direct`]).

use std::path::Path;

use mozart_ipc::paths::ConductorPaths;
use mozart_ipc::types::HealthResult;
use mozart_ipc::{methods, BlockingClient, IpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{CliError, Globals};

/// The standard message when no conductor answers.
pub const NOT_RUNNING: &str = "Mozart conductor is not running.";
/// The standard hint that goes with it.
pub const START_HINT: &str = "Start it with: mozart start";

/// Paths of the conductor these globals address (clone-aware), with an optional `--socket`.
pub fn paths(globals: &Globals, socket: Option<&Path>) -> Result<ConductorPaths, CliError> {
    ConductorPaths::discover(socket, globals.conductor_clone.as_deref())
        .map_err(|err| CliError::failed(err.to_string(), vec![]))
}

/// The standard "not running" failure (human or JSON).
pub fn not_running(json: bool) -> CliError {
    CliError::Failed {
        message: NOT_RUNNING.to_string(),
        hints: vec![START_HINT.to_string()],
        json,
    }
}

/// The failure for a connection that did not happen: the refusal of an untrusted socket
/// (who owns it, what to do), else the standard "not running".
pub fn connect_error(err: IpcError, json: bool) -> CliError {
    match err {
        IpcError::Untrusted { problem, fix, .. } => CliError::Untrusted {
            message: problem,
            hints: vec![fix],
            json,
        },
        _ => not_running(json),
    }
}

/// Connect to the conductor for these globals (human error output).
pub fn connect(globals: &Globals) -> Result<BlockingClient, CliError> {
    connect_json(globals, false)
}

/// Connect to the conductor for these globals; `json` selects the error output format.
pub fn connect_json(globals: &Globals, json: bool) -> Result<BlockingClient, CliError> {
    let paths = paths(globals, None)?;
    connect_socket(&paths.socket, json)
}

/// Connect to a specific socket, after a `daemon.health` probe on its own connection.
pub fn connect_socket(socket: &Path, json: bool) -> Result<BlockingClient, CliError> {
    let mut probe = BlockingClient::connect(socket).map_err(|e| connect_error(e, json))?;
    probe
        .call::<_, HealthResult>(methods::DAEMON_HEALTH, ())
        .map_err(|_| not_running(json))?;
    BlockingClient::connect(socket).map_err(|e| connect_error(e, json))
}

/// Connect for a call whose own answer says whether the conductor is there (`status`,
/// `list`, the job commands): no `daemon.health` probe first. A socket nobody listens on
/// fails the connection, which is the standard "not running" failure as the probe's would
/// be; a probe on its own connection cost every such command a second connection and a
/// round trip, which waits for a free conductor thread while a large job runs (issue 24).
pub fn connect_direct(globals: &Globals, json: bool) -> Result<BlockingClient, CliError> {
    let paths = paths(globals, None)?;
    BlockingClient::connect(&paths.socket).map_err(|e| connect_error(e, json))
}

/// Connect and make one call, mapping every failure to a CLI error.
pub fn call<P: Serialize, R: DeserializeOwned>(
    globals: &Globals,
    method: &str,
    params: P,
    json: bool,
) -> Result<R, CliError> {
    let mut client = connect_json(globals, json)?;
    client
        .call(method, params)
        .map_err(|err| call_error(err, json))
}

/// Translate a failed call into what the user sees (cli.md §1.5 table).
pub fn call_error(err: IpcError, json: bool) -> CliError {
    let message = match &err {
        IpcError::NotRunning { .. } | IpcError::Untrusted { .. } => {
            return connect_error(err, json)
        }
        IpcError::Rpc { method, error } if error.is_method_not_found() => {
            let not_implemented = error
                .data
                .as_ref()
                .and_then(|d| d.get("reason"))
                .is_some_and(|r| r == "not_implemented");
            if not_implemented {
                format!("The conductor does not implement '{method}' yet.")
            } else {
                format!(
                    "Conductor does not support '{method}'. Restart the conductor to pick up code changes: mozart restart"
                )
            }
        }
        IpcError::Rpc { error, .. } => error.message.clone(),
        other => other.to_string(),
    };
    CliError::Failed {
        message,
        hints: vec![],
        json,
    }
}

/// Is a conductor running at these paths? The instance lock decides; a conductor that
/// holds no lock of ours but answers on the socket (e.g. upstream's) counts as running. A
/// socket another user controls is an error (`json` selects its format): it is neither
/// our conductor nor free.
pub fn conductor_state(
    paths: &ConductorPaths,
    json: bool,
) -> Result<mozart_conductor::RunState, CliError> {
    use mozart_conductor::RunState;
    match mozart_conductor::probe_instance(paths) {
        RunState::Running { pid } => Ok(RunState::Running { pid }),
        stopped @ RunState::Stopped { .. } => {
            let answered = BlockingClient::connect_with(
                &paths.socket,
                mozart_ipc::ClientTimeouts {
                    connect: std::time::Duration::from_secs(2),
                    response: std::time::Duration::from_secs(5),
                },
            )
            .and_then(|mut c| c.call::<_, HealthResult>(methods::DAEMON_HEALTH, ()));
            match answered {
                Ok(health) => Ok(RunState::Running {
                    pid: Some(health.pid),
                }),
                Err(err @ IpcError::Untrusted { .. }) => Err(connect_error(err, json)),
                Err(_) => Ok(stopped),
            }
        }
    }
}
