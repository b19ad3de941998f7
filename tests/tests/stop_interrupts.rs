//! A graceful stop that outlasts `shutdown_timeout_seconds` interrupts the sheet still
//! running; it does not fail it (docs/cli.md `mozart stop`, docs/conductor.md): the attempt
//! the conductor itself ended is not a failed attempt, spends no retry, records no error,
//! and the sheet runs again from its checkpoint on the next start — even on its last
//! attempt (`max_retries: 1`).

use crate::harness::{ledger, poll, sheet, status, tail, wait_terminal};
use mozart_tests::{stdout, TestEnv};

#[test]
fn stop_past_the_shutdown_timeout_interrupts_a_sheet_on_its_last_attempt_without_failing_it() {
    let env = TestEnv::new();
    std::fs::write(
        env.home.join("conductor.yaml"),
        "shutdown_timeout_seconds: 10\n",
    )
    .unwrap();
    env.start_conductor();
    let ws = env.work.join("ws");
    // The repro's score; the first line only counts the sheet's runs. The first run sleeps
    // 30 s, well past the stop's 10 s; the run after the restart 5 s, long enough to be
    // seen running.
    let score = env.write_score(
        "long",
        "name: long\nworkspace: ./ws\ninstrument: shell\n\
         sheet: {size: 1, total_items: 1}\nretry: {max_retries: 1}\n\
         prompt:\n  template: |\n    RUN: echo run >> ledger\n    \
         RUN: if [ \"$(wc -l < ledger)\" -eq 1 ]; then sleep 30; else sleep 5; fi\n",
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    poll(&env, 30.0, "the sheet to start", || {
        (ledger(&ws.join("ledger")).len() == 1).then_some(())
    });
    std::thread::sleep(std::time::Duration::from_secs(2));

    let out = env.mozart(&["stop", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "stop: {}", stdout(&out));
    let log = env.log();
    assert!(
        !log.contains("retry_scheduled")
            && !log.contains("sheet.failed")
            && !log.contains("terminated by SIGTERM"),
        "the interrupted attempt was taken for a failure:\n{}",
        tail(&log, 6000)
    );

    env.start_conductor();
    let doc = status(&env, "long");
    assert!(
        matches!(doc["status"].as_str(), Some("running" | "paused")),
        "the stopped job goes on after the start: {doc:#}"
    );
    let doc = wait_terminal(&env, "long", 90.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        ledger(&ws.join("ledger")).len(),
        2,
        "the interrupted sheet ran again"
    );
    let one = sheet(&doc, 1);
    assert_eq!(one["status"], "completed", "{doc:#}");
    assert_eq!(
        one["attempt_count"], 1,
        "the interrupted attempt is not counted: {doc:#}"
    );
    assert!(one["error_message"].is_null(), "{doc:#}");
    assert!(
        doc["recent_errors"]
            .as_array()
            .is_none_or(|errors| errors.is_empty()),
        "no failure recorded: {doc:#}"
    );
    let log = env.log();
    assert!(
        !log.contains("retry_scheduled") && !log.contains("sheet.failed"),
        "{}",
        tail(&log, 6000)
    );
    let _ = env.stop_conductor();
}
