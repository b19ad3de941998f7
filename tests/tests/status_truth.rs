//! Status says what the job's state is (issue 23, "States that are not the state"):
//! cancel is not failure, and free instruments get no cost tip.

use crate::harness;

use harness::{submit_now, wait_status};
use mozart_tests::{sleepy_shell_score as score, stdout, TestEnv};

#[test]
fn cancelled_job_shows_never_run_sheets_as_not_run_not_failed() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("stopme", &score("stopme", 6, 3.0));
    submit_now(&env, &path);
    wait_status(&env, "stopme", 30.0, |d| d["status"] == "running");
    let out = env.mozart(&["cancel", "stopme"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = wait_status(&env, "stopme", 30.0, |d| d["status"] == "cancelled");

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
    submit_now(&env, &path);
    wait_status(&env, "free", 30.0, |d| d["status"] == "completed");
    let out = env.mozart(&["status", "free"]);
    let text = stdout(&out);
    assert!(!text.contains("cost_limits.enabled"), "{text}");

    // `run` words the tip differently ("Cost tracking is disabled … cost_limits: {enabled:").
    let out = env.mozart(&["run", path.to_str().unwrap(), "--dry-run"]);
    let text = stdout(&out);
    assert!(!text.contains("cost_limits"), "{text}");
    assert!(!text.contains("No cost limit is set"), "{text}");
}

/// A score on an AI CLI without cost limits: `run` said "Cost tracking is disabled … API
/// calls will not be monitored", yet `status` shows every sheet's cost; what is off is the
/// limit.
#[test]
fn run_says_costs_are_recorded_but_not_limited() {
    let env = TestEnv::new();
    let path = env.write_score(
        "paid",
        "name: paid\nworkspace: ./paid-ws\ninstrument: claude-code\nsheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"say hi\"\n",
    );
    let out = env.mozart(&["run", path.to_str().unwrap(), "--dry-run"]);
    let text = stdout(&out);
    assert!(
        text.contains("Note: No cost limit is set for this score: its API costs are recorded"),
        "{text}"
    );
    assert!(!text.contains("not be monitored"), "{text}");
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
    submit_now(&env, &path);
    let doc = wait_status(&env, "skippy", 30.0, |d| d["status"] == "completed");
    assert_eq!(doc["sheets"]["2"]["status"], "skipped", "{doc:#}");
    assert_eq!(doc["progress"]["percent"], 100.0, "{doc:#}");
    assert_eq!(doc["progress"]["skipped"], 1, "{doc:#}");

    let text = stdout(&env.mozart(&["status", "skippy"]));
    assert!(text.contains("100%"), "{text}");
    assert!(text.contains("2 completed, 1 skipped"), "{text}");
}

#[test]
fn a_chain_that_fails_at_its_first_sheet_is_one_failure_not_an_open_breaker() {
    let env = TestEnv::new();
    // The built-in `shell` has no breaker at all (its failures are the score's commands'):
    // the same driver under another name, an instrument whose failures count.
    let shell = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/backends/profiles/shell.yaml"),
    )
    .expect("the shell profile");
    let runner = shell.replace("name: shell\n", "name: runner\n");
    std::fs::create_dir_all(env.home.join("instruments")).expect("instruments dir");
    std::fs::write(env.home.join("instruments/runner.yaml"), runner).expect("runner profile");
    env.start_conductor();
    // Sheet 1 fails; sheets 2..6 each wait for the one before, so they never run.
    let yaml = "name: chain\nworkspace: ./chain-ws\ninstrument: runner\n\
                pause_between_sheets_seconds: 0\nretry: {max_retries: 0}\n\
                sheet: {size: 1, total_items: 6}\n\
                prompt:\n  template: \"RUN: test {{ sheet_num }} != 1\"\n";
    let path = env.write_score("chain", yaml);
    submit_now(&env, &path);
    let doc = wait_status(&env, "chain", 30.0, |d| d["status"] == "failed");
    for n in 2..=6 {
        assert_eq!(doc["sheets"][n.to_string()]["attempt_count"], 0, "{doc:#}");
    }

    // One instrument failure: the inferred breaker is closed at 1, not OPEN at 6.
    let json = env.mozart(&["status", "chain", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(status["circuit_breaker"]["state"], "closed", "{status:#}");
    assert_eq!(
        status["circuit_breaker"]["consecutive_failures"], 1,
        "{status:#}"
    );
    let text = stdout(&env.mozart(&["status", "chain"]));
    assert!(!text.contains("OPEN"), "{text}");
    assert!(text.contains("Consecutive failures: 1"), "{text}");

    // The learning store counts the one sheet that ran, not the five that never did.
    let executions = || {
        let out = env.mozart(&["learning-stats", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        doc["executions"]["total"].as_u64().unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while executions() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The job's end writes its outcomes once more, after the per-sheet ones: let it land.
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(executions(), 1, "{}", env.log());
    let out = env.mozart(&["learning-stats", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["executions"]["success_without_retry_rate"], 0.0,
        "{doc:#}"
    );
}

/// A job that waited for a job slot started when it got one: its `timing.started_at` (and
/// the Started / Duration / Running for of `status`) is not its submission, which stays its
/// `created_at`; while it waits it has not started.
#[test]
fn a_queued_job_starts_when_it_gets_its_slot() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "max_concurrent_jobs: 1\n").unwrap();
    env.start_conductor();
    let gated = |name: &str, run: &str| {
        env.write_score(
            name,
            &format!(
                "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
                 sheet: {{size: 1, total_items: 1}}\nprompt: {{template: \"RUN: {run}\"}}\n"
            ),
        )
    };
    let gate = env.work.join("go");
    let first = gated(
        "holder",
        &format!("while [ ! -f {} ]; do sleep 0.1; done", gate.display()),
    );
    submit_now(&env, &first);
    wait_status(&env, "holder", 30.0, |d| d["status"] == "running");
    submit_now(&env, &gated("waiter", "true"));
    let doc = wait_status(&env, "waiter", 30.0, |d| d["status"] == "queued");
    assert_eq!(
        doc["timing"]["started_at"],
        serde_json::Value::Null,
        "{doc:#}"
    );
    let text = stdout(&env.mozart(&["status", "waiter"]));
    assert!(!text.contains("Started:"), "{text}");
    // The wait is seconds long, whatever the machine's speed.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    std::fs::write(&gate, "").unwrap();
    let holder = wait_status(&env, "holder", 30.0, |d| d["status"] == "completed");
    let waiter = wait_status(&env, "waiter", 30.0, |d| d["status"] == "completed");
    let at = |doc: &serde_json::Value, key: &str| {
        mozart_ipc::time::parse_iso8601(doc["timing"][key].as_str().unwrap_or_default())
            .unwrap_or_else(|| panic!("timing.{key}: {doc:#}"))
    };
    // It ran after the job holding the slot ended, not from its submission.
    assert!(
        at(&waiter, "started_at") >= at(&holder, "completed_at"),
        "{waiter:#}\n{holder:#}"
    );
    assert!(
        at(&waiter, "created_at") < at(&holder, "completed_at"),
        "{waiter:#}"
    );
}
