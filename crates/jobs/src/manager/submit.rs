//! `job.submit` (conductor.md §6.4), also used by resume and restart recovery.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mozart_baton::Event;
use mozart_config::{load_score, JobConfig, PlanOutline};
use mozart_ipc::types::{JobResponse, JobResponseStatus};
use mozart_state::{CheckpointState, DaemonJobStatus, JobRecord, JobScore, JobStatus, SheetState};

use super::{lock, specs, JobEntry, JobManager, JobRun};
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
    /// The directory the chain's `mozart run` was called from (kept in the job's record
    /// as [`SUBMIT_DIR`]): a score without `workspace:` submitted without a workspace
    /// (chained by a `run_job` hook) runs in its `./workspace`.
    pub submit_dir: Option<String>,
}

/// The record option holding the directory `mozart run` was called from (of the chain's
/// first job, for a chained one).
pub(crate) const SUBMIT_DIR: &str = "submit_dir";

pub(super) fn job_id_of(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `job.submit` with `dry_run` (conductor.md §8.1): every check a submission makes —
/// parse, validate, plan, the prompt template — and nothing else: no workspace is created,
/// nothing is recorded, nothing runs. Upstream's legacy engine recorded a job that then
/// "completed" without running [QUIRK]; a job that never ran is not shown as completed here.
pub(super) async fn dry_run(
    mgr: &JobManager,
    ctx: &ConductorCtx,
    req: SubmitRequest,
) -> JobResponse {
    if ctx.is_shutting_down() {
        return JobResponse::submission_rejected("", "Daemon is shutting down");
    }
    let config_path = PathBuf::from(&req.config_path);
    // A resume (or `modify --resume`) with another file checks it for the job it resumes:
    // its refusal names that job, not the file's stem.
    let job_id = req
        .resume_of
        .clone()
        .unwrap_or_else(|| job_id_of(&config_path));
    let checked = (|| {
        let score = parse(mgr, &job_id, &config_path, &req)?;
        let mut config = score.config;
        let workspace = validate_workspace(&mut config, &req, &score.text)?;
        let plan = PlanOutline::of(&config)
            .map_err(|e| Rejection(format!("Failed to plan the score: {e}")))?;
        known_instruments(mgr, &ctx.paths.home, (&config_path, &config), &plan)?;
        mozart_config::template::PromptRenderer::new(&config, config_path.parent())
            .map_err(template_rejection(&config_path))?;
        Ok::<_, Rejection>((plan.total_sheets, workspace))
    })();
    match checked {
        Ok((sheets, workspace)) => JobResponse::new(
            job_id,
            JobResponseStatus::Accepted,
            Some(format!(
                "Dry run: the score is valid ({}, workspace {}); nothing was run or recorded",
                mozart_config::plural(sheets, "sheet", "sheets"),
                workspace.display()
            )),
        ),
        Err(Rejection(message)) => JobResponse::submission_rejected(&job_id, message),
    }
}

/// Why a submission was refused: the message `job.submit` answers with. Nothing durable has
/// been touched when a step returns one (architecture invariant 7).
struct Rejection(String);

/// One step of the submission pipeline.
type Step<T> = Result<T, Rejection>;

/// `job.submit`: parse → validate → plan → (under the submit lock) check the job is not
/// running → carry over the previous run → build the checkpoint → isolate → persist →
/// register with the baton. Each step is a function below; the first that refuses answers.
pub(super) async fn submit(
    mgr: &JobManager,
    ctx: &ConductorCtx,
    req: SubmitRequest,
) -> JobResponse {
    if ctx.is_shutting_down() {
        return JobResponse::submission_rejected("", "Daemon is shutting down");
    }
    let config_path = PathBuf::from(&req.config_path);
    let job_id = match req.resume_of.clone() {
        Some(id) => id,
        None => {
            let id = job_id_of(&config_path);
            // A new job's ID goes into pages, URLs and shell hints: the safe alphabet only.
            // (A resumed job keeps the ID it already has.) The response carries no ID: the
            // refused one is not a job.
            if let Some(message) = mozart_ipc::job_id::file_refusal(&id) {
                return JobResponse::submission_rejected("", message);
            }
            id
        }
    };
    let config_text = req.config_path.clone();
    // `job_timeout_seconds` as configured now (a reload applies to the next jobs); the
    // clock starts when the job gets its job slot.
    let timeout = std::time::Duration::from_secs_f64(ctx.config().job_timeout_seconds.max(1.0));
    let home = &ctx.paths.home;
    match pipeline(mgr, (&job_id, home), &config_path, req, timeout).await {
        Ok(response) => response,
        Err(Rejection(message)) => {
            super::events::rejected(&job_id, &config_text, &message);
            JobResponse::submission_rejected(&job_id, message)
        }
    }
}

async fn pipeline(
    mgr: &JobManager,
    (job_id, home): (&str, &Path),
    config_path: &Path,
    req: SubmitRequest,
    timeout: std::time::Duration,
) -> Step<JobResponse> {
    let score = parse(mgr, job_id, config_path, &req)?;
    let mut config = score.config;
    // A start sheet past the last one would skip every sheet but run none.
    let last = mozart_config::plan::total_sheets(&config.sheet);
    if let Some(start) = req.start_sheet.filter(|s| *s < 1 || i64::from(*s) > last) {
        return Err(Rejection(format!(
            "Invalid start sheet {start}: the score has {} (start_sheet must be 1-{last})",
            mozart_config::plural(last, "sheet", "sheets")
        )));
    }
    let workspace = validate_workspace(&mut config, &req, &score.text)?;
    if req.resume_of.is_some() {
        if let Some(refusal) = workspace_gone(mgr, job_id, &workspace, &req.config_path) {
            return Err(Rejection(refusal));
        }
    }
    let (plan, renderer) = plan(mgr, home, &config, config_path, &workspace)?;

    // Outside the lock: other jobs' submissions do not wait for this one's clean-up. (A
    // job still running is refused at once, not after the wait.)
    if mozart_backends::descendants::attempts_alive(job_id) > 0 {
        ensure_not_running(mgr, job_id).await?;
        wait_for_ended_attempts(job_id).await?;
    }
    let _guard = mgr.shared.submit_lock.lock().await;
    ensure_not_running(mgr, job_id).await?;
    if req.resume_of.is_none() {
        ensure_not_paused(mgr, job_id)?;
    }
    let mut previous = carry_over(
        mgr,
        job_id,
        (config_path, &score.text),
        &config,
        &workspace,
        &req,
    )?;
    // A job that failed (or was cancelled) in its `on_success` hooks owes them: resuming it,
    // or running it again with its progress kept, runs them again instead of completing on
    // the zero-work guard with the chain lost (a plain `mozart run` used to say "nothing was
    // run, the job is completed" beside the failed hook). So does one that failed before
    // its hooks ever ran, whose last sheets were completed since (`mozart recover`): its
    // first success runs them (it used to complete with the hooks never run).
    let ended_unfinished = !previous.fresh
        && previous.checkpoint.is_some()
        && !config.on_success.is_empty()
        && previous.record.as_ref().is_some_and(|r| {
            matches!(
                r.status,
                mozart_state::DaemonJobStatus::Failed | mozart_state::DaemonJobStatus::Cancelled
            )
        });
    // A score edited to another sheet count keeps what its sheets of the same numbers did.
    let resized = previous
        .checkpoint
        .as_ref()
        .map(|cp| cp.total_sheets)
        .filter(|was| *was != plan.total_sheets);
    let record = build_record(
        mgr,
        job_id,
        &config,
        &workspace,
        &plan,
        previous.record.as_ref(),
        &req,
    );
    let was_completed = previous
        .record
        .as_ref()
        .is_some_and(|r| r.status == mozart_state::DaemonJobStatus::Completed);
    let (mut checkpoint, fresh_budget) =
        build_checkpoint(job_id, &config, &plan, previous.checkpoint.as_mut(), &req);
    // A job started over begins its next run: `errors`, `diagnose` and `status` show this
    // run's failed attempts, not those of the run before (its first run needs no mark).
    let new_run = previous.fresh && previous.record.is_some();
    let started_over = previous.started_over.take();
    drop(previous);
    // Every sheet already done in an earlier run of this unchanged score: the job ends at
    // once, running nothing — said so, not "queued".
    let done = |status: &mozart_state::SheetStatus| {
        matches!(
            status,
            mozart_state::SheetStatus::Completed | mozart_state::SheetStatus::Skipped
        )
    };
    let nothing_to_run = checkpoint
        .sheets
        .statuses()
        .all(|(_, status)| done(&status));
    // Hook results are those of the job's last completion. A run with sheets to run ends
    // in a completion of its own, which owes every hook: the results before it are an older
    // run's, forgotten with its start (a `--fresh` run, or a resume with an edited score,
    // that failed on a sheet and was then recovered used to take them for its own and skip
    // the hooks they named, at its resume or at the restart after a kill).
    let hook_results = if nothing_to_run {
        lock(&mgr.shared.registry).hook_results(job_id)
    } else {
        Ok(Vec::new())
    };
    let hooks_never_ran = hook_results.as_ref().is_ok_and(Vec::is_empty);
    let hooks_owed = ended_unfinished
        && hook_results.is_ok_and(|done| done.is_empty() || done.iter().any(|h| !h.success));
    if nothing_to_run && was_completed && req.resume_of.is_none() && !hooks_owed {
        // A completed job submitted again unchanged: nothing runs, so nothing about it
        // changes either — its times, workspace and history stay those of the run that did
        // the work (re-registering it made `status` say it took until now).
        let mut response = JobResponse::new(
            job_id,
            JobResponseStatus::Accepted,
            Some(ALREADY_COMPLETED.into()),
        );
        response.nothing_to_run = true;
        return Ok(response);
    }
    let resized = resized.map(|was| {
        let kept = checkpoint
            .sheets
            .statuses()
            .filter(|(_, status)| done(status))
            .count();
        (was, plan.total_sheets, kept)
    });
    checkpoint.config_path = Some(req.config_path.clone());
    // What `mozart status` reads for hooks and sheet descriptions (upstream's snapshot).
    let snapshot = mozart_state::ConfigSnapshot::of(&config);
    checkpoint.config_snapshot = snapshot.clone();
    checkpoint.status = JobStatus::Running;
    checkpoint.pid = Some(std::process::id());
    if checkpoint.started_at.is_none() {
        checkpoint.started_at = Some(mozart_state::Timestamp::now());
    }
    let (working_dir, worktree) = isolate(job_id, &config, &workspace, &mut checkpoint).await?;
    let job_score = JobScore {
        yaml: Some(score.text),
        snapshot,
    };
    persist(
        mgr,
        job_id,
        &record,
        &job_score,
        &checkpoint,
        (new_run, !nothing_to_run),
    )?;
    drop(job_score);
    let from_checkpoint = req.resume_of.is_some();
    let sheet_logs = claim_sheet_logs(job_id, &workspace).await;
    if !from_checkpoint {
        super::events::submitted(
            job_id,
            &req.config_path,
            &workspace,
            &sheet_logs,
            plan.total_sheets,
        );
    }

    let run = JobRun {
        job_id: job_id.to_string(),
        config,
        plan,
        score_dir: config_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        chain_depth: record.chain_depth.unwrap_or(0),
        hooks_owed,
        fresh_budget,
        capture_since: super::capture_since(checkpoint.started_at.as_ref()),
        renderer,
        working_dir,
        worktree,
        workspace,
        sheet_logs,
    };
    let mut response = register(
        mgr,
        record,
        checkpoint,
        run,
        req.self_healing,
        timeout,
        from_checkpoint,
    )
    .await?;
    if let Some(why) = started_over {
        tracing::info!(job_id, "auto_fresh.new_workspace");
        response.message = Some(match response.message.take() {
            // On its own line: the watch rewrites the first (job started or queued).
            Some(m) => format!("{m}\n{why}"),
            None => why,
        });
    }
    if let Some((was, now, kept)) = resized {
        tracing::info!(job_id, was, now, kept, "resume.resized");
        response.message = Some(format!(
            "{RESIZED} {} (it had {was}): {} kept, the others run",
            mozart_config::plural(now, "sheet", "sheets"),
            mozart_config::plural(kept, "finished sheet is", "finished sheets are"),
        ));
    }
    if nothing_to_run {
        response.nothing_to_run = true;
        // What runs now: nothing, or the `on_success` hooks the job still owes.
        let ending = if hooks_owed && hooks_never_ran {
            "no sheet was run; its on_success hooks, not run yet, run now"
        } else if hooks_owed {
            "no sheet was run; its on_success hooks run again"
        } else {
            "nothing was run, the job is completed"
        };
        response.message = Some(match resized {
            // A score edited to fewer sheets, all of them finished already (the job may
            // have failed on a sheet the score no longer has).
            Some((was, now, _)) => format!(
                "{RESIZED} {} (it had {was}), all finished in the earlier run: {ending}",
                mozart_config::plural(now, "sheet", "sheets"),
            ),
            // A completed job whose hooks were owed, or a resume after `mozart recover`
            // marked the last failed sheets completed.
            None if hooks_owed || req.resume_of.is_some() || !was_completed => {
                format!("Every sheet is finished: {ending}")
            }
            None => ALREADY_COMPLETED.into(),
        });
    }
    Ok(response)
}

/// The directory of the job's sheet logs, claimed now so that every event names where they
/// really are. A claim that fails (an unwritable workspace) leaves upstream's `logs/`: the
/// attempts then make no log, as before.
async fn claim_sheet_logs(job_id: &str, workspace: &Path) -> PathBuf {
    let (id, ws) = (job_id.to_string(), workspace.to_path_buf());
    let claimed = tokio::task::spawn_blocking(move || {
        mozart_backends::output_log::claim_sheet_logs_dir(&ws, &id)
    })
    .await;
    match claimed {
        Ok(Ok(dir)) => dir,
        Ok(Err(err)) => {
            tracing::warn!(job_id, workspace = %workspace.display(), %err, "sheet_logs.unclaimed");
            workspace.join("logs")
        }
        Err(_) => workspace.join("logs"),
    }
}

/// The answer to a submission with nothing left to run.
const ALREADY_COMPLETED: &str = "Job already completed: every sheet is done and the score has not changed, so nothing was run (submit with fresh to run it again)";

/// How the message of a resubmission whose score has another sheet count starts.
pub(super) const RESIZED: &str = "The score now has";

/// An accepted job's message, once the submitter's watch saw whether it got a job slot:
/// upstream's `Job queued (…)` only when it waits for one.
pub(super) fn slot_message(limit: u32, queued: bool) -> String {
    if queued {
        format!("Job queued (concurrency limit: {limit})")
    } else {
        format!("Job started (concurrency limit: {limit})")
    }
}

/// Parse: the score file, or the registry's copy of it (`no_reload`).
fn parse(
    mgr: &JobManager,
    job_id: &str,
    config_path: &Path,
    req: &SubmitRequest,
) -> Step<mozart_config::Score> {
    let snapshot = if req.no_reload {
        lock(&mgr.shared.registry)
            .job_score(job_id)
            .ok()
            .flatten()
            .and_then(|s| s.yaml)
    } else {
        None
    };
    if snapshot.is_none() && !config_path.exists() {
        if req.resume_of.is_some() && req.parent_job_id.is_none() {
            // A resume re-reads the job's score file: say what can be done without it.
            return Err(Rejection(format!(
                "The score file of '{job_id}' does not exist any more: {}. Put it back, resume with another file (mozart resume {job_id} --config FILE), or with the score as it was submitted (mozart resume {job_id} --no-reload)",
                req.config_path
            )));
        }
        return Err(Rejection(format!(
            "Config file not found: {}",
            req.config_path
        )));
    }
    let loaded = match &snapshot {
        Some(text) => mozart_config::load_score_str(text, config_path),
        None => load_score(config_path),
    };
    loaded.map_err(|e| {
        // Said as it is: no parse error, and --workspace would not get past it either
        // (the score's workspace is refused when the score is loaded).
        if let mozart_config::ConfigError::ForeignLink { .. } = e {
            return Rejection(e.to_string());
        }
        // A resume can go on with the score as it was submitted instead (`resume`'s
        // `--workspace` is upstream's hidden fallback, which would move the job).
        if let Some(parent) = &req.parent_job_id {
            // Submitted by a `run_job` hook: no command line to add --workspace to.
            return Rejection(format!(
                "Failed to parse config file: {} ({e}). Fix the score, then 'mozart resume {parent}' runs its run_job hook again.",
                req.config_path
            ));
        }
        let fix = if req.resume_of.is_some() && !req.no_reload {
            format!(
                "Fix the score, or resume with the score as it was submitted: mozart resume {job_id} --no-reload"
            )
        } else {
            "Fix the config or pass --workspace explicitly.".to_string()
        };
        Rejection(format!(
            "Failed to parse config file: {} ({e}). Cannot determine workspace. {fix}",
            req.config_path
        ))
    })
}

/// Validate: the workspace (the request's override, else the score's) can be created. A
/// score without `workspace:` submitted without one (a chained job) gets `./workspace` of
/// the chain's submitting directory, never of the conductor's.
fn validate_workspace(config: &mut JobConfig, req: &SubmitRequest, text: &str) -> Step<PathBuf> {
    let workspace = match req.workspace.as_deref().filter(|w| !w.is_empty()) {
        Some(w) => PathBuf::from(w),
        None if (req.submit_dir.is_some() || req.parent_job_id.is_some())
            && !mozart_config::names_workspace(text) =>
        {
            let dir = match req.submit_dir.as_deref().filter(|d| !d.is_empty()) {
                Some(dir) => PathBuf::from(dir),
                None => mozart_config::resolve_path(
                    Path::new(&req.config_path)
                        .parent()
                        .unwrap_or(Path::new("")),
                ),
            };
            dir.join("workspace")
        }
        None => config.workspace.clone(),
    };
    config.workspace = workspace.clone();
    // The workspace as the submitter named it (`--workspace`, unresolved) or as the score
    // resolved it: through no link another user could have chosen it by.
    if let Some(link) = mozart_ipc::own_path::foreign_link(&workspace) {
        return Err(Rejection(link.refusal("the workspace", &workspace)));
    }
    let Some(parent) = workspace.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(workspace);
    };
    if parent.exists() && !parent.is_dir() {
        return Err(Rejection(format!(
            "Workspace parent is not a directory: {} is a file. Change the workspace path, or move the file away.",
            parent.display()
        )));
    }
    if !parent.is_dir() {
        return Err(Rejection(format!(
            "Workspace parent directory does not exist: {}. Create the parent directory or change the workspace path.",
            parent.display()
        )));
    }
    if workspace.exists() && !workspace.is_dir() {
        return Err(Rejection(format!(
            "Workspace is not a directory: {} is a file. Change the workspace path, or move the file away.",
            workspace.display()
        )));
    }
    if nix::unistd::access(parent, nix::unistd::AccessFlags::W_OK).is_err() {
        return Err(Rejection(format!(
            "Workspace parent directory is not writable: {}. Fix permissions or change the workspace path.",
            parent.display()
        )));
    }
    Ok(workspace)
}

/// Why a job cannot go on from its checkpoint in `workspace`: the directory is gone (deleted,
/// moved, a reboot emptied /tmp) and with it the work of the sheets the checkpoint says are
/// finished. Running only the rest there would end in a "completed" job whose earlier files
/// do not exist. `None` when the workspace is there or no sheet finished.
pub(super) fn workspace_gone(
    mgr: &JobManager,
    job_id: &str,
    workspace: &Path,
    config_path: &str,
) -> Option<String> {
    match std::fs::symlink_metadata(workspace) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        _ => return None,
    }
    let checkpoint = lock(&mgr.shared.registry)
        .load_checkpoint(job_id)
        .ok()
        .flatten()?;
    let done: Vec<u32> = checkpoint
        .sheets
        .statuses()
        .filter(|(_, status)| *status == mozart_state::SheetStatus::Completed)
        .map(|(n, _)| n)
        .collect();
    if done.is_empty() {
        return None;
    }
    const SHOWN: usize = 10;
    let mut numbers = done
        .iter()
        .take(SHOWN)
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if done.len() > SHOWN {
        numbers.push_str(", …");
    }
    let sheets = if done.len() == 1 { "sheet" } else { "sheets" };
    // The score now names another workspace than the one the job ran in, which is still
    // there: the finished work is there, not where the score points.
    let ran_in = lock(&mgr.shared.registry)
        .get_job(job_id)
        .ok()
        .flatten()
        .map(|r| PathBuf::from(r.workspace))
        .filter(|old| old != workspace && old.is_dir());
    if let Some(old) = ran_in {
        return Some(format!(
            "The score now names the workspace {}, which does not exist; '{job_id}' ran in {}, where the work of its finished {sheets} {numbers} is. \
             Set the score's workspace: back to it (or move it there) and resume again, \
             or start over: mozart run {config_path} --fresh",
            workspace.display(),
            old.display(),
        ));
    }
    Some(format!(
        "The workspace of '{job_id}' no longer exists: {}. The work of its finished {sheets} {numbers} was there. \
         Put the workspace back (or set the score's workspace: to where it is now) and resume again, \
         or start over: mozart run {config_path} --fresh",
        workspace.display(),
    ))
}

/// Plan: the sheet plan, every instrument it plays known, and the compiled prompt template;
/// creates the workspace.
fn plan(
    mgr: &JobManager,
    home: &Path,
    config: &JobConfig,
    config_path: &Path,
    workspace: &Path,
) -> Step<(PlanOutline, mozart_config::template::PromptRenderer)> {
    let plan =
        PlanOutline::of(config).map_err(|e| Rejection(format!("Failed to plan the score: {e}")))?;
    known_instruments(mgr, home, (config_path, config), &plan)?;
    let renderer = mozart_config::template::PromptRenderer::new(config, config_path.parent())
        .map_err(template_rejection(config_path))?;
    // Made (or found) through no link of another user's, also one planted since the
    // workspace was checked: nothing is created in a directory they chose.
    mozart_ipc::own_path::create_dir_all(workspace).map_err(|e| match e {
        mozart_ipc::own_path::CreateError::Foreign(link) => {
            Rejection(link.refusal("the workspace", workspace))
        }
        e => Rejection(format!(
            "Cannot create workspace {}: {e}",
            workspace.display()
        )),
    })?;
    Ok((plan, renderer))
}

/// Every instrument the plan plays is one this conductor has: a misspelt `instrument:`
/// (upstream accepts the job, then fails each sheet at dispatch) is refused with the field,
/// the closest name and where profiles go (docs/differences.md).
fn known_instruments(
    mgr: &JobManager,
    home: &Path,
    score: (&Path, &JobConfig),
    plan: &PlanOutline,
) -> Step<()> {
    let profiles = home.join("instruments");
    match super::instruments::unknown_instruments(&mgr.shared.instruments, &profiles, score, plan) {
        Some(message) => Err(Rejection(message)),
        None => Ok(()),
    }
}

/// Why the score's prompt cannot be used: its template file is missing, or it does not
/// compile.
fn template_rejection(
    config_path: &Path,
) -> impl FnOnce(mozart_config::ConfigError) -> Rejection + '_ {
    move |e| match e {
        e @ mozart_config::ConfigError::TemplateFileMissing { .. } => Rejection(e.to_string()),
        // Named as `mozart validate` names it (the score file, the line of its `template:`
        // key); Jinja's own line is the template's.
        e => {
            let key_line = std::fs::read_to_string(config_path)
                .ok()
                .and_then(|raw| mozart_config::validate::find_line(&raw, "template:"));
            let place = match key_line {
                Some(n) => format!("prompt.template, line {n} of {}", config_path.display()),
                None => config_path.display().to_string(),
            };
            // ("cannot be parsed": a client reads it as a score with errors and says to
            // run `mozart validate` on it.)
            Rejection(format!(
                "The prompt template ({place}) cannot be parsed: {e}"
            ))
        }
    }
}

/// Refuse a job that is already queued or running here.
async fn ensure_not_running(mgr: &JobManager, job_id: &str) -> Step<()> {
    // A job this conductor has not loaded is not running here: no call on the baton task,
    // which queues behind every sheet event (tens of milliseconds with many jobs running),
    // for the usual submission of a new score (issue 24).
    if !lock(&mgr.shared.loaded).contains(job_id) {
        return Ok(());
    }
    let Some(super::table::JobFacts {
        in_baton: running,
        status: s,
        ..
    }) = mgr.job_facts(job_id).await
    else {
        return Ok(());
    };
    if running && matches!(s, DaemonJobStatus::Queued | DaemonJobStatus::Running) {
        return Err(Rejection(format!(
            "Job '{job_id}' is already {}. Use 'mozart pause' or 'mozart cancel' first, or wait for it to finish.",
            s.as_str()
        )));
    }
    // Paused (or pausing) in this conductor, which holds it to resume it: submitting it
    // again would register a second copy the baton refuses, leaving it "running" with
    // nothing running.
    if running && s == DaemonJobStatus::Paused {
        return Err(Rejection(paused_refusal(job_id)));
    }
    if running {
        return Err(Rejection(format!(
            "Job '{job_id}' is still ending ({}). Wait for it (mozart wait {job_id}), then submit it again.",
            s.as_str()
        )));
    }
    Ok(())
}

/// A job paused under an earlier conductor (paused jobs stay paused across a restart, not
/// loaded) or held paused by this one without the baton (a full disk) is refused as a job
/// paused in the baton is: a new submission took it over, its score replaced.
fn ensure_not_paused(mgr: &JobManager, job_id: &str) -> Step<()> {
    let paused = lock(&mgr.shared.registry)
        .get_job(job_id)
        .ok()
        .flatten()
        .is_some_and(|r| r.status == DaemonJobStatus::Paused);
    if paused {
        return Err(Rejection(paused_refusal(job_id)));
    }
    Ok(())
}

/// Why a paused job is not submitted again, and what to do.
fn paused_refusal(job_id: &str) -> String {
    format!(
        "Job '{job_id}' is paused. Resume it: mozart resume {job_id} (with an edited score: mozart modify {job_id} -c SCORE --resume), or cancel it first to submit it again."
    )
}

/// How long a new run of a job waits for the attempts of its last run that are still
/// ending (a cancel's SIGTERM grace, then SIGKILL and the clean-up) before it is refused.
const ENDING_ATTEMPTS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A job cancelled a moment ago may still have attempts ending (the caller saw some): their
/// processes get the kill grace after SIGTERM. The job runs again once they are gone, so a sheet never runs
/// twice side by side in one workspace (docs/instruments.md); still there after
/// [`ENDING_ATTEMPTS_WAIT`], the submission is refused, saying why.
async fn wait_for_ended_attempts(job_id: &str) -> Step<()> {
    let alive = || mozart_backends::descendants::attempts_alive(job_id);
    let deadline = tokio::time::Instant::now() + ENDING_ATTEMPTS_WAIT;
    tracing::info!(
        job_id,
        attempts = alive(),
        "waiting for the job's cancelled attempts to end before it runs again"
    );
    while alive() > 0 {
        if tokio::time::Instant::now() >= deadline {
            return Err(Rejection(format!(
                "Job '{job_id}' still has {} of its last run ending (their processes outlived {}s of stopping). Try again once they are gone.",
                mozart_config::plural(alive(), "attempt", "attempts"),
                ENDING_ATTEMPTS_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}

/// What a submission keeps of the job's previous run.
struct Previous {
    /// The previous registry row (its history: submitted_at, concert, parent).
    record: Option<JobRecord>,
    /// The previous checkpoint, when its progress is kept.
    checkpoint: Option<CheckpointState>,
    /// The submission starts the job over (`--fresh`, or a completed job's score changed).
    fresh: bool,
    /// Why it starts over without being asked to, said with the answer.
    started_over: Option<String>,
}

/// Carry over: previous progress is kept unless --fresh, or the score changed since a
/// completed run (auto-fresh, §6.4 step 8). A fresh run archives the old workspace first
/// when the score asks for it.
fn carry_over(
    mgr: &JobManager,
    job_id: &str,
    (config_path, text): (&Path, &str),
    config: &JobConfig,
    workspace: &Path,
    req: &SubmitRequest,
) -> Step<Previous> {
    let record = lock(&mgr.shared.registry).get_job(job_id).ok().flatten();
    let moved = if req.fresh || req.resume_of.is_some() {
        None
    } else {
        record
            .as_ref()
            .and_then(|rec| workspace_elsewhere(rec, workspace, Path::new(&req.config_path)))
    };
    let fresh = req.fresh
        || moved.is_some()
        || record.as_ref().is_some_and(|rec| {
            score_changed(mgr, rec, config_path, text)
                || template_file_changed(rec, config, config_path)
        });
    if fresh && !req.fresh {
        tracing::info!(job_id, "auto_fresh.score_changed");
    }
    // Loaded only when it is kept: a fresh run of a 1,000-sheet job does not read the old
    // run's rows back into memory.
    let checkpoint = if fresh {
        None
    } else {
        // A stored state that cannot be read is not "no progress": running the job as new
        // would run every completed sheet again. Refused, with what is wrong and the ways on.
        lock(&mgr.shared.registry)
            .load_checkpoint(job_id)
            .map_err(|e| {
                tracing::error!(job_id, error = %e, "cannot read the stored state of the job");
                Rejection(format!(
                    "The stored state of job '{job_id}' cannot be read, so it is not run (running it as new would run its completed sheets again): {e}. \
                     Its records are kept (mozart status {job_id}, mozart history {job_id}); to start it over anyway: mozart run {} --fresh",
                    config_path.display()
                ))
            })?
    };
    if fresh && config.workspace_lifecycle.archive_on_fresh {
        // The old run's files move to an archive before the fresh run writes anything
        // (execution.md §9.12; upstream does this only in the legacy runner).
        let outcome = crate::workspace::on_fresh_start_keeping(
            job_id,
            workspace,
            &config.workspace_lifecycle,
            Some(config_path),
        );
        if let Some(archived) = &outcome.archived {
            tracing::info!(job_id, archive = %archived.display(), "workspace.archived");
        }
        if let Some(warning) = &outcome.warning {
            tracing::warn!(job_id, warning, "workspace.archive_failed");
        }
        // A link or another user's directory where the archive goes: nothing was moved,
        // and the job is not run (it would start over on the old run's files).
        if let Some(refused) = outcome.refused {
            return Err(Rejection(refused));
        }
    }
    if checkpoint.is_none() {
        // A run that starts over replays no worker output and no delivery of an old run.
        super::review::forget_all(workspace);
    }
    Ok(Previous {
        record,
        checkpoint,
        fresh,
        started_over: moved,
    })
}

/// Why a `mozart run` of a job whose last run worked in another workspace starts it over:
/// the sheets that run finished left their files there, not in `workspace` — a score of the
/// same file name elsewhere, or `--workspace` to a new directory, would otherwise show them
/// done and run only the rest (upstream keeps a job's state in its workspace, so a new one
/// starts over there too). A workspace moved with its files (the new one is there and not
/// empty) keeps the progress. `None` when the progress is kept. `score` is the score file
/// submitted, named in the command that goes on from the earlier run.
fn workspace_elsewhere(record: &JobRecord, workspace: &Path, score: &Path) -> Option<String> {
    let before = Path::new(&record.workspace);
    if before == workspace {
        return None;
    }
    let holds_files = std::fs::read_dir(workspace).is_ok_and(|mut d| d.next().is_some());
    if holds_files {
        return None;
    }
    Some(format!(
        "Its last run worked in {} and left its finished sheets' files there; {} is a new workspace, so the job starts over (to go on from the earlier run: mozart run {} --workspace {})",
        before.display(),
        workspace.display(),
        mozart_config::placeholders::quote(&score.display().to_string()),
        mozart_config::placeholders::quote(&before.display().to_string())
    ))
}

/// True when a completed job's score is not the one that run completed: its text differs
/// from the text the registry keeps of it. (A file's modification time said both less and
/// more: an edit within a second of the run's end was never seen, a bare `touch` started the
/// job over.) A registry without the text (a job recorded by an older Mozart) falls back to
/// the time: the file modified after the run completed.
fn score_changed(mgr: &JobManager, rec: &JobRecord, config_path: &Path, text: &str) -> bool {
    if rec.status != DaemonJobStatus::Completed {
        return false;
    }
    let stored = lock(&mgr.shared.registry)
        .job_score(&rec.job_id)
        .ok()
        .flatten()
        .and_then(|s| s.yaml);
    if let Some(stored) = stored {
        return stored != text;
    }
    let mtime = std::fs::metadata(config_path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    matches!((mtime, rec.completed_at), (Some(mtime), Some(done)) if mtime > done + 1.0)
}

/// True when a completed job's prompt comes from `prompt.template_file` and that file was
/// modified after the run completed: the score's text is the same, but the prompt is not
/// (its text is not kept with the job's, so its time says).
fn template_file_changed(rec: &JobRecord, config: &JobConfig, config_path: &Path) -> bool {
    if rec.status != DaemonJobStatus::Completed {
        return false;
    }
    let inline = config
        .prompt
        .template
        .as_deref()
        .is_some_and(|t| !t.is_empty());
    let (Some(file), false, Some(done)) = (&config.prompt.template_file, inline, rec.completed_at)
    else {
        return false;
    };
    let path = match config_path.parent() {
        Some(dir) if file.is_relative() => dir.join(file),
        _ => file.clone(),
    };
    std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .is_some_and(|mtime| mtime.as_secs_f64() > done)
}

/// The job's registry row: running now, with its concert lineage.
fn build_record(
    mgr: &JobManager,
    job_id: &str,
    config: &JobConfig,
    workspace: &Path,
    plan: &PlanOutline,
    previous: Option<&JobRecord>,
    req: &SubmitRequest,
) -> JobRecord {
    let mut record = JobRecord::new(job_id, &req.config_path, workspace.to_string_lossy());
    record.total_sheets = Some(plan.total_sheets);
    record.chain_depth = req.chain_depth;
    if let (Some(prev), Some(_)) = (previous, &req.resume_of) {
        record.submitted_at = prev.submitted_at;
        record.chain_depth = record.chain_depth.or(prev.chain_depth);
        record.concert_id = prev.concert_id.clone();
        record.parent_job_id = prev.parent_job_id.clone();
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
    // The chain's submitting directory, kept for the jobs its hooks chain (and across a
    // resume, which sends none).
    let submit_dir = req.submit_dir.clone().or_else(|| {
        previous
            .and_then(|p| p.options.get(SUBMIT_DIR))
            .and_then(|d| d.as_str())
            .map(str::to_string)
    });
    if let Some(dir) = submit_dir {
        record.options.insert(SUBMIT_DIR.into(), dir.into());
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
    record
}

/// Isolate (execution.md §9.5): a git worktree per job, reused when resuming. Returns where
/// the instrument runs, and the worktree when there is one.
async fn isolate(
    job_id: &str,
    config: &JobConfig,
    workspace: &Path,
    checkpoint: &mut CheckpointState,
) -> Step<(PathBuf, Option<crate::isolation::Worktree>)> {
    if crate::sheet_worktrees::per_sheet(config) {
        // Per-sheet worktrees are made by each sheet's first attempt; what can be known up
        // front is checked here, before any agent runs (docs/mochi.md).
        let (cfg, jid) = (config.clone(), job_id.to_string());
        tokio::task::spawn_blocking(move || crate::sheet_worktrees::preflight(&cfg, &jid))
            .await
            .map_err(|e| Rejection(format!("Cannot isolate the job's sheets: {e}")))?
            .map_err(|e| Rejection(format!("Cannot isolate the job's sheets: {}", e.refusal())))?;
        return Ok((workspace.to_path_buf(), None));
    }
    if !config.isolation.enabled {
        return Ok((workspace.to_path_buf(), None));
    }
    let (cfg, jid, resume) = (
        config.clone(),
        job_id.to_string(),
        checkpoint.worktree_path.clone(),
    );
    let prepared = tokio::task::spawn_blocking(move || {
        let setup = crate::isolation::WorktreeSetup::from_config(&cfg.isolation);
        crate::isolation::prepare(
            &crate::isolation::WorktreeRequest::for_job(&cfg, &jid)
                .resuming(resume.as_deref().map(Path::new))
                .with_setup(setup),
        )
    })
    .await
    .map_err(|e| Rejection(format!("Cannot isolate the job: {e}")))?
    .map_err(|e| Rejection(format!("Cannot isolate the job: {e}")))?;
    prepared.record(checkpoint);
    match prepared {
        crate::isolation::Isolation::Worktree(wt) => {
            Ok((wt.working_directory().to_path_buf(), Some(wt)))
        }
        _ => Ok((workspace.to_path_buf(), None)),
    }
}

/// Persist: the registry row, the score and the first checkpoint, in the registry — refused
/// while the conductor's home has next to no room.
fn persist(
    mgr: &JobManager,
    job_id: &str,
    record: &JobRecord,
    job_score: &JobScore,
    checkpoint: &CheckpointState,
    (new_run, forget_hooks): (bool, bool),
) -> Step<()> {
    let registry = lock(&mgr.shared.registry);
    // SQLite can still commit on a full disk (it reuses its WAL file's space), and then the
    // job's logs, workspace files and later checkpoints fail one by one: refuse new work
    // while the conductor's home has next to no room, and say why.
    let home = registry.path().parent().unwrap_or(Path::new("."));
    if let Some(free) = mozart_conductor::probe::free_bytes(home)
        .filter(|free| *free < mozart_conductor::probe::MIN_FREE_BYTES)
    {
        tracing::error!(job_id, home = %home.display(), free, "job refused: the disk is full");
        return Err(Rejection(format!(
            "Cannot accept the job: the disk is full ({} has {} KiB free). Free some space, then try again.",
            home.display(),
            free / 1024
        )));
    }
    // One transaction: a job whose checkpoint cannot be saved leaves no row behind (a
    // refused submission must not list as running).
    registry
        .all_or_nothing(|registry| {
            registry
                .create_job_with_score(record, job_score)
                .map_err(|e| Rejection(format!("Cannot record the job in the registry: {e}")))?;
            if new_run {
                registry
                    .start_run(job_id)
                    .map_err(|e| Rejection(format!("Cannot record the job's new run: {e}")))?;
            }
            // With the run that owes them all: no later start takes them for this run's.
            if forget_hooks {
                registry.clear_hook_results(job_id).map_err(|e| {
                    Rejection(format!("Cannot forget the job's earlier hook results: {e}"))
                })?;
            }
            registry
                .save_checkpoint(checkpoint)
                .map_err(|e| Rejection(format!("Cannot save the job's checkpoint: {e}")))
        })
        .map_err(|e| Rejection(format!("Cannot record the job in the registry: {e}")))?
}

/// Sheets from which a submission gives its working memory back to the system once the job
/// is registered (a smaller one frees too little to be worth a walk of the heap).
const TRIM_AFTER_SHEETS: usize = 1_000;

/// Register: the job joins the manager's table and the baton loop.
async fn register(
    mgr: &JobManager,
    record: JobRecord,
    checkpoint: CheckpointState,
    run: JobRun,
    self_healing: bool,
    timeout: std::time::Duration,
    from_checkpoint: bool,
) -> Step<JobResponse> {
    let job_id = run.job_id.clone();
    let run = Arc::new(run);
    let mut spec = specs::job_spec(&job_id, &run, &checkpoint, self_healing);
    spec.timeout = Some(timeout);
    // A running job a restart continues keeps the time its run has had.
    spec.clock_started_at = lock(&mgr.shared.restored_clocks)
        .remove(&job_id)
        .filter(|at| at.is_finite() && *at > 0.0)
        .map(|at| mozart_baton::Millis((at * 1000.0) as u64));
    // Its place in the queue for a job slot (a resume keeps the first submission's).
    spec.submitted_at = Some(record.submitted_at);
    // A resumed job (after a restart too) keeps waiting on its own rate limits; a new run
    // of the id starts without the last run's.
    spec.rate_waits = specs::rate_waits(&lock(&mgr.shared.registry), &job_id, from_checkpoint);
    // Into the table before the baton hears of the job (a call runs before a later event).
    let mut checkpoint = checkpoint;
    // The completed sheets a resumed large job carried over are held as the running job
    // held them, now that their rows are saved whole (issue 24).
    let compacted = super::compact::compacts(&run, &checkpoint) && compact_carried(&mut checkpoint);
    let mut entry = JobEntry::new(record, Some(checkpoint), Some(run));
    entry.compacted = compacted;
    entry.log.from_checkpoint = from_checkpoint;
    // Known as loaded from now on (before the table takes it in, still under the submit
    // lock): the next submission of this id looks in the table instead of taking it as new.
    lock(&mgr.shared.loaded).insert(job_id.clone());
    mgr.shared
        .table
        .tell(super::table::Fact::JobLoaded(Box::new(entry)));
    let planned = spec.sheet_count();
    if let Err(e) = mgr.send(Event::RegisterJob(Box::new(spec))) {
        mgr.set_status(&job_id, DaemonJobStatus::Failed, Some(&e))
            .await;
        return Err(Rejection(e));
    }
    // A large submission's working memory (the score's expansion, the registry rows, the
    // baton's spec of every sheet) is freed by now or once the baton has the job: give
    // those pages back, so the job's resident cost is what it keeps (issue 24).
    if planned >= TRIM_AFTER_SHEETS {
        mozart_conductor::memory::trim_after_job();
    }
    // Upstream's words: the job joins the queue of job slots (it runs at once when one is
    // free; `mozart status` says `queued` and why while it waits).
    let limit = mgr
        .shared
        .max_concurrent_jobs
        .load(std::sync::atomic::Ordering::SeqCst);
    Ok(JobResponse::new(
        job_id,
        JobResponseStatus::Accepted,
        Some(format!("Job queued (concurrency limit: {limit})")),
    ))
}

/// Hold the completed sheets of `cp` (carried over from a previous run, their rows saved)
/// as their facts, as a large running job holds the sheets it completes
/// (`compact::compact_completed`); whether there were any.
fn compact_carried(cp: &mut CheckpointState) -> bool {
    let done: Vec<u32> = cp
        .sheets
        .statuses()
        .filter(|(_, status)| *status == mozart_state::SheetStatus::Completed)
        .map(|(num, _)| num)
        .collect();
    for &num in &done {
        if let Some(sheet) = cp.sheets.get_mut(&num) {
            super::compact::compact_completed(sheet);
        }
        cp.sheets.compact(num);
    }
    !done.is_empty()
}

/// A checkpoint for the plan, carrying over terminal sheets of a previous run; and, when
/// that run ended failed or cancelled, its unfinished sheets that had made attempts, with
/// their attempt counts: they run again with a fresh retry budget ([`JobRun::fresh_budget`]).
pub(super) fn build_checkpoint(
    job_id: &str,
    config: &mozart_config::JobConfig,
    plan: &PlanOutline,
    mut previous: Option<&mut CheckpointState>,
    req: &SubmitRequest,
) -> (CheckpointState, HashMap<u32, u32>) {
    let mut fresh_budget = HashMap::new();
    // A run that ended is run again: what it spent is not held against the new one (a
    // restarted conductor, by contrast, goes on with the retries a running job has spent).
    let ended = previous
        .as_deref()
        .is_some_and(|p| matches!(p.status, JobStatus::Failed | JobStatus::Cancelled));
    let mut cp = CheckpointState::new(job_id, &config.name, plan.total_sheets);
    cp.total_movements = Some(plan.total_movements);
    if let Some(prev) = previous.as_deref() {
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
    // The names the job's sheets play, each once (a handful, whatever the sheet count).
    let mut instruments: Vec<String> = Vec::new();
    for sheet in plan.sheets(config) {
        if !instruments.contains(&sheet.instrument) {
            instruments.push(sheet.instrument.clone());
        }
        // Taken out of the previous run's checkpoint, not copied: a resumed 100,000-sheet
        // job does not hold both runs' sheets at once (issue 24).
        let carried = previous
            .as_deref_mut()
            .and_then(|p| p.sheets.remove(&sheet.num));
        let mut s = match carried {
            Some(p)
                if matches!(
                    p.status,
                    mozart_state::SheetStatus::Completed | mozart_state::SheetStatus::Skipped
                ) =>
            {
                p
            }
            carried => {
                let mut s = SheetState::new(sheet.num);
                // Keep attempt counts of an unfinished sheet so retries are not refunded.
                if let Some(p) = carried.as_ref() {
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
                    if ended && p.attempt_count > 0 {
                        fresh_budget.insert(sheet.num, p.attempt_count);
                    }
                    // An attempt still running remotely is re-attached to, not run again.
                    s.remote_attempt = p.remote_attempt.clone();
                    // A retry it was waiting for waits out the rest of its backoff (a run
                    // that ended starts its sheets afresh).
                    if !ended {
                        s.retry_at = p.retry_at;
                    }
                    // What its attempts already spent stays counted (issue 22).
                    s.input_tokens = p.input_tokens;
                    s.output_tokens = p.output_tokens;
                    s.estimated_cost = p.estimated_cost;
                    s.cost_confidence = p.cost_confidence;
                    // A sheet that waited on a rate limit waits on it again behind the
                    // restored limit: `status` keeps showing why (issue 22). One waiting to
                    // retry (a restarted conductor, a paused job) keeps the error it retries
                    // after: `status` showed `retrying` beside a blank error. The output of
                    // the attempt that error is of stays with it: `logs --sheet` said "no
                    // output recorded" of a rate-limited sheet after a restart.
                    if !ended || p.error_category == Some(mozart_state::ErrorCategory::RateLimit) {
                        s.error_category = p.error_category;
                        s.error_code = p.error_code.clone();
                        s.error_message = p.error_message.clone();
                        s.exit_code = p.exit_code;
                        s.stdout_tail = p.stdout_tail.clone();
                        s.stderr_tail = p.stderr_tail.clone();
                        s.output_truncated = p.output_truncated;
                    }
                }
                s
            }
        };
        s.instrument_name = Some(sheet.instrument);
        s.movement = Some(sheet.movement);
        s.voice = Some(sheet.voice);
        if let Some(start) = req.start_sheet {
            if sheet.num < start && s.status == mozart_state::SheetStatus::Pending {
                s.status = mozart_state::SheetStatus::Skipped;
                s.error_message = Some(format!("skipped: --start-sheet {start}"));
            }
        }
        // Held as its facts (a planned sheet is little more than its number): a job's
        // memory grows with the sheets that run, not with those it plans (issue 24).
        cp.sheets.insert_compact(sheet.num, s);
    }
    cp.last_completed_sheet = cp.highest_completed();
    instruments.sort();
    cp.instruments_used = instruments;
    (cp, fresh_budget)
}
