//! Regression tests for what the fuzz targets found (docs/reliability.md, "Findings"),
//! driven through the real binary: each input reached a panic or a stack overflow inside
//! the conductor, which would have taken the daemon down with every job in it.

use crate::support;

use mozart_tests::TestEnv;
use support::*;

/// `skip_when` texts that crashed `mozart_config::expr::evaluate` before the fix: a name
/// running into a multi-byte character (byte-wise lexer sliced inside 'Ԣ'), and nesting
/// deep enough to overflow the parser's stack.
fn nasty_skip_whens() -> Vec<String> {
    vec![
        // fuzz/artifacts/skip_expr/crash-362b8afc… (minimised by hand)
        "stage == 1 and shen(sheets[Ԣѐutpet_num >= 2".into(),
        "é".into(),
        format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000)),
        format!("{}True", "not ".repeat(100_000)),
        format!("{}1", "-".repeat(100_000)),
        format!("{}1{}", "[".repeat(50_000), "]".repeat(50_000)),
        format!("True{}", " and True".repeat(50_000)),
    ]
}

/// Each hostile expression, alone in a score: `validate` answers (it does not die by a
/// signal) and the conductor stays up. An expression that does not parse is refused when the
/// score loads, naming `skip_when`; one that parses and cannot be evaluated runs the sheet
/// (score.md §5.7, fail-open).
#[test]
fn hostile_skip_when_expressions_run_the_sheet_and_keep_the_conductor_alive() {
    let env = TestEnv::new();
    env.start_conductor();
    for (i, e) in nasty_skip_whens().iter().enumerate() {
        let name = format!("skipper{i}");
        let ws = env.work.join(format!("{name}-ws"));
        // JSON strings are valid YAML double-quoted scalars.
        let yaml = format!(
            r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: 1
  skip_when:
    1: {expr}
prompt:
  template: |
    RUN: echo ran > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
            ws = ws.display(),
            expr = serde_json::to_string(e).unwrap()
        );
        let score = env.write_score(&name, &yaml);
        let out = env.mozart(&["validate", score.to_str().unwrap()]);
        assert!(
            out.status.code().is_some(),
            "mozart validate died by a signal on expression {i}: {out:?}"
        );
        let resp = submit(&env, &score);
        let pid = env.conductor_pid().unwrap();
        assert!(
            mozart_tests::alive(pid),
            "conductor died on expression {i}:\n{}",
            log_tail(&env, 3000)
        );
        if resp["status"] == "accepted" {
            let doc = wait_all_terminal(&env, std::slice::from_ref(&name), 60).remove(0);
            assert_eq!(sheet(&doc, 1)["status"], "completed", "{i}: {doc:#}");
            assert!(
                ws.join("out-1.txt").exists(),
                "expression {i}: the sheet did not run"
            );
        } else {
            let said = resp.to_string();
            assert!(
                said.contains("skip_when"),
                "expression {i} refused without naming skip_when: {resp}"
            );
        }
    }
}

/// Scores asking for absurd sheet counts: before the fix, planning a hundred million
/// sheets ran out of memory, a huge fan-out never finished expanding, and
/// `total_items: i64::MAX` with `size: 2` overflowed the sheet arithmetic (a panic in
/// debug builds). Each must now be refused quickly, by `validate` and by the conductor.
#[test]
fn absurd_sheet_counts_are_refused_quickly_by_validate_and_the_conductor() {
    let env = TestEnv::new();
    let cases = [
        ("many", "  size: 1\n  total_items: 100000000\n"),
        (
            "wide",
            "  size: 1\n  total_items: 3\n  fan_out:\n    2: 100000000\n",
        ),
        (
            "overflow",
            "  size: 2\n  total_items: 9223372036854775807\n",
        ),
    ];
    env.start_conductor();
    for (name, sheet) in cases {
        let yaml = format!(
            "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\nsheet:\n{sheet}prompt:\n  template: hi\n"
        );
        let score = env.write_score(name, &yaml);
        let started = std::time::Instant::now();
        let out = env.mozart(&["validate", score.to_str().unwrap()]);
        let text = format!(
            "{}{}",
            mozart_tests::stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{name}: validate took {:?}",
            started.elapsed()
        );
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{name}: validate must fail cleanly, got {:?}: {text}",
            out.status
        );
        assert!(text.contains("at most 100000"), "{name}: {text}");

        let resp = submit(&env, &score);
        assert_ne!(resp["status"], "accepted", "{name}: {resp}");
        let pid = env.conductor_pid().unwrap();
        assert!(mozart_tests::alive(pid), "{name}: conductor died");
    }
}
