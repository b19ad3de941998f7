//! Features the job manager wires in around the baton, run through the real conductor:
//! worktree isolation (issue #6 part 5), workspace archiving on `--fresh` (part 6),
//! cross-sheet context (part 4) and the learning store.

use std::path::Path;
use std::time::{Duration, Instant};

use mozart_tests::{git, stdout, TestEnv};
use serde_json::Value;

fn wait_done(env: &TestEnv, job: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = env.mozart(&["status", job, "--json"]);
        if let Ok(doc) = serde_json::from_slice::<Value>(&out.stdout) {
            if matches!(
                doc["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return doc;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{job} did not finish: {}\n{}",
            stdout(&out),
            env.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(env: &TestEnv, score: &Path, extra: &[&str]) {
    let mut args = vec!["run", score.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = env.mozart(&args);
    if out.status.code() != Some(0) {
        let errors = env.mozart(&["errors", "-V", score.file_stem().unwrap().to_str().unwrap()]);
        panic!(
            "run: {}\nerrors: {}\nlog:\n{}",
            stdout(&out),
            stdout(&errors),
            env.log()
        );
    }
}

#[test]
fn isolated_job_works_in_its_own_worktree_and_leaves_the_checkout_alone() {
    let env = TestEnv::new();
    let repo = env.work.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "."]);
    std::fs::write(repo.join("README"), "main checkout\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    // A git-ignored file a worktree would not have without `copy_files`.
    std::fs::write(repo.join(".gitignore"), ".env\niso-ws/\n").unwrap();
    std::fs::write(repo.join(".env"), "SECRET_FROM_CHECKOUT=1\n").unwrap();
    let score = repo.join("iso.yaml");
    std::fs::write(
        &score,
        r#"name: iso
workspace: ./iso-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {size: 1, total_items: 1}
isolation:
  enabled: true
  mode: worktree
  cleanup_on_success: true
  fallback_on_error: false
  copy_files: [".env"]
  setup_commands: ["echo ready > setup-ran.txt"]
prompt:
  template: |
    RUN: pwd > "{{ workspace }}/where.txt"
    RUN: git branch --show-current > "{{ workspace }}/branch.txt"
    RUN: top=$(git rev-parse --show-toplevel); cat "$top/.env" setup-ran.txt > "{{ workspace }}/setup.txt"
    RUN: echo changed > README
validations:
  - type: file_exists
    path: "{workspace}/branch.txt"
"#,
    )
    .unwrap();
    env.start_conductor();
    run(&env, &score, &[]);
    let doc = wait_done(&env, "iso");
    assert_eq!(doc["status"], "completed", "{doc}");

    let ws = repo.join("iso-ws");
    let ran_in = std::fs::read_to_string(ws.join("where.txt")).unwrap();
    assert!(
        ran_in.contains(".worktrees"),
        "the sheet ran in a worktree, not the checkout: {ran_in}"
    );
    let setup = std::fs::read_to_string(ws.join("setup.txt")).unwrap();
    assert_eq!(
        setup, "SECRET_FROM_CHECKOUT=1\nready\n",
        "copied .env and ran the setup command"
    );
    let branch = std::fs::read_to_string(ws.join("branch.txt")).unwrap();
    assert!(
        branch.trim().starts_with("mozart/iso"),
        "own branch: {branch}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "main checkout\n",
        "the main checkout is untouched"
    );
    // Cleaned up on success: only the main worktree is left, and no lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = git(&repo, &["worktree", "list", "--porcelain"]);
        if list.matches("worktree ").count() == 1 {
            assert!(!list.contains("locked"), "{list}");
            break;
        }
        assert!(Instant::now() < deadline, "worktree not removed: {list}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn fresh_run_archives_the_old_workspace_and_cross_sheet_context_reaches_prompts() {
    let env = TestEnv::new();
    let score = env.write_score(
        "ctx",
        r#"name: ctx
workspace: ./ctx-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {size: 1, total_items: 2}
workspace_lifecycle: {archive_on_fresh: true, max_archives: 3}
cross_sheet: {auto_capture_stdout: true, lookback_sheets: 1}
prompt:
  template: |
    {% if sheet_num == 1 %}
    RUN: echo "hello from one"
    RUN: echo one > "{{ workspace }}/one.txt"
    {% else %}
    {% for line in (previous_outputs[1] | default("none")).split("\n") %}
    RUN: echo '{{ line | replace("'", "") }}' >> "{{ workspace }}/seen.txt"
    {% endfor %}
    {% endif %}
validations:
  - type: file_exists
    path: "{workspace}/one.txt"
"#,
    );
    env.start_conductor();
    run(&env, &score, &[]);
    assert_eq!(wait_done(&env, "ctx")["status"], "completed");
    let ws = env.work.join("ctx-ws");
    let seen = std::fs::read_to_string(ws.join("seen.txt")).unwrap();
    assert!(
        seen.contains("hello from one"),
        "sheet 2 saw sheet 1's output: {seen:?}"
    );

    run(&env, &score, &["--fresh"]);
    assert_eq!(wait_done(&env, "ctx")["status"], "completed");
    let archives: Vec<_> = std::fs::read_dir(&ws)
        .unwrap()
        .flatten()
        // `logs/` holds the live sheet output files, not an archive.
        .filter(|e| e.path().is_dir() && e.file_name() != "logs")
        .collect();
    assert!(
        archives.iter().any(|a| std::fs::read_dir(a.path())
            .map(|d| d.count() > 0)
            .unwrap_or(false)),
        "the first run's files were archived inside the workspace: {archives:?}"
    );

    // The learning store saw every sheet of both runs (its writer commits in batches a
    // moment after the outcomes arrive).
    let db = rusqlite::Connection::open(env.home.join("global-learning.db")).unwrap();
    let count = || -> i64 {
        db.query_row("SELECT COUNT(*) FROM executions", [], |r| r.get(0))
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while count() < 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Settled: nothing is written twice afterwards either.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(count(), 4, "two runs of two sheets recorded once each");
    // ...and its patterns are served over the protocol (conductor.md §8.25).
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let doc = client
        .call_value("daemon.learning.patterns", serde_json::json!({"limit": 5}))
        .unwrap();
    assert!(doc["patterns"].is_array(), "{doc}");
}

#[test]
fn captured_files_never_follow_a_link_out_of_the_workspace() {
    // Sheet 1 (the instrument's doing, say a hostile one) links a file of the workspace to
    // a file outside it; sheet 2's prompt must not carry that file's content.
    let env = TestEnv::new();
    let secret = env.work.join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-CONTENT\n").unwrap();
    let score = env.write_score(
        "sym",
        &format!(
            r#"name: sym
workspace: ./sym-ws
instrument: shell
pause_between_sheets_seconds: 0
cross_sheet: {{capture_files: ["notes/*.md"]}}
sheet: {{size: 1, total_items: 2}}
prompt:
  template: |
    {{% if sheet_num == 1 %}}RUN: mkdir -p {{{{ workspace }}}}/notes && ln -s {secret} {{{{ workspace }}}}/notes/n.md && echo mine > {{{{ workspace }}}}/notes/own.md
    {{% else %}}{{% for p, t in previous_files.items() %}}RUN: echo "{{{{ p }}}} => {{{{ t | trim }}}}" >> {{{{ workspace }}}}/cap.txt
    {{% endfor %}}RUN: touch {{{{ workspace }}}}/cap.txt{{% endif %}}
"#,
            secret = secret.display()
        ),
    );
    env.start_conductor();
    run(&env, &score, &[]);
    assert_eq!(wait_done(&env, "sym")["status"], "completed");
    let cap = std::fs::read_to_string(env.work.join("sym-ws/cap.txt")).unwrap();
    assert!(
        !cap.contains("TOP-SECRET"),
        "the linked file outside the workspace reached the prompt: {cap}"
    );
    assert!(
        cap.contains("own.md => mine"),
        "the sheet's own file is captured: {cap}"
    );
}

#[test]
fn captured_files_older_than_the_job_are_left_out() {
    // score.md §3.13: a file already there before the job started is not a sheet's work.
    let env = TestEnv::new();
    let notes = env.work.join("old-ws/notes");
    std::fs::create_dir_all(&notes).unwrap();
    let stale = notes.join("stale.md");
    std::fs::write(&stale, "from last week\n").unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let score = env.write_score(
        "old",
        r#"name: old
workspace: ./old-ws
instrument: shell
pause_between_sheets_seconds: 0
cross_sheet: {capture_files: ["notes/*.md"]}
sheet: {size: 1, total_items: 2}
prompt:
  template: |
    {% if sheet_num == 1 %}RUN: echo fresh > {{ workspace }}/notes/new.md
    {% else %}RUN: echo "{% for p, t in previous_files.items() %}[{{ t | trim }}]{% endfor %}" > {{ workspace }}/cap.txt{% endif %}
"#,
    );
    env.start_conductor();
    run(&env, &score, &[]);
    assert_eq!(wait_done(&env, "old")["status"], "completed");
    let cap = std::fs::read_to_string(env.work.join("old-ws/cap.txt")).unwrap();
    assert_eq!(
        cap.trim(),
        "[fresh]",
        "only the file this job wrote is captured"
    );
}

#[test]
fn archiving_a_workspace_that_holds_the_score_warns_and_keeps_the_score() {
    // `workspace: .` with archive_on_fresh: `--fresh` moved the score file itself (and
    // everything beside it) into archive/, and validate said nothing.
    let env = TestEnv::new();
    let dir = env.work.join("dot");
    std::fs::create_dir_all(&dir).unwrap();
    let score = dir.join("dot.yaml");
    std::fs::write(
        &score,
        "name: dot\nworkspace: .\ninstrument: shell\npause_between_sheets_seconds: 0\nworkspace_lifecycle: {archive_on_fresh: true}\nsheet: {size: 1, total_items: 1}\nprompt: {template: \"RUN: echo hi > {{ workspace }}/out.txt\"}\n",
    )
    .unwrap();
    let out = env.mozart(&["validate", score.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("[V218]") && text.contains("holding the score file"),
        "{text}"
    );
    env.start_conductor();
    run(&env, &score, &[]);
    assert_eq!(wait_done(&env, "dot")["status"], "completed");
    run(&env, &score, &["--fresh"]);
    assert_eq!(wait_done(&env, "dot")["status"], "completed");
    assert!(score.is_file(), "the score file stayed where it is");
    run(&env, &score, &["--fresh"]);
    assert_eq!(wait_done(&env, "dot")["status"], "completed");
}

#[test]
fn observer_events_of_a_running_job_are_served_newest_first() {
    let env = TestEnv::new();
    let score = env.write_score(
        "watched",
        "name: watched\nworkspace: ./watched-ws\ninstrument: shell\npause_between_sheets_seconds: 0\nsheet: {size: 1, total_items: 3}\nprompt: {template: \"RUN: sleep 1\"}\n",
    );
    env.start_conductor();
    run(&env, &score, &[]);
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let doc = client
        .call_value(
            "daemon.observer_events",
            serde_json::json!({"job_id": "watched", "limit": 50}),
        )
        .unwrap();
    let events = doc["events"].as_array().unwrap();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(names.contains(&"baton.job.registered"), "{doc:#}");
    let times: Vec<f64> = events
        .iter()
        .filter_map(|e| e["timestamp"].as_f64())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
}

/// The learning writer gathers outcomes for a moment before it commits; stopping the
/// conductor right after a job ends still leaves every outcome in the store.
#[test]
fn stopping_the_conductor_flushes_pending_learning_outcomes() {
    let env = TestEnv::new();
    let score = env.write_score("flush", &mozart_tests::sleepy_shell_score("flush", 3, 0.0));
    env.start_conductor();
    run(&env, &score, &[]);
    assert_eq!(wait_done(&env, "flush")["status"], "completed");
    env.stop_conductor();
    let db = rusqlite::Connection::open(env.home.join("global-learning.db")).unwrap();
    let rows: i64 = db
        .query_row("SELECT COUNT(*) FROM executions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        rows, 3,
        "every sheet's outcome was written before the conductor exited"
    );
}
