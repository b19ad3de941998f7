//! Job commands without a conductor, and score-ID validation (cli.md §1.5, §1.7, §9).

use mozart_tests::{stdout, TestEnv};

const NOT_RUNNING: &str =
    "Error: Mozart conductor is not running.\n\nHints:\n  - Start it with: mozart start\n";

#[test]
fn every_job_command_says_the_conductor_is_not_running() {
    let env = TestEnv::new();
    let score = env.write_score(
        "demo",
        "name: demo\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let score = score.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["status"],
        vec!["status", "demo"],
        vec!["status", "demo", "--watch", "--interval", "1"],
        vec!["list"],
        vec!["list", "--all"],
        vec!["pause", "demo"],
        vec!["resume", "demo"],
        vec!["cancel", "demo"],
        vec!["modify", "demo", "--config", score],
        vec!["clear", "--yes"],
    ];
    for args in cases {
        let out = env.mozart(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
        assert!(
            stdout(&out).ends_with(NOT_RUNNING),
            "{args:?}: {}",
            stdout(&out)
        );
    }
}

#[test]
fn json_mode_prints_the_standard_error_object() {
    let env = TestEnv::new();
    for args in [
        vec!["status", "--json"],
        vec!["status", "demo", "--json"],
        vec!["list", "--json"],
        vec!["pause", "demo", "--json"],
        vec!["cancel", "demo", "--json"],
    ] {
        let out = env.mozart(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&out)));
        assert_eq!(
            doc,
            serde_json::json!({"success": false, "message": "Mozart conductor is not running.",
                               "hints": ["Start it with: mozart start"]}),
            "{args:?}"
        );
    }
}

#[test]
fn invalid_score_ids_are_usage_errors() {
    let env = TestEnv::new();
    let long = "x".repeat(101);
    let cases = [
        ("", "Score ID cannot be empty".to_string()),
        (
            long.as_str(),
            "Score ID too long (101 chars, max 100)".to_string(),
        ),
        (
            "a/b",
            "Invalid score ID 'a/b'. Must start with a letter or digit and contain only \
             letters, digits, hyphens, underscores, and dots."
                .to_string(),
        ),
        (
            "_x",
            "Invalid score ID '_x'. Must start with a letter or digit and contain only \
             letters, digits, hyphens, underscores, and dots."
                .to_string(),
        ),
    ];
    for command in ["status", "pause", "resume", "cancel"] {
        for (id, message) in &cases {
            let out = env.mozart(&[command, id]);
            assert_eq!(out.status.code(), Some(2), "{command} {id:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("Invalid value: {message}")),
                "{command} {id:?}: {err}"
            );
            assert!(out.stdout.is_empty(), "{command}: nothing on stdout");
        }
    }
}

#[test]
fn clear_rejects_unknown_statuses_before_contacting_anyone() {
    let env = TestEnv::new();
    let out = env.mozart(&["clear", "--status", "running", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "Error: Invalid status(es): running.\n\nHints:\n  - Valid values: cancelled, completed, failed, paused\n  - Example: mozart clear --status failed --status cancelled\n"
    );
}

#[test]
fn clear_declined_at_the_prompt_exits_zero() {
    use std::io::Write;
    let env = TestEnv::new();
    let mut child = env
        .command(&["clear", "--status", "failed"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "Clear all [failed] scores? [y/N]: Cancelled.\n"
    );
}

/// Issue 23 (commands that cannot be scripted): a script that forgot `--yes` gets no answer
/// to give, and must not read exit 0 as "cleared".
#[test]
fn clear_without_an_answer_is_an_error_not_a_quiet_cancel() {
    let env = TestEnv::new();
    let out = env
        .command(&["clear", "--status", "failed"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("nothing was cleared"), "{text}");
    assert!(text.contains("add --yes"), "{text}");
}

#[test]
fn modify_checks_the_new_score_first() {
    let env = TestEnv::new();
    let bad = env.write_score("bad", "name: [unclosed\n");
    let out = env.mozart(&["modify", "demo", "-c", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.starts_with("Error [E505]: Invalid config file: "),
        "{text}"
    );
    assert!(
        text.contains("  - Check YAML syntax and schema in your score file.\n"),
        "{text}"
    );

    let out = env.mozart(&["modify", "demo", "-c", "missing.yaml"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing file is a usage error"
    );
}

#[test]
fn run_has_its_own_not_running_shapes() {
    let env = TestEnv::new();
    let score = env.write_score(
        "demo",
        "name: demo\ninstrument: shell\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let out = env.mozart(&["run", score.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({"error": "Mozart conductor is not running. Start with: mozart start"})
    );
    let out = env.mozart(&["-q", "run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), NOT_RUNNING);
    let out = env.mozart(&["-q", "run", score.to_str().unwrap(), "--escalation"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("Error: --escalation requires interactive console prompts"));
}

/// An unknown `list --status` or `errors --type` is a usage error naming the accepted
/// values (exit 2), not an empty answer; the accepted values are taken in any case.
#[test]
fn unknown_status_and_error_type_filters_are_usage_errors() {
    let env = TestEnv::new();
    let out = env.mozart(&["list", "--status", "bogus"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}{err}", stdout(&out));
    assert!(
        err.contains("queued, running, completed, failed, paused, cancelled"),
        "{err}"
    );

    let out = env.mozart(&["errors", "demo", "--type", "bogus"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}{err}", stdout(&out));
    assert!(err.contains("transient, rate_limit, permanent"), "{err}");

    // Valid values pass the parser (and then find no conductor).
    for args in [
        &["list", "--status", "Completed"][..],
        &["errors", "demo", "--type", "RATE_LIMIT"][..],
    ] {
        let out = env.mozart(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
    }
}

/// `pause --help` does not promise a wait that `pause` does not do: it names the command
/// that waits.
#[test]
fn pause_help_says_wait_has_no_effect_and_names_mozart_wait() {
    let env = TestEnv::new();
    let out = env.mozart(&["pause", "--help"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        !text.contains("Wait for the score to acknowledge"),
        "{text}"
    );
    assert!(text.contains("No effect"), "{text}");
    assert!(text.contains("mozart wait"), "{text}");
}
