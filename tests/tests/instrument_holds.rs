//! Holds on an instrument (issue 22): after a CLI crashed often enough to open the
//! instrument's circuit breaker, the next job on that instrument sat "pending" with no
//! reason shown. Its `status` (human and `--json`), `diagnose` and the dashboard's job page
//! now name the breaker, the failure that opened it and the time left, and the job goes on
//! by itself once the breaker lets a probe through. A small shell script stands in for the
//! crashing CLI.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use mozart_tests::{stdout, web, TestEnv};
use serde_json::Value;

/// A CLI that crashes (exit 1, the cause on stderr) until `ok` exists in its directory.
fn crashing_cli(env: &TestEnv) -> std::path::PathBuf {
    let ok = env.bin.join("cli-ok");
    let path = env.bin.join("crashy-cli");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ -f '{}' ]; then echo '{{\"result\": \"done\"}}'; exit 0; fi\n\
             echo 'Error: model client crashed: ECONNRESET while reading the stream' >&2\nexit 1\n",
            ok.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("crashy.yaml"),
        format!(
            "name: crashy\ndisplay_name: \"Crashy CLI\"\nkind: cli\ndefault_timeout_seconds: 30\ncli:\n  command:\n    executable: {}\n    prompt_flag: \"-p\"\n  output:\n    format: json\n    result_path: result\n",
            path.display()
        ),
    )
    .unwrap();
    ok
}

fn score(env: &TestEnv, id: &str, retries: u32) -> String {
    let yaml = format!(
        "name: {id}\nworkspace: ./{id}-ws\ninstrument: crashy\npause_between_sheets_seconds: 0\n\
         retry: {{max_retries: {retries}, base_delay_seconds: 0.1, jitter: false}}\n\
         sheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"do it\"\n"
    );
    env.write_score(id, &yaml).display().to_string()
}

fn status(env: &TestEnv, id: &str) -> Value {
    serde_json::from_slice(&env.mozart(&["status", id, "--json"]).stdout).unwrap_or(Value::Null)
}

fn wait_for(env: &TestEnv, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let doc = status(env, id);
        if pred(&doc) {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "timed out on {id}: {doc:#}\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_open_circuit_breaker_shows_with_its_cause_and_time_left_and_the_job_goes_on() {
    let env = TestEnv::new();
    let ok = crashing_cli(&env);
    env.start_conductor();

    // Five crashes in a row (one sheet, `max_retries: 5` attempts) open the breaker
    // (threshold 5).
    let first = score(&env, "crash-a", 5);
    let out = env.mozart(&["run", &first]);
    assert!(out.status.code().is_some(), "{}", stdout(&out));
    let doc = wait_for(&env, "crash-a", 60, |d| d["status"] == "failed");
    assert_eq!(doc["sheets"]["1"]["attempt_count"], 5, "{doc:#}");

    // The next job on the same instrument waits for the breaker, and says so.
    let second = score(&env, "crash-b", 2);
    env.mozart(&["run", &second]);
    let doc = wait_for(&env, "crash-b", 20, |d| {
        d["instrument_holds"]
            .as_array()
            .is_some_and(|h| !h.is_empty())
    });
    let hold = &doc["instrument_holds"][0];
    assert_eq!(hold["instrument"], "crashy", "{doc:#}");
    assert_eq!(hold["kind"], "circuit_breaker", "{doc:#}");
    assert_eq!(hold["state"], "open", "{doc:#}");
    assert_eq!(hold["consecutive_failures"], 5, "{doc:#}");
    let reason = hold["reason"].as_str().unwrap();
    assert!(
        reason.contains("5 failures in a row") && reason.contains("ECONNRESET"),
        "the failure that opened it: {doc:#}"
    );
    let left = hold["seconds_left"].as_f64().unwrap();
    assert!(left > 0.0 && left <= 30.0, "{doc:#}");
    assert_eq!(doc["circuit_breaker"]["state"], "open", "{doc:#}");
    assert_eq!(doc["sheets"]["1"]["status"], "pending", "{doc:#}");
    let waiting = doc["waiting_reason"].as_str().unwrap_or_default();
    assert!(
        waiting.contains("circuit breaker open on crashy")
            && waiting.contains("next probe attempt in"),
        "{doc:#}"
    );

    let text = stdout(&env.mozart(&["status", "crash-b"]));
    assert!(text.contains("Instrument Holds"), "{text}");
    assert!(text.contains("circuit breaker open on crashy"), "{text}");
    assert!(text.contains("ECONNRESET"), "{text}");
    assert!(text.contains("next probe attempt in"), "{text}");
    assert!(text.contains("Waiting: "), "{text}");

    let diag = stdout(&env.mozart(&["diagnose", "crash-b"]));
    assert!(diag.contains("Instrument Holds"), "{diag}");
    assert!(diag.contains("circuit breaker open on crashy"), "{diag}");
    assert!(diag.contains("ECONNRESET"), "{diag}");
    let diag: Value =
        serde_json::from_slice(&env.mozart(&["diagnose", "crash-b", "--json"]).stdout).unwrap();
    assert_eq!(
        diag["instrument_holds"][0]["kind"], "circuit_breaker",
        "{diag:#}"
    );

    // The dashboard's job page too.
    let dash = web::start_dashboard(&env, &[]);
    let cookie = web::login(&dash.addr, &dash.url);
    let page = web::http(
        &dash.addr,
        "GET",
        "/jobs/crash-b",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(page.status, 200, "{}", page.raw);
    assert!(page.body.contains("Instrument holds"), "{}", page.body);
    assert!(
        page.body.contains("circuit breaker open on crashy") && page.body.contains("ECONNRESET"),
        "{}",
        page.body
    );
    assert!(page.body.contains("next probe attempt in"), "{}", page.body);
    drop(dash);

    // The CLI works again: the breaker's probe runs the sheet and the job completes by
    // itself, the hold gone.
    std::fs::write(&ok, "").unwrap();
    let doc = wait_for(&env, "crash-b", 60, |d| {
        matches!(d["status"].as_str(), Some("completed" | "failed"))
    });
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert!(doc.get("instrument_holds").is_none(), "{doc:#}");
}

#[test]
fn a_job_held_back_by_another_jobs_rate_limit_says_so() {
    let env = TestEnv::new();
    let ok = env.bin.join("api-ok");
    let path = env.bin.join("limited-cli");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ -f '{}' ]; then echo '{{\"result\": \"done\"}}'; exit 0; fi\n\
             echo 'Error: 429 Too Many Requests: rate limit reached, please retry in 30s' >&2\nexit 1\n",
            ok.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("limited.yaml"),
        format!(
            "name: limited\ndisplay_name: \"Limited CLI\"\nkind: cli\ndefault_timeout_seconds: 30\ncli:\n  command:\n    executable: {}\n    prompt_flag: \"-p\"\n  output:\n    format: json\n    result_path: result\n  errors:\n    rate_limit_patterns: [\"\\\\b429\\\\b\", \"rate.?limit\"]\n",
            path.display()
        ),
    )
    .unwrap();
    env.start_conductor();
    let yaml = |id: &str| {
        format!(
            "name: {id}\nworkspace: ./{id}-ws\ninstrument: limited\npause_between_sheets_seconds: 0\n\
             sheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"do it\"\n"
        )
    };
    let a = env.write_score("limit-a", &yaml("limit-a"));
    env.mozart(&["run", a.to_str().unwrap()]);
    wait_for(&env, "limit-a", 30, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let b = env.write_score("limit-b", &yaml("limit-b"));
    env.mozart(&["run", b.to_str().unwrap()]);
    // Job B has not run anything: the limit another job hit holds its instrument.
    let doc = wait_for(&env, "limit-b", 20, |d| {
        d["instrument_holds"]
            .as_array()
            .is_some_and(|h| !h.is_empty())
    });
    let hold = &doc["instrument_holds"][0];
    assert_eq!(hold["kind"], "rate_limit", "{doc:#}");
    assert_eq!(hold["instrument"], "limited", "{doc:#}");
    assert!(
        hold["reason"].as_str().unwrap().contains("retry in 30s"),
        "in the CLI's words: {doc:#}"
    );
    let left = hold["seconds_left"].as_f64().unwrap();
    assert!(left > 0.0 && left <= 30.0, "{doc:#}");
    assert_eq!(doc["sheets"]["1"]["status"], "pending", "{doc:#}");
    let waiting = doc["waiting_reason"].as_str().unwrap_or_default();
    assert!(
        waiting.contains("rate limit on limited") && waiting.contains("run again in"),
        "{doc:#}"
    );
    let text = stdout(&env.mozart(&["status", "limit-b"]));
    assert!(text.contains("Instrument Holds"), "{text}");
    assert!(text.contains("rate limit on limited"), "{text}");
    // `diagnose` and the dashboard's job page name it too, with the CLI's words.
    let diag = stdout(&env.mozart(&["diagnose", "limit-b"]));
    assert!(diag.contains("Instrument Holds"), "{diag}");
    assert!(diag.contains("rate limit on limited"), "{diag}");
    assert!(diag.contains("retry in 30s"), "{diag}");
    let dash = web::start_dashboard(&env, &[]);
    let cookie = web::login(&dash.addr, &dash.url);
    let page = web::http(
        &dash.addr,
        "GET",
        "/jobs/limit-b",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(page.status, 200, "{}", page.raw);
    assert!(page.body.contains("Instrument holds"), "{}", page.body);
    assert!(
        page.body.contains("rate limit on limited") && page.body.contains("retry in 30s"),
        "{}",
        page.body
    );
    drop(dash);

    // The API recovers: both jobs go on by themselves once the wait is over.
    std::fs::write(&ok, "").unwrap();
    for id in ["limit-a", "limit-b"] {
        let doc = wait_for(&env, id, 60, |d| {
            matches!(d["status"].as_str(), Some("completed" | "failed"))
        });
        assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
        assert!(doc.get("instrument_holds").is_none(), "{doc:#}");
    }
}

/// The built-in `shell` instrument runs the score's own commands: six jobs whose command
/// fails in a row (enough to open an AI CLI's breaker) leave the next shell job free to
/// run at once — no "circuit breaker open on shell" hold.
#[test]
fn failing_shell_commands_never_hold_other_jobs_behind_a_breaker() {
    let env = TestEnv::new();
    env.start_conductor();
    for n in 1..=6 {
        let name = format!("boom{n}");
        let yaml = format!(
            "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
             sheet: {{size: 1, total_items: 1}}\nretry: {{max_retries: 0}}\n\
             prompt:\n  template: \"RUN: exit 3\"\n"
        );
        let path = env.write_score(&name, &yaml);
        crate::harness::run(&env, &path, &[]);
        let doc = crate::harness::wait_terminal(&env, &name, 30.0);
        assert_eq!(doc["status"], "failed", "{doc:#}");
    }
    let path = env.write_score("fine", &mozart_tests::sleepy_shell_score("fine", 1, 0.0));
    let started = Instant::now();
    crate::harness::run(&env, &path, &[]);
    let doc = crate::harness::wait_terminal(&env, "fine", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the shell job waited {:?}: {}",
        started.elapsed(),
        env.log()
    );
    assert!(
        !env.log().contains("circuit breaker open on shell"),
        "{}",
        env.log()
    );
}

/// A rate limit one job's `shell` command meets (the HTTP API it calls answers 429, or it
/// merely prints the words) holds back that job's shell sheets only. It used to park the
/// whole `shell` instrument: every other job's shell sheets waited too, for as long as the
/// command's output said. Now the other job completes while the first waits; the first
/// says why it waits (`status`, `diagnose`), keeps waiting across a conductor restart
/// without running its command again, and runs — no retry spent — once the limit is cleared.
#[test]
fn a_rate_limit_in_one_jobs_shell_sheet_holds_that_job_only_even_across_a_restart() {
    let env = TestEnv::new();
    env.start_conductor();
    let ok = env.root().join("api-ok");
    let calls = env.root().join("api-calls");
    let called = || {
        std::fs::read_to_string(&calls)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let yaml = format!(
        "name: api-a\nworkspace: ./api-a-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    \
         RUN: echo called >> '{}'\n    \
         RUN: if [ ! -f '{}' ]; then echo 'HTTP 429 Too Many Requests: rate limit reached, please retry in 600s' >&2; exit 1; fi\n",
        calls.display(),
        ok.display()
    );
    let a = env.write_score("api-a", &yaml);
    crate::harness::run(&env, &a, &[]);
    let doc = wait_for(&env, "api-a", 30, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    assert_eq!(
        doc["sheets"]["1"]["rate_limit"]["instrument"], "shell",
        "{doc:#}"
    );
    assert_eq!(called(), 1);

    // Another job's shell sheets run, and the job completes, while api-a waits.
    let b = env.write_score("api-b", &mozart_tests::sleepy_shell_score("api-b", 2, 0.0));
    crate::harness::run(&env, &b, &[]);
    let doc = crate::harness::wait_terminal(&env, "api-b", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert!(doc.get("instrument_holds").is_none(), "{doc:#}");

    let doc = status(&env, "api-a");
    assert_eq!(doc["status"], "running", "{doc:#}");
    let hold = &doc["instrument_holds"][0];
    assert_eq!(hold["kind"], "rate_limit", "{doc:#}");
    assert_eq!(hold["instrument"], "shell", "{doc:#}");
    assert!(
        hold["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("retry in 600s"),
        "in the command's words: {doc:#}"
    );
    assert!(
        hold["seconds_left"].as_f64().unwrap_or(0.0) > 60.0,
        "{doc:#}"
    );
    let text = stdout(&env.mozart(&["status", "api-a"]));
    assert!(text.contains("Instrument Holds"), "{text}");
    assert!(text.contains("rate limit on shell"), "{text}");
    assert!(text.contains("Rate limit on shell — clears in"), "{text}");
    let diag = stdout(&env.mozart(&["diagnose", "api-a"]));
    assert!(diag.contains("rate limit on shell"), "{diag}");
    let errors = stdout(&env.mozart(&["errors", "api-a"]));
    assert!(
        errors.contains("rate_limit") && errors.contains("429"),
        "{errors}"
    );
    let errors = stdout(&env.mozart(&["errors", "api-b"]));
    assert!(!errors.contains("rate_limit"), "{errors}");
    let dash = web::start_dashboard(&env, &[]);
    let cookie = web::login(&dash.addr, &dash.url);
    let page = |job: &str| {
        let path = format!("/jobs/{job}");
        web::http(&dash.addr, "GET", &path, &[("Cookie", &cookie)], "")
    };
    let a_page = page("api-a");
    assert_eq!(a_page.status, 200, "{}", a_page.raw);
    assert!(
        a_page.body.contains("rate limit on shell") && a_page.body.contains("retry in 600s"),
        "{}",
        a_page.body
    );
    assert!(!page("api-b").body.contains("rate limit on shell"));
    drop(dash);
    // And the MCP server's `status` tool.
    let replies = mozart_tests::web::mcp_calls(
        &env,
        &[
            serde_json::json!({"name": "status", "arguments": {"job_id": "api-a"}}),
            serde_json::json!({"name": "status", "arguments": {"job_id": "api-b"}}),
        ],
    );
    let tool_doc = |i: usize| -> Value {
        let text = replies[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{}", replies[i]))
    };
    let (mcp_a, mcp_b) = (tool_doc(0), tool_doc(1));
    assert_eq!(
        mcp_a["instrument_holds"][0]["kind"], "rate_limit",
        "{mcp_a:#}"
    );
    assert_eq!(
        mcp_a["instrument_holds"][0]["instrument"], "shell",
        "{mcp_a:#}"
    );
    assert!(
        mcp_a["waiting_reason"]
            .as_str()
            .is_some_and(|w| w.contains("rate limit on shell")),
        "{mcp_a:#}"
    );
    assert_eq!(
        mcp_b["instrument_holds"],
        serde_json::json!([]),
        "{mcp_b:#}"
    );
    assert!(
        !stdout(&env.mozart(&["status", "api-b"])).contains("rate limit on shell"),
        "the wait is api-a's, not api-b's"
    );

    // A restart keeps api-a waiting (the deadline was persisted), and holds no one else.
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    crate::harness::poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    let c = env.write_score("api-c", &mozart_tests::sleepy_shell_score("api-c", 1, 0.0));
    crate::harness::run(&env, &c, &[]);
    let doc = crate::harness::wait_terminal(&env, "api-c", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    let doc = status(&env, "api-a");
    assert_eq!(doc["status"], "running", "{doc:#}");
    assert_eq!(doc["instrument_holds"][0]["instrument"], "shell", "{doc:#}");
    assert!(
        doc["instrument_holds"][0]["seconds_left"]
            .as_f64()
            .unwrap_or(0.0)
            > 60.0,
        "{doc:#}"
    );
    assert_eq!(called(), 1, "no run into a live limit after the restart");

    // The API recovers and the limit is cleared: api-a runs, the wait cost no retry.
    std::fs::write(&ok, "").unwrap();
    let out = env.mozart(&["clear-rate-limits", "--instrument", "shell"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = crate::harness::wait_terminal(&env, "api-a", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert_eq!(doc["sheets"]["1"]["attempt_count"], 1, "{doc:#}");
    assert_eq!(called(), 2);
}

/// A limit that resets in 1 minute waits the 5-minute minimum: `status` said "waiting 5m,
/// as the API said", though the CLI had said 1 minute. It now says both, truly.
#[test]
fn a_reset_shorter_than_the_minimum_wait_says_what_the_api_said_and_what_is_waited() {
    let env = TestEnv::new();
    let path = env.bin.join("soon-cli");
    std::fs::write(
        &path,
        "#!/bin/sh\necho 'Error: usage limit reached, resets in 1 min' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("soon.yaml"),
        format!(
            "name: soon\ndisplay_name: \"Soon CLI\"\nkind: cli\ndefault_timeout_seconds: 30\ncli:\n  command:\n    executable: {}\n    prompt_flag: \"-p\"\n  output:\n    format: json\n    result_path: result\n  errors:\n    rate_limit_patterns: [\"usage limit\"]\n",
            path.display()
        ),
    )
    .unwrap();
    env.start_conductor();
    let yaml = "name: soon-job\nworkspace: ./soon-ws\ninstrument: soon\n\
                sheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"do it\"\n";
    let score = env.write_score("soon-job", yaml);
    env.mozart(&["run", score.to_str().unwrap()]);
    let doc = wait_for(&env, "soon-job", 30, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let text = stdout(&env.mozart(&["status", "soon-job"]));
    let both = format!("{doc:#}\n{text}");
    assert!(
        text.contains("the API said 1m; waiting the 5m minimum"),
        "{both}"
    );
    assert!(!both.contains("as the API said"), "{both}");
    env.mozart(&["cancel", "soon-job"]);
}

/// `mozart conductor-status` and `daemon.rate_limits` listed only the limits that hold every
/// job on an instrument: a job's own `shell` limit (it holds that job only) was missing, so
/// the conductor looked unlimited while the job waited for minutes. Both now list it with the
/// job, the instrument and when it clears; `clear-rate-limits` lifts what is listed, and the
/// list is then empty.
#[test]
fn conductor_status_lists_a_jobs_own_shell_rate_limit_and_clear_lifts_it() {
    let env = TestEnv::new();
    env.start_conductor();
    let ok = env.root().join("api-ok");
    let yaml = format!(
        "name: api-held\nworkspace: ./api-held-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    \
         RUN: if [ ! -f '{}' ]; then echo 'HTTP 429 Too Many Requests: rate limit reached, please retry in 600s' >&2; exit 1; fi\n",
        ok.display()
    );
    let path = env.write_score("api-held", &yaml);
    crate::harness::run(&env, &path, &[]);
    wait_for(&env, "api-held", 30, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });

    let limits = env.raw_call("daemon.rate_limits", Value::Null);
    let held = &limits["result"]["job_limits"][0];
    assert_eq!(held["job_id"], "api-held", "{limits:#}");
    assert_eq!(held["instrument"], "shell", "{limits:#}");
    assert!(
        held["seconds_remaining"].as_f64().unwrap_or(0.0) > 60.0,
        "{limits:#}"
    );
    assert!(
        held["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("retry in 600s"),
        "{limits:#}"
    );
    assert_eq!(limits["result"]["active_limits"], 1, "{limits:#}");
    assert_eq!(
        limits["result"]["backends"],
        serde_json::json!({}),
        "not every job's: {limits:#}"
    );

    let text = stdout(&env.mozart(&["conductor-status"]));
    assert!(text.contains("  Rate limits:\n"), "{text}");
    assert!(
        text.contains("    shell: job api-held waits (its own limit) — clears in"),
        "{text}"
    );
    let doc: Value =
        serde_json::from_slice(&env.mozart(&["conductor-status", "--json"]).stdout).unwrap();
    let held = &doc["rate_limits"]["job_limits"][0];
    assert_eq!(held["job_id"], "api-held", "{doc:#}");
    assert_eq!(held["instrument"], "shell", "{doc:#}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        held["until"].as_f64().unwrap_or(0.0) > now + 60.0,
        "{doc:#}"
    );

    // What is listed is what clear-rate-limits lifts.
    std::fs::write(&ok, "").unwrap();
    let out = env.mozart(&["clear-rate-limits", "--instrument", "shell"]);
    assert_eq!(stdout(&out), "Cleared 1 rate limit on shell\n");
    let text = stdout(&env.mozart(&["conductor-status"]));
    assert!(text.contains("  Rate limits: none\n"), "{text}");
    let doc = crate::harness::wait_terminal(&env, "api-held", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
}

/// Two jobs on an API that keeps answering "rate limit exceeded" (no wait named) until
/// `ok` exists: `rl-cli` on an AI CLI's profile (its limits hold every job's sheets) and
/// `rl-shell` a `shell` job (its limits hold that job only). Each call appends a line to
/// its calls file; the call numbered `stall_on`, if any, touches `<calls>.stalled` and
/// sleeps 60 s before it answers, so a test can kill the conductor during it.
struct LimitedPair {
    ok: std::path::PathBuf,
    calls: std::path::PathBuf,
    shell_calls: std::path::PathBuf,
}

impl LimitedPair {
    fn start(env: &TestEnv, stall_on: Option<usize>) -> LimitedPair {
        let ok = env.bin.join("api-ok");
        let calls = env.root().join("cli-calls");
        let shell_calls = env.root().join("shell-calls");
        let stall = stall_on.map_or(0, |n| n);
        // One script answers for both: its first argument names its calls file.
        let api = env.bin.join("limited-api");
        std::fs::write(
            &api,
            format!(
                "#!/bin/sh
f=$1
echo called >> \"$f\"
                 if [ -f '{ok}' ]; then echo '{{\"result\": \"done\"}}'; exit 0; fi
                 if [ \"$(wc -l < \"$f\")\" -eq {stall} ]; then touch \"$f.stalled\"; sleep 60; fi
                 echo 'Error: rate limit exceeded (429 too many requests)' >&2
exit 1
",
                ok = ok.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&api, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = env.bin.join("limited-cli");
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh
exec '{}' '{}'
",
                api.display(),
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = env.home.join("instruments");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("limited.yaml"),
            format!(
                "name: limited\ndisplay_name: \"Limited CLI\"\nkind: cli\ndefault_timeout_seconds: 90\ncli:\n  command:\n    executable: {}\n    prompt_flag: \"-p\"\n  output:\n    format: json\n    result_path: result\n  errors:\n    rate_limit_patterns: [\"\\\\b429\\\\b\", \"rate.?limit\"]\n",
                path.display()
            ),
        )
        .unwrap();
        env.start_conductor();
        let cli = env.write_score(
            "rl-cli",
            "name: rl-cli\nworkspace: ./rl-cli-ws\ninstrument: limited\npause_between_sheets_seconds: 0\n\
             sheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"do it\"\n",
        );
        let shell = env.write_score(
            "rl-shell",
            &format!(
                "name: rl-shell\nworkspace: ./rl-shell-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
                 sheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    \
                 RUN: '{}' '{}'\n",
                api.display(),
                shell_calls.display()
            ),
        );
        crate::harness::run(env, &cli, &[]);
        crate::harness::run(env, &shell, &[]);
        LimitedPair {
            ok,
            calls,
            shell_calls,
        }
    }

    /// Each job with its calls file.
    fn jobs(&self) -> [(&'static str, &std::path::Path); 2] {
        [("rl-cli", &self.calls), ("rl-shell", &self.shell_calls)]
    }

    /// The API recovers: lifted by hand, both jobs complete.
    fn recover(&self, env: &TestEnv) {
        std::fs::write(&self.ok, "").unwrap();
        let out = env.mozart(&["clear-rate-limits"]);
        assert!(out.status.success(), "{}", stdout(&out));
        for (id, _) in self.jobs() {
            let doc = wait_for(env, id, 60, |d| {
                matches!(d["status"].as_str(), Some("completed" | "failed"))
            });
            assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
        }
    }
}

fn calls_made(f: &std::path::Path) -> usize {
    std::fs::read_to_string(f)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// The reason of the job's first instrument hold, if it is held.
fn hold(doc: &Value) -> Option<String> {
    doc["instrument_holds"][0]["reason"]
        .as_str()
        .map(str::to_owned)
}

/// The probe schedule's step survives a restart: an instrument that keeps answering "rate
/// limit exceeded" (no wait named) waits 15 s, then 30 s, then a minute — also when the
/// conductor is killed (kill -9) and started again during a wait. The step lived in memory
/// only, so every restart began the schedule again: each wait was 15 s, hammering the API.
/// Both kinds of wait: an AI CLI's (every job's sheets wait) and a `shell` job's own.
#[test]
fn a_rate_limit_wait_goes_one_step_further_after_a_kill_9_restart() {
    let env = TestEnv::new();
    let pair = LimitedPair::start(&env, None);
    for (id, _) in pair.jobs() {
        let doc = wait_for(&env, id, 30, |d| hold(d).is_some());
        let reason = hold(&doc).unwrap_or_default();
        assert!(
            reason.contains("trying again in 15s (probe 1)"),
            "{id}: {doc:#}"
        );
    }

    // Killed during the first wait, started again: the waits are restored…
    crate::support::kill9_conductor(&env);
    env.start_conductor();
    for (id, _) in pair.jobs() {
        let doc = wait_for(&env, id, 30, |d| hold(d).is_some());
        assert!(
            hold(&doc).unwrap_or_default().contains("(probe 1)"),
            "{id}: {doc:#}"
        );
    }
    assert_eq!(
        (calls_made(&pair.calls), calls_made(&pair.shell_calls)),
        (1, 1)
    );
    // …and once each is over, the CLI still limited, the next wait is the schedule's second
    // step, not its first again. (The hold is gone while the sheet runs again, so a hold
    // after the second call is the second limit's.)
    for (id, f) in pair.jobs() {
        let doc = wait_for(&env, id, 60, |d| calls_made(f) >= 2 && hold(d).is_some());
        let reason = hold(&doc).unwrap_or_default();
        assert!(
            reason.contains("trying again in 30s (probe 2)"),
            "{id}: the second limit in a row after the restart: {doc:#}"
        );
    }
    pair.recover(&env);
}

/// Nor does a restart during the retry that follows a wait start the schedule again: the
/// wait had ended, so its row was deleted with it, and the retry's limit after the restart
/// was the first of a new run (15 s again, for ever, under repeated kills).
#[test]
fn a_kill_9_during_the_retry_after_a_rate_limit_wait_keeps_the_schedule_step() {
    let env = TestEnv::new();
    let pair = LimitedPair::start(&env, Some(2));
    for (id, f) in pair.jobs() {
        let doc = wait_for(&env, id, 30, |d| hold(d).is_some());
        assert!(
            hold(&doc).unwrap_or_default().contains("(probe 1)"),
            "{id}: {doc:#}"
        );
        // The first wait ends and the retry (the second call) is running.
        let stalled = f.with_extension("stalled");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stalled.exists() {
            assert!(Instant::now() < deadline, "{id}: no retry after the wait");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    crate::support::kill9_conductor(&env);
    env.start_conductor();
    // The retry runs again (the third call) and is limited: the second limit in a row.
    for (id, f) in pair.jobs() {
        let doc = wait_for(&env, id, 60, |d| calls_made(f) >= 3 && hold(d).is_some());
        let reason = hold(&doc).unwrap_or_default();
        assert!(
            reason.contains("trying again in 30s (probe 2)"),
            "{id}: the second limit in a row, across the restart: {doc:#}"
        );
    }
    pair.recover(&env);
}
