//! The real Claude Code CLI (`@anthropic-ai/claude-code`, tests/real-cli/setup.sh) under a
//! real conductor, against the local mock Messages API (issue 13): the tests every real CLI
//! passes ([`real_cli_tests!`]) and what only Claude Code does. Each test skips with a
//! printed reason when the CLI is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mozart_tests::mock_api::INPUT_TOKENS;
use mozart_tests::real_cli::{write_file_score, RealCliEnv, CLAUDE};
use mozart_tests::real_cli_tests;

real_cli_tests!(CLAUDE);

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

#[test]
fn a_429_is_a_rate_limit_waited_out_without_spending_a_retry() {
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    // The API refuses for 4 s (retry-after: 2); the CLI retries once by itself, gives up,
    // and the conductor waits the API's hint out (its `api_retry` delay).
    rc.check_rate_limit_waited_out(&CLAUDE, 4000);
}

#[test]
fn an_overloaded_api_is_retried() {
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    rc.run_overloaded(&CLAUDE, "rc-529", 1);
    let doc = rc.check_overload_retried("rc-529");
    // 529 makes the CLI give up within seconds: the conductor retried the sheet.
    let attempts = doc["sheets"]["1"]["attempt_count"].as_u64().unwrap();
    assert!(attempts >= 2, "{doc:#}");
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
        &CLAUDE.instrument(60),
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

#[test]
fn status_shows_tool_calls_and_tokens_while_the_cli_streams() {
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    let seen = rc.check_live_progress(&CLAUDE, "Write");
    // stream-json reports each API message's usage as it arrives.
    let live = &seen.running["sheets"]["1"]["live"];
    assert!(
        live["input_tokens"].as_u64().unwrap() >= INPUT_TOKENS,
        "{live:#}"
    );
    assert!(
        seen.status_text.contains("Tokens so far: 1,200 in"),
        "{}",
        seen.status_text
    );
}

#[test]
fn the_claude_code_profile_runs_the_real_cli_too() {
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    // The generic profile: prompt as an argument, one JSON document, its environment
    // filtered to the listed variables (which must include the base URL and IS_SANDBOX).
    let instrument = "instrument: claude-code\nbackend:\n  timeout_seconds: 60";
    rc.run_score(
        "rc-cc",
        &write_file_score("rc-cc", instrument, 1, "write", ""),
    );
    let doc = rc.wait_done("rc-cc", 60);
    rc.assert_completed("rc-cc", &doc);
    assert_eq!(
        doc["cost"]["total_input_tokens"],
        2 * INPUT_TOKENS,
        "{doc:#}"
    );
}

#[test]
fn the_claude_code_profile_retries_an_overloaded_api_instead_of_waiting() {
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    // The profile reads the result's `api_error_status` (529): a transient error retried
    // with the score's backoff. Reading "Overloaded" as a rate limit parked it for 5 minutes.
    let instrument = "instrument: claude-code\nbackend:\n  timeout_seconds: 60";
    let retries = "retry: {max_retries: 5, base_delay_seconds: 1, jitter: false}\n";
    let score = write_file_score("rc-cc529", instrument, 1, "overload mock-ms:2500", retries);
    rc.run_score("rc-cc529", &score);
    let doc = rc.check_overload_retried("rc-cc529");
    let attempts = doc["sheets"]["1"]["attempt_count"].as_u64().unwrap();
    assert!(attempts >= 2, "{doc:#}");
}
