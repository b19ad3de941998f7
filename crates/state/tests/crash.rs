//! `kill -9` in the middle of writes: a child process (this test binary re-run in "child"
//! mode) writes in a loop and reports each durable write on stdout; the parent SIGKILLs it
//! and checks that what it reopens is intact and at least as new as the last report.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use mozart_state::{json_state, CheckpointState, JobRecord, Registry};

const MODE_ENV: &str = "MOZART_STATE_CRASH_CHILD";
const PATH_ENV: &str = "MOZART_STATE_CRASH_PATH";
const SHEETS: u32 = 50;

/// Not a test of its own: the writer loop the other tests run in a child process.
#[test]
fn crash_child() {
    let Ok(mode) = std::env::var(MODE_ENV) else {
        return;
    };
    let path = std::path::PathBuf::from(std::env::var(PATH_ENV).unwrap());
    let mut out = std::io::stdout().lock();
    match mode.as_str() {
        "registry" => {
            let reg = Registry::open(&path).unwrap();
            let mut cp = CheckpointState::new("crash", "Crash", SHEETS);
            for i in 1.. {
                // Each transaction writes the counter into the job document and into one
                // sheet row; both must always agree after a crash.
                cp.total_retry_count = i;
                let n = i % SHEETS + 1;
                cp.mark_sheet_started(n);
                cp.sheets.get_mut(&n).unwrap().attempt_count = i;
                if i % 10 == 0 {
                    for s in cp.sheets.values_mut() {
                        s.completion_attempts = i;
                    }
                    reg.save_checkpoint(&cp).unwrap();
                } else {
                    reg.save_sheet_transition(&cp, n).unwrap();
                }
                writeln!(out, "committed {i}").unwrap();
                out.flush().unwrap();
            }
        }
        "json" => {
            let mut cp = CheckpointState::new("crash", "Crash", 100);
            for n in 1..=100 {
                cp.mark_sheet_started(n);
                cp.sheets.get_mut(&n).unwrap().stdout_tail = Some("x".repeat(1000));
            }
            for i in 1.. {
                cp.total_retry_count = i;
                json_state::save(&path, &cp).unwrap();
                writeln!(out, "saved {i}").unwrap();
                out.flush().unwrap();
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// Runs the child in `mode`, calls `on_write` for each reported write while the child keeps
/// writing, SIGKILLs it after `after` reports, and returns the last number it reported.
fn run_and_kill(mode: &str, path: &Path, after: u32, mut on_write: impl FnMut(u32)) -> u32 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(MODE_ENV, mode)
        .env(PATH_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut last = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        // Only the child's own reports; libtest prints "running 1 test" and prefixes the
        // first report with "test crash_child ... ".
        let report = line
            .rsplit_once("committed ")
            .or_else(|| line.rsplit_once("saved "))
            .map(|(_, n)| n);
        if let Some(n) = report.and_then(|n| n.trim().parse().ok()) {
            last = n;
            on_write(n);
            if last >= after {
                break;
            }
        }
    }
    // std's Child::kill sends SIGKILL on Unix: no destructors, no flush, no clean close.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(last >= after, "child stopped early at {last}");
    last
}

#[test]
fn registry_survives_sigkill_mid_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    Registry::open(&path)
        .unwrap()
        .create_job(&JobRecord::new("crash", "/s/crash.yaml", "/ws"))
        .unwrap();
    for round in 0..3 {
        let last = run_and_kill("registry", &path, 150, |_| {});
        let reg = Registry::open(&path).unwrap();
        assert!(reg.integrity_check().unwrap(), "round {round}");
        let cp = reg.load_checkpoint("crash").unwrap().unwrap();
        let header = cp.total_retry_count;
        assert!(header >= last, "lost a committed write: {header} < {last}");
        let newest_sheet = cp.sheets.values().map(|s| s.attempt_count).max().unwrap();
        assert_eq!(newest_sheet, header, "job document and sheet row disagree");
        let bulk: Vec<u32> = cp.sheets.values().map(|s| s.completion_attempts).collect();
        assert!(
            bulk.windows(2).all(|w| w[0] == w[1]),
            "a multi-row save was torn: {bulk:?}"
        );
    }
}

#[test]
fn json_state_file_is_never_truncated_by_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.json");
    for round in 0..3 {
        // Readers racing the writer must never see a partial file either.
        let mut reads = 0;
        let last = run_and_kill("json", &path, 30, |_| {
            for _ in 0..3 {
                let cp = json_state::load(&path)
                    .unwrap_or_else(|e| panic!("concurrent read: {e}"))
                    .unwrap();
                assert_eq!(cp.sheets.len(), 100);
                reads += 1;
            }
        });
        assert!(reads >= 90, "only {reads} concurrent reads");
        let cp = json_state::load(&path)
            .unwrap_or_else(|e| panic!("round {round}: {e}"))
            .unwrap();
        assert!(cp.total_retry_count >= last);
        assert_eq!(cp.sheets.len(), 100);
    }
}
