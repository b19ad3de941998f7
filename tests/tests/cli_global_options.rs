//! The global options `-v`, `-L`, `--log-file`, `--log-format` do what docs/cli.md says
//! (cli.md §1.2).

use mozart_tests::{stdout, TestEnv};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const THREE_SHEETS: &str = "name: demo\nworkspace: ./ws\nsheet: {size: 1, total_items: 3}\n\
                            prompt: {template: \"hello {{ sheet_num }}\"}\n";

#[test]
fn global_verbose_previews_every_sheet_like_validates_own_flag() {
    let env = TestEnv::new();
    let score = env.write_score("demo", THREE_SHEETS);
    let score = score.to_str().unwrap();
    let plain = stdout(&env.mozart(&["validate", score]));
    assert!(
        plain.contains("Rendering Preview (Sheet 1 of 3)"),
        "{plain}"
    );
    assert!(!plain.contains("Sheet 3 of 3"), "{plain}");
    let verbose = env.mozart(&["-v", "validate", score]);
    assert_eq!(verbose.status.code(), Some(0), "{}", stdout(&verbose));
    let verbose = stdout(&verbose);
    assert!(
        verbose.contains("Rendering Preview (Sheet 3 of 3)"),
        "{verbose}"
    );
    assert_eq!(verbose, stdout(&env.mozart(&["validate", "-v", score])));
}

#[test]
fn log_level_debug_shows_the_socket_and_each_call_and_the_default_shows_nothing() {
    let env = TestEnv::new();
    env.start_conductor();
    let quiet = env.mozart(&["list"]);
    assert_eq!(quiet.status.code(), Some(0), "{}", stdout(&quiet));
    assert_eq!(stderr(&quiet), "", "no log lines at the default WARNING");

    let socket = env.root().join("m.sock");
    for args in [
        vec!["-L", "DEBUG", "list"],
        vec!["--log-level", "debug", "list"],
    ] {
        let out = env.mozart(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains("ipc.connected"), "{args:?}: {err}");
        assert!(
            err.contains(&socket.display().to_string()),
            "{args:?}: {err}"
        );
        assert!(err.contains("method=job.list_page"), "{args:?}: {err}");
        assert!(err.contains("ipc.response"), "{args:?}: {err}");
        // The command's own output is untouched.
        assert_eq!(stdout(&out), stdout(&quiet));
    }

    let env_level = env
        .command(&["list"])
        .env("MOZART_LOG_LEVEL", "DEBUG")
        .output()
        .unwrap();
    assert!(stderr(&env_level).contains("method=job.list_page"));

    let bad = env.mozart(&["-L", "LOUD", "list"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("LOUD"), "{}", stderr(&bad));
}

#[test]
fn log_format_json_writes_one_object_a_line_and_log_file_keeps_the_lines() {
    let env = TestEnv::new();
    env.start_conductor();
    let out = env.mozart(&["-L", "DEBUG", "--log-format", "json", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let events: Vec<serde_json::Value> = stderr(&out)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON log line"))
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "ipc.request" && e["method"] == "job.list_page"),
        "{events:?}"
    );
    assert!(events.iter().all(|e| e["level"] == "debug"), "{events:?}");

    let file = env.root().join("cli.log");
    let file_arg = file.to_str().unwrap();
    let out = env.mozart(&["-L", "DEBUG", "--log-file", file_arg, "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = std::fs::read_to_string(&file).expect("the log file exists");
    assert!(text.contains("method=job.list_page"), "{text}");
    assert!(
        stderr(&out).contains("method=job.list_page"),
        "also on stderr"
    );

    // both: human lines on stderr, JSON lines in the file.
    let json_file = env.root().join("cli.jsonl");
    let out = env.mozart(&[
        "-L",
        "DEBUG",
        "--log-format",
        "both",
        "--log-file",
        json_file.to_str().unwrap(),
        "list",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stderr(&out).contains("method=job.list_page"));
    let text = std::fs::read_to_string(&json_file).expect("the JSON log file exists");
    for line in text.lines() {
        let _: serde_json::Value = serde_json::from_str(line).expect("a JSON line in the file");
    }
    assert!(text.contains("\"method\":\"job.list_page\""), "{text}");
}

#[test]
fn log_format_both_without_a_file_is_refused_with_upstreams_message() {
    let env = TestEnv::new();
    let out = env.mozart(&["--log-format", "both", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("Logging configuration error: file_path is required when format='both'"),
        "{text}"
    );
    assert!(
        text.contains("format='both' requires --log-file to be set."),
        "{text}"
    );
}
