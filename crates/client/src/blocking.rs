//! Connecting to the conductor from a command that waits for each answer (the CLI).
//!
//! [`connect_probed`] probes `daemon.health` on one connection and hands back a fresh one
//! for the real call, as upstream's CLI does; [`connect_direct`] skips the probe for a call
//! whose own answer says whether the conductor is there.

use std::path::Path;
use std::time::Duration;

use mozart_ipc::types::HealthResult;
use mozart_ipc::{methods, BlockingClient, ClientTimeouts, IpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ClientError;

/// Connect after a `daemon.health` probe on its own connection.
pub fn connect_probed(socket: &Path) -> Result<BlockingClient, ClientError> {
    let mut probe = BlockingClient::connect(socket).map_err(ClientError::from_connect)?;
    probe
        .call::<_, HealthResult>(methods::DAEMON_HEALTH, ())
        .map_err(|_| ClientError::NotRunning)?;
    BlockingClient::connect(socket).map_err(ClientError::from_connect)
}

/// Connect without a probe: a socket nobody listens on fails the connection, which is the
/// standard "not running" as the probe's would be. A probe on its own connection costs a
/// second connection and a round trip, which waits for a free conductor thread while a
/// large job runs (issue 24).
pub fn connect_direct(socket: &Path) -> Result<BlockingClient, ClientError> {
    BlockingClient::connect(socket).map_err(ClientError::from_connect)
}

/// One call on a connection, its failure sorted ([`ClientError::from_call`]).
pub fn call<P: Serialize, R: DeserializeOwned>(
    client: &mut BlockingClient,
    method: &str,
    params: P,
) -> Result<R, ClientError> {
    client.call(method, params).map_err(ClientError::from_call)
}

/// Whether something answers `daemon.health` on `socket` within a few seconds: its PID
/// when it does, `None` when nothing does. A socket another user controls is an error.
pub fn health_pid(socket: &Path) -> Result<Option<u32>, ClientError> {
    let answered = BlockingClient::connect_with(
        socket,
        ClientTimeouts {
            connect: Duration::from_secs(2),
            response: Duration::from_secs(5),
        },
    )
    .and_then(|mut c| c.call::<_, HealthResult>(methods::DAEMON_HEALTH, ()));
    match answered {
        Ok(health) => Ok(Some(health.pid)),
        Err(err @ IpcError::Untrusted { .. }) => Err(ClientError::from_connect(err)),
        Err(_) => Ok(None),
    }
}
