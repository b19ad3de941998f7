//! Fixtures for tests of the error records, shared with the CLI's `errors` tests (feature
//! `test-support`, which only dev-dependencies turn on; not part of the library's API).

#![allow(clippy::unwrap_used)]

use mozart_ipc::checkpoint::{JobCheckpoint, SheetCheckpoint, SheetStatus};
use mozart_ipc::status::JobStatusResult;
use mozart_ipc::time::Timestamp;
use serde_json::{json, Value};

/// A `job.status` answer that is a checkpoint, read as a client reads it.
pub fn checkpoint(value: Value) -> JobCheckpoint {
    match JobStatusResult::from_value(value).unwrap() {
        JobStatusResult::Checkpoint(state) => *state,
        JobStatusResult::Record(_) => panic!("not a checkpoint"),
    }
}

/// A failed job `j` holding `sheets`, read back as a client reads `job.status`.
pub fn job_with(sheets: Vec<SheetCheckpoint>) -> JobCheckpoint {
    let mut v = json!({
        "job_id": "j", "job_name": "j", "total_sheets": sheets.len(),
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "status": "failed", "sheets": {}
    });
    for s in &sheets {
        v["sheets"][s.sheet_num.to_string()] = serde_json::to_value(s).unwrap();
    }
    checkpoint(v)
}

/// Sheet `num`, failed after two attempts with exit code 3 at 10:00:05, with no error
/// history (its error record is the synthetic one).
pub fn failed_sheet(num: u32, message: &str, code: Option<&str>) -> SheetCheckpoint {
    let mut s = SheetCheckpoint::new(num);
    s.status = SheetStatus::Failed;
    s.error_message = Some(message.into());
    s.error_code = code.map(str::to_string);
    s.attempt_count = 2;
    s.exit_code = Some(3);
    s.completed_at = Some(Timestamp::from_raw("2026-01-01T10:00:05Z"));
    s
}
