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

#[test]
fn hostile_skip_when_expressions_run_the_sheet_and_keep_the_conductor_alive() {
    let env = TestEnv::new();
    let exprs = nasty_skip_whens();
    let ws = env.work.join("skipper-ws");
    let mut skip = String::from("  skip_when:\n");
    for (i, e) in exprs.iter().enumerate() {
        // JSON strings are valid YAML double-quoted scalars.
        skip.push_str(&format!(
            "    {}: {}\n",
            i + 1,
            serde_json::to_string(e).unwrap()
        ));
    }
    let yaml = format!(
        r#"name: skipper
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: {n}
{skip}prompt:
  template: |
    RUN: echo ran > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
        ws = ws.display(),
        n = exprs.len()
    );
    let score = env.write_score("skipper", &yaml);

    // Validation reads the expressions too; it must answer, not crash.
    let out = env.mozart(&["validate", score.to_str().unwrap()]);
    assert!(
        out.status.code().is_some(),
        "mozart validate died by a signal: {out:?}"
    );

    env.start_conductor();
    let resp = submit(&env, &score);
    assert_eq!(resp["status"], "accepted", "{resp}");
    let doc = wait_all_terminal(&env, &["skipper".to_string()], 60).remove(0);
    let pid = env.conductor_pid().unwrap();
    assert!(
        mozart_tests::alive(pid),
        "conductor died:\n{}",
        log_tail(&env, 3000)
    );
    // An expression that cannot be evaluated runs the sheet (score.md §5.7, fail-open).
    assert_eq!(doc["status"], "completed", "{doc:#}");
    for n in 1..=exprs.len() as u32 {
        assert_eq!(sheet(&doc, n)["status"], "completed", "sheet {n}: {doc:#}");
        assert!(
            ws.join(format!("out-{n}.txt")).exists(),
            "sheet {n} did not run"
        );
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
