//! Issue 23, "every word true": settings that do what they say, lists that say when they are
//! cut, commands a script can chain on, failures that say why. Each runs the real `mozart`
//! binary against a real conductor; sheets run on the built-in `shell` instrument.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness;

use harness::{status, submit_now, wait_status};
use mozart_tests::{alive, mozart_bin, stdout, TestEnv};
use serde_json::{json, Value};

/// One sheet that writes `start` (the time it began, in seconds) and, after `sleep`
/// seconds, `end` into its workspace: the real times a job had a sheet running.
fn timed_score(name: &str, sleep: f64) -> String {
    format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: shell
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: date +%s.%N > "{{{{ workspace }}}}/start"
    RUN: sleep {sleep}
    RUN: date +%s.%N > "{{{{ workspace }}}}/end"
validations:
  - type: file_exists
    path: "{{workspace}}/end"
"#
    )
}

/// `sheets` sheets one after another, each sleeping `sleep` seconds.
fn long_score(name: &str, sheets: u32, sleep: f64) -> String {
    mozart_tests::sleepy_shell_score(name, sheets, sleep)
}

fn read_time(path: &Path) -> f64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// The `[start, end]` each job's sheet ran.
fn intervals(env: &TestEnv, names: &[String]) -> Vec<(f64, f64)> {
    names
        .iter()
        .map(|n| {
            let ws = env.work.join(format!("{n}-ws"));
            (read_time(&ws.join("start")), read_time(&ws.join("end")))
        })
        .collect()
}

/// The most intervals that were open at one instant.
fn max_overlap(spans: &[(f64, f64)]) -> usize {
    spans
        .iter()
        .map(|(at, _)| spans.iter().filter(|(s, e)| s <= at && at < e).count())
        .max()
        .unwrap_or(0)
}

/// Submit `count` timed jobs named `<prefix>-<i>` and wait until all completed; their
/// names in submission order.
fn run_timed_jobs(env: &TestEnv, prefix: &str, count: usize, sleep: f64) -> Vec<String> {
    let names: Vec<String> = (1..=count).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        let path = env.write_score(name, &timed_score(name, sleep));
        submit_now(env, &path);
    }
    for name in &names {
        wait_status(env, name, 120.0, |d| d["status"] == "completed");
    }
    names
}

fn set_max_jobs(env: &TestEnv, n: u32) {
    std::fs::write(
        env.home.join("conductor.yaml"),
        format!("max_concurrent_jobs: {n}\n"),
    )
    .unwrap();
}

#[test]
fn max_concurrent_jobs_caps_the_jobs_running_at_once_and_queues_the_rest_in_order() {
    // The defaults first: 5 jobs submitted together run side by side (limit 15).
    let free = TestEnv::new();
    free.start_conductor();
    let names = run_timed_jobs(&free, "free", 5, 2.0);
    let overlap = max_overlap(&intervals(&free, &names));
    assert!(
        overlap > 2,
        "with the default limit they overlap: {overlap}"
    );
    drop(free);

    let env = TestEnv::new();
    set_max_jobs(&env, 2);
    env.start_conductor();
    let names: Vec<String> = (1..=5).map(|i| format!("cap-{i}")).collect();
    for name in &names {
        let path = env.write_score(name, &timed_score(name, 2.0));
        submit_now(&env, &path);
    }
    // The waiting ones say so, and why.
    let queued = wait_status(&env, "cap-5", 30.0, |d| d["status"] == "queued");
    assert_eq!(
        queued["waiting_reason"], "waiting for a job slot (max_concurrent_jobs: 2)",
        "{queued:#}"
    );
    let out = env.mozart(&["status", "cap-5"]);
    let text = stdout(&out);
    assert!(text.contains("  Status: QUEUED\n"), "{text}");
    assert!(
        text.contains("  Waiting: waiting for a job slot (max_concurrent_jobs: 2)\n"),
        "{text}"
    );
    let out = env.mozart(&["list", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let queued_rows = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["status"] == "queued")
        .count();
    assert!(queued_rows >= 1, "{list:#}");
    for name in &names {
        wait_status(&env, name, 120.0, |d| d["status"] == "completed");
    }
    let spans = intervals(&env, &names);
    assert!(
        max_overlap(&spans) <= 2,
        "never more than 2 jobs running at once: {spans:?}"
    );
    // Freed slots go to the waiting jobs in submission order: the last one submitted waits
    // for a third slot to free up. (Two jobs admitted in one go may start in either order.)
    assert!(
        spans[2].0 < spans[4].0 && spans[3].0 < spans[4].0,
        "{spans:?}"
    );
}

#[test]
fn a_reloaded_max_concurrent_jobs_lets_waiting_jobs_start() {
    let env = TestEnv::new();
    set_max_jobs(&env, 1);
    env.start_conductor();
    let names: Vec<String> = (1..=3).map(|i| format!("grow-{i}")).collect();
    for name in &names {
        submit_now(&env, &env.write_score(name, &timed_score(name, 6.0)));
    }
    wait_status(&env, "grow-1", 30.0, |d| d["status"] == "running");
    let doc = wait_status(&env, "grow-3", 30.0, |d| d["status"] == "queued");
    assert_eq!(
        doc["waiting_reason"],
        "waiting for a job slot (max_concurrent_jobs: 1)"
    );
    assert_eq!(status(&env, "grow-2")["status"], "queued");

    // `config set` on a reloadable key applies it to the running conductor.
    let out = env.mozart(&["config", "set", "max_concurrent_jobs", "3"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Applied to the running conductor"), "{text}");
    // The queued jobs start at once, well before grow-1's 6 s are over.
    wait_status(&env, "grow-3", 5.0, |d| d["status"] == "running");
    assert_eq!(status(&env, "grow-1")["status"], "running");
    let out = env.mozart(&["config", "show", "--json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = shown["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "max_concurrent_jobs")
        .cloned()
        .unwrap();
    assert_eq!(row["value"], 3, "{row}");
    assert_eq!(row["takes_effect"], "reload", "{row}");
}

#[test]
fn queued_jobs_stay_queued_in_their_place_across_a_kill_9() {
    let env = TestEnv::new();
    set_max_jobs(&env, 1);
    env.start_conductor();
    for name in ["k-1", "k-2", "k-3"] {
        submit_now(&env, &env.write_score(name, &long_score(name, 3, 2.0)));
    }
    wait_status(&env, "k-1", 30.0, |d| d["status"] == "running");
    wait_status(&env, "k-3", 30.0, |d| d["status"] == "queued");
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    env.start_conductor();
    wait_status(&env, "k-1", 30.0, |d| d["status"] == "running");
    for name in ["k-2", "k-3"] {
        let doc = status(&env, name);
        assert_eq!(doc["status"], "queued", "{name} after the restart: {doc:#}");
        assert_eq!(
            doc["waiting_reason"], "waiting for a job slot (max_concurrent_jobs: 1)",
            "{doc:#}"
        );
    }
    // k-2 was submitted before k-3: it gets the slot first.
    let doc = wait_status(&env, "k-2", 60.0, |d| d["status"] != "queued");
    assert_eq!(doc["status"], "running", "{doc:#}");
    assert_eq!(status(&env, "k-3")["status"], "queued");
    for name in ["k-1", "k-2", "k-3"] {
        env.mozart(&["cancel", name]);
    }
}

#[test]
fn list_all_pages_through_every_job_and_says_how_many_there_are() {
    let env = TestEnv::new();
    env.start_conductor();
    for i in 1..=25 {
        let name = format!("many-{i:02}");
        submit_now(&env, &env.write_score(&name, &long_score(&name, 1, 0.0)));
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let out = env.mozart(&["list", "--status", "completed", "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        if doc["total"] == 25 {
            break;
        }
        assert!(Instant::now() < deadline, "{doc:#}\n{}", env.log());
        std::thread::sleep(Duration::from_millis(300));
    }

    let out = env.mozart(&["list", "--all"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("many-")).count(), 20);
    assert!(
        text.ends_with(
            "\nShowing 1–20 of 25 scores; next page: mozart list --all --offset 20 --limit 20; every one: mozart list --all --limit 0.\n"
        ),
        "{text}"
    );
    let out = env.mozart(&["list", "--all", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["total"], 25, "{doc:#}");
    assert_eq!(doc["jobs"].as_array().unwrap().len(), 20);
    assert_eq!(doc["jobs"][0]["job_id"], "many-25", "newest first");

    let out = env.mozart(&["list", "--all", "--offset", "20", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["many-05", "many-04", "many-03", "many-02", "many-01"]);
    assert_eq!(doc["total"], 25);

    let out = env.mozart(&["list", "--all", "--limit", "0"]);
    let text = stdout(&out);
    assert_eq!(text.lines().filter(|l| l.starts_with("many-")).count(), 25);
    assert!(text.ends_with("\n25 scores\n"), "{text}");
}

/// `mozart` on `PATH` for a shell one-liner, with this environment.
fn shell(env: &TestEnv, script: &str) -> Output {
    let link = env.bin.join("mozart");
    if !link.exists() {
        std::os::unix::fs::symlink(mozart_bin(), &link).unwrap();
    }
    let mut cmd = Command::new("bash");
    let base = env.command(&[]);
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.arg("-c")
        .arg(script)
        .current_dir(&env.work)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn the_readme_one_liner_works_the_first_time_and_the_second() {
    let env = TestEnv::new();
    let examples = env.work.join("examples");
    std::fs::create_dir_all(&examples).unwrap();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello.yaml");
    std::fs::copy(&hello, examples.join("hello.yaml")).unwrap();
    let line = "mozart start && mozart run examples/hello.yaml && mozart status hello --watch";
    for round in ["first", "second"] {
        let out = shell(&env, line);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{round} time:\n{}\n{}\n{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr),
            env.log()
        );
        assert!(stdout(&out).contains("Score completed - exiting watch mode"));
    }
    let out = env.mozart(&["start"]);
    let pid = env.conductor_pid().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        format!(
            "Mozart conductor is already running (PID {pid})\n  Socket: {}\n",
            env.socket.display()
        )
    );
}

#[test]
fn stop_and_restart_need_yes_without_a_terminal_and_then_lose_nothing() {
    let env = TestEnv::new();
    env.start_conductor();
    submit_now(&env, &env.write_score("busy", &long_score("busy", 6, 1.0)));
    wait_status(&env, "busy", 30.0, |d| d["status"] == "running");
    let pid = env.conductor_pid().unwrap();

    for command in ["stop", "restart"] {
        let out = env.mozart(&[command]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.starts_with(
                "Error: 1 job is running; not stopping the conductor without confirmation.\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("Go ahead anyway: mozart {command} --yes")),
            "{text}"
        );
        assert!(text.contains("Nothing is lost"), "{text}");
        assert!(!text.contains("corrupt"), "{text}");
        assert!(
            alive(pid),
            "{command} without --yes leaves the conductor running"
        );
    }

    let out = env.mozart(&["restart", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        env.log()
    );
    assert!(!alive(pid));
    let second = env.conductor_pid().unwrap();
    assert_ne!(second, pid);
    // The job goes on from its checkpoint under the new conductor.
    wait_status(&env, "busy", 30.0, |d| d["status"] == "running");

    let out = env.mozart(&["stop", "-y"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(!alive(second));
    env.start_conductor();
    let done = wait_status(&env, "busy", 90.0, |d| d["status"] == "completed");
    assert_eq!(done["progress"]["completed"], 6, "{done:#}");
}

/// `mozart <args>` started in the background.
fn spawn(env: &TestEnv, args: &[&str]) -> Child {
    env.command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The exit code of a background `mozart`, or a panic (after killing it) if it is still
/// running after `secs`.
fn exit_within(env: &TestEnv, mut child: Child, secs: u64, what: &str) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return (out.status.code().unwrap_or(-1), stdout(&out));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} still running after {secs}s:\n{}\nlog:\n{}",
                stdout(&out),
                env.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `status --watch` shows the last frame when the job ends, not up to an interval later:
/// with `--interval 300` a job that ends after a second's work is reported within the
/// minute this test allows (the watch asks the conductor to answer at the job's end).
#[test]
fn status_watch_shows_the_end_when_it_happens_not_at_the_next_interval() {
    let env = TestEnv::new();
    env.start_conductor();
    submit_now(
        &env,
        &env.write_score("prompt", &long_score("prompt", 2, 1.0)),
    );
    wait_status(&env, "prompt", 30.0, |d| d["status"] == "running");
    let child = spawn(&env, &["status", "prompt", "--watch", "-i", "300"]);
    let (code, text) = exit_within(&env, child, 60, "watch of a job that ends");
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("| Refreshing every 300s |")
            && text.ends_with("Score completed - exiting watch mode\n"),
        "{text}"
    );
}

#[test]
fn status_watch_exits_with_the_jobs_outcome() {
    let env = TestEnv::new();
    env.start_conductor();
    // Failed: 1.
    let text = long_score("broken", 1, 0.0).replace("RUN: sleep 0", "RUN: exit 3");
    let text = format!("{text}retry:\n  max_retries: 0\n");
    submit_now(&env, &env.write_score("broken", &text));
    wait_status(&env, "broken", 30.0, |d| d["status"] == "failed");
    let child = spawn(&env, &["status", "broken", "--watch", "-i", "1"]);
    let (code, text) = exit_within(&env, child, 20, "watch of a failed job");
    assert_eq!(code, 1, "{text}");
    assert!(
        text.ends_with("Score failed - exiting watch mode\n"),
        "{text}"
    );

    // Cancelled: 3.
    submit_now(
        &env,
        &env.write_score("doomed", &long_score("doomed", 3, 20.0)),
    );
    wait_status(&env, "doomed", 30.0, |d| d["status"] == "running");
    let child = spawn(&env, &["status", "doomed", "--watch", "-i", "1"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.mozart(&["cancel", "doomed"]).status.code(), Some(0));
    let (code, text) = exit_within(&env, child, 20, "watch of a cancelled job");
    assert_eq!(code, 3, "{text}");

    // Paused: 4.
    submit_now(
        &env,
        &env.write_score("napping", &long_score("napping", 3, 1.0)),
    );
    wait_status(&env, "napping", 30.0, |d| d["status"] == "running");
    let child = spawn(&env, &["status", "napping", "--watch", "-i", "1"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.mozart(&["pause", "napping"]).status.code(), Some(0));
    let (code, text) = exit_within(&env, child, 20, "watch of a paused job");
    assert_eq!(code, 4, "{text}");
    env.mozart(&["cancel", "napping"]);
}

/// Sheets that sleep, then write `out-<n>.txt` saying which score ran them.
fn tagged_score(tag: &str, sleep: f64) -> String {
    format!(
        r#"name: tagged
workspace: ./tagged-ws
instrument: shell
sheet:
  size: 1
  total_items: 4
prompt:
  template: |
    RUN: sleep {sleep}
    RUN: echo "{tag}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

#[test]
fn wait_keeps_waiting_through_the_pause_of_modify_resume() {
    let env = TestEnv::new();
    env.start_conductor();
    let old = env.write_score("tagged", &tagged_score("old", 2.0));
    let new: PathBuf = env.write_score("tagged-v2", &tagged_score("new", 0.2));
    submit_now(&env, &old);
    wait_status(&env, "tagged", 30.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    let waiter = spawn(&env, &["wait", "tagged"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = env.mozart(&["modify", "tagged", "-c", new.to_str().unwrap(), "--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // Paused until sheet 1 finishes, and it says it goes on by itself.
    let doc = status(&env, "tagged");
    if doc["status"] == "paused" {
        assert!(
            doc["waiting_reason"]
                .as_str()
                .is_some_and(|r| r.contains("modify --resume")),
            "{doc:#}"
        );
    }
    let (code, text) = exit_within(&env, waiter, 90, "mozart wait");
    assert_eq!(
        code, 0,
        "wait ends with the job, not with its pause: {text}"
    );
    assert_eq!(text, "tagged completed\n");
    let out4 = std::fs::read_to_string(env.work.join("tagged-ws/out-4.txt")).unwrap();
    assert_eq!(out4.trim(), "new");
}

#[test]
fn logs_of_a_job_the_conductor_does_not_know_is_an_error() {
    let env = TestEnv::new();
    env.start_conductor();
    let out = env.mozart(&["logs", "nosuch"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stdout(&out),
        "Error: Score not found: nosuch\n\nHints:\n  - Run 'mozart list --all' to see available scores.\n"
    );
    submit_now(
        &env,
        &env.write_score("known", &long_score("known", 1, 0.0)),
    );
    wait_status(&env, "known", 30.0, |d| d["status"] == "completed");
    let out = env.mozart(&["logs", "known"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn run_says_why_a_job_failed_at_once_and_its_exit_code_is_the_submission() {
    let env = TestEnv::new();
    // A conductor that cannot find `claude` (the stand-in is not on its PATH).
    let out = env
        .command(&["start"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let path = env.write_score(
        "needs-claude",
        "name: needs-claude\nworkspace: ./nc-ws\ninstrument: claude-code\nsheet:\n  size: 1\n  total_items: 2\nprompt:\n  template: \"say hi\"\n",
    );
    let out = env.mozart(&["-q", "run", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "accepted: {text}");
    assert!(
        text.contains("The score has already failed: needs-claude\n"),
        "{text}"
    );
    assert!(
        text.contains("  Sheet 1 failed [E505]: Executable not found: claude: install the CLI"),
        "{text}"
    );
    assert!(text.contains("mozart errors needs-claude"), "{text}");
    let out = env.mozart(&["run", path.to_str().unwrap(), "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{doc:#}");
    assert_eq!(doc["status"], "accepted");
    assert_eq!(doc["job_status"], "failed", "{doc:#}");
    assert_eq!(doc["failure"]["error_code"], "E505", "{doc:#}");
    // Its outcome is `mozart wait`'s.
    assert_eq!(env.mozart(&["wait", "needs-claude"]).status.code(), Some(1));

    // The default instrument (no `instrument:`, claude_cli) fails at once too: it spent
    // every retry and its backoff on the missing program (three attempts over 42 s), and
    // `run` said only "Job started".
    let path = env.write_score(
        "needs-default",
        "name: needs-default\nworkspace: ./nd-ws\nsheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"say hi\"\n",
    );
    let out = env.mozart(&["-q", "run", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("The score has already failed: needs-default\n"),
        "{text}"
    );
    assert!(
        text.contains("  Sheet 1 failed [E505]: claude CLI not found in PATH: install the CLI"),
        "{text}"
    );
    let doc = status(&env, "needs-default");
    assert_eq!(doc["sheets"]["1"]["attempt_count"], 1, "{doc:#}");
}

#[test]
fn run_yes_needs_self_healing_and_the_conductor_answers_for_what_it_accepts() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("healing", &long_score("healing", 1, 0.0));
    let out = env.mozart(&["run", path.to_str().unwrap(), "--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--self-healing"));

    // dry_run checks without recording or running anything.
    let r = env.raw_call(
        "job.submit",
        json!({"config_path": path.display().to_string(), "dry_run": true}),
    );
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    let message = r["result"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Dry run: the score is valid (1 sheet, workspace "),
        "{message}"
    );
    let out = env.mozart(&["status", "healing"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing recorded: {}",
        stdout(&out)
    );
    assert!(!env.work.join("healing-ws").exists(), "no workspace made");

    let r = env.raw_call(
        "job.submit",
        json!({"config_path": path.display().to_string(), "self_healing_auto_confirm": true}),
    );
    assert_eq!(r["result"]["status"], "accepted", "{r}");
    assert!(
        r["result"]["message"]
            .as_str()
            .unwrap()
            .ends_with("self_healing_auto_confirm has no effect without self_healing"),
        "{r}"
    );
}

/// Issue 23 (the README's test command skipped tests silently): the README's command is
/// `tests/run`, which names the tests that could not run, and the README names every setup
/// script that installs what they need.
#[test]
fn the_readme_test_command_names_skipped_tests_and_every_setup_script() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("\ntests/run\n"), "README's test command");
    let run = std::fs::read_to_string(root.join("tests/run")).unwrap();
    assert!(
        run.contains(mozart_tests::users::SKIP_LOG),
        "tests/run reads the skip log that users::missing writes"
    );
    let mut scripts = 0;
    for entry in std::fs::read_dir(root.join("tests")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("setup.sh").is_file() {
            let name = format!(
                "tests/{}/setup.sh",
                dir.file_name().unwrap().to_string_lossy()
            );
            assert!(readme.contains(&name), "README does not name {name}");
            scripts += 1;
        }
    }
    assert!(scripts >= 4, "{scripts} setup scripts found");
}

/// A conductor that goes away after reading the submission (stopped or killed while taking
/// it) leaves the outcome unknown: `run` says so and how to check, instead of "not
/// submitted" — such a score is often registered and resumes with the conductor.
#[test]
fn run_says_the_outcome_is_unknown_when_the_conductor_stops_before_answering() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;
    let env = TestEnv::new();
    let listener = UnixListener::bind(&env.socket).unwrap();
    // As private as the conductor's own socket, or the CLI refuses it.
    std::fs::set_permissions(&env.socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    let taker = std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&client).read_line(&mut line).unwrap();
        line
    });
    let path = env.write_score("gone", &mozart_tests::sleepy_shell_score("gone", 1, 0.0));
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    let request = taker.join().unwrap();
    assert!(request.contains("job.submit"), "{request}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("may or may not have been submitted"),
        "{text}"
    );
    assert!(text.contains("mozart status gone"), "{text}");
}

/// A conductor that does not answer (stopped with SIGSTOP, hung) may still run jobs: `stop`
/// and `restart` without `--yes` took "cannot ask" for "nothing runs" and went ahead. They
/// now read the registry and refuse, saying the conductor does not answer and how many jobs
/// it records as running.
#[test]
fn stop_and_restart_of_a_conductor_that_does_not_answer_refuse_while_its_registry_records_jobs_running(
) {
    struct Continue(u32);
    impl Drop for Continue {
        fn drop(&mut self) {
            mozart_tests::signal(self.0, "CONT");
        }
    }
    let env = TestEnv::new();
    env.start_conductor();
    submit_now(&env, &env.write_score("busy", &long_score("busy", 6, 1.0)));
    wait_status(&env, "busy", 30.0, |d| d["status"] == "running");
    let pid = env.conductor_pid().unwrap();
    let resume = Continue(pid);
    mozart_tests::signal(pid, "STOP");
    for command in ["stop", "restart"] {
        let out = env.mozart(&[command]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.starts_with(
                "Error: The conductor does not answer, and its registry records 1 job as running; not stopping the conductor without confirmation.\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("Go ahead anyway: mozart {command} --yes")),
            "{text}"
        );
        assert!(alive(pid), "{command} without --yes leaves the conductor");
    }
    drop(resume);
    // Going on, the conductor finishes the job.
    let done = wait_status(&env, "busy", 90.0, |d| d["status"] == "completed");
    assert_eq!(done["progress"]["completed"], 6, "{done:#}");
}

/// A conductor that does not answer the submission in time (stopped with SIGSTOP, or busy)
/// may still take the score once it goes on: `run` said "did not respond … in time" and
/// "Restart the conductor", yet the job ran after `kill -CONT`. It now says the outcome is
/// unknown and how to check, as when the conductor stops before answering.
#[test]
fn run_says_the_outcome_is_unknown_when_the_conductor_does_not_answer_in_time() {
    /// Lets the conductor go on whatever happens, so the test's teardown can stop it.
    struct Continue(u32);
    impl Drop for Continue {
        fn drop(&mut self) {
            mozart_tests::signal(self.0, "CONT");
        }
    }
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score(
        "frozen",
        &mozart_tests::sleepy_shell_score("frozen", 1, 0.0),
    );
    let pid = env.conductor_pid().expect("conductor pid");
    let resume = Continue(pid);
    mozart_tests::signal(pid, "STOP");
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    drop(resume);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("may or may not have been submitted"),
        "{text}"
    );
    assert!(text.contains("mozart status frozen"), "{text}");
    assert!(
        !text.contains("mozart restart"),
        "a restart would interrupt it: {text}"
    );
    // And indeed: the conductor, going on, runs it.
    let doc = harness::wait_terminal(&env, "frozen", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
}
