//! `skip_when_command` (seed 003, execution.md §9.2): a planning sheet writes
//! `TOTAL_PHASES: N`; later phase sheets skip when the plan has fewer phases. Skipped sheets
//! satisfy their dependents and show as skipped with their reason.

use crate::harness;

use harness::*;
use mozart_tests::TestEnv;

/// Sheet 1 plans, sheets 2–5 are phases 1–4, sheet 6 ships; the stage chain makes each
/// wait for the one before.
fn issue_solver(env: &TestEnv, name: &str, phases: u32) -> std::path::PathBuf {
    let ws = env.work.join(format!("{name}-ws"));
    let skip = |sheet: u32, below: &str, phase: u32| {
        format!(
            "    {sheet}:\n      command: 'grep -qE \"^TOTAL_PHASES: [{below}]$\" \"{{workspace}}/03-plan.md\"'\n      description: \"Skip phase {phase}: the plan has fewer phases\"\n"
        )
    };
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry: {{max_retries: 1, base_delay_seconds: 0.1, jitter: false}}
sheet:
  size: 1
  total_items: 6
  skip_when_command:
{s3}{s4}{s5}prompt:
  variables:
    phases: {phases}
  template: |
    {{% if sheet_num == 1 %}}
    RUN: echo "TOTAL_PHASES: {{{{ phases }}}}" > "{{{{ workspace }}}}/03-plan.md"
    {{% endif %}}
    RUN: echo "{{{{ sheet_num }}}}" >> "{{{{ workspace }}}}/ledger"
"#,
        ws = ws.display(),
        s3 = skip(3, "1", 2),
        s4 = skip(4, "12", 3),
        s5 = skip(5, "123", 4),
    );
    let score = env.write_score(name, &yaml);
    run(env, &score, &[]);
    ws
}

fn check(env: &TestEnv, name: &str, ws: &std::path::Path, skipped: &[u32]) {
    let doc = wait_terminal(env, name, 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    for n in 1..=6u32 {
        let s = sheet(&doc, n);
        if skipped.contains(&n) {
            assert_eq!(s["status"], "skipped", "sheet {n}: {doc:#}");
            let reason = s["error_message"].as_str().unwrap_or_default();
            assert!(
                reason.contains(&format!("Skip phase {}", n - 1)),
                "sheet {n} shows its skip reason: {reason:?}"
            );
        } else {
            assert_eq!(s["status"], "completed", "sheet {n}: {doc:#}");
        }
    }
    let ran: Vec<u32> = ledger(&ws.join("ledger"))
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    let expected: Vec<u32> = (1..=6).filter(|n| !skipped.contains(n)).collect();
    assert_eq!(ran, expected, "{name}: only unskipped sheets ran, in order");
}

#[test]
fn a_one_phase_plan_skips_phases_two_to_four_and_a_three_phase_plan_only_phase_four() {
    let env = TestEnv::new();
    env.start_conductor();
    let one = issue_solver(&env, "one-phase", 1);
    let three = issue_solver(&env, "three-phase", 3);
    check(&env, "one-phase", &one, &[3, 4, 5]);
    check(&env, "three-phase", &three, &[5]);
}

/// A sheet skipped by design is not an error: `errors` (human and JSON) and `status`'s
/// Recent Errors leave it out.
#[test]
fn skipped_sheets_are_not_listed_as_errors() {
    let env = TestEnv::new();
    env.start_conductor();
    let _ws = issue_solver(&env, "skipper", 1);
    let doc = wait_terminal(&env, "skipper", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 3)["status"], "skipped", "{doc:#}");
    assert_eq!(doc["recent_errors"], serde_json::json!([]), "{doc:#}");

    let out = env.mozart(&["errors", "skipper", "--json"]);
    let errors: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(errors["total_errors"], 0, "{errors:#}");

    let out = env.mozart(&["errors", "skipper"]);
    let text = mozart_tests::stdout(&out);
    assert!(!text.contains("Skip phase"), "{text}");
    let out = env.mozart(&["status", "skipper"]);
    let text = mozart_tests::stdout(&out);
    assert!(!text.contains("Recent Errors"), "{text}");
}

/// `--start-sheet` past the score's last sheet, or 0, is a usage error (exit 2) naming the
/// option and the score's sheet count; nothing is submitted.
#[test]
fn a_start_sheet_outside_the_score_is_refused() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("six", &mozart_tests::sleepy_shell_score("six", 6, 0.0));
    let file = path.to_str().unwrap();
    let out = env.mozart(&["run", file, "--start-sheet", "99"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--start-sheet"), "{err}");
    assert!(err.contains("6 sheets"), "{err}");
    assert!(err.contains("99"), "{err}");
    let out = env.mozart(&["run", file, "--start-sheet", "0"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = env.mozart(&["list", "--all", "--json"]);
    let text = mozart_tests::stdout(&list);
    assert!(!text.contains("\"six\""), "nothing was submitted: {text}");
    // The conductor refuses it too, whichever client asks.
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let doc = client
        .call_value(
            "job.submit",
            serde_json::json!({"config_path": file, "start_sheet": 7}),
        )
        .unwrap();
    assert_eq!(doc["status"], "rejected", "{doc:#}");
    assert!(
        doc["message"]
            .as_str()
            .unwrap_or_default()
            .contains("6 sheets"),
        "{doc:#}"
    );
    // The last sheet itself is a valid start.
    let out = env.mozart(&["run", file, "--start-sheet", "6", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", mozart_tests::stdout(&out));
    let doc = wait_terminal(&env, "six", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
}
