//! The checkpoint model's behaviour (execution.md §8.2–8.4): upstream's load-time fix-ups
//! and constraints, the sheet and job transitions, output capture, and zombie recovery.
//! One implementation for every form of [`JobCheckpoint`] (the conductor's and a client's).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{
    AppliedPattern, CheckpointErrorRecord, CircuitBreakerChange, ErrorCategory, ExitReason,
    HookResult, JobCheckpoint, JobStatus, SheetCheckpoint, SheetMap, SheetStatus, ValidationDetail,
};
use crate::time::Timestamp;

/// Default size of the captured stdout/stderr tails (execution.md §8.2: 51200 bytes).
pub const MAX_OUTPUT_CAPTURE_BYTES: usize = 51_200;
/// Cap on `SheetCheckpoint::error_history` (execution.md §8.2).
pub const MAX_ERROR_HISTORY: usize = 50;
/// Message for a failed sheet loaded without one (execution.md §8.2 load-time invariants).
pub const UNKNOWN_FAILURE_MESSAGE: &str = "Unknown failure (no error message recorded)";
/// Zombie trigger text used when a stale running state is found on load (conductor.md §12).
pub const ZOMBIE_ON_LOAD_TRIGGER: &str = "Detected on state load - process no longer running";

impl SheetCheckpoint {
    /// Applies upstream's load-time fix-ups: legacy pattern lists, and the status invariants
    /// of execution.md §8.2 (completed ⇒ completed_at, in_progress ⇒ started_at,
    /// failed ⇒ error_message).
    pub fn normalize(&mut self) {
        let ids = self
            .applied_pattern_ids
            .take()
            .map(|b| *b)
            .unwrap_or_default();
        let descs = self
            .applied_pattern_descriptions
            .take()
            .map(|b| *b)
            .unwrap_or_default();
        if self.applied_patterns.is_empty() && (!ids.is_empty() || !descs.is_empty()) {
            let n = ids.len().max(descs.len());
            self.applied_patterns = (0..n)
                .map(|i| AppliedPattern {
                    id: ids.get(i).cloned().unwrap_or_default(),
                    description: descs.get(i).cloned().unwrap_or_default(),
                })
                .collect();
        }
        match self.status {
            SheetStatus::Completed if self.completed_at.is_none() => {
                self.completed_at = Some(Timestamp::now());
            }
            SheetStatus::InProgress if self.started_at.is_none() => {
                self.started_at = Some(Timestamp::now());
            }
            SheetStatus::Failed if self.error_message.is_none() => {
                self.error_message = Some(UNKNOWN_FAILURE_MESSAGE.to_owned());
            }
            _ => {}
        }
    }

    /// Keeps the last `max_bytes` bytes of each stream (decoded lossily), passes both through
    /// `redact` (the backends' credential scanner, execution.md §9.13), empty → `None`.
    pub fn capture_output(
        &mut self,
        stdout: &str,
        stderr: &str,
        max_bytes: usize,
        redact: impl Fn(&str) -> String,
    ) {
        let tail = |s: &str| -> (Option<String>, bool) {
            let bytes = s.as_bytes();
            if bytes.len() > max_bytes {
                let cut = &bytes[bytes.len() - max_bytes..];
                (Some(String::from_utf8_lossy(cut).into_owned()), true)
            } else if s.is_empty() {
                (None, false)
            } else {
                (Some(s.to_owned()), false)
            }
        };
        let (out, out_cut) = tail(stdout);
        let (err, err_cut) = tail(stderr);
        self.stdout_tail = out.map(|s| redact(&s));
        self.stderr_tail = err.map(|s| redact(&s));
        self.output_truncated = out_cut || err_cut;
    }

    /// Appends an error record, keeping only the newest `MAX_ERROR_HISTORY`.
    pub fn add_error_to_history(&mut self, record: CheckpointErrorRecord) {
        self.error_history.push(record);
        if self.error_history.len() > MAX_ERROR_HISTORY {
            let excess = self.error_history.len() - MAX_ERROR_HISTORY;
            self.error_history.drain(..excess);
        }
    }
}

/// Details of a sheet failure for [`JobCheckpoint::mark_sheet_failed`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SheetFailure {
    /// Human-readable message.
    pub message: String,
    /// Category from the classifier.
    pub category: Option<ErrorCategory>,
    /// Process exit code (None when killed).
    pub exit_code: Option<i32>,
    /// Killing signal.
    pub exit_signal: Option<i32>,
    /// Why execution ended.
    pub exit_reason: Option<ExitReason>,
    /// Duration of the execution.
    pub duration_seconds: Option<f64>,
    /// E-code.
    pub error_code: Option<String>,
}

/// How the message of a job recovered from a stale running state begins (upstream's words).
pub const RECOVERY_NOTE_PREFIX: &str = "Recovered from stale running state";

impl<S> JobCheckpoint<S> {
    /// Whether the job's `error_message` is the note left by recovering a stale running
    /// state (the job was paused, nothing failed) rather than an error: the wording is
    /// upstream's wire text, so the one who writes it is the one who recognises it.
    pub fn message_is_recovery_note(&self) -> bool {
        self.error_message
            .as_deref()
            .is_some_and(|m| m.starts_with(RECOVERY_NOTE_PREFIX))
    }

    /// A fresh pending checkpoint.
    pub fn new(job_id: impl Into<String>, job_name: impl Into<String>, total_sheets: u32) -> Self {
        let now = Timestamp::now();
        JobCheckpoint {
            job_id: job_id.into(),
            job_name: job_name.into(),
            config_hash: None,
            config_snapshot: None,
            config_path: None,
            created_at: now.clone(),
            updated_at: now,
            started_at: None,
            completed_at: None,
            total_sheets,
            last_completed_sheet: 0,
            current_sheet: None,
            status: JobStatus::Pending,
            sheets: SheetMap::new(),
            instruments_used: Vec::new(),
            total_movements: None,
            pid: None,
            error_message: None,
            total_retry_count: 0,
            rate_limit_waits: 0,
            quota_waits: 0,
            resume_at: None,
            total_input_tokens: 0,
            total_output_tokens: 0,
            total_estimated_cost: 0.0,
            cost_limit_reached: false,
            worktree_path: None,
            worktree_branch: None,
            worktree_locked: false,
            worktree_base_commit: None,
            isolation_mode: None,
            isolation_fallback_used: false,
            parallel_enabled: false,
            parallel_max_concurrent: 1,
            parallel_batches_executed: 0,
            sheets_in_progress: Vec::new(),
            synthesis_results: serde_json::Map::new(),
            hook_results: Vec::new(),
            spec_corpus_hash: String::new(),
            circuit_breaker_history: Vec::new(),
            workspace: None,
            waiting_reason: None,
            pausing: None,
            hooks_running: false,
            instrument_holds: Vec::new(),
            recent_attempt_errors: None,
            sheets_view: None,
        }
    }

    /// Checks the model constraints ([`JobCheckpoint::check`]), then applies the sheets'
    /// load-time fix-ups.
    pub fn normalize_and_validate(&mut self) -> Result<(), String> {
        self.check()?;
        // A compact sheet is in normal form already (it is made compact only then).
        self.sheets.normalize_whole();
        Ok(())
    }

    /// The job-level part of the checkpoint: everything except `sheets` and
    /// `config_snapshot`, which the registry stores in their own rows / column so a sheet
    /// transition does not rewrite them.
    pub fn header(&self) -> JobCheckpoint<S> {
        self.with_parts(SheetMap::new(), None)
    }

    /// This checkpoint with other `sheets` and another `config_snapshot` (of any form),
    /// every other field cloned: the stored header, and the document a client is shown (a
    /// view's sheets, the redacted score). Destructured exhaustively so a new field cannot
    /// be forgotten.
    pub fn with_parts<T>(&self, sheets: SheetMap, config_snapshot: Option<T>) -> JobCheckpoint<T> {
        let JobCheckpoint {
            job_id,
            job_name,
            config_hash,
            config_path,
            created_at,
            updated_at,
            started_at,
            completed_at,
            total_sheets,
            last_completed_sheet,
            current_sheet,
            status,
            instruments_used,
            total_movements,
            pid,
            error_message,
            total_retry_count,
            rate_limit_waits,
            quota_waits,
            resume_at,
            total_input_tokens,
            total_output_tokens,
            total_estimated_cost,
            cost_limit_reached,
            worktree_path,
            worktree_branch,
            worktree_locked,
            worktree_base_commit,
            isolation_mode,
            isolation_fallback_used,
            parallel_enabled,
            parallel_max_concurrent,
            parallel_batches_executed,
            sheets_in_progress,
            synthesis_results,
            hook_results,
            spec_corpus_hash,
            circuit_breaker_history,
            workspace,
            waiting_reason,
            pausing,
            hooks_running,
            instrument_holds,
            recent_attempt_errors,
            sheets_view,
            sheets: _,
            config_snapshot: _,
        } = self;
        JobCheckpoint {
            job_id: job_id.clone(),
            job_name: job_name.clone(),
            config_hash: config_hash.clone(),
            config_path: config_path.clone(),
            created_at: created_at.clone(),
            updated_at: updated_at.clone(),
            started_at: started_at.clone(),
            completed_at: completed_at.clone(),
            total_sheets: *total_sheets,
            last_completed_sheet: *last_completed_sheet,
            current_sheet: *current_sheet,
            status: *status,
            instruments_used: instruments_used.clone(),
            total_movements: *total_movements,
            pid: *pid,
            error_message: error_message.clone(),
            total_retry_count: *total_retry_count,
            rate_limit_waits: *rate_limit_waits,
            quota_waits: *quota_waits,
            resume_at: resume_at.clone(),
            total_input_tokens: *total_input_tokens,
            total_output_tokens: *total_output_tokens,
            total_estimated_cost: *total_estimated_cost,
            cost_limit_reached: *cost_limit_reached,
            worktree_path: worktree_path.clone(),
            worktree_branch: worktree_branch.clone(),
            worktree_locked: *worktree_locked,
            worktree_base_commit: worktree_base_commit.clone(),
            isolation_mode: *isolation_mode,
            isolation_fallback_used: *isolation_fallback_used,
            parallel_enabled: *parallel_enabled,
            parallel_max_concurrent: *parallel_max_concurrent,
            parallel_batches_executed: *parallel_batches_executed,
            sheets_in_progress: sheets_in_progress.clone(),
            synthesis_results: synthesis_results.clone(),
            hook_results: hook_results.clone(),
            spec_corpus_hash: spec_corpus_hash.clone(),
            circuit_breaker_history: circuit_breaker_history.clone(),
            workspace: workspace.clone(),
            waiting_reason: waiting_reason.clone(),
            pausing: *pausing,
            hooks_running: *hooks_running,
            instrument_holds: instrument_holds.clone(),
            recent_attempt_errors: recent_attempt_errors.clone(),
            sheets_view: sheets_view.clone(),
            sheets,
            config_snapshot,
        }
    }

    /// Parses a checkpoint document, checks constraints and applies load-time fix-ups.
    /// The error string is the reason; callers wrap it with the file or job.
    pub fn from_json(text: &str) -> Result<Self, String>
    where
        S: DeserializeOwned,
    {
        let mut state: JobCheckpoint<S> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        state.normalize_and_validate()?;
        Ok(state)
    }

    /// Serializes to upstream's JSON shape (indent 2, like upstream's state file).
    ///
    /// # Errors
    /// When the score snapshot does not serialize.
    pub fn to_json_pretty(&self) -> Result<String, serde_json::Error>
    where
        S: Serialize,
    {
        serde_json::to_string_pretty(self)
    }

    fn touch(&mut self) {
        self.updated_at = Timestamp::now();
    }

    fn sheet_mut(&mut self, sheet_num: u32) -> &mut SheetCheckpoint {
        self.sheets
            .get_or_insert_with(sheet_num, || SheetCheckpoint::new(sheet_num))
    }

    /// Next sheet to run in sequential order (in-progress first, then the first pending or
    /// failed sheet after the high-water mark), `None` when done.
    pub fn next_sheet(&self) -> Option<u32> {
        if matches!(self.status, JobStatus::Completed | JobStatus::Cancelled) {
            return None;
        }
        if let Some(cur) = self.current_sheet {
            if self
                .sheets
                .status_of(&cur)
                .is_some_and(|s| s == SheetStatus::InProgress)
            {
                return Some(cur);
            }
        }
        (self.last_completed_sheet + 1..=self.total_sheets).find(|n| {
            self.sheets
                .status_of(n)
                .is_none_or(|s| matches!(s, SheetStatus::Pending | SheetStatus::Failed))
        })
    }

    /// §8.3 `mark_sheet_started`: job running, sheet in progress, one more attempt, stale
    /// per-attempt fields cleared.
    pub fn mark_sheet_started(&mut self, sheet_num: u32) {
        self.current_sheet = Some(sheet_num);
        self.status = JobStatus::Running;
        self.touch();
        let sheet = self.sheet_mut(sheet_num);
        sheet.status = SheetStatus::InProgress;
        sheet.started_at = Some(Timestamp::now());
        sheet.attempt_count += 1;
        sheet.error_message = None;
        sheet.exit_code = None;
        sheet.execution_mode = None;
    }

    /// §8.3 `mark_sheet_completed`; the job completes only when every sheet has completed
    /// (sheets may finish out of order in parallel runs).
    pub fn mark_sheet_completed(
        &mut self,
        sheet_num: u32,
        validation_passed: bool,
        validation_details: Option<Vec<ValidationDetail>>,
        duration_seconds: Option<f64>,
    ) {
        self.touch();
        let sheet = self.sheet_mut(sheet_num);
        sheet.status = SheetStatus::Completed;
        sheet.completed_at = Some(Timestamp::now());
        sheet.exit_code = Some(0);
        sheet.validation_passed = Some(validation_passed);
        sheet.validation_details = validation_details;
        if duration_seconds.is_some() {
            sheet.execution_duration_seconds = duration_seconds;
        }
        self.last_completed_sheet = self.last_completed_sheet.max(sheet_num);
        self.current_sheet = None;
        let all_done = self.sheets.len() >= self.total_sheets as usize
            && self
                .sheets
                .statuses()
                .all(|(_, s)| s == SheetStatus::Completed);
        if all_done {
            self.status = JobStatus::Completed;
            self.completed_at = Some(Timestamp::now());
        }
    }

    /// §8.3 `mark_sheet_failed`; counts toward `total_retry_count`.
    pub fn mark_sheet_failed(&mut self, sheet_num: u32, failure: SheetFailure) {
        self.touch();
        let sheet = self.sheet_mut(sheet_num);
        sheet.status = SheetStatus::Failed;
        sheet.completed_at = Some(Timestamp::now());
        sheet.error_message = Some(failure.message);
        sheet.error_category = failure.category;
        sheet.error_code = failure.error_code;
        sheet.exit_code = failure.exit_code;
        sheet.exit_signal = failure.exit_signal;
        sheet.exit_reason = failure.exit_reason;
        if failure.duration_seconds.is_some() {
            sheet.execution_duration_seconds = failure.duration_seconds;
        }
        self.current_sheet = None;
        self.total_retry_count += 1;
    }

    /// §8.3 `mark_sheet_skipped`; the reason, if any, goes into `error_message`.
    pub fn mark_sheet_skipped(&mut self, sheet_num: u32, reason: Option<&str>) {
        self.touch();
        let sheet = self.sheet_mut(sheet_num);
        sheet.status = SheetStatus::Skipped;
        sheet.completed_at = Some(Timestamp::now());
        if let Some(r) = reason.filter(|r| !r.is_empty()) {
            sheet.error_message = Some(r.to_owned());
        }
        self.current_sheet = None;
    }

    /// §8.3 `mark_job_failed`; clears the pid so a stale pid cannot block resume.
    pub fn mark_job_failed(&mut self, message: &str) {
        self.status = JobStatus::Failed;
        self.error_message = Some(message.to_owned());
        self.pid = None;
        self.completed_at = Some(Timestamp::now());
        self.touch();
    }

    /// §8.3 `mark_job_paused`.
    pub fn mark_job_paused(&mut self) {
        self.status = JobStatus::Paused;
        self.pid = None;
        self.touch();
    }

    /// Records the pid of the process running the job (this process when `None`).
    pub fn set_running_pid(&mut self, pid: Option<u32>) {
        self.pid = Some(pid.unwrap_or_else(std::process::id));
        self.touch();
    }

    /// Appends a circuit breaker transition.
    pub fn record_circuit_breaker_change(
        &mut self,
        state: &str,
        trigger: &str,
        consecutive_failures: u32,
    ) {
        self.circuit_breaker_history.push(CircuitBreakerChange {
            state: state.to_owned(),
            timestamp: Timestamp::now().as_str().to_owned(),
            trigger: trigger.to_owned(),
            consecutive_failures,
        });
        self.touch();
    }

    /// Appends a hook result record.
    pub fn record_hook_result(&mut self, result: HookResult) {
        self.hook_results.push(result);
        self.touch();
    }

    /// Adds or replaces a synthesis result.
    pub fn add_synthesis(&mut self, batch_id: &str, result: serde_json::Value) {
        self.synthesis_results.insert(batch_id.to_owned(), result);
        self.touch();
    }

    /// The highest sheet number that is completed (0 when none is).
    pub fn highest_completed(&self) -> u32 {
        self.sheets
            .statuses()
            .filter(|(_, s)| *s == SheetStatus::Completed)
            .map(|(num, _)| num)
            .max()
            .unwrap_or(0)
    }

    /// (completed sheets, total sheets).
    pub fn progress(&self) -> (u32, u32) {
        let done = self
            .sheets
            .statuses()
            .filter(|(_, s)| *s == SheetStatus::Completed)
            .count() as u32;
        (done, self.total_sheets)
    }

    /// Completed share in percent.
    pub fn progress_percent(&self) -> f64 {
        let (done, total) = self.progress();
        if total == 0 {
            0.0
        } else {
            f64::from(done) / f64::from(total) * 100.0
        }
    }

    /// §8.4: running, pid recorded, and that pid no longer exists. Permission and other OS
    /// errors mean "cannot tell", which is not a zombie.
    pub fn is_zombie(&self) -> bool {
        if self.status != JobStatus::Running {
            return false;
        }
        let Some(pid) = self.pid else { return false };
        process_is_gone(pid)
    }

    /// §8.4: status paused, pid cleared, and an informational message unless a real error
    /// is already recorded.
    pub fn mark_zombie_detected(&mut self, reason: Option<&str>) {
        let previous_pid = self
            .pid
            .map_or_else(|| "None".to_owned(), |p| p.to_string());
        self.status = JobStatus::Paused;
        self.pid = None;
        self.touch();
        let mut msg = format!(
            "{RECOVERY_NOTE_PREFIX} (PID {previous_pid} no longer active). \
             Job is now paused and ready to resume."
        );
        if let Some(r) = reason.filter(|r| !r.is_empty()) {
            msg.push_str(" Trigger: ");
            msg.push_str(r);
        }
        if self.error_message.as_deref().is_none_or(str::is_empty) {
            self.error_message = Some(msg);
        }
        tracing::warn!(job_id = %self.job_id, previous_pid, "zombie_recovered");
    }

    /// Applies zombie recovery if the state is a zombie; returns whether it did.
    pub fn recover_if_zombie(&mut self, reason: &str) -> bool {
        if self.is_zombie() {
            self.mark_zombie_detected(Some(reason));
            true
        } else {
            false
        }
    }
}

/// Whether `kill(pid, 0)` reports "no such process".
pub fn process_is_gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        // kill(0 or negative) addresses process groups, never a single recorded job pid.
        return false;
    }
    matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::checkpoint::{ErrorType, IsolationMode};

    /// The storage form is `mozart-state`'s; these tests need only the client's.
    type CheckpointState = JobCheckpoint;

    fn three() -> CheckpointState {
        CheckpointState::new("job", "Job", 3)
    }

    #[test]
    fn job_completes_only_when_all_sheets_complete() {
        let mut cp = three();
        cp.mark_sheet_started(3);
        cp.mark_sheet_completed(3, true, None, Some(1.5));
        assert_eq!(cp.last_completed_sheet, 3);
        assert_eq!(cp.status, JobStatus::Running);
        cp.mark_sheet_completed(1, true, None, None);
        assert_eq!(
            cp.last_completed_sheet, 3,
            "high-water mark never decreases"
        );
        cp.mark_sheet_completed(2, true, None, None);
        assert_eq!(cp.status, JobStatus::Completed);
        assert!(cp.completed_at.is_some());
        assert_eq!(cp.progress(), (3, 3));
    }

    /// A cost stored as `null` (JSON's form of an infinite sum, written by an earlier
    /// Mozart) still loads: the state's other facts — which sheets completed — are kept.
    #[test]
    fn a_null_cost_still_loads_the_state() {
        let mut cp = three();
        cp.mark_sheet_started(1);
        cp.mark_sheet_completed(1, true, None, None);
        cp.total_estimated_cost = f64::INFINITY;
        cp.sheets.get_mut(&1).unwrap().cost_confidence = f64::NAN;
        let text = serde_json::to_string(&cp).unwrap();
        assert!(text.contains("\"total_estimated_cost\":null"), "{text}");
        let back: CheckpointState = serde_json::from_str(&text).unwrap();
        assert_eq!(back.total_estimated_cost, 0.0);
        assert_eq!(back.sheets[&1].cost_confidence, 0.0);
        assert_eq!(back.sheets[&1].status, SheetStatus::Completed);
    }

    #[test]
    fn started_clears_previous_attempt_fields() {
        let mut cp = three();
        cp.mark_sheet_started(1);
        cp.mark_sheet_failed(
            1,
            SheetFailure {
                message: "boom".into(),
                exit_code: Some(2),
                category: Some(ErrorCategory::Transient),
                ..Default::default()
            },
        );
        assert_eq!(cp.total_retry_count, 1);
        assert_eq!(cp.current_sheet, None);
        cp.mark_sheet_started(1);
        let s = &cp.sheets[&1];
        assert_eq!(s.attempt_count, 2);
        assert_eq!(s.error_message, None);
        assert_eq!(s.exit_code, None);
        assert_eq!(s.status, SheetStatus::InProgress);
        assert_eq!(cp.next_sheet(), Some(1));
    }

    #[test]
    fn json_uses_upstream_names_and_string_keys() {
        let mut cp = three();
        cp.mark_sheet_started(2);
        let v: serde_json::Value = serde_json::from_str(&cp.to_json_pretty().unwrap()).unwrap();
        assert_eq!(v["status"], "running");
        assert_eq!(v["sheets"]["2"]["status"], "in_progress");
        assert_eq!(v["sheets"]["2"]["cost_confidence"], 1.0);
        assert!(v["sheets"]["2"].get("healing_attempts").is_none());
        assert!(v["config_snapshot"].is_null());
        let back = CheckpointState::from_json(&v.to_string()).unwrap();
        assert_eq!(back, cp);
    }

    #[test]
    fn load_applies_invariants_and_legacy_patterns() {
        let text = r#"{"job_id":"j","job_name":"n","total_sheets":2,
            "sheets":{"1":{"sheet_num":1,"status":"failed","error_category":"cosmic_rays",
                           "applied_pattern_ids":["p1","p2"],
                           "applied_pattern_descriptions":["first"]},
                      "2":{"sheet_num":2,"status":"completed"}}}"#;
        let cp = CheckpointState::from_json(text).unwrap();
        let s1 = &cp.sheets[&1];
        assert_eq!(s1.error_message.as_deref(), Some(UNKNOWN_FAILURE_MESSAGE));
        assert_eq!(s1.error_category, None);
        assert_eq!(
            s1.applied_patterns,
            vec![
                AppliedPattern {
                    id: "p1".into(),
                    description: "first".into()
                },
                AppliedPattern {
                    id: "p2".into(),
                    description: String::new()
                },
            ]
        );
        assert!(cp.sheets[&2].completed_at.is_some());
    }

    #[test]
    fn parses_an_upstream_shaped_document() {
        // Shape of upstream's `model_dump(mode="json")` (pydantic v2 writes UTC as `Z`),
        // with an unknown future field that must be ignored.
        let text = r#"{
          "job_id": "review", "job_name": "code-review", "config_hash": "abc",
          "config_snapshot": {"name": "code-review"}, "config_path": "/s/review.yaml",
          "created_at": "2026-02-01T10:00:00.123456Z", "updated_at": "2026-02-01T10:05:00Z",
          "started_at": null, "completed_at": null, "total_sheets": 2,
          "last_completed_sheet": 1, "current_sheet": 2, "status": "running",
          "sheets": {
            "1": {"sheet_num": 1, "status": "completed", "started_at": "2026-02-01T10:00:01Z",
                  "completed_at": "2026-02-01T10:02:00Z", "attempt_count": 1, "exit_code": 0,
                  "validation_passed": true,
                  "validation_details": [{"rule_type": "file_exists", "path": "out.md",
                                          "passed": true, "confidence": 1.0}],
                  "execution_mode": "normal", "outcome_category": "success_first_try",
                  "progress_snapshots": [{"sheet_num": 1, "bytes_received": 10,
                                          "phase": "completed"}],
                  "prompt_metrics": {"character_count": 120, "has_file_references": false},
                  "instrument_fallback_history": [{"from": "a", "to": "b",
                                                   "reason": "rate_limit",
                                                   "timestamp": "2026-02-01T10:01:00Z"}],
                  "error_history": [{"timestamp": "2026-02-01T10:00:30Z",
                                     "error_type": "transient", "error_code": "E001",
                                     "error_message": "timeout", "attempt_number": 1,
                                     "context": {"exit_code": null}}],
                  "input_tokens": 100, "output_tokens": 50, "estimated_cost": 0.01,
                  "cost_confidence": 0.7, "agent_feedback": {"notes": "ok"}},
            "2": {"sheet_num": 2, "status": "in_progress",
                  "started_at": "2026-02-01T10:02:01Z", "attempt_count": 1,
                  "error_category": "rate_limit", "exit_reason": "timeout"}
          },
          "instruments_used": ["claude-code"], "pid": 4242, "total_retry_count": 0,
          "isolation_mode": "none", "parallel_max_concurrent": 3,
          "circuit_breaker_history": [{"state": "open", "timestamp": "2026-02-01T10:01:00Z",
                                       "trigger": "failure_recorded",
                                       "consecutive_failures": 5}],
          "synthesis_results": {"b1": {"status": "done"}},
          "some_future_field": {"x": 1}
        }"#;
        let cp = CheckpointState::from_json(text).unwrap();
        assert_eq!(cp.status, JobStatus::Running);
        assert_eq!(cp.created_at.as_str(), "2026-02-01T10:00:00.123456Z");
        assert_eq!(cp.sheets[&2].error_category, Some(ErrorCategory::RateLimit));
        assert_eq!(cp.sheets[&2].exit_reason, Some(ExitReason::Timeout));
        assert_eq!(cp.sheets[&1].cost_confidence, 0.7);
        assert_eq!(cp.isolation_mode, Some(IsolationMode::None));
        assert_eq!(cp.next_sheet(), Some(2));
        let again: serde_json::Value = serde_json::from_str(&cp.to_json_pretty().unwrap()).unwrap();
        assert_eq!(
            again["sheets"]["1"]["validation_details"][0]["path"],
            "out.md"
        );
        assert!(again.get("some_future_field").is_none());
        assert_eq!(CheckpointState::from_json(&again.to_string()).unwrap(), cp);
    }

    #[test]
    fn rejects_zero_sheets_and_mismatched_keys() {
        assert!(
            CheckpointState::from_json(r#"{"job_id":"j","job_name":"n","total_sheets":0}"#)
                .is_err()
        );
        let bad = r#"{"job_id":"j","job_name":"n","total_sheets":1,
                     "sheets":{"1":{"sheet_num":2}}}"#;
        assert!(CheckpointState::from_json(bad).is_err());
    }

    #[test]
    fn zombie_detection_uses_real_pids() {
        let mut cp = three();
        cp.status = JobStatus::Running;
        cp.set_running_pid(None);
        assert!(!cp.is_zombie(), "our own pid is alive");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        cp.pid = Some(dead);
        assert!(cp.is_zombie());
        assert!(cp.recover_if_zombie(ZOMBIE_ON_LOAD_TRIGGER));
        assert_eq!(cp.status, JobStatus::Paused);
        assert_eq!(cp.pid, None);
        let msg = cp.error_message.clone().unwrap();
        assert!(msg.starts_with(&format!(
            "Recovered from stale running state (PID {dead} no longer active)."
        )));
        assert!(msg.ends_with(ZOMBIE_ON_LOAD_TRIGGER));
        assert!(cp.message_is_recovery_note());

        let mut cp = three();
        cp.status = JobStatus::Running;
        cp.pid = Some(dead);
        cp.error_message = Some("real error".into());
        cp.mark_zombie_detected(None);
        assert_eq!(cp.error_message.as_deref(), Some("real error"));
        assert!(!cp.message_is_recovery_note(), "a real error is not a note");
    }

    #[test]
    fn capture_output_keeps_byte_tail() {
        let mut s = SheetCheckpoint::new(1);
        let out = format!("{}é-end", "x".repeat(100));
        s.capture_output(&out, "", 6, |t| t.replace("end", "[R]"));
        assert_eq!(s.stdout_tail.as_deref(), Some("é-[R]"));
        assert_eq!(s.stderr_tail, None);
        assert!(s.output_truncated);
        s.capture_output("short", "err", 100, str::to_owned);
        assert!(!s.output_truncated);
        assert_eq!(s.stderr_tail.as_deref(), Some("err"));
    }

    #[test]
    fn error_history_is_capped() {
        let mut s = SheetCheckpoint::new(1);
        for i in 0..60 {
            s.add_error_to_history(CheckpointErrorRecord {
                timestamp: Timestamp::now(),
                error_type: ErrorType::Transient,
                error_code: "E001".into(),
                error_message: format!("e{i}"),
                attempt_number: i + 1,
                context: Default::default(),
                stdout_tail: None,
                stderr_tail: None,
                stack_trace: None,
            });
        }
        assert_eq!(s.error_history.len(), MAX_ERROR_HISTORY);
        assert_eq!(s.error_history[0].error_message, "e10");
    }
}
