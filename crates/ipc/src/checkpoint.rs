//! The checkpoint model: one [`JobCheckpoint`] per job run with one [`SheetCheckpoint`] per
//! sheet (execution.md §8.1–8.4). It is the document `job.status` returns, the JSON state
//! file and the conductor's own state: field names, order and null-versus-absent are
//! upstream's `CheckpointState.model_dump(mode="json")`, so upstream's own CLI parses it.
//!
//! The one definition (issue 26): `mozart-state` stores this model (its `CheckpointState`
//! is `JobCheckpoint<ConfigSnapshot>`: the score kept as text, the storage-only part) and
//! the conductor answers with it, changing only what a client sees differently (redaction,
//! a view's sheets, `workspace`, live progress). The upstream transitions (§8.3) and zombie
//! recovery (§8.4) are in [`model`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;
pub use sheet_map::SheetMap;

mod model;
pub mod sheet_map;
pub mod sheet_view;
pub use model::{
    process_is_gone, SheetFailure, MAX_ERROR_HISTORY, MAX_OUTPUT_CAPTURE_BYTES,
    UNKNOWN_FAILURE_MESSAGE, ZOMBIE_ON_LOAD_TRIGGER,
};

/// Status of a whole job run as recorded in its checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Not started.
    #[default]
    Pending,
    /// A sheet has been started.
    Running,
    /// Every sheet completed.
    Completed,
    /// Gave up.
    Failed,
    /// Paused by the user, a cost limit, or zombie recovery.
    Paused,
    /// Cancelled by the user.
    Cancelled,
}

impl JobStatus {
    /// The lowercase wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Paused => "paused",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

/// Status of one sheet as recorded in the checkpoint (the baton's richer statuses map onto
/// these, execution.md §2.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SheetStatus {
    /// Not yet run, or re-queued.
    #[default]
    Pending,
    /// Dispatched to a musician.
    InProgress,
    /// Passed validation.
    Completed,
    /// Gave up.
    Failed,
    /// Skipped (condition or escalation).
    Skipped,
}

impl SheetStatus {
    /// The lowercase wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            SheetStatus::Pending => "pending",
            SheetStatus::InProgress => "in_progress",
            SheetStatus::Completed => "completed",
            SheetStatus::Failed => "failed",
            SheetStatus::Skipped => "skipped",
        }
    }

    /// Parses the wire string.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => SheetStatus::Pending,
            "in_progress" => SheetStatus::InProgress,
            "completed" => SheetStatus::Completed,
            "failed" => SheetStatus::Failed,
            "skipped" => SheetStatus::Skipped,
            _ => return None,
        })
    }

    /// Completed, failed and skipped sheets are not run again without `--fresh`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            SheetStatus::Completed | SheetStatus::Failed | SheetStatus::Skipped
        )
    }
}

/// Broad kind of an error (execution.md §7.1 `ErrorCategory`), as the classifier in
/// `mozart-backends` assigns it and the checkpoint stores it. The one definition: it lives
/// here, below the storage model and the backends, which re-export it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCategory {
    /// Rate / usage limit: tempo, not failure; retriable with a long wait.
    RateLimit,
    /// Worth retrying soon, with backoff.
    Transient,
    /// The instrument ran but validations failed.
    Validation,
    /// Authentication failure; needs the user.
    Auth,
    /// Network connectivity.
    Network,
    /// Timed out.
    Timeout,
    /// Killed by a signal.
    Signal,
    /// Non-retriable.
    Fatal,
    /// Configuration problem.
    Configuration,
    /// Pre-execution check failure.
    Preflight,
    /// Escalation / grounding abort.
    Escalation,
}

impl ErrorCategory {
    /// Parses the wire string.
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(text.to_owned())).ok()
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::RateLimit => "rate_limit",
            ErrorCategory::Transient => "transient",
            ErrorCategory::Validation => "validation",
            ErrorCategory::Auth => "auth",
            ErrorCategory::Network => "network",
            ErrorCategory::Timeout => "timeout",
            ErrorCategory::Signal => "signal",
            ErrorCategory::Fatal => "fatal",
            ErrorCategory::Configuration => "configuration",
            ErrorCategory::Preflight => "preflight",
            ErrorCategory::Escalation => "escalation",
        }
    }
}

/// Reads an optional category leniently: upstream drops an unknown category string with a
/// warning instead of rejecting the whole state (execution.md §8.2).
pub fn lenient_category<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ErrorCategory>, D::Error> {
    let raw: Option<String> = Option::deserialize(d)?;
    Ok(raw.and_then(|s| {
        let parsed = ErrorCategory::parse(&s);
        if parsed.is_none() {
            tracing::warn!(value = %s, "unknown_error_category");
        }
        parsed
    }))
}

/// A number stored as `null`: what JSON makes of an infinite or NaN figure (an earlier
/// Mozart stored a cost that added up to infinity so). Read as 0, so the rest of the state —
/// which sheets completed — still loads.
pub fn lenient_f64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(0.0))
}

/// Why an execution ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// Process exited on its own.
    Completed,
    /// Killed by our timeout.
    Timeout,
    /// Killed by a signal.
    Killed,
    /// Failed to run.
    Error,
}

/// Mode of the last execution of a sheet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionMode {
    /// First or plain attempt.
    Normal,
    /// Completion prompt for a partial pass.
    Completion,
    /// Retry after failure.
    Retry,
}

/// Outcome classification of a sheet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeCategory {
    /// Passed on the first attempt.
    SuccessFirstTry,
    /// Passed after retries.
    SuccessRetry,
    /// Passed through completion mode.
    SuccessCompletion,
    /// Retries exhausted.
    FailedExhausted,
    /// Fatal error.
    FailedFatal,
    /// Skipped by an escalation decision.
    SkippedByEscalation,
    /// Ours: failed, then marked completed by `mozart recover` (its validations passed
    /// afterwards; no attempt of it succeeded).
    Recovered,
}

/// Isolation mode recorded for the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationMode {
    /// Ran in a git worktree.
    Worktree,
    /// Ran in the workspace.
    None,
}

/// Kind of a recorded error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// Temporary.
    Transient,
    /// Rate limited.
    RateLimit,
    /// Will not go away by retrying.
    Permanent,
}

/// One validation rule's result (upstream `ValidationDetailDict`; every key but `passed` is
/// optional and omitted when absent).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationDetail {
    /// Rule type (`file_exists`, `command_succeeds`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_type: Option<String>,
    /// Rule description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Path checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Pattern checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Whether the rule passed.
    pub passed: bool,
    /// Observed value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_value: Option<String>,
    /// Expected value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_value: Option<String>,
    /// Error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// When checked (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<String>,
    /// Check duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_duration_ms: Option<f64>,
    /// Confidence 0..1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// Confidence factors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence_factors: Option<BTreeMap<String, f64>>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Failure category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_category: Option<String>,
    /// Suggested fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_fix: Option<String>,
    /// Error type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
}

/// Prompt analysis metrics.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptMetrics {
    /// Characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub character_count: Option<u64>,
    /// Estimated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_tokens: Option<u64>,
    /// Lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_count: Option<u64>,
    /// Words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_count: Option<u64>,
    /// Whether the prompt names files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_file_references: Option<bool>,
    /// Files the prompt names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub referenced_paths: Option<Vec<String>>,
}

/// A progress sample taken while a sheet runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressSnapshot {
    /// Sheet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheet_num: Option<u32>,
    /// Output bytes so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_received: Option<u64>,
    /// Output lines so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines_received: Option<u64>,
    /// Seconds since start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_seconds: Option<f64>,
    /// `starting` / `executing` / `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When sampled (ISO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_at: Option<String>,
}

/// A learned pattern injected into a sheet's prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedPattern {
    /// Pattern id.
    pub id: String,
    /// Pattern description.
    pub description: String,
}

/// Escalation outcome data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeData {
    /// Escalation record id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation_record_id: Option<String>,
    /// Whether escalation skipped the sheet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation_skipped: Option<bool>,
}

/// One instrument fallback event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackRecord {
    /// Instrument given up on.
    pub from: String,
    /// Instrument switched to.
    pub to: String,
    /// Why.
    pub reason: String,
    /// When (ISO).
    pub timestamp: String,
}

/// One error occurrence on a sheet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointErrorRecord {
    /// When.
    pub timestamp: Timestamp,
    /// Kind.
    pub error_type: ErrorType,
    /// E-code.
    pub error_code: String,
    /// Message.
    pub error_message: String,
    /// 1-based attempt number.
    pub attempt_number: u32,
    /// Extra context (`exit_code`, `signal`, `category`, ...).
    #[serde(default)]
    pub context: serde_json::Map<String, serde_json::Value>,
    /// stdout tail at the time.
    #[serde(default)]
    pub stdout_tail: Option<String>,
    /// stderr tail at the time.
    #[serde(default)]
    pub stderr_tail: Option<String>,
    /// Stack trace, if any.
    #[serde(default)]
    pub stack_trace: Option<String>,
}

/// One circuit breaker transition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CircuitBreakerChange {
    /// `closed` / `open` / `half_open`.
    pub state: String,
    /// When (ISO).
    pub timestamp: String,
    /// What caused it.
    pub trigger: String,
    /// Consecutive failures at the time.
    pub consecutive_failures: u32,
}

fn one() -> f64 {
    1.0
}

fn one_u32() -> u32 {
    1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Progress of a running sheet's instrument, as its structured output reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveProgress {
    /// Seconds since the attempt started.
    pub elapsed_seconds: f64,
    /// Seconds since the instrument last printed anything.
    pub idle_seconds: f64,
    /// Bytes of output so far.
    pub output_bytes: u64,
    /// Tool calls the model made so far.
    pub tool_calls: u32,
    /// The last tool called.
    #[serde(default)]
    pub last_tool: Option<String>,
    /// Input tokens so far.
    pub input_tokens: u64,
    /// Output tokens so far.
    pub output_tokens: u64,
    /// API retries the CLI made by itself.
    pub api_retries: u32,
    /// The latest notable event, in words.
    #[serde(default)]
    pub last_event: Option<String>,
    /// The attempt waits in a remote queue (Slurm's): its command has not started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
}

/// One sheet of a [`JobCheckpoint`] (upstream `SheetState`, execution.md §8.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SheetCheckpoint {
    /// 1-based sheet number.
    pub sheet_num: u32,
    /// Status.
    #[serde(default)]
    pub status: SheetStatus,
    /// When the last attempt started.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status.
    #[serde(default)]
    pub completed_at: Option<Timestamp>,
    /// Attempts started.
    #[serde(default)]
    pub attempt_count: u32,
    /// Exit code of the last execution.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Last error message.
    #[serde(default)]
    pub error_message: Option<String>,
    /// Last error category.
    #[serde(default, deserialize_with = "lenient_category")]
    pub error_category: Option<ErrorCategory>,
    /// Last E-code.
    #[serde(default)]
    pub error_code: Option<String>,
    /// Tri-state validation result.
    #[serde(default)]
    pub validation_passed: Option<bool>,
    /// Per-rule results.
    #[serde(default)]
    pub validation_details: Option<Vec<ValidationDetail>>,
    /// Instrument used.
    #[serde(default)]
    pub instrument_name: Option<String>,
    /// Model used.
    #[serde(default)]
    pub instrument_model: Option<String>,
    /// Movement number.
    #[serde(default)]
    pub movement: Option<u32>,
    /// Voice within a harmonized movement.
    #[serde(default)]
    pub voice: Option<u32>,
    /// Signal that killed the process.
    #[serde(default)]
    pub exit_signal: Option<i32>,
    /// Why execution ended.
    #[serde(default)]
    pub exit_reason: Option<ExitReason>,
    /// Duration of the last execution.
    #[serde(default)]
    pub execution_duration_seconds: Option<f64>,
    /// Completion-mode attempts.
    #[serde(default)]
    pub completion_attempts: u32,
    /// Self-healing attempts. Port extension (the baton counts healing separately,
    /// execution.md §2.2); omitted when zero so the document stays upstream-shaped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub healing_attempts: u32,
    /// Descriptions of passed validations.
    #[serde(default)]
    pub passed_validations: Vec<String>,
    /// Descriptions of failed validations.
    #[serde(default)]
    pub failed_validations: Vec<String>,
    /// Last validation pass percentage.
    #[serde(default)]
    pub last_pass_percentage: Option<f64>,
    /// Last execution mode.
    #[serde(default)]
    pub execution_mode: Option<ExecutionMode>,
    /// Escalation outcome data.
    #[serde(default)]
    pub outcome_data: Option<OutcomeData>,
    /// Confidence 0..1.
    #[serde(default)]
    pub confidence_score: Option<f64>,
    /// Patterns recognised.
    #[serde(default)]
    pub learned_patterns: Vec<String>,
    /// Always 0 (kept for compatibility).
    #[serde(default)]
    pub similar_outcomes_count: u32,
    /// Passed without retry or completion.
    #[serde(default)]
    pub success_without_retry: bool,
    /// Outcome classification.
    #[serde(default)]
    pub outcome_category: Option<OutcomeCategory>,
    /// Tail of stdout.
    #[serde(default)]
    pub stdout_tail: Option<String>,
    /// Tail of stderr.
    #[serde(default)]
    pub stderr_tail: Option<String>,
    /// Whether a tail was cut.
    #[serde(default)]
    pub output_truncated: bool,
    /// Prompt metrics (boxed, like every rare large field: a sheet is kept per sheet of
    /// every loaded job, issue 24).
    #[serde(default)]
    pub prompt_metrics: Option<Box<PromptMetrics>>,
    /// Preflight warnings.
    #[serde(default)]
    pub preflight_warnings: Vec<String>,
    /// Progress samples.
    #[serde(default)]
    pub progress_snapshots: Vec<ProgressSnapshot>,
    /// Last observed activity.
    #[serde(default)]
    pub last_activity_at: Option<Timestamp>,
    /// Error history (≤ `MAX_ERROR_HISTORY`).
    #[serde(default)]
    pub error_history: Vec<CheckpointErrorRecord>,
    /// Instrument fallbacks taken.
    #[serde(default)]
    pub instrument_fallback_history: Vec<FallbackRecord>,
    /// Learned patterns injected.
    #[serde(default)]
    pub applied_patterns: Vec<AppliedPattern>,
    /// Legacy input, migrated into `applied_patterns` by [`SheetCheckpoint::normalize`].
    #[serde(default, skip_serializing)]
    // Boxed: 8 bytes in every sheet of every loaded job for an input that is almost never
    // there (a `Vec` would be 24).
    #[allow(clippy::box_collection)]
    applied_pattern_ids: Option<Box<Vec<String>>>,
    /// Legacy input, migrated into `applied_patterns` by [`SheetCheckpoint::normalize`].
    #[serde(default, skip_serializing)]
    // Boxed: 8 bytes in every sheet of every loaded job for an input that is almost never
    // there (a `Vec` would be 24).
    #[allow(clippy::box_collection)]
    applied_pattern_descriptions: Option<Box<Vec<String>>>,
    /// Grounding result.
    #[serde(default)]
    pub grounding_passed: Option<bool>,
    /// Grounding confidence.
    #[serde(default)]
    pub grounding_confidence: Option<f64>,
    /// Grounding guidance.
    #[serde(default)]
    pub grounding_guidance: Option<String>,
    /// Input tokens.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Estimated cost, USD.
    #[serde(default)]
    pub estimated_cost: Option<f64>,
    /// Confidence of the cost estimate.
    #[serde(default = "one", deserialize_with = "lenient_f64")]
    pub cost_confidence: f64,
    /// Structured agent feedback.
    #[serde(default)]
    pub agent_feedback: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    /// What the running attempt's instrument reported so far (`job.status` of a running
    /// sheet only; never stored nor in a state file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Box<LiveProgress>>,
    /// Ours: the rate limit a waiting sheet is parked on (`job.status` only; never stored
    /// nor in a state file): it runs again, without spending a retry, when the limit ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Box<RateLimitWait>>,
    /// Ours: the retry a sheet waits for after a failed attempt (`job.status` only; never
    /// stored nor in a state file): its status stays upstream's `pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_wait: Option<Box<RetryWait>>,
    /// Ours: when the retry this pending sheet waits for is due (Unix epoch seconds).
    /// Stored, so a restarted conductor waits out the rest of the backoff instead of running
    /// the retry at once; cleared by the sheet's next change. Absent when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<f64>,
    /// The remote job (a Slurm job) of the attempt in flight: recorded before the job is
    /// released to run and cleared in the same write that records the attempt's result, so
    /// a restarted conductor re-attaches to it instead of running the sheet again
    /// (docs/design/distributed.md). Not in upstream; absent when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_attempt: Option<Box<RemoteAttempt>>,
    /// Ours: the Slurm job (its id) of this pending sheet that `mozart pause` withdrew from
    /// Slurm's queue before it started; `mozart resume` submits the sheet again
    /// (`job.status` only; never stored nor in a state file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_withdrawn: Option<String>,
    /// Ours: where the sheet's worker + reviewer loop stands (docs/mochi.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Box<ReviewProgress>>,
}

/// Ours: the rate limit a sheet waits for (`SheetCheckpoint::rate_limit`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateLimitWait {
    /// The parked instrument.
    pub instrument: String,
    /// When the wait ends (Unix epoch seconds); `None` once it has ended and the sheet is
    /// about to run again.
    #[serde(default)]
    pub until: Option<f64>,
    /// Seconds left (0 once it has ended).
    #[serde(default)]
    pub seconds_left: f64,
    /// What the API or CLI said, and how the wait was chosen.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Ours: a job's newest failed attempts (`JobCheckpoint::recent_attempt_errors`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecentAttemptErrors {
    /// Newest first.
    pub errors: Vec<AttemptError>,
    /// Failed attempts the job has in all (`errors` holds the newest of them).
    pub total: u64,
}

/// Ours: one failed attempt of a sheet (`RecentAttemptErrors::errors`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptError {
    /// Sheet.
    pub sheet_num: u32,
    /// 1-based attempt.
    pub attempt_number: u32,
    /// When the attempt ended (ISO text).
    pub timestamp: Timestamp,
    /// E-code, or the error category when no code was recorded.
    #[serde(default)]
    pub error_code: Option<String>,
    /// Error category.
    #[serde(default)]
    pub error_category: Option<String>,
    /// The message.
    #[serde(default)]
    pub error_message: Option<String>,
    /// Instrument that ran the attempt.
    #[serde(default)]
    pub instrument: Option<String>,
}

/// Ours: the retry a sheet waits for (`SheetCheckpoint::retry_wait`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryWait {
    /// The attempt the retry will be (1-based, every mode counted).
    pub attempt: u32,
    /// The sheet's retry budget (`retry.max_retries`: normal attempts in all).
    pub max_retries: u32,
    /// How the retry runs: `normal`, `completion` or `healing`.
    #[serde(default)]
    pub mode: Option<String>,
    /// When the retry runs (Unix epoch seconds), when the conductor knows it.
    #[serde(default)]
    pub at: Option<f64>,
    /// Seconds left (0 once due).
    #[serde(default)]
    pub seconds_left: f64,
}

impl RetryWait {
    /// The wait in words, as `status` shows it: `retrying (attempt 2 of 3) in 12s`; in a
    /// paused job, which starts no retry whenever its backoff ends, `paused before its retry
    /// (attempt 2 of 3)`.
    pub fn describe(&self, paused: bool) -> String {
        let what = self.what();
        if paused {
            return format!("paused before its retry ({what})");
        }
        match self.at {
            Some(_) if self.seconds_left > 0.0 => {
                format!(
                    "retrying ({what}) in {}",
                    compact_seconds(self.seconds_left)
                )
            }
            Some(_) => format!("retrying ({what}) now"),
            None => format!("retrying ({what})"),
        }
    }

    /// Which attempt the retry is: `attempt 2 of 3`, `completion attempt 4`.
    fn what(&self) -> String {
        match self.mode.as_deref() {
            Some("completion") => format!("completion attempt {}", self.attempt),
            Some("healing") => format!("self-healing attempt {}", self.attempt),
            _ if self.attempt <= self.max_retries => {
                format!("attempt {} of {}", self.attempt, self.max_retries)
            }
            _ => format!("attempt {}", self.attempt),
        }
    }
}

impl RateLimitWait {
    /// The wait in words, as `mozart status --sheets` shows it: `waiting (rate limit, 2s
    /// left)`, `waiting (rate limit over, starting)` once it has ended.
    pub fn describe(&self) -> String {
        if self.seconds_left > 0.0 {
            format!(
                "waiting (rate limit, {} left)",
                compact_seconds(self.seconds_left)
            )
        } else {
            "waiting (rate limit over, starting)".to_string()
        }
    }
}

impl InstrumentHold {
    /// The hold in words, as `status`, `diagnose` and the dashboard show it: what holds
    /// which instrument, why, and for how long.
    pub fn describe(&self) -> String {
        let left = compact_seconds(self.seconds_left);
        let (kind, state) = (self.kind.as_str(), self.state.as_deref());
        let (instrument, reason) = (&self.instrument, &self.reason);
        match (kind, state, self.seconds_left > 0.0) {
            ("circuit_breaker", Some("half_open"), _) => format!(
                "circuit breaker half-open on {instrument}: one probe attempt decides whether it closes ({reason})"
            ),
            ("circuit_breaker", _, true) => format!(
                "circuit breaker open on {instrument} ({reason}); next probe attempt in {left}"
            ),
            ("circuit_breaker", _, false) => format!(
                "circuit breaker open on {instrument} ({reason}); a probe attempt goes out now"
            ),
            (_, _, true) => {
                format!("rate limit on {instrument} ({reason}); its sheets run again in {left}")
            }
            (_, _, false) => {
                format!("rate limit on {instrument} ({reason}); its sheets run again now")
            }
        }
    }
}

/// Whole seconds without zero parts: `1h 5m`, `2m 30s`, `45s`.
fn compact_seconds(seconds: f64) -> String {
    let total = if seconds.is_finite() && seconds > 0.0 {
        seconds.ceil() as u64
    } else {
        0
    };
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// Ours: a remote attempt in flight (`SheetCheckpoint::remote_attempt`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteAttempt {
    /// Placement that started it (`slurm`).
    pub placement: String,
    /// The scheduler's id (Slurm job id).
    pub remote_id: String,
    /// The attempt's directory of wrapper, output and exit files.
    pub dir: String,
    /// Submission time, Unix epoch seconds.
    pub submitted_at: f64,
    /// Attempt number it was submitted for.
    pub attempt_number: u32,
    /// The Slurm job name, unique to the job, sheet and attempt: recorded before `sbatch`
    /// runs, so a restarted conductor finds the job by name even when its id never came
    /// back (empty in records written before names were recorded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_name: String,
}

/// Ours: a reviewed sheet's loop (`SheetCheckpoint::review`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewProgress {
    /// Worker iterations the reviewer has judged so far.
    #[serde(default)]
    pub iteration: u32,
    /// Last verdict: `DONE` or `RETRY`.
    #[serde(default)]
    pub verdict: Option<String>,
    /// The reviewer's last feedback (empty after `DONE`).
    #[serde(default)]
    pub feedback: Option<String>,
    /// Every verdict, oldest first.
    #[serde(default)]
    pub history: Vec<ReviewVerdict>,
    /// The task's branch, when the sheet runs in its own worktree.
    #[serde(default)]
    pub branch: Option<String>,
    /// Where the result went (a PR URL, a file), once dispatched.
    #[serde(default)]
    pub dispatched: Option<String>,
    /// Iterations that belong to earlier runs (a resumed failed loop's fresh budget).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub budget_from: u32,
}

/// Ours: one reviewer verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewVerdict {
    /// Worker iteration judged (1-based).
    pub iteration: u32,
    /// `DONE` or `RETRY`.
    pub verdict: String,
    /// Feedback for the worker (empty after `DONE`).
    #[serde(default)]
    pub feedback: String,
}

/// Complete checkpoint of one job run (upstream `CheckpointState`, execution.md §8.1): as
/// `job.status` returns it, the JSON state file holds it and the conductor keeps it.
///
/// `Snapshot` is how the score (`config_snapshot`) is held: a JSON value in a document a
/// client reads (the default), text in the conductor's storage model (`mozart-state`'s
/// `CheckpointState`), which keeps a large score small; both write the same JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Without it, serde's derive would ask `Snapshot: Default` for the defaulted `Option`.
#[serde(bound(deserialize = "Snapshot: Deserialize<'de>"))]
pub struct JobCheckpoint<Snapshot = serde_json::Value> {
    /// Conductor job id.
    pub job_id: String,
    /// Score name.
    pub job_name: String,
    /// Hash of the score for change detection.
    #[serde(default)]
    pub config_hash: Option<String>,
    /// Full score as JSON, for resume without the file.
    #[serde(default)]
    pub config_snapshot: Option<Snapshot>,
    /// Score file path.
    #[serde(default)]
    pub config_path: Option<String>,
    /// Creation time.
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
    /// Last mutation time.
    #[serde(default = "Timestamp::now")]
    pub updated_at: Timestamp,
    /// Never set by upstream; kept for shape.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// When the job reached completed/failed.
    #[serde(default)]
    pub completed_at: Option<Timestamp>,
    /// Number of sheets (≥ 1).
    pub total_sheets: u32,
    /// High-water mark; never decreases.
    #[serde(default)]
    pub last_completed_sheet: u32,
    /// Sheet being processed.
    #[serde(default)]
    pub current_sheet: Option<u32>,
    /// Job status.
    #[serde(default)]
    pub status: JobStatus,
    /// Sheets by number (JSON keys are strings).
    #[serde(default)]
    pub sheets: SheetMap,
    /// Distinct instruments used.
    #[serde(default)]
    pub instruments_used: Vec<String>,
    /// Movement count for display.
    #[serde(default)]
    pub total_movements: Option<u32>,
    /// PID of the process running the job (the conductor in daemon mode).
    #[serde(default)]
    pub pid: Option<u32>,
    /// Job-level error.
    #[serde(default)]
    pub error_message: Option<String>,
    /// Incremented by every `mark_sheet_failed`.
    #[serde(default)]
    pub total_retry_count: u32,
    /// Rate-limit waits.
    #[serde(default)]
    pub rate_limit_waits: u32,
    /// Token quota waits.
    #[serde(default)]
    pub quota_waits: u32,
    /// ISO time to resume after a rate-limit pause.
    #[serde(default)]
    pub resume_at: Option<String>,
    /// Total input tokens.
    #[serde(default)]
    pub total_input_tokens: u64,
    /// Total output tokens.
    #[serde(default)]
    pub total_output_tokens: u64,
    /// Total estimated cost, USD.
    #[serde(default, deserialize_with = "lenient_f64")]
    pub total_estimated_cost: f64,
    /// Whether a cost limit paused the job.
    #[serde(default)]
    pub cost_limit_reached: bool,
    /// Worktree path.
    #[serde(default)]
    pub worktree_path: Option<String>,
    /// Worktree branch.
    #[serde(default)]
    pub worktree_branch: Option<String>,
    /// Whether the worktree is locked.
    #[serde(default)]
    pub worktree_locked: bool,
    /// Worktree base commit.
    #[serde(default)]
    pub worktree_base_commit: Option<String>,
    /// Isolation mode used.
    #[serde(default)]
    pub isolation_mode: Option<IsolationMode>,
    /// Whether isolation fell back to the workspace.
    #[serde(default)]
    pub isolation_fallback_used: bool,
    /// Parallel mode enabled.
    #[serde(default)]
    pub parallel_enabled: bool,
    /// Parallel limit.
    #[serde(default = "one_u32")]
    pub parallel_max_concurrent: u32,
    /// Parallel batches executed.
    #[serde(default)]
    pub parallel_batches_executed: u32,
    /// Sheets running now.
    #[serde(default)]
    pub sheets_in_progress: Vec<u32>,
    /// Synthesis results by batch id.
    #[serde(default)]
    pub synthesis_results: serde_json::Map<String, serde_json::Value>,
    /// Hook results: the registry's rows in daemon mode (conductor.md §19.5); a stored
    /// checkpoint has none (the registry keeps them) unless an upstream state file did.
    #[serde(default, deserialize_with = "lenient_hooks")]
    pub hook_results: Vec<HookResult>,
    /// Spec corpus hash.
    #[serde(default)]
    pub spec_corpus_hash: String,
    /// Circuit breaker transitions.
    #[serde(default)]
    pub circuit_breaker_history: Vec<CircuitBreakerChange>,
    /// The job's workspace: added by the conductor (`job.status`), absent in a state file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Ours: why a job that was accepted does not run yet — `waiting for a job slot
    /// (max_concurrent_jobs: N)` while it is queued (its `status` is then `pending`).
    /// Added by the conductor (`job.status`), absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_reason: Option<String>,
    /// Ours: the job is paused but this many sheets still run an attempt; it is `pausing`
    /// until they finish (their work and cost go on). Added by the conductor (`job.status`);
    /// `status` stays `paused`, the value upstream's CLI reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pausing: Option<u32>,
    /// Ours: the job completed and its `on_success` hooks are still running; a failing hook
    /// still turns it `failed`, so it has not ended yet (`mozart wait` waits). Added by the
    /// conductor (`job.status`); `status` stays `completed`, the value upstream's CLI reads.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hooks_running: bool,
    /// Ours (issue 22): holds on the instruments the job's unfinished sheets play — an open
    /// circuit breaker, a rate-limit park — with the reason and the time left. Added by the
    /// conductor (`job.status`), absent when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instrument_holds: Vec<InstrumentHold>,
    /// Ours: the job's newest failed attempts, over all sheets, from the registry's attempt
    /// history (the sheets keep only their last error). Added by the conductor
    /// (`job.status`), absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_attempt_errors: Option<RecentAttemptErrors>,
    /// Ours (issue 24): present when `sheets` holds only some of the job's sheets (or a
    /// client asked for a view): the counts of every sheet and how to page the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheets_view: Option<crate::sheet_view::SheetsView>,
}

/// Ours: a hold on an instrument (`JobCheckpoint::instrument_holds`): no sheet is sent to it
/// until the hold ends by itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstrumentHold {
    /// The held instrument.
    pub instrument: String,
    /// `circuit_breaker` or `rate_limit`.
    pub kind: String,
    /// For a breaker: `open` (nothing is sent until `until`) or `half_open` (one probe
    /// attempt is out; the others wait for its result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why: the failure that opened the breaker, or the API's / CLI's words about the limit.
    pub reason: String,
    /// When the hold ends (Unix epoch seconds), when known.
    #[serde(default)]
    pub until: Option<f64>,
    /// Seconds left (0 once it has ended or when not known).
    #[serde(default)]
    pub seconds_left: f64,
    /// Failures in a row on the instrument (breakers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<u32>,
}

impl SheetCheckpoint {
    /// A pending sheet with upstream's defaults.
    pub fn new(sheet_num: u32) -> Self {
        SheetCheckpoint {
            sheet_num,
            status: SheetStatus::Pending,
            started_at: None,
            completed_at: None,
            attempt_count: 0,
            exit_code: None,
            error_message: None,
            error_category: None,
            error_code: None,
            validation_passed: None,
            validation_details: None,
            instrument_name: None,
            instrument_model: None,
            movement: None,
            voice: None,
            exit_signal: None,
            exit_reason: None,
            execution_duration_seconds: None,
            completion_attempts: 0,
            healing_attempts: 0,
            passed_validations: Vec::new(),
            failed_validations: Vec::new(),
            last_pass_percentage: None,
            execution_mode: None,
            outcome_data: None,
            confidence_score: None,
            learned_patterns: Vec::new(),
            similar_outcomes_count: 0,
            success_without_retry: false,
            outcome_category: None,
            stdout_tail: None,
            live: None,
            rate_limit: None,
            retry_wait: None,
            retry_at: None,
            stderr_tail: None,
            output_truncated: false,
            prompt_metrics: None,
            preflight_warnings: Vec::new(),
            progress_snapshots: Vec::new(),
            last_activity_at: None,
            error_history: Vec::new(),
            instrument_fallback_history: Vec::new(),
            applied_patterns: Vec::new(),
            applied_pattern_ids: None,
            applied_pattern_descriptions: None,
            grounding_passed: None,
            grounding_confidence: None,
            grounding_guidance: None,
            input_tokens: None,
            output_tokens: None,
            estimated_cost: None,
            cost_confidence: 1.0,
            agent_feedback: None,
            remote_attempt: None,
            slurm_withdrawn: None,
            review: None,
        }
    }

    /// Whether the sheet runs now: in progress and not parked on a rate limit (a parked
    /// sheet keeps its stored `in_progress` until it runs again, but runs nothing).
    pub fn is_running(&self) -> bool {
        self.status == SheetStatus::InProgress && self.rate_limit.is_none()
    }

    /// The sheet's state in words, as `mozart status --sheets` shows it: what a waiting
    /// sheet waits for (`waiting (rate limit, 1m 37s left)`, `retrying (attempt 2 of 3) in
    /// 12s`), else [`SheetCheckpoint::display_status`]. `paused`: the job is paused (it
    /// starts no retry whenever the backoff ends).
    pub fn shown_state(&self, paused: bool) -> String {
        if let Some(wait) = &self.rate_limit {
            return wait.describe();
        }
        match &self.retry_wait {
            Some(retry) if self.status == SheetStatus::Pending => retry.describe(paused),
            _ => self.display_status().to_string(),
        }
    }

    /// `failed` for a completed sheet whose validations failed, else the sheet status
    /// (what every status view shows).
    pub fn display_status(&self) -> &'static str {
        if self.status == SheetStatus::Completed && self.validation_passed == Some(false) {
            "failed"
        } else {
            self.status.as_str()
        }
    }

    /// The sheet's numeric constraints (upstream's pydantic bounds): `sheet_num ≥ 1`, the
    /// three scores within 0..1. Every reader checks them on load.
    pub fn validate(&self) -> Result<(), String> {
        let sheet_num = self.sheet_num;
        if sheet_num < 1 {
            return Err("sheet_num must be >= 1".into());
        }
        for (name, v) in [
            ("confidence_score", self.confidence_score),
            ("grounding_confidence", self.grounding_confidence),
            ("cost_confidence", Some(self.cost_confidence)),
        ] {
            if let Some(v) = v.filter(|v| !(0.0..=1.0).contains(v)) {
                return Err(format!(
                    "sheet {sheet_num}: {name} must be within 0..1, got {v}"
                ));
            }
        }
        Ok(())
    }
}

impl<S> JobCheckpoint<S> {
    /// Lowest cost confidence among the sheets, else 1.0. Upstream counts only sheets with
    /// a cost above 0; ours also counts a sheet whose cost is unknown (0.0: it reported no
    /// cost and no tokens), so that a job of such sheets is not "$0.00, certain" (issue 22).
    /// A sheet that never ran keeps 1.0. Every surface (status, dashboard, MCP) uses this.
    pub fn cost_confidence(&self) -> f64 {
        self.sheets
            .values()
            .filter(|s| s.estimated_cost.is_some_and(|c| c > 0.0) || s.cost_confidence == 0.0)
            .map(|s| s.cost_confidence)
            .fold(1.0, f64::min)
    }

    /// Ours: sheets still running while the job is paused (`None` unless it is pausing).
    pub fn pausing_sheets(&self) -> Option<u32> {
        self.pausing
            .filter(|n| *n > 0 && self.status == JobStatus::Paused)
    }

    /// The status as a person or a script should read it: `queued` while the job waits for
    /// a job slot (the checkpoint says `pending`: upstream's has no queued state), `pausing`
    /// while a paused job's sheets still run, else the checkpoint's `status`.
    pub fn shown_status(&self) -> &'static str {
        if self.status == JobStatus::Pending && self.waiting_reason.is_some() {
            "queued"
        } else if self.pausing_sheets().is_some() {
            "pausing"
        } else {
            self.status.as_str()
        }
    }

    /// The constraints a reader checks before trusting a document as a checkpoint:
    /// `total_sheets ≥ 1`, each sheet's key equals its `sheet_num`, scores within 0..1.
    pub fn check(&self) -> Result<(), String> {
        if self.total_sheets < 1 {
            return Err("total_sheets must be >= 1".into());
        }
        for (key, sheet) in self.sheets.iter() {
            if *key != sheet.sheet_num {
                return Err(format!(
                    "sheets key {key} holds sheet_num {}",
                    sheet.sheet_num
                ));
            }
            sheet.validate()?;
        }
        Ok(())
    }
}

/// One `on_success` hook's result as `job.status` shows it (upstream's `hook_results_json`
/// element, conductor.md §19.5). `output` is present (possibly null) for command hooks and
/// absent otherwise; keys this port does not write (from an upstream state file) are kept
/// in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HookResult {
    /// `run_job`, `run_command`, `run_script`.
    #[serde(default)]
    pub hook_type: String,
    /// The hook's description (null when it has none).
    #[serde(default)]
    pub description: Option<String>,
    /// Whether it succeeded.
    #[serde(default)]
    pub success: bool,
    /// Failure text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Exit code of a command hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Output tail: `Some(None)` is written as `null`, `None` leaves the key out.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Option<String>>,
    /// Id of the job a `run_job` hook submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chained_job_id: Option<String>,
    /// Any other keys (upstream's `hook_name`, `event`, `duration_seconds`, ...).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Reads `hook_results` leniently: an entry that is not a hook result (an upstream state
/// file's) is left out instead of failing the whole checkpoint.
fn lenient_hooks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<HookResult>, D::Error> {
    let raw: Vec<serde_json::Value> = Vec::deserialize(d)?;
    Ok(raw
        .into_iter()
        .filter_map(|h| serde_json::from_value(h).ok())
        .collect())
}

/// A key that is present deserializes to `Some`, even when its value is null.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The error type of an attempt from its E-code and its recorded category: the code's
/// ([`error_type_of`]), except that a code of the rate-limit class (E1xx) whose category says
/// it was not handled as one — an overload (HTTP 529 / 503, E103) retried with backoff is
/// `transient` — takes its category's type. (`mozart errors` called such an attempt
/// `rate_limit` though it was retried and spent an attempt.)
pub fn error_type_with(code: Option<&str>, category: Option<&str>) -> &'static str {
    let by_code = error_type_of(code.or(category));
    match category.map(|c| error_type_of(Some(c))) {
        Some(by_category) if by_code == "rate_limit" && by_category != "rate_limit" => by_category,
        _ => by_code,
    }
}

/// The error type (`transient` / `rate_limit` / `permanent`) of an E-code or error category,
/// as `status`, `errors` and the dashboard all show it.
pub fn error_type_of(code_or_category: Option<&str>) -> &'static str {
    let Some(text) = code_or_category else {
        return "permanent";
    };
    let lower = text.to_ascii_lowercase();
    let b = lower.as_bytes();
    if b.len() == 4 && b[0] == b'e' && b[1..].iter().all(u8::is_ascii_digit) {
        return match b[1] {
            b'0' => "transient",
            b'1' => "rate_limit",
            _ => "permanent",
        };
    }
    if lower.contains("rate") || lower.contains("limit") {
        "rate_limit"
    } else if matches!(
        lower.as_str(),
        "transient" | "timeout" | "network" | "signal"
    ) {
        "transient"
    } else {
        "permanent"
    }
}
