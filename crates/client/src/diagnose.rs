//! The diagnose report (cli.md §5.3, `job.diagnose` conductor.md §8.10) and the error
//! records it shares with `mozart errors` (cli.md §5.2), built from the checkpoint the
//! conductor returns: one JSON document every client shows its own way (the CLI renders it as
//! text or prints it with `--json`). Issue 26: the report was the CLI's alone.

use std::path::{Path, PathBuf};

use mozart_ipc::checkpoint::{error_type_with, JobCheckpoint, SheetCheckpoint, SheetStatus};
use mozart_ipc::sheet_view::SheetsView;
use mozart_ipc::time::Timestamp;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Lines of each log file [`ReportOptions::include_logs`] inlines.
pub const LOG_TAIL_LINES: usize = 50;
/// Hook logs beyond which the report suggests a cleanup.
pub const HOOK_LOG_HINT_THRESHOLD: usize = 20;

/// What a report includes beyond the checkpoint's facts and the list of log files.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOptions {
    /// The last [`LOG_TAIL_LINES`] lines of each log file (`--include-logs`).
    pub include_logs: bool,
    /// The resource profile (`--resources`).
    pub resources: bool,
}

/// The whole report of `job` (its workspace's log files from `workspace`), dated `now`.
pub fn report(
    job: &JobCheckpoint,
    workspace: Option<&Path>,
    now: f64,
    options: ReportOptions,
) -> Value {
    let mut report = build_report(job, workspace, now);
    if options.include_logs {
        attach_log_contents(&mut report);
    }
    if options.resources {
        attach_resource_profile(&mut report);
    }
    // Upstream counts rows of a workspace SQLite store it read directly; ours never reads
    // one, so the count is always unknown here (`mozart history` shows the attempts).
    insert(&mut report, "execution_history_count", Value::Null);
    report
}

fn insert(report: &mut Value, key: &str, value: Value) {
    if let Some(obj) = report.as_object_mut() {
        obj.insert(key.to_string(), value);
    }
}

fn iso(ts: &Option<Timestamp>) -> Value {
    ts.as_ref()
        .map_or(Value::Null, |t| json!(t.as_str().to_string()))
}

/// One error of the report: the `errors` record plus `stack_trace`.
fn report_error(e: &ErrorEntry) -> Value {
    json!({
        "sheet_num": e.sheet_num,
        "timestamp": e.timestamp,
        "error_type": e.error_type,
        "error_code": normalize_error_code(Some(&e.error_code), None),
        "error_message": e.error_message,
        "attempt_number": e.attempt_number,
        "context": e.context,
        "stdout_tail": e.stdout_tail,
        "stderr_tail": e.stderr_tail,
        "stack_trace": e.stack_trace,
    })
}

/// The report as JSON, keys in upstream's order (cli.md §5.3). `now` dates the report and
/// ends the duration of an unfinished score.
pub fn build_report(job: &JobCheckpoint, workspace: Option<&Path>, now: f64) -> Value {
    let mut r = Map::new();
    r.insert("job_id".into(), json!(job.job_id));
    r.insert("job_name".into(), json!(job.job_name));
    r.insert("status".into(), json!(job.status.as_str()));
    r.insert(
        "generated_at".into(),
        json!(Timestamp::from_epoch(now).as_str()),
    );

    r.insert("progress".into(), progress_json(job));
    r.insert("timing".into(), timing_json(job, now));
    let warnings: Vec<Value> = job
        .sheets
        .iter()
        .flat_map(|(n, s)| {
            s.preflight_warnings
                .iter()
                .map(move |w| json!({"sheet_num": n, "warning": w}))
        })
        .collect();
    r.insert("preflight_warnings".into(), Value::Array(warnings));

    insert_prompt_metrics(&mut r, job);
    r.insert(
        "execution_timeline".into(),
        Value::Array(timeline_json(job)),
    );
    r.insert(
        "execution_stats".into(),
        json!({
            "total_retry_count": job.total_retry_count,
            "rate_limit_waits": job.rate_limit_waits,
        }),
    );

    // Ours (issue 22): what holds the job's instruments now, and what the job waits for.
    if !job.instrument_holds.is_empty() {
        r.insert("instrument_holds".into(), json!(job.instrument_holds));
    }
    if let Some(w) = &job.waiting_reason {
        r.insert("waiting_reason".into(), json!(w));
    }
    if let Some(listed) = sheets_listed_json(job) {
        r.insert("sheets_listed".into(), listed);
    }
    // Upstream's key order: errors, then error_count.
    let errors = report_errors_json(job, now);
    let count = errors.len();
    r.insert("errors".into(), Value::Array(errors));
    r.insert("error_count".into(), json!(count));
    if let Some(e) = &job.error_message {
        r.insert("job_error".into(), json!(e));
    }

    let logs = discover_log_files(workspace, &job.job_id);
    let hook_logs = logs.iter().filter(|l| l["category"] == "hook_log").count();
    r.insert("log_files".into(), Value::Array(logs));
    if hook_logs > HOOK_LOG_HINT_THRESHOLD {
        r.insert(
            "log_rotation_hint".into(),
            json!(format!(
                "{hook_logs} hook log files found — consider cleanup"
            )),
        );
    }
    Value::Object(r)
}

/// `progress`: sheets completed and failed by display status.
fn progress_json(job: &JobCheckpoint) -> Value {
    if let Some(view) = job.sheets_view.as_ref().filter(|v| v.truncated) {
        return cut_progress_json(job, view);
    }
    // Display status, so a completed sheet whose validations failed counts as failed
    // (upstream F-065b: the summary and the timeline must agree).
    let completed = job
        .sheets
        .values()
        .filter(|s| s.display_status() == "completed")
        .count();
    let failed = job
        .sheets
        .values()
        .filter(|s| s.display_status() == "failed" || s.status == SheetStatus::Failed)
        .count();
    // A skipped sheet is done, as in `status` (issue 23): a completed score with a skipped
    // sheet is at 100 %.
    let skipped = job
        .sheets
        .values()
        .filter(|s| s.status == SheetStatus::Skipped)
        .count();
    progress_doc(
        job,
        (completed as u64, failed as u64, skipped as u64),
        job.total_sheets,
    )
}

/// The `progress` object: `counts` (completed, failed, skipped) of `total` sheets.
fn progress_doc(
    job: &JobCheckpoint,
    (completed, failed, skipped): (u64, u64, u64),
    total: u32,
) -> Value {
    let percent = if total > 0 {
        json!(((completed + skipped) as f64 / f64::from(total) * 1000.0).round() / 10.0)
    } else {
        json!(0)
    };
    let mut progress = json!({
        "total_sheets": job.total_sheets,
        "completed": completed,
        "failed": failed,
        "last_completed": job.last_completed_sheet,
        "percent": percent,
    });
    if skipped > 0 {
        progress["skipped"] = json!(skipped);
    }
    progress
}

/// `progress` of a large job whose answer lists only some sheets: from the counts of every
/// sheet the conductor sent with it.
fn cut_progress_json(job: &JobCheckpoint, view: &SheetsView) -> Value {
    let count = |state: &str| view.counts.get(state).copied().unwrap_or(0);
    let failed = count("failed") + view.failed_validation;
    let completed = count("completed").saturating_sub(view.failed_validation);
    let skipped = count("skipped");
    progress_doc(
        job,
        (u64::from(completed), u64::from(failed), u64::from(skipped)),
        view.total,
    )
}

/// Ours: `sheets_listed` of the report of a job too large to list whole — how many sheets
/// (and failed sheets) the timeline and errors cover of how many, and the command that
/// pages through the failed ones.
fn sheets_listed_json(job: &JobCheckpoint) -> Option<Value> {
    let view = job.sheets_view.as_ref().filter(|v| v.truncated)?;
    let failed_listed = job
        .sheets
        .values()
        .filter(|s| s.display_status() == "failed" || s.status == SheetStatus::Failed)
        .count();
    let failed = view.counts.get("failed").copied().unwrap_or(0) + view.failed_validation;
    Some(json!({
        "total_sheets": view.total,
        "listed": job.sheets.len(),
        "failed": failed,
        "failed_listed": failed_listed,
        "see_failed": format!("mozart status {} --sheets --state failed", job.job_id),
    }))
}

/// `timing`: the score's times, and its duration once started.
fn timing_json(job: &JobCheckpoint, now: f64) -> Value {
    let mut timing = Map::new();
    timing.insert("created_at".into(), json!(job.created_at.as_str()));
    timing.insert("started_at".into(), iso(&job.started_at));
    timing.insert("updated_at".into(), json!(job.updated_at.as_str()));
    timing.insert("completed_at".into(), iso(&job.completed_at));
    if let Some(start) = job.started_at.as_ref().and_then(Timestamp::to_epoch) {
        let end = job
            .completed_at
            .as_ref()
            .and_then(Timestamp::to_epoch)
            .unwrap_or(now);
        timing.insert(
            "duration_seconds".into(),
            json!(((end - start) * 100.0).round() / 100.0),
        );
    }
    Value::Object(timing)
}

/// `prompt_metrics` per sheet, and `token_statistics` when there are any.
fn insert_prompt_metrics(r: &mut Map<String, Value>, job: &JobCheckpoint) {
    let metrics: Vec<Value> = job
        .sheets
        .iter()
        .filter_map(|(n, s)| {
            let m = serde_json::to_value(s.prompt_metrics.as_ref()?).ok()?;
            let mut entry = Map::new();
            entry.insert("sheet_num".into(), json!(n));
            entry.extend(m.as_object()?.clone());
            Some(Value::Object(entry))
        })
        .collect();
    if !metrics.is_empty() {
        let tokens: Vec<u64> = job
            .sheets
            .values()
            .filter_map(|s| s.prompt_metrics.as_ref())
            .map(|m| m.estimated_tokens.unwrap_or(0))
            .collect();
        let total: u64 = tokens.iter().sum();
        let stats = json!({
            "min": tokens.iter().min().copied().unwrap_or(0),
            "max": tokens.iter().max().copied().unwrap_or(0),
            "avg": (total as f64 / tokens.len() as f64).round(),
            "total": total,
        });
        r.insert("prompt_metrics".into(), Value::Array(metrics));
        r.insert("token_statistics".into(), stats);
    } else {
        r.insert("prompt_metrics".into(), json!([]));
    }
}

/// `execution_timeline`: one row per sheet.
fn timeline_json(job: &JobCheckpoint) -> Vec<Value> {
    job.sheets
        .iter()
        .map(|(n, s)| {
            json!({
                "sheet_num": n,
                "status": s.display_status(),
                "started_at": iso(&s.started_at),
                "completed_at": iso(&s.completed_at),
                "duration_seconds": s.execution_duration_seconds,
                "attempt_count": s.attempt_count,
                "completion_attempts": s.completion_attempts,
                "execution_mode": s.execution_mode.as_ref().and_then(enum_text),
                "outcome_category": s.outcome_category.as_ref().and_then(enum_text),
            })
        })
        .collect()
}

/// `errors`: per sheet, its history, or one record from its last message when it has none.
fn report_errors_json(job: &JobCheckpoint, now: f64) -> Vec<Value> {
    job.sheets
        .iter()
        .flat_map(|(n, s)| sheet_errors(*n, s, now))
        .map(|e| report_error(&e))
        .collect()
}

/// `*.log` files in job `job_id`'s sheet logs directory (`<workspace>/logs`, or
/// `<workspace>/logs/<job_id>` when another job's are there) and `<workspace>/hooks` (hook
/// logs), sorted by name within each directory.
pub fn discover_log_files(workspace: Option<&Path>, job_id: &str) -> Vec<Value> {
    let Some(ws) = workspace.filter(|w| w.exists()) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let sheet_logs = mozart_ipc::paths::sheet_logs_dir(ws, job_id);
    for (dir, category) in [(sheet_logs, "sheet_log"), (ws.join("hooks"), "hook_log")] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        // Not following links: what is in the directory is what is listed.
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "log")
                    && std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir())
            })
            .collect();
        paths.sort();
        for path in paths {
            // A link, a FIFO or another user's file in a log's place (or in a `logs`/`hooks`
            // that is a link or theirs) is listed with why it is not shown, never read
            // (mozart_backends::shown_log).
            let meta = match mozart_backends::shown_log::open_shown_log(&path).and_then(|file| {
                file.metadata()
                    .map_err(|source| mozart_backends::shown_log::ShownLogError::Read {
                        path: path.clone(),
                        source,
                    })
            }) {
                Ok(meta) => meta,
                Err(e) if e.is_missing() => continue,
                Err(e) => {
                    found.push(json!({
                        "path": path.display().to_string(),
                        "name": path.file_name().map(|n| n.to_string_lossy().into_owned()),
                        "size_bytes": 0,
                        "modified_at": null,
                        "category": category,
                        "not_shown": e.to_string(),
                    }));
                    continue;
                }
            };
            let modified = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| Timestamp::from_epoch(d.as_secs_f64()).as_str().to_string());
            found.push(json!({
                "path": path.display().to_string(),
                "name": path.file_name().map(|n| n.to_string_lossy().into_owned()),
                "size_bytes": meta.len(),
                "modified_at": modified,
                "category": category,
            }));
        }
    }
    found
}

/// Add `log_contents`: the last [`LOG_TAIL_LINES`] lines of each discovered log file.
pub fn attach_log_contents(report: &mut Value) {
    let mut contents = Map::new();
    let paths: Vec<(String, Option<String>)> = report["log_files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|f| {
                    let why = f["not_shown"].as_str().map(str::to_string);
                    f["path"].as_str().map(|p| (p.to_string(), why))
                })
                .collect()
        })
        .unwrap_or_default();
    for (path, not_shown) in paths {
        if let Some(why) = not_shown {
            contents.insert(path, json!(format!("<{why}>")));
            continue;
        }
        // Opened as it was listed: a file swapped for a link since is not followed.
        let text = match mozart_backends::shown_log::read_shown_log(Path::new(&path)) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let lines: Vec<&str> = text.lines().collect();
                // The conductor writes these redacted; logs an older Mozart (or a hook)
                // wrote are redacted here (issue 21).
                mozart_backends::redact::redact_owned(
                    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n"),
                )
            }
            Err(_) => "<read error>".to_string(),
        };
        contents.insert(path, json!(text));
    }
    insert(report, "log_contents", Value::Object(contents));
}

/// Add `resource_profile` (cli.md §5.3 `resource_profile {available, ...}`). This port does
/// not record resource profiles of past runs (upstream's `monitor.db`), so the profile is
/// always unavailable, with that reason and where live figures are.
pub fn attach_resource_profile(report: &mut Value) {
    insert(
        report,
        "resource_profile",
        json!({"available": false, "error": RESOURCE_PROFILE_UNAVAILABLE}),
    );
}

/// Why `diagnose --resources` has no profile.
pub const RESOURCE_PROFILE_UNAVAILABLE: &str = "Resource profiles of past runs are not recorded \
     by this port (upstream's monitor.db); `mozart top` shows the conductor's processes and \
     resources live";

// ---------------------------------------------------------------------------------------
// Error records (`mozart errors` and the report's `errors`).
// ---------------------------------------------------------------------------------------

/// One error occurrence as `errors` and `diagnose` report it.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorEntry {
    /// The sheet.
    pub sheet_num: u32,
    /// When, as ISO text (`None` only if a synthetic record's sheet never finished).
    pub timestamp: Option<String>,
    /// `transient` / `rate_limit` / `permanent`.
    pub error_type: String,
    /// The E-code as recorded (history) or normalised (synthetic records).
    pub error_code: String,
    /// The message.
    pub error_message: String,
    /// 1-based attempt.
    pub attempt_number: u32,
    /// Extra context (`exit_code`, `exit_signal`, `exit_reason`, ...).
    pub context: Map<String, Value>,
    /// stdout tail at the time.
    pub stdout_tail: Option<String>,
    /// stderr tail at the time.
    pub stderr_tail: Option<String>,
    /// Stack trace, if any.
    pub stack_trace: Option<String>,
    /// Sort key: epoch seconds of `timestamp`.
    epoch: f64,
}

/// Filters of `mozart errors` (`--sheet`, `--type`, `--code`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorFilter {
    /// Only this sheet.
    pub sheet: Option<u32>,
    /// Only this error type.
    pub error_type: Option<String>,
    /// Only this (recorded) error code.
    pub code: Option<String>,
}

impl ErrorFilter {
    fn admits(&self, e: &ErrorEntry) -> bool {
        self.error_type.as_ref().is_none_or(|t| *t == e.error_type)
            && self.code.as_ref().is_none_or(|c| *c == e.error_code)
    }
}

/// The snake_case text serde gives an enum value.
pub fn enum_text<T: Serialize>(value: &T) -> Option<String> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
}

/// A sheet's recorded error history, oldest first.
pub fn history_entries(num: u32, sheet: &SheetCheckpoint) -> Vec<ErrorEntry> {
    sheet
        .error_history
        .iter()
        .map(|rec| ErrorEntry {
            sheet_num: num,
            timestamp: Some(rec.timestamp.as_str().to_string()),
            error_type: enum_text(&rec.error_type).unwrap_or_else(|| "permanent".into()),
            error_code: rec.error_code.clone(),
            error_message: rec.error_message.clone(),
            attempt_number: rec.attempt_number,
            context: rec.context.clone(),
            stdout_tail: rec.stdout_tail.clone(),
            stderr_tail: rec.stderr_tail.clone(),
            stack_trace: rec.stack_trace.clone(),
            epoch: rec.timestamp.to_epoch().unwrap_or(0.0),
        })
        .collect()
}

/// A record made from a sheet's last error message, for sheets without history (upstream's
/// "synthetic" records). Dated at the sheet's `completed_at`, else `now`. None for a sheet
/// skipped by design (`skip_when`, `--start-sheet`): its message is the skip's reason, not
/// an error.
pub fn synthetic_entry(num: u32, sheet: &SheetCheckpoint, now: f64) -> Option<ErrorEntry> {
    if sheet.status == SheetStatus::Skipped {
        return None;
    }
    let message = sheet.error_message.as_ref()?;
    let category = sheet.error_category.map(|c| c.as_str());
    let mut context = Map::new();
    context.insert("exit_code".into(), json!(sheet.exit_code));
    context.insert("exit_signal".into(), json!(sheet.exit_signal));
    context.insert(
        "exit_reason".into(),
        json!(sheet.exit_reason.as_ref().and_then(enum_text)),
    );
    let (timestamp, epoch) = match &sheet.completed_at {
        Some(ts) => (Some(ts.as_str().to_string()), ts.to_epoch().unwrap_or(now)),
        None => (None, now),
    };
    Some(ErrorEntry {
        sheet_num: num,
        timestamp,
        error_type: error_type_with(sheet.error_code.as_deref(), category).to_string(),
        error_code: normalize_error_code(sheet.error_code.as_deref(), category),
        error_message: message.clone(),
        // 0 for a sheet that never ran (blocked by a failed dependency): no attempt made.
        attempt_number: sheet.attempt_count,
        context,
        stdout_tail: sheet.stdout_tail.clone(),
        stderr_tail: sheet.stderr_tail.clone(),
        stack_trace: None,
        epoch,
    })
}

/// A sheet's errors: its history, or one record from its last message when it has none.
/// A sheet that made no attempt in this run has only earlier runs' history (`--all-runs`):
/// its error in this run (blocked by a failed dependency) is listed too, as the default
/// view lists it. A sheet parked on a rate limit has no counted attempt either, but its
/// last message is its history's last record (the attempt the limit answered): not listed
/// twice.
fn sheet_errors(num: u32, sheet: &SheetCheckpoint, now: f64) -> Vec<ErrorEntry> {
    let mut history = history_entries(num, sheet);
    let last_is_recorded = history
        .last()
        .is_some_and(|h| sheet.error_message.as_ref() == Some(&h.error_message));
    if history.is_empty() || (sheet.attempt_count == 0 && !last_is_recorded) {
        history.extend(synthetic_entry(num, sheet, now));
    }
    history
}

/// The errors `mozart errors` lists: each sheet's history, or, for a sheet without one
/// (it never ran an attempt, or the conductor kept no attempt history), a synthetic record
/// from its last message; filtered. Sorted by sheet, then time (cli.md §5.2; upstream falls
/// back only when no sheet has a history, which its conductor never filled).
pub fn collect_errors(job: &JobCheckpoint, filter: &ErrorFilter, now: f64) -> Vec<ErrorEntry> {
    let mut all: Vec<ErrorEntry> = job
        .sheets
        .iter()
        .filter(|(num, _)| filter.sheet.is_none_or(|s| s == **num))
        .flat_map(|(num, sheet)| sheet_errors(*num, sheet, now))
        .filter(|e| filter.admits(e))
        .collect();
    all.sort_by(|a, b| {
        a.sheet_num
            .cmp(&b.sheet_num)
            .then(a.epoch.total_cmp(&b.epoch))
    });
    all
}

/// One error as JSON; tails only when `tails` (the `-V` flag of `errors`).
pub fn entry_json(e: &ErrorEntry, tails: bool) -> Value {
    json!({
        "sheet_num": e.sheet_num,
        "timestamp": e.timestamp,
        "error_type": e.error_type,
        "error_code": e.error_code,
        "error_message": e.error_message,
        "attempt_number": e.attempt_number,
        "context": e.context,
        "stdout_tail": if tails { json!(e.stdout_tail) } else { Value::Null },
        "stderr_tail": if tails { json!(e.stderr_tail) } else { Value::Null },
    })
}

/// `mozart errors --json`.
pub fn errors_json(id: &str, errors: &[ErrorEntry], verbose: bool) -> Value {
    json!({
        "job_id": id,
        "total_errors": errors.len(),
        "errors": errors.iter().map(|e| entry_json(e, verbose)).collect::<Vec<_>>(),
    })
}

/// Canonical E-code of a legacy category string.
fn category_code(category: &str) -> Option<&'static str> {
    Some(match category.to_ascii_lowercase().as_str() {
        "timeout" => "E001",
        "signal" => "E002",
        "network" => "E003",
        "transient" => "E004",
        "rate_limit" => "E101",
        "validation" => "E201",
        "configuration" => "E301",
        "auth" => "E502",
        "preflight" => "E601",
        "escalation" | "fatal" => "E999",
        _ => return None,
    })
}

/// Normalise an error code to `Exxx`: real codes pass, category strings map to their
/// family's code, anything else is `E999` (cli.md §4.1).
pub fn normalize_error_code(code: Option<&str>, category: Option<&str>) -> String {
    if let Some(code) = code {
        let digits = code.strip_prefix('E').unwrap_or("");
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return code.to_string();
        }
        if let Some(mapped) = category_code(code) {
            return mapped.to_string();
        }
    }
    category
        .and_then(category_code)
        .unwrap_or("E999")
        .to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::{checkpoint, failed_sheet, job_with};
    use mozart_ipc::checkpoint::CheckpointErrorRecord;

    /// A failed three-sheet job (the CLI's rendering tests read the same file).
    fn job() -> JobCheckpoint {
        let text = include_str!("../testdata/diagnose_job.json");
        checkpoint(serde_json::from_str(text).unwrap())
    }

    #[test]
    fn report_has_upstreams_keys_in_order_and_counts_display_statuses() {
        let report = build_report(&job(), None, 1_767_261_700.0);
        let keys: Vec<&String> = report.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            vec![
                "job_id",
                "job_name",
                "status",
                "generated_at",
                "progress",
                "timing",
                "preflight_warnings",
                "prompt_metrics",
                "token_statistics",
                "execution_timeline",
                "execution_stats",
                "errors",
                "error_count",
                "job_error",
                "log_files"
            ]
        );
        assert_eq!(
            report["progress"],
            json!({"total_sheets": 3, "completed": 1, "failed": 2,
                   "last_completed": 1, "percent": 33.3})
        );
        assert_eq!(report["timing"]["duration_seconds"], 90.5);
        assert_eq!(
            report["token_statistics"],
            json!({"min": 1200, "max": 3001, "avg": 2101.0, "total": 4201})
        );
        assert_eq!(report["prompt_metrics"][0]["sheet_num"], 1);
        assert_eq!(report["prompt_metrics"][0]["line_count"], 10);
        assert_eq!(report["execution_timeline"][1]["status"], "failed");
        assert_eq!(report["execution_timeline"][0]["execution_mode"], "normal");
        assert_eq!(report["error_count"], 2);
        assert_eq!(report["errors"][0]["stack_trace"], "trace");
        assert_eq!(report["errors"][1]["error_code"], "E999");
        assert_eq!(report["errors"][1]["error_type"], "permanent");
        assert_eq!(
            report["preflight_warnings"],
            json!([{"sheet_num": 1, "warning": "prompt is long"}])
        );
    }

    #[test]
    fn the_whole_report_adds_what_the_options_ask_for_and_an_unknown_history_count() {
        let plain = report(&job(), None, 1_767_261_700.0, ReportOptions::default());
        assert_eq!(plain["execution_history_count"], Value::Null);
        assert!(plain.get("log_contents").is_none());
        assert!(plain.get("resource_profile").is_none());
        let full = report(
            &job(),
            None,
            1_767_261_700.0,
            ReportOptions {
                include_logs: true,
                resources: true,
            },
        );
        assert_eq!(full["log_contents"], json!({}));
        assert_eq!(full["resource_profile"]["available"], false);
    }

    #[test]
    fn log_files_are_found_in_name_order_and_tailed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        std::fs::create_dir_all(dir.path().join("hooks")).unwrap();
        let lines: Vec<String> = (1..=60).map(|i| format!("line {i}")).collect();
        std::fs::write(dir.path().join("logs/sheet-02.log"), "two").unwrap();
        std::fs::write(dir.path().join("logs/sheet-01.log"), lines.join("\n")).unwrap();
        std::fs::write(dir.path().join("logs/notes.txt"), "ignored").unwrap();
        std::fs::write(dir.path().join("hooks/hook-1.log"), "").unwrap();
        let mut report = build_report(&job(), Some(dir.path()), 1_767_261_700.0);
        let files = report["log_files"].as_array().unwrap().clone();
        let names: Vec<&str> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["sheet-01.log", "sheet-02.log", "hook-1.log"]);
        assert_eq!(files[0]["category"], "sheet_log");
        assert_eq!(files[0]["size_bytes"], 470);
        assert_eq!(files[2]["category"], "hook_log");
        assert_eq!(files[2]["size_bytes"], 0);
        attach_log_contents(&mut report);
        let path = files[0]["path"].as_str().unwrap().to_string();
        let tail = report["log_contents"][&path].as_str().unwrap();
        assert!(
            tail.starts_with("line 11\n") && tail.ends_with("line 60"),
            "{tail}"
        );
    }

    fn record(ts: &str, kind: &str, code: &str, msg: &str, attempt: u32) -> CheckpointErrorRecord {
        serde_json::from_value(json!({
            "timestamp": ts, "error_type": kind, "error_code": code,
            "error_message": msg, "attempt_number": attempt,
            "context": {"exit_code": 1, "signal": null},
            "stdout_tail": "out", "stderr_tail": "err"
        }))
        .unwrap()
    }

    #[test]
    fn history_is_listed_by_sheet_then_time_and_filtered() {
        let mut s2 = SheetCheckpoint::new(2);
        s2.error_history = vec![
            record("2026-01-01T10:00:09Z", "transient", "E001", "timeout", 2),
            record("2026-01-01T10:00:01Z", "rate_limit", "E101", "slow down", 1),
        ];
        let mut s1 = SheetCheckpoint::new(1);
        s1.error_history = vec![record(
            "2026-01-01T11:00:00Z",
            "permanent",
            "E201",
            "bad",
            1,
        )];
        let job = job_with(vec![s1, s2]);

        let all = collect_errors(&job, &ErrorFilter::default(), 0.0);
        let order: Vec<(u32, &str)> = all
            .iter()
            .map(|e| (e.sheet_num, e.error_code.as_str()))
            .collect();
        assert_eq!(order, vec![(1, "E201"), (2, "E101"), (2, "E001")]);

        let only = |f: ErrorFilter| -> Vec<String> {
            collect_errors(&job, &f, 0.0)
                .into_iter()
                .map(|e| e.error_code)
                .collect()
        };
        let by_type = ErrorFilter {
            error_type: Some("transient".into()),
            ..Default::default()
        };
        assert_eq!(only(by_type), vec!["E001"]);
        let by_sheet = ErrorFilter {
            sheet: Some(1),
            ..Default::default()
        };
        assert_eq!(only(by_sheet), vec!["E201"]);
        let by_code = ErrorFilter {
            code: Some("E101".into()),
            ..Default::default()
        };
        assert_eq!(only(by_code), vec!["E101"]);
    }

    #[test]
    fn a_skipped_sheets_reason_is_not_an_error() {
        let mut skipped = SheetCheckpoint::new(2);
        skipped.status = SheetStatus::Skipped;
        skipped.error_message = Some("the plan needs fewer than three phases".into());
        assert!(synthetic_entry(2, &skipped, 0.0).is_none());
        let job = job_with(vec![
            failed_sheet(1, "validation failed", Some("E900")),
            skipped,
        ]);
        let errors = collect_errors(&job, &ErrorFilter::default(), 0.0);
        let sheets: Vec<u32> = errors.iter().map(|e| e.sheet_num).collect();
        assert_eq!(sheets, vec![1]);
    }

    #[test]
    fn a_sheet_without_history_is_listed_beside_sheets_with_one() {
        let mut s1 = failed_sheet(1, "validation failed", Some("E900"));
        s1.error_history = vec![
            record("2026-01-01T10:00:01Z", "permanent", "E900", "first", 1),
            record("2026-01-01T10:00:02Z", "permanent", "E900", "second", 2),
        ];
        // Sheet 2 never ran an attempt (blocked by sheet 1): only its last message.
        let mut s2 = failed_sheet(2, "blocked by sheet 1", None);
        s2.attempt_count = 0;
        let errors = collect_errors(&job_with(vec![s1, s2]), &ErrorFilter::default(), 0.0);
        let listed: Vec<(u32, u32, &str)> = errors
            .iter()
            .map(|e| (e.sheet_num, e.attempt_number, e.error_message.as_str()))
            .collect();
        assert_eq!(
            listed,
            vec![
                (1, 1, "first"),
                (1, 2, "second"),
                (2, 0, "blocked by sheet 1")
            ]
        );
    }

    #[test]
    fn sheets_without_history_get_synthetic_records_with_inferred_types() {
        let job = job_with(vec![
            failed_sheet(1, "validation failed", Some("E900")),
            failed_sheet(2, "rate limited", Some("E101")),
            SheetCheckpoint::new(3),
        ]);
        let errors = collect_errors(&job, &ErrorFilter::default(), 0.0);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].error_type, "permanent");
        assert_eq!(errors[0].error_code, "E900");
        assert_eq!(errors[0].attempt_number, 2);
        assert_eq!(errors[0].timestamp.as_deref(), Some("2026-01-01T10:00:05Z"));
        assert_eq!(errors[1].error_type, "rate_limit");
        let doc = errors_json("j", &errors, false);
        assert_eq!(doc["total_errors"], 2);
        assert_eq!(
            doc["errors"][0]["context"],
            json!({"exit_code": 3, "exit_signal": null, "exit_reason": null})
        );
        assert_eq!(doc["errors"][0]["stdout_tail"], Value::Null);
        let keys: Vec<&String> = doc["errors"][0].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            vec![
                "sheet_num",
                "timestamp",
                "error_type",
                "error_code",
                "error_message",
                "attempt_number",
                "context",
                "stdout_tail",
                "stderr_tail"
            ]
        );
    }
}
