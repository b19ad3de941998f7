//! Status enums of the baton (execution.md §2.1).

use serde::{Deserialize, Serialize};

/// Baton-level sheet status; values match upstream's `BatonSheetStatus` strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SheetStatus {
    /// Not yet run, or re-queued.
    Pending,
    /// Handed to a musician.
    Dispatched,
    /// Succeeded (terminal, satisfies dependents).
    Completed,
    /// Gave up (terminal).
    Failed,
    /// Skipped (terminal, satisfies dependents).
    Skipped,
    /// Cancelled by the user or a job timeout (terminal).
    Cancelled,
    /// Parked because its instrument is rate-limited.
    Waiting,
    /// Waiting for its retry timer.
    RetryScheduled,
    /// Awaiting an escalation decision.
    Fermata,
}

impl SheetStatus {
    /// Whether no later event may change this status (the "terminal guard", §2.4).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Skipped | Self::Cancelled
        )
    }

    /// Whether dependents may run after this sheet (§2.8: completed or skipped).
    pub fn satisfies_dependents(self) -> bool {
        matches!(self, Self::Completed | Self::Skipped)
    }

    /// The checkpoint status this maps to (§2.1 table): the one place the baton's statuses
    /// meet the checkpoint's.
    pub fn checkpoint_status(self) -> CheckpointSheetStatus {
        match self {
            Self::Pending | Self::RetryScheduled => CheckpointSheetStatus::Pending,
            Self::Dispatched | Self::Waiting | Self::Fermata => CheckpointSheetStatus::InProgress,
            Self::Completed => CheckpointSheetStatus::Completed,
            Self::Failed | Self::Cancelled => CheckpointSheetStatus::Failed,
            Self::Skipped => CheckpointSheetStatus::Skipped,
        }
    }

    /// The upstream string value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Dispatched => "dispatched",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Cancelled => "cancelled",
            Self::Waiting => "waiting",
            Self::RetryScheduled => "retry_scheduled",
            Self::Fermata => "fermata",
        }
    }
}

/// Checkpoint-level sheet status (§2.1, §8.2): the protocol's one sheet status, which
/// [`SheetStatus::checkpoint_status`] maps the baton's onto.
pub use mozart_ipc::checkpoint::SheetStatus as CheckpointSheetStatus;

/// Job status as the baton reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for a job slot (`max_concurrent_jobs`): nothing of it is dispatched yet.
    Queued,
    /// Sheets may be dispatched.
    Running,
    /// Paused by the user, a cost limit or a fermata; in-flight sheets finish.
    Paused,
    /// Every sheet completed or skipped.
    Completed,
    /// At least one sheet failed, or the job timed out.
    Failed,
    /// Cancelled by the user.
    Cancelled,
}

impl JobStatus {
    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// Mode of one attempt (§2.2 `AttemptMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptMode {
    /// First try or ordinary retry.
    Normal,
    /// Partial validation pass: finish the remaining work.
    Completion,
    /// Extra attempt granted by self-healing.
    Healing,
}

/// Per-instrument circuit breaker state (§2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitState {
    /// Normal operation.
    Closed,
    /// Too many consecutive failures: no dispatch until the recovery timer fires.
    Open,
    /// One probe attempt allowed.
    HalfOpen,
}
