//! Table-driven tests from execution.md §7 and claude-code-output.md §6.

use super::*;
use ErrorCode as E;

fn failed(stdout: &str, stderr: &str, exit_code: Option<i32>) -> ExecutionResult {
    ExecutionResult {
        success: false,
        exit_code,
        stdout: stdout.into(),
        stderr: stderr.into(),
        ..Default::default()
    }
}

#[test]
fn code_table_is_complete_and_consistent() {
    // execution.md §7.1's 40, and ours: E701, E702 (the reviewer loop).
    assert_eq!(ErrorCode::ALL.len(), 42);
    assert_eq!(ErrorCode::parse("E104"), Some(ErrorCode::E104));
    assert!(ErrorCode::E101.is_rate_limit() && !ErrorCode::E502.is_rate_limit());
    assert_eq!(ErrorCode::E505.root_priority(), 10);
    assert!(!ErrorCode::E502.is_retriable());
    assert_eq!(ErrorCode::E006.delay_seconds(), 120.0);
    assert_eq!(serde_json::to_string(&ErrorCode::E101).unwrap(), "\"E101\"");
}

/// One row of the single-output table: stdout, stderr, exit code, signal, exit reason,
/// the code expected and whether it is retried.
type SingleOutputCase = (
    &'static str,
    &'static str,
    Option<i32>,
    Option<i32>,
    ExitReason,
    ErrorCode,
    bool,
);

const SINGLE_OUTPUT_CASES: &[SingleOutputCase] = &[
    ("", "", None, Some(15), ExitReason::Timeout, E::E001, true),
    ("", "", None, Some(11), ExitReason::Killed, E::E003, false),
    (
        "",
        "Out of memory",
        None,
        Some(9),
        ExitReason::Killed,
        E::E005,
        false,
    ),
    ("", "", None, Some(9), ExitReason::Killed, E::E002, true),
    ("", "", None, Some(2), ExitReason::Killed, E::E004, false),
    ("", "", Some(-15), None, ExitReason::Killed, E::E002, true),
    ("", "", None, None, ExitReason::Timeout, E::E001, true),
    (
        "stale execution detected",
        "",
        None,
        None,
        ExitReason::Timeout,
        E::E006,
        true,
    ),
    (
        "Error: 429 Too Many Requests",
        "",
        Some(1),
        None,
        ExitReason::Completed,
        E::E101,
        true,
    ),
    (
        "API overloaded, try again later",
        "",
        Some(1),
        None,
        ExitReason::Completed,
        E::E103,
        true,
    ),
    (
        "daily token limit reached, resets in 2 hours",
        "",
        Some(1),
        None,
        ExitReason::Completed,
        E::E104,
        true,
    ),
    (
        "",
        "spawn claude ENOENT",
        Some(1),
        None,
        ExitReason::Completed,
        E::E505,
        true,
    ),
    (
        "",
        "Invalid API key",
        Some(1),
        None,
        ExitReason::Completed,
        E::E502,
        false,
    ),
    (
        "",
        "MCP server error: boom",
        Some(1),
        None,
        ExitReason::Completed,
        E::E305,
        false,
    ),
    (
        "",
        "getaddrinfo failed",
        Some(1),
        None,
        ExitReason::Completed,
        E::E902,
        true,
    ),
    (
        "",
        "SSL_ERROR_SYSCALL",
        Some(1),
        None,
        ExitReason::Completed,
        E::E903,
        true,
    ),
    (
        "",
        "connection refused",
        Some(1),
        None,
        ExitReason::Completed,
        E::E901,
        true,
    ),
    (
        "done",
        "",
        Some(0),
        None,
        ExitReason::Completed,
        E::E209,
        true,
    ),
    (
        "",
        "syntax error near x",
        Some(2),
        None,
        ExitReason::Completed,
        E::E009,
        false,
    ),
    (
        "",
        "boom",
        Some(1),
        None,
        ExitReason::Completed,
        E::E009,
        true,
    ),
    (
        "",
        "",
        Some(124),
        None,
        ExitReason::Completed,
        E::E001,
        true,
    ),
    (
        "",
        "",
        Some(127),
        None,
        ExitReason::Completed,
        E::E505,
        false,
    ),
    ("", "", None, None, ExitReason::Error, E::E999, true),
    ("", "", Some(3), None, ExitReason::Completed, E::E999, false),
];

#[test]
fn single_output_table() {
    let cases = SINGLE_OUTPUT_CASES;
    for (stdout, stderr, code, sig, reason, want, retriable) in cases {
        let got = classify_output(stdout, stderr, *code, *sig, *reason);
        assert_eq!(
            (got.code, got.retriable),
            (*want, *retriable),
            "{stdout:?} {stderr:?} {code:?} {sig:?}"
        );
    }
}

#[test]
fn claude_structured_rate_limit_event_wins_with_its_reset() {
    let reset = epoch_now() + 7200.0;
    let result = ExecutionResult {
        rate_limited: true,
        rate_limit_reset: Some(reset),
        api_error_status: Some(429),
        ..failed(
            "You've hit your session limit · resets 2:50pm (UTC)",
            "",
            Some(1),
        )
    };
    let c = classify(&result);
    assert_eq!(c.code, ErrorCode::E101);
    assert_eq!(c.category, ErrorCategory::RateLimit);
    assert_eq!(c.method, ClassificationMethod::Structured);
    let rl = c.rate_limit.expect("rate limit info");
    assert_eq!(rl.reset_at_epoch, Some(reset));
    assert!((rl.wait_seconds - 7260.0).abs() < 5.0, "{rl:?}");
}

#[test]
fn claude_limit_texts_without_event_give_quota_with_reset() {
    for text in [
        "You've hit your limit · resets 1am (Europe/Oslo)",
        "You've hit your weekly limit · resets Aug 5, 7am (America/New_York)",
        "Claude AI usage limit reached|4102444800",
        "5-hour limit reached ∙ resets 2am",
    ] {
        let c = classify(&failed(text, "", Some(1)));
        assert_eq!(c.category, ErrorCategory::RateLimit, "{text}");
        let rl = c.rate_limit.expect("rate limit");
        assert!(rl.reset_at_epoch.is_some(), "{text}: {c:?}");
        assert!(rl.wait_seconds >= MIN_WAIT_SECONDS, "{text}");
    }
}

#[test]
fn api_status_429_without_text_reset_still_parks() {
    let result = ExecutionResult {
        api_error_status: Some(429),
        ..failed("API Error: Rate limit reached", "", Some(1))
    };
    let c = classify(&result);
    assert_eq!(c.code, ErrorCode::E101);
    assert_eq!(
        c.rate_limit.map(|r| r.wait_seconds),
        Some(DEFAULT_RATE_LIMIT_WAIT_SECONDS)
    );
}

#[test]
fn success_quoting_a_limit_is_not_a_limit() {
    let ok = ExecutionResult {
        success: true,
        exit_code: Some(0),
        stdout: "Fixed the 429 handling and the quota check".into(),
        ..Default::default()
    };
    let c = classify(&ok);
    assert_eq!(c.code, ErrorCode::E209);
    assert!(c.rate_limit.is_none());
}

#[test]
fn profile_flagged_rate_limit_is_honoured_even_without_default_patterns() {
    let result = ExecutionResult {
        rate_limited: true,
        ..failed("RESOURCE_EXHAUSTED", "", Some(1))
    };
    let c = classify(&result);
    assert_eq!(c.category, ErrorCategory::RateLimit);
}

#[test]
fn json_errors_array_and_root_cause() {
    let stdout = r#"starting up {"result":"","errors":[{"type":"system","message":"Rate limit exceeded"},{"type":"user","message":"spawn claude ENOENT"}]}"#;
    let c = classify(&failed(stdout, "", Some(1)));
    // E505 gets -10 when anything else is present: it is the root cause.
    assert_eq!(c.code, ErrorCode::E505);
    assert_eq!(c.secondary.len(), 1);
    assert_eq!(c.secondary[0].code, ErrorCode::E101);
    assert!(c.confidence > 0.5);
    assert_eq!(c.method, ClassificationMethod::Structured);

    let tool = r#"{"errors":[{"type":"tool","message":"pytest failed"}]}"#;
    assert_eq!(classify(&failed(tool, "", Some(1))).code, ErrorCode::E203);
    let max_turns = r#"{"type":"result","subtype":"error_max_turns","is_error":true,"errors":["Reached maximum number of turns (1)"]}"#;
    assert_eq!(
        classify(&failed(max_turns, "", Some(1))).code,
        ErrorCode::E999
    );
}

#[test]
fn timeout_with_signal_and_auth_beats_rate_limit_text() {
    let timed_out = ExecutionResult {
        exit_signal: Some(15),
        exit_reason: ExitReason::Timeout,
        timed_out: true,
        ..failed("", "", None)
    };
    let c = classify(&timed_out);
    assert_eq!(
        (c.code, c.category),
        (ErrorCode::E001, ErrorCategory::Timeout)
    );

    let auth = failed("", "401 unauthorized: invalid api key; rate limit", Some(1));
    let c = classify(&auth);
    // The text matches the rate-limit set first (§7.4 step 3); the message is redacted.
    assert_eq!(c.category, ErrorCategory::RateLimit);
    let auth = failed("Invalid API key · Please run /login", "", Some(1));
    assert_eq!(classify(&auth).code, ErrorCode::E502);
    assert!(!classify(&auth).should_retry());
}

#[test]
fn an_exit_code_that_is_not_retried_says_so() {
    let c = classify(&failed("", "something broke", Some(3)));
    assert_eq!(c.code, ErrorCode::E999);
    assert!(!c.should_retry());
    assert!(
        c.message
            .ends_with("(not retried: exit code 3 is not one Mozart retries; 1, 2 and 124 are)"),
        "{}",
        c.message
    );
    // A retried exit code says nothing of the kind.
    let c = classify(&failed("", "something broke", Some(1)));
    assert!(!c.message.contains("not retried"), "{}", c.message);
}

#[test]
fn a_timeout_says_how_long_the_sheet_was_given() {
    let timed_out = ExecutionResult {
        exit_signal: Some(15),
        exit_reason: ExitReason::Timeout,
        timed_out: true,
        error_message: Some("Timed out after 3s".into()),
        ..failed("", "Command timed out after 3s", None)
    };
    let c = classify(&timed_out);
    assert_eq!(c.code, ErrorCode::E001);
    assert_eq!(
        c.message,
        "Process killed by SIGTERM due to timeout: Timed out after 3s"
    );
}

#[test]
fn disk_quota_exceeded_is_a_failure_not_a_rate_limit() {
    // EDQUOT from a command in a `shell` sheet: no service asked to wait, and waits have
    // no cap, so as a rate limit the sheet waited forever and held every shell sheet.
    let full = failed(
        "",
        "cp: error writing 'big.bin': Disk quota exceeded",
        Some(1),
    );
    let c = classify(&full);
    assert_ne!(c.category, ErrorCategory::RateLimit, "{c:?}");
    assert!(c.should_retry(), "{c:?}");
    assert!(!detect_rate_limit(
        "",
        "write: Disk quota exceeded",
        Some(1)
    ));
    // A real limit beside it is still one.
    let both = failed(
        "",
        "Disk quota exceeded\nError: 429 Too Many Requests",
        Some(1),
    );
    assert_eq!(classify(&both).category, ErrorCategory::RateLimit);
    assert!(detect_rate_limit("", "API quota exceeded", Some(1)));
}

/// A `shell` command's own failure that merely names a number or a word of the rate-limit
/// patterns (a CSV's line 429, a test called `test_rate_limit_backoff`, item 429) is that
/// failure: as a rate limit it waited for ever, no retry spent, and held back the whole job.
/// A service's words still make one — and any other instrument keeps upstream's patterns.
#[test]
fn a_shell_failure_naming_429_or_rate_limit_is_no_rate_limit_but_a_services_words_are() {
    let retried = [
        "error on line 429 of input.csv",
        "FAILED tests/test_api.py::test_rate_limit_backoff - AssertionError",
    ];
    for text in retried {
        let c = classify_for(&failed("", text, Some(1)), "shell");
        assert_ne!(c.category, ErrorCategory::RateLimit, "{text}: {c:?}");
        assert!(c.should_retry(), "{text}: {c:?}");
        // Upstream's patterns for every other instrument.
        let other = classify_for(&failed("", text, Some(1)), "my-agent");
        assert_eq!(
            other.category,
            ErrorCategory::RateLimit,
            "{text}: {other:?}"
        );
    }
    let c = classify_for(&failed("", "boom in item 429", Some(3)), "shell");
    assert_eq!(c.code, E::E999, "exit 3 fails at once: {c:?}");
    assert!(!c.should_retry(), "{c:?}");
    for text in [
        "Error: rate limit exceeded (429 too many requests)",
        "curl: (22) The requested URL returned error: 429",
        "HTTP/1.1 429 Too Many Requests",
        "API rate-limited; try again later",
    ] {
        let c = classify_for(&failed("", text, Some(1)), "shell");
        assert_eq!(c.category, ErrorCategory::RateLimit, "{text}: {c:?}");
    }
}

#[test]
fn detect_rate_limit_rules() {
    assert!(!detect_rate_limit("rate limit", "", None));
    assert!(!detect_rate_limit("", "", Some(1)));
    assert!(detect_rate_limit("", "429", Some(0)));
}

#[test]
fn instrument_profile_patterns_decide_the_class_when_nothing_else_does() {
    // A custom tool's own wording that no generic pattern knows: the profile tagged it.
    let mut r = failed("", "frobnicator: credentials rejected by upstream", Some(3));
    assert_eq!(
        classify(&r).code,
        ErrorCode::E999,
        "untagged output stays unknown"
    );
    r.error_type = Some(FailureKind::Auth);
    let c = classify(&r);
    assert_eq!(
        (c.code, c.category, c.should_retry()),
        (ErrorCode::E502, ErrorCategory::Auth, false)
    );
    r.error_type = Some(FailureKind::Capacity);
    assert_eq!(classify(&r).category, ErrorCategory::RateLimit);
    r.error_type = Some(FailureKind::Crash);
    assert!(classify(&r).should_retry());
}

#[test]
fn http_server_errors_are_transient_backend_responses() {
    let mut r = failed("", "", None);
    r.api_error_status = Some(502);
    let c = classify(&r);
    assert_eq!(
        (c.code, c.category),
        (ErrorCode::E503, ErrorCategory::Transient)
    );
    assert!(c.should_retry());
}

#[test]
fn a_non_zero_exit_names_the_line_that_says_why() {
    // Issue 22: "exit code 1" alone did not say why a CLI failed.
    let stderr = "Warning: 256-color support not detected.\nError: Invalid model name 'x'\n    at main (cli.js:10:3)\n}\n";
    let c = classify(&failed("", stderr, Some(1)));
    assert_eq!(c.code, ErrorCode::E009);
    assert_eq!(
        c.message,
        "Command failed with exit code 1: Error: Invalid model name 'x'"
    );
    // Without an error line, the last line with text; stdout when stderr is empty.
    assert_eq!(
        cause_line("nothing here\nmodel x is unavailable\n", "").as_deref(),
        Some("model x is unavailable")
    );
    // A key in the cause is redacted.
    let c = classify(&failed(
        "",
        "Error: bad key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
        Some(2),
    ));
    assert!(!c.message.contains("abcdefghijklmnop"), "{}", c.message);
    assert_eq!(cause_line("", "[Process killed by SIGTERM]"), None);
}

#[test]
fn a_wait_is_stated_only_when_the_api_or_cli_said_it() {
    let mut r = failed("", "", Some(1));
    r.rate_limited = true;
    r.api_error_status = Some(429);
    r.retry_after_seconds = Some(3.0);
    let c = classify(&r);
    let info = c.rate_limit.unwrap();
    assert!(info.stated, "{c:?}");
    assert_eq!(info.wait_seconds, 3.0);
    // Codex's words name no wait: the classifier's default is only a guess.
    let c = classify(&failed(
        "",
        "exceeded retry limit, last status: 429 Too Many Requests",
        Some(1),
    ));
    assert!(!c.rate_limit.unwrap().stated, "{c:?}");
    let c = classify(&failed(
        "",
        "Resource has been exhausted (e.g. check quota). Please retry in 3s.",
        Some(1),
    ));
    let info = c.rate_limit.unwrap();
    assert!(info.stated && info.wait_seconds == 3.0, "{c:?}");
}

#[test]
fn the_cause_of_a_json_error_document_is_its_message() {
    // Gemini CLI 0.61 on an unknown model: its error document on stderr, after a stack.
    let stderr = "Error when talking to Gemini API Full report available at: /tmp/x.json ModelNotFoundError: models/x is not found\n  code: 404\n}\n{\n  \"session_id\": \"7\",\n  \"error\": {\n    \"type\": \"Error\",\n    \"message\": \"models/x is not found for API version v1beta.\",\n    \"code\": 1\n  }\n}\n";
    assert_eq!(
        cause_line("", stderr).as_deref(),
        Some("models/x is not found for API version v1beta.")
    );
    // Codex's JSONL ends with `turn.failed`.
    let stdout = "{\"type\":\"turn.started\"}\n{\"type\":\"error\",\"message\":\"first\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"The model `x` does not exist.\"}}\n";
    assert_eq!(
        cause_line(stdout, "Reading additional input from stdin...").as_deref(),
        Some("The model `x` does not exist."),
        "an error the CLI reported outranks its chatter"
    );
}

#[test]
fn a_vanished_slurm_job_says_how_it_ended_in_the_error_message() {
    let stderr = "partial output\n\n[Slurm job 42 ended NODE_FAIL without an exit status]\n\nProcess terminated\n";
    let got = classify_output("", stderr, None, None, ExitReason::Completed);
    assert_eq!(got.code, ErrorCode::E999);
    assert_eq!(
        got.message,
        "Process terminated without an exit code: Slurm job 42 ended NODE_FAIL without an exit status"
    );
    let local = classify_output("", "boom\n", None, None, ExitReason::Completed);
    assert_eq!(local.message, "Process terminated without an exit code");
}

/// A model the API does not know (a typo in `instrument_config.model`), in each CLI's words
/// as they exit 1: not retried, and the message says which setting to check and what the
/// CLI said. Upstream retried it as "exit code 1": three attempts, ~45 s, same answer.
#[test]
fn an_unknown_model_fails_at_once_with_the_clis_words() {
    let cases = [
        // Claude Code (claude_cli, claude-code): its answer, and its stderr tag.
        (
            "There's an issue with the selected model (no-such-model-9). It may not exist or you may not have access to it. Run --model to pick a different model.",
            "[claude-code:unrecognized_model] {\"model\":\"no-such-model-9\"}",
            "There's an issue with the selected model (no-such-model-9)",
        ),
        // Gemini CLI 0.61: the API's error document.
        (
            "",
            "{\"error\": {\"type\": \"Error\", \"message\": \"models/no-such-model-9 is not found for API version v1beta, or is not supported for generateContent.\", \"code\": 1}}",
            "models/no-such-model-9 is not found",
        ),
        // Codex: its turn.failed.
        (
            "{\"type\":\"turn.failed\",\"error\":{\"message\":\"The model `no-such-model-9` does not exist or you do not have access to it.\"}}",
            "",
            "The model `no-such-model-9` does not exist",
        ),
    ];
    for (stdout, stderr, words) in cases {
        let c = classify(&failed(stdout, stderr, Some(1)));
        assert_eq!(c.code, ErrorCode::E301, "{c:?}");
        assert!(!c.retriable, "{c:?}");
        assert!(c.message.contains("instrument_config.model"), "{c:?}");
        assert!(c.message.contains(words), "{c:?}");
    }
    // An answer that only talks about models is no such failure.
    let c = classify(&failed("the selected model was fine", "", Some(1)));
    assert_ne!(c.code, ErrorCode::E301, "{c:?}");
}

/// A 429 the CLI reports with its status (the claude-code profile's `api_error_status`) in
/// words that say "try again later": a rate limit (E101), not capacity (E103, which the
/// docs call an overload). Status and errors showed "E103" for it.
#[test]
fn a_429_that_says_try_again_later_is_a_rate_limit_not_capacity() {
    let mut r = failed(
        "{\"type\":\"result\",\"is_error\":true,\"api_error_status\":429}",
        "",
        Some(1),
    );
    r.api_error_status = Some(429);
    r.error_message = Some(
        "Claude Code exited with code 1: API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.".into(),
    );
    let c = classify(&r);
    assert_eq!(c.code, ErrorCode::E101, "{c:?}");
    assert_eq!(c.category, ErrorCategory::RateLimit, "{c:?}");
}

#[test]
fn a_slurm_job_slurm_ended_fails_for_that_reason() {
    let result = ExecutionResult {
        exit_code: Some(1),
        stderr: "RUN step failed (signal: 15 (SIGTERM))\n\n[Slurm job 7 ended TIMEOUT: Slurm stopped it at its time limit]\n".into(),
        ..Default::default()
    };
    let c = classify(&result);
    assert_eq!(c.code, ErrorCode::E001, "{c:?}");
    assert!(
        c.message
            .starts_with("Slurm job 7 ended TIMEOUT: Slurm stopped it at its time limit. "),
        "{}",
        c.message
    );
    let result = ExecutionResult {
        exit_code: Some(1),
        stderr: "boom\n\n[Slurm job 8 ended CANCELLED: cancelled outside Mozart]\n".into(),
        ..Default::default()
    };
    let c = classify(&result);
    assert_eq!(c.code, ErrorCode::E009, "{c:?}");
    assert!(
        c.message
            .starts_with("Slurm job 8 ended CANCELLED: cancelled outside Mozart. "),
        "{}",
        c.message
    );
}

/// The wait phrases instruments.md names, after an attempt: "retry in", "try again in",
/// "retry after" (Gemini's "Suggested retry after 3s"), `retryDelay` and an HTTP
/// `Retry-After` header.
#[test]
fn every_documented_retry_after_phrase_gives_its_wait() {
    use super::retry_hint_seconds;
    for (text, secs) in [
        ("Please retry in 3s.", 3.0),
        ("Try again in 40 seconds", 40.0),
        ("429 Too Many Requests. Suggested retry after 3s.", 3.0),
        ("rate limit exceeded, retry after 40s", 40.0),
        ("HTTP 429 Too Many Requests\nRetry-After: 40\n", 40.0),
        (r#"{"retryDelay": "2s"}"#, 2.0),
        ("retry in 1500ms", 1.5),
    ] {
        assert_eq!(retry_hint_seconds(text), Some(secs), "{text}");
    }
    assert_eq!(retry_hint_seconds("retry after a while"), None);
}
