//! A fan-out as one Slurm job array (`placement.array: true`, issue 25 item 5) on a real
//! Slurm: one submission for the sheets dispatched together, each sheet one task with its
//! own result and state, a failed sheet's retry a job of its own, and the per-user submit
//! limit (`MaxSubmitJobs`, which counts every task) honoured.
//!
//! `tests/slurm/setup.sh` starts the cluster; without one these tests print why and pass
//! without running (on CI they fail).

use crate::harness;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::slurm_placement::{counts, slurm_up};
use harness::*;
use mozart_tests::{stdout, TestEnv};

/// A fan-out of `voices` sheets placed on Slurm as one array. Each sheet appends its number
/// to `ledger` per run, sleeps `sleep` s, then writes `<job id>:<array id>:<task>` (the
/// Slurm variables it sees) to `out-<n>.txt` — except sheet `fail_once`'s first run, which
/// crashes (its instrument killed by SIGKILL; the retry succeeds).
pub(crate) fn array_score(
    env: &TestEnv,
    name: &str,
    voices: u32,
    sleep: u32,
    fail_once: u32,
    placement_extra: &str,
) -> (PathBuf, PathBuf) {
    let ws = env.work.join(format!("{name}-ws"));
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: standin-text
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: {voices}}}
retry: {{max_retries: 3, base_delay_seconds: 0.1, jitter: false}}
placement:
  type: slurm
  array: true
  poll_interval_seconds: 0.2{placement_extra}
sheet:
  size: 1
  total_items: 1
  fan_out: {{1: {voices}}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep {sleep}
    RUN: if [ {{{{ sheet_num }}}} != {fail_once} ] || [ -f "{{{{ workspace }}}}/failed-once" ]; then echo "$SLURM_JOB_ID:${{SLURM_ARRAY_JOB_ID:-none}}:${{SLURM_ARRAY_TASK_ID:-none}}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"; else touch "{{{{ workspace }}}}/failed-once"; kill -9 $PPID; fi
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
        ws = ws.display(),
    );
    (env.write_score(name, &yaml), ws)
}

/// What sheet `n` saw: (job id, array id, task id) — `none` outside an array.
pub(crate) fn seen(ws: &Path, n: u32) -> (String, String, String) {
    let text = std::fs::read_to_string(ws.join(format!("out-{n}.txt")))
        .unwrap_or_else(|e| panic!("out-{n}.txt: {e}"));
    let mut parts = text.trim().split(':').map(str::to_string);
    (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    )
}

/// Slurm's accounting of our jobs named `mozart-<job>-…`: (JobID, JobName).
fn accounted(job: &str) -> Vec<(String, String)> {
    let out = Command::new("sacct")
        .args([
            "-n",
            "-X",
            "-P",
            "--starttime=now-3600seconds",
            "-o",
            "JobID,JobName%200",
        ])
        .output()
        .unwrap();
    let prefix = format!("mozart-{job}-");
    stdout(&out)
        .lines()
        .filter_map(|l| l.split_once('|'))
        .filter(|(_, name)| name.starts_with(&prefix))
        .map(|(id, name)| (id.to_string(), name.to_string()))
        .collect()
}

/// Six sheets dispatched together go to Slurm as ONE array (one submission, six tasks —
/// each sheet saw the same array id and its own task), each sheet has its own state and
/// result, the status shows each sheet's task while it runs, and sheet 4, whose first run
/// fails, is retried as a Slurm job of its own (the array never runs again).
#[test]
fn a_fan_out_goes_as_one_job_array_with_per_sheet_states() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    env.start_conductor();
    let job = format!("array-fan-{}", std::process::id());
    let (path, ws) = array_score(&env, &job, 6, 4, 4, "");
    run(&env, &path, &[]);
    // While the tasks run, each sheet's status names its own task of the one array.
    let live = wait_status(&env, &job, 120.0, |d| {
        (1..=6).all(|n| {
            sheet(d, n)["live"]["last_event"]
                .as_str()
                .is_some_and(|e| e.contains("running as Slurm job") && e.contains('_'))
        })
    });
    let arrays: BTreeSet<String> = (1..=6)
        .map(|n| {
            let e = sheet(&live, n)["live"]["last_event"]
                .as_str()
                .unwrap()
                .to_string();
            e.split("Slurm job ")
                .nth(1)
                .and_then(|r| r.split('_').next())
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(arrays.len(), 1, "one array for all sheets: {live:#}");
    let doc = wait_terminal(&env, &job, 240.0);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\n{}",
        tail(&env.log(), 4000)
    );
    for n in 1..=6 {
        assert_eq!(sheet(&doc, n)["status"], "completed", "sheet {n}: {doc:#}");
    }
    let ran = counts(&ws.join("ledger"));
    let expected: std::collections::BTreeMap<u32, u32> =
        (1..=6).map(|n| (n, if n == 4 { 2 } else { 1 })).collect();
    assert_eq!(ran, expected, "each sheet once, sheet 4 twice (its retry)");
    // One array id for the five first attempts that succeeded, each its own task.
    let mut array_ids = BTreeSet::new();
    let mut tasks = BTreeSet::new();
    for n in [1, 2, 3, 5, 6] {
        let (_, array, task) = seen(&ws, n);
        assert_ne!(array, "none", "sheet {n} ran outside an array");
        array_ids.insert(array);
        tasks.insert(task);
    }
    assert_eq!(array_ids.len(), 1, "one submission: {array_ids:?}");
    assert_eq!(tasks.len(), 5, "one task per sheet: {tasks:?}");
    // The retry of sheet 4 is a job of its own.
    let (retry_job, retry_array, _) = seen(&ws, 4);
    assert_eq!(
        retry_array, "none",
        "sheet 4's retry ran as a job of its own"
    );
    // Slurm's accounting: one array of six tasks plus the single retry.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let acc = accounted(&job);
        let in_array = acc.iter().filter(|(id, _)| id.contains('_')).count();
        let singles: Vec<_> = acc.iter().filter(|(id, _)| !id.contains('_')).collect();
        if in_array == 6 && singles.len() == 1 {
            assert_eq!(singles[0].0, retry_job);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Slurm's accounting shows {acc:?}, not one array of 6 tasks and one retry"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Nothing of the attempts is left on disk once their results are recorded.
    let state = ws.join(".mozart-slurm").join(&job);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(&state).map_or(0, |d| d.count()) > 0 {
        assert!(
            Instant::now() < deadline,
            "attempt files left: {:?}",
            std::fs::read_dir(&state)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Five sheets as an array on the QOS `mozart-limited` (2 jobs per user, every array task
/// counting): the array is refused whole, so the conductor splits it until the parts fit
/// and lets the rest wait their turn — never more than 2 of our jobs in Slurm, every sheet
/// once, no attempt spent.
#[test]
fn an_array_beyond_the_submit_limit_is_split_and_waits_its_turn() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    env.start_conductor();
    let job = format!("array-limit-{}", std::process::id());
    let (path, ws) = array_score(&env, &job, 5, 2, 0, "\n  qos: mozart-limited");
    run(&env, &path, &[]);
    let prefix = format!("mozart-{job}-");
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let out = Command::new("squeue")
            .args(["-h", "-r", "-o", "%i|%j"])
            .output()
            .unwrap();
        let ours = stdout(&out)
            .lines()
            .filter(|l| l.split('|').nth(1).is_some_and(|n| n.starts_with(&prefix)))
            .count();
        most = most.max(ours);
        let doc = status(&env, &job);
        if matches!(doc["status"].as_str(), Some("completed" | "failed")) {
            assert_eq!(
                doc["status"],
                "completed",
                "{doc:#}\n{}",
                tail(&env.log(), 4000)
            );
            break;
        }
        assert!(Instant::now() < deadline, "not done: {doc:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(most <= 2, "{most} of our jobs in Slurm at once (limit 2)");
    let ran = counts(&ws.join("ledger"));
    assert_eq!(ran.len(), 5, "{ran:?}");
    assert!(ran.values().all(|c| *c == 1), "{ran:?}");
    let doc = status(&env, &job);
    for n in 1..=5 {
        assert_eq!(sheet(&doc, n)["attempt_count"], 1, "sheet {n}: {doc:#}");
    }
}

/// `mozart cancel` of a job whose sheets run as one array: every task leaves Slurm's queue
/// (each sheet's attempt cancels its own task, so the whole array goes), and the job is
/// cancelled.
#[test]
fn mozart_cancel_scancels_the_array() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    env.start_conductor();
    let job = format!("array-cancel-{}", std::process::id());
    let (path, ws) = array_score(&env, &job, 4, 120, 0, "");
    run(&env, &path, &[]);
    poll(&env, 120.0, "the sheets to start on Slurm", || {
        (ledger(&ws.join("ledger")).len() >= 4).then_some(())
    });
    let tasks = || {
        let out = Command::new("squeue")
            .args(["-h", "-r", "-o", "%i|%j"])
            .output()
            .unwrap();
        let prefix = format!("mozart-{job}-");
        stdout(&out)
            .lines()
            .filter(|l| l.split('|').nth(1).is_some_and(|n| n.starts_with(&prefix)))
            .map(|l| l.split('|').next().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    let running = tasks();
    assert_eq!(running.len(), 4, "four tasks: {running:?}");
    assert!(
        running.iter().all(|id| id.contains('_')),
        "array tasks: {running:?}"
    );
    let out = env.mozart(&["cancel", &job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
    poll(&env, 60.0, "the array's tasks to leave the queue", || {
        tasks().is_empty().then_some(())
    });
    let doc = wait_terminal(&env, &job, 30.0);
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
}
