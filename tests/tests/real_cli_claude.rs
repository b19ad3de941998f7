//! The real Claude Code CLI (`@anthropic-ai/claude-code`, tests/real-cli/setup.sh) under a
//! real conductor, against the local mock Messages API (issue 13). Each test skips with a
//! printed reason when the CLI is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mozart_tests::mock_api::{INPUT_TOKENS, OUTPUT_TOKENS};
use mozart_tests::real_cli::{
    assert_no_process, processes_mentioning, write_file_score, RealCliEnv,
};

fn claude(timeout: u32) -> String {
    format!(
        "instrument: claude_cli\nbackend:\n  output_format: stream-json\n  timeout_seconds: {timeout}"
    )
}

fn sandboxed() -> Option<RealCliEnv> {
    let mut rc = RealCliEnv::new("claude")?;
    // As root the CLI refuses to skip permissions unless told it runs in a sandbox.
    rc.set_var("IS_SANDBOX", "1");
    rc.start_conductor();
    Some(rc)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

#[test]
fn two_sheets_write_files_and_report_tokens_and_cost() {
    let Some(rc) = sandboxed() else { return };
    rc.run_score(
        "rc-claude",
        &write_file_score("rc-claude", &claude(60), 2, "write", ""),
    );
    let doc = rc.wait_done("rc-claude", 120);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-claude")
    );
    let ws = rc.env.work.join("rc-claude-ws");
    for n in 1..=2 {
        let text = std::fs::read_to_string(ws.join(format!("out-{n}.txt"))).unwrap();
        assert_eq!(text, mozart_tests::mock_api::FILE_CONTENT);
    }
    // Two sheets of two API turns each (the tool call, then the answer).
    assert_eq!(doc["cost"]["total_input_tokens"], 2 * 2 * INPUT_TOKENS);
    assert_eq!(doc["cost"]["total_output_tokens"], 2 * 2 * OUTPUT_TOKENS);
    let cost = doc["cost"]["total_estimated_cost"].as_f64().unwrap();
    assert!(
        cost > 0.0,
        "the CLI's own cost estimate is recorded: {doc:#}"
    );
    assert_eq!(rc.mock.requests().len(), 4, "one POST per turn");
}

#[test]
fn a_429_is_a_rate_limit_waited_out_without_spending_a_retry() {
    let Some(rc) = sandboxed() else { return };
    // The API refuses for 3 s (retry-after: 2); the CLI retries once by itself, gives up,
    // and the conductor waits the API's hint out. No retries are allowed: spending one
    // would fail the job.
    let score = write_file_score(
        "rc-429",
        &claude(60),
        1,
        "ratelimit mock-ms:4000",
        "retry: {max_retries: 0}\n",
    );
    rc.run_score("rc-429", &score);
    let doc = rc.wait_done("rc-429", 90);
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
    assert_eq!(doc["execution"]["total_retry_count"], 0, "{doc:#}");
    assert!(rc.mock.requests().iter().any(|r| r.status == 429));
}

#[test]
fn an_overloaded_api_is_retried() {
    let Some(rc) = sandboxed() else { return };
    let score = write_file_score(
        "rc-529",
        &claude(60),
        1,
        "overload mock-ms:2500",
        "retry: {max_retries: 3, base_delay_seconds: 1, jitter: false}\n",
    );
    rc.run_score("rc-529", &score);
    let doc = rc.wait_done("rc-529", 90);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-529")
    );
    assert!(rc.mock.requests().iter().any(|r| r.status == 529));
    assert!(
        doc["sheets"]["1"]["attempt_count"].as_u64().unwrap() >= 2,
        "{doc:#}"
    );
}

#[test]
fn a_bad_api_key_fails_fast_with_a_hint() {
    let Some(rc) = sandboxed() else { return };
    let score = write_file_score(
        "rc-401",
        &claude(60),
        1,
        "auth",
        "retry: {max_retries: 3, base_delay_seconds: 1}\n",
    );
    let started = Instant::now();
    rc.run_score("rc-401", &score);
    let doc = rc.wait_done("rc-401", 60);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    // One attempt: the CLI's own request and its one capped retry.
    let calls = rc
        .mock
        .requests()
        .iter()
        .filter(|r| r.status == 401)
        .count();
    assert!(calls <= 2, "no retry of a bad key: {calls} calls\n{doc:#}");
    assert_eq!(doc["sheets"]["1"]["error_category"], "auth", "{doc:#}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let errors = rc.errors_text("rc-401");
    assert!(
        errors.contains("ANTHROPIC_API_KEY"),
        "a hint names the key: {errors}"
    );
}

#[test]
fn a_hang_hits_the_timeout_and_leaves_no_process() {
    let Some(rc) = sandboxed() else { return };
    let score = write_file_score(
        "rc-hang",
        &claude(4),
        1,
        "hang",
        "retry: {max_retries: 0}\n",
    );
    rc.run_score("rc-hang", &score);
    let doc = rc.wait_done("rc-hang", 60);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(doc["sheets"]["1"]["error_category"], "timeout", "{doc:#}");
    let ws = rc.env.work.join("rc-hang-ws");
    assert_no_process(&ws);
}

#[test]
fn cancel_leaves_no_process() {
    let Some(rc) = sandboxed() else { return };
    let score = write_file_score("rc-cancel", &claude(120), 1, "hang", "");
    rc.run_score("rc-cancel", &score);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rc.mock.requests().iter().any(|r| r.scenario == "hang") {
        assert!(Instant::now() < deadline, "claude never called the API");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ws = rc.env.work.join("rc-cancel-ws");
    assert!(
        !processes_mentioning(&ws).is_empty(),
        "claude runs in the workspace"
    );
    let out = rc.mozart(&["cancel", "rc-cancel"]);
    assert_eq!(out.status.code(), Some(0));
    rc.wait_done("rc-cancel", 30);
    assert_no_process(&ws);
}

#[test]
fn as_root_without_is_sandbox_the_refusal_is_explained() {
    if !is_root() {
        eprintln!("SKIPPED: not running as root, so Claude Code does not refuse");
        return;
    }
    let Some(rc) = RealCliEnv::new("claude") else {
        return;
    };
    rc.start_conductor();
    let score = write_file_score(
        "rc-root",
        &claude(60),
        1,
        "write",
        "retry: {max_retries: 2}\n",
    );
    rc.run_score("rc-root", &score);
    let doc = rc.wait_done("rc-root", 60);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert!(
        doc["sheets"]["1"]["attempt_count"].as_u64().unwrap() <= 1,
        "not retried: {doc:#}"
    );
    assert_eq!(
        doc["sheets"]["1"]["error_category"], "configuration",
        "{doc:#}"
    );
    let errors = rc.errors_text("rc-root");
    assert!(
        errors.contains("IS_SANDBOX=1"),
        "the fix is named: {errors}"
    );
    assert!(errors.contains("root"), "the cause is named: {errors}");
    assert!(rc.mock.requests().is_empty(), "refused before any API call");
}

/// Within a few seconds no process runs in (or names) the workspace.

#[test]
fn status_shows_tool_calls_and_tokens_while_the_cli_streams() {
    let Some(rc) = sandboxed() else { return };
    // The first turn writes the file at once; the answer after it streams for ~4 s.
    let score = write_file_score("rc-live", &claude(60), 1, "slow mock-ms:1000", "");
    // `logs --follow` streams from the conductor: the instrument's progress as it happens.
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
    assert_eq!(live["last_tool"], "Write", "{doc:#}");
    assert!(
        live["input_tokens"].as_u64().unwrap() >= INPUT_TOKENS,
        "{doc:#}"
    );
    let text = mozart_tests::stdout(&rc.mozart(&["status", "rc-live"]));
    assert!(text.contains("Tool calls: 1 (last: Write)"), "{text}");
    assert!(text.contains("Tokens so far: 1,200 in"), "{text}");
    let doc = rc.wait_done("rc-live", 60);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(
        doc["sheets"]["1"].get("live").is_none(),
        "gone once done: {doc:#}"
    );
    std::thread::sleep(Duration::from_millis(700));
    mozart_tests::signal(follower.id(), "INT");
    let out = follower.wait_with_output().unwrap();
    let text = mozart_tests::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Following the conductor's log for score 'rc-live'"),
        "{text}"
    );
    assert!(
        text.contains("sheet 1: 1 tool call(s) (last: Write)"),
        "{text}"
    );
    assert!(text.contains("Stopped following logs."), "{text}");
}

#[test]
fn the_claude_code_profile_runs_the_real_cli_too() {
    let Some(rc) = sandboxed() else { return };
    // The generic profile: prompt as an argument, one JSON document, its environment
    // filtered to the listed variables (which must include the base URL and IS_SANDBOX).
    let instrument = "instrument: claude-code\nbackend:\n  timeout_seconds: 60";
    rc.run_score(
        "rc-cc",
        &write_file_score("rc-cc", instrument, 1, "write", ""),
    );
    let doc = rc.wait_done("rc-cc", 60);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        rc.errors_text("rc-cc")
    );
    assert_eq!(
        doc["cost"]["total_input_tokens"],
        2 * INPUT_TOKENS,
        "{doc:#}"
    );
}
