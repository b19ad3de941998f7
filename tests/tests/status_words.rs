//! What `status`, `list` and the dashboard say is what happens (issue 23, "States that are
//! not the state"): a paused job whose sheet still runs is *pausing*, a failed or cancelled
//! job's progress bar says so, durations are wall time, a skipped sheet is done.

use crate::harness;

use harness::{list_all, submit_now, wait_status};
use mozart_tests::web::{self, login, start_dashboard};
use mozart_tests::{sleepy_shell_score as score, stdout, TestEnv};

/// A dashboard page's body, logged in with the session cookie.
fn page(addr: &str, cookie: &str, path: &str) -> String {
    let r = web::http(addr, "GET", path, &[("Cookie", cookie)], "");
    assert_eq!(r.status, 200, "{path}: {}", r.raw);
    r.body
}

#[test]
fn a_paused_job_is_pausing_until_its_running_sheet_finishes() {
    let env = TestEnv::new();
    env.start_conductor();
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let path = env.write_score("slowp", &score("slowp", 2, 8.0));
    submit_now(&env, &path);
    wait_status(&env, "slowp", 30.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    let out = env.mozart(&["pause", "slowp"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // Sheet 1 still sleeps: the job is pausing, not paused, on every surface.
    let doc = harness::status(&env, "slowp");
    assert_eq!(doc["status"], "pausing", "{doc:#}");
    assert_eq!(doc["running_sheets"], 1, "{doc:#}");
    let text = stdout(&env.mozart(&["status", "slowp"]));
    assert!(text.contains("PAUSING (1 running)"), "{text}");
    let text = stdout(&env.mozart(&["list"]));
    assert!(text.contains("pausing (1 running)"), "{text}");
    let text = stdout(&env.mozart(&["status"]));
    assert!(text.contains("PAUSING (1 running)"), "{text}");
    let row = list_all(&env)
        .into_iter()
        .find(|j| j["job_id"] == "slowp")
        .expect("slowp listed");
    assert_eq!(row["status"], "pausing", "{row:#}");
    assert_eq!(row["pausing"], 1, "{row:#}");
    let jobs = page(&dash.addr, &cookie, "/jobs");
    assert!(jobs.contains("pausing (1 running)"), "{jobs}");
    let job = page(&dash.addr, &cookie, "/jobs/slowp");
    assert!(job.contains("pausing (1 running)"), "{job}");
    let mcp = web::mcp_calls(
        &env,
        &[serde_json::json!({"name": "status", "arguments": {"job_id": "slowp"}})],
    );
    let text = mcp[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(doc["status"], "pausing", "{}", mcp[0]);
    // A script waiting for the pause does not return while the sheet still works.
    let waited = env.mozart(&["wait", "slowp", "--timeout", "1"]);
    assert_ne!(waited.status.code(), Some(4), "{}", stdout(&waited));

    // Once the sheet has finished, the job is paused.
    let doc = wait_status(&env, "slowp", 30.0, |d| d["status"] == "paused");
    assert_eq!(doc["sheets"]["1"]["status"], "completed", "{doc:#}");
    assert!(doc.get("running_sheets").is_none(), "{doc:#}");
    let text = stdout(&env.mozart(&["status", "slowp"]));
    assert!(
        text.contains("PAUSED") && !text.contains("PAUSING"),
        "{text}"
    );
    let text = stdout(&env.mozart(&["list"]));
    assert!(
        text.contains("paused") && !text.contains("pausing"),
        "{text}"
    );
    let jobs = page(&dash.addr, &cookie, "/jobs");
    assert!(!jobs.contains("pausing"), "{jobs}");
    let waited = env.mozart(&["wait", "slowp", "--timeout", "10"]);
    assert_eq!(waited.status.code(), Some(4), "{}", stdout(&waited));
}

fn web_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web")
}

/// Why the browser cannot run here, if it cannot.
fn missing_browser() -> Option<String> {
    if !std::path::Path::new("/usr/bin/chromium").exists() {
        return Some("chromium is not installed".into());
    }
    if !web_dir()
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        return Some("playwright-core is not installed".into());
    }
    None
}

#[test]
fn the_dashboard_draws_each_jobs_bar_in_the_colour_and_words_of_its_state() {
    if let Some(why) = missing_browser() {
        mozart_tests::users::missing(&why, "run tests/web/setup.sh");
        return;
    }
    let env = TestEnv::new();
    env.start_conductor();
    let done = env.write_score("done3", &score("done3", 3, 0.0));
    submit_now(&env, &done);
    let failing = env.write_score(
        "fail3",
        "name: fail3\nworkspace: ./fail3-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         retry: {max_retries: 0}\nsheet: {size: 1, total_items: 3}\n\
         prompt:\n  template: \"RUN: test {{ sheet_num }} != 2\"\n",
    );
    submit_now(&env, &failing);
    let stopped = env.write_score("stop3", &score("stop3", 3, 5.0));
    submit_now(&env, &stopped);
    wait_status(&env, "done3", 30.0, |d| d["status"] == "completed");
    wait_status(&env, "fail3", 30.0, |d| d["status"] == "failed");
    wait_status(&env, "stop3", 30.0, |d| d["status"] == "running");
    assert!(env.mozart(&["cancel", "stop3"]).status.success());
    wait_status(&env, "stop3", 30.0, |d| d["status"] == "cancelled");

    let dash = start_dashboard(&env, &[]);
    let out = std::process::Command::new("node")
        .arg(web_dir().join("bars.mjs"))
        .arg(&dash.url)
        .current_dir(web_dir())
        .output()
        .expect("run node");
    let text = stdout(&out);
    assert!(
        text.lines().any(|l| l == "OK"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let row = |id: &str| {
        rows.iter()
            .find(|r| r["job"] == id)
            .unwrap_or_else(|| panic!("no row for {id}: {text}"))
    };
    // The page's own colours (style.css): green done, red failed, slate cancelled.
    let r = row("done3");
    assert_eq!(r["width"], 100, "{r}");
    assert_eq!(r["fill"], "rgb(60, 157, 93)", "{r}");
    assert_eq!(r["label"], "3/3 done", "{r}");
    let r = row("fail3");
    assert!(r["width"].as_u64().unwrap() < 100, "{r}");
    assert_eq!(r["fill"], "rgb(217, 83, 79)", "{r}");
    assert!(
        r["label"].as_str().unwrap().ends_with("done, failed"),
        "{r}"
    );
    let r = row("stop3");
    assert!(r["width"].as_u64().unwrap() < 100, "{r}");
    assert_eq!(r["fill"], "rgb(82, 96, 109)", "{r}");
    assert!(
        r["label"].as_str().unwrap().ends_with("done, cancelled"),
        "{r}"
    );
}

/// Seconds in a `format_duration` text (`4.9s`, `1m 3s`).
fn seconds(text: &str) -> f64 {
    let mut total = 0.0;
    for part in text.split_whitespace() {
        let (num, unit) = part.split_at(part.len() - 1);
        let n: f64 = num.parse().unwrap_or_else(|_| panic!("a duration: {text}"));
        total += n * match unit {
            "h" => 3600.0,
            "m" => 60.0,
            _ => 1.0,
        };
    }
    total
}

#[test]
fn a_movement_takes_the_wall_time_from_its_first_sheet_to_its_last() {
    let env = TestEnv::new();
    env.start_conductor();
    // Four voices of movement 1 run one after another (the default: no parallel sheets),
    // 1.2 s each: the movement takes ≥ 4.8 s though its longest sheet took 1.2 s.
    let yaml =
        "name: fan\nworkspace: ./fan-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
                sheet:\n  size: 1\n  total_items: 2\n  fan_out: {1: 4}\n\
                prompt:\n  template: \"RUN: sleep 1.2\"\n";
    let path = env.write_score("fan", yaml);
    submit_now(&env, &path);
    let doc = wait_status(&env, "fan", 60.0, |d| d["status"] == "completed");
    let m1 = &doc["movements"][0];
    assert_eq!(m1["sheets"], serde_json::json!([1, 2, 3, 4]), "{doc:#}");
    let wall = m1["duration_seconds"].as_f64().expect("movement duration");
    assert!(wall >= 4.7, "movement 1 took {wall}s: {doc:#}");
    let longest = (1..=4)
        .map(|n| {
            doc["sheets"][n.to_string()]["execution_duration_seconds"]
                .as_f64()
                .unwrap()
        })
        .fold(0.0, f64::max);
    assert!(longest < 3.0, "{doc:#}");

    let text = stdout(&env.mozart(&["status", "fan"]));
    let line = text
        .lines()
        .find(|l| l.contains("Movement 1"))
        .unwrap_or_else(|| panic!("{text}"));
    let shown = line
        .split("completed (")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(seconds(shown) >= 4.7, "{line}\n{text}");
    let total = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Duration: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(seconds(total) >= seconds(shown), "{text}");

    // The dashboard's elapsed time of the finished job is its run time too.
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let job = page(&dash.addr, &cookie, "/jobs/fan");
    let elapsed = job
        .split("<span class=\"label\">Elapsed</span> ")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or_else(|| panic!("{job}"));
    assert!(seconds(elapsed.trim()) >= 4.7, "{elapsed}");
}

#[test]
fn a_completed_job_with_a_skipped_sheet_is_done_everywhere() {
    let env = TestEnv::new();
    env.start_conductor();
    // Movement 1 has three voices; the stage's skip command succeeds once (`mkdir` of one
    // directory), so exactly one voice is skipped and the other two run.
    let yaml = r#"name: skippy
workspace: ./skippy-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: 2
  fan_out: {1: 3}
  skip_when_command:
    1:
      command: 'mkdir {workspace}/token'
      description: "Nothing to do"
prompt:
  template: |
    RUN: echo done
"#;
    let path = env.write_score("skippy", yaml);
    submit_now(&env, &path);
    let doc = wait_status(&env, "skippy", 30.0, |d| d["status"] == "completed");
    let skipped: Vec<u32> = (1..=4)
        .filter(|n| doc["sheets"][n.to_string()]["status"] == "skipped")
        .collect();
    assert_eq!(skipped.len(), 1, "{doc:#}");
    assert!(skipped[0] <= 3, "{doc:#}");
    assert_eq!(doc["progress"]["percent"], 100.0, "{doc:#}");
    assert_eq!(doc["movements"][0]["status"], "completed", "{doc:#}");
    let text = stdout(&env.mozart(&["status", "skippy"]));
    assert!(text.contains("100% (4/4)"), "{text}");
    let m1 = text.lines().find(|l| l.contains("Movement 1")).unwrap();
    assert!(m1.contains("completed"), "{text}");

    let out = env.mozart(&["diagnose", "skippy", "--json"]);
    let diag: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(diag["progress"]["percent"], 100.0, "{diag:#}");
    assert_eq!(diag["progress"]["skipped"], 1, "{diag:#}");
    let text = stdout(&env.mozart(&["diagnose", "skippy"]));
    assert!(
        text.contains("Sheets: 4/4 done (100.0%): 3 completed, 1 skipped"),
        "{text}"
    );

    let row = list_all(&env)
        .into_iter()
        .find(|j| j["job_id"] == "skippy")
        .unwrap();
    assert_eq!(row["status"], "completed", "{row:#}");
    let text = stdout(&env.mozart(&["list", "--all"]));
    assert!(
        text.lines()
            .any(|l| l.starts_with("skippy") && l.contains("completed")),
        "{text}"
    );
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let jobs = page(&dash.addr, &cookie, "/jobs");
    assert!(jobs.contains("<rect width=\"100\""), "{jobs}");
    assert!(jobs.contains("4&#x2f;4 done"), "{jobs}");
}

#[test]
fn a_failed_job_names_its_cause_and_a_blocked_sheet_is_not_run() {
    let env = TestEnv::new();
    // No conductor: doctor counts both of its `!` lines.
    let text = stdout(&env.mozart(&["doctor"]));
    let warnings = text
        .lines()
        .filter(|l| l.trim_start().starts_with("! "))
        .count();
    assert!(
        text.contains(&format!(
            "{warnings} {}",
            if warnings == 1 { "warning" } else { "warnings" }
        )),
        "{warnings} warnings shown:\n{text}"
    );
    env.start_conductor();
    let yaml = "name: broken\nworkspace: ./broken-ws\ninstrument: shell\n\
                retry: {max_retries: 0}\nsheet: {size: 1, total_items: 3}\n\
                prompt:\n  template: |\n    \
                RUN: test {{ sheet_num }} != 2 || { echo 'no such file: input-2.csv' >&2; exit 3; }\n";
    let path = env.write_score("broken", yaml);
    submit_now(&env, &path);
    let out = env.mozart(&["wait", "broken"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("sheet 2: "), "{text}");
    assert!(text.contains("no such file: input-2.csv"), "{text}");

    // Sheet 3 never ran: no "attempt 1" for it anywhere.
    let text = stdout(&env.mozart(&["status", "broken"]));
    assert!(text.contains("(Sheet 3, not run)"), "{text}");
    assert!(!text.contains("Sheet 3, attempt"), "{text}");
    let text = stdout(&env.mozart(&["errors", "broken"]));
    let row = text
        .lines()
        .find(|l| l.starts_with('3'))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("not run"), "{text}");

    // The dashboard calls the error's type what the CLI calls it.
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let job = page(&dash.addr, &cookie, "/jobs/broken");
    assert!(job.contains("<td>permanent</td>"), "{job}");
    assert!(!job.contains("<td>fatal</td>"), "{job}");
    assert!(job.contains("<td>not run</td>"), "{job}");

    // Settings in conductor.yaml's words, not Python's.
    let text = stdout(&env.mozart(&["config", "show"]));
    assert!(!text.contains("True") && !text.contains("None"), "{text}");
}

#[test]
fn validate_warns_when_an_instruments_program_is_not_on_the_path() {
    let env = TestEnv::new();
    let profiles = env.home.join("instruments");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("ghost.yaml"),
        "name: ghost\ndisplay_name: Ghost\nkind: cli\ncli:\n  command:\n    \
         executable: mozart-no-such-program-h23\n    prompt_flag: \"-p\"\n  output:\n    format: text\n",
    )
    .unwrap();
    let yaml = "name: ghostly\nworkspace: ./ghost-ws\ninstrument: ghost\n\
                sheet: {size: 1, total_items: 1}\nprompt:\n  template: hello\n";
    let path = env.write_score("ghostly", yaml);
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning, not an error: {text}"
    );
    assert!(text.contains("[V213] Instrument 'ghost' runs `mozart-no-such-program-h23`, which is not on this shell's PATH (no conductor is running)"), "{text}");
    assert!(text.contains("mozart instruments check ghost"), "{text}");
    assert!(
        text.contains("Validation: PASSED (with warnings)"),
        "{text}"
    );

    // `--json` reports it apart from the score's issues (upstream's list stays as upstream
    // has it): under `environment`.
    let out = env.mozart(&["validate", "--json", path.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["environment"][0]["check_id"], "V213", "{doc}");
    assert!(
        doc["issues"]
            .as_array()
            .is_some_and(|a| a.iter().all(|i| i["check_id"] != "V213")),
        "{doc}"
    );

    // An HTTP instrument that cannot run from here is warned of as well: an API this build
    // cannot call, an API whose key is not set.
    for (instrument, why) in [
        ("recursive_light", "not supported"),
        ("anthropic_api", "ANTHROPIC_API_KEY is not set"),
    ] {
        let yaml = format!(
            "name: http-{instrument}\nworkspace: ./h-ws\ninstrument: {instrument}\n\
             sheet: {{size: 1, total_items: 1}}\nprompt:\n  template: hello\n"
        );
        let path = env.write_score(&format!("http-{instrument}"), &yaml);
        let out = env
            .command(&["validate", path.to_str().unwrap()])
            .env_remove("ANTHROPIC_API_KEY")
            .output()
            .unwrap();
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(
            text.contains(&format!(
                "[V213] Instrument '{instrument}' cannot run from here ({why}"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("mozart instruments check {instrument}")),
            "{text}"
        );
        assert!(text.contains("(with warnings)"), "{text}");
    }
    let path = env.write_score(
        "http-keyed",
        "name: http-keyed\nworkspace: ./h-ws\ninstrument: anthropic_api\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: hello\n",
    );
    let out = env
        .command(&["validate", path.to_str().unwrap()])
        .env("ANTHROPIC_API_KEY", "sk-ant-validate-test")
        .output()
        .unwrap();
    assert!(!stdout(&out).contains("V213"), "{}", stdout(&out));

    // The shell example needs no program: no V213, and a note alone is not a warning.
    let path = env.write_score("plain", &score("plain", 1, 0.0));
    let text = stdout(&env.mozart(&["validate", path.to_str().unwrap()]));
    assert!(!text.contains("V213"), "{text}");
    assert!(!text.contains("(with warnings)"), "{text}");
}

#[test]
fn run_does_not_call_a_job_that_starts_at_once_queued() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("now", &score("now", 1, 0.0));
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("Job queued"), "{text}");
    assert!(
        text.contains("Job started (up to 15 jobs run at once)"),
        "{text}"
    );
}

#[test]
fn run_says_queued_only_when_the_job_waits_for_a_slot() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "max_concurrent_jobs: 1\n").unwrap();
    env.start_conductor();
    let first = env.write_score("first", &score("first", 1, 20.0));
    let out = env.mozart(&["run", first.to_str().unwrap(), "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["message"], "Job started (concurrency limit: 1)",
        "{doc:#}"
    );
    let second = env.write_score("second", &score("second", 1, 0.0));
    let out = env.mozart(&["run", second.to_str().unwrap(), "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["message"], "Job queued (concurrency limit: 1)",
        "{doc:#}"
    );
    // In words too (it said "Job accepted …" when the answer had seen the job wait).
    let third = env.write_score("third", &score("third", 1, 0.0));
    let out = env.mozart(&["-q", "run", third.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("Job queued: waiting for a job slot (up to 1 job runs at once)"),
        "{text}"
    );
    env.mozart(&["cancel", "third"]);
    env.mozart(&["cancel", "second"]);
    env.mozart(&["cancel", "first"]);
}

#[test]
fn running_a_completed_unchanged_score_again_says_nothing_was_run() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("twice", &score("twice", 2, 0.0));
    let file = path.to_str().unwrap();
    assert_eq!(env.mozart(&["run", file]).status.code(), Some(0));
    assert_eq!(env.mozart(&["wait", "twice"]).status.code(), Some(0));

    let out = env.mozart(&["run", file]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Score already completed: twice"), "{text}");
    assert!(text.contains("nothing was run"), "{text}");
    assert!(text.contains("--fresh"), "{text}");
    assert!(!text.contains("Monitor with"), "{text}");
    assert!(!text.contains("Score submitted"), "{text}");

    let out = env.mozart(&["run", file, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["status"], "accepted", "{doc:#}");
    assert_eq!(doc["nothing_to_run"], true, "{doc:#}");
    let message = doc["message"].as_str().unwrap_or_default();
    assert!(!message.contains("queued"), "{doc:#}");
    assert!(message.contains("nothing was run"), "{doc:#}");

    // --fresh runs it again, and says it started.
    let out = env.mozart(&["run", file, "--fresh", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["message"], "Job started (concurrency limit: 15)",
        "{doc:#}"
    );
    assert!(doc.get("nothing_to_run").is_none(), "{doc:#}");
}

/// A completed score whose prompt is in `prompt.template_file`: editing only that file
/// changes the prompt, so running the score again runs it (it said "the score has not
/// changed: nothing was run").
#[test]
fn running_a_completed_score_again_after_editing_its_template_file_runs_it() {
    let env = TestEnv::new();
    env.start_conductor();
    std::fs::write(
        env.work.join("p.j2"),
        "RUN: echo one >> {{ workspace }}/log.txt\n",
    )
    .unwrap();
    let path = env.write_score(
        "tf",
        "name: tf\nworkspace: ./tf-ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\nprompt:\n  template_file: p.j2\n",
    );
    let file = path.to_str().unwrap();
    assert_eq!(env.mozart(&["run", file]).status.code(), Some(0));
    assert_eq!(env.mozart(&["wait", "tf"]).status.code(), Some(0));
    // Unchanged: nothing runs.
    let out = env.mozart(&["run", file]);
    assert!(stdout(&out).contains("nothing was run"), "{}", stdout(&out));
    std::fs::write(
        env.work.join("p.j2"),
        "RUN: echo two >> {{ workspace }}/log.txt\n",
    )
    .unwrap();
    let out = env.mozart(&["run", file]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("nothing was run"), "{text}");
    assert_eq!(env.mozart(&["wait", "tf"]).status.code(), Some(0));
    let log = std::fs::read_to_string(env.work.join("tf-ws/log.txt")).unwrap();
    assert!(log.contains("two"), "the edited prompt ran: {log}");
}

#[test]
fn the_dashboard_list_and_job_page_give_a_resumed_job_the_same_elapsed_time() {
    let env = TestEnv::new();
    env.start_conductor();
    // Fails until `go` exists; resumed two seconds later, it completes.
    let yaml = "name: again\nworkspace: ./again-ws\ninstrument: shell\n\
                retry: {max_retries: 0}\nsheet: {size: 1, total_items: 1}\n\
                prompt:\n  template: \"RUN: test -f '{{ workspace }}/../go'\"\n";
    let path = env.write_score("again", yaml);
    submit_now(&env, &path);
    wait_status(&env, "again", 30.0, |d| d["status"] == "failed");
    std::thread::sleep(std::time::Duration::from_secs(2));
    std::fs::write(env.work.join("go"), "").unwrap();
    assert!(env.mozart(&["resume", "again"]).status.success());
    wait_status(&env, "again", 30.0, |d| d["status"] == "completed");

    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let job = page(&dash.addr, &cookie, "/jobs/again");
    let on_page = job
        .split("<span class=\"label\">Elapsed</span> ")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or_else(|| panic!("{job}"))
        .trim()
        .to_string();
    let jobs = page(&dash.addr, &cookie, "/jobs");
    let row = jobs
        .split("data-job=\"again\"")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("{jobs}"));
    let in_list = row
        .rsplit("<td>")
        .next()
        .and_then(|c| c.split('<').next())
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(seconds(&on_page) >= 2.0, "{on_page}");
    assert_eq!(in_list, on_page, "list row: {row}");
}

#[test]
fn a_cancelled_jobs_timeline_ends_when_the_job_ended() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("stopt", &score("stopt", 3, 6.0));
    submit_now(&env, &path);
    wait_status(&env, "stopt", 30.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(env.mozart(&["cancel", "stopt"]).status.success());
    wait_status(&env, "stopt", 30.0, |d| d["status"] == "cancelled");
    // Time passes after the end: the pictures of a finished job must not grow with it.
    std::thread::sleep(std::time::Duration::from_secs(4));

    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let job = page(&dash.addr, &cookie, "/jobs/stopt");
    let elapsed = job
        .split("<span class=\"label\">Elapsed</span> ")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or_else(|| panic!("{job}"));
    let axis = |label: &str| {
        let svg = job
            .split(&format!("aria-label=\"{label}\""))
            .nth(1)
            .and_then(|r| r.split("</svg>").next())
            .unwrap_or_else(|| panic!("no {label} chart: {job}"));
        // The time axis' end is the chart's last `<text …>N.Ns</text>`.
        svg.rsplit("\">")
            .find_map(|t| {
                let text = t.split("</text>").next()?;
                text.strip_suffix('s')?.parse::<f64>().ok()
            })
            .unwrap_or_else(|| panic!("no time axis in {svg}"))
    };
    let job_took = seconds(elapsed.trim());
    for label in ["Sheet timeline", "Progress and cost"] {
        let shown = axis(label);
        assert!(
            shown <= job_took + 1.0,
            "{label} spans {shown}s, the job took {elapsed}"
        );
    }
}

#[test]
fn error_hints_lead_to_the_cause_of_a_missing_program() {
    let env = TestEnv::new();
    let profiles = env.home.join("instruments");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("ghost.yaml"),
        "name: ghost\ndisplay_name: Ghost\nkind: cli\ncli:\n  command:\n    \
         executable: mozart-no-such-program-h23\n    prompt_flag: \"-p\"\n  output:\n    format: text\n",
    )
    .unwrap();
    env.start_conductor();
    let yaml = "name: ghostly\nworkspace: ./ghost-ws\ninstrument: ghost\n\
                retry: {max_retries: 0}\nsheet: {size: 1, total_items: 2}\n\
                prompt:\n  template: hello\n";
    let path = env.write_score("ghostly", yaml);
    submit_now(&env, &path);
    let doc = wait_status(&env, "ghostly", 30.0, |d| d["status"] == "failed");
    assert_eq!(doc["sheets"]["1"]["error_code"], "E505", "{doc:#}");
    // The message's command names this instrument, ready to paste (not a placeholder).
    let text = stdout(&env.mozart(&["errors", "ghostly"]));
    assert!(text.contains("mozart instruments check ghost)"), "{text}");
    assert!(!text.contains("<instrument name>"), "{text}");

    // The dashboard's and MCP's hint for it: the program, not credentials and network.
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let job = page(&dash.addr, &cookie, "/jobs/ghostly");
    assert!(
        job.contains("program was not found on the conductor&#x27;s PATH")
            || job.contains("program was not found on the conductor's PATH"),
        "{job}"
    );
    assert!(!job.contains("check credentials and network"), "{job}");
    // Sheet 2 never ran (blocked by sheet 1): its hint names this job, not a placeholder.
    assert!(
        job.contains("Run mozart diagnose ghostly for details."),
        "{job}"
    );
    assert!(!job.contains("diagnose &lt;"), "{job}");
    let mcp = web::mcp_calls(
        &env,
        &[serde_json::json!({"name": "errors", "arguments": {"job_id": "ghostly"}})],
    );
    let text = mcp[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let hint = doc["errors"][0]["hint"].as_str().unwrap_or("");
    assert!(
        hint.contains("program was not found") && hint.contains("mozart resume ghostly"),
        "{}",
        mcp[0]
    );
}

#[test]
fn a_sheet_of_a_few_milliseconds_did_run_in_every_view() {
    let env = TestEnv::new();
    env.start_conductor();
    // `true` takes a few milliseconds: "0.0s" would read as "never ran". A loaded machine
    // can make one sheet slower than the 50 ms this is about, so run jobs of them until a
    // sheet of one took less, and check that job; none in 40 sheets is a failure, not a pass.
    let mut quick = None;
    for round in 1..=8 {
        let name = format!("quickie{round}");
        let yaml = format!(
            "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
             pause_between_sheets_seconds: 0\nsheet: {{size: 1, total_items: 5}}\n\
             prompt:\n  template: \"RUN: true\"\n"
        );
        let path = env.write_score(&name, &yaml);
        submit_now(&env, &path);
        let doc = wait_status(&env, &name, 30.0, |d| d["status"] == "completed");
        let fast = (1..=5).any(|n| {
            doc["sheets"][n.to_string()]["execution_duration_seconds"]
                .as_f64()
                .is_some_and(|d| d > 0.0 && d < 0.05)
        });
        if fast {
            quick = Some(name);
            break;
        }
        eprintln!("no sheet of {name} under 50 ms: {doc:#}");
    }
    let Some(quick) = quick else {
        panic!("no sheet running `true` took under 50 ms in 8 jobs of 5: the machine is too loaded to check how such a sheet's time reads");
    };
    let quick = quick.as_str();
    for args in [
        vec!["status", quick],
        vec!["history", quick],
        vec!["diagnose", quick],
    ] {
        let text = stdout(&env.mozart(&args));
        assert!(!text.contains(" 0.0s"), "{args:?}:\n{text}");
        assert!(text.contains("<0.1s"), "{args:?}:\n{text}");
    }
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let job = page(&dash.addr, &cookie, &format!("/jobs/{quick}"));
    assert!(!job.contains(">0.0s<"), "{job}");
}

/// A second `pause` of a job still pausing says it is pausing (as `status` does), not that
/// it is paused.
#[test]
fn pausing_again_a_pausing_job_says_it_is_pausing() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("twice", &score("twice", 2, 8.0));
    submit_now(&env, &path);
    wait_status(&env, "twice", 30.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    assert!(env.mozart(&["pause", "twice"]).status.success());
    let again = env.mozart(&["pause", "twice"]);
    let text = format!(
        "{}{}",
        stdout(&again),
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(again.status.code(), Some(1), "{text}");
    assert!(
        text.contains("is already pausing: 1 running sheet to finish its attempt")
            && !text.contains("is paused, not running"),
        "{text}"
    );
    let status = stdout(&env.mozart(&["status", "twice"]));
    assert!(status.contains("PAUSING (1 running)"), "{status}");
}

/// Whether a completed score "changed" is its text, not its file's time: an edit made the
/// moment the run ended starts the job over (it was ignored for good: the time was within
/// the run's last second), and a `touch` alone changes nothing.
#[test]
fn a_completed_score_edited_at_once_runs_again_and_a_touch_alone_does_not() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("edits-ws");
    let yaml = |v: &str| {
        format!(
            "name: edits\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
             prompt:\n  template: \"RUN: echo {v} > {{{{ workspace }}}}/out.txt\"\n",
            ws.display()
        )
    };
    let path = env.write_score("edits", &yaml("v1"));
    let file = path.to_str().unwrap();
    assert_eq!(env.mozart(&["run", file]).status.code(), Some(0));
    assert_eq!(env.mozart(&["wait", "edits"]).status.code(), Some(0));
    std::fs::write(&path, yaml("v2")).unwrap();
    let out = env.mozart(&["run", file]);
    let text = stdout(&out);
    assert!(!text.contains("already completed"), "{text}");
    assert_eq!(env.mozart(&["wait", "edits"]).status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(ws.join("out.txt")).unwrap(), "v2\n");
    // The same text written again (a touch): nothing to run.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&path, yaml("v2")).unwrap();
    let out = env.mozart(&["run", file]);
    let text = stdout(&out);
    assert!(text.contains("Score already completed: edits"), "{text}");
}
