//! `mozart modify JOB -c FILE --resume` on a running job does what upstream documents
//! (conductor.md §6.8, cli.md §3.4): pause, let the sheets in flight finish, adopt the new
//! score, resume — without the user running `mozart resume`.

use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};
use serde_json::{json, Value};

/// Sheets that each sleep, then append `<tag> <n>` to `log.txt` and write `out-<n>.txt`.
fn score(tag: &str, sleep: f64) -> String {
    format!(
        r#"name: modme
workspace: ./modme-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: 4
prompt:
  template: |
    RUN: sleep {sleep}
    RUN: echo "{tag} {{{{ sheet_num }}}}" >> "{{{{ workspace }}}}/log.txt"
    RUN: echo "{tag}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

fn status(env: &TestEnv, id: &str) -> Value {
    let out = env.mozart(&["status", id, "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn wait_for(env: &TestEnv, secs: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let doc = status(env, "modme");
        if pred(&doc) {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last status: {doc:#}\nlog:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sheet_status(doc: &Value, n: u32) -> &str {
    doc["sheets"][n.to_string()]["status"]
        .as_str()
        .unwrap_or("")
}

#[test]
fn modify_resume_on_a_running_job_lets_the_sheet_in_flight_finish_then_runs_the_new_score() {
    let env = TestEnv::new();
    env.start_conductor();
    let old = env.write_score("modme", &score("old", 1.5));
    let new = env.write_score("modme-v2", &score("new", 0.1));
    let out = env.mozart(&["run", old.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // Modify while sheet 2 is in flight.
    wait_for(&env, 30, "sheet 2 to start", |d| {
        sheet_status(d, 2) == "in_progress"
    });
    let out = env.mozart(&["modify", "modme", "-c", new.to_str().unwrap(), "--resume"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Job resume queued") || text.contains("Will resume with modme-v2.yaml"),
        "{text}"
    );

    // No `mozart resume` from the user: the conductor resumes on its own.
    wait_for(&env, 60, "the job to complete", |d| {
        d["status"] == "completed"
    });
    let ws = env.work.join("modme-ws");
    let log = std::fs::read_to_string(ws.join("log.txt")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    // Sheet 2 was not killed and re-run: it finished under the old score, exactly once,
    // and every later sheet ran once under the new one.
    assert_eq!(lines, ["old 1", "old 2", "new 3", "new 4"], "{log}");
    assert_eq!(
        std::fs::read_to_string(ws.join("out-4.txt"))
            .unwrap()
            .trim(),
        "new"
    );
}

#[test]
fn job_modify_on_a_running_job_answers_accepted_with_upstreams_message() {
    let env = TestEnv::new();
    env.start_conductor();
    let old = env.write_score("modme", &score("old", 1.5));
    let new = env.write_score("modme-v2", &score("new", 0.1));
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let r = client
        .call_value(
            "job.submit",
            json!({"config_path": old.display().to_string()}),
        )
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    wait_for(&env, 30, "sheet 1 to start", |d| {
        sheet_status(d, 1) == "in_progress"
    });

    // Upstream's client sends the path as typed; the conductor answers at once (§8.5).
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let r = client
        .call_value(
            "job.modify",
            json!({"job_id": "modme", "config_path": new.display().to_string(), "workspace": null}),
        )
        .unwrap();
    assert_eq!(
        r,
        json!({
            "job_id": "modme",
            "status": "accepted",
            "message": "Pause signal sent. Will resume with modme-v2.yaml when paused."
        })
    );
    wait_for(&env, 60, "the job to complete", |d| {
        d["status"] == "completed"
    });
    let log = std::fs::read_to_string(env.work.join("modme-ws/log.txt")).unwrap();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["old 1", "new 2", "new 3", "new 4"],
        "{log}"
    );
}

#[test]
fn a_second_modify_before_the_first_applied_replaces_it() {
    let env = TestEnv::new();
    env.start_conductor();
    let old = env.write_score("modme", &score("old", 1.5));
    let two = env.write_score("modme-two", &score("two", 0.1));
    let three = env.write_score("modme-three", &score("three", 0.1));
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let r = client
        .call_value(
            "job.submit",
            json!({"config_path": old.display().to_string()}),
        )
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    wait_for(&env, 30, "sheet 1 to start", |d| {
        sheet_status(d, 1) == "in_progress"
    });
    for (path, message) in [
        (
            &two,
            "Pause signal sent. Will resume with modme-two.yaml when paused.",
        ),
        // Paused already, sheet 1 still playing: queued behind it, replacing the first.
        (&three, "Job resume queued"),
    ] {
        let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
        let r = client
            .call_value(
                "job.modify",
                json!({"job_id": "modme", "config_path": path.display().to_string()}),
            )
            .unwrap();
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(r["message"], message, "{r}");
    }
    wait_for(&env, 60, "the job to complete", |d| {
        d["status"] == "completed"
    });
    let log = std::fs::read_to_string(env.work.join("modme-ws/log.txt")).unwrap();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["old 1", "three 2", "three 3", "three 4"],
        "{log}"
    );
}
