//! Restart recovery (conductor.md §11, ported intent): jobs that were queued or running when
//! the conductor died are resumed from their checkpoint — completed sheets are never redone
//! and in-flight attempts run again without spending a retry. Paused jobs stay paused.

use mozart_state::DaemonJobStatus;

use super::{lock, JobEntry, JobManager, SubmitRequest};
use crate::{ConductorCtx, ConductorError};

pub(super) async fn recover(mgr: &JobManager, ctx: &ConductorCtx) -> Result<(), ConductorError> {
    let rows = lock(&mgr.shared.registry)
        .list_jobs(false)
        .map_err(|e| ConductorError::Recovery(format!("cannot read the job registry: {e}")))?;
    let mut resumed = 0usize;
    let mut failed = 0usize;
    for record in rows {
        match record.status {
            DaemonJobStatus::Queued | DaemonJobStatus::Running => {
                let job_id = record.job_id.clone();
                let req = SubmitRequest {
                    config_path: record.config_path.clone(),
                    workspace: Some(record.workspace.clone()),
                    resume_of: Some(job_id.clone()),
                    chain_depth: record.chain_depth,
                    ..SubmitRequest::default()
                };
                let resp = super::submit::submit(mgr, ctx, req).await;
                if resp.status == mozart_ipc::types::JobResponseStatus::Accepted {
                    resumed += 1;
                } else {
                    failed += 1;
                    let msg = format!(
                        "Conductor restarted while job was active and it could not be resumed: {}",
                        resp.message.unwrap_or_default()
                    );
                    mgr.set_status(&job_id, DaemonJobStatus::Failed, Some(&msg));
                }
            }
            DaemonJobStatus::Paused => {
                lock(&mgr.shared.jobs).insert(
                    record.job_id.clone(),
                    JobEntry {
                        record,
                        live: None,
                        run: None,
                    },
                );
            }
            _ => {}
        }
    }
    tracing::info!(resumed, failed, "manager.orphans_recovered");
    Ok(())
}
