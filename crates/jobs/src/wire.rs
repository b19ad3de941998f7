//! The storage model (`mozart-state`) as the protocol (`mozart-ipc`) shows it: every
//! document the job methods return is built here. The checkpoint is one model in both
//! (`mozart_ipc::checkpoint`); what a client sees differently is decided here: the score
//! redacted (and a view's without its stage map), a view's sheets, `workspace`.
//!
//! The JSON state file is the same document as `job.status`'s checkpoint, so
//! [`load_state_file`] serves the CLI's conductor-less `--workspace` reads too.

use std::path::Path;

use mozart_ipc::checkpoint::{CheckpointErrorRecord, ErrorType, HookResult, JobCheckpoint};
use mozart_ipc::sheet_view::{SheetFacts, SheetQuery, ViewBuilder};
use mozart_ipc::status::{HistoryRecord, JobSummary, LearnedPattern, RegistryJob};
use mozart_ipc::types::MonitorEvent;
use mozart_state::{
    AttemptRecord, CheckpointState, ConfigSnapshot, HookResultRecord, JobRecord,
    SheetAttemptErrors, SheetState, StateError, Timestamp,
};

/// The checkpoint as `job.status` returns it: the job's `workspace` added, and the
/// registry's error message when the checkpoint has none.
pub fn job_status_checkpoint(cp: &CheckpointState, record: &JobRecord) -> JobCheckpoint {
    let mut doc = checkpoint(cp);
    if doc.error_message.is_none() {
        doc.error_message.clone_from(&record.error_message);
    }
    doc.workspace = Some(record.workspace.clone());
    doc
}

/// `job.status` with a sheet query (issue 24): the checkpoint holding only the sheets the
/// query chooses, with the [`mozart_ipc::sheet_view::SheetsView`] of every sheet. One pass over the sheets; only
/// the chosen ones are converted.
///
/// `snapshot`: the score as a view shows it ([`view_snapshot`]), when the caller keeps it;
/// else it is made from `cp`'s snapshot now.
pub fn job_status_view(
    cp: &CheckpointState,
    record: &JobRecord,
    query: SheetQuery,
    snapshot: Option<&serde_json::Value>,
) -> JobCheckpoint {
    let mut builder = ViewBuilder::new(query, cp.total_sheets);
    for (_, s) in cp.sheets.scan() {
        builder.add(&sheet_facts(&s));
    }
    let chosen: Vec<u32> = builder.chosen().to_vec();
    let snapshot = match snapshot {
        Some(v) => Some(v.clone()),
        None => cp.config_snapshot.as_ref().map(view_snapshot),
    };
    let mut doc = checkpoint_of(cp, Some((&chosen, snapshot)));
    if doc.error_message.is_none() {
        doc.error_message.clone_from(&record.error_message);
    }
    doc.workspace = Some(record.workspace.clone());
    doc.sheets_view = Some(builder.finish());
    doc
}

/// What a sheet view needs of a stored sheet.
pub fn sheet_facts(s: &SheetState) -> SheetFacts<'_> {
    SheetFacts {
        num: s.sheet_num,
        status: s.status,
        failed_validation: s.validation_passed == Some(false),
        movement: s.movement,
        voice: s.voice,
        duration: s.execution_duration_seconds,
        instrument: s.instrument_name.as_deref(),
    }
}

/// A checkpoint as the state file holds it (no `workspace`).
pub fn checkpoint(cp: &CheckpointState) -> JobCheckpoint {
    checkpoint_of(cp, None)
}

/// The score as a sheet view shows it: redacted as every answer, and without
/// `sheet.fan_out_stage_map` (issue 24). That map has an entry per voice (6 MB of JSON and a
/// 60 MB value tree for 100,000 voices), which made every view of a large fanned-out job
/// cost time and memory in proportion to its planned sheets; each sheet's `movement` and
/// `voice` say the same. Whole-document answers keep it (upstream's shape).
///
/// The map is skipped as text, never built as a value tree: parsing the whole snapshot once
/// left that tree's tens of megabytes in the conductor's heap.
pub fn view_snapshot(snapshot: &ConfigSnapshot) -> serde_json::Value {
    let Ok(RawMembers(top)) = serde_json::from_str::<RawMembers>(snapshot.text_without_stage_map())
    else {
        // Not an object (no score writes one): shown as it is.
        return redact_snapshot(snapshot.to_value());
    };
    let value = |raw: &serde_json::value::RawValue| {
        serde_json::from_str(raw.get()).unwrap_or(serde_json::Value::Null)
    };
    let mut out = serde_json::Map::new();
    for (key, raw) in top {
        let shown = match serde_json::from_str::<RawMembers>(raw.get()) {
            Ok(RawMembers(members)) if key == "sheet" => serde_json::Value::Object(
                members
                    .into_iter()
                    .filter(|(k, _)| k != "fan_out_stage_map")
                    .map(|(k, v)| (k, value(&v)))
                    .collect(),
            ),
            _ => value(&raw),
        };
        out.insert(key, shown);
    }
    redact_snapshot(serde_json::Value::Object(out))
}

/// A JSON object's members in their order, each value left as text.
struct RawMembers(Vec<(String, Box<serde_json::value::RawValue>)>);

impl<'de> serde::Deserialize<'de> for RawMembers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = RawMembers;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawMembers, A::Error> {
                let mut out = Vec::new();
                while let Some(member) = map.next_entry()? {
                    out.push(member);
                }
                Ok(RawMembers(out))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// A checkpoint with every sheet, or (a view) only the sheets numbered in `only` (sorted)
/// with the view's snapshot. The storage model is the wire model: only the score's form
/// differs (text kept, a redacted value shown), and a view's sheets.
fn checkpoint_of(
    cp: &CheckpointState,
    only: Option<(&[u32], Option<serde_json::Value>)>,
) -> JobCheckpoint {
    match only {
        None => cp.with_parts(
            cp.sheets.clone(),
            cp.config_snapshot
                .as_ref()
                .map(|s| redact_snapshot(s.to_value())),
        ),
        Some((nums, view)) => cp.with_parts(
            nums.iter()
                .filter_map(|n| Some((*n, cp.sheets.peek(n)?.into_owned())))
                .collect(),
            view,
        ),
    }
}

/// A registry hook row as `job.status` shows it (conductor.md §19.5): command hooks always
/// carry `output` (null when empty); a `run_job` hook only on success.
pub fn hook_result(h: &HookResultRecord) -> HookResult {
    HookResult {
        hook_type: h.hook_type.clone(),
        description: h.description.clone(),
        success: h.success,
        error_message: h.error_message.clone(),
        exit_code: h.exit_code,
        output: (h.output.is_some() || h.exit_code.is_some()).then(|| h.output.clone()),
        chained_job_id: h.chained_job_id.clone(),
        extra: serde_json::Map::new(),
    }
}

/// A job the conductor holds in memory (`JobMeta.to_dict`, conductor.md §6.2).
pub fn job_summary(r: &JobRecord) -> JobSummary {
    JobSummary {
        job_id: r.job_id.clone(),
        status: r.status.as_str().to_string(),
        config_path: r.config_path.clone(),
        workspace: r.workspace.clone(),
        submitted_at: r.submitted_at,
        started_at: r.started_at,
        error_message: r.error_message.clone(),
        chain_depth: r.chain_depth,
        completed_at: r.completed_at,
        total_sheets: r.total_sheets,
        pausing: None,
    }
}

/// A registry row (upstream `JobRecord.to_dict()`, conductor.md §10.2); empty text fields
/// are left out.
pub fn registry_job(r: &JobRecord) -> RegistryJob {
    let text = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    RegistryJob {
        job_id: r.job_id.clone(),
        config_path: r.config_path.clone(),
        workspace: r.workspace.clone(),
        status: r.status.as_str().to_string(),
        pid: r.pid,
        submitted_at: r.submitted_at,
        started_at: r.started_at,
        completed_at: r.completed_at,
        current_sheet: r.current_sheet,
        total_sheets: r.total_sheets,
        error_message: text(&r.error_message),
        log_path: text(&r.log_path),
        snapshot_path: text(&r.snapshot_path),
        chain_depth: r.chain_depth,
    }
}

/// One attempt row of `job.history` (conductor.md §8.11).
pub fn history_record(a: &AttemptRecord) -> HistoryRecord {
    HistoryRecord {
        id: a.id,
        job_id: a.job_id.clone(),
        sheet_num: a.sheet_num,
        attempt_num: a.attempt_num,
        prompt: a.prompt.clone(),
        output: a.output.clone(),
        exit_code: a.exit_code,
        duration_seconds: a.duration_seconds,
        executed_at: Timestamp::from_epoch(a.executed_at).as_str().to_string(),
        outcome: Some(a.outcome.clone()).filter(|o| !o.is_empty()),
    }
}

/// Most errors listed per sheet (upstream's `MAX_ERROR_HISTORY`).
pub const ERRORS_PER_SHEET: usize = mozart_ipc::checkpoint::MAX_ERROR_HISTORY;

/// Context key, on a sheet's oldest listed error, of how many older failed attempts were
/// left out (over [`ERRORS_PER_SHEET`]).
pub const EARLIER_ERRORS_OMITTED: &str = "earlier_errors_omitted";

/// Fills each sheet's `error_history` from the registry's failed attempts — every failed
/// attempt's error, newest [`ERRORS_PER_SHEET`] per sheet — for `job.errors` and
/// `job.diagnose` (execution.md §8.2 leaves the history empty upstream; the checkpoint keeps
/// only each sheet's last error, and is not grown here: the list is built per request).
/// Sheets without failed attempts keep an empty history (the client falls back to their
/// last error message).
pub fn fill_error_history(doc: &mut JobCheckpoint, failed: Vec<SheetAttemptErrors>) {
    for sheet_errors in failed {
        let Some(sheet) = doc.sheets.get_mut(&sheet_errors.sheet_num) else {
            continue;
        };
        let last = sheet_errors.attempts.len().saturating_sub(1);
        let records = sheet_errors.attempts.into_iter().enumerate().map(|(i, a)| {
            // The checkpoint holds the sheet's last error with its stdout and stderr apart;
            // older attempts have the registry's output tail (stdout then stderr).
            let current =
                i == last && a.attempt_num == sheet.attempt_count && sheet.error_message.is_some();
            let (stdout_tail, stderr_tail) = if current {
                (sheet.stdout_tail.clone(), sheet.stderr_tail.clone())
            } else {
                (a.output.clone().filter(|o| !o.is_empty()), None)
            };
            let omitted = (i == 0 && sheet_errors.omitted > 0).then_some(sheet_errors.omitted);
            // Only the attempt the sheet gave up on was final: an earlier one was retried
            // (and the sheet later passed, or failed again), so it is not called permanent.
            let final_failure = i == last
                && a.attempt_num >= sheet.attempt_count
                && sheet.status == mozart_ipc::checkpoint::SheetStatus::Failed;
            error_record(a, stdout_tail, stderr_tail, omitted, final_failure)
        });
        sheet.error_history = records.collect();
    }
}

/// Fills each sheet's `execution_mode` and `outcome_category` (upstream's words, left
/// unset by the baton) from its last recorded attempt and how many it has, for
/// `job.diagnose`'s timeline. A sheet that is not finished has no outcome yet.
pub fn fill_timeline_facts(doc: &mut JobCheckpoint, last: Vec<(AttemptRecord, u64)>) {
    for (attempt, recorded) in last {
        let Some(sheet) = doc.sheets.get_mut(&attempt.sheet_num) else {
            continue;
        };
        let (mode, outcome) = timeline_facts(sheet.status, &attempt, recorded);
        if sheet.execution_mode.is_none() {
            sheet.execution_mode = mode;
        }
        if sheet.outcome_category.is_none() {
            sheet.outcome_category = outcome;
        }
    }
}

/// A sheet's execution mode and outcome, from its last attempt and its recorded attempts.
fn timeline_facts(
    status: mozart_ipc::checkpoint::SheetStatus,
    last: &AttemptRecord,
    recorded: u64,
) -> (
    Option<mozart_ipc::checkpoint::ExecutionMode>,
    Option<mozart_ipc::checkpoint::OutcomeCategory>,
) {
    use mozart_ipc::checkpoint::{ExecutionMode as M, OutcomeCategory as O, SheetStatus as S};
    let mode = match last.mode.as_str() {
        "completion" => Some(M::Completion),
        "normal" | "healing" if last.attempt_num > 1 => Some(M::Retry),
        "normal" => Some(M::Normal),
        _ => None,
    };
    let outcome = match status {
        // Its last attempt failed: `mozart recover` completed it, no run did.
        S::Completed if last.outcome == "failed" => Some(O::Recovered),
        S::Completed if last.mode == "completion" => Some(O::SuccessCompletion),
        S::Completed if recorded <= 1 && last.attempt_num <= 1 => Some(O::SuccessFirstTry),
        S::Completed => Some(O::SuccessRetry),
        // The baton fails a sheet at once on these (no retry could help).
        S::Failed
            if matches!(
                last.error_category.as_deref(),
                Some("auth" | "fatal" | "configuration")
            ) =>
        {
            Some(O::FailedFatal)
        }
        S::Failed if last.outcome == "failed" => Some(O::FailedExhausted),
        _ => None,
    };
    (mode, outcome)
}

/// Failed attempts `job.status` lists at most (`status` shows 3, its JSON 5).
pub const RECENT_ATTEMPT_ERRORS: usize = 10;

/// A job's newest failed attempts, as `job.status` adds them to its document.
pub fn recent_attempt_errors(
    attempts: Vec<AttemptRecord>,
    total: u64,
) -> mozart_ipc::checkpoint::RecentAttemptErrors {
    let errors = attempts
        .into_iter()
        .map(|a| mozart_ipc::checkpoint::AttemptError {
            sheet_num: a.sheet_num,
            attempt_number: a.attempt_num,
            // When the attempt ended.
            timestamp: Timestamp::from_epoch(a.executed_at + a.duration_seconds.unwrap_or(0.0)),
            error_code: a.error_code,
            error_category: a.error_category,
            error_message: a.error_message,
            instrument: a.instrument,
        })
        .collect();
    mozart_ipc::checkpoint::RecentAttemptErrors { errors, total }
}

/// One failed attempt as a checkpoint error record.
fn error_record(
    a: AttemptRecord,
    stdout_tail: Option<String>,
    stderr_tail: Option<String>,
    omitted: Option<u64>,
    final_failure: bool,
) -> CheckpointErrorRecord {
    let code = a
        .error_code
        .clone()
        .or_else(|| a.error_category.clone())
        .unwrap_or_default();
    // The attempt a failed sheet ended on is `permanent`, whatever its code (a timeout or
    // an exit 1 that ran out of retries is not passing); one that was retried is
    // `transient` (upstream's three types have no other word), a rate limit waited out
    // `rate_limit`.
    let error_type = match mozart_ipc::checkpoint::error_type_with(
        a.error_code.as_deref(),
        a.error_category.as_deref(),
    ) {
        _ if final_failure => ErrorType::Permanent,
        "rate_limit" => ErrorType::RateLimit,
        _ => ErrorType::Transient,
    };
    let mut context = serde_json::Map::new();
    context.insert("exit_code".into(), serde_json::json!(a.exit_code));
    if let Some(category) = &a.error_category {
        context.insert("category".into(), serde_json::json!(category));
    }
    if let Some(instrument) = &a.instrument {
        context.insert("instrument".into(), serde_json::json!(instrument));
    }
    if a.mode != "normal" && !a.mode.is_empty() {
        context.insert("mode".into(), serde_json::json!(a.mode));
    }
    if let Some(n) = omitted {
        context.insert(EARLIER_ERRORS_OMITTED.into(), serde_json::json!(n));
    }
    CheckpointErrorRecord {
        // When the attempt ended.
        timestamp: Timestamp::from_epoch(a.executed_at + a.duration_seconds.unwrap_or(0.0)),
        error_type,
        error_code: code,
        error_message: a.error_message.unwrap_or_default(),
        attempt_number: a.attempt_num,
        context,
        stdout_tail,
        stderr_tail,
        stack_trace: None,
    }
}

/// An observer event as `daemon.observer_events` and the monitor stream show it.
pub fn observer_event(e: &mozart_baton::ObserverEvent) -> MonitorEvent {
    MonitorEvent {
        job_id: e.job_id.clone(),
        sheet_num: e.sheet_num,
        event: e.event.clone(),
        data: Some(e.data.clone()),
        timestamp: e.at.as_secs_f64(),
    }
}

/// A learned pattern as `daemon.learning.patterns` lists it (conductor.md §8.25).
pub fn learned_pattern(p: &mozart_learning::PatternRecord) -> LearnedPattern {
    LearnedPattern {
        id: p.id.clone(),
        pattern_type: p.pattern_type.clone(),
        pattern_name: p.pattern_name.clone(),
        description: p.description.clone(),
        effectiveness_score: p.effectiveness_score,
        priority_score: p.priority_score,
        occurrence_count: p.occurrence_count,
        last_seen: p.last_seen.clone(),
        quarantine_status: p.quarantine_status.as_str().to_string(),
        trust_score: p.trust_score,
    }
}

/// Read a JSON state file as the checkpoint document (`Ok(None)` when absent), through the
/// storage model's loader so its load-time fix-ups and checks apply (execution.md §8.2).
pub fn load_state_file(
    workspace: &Path,
    job_id: &str,
) -> Result<Option<JobCheckpoint>, StateError> {
    let path = mozart_state::json_state::state_file_path(workspace, job_id);
    Ok(mozart_state::json_state::load(&path)?.map(|cp| checkpoint(&cp)))
}

/// The score snapshot as clients see it: notification URLs (they carry secrets) redacted
/// to `scheme://host/***`. The conductor keeps and uses the full snapshot.
fn redact_snapshot(mut out: serde_json::Value) -> serde_json::Value {
    if let Some(list) = out
        .get_mut("notifications")
        .and_then(serde_json::Value::as_array_mut)
    {
        for item in list {
            let Some(config) = item
                .get_mut("config")
                .and_then(serde_json::Value::as_object_mut)
            else {
                continue;
            };
            for key in ["url", "webhook_url"] {
                if let Some(serde_json::Value::String(url)) = config.get_mut(key) {
                    *url = mozart_notify::redact_url(url);
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_failed_attempt_fills_the_error_history_the_last_with_the_sheets_tails() {
        use mozart_ipc::checkpoint::SheetCheckpoint;
        let mut doc: JobCheckpoint = JobCheckpoint::new("j", "j", 2);
        let mut failed = SheetCheckpoint::new(1);
        failed.attempt_count = 3;
        failed.status = mozart_ipc::checkpoint::SheetStatus::Failed;
        failed.error_message = Some("third".into());
        failed.stdout_tail = Some("out".into());
        failed.stderr_tail = Some("err".into());
        doc.sheets.insert(1, failed);
        doc.sheets.insert(2, SheetCheckpoint::new(2));
        let attempt = |n: u32, code: &str| AttemptRecord {
            sheet_num: 1,
            attempt_num: n,
            mode: "normal".into(),
            error_code: Some(code.into()),
            error_category: Some("validation".into()),
            error_message: Some(["first", "second", "third"][n as usize - 1].into()),
            exit_code: Some(1),
            instrument: Some("shell".into()),
            output: Some(format!("output {n}")),
            executed_at: 100.0 + f64::from(n),
            duration_seconds: Some(0.5),
            ..AttemptRecord::default()
        };
        let rows = vec![SheetAttemptErrors {
            sheet_num: 1,
            attempts: vec![attempt(2, "E900"), attempt(3, "E001")],
            omitted: 1,
        }];
        fill_error_history(&mut doc, rows);
        let history = &doc.sheets.get(&1).unwrap().error_history;
        assert_eq!(history.len(), 2);
        assert_eq!(history[0].attempt_number, 2);
        assert_eq!(history[0].error_type, ErrorType::Transient);
        assert_eq!(history[0].error_message, "second");
        assert_eq!(history[0].stdout_tail.as_deref(), Some("output 2"));
        assert_eq!(history[0].context[EARLIER_ERRORS_OMITTED], 1);
        assert_eq!(history[0].context["exit_code"], 1);
        assert_eq!(history[0].timestamp, Timestamp::from_epoch(102.5));
        assert_eq!(history[1].error_type, ErrorType::Permanent);
        assert_eq!(history[1].stdout_tail.as_deref(), Some("out"));
        assert_eq!(history[1].stderr_tail.as_deref(), Some("err"));
        assert!(!history[1].context.contains_key(EARLIER_ERRORS_OMITTED));
        assert!(doc.sheets.get(&2).unwrap().error_history.is_empty());
    }

    #[test]
    fn a_view_shows_the_score_without_its_stage_map_in_order_and_redacted() {
        let whole = serde_json::json!({
            "name": "wide",
            "sheet": {"size": 1, "fan_out_stage_map": {"1": {"stage": 1, "instance": 1}},
                      "total_items": 3, "descriptions": {"1": "first"}},
            "notifications": [{"type": "webhook",
                               "config": {"url": "https://hooks.example/T0/secret-token"}}],
            "cost_limits": {"enabled": false}
        });
        let snapshot = ConfigSnapshot::from(&whole);
        let view = view_snapshot(&snapshot);
        let mut want = redact_snapshot(whole.clone());
        want["sheet"]
            .as_object_mut()
            .unwrap()
            .shift_remove("fan_out_stage_map");
        assert_eq!(view, want);
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            serde_json::to_string(&want).unwrap(),
            "same order"
        );
        assert_ne!(view["notifications"], whole["notifications"], "redacted");
        // A snapshot that is not an object is shown as it is.
        let odd = ConfigSnapshot::from(&serde_json::json!([1, 2]));
        assert_eq!(view_snapshot(&odd), serde_json::json!([1, 2]));
    }

    #[test]
    fn status_adds_the_workspace_and_the_registry_error() {
        let cp = CheckpointState::new("j", "J", 2);
        let mut record = JobRecord::new("j", "/s/j.yaml", "/w");
        record.error_message = Some("registry says".into());
        let doc = job_status_checkpoint(&cp, &record);
        let text = serde_json::to_string(&doc).unwrap();
        let mut want = serde_json::to_value(&cp).unwrap();
        want["error_message"] = "registry says".into();
        want["workspace"] = "/w".into();
        assert_eq!(text, want.to_string());
    }

    #[test]
    fn rows_match_the_registry_shapes() {
        let mut r = JobRecord::new("j", "/s/j.yaml", "/w");
        r.log_path = Some(String::new());
        r.total_sheets = Some(3);
        assert_eq!(
            serde_json::to_value(registry_job(&r)).unwrap(),
            serde_json::json!({"job_id": "j", "config_path": "/s/j.yaml", "workspace": "/w",
                "status": "queued", "pid": null, "submitted_at": r.submitted_at,
                "started_at": null, "completed_at": null, "current_sheet": null,
                "total_sheets": 3})
        );
        r.log_path = Some("/logs/j.log".into());
        let row = serde_json::to_value(registry_job(&r)).unwrap();
        assert_eq!(row["log_path"], "/logs/j.log");
        assert!(
            row.get("snapshot_path").is_none(),
            "optional keys only when set"
        );

        // conductor.md §19.5 verified example.
        let chained = HookResultRecord {
            hook_type: "run_job".into(),
            description: Some("chain it".into()),
            success: true,
            output: Some("Chained job submitted (job_id=chain)".into()),
            chained_job_id: Some("chain".into()),
            ..Default::default()
        };
        let command = HookResultRecord {
            hook_index: 1,
            hook_type: "run_command".into(),
            exit_code: Some(0),
            success: true,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value([hook_result(&chained), hook_result(&command)]).unwrap(),
            serde_json::json!([
                {"hook_type": "run_job", "description": "chain it", "success": true,
                 "output": "Chained job submitted (job_id=chain)", "chained_job_id": "chain"},
                {"hook_type": "run_command", "description": null, "success": true,
                 "exit_code": 0, "output": null}
            ])
        );
        let attempt = AttemptRecord {
            prompt: Some("do it".into()),
            executed_at: 1_709_210_096.0,
            ..Default::default()
        };
        let hist = serde_json::to_value(history_record(&attempt)).unwrap();
        assert_eq!(hist["executed_at"], "2024-02-29T12:34:56.000000Z");
        assert_eq!(hist["prompt"], "do it");
    }

    #[test]
    fn the_timeline_takes_each_sheets_mode_and_outcome_from_its_last_attempt() {
        use mozart_ipc::checkpoint::{ExecutionMode as M, OutcomeCategory as O, SheetStatus as S};
        let last = |n: u32, mode: &str, outcome: &str, category: Option<&str>| AttemptRecord {
            attempt_num: n,
            mode: mode.into(),
            outcome: outcome.into(),
            error_category: category.map(str::to_string),
            ..AttemptRecord::default()
        };
        let facts = |status, a: &AttemptRecord, recorded| timeline_facts(status, a, recorded);
        let first = last(1, "normal", "completed", None);
        assert_eq!(
            facts(S::Completed, &first, 1),
            (Some(M::Normal), Some(O::SuccessFirstTry))
        );
        let third = last(3, "normal", "completed", None);
        assert_eq!(
            facts(S::Completed, &third, 3),
            (Some(M::Retry), Some(O::SuccessRetry))
        );
        let completion = last(2, "completion", "completed", None);
        assert_eq!(
            facts(S::Completed, &completion, 2),
            (Some(M::Completion), Some(O::SuccessCompletion))
        );
        let exhausted = last(3, "normal", "failed", Some("validation"));
        assert_eq!(
            facts(S::Failed, &exhausted, 3),
            (Some(M::Retry), Some(O::FailedExhausted))
        );
        let fatal = last(1, "normal", "failed", Some("auth"));
        assert_eq!(
            facts(S::Failed, &fatal, 1),
            (Some(M::Normal), Some(O::FailedFatal))
        );
        // Not finished: no outcome yet.
        let waiting = last(1, "normal", "retry_scheduled", Some("transient"));
        assert_eq!(facts(S::Pending, &waiting, 1), (Some(M::Normal), None));
    }
}
