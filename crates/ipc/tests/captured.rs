//! Results captured from the conductor as it was before the wire types existed (raw
//! `result` text of each method, jobs run by the shell instrument: one completed with two
//! `run_command` hooks, one failed after retries, one running for the observer events;
//! `*_after_restart` were answered from the registry; the monitoring and learning results
//! after three runs of each). Each parses into its ipc type and
//! serialises back to the same text, so the types describe exactly what was on the wire.
#![allow(clippy::unwrap_used)]

use mozart_ipc::status::{
    DiagnoseResult, ErrorsResult, HistoryResult, JobListEntry, JobStatusResult,
    ObserverEventsResult, PatternsResult, RecoverResult,
};
use mozart_ipc::types::{EventsResult, TopResult, Unavailable};
use serde::de::DeserializeOwned;
use serde::Serialize;

fn round_trip<T: Serialize + DeserializeOwned>(name: &str) -> T {
    let path = format!("{}/tests/captured/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    // One parse shared by both sides: serde_json's float parsing may move the last digit,
    // which is no property of the types.
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        serde_json::to_string(&typed).unwrap(),
        serde_json::to_string(&value).unwrap(),
        "{name}"
    );
    typed
}

#[test]
fn job_status_checkpoints_round_trip() {
    for name in [
        "job_status_completed_with_hooks",
        "job_status_failed",
        "job_status_failed_after_restart",
    ] {
        let status: JobStatusResult = round_trip(name);
        let cp = status.checkpoint().expect("a checkpoint");
        assert!(cp.workspace.is_some(), "{name}");
    }
    let done: JobStatusResult = round_trip("job_status_completed_with_hooks");
    let hooks = &done.checkpoint().unwrap().hook_results;
    assert_eq!(hooks.len(), 2);
    assert_eq!(hooks[1].exit_code, Some(3));
    assert_eq!(
        hooks[1].output,
        Some(None),
        "a command hook's output is null, not absent"
    );
}

#[test]
fn job_lists_round_trip_with_live_and_registry_rows() {
    let live: Vec<JobListEntry> = round_trip("job_list");
    assert!(live.iter().all(|j| matches!(j, JobListEntry::Live(_))));
    let stored: Vec<JobListEntry> = round_trip("job_list_after_restart");
    assert!(stored
        .iter()
        .all(|j| matches!(j, JobListEntry::Registry(_))));
    assert_eq!(stored.len(), 3);
}

#[test]
fn the_other_job_methods_round_trip() {
    let errors: ErrorsResult = round_trip("job_errors");
    assert!(errors.state.checkpoint().is_some());
    let diagnose: DiagnoseResult = round_trip("job_diagnose");
    assert_eq!(diagnose.workspace.as_deref(), diagnose.state.workspace());
    let recover: RecoverResult = round_trip("job_recover");
    assert!(recover.dry_run && recover.sheet_num.is_none());
    let history: HistoryResult = round_trip("job_history");
    assert!(!history.records.is_empty());
    let observed: ObserverEventsResult = round_trip("observer_events");
    assert_eq!(observed.events.len(), 2);
}

#[test]
fn the_monitoring_and_learning_results_round_trip() {
    let patterns: PatternsResult = round_trip("learning_patterns");
    assert!(!patterns.patterns.is_empty());
    let top: TopResult = round_trip("daemon_top");
    assert!(matches!(top, TopResult::Snapshot(_)));
    let stream: Unavailable = round_trip("daemon_top_stream");
    assert_eq!(stream.error, "JSONL not configured");
    let events: EventsResult = round_trip("daemon_events");
    assert!(events.error.is_none());
}
