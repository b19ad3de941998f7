//! `job.*` methods and the job engine's hooks into the daemon lifecycle.
//!
//! Placeholder owned by the JobManager work: every `job.*` method answers with an explicit
//! "not implemented yet" error (`-32601`, which upstream's CLI shows as "Conductor does not
//! support '<method>'"), and no job host is installed.

use std::sync::Arc;

use mozart_ipc::{methods, ErrorObjectOwned, RpcError, RpcModule};

use crate::{ConductorCtx, ConductorError};

/// Register every `job.*` method of conductor.md §8.
pub fn register_job_methods(
    module: &mut RpcModule<Arc<ConductorCtx>>,
) -> Result<(), ConductorError> {
    for name in methods::JOB_METHODS {
        module
            .register_method(name, move |_, _, _| {
                Err::<serde_json::Value, ErrorObjectOwned>(RpcError::not_implemented(name).into())
            })
            .map_err(|err| ConductorError::Register(err.to_string()))?;
    }
    Ok(())
}

/// Create the job engine (open the registry, …) and put it on the context with
/// [`ConductorCtx::install_job_host`]. Called once at startup before the socket is bound;
/// the lifecycle then runs the host's `recover` after binding and before READY.
pub fn install(_ctx: &Arc<ConductorCtx>) -> Result<(), ConductorError> {
    Ok(())
}
