//! The raw JSON-RPC answers upstream's Python CLI reads, for the commands issue 3 names
//! (run, status, list, pause, resume, cancel, conductor-status), requested exactly as its
//! `DaemonClient` writes them (conductor.md §7.4, §8). `tests/upstream-cli/check.sh` runs
//! upstream's CLI itself against our conductor; this keeps the field names from drifting
//! where CI has no upstream copy.

use std::time::{Duration, Instant};

use mozart_tests::TestEnv;
use serde_json::{json, Value};

fn score(name: &str, sheets: u32, sleep: f64) -> String {
    mozart_tests::sleepy_shell_score(name, sheets, sleep)
}

/// One call on its own connection, as upstream's client makes it: `params` null when there
/// are none, an integer id. Returns the whole response object.
fn raw(env: &TestEnv, method: &str, params: Value) -> Value {
    let response = env.raw_call(method, params);
    assert_eq!(response["jsonrpc"], "2.0", "{response}");
    assert_eq!(response["id"], 1, "{response}");
    response
}

fn ok(env: &TestEnv, method: &str, params: Value) -> Value {
    let response = raw(env, method, params);
    assert!(response.get("error").is_none(), "{method}: {response}");
    response["result"].clone()
}

fn has_keys(v: &Value, names: &[&str]) {
    for name in names {
        assert!(v.get(name).is_some(), "missing {name:?} in {v}");
    }
}

fn job_status(env: &TestEnv, id: &str) -> Value {
    ok(env, "job.status", json!({"job_id": id}))
}

fn wait_until(env: &TestEnv, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let doc = job_status(env, id);
        if pred(&doc) {
            return doc;
        }
        assert!(Instant::now() < deadline, "timed out on {id}: {doc}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn conductor_status_reads_health_ready_and_status_with_upstreams_keys() {
    let env = TestEnv::new();
    env.start_conductor();
    let pid = env.conductor_pid().unwrap();
    let health = ok(&env, "daemon.health", Value::Null);
    has_keys(
        &health,
        &["status", "pid", "uptime_seconds", "shutting_down"],
    );
    assert_eq!(health["status"], "ok");
    assert_eq!(health["pid"], pid);
    let ready = ok(&env, "daemon.ready", Value::Null);
    has_keys(
        &ready,
        &[
            "status",
            "running_jobs",
            "memory_mb",
            "child_processes",
            "accepting_work",
            "shutting_down",
            "failure_rate_elevated",
            "notifications_degraded",
            "uptime_seconds",
        ],
    );
    assert_eq!(ready["status"], "ready");
    // Every key upstream's `DaemonStatus` model requires.
    let status = ok(&env, "daemon.status", Value::Null);
    has_keys(
        &status,
        &[
            "pid",
            "uptime_seconds",
            "running_jobs",
            "total_jobs_active",
            "memory_usage_mb",
            "version",
        ],
    );
    assert_eq!(status["version"], "0.1.0");

    // `mozart config show` validates daemon.config with upstream's DaemonConfig, whose
    // paths may not be null: they name what this conductor really uses.
    let config = ok(&env, "daemon.config", Value::Null);
    assert_eq!(config["socket"]["path"], env.socket.display().to_string());
    assert_eq!(
        config["pid_file"],
        env.home.join("conductor.pid").display().to_string()
    );
    assert_eq!(
        config["state_db_path"],
        env.home.join("registry.db").display().to_string()
    );
    assert!(config["socket"]["permissions"].is_u64(), "{config}");
}

#[test]
fn run_status_list_pause_resume_cancel_answer_in_upstreams_shapes() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("shaped", &score("shaped", 3, 2.0));

    // run → job.submit: JobResponse.
    let submitted = ok(
        &env,
        "job.submit",
        json!({"config_path": path.display().to_string(), "fresh": false,
               "self_healing": false, "self_healing_auto_confirm": false}),
    );
    assert_eq!(submitted["job_id"], "shaped");
    assert_eq!(submitted["status"], "accepted");
    assert!(submitted["message"].is_string(), "{submitted}");

    // status JOB → job.status: a CheckpointState upstream's model parses (job_id, job_name,
    // total_sheets >= 1, sheets keyed by the number as a string, ISO datetimes).
    let doc = wait_until(&env, "shaped", 30, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    assert_eq!(doc["job_id"], "shaped");
    assert_eq!(doc["job_name"], "shaped");
    assert_eq!(doc["total_sheets"], 3);
    assert_eq!(doc["status"], "running");
    assert_eq!(doc["sheets"]["1"]["sheet_num"], 1);
    let created = doc["created_at"].as_str().unwrap();
    assert!(
        created.len() >= 19 && created.as_bytes()[10] == b'T',
        "{created}"
    );

    // list → job.list: an array of job dicts.
    let list = ok(&env, "job.list", Value::Null);
    let entry = list
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_id"] == "shaped")
        .unwrap()
        .clone();
    has_keys(&entry, &["job_id", "status", "workspace", "submitted_at"]);
    assert_eq!(entry["status"], "running");
    assert!(entry["submitted_at"].is_f64(), "{entry}");

    // pause → job.pause: {"paused": true}; a second pause is a result, not an error.
    assert_eq!(
        ok(&env, "job.pause", json!({"job_id": "shaped"})),
        json!({"paused": true})
    );
    let again = ok(&env, "job.pause", json!({"job_id": "shaped"}));
    assert_eq!(again["paused"], false);
    // Upstream's words for a paused job; one whose sheet still runs says it is pausing.
    let error = again["error"].as_str().unwrap_or_default();
    assert!(
        error == "Job 'shaped' is paused, not running"
            || error.starts_with("Job 'shaped' is already pausing: 1 running sheet"),
        "{again}"
    );

    // resume → job.resume: JobResponse.
    assert_eq!(
        ok(
            &env,
            "job.resume",
            json!({"job_id": "shaped", "workspace": null, "config_path": null, "no_reload": false})
        ),
        json!({"job_id": "shaped", "status": "accepted", "message": "Job resume queued"})
    );
    let missing = ok(&env, "job.resume", json!({"job_id": "nosuch"}));
    assert_eq!(
        missing,
        json!({"job_id": "nosuch", "status": "rejected", "message": "Score 'nosuch' not found"})
    );

    // cancel → job.cancel: {"cancelled": bool}.
    assert_eq!(
        ok(&env, "job.cancel", json!({"job_id": "shaped"})),
        json!({"cancelled": true})
    );
    assert_eq!(
        ok(&env, "job.cancel", json!({"job_id": "nosuch"})),
        json!({"cancelled": false})
    );
    wait_until(&env, "shaped", 30, |d| d["status"] == "cancelled");

    // status of an unknown job: -32000 with the text upstream's CLI shows.
    let unknown = raw(&env, "job.status", json!({"job_id": "nosuch"}));
    assert_eq!(unknown["error"]["code"], -32000, "{unknown}");
    assert_eq!(unknown["error"]["message"], "Job 'nosuch' not found");
}

/// A refused `job.submit` names its reason as a type (ours, an added field upstream's CLI
/// ignores), so a client chooses its hints without reading the words; an accepted one
/// stays upstream's three keys.
#[test]
fn a_refused_submission_names_its_reason() {
    let env = TestEnv::new();
    env.start_conductor();
    let missing = env.home.join("nowhere.yaml");
    let refused = ok(
        &env,
        "job.submit",
        json!({"config_path": missing.display().to_string(), "fresh": false}),
    );
    assert_eq!(refused["status"], "rejected", "{refused}");
    assert_eq!(refused["reason"], "score_not_found", "{refused}");

    let path = env.write_score("twice", &score("twice", 1, 5.0));
    let params = json!({"config_path": path.display().to_string(), "fresh": false});
    let first = ok(&env, "job.submit", params.clone());
    assert_eq!(first["status"], "accepted", "{first}");
    assert!(first.get("reason").is_none(), "{first}");
    let second = ok(&env, "job.submit", params);
    assert_eq!(second["status"], "rejected", "{second}");
    assert_eq!(second["reason"], "already_active", "{second}");
    ok(&env, "job.cancel", json!({"job_id": "twice"}));
}
