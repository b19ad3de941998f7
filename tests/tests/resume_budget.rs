//! `mozart resume` on a failed job runs its failed sheets again with a fresh retry budget
//! (docs/cli.md `mozart resume`, docs/scores.md "Retries"), and their attempts keep their
//! numbers.

use crate::harness::*;
use mozart_tests::{stdout, TestEnv};

/// A one-sheet `shell` score whose validation never passes (three attempts, `delay`
/// seconds of backoff, no jitter): each attempt adds a line to its workspace's `attempts`.
fn never_passing(
    env: &TestEnv,
    name: &str,
    delay: f64,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let ws = env.work.join(format!("{name}-ws"));
    let yaml = format!(
        "name: {name}\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         retry: {{max_retries: 3, base_delay_seconds: {delay}, jitter: false}}\n\
         sheet: {{size: 1, total_items: 1}}\n\
         prompt:\n  template: |\n    RUN: echo attempt >> \"{{{{ workspace }}}}/attempts\"\n\
         validations:\n  - type: file_exists\n    path: \"{{workspace}}/never\"\n    retry_count: 0\n",
        ws = ws.display()
    );
    (env.write_score(name, &yaml), ws)
}

/// How many attempts ran in `ws`.
fn attempts_in(ws: &std::path::Path) -> usize {
    std::fs::read_to_string(ws.join("attempts"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn resuming_a_failed_job_gives_its_failed_sheet_a_fresh_retry_budget() {
    let env = TestEnv::new();
    env.start_conductor();
    let (score, ws) = never_passing(&env, "budget", 0.1);
    let attempts = || attempts_in(&ws);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "budget", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(attempts(), 3, "max_retries: 3 is three attempts");

    let out = env.mozart(&["resume", "budget"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = wait_status(&env, "budget", 60.0, |d| {
        d["status"] == "failed" && sheet(d, 1)["attempt_count"].as_u64().unwrap_or(0) > 3
    });
    assert_eq!(
        attempts(),
        6,
        "the resumed sheet had a fresh budget of three attempts: {doc:#}"
    );
    // Its attempts keep their numbers: 4, 5 and 6, not 1, 2 and 3 again.
    assert_eq!(sheet(&doc, 1)["attempt_count"], 6, "{doc:#}");
    let out = env.mozart(&["errors", "budget", "--json"]);
    let errors = stdout(&out);
    let doc: serde_json::Value = serde_json::from_str(&errors).expect("errors --json");
    let mut numbers: Vec<u64> = doc["errors"]
        .as_array()
        .expect("errors list")
        .iter()
        .filter_map(|e| e["attempt_number"].as_u64())
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, vec![1, 2, 3, 4, 5, 6], "{errors}");
}

/// A restart does not bring a retry forward: a sheet waiting out its backoff when the
/// conductor is stopped (`mozart stop`, then `kill -9`) waits out the rest of it after the
/// restart — `status` still shows the retry to come, with about the time that was left —
/// and then runs it as the attempt it was to be, with the same budget.
#[test]
fn a_restart_waits_out_the_rest_of_a_retrys_backoff() {
    let env = TestEnv::new();
    env.start_conductor();
    let (score, ws) = never_passing(&env, "backoff", 20.0);
    let attempts = || attempts_in(&ws);
    run(&env, &score, &[]);
    let doc = wait_status(&env, "backoff", 30.0, |d| {
        !sheet(d, 1)["retry_wait"].is_null()
    });
    // When the retry is due (Unix epoch seconds), as the conductor first said.
    let due = sheet(&doc, 1)["retry_wait"]["at"]
        .as_f64()
        .expect("retry_wait.at");
    let now = || mozart_state::epoch_now();
    assert_eq!(attempts(), 1);
    // A clean stop and a kill -9, each followed by a start, both within the 20 s backoff
    // (long enough for a loaded CI machine's restarts).
    for stop in ["stop", "kill -9"] {
        if stop == "stop" {
            let out = env.mozart(&["stop", "--yes"]);
            assert!(out.status.success(), "{}", stdout(&out));
        } else {
            crate::support::kill9_conductor(&env);
        }
        env.start_conductor();
        let doc = wait_status(&env, "backoff", 10.0, |d| {
            !sheet(d, 1)["retry_wait"].is_null()
        });
        let at = sheet(&doc, 1)["retry_wait"]["at"].as_f64().unwrap_or(0.0);
        assert!(
            (at - due).abs() < 1.0,
            "after `{stop}` the retry is due at {at}, not at {due} ({:.1} s from now): {doc:#}",
            due - now()
        );
        assert_eq!(sheet(&doc, 1)["retry_wait"]["attempt"], 2, "{doc:#}");
        assert_eq!(
            attempts(),
            1,
            "after `{stop}` the retry ran before its backoff ended"
        );
    }
    let doc = wait_status(&env, "backoff", 30.0, |_| attempts() >= 2);
    let ran = now();
    assert!(
        ran >= due - 0.5,
        "the retry ran {:.1} s before its backoff ended: {doc:#}",
        due - ran
    );
    assert_eq!(attempts(), 2, "{doc:#}");
    let out = env.mozart(&["cancel", "backoff"]);
    assert!(out.status.success(), "{}", stdout(&out));
}
