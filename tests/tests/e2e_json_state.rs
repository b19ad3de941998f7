//! `state_backend: json`: the conductor keeps upstream's JSON state file in the workspace,
//! and `mozart status --workspace` reads it when the conductor is not running.

use std::time::{Duration, Instant};

use mozart_tests::{sleepy_shell_score, stdout, TestEnv};
use serde_json::{json, Value};

fn job_status(env: &TestEnv, id: &str) -> Value {
    env.raw_call("job.status", json!({"job_id": id}))["result"].clone()
}

#[test]
fn json_backend_scores_keep_a_state_file_in_the_workspace() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = sleepy_shell_score("jsonstate", 3, 0.3).replace(
        "pause_between_sheets_seconds: 0",
        "pause_between_sheets_seconds: 0\nstate_backend: json",
    );
    let score = env.write_score("jsonstate", &yaml);
    let ws = score.parent().unwrap().join("jsonstate-ws");
    let state_file = ws.join("jsonstate.json");
    let answer = env.raw_call(
        "job.submit",
        json!({"config_path": score.display().to_string()}),
    );
    assert_eq!(answer["result"]["status"], "accepted", "{answer}");

    // While it runs, the file follows the job (a sheet in progress or done).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut saw_running = false;
    loop {
        let status = job_status(&env, "jsonstate");
        if let Ok(text) = std::fs::read_to_string(&state_file) {
            let doc: Value = serde_json::from_str(&text).expect("the state file is JSON");
            if doc["status"] == "running" {
                saw_running = true;
            }
        }
        if status["status"] == "completed" {
            break;
        }
        assert!(Instant::now() < deadline, "job did not finish: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(saw_running, "the state file existed while the job ran");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!(doc["job_id"], "jsonstate");
    assert_eq!(doc["status"], "completed");
    assert_eq!(doc["last_completed_sheet"], 3);
    for n in ["1", "2", "3"] {
        assert_eq!(
            doc["sheets"][n]["status"], "completed",
            "sheet {n}: {doc:#}"
        );
    }
    assert!(
        !ws.join("jsonstate.json.tmp").exists(),
        "written atomically, no temporary file left"
    );

    // The conductor is gone: the workspace file still answers.
    env.stop_conductor();
    let out = env.mozart(&[
        "status",
        "jsonstate",
        "--json",
        "--workspace",
        &ws.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["status"], "completed", "{shown:#}");
}

#[test]
fn sqlite_backend_scores_write_no_state_file() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("plain", &sleepy_shell_score("plain", 1, 0.0));
    let ws = score.parent().unwrap().join("plain-ws");
    let answer = env.raw_call(
        "job.submit",
        json!({"config_path": score.display().to_string()}),
    );
    assert_eq!(answer["result"]["status"], "accepted", "{answer}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while job_status(&env, "plain")["status"] != "completed" {
        assert!(Instant::now() < deadline, "job did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ws.join("out-1.txt").exists());
    assert!(
        !ws.join("plain.json").exists(),
        "the registry alone holds the state"
    );
}
