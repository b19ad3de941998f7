//! The Claude backend, the built-in profiles and the classifier against the stand-in AI CLI
//! (`mozart-standin`, built from the `mozart-tests` package; `cargo test --workspace` builds it).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mozart_backends::{
    classify, Backend, ClaudeCliBackend, ClaudeCliOptions, ClaudeOutputFormat, ErrorCategory,
    ErrorCode, ExecutionRequest, ExecutionResult, ExitReason, FailureKind, InstrumentRegistry,
    ProfileBackend,
};

fn standin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("mozart-standin");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p mozart-tests --bin mozart-standin` (cargo test --workspace does)",
        path.display()
    );
    path
}

/// A temp dir with the stand-in linked as `claude`, `gemini` and `codex`, and a script.
struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new(script: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        for name in ["claude", "gemini", "codex"] {
            std::os::unix::fs::symlink(standin(), dir.path().join(name)).unwrap();
        }
        std::fs::write(dir.path().join("script.json"), script).unwrap();
        Env { dir }
    }

    fn bin(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn request(&self, prompt: &str) -> ExecutionRequest {
        let mut req = ExecutionRequest::new(prompt, self.dir.path(), Duration::from_secs(30));
        req.env.push((
            "MOZART_STANDIN_SCRIPT".into(),
            self.dir.path().join("script.json").display().to_string(),
        ));
        req.kill_grace = Duration::from_secs(1);
        req
    }

    fn claude(&self, format: ClaudeOutputFormat) -> ClaudeCliBackend {
        ClaudeCliBackend::new(ClaudeCliOptions {
            executable: self.bin("claude"),
            output_format: format,
            ..Default::default()
        })
    }

    fn profile(&self, name: &str) -> ProfileBackend {
        let reg = InstrumentRegistry::builtin().unwrap();
        let mut profile = (**reg.get(name).unwrap()).clone();
        let exe = profile.cli.as_ref().unwrap().command.executable.clone();
        profile.cli.as_mut().unwrap().command.executable = self.bin(&exe);
        ProfileBackend::new(Arc::new(profile)).unwrap()
    }
}

async fn run(backend: &dyn Backend, req: ExecutionRequest) -> ExecutionResult {
    backend.execute(req).await
}

#[tokio::test]
async fn claude_json_success_runs_prompt_commands_and_reports_usage() {
    let env = Env::new(
        r#"[{"result": "All done.", "input_tokens": 12, "output_tokens": 34, "cost": 0.5}]"#,
    );
    let b = env.claude(ClaudeOutputFormat::Json);
    let r = run(&b, env.request("Please work.\nRUN: echo made > out.txt")).await;
    assert!(r.success, "{r:?}");
    assert_eq!(r.result_text.as_deref(), Some("All done."));
    assert_eq!(
        (r.input_tokens, r.output_tokens, r.cost_usd),
        (Some(12), Some(34), Some(0.5))
    );
    assert!(r.session_id.is_some());
    assert_eq!(
        std::fs::read_to_string(env.dir.path().join("out.txt"))
            .unwrap()
            .trim(),
        "made"
    );
}

#[tokio::test]
async fn claude_stream_json_limit_event_parks_until_the_reported_reset() {
    let env = Env::new(r#"[{"scenario": "limit-event", "reset_in": 7200}]"#);
    let b = env.claude(ClaudeOutputFormat::StreamJson);
    let before = mozart_backends::epoch_now();
    let r = run(&b, env.request("hi")).await;
    assert!(!r.success && r.rate_limited, "{r:?}");
    assert_eq!(r.api_error_status, Some(429));
    assert_eq!(r.error_type.map(FailureKind::as_str), Some("rate_limit"));
    let reset = r.rate_limit_reset.expect("resetsAt parsed");
    assert!((reset - (before + 7200.0)).abs() < 5.0);
    let c = classify(&r);
    assert_eq!(
        (c.code, c.category),
        (ErrorCode::E101, ErrorCategory::RateLimit)
    );
    assert_eq!(c.rate_limit.unwrap().reset_at_epoch, Some(reset));
}

#[tokio::test]
async fn claude_limit_texts_in_text_mode_yield_a_reset_time() {
    let env = Env::new(
        r#"[{"scenario": "limit-text", "reset_in": 10800}, {"scenario": "limit-legacy", "reset_in": 5400}, {"scenario": "limit-weekly"}]"#,
    );
    let b = env.claude(ClaudeOutputFormat::Text);
    for expected_wait in [Some(10800.0), Some(5400.0), None] {
        let r = run(&b, env.request("hi")).await;
        assert!(r.rate_limited && !r.success, "{r:?}");
        let c = classify(&r);
        assert_eq!(c.category, ErrorCategory::RateLimit, "{r:?}");
        let rl = c.rate_limit.unwrap();
        assert!(rl.reset_at_epoch.is_some());
        if let Some(want) = expected_wait {
            // The text form has minute precision.
            assert!((rl.wait_seconds - want).abs() <= 61.0, "{rl:?} vs {want}");
        }
    }
}

#[tokio::test]
async fn claude_warning_and_overload_retries_are_not_failures() {
    let env = Env::new(r#"[{"scenario": "warning"}, {"scenario": "overloaded"}]"#);
    let b = env.claude(ClaudeOutputFormat::StreamJson);
    for _ in 0..2 {
        let r = run(&b, env.request("hi")).await;
        assert!(r.success && !r.rate_limited, "{r:?}");
        assert_eq!(r.result_text.as_deref(), Some("standin: ok"));
    }
}

#[tokio::test]
async fn claude_auth_max_turns_and_cli_errors_classify() {
    let env =
        Env::new(r#"[{"scenario": "auth"}, {"scenario": "max-turns"}, {"scenario": "empty"}]"#);
    let b = env.claude(ClaudeOutputFormat::Json);
    let auth = run(&b, env.request("hi")).await;
    assert_eq!(auth.error_type.map(FailureKind::as_str), Some("auth"));
    let c = classify(&auth);
    assert_eq!(c.code, ErrorCode::E502);
    assert!(!c.should_retry());

    let turns = run(&b, env.request("hi")).await;
    assert!(!turns.success);
    assert_eq!(
        turns.error_message.as_deref(),
        Some("Reached maximum number of turns (1)")
    );

    // Exit 0 with no output at all is a failure in json mode (claude-code-output.md §2).
    let empty = run(&b, env.request("hi")).await;
    assert!(!empty.success && empty.exit_code == Some(0), "{empty:?}");
    assert_eq!(empty.error_type.map(FailureKind::as_str), Some("no_result"));

    // The nesting guard is removed from the child's environment: CLAUDECODE set by the
    // score would otherwise make the CLI refuse to start.
    let mut req = env.request("hi");
    req.env.push(("CLAUDECODE".into(), "1".into()));
    let r = run(&b, req).await;
    assert!(!r.success);
    assert!(r
        .stderr
        .contains("cannot be launched inside another Claude Code session"));
}

#[tokio::test]
async fn claude_killed_by_a_signal_and_not_found() {
    let env = Env::new(r#"[{"scenario": "signal", "signal": "SEGV"}]"#);
    let r = run(&env.claude(ClaudeOutputFormat::Text), env.request("hi")).await;
    assert_eq!(
        (r.exit_signal, r.exit_reason),
        (Some(11), ExitReason::Killed)
    );
    // The signal is the result's, not words added to what Claude printed.
    assert!(!r.stderr.contains("SIGSEGV"), "{}", r.stderr);
    assert_eq!(classify(&r).code, ErrorCode::E003);

    let missing = ClaudeCliBackend::new(ClaudeCliOptions {
        executable: "/nonexistent/claude".into(),
        ..Default::default()
    });
    let r = run(&missing, env.request("hi")).await;
    assert_eq!(
        (r.exit_code, r.error_type.map(FailureKind::as_str)),
        (Some(127), Some("not_found"))
    );
    assert!(!missing.health_check().await.ready);
}

#[tokio::test]
async fn claude_grandchild_is_reaped_and_answer_kept() {
    let env = Env::new(r#"[{"scenario": "grandchild", "child_sleep": 300}]"#);
    let begun = std::time::Instant::now();
    let r = run(&env.claude(ClaudeOutputFormat::Json), env.request("hi")).await;
    assert!(r.success, "{r:?}");
    // The sleeping grandchild held stdout open; it got the drain grace then the group kill.
    assert!(begun.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn builtin_profiles_parse_their_instruments_output() {
    let env =
        Env::new(r#"[{"result": "from a profile", "input_tokens": 10, "output_tokens": 20}]"#);
    for (name, model) in [
        ("claude-code", None),
        ("gemini-cli", Some("gemini-2.5-pro")),
        ("codex-cli", None),
    ] {
        let b = env.profile(name);
        let r = run(&b, env.request("hi")).await;
        assert!(r.success, "{name}: {r:?}");
        assert_eq!(r.result_text.as_deref(), Some("from a profile"), "{name}");
        assert_eq!(
            (r.input_tokens, r.output_tokens),
            (Some(10), Some(20)),
            "{name}"
        );
        assert_eq!(r.model.as_deref(), model, "{name}");
    }
}

#[tokio::test]
async fn profile_rate_limit_patterns_flag_failures_only() {
    let env = Env::new(
        r#"[{"scenario": "limit-text"}, {"result": "I fixed the 429 handling in the client; see rate_limit.rs for the new backoff, the tests and the docs, which together explain why the old code retried too eagerly and how the new schedule spaces attempts out. The backoff now starts at one second, doubles up to a minute, and honours Retry-After when the server sends it, so bursts no longer hammer the API."}]"#,
    );
    let b = env.profile("claude-code");
    let limited = run(&b, env.request("hi")).await;
    assert!(limited.rate_limited && !limited.success, "{limited:?}");
    assert_eq!(classify(&limited).category, ErrorCategory::RateLimit);
    let answer = run(&b, env.request("hi")).await;
    assert!(answer.success);
    // An answer that merely talks about 429s is not a limit (instruments.md §4.7.1).
    assert!(!answer.rate_limited, "{answer:?}");
}

#[test]
fn standin_path_helper_is_consistent() {
    assert!(Path::new(&standin()).is_absolute());
}
