//! `sheet.prelude` / `sheet.cadenzas` (docs/scores.md "Prompt templates"): a file that is
//! there is sent; one that is not is left out of the prompt and the job's log says so.

use crate::harness::*;
use mozart_tests::{stdout, TestEnv};

#[test]
fn a_missing_prelude_file_is_named_in_the_jobs_log() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("inject-ws");
    std::fs::write(env.work.join("guide.md"), "GUIDE TEXT\n").expect("write guide");
    // The shell instrument ignores all but RUN: lines; the template writes what it got.
    let yaml = format!(
        "name: inject\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet:\n  size: 1\n  total_items: 1\n  prelude:\n    - {{file: guide.md, as: context}}\n    - {{file: no-such-guide.md, as: context}}\n\
         prompt:\n  template: |\n    RUN: echo '{{{{ injected_context | length }}}}' > \"{{{{ workspace }}}}/count\"\n\
         validations:\n  - type: file_exists\n    path: \"{{workspace}}/count\"\n",
        ws = ws.display()
    );
    let score = env.write_score("inject", &yaml);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "inject", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let count = std::fs::read_to_string(ws.join("count")).unwrap_or_default();
    assert_eq!(count.trim(), "1", "the file that is there was injected");
    let logs = poll(
        &env,
        20.0,
        "the skipped prelude file in the job's log",
        || {
            let out = env.mozart(&["logs", "inject"]);
            let text = stdout(&out);
            text.contains("no-such-guide.md").then_some(text)
        },
    );
    let line = logs
        .lines()
        .find(|l| l.contains("no-such-guide.md"))
        .unwrap_or_default();
    assert!(
        line.contains("sheet.prelude[1] (context): file not found"),
        "{line}"
    );
    assert!(line.contains("left out of sheet 1's prompt"), "{line}");
    assert!(
        !logs.contains("prelude[0]"),
        "the file that is there is not reported: {logs}"
    );
}
