//! `daemon.top`, `daemon.events`, `daemon.top.stream` and `daemon.monitor.stream` over the
//! real socket, in the shapes upstream's `mozart top` reads (conductor.md §8.18–§8.21).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use mozart_tests::TestEnv;
use serde_json::{json, Value};

fn score(name: &str, sheets: u32, sleep: f64) -> String {
    mozart_tests::sleepy_shell_score(name, sheets, sleep)
}

fn raw_call(env: &TestEnv, method: &str, params: Value) -> Value {
    env.raw_call(method, params)
}

fn result(env: &TestEnv, method: &str, params: Value) -> Value {
    let response = raw_call(env, method, params);
    assert!(response.get("error").is_none(), "{method}: {response}");
    response["result"].clone()
}

fn submit(env: &TestEnv, name: &str, sheets: u32, sleep: f64) {
    let path = env.write_score(name, &score(name, sheets, sleep));
    let r = result(
        env,
        "job.submit",
        json!({"config_path": path.display().to_string()}),
    );
    assert_eq!(r["status"], "accepted", "{r}");
}

fn wait_until(what: &str, secs: u64, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut k: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

#[test]
fn daemon_top_is_a_system_snapshot_naming_the_instrument_process_of_the_running_sheet() {
    let env = TestEnv::new();
    env.start_conductor();
    submit(&env, "watched", 2, 3.0);
    let mut snap = Value::Null;
    wait_until("a snapshot with the sheet's process", 30, || {
        snap = result(&env, "daemon.top", Value::Null);
        snap["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["job_id"] == "watched" && p["sheet_num"] == 1)
    });
    assert_eq!(
        keys(&snap),
        sorted(&[
            "timestamp",
            "daemon_pid",
            "system_memory_total_mb",
            "system_memory_available_mb",
            "system_memory_used_mb",
            "daemon_rss_mb",
            "load_avg_1",
            "load_avg_5",
            "load_avg_15",
            "processes",
            "gpus",
            "pressure_level",
            "running_jobs",
            "active_sheets",
            "zombie_count",
            "zombie_pids",
            "job_progress",
            "conductor_uptime_seconds",
        ])
    );
    let pid = env.conductor_pid().unwrap();
    assert_eq!(snap["daemon_pid"], pid);
    assert!(snap["daemon_rss_mb"].as_f64().unwrap() > 0.0, "{snap}");
    assert!(snap["system_memory_total_mb"].as_f64().unwrap() > 0.0);
    assert!(
        ["none", "low", "medium", "high", "critical"]
            .contains(&snap["pressure_level"].as_str().unwrap()),
        "{snap}"
    );
    assert_eq!(snap["running_jobs"], 1);
    assert_eq!(snap["active_sheets"], 1);
    let processes = snap["processes"].as_array().unwrap();
    assert_eq!(processes[0]["pid"], pid, "the conductor comes first");
    let sheet_process = processes.iter().find(|p| p["job_id"] == "watched").unwrap();
    assert_eq!(
        keys(sheet_process),
        sorted(&[
            "pid",
            "ppid",
            "command",
            "state",
            "cpu_percent",
            "rss_mb",
            "vms_mb",
            "threads",
            "open_fds",
            "age_seconds",
            "job_id",
            "sheet_num",
            "syscall_counts",
            "syscall_time_pct",
        ])
    );
    assert_eq!(
        snap["job_progress"],
        json!([{"job_id": "watched", "total_sheets": 2, "last_completed_sheet": 0,
                "current_sheet": 1, "status": "running"}])
    );
    // Not a stream here: no JSONL file is written (a result, not an error).
    assert_eq!(
        result(&env, "daemon.top.stream", Value::Null),
        json!({"error": "JSONL not configured"})
    );
}

#[test]
fn daemon_events_reports_the_spawn_and_exit_of_a_sheets_processes_oldest_first() {
    let env = TestEnv::new();
    env.start_conductor();
    // Prime the sampler, then let one sheet run and end between two samples.
    assert_eq!(
        result(&env, "daemon.events", json!({"limit": 10})),
        json!({"events": []})
    );
    submit(&env, "evented", 1, 3.0);
    let mut doc = Value::Null;
    wait_until("an exit event for the sheet", 30, || {
        doc = result(&env, "daemon.events", json!({"limit": 50}));
        doc["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event_type"] == "exit" && e["job_id"] == "evented")
    });
    let events = doc["events"].as_array().unwrap();
    let first = &events[0];
    assert_eq!(
        keys(first),
        sorted(&[
            "timestamp",
            "pid",
            "event_type",
            "exit_code",
            "signal_num",
            "job_id",
            "sheet_num",
            "details"
        ])
    );
    let spawn = events
        .iter()
        .position(|e| e["event_type"] == "spawn" && e["job_id"] == "evented")
        .expect("a spawn event");
    let exit = events
        .iter()
        .position(|e| e["event_type"] == "exit" && e["job_id"] == "evented")
        .unwrap();
    assert!(spawn < exit, "oldest first: {doc}");
    assert_eq!(events[exit]["sheet_num"], 1);
    // `limit` keeps the newest. Each call samples again, so a process of the sheet that
    // ends between two calls adds an event: compare once two calls in a row agree.
    let mut last = Value::Null;
    wait_until("two calls to agree on the newest event", 30, || {
        let all = result(&env, "daemon.events", json!({"limit": 50}));
        last = result(&env, "daemon.events", json!({"limit": 1}));
        all["events"].as_array().unwrap().last() == last["events"].as_array().unwrap().first()
    });
    assert_eq!(last["events"].as_array().unwrap().len(), 1);
}

#[test]
fn monitor_stream_sends_upstream_shaped_notifications_until_the_client_hangs_up() {
    let env = TestEnv::new();
    env.start_conductor();
    let mut stream = UnixStream::connect(&env.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // Upstream's client sends `params: null` and expects no response carrying the id.
    stream
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"daemon.monitor.stream\",\"params\":null,\"id\":1}\n")
        .unwrap();
    // The stream's first snapshot comes once its cursor is in place, so a job submitted
    // after it is streamed from its first event (waiting on that, not on a fixed time).
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut snapshots = 0;
    while snapshots == 0 {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "stream closed");
        let msg: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            keys(&msg),
            sorted(&["jsonrpc", "method", "params"]),
            "{msg}"
        );
        assert_eq!(msg["params"]["event"], "monitor.snapshot", "{msg}");
        snapshots += 1;
    }
    submit(&env, "streamed", 2, 0.2);

    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.contains(&("job.completed".to_string(), 0)) {
        assert!(Instant::now() < deadline, "no job.completed; saw {seen:?}");
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "stream closed");
        let msg: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            keys(&msg),
            sorted(&["jsonrpc", "method", "params"]),
            "{msg}"
        );
        assert_eq!(msg["method"], "monitor.event");
        let params = &msg["params"];
        assert_eq!(
            keys(params),
            sorted(&["job_id", "sheet_num", "event", "data", "timestamp"]),
            "{msg}"
        );
        assert!(
            params["timestamp"].as_f64().unwrap() > 1.7e9,
            "epoch seconds: {msg}"
        );
        if params["event"] == "monitor.snapshot" {
            // The periodic snapshot upstream's TUI refreshes on: a daemon.top document.
            assert_eq!(params["data"]["daemon_pid"], env.conductor_pid().unwrap());
            snapshots += 1;
            continue;
        }
        assert_eq!(params["job_id"], "streamed");
        seen.push((
            params["event"].as_str().unwrap().to_string(),
            params["sheet_num"].as_u64().unwrap(),
        ));
    }
    for wanted in [
        ("sheet.started", 1),
        ("sheet.completed", 1),
        ("sheet.started", 2),
        ("sheet.completed", 2),
    ] {
        assert!(
            seen.contains(&(wanted.0.to_string(), wanted.1)),
            "{wanted:?} missing from {seen:?}"
        );
    }
    assert!(snapshots >= 1, "a monitor.snapshot comes first");
    let started = seen.iter().position(|e| *e == ("sheet.started".into(), 2));
    let completed = seen
        .iter()
        .position(|e| *e == ("sheet.completed".into(), 1));
    assert!(
        completed < started,
        "sheet 2 starts after sheet 1 completes: {seen:?}"
    );

    // Hanging up ends the subscription; the conductor goes on serving.
    drop(reader);
    drop(stream);
    let health = result(&env, "daemon.health", Value::Null);
    assert_eq!(health["status"], "ok");
}

#[test]
fn with_the_profiler_disabled_the_monitoring_methods_say_so_as_results() {
    let env = TestEnv::new();
    std::fs::write(
        env.home.join("conductor.yaml"),
        "profiler:\n  enabled: false\n",
    )
    .unwrap();
    env.start_conductor();
    assert_eq!(
        result(&env, "daemon.top", Value::Null),
        json!({"error": "profiler not enabled"})
    );
    assert_eq!(
        result(&env, "daemon.events", json!({"limit": 5})),
        json!({"events": [], "error": "profiler not enabled"})
    );
    assert_eq!(
        result(&env, "daemon.top.stream", Value::Null),
        json!({"error": "profiler not enabled"})
    );
}
