//! Plain records stored in the registry: jobs, attempts, hook results, rate limits.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::time::epoch_now;

/// Status of a conductor-managed job (conductor.md §6.1); distinct from the checkpoint's
/// [`crate::checkpoint::JobStatus`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DaemonJobStatus {
    /// Accepted, waiting for a slot.
    #[default]
    Queued,
    /// Executing.
    Running,
    /// Finished successfully.
    Completed,
    /// Paused (not active, not terminal).
    Paused,
    /// Finished unsuccessfully.
    Failed,
    /// Cancelled by the user.
    Cancelled,
    /// Dormant queue under backpressure.
    Pending,
}

impl DaemonJobStatus {
    /// Every status, for iteration.
    pub const ALL: [DaemonJobStatus; 7] = [
        DaemonJobStatus::Queued,
        DaemonJobStatus::Running,
        DaemonJobStatus::Completed,
        DaemonJobStatus::Paused,
        DaemonJobStatus::Failed,
        DaemonJobStatus::Cancelled,
        DaemonJobStatus::Pending,
    ];

    /// The lowercase wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            DaemonJobStatus::Queued => "queued",
            DaemonJobStatus::Running => "running",
            DaemonJobStatus::Completed => "completed",
            DaemonJobStatus::Paused => "paused",
            DaemonJobStatus::Failed => "failed",
            DaemonJobStatus::Cancelled => "cancelled",
            DaemonJobStatus::Pending => "pending",
        }
    }

    /// Parses the wire string.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// `queued` or `running` — the registry's "active" (orphans after a restart, §11.1).
    pub fn is_active(self) -> bool {
        matches!(self, DaemonJobStatus::Queued | DaemonJobStatus::Running)
    }

    /// `completed`, `failed` or `cancelled`; `paused` is neither active nor terminal.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            DaemonJobStatus::Completed | DaemonJobStatus::Failed | DaemonJobStatus::Cancelled
        )
    }
}

impl std::fmt::Display for DaemonJobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One job's registry row, without the heavy parts (score text, checkpoint).
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    /// Job id (the score file stem, conductor.md §6.3).
    pub job_id: String,
    /// Score file path.
    pub config_path: String,
    /// Workspace directory.
    pub workspace: String,
    /// Status.
    pub status: DaemonJobStatus,
    /// Process running the job, if any.
    pub pid: Option<u32>,
    /// Submission time (epoch seconds).
    pub submitted_at: f64,
    /// When it last went `running`.
    pub started_at: Option<f64>,
    /// When it reached a terminal status.
    pub completed_at: Option<f64>,
    /// Last write to this row.
    pub updated_at: f64,
    /// Job-level error message.
    pub error_message: Option<String>,
    /// Internal error detail for diagnostics.
    pub error_traceback: Option<String>,
    /// Sheet in progress, for listings.
    pub current_sheet: Option<u32>,
    /// Sheet count, for listings.
    pub total_sheets: Option<u32>,
    /// Last progress event.
    pub last_event_at: Option<f64>,
    /// Job log file.
    pub log_path: Option<String>,
    /// Completion snapshot directory.
    pub snapshot_path: Option<String>,
    /// Concert this job belongs to.
    pub concert_id: Option<String>,
    /// Depth in its concert chain (0 for a user submission).
    pub chain_depth: Option<u32>,
    /// The job whose hook submitted this one.
    pub parent_job_id: Option<String>,
    /// The score's `concert:` block as JSON.
    pub concert_config: Option<Value>,
    /// The score's `on_success` hooks as a JSON array.
    pub hook_config: Option<Value>,
    /// Whether this run transitioned at least one sheet to completed (zero-work guard,
    /// conductor.md §19.1).
    pub completed_new_work: bool,
    /// Submission options (`fresh`, `start_sheet`, ...), owned by the conductor.
    pub options: Map<String, Value>,
}

impl JobRecord {
    /// A freshly submitted job: `queued`, submitted now, everything else empty.
    pub fn new(
        job_id: impl Into<String>,
        config_path: impl Into<String>,
        workspace: impl Into<String>,
    ) -> Self {
        let now = epoch_now();
        JobRecord {
            job_id: job_id.into(),
            config_path: config_path.into(),
            workspace: workspace.into(),
            status: DaemonJobStatus::Queued,
            pid: None,
            submitted_at: now,
            started_at: None,
            completed_at: None,
            updated_at: now,
            error_message: None,
            error_traceback: None,
            current_sheet: None,
            total_sheets: None,
            last_event_at: None,
            log_path: None,
            snapshot_path: None,
            concert_id: None,
            chain_depth: None,
            parent_job_id: None,
            concert_config: None,
            hook_config: None,
            completed_new_work: false,
            options: Map::new(),
        }
    }
}

/// The submitted score, stored once per submission (not rewritten on transitions).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobScore {
    /// The score file's text as submitted.
    pub yaml: Option<String>,
    /// The validated score as JSON (upstream's `config_snapshot`).
    pub snapshot: Option<crate::ConfigSnapshot>,
}

/// Which jobs `delete_jobs` removes (conductor.md §6.12). Active jobs (`queued`,
/// `running`) are never deleted whatever the filter says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeleteFilter {
    /// Statuses to delete; `None` or empty means completed, failed, cancelled.
    pub statuses: Option<Vec<DaemonJobStatus>>,
    /// Only these ids; `Some(vec![])` deletes nothing (upstream produced invalid SQL).
    pub job_ids: Option<Vec<String>>,
    /// Only jobs submitted at least this long ago.
    pub older_than_seconds: Option<f64>,
}

/// One execution attempt of a sheet, for `mozart errors` / `mozart history`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttemptRecord {
    /// Row id (assigned on insert; ignored by `record_attempt`).
    pub id: i64,
    /// Job.
    pub job_id: String,
    /// Sheet.
    pub sheet_num: u32,
    /// 1-based attempt number.
    pub attempt_num: u32,
    /// `normal`, `completion`, `healing`.
    pub mode: String,
    /// `success`, `failed`, `rate_limited`, `validation_failed`, `cancelled`, ...
    pub outcome: String,
    /// Instrument used.
    pub instrument: Option<String>,
    /// E-code.
    pub error_code: Option<String>,
    /// Error category.
    pub error_category: Option<String>,
    /// Error message.
    pub error_message: Option<String>,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Duration.
    pub duration_seconds: Option<f64>,
    /// Cost, USD.
    pub cost_usd: Option<f64>,
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Prompt sent (may be truncated by the caller).
    pub prompt: Option<String>,
    /// Output tail.
    pub output: Option<String>,
    /// When it ran (epoch seconds).
    pub executed_at: f64,
}

/// One sheet's failed attempts, as `job.errors` lists them: the newest ones, oldest first,
/// and how many older ones were left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SheetAttemptErrors {
    /// Sheet.
    pub sheet_num: u32,
    /// Its failed attempts (those that recorded an error), oldest first; `prompt` is not
    /// read and `output` holds at most the last [`ERROR_OUTPUT_TAIL_CHARS`] characters.
    pub attempts: Vec<AttemptRecord>,
    /// Older failed attempts not in `attempts` (over the per-sheet cap).
    pub omitted: u64,
}

/// Characters of an attempt's output `Registry::attempt_errors` returns (the end of it).
pub const ERROR_OUTPUT_TAIL_CHARS: usize = 500;

/// Result of one `on_success` hook (conductor.md §19.5).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookResultRecord {
    /// Position of the hook in the score's `on_success` list.
    pub hook_index: u32,
    /// `run_job`, `run_command`, `run_script`.
    pub hook_type: String,
    /// The hook's description.
    pub description: Option<String>,
    /// Whether it succeeded.
    pub success: bool,
    /// Output tail.
    pub output: Option<String>,
    /// Failure text.
    pub error_message: Option<String>,
    /// Exit code of a command hook.
    pub exit_code: Option<i32>,
    /// Id of the job a `run_job` hook submitted.
    pub chained_job_id: Option<String>,
    /// Start time (epoch seconds).
    pub started_at: Option<f64>,
    /// End time (epoch seconds).
    pub finished_at: Option<f64>,
    /// Which hook it was (a short hash of its type and command or `job_path`): a result
    /// counts for a hook of an edited score only when this matches. `None` in rows an older
    /// build wrote (they count for the hook at their position).
    pub fingerprint: Option<String>,
}

/// A persisted instrument rate limit (architecture invariant 2: a restart must not
/// stampede a rate-limited instrument).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimitRecord {
    /// Instrument (or backend) name.
    pub instrument: String,
    /// Parked until (epoch seconds).
    pub until: f64,
    /// Why (parsed message).
    pub reason: Option<String>,
    /// When recorded.
    pub recorded_at: f64,
    /// Rate limits in a row this wait belongs to (the probe schedule's step); 0 in rows
    /// an older build wrote.
    pub streak: u32,
}
