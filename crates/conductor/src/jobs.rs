//! `job.*` methods and the job engine's hooks into the daemon lifecycle.
//!
//! With the `jobs` feature (the default build of the `mozart` binary) the [`crate::manager`]
//! job engine is installed: registry, baton loop, instruments. Without it (a bare daemon used
//! by lifecycle tests) every `job.*` method answers with an explicit "not implemented" error.

use std::sync::Arc;

use mozart_ipc::RpcModule;

use crate::{ConductorCtx, ConductorError};

/// Create the job engine, put it on the context with [`ConductorCtx::install_job_host`], and
/// register every `job.*` method of conductor.md §8 on `module`. Called once at startup
/// before the socket is bound; the lifecycle then runs the host's `recover` after binding
/// and before READY.
#[cfg(feature = "jobs")]
pub fn install(
    ctx: &Arc<ConductorCtx>,
    module: &mut RpcModule<Arc<ConductorCtx>>,
) -> Result<(), ConductorError> {
    let manager = crate::manager::JobManager::open(ctx)?;
    ctx.install_job_host(Arc::new(manager.clone()))?;
    crate::manager::register_rpc(module, manager)
}

/// Without the job engine: every `job.*` method says it is not implemented.
#[cfg(not(feature = "jobs"))]
pub fn install(
    _ctx: &Arc<ConductorCtx>,
    module: &mut RpcModule<Arc<ConductorCtx>>,
) -> Result<(), ConductorError> {
    use mozart_ipc::{methods, ErrorObjectOwned, RpcError};
    for name in methods::JOB_METHODS {
        module
            .register_method(name, move |_, _, _| {
                Err::<serde_json::Value, ErrorObjectOwned>(RpcError::not_implemented(name).into())
            })
            .map_err(|err| ConductorError::Register(err.to_string()))?;
    }
    Ok(())
}
