//! `tasks:` scores without a conductor (issue #14): `mozart validate` and `mozart run
//! --dry-run` show the tasks, slugs, branches and models of a markdown file or a GitHub issue
//! (through a stand-in `gh`), and refuse bad task lists naming the file and line; one
//! outside a git repository is refused by `validate` as `run` refuses it.

use std::path::Path;

use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

const SCORE: &str = "name: tasks\nworkspace: ./ws\ninstrument: claude_cli\nsheet: {size: 1, total_items: 2}\nTASKS\nisolation: {enabled: true, scope: sheet}\nreview: {instrument: claude_cli, model: opus, max_iterations: 2}\nprompt:\n  template: \"{% if movement == 1 %}Do {{ task }} on {{ task_branch }} ({{ task_num }}/{{ task_count }}, model '{{ task_model }}'){% else %}Summarise{% endif %}\"\n";

fn score(env: &TestEnv, tasks: &str, prd: Option<&str>) -> String {
    if let Some(text) = prd {
        std::fs::write(env.work.join("PRD.md"), text).unwrap();
    }
    let yaml = SCORE.replace("TASKS", tasks);
    std::fs::write(env.work.join("tasks.yaml"), yaml).unwrap();
    "tasks.yaml".into()
}

fn output(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

const PRD: &str = "# Plan\n\n## Tasks\n- Fix the bug in auth.go\n* Add a --verbose flag [model:claude-opus-4]\n- Write docs [model:gemini-2.5-pro]\n\n## Later\n- not a task\n";

#[test]
fn validate_and_dry_run_show_tasks_slugs_branches_models() {
    let env = TestEnv::new();
    // Each task gets a worktree: the project is a git repository with a commit (else V219).
    mozart_tests::git(&env.work, &["init", "-q", "."]);
    mozart_tests::git(&env.work, &["commit", "-q", "--allow-empty", "-m", "init"]);
    let s = score(
        &env,
        "tasks: {file: PRD.md, branch: \"mochi/{slug}\"}",
        Some(PRD),
    );
    let out = env.mozart(&["validate", &s]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Sheets: 4"),
        "three voices + movement 2: {text}"
    );
    for needle in [
        "1      fix-the-bug-in-auth-go  mochi/fix-the-bug-in-auth-go  -",
        "claude-opus-4",
        "gemini-2.5-pro  Write docs",
        "Reviewer: claude_cli (model opus), up to 2 iterations",
        "Do Fix the bug in auth.go on mochi/fix-the-bug-in-auth-go (1/3, model '')",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(!text.contains("V101"), "task variables are defined: {text}");

    let out = env.mozart(&["run", "--dry-run", "--json", &s]);
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["total_sheets"], 4);
    let tasks = doc["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3);
    assert_eq!(tasks[1]["slug"], "add-a-verbose-flag");
    assert_eq!(tasks[1]["branch"], "mochi/add-a-verbose-flag");
    assert_eq!(tasks[1]["model"], "claude-opus-4");
    assert_eq!(tasks[1]["task"], "Add a --verbose flag");
    assert_eq!(tasks[1]["line"], 5);
    assert_eq!(tasks[2]["sheet"], 3);
}

#[test]
fn bad_task_lists_name_the_file_and_line() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "# Plan\n- a\n",
            "tasks: {file: PRD.md}",
            &["PRD.md: no `## Tasks` section"],
        ),
        (
            "## Tasks\n\nnothing\n",
            "tasks: {file: PRD.md}",
            &["PRD.md line 1", "has no tasks"],
        ),
        (
            "## Tasks\n- Fix it\n- fix  it!\n",
            "tasks: {file: PRD.md}",
            &["PRD.md line 3", "slug 'fix-it' of the task on line 2"],
        ),
        (
            "## Tasks\n- Fix it [model:]\n",
            "tasks: {file: PRD.md}",
            &["PRD.md line 2: empty model annotation"],
        ),
        (
            "## Tasks\n- Fix it\n",
            "tasks: {file: PRD.md, branch: \"my branch/{slug}\"}",
            &[
                "'my branch/fix-it'",
                "not a valid git branch name",
                "line 2",
            ],
        ),
        (
            "## Tasks\n- a\n",
            "tasks: {file: MISSING.md}",
            &["tasks.file: cannot read", "MISSING.md"],
        ),
    ];
    for (prd, tasks, needles) in cases {
        let env = TestEnv::new();
        let s = score(&env, tasks, Some(prd));
        for args in [vec!["validate", &s], vec!["run", "--dry-run", &s]] {
            let out = env.mozart(&args);
            let text = output(&out);
            assert_ne!(out.status.code(), Some(0), "{args:?} {prd:?}: {text}");
            for n in *needles {
                assert!(
                    text.contains(n),
                    "{args:?} {prd:?}: missing {n:?} in {text}"
                );
            }
        }
    }
}

fn stand_in_gh(env: &TestEnv, body: &str) {
    let gh = env.bin.join("gh");
    let json = serde_json::json!({ "body": body }).to_string();
    std::fs::write(
        &gh,
        format!("#!/bin/sh\necho \"$*\" >> '{}/gh.log'\nif [ \"$1 $2\" = 'issue view' ]; then cat <<'EOF'\n{json}\nEOF\nelse exit 1; fi\n", env.work.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn tasks_from_a_github_issue_through_gh() {
    let env = TestEnv::new();
    stand_in_gh(
        &env,
        "Please do:\r\n\r\n## Tasks\r\n- First thing\r\n- Second thing\r\n",
    );
    let s = score(&env, "tasks: {issue: 42, repo: example/project}", None);
    let out = env.mozart(&["run", "--dry-run", "--json", &s]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let slugs: Vec<&str> = doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["first-thing", "second-thing"]);
    assert_eq!(doc["tasks"][0]["branch"], "mozart/first-thing");
    let log = std::fs::read_to_string(env.work.join("gh.log")).unwrap();
    assert_eq!(log.trim(), "issue view 42 --json body -R example/project");

    // An issue without the section: the error names the issue.
    stand_in_gh(&env, "no list here");
    let text = output(&env.mozart(&["validate", &s]));
    assert!(
        text.contains("GitHub issue #42: no `## Tasks` section"),
        "{text}"
    );
}

#[test]
fn a_missing_gh_is_a_clear_error() {
    let env = TestEnv::new();
    let s = score(&env, "tasks: {issue: 7}", None);
    // PATH without any gh: only the directories git and sh live in.
    let out = env
        .command(&["validate", &s])
        .env("PATH", format!("{}:/usr/bin:/bin", env.bin.display()))
        .output()
        .unwrap();
    let text = output(&out);
    if Path::new("/usr/bin/gh").exists() || Path::new("/bin/gh").exists() {
        eprintln!("skipped: a real gh is installed in /usr/bin or /bin");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(
            "`gh issue view 7 --json body` cannot run: the GitHub CLI `gh` is not on PATH"
        ),
        "{text}"
    );
}

#[test]
fn pr_dispatch_needs_a_worktree_per_task() {
    let env = TestEnv::new();
    std::fs::write(env.work.join("PRD.md"), "## Tasks\n- a\n").unwrap();
    std::fs::write(
        env.work.join("pr.yaml"),
        "name: pr\nsheet: {size: 1, total_items: 1}\ntasks: {file: PRD.md, dispatch: pr}\nreview: {}\nprompt: {template: x}\n",
    )
    .unwrap();
    let out = env.mozart(&["validate", "pr.yaml"]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("tasks.dispatch `pr`") && text.contains("scope: sheet"),
        "{text}"
    );
}

#[test]
fn dispatch_needs_a_reviewer() {
    let env = TestEnv::new();
    std::fs::write(env.work.join("PRD.md"), "## Tasks\n- a\n").unwrap();
    std::fs::write(
        env.work.join("file.yaml"),
        "name: f\nsheet: {size: 1, total_items: 1}\ntasks: {file: PRD.md, dispatch: file}\nprompt: {template: x}\n",
    )
    .unwrap();
    let out = env.mozart(&["validate", "file.yaml"]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("add a `review:` section"), "{text}");
}

/// A task list whose repository is not a git repository: `validate` passed it ("PASSED (with
/// warnings)", exit 0) and `run` then refused it (`Cannot isolate the job's sheets … not
/// inside one`) with the unrelated hint `Check with: mozart conductor-status`. `validate`
/// now fails it (V219) naming the fix, and `run`'s hints say the same.
#[test]
fn a_task_list_outside_a_git_repository_fails_validate_as_run_refuses_it() {
    let env = TestEnv::new();
    let s = score(&env, "tasks: {file: PRD.md}", Some(PRD));
    let out = env.mozart(&["validate", &s]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("[V219]")
            && text.contains("is not inside a git repository")
            && text.contains("git init")
            && text.contains("tasks.repository"),
        "{text}"
    );
    assert!(text.contains("Validation: FAILED"), "{text}");

    env.start_conductor();
    let out = env.mozart(&["run", &s]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("Cannot isolate the job's sheets"), "{text}");
    assert!(
        text.contains("git init") && text.contains("mozart validate tasks.yaml"),
        "{text}"
    );
    assert!(!text.contains("conductor-status"), "{text}");

    // In a git repository with a commit the score validates.
    mozart_tests::git(&env.work, &["init", "-q", "."]);
    mozart_tests::git(&env.work, &["commit", "-q", "--allow-empty", "-m", "init"]);
    let out = env.mozart(&["validate", &s]);
    let text = output(&out);
    assert!(!text.contains("V219"), "{text}");
}
