//! How an attempt that did not end by itself leaves its sheet: the output logs of a
//! cancelled attempt, and a sheet whose process was killed from outside (issues 22, 23).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{processes_in, submit_now, wait_status};
use mozart_tests::{stdout, TestEnv};

/// The instrument processes running in `ws`, waiting up to 30 s for them to start.
fn running_in(ws: &Path) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = processes_in(ws);
        if !pids.is_empty() {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "no process started in {}",
            ws.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The process group of `pid` (field 5 of /proc/PID/stat, after the command's parentheses).
fn pgid(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(2).unwrap().parse().unwrap()
}

#[test]
fn a_cancelled_silent_sheet_leaves_no_empty_log_files() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: hush\nworkspace: ./hush-ws\ninstrument: shell\n\
                sheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: sleep 30\"\n";
    let path = env.write_score("hush", yaml);
    submit_now(&env, &path);
    let ws = env.work.join("hush-ws");
    running_in(&ws);
    let out = env.mozart(&["cancel", "hush"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_status(&env, "hush", 30.0, |d| d["status"] == "cancelled");
    // The attempt's clean-up runs as it is dropped: give it the moment it takes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let empty: Vec<String> = std::fs::read_dir(ws.join("logs"))
            .map(|dir| {
                dir.flatten()
                    .filter(|e| e.metadata().is_ok_and(|m| m.len() == 0))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if empty.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a cancelled `sleep 30` left empty logs: {empty:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_sheet_killed_from_outside_is_retried_only_within_max_retries_and_says_so() {
    let env = TestEnv::new();
    env.start_conductor();
    // Its first attempt sleeps (and is killed); a second one finishes at once.
    let score = |name: &str, retries: u32| {
        format!(
            "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
             retry: {{max_retries: {retries}, base_delay_seconds: 1, jitter: false}}\n\
             sheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    \
             RUN: if [ -e again ]; then echo second; else touch again; sleep 30; fi\n"
        )
    };
    for (name, retries) in [("once", 1), ("twice", 2)] {
        let path = env.write_score(name, &score(name, retries));
        submit_now(&env, &path);
        let pids = running_in(&env.work.join(format!("{name}-ws")));
        let group = pgid(pids[0]);
        let killed = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    // `max_retries` is the number of attempts in all (docs/scores.md): one attempt, failed,
    // and its message does not promise a retry.
    let doc = wait_status(&env, "once", 60.0, |d| d["status"] == "failed");
    let text = stdout(&env.mozart(&["errors", "once"]));
    assert!(text.contains("SIGKILL"), "{text}\n{doc:#}");
    assert!(!text.contains("retried while"), "{text}");
    assert!(
        text.contains("retry.max_retries counts every attempt"),
        "{text}"
    );
    // With attempts left it runs again, and the second attempt completes the job.
    let doc = wait_status(&env, "twice", 60.0, |d| {
        d["status"] == "completed" || d["status"] == "failed"
    });
    assert_eq!(doc["status"], "completed", "{doc:#}");
}
