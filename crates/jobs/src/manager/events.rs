//! The job events of the conductor log (`job.submitted`, `sheet.completed`, …): one
//! structured `tracing` event each, written by the conductor's log layer as one JSON line
//! (`mozart_conductor::logging`). Each is emitted at the one place its transition becomes
//! durable (the submit pipeline, the baton host after its commit, the dispatch of an
//! attempt), so the log says what the registry says, in the order it happened.
//!
//! Every event carries `event`, `job_id` and a human `message`; sheet events add
//! `sheet_num` and (for attempts) `attempt`. Error text is redacted before it is logged.

use std::path::Path;

use mozart_baton::JobStatus as BatonJobStatus;

/// Longest error text a log event carries; longer text keeps its end, which is where a
/// failing command says why (the last stderr line).
const MAX_MESSAGE: usize = 2000;

/// What the log has said about one job (kept on its table entry).
#[derive(Debug, Default)]
pub(crate) struct JobLog {
    /// The last job status logged.
    pub status: Option<BatonJobStatus>,
    /// Registered again from its checkpoint (`mozart resume`, a restart): its first
    /// `running` is a resume, not a start.
    pub from_checkpoint: bool,
    /// Paused while sheets still ran: `job.paused` is logged once the last one ends.
    pub pausing: Option<String>,
    /// The failed attempt behind a scheduled retry, until the baton says when it runs.
    pub retries: std::collections::HashMap<u32, FailedAttempt>,
}

/// The failed attempt behind a retry or a rate-limit wait.
#[derive(Debug, Clone, Default)]
pub(crate) struct FailedAttempt {
    pub attempt: Option<u32>,
    pub error_code: Option<String>,
    pub message: Option<String>,
    /// The output's last line ([`last_output_line`]).
    pub cause: Option<String>,
}

/// `stderr: <line>` (else `stdout: <line>`): the last non-blank line an attempt printed,
/// where a failing command usually says why.
pub(crate) fn last_output_line(stderr: &str, stdout: &str) -> Option<String> {
    let last = |t: &str| {
        t.lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(str::to_string)
    };
    match last(stderr) {
        Some(l) => Some(format!("stderr: {l}")),
        None => last(stdout).map(|l| format!("stdout: {l}")),
    }
}

/// `message`, followed by the output's last line when the message does not say it.
fn with_cause(message: &str, cause: Option<&str>) -> String {
    match cause {
        Some(c) if !message.contains(c.split_once(": ").map_or(c, |(_, l)| l)) => {
            clean(&format!("{message} — {c}"))
        }
        _ => clean(message),
    }
}

/// Redacted, and cut to [`MAX_MESSAGE`] keeping the end.
pub(crate) fn clean(text: &str) -> String {
    let text = mozart_backends::redact(text.trim());
    let count = text.chars().count();
    if count <= MAX_MESSAGE {
        return text;
    }
    let tail: String = text.chars().skip(count - MAX_MESSAGE).collect();
    format!("… {tail}")
}

/// A sheet's live output file (`sheet-NN.<stream>.log` in the job's sheet logs directory
/// `logs`) when it exists: a short attempt that ended within a second leaves none (its
/// output is in the registry, `mozart_backends::process::LOG_FREE_WINDOW`), and a log known
/// absent is not looked for.
fn output_file(logs: Option<&Path>, sheet: u32, stream: &str) -> Option<String> {
    let path = mozart_ipc::paths::sheet_log_file(logs?, sheet, stream);
    (mozart_backends::output_log::may_exist(&path) && path.exists())
        .then(|| path.display().to_string())
}

/// `job.submitted`: accepted and recorded.
pub(crate) fn submitted(
    job_id: &str,
    config_path: &str,
    workspace: &Path,
    logs: &Path,
    total_sheets: u32,
) {
    tracing::info!(
        event = "job.submitted",
        job_id,
        config_path,
        workspace = %workspace.display(),
        sheet_logs = %logs.display(),
        total_sheets,
        "score submitted: {}; sheet output goes to {}",
        mozart_config::plural(total_sheets, "sheet", "sheets"),
        logs.display()
    );
}

/// `job.rejected`: a submission (or a resume) the conductor refused.
pub(crate) fn rejected(job_id: &str, config_path: &str, reason: &str) {
    let reason = clean(reason);
    tracing::warn!(
        event = "job.rejected",
        job_id,
        config_path,
        reason = %reason,
        "submission refused: {reason}"
    );
}

/// The job's status as the baton just persisted it. `running_sheets`: attempts still in
/// flight (a pause waits for them).
pub(crate) fn job_status(
    log: &mut JobLog,
    job_id: &str,
    status: BatonJobStatus,
    reason: Option<&str>,
    sheet_logs: Option<&Path>,
    running_sheets: usize,
) {
    let before = log.status.replace(status);
    let reason = reason.map(clean);
    let logs = sheet_logs.map(|l| l.display().to_string());
    match status {
        BatonJobStatus::Queued => {
            if before != Some(BatonJobStatus::Queued) {
                let why = reason.unwrap_or_else(|| "waiting for a job slot".into());
                tracing::info!(event = "job.queued", job_id, reason = %why, "queued: {why}");
            }
        }
        BatonJobStatus::Running => {
            if before == Some(BatonJobStatus::Running) {
                return;
            }
            let pausing = log.pausing.take().is_some();
            if before == Some(BatonJobStatus::Paused) || log.from_checkpoint {
                log.from_checkpoint = false;
                let how = if pausing {
                    "resumed before its running sheets had finished"
                } else {
                    "resumed"
                };
                tracing::info!(event = "job.resumed", job_id, sheet_logs = logs, "{how}");
            } else {
                tracing::info!(event = "job.started", job_id, sheet_logs = logs, "started");
            }
        }
        BatonJobStatus::Paused => {
            if before == Some(BatonJobStatus::Paused) {
                return;
            }
            let why = reason.unwrap_or_else(|| "paused".into());
            if running_sheets > 0 {
                log.pausing = Some(why.clone());
                tracing::info!(
                    event = "job.pausing",
                    job_id,
                    reason = %why,
                    running_sheets,
                    "pausing ({why}): waiting for {} to finish",
                    mozart_config::plural(running_sheets, "running sheet", "running sheets")
                );
            } else {
                tracing::info!(event = "job.paused", job_id, reason = %why, "paused ({why})");
            }
        }
        BatonJobStatus::Completed => {
            log.pausing = None;
            tracing::info!(event = "job.completed", job_id, "completed");
        }
        BatonJobStatus::Failed => {
            log.pausing = None;
            let why = reason.unwrap_or_else(|| "failed".into());
            tracing::error!(
                event = "job.failed",
                job_id,
                reason = %why,
                sheet_logs = logs,
                "failed: {why}"
            );
        }
        BatonJobStatus::Cancelled => {
            log.pausing = None;
            tracing::info!(event = "job.cancelled", job_id, "cancelled");
        }
    }
}

/// After a sheet's attempt ended: a pausing job with nothing left running is paused now.
pub(crate) fn maybe_paused(log: &mut JobLog, job_id: &str, running_sheets: usize) {
    if running_sheets > 0 || log.status != Some(BatonJobStatus::Paused) {
        return;
    }
    if let Some(why) = log.pausing.take() {
        tracing::info!(
            event = "job.paused",
            job_id,
            reason = %why,
            "paused ({why}): no sheet is running"
        );
    }
}

/// `sheet.started`: a musician was handed the attempt.
pub(crate) fn sheet_started(job_id: &str, sheet_num: u32, attempt: &mozart_baton::AttemptContext) {
    let mode = match attempt.mode {
        mozart_baton::AttemptMode::Normal => "normal",
        mozart_baton::AttemptMode::Completion => "completion",
        mozart_baton::AttemptMode::Healing => "healing",
    };
    let model = attempt.model.as_deref();
    tracing::info!(
        event = "sheet.started",
        job_id,
        sheet_num,
        attempt = attempt.attempt_number,
        mode,
        instrument = %attempt.instrument,
        model,
        "sheet {sheet_num} started (attempt {}, {}{})",
        attempt.attempt_number,
        attempt.instrument,
        model.map(|m| format!(" {m}")).unwrap_or_default()
    );
}

/// What an attempt's details say, for the sheet events.
#[derive(Debug, Default)]
pub(crate) struct Outcome<'a> {
    pub attempt: Option<u32>,
    pub duration_seconds: Option<f64>,
    pub exit_code: Option<i32>,
    pub error_code: Option<&'a str>,
    pub error_message: Option<&'a str>,
    /// The output's last line ([`last_output_line`]).
    pub cause: Option<&'a str>,
    /// (passed, total) validations.
    pub validations: Option<(usize, usize)>,
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// `sheet.completed`.
pub(crate) fn sheet_completed(
    job_id: &str,
    sheet_num: u32,
    o: &Outcome<'_>,
    sheet_logs: Option<&Path>,
) {
    let validation = match o.validations {
        Some((passed, total)) if total > 0 => format!("; validations {passed}/{total} passed"),
        _ => String::new(),
    };
    let took = o
        .duration_seconds
        .map(|d| format!(" in {d:.1}s"))
        .unwrap_or_default();
    tracing::info!(
        event = "sheet.completed",
        job_id,
        sheet_num,
        attempt = o.attempt,
        duration_seconds = o.duration_seconds,
        validation_passed = o.validations.map(|(p, t)| p == t),
        validations_passed = o.validations.map(|(p, _)| p as u64),
        validations_total = o.validations.map(|(_, t)| t as u64),
        cost_usd = o.cost_usd,
        input_tokens = o.input_tokens,
        output_tokens = o.output_tokens,
        stdout_log = output_file(sheet_logs, sheet_num, "stdout"),
        "sheet {sheet_num} completed{took}{validation}"
    );
}

/// `sheet.failed`: the sheet gave up (or was blocked by a failed dependency).
pub(crate) fn sheet_failed(
    job_id: &str,
    sheet_num: u32,
    o: &Outcome<'_>,
    reason: Option<&str>,
    sheet_logs: Option<&Path>,
) {
    let message = with_cause(o.error_message.or(reason).unwrap_or("failed"), o.cause);
    let code = o.error_code;
    tracing::error!(
        event = "sheet.failed",
        job_id,
        sheet_num,
        attempt = o.attempt,
        error_code = code,
        exit_code = o.exit_code,
        duration_seconds = o.duration_seconds,
        stdout_log = output_file(sheet_logs, sheet_num, "stdout"),
        stderr_log = output_file(sheet_logs, sheet_num, "stderr"),
        "sheet {sheet_num} failed{}: {message}",
        code.map(|c| format!(" [{c}]")).unwrap_or_default()
    );
}

/// `sheet.skipped`.
pub(crate) fn sheet_skipped(job_id: &str, sheet_num: u32, reason: Option<&str>) {
    let why = reason.map(clean).unwrap_or_else(|| "skipped".into());
    tracing::info!(event = "sheet.skipped", job_id, sheet_num, reason = %why, "sheet {sheet_num} skipped: {why}");
}

/// `sheet.cancelled`.
pub(crate) fn sheet_cancelled(job_id: &str, sheet_num: u32) {
    tracing::info!(
        event = "sheet.cancelled",
        job_id,
        sheet_num,
        "sheet {sheet_num} cancelled"
    );
}

/// `sheet.retry_scheduled`: the attempt failed and the sheet runs again after `delay`.
pub(crate) fn sheet_retry_scheduled(
    job_id: &str,
    sheet_num: u32,
    failed: &FailedAttempt,
    delay_seconds: Option<f64>,
) {
    let message = with_cause(
        failed.message.as_deref().unwrap_or("attempt failed"),
        failed.cause.as_deref(),
    );
    let code = failed.error_code.as_deref();
    let retry_at = delay_seconds.map(wall_time_in);
    tracing::warn!(
        event = "sheet.retry_scheduled",
        job_id,
        sheet_num,
        attempt = failed.attempt,
        error_code = code,
        delay_seconds,
        retry_at,
        "sheet {sheet_num} attempt {} failed{}: {message}; retry in {}",
        failed
            .attempt
            .map(|a| a.to_string())
            .unwrap_or_else(|| "?".into()),
        code.map(|c| format!(" [{c}]")).unwrap_or_default(),
        delay_seconds
            .map(|d| format!("{d:.1}s"))
            .unwrap_or_else(|| "a moment".into())
    );
}

/// `sheet.rate_limited`: the instrument is parked until `until_epoch` (no retry spent).
pub(crate) fn sheet_rate_limited(
    job_id: &str,
    sheet_num: u32,
    instrument: &str,
    failed: &FailedAttempt,
    until_epoch: Option<f64>,
) {
    let reason = clean(failed.message.as_deref().unwrap_or("rate limited"));
    let now = mozart_state::epoch_now();
    let wait_seconds = until_epoch.map(|u| (u - now).max(0.0));
    let wait_until = until_epoch.map(epoch_to_iso);
    tracing::warn!(
        event = "sheet.rate_limited",
        job_id,
        sheet_num,
        attempt = failed.attempt,
        instrument,
        wait_until,
        wait_seconds,
        reason = %reason,
        "sheet {sheet_num} rate-limited on {instrument}{}: {reason}",
        wait_seconds
            .map(|w| format!(", waiting {w:.0}s"))
            .unwrap_or_default()
    );
}

/// `sheet.escalated`: the sheet waits for a decision (fermata).
pub(crate) fn sheet_escalated(job_id: &str, sheet_num: u32, reason: &str) {
    let reason = clean(reason);
    tracing::warn!(
        event = "sheet.escalated",
        job_id,
        sheet_num,
        reason = %reason,
        "sheet {sheet_num} needs a decision (fermata): {reason}; resume the job to continue"
    );
}

/// A sheet's skip rule could not decide (an expression that does not evaluate, a command
/// that cannot start or times out): the sheet runs, and the job's log says why.
pub(crate) fn skip_rule_failed(job_id: &str, sheet_num: u32, what: &str) {
    let what = clean(what);
    tracing::warn!(
        event = "sheet.skip_rule_failed",
        job_id,
        sheet_num,
        "sheet {sheet_num} runs: {what}"
    );
}

/// ISO-8601 UTC of a wall-clock time in seconds since the epoch.
fn epoch_to_iso(epoch: f64) -> String {
    mozart_state::Timestamp::from_epoch(epoch).to_string()
}

/// ISO-8601 UTC of `seconds` from now.
fn wall_time_in(seconds: f64) -> String {
    epoch_to_iso(mozart_state::epoch_now() + seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_keep_their_end_and_lose_secrets() {
        let long = format!("{}the real cause", "x".repeat(3000));
        let cut = clean(&long);
        assert!(cut.starts_with("… "));
        assert!(cut.ends_with("the real cause"));
        assert_eq!(cut.chars().count(), MAX_MESSAGE + 2);
        let secret = clean("key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789 leaked");
        assert!(!secret.contains("abcdefghijklmnop"), "{secret}");
    }
}
