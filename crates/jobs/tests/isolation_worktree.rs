//! Worktree isolation on real git repositories in temporary directories (execution.md §9.5).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mozart_config::model::IsolationConfig;
use mozart_jobs::isolation::{
    finish, list_worktrees, prepare, recover_stale_locks, Cleanup, Intent, Isolation,
    IsolationError, Journal, Recorded, RunOutcome, Worktree, WorktreeRequest, WorktreeScope,
    WorktreeSetup,
};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=t@example.com"])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository with one commit (`README.md`, a sub-directory, `.env` ignored) and a
/// workspace beside it.
struct Fixture {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    workspace: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let workspace = tmp.path().join("ws");
    std::fs::create_dir_all(repo.join("sub")).unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    std::fs::write(repo.join("sub/code.txt"), "code\n").unwrap();
    std::fs::write(repo.join(".gitignore"), ".env\nnode_modules/\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    std::fs::write(repo.join(".env"), "SECRET=1\n").unwrap();
    Fixture {
        _tmp: tmp,
        repo,
        workspace,
    }
}

fn enabled() -> IsolationConfig {
    IsolationConfig {
        enabled: true,
        fallback_on_error: false,
        ..IsolationConfig::default()
    }
}

fn request<'a>(f: &Fixture, cfg: &'a IsolationConfig, job: &'a str) -> WorktreeRequest<'a> {
    WorktreeRequest {
        job_id: job,
        scope: WorktreeScope::Job,
        config: cfg,
        repo_dir: f.repo.clone(),
        workspace: f.workspace.clone(),
        resume_path: None,
        setup: WorktreeSetup::default(),
        branch: None,
        recorded: None,
        journal: None,
    }
}

fn worktree(i: Isolation) -> Worktree {
    match i {
        Isolation::Worktree(wt) => wt,
        other => panic!("expected a worktree, got {other:?}"),
    }
}

fn lock_of(repo: &Path, path: &Path) -> Option<String> {
    list_worktrees(repo)
        .unwrap()
        .into_iter()
        .find(|e| e.path == path)
        .and_then(|e| e.lock_reason)
}

/// A pid that certainly belongs to no running process: a child that has exited and been
/// reaped, as a conductor killed with -9 would leave behind.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn parallel_sheets_get_their_own_locked_worktrees_and_main_is_untouched() {
    let f = fixture();
    let cfg = enabled();
    let head_before = git(&f.repo, &["rev-parse", "HEAD"]);
    let status_before = git(&f.repo, &["status", "--porcelain", "--ignored"]);

    let trees: Vec<Worktree> = std::thread::scope(|scope| {
        let handles: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|n| {
                let mut req = request(&f, &cfg, "job");
                req.scope = WorktreeScope::Sheet(n);
                scope.spawn(move || prepare(&req).map(worktree))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });

    assert_ne!(trees[0].path, trees[1].path);
    for (wt, n) in trees.iter().zip([1, 2]) {
        assert_eq!(
            wt.path,
            f.workspace
                .join(".worktrees")
                .join(format!("job-sheet-{n}"))
        );
        assert_eq!(wt.branch, format!("mozart/job-sheet-{n}"));
        assert_eq!(git(&wt.path, &["branch", "--show-current"]), wt.branch);
        assert_eq!(
            std::fs::read_to_string(wt.path.join("README.md")).unwrap(),
            "hello\n"
        );
        let reason = lock_of(&f.repo, &wt.path).expect("locked while running");
        assert!(
            reason.contains(&format!("pid={}", std::process::id())),
            "{reason}"
        );
        assert!(wt.locked);
    }
    // Work in one tree is invisible to the other and to the main checkout.
    std::fs::write(trees[0].path.join("README.md"), "changed by sheet 1\n").unwrap();
    std::fs::write(trees[0].path.join("new.txt"), "x").unwrap();
    assert_eq!(
        std::fs::read_to_string(trees[1].path.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(!trees[1].path.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.repo.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(!f.repo.join("new.txt").exists());
    assert_eq!(git(&f.repo, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git(&f.repo, &["branch", "--show-current"]), "main");
    assert_eq!(
        git(&f.repo, &["status", "--porcelain", "--ignored"]),
        status_before
    );
}

#[test]
fn completed_run_cleanup_leaves_no_worktree_or_lock_but_keeps_the_branch() {
    let f = fixture();
    let cfg = enabled();
    let wt = worktree(prepare(&request(&f, &cfg, "job")).unwrap());
    std::fs::write(wt.path.join("dirty.txt"), "uncommitted").unwrap();
    git(&wt.path, &["add", "dirty.txt"]);
    git(&wt.path, &["commit", "-q", "-m", "work"]);

    assert_eq!(
        finish(&wt, RunOutcome::Completed, &cfg).unwrap(),
        Cleanup::Removed
    );

    assert!(!wt.path.exists());
    let entries = list_worktrees(&f.repo).unwrap();
    assert_eq!(
        entries.len(),
        1,
        "only the main checkout remains: {entries:?}"
    );
    assert!(entries.iter().all(|e| e.lock_reason.is_none()));
    let admin = f.repo.join(".git/worktrees");
    assert!(!admin.exists() || std::fs::read_dir(&admin).unwrap().next().is_none());
    // The work is still reachable on its branch.
    assert_eq!(
        git(&f.repo, &["log", "-1", "--format=%s", "mozart/job"]),
        "work"
    );
}

#[test]
fn failed_run_keeps_the_worktree_unlocked_and_a_paused_one_stays_locked() {
    let f = fixture();
    let cfg = enabled();
    let wt = worktree(prepare(&request(&f, &cfg, "paused")).unwrap());
    assert_eq!(
        finish(&wt, RunOutcome::Paused, &cfg).unwrap(),
        Cleanup::Kept { locked: true }
    );
    assert!(lock_of(&f.repo, &wt.path).is_some());

    let wt = worktree(prepare(&request(&f, &cfg, "failed")).unwrap());
    assert_eq!(
        finish(&wt, RunOutcome::Failed, &cfg).unwrap(),
        Cleanup::Kept { locked: false }
    );
    assert!(wt.path.join("README.md").exists());
    assert_eq!(lock_of(&f.repo, &wt.path), None);

    let removing = IsolationConfig {
        cleanup_on_failure: true,
        ..enabled()
    };
    assert_eq!(
        finish(&wt, RunOutcome::Failed, &removing).unwrap(),
        Cleanup::Removed
    );
    assert!(!wt.path.exists());
}

#[test]
fn a_lock_left_by_a_crashed_run_is_recovered_and_the_worktree_reused() {
    let f = fixture();
    let cfg = enabled();
    // The crashed run: a worktree with work in progress, locked by a process now gone.
    let path = f.workspace.join(".worktrees/job");
    git(
        &f.repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "mozart/job",
            path.to_str().unwrap(),
        ],
    );
    let stale = format!("Mozart job job in progress (pid={})", dead_pid());
    git(
        &f.repo,
        &[
            "worktree",
            "lock",
            "--reason",
            &stale,
            path.to_str().unwrap(),
        ],
    );
    std::fs::write(path.join("progress.txt"), "half done").unwrap();

    let req = request(&f, &cfg, "job").resuming(Some(&path));
    let wt = worktree(prepare(&req).unwrap());

    assert!(wt.reused);
    assert_eq!(wt.path, path);
    assert_eq!(wt.branch, "mozart/job");
    assert_eq!(
        std::fs::read_to_string(path.join("progress.txt")).unwrap(),
        "half done"
    );
    let reason = lock_of(&f.repo, &path).unwrap();
    assert!(
        reason.contains(&format!("pid={}", std::process::id())),
        "relocked by us: {reason}"
    );
    assert_eq!(list_worktrees(&f.repo).unwrap().len(), 2);
}

#[test]
fn a_stale_worktree_without_a_checkpoint_is_unlocked_and_a_fresh_one_made_beside_it() {
    let f = fixture();
    let cfg = enabled();
    let old = f.workspace.join(".worktrees/job");
    git(
        &f.repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "mozart/job",
            old.to_str().unwrap(),
        ],
    );
    let stale = format!("Mozart job job in progress (pid={})", dead_pid());
    git(
        &f.repo,
        &[
            "worktree",
            "lock",
            "--reason",
            &stale,
            old.to_str().unwrap(),
        ],
    );

    let wt = worktree(prepare(&request(&f, &cfg, "job")).unwrap());

    assert_eq!(wt.path, f.workspace.join(".worktrees/job-2"));
    assert_eq!(wt.branch, "mozart/job-2");
    assert!(!wt.reused);
    assert_eq!(
        lock_of(&f.repo, &old),
        None,
        "the dead owner's lock was dropped"
    );
    assert!(
        old.exists(),
        "an earlier run's tree is never deleted to make room"
    );
}

#[test]
fn a_deleted_worktree_with_a_stale_lock_is_pruned_and_its_name_reused() {
    let f = fixture();
    let cfg = enabled();
    let old = f.workspace.join(".worktrees/job");
    git(
        &f.repo,
        &["worktree", "add", "-q", "--detach", old.to_str().unwrap()],
    );
    let stale = format!("Mozart job job in progress (pid={})", dead_pid());
    git(
        &f.repo,
        &[
            "worktree",
            "lock",
            "--reason",
            &stale,
            old.to_str().unwrap(),
        ],
    );
    std::fs::remove_dir_all(&old).unwrap();

    let wt = worktree(prepare(&request(&f, &cfg, "job").resuming(Some(&old))).unwrap());
    assert_eq!(wt.path, old);
    assert!(!wt.reused);
    assert_eq!(list_worktrees(&f.repo).unwrap().len(), 2);
}

#[test]
fn startup_recovery_unlocks_dead_owners_only() {
    let f = fixture();
    let dead = f.workspace.join("dead");
    let live = f.workspace.join("live");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    for (path, pid) in [(&dead, dead_pid()), (&live, sleeper.id())] {
        git(
            &f.repo,
            &["worktree", "add", "-q", "--detach", path.to_str().unwrap()],
        );
        let reason = format!("Mozart job x in progress (pid={pid})");
        git(
            &f.repo,
            &[
                "worktree",
                "lock",
                "--reason",
                &reason,
                path.to_str().unwrap(),
            ],
        );
    }

    let recovered = recover_stale_locks(&f.repo).unwrap();

    assert_eq!(recovered, vec![dead.clone()]);
    assert_eq!(lock_of(&f.repo, &dead), None);
    assert!(lock_of(&f.repo, &live).is_some());
    // A live owner makes the worktree busy for a resuming run.
    let cfg = enabled();
    let err = prepare(&request(&f, &cfg, "x").resuming(Some(&live))).unwrap_err();
    assert!(matches!(err, IsolationError::Busy { .. }), "{err}");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

#[test]
fn a_rerun_after_success_gets_a_suffixed_branch() {
    let f = fixture();
    let cfg = enabled();
    let first = worktree(prepare(&request(&f, &cfg, "job")).unwrap());
    finish(&first, RunOutcome::Completed, &cfg).unwrap();
    let second = worktree(prepare(&request(&f, &cfg, "job")).unwrap());
    assert!(!first.path.exists());
    // Directory and branch share the suffix, so a tree is easy to match to its branch.
    assert_eq!(
        second.branch, "mozart/job-2",
        "the first run's branch is kept"
    );
    assert_eq!(second.path, f.workspace.join(".worktrees/job-2"));
}

#[test]
fn setup_copies_ignored_files_and_runs_commands_in_the_worktree() {
    let f = fixture();
    let cfg = enabled();
    std::fs::create_dir_all(f.repo.join("node_modules/pkg")).unwrap();
    std::fs::write(f.repo.join("node_modules/pkg/index.js"), "x").unwrap();
    let setup = WorktreeSetup {
        copy_files: vec![".env".into(), "node_modules".into(), "missing.txt".into()],
        commands: vec!["echo \"$MOZART_JOB_ID from $MOZART_REPO\" > setup.out".into()],
        command_timeout: Duration::from_secs(30),
    };
    let wt = worktree(prepare(&request(&f, &cfg, "job").with_setup(setup)).unwrap());
    assert_eq!(
        std::fs::read_to_string(wt.path.join(".env")).unwrap(),
        "SECRET=1\n"
    );
    assert!(wt.path.join("node_modules/pkg/index.js").exists());
    assert_eq!(
        std::fs::read_to_string(wt.path.join("setup.out")).unwrap(),
        format!("job from {}\n", f.repo.display())
    );
    assert!(!f.repo.join("setup.out").exists());
}

/// The intent a journal recorded (what the sheet manifest keeps on disk).
fn journaled(req: &mut WorktreeRequest<'_>) -> std::sync::Arc<std::sync::Mutex<Option<Intent>>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let sink = seen.clone();
    req.journal = Some(Journal(std::sync::Arc::new(move |i: &Intent| {
        *sink.lock().unwrap() = Some(i.clone());
        Ok(())
    })));
    seen
}

/// A crash after `git worktree add` but before the copies and setup commands: the next run
/// finishes that same tree (copies, commands) instead of making a `-2` twin.
#[test]
fn a_tree_created_but_not_set_up_before_a_crash_is_finished_in_place() {
    let f = fixture();
    let cfg = enabled();
    let mut req = request(&f, &cfg, "job");
    let seen = journaled(&mut req);
    let first = worktree(prepare(&req).unwrap());
    let intent = seen
        .lock()
        .unwrap()
        .clone()
        .expect("the journal saw the intent");
    assert_eq!((&intent.path, &intent.branch), (&first.path, &first.branch));
    // As if the process died before populating: no copy, no lock owner alive.
    assert!(!first.path.join(".env").exists());
    git(
        &f.repo,
        &["worktree", "unlock", first.path.to_str().unwrap()],
    );
    let setup = WorktreeSetup {
        copy_files: vec![".env".into()],
        commands: vec!["echo done > setup.out".into()],
        command_timeout: Duration::from_secs(30),
    };
    let mut again = request(&f, &cfg, "job")
        .resuming(Some(&intent.path))
        .with_setup(setup);
    again.recorded = Some(Recorded {
        intent: intent.clone(),
        creating: true,
    });
    let wt = worktree(prepare(&again).unwrap());
    assert_eq!((&wt.path, &wt.branch), (&first.path, &first.branch));
    assert!(wt.reused);
    assert_eq!(
        std::fs::read_to_string(wt.path.join(".env")).unwrap(),
        "SECRET=1\n"
    );
    assert!(wt.path.join("setup.out").exists());
    assert_eq!(
        git(&f.repo, &["branch", "--list", "mozart/*"])
            .lines()
            .count(),
        1
    );
}

/// A crash inside `git worktree add` (the branch made, the tree half-written and unknown to
/// git): the next run clears the leftovers and creates the tree under the same name.
#[test]
fn a_tree_half_created_before_a_crash_is_recreated_under_the_same_name() {
    let f = fixture();
    let cfg = enabled();
    let mut req = request(&f, &cfg, "job");
    let seen = journaled(&mut req);
    let first = worktree(prepare(&req).unwrap());
    let intent = seen.lock().unwrap().clone().unwrap();
    // Leave what a killed `git worktree add` can leave: the branch and a directory git
    // does not list.
    git(
        &f.repo,
        &["worktree", "unlock", first.path.to_str().unwrap()],
    );
    git(
        &f.repo,
        &[
            "worktree",
            "remove",
            "--force",
            first.path.to_str().unwrap(),
        ],
    );
    std::fs::create_dir_all(first.path.join("partial")).unwrap();
    let mut again = request(&f, &cfg, "job").resuming(Some(&intent.path));
    again.recorded = Some(Recorded {
        intent: intent.clone(),
        creating: true,
    });
    let wt = worktree(prepare(&again).unwrap());
    assert_eq!((&wt.path, &wt.branch), (&first.path, &first.branch));
    assert!(!wt.reused);
    assert!(!wt.path.join("partial").exists());
    assert_eq!(
        git(&f.repo, &["branch", "--list", "mozart/*"])
            .lines()
            .count(),
        1
    );

    // A tree removed after its work was committed (a delivered task whose completion a
    // crash kept from the checkpoint): its branch is checked out again at the same place,
    // with the work, instead of a `-2` twin.
    let wt_path = wt.path.to_str().unwrap().to_string();
    std::fs::write(wt.path.join("work.txt"), "work").unwrap();
    git(&wt.path, &["add", "work.txt"]);
    git(&wt.path, &["commit", "-q", "-m", "work"]);
    git(&f.repo, &["worktree", "unlock", &wt_path]);
    git(&f.repo, &["worktree", "remove", "--force", &wt_path]);
    let mut third = request(&f, &cfg, "job").resuming(Some(&intent.path));
    third.recorded = Some(Recorded {
        intent,
        creating: false,
    });
    let wt3 = worktree(prepare(&third).unwrap());
    assert_eq!((&wt3.path, &wt3.branch), (&first.path, &first.branch));
    assert_eq!(
        std::fs::read_to_string(wt3.path.join("work.txt")).unwrap(),
        "work"
    );
    assert!(wt3.locked);
    assert_eq!(
        git(
            &f.repo,
            &["rev-list", "--count", &format!("main..{}", first.branch)]
        ),
        "1"
    );
}

#[test]
fn a_failing_setup_command_leaves_nothing_behind() {
    let f = fixture();
    let cfg = enabled();
    let setup = WorktreeSetup {
        commands: vec!["echo broken dependency >&2; exit 3".into()],
        ..WorktreeSetup::default()
    };
    let err = prepare(&request(&f, &cfg, "job").with_setup(setup)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("exited with status 3") && text.contains("broken dependency"),
        "{text}"
    );
    assert_eq!(list_worktrees(&f.repo).unwrap().len(), 1);
    assert!(!f.workspace.join(".worktrees/job").exists());
    assert!(git(&f.repo, &["branch", "--list", "mozart/*"]).is_empty());
}

#[test]
fn a_hanging_setup_command_is_killed_at_its_limit() {
    let f = fixture();
    let cfg = enabled();
    let setup = WorktreeSetup {
        commands: vec!["sleep 30".into()],
        command_timeout: Duration::from_millis(300),
        ..WorktreeSetup::default()
    };
    let started = std::time::Instant::now();
    let err = prepare(&request(&f, &cfg, "job").with_setup(setup)).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn copy_paths_must_stay_inside_the_repository() {
    let f = fixture();
    let cfg = enabled();
    let setup = WorktreeSetup {
        copy_files: vec!["../outside".into()],
        ..WorktreeSetup::default()
    };
    let err = prepare(&request(&f, &cfg, "job").with_setup(setup)).unwrap_err();
    assert!(matches!(err, IsolationError::BadCopyPath { .. }), "{err}");
}

#[test]
fn a_sub_directory_keeps_its_place_inside_the_worktree() {
    let f = fixture();
    let cfg = enabled();
    let mut req = request(&f, &cfg, "job");
    req.repo_dir = f.repo.join("sub");
    let wt = worktree(prepare(&req).unwrap());
    assert_eq!(wt.working_directory(), wt.path.join("sub"));
    assert!(wt.working_directory().join("code.txt").exists());
}

#[test]
fn an_untracked_workspace_inside_the_repository_gets_its_directory_in_the_worktree() {
    let f = fixture();
    let cfg = enabled();
    let ws = f.repo.join("runs/ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut req = request(&f, &cfg, "job");
    req.repo_dir = ws.clone();
    req.workspace = ws.clone();
    let wt = worktree(prepare(&req).unwrap());
    assert_eq!(wt.path, ws.join(".worktrees/job"));
    assert_eq!(wt.working_directory(), wt.path.join("runs/ws"));
    assert!(wt.working_directory().is_dir());
    // The nested worktrees never show up in the main checkout's status.
    assert_eq!(git(&f.repo, &["status", "--porcelain"]), "");
    std::fs::write(ws.join("keep"), "").unwrap();
    let status = git(&f.repo, &["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(status, "?? runs/ws/keep");
}

#[test]
fn source_branch_chooses_the_base_and_a_bad_one_is_named() {
    let f = fixture();
    git(&f.repo, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(f.repo.join("feature.txt"), "f").unwrap();
    git(&f.repo, &["add", "feature.txt"]);
    git(&f.repo, &["commit", "-q", "-m", "feature"]);
    git(&f.repo, &["checkout", "-q", "main"]);

    let cfg = IsolationConfig {
        source_branch: Some("feature".into()),
        ..enabled()
    };
    let wt = worktree(prepare(&request(&f, &cfg, "job")).unwrap());
    assert!(wt.path.join("feature.txt").exists());
    assert_eq!(
        wt.base_commit,
        git(&f.repo, &["rev-parse", "--short", "feature"])
    );

    let bad = IsolationConfig {
        source_branch: Some("no-such-branch".into()),
        ..enabled()
    };
    let err = prepare(&request(&f, &bad, "other")).unwrap_err();
    assert!(matches!(err, IsolationError::BadSourceRef { .. }), "{err}");
    assert!(err.to_string().contains("no-such-branch"));
}

#[test]
fn outside_a_repository_isolation_falls_back_or_fails_as_configured() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = IsolationConfig {
        fallback_on_error: true,
        ..enabled()
    };
    let req = WorktreeRequest {
        job_id: "job",
        scope: WorktreeScope::Job,
        config: &cfg,
        repo_dir: tmp.path().to_path_buf(),
        workspace: tmp.path().to_path_buf(),
        resume_path: None,
        setup: WorktreeSetup::default(),
        branch: None,
        recorded: None,
        journal: None,
    };
    match prepare(&req).unwrap() {
        Isolation::Fallback { reason } => assert!(reason.contains("git repository"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let strict = enabled();
    let err = prepare(&WorktreeRequest {
        config: &strict,
        ..req.clone()
    })
    .unwrap_err();
    assert!(
        matches!(err, IsolationError::NotARepository { .. }),
        "{err}"
    );

    let off = IsolationConfig::default();
    assert_eq!(
        prepare(&WorktreeRequest {
            config: &off,
            ..req.clone()
        })
        .unwrap(),
        Isolation::Disabled
    );
    let bad_id = prepare(&WorktreeRequest {
        job_id: "../escape",
        ..req
    })
    .unwrap_err();
    assert!(matches!(bad_id, IsolationError::InvalidJobId { .. }));
}

#[test]
fn checkpoint_round_trip_rebuilds_the_handle() {
    let f = fixture();
    let cfg = enabled();
    let iso = prepare(&request(&f, &cfg, "job")).unwrap();
    let mut cp = mozart_state::CheckpointState::new("job", "job", 1);
    iso.record(&mut cp);
    assert_eq!(
        cp.isolation_mode,
        Some(mozart_state::checkpoint::IsolationMode::Worktree)
    );
    assert!(cp.worktree_locked);

    let wt = Worktree::from_checkpoint(&cp).unwrap();
    assert_eq!(
        wt.repo_root.canonicalize().unwrap(),
        f.repo.canonicalize().unwrap()
    );
    assert_eq!(
        finish(&wt, RunOutcome::Completed, &cfg).unwrap(),
        Cleanup::Removed
    );
    mozart_jobs::isolation::clear_checkpoint(&mut cp);
    assert_eq!(cp.worktree_path, None);
    assert_eq!(list_worktrees(&f.repo).unwrap().len(), 1);
}

#[test]
fn without_locking_the_worktree_is_never_locked_even_on_reuse() {
    let f = fixture();
    let cfg = IsolationConfig {
        lock_during_execution: false,
        ..enabled()
    };
    let wt = worktree(prepare(&request(&f, &cfg, "job")).unwrap());
    assert!(!wt.locked);
    assert_eq!(lock_of(&f.repo, &wt.path), None);
    let again = worktree(prepare(&request(&f, &cfg, "job").resuming(Some(&wt.path))).unwrap());
    assert!(again.reused && !again.locked);
    assert_eq!(lock_of(&f.repo, &wt.path), None);
}

#[test]
fn finishing_a_worktree_deleted_by_hand_clears_git_bookkeeping() {
    let f = fixture();
    let cfg = enabled();
    let wt = worktree(prepare(&request(&f, &cfg, "job")).unwrap());
    std::fs::remove_dir_all(&wt.path).unwrap();
    assert_eq!(
        finish(&wt, RunOutcome::Failed, &cfg).unwrap(),
        Cleanup::Removed
    );
    assert_eq!(
        list_worktrees(&f.repo).unwrap().len(),
        1,
        "locked metadata pruned too"
    );
}

/// Run by [`a_run_killed_with_sigkill_leaves_a_lock_the_next_run_recovers`] in a child
/// process: prepare the worktree, report its path, then hang until killed.
#[test]
fn crash_child_helper() {
    let (Ok(repo), Ok(ws)) = (
        std::env::var("MOZART_TEST_CRASH_REPO"),
        std::env::var("MOZART_TEST_CRASH_WS"),
    ) else {
        return;
    };
    let cfg = enabled();
    let req = WorktreeRequest {
        job_id: "crashy",
        scope: WorktreeScope::Job,
        config: &cfg,
        repo_dir: repo.into(),
        workspace: ws.into(),
        resume_path: None,
        setup: WorktreeSetup::default(),
        branch: None,
        recorded: None,
        journal: None,
    };
    let wt = worktree(prepare(&req).unwrap());
    println!("WORKTREE={}", wt.path.display());
    std::thread::sleep(Duration::from_secs(30));
}

#[test]
fn a_run_killed_with_sigkill_leaves_a_lock_the_next_run_recovers() {
    use std::io::BufRead;
    let f = fixture();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MOZART_TEST_CRASH_REPO", &f.repo)
        .env("MOZART_TEST_CRASH_WS", &f.workspace)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let path = stdout
        .lines()
        .map(|l| l.unwrap())
        // libtest prints `test name ... ` before the test's own output, on the same line.
        .find_map(|l| l.split_once("WORKTREE=").map(|(_, p)| PathBuf::from(p)))
        .unwrap();
    let reason = lock_of(&f.repo, &path).unwrap();
    assert!(reason.contains(&format!("pid={}", child.id())), "{reason}");
    // A live owner is respected...
    let cfg = enabled();
    let busy = prepare(&request(&f, &cfg, "crashy").resuming(Some(&path))).unwrap_err();
    assert!(matches!(busy, IsolationError::Busy { .. }), "{busy}");

    child.kill().unwrap(); // SIGKILL: no cleanup runs
    child.wait().unwrap();
    assert!(
        lock_of(&f.repo, &path).is_some(),
        "the crash left its lock behind"
    );

    // ...and a dead one's lock is taken over by the next run.
    let wt = worktree(prepare(&request(&f, &cfg, "crashy").resuming(Some(&path))).unwrap());
    assert!(wt.reused);
    assert_eq!(wt.path, path);
    let reason = lock_of(&f.repo, &path).unwrap();
    assert!(
        reason.contains(&format!("pid={}", std::process::id())),
        "{reason}"
    );
    assert_eq!(
        finish(&wt, RunOutcome::Completed, &cfg).unwrap(),
        Cleanup::Removed
    );
    assert_eq!(list_worktrees(&f.repo).unwrap().len(), 1);
}
