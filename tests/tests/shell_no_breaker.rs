//! The built-in `shell` instrument has no circuit breaker (docs/instruments.md "Holds on an
//! instrument"): its failures are the score's own commands failing. `mozart status` of a
//! shell job whose sheets all failed does not show a breaker `OPEN`.

use crate::harness::*;
use mozart_tests::{stdout, TestEnv};

#[test]
fn status_of_a_failed_shell_job_shows_no_open_circuit_breaker() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("nobreaker-ws");
    let yaml = format!(
        "name: nobreaker\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         parallel: {{enabled: true, max_concurrent: 6}}\nretry: {{max_retries: 1}}\n\
         sheet: {{size: 1, total_items: 6, dependencies: {{2: [], 3: [], 4: [], 5: [], 6: []}}}}\n\
         prompt: {{template: \"RUN: exit 1\"}}\n\
         validations: [{{type: file_modified, path: \"{{workspace}}/x\"}}]\n",
        ws = ws.display()
    );
    let score = env.write_score("nobreaker", &yaml);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "nobreaker", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert!(doc["circuit_breaker"].is_null(), "{doc:#}");
    let out = env.mozart(&["status", "nobreaker"]);
    let text = stdout(&out);
    assert!(text.contains("Shell exited with code 1"), "{text}");
    assert!(!text.contains("Circuit Breaker"), "{text}");
    assert!(!text.contains("OPEN"), "{text}");
}
