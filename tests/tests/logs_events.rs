//! The conductor log tells a job's story (issue 23 "Logs that say nothing", issue 26 item
//! 2): structured JSON job events, read back by `mozart logs` and streamed live by
//! `mozart logs JOB --follow`; `status` and `errors` say where the sheet logs are, and
//! `errors` names the cause of a failure without `-V`. Real conductor, real shell sheets.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

/// Two sheets; each says hello on stdout, then works for `sleep` seconds.
fn two_sheet_score(name: &str, sleep: f64) -> String {
    format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: 2
prompt:
  template: |
    RUN: echo "hello from sheet {{{{ sheet_num }}}}"
    RUN: sleep {sleep}
    RUN: echo done > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

fn status_json(env: &TestEnv, job: &str) -> Value {
    let out = env.mozart(&["status", job, "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// Poll `status --json` until `done` holds (panics with the log after `secs`).
fn wait_for(env: &TestEnv, job: &str, secs: u64, what: &str, done: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let doc = status_json(env, job);
        if done(&doc) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{job}: never {what}: {doc:#}\nlog:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running `mozart logs … --follow` whose stdout lines arrive on a channel.
struct Follower {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Follower {
    fn spawn(env: &TestEnv, args: &[&str]) -> Follower {
        let mut child = env
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mozart logs --follow");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follower {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Read lines until one satisfies `want`, or panic with what was seen after `secs`.
    fn wait_line(&mut self, secs: u64, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        if let Some(l) = self.seen.iter().find(|l| want(l)) {
            return l.clone();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "logs --follow never showed {what}; it showed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test of one human log line.
type LinePredicate = Box<dyn Fn(&str) -> bool>;

/// The events a job's life must show, in order: (what, predicate on a human log line).
fn story(job: &str) -> Vec<(&'static str, LinePredicate)> {
    let has = move |parts: Vec<String>| -> LinePredicate {
        Box::new(move |l: &str| parts.iter().all(|p| l.contains(p.as_str())))
    };
    let j = format!(" {job} ");
    vec![
        (
            "job.submitted",
            has(vec![j.clone(), " job.submitted ".into()]),
        ),
        (
            "sheet 1 started",
            has(vec![
                j.clone(),
                " sheet:1 sheet.started ".into(),
                "attempt 1".into(),
            ]),
        ),
        (
            "sheet 1 completed",
            has(vec![j.clone(), " sheet:1 sheet.completed ".into()]),
        ),
        ("job.paused", has(vec![j.clone(), " job.paused ".into()])),
        ("job.resumed", has(vec![j.clone(), " job.resumed ".into()])),
        (
            "sheet 2 started",
            has(vec![j.clone(), " sheet:2 sheet.started ".into()]),
        ),
        (
            "sheet 2 completed",
            has(vec![j.clone(), " sheet:2 sheet.completed ".into()]),
        ),
        ("job.completed", has(vec![j, " job.completed ".into()])),
    ]
}

/// Run the two-sheet job with a pause while sheet 1 runs and a resume once it is paused.
fn run_with_pause_and_resume(env: &TestEnv, job: &str) {
    let score = env.write_score(job, &two_sheet_score(job, 2.0));
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_for(env, job, 30, "ran sheet 1", |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    let out = env.mozart(&["pause", job]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // Paused once sheet 1 is done; sheet 2 waits for the resume.
    wait_for(env, job, 30, "paused after sheet 1", |d| {
        d["status"] == "paused" && d["sheets"]["1"]["status"] == "completed"
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        status_json(env, job)["sheets"]["2"]["status"],
        "pending",
        "sheet 2 must not run while paused"
    );
    let out = env.mozart(&["resume", job]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed(job);
}

#[test]
fn logs_show_each_step_of_a_paused_and_resumed_job_and_where_its_sheet_logs_are() {
    let env = TestEnv::new();
    env.start_conductor();
    let job = "storied";
    run_with_pause_and_resume(&env, job);

    let out = env.mozart(&["logs", job, "-n", "0"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let sheet_logs = env.work.join(format!("{job}-ws")).join("logs");
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.starts_with(&format!("Sheet logs: {} ", sheet_logs.display()))),
        "the second line says where the sheet logs are:\n{text}"
    );
    // Each step once, in order, as a line naming the job.
    let mut at = 0;
    for (what, matches) in story(job) {
        let found = lines[at..].iter().position(|l| matches(l));
        let Some(i) = found else {
            panic!(
                "`mozart logs {job}` does not show {what} (after line {at}):\n{text}\nlog:\n{}",
                env.log()
            );
        };
        at += i + 1;
    }
}

#[test]
fn logs_follow_started_before_the_job_streams_its_events_and_output_live() {
    let env = TestEnv::new();
    env.start_conductor();
    let job = "followed";
    let mut follower = Follower::spawn(&env, &["logs", job, "--follow"]);
    follower.wait_line(20, "that it follows", |l| {
        l.contains("Press Ctrl+C to stop")
    });

    let runner = std::thread::scope(|s| {
        let handle = s.spawn(|| run_with_pause_and_resume(&env, job));
        // Live: sheet 1's start and its output arrive while the job still runs.
        follower.wait_line(30, "sheet 1 started", |l| {
            l.contains(&format!(" {job} sheet:1 sheet.started "))
        });
        let sheet_logs = env.work.join(format!("{job}-ws")).join("logs");
        follower.wait_line(10, "where the sheet logs are", |l| {
            l.starts_with(&format!("Sheet logs: {}", sheet_logs.display()))
        });
        follower.wait_line(10, "sheet 1's output", |l| {
            l.contains(&format!(" {job} sheet:1 sheet.output hello from sheet 1"))
        });
        assert_ne!(
            status_json(&env, job)["status"],
            "completed",
            "sheet 1's start and output were seen while the job ran"
        );
        handle.join()
    });
    assert!(runner.is_ok(), "the job ran");
    for (what, matches) in story(job) {
        follower.wait_line(15, what, matches);
    }
    // Nothing of other jobs, and every event line names this one.
    for line in &follower.seen {
        if line.contains(" sheet.") || line.contains(" job.") {
            assert!(line.contains(&format!(" {job} ")), "{line}");
        }
    }
}

/// `logs --follow` goes on across `mozart restart`: it ended with "The conductor stopped;
/// no more log entries." (exit 0), and the restarted conductor's lines were never shown.
#[test]
fn logs_follow_goes_on_across_a_conductor_restart() {
    let env = TestEnv::new();
    env.start_conductor();
    let mut follower = Follower::spawn(&env, &["logs", "--follow"]);
    follower.wait_line(20, "that it follows", |l| {
        l.contains("Press Ctrl+C to stop")
    });
    let out = env.mozart(&["restart", "--yes"]);
    assert!(out.status.success(), "{}", stdout(&out));
    follower.wait_line(30, "that it waits for the conductor", |l| {
        l.contains("The conductor stopped; waiting for it to start again")
    });
    follower.wait_line(30, "that the conductor started again", |l| {
        l.contains("The conductor started again; following its log")
    });
    // What the new conductor logged before the follow found it is shown too.
    follower.wait_line(15, "the new conductor's start", |l| {
        l.contains(" daemon.started ")
    });
    // A job of the new conductor is followed live.
    let job = "after";
    let score = env.write_score(job, &two_sheet_score(job, 0.1));
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    follower.wait_line(60, "the job's end", |l| {
        l.contains(&format!(" {job} job.completed "))
    });
    // The old conductor's stop once, though both streams could send it.
    let stops = follower
        .seen
        .iter()
        .filter(|l| l.contains(" daemon.stopping "))
        .count();
    assert_eq!(stops, 1, "{}", follower.seen.join("\n"));
    assert!(
        matches!(follower.child.try_wait(), Ok(None)),
        "still following: {}",
        follower.seen.join("\n")
    );
}

#[test]
fn every_conductor_log_line_is_a_json_object_with_the_documented_fields() {
    let env = TestEnv::new();
    env.start_conductor();
    let job = "jsonlog";
    let score = env.write_score(job, &two_sheet_score(job, 0.1));
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed(job);
    env.stop_conductor();

    let log = env.log();
    let mut events = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\nlog:\n{log}"));
        let ts = entry["timestamp"].as_str().unwrap_or_default();
        assert!(ts.starts_with("20") && ts.ends_with('Z'), "{line}");
        assert!(
            ["debug", "info", "warning", "error"].contains(&entry["level"].as_str().unwrap_or("")),
            "{line}"
        );
        assert!(
            entry["event"].as_str().is_some_and(|e| !e.is_empty()),
            "{line}"
        );
        assert!(entry["component"].is_string(), "{line}");
        events.push(entry);
    }
    let named =
        |name: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == name).collect() };
    for name in ["daemon.started", "daemon.stopped"] {
        assert_eq!(named(name).len(), 1, "{name}:\n{log}");
    }
    let submitted = named("job.submitted");
    assert_eq!(submitted.len(), 1, "{log}");
    let ws = env.work.join(format!("{job}-ws"));
    assert_eq!(submitted[0]["job_id"], job);
    assert_eq!(submitted[0]["total_sheets"], 2);
    assert_eq!(
        submitted[0]["sheet_logs"],
        ws.join("logs").display().to_string()
    );
    for name in ["job.started", "job.completed"] {
        let e = named(name);
        assert_eq!(e.len(), 1, "{name}:\n{log}");
        assert_eq!(e[0]["job_id"], job);
        assert!(e[0]["message"].is_string(), "{}", e[0]);
    }
    for sheet in [1, 2] {
        let started: Vec<_> = named("sheet.started")
            .into_iter()
            .filter(|e| e["sheet_num"] == sheet)
            .collect();
        assert_eq!(started.len(), 1, "{log}");
        assert_eq!(started[0]["job_id"], job);
        assert_eq!(started[0]["attempt"], 1);
        assert_eq!(started[0]["instrument"], "shell");
        let completed: Vec<_> = named("sheet.completed")
            .into_iter()
            .filter(|e| e["sheet_num"] == sheet)
            .collect();
        assert_eq!(completed.len(), 1, "{log}");
        let c = completed[0];
        assert_eq!(c["attempt"], 1);
        assert!(
            c["duration_seconds"].as_f64().is_some_and(|d| d > 0.0),
            "{c}"
        );
        assert_eq!(c["validation_passed"], true, "{c}");
        // A line printed and the sheet over within a second: no log file, so none is named
        // (the output is in the registry, issue 24).
        assert!(!ws.join(format!("logs/sheet-0{sheet}.stdout.log")).exists());
        assert_eq!(c["stdout_log"], Value::Null, "{c}");
        assert!(
            c["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("sheet {sheet} completed")),
            "{c}"
        );
    }
}

#[test]
fn a_failing_sheets_cause_is_named_by_errors_logs_and_status_without_verbose() {
    let env = TestEnv::new();
    env.start_conductor();
    let job = "culprit";
    let cause = "fatal: cannot read /etc/culprit/db.conf (permission denied)";
    let score = format!(
        r#"name: {job}
workspace: ./{job}-ws
instrument: shell
retry:
  max_retries: 0
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: for i in $(seq 1 60); do printf 'noise ' >&2; done; echo >&2; echo '{cause}' >&2; sleep 1.2; exit 1
"#
    );
    let path = env.write_score(job, &score);
    // `run` may already see the failure (exit 1); the job is what is looked at below.
    let _ = env.mozart(&["run", path.to_str().unwrap()]);
    wait_for(&env, job, 60, "failed", |d| d["status"] == "failed");
    let sheet_logs = env.work.join(format!("{job}-ws")).join("logs");

    let out = env.mozart(&["errors", job]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(cause),
        "`mozart errors` names the cause:\n{text}"
    );
    assert!(
        text.contains(&format!("Sheet logs: {}", sheet_logs.display())),
        "{text}"
    );

    let out = env.mozart(&["logs", job]);
    let text = stdout(&out);
    let failed = text
        .lines()
        .find(|l| l.contains(&format!(" {job} sheet:1 sheet.failed ")))
        .unwrap_or_else(|| panic!("no sheet.failed line:\n{text}"));
    assert!(failed.contains(cause), "{failed}");
    assert!(
        failed.contains(&format!(
            "stderr_log={}",
            sheet_logs.join("sheet-01.stderr.log").display()
        )),
        "{failed}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(&format!(" {job} job.failed "))),
        "{text}"
    );

    let out = env.mozart(&["status", job]);
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "\n  Sheet logs: {} (sheets past 1 s or 4,000 bytes; `mozart logs {job} --sheet N` shows any sheet's output)\n",
            sheet_logs.display()
        )),
        "{text}"
    );
}

#[test]
fn a_retry_is_logged_with_the_failed_attempts_cause_and_its_delay() {
    let env = TestEnv::new();
    env.start_conductor();
    let job = "retried";
    let score = format!(
        r#"name: {job}
workspace: ./{job}-ws
instrument: shell
retry: {{max_retries: 2, base_delay_seconds: 0.3, jitter: false}}
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: if [ -f tried ]; then echo ok; else touch tried; echo 'first try: cache is cold' >&2; exit 1; fi
"#
    );
    let path = env.write_score(job, &score);
    let _ = env.mozart(&["run", path.to_str().unwrap()]);
    env.wait_completed(job);

    let log = env.log();
    let events: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &Value| e["job_id"] == job)
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(
        names,
        [
            "job.submitted",
            "job.started",
            "sheet.started",
            "sheet.retry_scheduled",
            "sheet.started",
            "sheet.completed",
            "job.completed"
        ],
        "{log}"
    );
    let retry = &events[3];
    assert_eq!(retry["level"], "warning");
    assert_eq!(retry["sheet_num"], 1);
    assert_eq!(retry["attempt"], 1);
    assert!(retry["error_code"].is_string(), "{retry}");
    let delay = retry["delay_seconds"].as_f64().unwrap();
    assert!((0.2..=1.0).contains(&delay), "{retry}");
    assert!(
        retry["retry_at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{retry}"
    );
    let message = retry["message"].as_str().unwrap();
    assert!(
        message.contains("first try: cache is cold") && message.contains("retry in"),
        "{retry}"
    );
    assert_eq!(events[4]["attempt"], 2);
    assert_eq!(events[5]["attempt"], 2);

    let out = env.mozart(&["logs", job]);
    let text = stdout(&out);
    assert!(
        text.lines().any(|l| l.contains(&format!(
            " WARNING jobs {job} sheet:1 sheet.retry_scheduled sheet 1 attempt 1 failed"
        ))),
        "{text}"
    );
}

/// `logs` reads the log the conductor writes: conductor.yaml's `log_file`, while the
/// conductor runs and after it stopped, not `$MOZART_HOME/logs/conductor.log`.
#[test]
fn logs_reads_the_log_file_set_in_conductor_yaml() {
    let env = TestEnv::new();
    let alt = env.work.join("alt.log");
    let out = env.mozart(&["config", "set", "log_file", alt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.start_conductor();
    let path = env.write_score("altlog", &two_sheet_score("altlog", 0.0));
    assert_eq!(
        env.mozart(&["run", path.to_str().unwrap()]).status.code(),
        Some(0)
    );
    assert_eq!(env.mozart(&["wait", "altlog"]).status.code(), Some(0));
    let check = |when: &str| {
        let out = env.mozart(&["logs", "altlog", "-n", "5"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{when}: {text}");
        assert!(
            text.contains(&format!("Log file: {}", alt.display())),
            "{when}: {text}"
        );
        assert!(text.contains("job.completed"), "{when}: {text}");
    };
    check("conductor running");
    env.mozart(&["stop"]);
    check("conductor stopped");
}
