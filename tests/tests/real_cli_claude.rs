//! The real Claude Code CLI (`@anthropic-ai/claude-code`, tests/real-cli/setup.sh) under a
//! real conductor, against the local mock Messages API (issue 13): the tests every real CLI
//! passes ([`real_cli_tests!`]) and what only Claude Code does. Each test skips with a
//! printed reason when the CLI is not installed.

use mozart_tests::mock_api::INPUT_TOKENS;
use mozart_tests::real_cli::{
    processes_mentioning, write_file_score, RealCli, RealCliEnv, CLAUDE, CLAUDE_CODE, CLAUDE_JSON,
    CLAUDE_TEXT,
};
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
fn an_overloaded_api_is_retried_by_the_conductor_once_the_cli_gives_up() {
    // With its retries capped the CLI gives up on 529 within seconds; the conductor then
    // retries the sheet with the score's backoff. (With its defaults it retries a 529 ten
    // times by itself: `an_overload_is_the_clis_to_retry_and_shows_in_status`.)
    let Some(rc) = RealCliEnv::start_capped(&CLAUDE) else {
        return;
    };
    rc.run_overloaded(&CLAUDE, "rc-529", 1);
    let doc = rc.check_overload_retried("rc-529");
    let attempts = doc["sheets"]["1"]["attempt_count"].as_u64().unwrap();
    assert!(attempts >= 2, "{doc:#}");
}

#[test]
fn a_score_without_an_instrument_gets_tokens_cost_and_live_progress() {
    // Issue 22: the default instrument ran the CLI in text mode — 0 tokens, $0.00 and no
    // live progress for every score that names no instrument.
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    assert!(!CLAUDE.instrument(60).contains("instrument:"));
    let doc = rc.check_two_sheets_write_files(&CLAUDE);
    let usd = doc["cost"]["total_estimated_cost"].as_f64().unwrap_or(0.0);
    assert!(usd > 0.0, "{doc:#}");
    let text = mozart_tests::stdout(&rc.mozart(&["status", "rc-claude"]));
    assert!(!text.contains("$0.00"), "{text}");
}

#[test]
fn a_failed_cli_names_its_cause() {
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    rc.check_failure_names_its_cause(&CLAUDE, "There's an issue with the selected model");
}

#[test]
fn in_text_mode_a_bad_key_fails_fast_too() {
    // No live events in text mode: the conductor caps the CLI's own retries instead.
    let Some(rc) = RealCliEnv::start(&CLAUDE_TEXT) else {
        return;
    };
    rc.check_bad_key_fails_fast(&CLAUDE_TEXT);
}

#[test]
fn in_json_mode_a_bad_key_fails_fast_too() {
    let Some(rc) = RealCliEnv::start(&CLAUDE_JSON) else {
        return;
    };
    rc.check_bad_key_fails_fast(&CLAUDE_JSON);
}

#[test]
fn in_text_mode_a_429_is_waited_out_and_shown() {
    // The capped CLI gives up after ~6 s of 429s (retry-after 3); the API recovers after 12 s.
    let Some(rc) = RealCliEnv::start(&CLAUDE_TEXT) else {
        return;
    };
    rc.check_rate_limit_waited_out(&CLAUDE_TEXT, 12_000);
    // Recorded as the rate limit it is (E101), as in the other modes: the CLI's "API Error:
    // Request rejected (429) · … Please try again later." was read as capacity (E103).
    let out = rc.mozart(&["errors", "rc-429", "--json"]);
    let errors: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let codes: Vec<&str> = errors["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["error_code"].as_str())
        .collect();
    assert_eq!(codes, ["E101"], "{errors:#}");
}

#[test]
fn in_text_mode_a_failed_cli_names_its_cause() {
    let Some(rc) = RealCliEnv::start(&CLAUDE_TEXT) else {
        return;
    };
    rc.check_failure_names_its_cause(&CLAUDE_TEXT, "There's an issue with the selected model");
}

#[test]
fn as_root_without_is_sandbox_the_refusal_is_explained() {
    if !is_root() {
        mozart_tests::users::missing(
            "root, as whom Claude Code refuses to skip permissions",
            "run the real-CLI tests as root",
        );
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
    // The CLI's retries capped, so that it gives up on the 529 within seconds.
    let Some(rc) = RealCliEnv::start_capped(&CLAUDE) else {
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
    // `mozart errors` types each overloaded attempt as what it was, retried with backoff
    // (`transient`), not `rate_limit` from its code's class (E103 is E1xx).
    let out = rc.mozart(&["errors", "rc-cc529", "--json"]);
    let errors: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = errors["errors"].as_array().unwrap();
    assert!(!list.is_empty(), "{errors:#}");
    for e in list {
        assert_eq!(e["error_code"], "E103", "{errors:#}");
        assert_eq!(e["error_type"], "transient", "{errors:#}");
    }
    let table = mozart_tests::stdout(&rc.mozart(&["errors", "rc-cc529"]));
    assert!(!table.contains("rate_limit"), "{table}");
}

/// Claude Code on the generic `claude-code` profile (one JSON document at the end).
const CLAUDE_CODE_PROFILE: RealCli = RealCli {
    instrument: "claude-code",
    backend: "",
    reports_cost: false,
    ..CLAUDE_JSON
};

#[test]
fn the_claude_code_profile_fails_fast_on_a_bad_key_too() {
    // The profile caps the CLI's own retries (unless the conductor's environment sets
    // CLAUDE_CODE_MAX_RETRIES): its ten retries of a 401 took ~3 minutes.
    let Some(rc) = RealCliEnv::start(&CLAUDE_CODE_PROFILE) else {
        return;
    };
    let doc = rc.check_bad_key_fails_fast(&CLAUDE_CODE_PROFILE);
    // The CLI's own words (its `result`), where the sheet said only "Claude Code exited with
    // code 1".
    let message = doc["sheets"]["1"]["error_message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("Invalid API key"),
        "the CLI's words: {message}"
    );
    // The hint names the key that was set (and refused), not all six of the profile's: with
    // them the row of `mozart errors` was cut in the middle of the CLI's words.
    let out = rc.mozart(&["errors", "rc-401"]);
    let table = mozart_tests::stdout(&out);
    assert!(
        table.contains("Invalid API key · Fix external API key. Authentication failed: check"),
        "{table}"
    );
}

#[test]
fn in_text_mode_the_cost_is_unknown_not_zero() {
    // Issue 22: text mode reports neither cost nor tokens; the job said "$0.00" with
    // cost_confidence 1.0, as if the work had been free.
    let Some(rc) = RealCliEnv::start(&CLAUDE_TEXT) else {
        return;
    };
    let score = write_file_score("rc-text", &CLAUDE_TEXT.instrument(90), 1, "write", "");
    rc.run_score("rc-text", &score);
    let doc = rc.wait_done("rc-text", 120);
    rc.assert_completed("rc-text", &doc);
    assert_eq!(doc["cost"]["cost_confidence"], 0.0, "{doc:#}");
    assert_eq!(doc["sheets"]["1"]["cost_confidence"], 0.0, "{doc:#}");
    let text = mozart_tests::stdout(&rc.mozart(&["status", "rc-text"]));
    assert!(text.contains("Cost: unknown"), "{text}");
    assert!(!text.contains("$0.00"), "{text}");
    // The dashboard and MCP say the same, not "$0.0000".
    let dash = mozart_tests::web::start_dashboard(&rc.env, &[]);
    let cookie = mozart_tests::web::login(&dash.addr, &dash.url);
    for path in ["/jobs/rc-text", "/"] {
        let page = mozart_tests::web::http(&dash.addr, "GET", path, &[("Cookie", &cookie)], "");
        assert_eq!(page.status, 200, "{}", page.raw);
        assert!(page.body.contains("unknown"), "{path}: {}", page.body);
        assert!(!page.body.contains("$0.0000"), "{path}: {}", page.body);
    }
    drop(dash);
    let mcp = mozart_tests::web::mcp_calls(
        &rc.env,
        &[serde_json::json!({"name": "status", "arguments": {"job_id": "rc-text"}})],
    );
    let text = mcp[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(doc["cost_confidence"], 0.0, "{}", mcp[0]);
    assert_eq!(doc["cost"], "unknown", "{}", mcp[0]);
    assert_eq!(doc["sheets"][0]["cost"], "unknown", "{}", mcp[0]);
}

#[test]
fn the_claude_code_profile_reports_the_clis_own_cost() {
    // Issue 22: the generic profile reported tokens but $0.00, though Claude Code's JSON
    // says what the run cost.
    let Some(rc) = RealCliEnv::start(&CLAUDE_CODE) else {
        return;
    };
    rc.check_two_sheets_write_files(&CLAUDE_CODE);
}

#[test]
fn in_json_mode_a_429_is_waited_out_and_shown() {
    // As in text mode: the CLI's retries are capped at 2, so it gives up on the 429 after
    // ~6 s (retry-after 3); the API recovers after 12 s.
    let Some(rc) = RealCliEnv::start(&CLAUDE_JSON) else {
        return;
    };
    rc.check_rate_limit_waited_out(&CLAUDE_JSON, 12_000);
}

#[test]
fn the_claude_code_profile_waits_out_a_429() {
    // The profile reads the result's `api_error_status` (429): a rate limit, waited out
    // without spending an attempt.
    let Some(rc) = RealCliEnv::start(&CLAUDE_CODE_PROFILE) else {
        return;
    };
    rc.check_rate_limit_waited_out(&CLAUDE_CODE_PROFILE, 12_000);
}

#[test]
fn in_text_mode_an_overloaded_api_is_retried_not_parked() {
    let Some(rc) = RealCliEnv::start(&CLAUDE_TEXT) else {
        return;
    };
    rc.run_overloaded(&CLAUDE_TEXT, "rc-529", 1);
    rc.check_overload_retried("rc-529");
}

#[test]
fn in_json_mode_an_overloaded_api_is_retried_not_parked() {
    let Some(rc) = RealCliEnv::start(&CLAUDE_JSON) else {
        return;
    };
    rc.run_overloaded(&CLAUDE_JSON, "rc-529", 1);
    rc.check_overload_retried("rc-529");
}

/// The variables a process `pid` started with, as `NAME=value` strings.
fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

#[test]
fn the_claude_code_profile_passes_on_proxy_and_certificate_settings() {
    // The profile passes only listed variables: a user behind a proxy (HTTPS_PROXY, its own
    // CA in NODE_EXTRA_CA_CERTS) or logged in with `claude setup-token`
    // (CLAUDE_CODE_OAUTH_TOKEN) got a CLI that could not reach or sign in to the API, where
    // the default instrument (the whole environment) worked.
    let Some(mut rc) = RealCliEnv::new("claude") else {
        return;
    };
    for (k, v) in CLAUDE_CODE_PROFILE.vars {
        rc.set_var(k, v);
    }
    let passed = [
        // Port 9 (discard) on loopback: never used, the mock is http:// and in NO_PROXY.
        ("HTTPS_PROXY", "http://127.0.0.1:9"),
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("NODE_EXTRA_CA_CERTS", "/etc/ssl/certs/ca-certificates.crt"),
        (
            "CLAUDE_CONFIG_DIR",
            &*rc.cli_home.join(".claude").display().to_string(),
        ),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    for (k, v) in &passed {
        rc.set_var(k, v);
    }
    rc.start_conductor();
    let instrument = "instrument: claude-code\nbackend:\n  timeout_seconds: 60";
    let score = write_file_score("rc-ccenv", instrument, 1, "slow mock-ms:700", "");
    rc.run_score("rc-ccenv", &score);
    let ws = rc.env.work.join("rc-ccenv-ws");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let seen = loop {
        let found: Vec<Vec<String>> = processes_mentioning(&ws)
            .into_iter()
            .map(|(pid, _)| environ(pid))
            .filter(|e| e.iter().any(|v| v.starts_with("MOZART_ATTEMPT=")))
            .collect();
        if let Some(env) = found.into_iter().next() {
            break env;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no CLI process seen: {:#}",
            rc.status("rc-ccenv")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    for (k, v) in &passed {
        let want = format!("{k}={v}");
        assert!(seen.contains(&want), "{want} reaches the CLI: {seen:#?}");
    }
    let doc = rc.wait_done("rc-ccenv", 60);
    rc.assert_completed("rc-ccenv", &doc);
}

#[test]
fn a_retrys_next_try_is_a_clock_time_not_a_countdown_that_stands_still() {
    // Live Progress said "Latest: API overloaded (HTTP 529): … (retry 5/10, next in 8.7s)"
    // and still said "next in 8.7s" seconds later: the countdown was the event's, shown as
    // if live. It names the time of the next try instead.
    let Some(rc) = RealCliEnv::start(&CLAUDE) else {
        return;
    };
    rc.run_overloaded(&CLAUDE, "rc-clock", 1);
    let running = rc.wait_for("rc-clock", 60, |d| {
        d["sheets"]["1"]["live"]["last_event"]
            .as_str()
            .is_some_and(|e| e.contains("API overloaded"))
            || matches!(d["status"].as_str(), Some("completed" | "failed"))
    });
    let event = running["sheets"]["1"]["live"]["last_event"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let clock = regex::Regex::new(r"next at \d\d:\d\d:\d\d UTC\)$").unwrap();
    assert!(clock.is_match(&event), "{running:#}");
    assert!(!event.contains("next in"), "{event}");
    rc.check_overload_retried("rc-clock");
}
