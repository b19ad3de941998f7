//! Per-sheet worktrees (`isolation.scope: sheet`, docs/mochi.md) on real git repositories:
//! task branch names with collision suffixes, the manifest that lets a restart reuse them,
//! clean-up, and the up-front checks.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use mozart_config::JobConfig;
use mozart_jobs::isolation::RunOutcome;
use mozart_jobs::sheet_worktrees as sw;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn setup() -> (tempfile::TempDir, PathBuf, JobConfig) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("PRD.md"), "## Tasks\n- Fix it\n- Add docs\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let score = repo.join("s.yaml");
    std::fs::write(
        &score,
        "name: s\nworkspace: ../ws\nsheet: {size: 1, total_items: 1}\ntasks: {file: PRD.md, branch: \"mochi/{slug}\"}\nisolation: {enabled: true, scope: sheet}\nprompt: {template: x}\n",
    )
    .unwrap();
    let config = mozart_config::load_score(&score).unwrap().config;
    (tmp, repo, config)
}

fn branch(config: &JobConfig, n: usize) -> Option<String> {
    Some(config.tasks.as_ref().unwrap().items[n].branch.clone())
}

#[test]
fn task_branches_suffixes_manifest_reuse_and_cleanup() {
    let (_tmp, repo, config) = setup();
    assert!(sw::per_sheet(&config));
    // An earlier run left the first task's branch behind.
    git(&repo, &["branch", "mochi/fix-it"]);
    let a = sw::prepare(&config, "s", 1, branch(&config, 0), Some("fix-it".into())).unwrap();
    let b = sw::prepare(&config, "s", 2, branch(&config, 1), Some("add-docs".into())).unwrap();
    assert_eq!(a.branch, "mochi/fix-it-2");
    assert_eq!(b.branch, "mochi/add-docs");
    assert_ne!(a.path, b.path, "parallel tasks never share a tree");
    let manifest_path = sw::manifest_path(&config, "s");
    let m = sw::load(&manifest_path);
    assert_eq!(m.sheets.len(), 2);
    assert_eq!(m.sheets[&1].branch, "mochi/fix-it-2");

    // After a crash the recorded worktree is reused, not doubled.
    let again = sw::prepare(&config, "s", 1, branch(&config, 0), None).unwrap();
    assert_eq!(again.path, a.path);
    assert_eq!(again.branch, "mochi/fix-it-2");

    // A finished task's tree goes (its branch stays); the job's end keeps a failed one.
    sw::finish(&config, "s", 1, &again, RunOutcome::Completed).unwrap();
    assert!(!a.path.exists());
    git(&repo, &["rev-parse", "--verify", "mochi/fix-it-2"]);
    sw::finish_all(&config, "s", RunOutcome::Failed);
    let m = sw::load(&manifest_path);
    assert_eq!(m.sheets.keys().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(m.sheets[&2].status, "kept");
    assert!(b.path.exists());
    let list = git(&repo, &["worktree", "list", "--porcelain"]);
    assert!(!list.contains("locked"), "{list}");
}

#[test]
fn preflight_refuses_dirty_non_git_and_unknown_base() {
    let (_tmp, repo, mut config) = setup();
    sw::preflight(&config, "s").unwrap();
    // Untracked files (the workspace, say) do not count.
    std::fs::write(repo.join("notes.txt"), "x").unwrap();
    sw::preflight(&config, "s").unwrap();
    std::fs::write(repo.join("PRD.md"), "changed").unwrap();
    let e = sw::preflight(&config, "s").unwrap_err().to_string();
    assert!(
        e.contains("uncommitted changes") && e.contains("PRD.md"),
        "{e}"
    );
    git(&repo, &["checkout", "PRD.md"]);

    config.isolation.source_branch = Some("no-such-branch".into());
    let e = sw::preflight(&config, "s").unwrap_err().to_string();
    assert!(e.contains("'no-such-branch' does not name a commit"), "{e}");

    let elsewhere = tempfile::tempdir().unwrap();
    config.tasks.as_mut().unwrap().repository = Some(elsewhere.path().to_path_buf());
    let e = sw::preflight(&config, "s").unwrap_err().to_string();
    assert!(e.contains("is not inside a git repository"), "{e}");
}
