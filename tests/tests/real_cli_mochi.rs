//! The maintained `scores/mochi.yaml` through the real Claude Code (tests/real-cli/setup.sh)
//! against the local mock Messages API (issue #14): what `mochi_e2e.rs` asserts for the
//! stand-in CLI — a worktree and branch per task with the worker's commits, one reviewer
//! `RETRY` whose feedback reaches the next worker through FEEDBACK.md, pull requests through a
//! stand-in `gh`, worktrees cleaned — with the worker's file write and `git commit` done by
//! Claude Code's own `Write` and `Bash` tools. Skips with a printed reason when the CLI is not
//! installed.

use mozart_tests::mochi::{check_outcome, sheet, FEEDBACK, REVIEWER_PROMPT, TASKS};
use mozart_tests::mock_api::Step;
use mozart_tests::real_cli::RealCliEnv;

/// The worker's turns of one iteration: write `work-N.txt` in its worktree (the path the
/// prompt names), commit it (only when `guard` holds), answer.
fn iteration(slug: &str, n: u32, guard: &str) -> [Step; 3] {
    let file = format!("work-{n}.txt");
    [
        Step::Write {
            path: format!("{{dir}}/{file}"),
            content: format!("{slug} {n}\n"),
        },
        Step::Shell(format!(
            "{guard}git add {file} && git -c user.name=w -c user.email=w@example.com commit -qm 'work on {slug}'"
        )),
        Step::Text(format!("I worked on {slug} ({n}).")),
    ]
}

#[test]
fn three_tasks_one_retry_three_pull_requests() {
    let Some(mut rc) = RealCliEnv::new("claude") else {
        return;
    };
    // As root the CLI refuses to skip permissions unless told it runs in a sandbox.
    rc.set_var("IS_SANDBOX", "1");
    rc.start_conductor();
    // The maintained score as it is (worker and reviewer on the `claude-code` profile); the
    // worker's prompt also carries its worktree for the mock's `Write` (a model reads the
    // path from the prompt's "Work in …").
    let p = mozart_tests::mochi::project(&rc.env, |score| {
        score.replace(
            "tests passing.\n",
            "tests passing.\n    mock-dir:{{ working_directory }}\n",
        )
    });
    // Reviewers first: their prompt quotes the task too.
    for (i, (task, _)) in TASKS.iter().enumerate() {
        let verdicts = if i == 1 {
            vec![
                Step::Text(format!("RETRY: {FEEDBACK}")),
                Step::Text("Looks right now.\nDONE".into()),
            ]
        } else {
            vec![Step::Text("DONE".into())]
        };
        rc.mock.route(&[REVIEWER_PROMPT, task], verdicts);
    }
    for (i, (task, slug)) in TASKS.iter().enumerate() {
        let mut steps = iteration(slug, 1, "").to_vec();
        if i == 1 {
            // The second iteration commits only if the feedback reached FEEDBACK.md.
            let guard = format!("grep -q '{FEEDBACK}' FEEDBACK.md && ");
            steps.extend(iteration(slug, 2, &guard));
        }
        rc.mock.route(&[task], steps);
    }
    let submitted = p.score.display().to_string();
    let out = rc.mozart(&["run", &submitted, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", mozart_tests::stdout(&out));
    let doc = rc.wait_done("mochi", 150);
    check_outcome(&rc.env, &p, &doc);
    // The worker wrote through Claude Code's `Write` into its own worktree, by the path the
    // prompt named, and committed with `Bash`.
    let shown = mozart_tests::git(&p.repo, &["show", "mochi/add-a-verbose-flag:work-2.txt"]);
    assert_eq!(shown, "add-a-verbose-flag 2");
    assert_eq!(
        sheet(&doc, 2)["review"]["history"][0]["feedback"],
        FEEDBACK,
        "{doc:#}"
    );
    // Every model call was answered by a script: two tool calls and an answer per worker
    // iteration, one answer per review.
    let requests = rc.mock.requests();
    let routed = requests.iter().filter(|r| r.routed.is_some()).count();
    assert_eq!(routed, 4 * 3 + 4, "{requests:#?}");
    let text = mozart_tests::stdout(&rc.mozart(&["status", "mochi"]));
    assert!(text.contains("review 2: DONE"), "{text}");
}
