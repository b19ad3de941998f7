//! Two jobs in one workspace (the next score of a concert, or any second score naming the
//! same `workspace:`): each job's sheet logs stay its own. The first job keeps upstream's
//! `{workspace}/logs/sheet-NN.<stream>.log`; the next writes in `{workspace}/logs/{job_id}/`.
//! `mozart logs JOB --sheet N`, the conductor log's `stdout_log` and `diagnose`'s log files
//! show each job its own output, never the other's. Real conductor, real shell sheets.

use crate::harness::*;

use std::path::Path;

use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

/// A one-sheet shell score in `shared-ws` printing 300 lines `{name}-out run R line I`
/// (more than the registry keeps, so the sheet has a log file), R counting the job's runs.
fn score(env: &TestEnv, name: &str, next: Option<&str>) -> std::path::PathBuf {
    let hook = next
        .map(|n| format!("on_success:\n  - type: run_job\n    job_path: {n}.yaml\nconcert: {{enabled: true, cooldown_between_jobs_seconds: 0}}\n"))
        .unwrap_or_default();
    let yaml = format!(
        r#"name: {name}
workspace: ./shared-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo x >> {name}.runs; r=$(wc -l < {name}.runs); for i in $(seq 1 300); do echo "{name}-out run $r line $i"; done
{hook}"#
    );
    env.write_score(name, &yaml)
}

/// What `mozart logs JOB --sheet 1` prints; asserts it exits 0.
fn sheet_output(env: &TestEnv, job: &str) -> String {
    let out = env.mozart(&["logs", job, "--sheet", "1"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

/// The file named by `stdout_log=` on JOB's last `sheet.completed` line of the conductor log.
fn completed_stdout_log(env: &TestEnv, job: &str) -> String {
    let out = env.mozart(&["logs", job]);
    let text = stdout(&out);
    let line = text
        .lines()
        .rfind(|l| l.contains(&format!(" {job} sheet:1 sheet.completed ")))
        .unwrap_or_else(|| panic!("no sheet.completed line for {job}:\n{text}"));
    let path = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("stdout_log="))
        .unwrap_or_else(|| panic!("no stdout_log on {line}"));
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The sheet log files `mozart diagnose JOB --json` lists, with their contents.
fn diagnosed_sheet_logs(env: &TestEnv, job: &str) -> Vec<(String, String)> {
    let out = env.mozart(&["diagnose", job, "--json"]);
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    doc["log_files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["category"] == "sheet_log")
        .map(|f| {
            let path = f["path"].as_str().unwrap().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            (path, text)
        })
        .collect()
}

/// The concert case: `first`'s `on_success` runs `second` in the same workspace. `first`'s
/// logs are where upstream puts them and still hold its output; `second`'s are in
/// `logs/second/`; every reader shows each job its own.
#[test]
fn the_next_score_of_a_concert_in_the_same_workspace_keeps_the_first_ones_logs() {
    let env = TestEnv::new();
    env.start_conductor();
    score(&env, "second", None);
    let first = score(&env, "first", Some("second"));
    run(&env, &first, &[]);
    env.wait_completed("first");
    poll(&env, 60.0, "the second link to complete", || {
        list_all(&env)
            .iter()
            .any(|j| j["job_id"] == "second" && j["status"] == "completed")
            .then_some(())
    });
    let logs = env.work.join("shared-ws/logs");

    let text = sheet_output(&env, "first");
    assert!(
        text.contains("first-out run 1 line 300") && !text.contains("second-out"),
        "`logs first --sheet 1` shows first's output, not second's:\n{text}"
    );
    assert!(
        text.contains(&format!(
            "from {}",
            logs.join("sheet-01.stdout.log").display()
        )),
        "first's log is upstream's file:\n{text}"
    );
    let text = sheet_output(&env, "second");
    assert!(
        text.contains("second-out run 1 line 300") && !text.contains("first-out"),
        "`logs second --sheet 1` shows second's output:\n{text}"
    );
    assert!(
        text.contains(&format!(
            "from {}",
            logs.join("second/sheet-01.stdout.log").display()
        )),
        "second's log is in its own directory:\n{text}"
    );

    // The conductor log's events name files that still hold their own job's output.
    let first_log = completed_stdout_log(&env, "first");
    assert!(
        first_log.contains("first-out") && !first_log.contains("second-out"),
        "{first_log}"
    );
    let second_log = completed_stdout_log(&env, "second");
    assert!(
        second_log.contains("second-out") && !second_log.contains("first-out"),
        "{second_log}"
    );
    // `mozart logs second` says where second's sheet logs are.
    let text = stdout(&env.mozart(&["logs", "second"]));
    assert!(
        text.contains(&logs.join("second").display().to_string()),
        "{text}"
    );

    // `diagnose` lists each job's own sheet logs only.
    for (job, own, other) in [
        ("first", "first-out", "second-out"),
        ("second", "second-out", "first-out"),
    ] {
        let files = diagnosed_sheet_logs(&env, job);
        assert!(!files.is_empty(), "diagnose {job} lists its sheet logs");
        for (path, text) in files {
            assert!(
                text.contains(own) && !text.contains(other),
                "diagnose {job} lists {path}, which holds:\n{text}"
            );
        }
    }
    env.stop_conductor();
}

/// Two scores run one after the other in one workspace, then the first again (`--fresh`,
/// same job id): the re-run writes upstream's files again, over its own earlier logs, and
/// the second's stay where they were.
#[test]
fn a_rerun_of_the_same_job_writes_its_own_logs_again() {
    let env = TestEnv::new();
    env.start_conductor();
    let alpha = score(&env, "alpha", None);
    let beta = score(&env, "beta", None);
    run(&env, &alpha, &[]);
    env.wait_completed("alpha");
    run(&env, &beta, &[]);
    env.wait_completed("beta");
    run(&env, &alpha, &["--fresh"]);
    poll(&env, 60.0, "alpha's second run to complete", || {
        let doc = status(&env, "alpha");
        (doc["status"] == "completed"
            && std::fs::read_to_string(env.work.join("shared-ws/alpha.runs"))
                .is_ok_and(|t| t.lines().count() == 2))
        .then_some(())
    });
    env.wait_completed("alpha");
    let logs = env.work.join("shared-ws/logs");
    let upstream = std::fs::read_to_string(logs.join("sheet-01.stdout.log")).unwrap();
    assert!(
        upstream.contains("alpha-out run 2 line 300") && !upstream.contains("run 1 "),
        "{upstream}"
    );
    let text = sheet_output(&env, "alpha");
    assert!(
        text.contains("alpha-out run 2 line 300") && !text.contains("beta-out"),
        "{text}"
    );
    let text = sheet_output(&env, "beta");
    assert!(
        text.contains("beta-out run 1 line 300") && !text.contains("alpha-out"),
        "{text}"
    );
    assert!(
        logs.join("beta/sheet-01.stdout.log").is_file(),
        "beta's log is in its own directory"
    );
    assert!(!Path::new(&logs.join("alpha")).exists(), "alpha needs none");
    env.stop_conductor();
}
