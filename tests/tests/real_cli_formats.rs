//! Gemini CLI and Codex in the output formats their built-in profiles do not use (issue 22
//! item 2: "the same for all three CLIs, in every output format they support"): a user's
//! profile — a copy of `gemini-cli` with `-o text` or `-o stream-json`, of `codex-cli`
//! without `--json` — gets the same decisions from the conductor: a refused key fails fast as
//! an auth error naming the key, a 429 is waited out without spending an attempt and shows in
//! `status`, and the cost is what the format reports (unknown, not $0.00, when it reports no
//! tokens). The CLIs keep their default retries. (Claude Code's three formats:
//! `real_cli_claude.rs`.) Each test skips with a printed reason when the CLI is not
//! installed; with `CI` set it fails instead.

use mozart_tests::real_cli::{write_file_score, RealCli, RealCliEnv, CODEX, GEMINI};

/// Gemini CLI with `-o text`: the answer is its plain text; no tokens.
const GEMINI_TEXT_PROFILE: &str = r#"name: gemini-text
display_name: "Gemini CLI (text)"
kind: cli
default_model: gemini-2.5-pro
cli:
  command:
    executable: gemini
    prompt_stdin_args: []
    model_flag: "-m"
    auto_approve_flag: "--yolo"
    output_format_flag: "-o"
    output_format_value: "text"
    extra_flags: ["--skip-trust"]
    required_env: [GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL]
  output:
    format: text
  errors:
    rate_limit_patterns: ["rate.?limit", "quota.?exceeded", "429", "RESOURCE_EXHAUSTED", "Too Many Requests"]
"#;

/// Gemini CLI with `-o stream-json`: one event per line, tokens in the final `result`.
const GEMINI_STREAM_PROFILE: &str = r#"name: gemini-stream
display_name: "Gemini CLI (stream-json)"
kind: cli
default_model: gemini-2.5-pro
models:
  - {name: gemini-2.5-pro, context_window: 1000000, cost_per_1k_input: 0.00125, cost_per_1k_output: 0.005}
cli:
  command:
    executable: gemini
    prompt_stdin_args: []
    model_flag: "-m"
    auto_approve_flag: "--yolo"
    output_format_flag: "-o"
    output_format_value: "stream-json"
    extra_flags: ["--skip-trust"]
    required_env: [GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL]
  output:
    format: jsonl
    completion_event_type: result
    completion_event_filter: {status: success}
    result_path: status
    input_tokens_path: stats.input_tokens
    output_tokens_path: stats.output_tokens
  errors:
    rate_limit_patterns: ["rate.?limit", "quota.?exceeded", "429", "RESOURCE_EXHAUSTED", "Too Many Requests"]
"#;

/// `codex exec` without `--json`: the answer is its plain text; retries announced without
/// their cause ("ERROR: Reconnecting... 2/5"), tokens only as one total.
const CODEX_TEXT_PROFILE: &str = r#"name: codex-text
display_name: "Codex CLI (text)"
kind: cli
cli:
  command:
    executable: codex
    subcommand: exec
    prompt_stdin_args: ["-"]
    model_flag: "--model"
    extra_flags: ["--skip-git-repo-check", "--sandbox", "workspace-write"]
    required_env: [OPENAI_API_KEY, CODEX_API_KEY, CODEX_HOME]
  output:
    format: text
  errors:
    rate_limit_patterns: ["rate.?limit", "\\b429\\b"]
"#;

const GEMINI_TEXT: RealCli = RealCli {
    instrument: "gemini-text",
    priced_at: None,
    cost_confidence: 0.0,
    ..GEMINI
};

const GEMINI_STREAM: RealCli = RealCli {
    instrument: "gemini-stream",
    ..GEMINI
};

const CODEX_TEXT: RealCli = RealCli {
    instrument: "codex-text",
    priced_at: None,
    cost_confidence: 0.0,
    ..CODEX
};

/// The conductor for `cli`, with the user's `profile` in its instruments directory.
fn start(cli: &RealCli, profile: &str) -> Option<RealCliEnv> {
    let mut rc = RealCliEnv::new(cli.program)?;
    for (k, v) in cli.vars {
        rc.set_var(k, v);
    }
    let dir = rc.env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{}.yaml", cli.instrument)), profile).unwrap();
    rc.start_conductor();
    Some(rc)
}

/// A sheet on a format that reports no tokens: it writes its file and completes, and its
/// cost is unknown (`cost_confidence` 0, "Cost: unknown"), not a free $0.00.
fn check_cost_unknown(rc: &RealCliEnv, cli: &RealCli) {
    let score = write_file_score("rc-text", &cli.instrument(90), 1, "write", "");
    rc.run_score("rc-text", &score);
    let doc = rc.wait_done("rc-text", 120);
    rc.assert_completed("rc-text", &doc);
    assert!(rc.env.work.join("rc-text-ws/out-1.txt").exists(), "{doc:#}");
    assert_eq!(doc["cost"]["cost_confidence"], 0.0, "{doc:#}");
    assert_eq!(doc["sheets"]["1"]["cost_confidence"], 0.0, "{doc:#}");
    let text = mozart_tests::stdout(&rc.mozart(&["status", "rc-text"]));
    assert!(text.contains("Cost: unknown"), "{text}");
    assert!(!text.contains("$0.00"), "{text}");
}

#[test]
fn gemini_in_text_mode_a_bad_key_fails_fast_with_a_hint() {
    let Some(rc) = start(&GEMINI_TEXT, GEMINI_TEXT_PROFILE) else {
        return;
    };
    rc.check_bad_key_fails_fast(&GEMINI_TEXT);
}

#[test]
fn gemini_in_text_mode_a_429_is_waited_out_and_shown() {
    let Some(rc) = start(&GEMINI_TEXT, GEMINI_TEXT_PROFILE) else {
        return;
    };
    rc.check_rate_limit_waited_out(&GEMINI_TEXT, 4000);
}

#[test]
fn gemini_in_text_mode_the_cost_is_unknown_not_zero() {
    let Some(rc) = start(&GEMINI_TEXT, GEMINI_TEXT_PROFILE) else {
        return;
    };
    check_cost_unknown(&rc, &GEMINI_TEXT);
}

#[test]
fn gemini_in_stream_json_a_bad_key_fails_fast_with_a_hint() {
    let Some(rc) = start(&GEMINI_STREAM, GEMINI_STREAM_PROFILE) else {
        return;
    };
    rc.check_bad_key_fails_fast(&GEMINI_STREAM);
}

#[test]
fn gemini_in_stream_json_a_429_is_waited_out_and_shown() {
    let Some(rc) = start(&GEMINI_STREAM, GEMINI_STREAM_PROFILE) else {
        return;
    };
    rc.check_rate_limit_waited_out(&GEMINI_STREAM, 4000);
}

#[test]
fn gemini_in_stream_json_reports_tokens_and_cost() {
    let Some(rc) = start(&GEMINI_STREAM, GEMINI_STREAM_PROFILE) else {
        return;
    };
    rc.check_two_sheets_write_files(&GEMINI_STREAM);
}

#[test]
fn codex_without_json_a_bad_key_fails_when_codex_gives_up_with_a_hint() {
    // In text mode Codex prints "ERROR: Reconnecting... N/5" without the cause, so the
    // conductor cannot tell a refused key from a dropped connection while it retries: the
    // key is refused when Codex gives up (its five reconnects, ~8 s), then at once — one
    // attempt, no retry of the sheet — as an auth error naming the key
    // (docs/instruments.md, "What each instrument reports").
    let Some(rc) = start(&CODEX_TEXT, CODEX_TEXT_PROFILE) else {
        return;
    };
    let retries = "retry: {max_retries: 3, base_delay_seconds: 1}\n";
    let score = write_file_score("rc-401", &CODEX_TEXT.instrument(90), 1, "auth", retries);
    let t0 = std::time::Instant::now();
    rc.run_score("rc-401", &score);
    let doc = rc.wait_done("rc-401", 90);
    let took = t0.elapsed();
    let errors = rc.errors_text("rc-401");
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(
        doc["sheets"]["1"]["error_category"], "auth",
        "{doc:#}\n{errors}"
    );
    assert_eq!(doc["sheets"]["1"]["attempt_count"], 1, "{doc:#}");
    assert_eq!(doc["execution"]["total_retry_count"], 0, "{doc:#}");
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    assert!(
        errors.contains("OPENAI_API_KEY"),
        "a hint names the key: {errors}"
    );
    let refused = rc
        .mock
        .requests()
        .iter()
        .filter(|r| r.status == 401)
        .count();
    assert!(
        (1..=6).contains(&refused),
        "one call and Codex's five reconnects, not more: {refused}"
    );
}

#[test]
fn codex_without_json_a_429_is_waited_out_and_shown() {
    // Codex retries a 429 five times, each after the API's retry-after (3 s), without
    // printing the cause: a limit shorter than ~15 s is ridden out by the CLI itself. This
    // one lasts 20 s, so Codex gives up and says "429"; the conductor then waits, without
    // spending an attempt, and the job completes by itself.
    let Some(rc) = start(&CODEX_TEXT, CODEX_TEXT_PROFILE) else {
        return;
    };
    rc.check_rate_limit_waited_out(&CODEX_TEXT, 20_000);
}

#[test]
fn codex_without_json_the_cost_is_unknown_not_zero() {
    let Some(rc) = start(&CODEX_TEXT, CODEX_TEXT_PROFILE) else {
        return;
    };
    check_cost_unknown(&rc, &CODEX_TEXT);
}

/// The API is overloaded for its first 2.5 s: retried (by the CLI or the conductor) and
/// completed, never parked as a rate limit.
fn check_overload(rc: &RealCliEnv, cli: &RealCli) {
    rc.run_overloaded(cli, "rc-overload", 1);
    rc.check_overload_retried("rc-overload");
}

#[test]
fn gemini_in_text_mode_an_overload_is_retried_not_parked() {
    let Some(rc) = start(&GEMINI_TEXT, GEMINI_TEXT_PROFILE) else {
        return;
    };
    check_overload(&rc, &GEMINI_TEXT);
}

#[test]
fn gemini_in_stream_json_an_overload_is_retried_not_parked() {
    let Some(rc) = start(&GEMINI_STREAM, GEMINI_STREAM_PROFILE) else {
        return;
    };
    check_overload(&rc, &GEMINI_STREAM);
}

#[test]
fn codex_without_json_an_overload_is_retried_not_parked() {
    let Some(rc) = start(&CODEX_TEXT, CODEX_TEXT_PROFILE) else {
        return;
    };
    check_overload(&rc, &CODEX_TEXT);
}
