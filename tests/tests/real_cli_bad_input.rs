//! Instruments that misbehave (issue 13, "bad input"): a CLI that is not installed, prints
//! non-JSON, prints a JSON error object, or exits 0 having done nothing. Each gets a clear
//! classified error in `mozart errors`, and the sheet completed before it stays completed.
//! Small shell scripts stand in for the broken CLIs.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

/// A `json` instrument profile named `name` running `exe`.
fn json_profile(name: &str, exe: &str, format: &str) -> String {
    let output = if format == "jsonl" {
        "  output:\n    format: jsonl\n    completion_event_type: item.completed\n    result_path: item.text\n"
    } else {
        "  output:\n    format: json\n    result_path: result\n    error_path: error.message\n"
    };
    format!(
        "name: {name}\ndisplay_name: \"Broken {name}\"\nkind: cli\ndefault_timeout_seconds: 30\ncli:\n  command:\n    executable: {exe}\n    prompt_flag: \"-p\"\n{output}"
    )
}

fn script(env: &TestEnv, name: &str, body: &str) -> String {
    let path = env.bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn status(env: &TestEnv, id: &str) -> Value {
    serde_json::from_slice(&env.mozart(&["status", id, "--json"]).stdout).unwrap_or(Value::Null)
}

fn wait_done(env: &TestEnv, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let doc = status(env, id);
        if matches!(doc["status"].as_str(), Some("completed" | "failed")) {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never ended: {doc:#}\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sheet 1 runs on `shell` and writes its file; sheet 2 runs on the broken `instrument`.
fn run_two_sheets(env: &TestEnv, id: &str, instrument: &str) -> (Value, String) {
    let score = format!(
        r#"name: {id}
workspace: ./{id}-ws
instrument: shell
pause_between_sheets_seconds: 0
retry: {{max_retries: 1, base_delay_seconds: 0.2, jitter: false}}
sheet:
  size: 1
  total_items: 2
  per_sheet_instruments: {{2: {instrument}}}
prompt:
  template: |
    RUN: echo done > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    );
    let path = env.write_score(id, &score);
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    assert!(out.status.code().is_some(), "{}", stdout(&out));
    let doc = wait_done(env, id);
    let errors = env.mozart(&["errors", id, "--verbose"]);
    (
        doc,
        format!(
            "{}{}",
            stdout(&errors),
            String::from_utf8_lossy(&errors.stderr)
        ),
    )
}

fn assert_first_sheet_kept(env: &TestEnv, id: &str, doc: &Value) {
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(
        doc["sheets"]["1"]["status"], "completed",
        "no completed sheet lost: {doc:#}"
    );
    assert!(env.work.join(format!("{id}-ws/out-1.txt")).exists());
    assert_eq!(doc["sheets"]["2"]["status"], "failed", "{doc:#}");
}

#[test]
fn broken_instruments_get_clear_classified_errors_and_keep_completed_sheets() {
    let env = TestEnv::new();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    let nojson = script(
        &env,
        "cli-nojson",
        "echo 'Hello! I am a chatty CLI, not JSON.'",
    );
    let jsonerr = script(
        &env,
        "cli-jsonerr",
        r#"echo '{"error": {"message": "the model refused: unsupported region"}}'"#,
    );
    let nothing = script(&env, "cli-nothing", "exit 0");
    let no_event = script(&env, "cli-noevent", r#"echo '{"type":"turn.started"}'"#);
    for (name, exe, format) in [
        ("missing", "no-such-ai-cli-anywhere", "json"),
        ("nojson", nojson.as_str(), "json"),
        ("jsonerr", jsonerr.as_str(), "json"),
        ("nothing", nothing.as_str(), "json"),
        ("noevent", no_event.as_str(), "jsonl"),
    ] {
        std::fs::write(
            dir.join(format!("{name}.yaml")),
            json_profile(name, exe, format),
        )
        .unwrap();
    }
    env.start_conductor();

    let (doc, errors) = run_two_sheets(&env, "bad-missing", "missing");
    assert_first_sheet_kept(&env, "bad-missing", &doc);
    assert!(errors.contains("E505"), "{errors}");
    assert!(
        errors.contains("no-such-ai-cli-anywhere"),
        "names the program: {errors}"
    );

    let (doc, errors) = run_two_sheets(&env, "bad-nojson", "nojson");
    assert_first_sheet_kept(&env, "bad-nojson", &doc);
    assert!(errors.contains("not one JSON document"), "{errors}");
    assert!(
        errors.contains("chatty CLI"),
        "shows what it printed: {errors}"
    );

    let (doc, errors) = run_two_sheets(&env, "bad-jsonerr", "jsonerr");
    assert_first_sheet_kept(&env, "bad-jsonerr", &doc);
    assert!(
        errors.contains("reported an error: the model refused"),
        "{errors}"
    );

    let (doc, errors) = run_two_sheets(&env, "bad-nothing", "nothing");
    assert_first_sheet_kept(&env, "bad-nothing", &doc);
    assert!(
        errors.contains("exited 0 without printing anything"),
        "{errors}"
    );

    let (doc, errors) = run_two_sheets(&env, "bad-noevent", "noevent");
    assert_first_sheet_kept(&env, "bad-noevent", &doc);
    assert!(errors.contains("without its completion event"), "{errors}");
}

#[test]
fn a_claude_that_prints_garbage_says_what_it_printed_and_what_to_check() {
    // The default instrument (`claude_cli`, stream-json) with a `claude` that is not Claude
    // Code: it said only "exited with code 0 without a result" (issue 22, bad input).
    let env = TestEnv::new();
    let claude = env.bin.join("claude");
    let _ = std::fs::remove_file(&claude);
    std::fs::write(
        &claude,
        "#!/bin/sh\necho 'Hello! I am a chatty CLI, not JSON.'\n",
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.start_conductor();
    let (doc, errors) = run_two_sheets(&env, "bad-claude", "claude_cli");
    assert_first_sheet_kept(&env, "bad-claude", &doc);
    assert!(errors.contains("E503"), "{errors}");
    let message = doc["sheets"]["2"]["error_message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("printed no `stream-json` output") && message.contains("chatty CLI"),
        "shows what it printed: {doc:#}"
    );
    assert!(
        message.contains("claude --version"),
        "says what to check: {doc:#}"
    );
}
