//! The real codex CLI (tests/real-cli/setup.sh) under a real conductor, against the local
//! mock API (issue 13). Each test skips with a printed reason when the CLI is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mozart_tests::mock_api::{FILE_CONTENT, INPUT_TOKENS, OUTPUT_TOKENS};
use mozart_tests::real_cli::{write_file_score, RealCliEnv};

fn instrument(timeout: u32) -> String {
    format!("instrument: codex-cli\nbackend:\n  timeout_seconds: {timeout}")
}

fn started() -> Option<RealCliEnv> {
    let rc = RealCliEnv::new("codex")?;
    rc.start_conductor();
    Some(rc)
}

#[test]
fn two_sheets_write_files_and_report_tokens() {
    let Some(rc) = started() else { return };
    rc.run_score(
        "rc-codex",
        &write_file_score("rc-codex", &instrument(90), 2, "write", ""),
    );
    let doc = rc.wait_done("rc-codex", 150);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-codex")
    );
    let ws = rc.env.work.join("rc-codex-ws");
    for n in 1..=2 {
        let text = std::fs::read_to_string(ws.join(format!("out-{n}.txt"))).unwrap();
        assert_eq!(text, FILE_CONTENT);
    }
    assert_eq!(
        doc["cost"]["total_input_tokens"],
        2 * 2 * INPUT_TOKENS,
        "{doc:#}"
    );
    assert_eq!(
        doc["cost"]["total_output_tokens"],
        2 * 2 * OUTPUT_TOKENS,
        "{doc:#}"
    );
}

#[test]
fn a_429_is_a_rate_limit_that_parks_the_sheet_without_spending_a_retry() {
    let Some(rc) = started() else { return };
    // Codex 0.169 reports only "exceeded retry limit, last status: 429 Too Many Requests"
    // (no retry-after), so the conductor parks the instrument for the default wait; the
    // test ends the wait with `mozart clear-rate-limits` once the API recovered.
    let score = write_file_score(
        "rc-429",
        &instrument(90),
        1,
        "ratelimit mock-ms:6000",
        "retry: {max_retries: 0}\n",
    );
    rc.run_score("rc-429", &score);
    let doc = rc.wait_for("rc-429", 60, |d| {
        d["execution"]["rate_limit_waits"].as_u64().unwrap_or(0) >= 1
    });
    assert_eq!(
        doc["sheets"]["1"]["error_category"], "rate_limit",
        "{doc:#}"
    );
    assert!(rc.mock.requests().iter().any(|r| r.status == 429));
    std::thread::sleep(Duration::from_secs(6));
    let reply = rc
        .env
        .raw_call("daemon.clear_rate_limits", serde_json::json!({}));
    assert!(reply.get("result").is_some(), "{reply}");
    let doc = rc.wait_done("rc-429", 60);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-429")
    );
    assert_eq!(doc["execution"]["total_retry_count"], 0, "{doc:#}");
}

#[test]
fn a_bad_api_key_fails_fast_with_a_hint() {
    let Some(rc) = started() else { return };
    let score = write_file_score(
        "rc-401",
        &instrument(90),
        1,
        "auth",
        "retry: {max_retries: 3, base_delay_seconds: 1}\n",
    );
    let t0 = Instant::now();
    rc.run_score("rc-401", &score);
    let doc = rc.wait_done("rc-401", 90);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(
        doc["sheets"]["1"]["error_category"],
        "auth",
        "{doc:#}\n{}",
        rc.errors_text("rc-401")
    );
    assert!(t0.elapsed() < Duration::from_secs(60));
    let errors = rc.errors_text("rc-401");
    assert!(
        errors.contains("OPENAI_API_KEY"),
        "a hint names the key: {errors}"
    );
}

#[test]
fn a_hang_hits_the_timeout_and_leaves_no_process() {
    let Some(rc) = started() else { return };
    let score = write_file_score(
        "rc-hang",
        &instrument(8),
        1,
        "hang",
        "retry: {max_retries: 0}\n",
    );
    rc.run_score("rc-hang", &score);
    let doc = rc.wait_done("rc-hang", 90);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(doc["sheets"]["1"]["error_category"], "timeout", "{doc:#}");
    assert!(rc.mock.requests().iter().any(|r| r.scenario == "hang"));
    let ws = rc.env.work.join("rc-hang-ws");
    mozart_tests::real_cli::assert_no_process(&ws);
}

#[test]
fn cancel_leaves_no_process() {
    let Some(rc) = started() else { return };
    let score = write_file_score("rc-cancel", &instrument(120), 1, "hang", "");
    rc.run_score("rc-cancel", &score);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !rc.mock.requests().iter().any(|r| r.scenario == "hang") {
        assert!(Instant::now() < deadline, "the CLI never called the API");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ws = rc.env.work.join("rc-cancel-ws");
    assert!(
        !mozart_tests::real_cli::processes_mentioning(&ws).is_empty(),
        "the CLI runs in the workspace"
    );
    let out = rc.mozart(&["cancel", "rc-cancel"]);
    assert_eq!(out.status.code(), Some(0));
    rc.wait_done("rc-cancel", 30);
    mozart_tests::real_cli::assert_no_process(&ws);
}

#[test]
fn an_overloaded_api_is_retried_with_backoff_not_parked_as_a_rate_limit() {
    let Some(rc) = started() else { return };
    // Each sheet's API answers 503 "overloaded" for 2.5 s. Codex retries by itself (capped
    // to one retry of each kind here, ~1.5 s), reports "unexpected status 503", and the
    // conductor retries the sheet with the score's backoff. It used to read "overloaded" as
    // a rate limit and park the instrument for 5 minutes.
    let t0 = Instant::now();
    let score = write_file_score(
        "rc-overload",
        &instrument(90),
        2,
        "overload mock-ms:2500",
        "retry: {max_retries: 5, base_delay_seconds: 1, jitter: false}\n",
    );
    rc.run_score("rc-overload", &score);
    // Between the attempts the sheet shows why it is retried.
    let failed_once = |d: &serde_json::Value| d["sheets"]["1"]["error_code"] == "E103";
    let doc = rc.wait_for("rc-overload", 40, |d| {
        failed_once(d) || d["status"] != "running" && d["status"] != "queued"
    });
    assert!(failed_once(&doc), "{doc:#}");
    let sheet = &doc["sheets"]["1"];
    assert_eq!(sheet["error_category"], "transient", "{doc:#}");
    let msg = sheet["error_message"].as_str().unwrap();
    assert!(
        msg.contains("API overloaded (HTTP 503)") && msg.contains("The server is overloaded"),
        "{msg}"
    );
    let doc = rc.wait_done("rc-overload", 40);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-overload")
    );
    assert!(t0.elapsed() < Duration::from_secs(50));
    // Retried, never parked: no rate-limit wait.
    assert_eq!(doc["execution"]["rate_limit_waits"], 0, "{doc:#}");
    assert!(
        doc["execution"]["total_retry_count"].as_u64().unwrap() >= 2,
        "{doc:#}"
    );
    for n in ["1", "2"] {
        let attempts = doc["sheets"][n]["attempt_count"].as_u64().unwrap();
        assert!(attempts >= 2, "sheet {n} was retried: {doc:#}");
    }
    let statuses: Vec<u16> = rc.mock.requests().iter().map(|r| r.status).collect();
    assert!(statuses.contains(&503), "{statuses:?}");
    assert!(statuses.contains(&200), "{statuses:?}");
}

#[test]
fn status_and_logs_follow_show_tool_calls_while_the_cli_streams() {
    let Some(rc) = started() else { return };
    // The first turn runs the file-writing command at once; the answer after it streams
    // for ~4 s.
    let score = write_file_score("rc-live", &instrument(60), 1, "slow mock-ms:1000", "");
    let follower = rc
        .env
        .command(&["logs", "rc-live", "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn mozart logs --follow");
    std::thread::sleep(Duration::from_millis(300));
    rc.run_score("rc-live", &score);
    let doc = rc.wait_for("rc-live", 60, |d| {
        d["sheets"]["1"]["live"]["tool_calls"].as_u64().unwrap_or(0) >= 1
            || d["status"] != "running" && d["status"] != "queued"
    });
    assert_eq!(doc["status"], "running", "seen before the end: {doc:#}");
    let live = &doc["sheets"]["1"]["live"];
    assert_eq!(live["last_tool"], "command_execution", "{doc:#}");
    // Codex 0.169 reports tokens only in `turn.completed`, at the end of the run.
    assert_eq!(live["input_tokens"], 0, "{doc:#}");
    let text = mozart_tests::stdout(&rc.mozart(&["status", "rc-live"]));
    assert!(
        text.contains("Tool calls: 1 (last: command_execution)"),
        "{text}"
    );
    let doc = rc.wait_done("rc-live", 60);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(
        doc["sheets"]["1"].get("live").is_none(),
        "gone once done: {doc:#}"
    );
    // Two API turns (the command, then the answer), counted once the turn completed.
    assert_eq!(
        doc["cost"]["total_input_tokens"],
        2 * INPUT_TOKENS,
        "{doc:#}"
    );
    std::thread::sleep(Duration::from_millis(700));
    mozart_tests::signal(follower.id(), "INT");
    let out = follower.wait_with_output().unwrap();
    let text = mozart_tests::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("sheet 1: 1 tool call(s) (last: command_execution)"),
        "{text}"
    );
    assert!(text.contains("Stopped following logs."), "{text}");
}
