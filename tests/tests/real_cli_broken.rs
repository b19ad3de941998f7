//! The real CLIs (tests/real-cli/setup.sh) when the user's setup is broken (issue 22, "bad
//! input"): no API key / not logged in, the CLI killed (`kill -9`) while it streams its
//! answer. Each gets a clear, classified error in `mozart errors` and `status` that says
//! what to do, and the sheet completed before it stays completed. (A CLI that is not
//! installed, prints garbage or a JSON error: `real_cli_bad_input.rs`.) Each test skips with
//! a printed reason when the CLI is not installed.

use std::time::{Duration, Instant};

use mozart_tests::real_cli::{
    processes_mentioning, RealCli, RealCliEnv, CLAUDE, CLAUDE_CODE, CODEX, GEMINI,
};
use serde_json::Value;

/// Sheet 1 runs on `shell` and writes its file; sheet 2 asks `cli` (through the mock's
/// `scenario`) to write its file.
fn two_sheet_score(name: &str, cli: &RealCli, scenario: &str, extra: &str) -> String {
    let instrument = match cli.instrument {
        "" => "claude_cli",
        name => name,
    };
    format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: shell
pause_between_sheets_seconds: 0
backend:
  timeout_seconds: 60{backend}
sheet:
  size: 1
  total_items: 2
  per_sheet_instruments: {{2: {instrument}}}
prompt:
  template: |
    RUN: echo done > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
    Write the file for sheet {{{{ sheet_num }}}}.
    mock-scenario:{scenario} mock-key:{name}-{{{{ sheet_num }}}} mock-file:{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
{extra}"#,
        backend = cli.backend,
    )
}

fn assert_first_sheet_kept(rc: &RealCliEnv, id: &str, doc: &Value) {
    assert_eq!(
        doc["sheets"]["1"]["status"], "completed",
        "no completed sheet lost: {doc:#}"
    );
    assert!(rc.env.work.join(format!("{id}-ws/out-1.txt")).exists());
}

/// The CLI's API key variable is not set at all (a user who never logged in): the sheet fails
/// at once as an auth error whose message names the variable to set, without retries.
fn check_no_key(cli: &RealCli) {
    let Some(mut rc) = RealCliEnv::new(cli.program) else {
        return;
    };
    for (k, v) in cli.vars {
        rc.set_var(k, v);
    }
    // An empty value removes the variable from the conductor's environment.
    rc.set_var(cli.key_var, "");
    rc.start_conductor();
    let retries = "retry: {max_retries: 3, base_delay_seconds: 1}\n";
    let score = two_sheet_score("rc-nokey", cli, "write", retries);
    let t0 = Instant::now();
    rc.run_score("rc-nokey", &score);
    let doc = rc.wait_done("rc-nokey", 90);
    let took = t0.elapsed();
    let errors = rc.errors_text("rc-nokey");
    assert_eq!(doc["status"], "failed", "{doc:#}\n{errors}");
    assert_first_sheet_kept(&rc, "rc-nokey", &doc);
    let sheet = &doc["sheets"]["2"];
    assert_eq!(sheet["error_category"], "auth", "{doc:#}\n{errors}");
    assert_eq!(sheet["error_code"], "E502", "{doc:#}\n{errors}");
    assert_eq!(
        sheet["attempt_count"], 1,
        "a missing key is not retried: {doc:#}"
    );
    let message = sheet["error_message"].as_str().unwrap_or_default();
    assert!(
        message.contains(cli.key_var),
        "says which variable to set: {doc:#}"
    );
    assert!(errors.contains(cli.key_var), "{errors}");
    // Not retried (above) and no long wait inside the CLI either: the two sheets (one CLI
    // start each, several seconds apiece on a loaded 2-core machine) end well within a minute.
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert!(
        rc.mock.requests().is_empty(),
        "nothing reached the API without a key: {:#?}",
        rc.mock.requests()
    );
}

#[test]
fn gemini_without_an_api_key_is_a_clear_auth_error() {
    check_no_key(&GEMINI);
}

#[test]
fn codex_without_an_api_key_is_a_clear_auth_error() {
    check_no_key(&CODEX);
}

#[test]
fn claude_without_an_api_key_is_a_clear_auth_error() {
    // The default instrument, with no key and no login.
    check_no_key(&CLAUDE);
}

#[test]
fn claude_code_profile_without_an_api_key_is_a_clear_auth_error() {
    // Claude Code says "Not logged in · Please run /login" and exits 1: the profile's auth
    // patterns missed it, so the sheet failed as E009 after three retries over 30 s, with no
    // word of the key (the default instrument failed at once, naming it).
    check_no_key(&CLAUDE_CODE);
}

/// The CLI is killed (`kill -9`, by the user or the OOM killer) while it streams its answer:
/// the attempt fails with a message that says the CLI was killed from outside and is
/// retried; the job then completes, and the sheet completed before is kept.
fn check_killed_mid_stream(cli: &RealCli) {
    let Some(rc) = RealCliEnv::start(cli) else {
        return;
    };
    // The answer streams for ~4 s; one retry is allowed.
    let retries = "retry: {max_retries: 2, base_delay_seconds: 0.5, jitter: false}\n";
    let score = two_sheet_score("rc-killed", cli, "slow mock-ms:1000", retries);
    rc.run_score("rc-killed", &score);
    // Sheet 2 is streaming: its CLI is a process running in its workspace.
    let ws = rc.env.work.join("rc-killed-ws");
    let deadline = Instant::now() + Duration::from_secs(60);
    let victim = loop {
        let doc = rc.status("rc-killed");
        let streaming = doc["sheets"]["2"]["live"].is_object()
            && rc.mock.requests().iter().any(|r| r.scenario == "slow");
        let cli_procs: Vec<(u32, String)> = processes_mentioning(&ws)
            .into_iter()
            .filter(|(_, cmd)| cmd.contains(cli.program))
            .collect();
        if streaming && !cli_procs.is_empty() {
            break cli_procs;
        }
        assert!(
            Instant::now() < deadline,
            "sheet 2 never streamed: {doc:#}\n{}",
            rc.env.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for (pid, _) in &victim {
        mozart_tests::signal(*pid, "KILL");
    }
    let failed_once = rc.wait_for("rc-killed", 60, |d| {
        d["sheets"]["2"]["error_message"].is_string()
            || matches!(d["status"].as_str(), Some("completed" | "failed"))
    });
    let message = failed_once["sheets"]["2"]["error_message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let doc = rc.wait_done("rc-killed", 90);
    assert!(
        message.contains("killed by SIGKILL") && message.contains("not by Mozart"),
        "says what happened: {message:?}\n{failed_once:#}"
    );
    rc.assert_completed("rc-killed", &doc);
    assert_first_sheet_kept(&rc, "rc-killed", &doc);
    assert!(
        doc["sheets"]["2"]["attempt_count"].as_u64().unwrap_or(0) >= 2,
        "retried: {doc:#}"
    );
}

#[test]
fn claude_killed_mid_stream_is_named_and_retried() {
    check_killed_mid_stream(&CLAUDE);
}

#[test]
fn codex_killed_mid_stream_is_named_and_retried() {
    check_killed_mid_stream(&CODEX);
}

#[test]
fn gemini_killed_mid_stream_is_named_and_retried() {
    check_killed_mid_stream(&GEMINI);
}
