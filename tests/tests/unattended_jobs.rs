//! What a user running jobs unattended meets in the execution engine: what a
//! `shell` sheet's failures do to the job and to other jobs, and what `mozart status`
//! says while a sheet waits or after a cost limit stopped it.

use crate::harness;

use harness::*;
use mozart_tests::TestEnv;

/// A one-sheet `shell` score running `script` with a file_exists validation on `out.txt`.
fn shell_score(env: &TestEnv, name: &str, script: &str, extra: &str) -> std::path::PathBuf {
    let ws = env.work.join(format!("{name}-ws"));
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 2
  base_delay_seconds: 0.3
  jitter: false
sheet:
  size: 1
  total_items: 1
{extra}
prompt:
  template: |
    RUN: {script}
validations:
  - type: file_exists
    path: "{{workspace}}/out.txt"
"#,
        ws = ws.display()
    );
    env.write_score(name, &yaml)
}

/// A command failing with `EDQUOT` ("Disk quota exceeded") is a failure: retried, then the
/// job fails. It used to read as a rate limit (the word "quota"): the sheet waited on the
/// probe schedule forever (waits have no cap) and held every other job's shell sheets.
#[test]
fn a_full_disk_quota_fails_the_sheet_instead_of_waiting_forever() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = shell_score(
        &env,
        "edquot",
        r#"echo "cp: error writing 'big.bin': Disk quota exceeded" >&2; exit 1"#,
        "",
    );
    run(&env, &score, &[]);
    // The first probe of a rate-limit wait is 15 s away: a failure ends well before.
    let doc = wait_terminal(&env, "edquot", 12.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(doc["execution"]["rate_limit_waits"], 0, "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 2, "{doc:#}");
    let error = sheet(&doc, 1)["error_message"].as_str().unwrap_or_default();
    assert!(error.contains("Disk quota exceeded"), "{doc:#}");
    assert!(!error.contains("Rate limit"), "{doc:#}");
}

/// A command's own failure that names line 429 of a file, or a test called
/// `test_rate_limit_backoff`, is that failure: retried as its exit code says, then the job
/// fails. It used to read as a rate limit: waited for ever, no retry spent.
#[test]
fn a_shell_failure_naming_429_fails_instead_of_waiting_forever() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = shell_score(
        &env,
        "line429",
        r#"echo "error on line 429 of input.csv" >&2; echo "FAILED test_rate_limit_backoff" >&2; exit 1"#,
        "",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "line429", 12.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(doc["execution"]["rate_limit_waits"], 0, "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 2, "{doc:#}");
    let error = sheet(&doc, 1)["error_message"].as_str().unwrap_or_default();
    assert!(error.contains("test_rate_limit_backoff"), "{doc:#}");
}

/// A skip rule that cannot decide lets the sheet run (fail-open), and `mozart logs JOB`
/// says so: before, the warning went to the conductor log without the job's id, so the
/// job's log was silent about a `skip_when` typo or a `skip_when_command` timing out.
#[test]
fn a_skip_rule_that_cannot_decide_is_in_the_jobs_log() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("skiplog-ws");
    let yaml = format!(
        r#"name: skiplog
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: 3
  skip_when:
    2: "sheets[1].stauts == 'completed'"
  skip_when_command:
    3:
      command: "sleep 5"
      timeout_seconds: 1
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> ran
"#,
        ws = ws.display()
    );
    let score = env.write_score("skiplog", &yaml);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "skiplog", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        std::fs::read_to_string(ws.join("ran")).unwrap(),
        "1\n2\n3\n"
    );
    let text = poll(&env, 10.0, "the skip warnings in the job's log", || {
        let out = env.mozart(&["logs", "skiplog"]);
        let text = mozart_tests::stdout(&out);
        (text.contains("sheet 2 runs: its skip_when could not be evaluated")
            && text.contains("sheet 3 runs: its skip_when_command timed out after 1s"))
        .then_some(text)
    });
    assert!(text.contains("stauts"), "{text}");
}

/// Between two sheets (`pause_between_sheets_seconds`) nothing runs: `status` says the job
/// is pausing and when the next sheet starts. It showed a running job with nothing running
/// and no reason, for as long as the pause (a score may pause minutes).
#[test]
fn status_says_a_job_is_pausing_between_sheets() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("pacing-ws");
    let yaml = format!(
        r#"name: pacing
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 6
sheet:
  size: 1
  total_items: 2
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> ran
"#,
        ws = ws.display()
    );
    let score = env.write_score("pacing", &yaml);
    run(&env, &score, &[]);
    let doc = wait_status(&env, "pacing", 20.0, |d| {
        d["sheets"]["1"]["status"] == "completed"
    });
    assert_eq!(doc["status"], "running", "{doc:#}");
    let reason = doc["waiting_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(
            "pausing 6s between sheets (pause_between_sheets_seconds); the next sheet starts in"
        ),
        "{doc:#}"
    );
    let text = mozart_tests::stdout(&env.mozart(&["status", "pacing"]));
    assert!(
        text.contains("Waiting: pausing 6s between sheets"),
        "{text}"
    );
    let doc = wait_terminal(&env, "pacing", 20.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(doc.get("waiting_reason").is_none(), "{doc:#}");
}
