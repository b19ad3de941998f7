//! The real codex CLI (tests/real-cli/setup.sh) under a real conductor, against the local
//! mock API (issue 13): the tests every real CLI passes ([`real_cli_tests!`]) and what only
//! Codex does. Each test skips with a printed reason when the CLI is not installed.

use std::time::{Duration, Instant};

use mozart_tests::mock_api::INPUT_TOKENS;
use mozart_tests::real_cli::{write_file_score, RealCliEnv, CODEX};
use mozart_tests::real_cli_tests;

real_cli_tests!(CODEX);

#[test]
fn clear_rate_limits_ends_a_wait_early() {
    let Some(rc) = RealCliEnv::start(&CODEX) else {
        return;
    };
    // Codex 0.169 reports only "exceeded retry limit, last status: 429 Too Many Requests"
    // (no retry-after), so the conductor probes again after its first step (15 s); the test
    // ends the wait sooner with `mozart clear-rate-limits` once the API recovered.
    let score = write_file_score(
        "rc-429",
        &CODEX.instrument(90),
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
    rc.assert_completed("rc-429", &doc);
    assert_eq!(doc["execution"]["total_retry_count"], 0, "{doc:#}");
}

#[test]
fn an_overloaded_api_is_retried_with_backoff_not_parked_as_a_rate_limit() {
    // The CLI's retries capped, so that it gives up on the 503 within seconds (with its
    // defaults it retries by itself: `an_overload_is_the_clis_to_retry_and_shows_in_status`).
    let Some(rc) = RealCliEnv::start_capped(&CODEX) else {
        return;
    };
    // Codex retries a 503 by itself (capped to one retry of each kind here, ~1.5 s), then
    // reports "unexpected status 503 Service Unavailable: …", and the conductor retries the
    // sheet with the score's backoff. It used to read "overloaded" as a rate limit and park
    // the instrument for 5 minutes.
    let t0 = Instant::now();
    rc.run_overloaded(&CODEX, "rc-overload", 2);
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
    let doc = rc.check_overload_retried("rc-overload");
    assert!(t0.elapsed() < Duration::from_secs(50));
    assert!(
        doc["execution"]["total_retry_count"].as_u64().unwrap() >= 2,
        "{doc:#}"
    );
    for n in ["1", "2"] {
        let attempts = doc["sheets"][n]["attempt_count"].as_u64().unwrap();
        assert!(attempts >= 2, "sheet {n} was retried: {doc:#}");
    }
}

#[test]
fn a_failed_cli_names_its_cause() {
    let Some(rc) = RealCliEnv::start(&CODEX) else {
        return;
    };
    rc.check_failure_names_its_cause(&CODEX, "does not exist or you do not have access");
    // The score names no model: Codex took its config.toml's. The advice says so, where it
    // sent the user to the score's instrument_config.model or claude_cli's backend.cli_model.
    let doc = rc.status("rc-crash");
    let message = doc["sheets"]["1"]["error_message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("the score names no model")
            && message.contains("config.toml")
            && !message.contains("backend.cli_model"),
        "{message}"
    );
}

#[test]
fn status_and_logs_follow_show_tool_calls_while_the_cli_streams() {
    let Some(rc) = RealCliEnv::start(&CODEX) else {
        return;
    };
    // Codex runs the write as a shell command.
    let seen = rc.check_live_progress(&CODEX, "command_execution");
    // Codex 0.169 reports tokens only in `turn.completed`, at the end of the run.
    assert_eq!(seen.running["sheets"]["1"]["live"]["input_tokens"], 0);
    // Two API turns (the command, then the answer), counted once the turn completed.
    assert_eq!(
        seen.done["cost"]["total_input_tokens"],
        2 * INPUT_TOKENS,
        "{:#}",
        seen.done
    );
}
