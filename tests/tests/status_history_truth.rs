//! What `status`, `diagnose` and `history` say about a sheet's attempts is what happened: a
//! sheet waiting out its retry backoff is retrying (not merely pending), Recent Errors lists
//! the failed attempts (not one per sheet), the diagnose timeline shows each attempt's mode
//! and outcome, and an attempt cut short by a cancel is in the history.

use mozart_tests::{stdout, TestEnv};

use crate::harness::{run, sheet, wait_status};

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
