//! The `job.*` JSON-RPC methods (conductor.md §8.1–§8.12), delegating to the [`JobManager`],
//! and the monitoring `daemon.*` methods that need the jobs' live state (`monitor`).

mod logs;
mod monitor;

use std::sync::Arc;

use mozart_ipc::status::{DiagnoseResult, ErrorsResult, HistoryResult, RecoverResult};
use mozart_ipc::types::{
    CancelResult, ClearParams, ErrorsParams, HistoryParams, JobIdParams, JobRequest, JobResponse,
    JobResponseStatus, ModifyParams, PauseResult, RecoverParams, ResumeParams,
};
use mozart_ipc::{methods, parse_params, ErrorObjectOwned, RpcError, RpcModule};
use serde_json::value::RawValue;

use mozart_state::DaemonJobStatus;

use super::table::Query;
use super::{lock, JobError, JobManager, SubmitRequest};
use crate::wire;
use mozart_conductor::{ConductorCtx, ConductorError};

type Ctx = Arc<ConductorCtx>;
/// A result already serialised: a 1,000-sheet job's status goes straight from the typed
/// document to its JSON text, with no `serde_json::Value` tree in between (that tree was
/// most of `job.status`'s transient memory on a big job).
type RpcResult = Result<Box<RawValue>, ErrorObjectOwned>;

fn to_value<T: serde::Serialize>(value: T) -> RpcResult {
    serde_json::value::to_raw_value(&value).map_err(|err| RpcError::internal(err).into())
}

fn job_error(e: JobError) -> ErrorObjectOwned {
    match e {
        JobError::NotFound(_) => RpcError::job_not_found(e.to_string()).into(),
        JobError::Registry(err) => RpcError::internal(err).into(),
        JobError::Busy(message) => {
            RpcError::new(mozart_ipc::error::JOB_NOT_RESUMABLE, message).into()
        }
    }
}

fn rejected(job_id: &str, message: impl Into<String>) -> JobResponse {
    JobResponse::rejected(job_id, message)
}

/// Sheets of `job_id` still running an attempt (the live checkpoint's `in_progress` ones).
async fn in_flight(m: &JobManager, job_id: &str) -> Vec<u32> {
    m.shared
        .table
        .ask(|reply| Query::InFlight {
            job_id: job_id.to_string(),
            reply,
        })
        .await
        .unwrap_or_default()
}

/// `job.modify` (conductor.md §6.8). A running job is paused and, once the sheets already
/// in flight have finished, resumed with the new score in the background (§6.5 step 4) —
/// the documented intent of `mozart modify --resume`; a stopped job resumes at once.
async fn modify(
    m: &JobManager,
    ctx: &Arc<ConductorCtx>,
    job_id: String,
    config: String,
    workspace: Option<String>,
) -> JobResponse {
    match m.current_status(&job_id).await {
        Ok(DaemonJobStatus::Running) => {
            // Claimed before the pause: nobody sees the job paused without its pending
            // resume (`mozart wait` keeps waiting through it).
            let claim = claim_pending(m, &job_id, &config, workspace.as_deref());
            let paused = m.pause(&job_id).await;
            // Started either way: if the pause failed, it sees the job is not paused and
            // frees the claim. The pause is this modify's own: it resumes quietly.
            resume_when_settled(
                m.clone(),
                ctx.clone(),
                job_id.clone(),
                config.clone(),
                workspace,
                (claim, true),
            );
            if let Err(e) = paused {
                return rejected(&job_id, e);
            }
            let file_name = std::path::Path::new(&config)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| config.clone());
            JobResponse::new(
                job_id,
                JobResponseStatus::Accepted,
                Some(format!(
                    "Pause signal sent. Will resume with {file_name} when paused."
                )),
            )
        }
        Ok(DaemonJobStatus::Paused) if !in_flight(m, &job_id).await.is_empty() => {
            let claim = claim_pending(m, &job_id, &config, workspace.as_deref());
            resume_when_settled(
                m.clone(),
                ctx.clone(),
                job_id.clone(),
                config,
                workspace,
                (claim, false),
            );
            JobResponse::new(
                job_id,
                JobResponseStatus::Accepted,
                Some("Job resume queued".into()),
            )
        }
        _ => m.modify(ctx, &job_id, config, workspace).await,
    }
}

/// How often the pending modify looks at the paused job.
const SETTLE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Claim the job's pending-modify slot (the job table's `pending_modify`: one slot per job,
/// as upstream's `_pending_modify` — a second modify before the first applied replaces it).
/// The claim is sent now, so claims keep the order of the requests; the answer is this
/// claim's number.
fn claim_pending(
    m: &JobManager,
    job_id: &str,
    config_path: &str,
    workspace: Option<&str>,
) -> Result<tokio::sync::oneshot::Receiver<u64>, super::table::Stopped> {
    let claim = m.shared.table.request(|reply| Query::ClaimModify {
        job_id: job_id.to_string(),
        reply,
    });
    m.shared.table.tell(super::table::Fact::ModifyPending {
        job_id: job_id.to_string(),
        config_path: config_path.to_string(),
        workspace: workspace.map(str::to_string),
    });
    claim
}

/// A pending `modify --resume` found in a paused job's record at start-up: claimed again and
/// applied as it would have been had the conductor not stopped.
pub(super) fn resume_pending_modify(
    m: &JobManager,
    ctx: &Ctx,
    job_id: String,
    config: String,
    workspace: Option<String>,
) {
    let claim = claim_pending(m, &job_id, &config, workspace.as_deref());
    // Paused before the restart by this modify (or by the user before it), it goes on.
    resume_when_settled(
        m.clone(),
        Arc::clone(ctx),
        job_id,
        config,
        workspace,
        (claim, true),
    );
}

/// Frees the job's slot when its pending modify ends, unless a newer one holds it.
struct PendingGuard {
    manager: JobManager,
    job_id: String,
    generation: u64,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.manager
            .shared
            .table
            .tell(super::table::Fact::ModifyEnded {
                job_id: std::mem::take(&mut self.job_id),
                generation: self.generation,
            });
    }
}

/// True while `generation` is still the job's newest pending modify.
async fn still_pending(m: &JobManager, job_id: &str, generation: u64) -> bool {
    m.shared
        .table
        .ask(|reply| Query::StillPending {
            job_id: job_id.to_string(),
            generation,
            reply,
        })
        .await
        .unwrap_or(false)
}

/// Resume `job_id` with `config` once no sheet of it is in flight (§6.5 step 4: a pending
/// modify applies when the job ends paused or failed). Given up when the job is resumed,
/// cancelled or completes meanwhile — the user or the score decided otherwise. `claim` is
/// the job's pending-modify slot, claimed by the caller ([`claim_pending`]).
fn resume_when_settled(
    m: JobManager,
    ctx: Arc<ConductorCtx>,
    job_id: String,
    config: String,
    workspace: Option<String>,
    (claim, quiet): (
        Result<tokio::sync::oneshot::Receiver<u64>, super::table::Stopped>,
        bool,
    ),
) {
    tokio::spawn(async move {
        let Ok(rx) = claim else { return };
        let Ok(generation) = rx.await else { return };
        let _slot = PendingGuard {
            manager: m.clone(),
            job_id: job_id.clone(),
            generation,
        };
        loop {
            if !still_pending(&m, &job_id, generation).await {
                tracing::info!(job_id, "pending modify replaced by a newer one");
                return;
            }
            match m.current_status(&job_id).await {
                Ok(DaemonJobStatus::Paused | DaemonJobStatus::Failed) => {}
                other => {
                    tracing::info!(job_id, status = ?other, "pending modify dropped: the job is no longer paused");
                    return;
                }
            }
            if in_flight(&m, &job_id).await.is_empty() {
                break;
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
        // Resumed by the modify that paused it: no `job_start` (nor was `job_paused` sent).
        if quiet {
            super::lock(&m.shared.quiet_starts).insert(job_id.clone());
        }
        let response = m
            .resume(&ctx, &job_id, Some(config.clone()), workspace, false)
            .await;
        if response.status != JobResponseStatus::Accepted {
            super::lock(&m.shared.quiet_starts).remove(&job_id);
        }
        match response.status {
            JobResponseStatus::Accepted => {
                tracing::info!(job_id, "pending modify applied: resumed with the new score")
            }
            _ => {
                tracing::warn!(job_id, message = ?response.message, "pending modify could not resume the job");
                // The job stays as it was: its status says so (the conductor log is not
                // where a user looks), until the job is resumed.
                if let Ok(status @ (DaemonJobStatus::Paused | DaemonJobStatus::Failed)) =
                    m.current_status(&job_id).await
                {
                    // On one line: `status` shows the note as one.
                    let why = response
                        .message
                        .as_deref()
                        .map(|w| w.split_whitespace().collect::<Vec<_>>().join(" "))
                        .filter(|w| !w.is_empty())
                        .unwrap_or_else(|| "the resume was refused".into());
                    let note = format!(
                        "modify --resume was not applied: the new score {config} could not be \
                         used ({why}); the job stays {} with its old score. Fix the score and run \
                         'mozart modify {job_id} -c {config} --resume' again, or 'mozart resume \
                         {job_id} --no-reload' to go on with the score as it was submitted",
                        status.as_str()
                    );
                    // A failed job keeps what failed it in front.
                    let failed_with = (status == DaemonJobStatus::Failed)
                        .then(|| super::lock(&m.shared.registry).get_job(&job_id))
                        .and_then(|row| row.ok().flatten())
                        .and_then(|row| row.error_message)
                        .filter(|old| !old.is_empty());
                    let note = match failed_with {
                        Some(old) => format!("{old} — then {note}"),
                        None => note,
                    };
                    m.set_status(&job_id, status, Some(&note)).await;
                }
            }
        }
    });
}

/// Register `name`, served by `handle` with the manager, the context and typed parameters.
fn job_method<P, F, Fut>(
    module: &mut RpcModule<Ctx>,
    name: &'static str,
    mgr: &JobManager,
    handle: F,
) -> Result<(), ConductorError>
where
    P: serde::de::DeserializeOwned + Send + 'static,
    F: Fn(JobManager, Ctx, P) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = RpcResult> + Send + 'static,
{
    let mgr = mgr.clone();
    module
        .register_async_method(name, move |params, ctx, _| {
            let (m, handle) = (mgr.clone(), handle.clone());
            async move {
                let p: P = parse_params(&params).map_err(ErrorObjectOwned::from)?;
                handle(m, Arc::clone(&ctx), p).await
            }
        })
        .map(|_| ())
        .map_err(|err| ConductorError::Register(err.to_string()))
}

/// Register every `job.*` method of conductor.md §8, served by `mgr`.
pub fn register(module: &mut RpcModule<Ctx>, mgr: JobManager) -> Result<(), ConductorError> {
    register_lifecycle(module, &mgr)?;
    register_reports(module, &mgr)?;
    monitor::register(module, mgr.clone())?;
    logs::register(module, mgr)
}

/// Methods that change a job: submit, pause, resume, modify, cancel, clear.
fn register_lifecycle(module: &mut RpcModule<Ctx>, mgr: &JobManager) -> Result<(), ConductorError> {
    job_method(module, methods::JOB_SUBMIT, mgr, submit)?;
    job_method(
        module,
        methods::JOB_PAUSE,
        mgr,
        |m, _, p: JobIdParams| async move {
            to_value(match m.pause(&p.job_id).await {
                Ok(withdrawn) => PauseResult {
                    paused: true,
                    error: None,
                    withdrawn,
                },
                Err(e) => PauseResult {
                    paused: false,
                    error: Some(e),
                    withdrawn: Vec::new(),
                },
            })
        },
    )?;
    job_method(module, methods::JOB_RESUME, mgr, resume)?;
    job_method(
        module,
        methods::JOB_MODIFY,
        mgr,
        |m, ctx, p: ModifyParams| async move {
            let Some(config) = p.config_path.filter(|c| !c.is_empty()) else {
                return to_value(rejected(&p.job_id, "config_path required"));
            };
            let ws = p.workspace.filter(|w| !w.is_empty());
            to_value(modify(&m, &ctx, p.job_id, config, ws).await)
        },
    )?;
    job_method(
        module,
        methods::JOB_CANCEL,
        mgr,
        |m, _, p: JobIdParams| async move {
            to_value(CancelResult {
                cancelled: m.cancel(&p.job_id).await,
            })
        },
    )?;
    job_method(
        module,
        methods::JOB_CLEAR,
        mgr,
        |m, _, p: ClearParams| async move {
            let result = m
                .clear(p.statuses, p.older_than_seconds, p.job_ids)
                .await
                .map_err(job_error)?;
            to_value(result)
        },
    )
}

/// `job.submit`: a score to run (or, dry run, its plan).
async fn submit(m: JobManager, ctx: Ctx, p: JobRequest) -> RpcResult {
    let watch = p.watch_ms.map(std::time::Duration::from_millis);
    let req = SubmitRequest {
        config_path: p.config_path,
        workspace: p.workspace,
        fresh: p.fresh,
        start_sheet: p.start_sheet,
        self_healing: p.self_healing,
        chain_depth: p.chain_depth,
        resume_of: None,
        parent_job_id: None,
        no_reload: false,
        submit_dir: p.cwd,
    };
    if p.dry_run {
        return to_value(super::submit::dry_run(&m, &ctx, req).await);
    }
    let mut response = m.submit(&ctx, req).await;
    if let (Some(timeout), JobResponseStatus::Accepted) = (watch, response.status) {
        // The submitter's early-failure look, on this call (`JobRequest::watch_ms`). A
        // watch that fails leaves the answer as it was: the submission itself succeeded.
        response.watched = m.watch(&response.job_id, timeout, false).await.ok();
        // Now known whether the job waits for a job slot: "queued" only when it does.
        if let (Some(seen), false) = (&response.watched, response.nothing_to_run) {
            let limit = m
                .shared
                .max_concurrent_jobs
                .load(std::sync::atomic::Ordering::SeqCst);
            let slot = super::submit::slot_message(limit, seen.status == "queued");
            // The lines after the first say more (a job started over): kept.
            response.message = Some(
                match response.message.as_deref().and_then(|m| m.split_once('\n')) {
                    Some((_, more)) => format!("{slot}\n{more}"),
                    None => slot,
                },
            );
        }
    }
    if p.self_healing_auto_confirm && response.status == JobResponseStatus::Accepted {
        // Every field this method accepts does something or says why not.
        let note = if p.self_healing {
            "self-healing fixes apply without confirmation here, so self_healing_auto_confirm changes nothing"
        } else {
            "self_healing_auto_confirm has no effect without self_healing"
        };
        response.message = Some(match response.message.take() {
            Some(m) => format!("{m}; {note}"),
            None => note.to_string(),
        });
    }
    to_value(response)
}

/// `job.resume`: a paused or stopped job goes on, with a new score if one is given.
async fn resume(m: JobManager, ctx: Ctx, p: ResumeParams) -> RpcResult {
    let ws = p.workspace.filter(|w| !w.is_empty());
    let config = p.config_path.filter(|c| !c.is_empty());
    if let Some(config) = config.clone() {
        if m.current_status(&p.job_id).await == Ok(DaemonJobStatus::Paused)
            && !in_flight(&m, &p.job_id).await.is_empty()
        {
            // A new score replaces the job's registration; doing that now would kill
            // the sheets still finishing after the pause.
            let claim = claim_pending(&m, &p.job_id, &config, ws.as_deref());
            resume_when_settled(
                m.clone(),
                Arc::clone(&ctx),
                p.job_id.clone(),
                config,
                ws,
                (claim, false),
            );
            return to_value(JobResponse::new(
                p.job_id,
                JobResponseStatus::Accepted,
                Some("Job resume queued".into()),
            ));
        }
    }
    to_value(m.resume(&ctx, &p.job_id, config, ws, p.no_reload).await)
}

/// `job.progress`: every asked-for job's progress in one visit to the job table (a jobs
/// list asked `job.status` once per row, each call a visit that waits behind the sheet
/// events of every running job). Left out: jobs not loaded, not yet with a checkpoint, with
/// completed sheets kept as facts only (their costs are in the registry), or larger than
/// [`mozart_ipc::status::PROGRESS_SHEETS`] — the caller asks `job.status` for those.
async fn progress(m: &JobManager, ids: Vec<String>) -> mozart_ipc::status::ProgressResult {
    let jobs = m
        .shared
        .table
        .ask(|reply| Query::Progress {
            job_ids: ids,
            reply,
        })
        .await
        .unwrap_or_default();
    mozart_ipc::status::ProgressResult { jobs }
}

/// Most pages one `job.overview` answers: the overview asks for two; the bound keeps one
/// call from asking for the registry many times over.
const OVERVIEW_PAGES: usize = 8;

/// Methods that report on jobs: status, list, errors, diagnose, history, recover.
fn register_reports(module: &mut RpcModule<Ctx>, mgr: &JobManager) -> Result<(), ConductorError> {
    job_method(module, methods::JOB_STATUS, mgr, status)?;
    job_method(
        module,
        methods::DAEMON_INSTRUMENTS,
        mgr,
        |m, _, _: serde::de::IgnoredAny| async move {
            let loaded: serde_json::Map<String, serde_json::Value> = m
                .shared
                .instruments
                .profiles()
                .filter_map(|p| Some((p.name.clone(), serde_json::to_value(p.as_ref()).ok()?)))
                .collect();
            to_value(serde_json::json!({ "instruments": loaded }))
        },
    )?;
    job_method(
        module,
        methods::JOB_LIST,
        mgr,
        |m, _, _: serde::de::IgnoredAny| async move { to_value(m.list().await.map_err(job_error)?) },
    )?;
    job_method(
        module,
        methods::JOB_WATCH,
        mgr,
        |m, _, p: mozart_ipc::types::JobWatchParams| async move {
            let timeout = std::time::Duration::from_millis(p.timeout_ms);
            to_value(
                m.watch(&p.job_id, timeout, p.until_done)
                    .await
                    .map_err(job_error)?,
            )
        },
    )?;
    job_method(
        module,
        methods::JOB_LIST_PAGE,
        mgr,
        |m, _, p: mozart_ipc::types::ListPageParams| async move {
            to_value(m.list_page(p).await.map_err(job_error)?)
        },
    )?;
    job_method(module, methods::JOB_OVERVIEW, mgr, overview)?;
    job_method(
        module,
        methods::JOB_PROGRESS,
        mgr,
        |m, _, p: mozart_ipc::types::ProgressParams| async move {
            if p.job_ids.len() > mozart_ipc::types::PROGRESS_JOBS {
                return Err(RpcError::new(
                    mozart_ipc::error::INVALID_PARAMS,
                    format!(
                        "job.progress: {} jobs asked for; at most {} in one call",
                        p.job_ids.len(),
                        mozart_ipc::types::PROGRESS_JOBS
                    ),
                )
                .into());
            }
            to_value(progress(&m, p.job_ids).await)
        },
    )?;
    job_method(module, methods::JOB_RECOVER, mgr, recover)?;
    job_method(
        module,
        methods::JOB_ERRORS,
        mgr,
        |m, _, p: ErrorsParams| async move {
            let state = m.status(&p.job_id).await.map_err(job_error)?;
            let (state, runs) = with_error_history(&m, state, p.all_runs)?;
            to_value(ErrorsResult { state, runs })
        },
    )?;
    job_method(
        module,
        methods::JOB_DIAGNOSE,
        mgr,
        |m, _, p: ErrorsParams| async move {
            // Bounded, whatever the job's size: every sheet of a job of up to
            // DIAGNOSE_FULL_UP_TO, else the counts of all and the first DIAGNOSE_CAP running
            // and failed sheets, marked as cut in `sheets_view` (the report says so).
            let query = mozart_ipc::sheet_view::SheetQuery {
                full_up_to: Some(DIAGNOSE_FULL_UP_TO),
                cap: Some(DIAGNOSE_CAP),
                ..Default::default()
            };
            let state = m
                .status_with(&p.job_id, Some(query))
                .await
                .map_err(job_error)?;
            let (state, runs) = with_error_history(&m, state, p.all_runs)?;
            let state = with_timeline_facts(&m, state)?;
            let workspace = state.workspace().map(str::to_owned);
            to_value(DiagnoseResult {
                state,
                workspace,
                runs,
            })
        },
    )?;
    job_method(
        module,
        methods::JOB_HISTORY,
        mgr,
        |m, _, p: HistoryParams| async move { history(&m, p) },
    )
}

/// `job.diagnose` lists every sheet of a job of up to this many sheets.
pub const DIAGNOSE_FULL_UP_TO: u32 = 1_000;
/// `job.diagnose` of a larger job lists at most this many running and this many failed
/// sheets (the first by number), with the counts of every sheet.
pub const DIAGNOSE_CAP: u32 = 100;

/// The job's state with every sheet's failed attempts in its `error_history`, read from
/// the registry's attempt history (`job.errors`, `job.diagnose`): the checkpoint itself
/// keeps only each sheet's last error. The current run's attempts only, unless `all_runs`:
/// after a fresh start the sheets are another run's, and an earlier run's errors listed
/// under them read as this run's; the answer says how many of those are left out.
fn with_error_history(
    m: &JobManager,
    state: mozart_ipc::status::JobStatusResult,
    all_runs: bool,
) -> Result<
    (
        mozart_ipc::status::JobStatusResult,
        Option<mozart_ipc::status::ErrorRuns>,
    ),
    ErrorObjectOwned,
> {
    let mozart_ipc::status::JobStatusResult::Checkpoint(mut doc) = state else {
        return Ok((state, None));
    };
    let registry = lock(&m.shared.registry);
    let run = registry
        .current_run(&doc.job_id)
        .map_err(|e| job_error(e.into()))?;
    let (after_attempt, earlier) = if all_runs {
        (0, 0)
    } else {
        let earlier = registry
            .earlier_runs_errors(&doc.job_id, &run)
            .map_err(|e| job_error(e.into()))?;
        (run.after_attempt, earlier)
    };
    let failed = registry
        .attempt_errors(&doc.job_id, wire::ERRORS_PER_SHEET, after_attempt)
        .map_err(|e| job_error(e.into()))?;
    drop(registry);
    wire::fill_error_history(&mut doc, failed);
    let runs = mozart_ipc::status::ErrorRuns {
        run: run.run,
        started_at: run.started_at,
        all_runs,
        earlier_errors_not_shown: earlier,
    };
    Ok((
        mozart_ipc::status::JobStatusResult::Checkpoint(doc),
        Some(runs),
    ))
}

/// The job's state with each sheet's execution mode and outcome taken from its attempt
/// history in the current run (`job.diagnose`'s timeline).
fn with_timeline_facts(
    m: &JobManager,
    state: mozart_ipc::status::JobStatusResult,
) -> Result<mozart_ipc::status::JobStatusResult, ErrorObjectOwned> {
    let mozart_ipc::status::JobStatusResult::Checkpoint(mut doc) = state else {
        return Ok(state);
    };
    let registry = lock(&m.shared.registry);
    let last = registry
        .current_run(&doc.job_id)
        .and_then(|run| registry.last_attempts(&doc.job_id, run.after_attempt))
        .map_err(|e| job_error(e.into()))?;
    drop(registry);
    wire::fill_timeline_facts(&mut doc, last);
    Ok(mozart_ipc::status::JobStatusResult::Checkpoint(doc))
}

/// `job.status`: the job's document, with the sheets the caller's view asks for.
async fn status(m: JobManager, _: Ctx, p: mozart_ipc::sheet_view::StatusParams) -> RpcResult {
    if let Some(unknown) = p
        .sheets
        .as_ref()
        .map(|q| q.unknown_states())
        .filter(|u| !u.is_empty())
    {
        return Err(RpcError::new(
            mozart_ipc::error::INVALID_PARAMS,
            format!(
                "job.status: unknown sheet state(s) {}; use one of: {}",
                unknown.join(", "),
                mozart_ipc::sheet_view::STATES.join(", ")
            ),
        )
        .into());
    }
    let mut state = m
        .status_with(&p.job_id, p.sheets)
        .await
        .map_err(job_error)?;
    if let mozart_ipc::status::JobStatusResult::Checkpoint(doc) = &mut state {
        // Recent Errors lists failed attempts, not only each sheet's last error: those of
        // the current run (an earlier run's, before a fresh start, are `mozart errors
        // --all-runs`'s).
        let registry = m.shared.read_registry();
        let read = registry.current_run(&doc.job_id).and_then(|run| {
            registry.recent_attempt_errors(
                &doc.job_id,
                wire::RECENT_ATTEMPT_ERRORS,
                run.after_attempt,
            )
        });
        drop(registry);
        match read {
            // None failed: the document stays as it was (upstream-shaped).
            Ok((_, 0)) => {}
            Ok((attempts, total)) => {
                doc.recent_attempt_errors = Some(wire::recent_attempt_errors(attempts, total));
            }
            Err(e) => {
                tracing::warn!(job_id = %doc.job_id, error = %e, "cannot read recent failed attempts")
            }
        }
    }
    to_value(state)
}

/// `job.overview`: the conductor's uptime and several list pages in one call.
async fn overview(m: JobManager, ctx: Ctx, p: mozart_ipc::types::OverviewParams) -> RpcResult {
    if p.pages.len() > OVERVIEW_PAGES {
        return Err(RpcError::new(
            mozart_ipc::error::INVALID_PARAMS,
            format!(
                "job.overview: {} pages asked for; at most {OVERVIEW_PAGES} in one call",
                p.pages.len()
            ),
        )
        .into());
    }
    // The uptime is read before the pages, as `mozart status` read `daemon.health`
    // before its pages when they were separate calls.
    let uptime_seconds = ctx.uptime_seconds();
    let mut pages = Vec::with_capacity(p.pages.len());
    for page in p.pages {
        pages.push(m.list_page(page).await.map_err(job_error)?);
    }
    to_value(mozart_ipc::status::Overview {
        uptime_seconds,
        pages,
    })
}

/// `job.recover`: the failed sheets' validations run again, those that now pass marked
/// completed (a dry run only reports them).
async fn recover(m: JobManager, _: Ctx, p: RecoverParams) -> RpcResult {
    // Unknown jobs answer as every job-reading method does.
    m.status(&p.job_id).await.map_err(job_error)?;
    let recovery = super::recover_sheets::recover(&m, &p)
        .await
        .map_err(job_error)?;
    let state = m.status(&p.job_id).await.map_err(job_error)?;
    let workspace = state.workspace().map(str::to_owned);
    to_value(RecoverResult {
        state,
        workspace,
        dry_run: p.dry_run || !recovery.iter().any(|s| s.recovered),
        sheet_num: p.sheet_num,
        recovery: Some(recovery),
    })
}

/// `job.history` (ours: `mozart history` through the conductor): the job's attempts, newest first.
fn history(m: &JobManager, p: HistoryParams) -> RpcResult {
    // 0: every attempt (as `list --limit 0`); the answer says how many there are in all.
    let limit = if p.limit == 0 {
        usize::MAX
    } else {
        p.limit as usize
    };
    let registry = lock(&m.shared.registry);
    if registry
        .get_job(&p.job_id)
        .map_err(|e| job_error(e.into()))?
        .is_none()
    {
        return Err(job_error(JobError::NotFound(p.job_id)));
    }
    let rows = registry
        .attempts(&p.job_id, p.sheet_num, limit)
        .map_err(|e| job_error(e.into()))?;
    let total = registry
        .count_attempts(&p.job_id, p.sheet_num)
        .map_err(|e| job_error(e.into()))?;
    // The registry records every attempt, so history always exists (possibly empty).
    to_value(HistoryResult {
        job_id: p.job_id,
        has_history: true,
        records: rows.iter().map(wire::history_record).collect(),
        total: Some(total),
    })
}
