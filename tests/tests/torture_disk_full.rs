//! Torture (c): the Mozart home runs out of space while a job runs. The home is a small
//! tmpfs (`mount -t tmpfs -o size=…`, needs root; the test says so and passes without it),
//! filled to the last byte mid-job. The conductor must stay up and keep answering, report
//! the failure instead of pretending, keep what was already durable, and carry on once space
//! returns; the registry must pass `PRAGMA integrity_check` throughout.

use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mozart_tests::TestEnv;
use support::*;

/// A tmpfs mounted on the test's Mozart home; dropping it stops the conductors first
/// (their PID files live on it), then unmounts.
struct SmallHome<'a> {
    env: &'a TestEnv,
}

impl<'a> SmallHome<'a> {
    fn mount(env: &'a TestEnv, size: &str) -> Option<SmallHome<'a>> {
        if !mozart_tests::mount_tmpfs(&env.home, size, "on the Mozart home") {
            return None;
        }
        Some(SmallHome { env })
    }
}

impl Drop for SmallHome<'_> {
    fn drop(&mut self) {
        self.env.kill_all();
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.env.home)
            .output();
    }
}

/// Write zeros to `path` until the file system refuses; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 4096];
    let mut written = 0u64;
    while let Ok(n) = file.write(&chunk) {
        if n == 0 {
            break;
        }
        written += n as u64;
    }
    // Single bytes, to leave no partial block behind.
    while file.write(&[0]).is_ok_and(|n| n == 1) {
        written += 1;
    }
    written
}

/// Start a conductor on a small home, run an 8-sheet job until two sheets are durable,
/// then fill the home. Returns the workspace and the sheets completed before the fill.
fn fill_mid_job(env: &TestEnv) -> (PathBuf, Vec<u32>) {
    env.start_conductor();
    let (score, ws) = shell_score(env, "diskfull", Shape::Sequential(8), 0.4);
    assert_eq!(submit(env, &score)["status"], "accepted");
    let doc = poll_status(env, "diskfull", 30, |d| {
        sheet(d, 2)["status"] == "completed"
    });
    let durable: Vec<u32> = (1..=8)
        .filter(|n| sheet(&doc, *n)["status"] == "completed")
        .collect();
    let written = fill(&env.home.join("filler"));
    eprintln!("filled the home with {written} bytes");
    // Long enough for the next checkpoint write to hit the full disk.
    std::thread::sleep(Duration::from_secs(3));
    (ws, durable)
}

#[test]
fn a_full_mozart_home_is_reported_and_survived() {
    let env = TestEnv::new();
    let Some(_home) = SmallHome::mount(&env, "6m") else {
        return;
    };
    let (ws, durable) = fill_mid_job(&env);

    // While full: the conductor answers, refuses new work with the reason, and keeps the
    // sheets that were durable before.
    let pid = env.conductor_pid().unwrap();
    assert!(
        mozart_tests::alive(pid),
        "conductor died on a full disk:\n{}",
        log_tail(&env, 3000)
    );
    let during = status(&env, "diskfull").expect("status answers on a full disk");
    for n in &durable {
        assert_eq!(
            sheet(&during, *n)["status"],
            "completed",
            "sheet {n} lost: {during:#}"
        );
    }
    let (score2, _) = shell_score(&env, "while-full", Shape::Sequential(1), 0.0);
    let resp = submit(&env, &score2);
    assert_eq!(resp["status"], "rejected", "{resp}");
    assert!(
        resp["message"]
            .as_str()
            .unwrap_or("")
            .contains("disk is full"),
        "the refusal names the cause: {resp}"
    );
    assert!(
        log_tail(&env, 20_000).contains("disk is full"),
        "the log names the cause"
    );
    // conductor-status does not say "ready, accepting work" while submissions are refused.
    let cs = env.mozart(&["conductor-status"]);
    let text = mozart_tests::stdout(&cs);
    assert!(
        text.contains("Readiness: not_ready — the disk is full")
            && text.contains("Accepting work: no"),
        "{text}"
    );
    assert_eq!(integrity_check(&env.home.join("registry.db")), "ok");

    // Space returns. A restart (here the worst kind, kill -9) resumes the job from what was
    // durable; the refused job can now be submitted.
    std::fs::remove_file(env.home.join("filler")).unwrap();
    kill9_conductor(&env);
    env.start_conductor();
    assert_eq!(submit(&env, &score2)["status"], "accepted");
    let ids = ["diskfull".to_string(), "while-full".to_string()];
    let docs = wait_all_terminal(&env, &ids, 90);
    for (id, doc) in ids.iter().zip(&docs) {
        assert_eq!(doc["status"], "completed", "{id}: {doc:#}");
    }
    for n in 1..=8 {
        assert!(
            ws.join(format!("out-{n}.txt")).exists(),
            "sheet {n} output missing"
        );
    }
    assert_eq!(integrity_check(&env.home.join("registry.db")), "ok");
}

/// Without a restart, a job whose checkpoint write failed must not sit in `running`
/// forever with nothing dispatched: it should say why it stopped and continue once space
/// returns (by itself or through `mozart resume`).
#[test]
fn a_job_stopped_by_a_full_disk_continues_once_space_returns() {
    let env = TestEnv::new();
    let Some(_home) = SmallHome::mount(&env, "6m") else {
        return;
    };
    let (ws, _) = fill_mid_job(&env);
    let during = status(&env, "diskfull").unwrap();
    let stopped_visibly = during["status"] != "running"
        || during["error_message"]
            .as_str()
            .is_some_and(|m| m.contains("disk"));
    std::fs::remove_file(env.home.join("filler")).unwrap();
    let resume = env.mozart(&["resume", "diskfull"]);
    eprintln!(
        "resume: {}{}",
        mozart_tests::stdout(&resume),
        String::from_utf8_lossy(&resume.stderr)
    );
    let docs = wait_all_terminal(&env, &["diskfull".to_string()], 60);
    assert_eq!(docs[0]["status"], "completed", "{:#}", docs[0]);
    assert!(ws.join("out-8.txt").exists());
    assert!(
        stopped_visibly,
        "while stopped the status hid the cause: {during:#}"
    );
}

/// Poll `mozart status <id> --json` until `pred` holds.
fn poll_status(
    env: &TestEnv,
    id: &str,
    secs: u64,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(doc) = status(env, id) {
            if pred(&doc) {
                return doc;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting on {id}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Fill the home while the sheets `running` of the job run (`shape`, 2 s a sheet); the
/// finished-but-unsaved sheets then sit in memory only. Returns the workspace.
fn fill_while_running(env: &TestEnv, id: &str, shape: Shape, running: &[u32]) -> PathBuf {
    env.start_conductor();
    let (score, ws) = shell_score(env, id, shape, 2.0);
    assert_eq!(submit(env, &score)["status"], "accepted");
    poll_status(env, id, 30, |d| {
        running
            .iter()
            .all(|n| sheet(d, *n)["status"] == "in_progress")
    });
    fill(&env.home.join("filler"));
    ws
}

fn ledger_lines(ws: &Path) -> usize {
    std::fs::read_to_string(ws.join("ledger.txt"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Three voices finish while the disk is full (their one burst cannot be committed): the
/// job is paused — not `pausing (3 running)` with nothing running — `wait` answers, the
/// pause names the sheets whose results are not saved, and `resume` saves them: they do not
/// run again, and the job completes without the old error.
#[test]
fn sheets_that_finish_on_a_full_disk_are_named_and_saved_at_the_resume() {
    let env = TestEnv::new();
    let Some(_home) = SmallHome::mount(&env, "6m") else {
        return;
    };
    let ws = fill_while_running(&env, "voices", Shape::FanOut(3), &[2, 3, 4]);
    let during = poll_status(&env, "voices", 20, |d| d["status"] == "paused");
    // (A voice whose save got in before the disk filled is not named.)
    let message = during["error"].as_str().unwrap_or_default();
    assert!(message.contains("finished but not saved yet"), "{during:#}");
    let human = mozart_tests::stdout(&env.mozart(&["status", "voices"]));
    assert!(!human.contains("PAUSING"), "nothing runs:\n{human}");
    let wait = env.mozart(&["wait", "voices", "--timeout", "20"]);
    assert_eq!(
        wait.status.code(),
        Some(4),
        "wait: {}",
        mozart_tests::stdout(&wait)
    );

    std::fs::remove_file(env.home.join("filler")).unwrap();
    let resume = env.mozart(&["resume", "voices"]);
    assert_eq!(
        resume.status.code(),
        Some(0),
        "{}",
        mozart_tests::stdout(&resume)
    );
    let done = wait_all_terminal(&env, &["voices".to_string()], 30).remove(0);
    assert_eq!(done["status"], "completed", "{done:#}");
    assert!(done["error"].is_null(), "{done:#}");
    // A restart reads the same from the registry; no sheet ran twice.
    kill9_conductor(&env);
    env.start_conductor();
    let after = status(&env, "voices").unwrap();
    assert_eq!(after["status"], "completed", "{after:#}");
    assert_eq!(ledger_lines(&ws), 5, "a saved sheet ran again");
    assert_eq!(integrity_check(&env.home.join("registry.db")), "ok");
}

/// The last sheet finishes while the disk is full: the baton has ended the job, but its end
/// could not be saved. The job is paused with the cause, `wait` answers, and `resume` saves
/// the end (completed) instead of leaving the job `running` forever.
#[test]
fn a_job_that_ends_on_a_full_disk_has_its_end_saved_at_the_resume() {
    let env = TestEnv::new();
    let Some(_home) = SmallHome::mount(&env, "6m") else {
        return;
    };
    let ws = fill_while_running(&env, "last", Shape::Sequential(2), &[2]);
    let during = poll_status(&env, "last", 20, |d| d["status"] == "paused");
    assert!(
        during["error"]
            .as_str()
            .is_some_and(|m| m.contains("Sheet 2 finished but not saved yet")),
        "{during:#}"
    );
    let wait = env.mozart(&["wait", "last", "--timeout", "20"]);
    assert_eq!(
        wait.status.code(),
        Some(4),
        "wait: {}",
        mozart_tests::stdout(&wait)
    );

    std::fs::remove_file(env.home.join("filler")).unwrap();
    let resume = env.mozart(&["resume", "last"]);
    let text = mozart_tests::stdout(&resume);
    assert_eq!(resume.status.code(), Some(0), "{text}");
    assert!(text.contains("had already ended (completed)"), "{text}");
    let done = status(&env, "last").unwrap();
    assert_eq!(done["status"], "completed", "{done:#}");
    assert!(done["error"].is_null(), "{done:#}");
    let wait = env.mozart(&["wait", "last", "--timeout", "20"]);
    assert_eq!(
        wait.status.code(),
        Some(0),
        "wait: {}",
        mozart_tests::stdout(&wait)
    );
    kill9_conductor(&env);
    env.start_conductor();
    let after = status(&env, "last").unwrap();
    assert_eq!(after["status"], "completed", "{after:#}");
    assert_eq!(ledger_lines(&ws), 2, "a saved sheet ran again");
}

/// A job cancelled while the disk is full is let go of: once space returns, `resume`
/// runs it again instead of answering that it is "still stopping its running sheets".
#[test]
fn a_job_cancelled_on_a_full_disk_can_be_resumed_once_space_returns() {
    let env = TestEnv::new();
    let Some(_home) = SmallHome::mount(&env, "6m") else {
        return;
    };
    let ws = fill_while_running(&env, "gone", Shape::Sequential(2), &[2]);
    let cancel = env.mozart(&["cancel", "gone"]);
    assert_eq!(
        cancel.status.code(),
        Some(0),
        "{}",
        mozart_tests::stdout(&cancel)
    );
    poll_status(&env, "gone", 20, |d| d["status"] == "cancelled");
    std::fs::remove_file(env.home.join("filler")).unwrap();
    let resume = env.mozart(&["resume", "gone"]);
    assert_eq!(
        resume.status.code(),
        Some(0),
        "{}",
        mozart_tests::stdout(&resume)
    );
    let done = wait_all_terminal(&env, &["gone".to_string()], 30).remove(0);
    assert_eq!(done["status"], "completed", "{done:#}");
    assert!(ws.join("out-2.txt").exists());
}

/// A conductor killed (`kill -9`) while its home is full starts again at once, saying it
/// accepts no work and why — it used to wait 30 s and fail "did not become ready" while it
/// ran — and the job it was running is held paused, saying why and what to do: not shown
/// running with nothing running (`resume` refused it as running), nor failed. Once space is
/// freed, `mozart resume` goes on from the checkpoint: no completed sheet runs again.
#[test]
fn a_restart_on_a_full_disk_holds_the_running_job_paused_until_space_returns() {
    let env = TestEnv::new();
    let Some(_home) = SmallHome::mount(&env, "6m") else {
        return;
    };
    env.start_conductor();
    let (score, ws) = shell_score(&env, "diskfull", Shape::Sequential(30), 0.4);
    assert_eq!(submit(&env, &score)["status"], "accepted");
    let doc = poll_status(&env, "diskfull", 30, |d| {
        sheet(d, 2)["status"] == "completed"
    });
    let durable: Vec<u32> = (1..=30)
        .filter(|n| sheet(&doc, *n)["status"] == "completed")
        .collect();
    fill(&env.home.join("filler"));
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(10);
    while mozart_tests::alive(pid) {
        assert!(Instant::now() < deadline, "the conductor did not die");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = env.start_conductor();
    let said = String::from_utf8_lossy(&started.stderr);
    assert!(
        said.contains("it is not accepting work: the disk is full"),
        "{said}"
    );
    let doc = status(&env, "diskfull").unwrap();
    assert_eq!(doc["status"], "paused", "{doc:#}");
    let why = doc["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("restarted on a full disk") && why.contains("mozart resume diskfull"),
        "{doc:#}"
    );
    assert!(
        (1..=30).all(|n| sheet(&doc, n)["status"] != "in_progress"),
        "no sheet shown running: {doc:#}"
    );
    let list = env.mozart(&["list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(
        list.to_string().contains("\"status\":\"paused\""),
        "list agrees: {list:#}"
    );

    std::fs::remove_file(env.home.join("filler")).unwrap();
    let resume = env.mozart(&["resume", "diskfull"]);
    assert_eq!(
        resume.status.code(),
        Some(0),
        "{}{}",
        mozart_tests::stdout(&resume),
        String::from_utf8_lossy(&resume.stderr)
    );
    let docs = wait_all_terminal(&env, &["diskfull".to_string()], 60);
    assert_eq!(docs[0]["status"], "completed", "{:#}", docs[0]);
    let ledger = std::fs::read_to_string(ws.join("ledger.txt")).unwrap();
    for n in durable {
        let runs = ledger
            .lines()
            .filter(|l| *l == format!("diskfull {n}"))
            .count();
        assert_eq!(runs, 1, "completed sheet {n} ran once: {ledger}");
    }
}
