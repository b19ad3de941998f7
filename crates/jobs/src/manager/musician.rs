//! The musician: one attempt of one sheet (execution.md §4) — render the prompt, play the
//! instrument, run the validations, classify what went wrong, report one result.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_backends::{classify_for, ErrorCategory, ExecutionRequest, ExecutionResult};
use mozart_baton::validation::{run_validations, snapshot_mtimes, ValidationCheck, ValidationRule};
use mozart_baton::{AttemptContext, AttemptMode, AttemptResult, Failure, FailureKind};
use mozart_config::placeholders::{self, PlaceholderVars};
use mozart_config::{PlannedSheet, ValidationType};

use std::collections::{BTreeMap, BTreeSet, HashMap};

use mozart_baton::validation::MtimeSnapshot;
use mozart_state::review::ReviewState;

use super::attempt::{execute_watched_kept, AttemptDetails, Watched};
use super::instruments::backend;
use super::table::{Fact, RunChange};
use super::{JobRun, Shared};

/// The context of validation `condition`s (score.md §3.7.2): the user's integer variables
/// (booleans count as 0/1) overlaid by the sheet context.
pub(crate) fn condition_vars<'a>(
    run: &'a JobRun,
    sheet: &PlannedSheet,
) -> std::collections::HashMap<&'a str, i64> {
    let mut vars: std::collections::HashMap<&str, i64> = run
        .config
        .prompt
        .variables
        .iter()
        .filter_map(|(k, v)| {
            let n = v.as_i64().or_else(|| v.as_bool().map(i64::from))?;
            Some((k.as_str(), n))
        })
        .collect();
    let movements = i64::from(run.plan.total_movements);
    for (k, v) in [
        ("sheet_num", i64::from(sheet.num)),
        ("stage", i64::from(sheet.movement)),
        ("movement", i64::from(sheet.movement)),
        ("instance", i64::from(sheet.voice)),
        ("voice", i64::from(sheet.voice)),
        ("fan_count", i64::from(sheet.voice_count)),
        ("voice_count", i64::from(sheet.voice_count)),
        ("total_sheets", i64::from(run.plan.total_sheets)),
        ("total_stages", movements),
        ("total_movements", movements),
        ("start_item", sheet.start_item),
        ("end_item", sheet.end_item),
    ] {
        vars.insert(k, v);
    }
    vars
}

/// Validation rules of `sheet`, with placeholders expanded and conditions evaluated.
/// `branch` is the branch of the sheet's own worktree, the real `{task_branch}`.
pub(crate) fn sheet_rules(
    run: &JobRun,
    sheet: &PlannedSheet,
    branch: Option<&str>,
) -> Vec<ValidationRule> {
    // The values of `placeholder_vars`, looked up only for the names a text uses.
    let workspace = run.workspace.to_string_lossy();
    let plays_task =
        mozart_config::tasks::task_of(&run.config, sheet.movement, sheet.voice).is_some();
    let lookup = |key: &str| -> Option<Cow<'_, str>> {
        if key == "workspace" {
            return Some(Cow::Borrowed(workspace.as_ref()));
        }
        if let (true, "task_branch", Some(real)) = (plays_task, key, branch) {
            return Some(Cow::Borrowed(real));
        }
        placeholders::sheet_value(
            &run.config,
            sheet,
            run.plan.total_sheets,
            run.plan.total_movements,
            key,
        )
    };
    let expand = |text: &str, shell_quote: bool| -> String {
        placeholders::expand_with(text, |key| {
            lookup(key).map(|v| match shell_quote {
                true => Cow::Owned(placeholders::quote(&v)),
                false => v,
            })
        })
    };
    // Without a condition a rule applies whatever the variables are.
    let conditional = run.config.validations.iter().any(|r| r.condition.is_some());
    let cond_vars = if conditional {
        condition_vars(run, sheet)
    } else {
        std::collections::HashMap::new()
    };
    run.config
        .validations
        .iter()
        .map(|rule| {
            let path = |p: &Option<String>| -> PathBuf {
                let raw = expand(p.as_deref().unwrap_or(""), false);
                absolute(&run.workspace, &raw)
            };
            let check = match rule.kind {
                ValidationType::FileExists => ValidationCheck::FileExists {
                    path: path(&rule.path),
                },
                ValidationType::FileModified => ValidationCheck::FileModified {
                    path: path(&rule.path),
                },
                // Its `{placeholders}` are filled as the path's are, so the text checked is
                // the text the prompt's "Must contain" shows (upstream checked the pattern
                // as written while its prompt showed it filled in).
                ValidationType::ContentContains => ValidationCheck::ContentContains {
                    path: path(&rule.path),
                    pattern: expand(rule.pattern.as_deref().unwrap_or(""), false),
                },
                ValidationType::ContentRegex => ValidationCheck::ContentRegex {
                    path: path(&rule.path),
                    pattern: rule.pattern.clone().unwrap_or_default(),
                },
                ValidationType::CommandSucceeds => ValidationCheck::CommandSucceeds {
                    command: expand(rule.command.as_deref().unwrap_or("true"), true),
                    working_dir: rule
                        .working_directory
                        .as_deref()
                        .map(|w| absolute(&run.workspace, &expand(w, false)))
                        .unwrap_or_else(|| run.workspace.clone()),
                    timeout: Duration::from_secs_f64(
                        rule.timeout_seconds.unwrap_or(3600.0).max(0.001),
                    ),
                },
            };
            let applies =
                mozart_config::expr::condition_applies(rule.condition.as_deref(), &cond_vars);
            let mut out = ValidationRule::new(check);
            out.description = rule.description.clone();
            out.stage = u8::try_from(rule.stage.clamp(1, 10)).unwrap_or(1);
            out.retry_count = u32::try_from(rule.retry_count.max(0)).unwrap_or(0);
            out.retry_delay =
                Duration::from_millis(u64::try_from(rule.retry_delay_ms.max(0)).unwrap_or(0));
            out.applies = applies;
            out
        })
        .collect()
}

fn absolute(workspace: &Path, raw: &str) -> PathBuf {
    let p = PathBuf::from(raw);
    if p.is_absolute() {
        p
    } else {
        workspace.join(p)
    }
}

/// `branch` is the branch of the sheet's own worktree, the real `{task_branch}`.
pub(crate) fn placeholder_vars(
    run: &JobRun,
    sheet: &PlannedSheet,
    branch: Option<&str>,
) -> PlaceholderVars {
    let mut vars = placeholders::sheet_vars(
        &run.config,
        sheet,
        run.plan.total_sheets,
        run.plan.total_movements,
    );
    vars.insert(
        "workspace".into(),
        run.workspace.to_string_lossy().into_owned(),
    );
    if let (Some(real), Some(planned)) = (branch, vars.get_mut("task_branch")) {
        *planned = real.to_string();
    }
    vars
}

fn failure_kind(
    result: &ExecutionResult,
    instrument: &str,
) -> (FailureKind, String, Option<String>, Option<String>) {
    let c = classify_for(result, instrument);
    let code = Some(c.code.as_str().to_string());
    let category = Some(c.category.as_str().to_string());
    let kind = match c.category {
        // Only a wait the API or the CLI named is passed on; otherwise the baton probes on
        // its own short schedule (the classifier's per-kind default was up to an hour).
        ErrorCategory::RateLimit => {
            let stated = c.rate_limit.as_ref().filter(|r| r.stated);
            FailureKind::RateLimited {
                reset_after: stated.map(|r| Duration::from_secs_f64(r.wait_seconds.max(0.0))),
                said_after: stated
                    .and_then(|r| r.said_seconds)
                    .map(|s| Duration::from_secs_f64(s.max(0.0))),
            }
        }
        ErrorCategory::Timeout => FailureKind::Timeout,
        ErrorCategory::Auth => FailureKind::Auth,
        ErrorCategory::Signal => FailureKind::Crash,
        _ if !c.retriable => FailureKind::Fatal,
        _ => FailureKind::Transient,
    };
    (kind, c.message, code, category)
}

/// What the baton task hands a musician from the job table when it dispatches it, so the
/// musician never has to ask.
pub(crate) struct Given {
    /// The job's backends built so far, by instrument.
    pub backends: HashMap<String, Arc<dyn mozart_backends::Backend>>,
    /// The sheet's mtimes, taken before its first attempt.
    pub mtimes: Option<MtimeSnapshot>,
    /// The sheet's own worktree (`isolation.scope: sheet`), once created.
    pub worktree: Option<crate::isolation::Worktree>,
    /// The sheet's reviewer loop as the live checkpoint has it.
    pub review: ReviewState,
    /// Earlier sheets' output tails and skips (`cross_sheet` scores only).
    pub prior: Option<(BTreeMap<u32, String>, BTreeSet<u32>)>,
    /// The sheet's remote attempt (a Slurm job) a previous conductor started and whose
    /// result was never recorded.
    pub remote: Option<mozart_state::RemoteAttemptRef>,
    /// Where the attempt runs (or why it cannot be placed).
    pub placement: Result<mozart_backends::Placement, String>,
}

impl std::fmt::Debug for Given {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Given")
            .field("backends", &self.backends.keys().collect::<Vec<_>>())
            .field("worktree", &self.worktree)
            .finish_non_exhaustive()
    }
}

/// Everything an attempt needs before its instrument runs.
struct Prepared {
    workdir: PathBuf,
    sheet_wt: Option<crate::isolation::Worktree>,
    review_loop: Option<super::review::SheetLoop>,
    rules: Vec<ValidationRule>,
    snapshot: MtimeSnapshot,
    injected: super::learning::Injected,
    prompt: String,
    backend: Arc<dyn mozart_backends::Backend>,
    backends: HashMap<String, Arc<dyn mozart_backends::Backend>>,
    remote: Option<mozart_state::RemoteAttemptRef>,
    placement: mozart_backends::Placement,
}

/// Play one attempt and report it to the baton. Never panics on I/O; every failure becomes
/// a reported result.
pub(crate) async fn play(
    shared: Arc<Shared>,
    run: Arc<JobRun>,
    sheet_num: u32,
    attempt: AttemptContext,
    given: Given,
) {
    let started = Instant::now();
    let started_epoch = mozart_state::epoch_now();
    // Made from the score now: the job holds no planned sheet (issue 24).
    let Some(sheet) = run.sheet(sheet_num) else {
        let r = AttemptResult::failed(
            &run.job_id,
            sheet_num,
            attempt.dispatch_id,
            FailureKind::Dispatch,
            format!("sheet {sheet_num} is not in the plan"),
        );
        shared.table.tell(Fact::AttemptFinished {
            details: None,
            result: Box::new(r),
        });
        return;
    };
    let sheet = &sheet;
    let prepared = match prepare(&shared, &run, sheet, &attempt, given).await {
        Ok(p) => p,
        Err(message) => {
            report_failure(&shared, &run, sheet_num, &attempt, message, started_epoch);
            return;
        }
    };
    let placed = !matches!(prepared.placement, mozart_backends::Placement::Local);
    let (prepared, result, ended) = perform(&shared, &run, sheet, &attempt, prepared).await;
    if let Some(remote_id) = ended.withdrawn() {
        // Taken back from Slurm's queue before it started (pause): not an attempt, nothing
        // to judge or record; the sheet is pending again.
        // (No id: the pause came while the submission waited for Slurm, and nothing was
        // submitted.)
        drop(prepared);
        let message = if remote_id.is_empty() {
            "not submitted to Slurm: the job was paused while the submission waited for Slurm"
                .to_string()
        } else {
            shared.table.tell(Fact::Run {
                job_id: run.job_id.clone(),
                change: RunChange::Withdrawn {
                    sheet_num,
                    remote_id: remote_id.clone(),
                },
            });
            format!("Slurm job {remote_id} was withdrawn from the queue before it started (the job was paused)")
        };
        let mut r = AttemptResult::failed(
            &run.job_id,
            sheet_num,
            attempt.dispatch_id,
            FailureKind::Withdrawn,
            message,
        );
        r.instrument = attempt.instrument.clone();
        shared.table.tell(Fact::AttemptFinished {
            details: None,
            result: Box::new(r),
        });
        drop(ended);
        return;
    }
    let (mut r, mut details) = judge(
        &shared,
        &run,
        sheet,
        &attempt,
        prepared,
        &result,
        started_epoch,
    )
    .await;
    // A placed attempt (a Slurm job) took the time its job ran, from its start to its end as
    // its files and Slurm tell: not the time it waited in the queue, nor only the time since
    // a restarted conductor re-attached to it.
    let took = if placed && result.duration_seconds > 0.0 {
        Duration::from_secs_f64(result.duration_seconds)
    } else {
        started.elapsed()
    };
    details.duration_seconds = took.as_secs_f64();
    r.duration = took;
    report(&shared, details, r);
    // Only now: the next sheet is not kept waiting for this bookkeeping (issue 24).
    drop(ended);
}

/// What stays of an attempt's instrument run until its result is reported: its progress
/// in the job table and its process group under watch. Dropped after [`report`], so the
/// watchdog's `untrack`, the in-flight journal's update and the table's message are not
/// on the path from the instrument's exit to the next sheet's start (issue 24).
#[derive(Default)]
struct Ended<'a> {
    _watched: Option<Watched>,
    _live: Option<LiveEntry<'a>>,
}

impl Ended<'_> {
    /// The Slurm job the attempt's placement withdrew from the queue (pause), if it did.
    fn withdrawn(&self) -> Option<String> {
        match self._live.as_ref()?.progress.withdrawal()? {
            mozart_backends::Withdrawal::Withdrawn(id) => Some(id),
            mozart_backends::Withdrawal::Kept { .. } => None,
        }
    }
}

/// Tell the owner of the job table the attempt is over, in one message: it keeps the
/// details for the checkpoint and hands the result to the baton.
///
/// Every attempt passes here, so this is where its text is redacted (issue 21): nothing of
/// it reaches the checkpoint, the registry's history, `status`, `errors`, `diagnose`, the
/// notifications or the learning store unredacted.
fn report(shared: &Shared, mut details: AttemptDetails, mut r: AttemptResult) {
    redact_attempt(&mut details, &mut r);
    details.instrument = Some(r.instrument.clone());
    shared.table.tell(Fact::AttemptFinished {
        details: Some(Box::new(details)),
        result: Box::new(r),
    });
}

/// Redact every text of an attempt the conductor keeps or shows: output tails, error
/// message, validation findings, the reviewer's feedback.
fn redact_attempt(details: &mut AttemptDetails, r: &mut AttemptResult) {
    use mozart_backends::redact::redact_in_place as scrub;
    let scrub_opt = |s: &mut Option<String>| {
        if let Some(s) = s.as_mut() {
            scrub(s);
        }
    };
    scrub(&mut details.stdout_tail);
    scrub(&mut details.stderr_tail);
    scrub_opt(&mut details.error_message);
    if let Some(report) = details.validation.as_mut() {
        for c in &mut report.results {
            scrub_opt(&mut c.description);
            scrub_opt(&mut c.pattern);
            scrub_opt(&mut c.actual_value);
            scrub_opt(&mut c.expected_value);
            scrub_opt(&mut c.error_message);
            scrub_opt(&mut c.suggested_fix);
        }
    }
    if let Some(review) = details.review.as_mut() {
        scrub_opt(&mut review.feedback);
        for v in &mut review.history {
            scrub(&mut v.feedback);
        }
    }
    if let Some(f) = r.failure.as_mut() {
        scrub(&mut f.message);
    }
}

/// Working directory, reviewer loop, validation rules, mtimes, learned patterns, prompt
/// and backend of the attempt; an error fails the attempt as fatal.
async fn prepare(
    shared: &Arc<Shared>,
    run: &Arc<JobRun>,
    sheet: &PlannedSheet,
    attempt: &AttemptContext,
    given: Given,
) -> Result<Prepared, String> {
    // Ours (docs/mochi.md): the sheet's own worktree, and where its reviewer loop stands.
    let (workdir, sheet_wt) = super::review::sheet_dir(shared, run, sheet, given.worktree).await?;
    let review_loop = super::review::begin(run, sheet, &workdir, sheet_wt.is_some(), given.review)?;
    let branch = sheet_wt.as_ref().map(|w| w.branch.as_str());
    let rules = sheet_rules(run, sheet, branch);
    let snapshot = match given.mtimes {
        Some(snapshot) => snapshot,
        None => {
            let snapshot = snapshot_mtimes(&rules);
            shared.table.tell(Fact::Run {
                job_id: run.job_id.clone(),
                change: RunChange::MtimesTaken {
                    sheet_num: sheet.num,
                    snapshot: snapshot.clone(),
                },
            });
            snapshot
        }
    };
    let injected = learned(shared, run, &rules, &attempt.instrument).await;
    let mut prompt = render_prompt(
        run,
        sheet,
        (&workdir, branch),
        &rules,
        attempt,
        &injected,
        given.prior,
    )?;
    let backend = backend(shared, run, &given.backends, &attempt.instrument)?;
    let placement = given.placement?;
    if let Some(l) = review_loop.as_ref().filter(|l| l.cfg.memory) {
        let branch = sheet_wt.as_ref().map(|w| w.branch.as_str());
        prompt.push_str(&super::review::memory_section(
            &l.memory_dir,
            &workdir,
            branch,
        ));
    }
    Ok(Prepared {
        workdir,
        sheet_wt,
        review_loop,
        rules,
        snapshot,
        injected,
        prompt,
        backend,
        backends: given.backends,
        remote: given.remote,
        placement,
    })
}

/// The learned patterns to inject into the attempt's prompt.
async fn learned(
    shared: &Shared,
    run: &Arc<JobRun>,
    rules: &[ValidationRule],
    instrument: &str,
) -> super::learning::Injected {
    let (Some(learning), true) = (&shared.learning, run.config.learning.enabled) else {
        return super::learning::Injected::default();
    };
    let types: Vec<String> = rules
        .iter()
        .filter(|r| r.applies)
        .map(|r| r.check.rule_type().to_string())
        .collect();
    // Usually answered from the store's memory in microseconds: only a question SQLite has
    // to answer goes to the blocking pool.
    match learning.try_select(run, &types, instrument) {
        Some(injected) => injected,
        None => {
            let (learning, run2) = (learning.clone(), run.clone());
            let instrument = instrument.to_string();
            tokio::task::spawn_blocking(move || learning.select(&run2, &types, &instrument))
                .await
                .unwrap_or_default()
        }
    }
}

/// Run the instrument (or replay the output a reviewer has still to judge).
async fn perform<'a>(
    shared: &'a Arc<Shared>,
    run: &'a Arc<JobRun>,
    sheet: &PlannedSheet,
    attempt: &AttemptContext,
    mut p: Prepared,
) -> (Prepared, ExecutionResult, Ended<'a>) {
    let pending = p.review_loop.as_mut().and_then(|l| l.pending.take());
    let replayed = pending.is_some();
    let mut ended = Ended::default();
    let result = match pending {
        Some(pending) => super::review::replayed(pending),
        None => {
            let prompt = std::mem::take(&mut p.prompt);
            let mut req = ExecutionRequest::new(prompt, p.workdir.clone(), attempt.timeout);
            req.model = attempt.model.clone();
            req.job_id = run.job_id.clone();
            req.sheet_num = sheet.num;
            req.attempt = attempt.attempt_number;
            req.options = (*sheet.instrument_config).clone().into_iter().collect();
            // Upstream's live per-sheet output files (`{workspace}/logs/sheet-NN.stdout.log`,
            // in the job's own `logs/{job_id}` when another job's are there), which
            // `mozart dashboard` tails while the sheet runs.
            // Private (0700): what instruments print is the user's (issue 21).
            // Opened and checked now (the user's directory, no link): the logs are made
            // relative to it, so a `logs` swapped for another user's link or directory
            // while the sheet runs receives nothing.
            // A directory that cannot be used (a link put in its place, the workspace
            // removed) is said once the output needs its file: `mozart logs` then says
            // why the log is missing instead of taking the registry's tail for all of it.
            match mozart_backends::output_log::open_sheet_logs(&run.workspace, &run.sheet_logs) {
                Ok(dir) => {
                    req.output_log_base = Some(mozart_backends::output_log::LogBase::new(
                        dir,
                        format!("sheet-{:02}", sheet.num),
                    ));
                }
                Err(e) => {
                    req.output_log_unavailable = Some((
                        run.sheet_logs.join(format!("sheet-{:02}", sheet.num)),
                        format!(
                            "its directory {} cannot be used: {e}",
                            run.sheet_logs.display()
                        ),
                    ));
                }
            }
            let placement = std::mem::replace(&mut p.placement, mozart_backends::Placement::Local);
            place(
                shared,
                run,
                sheet.num,
                attempt,
                placement,
                p.remote.take(),
                &mut req,
            );
            // Shown by `job.status` while it runs; removed even when the attempt is aborted.
            ended._live = Some(LiveEntry::new(
                shared,
                &run.job_id,
                sheet.num,
                &req.progress,
            ));
            let backend = Arc::clone(&p.backend);
            let (result, watched) = execute_watched_kept(
                shared,
                &run.job_id,
                sheet.num,
                attempt.timeout,
                &*backend,
                req,
            )
            .await;
            ended._watched = watched;
            result
        }
    };
    if let Some(l) = p
        .review_loop
        .as_ref()
        .filter(|l| l.cfg.memory && result.success && !replayed)
    {
        if let Err(e) = super::review::write_output_memory(&l.memory_dir, result.output_text()) {
            tracing::warn!(job_id = %run.job_id, sheet = sheet.num, error = %e, "review.memory_not_written");
        }
    }
    (p, result, ended)
}

/// Where the attempt runs: here, or on a cluster with its remote job journaled in the
/// sheet's checkpoint.
fn place(
    shared: &Arc<Shared>,
    run: &JobRun,
    sheet_num: u32,
    attempt: &AttemptContext,
    placement: mozart_backends::Placement,
    recorded: Option<mozart_state::RemoteAttemptRef>,
    req: &mut ExecutionRequest,
) {
    match placement {
        mozart_backends::Placement::Local => {}
        placement => {
            req.placement = placement;
            req.remote = Some(Arc::new(super::placement::SheetJournal::new(
                Arc::clone(shared),
                &run.job_id,
                sheet_num,
                attempt.attempt_number,
                recorded,
            )));
        }
    }
}

/// The cost `result` reports, when it can be one ([`mozart_backends::plausible_cost`]): an
/// infinite, negative or absurd figure (an instrument's bug, a price of `.inf`) is no cost —
/// added up it would become infinite — and is said in the log.
pub(super) fn reported_cost(result: &ExecutionResult, what: &str) -> Option<f64> {
    let cost = result.cost_usd?;
    if mozart_backends::plausible_cost(cost) {
        return Some(cost);
    }
    tracing::warn!(
        cost,
        max = mozart_backends::MAX_ATTEMPT_COST_USD,
        "{what} reported a cost that cannot be one attempt's (not a number from 0 to the maximum, USD); taken as unknown"
    );
    None
}

/// A token count as stored: one that cannot be an attempt's (over
/// [`mozart_backends::MAX_ATTEMPT_TOKENS`]: it could not be saved, and added up it would wrap
/// round) is no count, said in the log. The instruments' parsers already refuse such counts;
/// this holds for any backend.
fn reported_tokens(count: Option<u64>) -> u64 {
    match count {
        Some(n) if n > mozart_backends::MAX_ATTEMPT_TOKENS => {
            tracing::warn!(
                tokens = n,
                max = mozart_backends::MAX_ATTEMPT_TOKENS,
                "an instrument reported a token count that cannot be one attempt's; taken as unknown"
            );
            0
        }
        n => n.unwrap_or(0),
    }
}

/// How sure the attempt's cost is (issue 22: never "$0.00, certain" for work that cost
/// money). A reported or priced cost carries its own confidence; nothing reported is known to
/// be free only for the `shell` instrument, a CLI that never started and a call the API
/// refused with a rate limit; anything else is unknown (0.0).
fn cost_confidence(result: &ExecutionResult, cost: Option<f64>, instrument: &str) -> f64 {
    if cost.is_some() {
        return result
            .cost_confidence
            .unwrap_or(mozart_backends::COST_EXACT);
    }
    if result.cost_usd.is_some() {
        // Reported, but not a cost: unknown.
        return 0.0;
    }
    let free = costs_nothing(instrument)
        || result.rate_limited
        || result.error_type == Some(mozart_backends::FailureKind::NotFound);
    if free {
        mozart_backends::COST_EXACT
    } else {
        0.0
    }
}

/// Whether an instrument's work is free whatever it reports (`shell`: a local command).
pub(super) fn costs_nothing(instrument: &str) -> bool {
    instrument == "shell"
}

/// Turn the instrument's result into the attempt's result and details: validations, the
/// reviewer (reviewed sheets), or the classified failure.
async fn judge(
    shared: &Arc<Shared>,
    run: &Arc<JobRun>,
    sheet: &PlannedSheet,
    attempt: &AttemptContext,
    p: Prepared,
    result: &ExecutionResult,
    started_epoch: f64,
) -> (AttemptResult, AttemptDetails) {
    let cost = reported_cost(result, &attempt.instrument);
    let mut details = AttemptDetails {
        attempt_number: attempt.attempt_number,
        mode: mode_str(attempt.mode).into(),
        started_at: started_epoch,
        exit_code: result.exit_code,
        exit_signal: result.exit_signal,
        cost_usd: cost.unwrap_or(0.0),
        cost_confidence: cost_confidence(result, cost, &attempt.instrument),
        input_tokens: reported_tokens(result.input_tokens),
        output_tokens: reported_tokens(result.output_tokens),
        model: result.model.clone(),
        stdout_tail: tail(
            &result.stdout,
            mozart_backends::process::REGISTRY_TAIL_BYTES,
        ),
        stderr_tail: tail(
            &result.stderr,
            mozart_backends::process::REGISTRY_TAIL_BYTES,
        ),
        applied: p.injected,
        ..AttemptDetails::default()
    };
    let mut r = AttemptResult::success(&run.job_id, sheet.num, attempt.dispatch_id);
    r.instrument = attempt.instrument.clone();
    r.exit_code = result.exit_code;
    r.cost_usd = details.cost_usd;
    r.input_tokens = details.input_tokens;
    r.output_tokens = details.output_tokens;
    r.model_used = result.model.clone();
    if !result.success {
        let (kind, message, code, category) = failure_kind(result, &attempt.instrument);
        r.execution_success = false;
        r.validation_pass_rate = 0.0;
        details.error_message = Some(message.clone());
        details.error_code = code;
        details.error_category = category;
        r.failure = Some(Failure {
            kind,
            code: details.error_code.clone(),
            message,
        });
        return (r, details);
    }
    // A `command_succeeds` check runs as the attempt did: tagged, watched, and ended with
    // everything it started.
    let runner = super::attempt::check_runner(shared, &run.job_id, sheet.num);
    let report = mozart_baton::validation::RUN_COMMANDS
        .scope(runner, run_validations(&p.rules, &p.snapshot))
        .await;
    r.validations_total = u32::try_from(report.results.len()).unwrap_or(u32::MAX);
    r.validations_passed = u32::try_from(report.passed_count()).unwrap_or(u32::MAX);
    r.validation_pass_rate = report.pass_rate();
    if !report.all_passed() {
        let summary = report.failure_summaries().join("; ");
        details.error_message = Some(format!("validation failed: {summary}"));
        details.error_category = Some("validation".into());
        details.error_code = Some("E900".into());
        r.failure = Some(Failure {
            kind: FailureKind::Validation,
            code: Some("E900".into()),
            message: format!("validation failed: {summary}"),
        });
    }
    let passed = report.all_passed();
    details.validation = Some(report);
    if let (true, Some(lp)) = (passed, p.review_loop) {
        let review = super::review::Review {
            shared,
            run,
            sheet,
            backends: &p.backends,
            dir: &p.workdir,
            output: result.output_text(),
            stdout: &result.stdout,
            stderr: &result.stderr,
        };
        review.conclude(lp, p.sheet_wt, &mut r, &mut details).await;
    }
    (r, details)
}

fn report_failure(
    shared: &Shared,
    run: &JobRun,
    sheet_num: u32,
    attempt: &AttemptContext,
    message: String,
    started_epoch: f64,
) {
    let details = AttemptDetails {
        attempt_number: attempt.attempt_number,
        mode: mode_str(attempt.mode).into(),
        started_at: started_epoch,
        error_message: Some(message.clone()),
        error_category: Some("configuration".into()),
        // Nothing ran: nothing was spent.
        cost_confidence: mozart_backends::COST_EXACT,
        ..AttemptDetails::default()
    };
    let mut r = AttemptResult::failed(
        &run.job_id,
        sheet_num,
        attempt.dispatch_id,
        FailureKind::Fatal,
        message,
    );
    r.instrument = attempt.instrument.clone();
    report(shared, details, r);
}

fn mode_str(mode: AttemptMode) -> &'static str {
    match mode {
        AttemptMode::Normal => "normal",
        AttemptMode::Completion => "completion",
        AttemptMode::Healing => "healing",
    }
}

fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

/// The full prompt of one attempt (score.md §5.4 / execution.md §5).
fn render_prompt(
    run: &JobRun,
    sheet: &PlannedSheet,
    (workdir, branch): (&Path, Option<&str>),
    rules: &[ValidationRule],
    attempt: &AttemptContext,
    injected: &super::learning::Injected,
    prior: Option<(BTreeMap<u32, String>, BTreeSet<u32>)>,
) -> Result<String, String> {
    // Relative `template_file`, prelude and cadenza paths belong to the score's directory,
    // not the conductor's.
    let mut ctx = mozart_config::RenderContext {
        workspace: Some(run.workspace.clone()),
        working_directory: Some(workdir.to_path_buf()),
        task_branch: branch.map(str::to_string),
        template_dir: Some(run.score_dir.clone()),
        ..mozart_config::RenderContext::default()
    };
    // A prelude or cadenza file that is not there is left out; the job's log says which.
    let skipped =
        mozart_config::template::resolve_injections(&run.config, sheet, &run.score_dir, &mut ctx);
    for warning in &skipped {
        tracing::warn!(job_id = %run.job_id, sheet = sheet.num, warning, "injection.skipped");
    }
    if run.config.cross_sheet.is_some() {
        // Earlier sheets' output and files (execution.md §9.1), from the live checkpoint.
        let (tails, skipped) = prior.unwrap_or_default();
        let context = crate::cross_sheet::collect(&crate::cross_sheet::CrossSheetInput {
            job: &run.config,
            sheet,
            workspace: &run.workspace,
            stdout_tails: &tails,
            skipped: &skipped,
            files_modified_since: run.capture_since,
        });
        for warning in &context.warnings {
            tracing::warn!(job_id = %run.job_id, sheet = sheet.num, warning, "cross_sheet");
        }
        context.apply(&mut ctx);
    }
    // Only the rules that apply to this sheet go into its "Success Requirements" (`rules`
    // are the score's validations in order, their conditions already evaluated).
    let applicable: Vec<&mozart_config::ValidationRule> = run
        .config
        .validations
        .iter()
        .zip(rules)
        .filter(|(_, rule)| rule.applies)
        .map(|(rule, _)| rule)
        .collect();
    let mut prompt = mozart_config::template::build_sheet_prompt_with(
        &run.renderer,
        &run.config,
        sheet,
        &ctx,
        &applicable,
        injected.section.as_slice(),
    )
    .map_err(|e| format!("cannot render the prompt of sheet {}: {e}", sheet.num))?;
    let mut full = preamble(
        sheet.num,
        run.plan.total_sheets,
        &run.workspace,
        attempt.attempt_number.saturating_sub(1),
        run.config.parallel.enabled || sheet.voice_count > 1,
    );
    full.reserve(prompt.len() + 2);
    full.push_str("\n\n");
    full.push_str(&prompt);
    prompt = full;
    if let Some(prev) = &attempt.previous_failure {
        prompt.push_str("\n\n---\nThe previous attempt failed: ");
        prompt.push_str(prev);
        prompt.push('\n');
    }
    if let Some(suffix) = &attempt.completion_suffix {
        prompt.push_str("\n\n");
        prompt.push_str(suffix);
        prompt.push('\n');
    }
    Ok(prompt)
}

/// The `<mozart-preamble>` block that opens every prompt (score.md §5.4): where the sheet is
/// in the concert, where to work, and — on a retry — to learn from the failure.
pub(crate) fn preamble(
    sheet_num: u32,
    total_sheets: u32,
    workspace: &Path,
    retry_count: u32,
    parallel: bool,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(720);
    out.push_str("<mozart-preamble>\n");
    if retry_count > 0 {
        let _ = writeln!(out, "RETRY #{retry_count}");
    }
    let _ = writeln!(
        out,
        "You are sheet {sheet_num} of {total_sheets} in a Mozart concert."
    );
    let _ = writeln!(out, "Workspace: {}", workspace.display());
    if retry_count > 0 {
        out.push_str(concat!(
            "\n",
            "The previous attempt failed validation. Look in the workspace for what went\n",
            "wrong and do not repeat the same approach.\n",
        ));
    } else if parallel {
        out.push_str(
            "Other sheets may run at the same time — coordinate through workspace files.\n",
        );
    }
    out.push_str(concat!(
        "\n",
        "The prompt states intent, not a recipe: use judgment and adapt to what you find.\n",
        "\n",
        "Success means every validation requirement at the end of this prompt passes on\n",
        "the first automated check. Read them before you begin.\n",
        "\n",
        "Write all outputs to the workspace. Leave no background processes running.\n",
        "</mozart-preamble>",
    ));
    out
}

/// A running attempt's progress in the job table (`RunState::live`), until dropped.
struct LiveEntry<'a> {
    shared: &'a Shared,
    job_id: &'a str,
    sheet_num: u32,
    /// Which attempt's entry this is: the sheet's next attempt may have its own by the
    /// time this one is dropped (after the result is reported).
    progress: Arc<mozart_backends::Progress>,
}

impl<'a> LiveEntry<'a> {
    fn new(
        shared: &'a Shared,
        job_id: &'a str,
        sheet_num: u32,
        progress: &Arc<mozart_backends::Progress>,
    ) -> Self {
        shared.table.tell(Fact::Run {
            job_id: job_id.to_string(),
            change: RunChange::AttemptLive {
                sheet_num,
                progress: Arc::clone(progress),
            },
        });
        LiveEntry {
            shared,
            job_id,
            sheet_num,
            progress: Arc::clone(progress),
        }
    }
}

impl Drop for LiveEntry<'_> {
    fn drop(&mut self) {
        self.shared.table.tell(Fact::Run {
            job_id: self.job_id.to_string(),
            change: RunChange::AttemptGone {
                sheet_num: self.sheet_num,
                progress: Arc::clone(&self.progress),
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preamble_names_position_workspace_and_retry() {
        let first = preamble(2, 5, Path::new("/ws"), 0, true);
        assert!(first.starts_with(
            "<mozart-preamble>\nYou are sheet 2 of 5 in a Mozart concert.\nWorkspace: /ws\n"
        ));
        assert!(first.contains("Other sheets may run at the same time"));
        assert!(!first.contains("RETRY"));
        let retry = preamble(2, 5, Path::new("/ws"), 2, true);
        assert!(retry.starts_with("<mozart-preamble>\nRETRY #2\n"));
        assert!(retry.ends_with("</mozart-preamble>"));
    }

    /// The preamble opens every prompt: byte for byte, in its three shapes.
    #[test]
    fn preamble_is_byte_identical() {
        let tail = "\nThe prompt states intent, not a recipe: use judgment and adapt to what you find.\n\nSuccess means every validation requirement at the end of this prompt passes on\nthe first automated check. Read them before you begin.\n\nWrite all outputs to the workspace. Leave no background processes running.\n</mozart-preamble>";
        assert_eq!(
            preamble(1, 3, Path::new("/w s"), 0, false),
            format!("<mozart-preamble>\nYou are sheet 1 of 3 in a Mozart concert.\nWorkspace: /w s\n{tail}")
        );
        assert_eq!(
            preamble(2, 3, Path::new("/w"), 0, true),
            format!("<mozart-preamble>\nYou are sheet 2 of 3 in a Mozart concert.\nWorkspace: /w\nOther sheets may run at the same time — coordinate through workspace files.\n{tail}")
        );
        assert_eq!(
            preamble(3, 3, Path::new("/w"), 1, true),
            format!("<mozart-preamble>\nRETRY #1\nYou are sheet 3 of 3 in a Mozart concert.\nWorkspace: /w\n\nThe previous attempt failed validation. Look in the workspace for what went\nwrong and do not repeat the same approach.\n{tail}")
        );
    }
}
