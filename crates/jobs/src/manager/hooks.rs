//! `on_success` hooks and concerts (conductor.md §19, execution.md §9.3).
//!
//! Hooks run after a job completed *new* work (the zero-work guard: at least one sheet moved
//! to completed during this run — upstream's weaker guard lets a self-chaining score loop
//! forever). A job whose hooks are due carries `hooks_pending` in its registry options from
//! the moment it completes until its hook results are stored, so a conductor killed between
//! two links of a concert runs the hooks on restart instead of losing the chain.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mozart_backends::descendants::Leftover;
use mozart_config::model::{ConcertConfig, HookOnFailure, HookType, PostSuccessHookConfig};
use mozart_config::placeholders::{self, PlaceholderVars};
use mozart_ipc::types::{JobResponseStatus, RejectionReason};
use mozart_state::{DaemonJobStatus, HookResultRecord};
use serde_json::json;

use super::{lock, JobManager, SubmitRequest};
use mozart_conductor::ConductorCtx;

/// Registry option key marking a completed job whose hooks have not finished.
pub(crate) const HOOKS_PENDING: &str = "hooks_pending";

/// Everything the hook runner needs about the finished job.
#[derive(Debug, Clone)]
pub(crate) struct HookRequest {
    pub job_id: String,
    pub score_dir: PathBuf,
    pub workspace: PathBuf,
    pub hooks: Vec<PostSuccessHookConfig>,
    pub concert: ConcertConfig,
    pub chain_depth: u32,
    /// The job's completion notification, held until the hooks end.
    pub notice: Option<CompletionNotice>,
}

/// A score's notification channels and its `job_complete` message.
pub(crate) type CompletionNotice = (
    Vec<mozart_config::model::NotificationConfig>,
    mozart_notify::Context,
);

/// Run every hook in order and record the results (conductor.md §19.2).
pub(crate) async fn run_hooks(mgr: JobManager, ctx: Arc<ConductorCtx>, req: HookRequest) {
    let mut vars = PlaceholderVars::new();
    vars.insert(
        "workspace".into(),
        req.workspace.to_string_lossy().into_owned(),
    );
    vars.insert("job_id".into(), req.job_id.clone());
    // Hooks that already ran (a restart in the middle of a job's hooks) are not run again:
    // a `run_command` must not fire twice, and a chained job must not be submitted twice.
    // A result counts for the hook it was of (its fingerprint), wherever the score's edit
    // moved that hook; those of hooks edited away no longer count and are forgotten.
    let fingerprints: Vec<String> = req.hooks.iter().map(fingerprint).collect();
    let (done, sheet_count) = {
        let registry = lock(&mgr.shared.registry);
        let stored = registry.hook_results(&req.job_id).unwrap_or_default();
        let done = match_results(&fingerprints, &stored);
        if done != stored {
            if let Err(e) = registry.replace_hook_results(&req.job_id, &done) {
                tracing::error!(job_id = %req.job_id, error = %e, "cannot store hook results");
            }
        }
        let record = registry.get_job(&req.job_id).ok().flatten();
        (done, record.and_then(|r| r.total_sheets))
    };
    // The job's sheets (score.md §5.8.4; upstream's conductor left it literal [GAP]).
    if let Some(n) = sheet_count {
        vars.insert("sheet_count".into(), n.to_string());
    }
    let mut any_failed = done.iter().any(|h| !h.success);
    let (cancel_tx, mut cancel) = tokio::sync::watch::channel(false);
    // A self-chaining job's next link may start its hooks before these end: each run of
    // hooks removes only its own entry.
    lock(&mgr.shared.hook_cancels).insert(req.job_id.clone(), cancel_tx);
    let mut cancelled = false;
    // The conductor is stopping: a hook not started yet (or a chained job it refuses to
    // submit) is owed, not failed — the job stays completed with its hooks pending and the
    // next start runs them from there.
    let mut deferred = false;
    for (index, hook) in req.hooks.iter().enumerate() {
        let index_u32 = u32::try_from(index).unwrap_or(u32::MAX);
        if done.iter().any(|h| h.hook_index == index_u32) {
            continue;
        }
        if any_failed
            && (req.concert.abort_concert_on_hook_failure
                || done.iter().any(|h| {
                    !h.success
                        && req
                            .hooks
                            .get(h.hook_index as usize)
                            .is_some_and(|hk| hk.on_failure == HookOnFailure::Abort)
                }))
        {
            break;
        }
        if *cancel.borrow() {
            // Recorded, so that `mozart resume` knows this hook is still owed.
            let record = HookResultRecord {
                hook_index: index_u32,
                hook_type: hook.kind.as_str().to_string(),
                description: hook.description.clone(),
                fingerprint: fingerprints.get(index).cloned(),
                ..failure("Not run: cancelled (mozart cancel)")
            };
            if let Err(e) = lock(&mgr.shared.registry).record_hook_result(&req.job_id, &record) {
                tracing::error!(job_id = %req.job_id, error = %e, "cannot store hook result");
            }
            cancelled = true;
            break;
        }
        if ctx.is_shutting_down() {
            deferred = true;
            break;
        }
        let started = mozart_state::epoch_now();
        let mut record = match hook.kind {
            HookType::RunJob => match run_job(&mgr, &ctx, &req, hook, &vars, &mut cancel).await {
                Some(record) => record,
                None => {
                    deferred = true;
                    break;
                }
            },
            HookType::RunCommand | HookType::RunScript => {
                run_command(&mgr.shared, &req, hook, &vars, &mut cancel).await
            }
        };
        cancelled = *cancel.borrow() && !record.success;
        record.hook_index = index_u32;
        record.hook_type = hook.kind.as_str().to_string();
        record.description = hook.description.clone();
        record.fingerprint = fingerprints.get(index).cloned();
        record.started_at = Some(started);
        record.finished_at = Some(mozart_state::epoch_now());
        // What every hook leaves in the registry is redacted here, whatever the hook was.
        for text in [&mut record.output, &mut record.error_message]
            .into_iter()
            .flatten()
        {
            mozart_backends::redact::redact_in_place(text);
        }
        if let Err(e) = lock(&mgr.shared.registry).record_hook_result(&req.job_id, &record) {
            tracing::error!(job_id = %req.job_id, error = %e, "cannot store hook result");
        }
        log_hook(&req.job_id, index, hook, &record);
        if !record.success {
            any_failed = true;
            if cancelled
                || hook.on_failure == HookOnFailure::Abort
                || req.concert.abort_concert_on_hook_failure
            {
                break;
            }
        }
    }
    // Every hook may have ended and the conductor be stopping all the same: its outcome and
    // notification could be lost with it, so they wait for the next start too (which runs
    // no hook that recorded a result, and says how they went).
    if !cancelled && (deferred || ctx.is_shutting_down()) {
        tracing::info!(
            event = "hooks.deferred",
            job_id = %req.job_id,
            "the conductor is stopping: the on_success hooks not run yet run when it starts again"
        );
        forget_cancel(&mgr, &req.job_id, &cancel);
        return;
    }
    if let Some(path) = &req.concert.concert_log_path {
        append_concert_log(&resolve(&req, &path.to_string_lossy()), &req, any_failed);
    }
    // The outcome first, then the end of the hooks: a `mozart wait` that looks in between
    // must not see a completed job with no hook running and report success.
    if cancelled {
        tracing::info!(
            event = "hooks.cancelled",
            job_id = %req.job_id,
            "on_success hooks cancelled (mozart cancel): the remaining hooks did not run"
        );
        mgr.set_status(
            &req.job_id,
            DaemonJobStatus::Cancelled,
            Some("Cancelled while its on_success hooks ran"),
        )
        .await;
    } else if any_failed {
        mgr.set_status(
            &req.job_id,
            DaemonJobStatus::Failed,
            Some("Post-success hook failed"),
        )
        .await;
    }
    if let Some((channels, mut ctx)) = req.notice.clone() {
        // Cancelled has no event of its own: the job did not complete, nor fail.
        if !cancelled {
            if any_failed {
                ctx.event = mozart_config::model::NotificationEvent::JobFailed;
                let reason = lock(&mgr.shared.registry)
                    .hook_results(&req.job_id)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|h| !h.success)
                    .and_then(|h| h.error_message)
                    .map(|e| format!("Post-success hook failed: {e}"));
                ctx.error_message = reason.or_else(|| Some("Post-success hook failed".into()));
            }
            ctx.timestamp = mozart_state::epoch_now();
            mozart_notify::notify(&channels, &ctx);
        }
    }
    clear_pending(&mgr, &req.job_id);
    // Last: `mozart cancel` waits for this, so that the job shows cancelled when it returns.
    forget_cancel(&mgr, &req.job_id, &cancel);
}

/// The end of a run of hooks: `mozart cancel` no longer has them to stop (a self-chaining
/// job's next run of hooks keeps its own entry).
fn forget_cancel(mgr: &JobManager, job_id: &str, cancel: &tokio::sync::watch::Receiver<bool>) {
    let mut cancels = lock(&mgr.shared.hook_cancels);
    if cancels
        .get(job_id)
        .is_some_and(|tx| cancel.same_channel(&tx.subscribe()))
    {
        cancels.remove(job_id);
    }
}

/// The `hooks.executed` event: which hook, and what it did — a failure says why (the
/// reason `mozart status` cuts to one line), a chained job names its ID.
fn log_hook(job_id: &str, index: usize, hook: &PostSuccessHookConfig, record: &HookResultRecord) {
    let label = match hook.description.as_deref().filter(|d| !d.is_empty()) {
        Some(d) => format!("{} '{d}'", hook.kind.as_str()),
        None => hook.kind.as_str().to_string(),
    };
    let number = index + 1;
    if record.success {
        let what = record
            .output
            .as_deref()
            .filter(|_| hook.kind == HookType::RunJob);
        let message = match what {
            Some(out) => format!("on_success hook {number} ({label}) succeeded: {out}"),
            None => format!("on_success hook {number} ({label}) succeeded"),
        };
        tracing::info!(
            event = "hooks.executed",
            job_id,
            hook = index,
            success = true,
            "{message}"
        );
    } else {
        let reason = record.error_message.as_deref().unwrap_or("failed");
        // The command's last output line is usually where it says why.
        let last_line = record
            .output
            .as_deref()
            .and_then(|o| o.lines().rev().find(|l| !l.trim().is_empty()))
            .map(|l| format!(" (last output: {})", l.trim()))
            .unwrap_or_default();
        tracing::warn!(
            event = "hooks.executed",
            job_id,
            hook = index,
            success = false,
            "on_success hook {number} ({label}) failed: {reason}{last_line}"
        );
    }
}

fn clear_pending(mgr: &JobManager, job_id: &str) {
    let registry = lock(&mgr.shared.registry);
    if let Ok(Some(mut record)) = registry.get_job(job_id) {
        if record.options.remove(HOOKS_PENDING).is_some() {
            if let Err(e) = registry.update_job(&record) {
                tracing::error!(job_id, error = %e, "cannot clear hooks_pending");
            }
        }
    }
}

fn append_concert_log(path: &Path, req: &HookRequest, failed: bool) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let line = json!({
        "timestamp": mozart_state::epoch_now(),
        "job_id": req.job_id,
        "chain_depth": req.chain_depth,
        "hooks": req.hooks.len(),
        "hook_failed": failed,
    });
    // Not through a link, and not into a FIFO (opening one to write waits for a reader:
    // the job's hooks never ended), nor into anything but a regular file.
    let result = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path)
        .and_then(|f| {
            if f.metadata()?.is_file() {
                Ok(f)
            } else {
                Err(std::io::Error::other("it is not a regular file"))
            }
        })
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot append to the concert log");
    }
}

/// A path of a hook (`working_directory`, `job_workspace`, `concert.concert_log_path`):
/// a relative one is taken from the score's directory, as `job_path` is — not from the
/// conductor's working directory, which a user neither sees nor controls.
fn resolve(req: &HookRequest, path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    if path.is_absolute() {
        path
    } else {
        req.score_dir.join(path)
    }
}

/// Resolves when `mozart cancel` asks to stop the hooks (never if nobody can ask any more).
async fn cancelled_by(cancel: &mut tokio::sync::watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Which hook a result is of: a short hash of the hook's type and what it runs (its
/// `command`, or the `job_path` it chains), as written in the score. Its description,
/// timeout and failure policy are not part of it: editing them leaves the hook the same.
fn fingerprint(hook: &PostSuccessHookConfig) -> String {
    let job_path = hook.job_path.as_deref().unwrap_or(Path::new(""));
    let text = format!(
        "{}\0{}\0{}",
        hook.kind.as_str(),
        hook.command.as_deref().unwrap_or(""),
        job_path.to_string_lossy()
    );
    mozart_learning::sha256_hex_prefix(&text, 16)
}

/// The stored results that count for the hooks of `fingerprints`, each at the position of
/// the hook it counts for, in hook order. A result counts for the hook at its own position
/// when it was of that hook (or says nothing: a row an older build wrote), else a
/// successful one counts for a hook of its fingerprint elsewhere — each result for one hook
/// only, so a hook listed twice needs two. Results that count for no hook are left out.
fn match_results(fingerprints: &[String], stored: &[HookResultRecord]) -> Vec<HookResultRecord> {
    let mut used = vec![false; stored.len()];
    let mut matched: Vec<Option<usize>> = vec![None; fingerprints.len()];
    for (index, fp) in fingerprints.iter().enumerate() {
        matched[index] = stored.iter().enumerate().position(|(i, h)| {
            !used[i]
                && h.hook_index as usize == index
                && h.fingerprint.as_ref().is_none_or(|f| f == fp)
        });
        if let Some(i) = matched[index] {
            used[i] = true;
        }
    }
    for (index, fp) in fingerprints.iter().enumerate() {
        if matched[index].is_some() {
            continue;
        }
        matched[index] = stored
            .iter()
            .enumerate()
            .position(|(i, h)| !used[i] && h.success && h.fingerprint.as_ref() == Some(fp));
        if let Some(i) = matched[index] {
            used[i] = true;
        }
    }
    matched
        .iter()
        .enumerate()
        .filter_map(|(index, i)| {
            let mut h = stored.get((*i)?)?.clone();
            h.hook_index = u32::try_from(index).unwrap_or(u32::MAX);
            Some(h)
        })
        .collect()
}

/// The result of the hook `mozart cancel` stopped.
const CANCELLED: &str = "Cancelled (mozart cancel) while it ran";

fn failure(message: impl Into<String>) -> HookResultRecord {
    HookResultRecord {
        success: false,
        error_message: Some(message.into()),
        ..HookResultRecord::default()
    }
}

/// `run_job` (conductor.md §19.3): submit the next score of the concert through the normal
/// admission path. `None`: the conductor is stopping and refused it — the hook is owed.
async fn run_job(
    mgr: &JobManager,
    ctx: &ConductorCtx,
    req: &HookRequest,
    hook: &PostSuccessHookConfig,
    vars: &PlaceholderVars,
    cancel: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<HookResultRecord> {
    let Some(job_path) = &hook.job_path else {
        return Some(failure("job_path is required for run_job hooks"));
    };
    let expanded = PathBuf::from(placeholders::expand(
        &job_path.to_string_lossy(),
        vars,
        false,
    ));
    // Relative paths are taken from the parent score's directory (upstream uses the
    // conductor's working directory, which a daemon user cannot see or control). Upstream's
    // own scores name their chained score from the project root (`examples/x.yaml` in
    // `examples/x.yaml`): a path not found beside the score is looked for from the
    // directories above it — only those of the user's own (another local user's file is
    // never taken for the chained score: a shell instrument would run what it says).
    let path = match mozart_config::chained_score(&req.score_dir, &expanded) {
        Ok(found) => found,
        Err(beside) => {
            return Some(failure(format!(
                "Job config not found: {} (a relative job_path is taken from the score's directory, {})",
                beside.display(),
                req.score_dir.display()
            )))
        }
    };
    if !path.exists() {
        return Some(failure(format!("Job config not found: {}", path.display())));
    }
    // A job's ID is its score's file name: another score of this job's name (`a/score.yaml`
    // chaining `b/score.yaml`) would replace this job's record — its history, its hook
    // results shown as the other's — instead of running beside it. Only this same score
    // chains into its own ID (a self-chaining concert).
    if super::submit::job_id_of(&path) == req.job_id {
        let parent = lock(&mgr.shared.registry)
            .get_job(&req.job_id)
            .ok()
            .flatten()
            .map(|r| PathBuf::from(r.config_path));
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        };
        if let Some(parent) = parent.filter(|p| !same(p, &path)) {
            return Some(failure(format!(
                "Chained job not submitted: {} would be job '{}', the ID of this job (its score is {}). A job's ID is its score's file name: rename one of the two files",
                path.display(),
                req.job_id,
                parent.display()
            )));
        }
    }
    if req.concert.enabled {
        let max = u32::try_from(req.concert.max_chain_depth.max(0)).unwrap_or(u32::MAX);
        if req.chain_depth >= max {
            // The designed end of a self-chaining concert, not a failure: the job stays
            // completed and `mozart run` exits 0 (upstream fails the last link; see
            // docs/differences.md).
            tracing::info!(
                event = "hooks.chain_depth_limit_reached",
                job_id = %req.job_id,
                max,
                "concert chain stopped at its depth limit ({max}); no further job submitted"
            );
            return Some(HookResultRecord {
                success: true,
                output: Some(format!(
                    "Concert chain stopped at its depth limit ({max}); no further job submitted"
                )),
                ..HookResultRecord::default()
            });
        }
        let cooldown = req.concert.cooldown_between_jobs_seconds;
        if cooldown.is_finite() && cooldown > 0.0 {
            tracing::info!(
                event = "hooks.daemon_cooldown",
                job_id = %req.job_id,
                cooldown,
                "waiting {cooldown}s (concert cooldown) before submitting {}",
                path.display()
            );
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs_f64(cooldown)) => {}
                () = cancelled_by(cancel) => return Some(failure(CANCELLED)),
            }
        }
    }
    let workspace = match &hook.job_workspace {
        Some(ws) => Some(
            resolve(
                req,
                &placeholders::expand(&ws.to_string_lossy(), vars, false),
            )
            .to_string_lossy()
            .into_owned(),
        ),
        None if req.concert.enabled && req.concert.inherit_workspace => {
            Some(req.workspace.to_string_lossy().into_owned())
        }
        None => None,
    };
    // The chained score's default `./workspace` is taken from where the chain's first
    // `mozart run` was called (docs/scores.md "The workspace").
    let submit_dir = lock(&mgr.shared.registry)
        .get_job(&req.job_id)
        .ok()
        .flatten()
        .and_then(|r| {
            r.options
                .get(super::submit::SUBMIT_DIR)
                .and_then(|d| d.as_str())
                .map(str::to_string)
        });
    let submit = SubmitRequest {
        config_path: path.to_string_lossy().into_owned(),
        workspace,
        submit_dir,
        fresh: hook.fresh,
        chain_depth: Some(req.chain_depth + 1),
        parent_job_id: Some(req.job_id.clone()),
        ..SubmitRequest::default()
    };
    let resp = mgr.submit(ctx, submit).await;
    if resp.status != JobResponseStatus::Accepted
        && resp.rejection_reason() == RejectionReason::ShuttingDown
    {
        tracing::info!(
            event = "hooks.chain_deferred",
            job_id = %req.job_id,
            "the conductor is stopping: {} is submitted when it starts again",
            path.display()
        );
        return None;
    }
    Some(if resp.status == JobResponseStatus::Accepted {
        // Accepted with nothing to run (its score already completed, unchanged): said so,
        // and how to have it run again, instead of "submitted" for a link that did nothing.
        let output = if resp.nothing_to_run {
            tracing::warn!(job_id = %req.job_id, chained = %resp.job_id,
                "the chained job had already completed with this score: nothing was run (set fresh: true on the run_job hook to run it again)");
            format!(
                "Chained job {} had already completed with this score: nothing was run (fresh: true on the hook runs it again)",
                resp.job_id
            )
        } else {
            format!("Chained job submitted (job_id={})", resp.job_id)
        };
        HookResultRecord {
            success: true,
            output: Some(output),
            chained_job_id: Some(resp.job_id),
            ..HookResultRecord::default()
        }
    } else {
        failure(format!(
            "Chained job rejected: {}",
            resp.message.unwrap_or_default()
        ))
    })
}

/// `run_command` (through `sh -c`, placeholders shell-quoted) and `run_script` (split into
/// words and executed directly), conductor.md §19.4.
async fn run_command(
    shared: &Arc<super::Shared>,
    req: &HookRequest,
    hook: &PostSuccessHookConfig,
    vars: &PlaceholderVars,
    cancel: &mut tokio::sync::watch::Receiver<bool>,
) -> HookResultRecord {
    let Some(command) = &hook.command else {
        return failure(format!(
            "command is required for {} hooks",
            hook.kind.as_str()
        ));
    };
    let mut cmd = if hook.kind == HookType::RunCommand {
        let mut c = tokio::process::Command::new("/bin/sh");
        c.arg("-c").arg(placeholders::expand(command, vars, true));
        c
    } else {
        // Split as written, then each word's placeholders filled: a `{workspace}` with a
        // space in it stays one argument (as validation commands need no quotes either).
        let words: Vec<String> = match split_words(command) {
            Ok(w) if !w.is_empty() => w
                .iter()
                .map(|word| placeholders::expand(word, vars, false))
                .collect(),
            Ok(_) => return failure("run_script command is empty"),
            Err(e) => return failure(e),
        };
        let mut c = tokio::process::Command::new(&words[0]);
        c.args(&words[1..]);
        c
    };
    let cwd = match &hook.working_directory {
        Some(dir) => resolve(
            req,
            &placeholders::expand(&dir.to_string_lossy(), vars, false),
        ),
        None => req.workspace.clone(),
    };
    if !cwd.is_dir() {
        return failure(format!(
            "working_directory does not exist: {} (a relative path is taken from the score's directory)",
            cwd.display()
        ));
    }
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    // stdout and stderr share one pipe (merged in the order written, as upstream's
    // `stderr=STDOUT`), read as it comes with only its end kept: a hook that prints
    // gigabytes must not take the conductor's memory with it.
    let (reader, writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(e) => {
            return failure(format!(
                "cannot run '{program}': no pipe for its output: {e}"
            ))
        }
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => {
            return failure(format!(
                "cannot run '{program}': no pipe for its output: {e}"
            ))
        }
    };
    // Tagged like an attempt: what the hook leaves in the background (`cmd &`, `nohup`,
    // `setsid`) is found by the tag and ended with it, and a conductor killed while it runs
    // leaves it to the next start, which finds it by the tag even before it was recorded.
    let tag = mozart_backends::descendants::AttemptTag::new();
    cmd.env(mozart_backends::descendants::ATTEMPT_VAR, tag.as_str());
    cmd.current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .kill_on_drop(true);
    let spawned = cmd.spawn();
    // The command holds the pipe's write ends: the output ends only once it is gone.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return failure(format!("cannot run '{program}': {e}")),
    };
    let pid = child.id();
    let timeout = if hook.timeout_seconds.is_finite() && hook.timeout_seconds > 0.0 {
        Duration::from_secs_f64(hook.timeout_seconds)
    } else {
        Duration::from_secs(300)
    };
    // In the in-flight journal like an attempt's group: a conductor killed while the hook
    // runs leaves it to the watchdog and the next start, which end it before the owed hook
    // runs again — never two copies side by side.
    let ticks = pid.and_then(mozart_conductor::watchdog::start_ticks);
    let _watched = pid.map(|pid| {
        super::attempt::Watched::start(
            shared,
            &req.job_id,
            0,
            pid,
            ticks,
            Some(tag.as_str()),
            timeout,
        )
    });
    // Everything the hook started: its group, and its tagged processes outside it.
    let rest = pid.zip(ticks).map(|(pgid, ticks)| Leftover {
        pgid,
        ticks,
        tag: Some(tag.as_str().to_string()),
    });
    let end_rest = |grace: Duration| {
        let rest = rest.clone();
        tokio::task::spawn_blocking(move || {
            if let Some(rest) = rest {
                mozart_backends::descendants::end_leftovers(&[rest], grace);
            }
        })
    };
    let mut output = tokio::task::spawn_blocking(move || read_tail(reader, HOOK_OUTPUT_KEPT));
    let work = async {
        let status = child.wait().await;
        // The hook has ended; what it left running (holding its output, or detached) gets a
        // moment to finish, then ends with it, as an attempt's processes do.
        let drained = tokio::time::timeout(HOOK_DRAIN, &mut output).await;
        let _ = end_rest(mozart_backends::DEFAULT_KILL_GRACE).await;
        let tail = match drained {
            Ok(tail) => tail,
            Err(_) => output.await,
        };
        (status, tail.unwrap_or_default())
    };
    let kill_group = || {
        drop(end_rest(Duration::ZERO));
    };
    let outcome = tokio::select! {
        r = tokio::time::timeout(timeout, work) => r,
        () = cancelled_by(cancel) => {
            kill_group();
            return failure(CANCELLED);
        }
    };
    match outcome {
        Ok((Ok(status), tail)) => {
            let text = String::from_utf8_lossy(&tail).into_owned();
            // Redacted whole, then cut: a cut through a secret would leave half of it.
            let text = mozart_backends::redact::redact_owned(text);
            let tail: String = {
                let chars: Vec<char> = text.chars().collect();
                chars[chars.len().saturating_sub(2000)..].iter().collect()
            };
            HookResultRecord {
                success: status.success(),
                exit_code: status.code(),
                output: (!tail.is_empty()).then_some(tail),
                error_message: (!status.success())
                    .then(|| format!("exit code {}", status.code().unwrap_or(-1))),
                ..HookResultRecord::default()
            }
        }
        Ok((Err(e), _)) => failure(e.to_string()),
        Err(_) => {
            kill_group();
            failure(format!("Timeout after {}s", hook.timeout_seconds))
        }
    }
}

/// How long what a hook left running may hold its output after the hook itself ended.
const HOOK_DRAIN: Duration = Duration::from_secs(2);

/// How much of a hook's output is read into memory: its end (the record keeps the last
/// 2,000 characters of it, after redaction).
const HOOK_OUTPUT_KEPT: usize = 64 * 1024;

/// Read `reader` to its end, keeping only its last `keep` bytes.
fn read_tail(mut reader: impl std::io::Read, keep: usize) -> Vec<u8> {
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(keep);
                tail.drain(..excess);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let mut tail: Vec<u8> = tail.into();
    // A cut inside a UTF-8 character would show as a replacement character: start after it.
    let skip = tail
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xC0) == 0x80)
        .count();
    tail.drain(..skip);
    tail
}

/// POSIX shell-word splitting (quotes and backslashes; no expansions).
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => cur.push(ch),
                        None => {
                            return Err("unterminated single quote in run_script command".into())
                        }
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => cur.push(ch),
                            Some(ch) => {
                                cur.push('\\');
                                cur.push(ch);
                            }
                            None => {
                                return Err("unterminated double quote in run_script command".into())
                            }
                        },
                        Some(ch) => cur.push(ch),
                        None => {
                            return Err("unterminated double quote in run_script command".into())
                        }
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(ch) = chars.next() {
                    cur.push(ch);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{fingerprint, match_results, split_words};
    use mozart_config::model::{HookType, PostSuccessHookConfig};
    use mozart_state::HookResultRecord;

    fn command(cmd: &str) -> PostSuccessHookConfig {
        serde_json::from_value(serde_json::json!({"type": "run_command", "command": cmd})).unwrap()
    }

    fn result(index: u32, fp: Option<&str>, success: bool) -> HookResultRecord {
        HookResultRecord {
            hook_index: index,
            fingerprint: fp.map(str::to_string),
            success,
            ..HookResultRecord::default()
        }
    }

    #[test]
    fn a_fingerprint_is_the_hook_type_and_what_it_runs() {
        let notify = command("echo note");
        let mut described = notify.clone();
        described.description = Some("say so".into());
        described.timeout_seconds = 5.0;
        assert_eq!(fingerprint(&notify), fingerprint(&described));
        assert_ne!(fingerprint(&notify), fingerprint(&command("echo other")));
        let mut script = notify.clone();
        script.kind = HookType::RunScript;
        assert_ne!(fingerprint(&notify), fingerprint(&script));
        assert_eq!(fingerprint(&notify).len(), 16);
    }

    /// Which stored results count for which hooks, and at which positions they are kept.
    fn kept(fps: &[&str], stored: &[HookResultRecord]) -> Vec<(u32, Option<String>)> {
        let fps: Vec<String> = fps.iter().map(|f| f.to_string()).collect();
        match_results(&fps, stored)
            .into_iter()
            .map(|h| (h.hook_index, h.fingerprint))
            .collect()
    }

    #[test]
    fn a_result_counts_for_the_hook_it_was_of_wherever_the_edit_moved_it() {
        let some = |f: &str| Some(f.to_string());
        // Unedited: every result stays where it is, a failed one too (a restart mid-hooks).
        let stored = [result(0, Some("a"), true), result(1, Some("b"), false)];
        assert_eq!(kept(&["a", "b"], &stored), [(0, some("a")), (1, some("b"))]);
        // A hook inserted before the one that ran: the result moves with its hook.
        let stored = [result(0, Some("a"), true)];
        assert_eq!(kept(&["new", "a", "gate"], &stored), [(1, some("a"))]);
        // Replaced at its position: the result is of no hook any more.
        assert!(kept(&["other", "gate"], &stored).is_empty());
        // A failed result does not move (a resume ran it again in any case).
        assert!(kept(&["new", "a"], &[result(0, Some("a"), false)]).is_empty());
        // One result for one hook: the same hook listed twice needs two.
        assert_eq!(kept(&["new", "a", "a"], &stored), [(1, some("a"))]);
        // Rows an older build wrote count by position, as before.
        let stored = [result(0, None, true), result(3, None, true)];
        assert_eq!(kept(&["x", "y"], &stored), [(0, None)]);
    }

    #[test]
    fn only_the_end_of_a_long_output_is_kept() {
        let text = "é".repeat(50_000) + "the end";
        let tail = super::read_tail(text.as_bytes(), 1001);
        assert!(tail.len() <= 1001);
        let shown = String::from_utf8(tail).unwrap();
        assert!(shown.ends_with("éthe end"), "{shown}");
        assert_eq!(super::read_tail(&b"short"[..], 1000), b"short");
    }

    #[test]
    fn words_split_like_a_posix_shell() {
        assert_eq!(
            split_words(r#"notify-send 'job done' "in \"ws\"" a\ b"#).unwrap(),
            vec!["notify-send", "job done", "in \"ws\"", "a b"]
        );
        assert!(split_words("echo 'oops").is_err());
        assert!(split_words("   ").unwrap().is_empty());
    }
}
