//! The typed protocol of `mozart-ipc` is exactly what the conductor sends: the raw results
//! of `job.status`, `job.list`, `job.errors`, `job.diagnose`, `job.recover`, `job.history`
//! and `daemon.observer_events` for real jobs (one completed with a `run_command` hook, one
//! failed after retries), and of the job-control and `daemon.*` methods the operator
//! commands call, parse into the ipc types and serialise back to the same bytes.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use mozart_ipc::status::{
    DiagnoseResult, ErrorsResult, HistoryResult, JobList, JobListEntry, JobStatusResult,
    ObserverEventsResult, RecoverResult,
};
use mozart_ipc::types::{
    CancelResult, ClearRateLimitsResult, ClearResult, DaemonStatus, HealthResult, HelloResult,
    JobResponse, JobResponseStatus, PauseResult, RateLimitsResult, ReadyResult, ShutdownResult,
    TopResult,
};
use mozart_tests::TestEnv;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// The response line exactly as the conductor wrote it.
fn raw_line(env: &TestEnv, method: &str, params: Value) -> String {
    let mut stream = std::os::unix::net::UnixStream::connect(&env.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let line = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 1});
    stream.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).unwrap();
    reply
}

/// Parse `method`'s result as `T` and re-serialise it: the text must be what the conductor
/// sent. Returns the typed result.
fn round_trip<T: Serialize + DeserializeOwned>(env: &TestEnv, method: &str, params: Value) -> T {
    let line = raw_line(env, method, params);
    let response: Value = serde_json::from_str(&line).unwrap();
    assert!(response.get("error").is_none(), "{method}: {line}");
    let typed: T = serde_json::from_value(response["result"].clone())
        .unwrap_or_else(|e| panic!("{method}: {e}: {line}"));
    // Compared as text after one parse of the line: key order, null versus absent and
    // number forms must all match (serde_json's float parsing is not exact in its last
    // digit, so both sides share the one parse).
    let again = serde_json::to_string(&typed).unwrap();
    let sent = serde_json::to_string(&response["result"]).unwrap();
    assert_eq!(
        again, sent,
        "{method}: the typed result differs from what was sent"
    );
    typed
}

fn wait_for(env: &TestEnv, id: &str, status: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let doc = env.raw_call("job.status", json!({"job_id": id}));
        if doc["result"]["status"] == status {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never {status}: {doc}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn scores(env: &TestEnv) {
    let good = format!(
        "{}on_success:\n  - type: run_command\n    command: \"echo hooked\"\n",
        mozart_tests::sleepy_shell_score("good", 2, 0.0)
    );
    let bad = r#"name: bad
workspace: ./bad-ws
instrument: shell
pause_between_sheets_seconds: 0
retry: {max_retries: 2, base_delay_seconds: 0.1, jitter: false, max_completion_attempts: 0}
sheet:
  size: 1
  total_items: 2
prompt:
  template: |
    RUN: echo attempt
validations:
  - type: file_exists
    path: "{workspace}/never.txt"
    description: "the impossible file"
"#;
    for (name, yaml) in [("good", good.as_str()), ("bad", bad)] {
        let path = env.write_score(name, yaml);
        // `mozart run` may already report the bad score's failure (exit 1); either way it
        // is submitted.
        env.mozart(&["run", path.to_str().unwrap()]);
    }
    wait_for(env, "good", "completed");
    wait_for(env, "bad", "failed");
}

#[test]
fn every_job_reading_result_parses_into_the_ipc_types_and_back_byte_for_byte() {
    let env = TestEnv::new();
    env.start_conductor();
    scores(&env);

    // Hooks run after the job completes; wait for their row.
    let deadline = Instant::now() + Duration::from_secs(30);
    let good = loop {
        let status: JobStatusResult = round_trip(&env, "job.status", json!({"job_id": "good"}));
        let cp = status.checkpoint().expect("a checkpoint").clone();
        if !cp.hook_results.is_empty() || Instant::now() > deadline {
            break cp;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(good.hook_results.len(), 1, "{good:?}");
    assert!(good.hook_results[0].success);
    assert!(good.workspace.is_some());

    let bad: JobStatusResult = round_trip(&env, "job.status", json!({"job_id": "bad"}));
    let bad = bad.checkpoint().expect("a checkpoint");
    assert!(bad.sheets[&1].validation_details.is_some(), "{bad:?}");
    assert_eq!(bad.sheets[&1].display_status(), "failed");

    let list: Vec<JobListEntry> = round_trip(&env, "job.list", Value::Null);
    assert_eq!(list.len(), 2);
    for id in ["good", "bad"] {
        let errors: ErrorsResult = round_trip(&env, "job.errors", json!({"job_id": id}));
        assert!(errors.state.checkpoint().is_some());
        let diag: DiagnoseResult = round_trip(&env, "job.diagnose", json!({"job_id": id}));
        assert_eq!(diag.workspace.as_deref(), diag.state.workspace());
        let _: RecoverResult = round_trip(&env, "job.recover", json!({"job_id": id}));
        let history: HistoryResult =
            round_trip(&env, "job.history", json!({"job_id": id, "limit": 50}));
        assert!(!history.records.is_empty());
    }
    // Observer events are kept while a job runs.
    let path = env.write_score("slow", &mozart_tests::sleepy_shell_score("slow", 1, 3.0));
    env.mozart(&["run", path.to_str().unwrap()]);
    let observed: ObserverEventsResult = round_trip(
        &env,
        "daemon.observer_events",
        json!({"job_id": null, "limit": 50}),
    );
    assert!(
        observed
            .events
            .iter()
            .any(|e| e.event == "baton.job.registered"),
        "{observed:?}"
    );
    let _: JobStatusResult = round_trip(&env, "job.status", json!({"job_id": "slow"}));
    let _: Vec<JobListEntry> = round_trip(&env, "job.list", Value::Null);

    // After a restart the finished jobs are answered from the registry.
    wait_for(&env, "slow", "completed");
    env.stop_conductor();
    env.start_conductor();
    let list: Vec<JobListEntry> = round_trip(&env, "job.list", Value::Null);
    assert!(
        list.iter().any(|j| matches!(j, JobListEntry::Registry(_))),
        "{list:?}"
    );
    for id in ["good", "bad"] {
        let status: JobStatusResult = round_trip(&env, "job.status", json!({"job_id": id}));
        assert!(status.checkpoint().is_some());
    }
}

#[test]
fn job_control_and_conductor_results_parse_into_the_ipc_types_and_back_byte_for_byte() {
    let env = TestEnv::new();
    env.start_conductor();
    let slow = env.write_score("slow", &mozart_tests::sleepy_shell_score("slow", 3, 2.0));
    let slow = slow.to_str().unwrap();
    let submit = |path: &str| json!({"config_path": path, "workspace": null, "fresh": false});

    let health: HealthResult = round_trip(&env, "daemon.health", json!({}));
    assert_eq!(health.status, "ok");
    let _: ReadyResult = round_trip(&env, "daemon.ready", json!({}));
    let _: HelloResult = round_trip(&env, "daemon.hello", json!({}));
    let _: RateLimitsResult = round_trip(&env, "daemon.rate_limits", json!({}));
    let _: ClearRateLimitsResult = round_trip(
        &env,
        "daemon.clear_rate_limits",
        json!({"instrument": "claude-code"}),
    );
    let _: TopResult = round_trip(&env, "daemon.top", json!({}));

    let accepted: JobResponse = round_trip(&env, "job.submit", submit(slow));
    assert_eq!(accepted.status, JobResponseStatus::Accepted, "{accepted:?}");
    let twice: JobResponse = round_trip(&env, "job.submit", submit(slow));
    assert_eq!(twice.status, JobResponseStatus::Rejected, "{twice:?}");
    let missing: JobResponse = round_trip(&env, "job.submit", submit("/nowhere/x.yaml"));
    assert_eq!(missing.status, JobResponseStatus::Rejected);
    wait_for(&env, "slow", "running");
    let status: DaemonStatus = round_trip(&env, "daemon.status", json!({}));
    assert_eq!(status.running_jobs, 1);
    let _: JobList = round_trip(&env, "job.list", json!({}));

    let paused: PauseResult = round_trip(&env, "job.pause", json!({"job_id": "slow"}));
    assert!(paused.paused, "{paused:?}");
    let resumed: JobResponse = round_trip(
        &env,
        "job.resume",
        json!({"job_id": "slow", "workspace": null, "config_path": null, "no_reload": false}),
    );
    assert_eq!(resumed.status, JobResponseStatus::Accepted, "{resumed:?}");
    let modified: JobResponse = round_trip(
        &env,
        "job.modify",
        json!({"job_id": "slow", "config_path": slow}),
    );
    assert_eq!(modified.status, JobResponseStatus::Accepted, "{modified:?}");
    let refused: JobResponse = round_trip(&env, "job.modify", json!({"job_id": "slow"}));
    assert_eq!(refused.status, JobResponseStatus::Rejected);
    let again: PauseResult = round_trip(&env, "job.pause", json!({"job_id": "nope"}));
    assert!(!again.paused && again.error.is_some());
    let resumed: JobResponse = round_trip(&env, "job.resume", json!({"job_id": "nope"}));
    assert_eq!(resumed.status, JobResponseStatus::Rejected);

    // Whether the paused job still has a task to cancel depends on timing; the shape not.
    let _: CancelResult = round_trip(&env, "job.cancel", json!({"job_id": "slow"}));
    let unknown: CancelResult = round_trip(&env, "job.cancel", json!({"job_id": "nope"}));
    assert!(!unknown.cancelled);
    let cleared: ClearResult = round_trip(
        &env,
        "job.clear",
        json!({"statuses": ["completed"], "job_ids": ["nope"]}),
    );
    assert_eq!(cleared.deleted, 0);
    let shutdown: ShutdownResult = round_trip(&env, "daemon.shutdown", json!({"graceful": true}));
    assert!(shutdown.shutting_down);
}
