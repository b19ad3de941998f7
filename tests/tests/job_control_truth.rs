//! What job control says is what happens (an outside audit's findings): a score resumed
//! with another sheet count keeps its finished sheets, a plain `resume` reads the edited
//! score file, and a job is not reported ended (`wait`, `status --watch`) nor cleared while
//! its `on_success` hooks still run.

use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};

fn score(total: u32, word: &str, ws: &str) -> String {
    format!(
        r#"name: demo
workspace: ./{ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: {total}}}
prompt:
  template: |
    RUN: sleep 1; echo "{word} {{{{ sheet_num }}}}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Run `score` as job `id` and pause it once its first sheet is done; returns the sheets
/// finished by then.
fn run_and_pause(env: &TestEnv, id: &str, score: &std::path::Path, ws: &std::path::Path) -> u32 {
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ws.join("out-1.txt").exists() {
        assert!(Instant::now() < deadline, "sheet 1 never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = env.mozart(&["pause", id]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = env.mozart(&["wait", id, "--timeout", "20"]);
    assert_eq!(out.status.code(), Some(4), "paused: {}", stdout(&out));
    (1..=10)
        .take_while(|n| ws.join(format!("out-{n}.txt")).exists())
        .count() as u32
}

#[test]
fn a_resume_with_more_sheets_keeps_the_finished_ones_and_says_so() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("ws-a");
    let first = env.write_score("demo", &score(4, "sheet", "ws-a"));
    let done = run_and_pause(&env, "demo", &first, &ws);
    assert!(
        (1..4).contains(&done),
        "{done} sheets done before the pause"
    );
    let second = env.write_score("demo-v2", &score(6, "v2", "ws-a"));
    let out = env.mozart(&["resume", "demo", "--config", second.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("The score now has 6 sheets (it had 4)"),
        "{text}"
    );
    env.wait_completed("demo");
    for n in 1..=done {
        assert_eq!(
            read(&ws.join(format!("out-{n}.txt"))),
            format!("sheet {n}"),
            "sheet {n} ran again"
        );
    }
    for n in done + 1..=6 {
        assert_eq!(read(&ws.join(format!("out-{n}.txt"))), format!("v2 {n}"));
    }
}

#[test]
fn a_plain_resume_reads_the_edited_score_file() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("ws-b");
    let path = env.write_score("edited", &score(4, "sheet", "ws-b"));
    let done = run_and_pause(&env, "edited", &path, &ws);
    assert!(done < 4, "the job finished before the pause");
    std::fs::write(&path, score(4, "EDITED", "ws-b")).unwrap();
    let out = env.mozart(&["resume", "edited"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("edited");
    assert_eq!(read(&ws.join("out-4.txt")), "EDITED 4");
    assert_eq!(
        read(&ws.join("out-1.txt")),
        "sheet 1",
        "a finished sheet ran again"
    );
}

fn hooked(env: &TestEnv, name: &str, command: &str) -> std::path::PathBuf {
    env.write_score(
        name,
        &format!(
            r#"name: {name}
workspace: ./{name}-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: "RUN: true"
on_success:
  - type: run_command
    command: "{command}"
"#
        ),
    )
}

/// `mozart wait JOB && publish` must not publish a job whose hook then fails it.
#[test]
fn wait_answers_once_the_on_success_hooks_are_done() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = hooked(&env, "hk", "sleep 3; exit 1");
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = env.mozart(&["wait", "hk", "--timeout", "30"]);
    assert_eq!(out.status.code(), Some(1), "wait: {}", stdout(&out));
    assert!(stdout(&out).contains("failed"), "{}", stdout(&out));
}

#[test]
fn a_job_whose_hooks_still_run_is_not_cleared() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = hooked(&env, "hp", "sleep 4; echo done > hookran.txt");
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = stdout(&env.mozart(&["status", "hp"]));
        if status.contains("on_success hooks are running") {
            // Running, so not "interrupted"; --json says so too.
            assert!(!status.contains("may have been interrupted"), "{status}");
            let out = env.mozart(&["status", "hp", "--json"]);
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(doc["hooks_running"], true, "{doc:#}");
            assert_eq!(doc["hooks_interrupted"], false, "{doc:#}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never showed its hooks running:\n{status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = env.mozart(&["clear", "--score", "hp", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let list = stdout(&env.mozart(&["list", "--all"]));
    assert!(list.contains("hp"), "cleared while its hooks ran:\n{list}");
    env.wait_completed("hp");
    let out = env.mozart(&["clear", "--score", "hp", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let list = stdout(&env.mozart(&["list", "--all"]));
    assert!(!list.contains("hp "), "{list}");
}

/// `{sheet_count}` in an `on_success` hook is the job's number of sheets (score.md §5.8.4),
/// not the literal text.
#[test]
fn a_hook_gets_the_jobs_sheet_count() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score(
        "counted",
        r#"name: counted
workspace: ./counted-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {size: 1, total_items: 3}
prompt:
  template: "RUN: true"
on_success:
  - type: run_command
    command: "echo {sheet_count} {job_id} > count.txt"
"#,
    );
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = env.mozart(&["wait", "counted", "--timeout", "60"]);
    assert_eq!(out.status.code(), Some(0), "wait: {}", stdout(&out));
    let written = std::fs::read_to_string(env.work.join("counted-ws/count.txt")).unwrap();
    assert_eq!(written.trim(), "3 counted");
}

/// Another score of the same file name, in another directory with its own `./ws`: its run
/// used to take over the first score's finished sheets — shown done, never run in its
/// workspace (only the failed sheet ran there). A run whose workspace is new (not the last
/// run's, and empty) starts over, and says why and how to go on from the earlier run.
#[test]
fn a_run_in_a_new_workspace_starts_over_instead_of_claiming_another_workspaces_sheets() {
    let env = TestEnv::new();
    env.start_conductor();
    let write = |dir: &str, name: &str, fail_last: bool| {
        let d = env.work.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        let last = if fail_last {
            "{% if sheet_num == 3 %}exit 1{% else %}true{% endif %}"
        } else {
            "true"
        };
        let yaml = format!(
            "name: {name}\nworkspace: ./ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
             retry: {{max_retries: 0}}\nsheet: {{size: 1, total_items: 3}}\nprompt:\n  template: |\n    \
             RUN: echo {name} > \"{{{{ workspace }}}}/o{{{{ sheet_num }}}}\"\n    RUN: {last}\n"
        );
        let path = d.join("same.yaml");
        std::fs::write(&path, yaml).unwrap();
        path
    };
    let first = write("d1", "first", true);
    let out = env.mozart(&["run", first.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    let waited = env.mozart(&["wait", "same"]);
    assert_eq!(waited.status.code(), Some(1), "{}", stdout(&waited));
    let second = write("d2", "second", false);
    let out = env.mozart(&["run", second.to_str().unwrap()]);
    let said = stdout(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("is a new workspace, so the job starts over"),
        "{said}"
    );
    // The command to go on from the earlier run names this score, not a literal `SCORE`.
    assert!(
        said.contains(&format!(
            "mozart run {} --workspace {}",
            second.display(),
            env.work.join("d1/ws").display()
        )),
        "{said}"
    );
    let waited = env.mozart(&["wait", "same"]);
    assert_eq!(waited.status.code(), Some(0), "{}", stdout(&waited));
    for n in 1..=3 {
        let file = env.work.join(format!("d2/ws/o{n}"));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap_or_default().trim(),
            "second",
            "sheet {n} ran in the second score's workspace"
        );
    }
}
