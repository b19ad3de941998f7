//! The maintained `scores/mochi.yaml` end to end (issue #14): a git project with a 3-task
//! `scores/PRD.md`, one worktree and branch per task, a worker and a reviewer played by the stand-in
//! CLI (routed by prompt, so the parallel tasks each follow their own script), one reviewer
//! `RETRY` whose feedback must reach the worker's next iteration through FEEDBACK.md, and the
//! `pr` dispatch pushing to a local bare repository and calling a stand-in `gh`.

use crate::harness;

use std::path::{Path, PathBuf};

use harness::*;
use mozart_tests::mochi::{
    check_outcome, gh_script, gh_script_killing, write_gh, Project, FEEDBACK, REVIEWER_PROMPT,
    TASKS,
};
use mozart_tests::{git, TestEnv};
use serde_json::{json, Value};

/// The project, its score played by `claude_cli` (which passes the stand-in its script).
fn project(env: &TestEnv) -> Project {
    mozart_tests::mochi::project(env, |score| {
        score.replace("instrument: claude-code", "instrument: claude_cli")
    })
}

fn commit_step(slug: &str, extra: &str) -> Value {
    json!({
        "run": format!("{extra}echo {slug} >> work.txt && git add work.txt && git -c user.name=w -c user.email=w@example.com commit -qm 'work on {slug}'"),
        "result": format!("I worked on {slug}"),
    })
}

/// Reviewer routes first (their prompt also quotes the task); task 2 needs one RETRY, and
/// its second worker iteration only succeeds if the feedback is in FEEDBACK.md.
fn script(slow_second_iteration: f64) -> Value {
    let mut routes = Vec::new();
    for (i, (task, _)) in TASKS.iter().enumerate() {
        let verdicts = if i == 1 {
            json!([{"result": format!("RETRY: {FEEDBACK}")}, {"result": "Looks right now.\nDONE"}])
        } else {
            json!([{"result": "DONE"}])
        };
        routes.push(json!({"contains": [REVIEWER_PROMPT, task], "steps": verdicts}));
    }
    for (i, (task, slug)) in TASKS.iter().enumerate() {
        let mut steps = vec![commit_step(slug, "")];
        if i == 1 {
            let mut second = commit_step(slug, &format!("grep -q '{FEEDBACK}' FEEDBACK.md && "));
            second["sleep"] = json!(slow_second_iteration);
            steps.push(second);
        }
        routes.push(json!({"contains": [task], "steps": steps}));
    }
    json!({ "routes": routes })
}

#[test]
fn three_tasks_one_retry_three_pull_requests() {
    let env = TestEnv::new();
    let p = project(&env);
    let script = standin_script(&env, "mochi", &script(0.0));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    check_outcome(&env, &p, &doc);
    // The human view shows the loop too.
    let text = mozart_tests::stdout(&env.mozart(&["status", "mochi"]));
    assert!(text.contains("review 2: DONE"), "{text}");
}

/// `kill -9` of the conductor while task 2's second worker iteration runs: the restarted
/// conductor resumes the loop at iteration 2 with the same feedback, in the same worktree.
#[test]
fn kill_9_mid_loop_resumes_at_the_same_iteration() {
    let env = TestEnv::new();
    let p = project(&env);
    let script = standin_script(&env, "mochi", &script(4.0));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    // Task 2's RETRY is checkpointed and its second worker run has started.
    wait_status(&env, "mochi", 60.0, |d| {
        sheet(d, 2)["review"]["iteration"] == 1
    });
    let claims = PathBuf::from(format!("{}.route4.claim.1", script.display()));
    poll(&env, 30.0, "the second worker iteration", || {
        claims.exists().then_some(())
    });
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    let history = sheet(&doc, 2)["review"]["history"].clone();
    assert_eq!(
        history,
        json!([
            {"iteration": 1, "verdict": "RETRY", "feedback": "add a test for the flag"},
            {"iteration": 2, "verdict": "DONE", "feedback": ""}
        ]),
        "{doc:#}\n{}",
        env.log()
    );
    assert_eq!(doc["status"], "completed", "{doc:#}");
    // The same worktree and branch were reused (the manifest), not a `-2` twin.
    let branches = git(&p.repo, &["branch", "--list", "mochi/*"]);
    assert_eq!(branches.lines().count(), 3, "{branches}");
    let ahead = git(
        &p.repo,
        &["rev-list", "--count", "main..mochi/add-a-verbose-flag"],
    );
    assert!(ahead == "2" || ahead == "3", "{ahead}");
}

/// `kill -9` of the conductor in the middle of a task's `pr` dispatch (the pull request is
/// opened, the conductor dies before it hears so): the restarted conductor neither runs the
/// worker nor asks the reviewer again, finds the open pull request instead of opening a
/// second one, and the job ends with three pull requests and no `-2` branch.
#[test]
fn kill_9_during_the_dispatch_opens_one_pull_request() {
    let env = TestEnv::new();
    let p = project(&env);
    write_gh(
        &env,
        &gh_script_killing(&p.gh_log, Some("mochi/add-a-verbose-flag")),
    );
    let script = standin_script(&env, "mochi", &script(0.0));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    let pid = env.conductor_pid().expect("conductor pid");
    run(&env, &p.score, &[]);
    let killed = PathBuf::from(format!("{}.killed", p.gh_log.display()));
    poll(&env, 60.0, "the dispatch of task 1", || {
        killed.exists().then_some(())
    });
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    check_outcome(&env, &p, &doc);
    let prs = std::fs::read_to_string(&p.gh_log).unwrap();
    assert!(
        prs.contains("pr list --head mochi/add-a-verbose-flag"),
        "{prs}"
    );
    // Task 1's reviewer (route 0) and worker (route 3) ran once.
    for route in [0, 3] {
        let again = PathBuf::from(format!("{}.route{route}.claim.2", script.display()));
        assert!(!again.exists(), "route {route} ran again after the restart");
    }
    let branches = git(&p.repo, &["branch", "--list", "mochi/*"]);
    assert_eq!(branches.lines().count(), 3, "{branches}");
}

/// The other dispatch modes: a research report (final output + memory files) and the raw
/// output as a file, one per task in the workspace's `output/`.
#[test]
fn research_report_and_file_dispatch() {
    for (mode, check) in [
        ("research-report", "## Progress (PROGRESS.md)"),
        ("file", "I worked on"),
    ] {
        let env = TestEnv::new();
        let p = project(&env);
        let text = std::fs::read_to_string(&p.score)
            .unwrap()
            .replace("dispatch: pr ", &format!("dispatch: {mode} "));
        std::fs::write(&p.score, text).unwrap();
        let script = standin_script(&env, "mochi", &script(0.0));
        start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
        run(&env, &p.score, &[]);
        let doc = wait_terminal(&env, "mochi", 90.0);
        assert_eq!(doc["status"], "completed", "{mode}: {doc:#}");
        for (_, slug) in TASKS {
            let path = p.repo.join(format!(".mochi-workspace/output/{slug}.md"));
            let body = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(body.contains(check), "{mode}: {}: {body}", path.display());
            assert!(
                body.contains(&format!("I worked on {slug}")),
                "{mode}: {body}"
            );
        }
        assert!(!p.gh_log.exists(), "{mode}: no pull request");
    }
}

/// A pull request that cannot be opened fails the sheet like a failed hook, with the
/// command's message; the work stays on the branch.
#[test]
fn a_failed_dispatch_keeps_the_work_on_the_branch() {
    let env = TestEnv::new();
    let p = project(&env);
    std::fs::write(
        env.bin.join("gh"),
        "#!/bin/sh
echo 'GraphQL: Resource not accessible by integration' >&2
exit 1
",
    )
    .unwrap();
    let script = standin_script(&env, "mochi", &script(0.0));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let message = sheet(&doc, 1)["error_message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        message.contains("dispatch pr failed (hook)")
            && message.contains("Resource not accessible")
            && message.contains("the work stays on branch mochi/fix-the-bug-in-auth-go"),
        "{doc:#}"
    );
    assert_eq!(
        git(
            &p.repo,
            &["rev-list", "--count", "main..mochi/fix-the-bug-in-auth-go"]
        ),
        "1"
    );

    // Once `gh` works again, `mozart resume` redoes only the dispatch: no agent runs again.
    let working = gh_script(&p.gh_log);
    std::fs::write(env.bin.join("gh"), working).unwrap();
    let out = env.mozart(&["resume", "mochi"]);
    assert_eq!(out.status.code(), Some(0), "{}", mozart_tests::stdout(&out));
    let doc = wait_status(&env, "mochi", 60.0, |d| d["status"] == "completed");
    let prs = std::fs::read_to_string(&p.gh_log).unwrap();
    assert_eq!(
        prs.lines().filter(|l| l.starts_with("pr create")).count(),
        3,
        "{prs}"
    );
    for n in 1..=3 {
        assert_eq!(
            sheet(&doc, n)["review"]["iteration"],
            if n == 2 { 2 } else { 1 },
            "{doc:#}"
        );
    }
    for route in 0..6 {
        let again = PathBuf::from(format!(
            "{}.route{route}.claim.{}",
            script.display(),
            if route == 1 || route == 4 { 2 } else { 1 }
        ));
        assert!(!again.exists(), "route {route} ran again after resume");
    }
}

/// `mozart run` that must fail: its output.
fn run_refused(env: &TestEnv, score: &Path) -> String {
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{text}");
    text
}

/// `dispatch: pr` into a repository without the remote is refused before any agent runs.
#[test]
fn a_missing_remote_is_refused_up_front() {
    let env = TestEnv::new();
    let p = project(&env);
    git(&p.repo, &["remote", "remove", "origin"]);
    start_with_env(&env, &[]);
    let text = run_refused(&env, &p.score);
    assert!(text.contains("has no remote 'origin'"), "{text}");
}

/// A score whose tracked files have uncommitted changes is refused before any agent runs.
#[test]
fn dirty_checkout_is_refused_up_front() {
    let env = TestEnv::new();
    let p = project(&env);
    std::fs::write(p.repo.join("README.md"), "changed\n").unwrap();
    let script = standin_script(&env, "mochi", &script(0.0));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    let text = run_refused(&env, &p.score);
    assert!(text.contains("uncommitted changes"), "{text}");
    assert!(text.contains("README.md"), "{text}");
    assert!(
        !PathBuf::from(format!("{}.count", script.display())).exists()
            && !PathBuf::from(format!("{}.route3.claim.0", script.display())).exists(),
        "no agent ran"
    );
}

/// `mozart validate --json` of a score `run` must refuse: exit 1 and a V219 error; its cause
/// (the message after "would refuse the score: ") and its fix (the suggestion).
fn validate_refuses(env: &TestEnv, score: &Path) -> (String, String) {
    let out = env.mozart(&["validate", "--json", score.to_str().unwrap()]);
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", mozart_tests::stdout(&out)));
    assert_eq!(out.status.code(), Some(1), "{doc:#}");
    let issue = doc["issues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["check_id"] == "V219")
        .unwrap_or_else(|| panic!("no V219: {doc:#}"));
    assert_eq!(issue["severity"], "error", "{issue:#}");
    let message = issue["message"].as_str().unwrap();
    let (_, cause) = message
        .split_once("mozart run would refuse the score: ")
        .unwrap_or_else(|| panic!("{message}"));
    let fix = issue["suggestion"].as_str().unwrap();
    (cause.to_string(), fix.to_string())
}

/// Validate refuses `score` (cause containing `expect`), and `run` refuses it with the same
/// cause and fix.
fn both_refuse(env: &TestEnv, score: &Path, expect: &str) {
    let (cause, fix) = validate_refuses(env, score);
    assert!(cause.contains(expect), "{cause}");
    let text = run_refused(env, score);
    assert!(
        text.contains(&format!("Cannot isolate the job's sheets: {cause}. {fix}")),
        "validate said: {cause} / {fix}\nrun said: {text}"
    );
}

/// Every refusal of `mozart run` for a task list's worktrees (a dirty checkout, a
/// repository without a commit or outside git, a missing `source_branch`, a missing remote)
/// was passed by `mozart validate` (exit 0) but for the last: each is now its V219 error
/// (exit 1) with the cause and the fix `run`'s refusal gives, word for word; the clean
/// project passes both.
#[test]
fn validate_reports_each_refusal_of_run_in_its_words() {
    let env = TestEnv::new();
    let p = project(&env);
    start_with_env(&env, &[]);
    let score = std::fs::read_to_string(&p.score).unwrap();
    let clean = || {
        let out = env.mozart(&["validate", p.score.to_str().unwrap()]);
        let text = mozart_tests::stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(!text.contains("V219"), "{text}");
    };
    clean();

    std::fs::write(p.repo.join("README.md"), "changed\n").unwrap();
    both_refuse(&env, &p.score, "has uncommitted changes (M README.md)");
    git(&p.repo, &["checkout", "README.md"]);

    let with_branch = score.replace(
        "  scope: sheet",
        "  scope: sheet\n  source_branch: no-such-branch",
    );
    assert_ne!(with_branch, score);
    std::fs::write(&p.score, with_branch).unwrap();
    both_refuse(
        &env,
        &p.score,
        "isolation.source_branch 'no-such-branch' does not name a commit",
    );
    std::fs::write(&p.score, &score).unwrap();

    git(&p.repo, &["remote", "remove", "origin"]);
    both_refuse(&env, &p.score, "has no remote 'origin'");
    git(
        &p.repo,
        &["remote", "add", "origin", p.remote.to_str().unwrap()],
    );

    let empty = env.work.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let elsewhere = score.replace(
        "repository: ..",
        &format!("repository: {}", empty.display()),
    );
    assert_ne!(elsewhere, score);
    std::fs::write(&p.score, &elsewhere).unwrap();
    both_refuse(&env, &p.score, "is not inside a git repository");
    git(&empty, &["init", "-q", "."]);
    both_refuse(
        &env,
        &p.score,
        "has no commit for the worktrees to start from",
    );
    std::fs::write(&p.score, &score).unwrap();

    clean();
    run(&env, &p.score, &[]);
}

/// `gh` is looked for where the conductor runs it: on this shell's PATH it is there, so
/// validate passed; the conductor's PATH lacks it, so `run` refused the score. Validate now
/// reads the running conductor's PATH and fails the score as `run` refuses it.
#[test]
fn validate_looks_for_gh_on_the_conductors_path() {
    let env = TestEnv::new();
    let p = project(&env);
    let out = env.mozart(&["validate", p.score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", mozart_tests::stdout(&out));
    // The conductor runs with git and nothing else on its PATH.
    let only_git = env.root().join("only-git");
    std::fs::create_dir_all(&only_git).unwrap();
    let git_bin = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("git"))
        .find(|g| g.is_file())
        .expect("git on PATH");
    std::os::unix::fs::symlink(git_bin, only_git.join("git")).unwrap();
    let out = env
        .command(&["start"])
        .env("PATH", &only_git)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        mozart_tests::stdout(&out),
        env.log()
    );
    both_refuse(
        &env,
        &p.score,
        "the GitHub CLI `gh` is not on the conductor's PATH",
    );
}

/// A rate limit on the reviewer is tempo, not failure: the sheet waits (no iteration spent),
/// and when the limit is lifted the reviewer is asked again without re-running the worker.
#[test]
fn a_rate_limited_reviewer_waits_and_the_worker_is_not_run_again() {
    let env = TestEnv::new();
    let p = project(&env);
    let mut routes = script(0.0);
    routes["routes"][0]["steps"] = json!([
        {"scenario": "limit-legacy", "reset_in": 2},
        {"result": "DONE"}
    ]);
    let script = standin_script(&env, "mochi", &routes);
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let remaining = || {
        env.raw_call("daemon.rate_limits", json!({}))["result"]["backends"]["claude_cli"]
            ["seconds_remaining"]
            .as_f64()
    };
    poll(&env, 30.0, "the reviewer's rate limit", remaining);
    let doc = status(&env, "mochi");
    assert_ne!(doc["status"], "failed", "{doc:#}");
    assert!(
        sheet(&doc, 1)["review"].is_null(),
        "no verdict yet: {doc:#}"
    );
    env.raw_call(
        "daemon.clear_rate_limits",
        json!({"instrument": "claude_cli"}),
    );
    let doc = wait_terminal(&env, "mochi", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert_eq!(sheet(&doc, 1)["review"]["iteration"], 1, "{doc:#}");
    let claim = |route: u32, n: u32| {
        PathBuf::from(format!("{}.route{route}.claim.{n}", script.display())).exists()
    };
    assert!(claim(0, 1), "the reviewer was asked again");
    assert!(claim(3, 0) && !claim(3, 1), "the worker of task 1 ran once");
}

/// A reviewer that never says DONE: the sheet fails after `max_iterations` with the last
/// feedback in `mozart errors`; its worktree and branch stay for inspection, the other tasks
/// are dispatched.
#[test]
fn max_iterations_fail_the_sheet_with_the_last_feedback() {
    let env = TestEnv::new();
    let p = project(&env);
    let mut routes = script(0.0);
    routes["routes"][0]["steps"] = json!([
        {"result": "RETRY: first remark"},
        {"result": "RETRY: second remark"},
        {"result": "I cannot tell."},
        {"result": "DONE"}
    ]);
    let script = standin_script(&env, "mochi", &routes);
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let s1 = sheet(&doc, 1);
    assert_eq!(s1["status"], "failed", "{s1:#}");
    assert_eq!(s1["review"]["iteration"], 3, "{s1:#}");
    // An ambiguous answer is a RETRY with the raw answer as feedback.
    assert_eq!(s1["review"]["history"][2]["feedback"], "I cannot tell.");
    let out = env.mozart(&["errors", "mochi", "--json"]);
    let text = mozart_tests::stdout(&out);
    assert!(
        text.contains("reviewer loop: no DONE after 3 iterations; the work stays on branch mochi/fix-the-bug-in-auth-go; `mozart resume mochi` gives it 3 more iterations (review.max_iterations); last feedback: I cannot tell."),
        "{text}"
    );
    for n in [2, 3] {
        assert_eq!(sheet(&doc, n)["status"], "completed", "{doc:#}");
    }
    // The failed task's work stays: its branch has the three iterations' commits, its
    // worktree is kept (unlocked) and still listed in the manifest.
    let ahead = git(
        &p.repo,
        &["rev-list", "--count", "main..mochi/fix-the-bug-in-auth-go"],
    );
    assert_eq!(ahead, "3");
    let manifest = p
        .repo
        .join(".mochi-workspace/.worktrees/mochi.manifest.json");
    let m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(m["sheets"]["1"]["status"], "kept", "{m:#}");
    let kept = m["sheets"]["1"]["path"].as_str().unwrap();
    assert!(Path::new(kept).join("FEEDBACK.md").exists());
    let list = git(&p.repo, &["worktree", "list", "--porcelain"]);
    assert!(
        !list.contains("locked"),
        "a failed run's worktree is unlocked: {list}"
    );

    // `mozart resume` gives the loop a fresh budget, in the same worktree and branch.
    let out = env.mozart(&["resume", "mochi"]);
    assert_eq!(out.status.code(), Some(0), "{}", mozart_tests::stdout(&out));
    let doc = wait_status(&env, "mochi", 60.0, |d| d["status"] == "completed");
    let s1 = sheet(&doc, 1);
    assert_eq!(s1["review"]["iteration"], 4, "{s1:#}");
    assert_eq!(s1["review"]["verdict"], "DONE", "{s1:#}");
    let ahead = git(
        &p.repo,
        &["rev-list", "--count", "main..mochi/fix-the-bug-in-auth-go"],
    );
    assert_eq!(ahead, "4");
    let branches = git(&p.repo, &["branch", "--list", "mochi/*"]);
    assert_eq!(branches.lines().count(), 3, "{branches}");
}

/// `review:` without tasks or worktrees: every sheet is reviewed in the shared workspace, and
/// each keeps its memory files in a directory of its own.
#[test]
fn review_without_tasks_keeps_memory_per_sheet() {
    let env = TestEnv::new();
    let score = env.write_score(
        "plain.yaml",
        "name: plain\nworkspace: ./plain-ws\ninstrument: claude_cli\nsheet: {size: 1, total_items: 2}\nreview: {max_iterations: 2}\nretry: {base_delay_seconds: 0.1}\npause_between_sheets_seconds: 0\nprompt: {template: \"Write part {{ sheet_num }}\"}\n",
    );
    let script = standin_script(
        &env,
        "plain",
        &json!({"routes": [
            {"contains": ["You review the work", "sheet 1 of plain"], "steps": [{"result": "RETRY: shorter"}, {"result": "DONE"}]},
            {"contains": ["You review the work"], "steps": [{"result": "DONE"}]},
            {"contains": ["Write part 1"], "steps": [{"result": "long part one"}, {"run": "grep -q shorter ../plain-ws/.mozart-review/sheet-1/FEEDBACK.md || grep -q shorter .mozart-review/sheet-1/FEEDBACK.md", "result": "part one"}]},
            {"contains": ["Write part 2"], "steps": [{"result": "part two"}]}
        ]}),
    );
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "plain", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert_eq!(sheet(&doc, 1)["review"]["iteration"], 2, "{doc:#}");
    assert_eq!(sheet(&doc, 2)["review"]["iteration"], 1, "{doc:#}");
    let ws = env.work.join("plain-ws/.mozart-review");
    let memory = std::fs::read_to_string(ws.join("sheet-1/MEMORY.md")).unwrap();
    assert!(memory.contains("part one"), "{memory}");
    assert!(ws.join("sheet-2/PROGRESS.md").exists());
}

/// A reviewer that cannot run at all (an unknown instrument) is refused with the submission,
/// naming its field, before the worker spends anything (its sheet used to fail only after
/// the worker's attempt).
#[test]
fn an_unknown_reviewer_instrument_is_refused_with_the_submission() {
    let env = TestEnv::new();
    let score = env.write_score(
        "broken.yaml",
        "name: broken\nworkspace: ./broken-ws\ninstrument: claude_cli\nsheet: {size: 1, total_items: 1}\nreview: {instrument: no-such-reviewer}\nretry: {base_delay_seconds: 0.1, max_retries: 3}\nprompt: {template: \"Write it\"}\n",
    );
    let script = standin_script(&env, "broken", &json!([{"result": "written"}]));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        mozart_tests::stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("review.instrument: no-such-reviewer"),
        "{text}"
    );
    assert!(
        !std::path::Path::new(&format!("{}.count", script.display())).exists(),
        "the worker ran"
    );
}
