//! The checkpoint model as the conductor stores it: `mozart_ipc::checkpoint`'s one model
//! (execution.md §8.1–8.4), with the score kept as text ([`ConfigSnapshot`]). Its JSON is
//! upstream's `model_dump(mode="json")` and the wire's, byte for byte.

pub use mozart_ipc::checkpoint::{
    process_is_gone, AppliedPattern, CheckpointErrorRecord, CircuitBreakerChange, ErrorCategory,
    ErrorType, ExecutionMode, ExitReason, FallbackRecord, IsolationMode, JobStatus,
    OutcomeCategory, OutcomeData, ProgressSnapshot, PromptMetrics, SheetFailure, SheetStatus,
    ValidationDetail, MAX_ERROR_HISTORY, MAX_OUTPUT_CAPTURE_BYTES, UNKNOWN_FAILURE_MESSAGE,
    ZOMBIE_ON_LOAD_TRIGGER,
};

use crate::ConfigSnapshot;

/// State of one sheet (execution.md §8.2): the protocol's sheet, stored as it is.
pub type SheetState = mozart_ipc::checkpoint::SheetCheckpoint;

/// Complete checkpoint of one job run (execution.md §8.1): the protocol's checkpoint with
/// the score held as text (a large fanned-out score is ~10× smaller than as a value tree).
pub type CheckpointState = mozart_ipc::checkpoint::JobCheckpoint<ConfigSnapshot>;

/// A remote attempt as the checkpoint records it (`SheetState::remote_attempt`): the wire
/// type.
pub use mozart_ipc::checkpoint::RemoteAttempt as RemoteAttemptRef;
