//! The maintained `scores/issue-solver.yaml` end to end (issue #6 bar): the stand-in AI CLI
//! plays every stage against a local git repository, writing what each stage's validations
//! expect; the plan's `TOTAL_PHASES` decides which phase sheets `skip_when_command` skips.

use crate::harness;

use std::path::{Path, PathBuf};

use harness::*;
use mozart_tests::{git, TestEnv};
use serde_json::{json, Value};

/// The repo's score, placed in a fresh git project, played by the stand-in (`claude_cli`
/// passes the conductor's environment through, so the stand-in sees its script) with short
/// retry delays and no chaining cooldown.
fn project(env: &TestEnv) -> PathBuf {
    let repo = env.work.join("project");
    std::fs::create_dir_all(repo.join("scores")).unwrap();
    git(&repo, &["init", "-q", "."]);
    std::fs::write(repo.join("README.md"), "a project with issues\n").unwrap();
    git(&repo, &["add", "README.md"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let score = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scores/issue-solver.yaml"),
    )
    .unwrap()
    .replace("instrument: claude-code", "instrument: claude_cli")
    .replace("base_delay_seconds: 30", "base_delay_seconds: 0.1")
    .replace(
        "cooldown_between_jobs_seconds: 300",
        "cooldown_between_jobs_seconds: 3600",
    );
    let path = repo.join("scores").join("issue-solver.yaml");
    std::fs::write(&path, score).unwrap();
    path
}

/// One stand-in step per instrument call, in stage order (skipped phases make no call).
fn steps(phases: u32) -> Value {
    let mut steps = vec![
        json!({"files": {"01-selection.md": "ISSUE: 7\nFix the frobnicator\n"}}),
        json!({"files": {"02-investigation.md": "src/frob.rs:10 is wrong\n"}}),
        json!({"files": {"03-plan.md": format!("TOTAL_PHASES: {phases}\n"), "verify.sh": "#!/bin/bash\necho PASS: frob\n"},
               "run": "chmod +x verify.sh"}),
    ];
    for phase in 1..=phases {
        steps.push(json!({"files": {format!("phase-{phase}.md"): "DEFERRED: nothing\n"}}));
        steps.push(json!({"files": {format!("phase-{phase}.md"): "COMPLETE: all items\n"}}));
    }
    // The three reviewers run at once, so the stand-in's step counter may hand two of them
    // the same step; from here on every step writes everything the remaining stages check,
    // which keeps the test independent of that interleaving.
    let rest = json!({
        "12-review-1.md": "ok\n", "12-review-2.md": "ok\n", "12-review-3.md": "ok\n",
        "13-review-response.md": "all fixed\n", "14-docs.md": "CHANGELOG updated\n",
        "16-commit.txt": "abc1234\n", "17-chain.md": "CHAIN: continue\n"
    });
    for _ in 0..8 {
        steps.push(json!({ "files": rest }));
    }
    Value::Array(steps)
}

fn solve(phases: u32) -> (Value, TestEnv) {
    let env = TestEnv::new();
    let score = project(&env);
    let script = standin_script(&env, "solver", &steps(phases));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "issue-solver", 90.0);
    (doc, env)
}

fn statuses(doc: &Value) -> Vec<(u32, String)> {
    (1..=19)
        .map(|n| {
            (
                n,
                sheet(doc, n)["status"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

#[test]
fn one_phase_plan_skips_phases_two_to_four() {
    let (doc, env) = solve(1);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    for (n, status) in statuses(&doc) {
        let want = if (6..=11).contains(&n) {
            "skipped"
        } else {
            "completed"
        };
        assert_eq!(status, want, "sheet {n}: {doc:#}");
    }
    let sheet6 = sheet(&doc, 6);
    assert!(
        sheet6["error_message"]
            .as_str()
            .unwrap_or("")
            .contains("single phase"),
        "the skip reason is the rule's description: {sheet6:#}"
    );
    // Its labels are keyed by sheet: stage 12's three reviews are sheets 12–14, so the
    // stages after it are sheets 15–19 (movement 13 was labelled "Final verification").
    let shown = status(&env, "issue-solver");
    let label = |movement: u64| -> String {
        shown["movements"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["movement"] == movement))
            .and_then(|m| m["description"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(label(12), "Review (functional)", "{shown:#}");
    assert_eq!(label(13), "Act on the reviews", "{shown:#}");
    assert_eq!(label(15), "Final verification", "{shown:#}");
    assert_eq!(label(17), "Close the issue; chain gate", "{shown:#}");
    let table = mozart_tests::stdout(&env.mozart(&["status", "issue-solver", "--sheets"]));
    let row = |n: &str| {
        table
            .lines()
            .find(|l| l.trim_start().starts_with(n))
            .unwrap_or("")
    };
    assert!(row("14 ").contains("Review (quality)"), "{table}");
    assert!(row("19 ").contains("Close the issue"), "{table}");
}

#[test]
fn three_phase_plan_skips_only_phase_four() {
    let (doc, env) = solve(3);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    for (n, status) in statuses(&doc) {
        let want = if (10..=11).contains(&n) {
            "skipped"
        } else {
            "completed"
        };
        assert_eq!(status, want, "sheet {n}: {doc:#}");
    }
}
