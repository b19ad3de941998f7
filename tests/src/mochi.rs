//! The MOCHI project the `scores/mochi.yaml` tests play (issue #14): a git repository with a
//! 3-task `scores/PRD.md`, a bare `origin`, the maintained score and a stand-in `gh`; and
//! what a finished run must leave behind. Shared by the stand-in CLI's test
//! (`tests/mochi_e2e.rs`) and the real Claude Code's (`tests/real_cli_mochi.rs`).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::git;
use crate::TestEnv;

/// The tasks of PRD.md and their slugs; task 2 gets one reviewer `RETRY`.
pub const TASKS: [(&str, &str); 3] = [
    ("Fix the bug in auth.go", "fix-the-bug-in-auth-go"),
    ("Add a --verbose flag", "add-a-verbose-flag"),
    ("Write the README section", "write-the-readme-section"),
];

/// The feedback of task 2's first review.
pub const FEEDBACK: &str = "add a test for the flag";

/// Text that only the reviewer's prompt holds (its default template's first words).
pub const REVIEWER_PROMPT: &str = "You review the work";

/// A MOCHI project in a test environment.
#[derive(Debug)]
pub struct Project {
    /// The git repository the tasks change.
    pub repo: PathBuf,
    /// Its bare `origin`.
    pub remote: PathBuf,
    /// The score, `scores/mochi.yaml` of the repository.
    pub score: PathBuf,
    /// Where the stand-in `gh` logs its arguments.
    pub gh_log: PathBuf,
}

/// A git project with PRD.md and a bare `origin`, the repository's `scores/mochi.yaml` as
/// `edit` changes it (with short pauses between iterations), and a stand-in `gh` in the
/// environment's `bin`.
///
/// # Panics
/// If the files cannot be written or git fails.
#[allow(clippy::expect_used)]
pub fn project(env: &TestEnv, edit: impl FnOnce(String) -> String) -> Project {
    let repo = env.work.join("project");
    std::fs::create_dir_all(repo.join("scores")).expect("create the project");
    git(&repo, &["init", "-q", "-b", "main", "."]);
    std::fs::write(repo.join("README.md"), "a project\n").expect("write README.md");
    let prd: String = TASKS.iter().map(|(t, _)| format!("- {t}\n")).collect();
    std::fs::write(
        repo.join("scores/PRD.md"),
        format!("# Plan\n\nWhy we do this.\n\n## Tasks\n{prd}\n## Later\n- not now\n"),
    )
    .expect("write PRD.md");
    git(&repo, &["add", "README.md", "scores/PRD.md"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let remote = env.work.join("remote.git");
    let remote_arg = remote.display().to_string();
    git(&env.work, &["init", "-q", "--bare", &remote_arg]);
    git(&repo, &["remote", "add", "origin", &remote_arg]);

    let maintained = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scores/mochi.yaml");
    let score = std::fs::read_to_string(maintained)
        .expect("read scores/mochi.yaml")
        .replace("base_delay_seconds: 5", "base_delay_seconds: 0.1");
    let path = repo.join("scores").join("mochi.yaml");
    std::fs::write(&path, edit(score)).expect("write the score");

    let gh_log = env.work.join("gh.log");
    write_gh(env, &gh_script(&gh_log));
    Project {
        repo,
        remote,
        score: path,
        gh_log,
    }
}

/// Replace the stand-in `gh` with `script`.
///
/// # Panics
/// If it cannot be written.
#[allow(clippy::expect_used)]
pub fn write_gh(env: &TestEnv, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let gh = env.bin.join("gh");
    std::fs::write(&gh, script).expect("write gh");
    std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).expect("chmod gh");
}

/// A stand-in `gh` that logs its arguments, answers `pr create` with a PR URL (numbered by
/// its line in the log) and `pr list --head B` with the URL of the pull request created for
/// branch `B`, if any.
pub fn gh_script(log: &Path) -> String {
    gh_script_killing(log, None)
}

/// [`gh_script`], which also `kill -9`s its parent (the conductor) right after logging the
/// first `pr create` for branch `kill_on`: a crash in the middle of the dispatch.
pub fn gh_script_killing(log: &Path, kill_on: Option<&str>) -> String {
    let kill = kill_on.map_or_else(String::new, |branch| {
        format!(
            "if [ \"$1 $2 $4\" = 'pr create {branch}' ] && [ ! -e '{log}.killed' ]; then touch '{log}.killed'; kill -9 $PPID; sleep 1; fi\n",
            log = log.display()
        )
    });
    format!(
        "#!/bin/sh\necho \"$*\" >> '{log}'\n{kill}case \"$1 $2\" in\n  'pr create') n=$(wc -l < '{log}'); echo \"https://github.com/example/project/pull/$n\" ;;\n  'pr list') n=$(grep -n -- \"^pr create --head $4 \" '{log}' | head -n 1 | cut -d: -f1); [ -n \"$n\" ] && echo \"https://github.com/example/project/pull/$n\"; exit 0 ;;\n  *) echo \"gh stand-in: unexpected $*\" >&2; exit 1 ;;\nesac\n",
        log = log.display()
    )
}

/// `sheets.N` of a status document.
pub fn sheet(doc: &Value, n: u32) -> &Value {
    &doc["sheets"][n.to_string()]
}

/// What a finished run of the 3 tasks with task 2's one `RETRY` leaves: a branch per task
/// with one commit per worker iteration, pushed; the retry in `status --json`; three pull
/// requests; the worktrees removed.
///
/// # Panics
/// When any of it is missing.
#[allow(clippy::expect_used)]
pub fn check_outcome(env: &TestEnv, p: &Project, doc: &Value) {
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    // Three branches with the workers' commits; task 2's has both iterations.
    for (i, (_, slug)) in TASKS.iter().enumerate() {
        let branch = format!("mochi/{slug}");
        let ahead = git(
            &p.repo,
            &["rev-list", "--count", &format!("main..{branch}")],
        );
        assert_eq!(ahead, if i == 1 { "2" } else { "1" }, "{branch}");
        // Pushed to the remote by the `pr` dispatch.
        git(
            &p.remote,
            &["rev-parse", "--verify", &format!("refs/heads/{branch}")],
        );
    }
    // The reviewer's retry, visible in status --json.
    let s2 = sheet(doc, 2);
    assert_eq!(s2["review"]["iteration"], 2, "{s2:#}");
    let history = s2["review"]["history"].as_array().expect("a history");
    assert_eq!(history.len(), 2, "{s2:#}");
    assert_eq!(history[0]["verdict"], "RETRY");
    assert_eq!(history[0]["feedback"], FEEDBACK);
    assert_eq!(history[1]["verdict"], "DONE");
    for n in [1, 3] {
        assert_eq!(sheet(doc, n)["review"]["iteration"], 1, "{doc:#}");
    }
    // Three pull requests.
    let prs = std::fs::read_to_string(&p.gh_log).expect("gh was called");
    let creates: Vec<&str> = prs.lines().filter(|l| l.starts_with("pr create")).collect();
    assert_eq!(creates.len(), 3, "{prs}");
    for (_, slug) in TASKS {
        assert!(
            creates
                .iter()
                .any(|l| l.contains(&format!("--head mochi/{slug} --base main"))),
            "{prs}"
        );
    }
    assert!(
        prs.contains("Accepted by the reviewer after 2 iterations"),
        "{prs}"
    );
    for n in 1..=3 {
        let dispatched = sheet(doc, n)["review"]["dispatched"].as_str().unwrap_or("");
        assert!(
            dispatched.starts_with("https://github.com/example/project/pull/"),
            "{doc:#}"
        );
    }
    // Worktrees cleaned: only the main checkout is left, the manifest lists nothing.
    let worktrees = git(&p.repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(
        worktrees
            .lines()
            .filter(|l| l.starts_with("worktree "))
            .count(),
        1,
        "{worktrees}"
    );
    let manifest = p
        .repo
        .join(".mochi-workspace/.worktrees/mochi.manifest.json");
    let m: Value = serde_json::from_slice(&std::fs::read(&manifest).expect("read the manifest"))
        .expect("the manifest is JSON");
    assert_eq!(m["sheets"], json!({}), "{m:#}");
}
