//! Results captured from the conductor as it was before the wire types existed (raw
//! `result` text of each method, jobs run by the shell instrument: one completed with two
//! `run_command` hooks, one failed after retries, one running for the observer events;
//! `*_after_restart` were answered from the registry; the monitoring and learning results
//! after three runs of each). Each parses into its ipc type and
//! serialises back to the same text, so the types describe exactly what was on the wire.
#![allow(clippy::unwrap_used)]

use mozart_ipc::status::{
    DiagnoseResult, ErrorsResult, HistoryResult, JobList, JobListEntry, JobStatusResult,
    ObserverEventsResult, PatternsResult, RecoverResult,
};
use mozart_ipc::types::{
    CancelResult, ClearRateLimitsResult, ClearResult, DaemonStatus, EventsResult, HealthResult,
    HelloResult, JobResponse, JobResponseStatus, PauseResult, RateLimitsResult, ReadyResult,
    ShutdownResult, TopResult, Unavailable,
};
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
    let lenient: JobList = round_trip("job_list_after_restart");
    assert_eq!(lenient.0, stored);
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

// Captured from the conductor at d1829d3 (shell-instrument jobs: `slow` submitted, paused
// and resumed, `other` modified while running then cancelled, `nope` unknown), the answers
// the operator commands read.

#[test]
fn job_control_results_round_trip() {
    let accepted: JobResponse = round_trip("job_submit_accepted");
    assert_eq!(accepted.status, JobResponseStatus::Accepted);
    for name in [
        "job_submit_rejected",
        "job_submit_rejected_duplicate",
        "job_resume_rejected",
        "job_modify_rejected",
    ] {
        let rejected: JobResponse = round_trip(name);
        assert_eq!(rejected.status, JobResponseStatus::Rejected, "{name}");
        assert!(rejected.message.is_some(), "{name}");
    }
    let resumed: JobResponse = round_trip("job_resume_accepted");
    assert_eq!(resumed.message.as_deref(), Some("Job resume queued"));
    let modified: JobResponse = round_trip("job_modify_accepted");
    assert_eq!(modified.status, JobResponseStatus::Accepted);

    let paused: PauseResult = round_trip("job_pause");
    assert!(paused.paused && paused.error.is_none());
    let refused: PauseResult = round_trip("job_pause_failed");
    assert_eq!(refused.error.as_deref(), Some("Job 'nope' not found"));
    let cancelled: CancelResult = round_trip("job_cancel");
    assert!(cancelled.cancelled);
    let unknown: CancelResult = round_trip("job_cancel_false");
    assert!(!unknown.cancelled);
    let cleared: ClearResult = round_trip("job_clear");
    assert_eq!(cleared.deleted, 2);
}

#[test]
fn conductor_results_round_trip() {
    let health: HealthResult = round_trip("daemon_health");
    assert_eq!(health.status, "ok");
    let ready: ReadyResult = round_trip("daemon_ready");
    assert!(ready.is_ready());
    let status: DaemonStatus = round_trip("daemon_status");
    assert_eq!(status.jobs_by_status.get("running"), Some(&2));
    let hello: HelloResult = round_trip("daemon_hello");
    assert_eq!(hello.protocol_version, mozart_ipc::PROTOCOL_VERSION);
    let limits: RateLimitsResult = round_trip("daemon_rate_limits");
    assert!(limits.backends.is_empty());
    let all: ClearRateLimitsResult = round_trip("daemon_clear_rate_limits");
    assert_eq!(all.instrument, None);
    let one: ClearRateLimitsResult = round_trip("daemon_clear_rate_limits_instrument");
    assert_eq!(one.instrument.as_deref(), Some("claude-code"));
    let shutdown: ShutdownResult = round_trip("daemon_shutdown");
    assert!(shutdown.shutting_down);
}
