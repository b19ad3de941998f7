//! The real gemini CLI (tests/real-cli/setup.sh) under a real conductor, against the local
//! mock API (issue 13). Each test skips with a printed reason when the CLI is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mozart_tests::mock_api::{FILE_CONTENT, INPUT_TOKENS, OUTPUT_TOKENS};
use mozart_tests::real_cli::{write_file_score, RealCliEnv};

fn instrument(timeout: u32) -> String {
    format!("instrument: gemini-cli\nbackend:\n  timeout_seconds: {timeout}")
}

fn started() -> Option<RealCliEnv> {
    let rc = RealCliEnv::new("gemini")?;
    rc.start_conductor();
    Some(rc)
}

#[test]
fn two_sheets_write_files_and_report_tokens() {
    let Some(rc) = started() else { return };
    rc.run_score(
        "rc-gemini",
        &write_file_score("rc-gemini", &instrument(90), 2, "write", ""),
    );
    let doc = rc.wait_done("rc-gemini", 150);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-gemini")
    );
    let ws = rc.env.work.join("rc-gemini-ws");
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
fn a_429_is_a_rate_limit_waited_out_without_spending_a_retry() {
    let Some(rc) = started() else { return };
    let score = write_file_score(
        "rc-429",
        &instrument(90),
        1,
        "ratelimit mock-ms:7500",
        "retry: {max_retries: 0}\n",
    );
    rc.run_score("rc-429", &score);
    let doc = rc.wait_done("rc-429", 120);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-429")
    );
    assert!(
        doc["execution"]["rate_limit_waits"].as_u64().unwrap() >= 1,
        "{doc:#}"
    );
    assert!(rc.mock.requests().iter().any(|r| r.status == 429));
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
        errors.contains("GEMINI_API_KEY"),
        "a hint names the key: {errors}"
    );
}

#[test]
fn a_hang_hits_the_timeout_and_leaves_no_process() {
    let Some(rc) = started() else { return };
    let score = write_file_score(
        "rc-hang",
        &instrument(12),
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
fn an_overloaded_api_is_retried() {
    let Some(rc) = started() else { return };
    let score = write_file_score(
        "rc-overload",
        &instrument(90),
        1,
        "overload mock-ms:2500",
        "retry: {max_retries: 3, base_delay_seconds: 1, jitter: false}\n",
    );
    rc.run_score("rc-overload", &score);
    let doc = rc.wait_done("rc-overload", 150);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-overload")
    );
    // Retried — by the CLI's own retry or by the conductor's — until the API answered.
    let statuses: Vec<u16> = rc.mock.requests().iter().map(|r| r.status).collect();
    assert!(
        statuses.iter().any(|s| *s == 503 || *s == 529),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200), "{statuses:?}");
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
