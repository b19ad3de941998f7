//! `mozart top` (cli.md §4.4) against a real conductor: NDJSON snapshots from `daemon.top`,
//! the `--score` filter, and the clear failures where this port has no data.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};
use serde_json::{json, Value};

const SCORE: &str = r#"name: topped
workspace: ./topped-ws
instrument: shell
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: sleep 20
    RUN: touch "{{ workspace }}/done"
validations:
  - type: file_exists
    path: "{workspace}/done"
"#;

/// The first `n` lines `mozart top <args>` streams, then the process is ended.
fn first_lines(env: &TestEnv, args: &[&str], n: usize) -> Vec<Value> {
    let mut child = env
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..n {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        lines.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    lines
}

#[test]
fn top_json_streams_snapshots_and_the_score_filter_keeps_that_scores_processes() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("topped", SCORE);
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let r = client
        .call_value(
            "job.submit",
            json!({"config_path": path.display().to_string()}),
        )
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let snaps = loop {
        let snaps = first_lines(&env, &["top", "--json", "-i", "0.2", "-s", "topped"], 2);
        if snaps[1]["processes"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
        {
            break snaps;
        }
        assert!(
            Instant::now() < deadline,
            "no process of the score: {snaps:?}"
        );
    };
    let pid = env.conductor_pid().unwrap();
    for snap in &snaps {
        assert_eq!(snap["daemon_pid"], pid);
        assert!(snap["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["job_id"] == "topped" && p["sheet_num"] == 1));
    }
    assert!(snaps[1]["timestamp"].as_f64() > snaps[0]["timestamp"].as_f64());
    assert_eq!(snaps[1]["job_progress"][0]["job_id"], "topped");
    // Unfiltered, the conductor itself is listed first.
    let all = first_lines(&env, &["top", "--json"], 1);
    assert_eq!(all[0]["processes"][0]["pid"], pid);
    env.mozart(&["cancel", "topped"]);
}

/// `mozart top -s JOB` still listed every job's progress line (the help says it keeps one
/// job), and `-s nosuch` streamed empty frames without a word; now only that job is shown
/// and a score the conductor does not know is an error.
#[test]
fn top_score_filter_keeps_one_job_and_refuses_an_unknown_one() {
    let env = TestEnv::new();
    env.start_conductor();
    for name in ["topped", "other"] {
        let path = env.write_score(
            name,
            &SCORE.replace("name: topped", &format!("name: {name}")),
        );
        let out = env.mozart(&["run", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = first_lines(&env, &["top", "--json"], 1);
        let listed = all[0]["job_progress"].as_array().map_or(0, Vec::len);
        if listed == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "both jobs never listed: {all:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let snap = &first_lines(&env, &["top", "--json", "-s", "other"], 1)[0];
    let jobs: Vec<&Value> = snap["job_progress"].as_array().unwrap().iter().collect();
    assert_eq!(jobs.len(), 1, "{snap}");
    assert_eq!(jobs[0]["job_id"], "other", "{snap}");
    let out = env.mozart(&["top", "-s", "nosuch"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("Score not found: nosuch"),
        "{}",
        stdout(&out)
    );
    env.mozart(&["cancel", "topped"]);
    env.mozart(&["cancel", "other"]);
}

#[test]
fn top_without_a_conductor_or_with_history_fails_with_a_reason() {
    let env = TestEnv::new();
    let out = env.mozart(&["top", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("Mozart conductor is not running. No monitor data available."),
        "{}",
        stdout(&out)
    );
    let out = env.mozart(&["top", "--history", "1h"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("keeps no monitor database"),
        "{}",
        stdout(&out)
    );
}
