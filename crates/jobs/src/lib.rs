//! The Mozart job engine: the job manager (submit, status, pause, resume, cancel, modify,
//! restart recovery), workspaces and their lifecycle, git-worktree isolation, cross-sheet
//! context, hooks and concerts — wired to the baton loop, the SQLite registry, the
//! instruments and the learning store.
//!
//! The conductor (`mozart-conductor`) is the daemon shell; this crate plugs into it as a
//! [`mozart_conductor::JobEngine`] ([`Jobs`]), which `mozart start` hands to the daemon.

use std::sync::Arc;

use mozart_conductor::{ConductorCtx, ConductorError, JobEngine};
use mozart_ipc::RpcModule;

pub mod cross_sheet;
pub mod isolation;
pub mod manager;
pub mod sheet_worktrees;
pub mod wire;
pub mod workspace;

/// The job engine, as `mozart start` wires it into the conductor.
#[derive(Debug, Clone, Copy, Default)]
pub struct Jobs;

impl JobEngine for Jobs {
    fn install(
        &self,
        ctx: &Arc<ConductorCtx>,
        module: &mut RpcModule<Arc<ConductorCtx>>,
    ) -> Result<(), ConductorError> {
        // At daemon start, before any instrument runs: what an instrument detaches (setsid,
        // a double fork, nohup) is re-parented to the conductor instead of init, where its
        // attempt's clean-up finds it (mozart_backends::descendants).
        mozart_backends::subreaper::install();
        let manager = manager::JobManager::open(ctx)?;
        ctx.install_job_host(Arc::new(manager.clone()))?;
        manager::register_rpc(module, manager)
    }
}
