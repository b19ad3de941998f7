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
