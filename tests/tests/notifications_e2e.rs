//! Score notifications delivered by the conductor (execution.md §9.11) to a local HTTP
//! server on 127.0.0.1: upstream's webhook payload and headers, event filtering, a 500
//! then a success (retried), a server that never answers (the job is not held up), Slack's
//! message, secrets in URLs kept out of logs and status, and a desktop notification without
//! a session bus (a warning, never a failed job).

use crate::harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::*;
use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

/// How the server answers the n-th request (0-based).
#[derive(Clone, Copy)]
enum Reply {
    Status(u16),
    Hang,
}

/// One received request.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    fn start(plan: fn(usize) -> Reply) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let log = log.clone();
                std::thread::spawn(move || serve(stream, plan(n), &log));
            }
        });
        Server { url, seen }
    }

    fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }

    fn wait_for(&self, n: usize, secs: f64) -> Vec<Request> {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        loop {
            let r = self.requests();
            if r.len() >= n || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn serve(stream: TcpStream, reply: Reply, log: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    log.lock().unwrap().push(Request {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let mut stream = stream;
    match reply {
        Reply::Status(code) => {
            let text = if code == 200 { "ok" } else { "boom" };
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
        }
        Reply::Hang => std::thread::sleep(Duration::from_secs(60)),
    }
}

fn score(env: &TestEnv, name: &str, command: &str, notifications: &str) -> std::path::PathBuf {
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry: {{max_retries: 0}}
sheet: {{size: 1, total_items: 2}}
prompt:
  template: "RUN: {command}"
notifications:
{notifications}
"#,
        ws = env.work.join(format!("{name}-ws")).display()
    );
    env.write_score(name, &yaml)
}

fn events(reqs: &[Request]) -> Vec<String> {
    let mut e: Vec<String> = reqs
        .iter()
        .map(|r| r.body["event_type"].as_str().unwrap_or("?").to_string())
        .collect();
    e.sort();
    e
}

fn start(env: &TestEnv) {
    let mut cmd = env.command(&["start"]);
    cmd.env("MOZART_TEST_TOKEN", "s3cret")
        .env_remove("DBUS_SESSION_BUS_ADDRESS");
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
}

#[test]
fn webhook_gets_upstreams_payload_and_headers_for_the_events_named_only() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    let ok = score(
        &env,
        "hooked",
        "true",
        &format!(
            "  - type: webhook\n    on_events: [job_start, job_complete]\n    config:\n      url: {}/hook\n      headers: {{X-Token: \"Bearer ${{MOZART_TEST_TOKEN}}\"}}\n",
            server.url
        ),
    );
    run(&env, &ok, &[]);
    assert_eq!(env.mozart(&["wait", "hooked"]).status.code(), Some(0));
    let reqs = server.wait_for(2, 10.0);
    std::thread::sleep(Duration::from_millis(500));
    let reqs = if reqs.len() >= 2 {
        server.requests()
    } else {
        reqs
    };
    assert_eq!(events(&reqs), ["job_complete", "job_start"], "{reqs:#?}");
    let done = reqs
        .iter()
        .find(|r| r.body["event_type"] == "job_complete")
        .unwrap();
    assert_eq!(done.path, "/hook");
    let header = |k: &str| {
        done.headers
            .iter()
            .find(|(h, _)| h == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("x-token").as_deref(), Some("Bearer s3cret"));
    assert!(header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let ctx = &done.body["context"];
    let mut keys: Vec<&String> = ctx.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "duration_seconds",
            "error_message",
            "event",
            "extra",
            "failure_count",
            "job_id",
            "job_name",
            "sheet_num",
            "success_count",
            "timestamp",
            "total_sheets"
        ]
    );
    assert_eq!(ctx["job_id"], "hooked");
    assert_eq!(ctx["success_count"], 2);
    assert_eq!(ctx["failure_count"], 0);
    assert_eq!(
        done.body["metadata"],
        serde_json::json!({"source": "mozart-ai-compose", "version": "1.0.0"})
    );

    // A failing job: sheet_failed and job_failed only (default job_* events are not named).
    let server2 = Server::start(|_| Reply::Status(204));
    let bad = score(
        &env,
        "broken",
        "exit 7",
        &format!(
            "  - type: webhook\n    on_events: [sheet_failed, job_failed]\n    config: {{url: \"{}/x\"}}\n",
            server2.url
        ),
    );
    env.mozart(&["run", bad.to_str().unwrap(), "--json"]);
    assert_eq!(env.mozart(&["wait", "broken"]).status.code(), Some(1));
    let reqs = server2.wait_for(2, 10.0);
    let ev = events(&reqs);
    assert!(ev.contains(&"job_failed".to_string()), "{ev:?}");
    assert!(ev.contains(&"sheet_failed".to_string()), "{ev:?}");
    assert!(
        ev.iter().all(|e| e == "job_failed" || e == "sheet_failed"),
        "{ev:?}"
    );
    let failed = reqs
        .iter()
        .find(|r| r.body["event_type"] == "job_failed")
        .unwrap();
    assert!(
        failed.body["context"]["error_message"].is_string(),
        "{:#}",
        failed.body
    );
}

#[test]
fn a_500_is_retried_until_the_server_takes_it() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|n| {
        if n == 0 {
            Reply::Status(500)
        } else {
            Reply::Status(200)
        }
    });
    let path = score(
        &env,
        "retried",
        "true",
        &format!(
            "  - type: webhook\n    on_events: [job_complete]\n    config: {{url: \"{}/h\", retry_delay: 0.2}}\n",
            server.url
        ),
    );
    run(&env, &path, &[]);
    assert_eq!(env.mozart(&["wait", "retried"]).status.code(), Some(0));
    let reqs = server.wait_for(2, 10.0);
    std::thread::sleep(Duration::from_millis(700));
    let reqs = if reqs.len() == 2 {
        server.requests()
    } else {
        reqs
    };
    assert_eq!(reqs.len(), 2, "one 500, one success, no more: {reqs:#?}");
    assert_eq!(reqs[0].body, reqs[1].body);
}

#[test]
fn a_server_that_never_answers_holds_up_nothing_and_its_secret_stays_out_of_logs() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Hang);
    let path = score(
        &env,
        "hung",
        "true",
        &format!(
            "  - type: webhook\n    on_events: [job_start, sheet_start, sheet_complete, job_complete]\n    config: {{url: \"{}/hook/SECRETTOKEN42?key=SECRETTOKEN42\", timeout: 2, max_retries: 0}}\n",
            server.url
        ),
    );
    let started = Instant::now();
    run(&env, &path, &[]);
    assert_eq!(env.mozart(&["wait", "hung"]).status.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "notifications held the job up: {:?}",
        started.elapsed()
    );
    assert!(!server.wait_for(1, 5.0).is_empty(), "the server was called");
    poll(&env, 15.0, "the delivery failure in the log", || {
        env.log()
            .contains("notification delivery failed")
            .then_some(())
    });
    let log = env.log();
    assert!(
        log.contains(&format!("{}/***", server.url)),
        "redacted URL logged"
    );
    assert!(!log.contains("SECRETTOKEN42"), "secret in the log:\n{log}");
    let raw = env.raw_call("job.status", serde_json::json!({"job_id": "hung"}));
    assert!(
        !raw.to_string().contains("SECRETTOKEN42"),
        "secret in job.status"
    );
    assert!(
        raw.to_string().contains("/***"),
        "redacted URL in the snapshot: {raw}"
    );
    for args in [
        vec!["status", "hung"],
        vec!["status", "hung", "--json"],
        vec!["diagnose", "hung"],
    ] {
        let out = env.mozart(&args);
        assert!(
            !stdout(&out).contains("SECRETTOKEN42"),
            "secret in `mozart {}`",
            args.join(" ")
        );
    }
}

#[test]
fn slack_gets_an_attachment_and_a_desktop_without_a_bus_is_only_a_warning() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    let path = score(
        &env,
        "chatty",
        "true",
        &format!(
            "  - type: slack\n    on_events: [job_complete]\n    config: {{webhook_url: \"{}/services/T/B/X\", channel: \"#ops\"}}\n  - type: desktop\n    on_events: [job_complete]\n",
            server.url
        ),
    );
    run(&env, &path, &[]);
    assert_eq!(env.mozart(&["wait", "chatty"]).status.code(), Some(0));
    let reqs = server.wait_for(1, 10.0);
    assert_eq!(reqs.len(), 1);
    let body = &reqs[0].body;
    assert_eq!(body["username"], "Mozart AI Compose");
    assert_eq!(body["channel"], "#ops");
    let a = &body["attachments"][0];
    assert_eq!(a["color"], "#36a64f");
    assert_eq!(
        a["title"],
        ":white_check_mark: Mozart: Job 'chatty' Complete ✓"
    );
    assert_eq!(a["footer"], "Job: chatty (chatty)");
    poll(&env, 10.0, "the desktop warning", || {
        env.log().contains("no D-Bus session bus").then_some(())
    });
    assert_eq!(status(&env, "chatty")["status"], "completed");
}

/// A notification that is not sent says so under the job's ID, so `mozart logs JOB` shows
/// it (the warnings had no job ID), and names what is missing: the environment variable a
/// `webhook_url_env` names (it said "set webhook_url or webhook_url_env" to a score that
/// had), or a header's `${VAR}`.
#[test]
fn notifications_not_sent_are_in_the_jobs_logs_naming_what_is_missing() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    let path = score(
        &env,
        "quiet",
        "true",
        &format!(
            "  - type: slack\n    on_events: [job_complete]\n    config: {{webhook_url_env: MOZART_TEST_NO_SUCH_SLACK_VAR}}\n  - type: webhook\n    on_events: [job_complete]\n    config: {{url: \"{}/hook\", headers: {{X-Token: \"${{MOZART_TEST_NO_SUCH_TOKEN}}\"}}}}\n  - type: desktop\n    on_events: [job_complete]\n",
            server.url
        ),
    );
    run(&env, &path, &[]);
    assert_eq!(env.mozart(&["wait", "quiet"]).status.code(), Some(0));
    assert_eq!(server.wait_for(1, 10.0).len(), 1);
    let logs = poll(&env, 10.0, "the warnings in the job's logs", || {
        let text = stdout(&env.mozart(&["logs", "quiet"]));
        (text.contains("desktop notification") && text.contains("slack notification"))
            .then_some(text)
    });
    assert!(
        logs.contains("slack notification of job_complete not sent: the environment variable MOZART_TEST_NO_SUCH_SLACK_VAR (named by 'webhook_url_env') is not set in the conductor's environment"),
        "{logs}"
    );
    assert!(
        logs.contains("webhook header X-Token uses ${MOZART_TEST_NO_SUCH_TOKEN}, which is not set"),
        "{logs}"
    );
    assert!(logs.contains("no D-Bus session bus"), "{logs}");
}

/// A job whose `on_success` hook fails ends `failed`: its channels hear `job_failed` with
/// the hook's reason, once the hooks end — not `job_complete` (they were told "Complete ✓"
/// about a job that then failed, and never heard of the failure). A job whose hooks pass
/// is told complete once.
#[test]
fn a_job_failed_by_its_hook_is_notified_as_failed_not_complete() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    for (name, hook) in [("hookbad", "exit 2"), ("hookgood", "true")] {
        let path = score(
            &env,
            name,
            "true",
            &format!(
                "  - type: webhook\n    on_events: [job_complete, job_failed]\n    config: {{url: \"{}/{name}\"}}\non_success:\n  - type: run_command\n    command: \"{hook}\"\n",
                server.url
            ),
        );
        run(&env, &path, &[]);
    }
    assert_eq!(env.mozart(&["wait", "hookbad"]).status.code(), Some(1));
    assert_eq!(env.mozart(&["wait", "hookgood"]).status.code(), Some(0));
    let reqs = server.wait_for(2, 10.0);
    std::thread::sleep(Duration::from_secs(1));
    let reqs = if reqs.len() < 3 {
        server.requests()
    } else {
        reqs
    };
    let of = |job: &str| -> Vec<&Value> {
        reqs.iter()
            .filter(|r| r.body["context"]["job_id"] == job)
            .map(|r| &r.body)
            .collect()
    };
    let bad = of("hookbad");
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert_eq!(bad[0]["event_type"], "job_failed");
    assert_eq!(
        bad[0]["context"]["error_message"],
        "Post-success hook failed: exit code 2"
    );
    let good = of("hookgood");
    assert_eq!(good.len(), 1, "{good:#?}");
    assert_eq!(good[0]["event_type"], "job_complete");
}

/// A webhook that always answers 500: the log says "trying again" once for each try that
/// another follows — none with `max_retries: 0` — and the failure once, at the end.
#[test]
fn the_log_says_trying_again_only_when_another_try_follows() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(500));
    for (name, retries) in [("never", 0), ("twice", 2)] {
        let path = score(
            &env,
            name,
            "true",
            &format!(
                "  - type: webhook\n    on_events: [job_complete]\n    config: {{url: \"{}/{name}\", retry_delay: 0.1, max_retries: {retries}}}\n",
                server.url
            ),
        );
        run(&env, &path, &[]);
        assert_eq!(env.mozart(&["wait", name]).status.code(), Some(0));
        let deadline = Instant::now() + Duration::from_secs(15);
        let count = |what: &str| {
            env.log()
                .lines()
                .filter(|l| l.contains(what) && l.contains(&format!("\"job_id\":\"{name}\"")))
                .count()
        };
        while count("\"notification.failed\"") == 0 {
            assert!(
                Instant::now() < deadline,
                "no failure logged:\n{}",
                env.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(count("\"notification.retry\""), retries, "{}", env.log());
        assert_eq!(count("\"notification.failed\""), 1, "{}", env.log());
    }
}

/// One webhook score of the stop/restart tests below: a shell sheet running `sheet`, its
/// `on_success` hooks, and a webhook for `job_complete`/`job_failed` at `url/NAME`.
fn hooked(env: &TestEnv, name: &str, sheet: &str, hooks: &str, url: &str) -> std::path::PathBuf {
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
sheet: {{size: 1, total_items: 1}}
prompt: {{template: "RUN: {sheet}"}}
on_success:
{hooks}
notifications:
  - type: webhook
    on_events: [job_complete, job_failed]
    config: {{url: "{url}/{name}"}}
"#,
        ws = env.work.join(format!("{name}-ws")).display()
    );
    env.write_score(name, &yaml)
}

/// The messages `server` got about `job` once they settle (a second without another).
fn settled(server: &Server, job: &str, at_least: usize) -> Vec<Value> {
    let of = |reqs: Vec<Request>| -> Vec<Value> {
        reqs.into_iter()
            .filter(|r| r.body["context"]["job_id"] == job)
            .map(|r| r.body)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while of(server.requests()).len() < at_least && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    of(server.requests())
}

/// `mozart stop` while a job's last sheet runs: the sheet ends in the stop's grace period,
/// and its `run_job` hook, refused by the stopping conductor ("Chained job rejected: Daemon
/// is shutting down"), failed the job — `list` said failed, `status` COMPLETED, `wait` exit
/// 0 — and the concert was lost. The chain is owed instead: the next start submits it, the
/// job stays completed, its channel hears `job_complete` once, and the chained job keeps its
/// depth once a later restart has it listed from the registry.
#[test]
fn a_chain_the_stopping_conductor_refuses_is_submitted_at_the_next_start() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    let (started, led) = (env.work.join("started"), env.work.join("ledger"));
    env.write_score(
        "next",
        &format!(
            "name: next\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\nprompt: {{template: \"RUN: echo next >> {}\"}}\n",
            env.work.join("next-ws").display(),
            led.display()
        ),
    );
    let first = hooked(
        &env,
        "first",
        &format!(
            "touch {}; sleep 3; echo first >> {}",
            started.display(),
            led.display()
        ),
        "  - type: run_job\n    job_path: next.yaml",
        &server.url,
    );
    run(&env, &first, &[]);
    poll(&env, 20.0, "the sheet to start", || {
        started.exists().then_some(())
    });
    let stopped = env.mozart(&["stop", "--yes"]);
    assert!(stopped.status.success(), "{}", stdout(&stopped));
    assert_eq!(
        ledger(&led),
        ["first"],
        "the sheet ended in the grace period"
    );
    start(&env);
    poll(&env, 30.0, "the chained job to complete", || {
        list_all(&env)
            .iter()
            .any(|j| j["job_id"] == "next" && j["status"] == "completed")
            .then_some(())
    });
    assert_eq!(ledger(&led), ["first", "next"]);
    let waited = env.mozart(&["wait", "first"]);
    assert_eq!(waited.status.code(), Some(0), "{}", stdout(&waited));
    let doc = status(&env, "first");
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(doc["hook_failures"], serde_json::json!([]), "{doc:#}");
    let told = settled(&server, "first", 1);
    assert_eq!(told.len(), 1, "{told:#?}");
    assert_eq!(told[0]["event_type"], "job_complete", "{told:#?}");

    let stopped = env.mozart(&["stop", "--yes"]);
    assert!(stopped.status.success(), "{}", stdout(&stopped));
    start(&env);
    let list = list_all(&env);
    let next = list.iter().find(|j| j["job_id"] == "next");
    assert_eq!(
        next.map(|j| j["chain_depth"].clone()),
        Some(1.into()),
        "{list:#?}"
    );
}

/// A restart while a job's `on_success` hook runs: the hook runs again at the start and
/// fails. `list` said failed while `status` said COMPLETED (beside "Post-success hook
/// failed"), `mozart wait` exited 0, and no webhook went out. Now the job is failed
/// everywhere, `wait` exits 1, and its channel hears `job_failed` once, naming the hook's
/// exit code.
#[test]
fn a_hook_that_fails_after_a_restart_fails_the_job_everywhere_and_is_announced() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    let led = env.work.join("ledger");
    let path = hooked(
        &env,
        "hf",
        "true",
        &format!(
            "  - type: run_command\n    command: \"echo hook >> {}; sleep 3; exit 5\"",
            led.display()
        ),
        &server.url,
    );
    run(&env, &path, &[]);
    poll(&env, 20.0, "the hook to start", || {
        (!ledger(&led).is_empty()).then_some(())
    });
    let stopped = env.mozart(&["stop", "--yes"]);
    assert!(stopped.status.success(), "{}", stdout(&stopped));
    start(&env);
    let waited = env.mozart(&["wait", "hf"]);
    assert_eq!(waited.status.code(), Some(1), "{}", stdout(&waited));
    let doc = status(&env, "hf");
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let list = list_all(&env);
    let row = list.iter().find(|j| j["job_id"] == "hf");
    assert_eq!(
        row.map(|j| j["status"].clone()),
        Some("failed".into()),
        "{list:#?}"
    );
    let told = settled(&server, "hf", 1);
    assert_eq!(told.len(), 1, "{told:#?}");
    assert_eq!(told[0]["event_type"], "job_failed", "{told:#?}");
    assert_eq!(
        told[0]["context"]["error_message"],
        "Post-success hook failed: exit code 5"
    );
}

/// A job's channels hear of its start and of its pauses, not of its run going on: the pause
/// `modify --resume` makes (it resumes by itself) was sent as `job_paused`, and its resume,
/// like every conductor restart (`kill -9` here), as another `job_start`. Now the job is
/// announced started once, then complete.
#[test]
fn a_modify_and_a_restart_are_not_announced_as_a_pause_or_a_start() {
    let env = TestEnv::new();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    let w = env.work.join("gates");
    std::fs::create_dir_all(&w).unwrap();
    let yaml = |comment: &str| {
        format!(
            r#"# {comment}
name: goes
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 3}}
prompt:
  template: |
    RUN: touch {w}/s{{{{ sheet_num }}}}; while [ ! -e {w}/go{{{{ sheet_num }}}} ]; do sleep 0.1; done
notifications:
  - type: webhook
    on_events: [job_start, job_paused, job_complete, job_failed]
    config: {{url: "{url}/goes"}}
"#,
            ws = env.work.join("goes-ws").display(),
            w = w.display(),
            url = server.url,
        )
    };
    let path = env.write_score("goes", &yaml("first"));
    run(&env, &path, &[]);
    poll(&env, 20.0, "sheet 1 to start", || {
        w.join("s1").exists().then_some(())
    });
    env.write_score("goes", &yaml("edited"));
    let out = env.mozart(&["modify", "goes", "-c", path.to_str().unwrap(), "--resume"]);
    assert!(out.status.success(), "{}", stdout(&out));
    std::fs::write(w.join("go1"), "").unwrap();
    poll(&env, 20.0, "sheet 2 to start with the new score", || {
        w.join("s2").exists().then_some(())
    });
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    start(&env);
    std::fs::write(w.join("go2"), "").unwrap();
    std::fs::write(w.join("go3"), "").unwrap();
    let waited = env.mozart(&["wait", "goes"]);
    assert_eq!(waited.status.code(), Some(0), "{}", stdout(&waited));
    let told: Vec<String> = settled(&server, "goes", 2)
        .iter()
        .map(|b| b["event_type"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(told, ["job_start", "job_complete"]);
}

/// A job paused on its cost limit: the `job_paused` message said nothing of why
/// (`error_message: null`); it names the limit as `status` does.
#[test]
fn a_cost_limit_pause_says_why() {
    let env = TestEnv::new();
    let script = env.root().join("pricey.sh");
    mozart_tests::write_executable(
        &script,
        "#!/bin/sh\necho '{\"answer\":\"ok\",\"usage\":{\"in\":1000,\"out\":2000}}'\n",
    );
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("pricey.yaml"),
        format!(
            "name: pricey\ndisplay_name: Pricey\nkind: cli\ndefault_model: fast\nmodels:\n  - {{name: fast, context_window: 128000, cost_per_1k_input: 1.0, cost_per_1k_output: 1.0}}\ncli:\n  command:\n    executable: {}\n  output:\n    format: json\n    result_path: answer\n    input_tokens_path: usage.in\n    output_tokens_path: usage.out\n",
            script.display()
        ),
    )
    .unwrap();
    start(&env);
    let server = Server::start(|_| Reply::Status(200));
    let path = env.write_score(
        "spend",
        &format!(
            "name: spend\nworkspace: {}\ninstrument: pricey\ncost_limits: {{enabled: true, max_cost_per_job: 0.5}}\nsheet: {{size: 1, total_items: 2}}\nprompt:\n  template: \"answer ok\"\nnotifications:\n  - type: webhook\n    on_events: [job_paused]\n    config: {{url: \"{}/spend\"}}\n",
            env.work.join("spend-ws").display(),
            server.url
        ),
    );
    run(&env, &path, &[]);
    let waited = env.mozart(&["wait", "spend"]);
    assert_eq!(waited.status.code(), Some(4), "{}", stdout(&waited));
    let told = settled(&server, "spend", 1);
    assert_eq!(told.len(), 1, "{told:#?}");
    assert_eq!(told[0]["event_type"], "job_paused");
    assert_eq!(
        told[0]["context"]["error_message"],
        "Cost limit: job cost $3.0000 exceeds limit $0.5000"
    );
}
