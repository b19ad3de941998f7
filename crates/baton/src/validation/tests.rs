//! Validation engine on real files and real `bash -c` commands.
#![allow(clippy::unwrap_used)] // tests may unwrap (common.md rule 5)

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

fn rule(check: ValidationCheck) -> ValidationRule {
    ValidationRule {
        retry_count: 0,
        retry_delay: Duration::from_millis(10),
        ..ValidationRule::new(check)
    }
}

fn cmd(command: &str, dir: &Path, timeout: Duration) -> ValidationCheck {
    ValidationCheck::CommandSucceeds {
        command: command.into(),
        working_dir: dir.into(),
        timeout,
    }
}

#[tokio::test]
async fn a_failing_commands_output_stays_on_the_summarys_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_validations(
        &[rule(cmd(
            "echo 'test_foo FAILED: expected 3 got 4' >&2; exit 2",
            dir.path(),
            Duration::from_secs(10),
        ))],
        &MtimeSnapshot::default(),
    )
    .await;
    // The rule's own message keeps the output on lines of its own...
    let detail = report.results[0].error_message.clone().unwrap_or_default();
    assert!(detail.contains("exit 2\ntest_foo FAILED"), "{detail}");
    // ...its summary (joined into the sheet's error message) is one line.
    let summary = &report.failure_summaries()[0];
    assert!(!summary.contains('\n'), "{summary:?}");
    assert!(
        summary.ends_with("exit 2 ⏎ test_foo FAILED: expected 3 got 4"),
        "{summary:?}"
    );
}

#[tokio::test]
async fn no_checks_is_a_full_pass() {
    let report = run_validations(&[], &MtimeSnapshot::default()).await;
    assert_eq!(report.pass_rate(), 100.0);
    assert!(report.all_passed());
}

#[tokio::test]
async fn file_checks_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.md");
    std::fs::write(&out, "# Title\nstatus: DONE\n").unwrap();
    let rules = vec![
        rule(ValidationCheck::FileExists { path: out.clone() }),
        rule(ValidationCheck::FileExists {
            path: dir.path().join("missing.md"),
        }),
        rule(ValidationCheck::FileExists {
            path: dir.path().to_path_buf(),
        }),
        rule(ValidationCheck::ContentContains {
            path: out.clone(),
            pattern: "DONE".into(),
        }),
        rule(ValidationCheck::ContentContains {
            path: out.clone(),
            pattern: "TODO".into(),
        }),
        rule(ValidationCheck::ContentRegex {
            path: out.clone(),
            pattern: r"^status: \w+$".into(),
        }),
        rule(ValidationCheck::ContentRegex {
            path: out.clone(),
            pattern: "(".into(),
        }),
    ];
    let report = run_validations(&rules, &MtimeSnapshot::default()).await;
    let status: Vec<_> = report.results.iter().map(|r| r.status).collect();
    use CheckStatus::*;
    assert_eq!(
        status,
        vec![Passed, Failed, Failed, Passed, Failed, Passed, Failed]
    );
    assert_eq!(
        report.results[1].failure_category.as_deref(),
        Some("missing")
    );
    assert_eq!(
        report.results[4].failure_category.as_deref(),
        Some("incomplete")
    );
    assert_eq!(
        report.results[5].actual_value.as_deref(),
        Some("status: DONE"),
        "multi-line ^$"
    );
    assert!(report.results[6]
        .error_message
        .as_deref()
        .is_some_and(|m| m.starts_with("Regex error")));
    assert!((report.pass_rate() - 300.0 / 7.0).abs() < 1e-9);
    assert_eq!(
        report.failure_summaries()[0].split(' ').next(),
        Some("[MISSING]")
    );
}

#[tokio::test]
async fn file_modified_compares_with_the_pre_sheet_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.txt");
    let new = dir.path().join("new.txt");
    std::fs::write(&old, "before").unwrap();
    let rules = vec![
        rule(ValidationCheck::FileModified { path: old.clone() }),
        rule(ValidationCheck::FileModified { path: new.clone() }),
    ];
    let snapshot = snapshot_mtimes(&rules);
    assert!(snapshot.get(&old).is_some());
    assert!(snapshot.get(&new).is_none());
    // Untouched existing file: stale. Missing file: missing.
    let report = run_validations(&rules, &snapshot).await;
    assert_eq!(report.results[0].failure_category.as_deref(), Some("stale"));
    assert_eq!(
        report.results[1].failure_category.as_deref(),
        Some("missing")
    );
    // The sheet writes both: both pass.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&old, "after").unwrap();
    std::fs::write(&new, "created").unwrap();
    let report = run_validations(&rules, &snapshot).await;
    assert!(report.all_passed(), "{report:#?}");
}

#[tokio::test]
async fn command_checks_run_under_bash_in_the_working_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker"), "x").unwrap();
    let t = Duration::from_secs(10);
    let rules = vec![
        // `[[ ]]` is bash, not sh: proves `bash -c`.
        rule(cmd("[[ -f marker ]]", dir.path(), t)),
        rule(cmd("echo oops >&2; exit 3", dir.path(), t)),
    ];
    let report = run_validations(&rules, &MtimeSnapshot::default()).await;
    assert_eq!(report.results[0].status, CheckStatus::Passed);
    let failed = &report.results[1];
    assert_eq!(failed.status, CheckStatus::Failed);
    assert_eq!(failed.confidence, 0.8);
    assert!(failed
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("exit 3") && m.contains("oops")));
}

#[tokio::test]
async fn long_command_output_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let rules = vec![rule(cmd(
        "printf 'a%.0s' $(seq 1 800); exit 1",
        dir.path(),
        Duration::from_secs(10),
    ))];
    let report = run_validations(&rules, &MtimeSnapshot::default()).await;
    let msg = report.results[0].error_message.clone().unwrap();
    assert!(msg.ends_with("\n... (800 chars total)"), "{msg}");
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    // The child `sleep` writes its pid; if only bash were killed, it would survive.
    let command = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let rules = vec![rule(cmd(&command, dir.path(), Duration::from_millis(300)))];
    let started = Instant::now();
    let report = run_validations(&rules, &MtimeSnapshot::default()).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let result = &report.results[0];
    assert_eq!(result.status, CheckStatus::Failed);
    assert!(result
        .error_message
        .as_deref()
        .is_some_and(|m| m.contains("timed out")));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Give the kernel a moment to reap; then the pid must be gone (or a zombie of init).
    std::thread::sleep(Duration::from_millis(100));
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "));
    assert!(!alive, "sleep {pid} outlived the timeout");
}

#[tokio::test]
async fn retries_until_a_check_passes() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("late.txt");
    let writer_target = target.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(120)).await;
        tokio::fs::write(writer_target, "done").await.unwrap();
    });
    let r = ValidationRule {
        retry_count: 10,
        retry_delay: Duration::from_millis(50),
        ..ValidationRule::new(ValidationCheck::FileExists { path: target })
    };
    let report = run_validations(&[r], &MtimeSnapshot::default()).await;
    writer.await.unwrap();
    assert_eq!(report.results[0].status, CheckStatus::Passed);
    assert!(report.results[0].attempts > 1);
}

#[tokio::test]
async fn a_failing_stage_skips_later_stages_and_conditions_filter() {
    let dir = tempfile::tempdir().unwrap();
    let t = Duration::from_secs(10);
    let mut later = rule(cmd("touch ran", dir.path(), t));
    later.stage = 2;
    let mut not_applicable = rule(cmd("exit 1", dir.path(), t));
    not_applicable.applies = false;
    let rules = vec![later, rule(cmd("exit 1", dir.path(), t)), not_applicable];
    let report = run_validations(&rules, &MtimeSnapshot::default()).await;
    assert_eq!(report.results.len(), 2, "non-applicable rules are not run");
    assert_eq!(report.results[0].status, CheckStatus::Skipped);
    assert_eq!(report.results[1].status, CheckStatus::Failed);
    assert!(!dir.path().join("ran").exists(), "stage 2 must not run");
    assert_eq!(report.skipped_count(), 1);
    assert_eq!(report.executed_pass_rate(), 0.0);
    assert_eq!(report.pass_rate(), 0.0);
}

/// `content_contains` reads a chunk at a time: a pattern across the boundary of two chunks
/// is found, and one that is not there is not.
#[tokio::test]
async fn content_contains_finds_a_pattern_across_two_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let mut text = vec![b'a'; super::run::SEARCH_CHUNK - 3];
    text.extend_from_slice(b"NEEDLE and more");
    std::fs::write(&path, &text).unwrap();
    let check = |pattern: &str| {
        rule(ValidationCheck::ContentContains {
            path: path.clone(),
            pattern: pattern.into(),
        })
    };
    let report = run_validations(
        &[check("NEEDLE"), check("NEEDLES")],
        &MtimeSnapshot::default(),
    )
    .await;
    assert_eq!(report.results[0].status, CheckStatus::Passed);
    assert_eq!(report.results[1].status, CheckStatus::Failed);
}
