//! Restart recovery (conductor.md §11, ported intent): jobs that were queued or running when
//! the conductor died are resumed from their checkpoint — completed sheets are never redone
//! and in-flight attempts run again without spending a retry. Paused jobs stay paused.

use mozart_state::DaemonJobStatus;

use super::{lock, JobEntry, JobManager, SubmitRequest};
use mozart_conductor::{ConductorCtx, ConductorError};

pub(super) async fn recover(
    mgr: &JobManager,
    ctx: &std::sync::Arc<ConductorCtx>,
) -> Result<(), ConductorError> {
    let mut rows = lock(&mgr.shared.registry).list_jobs(true).map_err(|e| {
        super::registry_error(&ctx.paths.registry_db, "cannot read the job registry", &e)
    })?;
    // Jobs are re-registered in the order they take job slots (`max_concurrent_jobs`): the
    // ones that held a slot (running) first, then the queued ones, each oldest submission
    // first — so a queued job stays queued behind them, in its place.
    rows.sort_by(|a, b| {
        let rank = |s: DaemonJobStatus| u8::from(s != DaemonJobStatus::Running);
        rank(a.status)
            .cmp(&rank(b.status))
            .then(a.submitted_at.total_cmp(&b.submitted_at))
    });
    park_rate_limited_instruments(mgr);
    remove_remote_leftovers(mgr);
    let mut resumed = 0usize;
    let mut failed = 0usize;
    // Paused jobs a `modify --resume` was to resume with a new score once their running
    // sheets finished: the stop finished them (or made them pending), so they resume now.
    let mut modified = Vec::new();
    for record in rows {
        if matches!(
            record.status,
            DaemonJobStatus::Queued | DaemonJobStatus::Running | DaemonJobStatus::Paused
        ) {
            // The attempts the stop cut short go in the history before their sheets run again.
            let interrupted =
                lock(&mgr.shared.registry).record_interrupted_attempts(&record.job_id);
            if let Err(e) = interrupted {
                tracing::warn!(job_id = %record.job_id, error = %e, "cannot record the interrupted attempts");
            }
        }
        // Checked for each job: space freed meanwhile lets the rest resume.
        let disk_full = matches!(
            record.status,
            DaemonJobStatus::Queued | DaemonJobStatus::Running
        )
        .then(|| mozart_conductor::probe::disk_full(&ctx.paths.home))
        .flatten();
        match record.status {
            DaemonJobStatus::Queued | DaemonJobStatus::Running if disk_full.is_some() => {
                hold_on_full_disk(mgr, record, disk_full.as_deref().unwrap_or_default());
            }
            DaemonJobStatus::Queued | DaemonJobStatus::Running => {
                let job_id = record.job_id.clone();
                let req = SubmitRequest {
                    config_path: record.config_path.clone(),
                    workspace: Some(record.workspace.clone()),
                    resume_of: Some(job_id.clone()),
                    chain_depth: record.chain_depth,
                    ..SubmitRequest::default()
                };
                // The job goes on: its channels heard its start before the restart.
                lock(&mgr.shared.quiet_starts).insert(job_id.clone());
                // A running job's run goes on with the time it has had: its job timeout
                // counts from when the run got its slot (a queued one has not started).
                if record.status == DaemonJobStatus::Running {
                    if let Some(at) = record
                        .options
                        .get(super::host::RUN_CLOCK)
                        .and_then(serde_json::Value::as_f64)
                    {
                        lock(&mgr.shared.restored_clocks).insert(job_id.clone(), at);
                    }
                }
                let resp = super::submit::submit(mgr, ctx, req).await;
                if resp.status == mozart_ipc::types::JobResponseStatus::Accepted {
                    resumed += 1;
                } else {
                    lock(&mgr.shared.quiet_starts).remove(&job_id);
                    failed += 1;
                    let msg = format!(
                        "Conductor restarted while job was active and it could not be resumed: {}",
                        resp.message.unwrap_or_default()
                    );
                    end_unresumable(mgr, &job_id, &msg);
                    mgr.set_status(&job_id, DaemonJobStatus::Failed, Some(&msg))
                        .await;
                }
            }
            DaemonJobStatus::Completed
                if record.options.contains_key(super::hooks::HOOKS_PENDING) =>
            {
                // Completed, but the conductor died before its hooks finished: run them now
                // so the concert continues.
                match mozart_config::load_score(std::path::Path::new(&record.config_path)) {
                    Ok(score) => {
                        // Its `job_complete` (or `job_failed`) is sent when they end, as it
                        // would have been had the conductor not stopped.
                        let notice = lock(&mgr.shared.registry)
                            .load_checkpoint(&record.job_id)
                            .ok()
                            .flatten()
                            .and_then(|live| {
                                super::notify::completion_of(
                                    &record.job_id,
                                    &score.config.notifications,
                                    &live,
                                )
                            })
                            .map(|ctx| (score.config.notifications.clone(), ctx));
                        let req = super::hooks::HookRequest {
                            job_id: record.job_id.clone(),
                            score_dir: std::path::Path::new(&record.config_path)
                                .parent()
                                .map(std::path::Path::to_path_buf)
                                .unwrap_or_default(),
                            workspace: record.workspace.clone().into(),
                            hooks: score.config.on_success.clone(),
                            concert: score.config.concert.clone(),
                            chain_depth: record.chain_depth.unwrap_or(0),
                            notice,
                        };
                        if let Some(tx) = mgr.shared.hook_tx.get() {
                            let _ = tx.send(req);
                        }
                    }
                    Err(e) => {
                        tracing::error!(job_id = %record.job_id, error = %e, "cannot reload score to run pending hooks")
                    }
                }
            }
            DaemonJobStatus::Paused => {
                // A sheet the restart interrupted (the job was pausing) runs on `resume`,
                // not now: its row says pending, not in progress.
                let requeued =
                    lock(&mgr.shared.registry).requeue_interrupted_sheets(&record.job_id);
                match requeued {
                    Ok(0) => {}
                    Ok(sheets) => {
                        tracing::info!(job_id = %record.job_id, sheets, "job.interrupted_sheets_requeued")
                    }
                    Err(e) => {
                        tracing::error!(job_id = %record.job_id, error = %e, "cannot requeue the interrupted sheets of a paused job")
                    }
                }
                withdraw_queued_slurm_jobs(mgr, &record.job_id).await;
                if let Some(pending) = record.options.get(super::table::PENDING_MODIFY) {
                    if let Some(config) = pending["config_path"].as_str() {
                        modified.push((
                            record.job_id.clone(),
                            config.to_string(),
                            pending["workspace"].as_str().map(str::to_string),
                        ));
                    }
                }
                let entry = JobEntry::new(record, None, None);
                lock(&mgr.shared.loaded).insert(entry.record.job_id.clone());
                mgr.shared
                    .table
                    .tell(super::table::Fact::JobLoaded(Box::new(entry)));
            }
            _ => {}
        }
    }
    for (job_id, config, workspace) in modified {
        tracing::info!(job_id, config, "pending modify resumed after the restart");
        super::rpc::resume_pending_modify(mgr, ctx, job_id, config, workspace);
    }
    tracing::info!(resumed, failed, "manager.orphans_recovered");
    Ok(())
}

/// The files of the remote attempts whose results the previous conductor saved but which it
/// did not live to remove (a kill between the commit and the removal): removed now, off the
/// start (a shared filesystem may be slow), and then forgotten. Nothing re-attaches to them.
fn remove_remote_leftovers(mgr: &JobManager) {
    let dirs = match lock(&mgr.shared.registry).remote_leftovers() {
        Ok(dirs) if dirs.is_empty() => return,
        Ok(dirs) => dirs,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read which finished Slurm attempts' files are left");
            return;
        }
    };
    let shared = mgr.shared.clone();
    let work = move || {
        let dirs: Vec<_> = dirs.into_iter().map(std::path::PathBuf::from).collect();
        super::host::remove_finished_remote(&shared, &dirs);
        tracing::info!(
            attempts = dirs.len(),
            "removed the files of finished Slurm attempts a stop left behind"
        );
    };
    if let Err(e) = std::thread::Builder::new()
        .name("mozart-slurm-files".into())
        .spawn(work)
    {
        tracing::warn!(error = %e, "cannot start a thread to remove finished Slurm attempts' files");
    }
}

/// The Slurm jobs of a paused job's sheets that still wait in Slurm's queue: the pause
/// withdraws them, but the conductor stopped before it had (or Slurm could not be asked
/// then). Nothing follows them while the job is paused, so they would start on the cluster
/// and run the sheets of a paused job; they are withdrawn now, as the pause would have, and
/// their sheets are plain pending sheets that `mozart resume` submits anew. A job that
/// started is kept: the resume collects its result.
async fn withdraw_queued_slurm_jobs(mgr: &JobManager, job_id: &str) {
    let Some(checkpoint) = mgr.stored_checkpoint(job_id, "to withdraw its queued Slurm jobs")
    else {
        return;
    };
    let mut withdrawn = Vec::new();
    for sheet in checkpoint.sheets.values() {
        let Some(remote) = sheet
            .remote_attempt
            .as_ref()
            .filter(|r| r.placement == "slurm")
        else {
            continue;
        };
        let dir = std::path::Path::new(&remote.dir);
        match mozart_backends::placement::slurm::withdraw_unfollowed(&remote.remote_id, dir).await {
            Ok(()) => {
                tracing::info!(job_id, sheet = sheet.sheet_num, slurm_job = %remote.remote_id,
                    "withdrew a paused job's Slurm job from the queue before it started (the conductor had stopped before the pause did)");
                let mut sheet = sheet.clone();
                sheet.remote_attempt = None;
                withdrawn.push(sheet);
            }
            Err(why) => {
                tracing::info!(job_id, sheet = sheet.sheet_num, slurm_job = %remote.remote_id, why = %why,
                    "a paused job's Slurm job is kept: `mozart resume` collects its result");
            }
        }
    }
    if withdrawn.is_empty() {
        return;
    }
    if let Err(e) = lock(&mgr.shared.registry).save_sheets(job_id, &withdrawn) {
        tracing::error!(job_id, error = %e, "cannot clear the records of the withdrawn Slurm jobs");
    }
}

/// A job that was running when the conductor died, restarted on a full disk: its resubmission
/// would be refused (no room to save its state), and a failed job would read as if its work
/// were at fault. It is held paused instead, saying why and what to do; `mozart resume`
/// goes on from its checkpoint once space is freed. (Its row may not be writable now: the
/// next start then holds it again.)
fn hold_on_full_disk(mgr: &JobManager, mut record: mozart_state::JobRecord, full: &str) {
    let job_id = record.job_id.clone();
    let msg = format!(
        "The conductor restarted on a full disk and could not resume the job: {full}. Free some space, then run: mozart resume {job_id}"
    );
    tracing::error!(job_id = %job_id, "job held paused: the disk is full");
    {
        let registry = lock(&mgr.shared.registry);
        if let Err(e) = registry.requeue_interrupted_sheets(&job_id) {
            tracing::warn!(job_id = %job_id, error = %e, "cannot requeue the interrupted sheets of a job held on a full disk");
        }
        if let Err(e) = registry.set_job_status(&job_id, DaemonJobStatus::Paused, Some(&msg)) {
            tracing::warn!(job_id = %job_id, error = %e, "cannot save the pause of a job held on a full disk");
        }
    }
    // What `status` shows, read from the registry (reads work on a full disk) and held
    // paused in memory: no sheet shown running that nothing runs.
    let live = match lock(&mgr.shared.registry).load_checkpoint(&job_id) {
        Ok(Some(mut cp)) => {
            let interrupted: Vec<u32> = cp
                .sheets
                .statuses()
                .filter(|(_, s)| *s == mozart_state::SheetStatus::InProgress)
                .map(|(n, _)| n)
                .collect();
            for num in interrupted {
                if let Some(sheet) = cp.sheets.get_mut(&num) {
                    sheet.status = mozart_state::SheetStatus::Pending;
                }
            }
            cp.status = mozart_state::JobStatus::Paused;
            cp.error_message = Some(msg.clone());
            cp.current_sheet = None;
            cp.pid = None;
            Some(cp)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(job_id = %job_id, error = %e, "cannot read the checkpoint of a job held on a full disk");
            None
        }
    };
    record.status = DaemonJobStatus::Paused;
    record.error_message = Some(msg);
    let entry = JobEntry::new(record, live, None);
    lock(&mgr.shared.loaded).insert(job_id);
    mgr.shared
        .table
        .tell(super::table::Fact::JobLoaded(Box::new(entry)));
}

/// A job the restart could not resume ends failed in its checkpoint too — what `status`
/// reads — not only in its registry row: otherwise `status` shows it running for ever longer,
/// with a sheet "running" that nothing runs. The sheets the stop interrupted (their attempts
/// are in the history) are pending again, for a later `mozart resume`.
fn end_unresumable(mgr: &JobManager, job_id: &str, msg: &str) {
    let registry = lock(&mgr.shared.registry);
    if let Err(e) = registry.requeue_interrupted_sheets(job_id) {
        tracing::error!(job_id, error = %e, "cannot requeue the interrupted sheets of a job that could not be resumed");
    }
    match registry.load_checkpoint(job_id) {
        Ok(Some(mut checkpoint)) => {
            let now = mozart_state::Timestamp::now();
            checkpoint.status = mozart_state::JobStatus::Failed;
            checkpoint.error_message = Some(msg.to_string());
            checkpoint.current_sheet = None;
            checkpoint.pid = None;
            checkpoint.completed_at = Some(now.clone());
            checkpoint.updated_at = now;
            if let Err(e) = registry.save_checkpoint(&checkpoint) {
                tracing::error!(job_id, error = %e, "cannot save the checkpoint of a job that could not be resumed");
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!(job_id, error = %e, "cannot load the checkpoint of a job that could not be resumed");
        }
    }
}

/// Re-park every instrument whose persisted rate limit has not expired (architecture
/// invariant 2: the deadline is persisted so a restart does not stampede), and give one
/// whose wait had ended, its retry unanswered, its place in the probe schedule (a zero
/// wait). Sent before any job is re-registered, so the baton knows the limit before it
/// dispatches anything.
fn park_rate_limited_instruments(mgr: &JobManager) {
    let now = mozart_state::epoch_now();
    let limits = match lock(&mgr.shared.registry).rate_limit_runs(now) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::error!(error = %e, "cannot read persisted rate limits; instruments start unparked");
            return;
        }
    };
    for limit in limits {
        let wait = std::time::Duration::from_secs_f64((limit.until - now).max(0.0));
        tracing::info!(instrument = %limit.instrument, wait_seconds = wait.as_secs_f64(), "rate_limit.restored");
        if let Err(e) = mgr.send(mozart_baton::Event::RateLimitHit {
            instrument: limit.instrument.clone(),
            wait,
            job_id: None,
            sheet_num: None,
            // The API's words and how the wait was chosen, as persisted: the registry row
            // is rewritten when the baton parks the instrument again.
            reason: limit.reason.clone(),
            // The run of limits it is in: the next limit waits one step longer, not the
            // schedule's first step again.
            streak: Some(limit.streak),
        }) {
            tracing::error!(instrument = %limit.instrument, error = %e, "cannot restore rate limit");
        }
    }
}
