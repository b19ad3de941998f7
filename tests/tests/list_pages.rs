//! Listings of many jobs come in pages the conductor cuts, with true totals (issue 24):
//! `mozart status` (the overview) with more active jobs than it shows, and the dashboard's
//! jobs page over a registry of more jobs than one page.

use std::path::Path;

use mozart_state::{DaemonJobStatus, JobRecord, Registry};
use mozart_tests::web::{self, login, start_dashboard};
use mozart_tests::{sleepy_shell_score, stdout, TestEnv};
use serde_json::{json, Value};

/// Submit through the protocol directly: `mozart run` would wait for each job's first
/// sheet, and these sheets sleep.
fn submit(env: &TestEnv, path: &Path) {
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let answer = client
        .call_value(
            "job.submit",
            json!({"config_path": path.display().to_string()}),
        )
        .unwrap();
    assert_eq!(answer["status"], "accepted", "{answer}");
}

#[test]
fn the_overview_of_many_active_scores_shows_the_newest_and_counts_them_all() {
    let env = TestEnv::new();
    env.start_conductor();
    for i in 0..23 {
        let name = format!("busy-{i:02}");
        let path = env.write_score(&format!("{name}.yaml"), &sleepy_shell_score(&name, 1, 60.0));
        submit(&env, &path);
    }

    let out = env.mozart(&["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    let shown: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("busy-"))
        .collect();
    assert_eq!(shown.len(), 20, "the newest 20 active scores:\n{text}");
    // Newest first: the last one submitted leads.
    assert!(shown[0].trim_start().starts_with("busy-22"), "{text}");
    assert!(
        text.contains(
            "\n  Showing the newest 20 of 23 active scores; every one: mozart list --limit 0\n"
        ),
        "the cut is said, with how to see the rest:\n{text}"
    );
    assert!(
        text.ends_with("\n23 scores active. Use 'mozart status <score>' for details.\n"),
        "{text}"
    );

    let out = env.mozart(&["status", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["active_count"], 23, "{doc}");
    assert_eq!(doc["active_shown"], 20, "{doc}");
    assert_eq!(doc["active"].as_array().unwrap().len(), 20, "{doc}");

    // `mozart list --limit 0` lists every one, as the hint says.
    let out = env.mozart(&["list", "--limit", "0"]);
    let listed = stdout(&out)
        .lines()
        .filter(|l| l.trim_start().starts_with("busy-"))
        .count();
    assert_eq!(listed, 23, "{}", stdout(&out));
}

/// Wait (up to a minute) until the conductor reports the job running.
fn wait_running(env: &TestEnv, job: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let answer = env.raw_call("job.status", json!({"job_id": job}));
        if answer["result"]["status"] == "running" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{job} never ran: {answer}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Finished jobs written to the registry before the conductor starts, one a minute.
fn seed_finished(env: &TestEnv, jobs: u32) {
    let registry = Registry::open(&env.home.join("registry.db")).unwrap();
    let now = mozart_state::epoch_now() - 3600.0;
    for i in 0..jobs {
        let id = format!("done-{i:03}");
        let mut record = JobRecord::new(&id, format!("/srv/{id}.yaml"), format!("/srv/ws/{id}"));
        record.status = if i % 10 == 0 {
            DaemonJobStatus::Failed
        } else {
            DaemonJobStatus::Completed
        };
        record.submitted_at = now + f64::from(i) * 60.0;
        record.started_at = Some(record.submitted_at + 1.0);
        record.completed_at = Some(record.submitted_at + 30.0);
        record.total_sheets = Some(1);
        registry.create_job(&record).unwrap();
    }
}

#[test]
fn the_dashboard_jobs_page_is_one_page_with_true_counts() {
    let env = TestEnv::new();
    seed_finished(&env, 130);
    env.start_conductor();
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let get = |path: &str| {
        let r = web::http(&dash.addr, "GET", path, &[("Cookie", cookie.as_str())], "");
        assert_eq!(r.status, 200, "{path}: {}", r.raw);
        r.raw
    };

    let page = get("/");
    // Every job is counted, not only the rows a listing happened to hold.
    assert!(page.contains(">all (130)<"), "{page}");
    assert!(page.contains(">completed (117)<"), "{page}");
    assert!(page.contains(">failed (13)<"), "{page}");
    let rows = page.matches("<tr data-job=").count();
    assert_eq!(rows, 100, "one page of rows");
    assert!(page.contains("data-job=\"done-129\""), "newest first");
    assert!(
        !page.contains("data-job=\"done-029\""),
        "the oldest are on no page"
    );
    assert!(
        page.contains("Showing the newest 100 of 130 jobs. Every one: <code>mozart list --all --limit 0</code>"),
        "{page}"
    );

    let failed = get("/?status=failed");
    assert_eq!(failed.matches("<tr data-job=").count(), 13);
    assert!(
        !failed.contains("Showing the newest"),
        "every failed job is shown"
    );
}

#[test]
fn a_score_submitted_again_while_it_runs_is_refused_even_right_away() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("twice.yaml", &sleepy_shell_score("twice", 1, 60.0));
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    let params = json!({"config_path": path.display().to_string()});
    // Back to back on one connection: the second comes before the baton has seen the first.
    let first = client.call_value("job.submit", params.clone()).unwrap();
    let second = client.call_value("job.submit", params).unwrap();
    assert_eq!(first["status"], "accepted", "{first}");
    assert_eq!(second["status"], "rejected", "{second}");
    let message = second["message"].as_str().unwrap_or("");
    assert!(message.starts_with("Job 'twice' is already "), "{second}");

    let out = env.mozart(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("A score with this name is already active."),
        "{text}"
    );
}

/// A socket between the CLI and the conductor that passes every byte on and notes the
/// method of each request the CLI sends (issue 24: how many round trips a view costs).
struct CountingProxy {
    socket: std::path::PathBuf,
    methods: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl CountingProxy {
    /// A proxy on a socket of its own, for a command pointed at it with `MOZART_SOCKET`.
    fn start(env: &TestEnv) -> CountingProxy {
        CountingProxy::between(env.root().join("proxy.sock"), env.socket.clone())
    }

    /// A proxy in the conductor's place: its socket moves aside (a socket file keeps
    /// working under a new name) and the proxy listens where every client looks.
    fn in_place_of(env: &TestEnv) -> CountingProxy {
        let moved = env.root().join("conductor.sock");
        std::fs::rename(&env.socket, &moved).unwrap();
        CountingProxy::between(env.socket.clone(), moved)
    }

    fn between(socket: std::path::PathBuf, upstream: std::path::PathBuf) -> CountingProxy {
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::net::{UnixListener, UnixStream};
        let listener = UnixListener::bind(&socket).unwrap();
        // As private as the conductor's own socket, or the CLI refuses it.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
        let methods = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = methods.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let conductor = UnixStream::connect(&upstream).unwrap();
                let (mut to_client, mut from_conductor) =
                    (client.try_clone().unwrap(), conductor.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_conductor, &mut to_client);
                });
                let (seen, mut to_conductor) = (seen.clone(), conductor);
                std::thread::spawn(move || {
                    for line in BufReader::new(client).lines() {
                        let Ok(line) = line else { return };
                        if let Ok(request) = serde_json::from_str::<Value>(&line) {
                            let method = request["method"].as_str().unwrap_or("").to_string();
                            seen.lock().unwrap().push(method);
                        }
                        if to_conductor
                            .write_all(format!("{line}\n").as_bytes())
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        CountingProxy { socket, methods }
    }

    /// Wait (up to a minute) until `method` has been asked for.
    fn wait_for(&self, method: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.methods.lock().unwrap().iter().any(|m| m == method) {
            assert!(
                std::time::Instant::now() < deadline,
                "{method} never asked for"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The methods asked for since the last call, in order.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.methods.lock().unwrap())
    }
}

#[test]
fn the_overview_asks_the_conductor_once() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("steady.yaml", &sleepy_shell_score("steady", 1, 60.0));
    submit(&env, &path);
    let proxy = CountingProxy::start(&env);

    let out = env
        .command(&["status"])
        .env("MOZART_SOCKET", &proxy.socket)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("Mozart Conductor: RUNNING  (uptime "),
        "the uptime is still shown:\n{text}"
    );
    assert!(
        text.contains("steady"),
        "the running score is listed:\n{text}"
    );
    assert_eq!(
        proxy.take(),
        vec!["job.overview"],
        "uptime, active scores and recent ones in one round trip"
    );

    let out = env
        .command(&["status", "--json"])
        .env("MOZART_SOCKET", &proxy.socket)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["active_count"], 1, "{doc}");
    assert_eq!(proxy.take(), vec!["job.overview"]);

    // The method itself: the uptime and each page asked for, in order.
    let answer = env.raw_call(
        "job.overview",
        json!({"pages": [
            {"statuses": ["running"], "limit": 20},
            {"statuses": ["completed"], "limit": 5},
        ]}),
    );
    let result = &answer["result"];
    assert!(result["uptime_seconds"].as_f64().is_some(), "{answer}");
    assert_eq!(result["pages"][0]["total"], 1, "{answer}");
    assert_eq!(
        result["pages"][0]["jobs"][0]["job_id"], "steady",
        "{answer}"
    );
    assert_eq!(result["pages"][1]["total"], 0, "{answer}");
}

/// Render the dashboard's jobs page once, through a proxy in the conductor's place, and
/// give the page with the methods that render asked the conductor for.
fn render_jobs_page_counting_calls(env: &TestEnv) -> (String, Vec<String>) {
    let proxy = CountingProxy::in_place_of(env);
    let dash = start_dashboard(env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    // The dashboard follows the conductor's event stream from its start, once — on a loaded
    // machine that subscription may come late; it is not a call of the render below.
    proxy.wait_for("daemon.monitor.stream");
    proxy.take();
    let r = web::http(&dash.addr, "GET", "/", &[("Cookie", cookie.as_str())], "");
    assert_eq!(r.status, 200, "{}", r.raw);
    (r.raw, proxy.take())
}

#[test]
fn the_dashboard_jobs_page_asks_for_every_row_s_progress_in_one_call() {
    let env = TestEnv::new();
    env.start_conductor();
    for i in 0..5 {
        let name = format!("busy-{i}");
        let path = env.write_score(&format!("{name}.yaml"), &sleepy_shell_score(&name, 2, 60.0));
        submit(&env, &path);
    }
    // A loaded machine may not have started every job yet: the page is read once all run.
    for i in 0..5 {
        wait_running(&env, &format!("busy-{i}"));
    }
    let (raw, asked) = render_jobs_page_counting_calls(&env);
    // Each row still shows its progress...
    for i in 0..5 {
        assert!(raw.contains(&format!("data-job=\"busy-{i}\"")), "{}", raw);
    }
    assert_eq!(
        raw.matches(">0&#x2f;2 done, running<").count(),
        5,
        "each row's progress:\n{}",
        raw
    );
    // ...from one call for all of them, not a `job.status` per row: the page itself
    // (`job.list_page` gives the rows' progress), not a `job.progress` after it.
    let count = |m: &str| asked.iter().filter(|a| *a == m).count();
    assert_eq!(count("job.status"), 0, "{asked:?}");
    assert_eq!(count("job.progress"), 0, "{asked:?}");
    assert_eq!(
        asked,
        vec!["job.list_page".to_string()],
        "one call a render"
    );
}

#[test]
fn the_dashboard_jobs_page_shows_finished_rows_progress_from_the_same_call() {
    let env = TestEnv::new();
    env.start_conductor();
    for i in 0..5 {
        let name = format!("done-{i}");
        let path = env.write_score(&format!("{name}.yaml"), &sleepy_shell_score(&name, 2, 0.0));
        submit(&env, &path);
    }
    for i in 0..5 {
        env.wait_completed(&format!("done-{i}"));
    }
    let (raw, asked) = render_jobs_page_counting_calls(&env);
    // Each finished row shows its progress...
    for i in 0..5 {
        assert!(raw.contains(&format!("data-job=\"done-{i}\"")), "{}", raw);
    }
    assert_eq!(
        raw.matches(">2&#x2f;2 done<").count(),
        5,
        "each finished row's progress:\n{}",
        raw
    );
    // ...given with the page by the conductor, which keeps a finished job's progress: not a
    // `job.status` per finished row (a dozen more calls a render while 1,000 jobs run).
    assert_eq!(
        asked,
        vec!["job.list_page".to_string()],
        "one call a render"
    );
}
