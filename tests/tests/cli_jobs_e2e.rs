//! Job commands against a real conductor running real scores through the built-in `shell`
//! instrument (cli.md §3.2–3.5, §4.1–4.3).

use std::path::Path;
use std::time::{Duration, Instant};

use mozart_tests::{sleepy_shell_score as score, stdout, TestEnv};
use serde_json::{json, Value};

/// Submit through the protocol directly, so these tests do not depend on `mozart run`.
fn submit(env: &TestEnv, path: &Path) -> Value {
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    client
        .call_value(
            "job.submit",
            json!({"config_path": path.display().to_string()}),
        )
        .unwrap()
}

fn status_json(env: &TestEnv, id: &str) -> Value {
    let out = env.mozart(&["status", id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "status {id}: {}", stdout(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status {id} --json is JSON: {e}: {}", stdout(&out)))
}

/// Poll `mozart status <id> --json` until `pred` holds (or panic after `secs`).
fn wait_for(env: &TestEnv, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let doc = status_json(env, id);
        if pred(&doc) {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting on {id}; last status: {doc:#}\nlog:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn completed_score_shows_in_status_list_and_overview() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("quick", &score("quick", 2, 0.0));
    let response = submit(&env, &path);
    assert_eq!(response["status"], "accepted", "{response}");
    assert_eq!(response["job_id"], "quick");

    let doc = wait_for(&env, "quick", 60, |d| d["status"] == "completed");
    assert_eq!(doc["job_id"], "quick");
    assert_eq!(doc["job_name"], "quick");
    assert_eq!(
        doc["progress"],
        json!({"completed": 2, "total": 2, "percent": 100.0})
    );
    for n in ["1", "2"] {
        assert_eq!(doc["sheets"][n]["status"], "completed", "{doc:#}");
        assert_eq!(doc["sheets"][n]["display_status"], "completed");
        assert_eq!(doc["sheets"][n]["validation_passed"], true);
    }
    assert_eq!(doc["error"], Value::Null);
    assert!(doc["recent_errors"].as_array().unwrap().is_empty());

    let out = env.mozart(&["status", "quick"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("  ID: quick\n  Status: COMPLETED\n"),
        "{text}"
    );
    assert!(text.contains("100% (2/2)"), "{text}");
    // The conductor records a movement per sheet, so the view groups by movement.
    assert!(
        text.contains("\nMovements\n  ✓ Movement 1    completed ("),
        "{text}"
    );
    assert!(text.contains("\n  ✓ Movement 2    completed ("), "{text}");
    assert!(!text.contains('\x1b'), "no colour when stdout is a pipe");

    let out = env.mozart(&["list"]);
    assert_eq!(
        stdout(&out),
        "No active scores. Use --all to see score history.\n"
    );
    let out = env.mozart(&["list", "--all"]);
    let text = stdout(&out);
    assert!(
        text.starts_with("SCORE ID   STATUS      WORKSPACE"),
        "{text}"
    );
    assert!(text.contains("quick      completed   "), "{text}");
    assert!(text.ends_with("\n1 score\n"), "{text}");
    let out = env.mozart(&["list", "--json", "--status", "COMPLETED"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(list["total"], 1);
    assert_eq!(list["jobs"][0]["job_id"], "quick");

    let out = env.mozart(&["status"]);
    let text = stdout(&out);
    assert!(
        text.starts_with("Mozart Conductor: RUNNING  (uptime "),
        "{text}"
    );
    assert!(
        text.contains("\nRECENT\n  quick                    COMPLETED  "),
        "{text}"
    );
    assert!(text.ends_with("No active scores. Use 'mozart status <score>' for details.\n"));
    let out = env.mozart(&["status", "--json"]);
    let overview: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(overview["conductor"], "running");
    assert_eq!(overview["recent_count"], 1);
    assert_eq!(overview["recent"][0]["job_id"], "quick");

    // A finished score can be neither paused nor cancelled.
    let out = env.mozart(&["pause", "quick"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.starts_with("Error [E502]: "), "{text}");
    assert!(
        text.contains("Only running scores can be paused."),
        "{text}"
    );
    let out = env.mozart(&["cancel", "quick"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("Error: Score 'quick' not found or already stopped.\n"));

    let out = env.mozart(&["status", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "Error: Score not found: nosuch\n\nHints:\n  - Run 'mozart list' to see available scores.\n"
    );

    let out = env.mozart(&["clear", "--yes", "--score", "quick"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(stdout(&out), "Cleared 1 score.\n");
    let out = env.mozart(&["list", "--all"]);
    assert_eq!(stdout(&out), "No scores found.\n");
}

#[test]
fn pause_resume_and_cancel_a_running_score() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("slow", &score("slow", 6, 1.0));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    wait_for(&env, "slow", 30, |d| d["status"] == "running");

    let out = env.mozart(&["pause", "slow"]);
    assert_eq!(
        stdout(&out),
        "Pause signal sent to score 'slow'.\nNo new sheet starts; running sheets finish their attempt first ('mozart status slow' says pausing until then).\n\nTo resume: mozart resume slow\nTo resume with new config: mozart resume slow --config new.yaml\n"
    );
    assert_eq!(out.status.code(), Some(0));
    let paused = wait_for(&env, "slow", 30, |d| d["status"] == "paused");
    let done = paused["progress"]["completed"].as_u64().unwrap();
    assert!(done < 6, "paused before the end: {paused:#}");

    let out = env.mozart(&["resume", "slow"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("Resume accepted for score 'slow'.\n"),
        "{text}"
    );
    assert!(
        text.ends_with("\nMonitor progress: mozart status slow\n"),
        "{text}"
    );
    wait_for(&env, "slow", 30, |d| d["status"] == "running");

    let out = env.mozart(&["cancel", "slow", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc, json!({"success": true, "job_id": "slow"}));
    let out = env.mozart(&["list", "--all", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["jobs"][0]["status"], "cancelled", "{list:#}");

    let out = env.mozart(&["resume", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("not found"), "{text}");
    assert!(
        text.ends_with("Hints:\n  - Run 'mozart list' to see available scores.\n"),
        "{text}"
    );
}

/// Resuming a cancelled job whose score file has since been broken names the way on that
/// does not move the job: `--no-reload`, which resumes with the score as it was submitted.
#[test]
fn resume_of_a_broken_score_points_to_no_reload_which_works() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("broke", &score("broke", 4, 0.5));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    wait_for(&env, "broke", 30, |d| d["status"] == "running");
    let out = env.mozart(&["cancel", "broke"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_for(&env, "broke", 30, |d| d["status"] == "cancelled");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("bogus_field: 1\n");
    std::fs::write(&path, text).unwrap();

    let out = env.mozart(&["resume", "broke"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("bogus_field"), "{text}");
    assert!(text.contains("mozart resume broke --no-reload"), "{text}");

    let out = env.mozart(&["resume", "broke", "--no-reload"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let done = wait_for(&env, "broke", 60, |d| d["status"] == "completed");
    assert_eq!(done["progress"]["completed"], 4, "{done:#}");
}

#[test]
fn watch_exits_once_the_score_completes() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("watched", &score("watched", 2, 0.0));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    let out = env.mozart(&["status", "watched", "--watch", "--interval", "1"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("Watching score watched (Ctrl+C to stop)\n"),
        "{text}"
    );
    assert!(
        text.contains("| Refreshing every 1s | Press Ctrl+C to stop"),
        "{text}"
    );
    assert!(
        text.ends_with("\nScore completed - exiting watch mode\n"),
        "{text}"
    );
}

#[test]
fn watch_json_prints_one_json_document_per_line() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("ndjson", &score("ndjson", 3, 0.5));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    let out = env.mozart(&["status", "ndjson", "--watch", "--json", "--interval", "1"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty(), "no output");
    for line in &lines {
        let doc: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON document per line ({e}): {line:?}\n{text}"));
        assert!(doc.is_object(), "{line}");
    }
    let last: Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(last["status"], "completed", "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Watching score ndjson"), "{err}");
}

#[test]
fn mozart_run_submits_and_reports() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("viarun", &score("viarun", 1, 0.0));
    let out = env.mozart(&["run", path.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["job_id"], "viarun");
    assert_eq!(doc["status"], "accepted");
    let out = env.mozart(&["-q", "run", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("Score submitted to conductor: viarun") || text.contains("already"),
        "{text}"
    );
}

#[test]
fn mozart_run_reports_a_score_that_fails_at_once() {
    let env = TestEnv::new();
    env.start_conductor();
    let text =
        score("doomed", 1, 0.0).replace("RUN: sleep 0", "RUN: echo 'cannot work here' >&2; exit 3");
    let text = format!("{text}retry:\n  max_retries: 0\n");
    let path = env.write_score("doomed", &text);
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    let all = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    // Accepted is exit 0 however fast the job fails (`mozart wait` gives the outcome); the
    // failure and its cause are reported.
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains("The score has already failed: doomed"),
        "{all}"
    );
    assert!(all.contains("Sheet 1 failed"), "{all}");
    assert!(all.contains("cannot work here"), "{all}");
    assert!(all.contains("mozart diagnose doomed"), "{all}");
    // With --json the answer says so too.
    let out = env.mozart(&["run", path.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(doc["job_id"], "doomed", "{doc}");
    assert_eq!(doc["status"], "accepted", "{doc}");
    assert_eq!(doc["job_status"], "failed", "{doc}");
    assert_eq!(doc["failure"]["sheet_num"], 1, "{doc}");
}

#[test]
fn the_conductors_allocator_setting_stays_out_of_the_instruments_environment() {
    let env = TestEnv::new();
    env.start_conductor();
    let text =
        score("envdump", 1, 0.0).replace("RUN: sleep 0", "RUN: env > \"{{ workspace }}/env.txt\"");
    let path = env.write_score("envdump", &text);
    submit(&env, &path);
    wait_for(&env, "envdump", 30, |d| d["status"] == "completed");
    let dump = std::fs::read_to_string(env.work.join("envdump-ws/env.txt")).unwrap();
    assert!(dump.contains("PATH="), "{dump}");
    assert!(!dump.contains("MALLOC_ARENA_MAX"), "{dump}");
    assert!(!dump.contains("MOZART_MALLOC_ARENA_MAX_SET"), "{dump}");
}

/// Jobs of an earlier conductor run are listed from the registry; `clear` removes them from
/// the listing at once (the conductor keeps that part of `job.list` between polls).
#[test]
fn jobs_of_an_earlier_run_are_listed_and_cleared() {
    let env = TestEnv::new();
    env.start_conductor();
    for name in ["old-a", "old-b"] {
        let path = env.write_score(name, &score(name, 1, 0.0));
        assert_eq!(submit(&env, &path)["status"], "accepted");
        wait_for(&env, name, 30, |d| d["status"] == "completed");
    }
    env.stop_conductor();
    env.start_conductor();

    let list = |env: &TestEnv| -> Vec<String> {
        let out = env.mozart(&["list", "--all", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut ids: Vec<String> = list["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["job_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(list(&env), ["old-a", "old-b"]);
    // Listed again (now from what the conductor kept), then a new job joins the listing.
    assert_eq!(list(&env), ["old-a", "old-b"]);
    let path = env.write_score("new", &score("new", 1, 0.0));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    wait_for(&env, "new", 30, |d| d["status"] == "completed");
    assert_eq!(list(&env), ["new", "old-a", "old-b"]);

    let out = env.mozart(&["clear", "--yes", "--score", "old-a"]);
    assert_eq!(stdout(&out), "Cleared 1 score.\n");
    assert_eq!(list(&env), ["new", "old-b"]);
    let out = env.mozart(&["clear", "--yes"]);
    assert_eq!(stdout(&out), "Cleared 2 scores.\n");
    assert!(list(&env).is_empty());
}

/// `clear --status paused` clears a paused job a restart left paused, and names — instead of
/// skipping in silence — one paused while this conductor runs (which would resume it): it
/// clears once cancelled.
#[test]
fn clear_status_paused_clears_paused_jobs_or_says_why_not() {
    let env = TestEnv::new();
    env.start_conductor();
    for name in ["held", "left"] {
        let path = env.write_score(name, &score(name, 3, 1.0));
        assert_eq!(submit(&env, &path)["status"], "accepted");
        wait_for(&env, name, 30, |d| d["status"] == "running");
        let out = env.mozart(&["pause", name]);
        assert!(out.status.success(), "{}", stdout(&out));
        wait_for(&env, name, 30, |d| d["status"] == "paused");
        if name == "held" {
            let out = env.mozart(&["clear", "--status", "paused", "--yes"]);
            let text = stdout(&out);
            assert!(out.status.success(), "{text}");
            assert!(
                text.contains("Not cleared: held — it was paused while this conductor runs"),
                "{text}"
            );
            assert!(!text.contains("No matching scores"), "{text}");
            let out = env.mozart(&["cancel", "held"]);
            assert!(out.status.success(), "{}", stdout(&out));
            wait_for(&env, "held", 30, |d| d["status"] == "cancelled");
            let out = env.mozart(&["clear", "--status", "cancelled", "--yes"]);
            assert_eq!(stdout(&out), "Cleared 1 score.\n");
        }
    }
    env.stop_conductor();
    env.start_conductor();
    let out = env.mozart(&["clear", "--status", "paused", "--yes"]);
    assert_eq!(stdout(&out), "Cleared 1 score.\n");
    let out = env.mozart(&["list", "--all", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["jobs"], json!([]), "{list:#}");
}

/// `mozart run` of a job this conductor holds paused (or still pausing) is refused with the
/// way on — it registered a second copy the baton refused, leaving the job "running" with
/// nothing running, for ever — and the job resumes as before.
#[test]
fn running_a_paused_job_again_is_refused_with_the_way_on() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("held", &score("held", 3, 1.5));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    wait_for(&env, "held", 30, |d| d["status"] == "running");
    let out = env.mozart(&["pause", "held"]);
    assert!(out.status.success(), "{}", stdout(&out));
    // Still pausing (its first sheet runs on), then paused: refused both times.
    for _ in ["pausing", "paused"] {
        let out = env.mozart(&["run", path.to_str().unwrap()]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("Job 'held' is paused. Resume it: mozart resume held"),
            "{text}"
        );
        assert!(
            text.contains("See where it stands: mozart status held"),
            "{text}"
        );
        assert!(!text.contains("declined this submission"), "{text}");
        wait_for(&env, "held", 30, |d| d["status"] == "paused");
    }
    // The modify the refusal names is a command that runs as given (SCORE: the score's path).
    let text = stdout(&env.mozart(&["run", path.to_str().unwrap()]));
    let named = text
        .split("(with an edited score: ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("{text}"));
    let words: Vec<&str> = named
        .split_whitespace()
        .map(|w| {
            if w == "SCORE" {
                path.to_str().unwrap()
            } else {
                w
            }
        })
        .collect();
    assert_eq!(words.first(), Some(&"mozart"), "{text}");
    let out = env.mozart(&words[1..]);
    assert!(out.status.success(), "{named}: {}", stdout(&out));
    let out = env.mozart(&["wait", "held"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// A job paused under an earlier conductor stays paused across a restart, not loaded: `mozart
/// run` of its score then took it over ("Job started", its score replaced, the pause
/// gone). It is refused as before the restart, and the ways the refusal names still work.
#[test]
fn running_a_job_paused_before_a_restart_is_refused_too() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("held", &score("held", 3, 1.5));
    assert_eq!(submit(&env, &path)["status"], "accepted");
    wait_for(&env, "held", 30, |d| d["status"] == "running");
    let out = env.mozart(&["pause", "held"]);
    assert!(out.status.success(), "{}", stdout(&out));
    wait_for(&env, "held", 30, |d| d["status"] == "paused");
    let out = env.mozart(&["restart", "--yes"]);
    assert!(out.status.success(), "{}", stdout(&out));
    wait_for(&env, "held", 30, |d| d["status"] == "paused");
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Job 'held' is paused. Resume it: mozart resume held"),
        "{text}"
    );
    let doc = wait_for(&env, "held", 30, |d| d["status"] == "paused");
    assert_eq!(doc["status"], "paused", "still paused: {doc:#}");
    // Resuming it goes on from its checkpoint.
    let out = env.mozart(&["resume", "held"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = env.mozart(&["wait", "held"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// `mozart resume` right after `mozart cancel` does not run the sheet beside its cancelled
/// attempt, still in its SIGTERM grace (a child that ignores SIGTERM keeps it alive the
/// whole grace): the new run starts once the old attempt's processes are gone.
#[test]
fn a_resume_right_after_a_cancel_waits_for_the_cancelled_attempt_to_end() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("stub-ws");
    let yaml = format!(
        "name: stub\nworkspace: {ws}\ninstrument: shell\n\
         sheet: {{size: 1, total_items: 1}}\n\
         prompt:\n  template: |\n    RUN: echo \"start $(date +%s.%N)\" >> \"{{{{ workspace }}}}/ledger\"\n    RUN: trap '' TERM; sh -c \"trap '' TERM; sleep 20\"; echo \"end $(date +%s.%N)\" >> \"{{{{ workspace }}}}/ledger\"\n",
        ws = ws.display()
    );
    let path = env.write_score("stub", &yaml);
    assert_eq!(submit(&env, &path)["status"], "accepted");
    let ledger = || std::fs::read_to_string(ws.join("ledger")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ledger().contains("start") {
        assert!(Instant::now() < deadline, "the sheet never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = env.mozart(&["cancel", "stub"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let cancelled_at = Instant::now();
    let out = env.mozart(&["resume", "stub"]);
    assert!(out.status.success(), "{}", stdout(&out));
    // The cancelled attempt's processes are gone before the sheet starts again.
    let deadline = Instant::now() + Duration::from_secs(40);
    while ledger().matches("start").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the resumed sheet never started: {}",
            ledger()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let sleepers = crate::support::processes_under(&ws, &[])
        .into_iter()
        .filter(|(_, cmd)| cmd.starts_with("sleep"))
        .count();
    assert!(
        sleepers <= 1,
        "{sleepers} `sleep 20` of the sheet run side by side, {:.1} s after the cancel",
        cancelled_at.elapsed().as_secs_f64()
    );
    assert!(
        cancelled_at.elapsed() >= Duration::from_secs(4),
        "the sheet ran again {:.1} s after the cancel, inside the cancelled attempt's 5 s grace",
        cancelled_at.elapsed().as_secs_f64()
    );
    let out = env.mozart(&["cancel", "stub"]);
    assert!(out.status.success(), "{}", stdout(&out));
}
