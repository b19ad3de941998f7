//! `job.recover` (cli.md §5.5, conductor.md §8.12): re-run the validations of a finished
//! job's failed sheets and, unless it is a dry run, mark the sheets that now pass completed —
//! saved in the registry, so `mozart resume` then runs only what is left. Upstream's
//! conductor only reported the state and its CLI changed a copy that was never saved ([BUG]).

use std::path::{Path, PathBuf};

use mozart_baton::validation::{
    recorded_baseline, run_validations, CheckStatus, MtimeSnapshot, ValidationCheck, ValidationRule,
};
use mozart_config::PlanOutline;
use mozart_ipc::status::{RecoveryCheck, SheetRecovery};
use mozart_ipc::types::RecoverParams;
use mozart_state::{CheckpointState, SheetStatus, Timestamp};

use super::{lock, musician, JobError, JobManager, JobRun};

/// Re-validate the failed sheets of `p.job_id` (all, or `p.sheet_num`); `None` when the job
/// has no failed sheet to look at.
pub(super) async fn recover(
    mgr: &JobManager,
    p: &RecoverParams,
) -> Result<Vec<SheetRecovery>, JobError> {
    let (run, mut checkpoint) = prepare(mgr, p).await?;
    if let Some(n) = p.sheet_num.filter(|n| !checkpoint.sheets.contains_key(n)) {
        return Err(JobError::Busy(format!(
            "Job '{}' has no sheet {n}: its sheets are 1-{}",
            p.job_id, checkpoint.total_sheets
        )));
    }
    let failed: Vec<u32> = checkpoint
        .sheets
        .values()
        .filter(|s| s.status == SheetStatus::Failed)
        .map(|s| s.sheet_num)
        .filter(|n| p.sheet_num.is_none_or(|only| only == *n))
        .collect();
    let mut out = Vec::with_capacity(failed.len());
    for num in failed {
        let Some(planned) = run.sheet(num) else {
            continue;
        };
        // The branch its worktree really got (`-2` when the name was taken).
        let branch = crate::sheet_worktrees::per_sheet(&run.config)
            .then(|| crate::sheet_worktrees::recorded_branch(&run.config, &run.job_id, num))
            .flatten();
        let rules = musician::sheet_rules(&run, &planned, branch.as_deref());
        let snapshot = baseline(&rules, &checkpoint, num);
        let runner = super::attempt::check_runner(&mgr.shared, &run.job_id, num);
        let report = mozart_baton::validation::RUN_COMMANDS
            .scope(runner, run_validations(&rules, &snapshot))
            .await;
        let checks: Vec<RecoveryCheck> = report
            .results
            .iter()
            .map(|r| RecoveryCheck {
                rule_type: r.rule_type.clone(),
                description: r
                    .description
                    .clone()
                    .unwrap_or_else(|| match (&r.path, &r.pattern) {
                        (Some(path), _) => format!("{} {}", r.rule_type, path.display()),
                        (None, Some(pattern)) => format!("{} {pattern}", r.rule_type),
                        _ => r.rule_type.clone(),
                    }),
                status: match r.status {
                    CheckStatus::Passed => "passed",
                    CheckStatus::Failed => "failed",
                    CheckStatus::Skipped => "skipped",
                }
                .to_string(),
                error: r.error_message.clone(),
            })
            .collect();
        // No rule proves nothing: a sheet without applicable validations is not recovered.
        let passed =
            !checks.is_empty() && report.failed_count() == 0 && report.skipped_count() == 0;
        let recovered = passed && !p.dry_run;
        if recovered {
            mark_completed(&mut checkpoint, num);
        }
        out.push(SheetRecovery {
            sheet_num: num,
            checks,
            passed,
            recovered,
        });
    }
    let recovered: Vec<u32> = out
        .iter()
        .filter(|s| s.recovered)
        .map(|s| s.sheet_num)
        .collect();
    if !recovered.is_empty() {
        // The job's error told why these sheets failed: what happened since is said with it,
        // or `status` names a failure the sheets above it no longer show.
        let note = format!(
            "mozart recover marked {} completed ({} validations pass); 'mozart resume {}' runs what is left",
            sheet_list(&recovered),
            if recovered.len() == 1 { "its" } else { "their" },
            p.job_id
        );
        let error = match checkpoint.error_message.take() {
            Some(old) if !old.is_empty() => format!("{old} — since then {note}"),
            _ => note,
        };
        checkpoint.error_message = Some(error.clone());
        let registry = lock(&mgr.shared.registry);
        registry.save_checkpoint(&checkpoint)?;
        if let Some(mut record) = registry.get_job(&p.job_id)? {
            record.error_message = Some(error);
            registry.update_job(&record)?;
        }
        drop(registry);
        tracing::info!(
            job_id = %p.job_id,
            sheets = ?out.iter().filter(|s| s.recovered).map(|s| s.sheet_num).collect::<Vec<_>>(),
            "job.recovered_sheets"
        );
    }
    Ok(out)
}

/// The job as it was submitted (its stored score) and its stored checkpoint; refuses a job
/// the baton still holds (running or paused: the baton owns its sheets' state).
async fn prepare(
    mgr: &JobManager,
    p: &RecoverParams,
) -> Result<(JobRun, CheckpointState), JobError> {
    let id = &p.job_id;
    if mgr.job_facts(id).await.is_some_and(|f| f.in_baton) {
        return Err(JobError::Busy(format!(
            "Job '{id}' is still running or paused: its sheets belong to the running job. Cancel it or wait for it to finish, then recover."
        )));
    }
    let registry = lock(&mgr.shared.registry);
    let record = registry
        .get_job(id)?
        .ok_or_else(|| JobError::NotFound(id.clone()))?;
    let checkpoint = registry
        .load_checkpoint(id)?
        .ok_or_else(|| JobError::NotFound(id.clone()))?;
    let no_snapshot =
        || JobError::Busy("No config snapshot in state — cannot run validations".into());
    let text = registry
        .job_score(id)?
        .and_then(|s| s.yaml)
        .ok_or_else(no_snapshot)?;
    drop(registry);
    let config_path = PathBuf::from(&record.config_path);
    let mut config = mozart_config::load_score_str(&text, &config_path)
        .map_err(|e| JobError::Busy(format!("The stored score does not load: {e}")))?
        .config;
    let workspace = p
        .workspace
        .as_deref()
        .filter(|w| !w.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(&record.workspace));
    if let Err(e) = std::fs::metadata(&workspace) {
        if e.kind() == std::io::ErrorKind::NotFound {
            // Every rule would fail for want of the directory: say so, not "could not be
            // recovered".
            return Err(JobError::Busy(format!(
                "The workspace of '{id}' no longer exists: {}. Its validations run there: put it back (or recover with --workspace DIR where it is now)",
                workspace.display()
            )));
        }
    }
    config.workspace = workspace.clone();
    let plan = PlanOutline::of(&config)
        .map_err(|e| JobError::Busy(format!("The stored score does not plan: {e}")))?;
    let renderer = mozart_config::template::PromptRenderer::new(&config, config_path.parent())
        .map_err(|e| JobError::Busy(format!("The stored score's template: {e}")))?;
    let run = JobRun {
        hooks_owed: false,
        fresh_budget: Default::default(),
        capture_since: super::capture_since(checkpoint.started_at.as_ref()),
        job_id: id.clone(),
        config,
        plan,
        working_dir: checkpoint
            .worktree_path
            .as_deref()
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.clone()),
        sheet_logs: mozart_ipc::paths::sheet_logs_dir(&workspace, id),
        workspace,
        renderer,
        worktree: None,
        score_dir: config_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        chain_depth: record.chain_depth.unwrap_or(0),
    };
    Ok((run, checkpoint))
}

/// What a `file_modified` rule of sheet `num` is judged against: the mtime the run compared
/// with (its last check recorded it), else — the check never ran — the start of the sheet's
/// last attempt (the job's start for a sheet that never started). An empty snapshot would
/// count any file as modified: a file the run had just failed as stale passed here.
fn baseline(rules: &[ValidationRule], cp: &CheckpointState, num: u32) -> MtimeSnapshot {
    let mut snapshot = MtimeSnapshot::default();
    let sheet = cp.sheets.get(&num);
    let details = sheet.and_then(|s| s.validation_details.as_deref());
    let started = sheet
        .and_then(|s| s.started_at.as_ref())
        .or(cp.started_at.as_ref())
        .and_then(Timestamp::to_epoch)
        .and_then(|secs| std::time::Duration::try_from_secs_f64(secs).ok())
        .and_then(|d| std::time::SystemTime::UNIX_EPOCH.checked_add(d));
    for rule in rules {
        let ValidationCheck::FileModified { path } = &rule.check else {
            continue;
        };
        let shown = path.display().to_string();
        let recorded = details
            .into_iter()
            .flatten()
            .find(|d| {
                d.rule_type.as_deref() == Some("file_modified")
                    && d.path.as_deref() == Some(shown.as_str())
            })
            .and_then(|d| d.expected_value.as_deref())
            .and_then(recorded_baseline);
        match recorded {
            // The file did not exist before the sheet ran: any file is its work.
            Some(None) => {}
            Some(Some(before)) => snapshot.record(path.clone(), before),
            None => {
                if let Some(at) = started {
                    snapshot.record(path.clone(), at);
                }
            }
        }
    }
    snapshot
}

/// The sheet passed its validations after all: completed, as a run would have left it.
fn mark_completed(cp: &mut CheckpointState, num: u32) {
    if let Some(sheet) = cp.sheets.get_mut(&num) {
        sheet.status = SheetStatus::Completed;
        // When its last attempt ended (its duration is that attempt's, not the time until
        // the recovery); now when that is not known (a sheet that never ran).
        let ended = sheet
            .started_at
            .as_ref()
            .and_then(Timestamp::to_micros)
            .zip(sheet.execution_duration_seconds)
            .map(|(start, secs)| Timestamp::from_micros(start + (secs * 1e6) as i64));
        sheet.completed_at = Some(ended.unwrap_or_else(Timestamp::now));
        sheet.validation_passed = Some(true);
        sheet.error_message = None;
        sheet.error_category = None;
    }
    cp.last_completed_sheet = cp.highest_completed();
}

/// `sheet 2` / `sheets [2, 3]`, as the job's error names them.
fn sheet_list(nums: &[u32]) -> String {
    match nums {
        [one] => format!("sheet {one}"),
        many => format!("sheets {many:?}"),
    }
}
