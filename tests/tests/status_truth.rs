//! Status says what the job's state is (issue 23, "States that are not the state"):
//! cancel is not failure, and free instruments get no cost tip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use mozart_tests::{sleepy_shell_score as score, stdout, TestEnv};
use serde_json::{json, Value};

/// Submit through the protocol directly, so these tests do not depend on `mozart run`.
fn submit(env: &TestEnv, path: &Path) -> Value {
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    client
        .call_value(
            "job.submit",
            json!({"config_path": path.display().to_string()}),
        )
        .unwrap()
}

fn status_json(env: &TestEnv, id: &str) -> Value {
    let out = env.mozart(&["status", id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "status {id}: {}", stdout(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status {id} --json is JSON: {e}: {}", stdout(&out)))
}

/// Poll `mozart status <id> --json` until `pred` holds (or panic after `secs`).
fn wait_for(env: &TestEnv, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let doc = status_json(env, id);
        if pred(&doc) {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting on {id}; last status: {doc:#}\nlog:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn cancelled_job_shows_never_run_sheets_as_not_run_not_failed() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("stopme", &score("stopme", 6, 3.0));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    wait_for(&env, "stopme", 30, |d| d["status"] == "running");
    let out = env.mozart(&["cancel", "stopme"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = wait_for(&env, "stopme", 30, |d| d["status"] == "cancelled");

    let sheets = doc["sheets"].as_object().expect("sheets map");
    let failed: Vec<_> = sheets
        .iter()
        .filter(|(_, s)| s["status"] == "failed")
        .map(|(n, _)| n.clone())
        .collect();
    assert!(failed.is_empty(), "cancel is not failure: {doc:#}");
    // Sheets 3..6 never started: no attempt counted for them.
    for n in 3..=6 {
        let s = &sheets[&n.to_string()];
        assert_eq!(s["status"], "pending", "sheet {n}: {doc:#}");
        assert_eq!(s["attempt_count"], 0, "sheet {n}: {doc:#}");
    }
    assert!(
        doc["recent_errors"].as_array().is_none_or(|e| e.is_empty()),
        "no fake errors: {doc:#}"
    );

    let out = env.mozart(&["status", "stopme"]);
    let text = stdout(&out);
    assert!(!text.contains("E999"), "{text}");
    assert!(!text.contains("Circuit Breaker"), "{text}");
    assert!(!text.contains("OPEN"), "{text}");
}

#[test]
fn shell_score_gets_no_cost_limit_tip() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("free", &score("free", 1, 0.0));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    wait_for(&env, "free", 30, |d| d["status"] == "completed");
    let out = env.mozart(&["status", "free"]);
    let text = stdout(&out);
    assert!(!text.contains("cost_limits.enabled"), "{text}");

    let out = env.mozart(&["run", path.to_str().unwrap(), "--dry-run"]);
    let text = stdout(&out);
    assert!(!text.contains("cost_limits.enabled"), "{text}");
}

#[test]
fn a_skipped_sheet_counts_as_done_for_progress() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = r#"name: skippy
workspace: ./skippy-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: 3
  skip_when_command:
    2:
      command: 'true'
      description: "Nothing to do"
prompt:
  template: |
    RUN: echo done
"#;
    let path = env.write_score("skippy", yaml);
    assert_eq!(submit(&env, &path)["status"], "accepted");
    let doc = wait_for(&env, "skippy", 30, |d| d["status"] == "completed");
    assert_eq!(doc["sheets"]["2"]["status"], "skipped", "{doc:#}");
    assert_eq!(doc["progress"]["percent"], 100.0, "{doc:#}");
    assert_eq!(doc["progress"]["skipped"], 1, "{doc:#}");

    let text = stdout(&env.mozart(&["status", "skippy"]));
    assert!(text.contains("100%"), "{text}");
    assert!(text.contains("2 completed, 1 skipped"), "{text}");
}
