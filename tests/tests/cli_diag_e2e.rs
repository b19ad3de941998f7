//! Diagnostic commands against a real conductor that ran a real failing score through the
//! built-in `shell` instrument (cli.md §5.1–5.4).

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};
use serde_json::{json, Value};

/// Two sheets run in order; sheet 1 writes a sheet log and output, then fails its
/// validation (the file it checks is never written), so sheet 2 is blocked by it.
fn failing_score(name: &str) -> String {
    format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 0
sheet:
  size: 1
  total_items: 2
prompt:
  template: |
    RUN: mkdir -p "{{{{ workspace }}}}/logs"
    RUN: echo "sheet {{{{ sheet_num }}}} log line" > "{{{{ workspace }}}}/logs/sheet-{{{{ sheet_num }}}}.log"
    RUN: echo "hello from sheet {{{{ sheet_num }}}}"
validations:
  - type: file_exists
    path: "{{workspace}}/never-{{sheet_num}}.txt"
"#
    )
}

fn submit(env: &TestEnv, path: &Path) -> Value {
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    client
        .call_value(
            "job.submit",
            json!({"config_path": path.display().to_string()}),
        )
        .unwrap()
}

fn json_of(out: &Output, what: &str) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what} prints JSON: {e}: {}", stdout(out)))
}

/// Start a conductor, run the failing score and wait until the conductor says it failed.
fn failed_job(name: &str) -> TestEnv {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score(name, &failing_score(name));
    let response = submit(&env, &path);
    assert_eq!(response["status"], "accepted", "{response}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = env.mozart(&["status", name, "--json"]);
        let doc = json_of(&out, "status --json");
        if doc["status"] == "failed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never failed: {doc:#}\nlog:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    env
}

#[test]
fn errors_list_the_validation_failure_and_the_blocked_sheet() {
    let env = failed_job("broken");

    let out = env.mozart(&["errors", "broken"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Errors for Score: broken");
    assert!(
        lines[1].starts_with("Sheet  Time      Type       Code  Attempt  Message"),
        "{text}"
    );
    assert!(lines[2].starts_with("1  "), "{text}");
    assert!(lines[2].contains("  permanent  E900  1  "), "{text}");
    assert!(lines[2].contains("validation failed"), "{text}");
    // Shown whole up to a few lines' length: the file that is missing is the cause.
    assert!(lines[2].contains("never-1.txt"), "{text}");
    assert!(lines[3].starts_with("2  "), "{text}");
    assert!(
        lines[3].ends_with("Blocked by failed dependency: sheet 1 failed"),
        "{text}"
    );
    let sheet_logs = env.work.join("broken-ws").join("logs");
    assert!(
        text.ends_with(&format!(
            "\nTotal: 2 errors\nSheet logs: {} (full output of each sheet that ran past 1 s or printed over 4,000 bytes; -V shows a shorter one's)\n",
            sheet_logs.display()
        )),
        "{text}"
    );

    let out = env.mozart(&["errors", "broken", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc = json_of(&out, "errors --json");
    assert_eq!(doc["job_id"], "broken");
    assert_eq!(doc["total_errors"], 2);
    let first = &doc["errors"][0];
    assert_eq!(first["sheet_num"], 1);
    assert_eq!(first["error_code"], "E900");
    assert_eq!(first["error_type"], "permanent");
    assert_eq!(first["attempt_number"], 1);
    let message = first["error_message"].as_str().unwrap();
    assert!(message.contains("never-1.txt"), "{message}");
    assert_eq!(first["context"]["exit_code"], 0);
    assert_eq!(first["stdout_tail"], Value::Null, "tails only with -V");
    assert!(first["timestamp"].as_str().unwrap().starts_with("20"));

    // Filters.
    let only = |args: &[&str]| -> Vec<u64> {
        let mut full = vec!["errors", "broken", "--json"];
        full.extend_from_slice(args);
        let doc = json_of(&env.mozart(&full), "errors --json");
        doc["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["sheet_num"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(only(&["--sheet", "2"]), vec![2]);
    assert_eq!(only(&["-c", "E900"]), vec![1]);
    assert_eq!(only(&["--type", "transient"]), Vec::<u64>::new());

    let out = env.mozart(&["errors", "broken", "-b", "1", "-t", "rate_limit"]);
    assert_eq!(
        stdout(&out),
        "No errors found for score: broken\nSheet filter: 1\nType filter: rate_limit\n"
    );

    let out = env.mozart(&["errors", "broken", "--verbose"]);
    let text = stdout(&out);
    assert!(text.contains("\nError Details\n"), "{text}");
    assert!(text.contains(" Sheet 1 - E900 "), "{text}");
    assert!(text.contains("never-1.txt"), "{text}");
}

#[test]
fn diagnose_reports_progress_timeline_errors_and_workspace_logs() {
    let env = failed_job("diag");

    let out = env.mozart(&["diagnose", "diag"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("Diagnostic Report\n  diag\n  ID: diag\n  Status: FAILED\n  Generated: "),
        "{text}"
    );
    assert!(
        text.contains("\nProgress\n  Sheets: 0/2 completed (0.0%)\n  Failed: 2\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "\nExecution Timeline\n  #  Status  Duration  Attempts  Mode    Outcome\n  1  failed  "
        ),
        "{text}"
    );
    // Sheet 1's mode and outcome come from its attempt; sheet 2 never ran.
    assert!(
        text.contains(
            "  1         normal  failed_exhausted\n  2  failed  -         0         -       -\n"
        ),
        "{text}"
    );
    assert!(text.contains("\nErrors (2)\n"), "{text}");
    assert!(text.contains("  1      permanent  E900  1  "), "{text}");
    assert!(
        text.contains("Use 'mozart errors diag --verbose' for full error details"),
        "{text}"
    );
    assert!(text.contains("\nScore Error: "), "{text}");
    // The score's own log. The sheet printed one line and ended within a second: it left no
    // live output file (`logs/sheet-NN.stdout.log`), its output is in the registry (issue 24).
    assert!(text.contains("\nLog Files (1)\n"), "{text}");
    assert!(text.contains("  sheet-1.log  "), "{text}");
    assert!(!text.contains("  sheet-01.stdout.log  "), "{text}");
    assert!(!text.contains("  sheet-01.stderr.log  "), "{text}");
    assert!(text.contains("sheet_log"), "{text}");

    let out = env.mozart(&["diagnose", "diag", "--json", "--include-logs"]);
    assert_eq!(out.status.code(), Some(0));
    let report = json_of(&out, "diagnose --json");
    let keys: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in [
        "job_id",
        "job_name",
        "status",
        "generated_at",
        "progress",
        "timing",
        "preflight_warnings",
        "prompt_metrics",
        "execution_timeline",
        "execution_stats",
        "errors",
        "error_count",
        "log_files",
        "log_contents",
        "execution_history_count",
    ] {
        assert!(keys.contains(&key), "missing {key}: {keys:?}");
    }
    assert_eq!(report["status"], "failed");
    assert_eq!(report["progress"]["failed"], 2);
    assert_eq!(report["error_count"], 2);
    assert_eq!(report["errors"][0]["error_code"], "E900");
    assert!(report["errors"][0].get("stack_trace").is_some());
    assert_eq!(report["execution_timeline"][0]["attempt_count"], 1);
    assert_eq!(report["execution_timeline"][1]["attempt_count"], 0);
    let log = report["log_files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "sheet-1.log")
        .unwrap();
    assert_eq!(log["category"], "sheet_log");
    let path = log["path"].as_str().unwrap();
    assert!(path.ends_with("diag-ws/logs/sheet-1.log"), "{path}");
    assert_eq!(report["log_contents"][path], "sheet 1 log line");

    let out = env.mozart(&["diagnose", "diag", "--json", "--resources"]);
    let report = json_of(&out, "diagnose --resources");
    assert_eq!(report["resource_profile"]["available"], false);
    assert!(report["resource_profile"]["error"]
        .as_str()
        .unwrap()
        .contains("not recorded by this port"));
    let out = env.mozart(&["diagnose", "diag", "--resources"]);
    let text = stdout(&out);
    assert!(
        text.contains("Resource Profile\n  Resource profiles of past runs are not recorded"),
        "{text}"
    );
    assert!(!text.contains("profiling enabled"), "{text}");
}

#[test]
fn history_lists_the_recorded_attempts() {
    let env = failed_job("hist");

    let out = env.mozart(&["history", "hist"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Execution History: hist");
    assert_eq!(lines[1], "Sheet  Attempt  Exit Code  Duration  Timestamp");
    assert!(
        lines[2].starts_with("1      1        0          "),
        "{text}"
    );
    assert!(lines[2].contains('s'), "duration in seconds: {text}");
    assert!(text.ends_with("\nTotal: 1 record(s)\n"), "{text}");

    let out = env.mozart(&["history", "hist", "--json", "--sheet", "1", "-n", "5"]);
    assert_eq!(out.status.code(), Some(0));
    let doc = json_of(&out, "history --json");
    assert_eq!(doc["job_id"], "hist");
    assert_eq!(doc["total_records"], 1);
    assert_eq!(doc["sheet_filter"], 1);
    let record = &doc["records"][0];
    assert_eq!(record["sheet_num"], 1);
    assert_eq!(record["attempt_num"], 1);
    assert_eq!(record["exit_code"], 0);
    assert!(record["output"]
        .as_str()
        .unwrap()
        .contains("hello from sheet 1"));
}

#[test]
fn logs_show_the_conductor_log_and_filter_by_score_and_level() {
    let env = failed_job("logged");

    let out = env.mozart(&["logs"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let log_path = env.home.join("logs/conductor.log");
    assert!(
        text.starts_with(&format!("Log file: {}\n", log_path.display())),
        "{text}"
    );
    assert!(text.contains(" INFO    "), "{text}");
    assert!(text.contains("daemon.started"), "{text}");
    assert!(
        text.contains(" ERROR   jobs logged job.failed failed: sheets [1, 2] failed"),
        "{text}"
    );

    let out = env.mozart(&["logs", "logged"]);
    let text = stdout(&out);
    let sheet_logs = env.work.join("logged-ws").join("logs");
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with(&format!("Sheet logs: {} ", sheet_logs.display()))),
        "{text}"
    );
    let body: Vec<&str> = text.lines().skip(2).collect();
    assert!(!body.is_empty(), "{text}");
    assert!(
        body.iter().all(|l| l.contains(" logged ")),
        "only the score's lines: {text}"
    );
    assert!(!text.contains("daemon.started"), "{text}");

    let out = env.mozart(&["logs", "logged", "--json"]);
    let text = stdout(&out);
    assert!(!text.starts_with("Log file:"), "{text}");
    for line in text.lines() {
        let entry: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("each line is JSON: {e}: {line}"));
        assert_eq!(entry["job_id"], "logged", "{line}");
        assert!(entry["timestamp"].is_string() && entry["level"].is_string());
    }

    let out = env.mozart(&["-q", "logs", "-n", "1"]);
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));

    // The failures are errors: each sheet's and the job's.
    let out = env.mozart(&["logs", "--level", "error"]);
    let text = stdout(&out);
    let body: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(body.len(), 3, "{text}");
    assert!(body.iter().all(|l| l.contains(" ERROR   ")), "{text}");
    assert!(body[0].contains(" logged sheet:1 sheet.failed "), "{text}");
    assert!(body[1].contains(" logged sheet:2 sheet.failed "), "{text}");
    assert!(body[2].contains(" logged job.failed "), "{text}");
    // A job the running conductor does not know is an error, not an empty listing.
    let out = env.mozart(&["logs", "someone-else"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("Error: Score not found: someone-else\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn unknown_scores_are_reported_by_every_diagnostic_command() {
    let env = TestEnv::new();
    env.start_conductor();
    for cmd in ["errors", "history", "diagnose"] {
        let out = env.mozart(&[cmd, "ghost"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {text}");
        assert!(
            text.starts_with(
                "Error: Score not found: ghost\n\nHints:\n  - Run 'mozart list' to see available scores.\n"
            ),
            "{cmd}: {text}"
        );
        let out = env.mozart(&[cmd, "ghost", "--json"]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let doc = json_of(&out, cmd);
        assert_eq!(doc["success"], false);
        assert_eq!(doc["message"], "Score not found: ghost");
    }
    let out = env.mozart(&["diagnose", "ghost"]);
    assert!(
        stdout(&out).contains("  - Use -w to specify the workspace directory.\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn recover_revalidates_failed_sheets_and_saves_the_ones_that_pass() {
    let env = failed_job("fixme");
    let ws = env.work.join("fixme-ws");
    // The work of sheet 1 turns up after the job failed (done by hand, say).
    std::fs::write(ws.join("never-1.txt"), "done").unwrap();

    let out = env.mozart(&["recover", "fixme", "--dry-run"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Sheet 1:\n  ✓ "), "{text}");
    assert!(text.contains("Sheet 2:\n  ✗ "), "{text}");
    assert!(
        text.contains("1 sheet would be recovered\nDry run complete - no changes made\n"),
        "{text}"
    );
    let doc = json_of(&env.mozart(&["status", "fixme", "--json"]), "status --json");
    assert_eq!(
        doc["sheets"]["1"]["status"], "failed",
        "a dry run changes nothing"
    );

    let out = env.mozart(&["recover", "fixme"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Recovered 1 sheet\n"), "{text}");
    let doc = json_of(&env.mozart(&["status", "fixme", "--json"]), "status --json");
    assert_eq!(doc["sheets"]["1"]["status"], "completed", "{doc:#}");
    assert_eq!(doc["sheets"]["2"]["status"], "failed", "{doc:#}");

    // Saved in the registry: still there after a restart.
    env.mozart(&["stop"]);
    env.start_conductor();
    let doc = json_of(&env.mozart(&["status", "fixme", "--json"]), "status --json");
    assert_eq!(doc["sheets"]["1"]["status"], "completed", "{doc:#}");

    let out = env.mozart(&["recover", "fixme", "-s", "2"]);
    assert_eq!(
        stdout(&out).lines().last(),
        Some("No sheets could be recovered")
    );
    let out = env.mozart(&["recover", "nosuchjob"]);
    assert_eq!(out.status.code(), Some(1));
}
