//! End-to-end execution through the real conductor: the repo's hello example, and the
//! stand-in AI CLI scripted to pass, fail, half-pass, hit a rate limit, hang, die by signal
//! (execution.md §2–§4; architecture invariants 1–3, 5).

use crate::harness;

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::*;
use mozart_tests::TestEnv;
use serde_json::{json, Value};

/// A one-sheet score on the stand-in (as `claude_cli`, whose environment passes
/// `MOZART_STANDIN_SCRIPT` through; the claude-code profile keeps only credentials) whose validations check `files`
/// in the workspace; the stand-in's script decides what each attempt writes.
fn ai_score(env: &TestEnv, name: &str, files: &[&str], extra: &str) -> (PathBuf, PathBuf) {
    ai_score_on(env, "claude_cli", name, files, extra)
}

fn ai_score_on(
    env: &TestEnv,
    instrument: &str,
    name: &str,
    files: &[&str],
    extra: &str,
) -> (PathBuf, PathBuf) {
    let ws = env.work.join(format!("{name}-ws"));
    let mut validations = String::new();
    for f in files {
        validations.push_str(&format!(
            "  - type: file_exists\n    path: \"{{workspace}}/{f}\"\n    description: \"{f} exists\"\n"
        ));
    }
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: {instrument}
pause_between_sheets_seconds: 0
retry:
  max_retries: 3
  base_delay_seconds: 0.3
  exponential_base: 2
  jitter: false
sheet:
  size: 1
  total_items: 1
{extra}
prompt:
  template: "Write the files. Marker {name}-marker."
validations:
{validations}"#,
        ws = ws.display()
    );
    (env.write_score(name, &yaml), ws)
}

/// Rows of the registry's attempt history for one sheet: (mode, outcome, executed_at,
/// duration_seconds, error_category).
fn attempts(
    env: &TestEnv,
    job: &str,
    sheet: u32,
) -> Vec<(String, String, f64, f64, Option<String>)> {
    let db = rusqlite::Connection::open(env.home.join("registry.db")).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT mode, outcome, executed_at, COALESCE(duration_seconds, 0), error_category \
             FROM attempts WHERE job_id = ?1 AND sheet_num = ?2 ORDER BY id",
        )
        .unwrap();
    stmt.query_map(rusqlite::params![job, sheet], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn scripted(env: &TestEnv, steps: Value) {
    let script = standin_script(env, "script", &steps);
    install_instruments(env);
    start_with_env(env, &[("MOZART_STANDIN_SCRIPT", &script)]);
}

#[test]
fn hello_example_runs_to_completed_with_three_voices() {
    let env = TestEnv::new();
    env.start_conductor();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello.yaml");
    let ws = env.work.join("hello-ws");
    run(&env, &example, &["--workspace", ws.to_str().unwrap()]);
    let doc = wait_terminal(&env, "hello", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let finale = std::fs::read_to_string(ws.join("finale.txt")).unwrap();
    assert_eq!(
        finale,
        "violin answers: Hello from Mozart\nviola answers: Hello from Mozart\ncello answers: Hello from Mozart\nFine.\n"
    );
    for n in 1..=5 {
        assert_eq!(sheet(&doc, n)["status"], "completed", "sheet {n}: {doc:#}");
        assert_eq!(sheet(&doc, n)["validation_passed"], true, "sheet {n}");
    }
}

#[test]
fn a_sheet_that_passes_first_time_takes_one_attempt() {
    let env = TestEnv::new();
    let (score, ws) = ai_score(&env, "first", &["a.txt"], "");
    scripted(
        &env,
        json!([{"files": {ws.join("a.txt").to_str().unwrap(): "a"}}]),
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "first", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 1, "{doc:#}");
    let rows = attempts(&env, "first", 1);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].1, "completed");
}

#[test]
fn two_failures_then_a_pass_records_three_attempts_with_backoff() {
    let env = TestEnv::new();
    // Plain-text output: the classifier sees only the message (see the ignored test below).
    let (score, ws) = ai_score_on(&env, "standin-text", "flaky", &["a.txt"], "");
    scripted(
        &env,
        json!([
            {"scenario": "error", "result": "transient trouble"},
            {"scenario": "error", "result": "transient trouble"},
            {"files": {ws.join("a.txt").to_str().unwrap(): "a"}}
        ]),
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "flaky", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 3, "{doc:#}");
    let rows = attempts(&env, "flaky", 1);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[2].1, "completed", "{rows:?}");
    // Backoff: 0.3 s after the first failure, 0.6 s after the second (no jitter).
    for (i, min_gap) in [(1usize, 0.25), (2, 0.5)] {
        let prev_end = rows[i - 1].2 + rows[i - 1].3;
        let gap = rows[i].2 - prev_end;
        assert!(
            gap >= min_gap,
            "gap before attempt {} was {gap:.3}s: {rows:?}",
            i + 1
        );
    }
}

#[test]
fn half_passed_validations_enter_completion_mode_then_complete() {
    let env = TestEnv::new();
    let (score, ws) = ai_score(&env, "partial", &["a.txt", "b.txt", "c.txt"], "");
    let f = |n: &str| ws.join(n).to_str().unwrap().to_string();
    scripted(
        &env,
        json!([
            {"files": {f("a.txt"): "a", f("b.txt"): "b"}},
            {"files": {f("c.txt"): "c"}}
        ]),
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "partial", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let s = sheet(&doc, 1);
    assert_eq!(s["validation_passed"], true);
    let modes: Vec<String> = attempts(&env, "partial", 1)
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(modes, ["normal", "completion"]);
}

/// Invocations of the stand-in so far (its script counter).
fn invocations(script: &Path) -> u32 {
    std::fs::read_to_string(format!("{}.count", script.display()))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn call(env: &TestEnv, method: &str, params: Value) -> Value {
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    client.call_value(method, params).unwrap()
}

/// Seconds left on the instrument's rate limit, as the conductor reports it.
fn limit_remaining(env: &TestEnv, instrument: &str) -> Option<f64> {
    let doc = call(env, "daemon.rate_limits", json!({}));
    doc["backends"][instrument]["seconds_remaining"].as_f64()
}

#[test]
fn a_rate_limit_parks_the_sheet_without_spending_a_retry_even_across_a_restart() {
    let env = TestEnv::new();
    let (score, ws) = ai_score(&env, "limited", &["a.txt"], "");
    // The reset is 2 s ahead; the classifier clamps waits to at least 5 minutes
    // (execution.md §10, upstream's floor), so the test lifts the limit by hand below.
    let script = standin_script(
        &env,
        "script",
        &json!([
            {"scenario": "limit-legacy", "reset_in": 2},
            {"files": {ws.join("a.txt").to_str().unwrap(): "a"}}
        ]),
    );
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &score, &[]);
    poll(&env, 20.0, "the rate limit to be recorded", || {
        limit_remaining(&env, "claude_cli")
    });
    let doc = status(&env, "limited");
    assert_ne!(doc["status"], "failed", "{doc:#}");
    assert_eq!(
        sheet(&doc, 1)["attempt_count"],
        0,
        "a rate limit is not an attempt: {doc:#}"
    );
    assert_eq!(sheet(&doc, 1)["error_category"], "rate_limit", "{doc:#}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(invocations(&script), 1, "the instrument stays parked");

    // A restart must not stampede: the parked instrument stays parked (invariant 2).
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    let remaining = limit_remaining(&env, "claude_cli");
    assert!(
        remaining.is_some_and(|r| r > 60.0),
        "limit survives the restart: {remaining:?}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        invocations(&script),
        1,
        "no re-dispatch into a live limit after restart"
    );

    // Lifting the limit lets the sheet run; the wait cost no retry.
    call(
        &env,
        "daemon.clear_rate_limits",
        json!({"instrument": "claude_cli"}),
    );
    let doc = wait_terminal(&env, "limited", 20.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 1, "{doc:#}");
    assert_eq!(invocations(&script), 2);
    let rows = attempts(&env, "limited", 1);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].4.as_deref(), Some("rate_limit"), "{rows:?}");
    assert_eq!(rows[1].1, "completed", "{rows:?}");
}

#[test]
fn a_hung_instrument_is_killed_at_the_timeout_and_retried() {
    let env = TestEnv::new();
    let (score, ws) = ai_score(
        &env,
        "hung",
        &["a.txt"],
        "backend:\n  timeout_seconds: 1.5\n",
    );
    scripted(
        &env,
        json!([
            {"scenario": "hang", "sleep": 60},
            {"files": {ws.join("a.txt").to_str().unwrap(): "a"}}
        ]),
    );
    submit_now(&env, &score);
    // The hung attempt runs in the workspace…
    std::fs::create_dir_all(&ws).unwrap();
    poll(&env, 10.0, "the hung instrument to be running", || {
        (!processes_in(&ws).is_empty()).then_some(())
    });
    let doc = wait_terminal(&env, "hung", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 2, "{doc:#}");
    let rows = attempts(&env, "hung", 1);
    assert_eq!(rows[0].4.as_deref(), Some("timeout"), "{rows:?}");
    // …and is gone once the timeout killed its process group.
    let left = poll(&env, 5.0, "the hung instrument to be killed", || {
        let left = processes_in(&ws);
        left.is_empty().then_some(left)
    });
    assert!(left.is_empty());
}

/// A sheet that times out having printed nothing shows Mozart's message, not Mozart's words
/// as the command's output: `errors` said `Timed out after 2s — stderr: Command timed out
/// after 2s` (`— output:` for an earlier attempt) and `logs --sheet 1` showed that line as
/// the command's stderr "from the registry (no log file: short output that ended within a
/// second)" — of a command that printed nothing and ran 2 s.
#[test]
fn a_silent_sheet_that_times_out_has_no_output_but_mozarts_message() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = format!(
        "name: to\nworkspace: {ws}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         retry: {{max_retries: 1, base_delay_seconds: 1}}\nbackend: {{timeout_seconds: 2}}\n\
         prompt:\n  template: |\n    RUN: sleep 10\n",
        ws = env.work.join("to-ws").display()
    );
    let path = env.write_score("to", &yaml);
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, "to", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    // Every failed attempt's stderr is empty: nothing of Mozart's stands in for it.
    let diagnose = env.mozart(&["diagnose", "to", "--json"]);
    let report: Value = serde_json::from_slice(&diagnose.stdout).unwrap();
    let errors = report["errors"].as_array().unwrap();
    assert!(!errors.is_empty(), "{report:#}");
    for e in errors {
        assert!(
            e["stderr_tail"]
                .as_str()
                .is_none_or(|t| t.trim().is_empty()),
            "{report:#}"
        );
    }
    let text = mozart_tests::stdout(&env.mozart(&["errors", "to", "-V"]));
    assert!(text.contains("Timed out after 2s"), "{text}");
    assert!(!text.contains("Command timed out"), "{text}");
    let logs = env.mozart(&["logs", "to", "--sheet", "1"]);
    let shown = format!(
        "{}{}",
        mozart_tests::stdout(&logs),
        String::from_utf8_lossy(&logs.stderr)
    );
    assert!(!shown.contains("Command timed out"), "{shown}");
    assert!(!shown.contains("stderr"), "no stderr was printed: {shown}");
}

/// An instrument killed by a signal it did not send itself (`kill -9` from outside, the OOM
/// killer) shows only what it printed as its stderr, and Mozart's message says how it ended:
/// `errors`, `logs --sheet 1` and `diagnose --json` showed `the instrument said this` followed
/// by `[Process killed by SIGKILL]` as the command's stderr — words it never printed (and
/// `run` quoted that line as what "its instrument said").
#[test]
fn an_instrument_killed_by_a_signal_shows_only_what_it_printed_as_its_stderr() {
    let env = TestEnv::new();
    env.start_conductor();
    // The RUN: line runs in a child of the instrument's own `sh` driver: `$PPID` is the
    // instrument, killed from outside after the line is printed.
    let yaml = format!(
        "name: killed\nworkspace: {ws}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         retry: {{max_retries: 1, base_delay_seconds: 1}}\n\
         prompt:\n  template: |\n    RUN: echo 'the instrument said this' >&2; kill -KILL $PPID\n",
        ws = env.work.join("killed-ws").display()
    );
    let path = env.write_score("killed", &yaml);
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, "killed", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let message = sheet(&doc, 1)["error_message"].as_str().unwrap_or_default();
    assert!(message.contains("killed by SIGKILL"), "{doc:#}");

    let text = mozart_tests::stdout(&env.mozart(&["errors", "killed", "-V"]));
    assert!(text.contains("Process killed by SIGKILL"), "{text}");
    assert!(text.contains("the instrument said this"), "{text}");
    assert!(!text.contains("[Process killed"), "{text}");

    let logs = env.mozart(&["logs", "killed", "--sheet", "1"]);
    let shown = format!(
        "{}{}",
        mozart_tests::stdout(&logs),
        String::from_utf8_lossy(&logs.stderr)
    );
    assert!(shown.contains("the instrument said this"), "{shown}");
    assert!(!shown.contains("Process killed"), "{shown}");

    let diagnose = env.mozart(&["diagnose", "killed", "--json"]);
    let report: Value = serde_json::from_slice(&diagnose.stdout).unwrap();
    let errors = report["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{report:#}");
    assert_eq!(
        errors[0]["stderr_tail"].as_str().map(str::trim_end),
        Some("the instrument said this"),
        "{report:#}"
    );
}

#[test]
fn an_instrument_killed_by_a_signal_is_retried() {
    let env = TestEnv::new();
    let (score, ws) = ai_score(&env, "crashy", &["a.txt"], "");
    scripted(
        &env,
        json!([
            {"scenario": "signal", "signal": "KILL"},
            {"files": {ws.join("a.txt").to_str().unwrap(): "a"}}
        ]),
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "crashy", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 2, "{doc:#}");
    let rows = attempts(&env, "crashy", 1);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].4.as_deref(), Some("signal"), "{rows:?}");
}

#[test]
fn validations_failing_every_attempt_fail_the_sheet_its_dependents_and_the_job() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("doomed-ws");
    let yaml = format!(
        r#"name: doomed
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry: {{max_retries: 2, base_delay_seconds: 0.1, jitter: false, max_completion_attempts: 0}}
sheet:
  size: 1
  total_items: 3
  dependencies:
    2: [1]
    3: [2]
prompt:
  template: |
    RUN: echo attempt >> "{{{{ workspace }}}}/attempts-{{{{ sheet_num }}}}.log"
validations:
  - type: file_exists
    path: "{{workspace}}/never.txt"
    description: "the impossible file"
"#,
        ws = ws.display()
    );
    let score = env.write_score("doomed", &yaml);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "doomed", 30.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["status"], "failed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["validation_passed"], false);
    // max_retries counts executions (execution.md §2.3): two, then no more.
    assert_eq!(ledger(&ws.join("attempts-1.log")).len(), 2);
    for n in [2, 3] {
        let s = sheet(&doc, n);
        assert_eq!(s["status"], "failed", "sheet {n}: {doc:#}");
        let reason = s["error_message"].as_str().unwrap_or_default();
        assert!(
            reason.contains("sheet 1") || reason.contains(&format!("sheet {}", n - 1)),
            "sheet {n}'s reason names the failed dependency: {reason:?}"
        );
        assert!(
            !ws.join(format!("attempts-{n}.log")).exists(),
            "sheet {n} never ran"
        );
    }
    let list = list_all(&env);
    assert_eq!(list[0]["status"], "failed", "{list:?}");
}

#[test]
fn a_transient_error_whose_request_id_contains_401_is_still_retried() {
    let env = TestEnv::new();
    let (score, ws) = ai_score_on(&env, "standin-text", "reqid", &["a.txt"], "");
    scripted(
        &env,
        json!([
            {"scenario": "error", "result": "API Error: 500 Internal server error (request_id: req_011CV4013ab9)"},
            {"files": {ws.join("a.txt").to_str().unwrap(): "a"}}
        ]),
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "reqid", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 2, "{doc:#}");
}

/// A rule's `sheet: N` shorthand limits it to sheet N when the job runs, as `validate`'s
/// preview says (score.md §3.7): sheet 2 completes although the rule would fail for it, and
/// the rule's command runs for sheet 1 only.
#[test]
fn a_rules_sheet_shorthand_applies_it_to_that_sheet_only_at_run_time() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: only1\nworkspace: ./only1-ws\ninstrument: shell\n\
                sheet: {size: 1, total_items: 2}\npause_between_sheets_seconds: 0\n\
                retry: {max_retries: 1, max_completion_attempts: 0}\n\
                prompt:\n  template: \"RUN: true\"\n\
                validations:\n  - type: command_succeeds\n    \
                command: 'echo {sheet_num} >> {workspace}/ran.txt; test {sheet_num} -eq 1'\n    \
                sheet: 1\n";
    let path = env.write_score("only1", yaml);
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, "only1", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 2)["attempt_count"], 1, "{doc:#}");
    let ran = std::fs::read_to_string(env.work.join("only1-ws/ran.txt")).unwrap();
    assert_eq!(ran, "1\n", "the rule ran for other sheets than 1");
}

/// A score whose `prompt.template_file` is not there is refused at `mozart run`, naming the
/// field and the path, instead of running every sheet on the one-line default prompt
/// (upstream's silent fallback, docs/differences.md); nothing is recorded for it.
#[test]
fn a_missing_template_file_is_refused_at_run_not_replaced_by_the_default_prompt() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: nofile\nworkspace: ./nofile-ws\ninstrument: shell\n\
                sheet: {size: 1, total_items: 2}\nprompt: {template_file: prompts/nope.j2}\n";
    let path = env.write_score("nofile", yaml);
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("prompt.template_file not found"), "{text}");
    assert!(text.contains("prompts/nope.j2"), "{text}");
    // With the file in place the same score runs.
    std::fs::create_dir_all(env.work.join("prompts")).unwrap();
    std::fs::write(env.work.join("prompts/nope.j2"), "RUN: true\n").unwrap();
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, "nofile", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
}

/// An attempt a cancel cut short may have spent money its instrument never reported: the
/// cancelled job's cost is unknown, not a certain $0.00 (an outside audit saw `$0.00`,
/// `cost_confidence: 1.0` for a job whose only attempt ran 14 s on a paid instrument).
#[test]
fn a_cancelled_attempts_cost_is_unknown_not_zero() {
    let env = TestEnv::new();
    let (score, _ws) = ai_score_on(&env, "standin-text", "stopped", &["a.txt"], "");
    scripted(&env, json!([{"sleep": 30}]));
    submit_now(&env, &score);
    wait_status(&env, "stopped", 30.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    std::thread::sleep(Duration::from_millis(500));
    let out = env.mozart(&["cancel", "stopped"]);
    assert!(out.status.success(), "{}", mozart_tests::stdout(&out));
    let doc = wait_status(&env, "stopped", 30.0, |d| d["status"] == "cancelled");
    assert_eq!(doc["cost"]["cost_confidence"], 0.0, "{doc:#}");
    let text = mozart_tests::stdout(&env.mozart(&["status", "stopped"]));
    assert!(
        text.contains("Cost: unknown")
            && text.contains("an attempt was stopped before the instrument reported")
            && !text.contains("$0.00"),
        "{text}"
    );
}

/// From sheet 2 on, the rules every sheet must meet are "inherited": the prompt named them
/// only by type ("Also still required (1 inherited): file_exists"), not the file the sheet
/// must create. It says what each asks, as sheet 1's list does.
#[test]
fn an_inherited_rule_in_the_prompt_names_its_file() {
    let env = TestEnv::new();
    let script = env.work.join("recorder");
    std::fs::write(
        &script,
        "#!/bin/sh\nfor a; do p=\"$a\"; done\nn=$(printf '%s' \"$p\" | sed -n 's/.*You are sheet \\([0-9]*\\) of.*/\\1/p' | head -1)\nprintf '%s\\n' \"$p\" > \"prompt-$n.txt\"\ntouch \"out-$n.txt\"\necho done\n",
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("recorder.yaml"),
        format!(
            "name: recorder\ndisplay_name: Recorder\nkind: cli\ncli:\n  command:\n    executable: {}\n  output:\n    format: text\n",
            script.display()
        ),
    )
    .unwrap();
    env.start_conductor();
    let score = env.write_score(
        "inh",
        "name: inh\nworkspace: ./inh-ws\ninstrument: recorder\npause_between_sheets_seconds: 0\nsheet: {size: 1, total_items: 2}\nprompt: {template: work}\nvalidations:\n  - type: file_exists\n    path: \"{workspace}/out-{sheet_num}.txt\"\n",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "inh", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let ws = env.work.join("inh-ws");
    let second = std::fs::read_to_string(ws.join("prompt-2.txt")).unwrap();
    let wanted = format!(
        "**Also still required** (1 inherited): file_exists (Create file: `{}`)",
        ws.join("out-2.txt").display()
    );
    assert!(second.contains(&wanted), "{second}");
}

/// `content_contains` with `pattern: "sheet {sheet_num} done"`: the prompt told the sheet
/// "Must contain: `sheet 1 done`" while the check looked for the text as written, braces
/// and all, so a sheet doing what it was told failed. The check fills the placeholders in.
#[test]
fn a_content_contains_pattern_is_checked_as_the_prompt_states_it() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score(
        "pat",
        "name: pat\nworkspace: ./pat-ws\ninstrument: shell\nretry: {max_retries: 0}\nsheet: {size: 1, total_items: 1}\nprompt: {template: \"RUN: echo 'sheet {{ sheet_num }} done' > {{ workspace }}/out.txt\"}\nvalidations:\n  - type: content_contains\n    path: \"{workspace}/out.txt\"\n    pattern: \"sheet {sheet_num} done\"\n",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "pat", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
}
