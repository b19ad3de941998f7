//! The storage model's JSON and the protocol's checkpoint type are one document: what
//! `mozart-state` writes must parse into `mozart_ipc::checkpoint::JobCheckpoint` and come
//! back byte for byte, so a field added to one and not the other fails here.
#![allow(clippy::unwrap_used)]

use mozart_ipc::checkpoint::JobCheckpoint;
use mozart_state::checkpoint::{CheckpointErrorRecord, ErrorType, SheetFailure};
use mozart_state::registry::{JobRecord, Registry};
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

/// What a registry and a JSON state file written by the code before the one checkpoint
/// model (issue 26) hold: the header row, the score, every sheet row and the state file of
/// a busy four-sheet job (`fixtures/old-rows.json`, written by `mozart-state` at 187cfd0).
fn old_rows() -> serde_json::Value {
    serde_json::from_str(include_str!("fixtures/old-rows.json")).unwrap()
}

/// The sheet rows of `job_id` as the fixture records them (every column but `job_id` and
/// `updated_at`).
fn sheet_rows(conn: &rusqlite::Connection, job_id: &str) -> Vec<serde_json::Value> {
    let mut stmt = conn
        .prepare("SELECT * FROM sheets WHERE job_id=?1 ORDER BY sheet_num")
        .unwrap();
    let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    stmt.query_map([job_id], |r| {
        let mut row = serde_json::Map::new();
        for (i, name) in names.iter().enumerate() {
            if name == "job_id" || name == "updated_at" {
                continue;
            }
            let value = match r.get::<_, rusqlite::types::Value>(i)? {
                rusqlite::types::Value::Null => serde_json::Value::Null,
                rusqlite::types::Value::Integer(n) => n.into(),
                rusqlite::types::Value::Real(f) => f.into(),
                rusqlite::types::Value::Text(t) => t.into(),
                rusqlite::types::Value::Blob(_) => panic!("no sheet column is a blob"),
            };
            row.insert(name.clone(), value);
        }
        Ok(serde_json::Value::Object(row))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Registries on users' disks keep loading: rows written before the one model come back
/// as the same checkpoint, and saving it again writes the same rows, byte for byte.
#[test]
fn registry_rows_written_before_the_one_model_load_and_save_unchanged() {
    let old = old_rows();
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::open(&dir.path().join("registry.db")).unwrap();
    reg.create_job(&JobRecord::new("old-rows", "/s/old-rows.yaml", "/ws"))
        .unwrap();
    let conn = rusqlite::Connection::open(reg.path()).unwrap();
    conn.execute(
        "UPDATE jobs SET checkpoint_json=?1 WHERE job_id='old-rows'",
        [old["header"].as_str().unwrap()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO job_scores (job_id, config_snapshot_json) VALUES ('old-rows', ?1)",
        [old["score"].as_str().unwrap()],
    )
    .unwrap();
    for row in old["sheets"].as_array().unwrap() {
        let row = row.as_object().unwrap();
        let columns: Vec<&str> = row.keys().map(String::as_str).collect();
        let marks: Vec<String> = (2..=row.len() + 1).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "INSERT INTO sheets (job_id, {}, updated_at) VALUES (?1, {}, 0)",
            columns.join(", "),
            marks.join(", ")
        );
        let mut values: Vec<rusqlite::types::Value> = vec!["old-rows".to_string().into()];
        values.extend(row.values().map(|v| match v {
            serde_json::Value::Null => rusqlite::types::Value::Null,
            serde_json::Value::String(s) => s.clone().into(),
            serde_json::Value::Number(n) if n.is_i64() => n.as_i64().unwrap().into(),
            serde_json::Value::Number(n) => n.as_f64().unwrap().into(),
            other => panic!("unexpected column value {other}"),
        }));
        conn.execute(&sql, rusqlite::params_from_iter(values))
            .unwrap();
    }

    let cp = reg.load_checkpoint("old-rows").unwrap().unwrap();
    assert_eq!(
        cp.to_json_pretty().unwrap(),
        old["document"].as_str().unwrap(),
        "the checkpoint the old code saved"
    );
    assert_eq!(cp.sheets.len(), 4);
    assert!(cp.sheets[&1].review.is_some() && cp.sheets[&3].remote_attempt.is_some());

    reg.save_checkpoint(&cp).unwrap();
    let header: String = conn
        .query_row(
            "SELECT checkpoint_json FROM jobs WHERE job_id='old-rows'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(header, old["header"].as_str().unwrap(), "header row");
    assert_eq!(
        serde_json::Value::Array(sheet_rows(&conn, "old-rows")),
        old["sheets"],
        "sheet rows"
    );
}

/// JSON state files on users' disks keep loading, and a save writes the same file.
#[test]
fn a_state_file_written_before_the_one_model_loads_and_saves_unchanged() {
    let old = old_rows();
    let text = old["state_file"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old-rows.json");
    std::fs::write(&path, text).unwrap();
    let cp = mozart_state::json_state::load(&path).unwrap().unwrap();
    assert_eq!(
        cp.hook_results.len(),
        1,
        "an upstream-shaped hook result is kept"
    );
    let again = dir.path().join("again.json");
    mozart_state::json_state::save(&again, &cp).unwrap();
    assert_eq!(std::fs::read_to_string(&again).unwrap(), text);
    // The wire reads it as the same document.
    let wire: JobCheckpoint = serde_json::from_str(text).unwrap();
    assert_eq!(serde_json::to_string_pretty(&wire).unwrap(), text);
}
