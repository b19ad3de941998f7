//! What `status`, `diagnose` and `history` say about a sheet's attempts is what happened: a
//! sheet waiting out its retry backoff is retrying (not merely pending), Recent Errors lists
//! the failed attempts (not one per sheet), the diagnose timeline shows each attempt's mode
//! and outcome, and an attempt cut short by a cancel is in the history.

use mozart_tests::{stdout, TestEnv};

use crate::harness::{poll, run, sheet, wait_status, wait_terminal};
use mozart_tests::sleepy_shell_score;

/// A sheet that fails every attempt; its retries wait 30 s.
const FAILS_SLOWLY: &str = r#"name: slowretry
workspace: ./slowretry-ws
instrument: shell
retry:
  max_retries: 2
  base_delay_seconds: 30
  jitter: false
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: exit 1
"#;

#[test]
fn a_sheet_waiting_out_its_retry_backoff_shows_as_retrying() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("slowretry", FAILS_SLOWLY);
    run(&env, &score, &[]);
    let doc = wait_status(&env, "slowretry", 30.0, |d| {
        sheet(d, 1)["attempt_count"] == 1 && sheet(d, 1)["status"] == "pending"
    });
    // The JSON keeps upstream's word, and adds what the retry is.
    assert_eq!(sheet(&doc, 1)["status"], "pending", "{doc:#}");
    let retry = &sheet(&doc, 1)["retry_wait"];
    assert_eq!(retry["attempt"], 2, "{doc:#}");
    assert_eq!(retry["max_retries"], 2, "{doc:#}");
    let left = retry["seconds_left"].as_f64().unwrap_or(0.0);
    assert!(left > 20.0 && left <= 30.0, "{doc:#}");

    let text = stdout(&env.mozart(&["status", "slowretry"]));
    assert!(text.contains("retrying (attempt 2 of 2) in "), "{text}");
    let cancelled = env.mozart(&["cancel", "slowretry"]);
    assert_eq!(cancelled.status.code(), Some(0), "{}", stdout(&cancelled));
}

/// A sheet whose four attempts fail, each with its own error.
const FAILS_FOUR_WAYS: &str = r#"name: fourways
workspace: ./fourways-ws
instrument: shell
retry:
  max_retries: 4
  base_delay_seconds: 0.1
  jitter: false
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: n=$(cat "{{ workspace }}/count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{{ workspace }}/count"; echo "error: boom $n" >&2; exit 1
"#;

#[test]
fn recent_errors_list_each_failed_attempt_newest_first_and_say_when_cut() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("fourways", FAILS_FOUR_WAYS);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "fourways", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    // The JSON keeps its element shape and lists up to five: all four attempts.
    let listed: Vec<String> = doc["recent_errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["error_message"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(listed.len(), 4, "{doc:#}");
    for (i, n) in [4, 3, 2, 1].iter().enumerate() {
        assert!(listed[i].contains(&format!("boom {n}")), "{listed:?}");
    }
    for e in doc["recent_errors"].as_array().into_iter().flatten() {
        assert_eq!(e["sheet_num"], 1, "{e:#}");
        assert!(
            e["timestamp"].is_string() && e["error_code"].is_string(),
            "{e:#}"
        );
    }
    // The human view shows the newest three, and says there is one more.
    let text = stdout(&env.mozart(&["status", "fourways"]));
    assert!(text.contains("Recent Errors — newest 3 of 4"), "{text}");
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    assert!(at("attempt 4)") < at("attempt 3)"), "{text}");
    assert!(at("attempt 3)") < at("attempt 2)"), "{text}");
    assert!(!text.contains("attempt 1)"), "{text}");
    assert!(text.contains("boom 4") && text.contains("boom 2"), "{text}");
}

/// A sheet whose first attempt fails its validation and whose second passes.
const SECOND_TIME_LUCKY: &str = r#"name: second
workspace: ./second-ws
instrument: shell
retry:
  max_retries: 3
  base_delay_seconds: 0.1
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: n=$(cat "{{ workspace }}/count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{{ workspace }}/count"
    RUN: if [ "$(cat "{{ workspace }}/count")" -ge 2 ]; then echo done > "{{ workspace }}/done.txt"; fi
validations:
  - type: file_exists
    path: "{workspace}/done.txt"
"#;

#[test]
fn the_diagnose_timeline_shows_each_sheets_mode_and_outcome() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("second", SECOND_TIME_LUCKY);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "second", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");

    let out = env.mozart(&["diagnose", "second", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("diagnose --json: {e}: {}", stdout(&out)));
    let row = &report["execution_timeline"][0];
    assert_eq!(row["execution_mode"], "retry", "{report:#}");
    assert_eq!(row["outcome_category"], "success_retry", "{report:#}");

    let text = stdout(&env.mozart(&["diagnose", "second"]));
    let timeline = text
        .split("Execution Timeline")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    let line = timeline
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("retry") && line.contains("success_retry"),
        "{line}\n{text}"
    );
}

/// `mozart history JOB --json`'s records, newest first.
fn history(env: &TestEnv, id: &str) -> Vec<serde_json::Value> {
    let out = env.mozart(&["history", id, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("history --json: {e}: {}", stdout(&out)));
    doc["records"].as_array().cloned().unwrap_or_default()
}

#[test]
fn history_shows_an_attempt_a_cancel_cut_short() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("cutshort", &sleepy_shell_score("cutshort", 1, 30.0));
    run(&env, &score, &[]);
    wait_status(&env, "cutshort", 30.0, |d| {
        sheet(d, 1)["status"] == "in_progress"
    });
    let out = env.mozart(&["cancel", "cutshort"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_terminal(&env, "cutshort", 30.0);

    let records = history(&env, "cutshort");
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["sheet_num"], 1, "{records:#?}");
    assert_eq!(records[0]["attempt_num"], 1, "{records:#?}");
    assert_eq!(records[0]["outcome"], "interrupted", "{records:#?}");
    let text = stdout(&env.mozart(&["history", "cutshort"]));
    assert!(text.contains("interrupted"), "{text}");
    assert!(text.contains("Total: 1 record(s)"), "{text}");
    // Not an error: `errors` does not list it.
    let errors = stdout(&env.mozart(&["errors", "cutshort", "--json"]));
    assert!(!errors.contains("interrupted"), "{errors}");
}

#[test]
fn history_shows_an_attempt_a_conductor_kill_cut_short() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("killed", &sleepy_shell_score("killed", 1, 3.0));
    run(&env, &score, &[]);
    wait_status(&env, "killed", 30.0, |d| {
        sheet(d, 1)["status"] == "in_progress"
    });
    let pid = env
        .conductor_pid()
        .unwrap_or_else(|| panic!("no conductor pid"));
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    let doc = wait_terminal(&env, "killed", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");

    // The cut-short attempt, then the one that ran again after the restart (an interrupted
    // attempt spends no retry: both are attempt 1).
    let records = history(&env, "killed");
    let rows: Vec<(u64, u64, &str)> = records
        .iter()
        .map(|r| {
            (
                r["sheet_num"].as_u64().unwrap_or(0),
                r["attempt_num"].as_u64().unwrap_or(0),
                r["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![(1, 1, "completed"), (1, 1, "interrupted")],
        "{records:#?}"
    );
    let text = stdout(&env.mozart(&["history", "killed"]));
    assert!(text.contains("interrupted"), "{text}");
    assert!(text.contains("Total: 2 record(s)"), "{text}");
    // A second restart records nothing more.
    assert_eq!(env.stop_conductor().status.code(), Some(0));
    env.start_conductor();
    assert_eq!(history(&env, "killed").len(), 2);
}

/// `run -H`: the self-healing attempt is one attempt, numbered after the last retry, and the
/// counts say how many ran (it was counted twice: 3 ran, history said 1, 2, 4, status 4).
#[test]
fn a_self_healing_attempt_is_counted_once() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score(
        "healed",
        r#"name: healed
workspace: ./healed-ws
instrument: shell
retry: {max_retries: 2, base_delay_seconds: 1}
sheet: {size: 1, total_items: 1}
prompt: {template: "RUN: echo x >> \"{{ workspace }}/att.txt\"; exit 1"}
"#,
    );
    run(&env, &score, &["-H"]);
    let doc = wait_terminal(&env, "healed", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let ran = std::fs::read_to_string(env.work.join("healed-ws/att.txt")).unwrap();
    assert_eq!(ran.lines().count(), 3, "two tries and the healing attempt");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 3, "{doc:#}");
    let error = sheet(&doc, 1)["error_message"].as_str().unwrap_or_default();
    assert!(error.starts_with("Failed after 3 attempts"), "{doc:#}");
    let mut nums: Vec<u64> = history(&env, "healed")
        .iter()
        .filter_map(|r| r["attempt_num"].as_u64())
        .collect();
    nums.sort_unstable();
    assert_eq!(nums, [1, 2, 3]);
}

/// `mozart history k1 --sheet 99` said "none has yet for this score (or sheet)" and `errors
/// k1 --sheet 99` "No errors found" of a sheet the score does not have; both now say it has
/// no such sheet (and how many it has), exit 1, as `logs --sheet 99` does.
#[test]
fn history_and_errors_of_a_sheet_the_score_does_not_have_say_so() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("k1.yaml", &sleepy_shell_score("k1", 2, 0.0));
    run(&env, &score, &[]);
    wait_terminal(&env, "k1", 60.0);
    for cmd in ["history", "errors"] {
        let out = env.mozart(&[cmd, "k1", "--sheet", "99"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {text}");
        assert!(
            text.contains("Score k1 has no sheet 99 (it has 2 sheets)."),
            "{cmd}: {text}"
        );
        // A sheet it has: as before.
        let out = env.mozart(&[cmd, "k1", "--sheet", "2"]);
        assert_eq!(out.status.code(), Some(0), "{cmd}: {}", stdout(&out));
    }
}
