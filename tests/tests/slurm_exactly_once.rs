//! Exactly once on a real Slurm (issue 25): the conductor killed (`kill -9`) at points of the
//! submit path, the controller frozen (`SIGSTOP slurmctld`) across a submission, and the
//! controller restarted while jobs run — every sheet's ledger shows exactly one run, and no
//! job of ours (held or otherwise) is left in the queue.
//!
//! These tests stop and restart the test cluster's `slurmctld`, so each holds the cluster
//! alone (`mozart_tests::slurm_exclusive`; other Slurm tests hold it shared); a guard always resumes (or restarts) the
//! controller, even when a test fails. `tests/slurm/setup.sh` starts the cluster; without one
//! these tests print why and pass without running (on CI they fail).

use crate::harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::slurm_attempt_files::remote_leftovers;
use crate::slurm_placement::counts;
use harness::*;
use mozart_tests::users::missing;
use mozart_tests::{stdout, TestEnv};

/// The test cluster's state directory (tests/slurm/setup.sh).
const SLURM_DIR: &str = "/var/tmp/mozart-slurm";

fn slurm_up() -> bool {
    if !crate::slurm_placement::slurm_up() {
        return false;
    }
    if !Path::new(SLURM_DIR).join("slurmctld.pid").exists() {
        missing(
            "the test cluster of tests/slurm/setup.sh (these tests stop its controller)",
            "run tests/slurm/setup.sh",
        );
        return false;
    }
    true
}

fn ctld_pid() -> u32 {
    std::fs::read_to_string(Path::new(SLURM_DIR).join("slurmctld.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The controller frozen or stopped by a test: resumed (SIGCONT) and, if it is gone,
/// restarted by tests/slurm/setup.sh when the guard drops — whatever the test did.
struct Controller;

impl Controller {
    fn freeze(&self) {
        mozart_tests::signal(ctld_pid(), "STOP");
    }
    fn thaw(&self) {
        mozart_tests::signal(ctld_pid(), "CONT");
    }
    /// Stop slurmctld (its state is saved), wait `down`, start it again.
    fn restart(&self, down: Duration) {
        let pid = ctld_pid();
        mozart_tests::signal(pid, "TERM");
        let until = Instant::now() + Duration::from_secs(30);
        while mozart_tests::alive(pid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(down);
        start_cluster();
    }
}

fn start_cluster() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/setup.sh");
    let out = Command::new("bash").arg(script).output().unwrap();
    assert!(out.status.success(), "setup.sh: {}", stdout(&out));
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(Path::new(SLURM_DIR).join("slurmctld.pid")) {
            if let Ok(pid) = text.trim().parse::<u32>() {
                mozart_tests::signal(pid, "CONT");
            }
        }
        start_cluster();
    }
}

/// Our Slurm jobs (id, name, state) whose name starts with `prefix`, in any state Slurm
/// still lists (held ones included).
fn squeue(prefix: &str) -> Vec<(String, String, String)> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%i|%j|%T|%r"])
        .output()
        .unwrap();
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('|');
            Some((
                parts.next()?.trim().to_string(),
                parts.next()?.trim().to_string(),
                format!(
                    "{} {}",
                    parts.next()?.trim(),
                    parts.next().unwrap_or("").trim()
                ),
            ))
        })
        .filter(|(_, name, _)| name.starts_with(prefix))
        .collect()
}

/// A fan-out of `voices` sheets placed on Slurm, no retries: each sheet appends its number
/// to `<ws>/ledger` (one line per execution), sleeps `sleep` seconds, then writes its
/// Slurm job id to `out-<n>.txt`.
fn score(env: &TestEnv, name: &str, voices: u32, sleep: u32) -> (PathBuf, PathBuf) {
    score_placed(env, name, voices, sleep, "")
}

/// [`score`] with more `placement` fields (`placement_extra`, lines of YAML).
fn score_placed(
    env: &TestEnv,
    name: &str,
    voices: u32,
    sleep: u32,
    placement_extra: &str,
) -> (PathBuf, PathBuf) {
    let ws = env.work.join(format!("{name}-ws"));
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: standin-text
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: {voices}}}
retry: {{max_retries: 0}}
placement:
  type: slurm
  poll_interval_seconds: 0.2{placement_extra}
sheet:
  size: 1
  total_items: 1
  fan_out: {{1: {voices}}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep {sleep}
    RUN: echo "slurm:$SLURM_JOB_ID" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
        ws = ws.display(),
    );
    (env.write_score(name, &yaml), ws)
}

/// The job completed, each of its `voices` sheets ran exactly once, and within a while no
/// job of it is left in Slurm's queue (a held duplicate would stay there forever).
fn assert_exactly_once(env: &TestEnv, job: &str, ws: &Path, voices: u32) {
    let doc = wait_terminal(env, job, 240.0);
    assert_eq!(doc["status"], "completed", "{job}: {doc:#}");
    let ran = counts(&ws.join("ledger"));
    assert_eq!(ran.len() as u32, voices, "{job}: every sheet ran: {ran:?}");
    assert!(
        ran.values().all(|c| *c == 1),
        "{job}: a sheet ran more than once: {ran:?}"
    );
    // Nothing of the attempts stays in the workspace, not even an array's script that a
    // conductor killed during the array's sbatch left behind.
    let state = ws.join(".mozart-slurm");
    // (And the registry's notes of files to remove, written with the results, go with them.)
    let deadline = Instant::now() + Duration::from_secs(30);
    while state.exists() || !remote_leftovers(env).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{job}: files left in {}: {:?}; noted for removal: {:?}",
            state.display(),
            files_under(&state),
            remote_leftovers(env)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A duplicate released by hand later must not run either: none may be left.
    let prefix = format!("mozart-{job}-");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: Vec<_> = squeue(&prefix)
            .into_iter()
            .filter(|(_, _, st)| !st.starts_with("COMPLET"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{job}: Slurm jobs left behind: {left:?}\nconductor log:\n{}",
            tail(&env.log(), 4000)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every path under `dir` (what a test finds left behind).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            }
            found.push(e.path());
        }
    }
    found
}

/// The `sbatch` calls running on this machine, and of them those whose parent is `parent`.
/// The test holds the cluster alone: no other test's calls are among them.
fn sbatch_calls(parent: u32) -> (usize, usize) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    let parents: Vec<Option<u32>> = procs
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "sbatch")
        })
        .map(|e| {
            // The parent is the second field after the command's closing parenthesis.
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .collect();
    let of_parent = parents.iter().filter(|p| **p == Some(parent)).count();
    (parents.len(), of_parent)
}

/// Wait until the conductor has `n` sbatch calls waiting at once (on a frozen controller).
fn wait_sbatch_in_flight(env: &TestEnv, n: usize) {
    let pid = env.conductor_pid().expect("conductor pid");
    poll(env, 60.0, &format!("{n} sbatch call(s) in flight"), || {
        (sbatch_calls(pid).1 >= n).then_some(())
    });
}

/// Wait until no sbatch call runs any more (the orphans of a killed conductor answered).
fn wait_no_sbatch(env: &TestEnv) {
    poll(env, 60.0, "the orphaned sbatch calls to end", || {
        (sbatch_calls(0).0 == 0).then_some(())
    });
}

fn kill_conductor(env: &TestEnv) {
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
}

/// `kill -9` of the conductor at points of the submit path: while its `sbatch` calls wait on
/// a frozen controller (the jobs are created held after the conductor is gone), and at
/// timed moments after `mozart run` (before, during and after the submissions). The
/// restarted conductor finds each attempt's job by the name it recorded before `sbatch`:
/// every sheet runs once, no held job is left.
#[test]
fn kill_9_anywhere_in_the_submit_path_runs_each_sheet_once() {
    // Alone on the cluster: they freeze and restart its one controller.
    let _one = mozart_tests::slurm_exclusive();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    let ctl = Controller;
    let tag = std::process::id();
    // 1. sbatch in flight against a frozen controller when the conductor dies.
    env.start_conductor();
    let job = format!("once-frozen-{tag}");
    let (path, ws) = score(&env, &job, 4, 1);
    ctl.freeze();
    run(&env, &path, &[]);
    wait_sbatch_in_flight(&env, 4);
    kill_conductor(&env);
    ctl.thaw();
    // The orphaned sbatch calls get their answers: held jobs nobody released.
    wait_no_sbatch(&env);
    env.start_conductor();
    assert_exactly_once(&env, &job, &ws, 4);
    // 2. Timed kills: right after the submission was accepted, while the sheets are
    //    submitted, while they are being recorded and released.
    for (i, delay_ms) in [150u64, 400, 800, 1500].into_iter().enumerate() {
        let job = format!("once-kill{i}-{tag}");
        let (path, ws) = score(&env, &job, 4, 1);
        run(&env, &path, &[]);
        std::thread::sleep(Duration::from_millis(delay_ms));
        kill_conductor(&env);
        env.start_conductor();
        assert_exactly_once(&env, &job, &ws, 4);
    }
}

/// The controller frozen for longer than sbatch waits for an answer (its client gives up
/// with "Socket timed out", the controller accepts the job when it resumes), then, while
/// the jobs run, stopped and started again. No attempt is spent on the outage (the score
/// allows no retry), status says the conductor waits for the controller, and every sheet
/// runs once.
#[test]
fn a_frozen_then_restarted_controller_costs_no_attempt_and_no_duplicate() {
    // Alone on the cluster: they freeze and restart its one controller.
    let _one = mozart_tests::slurm_exclusive();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    env.start_conductor();
    let ctl = Controller;
    let job = format!("once-paused-{}", std::process::id());
    let (path, ws) = score(&env, &job, 4, 12);
    ctl.freeze();
    run(&env, &path, &[]);
    // sbatch's own timeout (MessageTimeout, 10 s) passes while the controller is frozen.
    let waiting = wait_status(&env, &job, 60.0, |d| {
        d["sheets"].as_object().is_some_and(|s| {
            s.values().any(|sh| {
                sh["live"]["last_event"]
                    .as_str()
                    .is_some_and(|e| e.contains("waiting for the Slurm controller"))
            })
        })
    });
    assert_ne!(waiting["status"], "failed", "{waiting:#}");
    // The outage outlasts more than one call of each sheet: its sbatch gave up, and so did
    // the look for the job it may have created (the controller accepts those jobs when it
    // resumes).
    poll(
        &env,
        90.0,
        "every sheet to find the controller gone twice",
        || {
            let log = env.log();
            let waits = |n: u64| {
                log.lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .filter(|e| {
                        e["event"] == "Slurm controller unavailable; waiting"
                            && e["job_id"] == job.as_str()
                            && e["sheet"] == n
                    })
                    .count()
            };
            (1..=4).all(|n| waits(n) >= 2).then_some(())
        },
    );
    ctl.thaw();
    poll(&env, 120.0, "every sheet to start on Slurm", || {
        (ledger(&ws.join("ledger")).len() >= 4).then_some(())
    });
    ctl.restart(Duration::from_secs(3));
    assert_exactly_once(&env, &job, &ws, 4);
    drop(ctl);
}

/// The same for a fan-out submitted as one job array (`placement.array: true`): `kill -9`
/// while the array's `sbatch` waits on a frozen controller, and at timed moments around
/// the array's gathering, name records, submission, task records and release. The restart
/// finds each sheet's task by the array's name and its task index (or its recorded task
/// id): every sheet runs once, no held task is left.
#[test]
fn kill_9_anywhere_in_an_array_submission_runs_each_sheet_once() {
    let _one = mozart_tests::slurm_exclusive();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    let ctl = Controller;
    let tag = std::process::id();
    env.start_conductor();
    let job = format!("arr-frozen-{tag}");
    let (path, ws) = score_placed(&env, &job, 6, 1, "\n  array: true");
    ctl.freeze();
    run(&env, &path, &[]);
    // The six sheets gathered into one array: one sbatch call.
    wait_sbatch_in_flight(&env, 1);
    kill_conductor(&env);
    ctl.thaw();
    wait_no_sbatch(&env);
    env.start_conductor();
    assert_exactly_once(&env, &job, &ws, 6);
    for (i, delay_ms) in [200u64, 350, 450, 600, 900, 1500].into_iter().enumerate() {
        let job = format!("arr-kill{i}-{tag}");
        let (path, ws) = score_placed(&env, &job, 6, 1, "\n  array: true");
        run(&env, &path, &[]);
        std::thread::sleep(Duration::from_millis(delay_ms));
        kill_conductor(&env);
        env.start_conductor();
        assert_exactly_once(&env, &job, &ws, 6);
    }
}
