//! Cross-sheet context with real files and a real score (score.md §3.13, §5.8.5).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime};

use mozart_config::{load_score_str, JobConfig, PlannedSheet, RenderContext, SheetPlan};
use mozart_jobs::cross_sheet::{collect, glob, prior_from_checkpoint, CrossSheetInput};

fn score(workspace: &Path, cross_sheet: &str) -> (JobConfig, SheetPlan) {
    let text = format!(
        "name: cs\nworkspace: {}\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 6\n\
         prompt:\n  variables:\n    kind: report\n  template: \"x\"\ncross_sheet:\n{cross_sheet}",
        workspace.display()
    );
    let score = load_score_str(&text, &workspace.join("score.yaml")).unwrap();
    let plan = SheetPlan::build(&score.config).unwrap();
    (score.config, plan)
}

fn sheet(plan: &SheetPlan, n: u32) -> &PlannedSheet {
    plan.sheets.iter().find(|s| s.num == n).unwrap()
}

fn tails(pairs: &[(u32, &str)]) -> BTreeMap<u32, String> {
    pairs.iter().map(|(n, s)| (*n, s.to_string())).collect()
}

#[test]
fn previous_outputs_follow_the_lookback_window_truncation_and_skips() {
    let tmp = tempfile::tempdir().unwrap();
    let (job, plan) = score(
        tmp.path(),
        "  auto_capture_stdout: true\n  max_output_chars: 5\n  lookback_sheets: 2\n",
    );
    let stdout = tails(&[(1, "one"), (2, "second output"), (3, "three")]);
    let skipped = BTreeSet::from([4]);
    let found = collect(&CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 5),
        workspace: tmp.path(),
        stdout_tails: &stdout,
        skipped: &skipped,
        files_modified_since: None,
    });
    // Sheet 5 with lookback 2 sees sheets 3 and 4 only.
    assert_eq!(
        found.previous_outputs,
        tails(&[(3, "three"), (4, "[SKIPPED]")])
    );
    assert_eq!(found.skipped_upstream, vec![4]);

    let found = collect(&CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 3),
        workspace: tmp.path(),
        stdout_tails: &stdout,
        skipped: &skipped,
        files_modified_since: None,
    });
    assert_eq!(
        found.previous_outputs,
        tails(&[(1, "one"), (2, "secon\n... [truncated]")])
    );
}

#[test]
fn lookback_zero_reaches_back_to_sheet_one_and_capture_off_gives_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let stdout = tails(&[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]);
    let none = BTreeSet::new();
    let (job, plan) = score(
        tmp.path(),
        "  auto_capture_stdout: true\n  lookback_sheets: 0\n",
    );
    let input = CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 6),
        workspace: tmp.path(),
        stdout_tails: &stdout,
        skipped: &none,
        files_modified_since: None,
    };
    assert_eq!(collect(&input).previous_outputs.len(), 5);

    let (job, plan) = score(tmp.path(), "  auto_capture_stdout: false\n");
    let input = CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 6),
        ..input
    };
    assert!(collect(&input).previous_outputs.is_empty());
}

#[test]
fn capture_files_expand_any_template_expression_and_redact_then_truncate() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir_all(ws.join("out")).unwrap();
    std::fs::write(ws.join("out/sheet-2.md"), "from sheet two").unwrap();
    std::fs::write(ws.join("out/sheet-3.md"), "from sheet three (me)").unwrap();
    std::fs::write(ws.join("out/report-a.txt"), "A").unwrap();
    std::fs::write(ws.join("out/report-b.txt"), "B").unwrap();
    std::fs::write(ws.join("out/.hidden.txt"), "hidden").unwrap();
    let key = format!("key=sk-ant-api03-{}", "x".repeat(40));
    std::fs::write(ws.join("secrets.log"), &key).unwrap();
    let (job, plan) = score(
        ws,
        "  max_output_chars: 30\n  capture_files:\n\
         \x20   - \"out/sheet-{{ sheet_num - 1 }}.md\"\n\
         \x20   - \"{{ workspace }}/out/{{ kind }}-*.txt\"\n\
         \x20   - \"out/*.txt\"\n\
         \x20   - \"{workspace}/secrets.log\"\n",
    );
    let none = BTreeMap::new();
    let found = collect(&CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 3),
        workspace: ws,
        stdout_tails: &none,
        skipped: &BTreeSet::new(),
        files_modified_since: None,
    });
    let files: Vec<(String, String)> = found.previous_files.clone();
    let p = |rel: &str| ws.join(rel).to_string_lossy().into_owned();
    assert_eq!(
        files,
        vec![
            (p("out/sheet-2.md"), "from sheet two".to_string()),
            (p("out/report-a.txt"), "A".to_string()),
            (p("out/report-b.txt"), "B".to_string()),
            (p("secrets.log"), "key=[REDACTED_ANTHROPIC_KEY]".to_string()),
        ],
        "hidden files are not matched by `*`; duplicates are read once"
    );
    assert!(found.warnings.is_empty(), "{:?}", found.warnings);

    // Values land where the prompt template reads them.
    let mut ctx = RenderContext::default();
    found.apply(&mut ctx);
    assert_eq!(ctx.previous_files.get(&p("out/report-a.txt")).unwrap(), "A");
}

#[test]
fn long_files_are_truncated_with_the_mark() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("big.txt"), "0123456789").unwrap();
    let (job, plan) = score(
        tmp.path(),
        "  max_output_chars: 4\n  capture_files: [\"big.txt\"]\n",
    );
    let found = collect(&CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 2),
        workspace: tmp.path(),
        stdout_tails: &BTreeMap::new(),
        skipped: &BTreeSet::new(),
        files_modified_since: None,
    });
    assert_eq!(found.previous_files[0].1, "0123\n... [truncated]");
}

#[test]
fn a_pattern_that_cannot_render_is_reported_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.txt"), "a").unwrap();
    let (job, plan) = score(
        tmp.path(),
        "  capture_files: [\"{{ no_such_var }}.txt\", \"a.txt\"]\n",
    );
    let found = collect(&CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 2),
        workspace: tmp.path(),
        stdout_tails: &BTreeMap::new(),
        skipped: &BTreeSet::new(),
        files_modified_since: None,
    });
    assert_eq!(found.previous_files.len(), 1);
    assert_eq!(found.warnings.len(), 1);
    assert!(
        found.warnings[0].contains("no_such_var") || found.warnings[0].contains("undefined"),
        "{:?}",
        found.warnings
    );
}

#[test]
fn files_older_than_the_run_are_ignored_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("old.txt"), "old").unwrap();
    let since = SystemTime::now() + Duration::from_secs(60);
    let (job, plan) = score(tmp.path(), "  capture_files: [\"*.txt\"]\n");
    let found = collect(&CrossSheetInput {
        job: &job,
        sheet: sheet(&plan, 2),
        workspace: tmp.path(),
        stdout_tails: &BTreeMap::new(),
        skipped: &BTreeSet::new(),
        files_modified_since: Some(since),
    });
    assert!(found.previous_files.is_empty());
}

#[test]
fn glob_matches_one_component_per_wildcard() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    std::fs::create_dir_all(ws.join("a/x")).unwrap();
    std::fs::create_dir_all(ws.join("b/x")).unwrap();
    std::fs::write(ws.join("a/x/f.md"), "").unwrap();
    std::fs::write(ws.join("b/x/g.md"), "").unwrap();
    std::fs::write(ws.join("top.md"), "").unwrap();
    let g = |p: &str| glob(&ws.join(p).to_string_lossy());
    assert_eq!(
        g("*/x/*.md"),
        vec![ws.join("a/x/f.md"), ws.join("b/x/g.md")]
    );
    assert_eq!(g("*.md"), vec![ws.join("top.md")]);
    assert_eq!(
        g("**/*.md"),
        g("*/*.md"),
        "no recursion without recursive=True"
    );
    assert_eq!(g("[ab]/x"), vec![ws.join("a/x"), ws.join("b/x")]);
    assert_eq!(g("top.md"), vec![ws.join("top.md")]);
    assert!(g("missing.md").is_empty());
}

#[test]
fn checkpoint_gives_completed_tails_and_skipped_sheets() {
    use mozart_state::{CheckpointState, SheetState, SheetStatus};
    let mut cp = CheckpointState::new("j", "j", 4);
    for (n, status, tail) in [
        (1, SheetStatus::Completed, Some("done")),
        (2, SheetStatus::Failed, Some("partial")),
        (3, SheetStatus::Skipped, None),
        (4, SheetStatus::Completed, Some("")),
    ] {
        let mut s = SheetState::new(n);
        s.status = status;
        s.stdout_tail = tail.map(str::to_string);
        cp.sheets.insert(n, s);
    }
    let (tails, skipped) = prior_from_checkpoint(&cp);
    assert_eq!(tails, BTreeMap::from([(1, "done".to_string())]));
    assert_eq!(skipped, BTreeSet::from([3]));
}
