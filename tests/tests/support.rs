//! Helpers shared by the `torture_*` and `security_*` black-box tests (a module of the
//! one test binary, not a test of its own): short/long mode, a seeded random
//! source, shell-instrument scores, status polling, kill -9, leftover-process and SQLite
//! integrity checks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mozart_tests::TestEnv;
use serde_json::Value;

/// True when the long torture mode is asked for (`MOZART_TORTURE_LONG=1`).
pub fn long_mode() -> bool {
    std::env::var("MOZART_TORTURE_LONG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A tiny xorshift generator: the tests need reproducible "random moments", not quality.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded from `MOZART_TORTURE_SEED`, else the clock; the seed is printed so a failing
    /// run can be replayed.
    pub fn from_env(test: &str) -> Rng {
        let seed = std::env::var("MOZART_TORTURE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{test}: MOZART_TORTURE_SEED={seed}");
        Rng(seed.max(1))
    }

    /// A generator with a fixed seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// Next raw value.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `[lo, hi)` (milliseconds, counts…).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// Shape of a torture job.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// `n` sheets one after another.
    Sequential(u32),
    /// Movement 1, then `n` voices in parallel, then a finale.
    FanOut(u32),
    /// `n` independent sheets run in parallel.
    Parallel(u32),
}

impl Shape {
    /// Concrete sheet count.
    pub fn sheets(self) -> u32 {
        match self {
            Shape::Sequential(n) | Shape::Parallel(n) => n,
            Shape::FanOut(n) => n + 2,
        }
    }
}

/// A shell-instrument score: every sheet sleeps `sleep` seconds, appends a line to
/// `ledger.txt` and writes `out-<n>.txt`; a sheet is valid when its file exists.
pub fn shell_score(env: &TestEnv, name: &str, shape: Shape, sleep: f64) -> (PathBuf, PathBuf) {
    let ws = env.work.join(format!("{name}-ws"));
    let parallel = |n: u32| format!("parallel:\n  enabled: true\n  max_concurrent: {n}\n");
    // (total_items, lines under `sheet:`, top-level lines)
    let (items, sheet_extra, top_extra) = match shape {
        Shape::Sequential(n) => {
            // Explicit chains, so the order is part of what recovery must respect.
            let mut deps = String::from("  dependencies:\n");
            for i in 2..=n {
                deps.push_str(&format!("    {i}: [{}]\n", i - 1));
            }
            (n, if n > 1 { deps } else { String::new() }, String::new())
        }
        Shape::Parallel(n) => (n, String::new(), parallel(n)),
        Shape::FanOut(n) => (
            3,
            format!("  fan_out:\n    2: {n}\n  dependencies:\n    2: [1]\n    3: [2]\n"),
            parallel(n),
        ),
    };
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 3
  base_delay_seconds: 0.2
  jitter: false
sheet:
  size: 1
  total_items: {items}
{sheet_extra}{top_extra}prompt:
  template: |
    Torture sheet {{{{ sheet_num }}}} of {name}.
    RUN: sleep {sleep}
    RUN: echo "{name} {{{{ sheet_num }}}}" >> "{{{{ workspace }}}}/ledger.txt"
    RUN: echo "sheet {{{{ sheet_num }}}}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
        ws = ws.display()
    );
    (env.write_score(name, &yaml), ws)
}

/// `job.submit` through the protocol; returns the response.
pub fn submit(env: &TestEnv, score: &Path) -> Value {
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).unwrap();
    client
        .call_value(
            mozart_ipc::methods::JOB_SUBMIT,
            serde_json::json!({"config_path": score.display().to_string()}),
        )
        .unwrap()
}

/// `mozart status <id> --json`, or `None` if the command failed (conductor down…).
pub fn status(env: &TestEnv, id: &str) -> Option<Value> {
    let out = env.mozart(&["status", id, "--json"]);
    if out.status.code() != Some(0) {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// `job.status` through the protocol (for IDs the CLI's score-ID check would refuse).
pub fn rpc_status(env: &TestEnv, id: &str) -> Option<Value> {
    let mut client = mozart_ipc::BlockingClient::connect(&env.socket).ok()?;
    client
        .call_value(
            mozart_ipc::methods::JOB_STATUS,
            serde_json::json!({ "job_id": id }),
        )
        .ok()
}

/// Wait until `rpc_status` reports a terminal status.
pub fn rpc_wait_terminal(env: &TestEnv, id: &str, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(doc) = rpc_status(env, id).filter(is_terminal) {
            return doc;
        }
        assert!(Instant::now() < deadline, "{id} not terminal after {secs}s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// True for completed / failed / cancelled.
pub fn is_terminal(doc: &Value) -> bool {
    matches!(
        doc["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// Wait until every job is terminal; returns their status documents.
pub fn wait_all_terminal(env: &TestEnv, ids: &[String], secs: u64) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let docs: Vec<Option<Value>> = ids.iter().map(|id| status(env, id)).collect();
        if docs.iter().all(|d| d.as_ref().is_some_and(is_terminal)) {
            return docs.into_iter().map(Option::unwrap).collect();
        }
        assert!(
            Instant::now() < deadline,
            "jobs not terminal after {secs}s: {:#?}\nlog tail:\n{}",
            docs.iter()
                .zip(ids)
                .map(|(d, id)| format!(
                    "{id}: {}",
                    d.as_ref().map_or("?".into(), |d| d["status"].to_string())
                ))
                .collect::<Vec<_>>(),
            log_tail(env, 4000)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The last `max` bytes of the conductor log.
pub fn log_tail(env: &TestEnv, max: usize) -> String {
    let log = env.log();
    let mut start = log.len().saturating_sub(max);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    log[start..].to_string()
}

/// SIGKILL the production conductor and wait until it is gone.
pub fn kill9_conductor(env: &TestEnv) {
    let pid = env.conductor_pid().expect("conductor pid file");
    mozart_tests::signal(pid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(10);
    while mozart_tests::alive(pid) {
        assert!(
            Instant::now() < deadline,
            "conductor {pid} survived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `PRAGMA integrity_check` of an SQLite file: `"ok"` when healthy.
pub fn integrity_check(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
        .unwrap()
}

/// Live processes (not zombies) whose working directory is under `root`, other than the
/// conductors themselves: what a conductor left behind of its instruments.
pub fn processes_under(root: &Path, except: &[u32]) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() || except.contains(&pid) || !mozart_tests::alive(pid) {
            continue;
        }
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if !cwd.starts_with(root) {
            continue;
        }
        let exe = std::fs::read_link(entry.path().join("exe")).unwrap_or_default();
        if exe
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("mozart"))
        {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, cmdline));
    }
    found
}

/// Wait up to `secs` for `processes_under` to be empty; returns what is still there.
pub fn wait_no_processes_under(root: &Path, secs: f64) -> Vec<(u32, String)> {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        let left = processes_under(root, &[]);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One sheet of a status document.
pub fn sheet(doc: &Value, n: u32) -> &Value {
    &doc["sheets"][n.to_string()]
}
