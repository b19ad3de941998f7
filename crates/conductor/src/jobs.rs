//! The seam where a job engine plugs into the daemon.
//!
//! The conductor is the daemon shell (paths, lock, socket, signals, `daemon.*` methods). The
//! job engine (`mozart-jobs`) is handed to it at `mozart start` as a [`JobEngine`]; without
//! one (a bare daemon used by lifecycle tests) every `job.*` method answers with an explicit
//! "not implemented" error.

use std::sync::Arc;

use mozart_ipc::RpcModule;

use crate::{ConductorCtx, ConductorError};

/// A job engine the daemon can run: creates its [`crate::JobHost`], puts it on the context
/// with [`ConductorCtx::install_job_host`], and registers every `job.*` method of
/// conductor.md §8 on `module`. Called once at startup before the socket is bound; the
/// lifecycle then runs the host's `recover` after binding and before READY.
pub trait JobEngine: Send + Sync + std::fmt::Debug + 'static {
    /// Install the engine on a fresh conductor.
    fn install(
        &self,
        ctx: &Arc<ConductorCtx>,
        module: &mut RpcModule<Arc<ConductorCtx>>,
    ) -> Result<(), ConductorError>;
}

/// Install `engine`, or, without one, answer every `job.*` method with "not implemented".
pub(crate) fn install(
    engine: Option<&dyn JobEngine>,
    ctx: &Arc<ConductorCtx>,
    module: &mut RpcModule<Arc<ConductorCtx>>,
) -> Result<(), ConductorError> {
    if let Some(engine) = engine {
        return engine.install(ctx, module);
    }
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
