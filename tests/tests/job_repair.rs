//! Repairing a job that went wrong (an outside audit's findings): a resume goes on in the
//! workspace the edited score names, refuses when the workspace and the finished sheets' work
//! are gone, and a job the conductor could not resume after a `kill -9` shows as failed in
//! `status`, not as running.

use mozart_tests::{stdout, TestEnv};

use crate::harness::{ledger, run, sheet, wait_status, wait_terminal};

/// Four sheets, each appending `run N` to `ledger.txt` and writing `out-N.txt`, except
/// sheet `broken`, whose file is missing: its validation fails and the job fails.
fn score(name: &str, workspace: &str, broken: u32) -> String {
    format!(
        r#"name: {name}
workspace: {workspace}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 1
sheet:
  size: 1
  total_items: 4
prompt:
  template: |
    RUN: echo "run {{{{ sheet_num }}}}" >> "{{{{ workspace }}}}/ledger.txt"
    RUN: if [ {{{{ sheet_num }}}} != {broken} ]; then echo ok > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"; fi
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

/// Run `name` with sheet 2 broken until it fails; returns the workspace.
fn failed_job(env: &TestEnv, name: &str) -> std::path::PathBuf {
    let path = env.write_score(name, &score(name, &format!("./{name}-ws"), 2));
    run(env, &path, &[]);
    let doc = wait_terminal(env, name, 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["status"], "completed", "{doc:#}");
    env.work.join(format!("{name}-ws"))
}

#[test]
fn a_resume_goes_on_in_the_workspace_the_edited_score_names() {
    let env = TestEnv::new();
    env.start_conductor();
    let old = failed_job(&env, "moved");
    // The user moves the workspace, points the score at it and fixes the broken sheet.
    let new = env.work.join("elsewhere");
    std::fs::rename(&old, &new).unwrap();
    env.write_score("moved", &score("moved", "./elsewhere", 99));
    let out = env.mozart(&["resume", "moved"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = wait_terminal(&env, "moved", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(
        !old.exists(),
        "the resume made a new workspace at the old path"
    );
    for n in 1..=4 {
        assert!(
            new.join(format!("out-{n}.txt")).exists(),
            "sheet {n}'s file is not in the workspace the score names"
        );
    }
    // Sheet 1 ran once, before the move.
    assert_eq!(
        ledger(&new.join("ledger.txt")),
        ["run 1", "run 2", "run 2", "run 3", "run 4"]
    );
    let list = stdout(&env.mozart(&["list", "--all"]));
    assert!(list.contains(&new.display().to_string()), "{list}");
}

#[test]
fn a_resume_keeps_the_workspace_run_workspace_gave() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("given", &score("given", "./given-ws", 2));
    let chosen = env.work.join("chosen");
    run(&env, &path, &["--workspace", chosen.to_str().unwrap()]);
    let doc = wait_terminal(&env, "given", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    env.write_score("given", &score("given", "./given-ws", 99));
    let out = env.mozart(&["resume", "given"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = wait_terminal(&env, "given", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(chosen.join("out-4.txt").exists());
    assert!(!env.work.join("given-ws").exists());
}

#[test]
fn a_resume_whose_workspace_is_gone_is_refused_and_says_what_to_do() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = failed_job(&env, "gone");
    std::fs::remove_dir_all(&ws).unwrap();
    env.write_score("gone", &score("gone", "./gone-ws", 99));
    let out = env.mozart(&["resume", "gone"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("no longer exists"), "{text}");
    assert!(text.contains(&ws.display().to_string()), "{text}");
    assert!(text.contains("finished sheet 1 "), "{text}");
    assert!(
        text.contains(&format!(
            "mozart run {} --fresh",
            env.work.join("gone.yaml").display()
        )),
        "{text}"
    );
    assert!(!ws.exists(), "the refused resume made the workspace");
    let doc = wait_terminal(&env, "gone", 10.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    // What it says to do works.
    let path = env.work.join("gone.yaml");
    run(&env, &path, &["--fresh"]);
    let doc = wait_terminal(&env, "gone", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        ledger(&ws.join("ledger.txt")),
        ["run 1", "run 2", "run 3", "run 4"]
    );
}

#[test]
fn a_paused_job_whose_workspace_is_gone_is_not_resumed() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("held", &mozart_tests::sleepy_shell_score("held", 4, 1.0));
    run(&env, &path, &[]);
    wait_status(&env, "held", 30.0, |d| sheet(d, 1)["status"] == "completed");
    let out = env.mozart(&["pause", "held"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_status(&env, "held", 30.0, |d| {
        d["status"] == "paused" && (1..=4).all(|n| sheet(d, n)["status"] != "in_progress")
    });
    let ws = env.work.join("held-ws");
    std::fs::remove_dir_all(&ws).unwrap();
    let out = env.mozart(&["resume", "held"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("no longer exists"), "{text}");
    let doc = wait_status(&env, "held", 5.0, |_| true);
    assert_eq!(doc["status"], "paused", "{doc:#}");
    assert!(!ws.exists());
}

#[test]
fn a_job_the_restart_could_not_resume_shows_failed_in_status() {
    let env = TestEnv::new();
    env.start_conductor();
    let text = mozart_tests::sleepy_shell_score("stuck", 3, 2.0);
    let path = env.write_score("stuck", &text);
    run(&env, &path, &[]);
    wait_status(&env, "stuck", 30.0, |d| {
        sheet(d, 1)["status"] == "completed" && sheet(d, 2)["status"] == "in_progress"
    });
    crate::support::kill9_conductor(&env);
    // While the conductor is down the score gets an edit that no longer parses.
    std::fs::write(&path, format!("{text}\nsheet: [\n")).unwrap();
    env.start_conductor();
    let doc = wait_terminal(&env, "stuck", 30.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|m| m.contains("could not be resumed")),
        "{doc:#}"
    );
    assert_eq!(sheet(&doc, 1)["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 2)["status"], "pending", "{doc:#}");
    let human = stdout(&env.mozart(&["status", "stuck"]));
    assert!(human.contains("Status: FAILED"), "{human}");
    assert!(!human.contains("Running for"), "{human}");
    // Fixed, it resumes: sheet 1 is not run again.
    std::fs::write(&path, &text).unwrap();
    let out = env.mozart(&["resume", "stuck"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("stuck");
    let history = stdout(&env.mozart(&["history", "stuck", "--sheet", "1", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(doc["total_records"], 1, "{doc:#}");
}

#[test]
fn a_resume_with_nothing_left_to_run_says_the_job_is_completed() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = failed_job(&env, "byhand");
    // The user does the work of the failed and blocked sheets by hand, then recovers them.
    for n in 2..=4 {
        std::fs::write(ws.join(format!("out-{n}.txt")), "by hand").unwrap();
    }
    let out = env.mozart(&["recover", "byhand"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Recovered 3 sheets"), "{text}");
    let out = env.mozart(&["resume", "byhand"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Every sheet is finished: nothing was run, the job is completed"),
        "{text}"
    );
    assert!(!text.contains("queued"), "{text}");
    let doc = wait_terminal(&env, "byhand", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(ledger(&ws.join("ledger.txt")), ["run 1", "run 2"]);
}

/// A failed job whose score is cut to its finished sheets, sent again with `command`
/// (`resume` or `run`): nothing runs, the job completes, and the answer says why — not
/// "queued", nor "already completed, score not changed" (the job failed and its score
/// changed).
fn a_cut_score_says_so(command: &str) {
    let env = TestEnv::new();
    env.start_conductor();
    let name = format!("cut{command}");
    let ws = failed_job(&env, &name);
    let text = score(&name, &format!("./{name}-ws"), 2).replace("total_items: 4", "total_items: 1");
    let path = env.write_score(&name, &text);
    let out = match command {
        "resume" => env.mozart(&["resume", &name]),
        _ => env.mozart(&["run", path.to_str().unwrap()]),
    };
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "The score now has 1 sheet (it had 4), all finished in the earlier run: nothing was run, the job is completed"
        ),
        "{text}"
    );
    assert!(
        !text.contains("queued") && !text.contains("already completed"),
        "{text}"
    );
    let doc = wait_terminal(&env, &name, 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(ledger(&ws.join("ledger.txt")), ["run 1", "run 2"]);
}

#[test]
fn a_resume_of_a_score_cut_to_its_finished_sheets_says_so() {
    a_cut_score_says_so("resume");
}

#[test]
fn a_failed_job_run_again_cut_to_its_finished_sheets_says_so() {
    a_cut_score_says_so("run");
}

#[test]
fn recover_of_an_unknown_job_says_score_not_found_as_history_does() {
    let env = TestEnv::new();
    env.start_conductor();
    for cmd in ["recover", "history"] {
        let out = env.mozart(&[cmd, "nosuch"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {text}");
        assert!(
            text.starts_with("Error: Score not found: nosuch"),
            "{cmd}: {text}"
        );
        assert!(
            text.contains("Run 'mozart list' to see available scores."),
            "{cmd}: {text}"
        );
    }
}

/// Three sheets, each sleeping a second, then writing `<word> N` to `out-N.txt`.
fn worded(word: &str) -> String {
    format!(
        r#"name: worded
workspace: ./worded-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 3}}
prompt:
  template: |
    RUN: sleep 1; echo "{word} {{{{ sheet_num }}}}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

#[test]
fn modify_without_resume_names_a_command_that_resumes_with_the_score_as_submitted() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("worded", &worded("old"));
    run(&env, &path, &[]);
    wait_status(&env, "worded", 30.0, |d| {
        sheet(d, 1)["status"] == "completed"
    });
    let out = env.mozart(&["cancel", "worded"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_terminal(&env, "worded", 30.0);
    // The score is edited in place and checked with modify.
    std::fs::write(&path, worded("new")).unwrap();
    let out = env.mozart(&["modify", "worded", "-c", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("Or to resume with the score as it was submitted"))
        .unwrap_or_else(|| panic!("{text}"));
    let command: Vec<&str> = lines[at + 1].split_whitespace().collect();
    assert_eq!(command[..3], ["mozart", "resume", "worded"], "{text}");
    // The command it names does what it says.
    let out = env.mozart(&command[1..]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("worded");
    let last = std::fs::read_to_string(env.work.join("worded-ws/out-3.txt")).unwrap();
    assert_eq!(last.trim(), "old 3");
}

#[test]
fn after_recover_status_says_what_recover_did() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = failed_job(&env, "told");
    // Some time passes before the user fixes the file by hand.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    std::fs::write(ws.join("out-2.txt"), "by hand").unwrap();
    let out = env.mozart(&["recover", "told", "--sheet", "2"]);
    assert!(
        stdout(&out).contains("Recovered 1 sheet"),
        "{}",
        stdout(&out)
    );
    let doc = wait_status(&env, "told", 5.0, |_| true);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(sheet(&doc, 2)["status"], "completed", "{doc:#}");
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("sheets [2, 3, 4] failed"), "{error}");
    assert!(
        error.ends_with(
            " — since then mozart recover marked sheet 2 completed (its validations pass); 'mozart resume told' runs what is left"
        ),
        "{error}"
    );
    // Sheet 2's duration is its attempt's, as diagnose says, not the time until the recovery.
    let human = stdout(&env.mozart(&["status", "told"]));
    let shown = human
        .lines()
        .find_map(|l| l.trim().strip_prefix("✓ Movement 2"))
        .and_then(|rest| rest.trim().strip_prefix("completed ("))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{human}"))
        .to_string();
    let diagnose = stdout(&env.mozart(&["diagnose", "told"]));
    let timeline: Vec<&str> = diagnose
        .lines()
        .find(|l| l.trim().starts_with("2  completed"))
        .unwrap_or_else(|| panic!("{diagnose}"))
        .split_whitespace()
        .collect();
    assert_eq!(shown, timeline[2], "{human}\n{diagnose}");
    // Its outcome is what happened: recovered, not a first-try success.
    assert_eq!(timeline.last(), Some(&"recovered"), "{diagnose}");
}

/// Three sheets, each sleeping `sleep` seconds, then writing `<tag>` to `out-N.txt`.
fn tagged(tag: &str, sleep: f64) -> String {
    format!(
        r#"name: tagged
workspace: ./tagged-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 3}}
prompt:
  template: |
    RUN: sleep {sleep}; echo "{tag}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

#[test]
fn a_modify_resume_still_waiting_survives_a_conductor_kill() {
    let env = TestEnv::new();
    env.start_conductor();
    let old = env.write_score("tagged", &tagged("old", 60.0));
    let new = env.write_score("tagged-v2", &tagged("new", 0.1));
    run(&env, &old, &[]);
    wait_status(&env, "tagged", 30.0, |d| {
        sheet(d, 1)["status"] == "in_progress"
    });
    let out = env.mozart(&["modify", "tagged", "-c", new.to_str().unwrap(), "--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // Paused, its pending modify waiting for sheet 1 (a minute long) to finish.
    wait_status(&env, "tagged", 30.0, |d| d["status"] == "pausing");
    crate::support::kill9_conductor(&env);
    env.start_conductor();
    // The new conductor applies the modify the user asked for: no `mozart resume` needed.
    let out = env.mozart(&["wait", "tagged", "--timeout", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    for n in 1..=3 {
        let text = std::fs::read_to_string(env.work.join(format!("tagged-ws/out-{n}.txt")))
            .unwrap_or_default();
        assert_eq!(text.trim(), "new", "sheet {n}");
    }
}

/// Run a four-sheet job and pause it once sheet 1 is done; returns its score file.
fn paused_job(env: &TestEnv, name: &str) -> std::path::PathBuf {
    let path = env.write_score(name, &mozart_tests::sleepy_shell_score(name, 4, 1.0));
    run(env, &path, &[]);
    wait_status(env, name, 30.0, |d| sheet(d, 1)["status"] == "completed");
    let out = env.mozart(&["pause", name]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = env.mozart(&["wait", name, "--timeout", "30"]);
    assert_eq!(out.status.code(), Some(4), "paused: {}", stdout(&out));
    path
}

fn assert_cancels_then_resumes(env: &TestEnv, name: &str) {
    let out = env.mozart(&["cancel", name]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("Score '{name}' cancelled.")),
        "{text}"
    );
    let doc = wait_status(env, name, 5.0, |_| true);
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    let list = stdout(&env.mozart(&["list", "--all"]));
    assert!(
        list.lines()
            .any(|l| l.starts_with(name) && l.contains("cancelled")),
        "{list}"
    );
    let out = env.mozart(&["resume", name]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed(name);
    let history = stdout(&env.mozart(&["history", name, "--sheet", "1", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(doc["total_records"], 1, "sheet 1 ran again: {doc:#}");
}

#[test]
fn a_job_paused_before_a_conductor_restart_can_be_cancelled() {
    let env = TestEnv::new();
    env.start_conductor();
    paused_job(&env, "kept");
    let out = env.stop_conductor();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.start_conductor();
    assert_cancels_then_resumes(&env, "kept");
}

#[test]
fn a_paused_job_whose_resume_was_refused_can_be_cancelled() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = paused_job(&env, "refused");
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{good}\nsheet: [\n")).unwrap();
    let out = env.mozart(&["resume", "refused"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    // The refused score changed nothing: no sheet of the paused job was cancelled for it.
    let events = stdout(&env.mozart(&["logs", "refused", "--json"]));
    assert!(events.contains("job.paused"), "{events}");
    assert!(!events.contains("sheet.cancelled"), "{events}");
    std::fs::write(&path, good).unwrap();
    assert_cancels_then_resumes(&env, "refused");
}

#[test]
fn running_a_completed_score_again_changes_nothing_about_the_job() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("again", &mozart_tests::sleepy_shell_score("again", 2, 0.1));
    run(&env, &path, &[]);
    env.wait_completed("again");
    let before = wait_status(&env, "again", 5.0, |_| true);
    let listed = |env: &TestEnv| {
        crate::harness::list_all(env)
            .into_iter()
            .find(|j| j["job_id"] == "again")
            .unwrap_or_default()
    };
    let row_before = listed(&env);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("nothing was run"), "{text}");
    let after = wait_status(&env, "again", 5.0, |_| true);
    assert_eq!(after["status"], "completed", "{after:#}");
    // Its times are those of the run that did the work.
    assert_eq!(after["timing"], before["timing"]);
    let row_after = listed(&env);
    for key in ["submitted_at", "started_at", "completed_at"] {
        assert_eq!(row_after[key], row_before[key], "{key}: {row_after:#}");
    }
    let history = stdout(&env.mozart(&["history", "again", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(doc["total_records"], 2, "{doc:#}");
}

#[test]
fn resuming_a_completed_job_names_how_to_run_it_again() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("over", &mozart_tests::sleepy_shell_score("over", 1, 0.1));
    run(&env, &path, &[]);
    env.wait_completed("over");
    let out = env.mozart(&["resume", "over"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let command = format!("mozart run {} --fresh", path.display());
    assert!(
        text.contains(&format!("To run it again from the start: {command}")),
        "{text}"
    );
    // The command it names runs the job again.
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let out = env.mozart(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("over");
    let history = stdout(&env.mozart(&["history", "over", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(doc["total_records"], 2, "{doc:#}");
}

#[test]
fn restart_yes_lets_running_sheets_finish_as_its_help_says() {
    let env = TestEnv::new();
    let help = stdout(&env.mozart(&["restart", "--help"]));
    assert!(
        help.contains("Running sheets get shutdown_timeout_seconds to finish; one still"),
        "{help}"
    );
    env.start_conductor();
    let path = env.write_score("calm", &mozart_tests::sleepy_shell_score("calm", 2, 2.0));
    run(&env, &path, &[]);
    wait_status(&env, "calm", 30.0, |d| {
        sheet(d, 1)["status"] == "in_progress"
    });
    let out = env.mozart(&["restart", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("calm");
    // Sheet 1 finished within the default shutdown timeout: one attempt, not cut short.
    let history = stdout(&env.mozart(&["history", "calm", "--sheet", "1", "--json"]));
    let doc: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(doc["total_records"], 1, "{doc:#}");
    assert_eq!(doc["records"][0]["exit_code"], 0, "{doc:#}");
}

#[test]
fn a_resume_whose_score_names_a_new_workspace_says_where_the_work_is() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = failed_job(&env, "pointed");
    let v2 = env.write_score("pointed-v2", &score("pointed", "./nowhere", 99));
    let out = env.mozart(&["resume", "pointed", "--config", v2.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let nowhere = env.work.join("nowhere");
    assert!(
        text.contains(&format!(
            "The score now names the workspace {}, which does not exist; 'pointed' ran in {}, where the work of its finished sheet 1 is.",
            nowhere.display(),
            ws.display()
        )),
        "{text}"
    );
    assert!(!nowhere.exists());
    let doc = wait_status(&env, "pointed", 5.0, |_| true);
    assert_eq!(doc["status"], "failed", "{doc:#}");
}

#[test]
fn resuming_a_paused_job_with_its_edited_score_logs_no_cancelled_sheets() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = paused_job(&env, "reread");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("echo done", "echo redone")).unwrap();
    let out = env.mozart(&["resume", "reread"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("reread");
    let last = std::fs::read_to_string(env.work.join("reread-ws/out-4.txt")).unwrap();
    assert_eq!(last.trim(), "redone");
    let events = stdout(&env.mozart(&["logs", "reread", "--json"]));
    assert!(events.contains("job.resumed"), "{events}");
    assert!(!events.contains("sheet.cancelled"), "{events}");
}

#[test]
fn recover_of_a_job_whose_workspace_is_gone_says_so() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = failed_job(&env, "vanished");
    std::fs::remove_dir_all(&ws).unwrap();
    let out = env.mozart(&["recover", "vanished"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "The workspace of 'vanished' no longer exists: {}",
            ws.display()
        )),
        "{text}"
    );
    assert!(!text.contains("could not be recovered"), "{text}");
}

#[test]
fn resuming_a_job_whose_score_file_is_gone_names_what_works() {
    let env = TestEnv::new();
    env.start_conductor();
    failed_job(&env, "unfiled");
    let path = env.work.join("unfiled.yaml");
    std::fs::rename(&path, env.work.join("elsewhere.yaml")).unwrap();
    let out = env.mozart(&["resume", "unfiled"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "The score file of 'unfiled' does not exist any more: {}",
            path.display()
        )),
        "{text}"
    );
    assert!(text.contains("mozart resume unfiled --no-reload"), "{text}");
    // What it names works.
    let out = env.mozart(&["resume", "unfiled", "--no-reload"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = wait_terminal(&env, "unfiled", 30.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert!(
        sheet(&doc, 2)["attempt_count"].as_u64() >= Some(2),
        "{doc:#}"
    );
}

#[test]
fn recover_of_a_sheet_the_job_does_not_have_says_so() {
    let env = TestEnv::new();
    env.start_conductor();
    failed_job(&env, "fewer");
    let out = env.mozart(&["recover", "fewer", "--sheet", "99"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Job 'fewer' has no sheet 99: its sheets are 1-4"),
        "{text}"
    );
}

/// Two sheets, each waiting for `go` in its workspace, then writing `out-N.txt`.
const GATED: &str = r#"name: gated
workspace: ./gated-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {size: 1, total_items: 2}
prompt:
  template: |
    RUN: while [ ! -f "{{ workspace }}/go" ]; do sleep 0.1; done; echo ok > "{{ workspace }}/out-{{ sheet_num }}.txt"
validations:
  - type: file_exists
    path: "{workspace}/out-{sheet_num}.txt"
"#;

/// A pending `modify --resume` whose new score no longer loads when it is applied (it was
/// edited meanwhile) left the job paused with only a conductor log warning saying why; its
/// `status` now says the modify was not applied, why, and what to do.
#[test]
fn a_pending_modify_that_cannot_apply_says_so_in_status() {
    let env = TestEnv::new();
    env.start_conductor();
    let old = env.write_score("gated", GATED);
    let new = env.write_score("gated-v2", GATED);
    run(&env, &old, &[]);
    wait_status(&env, "gated", 30.0, |d| {
        sheet(d, 1)["status"] == "in_progress"
    });
    let out = env.mozart(&["modify", "gated", "-c", new.to_str().unwrap(), "--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_status(&env, "gated", 30.0, |d| d["status"] == "pausing");
    // The new score breaks before the running sheet finishes.
    std::fs::write(&new, "name: gated\nsheet: [\n").unwrap();
    std::fs::write(env.work.join("gated-ws/go"), "").unwrap();
    let doc = wait_status(&env, "gated", 30.0, |d| {
        d.to_string().contains("modify --resume was not applied")
    });
    assert_eq!(doc["status"], "paused", "{doc:#}");
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("modify --resume was not applied") && error.contains("YAML"),
        "{doc:#}"
    );
    let text = stdout(&env.mozart(&["status", "gated"]));
    let line = text
        .lines()
        .find(|l| l.contains("modify --resume was not applied"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(new.to_str().unwrap()), "{line}");
    assert!(
        line.contains("the job stays paused with its old score"),
        "{line}"
    );
    assert!(
        line.contains("'mozart modify gated -c ")
            && line.contains("'mozart resume gated --no-reload'"),
        "{line}"
    );
    // Every command it names is the job's, not the new file's stem's (`mozart resume
    // gated-v2 --no-reload` answered "Score 'gated-v2' not found").
    assert!(!line.contains("resume gated-v2"), "{line}");
    // The way out it names works, and the note goes with the resume.
    let out = env.mozart(&["resume", "gated", "--no-reload"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("gated");
    let text = stdout(&env.mozart(&["status", "gated"]));
    assert!(!text.contains("modify --resume was not applied"), "{text}");
}

/// As above, for a job whose running sheet failed meanwhile: what failed it stays in front.
#[test]
fn a_pending_modify_that_cannot_apply_to_a_failed_job_keeps_its_failure() {
    let env = TestEnv::new();
    env.start_conductor();
    // The sheet writes nothing its validation wants, and is not retried.
    let failing = GATED
        .replace(
            "echo ok > \"{{ workspace }}/out-{{ sheet_num }}.txt\"",
            "true",
        )
        .replace(
            "total_items: 2}",
            "total_items: 2}\nretry: {max_retries: 0}",
        );
    assert_ne!(failing, GATED);
    let old = env.write_score("gated", &failing);
    let new = env.write_score("gated-v2", GATED);
    run(&env, &old, &[]);
    wait_status(&env, "gated", 30.0, |d| {
        sheet(d, 1)["status"] == "in_progress"
    });
    let out = env.mozart(&["modify", "gated", "-c", new.to_str().unwrap(), "--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    std::fs::write(&new, "name: gated\nsheet: [\n").unwrap();
    std::fs::write(env.work.join("gated-ws/go"), "").unwrap();
    let doc = wait_status(&env, "gated", 30.0, |d| {
        d.to_string().contains("modify --resume was not applied")
    });
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("sheets ["), "{doc:#}");
    assert!(
        error.contains(" — then modify --resume was not applied") && error.contains("YAML"),
        "{doc:#}"
    );
}

/// A sheet whose `file_modified` validation failed because its file stayed as it was.
fn stale_job(env: &TestEnv, name: &str, run_line: &str) -> std::path::PathBuf {
    let ws = env.work.join(format!("{name}-ws"));
    std::fs::create_dir_all(&ws).unwrap();
    let old = ws.join("old.txt");
    std::fs::write(&old, "old").unwrap();
    let long_ago =
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_577_836_800);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    let yaml = format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: shell
retry: {{max_retries: 1, max_completion_attempts: 0}}
sheet: {{size: 1, total_items: 1}}
prompt: {{template: "RUN: {run_line}"}}
validations: [{{type: file_modified, path: "{{workspace}}/old.txt"}}]
"#
    );
    let path = env.write_score(name, &yaml);
    run(env, &path, &[]);
    let doc = wait_terminal(env, name, 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    old
}

/// `mozart recover` judges `file_modified` as the run did (against the file as it was
/// before the sheet ran): a file the run found stale is stale to recover too, and once the
/// user updates it, recover passes it.
#[test]
fn recover_does_not_pass_a_file_modified_check_the_run_failed() {
    let env = TestEnv::new();
    env.start_conductor();
    for (name, run_line) in [
        // The validation ran and failed: what it compared against is recorded.
        ("stale", "echo attempt >> attempts.txt"),
        // The attempt failed before any validation: judged against its start.
        ("broke", "exit 1"),
    ] {
        let old = stale_job(&env, name, run_line);
        let out = env.mozart(&["recover", name]);
        let text = stdout(&out);
        assert!(
            text.contains("✗ file_modified") && text.contains("File was not modified"),
            "{name}: {text}"
        );
        assert!(!text.contains("Recovered 1 sheet"), "{name}: {text}");
        let doc = wait_status(&env, name, 5.0, |_| true);
        assert_eq!(sheet(&doc, 1)["status"], "failed", "{name}: {doc:#}");
        // The user does the work by hand: now it counts.
        std::fs::write(&old, "new").unwrap();
        let text = stdout(&env.mozart(&["recover", name]));
        assert!(text.contains("Recovered 1 sheet"), "{name}: {text}");
    }
}
