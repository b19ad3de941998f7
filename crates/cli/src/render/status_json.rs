//! `mozart status <id> --json` derived from a `JobCheckpoint` (cli.md §4.1), plus the
//! derivations the human view shares with it (display status, recent errors, circuit
//! breaker, last activity, movements).

use mozart_ipc::checkpoint::{JobCheckpoint, SheetCheckpoint, SheetStatus};
use mozart_ipc::sheet_view::SheetMode;
use mozart_ipc::time::Timestamp;
use serde_json::{json, Map, Value};

/// Trailing failed sheets at which the inferred breaker reads `open` (upstream's
/// `CircuitBreakerConfig.failure_threshold` default).
pub const CIRCUIT_BREAKER_THRESHOLD: u32 = 5;

/// Whether a `job.status` result is a checkpoint (cli.md §10: `job_name`, `total_sheets`
/// ≥ 1 and `sheets` present) and, if so, the parsed checkpoint. A metadata dict (conductor.md
/// §6.10) yields `None`. Tests build their checkpoints with it; the commands decode
/// [`mozart_ipc::status::JobStatusResult`] directly.
#[cfg(test)]
pub fn parse_checkpoint(value: &Value) -> Option<JobCheckpoint> {
    use mozart_ipc::status::JobStatusResult;
    match JobStatusResult::from_value(value.clone())? {
        JobStatusResult::Checkpoint(state) => Some(*state),
        JobStatusResult::Record(_) => None,
    }
}

/// Normalising an error code to `Exxx` is the client's (`mozart_client::diagnose`).
pub use mozart_client::diagnose::normalize_error_code;

/// `transient` (E0xx), `rate_limit` (E1xx) or `permanent`, from a code or category.
pub fn infer_error_type(code_or_category: Option<&str>) -> &'static str {
    mozart_ipc::checkpoint::error_type_of(code_or_category)
}

/// One entry of the recent-errors list.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentError {
    /// The sheet.
    pub sheet_num: u32,
    /// When (ISO text).
    pub timestamp: String,
    /// `transient` / `rate_limit` / `permanent`.
    pub error_type: String,
    /// Normalised E-code.
    pub error_code: String,
    /// The message.
    pub error_message: String,
    /// 1-based attempt.
    pub attempt_number: u32,
    /// Backend named in the error context, if any.
    pub backend: Option<String>,
}

/// Newest `limit` errors over all sheets (see [`recent_errors_of`]).
pub fn recent_errors(job: &JobCheckpoint, limit: usize, now: f64) -> Vec<RecentError> {
    recent_errors_of(job, limit, now).0
}

/// Newest `limit` errors over all sheets, and how many there are in all. From the job's
/// failed attempts when the conductor added them (`recent_attempt_errors`: every failed
/// attempt, not only each sheet's last), with the sheets that never ran (a failed
/// dependency) from their message; otherwise each sheet's error history, or a synthetic
/// entry from its last error message when it has no history.
pub fn recent_errors_of(job: &JobCheckpoint, limit: usize, now: f64) -> (Vec<RecentError>, u64) {
    let mut all: Vec<(f64, RecentError)> = Vec::new();
    let mut total = 0u64;
    if let Some(recent) = &job.recent_attempt_errors {
        total = recent.total;
        for a in &recent.errors {
            let category = a.error_category.as_deref();
            all.push((
                a.timestamp.to_epoch().unwrap_or(0.0),
                RecentError {
                    sheet_num: a.sheet_num,
                    timestamp: a.timestamp.as_str().to_string(),
                    error_type: mozart_ipc::checkpoint::error_type_with(
                        a.error_code.as_deref(),
                        category,
                    )
                    .to_string(),
                    error_code: normalize_error_code(a.error_code.as_deref(), category),
                    error_message: a.error_message.clone().unwrap_or_default(),
                    attempt_number: a.attempt_number,
                    backend: None,
                },
            ));
        }
    }
    for (&num, sheet) in &job.sheets {
        if let Some(recent) = &job.recent_attempt_errors {
            // The attempts are listed above; a sheet that never ran (a failed dependency)
            // has none. A sheet waiting out a rate limit also counts no attempt yet (a
            // limited attempt spends none), but it ran: its attempts are listed, and it
            // is no "not run" error of its own.
            let ran = recent.errors.iter().any(|a| a.sheet_num == num)
                || matches!(sheet.status, SheetStatus::Pending | SheetStatus::InProgress);
            if sheet.attempt_count == 0 && !ran {
                if let Some(e) = last_error(num, sheet, now) {
                    total += 1;
                    all.push(e);
                }
            }
            continue;
        }
        for rec in &sheet.error_history {
            let error_type = serde_json::to_value(rec.error_type)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "permanent".to_string());
            all.push((
                rec.timestamp.to_epoch().unwrap_or(0.0),
                RecentError {
                    sheet_num: num,
                    timestamp: rec.timestamp.as_str().to_string(),
                    error_type,
                    error_code: normalize_error_code(Some(&rec.error_code), None),
                    error_message: rec.error_message.clone(),
                    attempt_number: rec.attempt_number,
                    backend: rec
                        .context
                        .get("backend")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                },
            ));
        }
        if sheet.error_history.is_empty() {
            all.extend(last_error(num, sheet, now));
        }
    }
    if job.recent_attempt_errors.is_none() {
        total = all.len() as u64;
    }
    // Stable sort: equal timestamps keep sheet order, as upstream's sort does.
    all.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
    let listed = all.into_iter().take(limit).map(|(_, e)| e).collect();
    (listed, total)
}

/// A sheet's last error message as an entry (a skipped sheet's message is the skip's
/// reason, not an error).
fn last_error(num: u32, sheet: &SheetCheckpoint, now: f64) -> Option<(f64, RecentError)> {
    if sheet.status == SheetStatus::Skipped {
        return None;
    }
    let message = sheet.error_message.as_ref()?;
    let category = sheet.error_category.map(|c| c.as_str());
    let (epoch, timestamp) = match &sheet.completed_at {
        Some(ts) => (ts.to_epoch().unwrap_or(now), ts.as_str().to_string()),
        None => (now, Timestamp::from_epoch(now).as_str().to_string()),
    };
    Some((
        epoch,
        RecentError {
            sheet_num: num,
            timestamp,
            error_type: mozart_ipc::checkpoint::error_type_with(
                sheet.error_code.as_deref(),
                category,
            )
            .to_string(),
            error_code: normalize_error_code(sheet.error_code.as_deref(), category),
            error_message: message.clone(),
            // 0: the sheet never ran (blocked by a failed dependency).
            attempt_number: sheet.attempt_count,
            backend: None,
        },
    ))
}

/// Circuit breaker state: `state`, `consecutive_failures`, `reason`.
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitBreaker {
    /// `open` / `closed` / `half_open`.
    pub state: String,
    /// Consecutive failures.
    pub consecutive_failures: u32,
    /// `Persisted: <trigger>` or an inference note.
    pub reason: String,
    /// Where the state comes from.
    pub source: BreakerSource,
}

/// Where a job's circuit-breaker state comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerSource {
    /// The conductor's own breaker on one of the job's instruments (live).
    Conductor,
    /// The job's last persisted breaker transition.
    Persisted,
    /// Inferred from the job's trailing failed sheets.
    Inferred,
}

impl CircuitBreaker {
    /// Whether it came from the persisted history rather than inference.
    pub fn is_persisted(&self) -> bool {
        self.source == BreakerSource::Persisted
    }

    /// Whether it is the conductor's own breaker on one of the job's instruments.
    pub fn is_live(&self) -> bool {
        self.source == BreakerSource::Conductor
    }
}

/// The conductor's open (or half-open) breaker on an instrument the job plays, from
/// `instrument_holds` (ours, issue 22); else the last persisted breaker transition, else an
/// inference from trailing failed sheets, else none (cli.md §4.1).
pub fn circuit_breaker(job: &JobCheckpoint) -> Option<CircuitBreaker> {
    if let Some(hold) = job
        .instrument_holds
        .iter()
        .find(|h| h.kind == "circuit_breaker")
    {
        return Some(CircuitBreaker {
            state: hold.state.clone().unwrap_or_else(|| "open".into()),
            consecutive_failures: hold.consecutive_failures.unwrap_or(0),
            reason: format!("Conductor: {}", hold.describe()),
            source: BreakerSource::Conductor,
        });
    }
    if let Some(last) = job.circuit_breaker_history.last() {
        return Some(CircuitBreaker {
            state: last.state.clone(),
            consecutive_failures: last.consecutive_failures,
            reason: format!("Persisted: {}", last.trigger),
            source: BreakerSource::Persisted,
        });
    }
    let mut failures = 0u32;
    for sheet in job.sheets.values().rev() {
        match sheet.status {
            // Only a sheet whose instrument ran and failed counts: one blocked by a failed
            // dependency never reached the instrument, so a chain that failed at its first
            // sheet is one failure, not a breaker "OPEN" on every sheet after it. Nor does
            // one that ran on the built-in `shell`, which has no breaker: its failures are
            // the score's own commands failing (docs/instruments.md).
            SheetStatus::Failed
                if sheet.attempt_count > 0 && sheet.instrument_name.as_deref() != Some("shell") =>
            {
                failures += 1
            }
            SheetStatus::Completed => break,
            _ => {}
        }
    }
    if failures == 0 {
        return None;
    }
    let t = CIRCUIT_BREAKER_THRESHOLD;
    Some(if failures >= t {
        CircuitBreaker {
            state: "open".into(),
            consecutive_failures: failures,
            reason: format!("≥{t} consecutive failures detected (inferred)"),
            source: BreakerSource::Inferred,
        }
    } else {
        CircuitBreaker {
            state: "closed".into(),
            consecutive_failures: failures,
            reason: format!("Under threshold ({failures}/{t}) (inferred)"),
            source: BreakerSource::Inferred,
        }
    })
}

/// The latest of the job's `updated_at` and the sheets' `last_activity_at`.
pub fn last_activity(job: &JobCheckpoint) -> Option<&Timestamp> {
    std::iter::once(&job.updated_at)
        .chain(
            job.sheets
                .values()
                .filter_map(|s| s.last_activity_at.as_ref()),
        )
        .max_by(|a, b| {
            let (ea, eb) = (a.to_epoch().unwrap_or(0.0), b.to_epoch().unwrap_or(0.0));
            ea.partial_cmp(&eb).unwrap_or(std::cmp::Ordering::Equal)
        })
}

/// The score's `on_success` hooks from the config snapshot.
pub fn configured_hooks(job: &JobCheckpoint) -> &[Value] {
    job.config_snapshot
        .as_ref()
        .and_then(|c| c.get("on_success"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Sheet descriptions (`sheet.descriptions` in the snapshot), keyed by sheet number.
pub fn sheet_descriptions(job: &JobCheckpoint) -> std::collections::BTreeMap<u32, String> {
    job.config_snapshot
        .as_ref()
        .and_then(|c| c.get("sheet"))
        .and_then(|s| s.get("descriptions"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Seconds a sheet has been in progress.
pub fn sheet_elapsed(sheet: &SheetCheckpoint, now: f64) -> Option<f64> {
    if sheet.status != SheetStatus::InProgress {
        return None;
    }
    Some(now - sheet.started_at.as_ref()?.to_epoch()?)
}

/// One movement group for `movements` (cli.md §4.1).
pub fn movement_groups(job: &JobCheckpoint) -> Vec<Value> {
    let mut groups: std::collections::BTreeMap<u32, Vec<(u32, &SheetCheckpoint)>> =
        Default::default();
    for (&num, sheet) in &job.sheets {
        groups
            .entry(sheet.movement.unwrap_or(0))
            .or_default()
            .push((num, sheet));
    }
    let descriptions = sheet_descriptions(job);
    groups
        .into_iter()
        .map(|(movement, sheets)| {
            let labels: Vec<&str> = sheets.iter().map(|(_, s)| s.display_status()).collect();
            let voices: std::collections::BTreeSet<u32> =
                sheets.iter().filter_map(|(_, s)| s.voice).collect();
            let instruments: std::collections::BTreeSet<&str> = sheets
                .iter()
                .filter_map(|(_, s)| s.instrument_name.as_deref())
                .filter(|n| !n.is_empty())
                .collect();
            // A skipped sheet is done: a movement of completed and skipped sheets is
            // completed (issue 23).
            let status = if labels.iter().all(|l| matches!(*l, "completed" | "skipped"))
                && labels.contains(&"completed")
            {
                "completed"
            } else if labels.contains(&"failed") {
                "failed"
            } else if labels
                .iter()
                .any(|l| matches!(*l, "in_progress" | "running"))
            {
                "running"
            } else if labels.iter().all(|l| *l == "skipped") {
                "skipped"
            } else {
                "pending"
            };
            let single = (instruments.len() == 1)
                .then(|| instruments.iter().next().map(|s| s.to_string()))
                .flatten();
            let many: Vec<&str> = if instruments.len() > 1 {
                instruments.iter().copied().collect()
            } else {
                Vec::new()
            };
            // Ours: the movement's wall time, from its first sheet's start to its last
            // sheet's end (not its longest sheet: voices may run one after another), once
            // none of its sheets is still to run.
            let finished = !labels
                .iter()
                .any(|l| matches!(*l, "pending" | "in_progress" | "running"));
            let first_start = sheets
                .iter()
                .filter_map(|(_, s)| s.started_at.as_ref()?.to_epoch())
                .reduce(f64::min);
            let last_end = sheets
                .iter()
                .filter_map(|(_, s)| s.completed_at.as_ref()?.to_epoch())
                .reduce(f64::max);
            let duration = match (finished, first_start, last_end) {
                (true, Some(a), Some(b)) if b >= a => Some(((b - a) * 1000.0).round() / 1000.0),
                _ => None,
            };
            json!({
                "movement": movement,
                "status": status,
                "duration_seconds": duration,
                "sheet_count": sheets.len(),
                "voice_count": voices.len(),
                "completed_count": labels.iter().filter(|l| **l == "completed").count(),
                "instrument": single,
                "instruments": many,
                "description": sheets.first().and_then(|(n, _)| descriptions.get(n)),
                "sheets": sheets.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            })
        })
        .collect()
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn sheet_json(sheet: &SheetCheckpoint, now: f64) -> Value {
    let mut m = Map::new();
    m.insert("status".into(), json!(sheet.status.as_str()));
    m.insert("display_status".into(), json!(sheet.display_status()));
    m.insert("attempt_count".into(), json!(sheet.attempt_count));
    m.insert("validation_passed".into(), json!(sheet.validation_passed));
    m.insert("error_message".into(), json!(sheet.error_message));
    m.insert(
        "error_category".into(),
        json!(sheet.error_category.map(|c| c.as_str())),
    );
    m.insert("error_code".into(), json!(sheet.error_code));
    if let Some(d) = sheet.execution_duration_seconds {
        m.insert("execution_duration_seconds".into(), json!(d));
    }
    if let Some(c) = sheet.estimated_cost {
        m.insert("estimated_cost".into(), json!(c));
    }
    // Ours (issue 22): the sheet's own tokens, and how sure its cost is (0: unknown, the
    // instrument reported neither its cost nor its tokens).
    if let Some(t) = sheet.input_tokens {
        m.insert("input_tokens".into(), json!(t));
    }
    if let Some(t) = sheet.output_tokens {
        m.insert("output_tokens".into(), json!(t));
    }
    if sheet.estimated_cost.is_some() || sheet.cost_confidence < 1.0 {
        m.insert("cost_confidence".into(), json!(sheet.cost_confidence));
    }
    if let Some(e) = sheet_elapsed(sheet, now) {
        m.insert("elapsed_seconds".into(), json!(round1(e)));
    }
    if let Some(live) = &sheet.live {
        m.insert("live".into(), json!(live));
    }
    if let Some(wait) = &sheet.rate_limit {
        m.insert("rate_limit".into(), json!(wait));
    }
    if let Some(retry) = &sheet.retry_wait {
        m.insert("retry_wait".into(), json!(retry));
    }
    if let Some(id) = &sheet.slurm_withdrawn {
        m.insert("slurm_withdrawn".into(), json!(id));
    }
    if !sheet.progress_snapshots.is_empty() {
        m.insert(
            "progress_snapshots".into(),
            serde_json::to_value(&sheet.progress_snapshots).unwrap_or(Value::Null),
        );
    }
    if let Some(t) = &sheet.last_activity_at {
        m.insert("last_activity_at".into(), json!(t.as_str()));
    }
    if let Some(r) = &sheet.review {
        m.insert(
            "review".into(),
            serde_json::to_value(r).unwrap_or(Value::Null),
        );
    }
    Value::Object(m)
}

/// The job's status as shown: `queued` while it waits for a job slot (the checkpoint says
/// `pending`, which upstream's checkpoint model also uses for "not started"), `pausing`
/// while a paused job's sheets still run.
pub fn shown_status(job: &JobCheckpoint) -> &'static str {
    job.shown_status()
}

/// How many of the job's sheets were skipped (they count as done for progress).
pub fn skipped_sheets(job: &JobCheckpoint) -> u32 {
    if let Some(view) = &job.sheets_view {
        return view.count("skipped");
    }
    let n = job
        .sheets
        .values()
        .filter(|s| s.status == SheetStatus::Skipped)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// How many sheets ran to completion (`last_completed_sheet` is upstream's high-water
/// sheet number, which a skipped sheet also advances; it is the count only when the job
/// has no sheet rows yet).
pub fn completed_sheets(job: &JobCheckpoint) -> u32 {
    if let Some(view) = &job.sheets_view {
        return view.count("completed");
    }
    if job.sheets.is_empty() {
        return job.last_completed_sheet;
    }
    let n = job
        .sheets
        .values()
        .filter(|s| s.status == SheetStatus::Completed)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Sheets that are done: completed or skipped.
pub fn done_sheets(job: &JobCheckpoint) -> u32 {
    if job.sheets.is_empty() && job.sheets_view.is_none() {
        return job.last_completed_sheet;
    }
    completed_sheets(job).saturating_add(skipped_sheets(job))
}

/// The per-score `--json` document, keys in upstream's order.
pub fn status_json(job: &JobCheckpoint, now: f64) -> Value {
    let completed = completed_sheets(job);
    let total = job.total_sheets;
    let skipped = skipped_sheets(job);
    // A skipped sheet is done (issue 23): a completed job with a skipped sheet is 100 %.
    let percent = if total > 0 {
        (f64::from(done_sheets(job)) / f64::from(total) * 100.0).min(100.0)
    } else {
        0.0
    };
    let hooks = configured_hooks(job);
    let ts = |t: &Option<Timestamp>| t.as_ref().map(|t| t.as_str().to_string());
    let mut out = Map::new();
    out.insert("job_id".into(), json!(job.job_id));
    out.insert("job_name".into(), json!(job.job_name));
    out.insert("status".into(), json!(shown_status(job)));
    if let Some(reason) = &job.waiting_reason {
        // Ours: what the job waits for while it goes on by itself (a job slot, a pending
        // `modify --resume`).
        out.insert("waiting_reason".into(), json!(reason));
    }
    if let Some(n) = job.pausing_sheets() {
        // Ours: paused, but these sheets still run (and spend) until they finish.
        out.insert("running_sheets".into(), json!(n));
    }
    // Upstream's three progress keys; `skipped` (ours) only when a sheet was skipped.
    let mut progress = json!({"completed": completed, "total": total, "percent": round1(percent)});
    if skipped > 0 {
        progress["skipped"] = json!(skipped);
    }
    out.insert("progress".into(), progress);
    out.insert(
        "timing".into(),
        json!({
            "created_at": job.created_at.as_str(),
            "started_at": ts(&job.started_at),
            "updated_at": job.updated_at.as_str(),
            "completed_at": ts(&job.completed_at),
            "last_activity": last_activity(job).map(Timestamp::as_str),
        }),
    );
    out.insert(
        "execution".into(),
        json!({
            "current_sheet": job.current_sheet,
            "total_retry_count": job.total_retry_count,
            "rate_limit_waits": job.rate_limit_waits,
        }),
    );
    out.insert(
        "cost".into(),
        json!({
            "total_estimated_cost": job.total_estimated_cost,
            "total_input_tokens": job.total_input_tokens,
            "total_output_tokens": job.total_output_tokens,
            "cost_limit_reached": job.cost_limit_reached,
            "cost_confidence": job.cost_confidence(),
        }),
    );
    out.insert(
        "circuit_breaker".into(),
        circuit_breaker(job).map_or(Value::Null, |cb| {
            json!({"state": cb.state, "consecutive_failures": cb.consecutive_failures,
                   "reason": cb.reason})
        }),
    );
    // Ours (issue 22): what holds the job's instruments, why, and the time left.
    if !job.instrument_holds.is_empty() {
        out.insert("instrument_holds".into(), json!(job.instrument_holds));
    }
    out.insert("hook_results_count".into(), json!(job.hook_results.len()));
    out.insert("hooks_configured".into(), json!(hooks.len()));
    // Ours: the hooks still run (the job has not ended); they are not "interrupted" then.
    if job.hooks_running {
        out.insert("hooks_running".into(), json!(true));
    }
    out.insert(
        "hooks_interrupted".into(),
        json!(
            job.status == mozart_ipc::checkpoint::JobStatus::Completed
                && !hooks.is_empty()
                && job.hook_results.is_empty()
                && !job.hooks_running
        ),
    );
    let failures: Vec<Value> = job
        .hook_results
        .iter()
        .filter(|h| !h.success)
        .map(|h| {
            let extra = |key: &str| h.extra.get(key).cloned();
            json!({
                // Upstream reads a `hook_name` its records never have ("unknown" for
                // every hook); ours name the hook's type.
                "hook_name": extra("hook_name").or_else(|| extra("name"))
                    .or_else(|| (!h.hook_type.is_empty()).then(|| json!(h.hook_type)))
                    .unwrap_or_else(|| json!("unknown")),
                "event": extra("event").unwrap_or(Value::Null),
                "error": extra("error").or_else(|| h.error_message.clone().map(Value::from))
                    .unwrap_or_else(|| json!("")),
            })
        })
        .collect();
    out.insert("hook_failures".into(), Value::Array(failures));
    out.insert(
        "recent_errors".into(),
        Value::Array(
            recent_errors(job, 5, now)
                .into_iter()
                .map(|e| {
                    json!({
                        "sheet_num": e.sheet_num,
                        "timestamp": e.timestamp,
                        "error_type": e.error_type,
                        "error_code": e.error_code,
                        "error_message": e.error_message,
                    })
                })
                .collect(),
        ),
    );
    out.insert("error".into(), json!(job.error_message));
    let sheets: Map<String, Value> = job
        .sheets
        .iter()
        .map(|(n, s)| (n.to_string(), sheet_json(s, now)))
        .collect();
    out.insert("sheets".into(), Value::Object(sheets));
    match &job.sheets_view {
        // Ours (issue 24): `sheets` holds only some sheets; say which, how many there are
        // and how to page; movements are counted over every sheet.
        Some(view) if view.truncated || view.mode == SheetMode::Page => {
            out.insert(
                "sheets_view".into(),
                serde_json::to_value(view).unwrap_or(Value::Null),
            );
            if view.movements.iter().any(|m| m.movement > 0) {
                out.insert(
                    "movements".into(),
                    serde_json::to_value(&view.movements).unwrap_or(Value::Null),
                );
            }
        }
        _ if job.sheets.values().any(|s| s.movement.is_some()) => {
            out.insert("movements".into(), Value::Array(movement_groups(job)));
        }
        _ => {}
    }
    Value::Object(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    /// A three-sheet checkpoint: sheet 1 passed, 2 completed with failed validations,
    /// 3 failed with a legacy category-only error.
    pub(crate) fn sample() -> JobCheckpoint {
        let v = json!({
            "job_id": "demo", "job_name": "Demo score", "status": "failed",
            "created_at": "2026-01-02T03:04:05.000000Z",
            "updated_at": "2026-01-02T03:05:00.000000Z",
            "completed_at": "2026-01-02T03:05:00.000000Z",
            "total_sheets": 3, "last_completed_sheet": 2,
            "total_retry_count": 2, "error_message": "Sheet 3 failed",
            "config_snapshot": {"on_success": [{"type": "run_job", "job_path": "next.yaml"}],
                                "sheet": {"descriptions": {"1": "Draft"}}},
            "sheets": {
                "1": {"sheet_num": 1, "status": "completed", "attempt_count": 1,
                      "validation_passed": true, "execution_duration_seconds": 1.25,
                      "instrument_name": "command",
                      "started_at": "2026-01-02T03:04:06.000000Z",
                      "completed_at": "2026-01-02T03:04:07.000000Z",
                      "last_activity_at": "2026-01-02T03:06:00.000000Z"},
                "2": {"sheet_num": 2, "status": "completed", "attempt_count": 2,
                      "validation_passed": false, "error_code": "E201",
                      "error_message": "validation failed: out.txt missing",
                      "completed_at": "2026-01-02T03:04:30.000000Z",
                      "validation_details": [{"passed": false, "description": "out.txt exists",
                                              "error_message": "missing"}]},
                "3": {"sheet_num": 3, "status": "failed", "attempt_count": 3,
                      "error_category": "timeout",
                      "error_message": "x".repeat(70),
                      "completed_at": "2026-01-02T03:04:50.000000Z"}
            }
        });
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_sheet_waiting_out_a_rate_limit_is_not_listed_as_not_run() {
        // Its limited attempt spent no attempt (attempt_count 0) but is listed; a sheet
        // blocked by a failed dependency never ran and is listed from its message.
        let v = json!({
            "job_id": "rl", "job_name": "rl", "status": "running",
            "created_at": "2026-01-02T03:04:05.000000Z",
            "updated_at": "2026-01-02T03:05:00.000000Z",
            "total_sheets": 2,
            "sheets": {
                "1": {"sheet_num": 1, "status": "in_progress", "attempt_count": 0,
                      "error_code": "E101",
                      "error_message": "Rate limit detected: 429"},
                "2": {"sheet_num": 2, "status": "failed", "attempt_count": 0,
                      "error_message": "Blocked by failed dependency: sheet 1 failed",
                      "completed_at": "2026-01-02T03:04:50.000000Z"}
            },
            "recent_attempt_errors": {"total": 1, "errors": [
                {"sheet_num": 1, "attempt_number": 1,
                 "timestamp": "2026-01-02T03:04:40.000000Z",
                 "error_code": "E101", "error_message": "Rate limit detected: 429"}]}
        });
        let job: JobCheckpoint = serde_json::from_value(v).unwrap();
        let (errors, total) = recent_errors_of(&job, 10, 1_800_000_000.0);
        let listed: Vec<(u32, u32)> = errors
            .iter()
            .map(|e| (e.sheet_num, e.attempt_number))
            .collect();
        assert_eq!(listed, vec![(2, 0), (1, 1)], "{errors:?}");
        assert_eq!(total, 2);
    }

    #[test]
    fn error_codes_are_normalized_to_e_codes() {
        let cases = [
            (Some("E006"), None, "E006"),
            (Some("timeout"), None, "E001"),
            (Some("weird"), Some("rate_limit"), "E101"),
            (None, Some("auth"), "E502"),
            (None, None, "E999"),
            (Some("E"), None, "E999"),
        ];
        for (code, cat, want) in cases {
            assert_eq!(normalize_error_code(code, cat), want, "{code:?} {cat:?}");
        }
        assert_eq!(infer_error_type(Some("E101")), "rate_limit");
        assert_eq!(infer_error_type(Some("E006")), "transient");
        assert_eq!(infer_error_type(Some("timeout")), "transient");
        assert_eq!(infer_error_type(None), "permanent");
    }

    #[test]
    fn status_json_has_the_contract_keys_in_order() {
        let doc = status_json(&sample(), 1_800_000_000.0);
        let keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "job_id",
                "job_name",
                "status",
                "progress",
                "timing",
                "execution",
                "cost",
                "circuit_breaker",
                "hook_results_count",
                "hooks_configured",
                "hooks_interrupted",
                "hook_failures",
                "recent_errors",
                "error",
                "sheets"
            ]
        );
        assert_eq!(
            doc["progress"],
            json!({"completed": 2, "total": 3, "percent": 66.7})
        );
        assert_eq!(
            doc["timing"]["last_activity"],
            "2026-01-02T03:06:00.000000Z"
        );
        assert_eq!(doc["timing"]["started_at"], Value::Null);
        assert_eq!(doc["sheets"]["2"]["display_status"], "failed");
        assert_eq!(doc["sheets"]["1"]["execution_duration_seconds"], 1.25);
        assert!(doc["sheets"]["2"]
            .get("execution_duration_seconds")
            .is_none());
        assert_eq!(doc["sheets"]["3"]["error_category"], "timeout");
        assert_eq!(doc["hooks_configured"], 1);
        assert_eq!(doc["hooks_interrupted"], false);
        assert_eq!(doc["cost"]["cost_confidence"], 1.0);
        // One trailing failure: closed, inferred.
        assert_eq!(
            doc["circuit_breaker"],
            json!({"state": "closed", "consecutive_failures": 1,
                   "reason": "Under threshold (1/5) (inferred)"})
        );
        let errors = doc["recent_errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0]["sheet_num"], 3);
        assert_eq!(errors[0]["error_code"], "E001");
        assert_eq!(errors[0]["error_type"], "transient");
        assert_eq!(errors[1]["error_code"], "E201");
        assert_eq!(errors[1]["error_type"], "permanent");
    }

    #[test]
    fn movements_appear_only_with_movement_data() {
        let mut job = sample();
        assert!(status_json(&job, 0.0).get("movements").is_none());
        for (n, s) in job.sheets.iter_mut() {
            s.movement = Some(if *n == 1 { 1 } else { 2 });
            s.voice = (*n > 1).then_some(*n - 1);
        }
        let doc = status_json(&job, 0.0);
        assert_eq!(
            doc["movements"][0],
            json!({"movement": 1, "status": "completed", "duration_seconds": 1.0,
                   "sheet_count": 1, "voice_count": 0,
                   "completed_count": 1, "instrument": "command", "instruments": [],
                   "description": "Draft", "sheets": [1]})
        );
        assert_eq!(doc["movements"][1]["status"], "failed");
        assert_eq!(doc["movements"][1]["voice_count"], 2);
    }

    #[test]
    fn breaker_prefers_history_and_opens_at_five_trailing_failures() {
        let mut job = sample();
        for n in 4..=8 {
            let mut s = SheetCheckpoint::new(n);
            s.status = SheetStatus::Failed;
            s.attempt_count = 1;
            s.error_message = Some("boom".into());
            job.sheets.insert(n, s);
        }
        let cb = circuit_breaker(&job).unwrap();
        assert_eq!((cb.state.as_str(), cb.consecutive_failures), ("open", 6));
        // Sheets blocked by a failed dependency (no attempt) are no instrument failures.
        for n in 4..=8 {
            if let Some(s) = job.sheets.get_mut(&n) {
                s.attempt_count = 0;
            }
        }
        let cb = circuit_breaker(&job).unwrap();
        assert_eq!((cb.state.as_str(), cb.consecutive_failures), ("closed", 1));
        assert!(!cb.is_persisted());
        job.circuit_breaker_history
            .push(mozart_ipc::checkpoint::CircuitBreakerChange {
                state: "half_open".into(),
                timestamp: "2026-01-02T03:05:00Z".into(),
                trigger: "cooldown elapsed".into(),
                consecutive_failures: 0,
            });
        let cb = circuit_breaker(&job).unwrap();
        assert_eq!(cb.reason, "Persisted: cooldown elapsed");
        assert!(cb.is_persisted());
    }

    #[test]
    fn metadata_dicts_are_not_mistaken_for_checkpoints() {
        let meta = json!({"job_id": "q", "status": "queued", "config_path": "/x/q.yaml",
                          "workspace": "/w", "submitted_at": 1.0, "started_at": null});
        assert!(parse_checkpoint(&meta).is_none());
        let zero = json!({"job_id": "q", "job_name": "q", "total_sheets": 0, "sheets": {}});
        assert!(parse_checkpoint(&zero).is_none());
        let full = serde_json::to_value(sample()).unwrap();
        assert_eq!(parse_checkpoint(&full).unwrap().job_id, "demo");
    }
}
