//! Issue 23, "MOCHI details": what the worker + reviewer loop says agrees with what it does.
//! A taken branch name gets `-2`, and the prompt, the validations, the pull request and
//! `mozart run --dry-run` all name that branch; PROGRESS.md records the task's outcome; the
//! reviewer sees the worker's stdout, stderr and changed files; an exhausted loop and a failed
//! dispatch have their own E-codes and say what to do; the shared-worktree warning appears
//! only when a worktree is shared. Real git repositories in temp dirs, the stand-in CLI.

use crate::harness;

use std::path::PathBuf;

use harness::*;
use mozart_tests::mochi::{Project, REVIEWER_PROMPT, TASKS};
use mozart_tests::{git, stdout, TestEnv};
use serde_json::{json, Value};

/// The project with the maintained score played by `claude_cli`, changed by `edit`.
fn project(env: &TestEnv, edit: impl FnOnce(String) -> String) -> Project {
    mozart_tests::mochi::project(env, |score| {
        edit(score.replace("instrument: claude-code", "instrument: claude_cli"))
    })
}

fn commit_step(slug: &str) -> Value {
    json!({
        "run": format!("echo {slug} >> work.txt && git add work.txt && git -c user.name=w -c user.email=w@example.com commit -qm 'work on {slug}'"),
        "result": format!("I worked on {slug}"),
    })
}

/// Reviewer routes (first: their prompt also quotes the task) answering `DONE`, then one
/// committing worker route per task.
fn routes() -> Vec<Value> {
    let mut routes = Vec::new();
    for (task, _) in TASKS {
        routes.push(json!({"contains": [REVIEWER_PROMPT, task], "steps": [{"result": "DONE"}]}));
    }
    for (task, slug) in TASKS {
        routes.push(json!({"contains": [task], "steps": [commit_step(slug)]}));
    }
    routes
}

fn text_of(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// The manifest entry of `sheet`.
fn manifest_entry(p: &Project, sheet: u32) -> Value {
    let path = p
        .repo
        .join(".mochi-workspace/.worktrees/mochi.manifest.json");
    let m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["sheets"][sheet.to_string()].clone()
}

/// Task 1's branch is taken: its worktree gets `mochi/…-2`, and the prompt's `{{ task_branch
/// }}` (which `scores/mochi.yaml` tells the agent), a validation's `{task_branch}` and the pull
/// request all name that branch, not the taken one.
#[test]
fn a_taken_branch_gets_dash_2_everywhere() {
    let env = TestEnv::new();
    let p = project(&env, |score| {
        score.replace(
            "pause_between_sheets_seconds: 0",
            "pause_between_sheets_seconds: 0\nvalidations:\n  - type: command_succeeds\n    command: \"git log -1 --format=%s {task_branch} | grep -q 'work on'\"",
        )
    });
    let taken = "mochi/fix-the-bug-in-auth-go";
    let real = format!("{taken}-2");
    git(&p.repo, &["branch", taken]);
    let mut routes = routes();
    // Task 1's worker only works when its prompt names the real branch.
    routes.insert(
        3,
        json!({"contains": [TASKS[0].0, format!("{real}. Other tasks")], "steps": [commit_step(TASKS[0].1)]}),
    );
    routes[4] = json!({"contains": [TASKS[0].0], "steps": [{"result": "the prompt names a branch this worktree is not on", "exit": 1}]});
    let script = standin_script(&env, "mochi", &json!({ "routes": routes }));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert_eq!(
        git(&p.repo, &["rev-list", "--count", &format!("main..{real}")]),
        "1"
    );
    assert_eq!(
        git(&p.repo, &["rev-list", "--count", &format!("main..{taken}")]),
        "0",
        "the taken branch is left alone"
    );
    let prs = std::fs::read_to_string(&p.gh_log).unwrap();
    assert!(prs.contains(&format!("--head {real} --base main")), "{prs}");
    assert_eq!(sheet(&doc, 1)["review"]["branch"], real.as_str(), "{doc:#}");
}

/// `mozart run --dry-run` and `mozart validate` show the branch each task will really use:
/// `-2` for a taken name, in the table, the JSON and the prompt preview.
#[test]
fn dry_run_shows_the_branch_a_task_will_really_get() {
    let env = TestEnv::new();
    let p = project(&env, |s| s);
    let taken = "mochi/add-a-verbose-flag";
    git(&p.repo, &["branch", taken]);
    let score = p.score.to_str().unwrap();

    let out = env.mozart(&["run", "--dry-run", "--json", score]);
    assert_eq!(out.status.code(), Some(0), "{}", text_of(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let tasks = doc["tasks"].as_array().unwrap();
    assert_eq!(
        tasks[0]["branch"], "mochi/fix-the-bug-in-auth-go",
        "{doc:#}"
    );
    assert_eq!(tasks[1]["branch"], "mochi/add-a-verbose-flag-2", "{doc:#}");
    assert_eq!(tasks[1]["requested_branch"], taken, "{doc:#}");
    assert_eq!(
        doc["worktrees"][1]["branch"], "mochi/add-a-verbose-flag-2",
        "{doc:#}"
    );
    assert_eq!(doc["worktrees"][1]["reused"], false, "{doc:#}");

    for args in [vec!["run", "--dry-run", score], vec!["validate", score]] {
        let out = env.mozart(&args);
        let text = text_of(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {text}");
        for needle in [
            "mochi/add-a-verbose-flag-2",
            "task 2: mochi/add-a-verbose-flag is taken (a branch or worktree of that name exists): it gets mochi/add-a-verbose-flag-2",
        ] {
            assert!(text.contains(needle), "{args:?}: missing {needle:?} in\n{text}");
        }
    }
    // Sheet 1's prompt preview names its real branch (not taken here).
    let text = text_of(&env.mozart(&["validate", score]));
    assert!(
        text.contains("mochi/fix-the-bug-in-auth-go. Other tasks"),
        "{text}"
    );
    // Nothing was created.
    assert_eq!(
        git(&p.repo, &["branch", "--list", "mochi/*"])
            .lines()
            .count(),
        1
    );
}

/// A per-sheet score without tasks: the dry run lists each sheet's branch, `-2` when taken.
#[test]
fn dry_run_lists_each_sheets_worktree_branch() {
    let env = TestEnv::new();
    let repo = env.work.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main", "."]);
    std::fs::write(repo.join("README.md"), "x\n").unwrap();
    git(&repo, &["add", "README.md"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    git(&repo, &["branch", "mozart/split-sheet-2"]);
    std::fs::write(
        repo.join("split.yaml"),
        "name: split\nworkspace: ./ws\nsheet: {size: 1, total_items: 3}\nisolation: {enabled: true, scope: sheet}\nparallel: {enabled: true}\nprompt: {template: \"part {{ sheet_num }}\"}\n",
    )
    .unwrap();
    let score = repo.join("split.yaml");
    let out = env.mozart(&["run", "--dry-run", score.to_str().unwrap()]);
    let text = text_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for needle in [
        "Sheet 1: mozart/split-sheet-1",
        "Sheet 2: mozart/split-sheet-2-2",
        "Sheet 3: mozart/split-sheet-3",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

/// PROGRESS.md ends with the task's outcome: `done` in the research report of a task the
/// reviewer accepted, `failed` (with the last verdict, and FEEDBACK.md with the last
/// feedback) in the kept worktree of a task whose loop ran out of iterations.
#[test]
fn progress_records_the_final_outcome() {
    let env = TestEnv::new();
    let p = project(&env, |score| {
        score
            .replace("dispatch: pr ", "dispatch: research-report ")
            .replace("max_iterations: 3", "max_iterations: 2")
    });
    let mut routes = routes();
    routes[0]["steps"] = json!([{"result": "RETRY: still wrong"}]);
    let script = standin_script(&env, "mochi", &json!({ "routes": routes }));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    assert_eq!(doc["status"], "failed", "{doc:#}\n{}", env.log());

    let report = std::fs::read_to_string(
        p.repo
            .join(format!(".mochi-workspace/output/{}.md", TASKS[1].1)),
    )
    .unwrap();
    assert!(
        report.contains("Status: done (the reviewer answered DONE after iteration 1"),
        "{report}"
    );
    assert!(report.contains("- iteration 1: DONE"), "{report}");
    assert!(!report.contains("in-progress"), "{report}");

    let kept = PathBuf::from(manifest_entry(&p, 1)["path"].as_str().unwrap());
    let progress = std::fs::read_to_string(kept.join("PROGRESS.md")).unwrap();
    assert!(
        progress.contains("Status: failed (no DONE after 2 iterations"),
        "{progress}"
    );
    assert!(
        progress.contains("- iteration 2: RETRY still wrong"),
        "{progress}"
    );
    let feedback = std::fs::read_to_string(kept.join("FEEDBACK.md")).unwrap();
    assert!(feedback.contains("(after iteration 2)"), "{feedback}");
}

/// The reviewer is shown what it needs to judge: what the worker printed on stdout and on
/// stderr, and the files it changed, committed or not (Mozart's own memory files left out).
/// The reviewer here says `DONE` only when all of it is in its prompt.
#[test]
fn the_reviewer_sees_stdout_stderr_and_the_changed_files() {
    let env = TestEnv::new();
    let p = project(&env, |score| {
        score.replace("max_iterations: 3", "max_iterations: 1")
    });
    let mut routes = routes();
    routes[0] = json!({
        "contains": [REVIEWER_PROMPT, TASKS[0].0, "warning: auth.go:3: unused variable",
            "printed on stdout", "A\tauth.go", "?? notes.txt"],
        "steps": [{"result": "DONE"}]
    });
    routes.insert(
        1,
        json!({"contains": [REVIEWER_PROMPT, TASKS[0].0], "steps": [{"result": "RETRY: I cannot see what the agent did"}]}),
    );
    // Task 1's worker commits auth.go, leaves notes.txt uncommitted, warns on stderr.
    let worker = routes
        .iter()
        .position(|r| r["contains"] == json!([TASKS[0].0]))
        .unwrap();
    routes[worker]["steps"] = json!([{
        "run": "echo package auth > auth.go && git add auth.go && git -c user.name=w -c user.email=w@example.com commit -qm auth && echo later > notes.txt",
        "stdout": "printed on stdout\n",
        "stderr": "warning: auth.go:3: unused variable\n",
        "result": "I wrote auth.go",
    }]);
    let script = standin_script(&env, "mochi", &json!({ "routes": routes }));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    assert_eq!(
        sheet(&doc, 1)["review"]["verdict"],
        "DONE",
        "the reviewer's prompt lacked the worker's stderr, stdout or changes: {doc:#}\n{}",
        env.log()
    );
    assert_eq!(doc["status"], "completed", "{doc:#}");
}

/// An exhausted loop (E701) and a failed dispatch (E702) are classified errors of their own,
/// not the generic E999, and their messages say where the work is and what to do.
#[test]
fn an_exhausted_loop_and_a_failed_dispatch_have_their_own_codes() {
    let env = TestEnv::new();
    let p = project(&env, |score| {
        score.replace("max_iterations: 3", "max_iterations: 1")
    });
    mozart_tests::mochi::write_gh(
        &env,
        "#!/bin/sh\necho 'HTTP 401: Bad credentials (gh auth login)' >&2\nexit 1\n",
    );
    let mut routes = routes();
    routes[0]["steps"] = json!([{"result": "RETRY: the fix is missing"}]);
    let script = standin_script(&env, "mochi", &json!({ "routes": routes }));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let out = env.mozart(&["errors", "mochi", "--json"]);
    let errors: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let list = errors["errors"].as_array().expect("an error list");
    let of = |n: u64| -> &Value {
        list.iter()
            .rev()
            .find(|e| e["sheet_num"] == n)
            .unwrap_or_else(|| panic!("no error of sheet {n}: {errors:#}"))
    };
    let e1 = of(1);
    assert_eq!(e1["error_code"], "E701", "{errors:#}");
    let m1 = e1["error_message"].as_str().unwrap();
    for needle in [
        "reviewer loop: no DONE after 1 iteration;",
        "the work stays on branch mochi/fix-the-bug-in-auth-go",
        "`mozart resume mochi` gives it 1 more iteration (review.max_iterations)",
        "last feedback: the fix is missing",
    ] {
        assert!(m1.contains(needle), "{needle:?} in {m1}");
    }
    for n in [2, 3] {
        let e = of(n);
        assert_eq!(e["error_code"], "E702", "{errors:#}");
        let m = e["error_message"].as_str().unwrap();
        for needle in [
            "dispatch pr failed (hook):",
            "Bad credentials",
            "the work stays on branch mochi/",
            "fix the cause, then `mozart resume mochi` retries only the dispatch",
        ] {
            assert!(m.contains(needle), "{needle:?} in {m}");
        }
    }
    // The human view shows the codes too.
    let text = stdout(&env.mozart(&["errors", "mochi"]));
    assert!(text.contains("E701") && text.contains("E702"), "{text}");
}

/// "Parallel sheets will share the same worktree" is true of a job-wide worktree only: the
/// maintained score (a worktree per task) does not get it; the same score with one worktree
/// for the job does.
#[test]
fn the_shared_worktree_warning_only_when_it_is_shared() {
    let env = TestEnv::new();
    let p = project(&env, |s| s);
    let warning = "Parallel sheets will share the same worktree";
    let text = text_of(&env.mozart(&["validate", p.score.to_str().unwrap()]));
    assert!(!text.contains(warning), "{text}");
    let shared = p.score.with_file_name("shared.yaml");
    let yaml = std::fs::read_to_string(&p.score)
        .unwrap()
        .replace("scope: sheet ", "scope: job ")
        .replace("dispatch: pr ", "dispatch: none ");
    std::fs::write(&shared, yaml).unwrap();
    let text = text_of(&env.mozart(&["validate", shared.to_str().unwrap()]));
    assert!(text.contains(warning), "{text}");
}
