//! `job.submit` (conductor.md §6.4), also used by resume and restart recovery.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mozart_baton::Event;
use mozart_config::{load_score, SheetPlan};
use mozart_ipc::types::{JobResponse, JobResponseStatus};
use mozart_state::{CheckpointState, DaemonJobStatus, JobRecord, JobScore, JobStatus, SheetState};

use super::{lock, rejected, specs, JobEntry, JobManager, JobRun};
use mozart_conductor::ConductorCtx;

/// What a submission asks for (`JobRequest`, conductor.md §8.1).
#[derive(Debug, Clone, Default)]
pub struct SubmitRequest {
    /// Score file (absolute).
    pub config_path: String,
    /// Workspace override.
    pub workspace: Option<String>,
    /// Discard previous state first.
    pub fresh: bool,
    /// Start at this sheet: earlier sheets count as skipped.
    pub start_sheet: Option<u32>,
    /// Self-healing on exhaustion.
    pub self_healing: bool,
    /// Concert depth of a chained job.
    pub chain_depth: Option<u32>,
    /// The job whose hook submitted this one.
    pub parent_job_id: Option<String>,
    /// Set when this submission resumes an existing job (keeps its id and history).
    pub resume_of: Option<String>,
    /// Use the score as it was submitted (the registry's copy), not the file on disk.
    pub no_reload: bool,
}

fn job_id_of(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub(super) async fn submit(
    mgr: &JobManager,
    ctx: &ConductorCtx,
    req: SubmitRequest,
) -> JobResponse {
    if ctx.is_shutting_down() {
        return rejected("", "Daemon is shutting down".into());
    }
    let config_path = PathBuf::from(&req.config_path);
    let job_id = req
        .resume_of
        .clone()
        .unwrap_or_else(|| job_id_of(&config_path));
    let snapshot = if req.no_reload {
        lock(&mgr.shared.registry)
            .job_score(&job_id)
            .ok()
            .flatten()
            .and_then(|s| s.yaml)
    } else {
        None
    };
    if snapshot.is_none() && !config_path.exists() {
        return rejected(
            &job_id,
            format!("Config file not found: {}", req.config_path),
        );
    }
    let loaded = match &snapshot {
        Some(text) => mozart_config::load_score_str(text, &config_path),
        None => load_score(&config_path),
    };
    let score = match loaded {
        Ok(s) => s,
        Err(e) => {
            return rejected(
                &job_id,
                format!(
                    "Failed to parse config file: {} ({e}). Cannot determine workspace. Fix the config or pass --workspace explicitly.",
                    req.config_path
                ),
            )
        }
    };
    let mut config = score.config;
    let workspace = match req.workspace.as_deref().filter(|w| !w.is_empty()) {
        Some(w) => PathBuf::from(w),
        None => config.workspace.clone(),
    };
    config.workspace = workspace.clone();
    if let Some(parent) = workspace.parent() {
        if !parent.as_os_str().is_empty() && !parent.is_dir() {
            return rejected(
                &job_id,
                format!(
                    "Workspace parent directory does not exist: {}. Create the parent directory or change the workspace path.",
                    parent.display()
                ),
            );
        }
        if !parent.as_os_str().is_empty()
            && nix::unistd::access(parent, nix::unistd::AccessFlags::W_OK).is_err()
        {
            return rejected(
                &job_id,
                format!(
                    "Workspace parent directory is not writable: {}. Fix permissions or change the workspace path.",
                    parent.display()
                ),
            );
        }
    }
    let plan = match SheetPlan::build(&config) {
        Ok(p) => p,
        Err(e) => return rejected(&job_id, format!("Failed to plan the score: {e}")),
    };
    let renderer = match mozart_config::template::PromptRenderer::new(&config, config_path.parent())
    {
        Ok(r) => r,
        Err(e) => {
            return rejected(
                &job_id,
                format!("The prompt template does not compile: {e}"),
            )
        }
    };
    if let Err(e) = std::fs::create_dir_all(&workspace) {
        return rejected(
            &job_id,
            format!("Cannot create workspace {}: {e}", workspace.display()),
        );
    }

    let _guard = mgr.shared.submit_lock.lock().await;
    if let Some(entry) = lock(&mgr.shared.jobs).get(&job_id) {
        let s = entry.record.status;
        if entry.run.is_some() && matches!(s, DaemonJobStatus::Queued | DaemonJobStatus::Running) {
            return rejected(
                &job_id,
                format!(
                    "Job '{job_id}' is already {}. Use 'mozart pause' or 'mozart cancel' first, or wait for it to finish.",
                    s.as_str()
                ),
            );
        }
    }

    // Previous progress: kept unless --fresh, or the score changed since a completed run
    // (auto-fresh, §6.4 step 8).
    let previous_record = lock(&mgr.shared.registry).get_job(&job_id).ok().flatten();
    let mut fresh = req.fresh;
    if !fresh {
        if let Some(rec) = &previous_record {
            if rec.status == DaemonJobStatus::Completed {
                let mtime = std::fs::metadata(&config_path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_secs_f64());
                if let (Some(mtime), Some(done)) = (mtime, rec.completed_at) {
                    if mtime > done + 1.0 {
                        tracing::info!(job_id, "auto_fresh.score_changed");
                        fresh = true;
                    }
                }
            }
        }
    }
    // Loaded only when it is kept: a fresh run of a 1,000-sheet job does not read the old
    // run's rows back into memory.
    let previous = if fresh {
        None
    } else {
        lock(&mgr.shared.registry)
            .load_checkpoint(&job_id)
            .ok()
            .flatten()
            .filter(|cp| cp.total_sheets == plan.total_sheets)
    };
    if fresh && config.workspace_lifecycle.archive_on_fresh {
        // The old run's files move to an archive before the fresh run writes anything
        // (execution.md §9.12; upstream does this only in the legacy runner).
        let outcome =
            crate::workspace::on_fresh_start(&job_id, &workspace, &config.workspace_lifecycle);
        if let Some(archived) = &outcome.archived {
            tracing::info!(job_id, archive = %archived.display(), "workspace.archived");
        }
        if let Some(warning) = &outcome.warning {
            tracing::warn!(job_id, warning, "workspace.archive_failed");
        }
    }

    let mut record = JobRecord::new(&job_id, &req.config_path, workspace.to_string_lossy());
    record.total_sheets = Some(plan.total_sheets);
    record.chain_depth = req.chain_depth;
    if let Some(prev) = &previous_record {
        if req.resume_of.is_some() {
            record.submitted_at = prev.submitted_at;
            record.chain_depth = record.chain_depth.or(prev.chain_depth);
            record.concert_id = prev.concert_id.clone();
            record.parent_job_id = prev.parent_job_id.clone();
        }
    }
    if let Some(parent) = &req.parent_job_id {
        record.parent_job_id = Some(parent.clone());
        let parent_concert = lock(&mgr.shared.registry)
            .get_job(parent)
            .ok()
            .flatten()
            .and_then(|p| p.concert_id);
        record.concert_id = Some(parent_concert.unwrap_or_else(|| parent.clone()));
    }
    if !config.on_success.is_empty() {
        record.hook_config = serde_json::to_value(&config.on_success).ok();
    }
    if config.concert.enabled {
        record.concert_config = serde_json::to_value(&config.concert).ok();
    }
    record.status = DaemonJobStatus::Running;
    record.started_at = Some(mozart_state::epoch_now());
    record.pid = Some(std::process::id());

    let mut checkpoint = build_checkpoint(&job_id, &config, &plan, previous.as_ref(), &req);
    checkpoint.config_path = Some(req.config_path.clone());
    // What `mozart status` reads for hooks and sheet descriptions (upstream's snapshot).
    checkpoint.config_snapshot = serde_json::to_value(&config).ok();
    checkpoint.status = JobStatus::Running;
    checkpoint.pid = Some(std::process::id());
    if checkpoint.started_at.is_none() {
        checkpoint.started_at = Some(mozart_state::Timestamp::now());
    }

    // Isolation (execution.md §9.5): a git worktree per job, reused when resuming. Per-sheet
    // worktrees are made by each sheet's first attempt; what can be known up front is
    // checked here, before any agent runs (docs/mochi.md).
    let mut worktree = None;
    let mut working_dir = workspace.clone();
    if crate::sheet_worktrees::per_sheet(&config) {
        let (cfg, jid) = (config.clone(), job_id.clone());
        match tokio::task::spawn_blocking(move || crate::sheet_worktrees::preflight(&cfg, &jid))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return rejected(&job_id, format!("Cannot isolate the job's sheets: {e}"))
            }
            Err(e) => return rejected(&job_id, format!("Cannot isolate the job's sheets: {e}")),
        }
    } else if config.isolation.enabled {
        let (cfg, jid, resume) = (
            config.clone(),
            job_id.clone(),
            checkpoint.worktree_path.clone(),
        );
        let prepared = tokio::task::spawn_blocking(move || {
            let iso = &cfg.isolation;
            let setup = crate::isolation::WorktreeSetup {
                copy_files: iso.copy_files.clone(),
                commands: iso.setup_commands.clone(),
                command_timeout: std::time::Duration::from_secs_f64(
                    iso.setup_timeout_seconds
                        .unwrap_or(300.0)
                        .clamp(1.0, 86_400.0),
                ),
            };
            crate::isolation::prepare(
                &crate::isolation::WorktreeRequest::for_job(&cfg, &jid)
                    .resuming(resume.as_deref().map(Path::new))
                    .with_setup(setup),
            )
        })
        .await;
        match prepared {
            Ok(Ok(isolation)) => {
                isolation.record(&mut checkpoint);
                if let crate::isolation::Isolation::Worktree(wt) = isolation {
                    working_dir = wt.working_directory().to_path_buf();
                    worktree = Some(wt);
                }
            }
            Ok(Err(e)) => return rejected(&job_id, format!("Cannot isolate the job: {e}")),
            Err(e) => return rejected(&job_id, format!("Cannot isolate the job: {e}")),
        }
    }

    {
        let registry = lock(&mgr.shared.registry);
        // SQLite can still commit on a full disk (it reuses its WAL file's space), and then
        // the job's logs, workspace files and later checkpoints fail one by one: refuse new
        // work while the conductor's home has next to no room, and say why.
        let home = registry.path().parent().unwrap_or(Path::new("."));
        if let Some(free) = free_bytes(home).filter(|free| *free < MIN_FREE_BYTES) {
            tracing::error!(job_id, home = %home.display(), free, "job refused: the disk is full");
            return rejected(
                &job_id,
                format!(
                    "Cannot accept the job: the disk is full ({} has {} KiB free). Free some space, then submit again.",
                    home.display(),
                    free / 1024
                ),
            );
        }
        let job_score = JobScore {
            yaml: Some(score.text.clone()),
            snapshot: serde_json::to_value(&config).ok(),
        };
        if let Err(e) = registry.create_job_with_score(&record, &job_score) {
            return rejected(
                &job_id,
                format!("Cannot record the job in the registry: {e}"),
            );
        }
        if let Err(e) = registry.save_checkpoint(&checkpoint) {
            return rejected(&job_id, format!("Cannot save the job's checkpoint: {e}"));
        }
    }

    let spec = specs::job_spec(&job_id, &config, &plan, &checkpoint, req.self_healing);
    let run = Arc::new(JobRun {
        job_id: job_id.clone(),
        config,
        plan,
        score_dir: config_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        chain_depth: record.chain_depth.unwrap_or(0),
        renderer,
        working_dir,
        worktree,
        sheet_worktrees: Mutex::new(Default::default()),
        workspace,
        attempt_details: Mutex::new(Default::default()),
        mtimes: Mutex::new(Default::default()),
        backends: Default::default(),
    });
    lock(&mgr.shared.jobs).insert(
        job_id.clone(),
        JobEntry {
            record,
            live: Some(checkpoint),
            run: Some(run),
            halted: false,
            final_sheets: Vec::new(),
        },
    );
    if let Err(e) = mgr.send(Event::RegisterJob(Box::new(spec))) {
        mgr.set_status(&job_id, DaemonJobStatus::Failed, Some(&e));
        return rejected(&job_id, e);
    }
    JobResponse {
        job_id,
        status: JobResponseStatus::Accepted,
        message: Some(format!(
            "Job queued (concurrency limit: {})",
            mgr.shared.max_concurrent_jobs
        )),
    }
}

/// A checkpoint for the plan, carrying over terminal sheets of a previous run.
pub(super) fn build_checkpoint(
    job_id: &str,
    config: &mozart_config::JobConfig,
    plan: &SheetPlan,
    previous: Option<&CheckpointState>,
    req: &SubmitRequest,
) -> CheckpointState {
    let mut cp = CheckpointState::new(job_id, &config.name, plan.total_sheets);
    cp.total_movements = Some(plan.total_movements);
    if let Some(prev) = previous {
        cp.created_at = prev.created_at.clone();
        cp.started_at = prev.started_at.clone();
        cp.total_retry_count = prev.total_retry_count;
        cp.rate_limit_waits = prev.rate_limit_waits;
        cp.total_input_tokens = prev.total_input_tokens;
        cp.total_output_tokens = prev.total_output_tokens;
        cp.total_estimated_cost = prev.total_estimated_cost;
        // A resumed job goes back into its own worktree.
        cp.worktree_path = prev.worktree_path.clone();
        cp.worktree_branch = prev.worktree_branch.clone();
        cp.worktree_base_commit = prev.worktree_base_commit.clone();
    }
    for sheet in &plan.sheets {
        let mut s = previous
            .and_then(|p| p.sheets.get(&sheet.num))
            .filter(|s| {
                matches!(
                    s.status,
                    mozart_state::SheetStatus::Completed | mozart_state::SheetStatus::Skipped
                )
            })
            .cloned()
            .unwrap_or_else(|| {
                let mut s = SheetState::new(sheet.num);
                // Keep attempt counts of an unfinished sheet so retries are not refunded.
                if let Some(p) = previous.and_then(|p| p.sheets.get(&sheet.num)) {
                    // The reviewer loop resumes at the same iteration with the same feedback.
                    // A failed sheet that is resumed gets a fresh budget of iterations.
                    s.review = p.review.clone().map(|mut r| {
                        if p.status == mozart_state::SheetStatus::Failed {
                            r.budget_from = r.iteration;
                        }
                        r
                    });
                    s.attempt_count = p.attempt_count;
                    s.completion_attempts = p.completion_attempts;
                    s.healing_attempts = p.healing_attempts;
                }
                s
            });
        s.instrument_name = Some(sheet.instrument.clone());
        s.movement = Some(sheet.movement);
        s.voice = Some(sheet.voice);
        if let Some(start) = req.start_sheet {
            if sheet.num < start && s.status == mozart_state::SheetStatus::Pending {
                s.status = mozart_state::SheetStatus::Skipped;
                s.error_message = Some(format!("skipped: --start-sheet {start}"));
            }
        }
        cp.sheets.insert(sheet.num, s);
    }
    cp.last_completed_sheet = cp
        .sheets
        .values()
        .filter(|s| s.status == mozart_state::SheetStatus::Completed)
        .map(|s| s.sheet_num)
        .max()
        .unwrap_or(0);
    let mut instruments: Vec<String> = plan.sheets.iter().map(|s| s.instrument.clone()).collect();
    instruments.sort();
    instruments.dedup();
    cp.instruments_used = instruments;
    cp
}

/// Below this much free space in the conductor's home, new jobs are refused.
const MIN_FREE_BYTES: u64 = 512 * 1024;

/// Bytes an unprivileged writer can still use on `dir`'s filesystem (`None` if unknown).
// The statvfs field types are u64 here but narrower on other targets.
#[allow(clippy::useless_conversion)]
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size())))
}
