//! `mozart resume` on a failed job runs its failed sheets again with a fresh retry budget
//! (docs/cli.md `mozart resume`, docs/scores.md "Retries"), and their attempts keep their
//! numbers.

use crate::harness::*;
use mozart_tests::{stdout, TestEnv};

#[test]
fn resuming_a_failed_job_gives_its_failed_sheet_a_fresh_retry_budget() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("budget-ws");
    let yaml = format!(
        "name: budget\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         retry: {{max_retries: 3, base_delay_seconds: 0.1, jitter: false}}\n\
         sheet: {{size: 1, total_items: 1}}\n\
         prompt:\n  template: |\n    RUN: echo attempt >> \"{{{{ workspace }}}}/attempts\"\n\
         validations:\n  - type: file_exists\n    path: \"{{workspace}}/never\"\n    retry_count: 0\n",
        ws = ws.display()
    );
    let score = env.write_score("budget", &yaml);
    let attempts = || {
        std::fs::read_to_string(ws.join("attempts"))
            .unwrap_or_default()
            .lines()
            .count()
    };
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
