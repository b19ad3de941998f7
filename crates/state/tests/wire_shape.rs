//! The storage model's JSON and the protocol's checkpoint type are one document: what
//! `mozart-state` writes must parse into `mozart_ipc::checkpoint::JobCheckpoint` and come
//! back byte for byte, so a field added to one and not the other fails here.
#![allow(clippy::unwrap_used)]

use mozart_ipc::checkpoint::JobCheckpoint;
use mozart_state::checkpoint::{CheckpointErrorRecord, ErrorType, SheetFailure};
use mozart_state::{CheckpointState, ErrorCategory, Timestamp, ValidationDetail};

fn busy_checkpoint() -> CheckpointState {
    let mut cp = CheckpointState::new("wire", "Wire shape", 3);
    cp.config_snapshot = Some((&serde_json::json!({"name": "wire", "sheet": {"size": 1}})).into());
    cp.config_path = Some("/s/wire.yaml".into());
    cp.mark_sheet_started(1);
    cp.mark_sheet_completed(
        1,
        true,
        Some(vec![ValidationDetail {
            rule_type: Some("file_exists".into()),
            passed: true,
            confidence: Some(1.0),
            ..Default::default()
        }]),
        Some(1.5),
    );
    cp.mark_sheet_started(2);
    let sheet = cp.sheets.get_mut(&2).unwrap();
    sheet.add_error_to_history(CheckpointErrorRecord {
        timestamp: Timestamp::from_epoch(1_800_000_000.0),
        error_type: ErrorType::Transient,
        error_code: "E001".into(),
        error_message: "timed out".into(),
        attempt_number: 1,
        context: serde_json::Map::from_iter([("exit_code".into(), serde_json::Value::Null)]),
        stdout_tail: Some("partial".into()),
        stderr_tail: None,
        stack_trace: None,
    });
    sheet.healing_attempts = 1;
    sheet.estimated_cost = Some(0.25);
    sheet.cost_confidence = 0.5;
    cp.mark_sheet_failed(
        2,
        SheetFailure {
            message: "timed out".into(),
            category: Some(ErrorCategory::Timeout),
            exit_signal: Some(9),
            ..Default::default()
        },
    );
    cp.mark_sheet_skipped(3, Some("condition false"));
    cp.record_circuit_breaker_change("open", "failure_recorded", 5);
    cp.add_synthesis("b1", serde_json::json!({"status": "done"}));
    cp.total_estimated_cost = 0.25;
    cp
}

#[test]
fn the_state_file_json_round_trips_through_the_wire_type_byte_for_byte() {
    for cp in [CheckpointState::new("empty", "Empty", 1), busy_checkpoint()] {
        let stored = cp.to_json_pretty().unwrap();
        let wire: JobCheckpoint = serde_json::from_str(&stored).unwrap();
        assert_eq!(serde_json::to_string_pretty(&wire).unwrap(), stored);
        wire.check().unwrap();
    }
}
