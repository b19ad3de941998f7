//! Mozart state: the checkpoint model (job and sheet states), the conductor's SQLite
//! registry, the JSON state file, and crash-safe file writes.
#![forbid(unsafe_code)]
// Tests may unwrap (common rules); library code may not.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod atomic;
pub mod checkpoint;
pub mod error;
pub mod json_state;
mod migrate;
pub mod registry;
pub mod review;
mod snapshot;
pub mod time;

/// A checkpoint's sheets by number (the protocol's container, re-exported).
pub mod sheet_map {
    pub use mozart_ipc::sheet_map::SheetMap;
}

pub use atomic::atomic_write;
pub use checkpoint::{
    CheckpointState, ErrorCategory, ExitReason, JobStatus, RemoteAttemptRef, SheetFailure,
    SheetState, SheetStatus, ValidationDetail,
};
pub use error::{damaged_registry_fix, not_a_registry_fix, StateError};
pub use migrate::SCHEMA_VERSION;
pub use registry::{
    AttemptRecord, DaemonJobStatus, DeleteFilter, HookResultRecord, JobRecord, JobScore,
    OrphanRecovery, RateLimitRecord, Registry, RunRecord, SheetAttemptErrors, StoredSheetFacts,
};
pub use snapshot::ConfigSnapshot;
pub use time::{epoch_now, Timestamp};
