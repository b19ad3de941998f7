//! Sheets placed on a real Slurm (issue 17; docs/design/distributed.md): a 20-sheet fan-out
//! through the stand-in CLI, `kill -9` of the conductor while Slurm jobs run (restart
//! re-attaches, every sheet runs exactly once), and `mozart cancel` → `scancel`.
//!
//! `tests/slurm/setup.sh` (run by `.ci/run`) starts a single-node Slurm; without one these
//! tests print why and pass without running.

use crate::harness;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::*;
use mozart_tests::users::missing;
use mozart_tests::{stdout, TestEnv};

/// Whether a Slurm node is up; prints why not. A node still `completing` the previous
/// test's job (its epilog, a few seconds) is waited for, not taken for a missing Slurm.
pub(crate) fn slurm_up() -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let Ok(o) = Command::new("sinfo").args(["-h", "-o", "%T"]).output() else {
            break;
        };
        if !o.status.success() {
            break;
        }
        let text = String::from_utf8_lossy(&o.stdout);
        if ["idle", "mixed", "allocated"]
            .iter()
            .any(|s| text.contains(s))
        {
            return true;
        }
        if !text.contains("completing") || std::time::Instant::now() >= deadline {
            missing(
                &format!("an idle Slurm node (it is {})", text.trim()),
                "run tests/slurm/setup.sh",
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    missing(
        "a running Slurm (sinfo does not answer)",
        "run tests/slurm/setup.sh",
    );
    false
}

/// Slurm jobs (id, name, state) whose name starts with `prefix`.
pub(crate) fn squeue(prefix: &str) -> Vec<(String, String, String)> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%i|%j|%T"])
        .output()
        .unwrap();
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('|');
            Some((
                parts.next()?.trim().to_string(),
                parts.next()?.trim().to_string(),
                parts.next()?.trim().to_string(),
            ))
        })
        .filter(|(_, name, _)| name.starts_with(prefix))
        .collect()
}

/// Cancels the Slurm jobs whose name starts with its prefix when dropped: a test's jobs that
/// wait an hour or sleep minutes must not outlive a failed assertion.
pub(crate) struct Scancel(pub(crate) String);

impl Drop for Scancel {
    fn drop(&mut self) {
        for (id, _, _) in squeue(&self.0) {
            let _ = Command::new("scancel").arg(id).status();
        }
    }
}

/// A job whose `voices` sheets submit Slurm jobs that wait in the queue for an hour
/// (`--begin=now+1hour`), each appending its number to `<workspace>/ledger` if it ever ran;
/// `placement` adds fields to the placement (`"queue_timeout_seconds: 5, "`), `extra` lines to
/// the score. Submitted with `mozart run`; the jobs are cancelled when the returned guard drops.
struct Queued {
    job: String,
    ws: PathBuf,
    _scancel: Scancel,
}

fn queued(env: &TestEnv, base: &str, voices: u32, placement: &str, extra: &str) -> Queued {
    let job = unique(base);
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
{extra}placement: {{type: slurm, {placement}extra_args: ["--begin=now+1hour"]}}
sheet:
  size: 1
  total_items: 1
  fan_out: {{1: {voices}}}
parallel: {{enabled: true, max_concurrent: {voices}}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    let scancel = Scancel(format!("mozart-{job}-"));
    run(env, &path, &[]);
    Queued {
        job,
        ws,
        _scancel: scancel,
    }
}

/// Wait until `voices` sheets of `job` show in status as waiting in Slurm's queue.
fn wait_queued(env: &TestEnv, job: &str, voices: usize) {
    poll(env, 120.0, "the sheets to wait in Slurm's queue", || {
        let text = stdout(&env.mozart(&["status", job]));
        (text.matches("(PENDING: BeginTime)").count() == voices).then_some(())
    });
}

/// A fan-out of `voices` sheets on the stand-in CLI, placed on Slurm. Each sheet appends
/// its number to `ledger` when it starts (the count of executions), sleeps `sleep`
/// seconds (a template expression), then writes its Slurm job id to `out-<n>.txt`.
fn score(env: &TestEnv, name: &str, voices: u32, sleep: &str) -> (PathBuf, PathBuf) {
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
  poll_interval_seconds: 0.2
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
    let path = env.write_score(name, &yaml);
    (path, ws)
}

/// `base` made unique to this test process: the Slurm cluster may be shared with other test
/// runs at the same time, and jobs are told apart by name (`mozart-<job>-s<n>-a<k>`).
fn unique(base: &str) -> String {
    format!("{base}-{}", std::process::id())
}

pub(crate) fn counts(ledger_path: &Path) -> BTreeMap<u32, u32> {
    let mut counts = BTreeMap::new();
    for line in ledger(ledger_path) {
        *counts
            .entry(line.trim().parse::<u32>().unwrap())
            .or_default() += 1;
    }
    counts
}

/// The Slurm job id each sheet's output names (`slurm:<id>`).
fn slurm_ids(ws: &Path, sheets: u32) -> Vec<String> {
    (1..=sheets)
        .map(|n| {
            let text = std::fs::read_to_string(ws.join(format!("out-{n}.txt")))
                .unwrap_or_else(|e| panic!("out-{n}.txt: {e}"));
            let id = text.trim().strip_prefix("slurm:").unwrap().to_string();
            assert!(
                !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()),
                "sheet {n} did not run inside a Slurm job: {text:?}"
            );
            id
        })
        .collect()
}

fn env_with_standin() -> TestEnv {
    let env = TestEnv::new();
    install_instruments(&env);
    env.start_conductor();
    env
}

#[test]
fn a_twenty_sheet_fan_out_runs_as_slurm_jobs() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-fan");
    let (path, ws) = score(&env, &job, 20, "1");
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 240.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    for n in 1..=20 {
        assert_eq!(sheet(&doc, n)["status"], "completed", "sheet {n}: {doc:#}");
    }
    let ran = counts(&ws.join("ledger"));
    assert_eq!(ran.len(), 20, "{ran:?}");
    assert!(ran.values().all(|c| *c == 1), "a sheet ran twice: {ran:?}");
    let ids: BTreeSet<String> = slurm_ids(&ws, 20).into_iter().collect();
    assert_eq!(ids.len(), 20, "one Slurm job per sheet: {ids:?}");
    // A job can still be completing for a moment after its command's exit was collected.
    poll(&env, 30.0, "no job of ours left in the queue", || {
        squeue(&format!("mozart-{job}-")).is_empty().then_some(())
    });
}

#[test]
fn kill_9_of_the_conductor_reattaches_to_running_slurm_jobs() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    // Sheet n sleeps 2n seconds: while the conductor is down some jobs finish (collected on
    // restart) and others are still running (re-attached to).
    let job = unique("slurm-crash");
    let (path, ws) = score(&env, &job, 6, "{{ sheet_num * 2 }}");
    let led = ws.join("ledger");
    run(&env, &path, &[]);
    poll(&env, 120.0, "every sheet to start on Slurm", || {
        (ledger(&led).len() >= 6).then_some(())
    });
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    let running_at_kill = squeue(&format!("mozart-{job}-"));
    assert!(
        !running_at_kill.is_empty(),
        "the Slurm jobs outlive the conductor"
    );
    // Restart once the first job has ended while the conductor was down: the others still
    // run (the last sleeps 12 s).
    let running = |jobs: &[(String, String, String)]| {
        jobs.iter().filter(|(_, _, st)| st == "RUNNING").count()
    };
    poll(
        &env,
        60.0,
        "a Slurm job to end while the conductor is down",
        || (running(&squeue(&format!("mozart-{job}-"))) < running(&running_at_kill)).then_some(()),
    );
    env.start_conductor();
    let doc = wait_terminal(&env, &job, 180.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let ran = counts(&led);
    assert_eq!(ran.len(), 6, "{ran:?}");
    assert!(
        ran.values().all(|c| *c == 1),
        "every sheet ran exactly once: {ran:?}"
    );
    let ids: BTreeSet<String> = slurm_ids(&ws, 6).into_iter().collect();
    assert_eq!(ids.len(), 6, "no sheet was submitted twice: {ids:?}");
    assert!(
        env.log().contains("re-attaching"),
        "the restarted conductor re-attached:\n{}",
        tail(&env.log(), 4000)
    );
}

/// A sheet re-attached after a conductor restart has been running since its Slurm job
/// started, not since the restart: `mozart status` counts "running for" from Slurm's start
/// time (before, it read a few seconds for a job that had run for minutes).
#[test]
fn a_reattached_sheet_runs_for_as_long_as_its_slurm_job() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-runningfor");
    // Two voices: the status lists each sheet on a line of its own.
    let (path, ws) = score(&env, &job, 2, "120");
    let _scancel = Scancel(format!("mozart-{job}-"));
    run(&env, &path, &[]);
    poll(&env, 120.0, "the sheets to start on Slurm", || {
        (ledger(&ws.join("ledger")).len() >= 2).then_some(())
    });
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(8));
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    let doc = wait_status(&env, &job, 60.0, |d| {
        sheet(d, 1)["live"]["last_event"]
            .as_str()
            .is_some_and(|e| e.contains("running as Slurm job"))
    });
    let live = &sheet(&doc, 1)["live"];
    let running_for = live["elapsed_seconds"].as_f64().unwrap_or_default();
    let ran = started.elapsed().as_secs_f64();
    assert!(
        running_for >= ran - 1.0,
        "running for {running_for:.1}s, but its Slurm job has run for {ran:.1}s: {live:#}"
    );
    // The sheet's own line (`in_progress (…)`) counts from the same start, not from the
    // restart (before, `in_progress (3.1s)` beside `Running for: 17.7s`).
    let text = stdout(&env.mozart(&["status", &job]));
    let shown = text
        .split_once("in_progress (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(d, _)| d.to_string())
        .unwrap_or_default();
    let secs = shown
        .split(' ')
        .map(|part| {
            let (n, unit) = part.split_at(part.len().saturating_sub(1));
            n.parse::<f64>().unwrap_or(f64::NAN)
                * match unit {
                    "h" => 3600.0,
                    "m" => 60.0,
                    _ => 1.0,
                }
        })
        .sum::<f64>();
    assert!(
        secs >= ran - 1.0,
        "the sheet's line says in_progress ({shown}), but its Slurm job has run for {ran:.1}s:\n{text}"
    );
    let text = stdout(&env.mozart(&["status", &job]));
    assert!(!text.contains("Running for: 0s"), "{text}");
    let out = env.mozart(&["cancel", &job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
}

/// The Slurm job of each queued sheet of `job` (`squeue -r`: an array's tasks one by one),
/// with Slurm's reason for its wait.
fn queued_tasks(job: &str) -> Vec<(String, String)> {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-o", "%i|%j|%r"])
        .output()
        .unwrap();
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('|');
            let id = parts.next()?.trim().to_string();
            let name = parts.next()?.trim();
            let reason = parts.next()?.trim().to_string();
            name.starts_with(&format!("mozart-{job}-"))
                .then_some((id, reason))
        })
        .collect()
}

/// Someone holds a sheet's Slurm job in the queue — an administrator (`scontrol hold`) or
/// the user (`scontrol uhold`, the kind of hold the conductor submits with) —, then the
/// conductor is killed and started again: the holds stay on (before, the re-attach ran
/// `scontrol release` on every job it adopted, and the held jobs went back to waiting to
/// run), for a job of its own and for an array's task, and status says the job is held
/// and by whom.
#[test]
fn a_restart_keeps_the_holds_someone_put_on_queued_slurm_jobs() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let single = queued(&env, "slurm-held-one", 1, "", "");
    let array = queued(&env, "slurm-held-array", 2, "array: true, ", "");
    wait_queued(&env, &single.job, 1);
    wait_queued(&env, &array.job, 2);
    let (one, _) = queued_tasks(&single.job).remove(0);
    let (task, _) = queued_tasks(&array.job).remove(0);
    assert!(task.contains('_'), "an array task: {task}");
    for (how, id) in [("hold", &one), ("uhold", &task)] {
        let out = Command::new("scontrol").args([how, id]).output().unwrap();
        assert!(out.status.success(), "scontrol {how} {id}: {out:?}");
    }
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    for (job, by) in [
        (&single.job, "JobHeldAdmin, held by an administrator"),
        (&array.job, "JobHeldUser, held by its user"),
    ] {
        poll(
            &env,
            60.0,
            "status to say the job is held, and by whom",
            || {
                let text = stdout(&env.mozart(&["status", job]));
                text.contains(&format!("(PENDING: {by})")).then_some(())
            },
        );
    }
    let reasons: BTreeMap<String, String> = queued_tasks(&single.job)
        .into_iter()
        .chain(queued_tasks(&array.job))
        .collect();
    assert_eq!(reasons[&one], "JobHeldAdmin", "{reasons:?}");
    assert_eq!(reasons[&task], "JobHeldUser", "{reasons:?}");
    assert_eq!(
        reasons
            .values()
            .filter(|r| r.starts_with("JobHeld"))
            .count(),
        2,
        "only the held ones are held: {reasons:?}"
    );
}

/// Sheets whose Slurm jobs (`sleep 12`) ended while the conductor was down (`kill -9`) took
/// the time their jobs ran: before, the restarted conductor recorded the time since it
/// re-attached (status: `✓ … completed (0.1s)`, `execution_duration_seconds` 0.1 for a
/// 12 s job).
#[test]
fn sheets_collected_after_a_restart_took_as_long_as_their_slurm_jobs() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-took");
    let (path, ws) = score(&env, &job, 2, "12");
    let _scancel = Scancel(format!("mozart-{job}-"));
    run(&env, &path, &[]);
    poll(&env, 120.0, "the sheets to start on Slurm", || {
        (ledger(&ws.join("ledger")).len() >= 2).then_some(())
    });
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    poll(&env, 120.0, "the Slurm jobs to end", || {
        squeue(&format!("mozart-{job}-")).is_empty().then_some(())
    });
    env.start_conductor();
    let doc = wait_terminal(&env, &job, 120.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    for n in 1..=2 {
        let took = sheet(&doc, n)["execution_duration_seconds"]
            .as_f64()
            .unwrap_or_default();
        assert!(
            took >= 12.0,
            "sheet {n} slept 12 s in its Slurm job, but took {took:.1}s: {:#}",
            sheet(&doc, n)
        );
    }
}

/// A running sheet's Slurm job suspended (`scontrol suspend`) is said to be suspended, with
/// how it goes on, not "running as Slurm job N" (before, status read running all along);
/// resumed, it is running again.
#[test]
fn a_suspended_slurm_job_is_shown_suspended() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-suspend");
    let (path, ws) = score(&env, &job, 1, "120");
    let _scancel = Scancel(format!("mozart-{job}-"));
    run(&env, &path, &[]);
    poll(&env, 120.0, "the sheet to start on Slurm", || {
        (!ledger(&ws.join("ledger")).is_empty()).then_some(())
    });
    let event = |d: &serde_json::Value| {
        sheet(d, 1)["live"]["last_event"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    wait_status(&env, &job, 60.0, |d| {
        event(d).starts_with("running as Slurm job")
    });
    let (id, _, _) = squeue(&format!("mozart-{job}-")).remove(0);
    let control = |what: &str| {
        let out = Command::new("scontrol").args([what, &id]).output().unwrap();
        assert!(out.status.success(), "scontrol {what} {id}: {out:?}");
    };
    control("suspend");
    wait_status(&env, &job, 60.0, |d| {
        event(d)
            == format!(
                "suspended by Slurm as job {id} (SUSPENDED; `scontrol resume {id}` lets it go on)"
            )
    });
    let text = stdout(&env.mozart(&["status", &job]));
    assert!(text.contains("(SUSPENDED;"), "{text}");
    control("resume");
    wait_status(&env, &job, 60.0, |d| {
        event(d).starts_with("running as Slurm job")
    });
    let out = env.mozart(&["cancel", &job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
}

/// A finished job leaves no `.mozart-slurm` directory in its workspace (before, an empty
/// `.mozart-slurm/<job>/` stayed after every job): the attempts' files go when their results
/// are recorded, and the job's directory with the last of them. A failed sheet's output is
/// where the docs say it is, in the sheet's logs, not in the attempt's directory.
#[test]
fn a_finished_job_leaves_no_slurm_directory_in_its_workspace() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-tidy");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: 3}}
retry: {{max_retries: 0}}
placement: {{type: slurm, poll_interval_seconds: 0.2}}
sheet: {{size: 1, total_items: 1, fan_out: {{1: 3}}}}
prompt:
  template: |
    RUN: echo "sheet {{{{ sheet_num }}}} says boom" >&2
    RUN: test {{{{ sheet_num }}}} = 3 || touch "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    let _scancel = Scancel(format!("mozart-{job}-"));
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 180.0);
    assert_eq!(
        doc["status"], "failed",
        "sheet 3 fails its validation: {doc:#}"
    );
    let state = ws.join(".mozart-slurm");
    poll(&env, 30.0, "the workspace's .mozart-slurm to go", || {
        (!state.exists()).then_some(())
    });
    let text = stdout(&env.mozart(&["logs", &job, "--sheet", "3"]));
    assert!(text.contains("sheet 3 says boom"), "{text}");
}

#[test]
fn mozart_cancel_scancels_the_slurm_jobs() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-cancel");
    let (path, ws) = score(&env, &job, 4, "120");
    run(&env, &path, &[]);
    poll(&env, 120.0, "the sheets to start on Slurm", || {
        (ledger(&ws.join("ledger")).len() >= 4).then_some(())
    });
    assert_eq!(squeue(&format!("mozart-{job}-")).len(), 4);
    let out = env.mozart(&["cancel", &job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
    poll(&env, 60.0, "the Slurm jobs to leave the queue", || {
        squeue(&format!("mozart-{job}-")).is_empty().then_some(())
    });
    let doc = wait_terminal(&env, &job, 30.0);
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
}

/// Slurm itself ends two sheets' jobs: one at its time limit (`placement.time`, shorter
/// than the sheet's timeout), one by an `scancel` from outside. Each sheet's error says so
/// first — the time limit as a timeout naming the field to raise — rather than only the
/// instrument's exit after the SIGTERM ("exited with code 1"), which reads as its own failure.
#[test]
fn a_job_slurm_ended_says_how_in_the_sheets_error() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-ended");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
parallel: {{enabled: true, max_concurrent: 2}}
retry: {{max_retries: 0}}
placement: {{type: slurm}}
sheet:
  size: 1
  total_items: 1
  fan_out: {{1: 2}}
  per_sheet_placement:
    1: {{time: "1"}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep 600
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    run(&env, &path, &[]);
    let second = poll(&env, 120.0, "sheet 2's job to run", || {
        squeue(&format!("mozart-{job}-s2-"))
            .into_iter()
            .find(|(_, _, state)| state == "RUNNING")
            .map(|(id, _, _)| id)
    });
    poll(&env, 60.0, "sheet 2 to start its command", || {
        ledger(&ws.join("ledger"))
            .contains(&"2".to_string())
            .then_some(())
    });
    let out = Command::new("scancel").arg(&second).output().unwrap();
    assert!(out.status.success(), "scancel: {}", stdout(&out));
    let doc = wait_terminal(&env, &job, 300.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let timed_out = sheet(&doc, 1);
    let message = timed_out["error_message"].as_str().unwrap_or_default();
    assert!(
        message.contains("ended TIMEOUT: Slurm stopped it at its time limit")
            && message.contains("raise placement.time"),
        "sheet 1 says Slurm's time limit ended it, and what to change: {timed_out:#}"
    );
    assert_eq!(timed_out["error_code"], "E001", "a timeout: {timed_out:#}");
    let cancelled = sheet(&doc, 2);
    let message = cancelled["error_message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "Slurm job {second} ended CANCELLED: it was cancelled outside Mozart"
        )),
        "sheet 2 says its job was cancelled outside Mozart: {cancelled:#}"
    );
    let out = env.mozart(&["errors", &job]);
    let text = stdout(&out);
    assert!(
        text.contains("ended TIMEOUT") && text.contains("ended CANCELLED"),
        "mozart errors says it too: {text}"
    );
}

/// A job Slurm keeps waiting says why in `mozart status` — Slurm's reason (here
/// `BeginTime`; on a real cluster `Resources`, `Priority`, a drained node's
/// `ReqNodeNotAvail`, an unsatisfiable `BadConstraints`), not a bare "PENDING" that looks
/// the same whether the job starts in a second or never.
#[test]
fn a_pending_job_shows_slurms_reason_in_status() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let Queued { job, ws, .. } = &queued(&env, "slurm-reason", 1, "", "");
    let job = job.as_str();
    let text = poll(&env, 120.0, "status to show why the job waits", || {
        let text = stdout(&env.mozart(&["status", job]));
        text.contains("(PENDING: BeginTime)").then_some(text)
    });
    assert!(text.contains("in Slurm's queue as job"), "{text}");
    let out = env.mozart(&["cancel", job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
    poll(&env, 60.0, "the Slurm job to leave the queue", || {
        squeue(&format!("mozart-{job}-")).is_empty().then_some(())
    });
    assert!(ledger(&ws.join("ledger")).is_empty());
}

/// `queue_timeout_seconds` runs out while the job waits in Slurm's queue: the sheet's error
/// says so — the queue's limit, Slurm's reason for the wait, that nothing ran — not "Timed
/// out after 1800s", the sheet's own timeout, which never began.
#[test]
fn a_queue_timeout_says_the_job_never_left_the_queue() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let Queued { job, ws, .. } = &queued(
        &env,
        "slurm-queuetimeout",
        1,
        "queue_timeout_seconds: 5, ",
        "retry: {max_retries: 0}\n",
    );
    let job = job.as_str();
    let doc = wait_terminal(&env, job, 120.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let s = sheet(&doc, 1);
    let message = s["error_message"].as_str().unwrap_or_default();
    assert!(
        message.contains("waited in Slurm's queue (PENDING: BeginTime) longer than placement.queue_timeout_seconds (5s) and was cancelled before it started"),
        "the queue's limit ran out, and nothing ran: {s:#}"
    );
    assert!(
        !s.to_string().contains("Timed out after"),
        "not the sheet's timeout: {s:#}"
    );
    assert_eq!(s["error_code"], "E001", "{s:#}");
    poll(&env, 60.0, "the Slurm job to leave the queue", || {
        squeue(&format!("mozart-{job}-")).is_empty().then_some(())
    });
    assert!(ledger(&ws.join("ledger")).is_empty());
}

/// A job of `voices` Slurm sheets, submitted, whose sheet 1 runs (`sleep` seconds) while
/// the others wait `begin` seconds in Slurm's queue (`--begin`, each time they are
/// submitted); every sheet appends its number to `led` when it runs.
struct Withdrawable {
    job: String,
    ws: PathBuf,
    led: PathBuf,
    /// The Slurm ids of the queued sheets' jobs.
    queued: Vec<String>,
    _scancel: Scancel,
}

fn withdrawable(env: &TestEnv, base: &str, voices: u32, begin: u32, sleep: u32) -> Withdrawable {
    let job = unique(base);
    let ws = env.work.join(format!("{job}-ws"));
    let delayed: String = (2..=voices)
        .map(|n| format!("    {n}: {{extra_args: [\"--begin=now+{begin}\"]}}\n"))
        .collect();
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: {voices}}}
retry: {{max_retries: 0}}
placement: {{type: slurm, poll_interval_seconds: 0.2}}
sheet:
  size: 1
  total_items: 1
  fan_out: {{1: {voices}}}
  per_sheet_placement:
{delayed}prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep {sleep}
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    let scancel = Scancel(format!("mozart-{job}-"));
    let led = ws.join("ledger");
    run(env, &path, &[]);
    wait_queued(env, &job, voices as usize - 1);
    poll(env, 60.0, "sheet 1 to start on Slurm", || {
        (!ledger(&led).is_empty()).then_some(())
    });
    let queued: Vec<String> = squeue(&format!("mozart-{job}-"))
        .into_iter()
        .filter(|(_, _, st)| st == "PENDING")
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(queued.len(), voices as usize - 1, "{queued:?}");
    Withdrawable {
        job,
        ws,
        led,
        queued,
        _scancel: scancel,
    }
}

/// `mozart resume JOB`, then the job completes with each of its `sheets` sheets run once.
fn resume_runs_each_sheet_once(env: &TestEnv, job: &str, led: &Path, sheets: usize) {
    let out = env.mozart(&["resume", job]);
    assert!(out.status.success(), "resume: {}", stdout(&out));
    let doc = wait_terminal(env, job, 180.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let ran = counts(led);
    assert_eq!(ran.len(), sheets, "{ran:?}");
    assert!(
        ran.values().all(|c| *c == 1),
        "every sheet ran once: {ran:?}"
    );
}

/// `mozart pause` while some sheets' Slurm jobs still wait in the queue and one runs: the
/// queued ones are withdrawn — cancelled before they start, their files (the environment
/// with its keys) removed, the sheets pending again without spending a retry — and pause
/// and status say so; the running one finishes. `mozart resume` submits the withdrawn
/// sheets anew, and every sheet runs once. (Before, the queued jobs started on the cluster
/// while the job was paused.)
#[test]
fn pause_withdraws_the_sheets_still_in_slurms_queue() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    // Sheets 2 and 3 wait 25 s in Slurm's queue, each time they are submitted.
    let Withdrawable {
        job,
        ws,
        led,
        queued,
        _scancel,
    } = withdrawable(&env, "slurm-withdraw", 3, 25, 6);
    let out = env.mozart(&["pause", &job]);
    let text = stdout(&out);
    assert!(out.status.success(), "mozart pause: {text}");
    assert!(
        text.contains("Withdrawn from Slurm's queue before they started: sheet 2 (Slurm job ")
            && text.contains(", sheet 3 (Slurm job ")
            && queued.iter().all(|id| text.contains(id.as_str())),
        "pause says what it withdrew: {text}"
    );
    let left = squeue(&format!("mozart-{job}-"));
    assert!(
        left.iter()
            .all(|(id, _, st)| !queued.contains(id) && st == "RUNNING"),
        "the queued jobs are cancelled, the running one is not: {left:?}"
    );
    let doc = status(&env, &job);
    for n in [2, 3] {
        let s = sheet(&doc, n);
        assert_eq!(s["status"], "pending", "sheet {n}: {s:#}");
        assert_eq!(s["attempt_count"], 0, "no retry spent: {s:#}");
        assert!(s["slurm_withdrawn"].is_string(), "sheet {n}: {s:#}");
    }
    // Nothing of the withdrawn attempts is left on the shared filesystem (the running
    // sheet's job deleted its own environment file when it started).
    let state = ws.join(".mozart-slurm");
    let mut dirs = vec![state.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name();
            assert!(name != "env", "an env file is left: {}", e.path().display());
            if e.path().is_dir() {
                assert!(
                    !name.to_string_lossy().starts_with("sheet-2-")
                        && !name.to_string_lossy().starts_with("sheet-3-"),
                    "a withdrawn attempt's directory is left: {}",
                    e.path().display()
                );
                dirs.push(e.path());
            }
        }
    }
    let doc = wait_status(&env, &job, 60.0, |d| {
        d["status"] == "paused" && sheet(d, 1)["status"] == "completed"
    });
    assert_eq!(sheet(&doc, 2)["status"], "pending", "{doc:#}");
    let text = stdout(&env.mozart(&["status", &job]));
    assert!(
        text.contains(
            "Slurm: withdrawn from Slurm's queue at pause before they started: sheet 2 (job "
        ) && text.contains(&format!("`mozart resume {job}` submits them anew")),
        "status says which sheets were withdrawn: {text}"
    );
    // Past the time the withdrawn jobs would have started: nothing ran while paused.
    std::thread::sleep(Duration::from_secs(22));
    assert_eq!(ledger(&led), vec!["1".to_string()], "only sheet 1 ran");
    resume_runs_each_sheet_once(&env, &job, &led, 3);
}

/// `mozart logs JOB --sheet N` while a Slurm sheet runs shows what it printed so far, as
/// for a local sheet — not "no output recorded" until its job ends.
#[test]
fn logs_show_a_running_slurm_sheets_output() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-livelogs");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
placement: {{type: slurm}}
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo "first words of sheet {{{{ sheet_num }}}}" >&2
    RUN: sleep 600
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    let _scancel = Scancel(format!("mozart-{job}-"));
    run(&env, &path, &[]);
    let text = poll(
        &env,
        120.0,
        "mozart logs to show the running sheet's output",
        || {
            let text = stdout(&env.mozart(&["logs", &job, "--sheet", "1"]));
            text.contains("first words of sheet 1").then_some(text)
        },
    );
    assert!(!text.contains("no output recorded"), "{text}");
    let doc = status(&env, &job);
    assert_eq!(
        sheet(&doc, 1)["status"],
        "in_progress",
        "still running: {doc:#}"
    );
    let out = env.mozart(&["cancel", &job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
    poll(&env, 60.0, "the Slurm job to leave the queue", || {
        squeue(&format!("mozart-{job}-")).is_empty().then_some(())
    });
}

/// A job paused while its sheets' Slurm jobs run, then the conductor killed and restarted
/// (the job comes back paused: nothing follows those jobs), then `mozart cancel`: its Slurm
/// jobs are cancelled and their files (the environment with its keys among them) removed —
/// not left to run the sheets of a cancelled job.
#[test]
fn cancelling_a_job_paused_across_a_restart_cancels_its_slurm_jobs() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-pausedcancel");
    let (path, ws) = score(&env, &job, 2, "600");
    let _scancel = Scancel(format!("mozart-{job}-"));
    run(&env, &path, &[]);
    poll(&env, 120.0, "both sheets to start on Slurm", || {
        (ledger(&ws.join("ledger")).len() >= 2).then_some(())
    });
    let out = env.mozart(&["pause", &job]);
    assert!(out.status.success(), "mozart pause: {}", stdout(&out));
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 30.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    wait_status(&env, &job, 60.0, |d| d["status"] == "paused");
    assert_eq!(squeue(&format!("mozart-{job}-")).len(), 2, "still running");
    let text = stdout(&env.mozart(&["status", &job]));
    assert!(
        text.contains("Slurm: 2 jobs submitted before the conductor restarted (")
            && text.contains(&format!("`mozart resume {job}` collects their results")),
        "status says the paused job's sheets still have Slurm jobs: {text}"
    );
    let out = env.mozart(&["cancel", &job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
    poll(
        &env,
        60.0,
        "the cancelled job's Slurm jobs to leave the queue",
        || squeue(&format!("mozart-{job}-")).is_empty().then_some(()),
    );
    let state = ws.join(".mozart-slurm");
    poll(&env, 30.0, "the attempts' files to be removed", || {
        let mut left = Vec::new();
        let mut dirs = vec![state.clone()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    dirs.push(e.path());
                } else {
                    left.push(e.path());
                }
            }
        }
        left.is_empty().then_some(())
    });
}

/// `mozart pause` while a sheet's Slurm job waits in the queue, and the conductor killed
/// before the pause has withdrawn it (Slurm slow to answer the hold): the restarted
/// conductor withdraws it, as the pause would have, instead of leaving it to start on the
/// cluster and run a sheet of a paused job. The running sheet's job is kept, and `mozart
/// resume` runs every sheet once.
#[test]
fn a_pause_cut_short_by_a_restart_still_withdraws_the_queued_slurm_jobs() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    // A `scontrol hold` asked while `slow-hold` exists waits until it is gone, then fails
    // holding nothing: the pause's withdrawal is still under way when the conductor is
    // killed.
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v scontrol"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let slow = env.bin.join("slow-hold");
    std::fs::write(&slow, "").unwrap();
    let shim = env.bin.join("scontrol");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nif [ \"$1\" = hold ] && [ -e '{slow}' ]; then\n  \
             while [ -e '{slow}' ]; do sleep 0.1; done\n  exit 1\nfi\nexec {real} \"$@\"\n",
            slow = slow.display(),
            real = real.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &shim,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    // Sheet 2 waits 20 s in Slurm's queue, each time it is submitted.
    let Withdrawable {
        job,
        ws,
        led,
        queued,
        _scancel,
    } = withdrawable(&env, "slurm-restartwithdraw", 2, 20, 5);
    let out = env.mozart(&["pause", &job]);
    assert!(out.status.success(), "mozart pause: {}", stdout(&out));
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 30.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    assert!(
        squeue(&format!("mozart-{job}-"))
            .iter()
            .any(|(id, _, st)| *id == queued[0] && st == "PENDING"),
        "the queued job is still in the queue when the conductor dies"
    );
    // The killed conductor's hold gives up without holding.
    std::fs::remove_file(&slow).unwrap();
    env.start_conductor();
    wait_status(&env, &job, 60.0, |d| d["status"] == "paused");
    let left = squeue(&format!("mozart-{job}-"));
    assert!(
        left.iter().all(|(id, _, _)| *id != queued[0]),
        "the queued job is withdrawn at restart: {left:?}\n{}",
        env.log()
    );
    let doc = status(&env, &job);
    assert_eq!(sheet(&doc, 2)["status"], "pending", "{doc:#}");
    let mut dirs = vec![ws.join(".mozart-slurm")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                assert!(
                    !e.file_name().to_string_lossy().starts_with("sheet-2-"),
                    "the withdrawn attempt's files are left: {}",
                    e.path().display()
                );
                dirs.push(e.path());
            }
        }
    }
    resume_runs_each_sheet_once(&env, &job, &led, 2);
}

#[test]
fn validate_names_a_bad_placement_field() {
    let _cluster = mozart_tests::slurm_shared();
    let env = TestEnv::new();
    let bad = env.write_score(
        "bad-placement",
        "name: bad\ninstrument: shell\nplacement:\n  type: slurm\n  extra_args: ['mem=4G']\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let out = env.mozart(&["validate", bad.to_str().unwrap()]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("placement.extra_args"), "{text}");
    let k8s = env.write_score(
        "k8s-placement",
        "name: k8s\ninstrument: shell\nplacement: {type: kubernetes}\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let out = env.mozart(&["validate", k8s.to_str().unwrap()]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("not implemented"), "{text}");
    let good = env.write_score(
        "good-placement",
        "name: good\ninstrument: shell\nplacement: {type: slurm, partition: debug, extra_args: ['--mem=1G']}\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let out = env.mozart(&["validate", good.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mozart stop` does not take a cluster's running agents down with the conductor: when the
/// shutdown timeout passes, its Slurm jobs are left running and recorded, and the next
/// conductor re-attaches to them (every sheet still runs exactly once).
#[test]
fn a_stopped_conductor_leaves_its_slurm_jobs_running_for_the_next_one() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    std::fs::write(
        env.home.join("conductor.yaml"),
        "shutdown_timeout_seconds: 10\n",
    )
    .unwrap();
    env.start_conductor();
    let job = unique("slurm-stop");
    let (path, ws) = score(&env, &job, 3, "25");
    let led = ws.join("ledger");
    run(&env, &path, &[]);
    poll(&env, 120.0, "the sheets to start on Slurm", || {
        (ledger(&led).len() >= 3).then_some(())
    });
    let pid = env.conductor_pid().expect("conductor pid");
    // Jobs are running and there is no terminal to ask on: --yes answers for the script.
    let out = env.command(&["stop", "--yes"]).output().unwrap();
    assert!(out.status.success(), "mozart stop: {}", stdout(&out));
    poll(&env, 60.0, "the conductor to stop", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    let left = squeue(&format!("mozart-{job}-"));
    assert_eq!(left.len(), 3, "the Slurm jobs outlive the stop: {left:?}");
    env.start_conductor();
    let doc = wait_terminal(&env, &job, 120.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let ran = counts(&led);
    assert_eq!(ran.len(), 3, "{ran:?}");
    assert!(ran.values().all(|c| *c == 1), "{ran:?}");
    let ids: BTreeSet<String> = slurm_ids(&ws, 3).into_iter().collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
}

/// The sheet sees its allocation (issue 25): Slurm's own variables (job id, cpus per task,
/// node list) reach the instrument alongside its filtered environment, as they reach a
/// plain `sbatch` job.
#[test]
fn the_sheet_sees_its_slurm_allocation() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-env");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
retry: {{max_retries: 0}}
placement:
  type: slurm
  poll_interval_seconds: 0.2
  extra_args: ['--cpus-per-task=2']
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: env > "{{{{ workspace }}}}/env.txt"
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 120.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let text = std::fs::read_to_string(ws.join("env.txt")).unwrap();
    let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let id = vars.get("SLURM_JOB_ID").copied().unwrap_or_default();
    assert!(
        !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()),
        "{text}"
    );
    assert_eq!(vars.get("SLURM_CPUS_PER_TASK"), Some(&"2"), "{text}");
    assert!(vars.contains_key("SLURM_JOB_NODELIST"), "{text}");
}

/// Resources in the score (issue 25): `placement` fields at score, movement and sheet level
/// merged field by field over the instrument profile's placement, the most specific level
/// winning. The profile says `type: slurm`; the score sets only `cpus` (and does not turn
/// the profile's Slurm placement back into a local one); movement 2 and sheet 3 override
/// `cpus`, and sheet 3's own setting beats its movement's.
#[test]
fn placement_fields_merge_from_profile_to_score_movement_and_sheet() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    let profile = std::fs::read_to_string(env.home.join("instruments/standin-text.yaml"))
        .unwrap()
        .replace("name: standin-text", "name: standin-slurm")
        + "placement: {type: slurm, poll_interval_seconds: 0.2}\n";
    std::fs::write(env.home.join("instruments/standin-slurm.yaml"), profile).unwrap();
    env.start_conductor();
    let job = unique("slurm-merge");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-slurm
pause_between_sheets_seconds: 0
retry: {{max_retries: 0}}
placement: {{cpus: 2}}
movements:
  2: {{placement: {{cpus: 3}}}}
  3: {{placement: {{cpus: 4}}}}
sheet:
  size: 1
  total_items: 3
  per_sheet_placement:
    3: {{cpus: 1}}
prompt:
  template: |
    RUN: env > "{{{{ workspace }}}}/env-{{{{ sheet_num }}}}.txt"
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 180.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    for (n, cpus) in [(1, "2"), (2, "3"), (3, "1")] {
        let text = std::fs::read_to_string(ws.join(format!("env-{n}.txt"))).unwrap();
        let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        assert!(
            vars.contains_key("SLURM_JOB_ID"),
            "sheet {n} ran on Slurm (the profile's type): {text}"
        );
        assert_eq!(vars.get("SLURM_CPUS_PER_TASK"), Some(&cpus), "sheet {n}");
    }
}

/// `extra_args` that would break the placement's contract are refused by `validate`, at
/// any level, with the field and the reason.
#[test]
fn validate_refuses_extra_args_that_break_the_contract() {
    let _cluster = mozart_tests::slurm_shared();
    let env = TestEnv::new();
    for (placement, field, reason) in [
        (
            "placement: {type: slurm, extra_args: ['--array=1-4']}\n",
            "placement.extra_args.0",
            "job array",
        ),
        (
            "placement: {type: slurm, extra_args: ['--mem=1G', '--requeue']}\n",
            "placement.extra_args.1",
            "requeue_on_preemption",
        ),
        (
            "placement: {type: slurm}\nmovements: {1: {placement: {extra_args: ['--output=/tmp/x']}}}\n",
            "movements.1.placement.extra_args.0",
            "output",
        ),
        (
            "placement: {type: slurm}\nsheet: {size: 1, total_items: 1, per_sheet_placement: {1: {extra_args: ['--wrap=true']}}}\n",
            "sheet.per_sheet_placement.1.extra_args.0",
            "wrapper",
        ),
    ] {
        let sheet = if placement.contains("sheet:") {
            ""
        } else {
            "sheet: {size: 1, total_items: 1}\n"
        };
        let score = env.write_score(
            "refused",
            &format!("name: refused\ninstrument: shell\n{placement}{sheet}prompt: {{template: hi}}\n"),
        );
        let out = env.mozart(&["validate", score.to_str().unwrap()]);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{placement}: {text}");
        assert!(text.contains(field), "{placement}: names {field}: {text}");
        assert!(text.contains(reason), "{placement}: says why: {text}");
    }
}

/// A partition Slurm does not have (issue 25): `validate` says so in Slurm's terms when
/// Slurm is reachable, and a run fails at once — one attempt, not retried, with Slurm's
/// own words and no hint to install the CLI.
#[test]
fn a_bad_partition_fails_fast_in_slurms_words() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-badpart");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
retry: {{max_retries: 3, base_delay_seconds: 1}}
placement: {{type: slurm, partition: nosuchpart, poll_interval_seconds: 0.2}}
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "validate: {text}");
    assert!(
        text.contains("placement.partition") && text.contains("nosuchpart"),
        "validate names the field and the partition: {text}"
    );
    let started = std::time::Instant::now();
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 120.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let s = sheet(&doc, 1);
    let all = s.to_string();
    assert!(all.contains("Invalid partition"), "Slurm's words: {s:#}");
    assert!(!all.contains("install the CLI"), "{s:#}");
    assert_eq!(s["attempt_count"], 1, "not retried: {s:#}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "failed fast: {:?}",
        started.elapsed()
    );
    assert!(ledger(&ws.join("ledger")).is_empty());
}

/// An account Slurm does not know (`validate` cannot tell: only Slurm's accounting can):
/// the sheet fails at once in Slurm's words, naming the placement fields the job asked
/// for and where to look up the ones the user may use — not only "sbatch failed: sbatch
/// exit status: 1: …", which leaves the user to guess which setting Slurm refused.
#[test]
fn a_refused_submission_names_the_placement_fields_and_what_to_do() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-badacct");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
placement: {{type: slurm, account: nosuchacct}}
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 120.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let s = sheet(&doc, 1);
    let message = s["error_message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Slurm refused the job (placement.account: nosuchacct): Invalid account")
            && message.contains("sacctmgr show associations"),
        "Slurm's words, the field asked for, where to look: {s:#}"
    );
    assert_eq!(s["attempt_count"], 1, "not retried: {s:#}");
    assert!(ledger(&ws.join("ledger")).is_empty());
}

/// `validate` where Slurm does not answer (here: `sinfo` not on PATH) of a score placing its
/// sheets on Slurm: a warning naming the field and the reason, not a silent PASSED for a
/// score whose sheets cannot run from this machine (and whose partitions went unchecked).
#[test]
fn validate_warns_when_slurm_does_not_answer_for_a_slurm_score() {
    let env = TestEnv::new();
    install_instruments(&env);
    let ws = env.work.join("v-ws");
    std::fs::create_dir_all(&ws).unwrap();
    let score = env.write_score(
        "v-noslurm",
        &format!(
            "name: v-noslurm\nworkspace: {}\ninstrument: standin-text\nplacement: {{type: slurm, partition: gpu}}\nsheet: {{size: 1, total_items: 1}}\nprompt: {{template: hi}}\n",
            ws.display()
        ),
    );
    let out = env
        .command(&["validate", score.to_str().unwrap()])
        .env("PATH", &env.bin)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning, not an error: {text}"
    );
    assert!(
        text.contains("[V012] Line 4: placement.type: the score places sheets on Slurm, but Slurm does not answer here: sinfo is not on PATH (its partitions were not checked)"),
        "validate says Slurm was not reachable, and what was not checked: {text}"
    );
    assert!(text.contains("Slurm submit host"), "and what to do: {text}");
}

/// A conductor started where Slurm's commands are not on its PATH (not a submit host, or a
/// PATH without /usr/bin): a sheet placed on Slurm fails at its first attempt, saying which
/// command is missing and what to do — not "waiting for the Slurm controller" until the
/// sheet's timeout, then "the controller did not answer". Needs no cluster.
#[test]
fn slurm_commands_missing_from_path_fail_the_sheet_and_say_what_to_do() {
    let env = TestEnv::new();
    install_instruments(&env);
    // Only the stand-in's directory: no sbatch, squeue, scontrol or scancel.
    start_with_env(&env, &[("PATH", &env.bin)]);
    let job = unique("slurm-nopath");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
placement: {{type: slurm}}
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 300.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let s = sheet(&doc, 1);
    let all = s.to_string();
    assert!(
        all.contains("not found on the conductor's PATH")
            && all.contains("Slurm submit host")
            && all.contains("mozart stop, then mozart start"),
        "the error names the missing command and what to do: {s:#}"
    );
    assert!(
        !all.contains("did not answer"),
        "a missing command is not an unanswering controller: {s:#}"
    );
    assert_eq!(s["attempt_count"], 1, "not retried: {s:#}");
    let out = env.mozart(&["errors", &job]);
    assert!(
        stdout(&out).contains("not found on the conductor's PATH"),
        "mozart errors says it too: {}",
        stdout(&out)
    );
    assert!(ledger(&ws.join("ledger")).is_empty());
}

/// `mozart pause` on Slurm (issue 25; docs/design/distributed.md): as for local sheets,
/// running sheets finish — their Slurm jobs run on and are collected — and no new job is
/// submitted until `mozart resume`; every sheet then runs once.
#[test]
fn pause_lets_running_slurm_jobs_finish_and_submits_no_new_ones() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = env_with_standin();
    let job = unique("slurm-pause");
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: 2}}
retry: {{max_retries: 0}}
placement: {{type: slurm, poll_interval_seconds: 0.2}}
sheet: {{size: 1, total_items: 1, fan_out: {{1: 4}}}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep 6
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    let led = ws.join("ledger");
    run(&env, &path, &[]);
    poll(&env, 60.0, "two sheets to start on Slurm", || {
        (ledger(&led).len() >= 2).then_some(())
    });
    let out = env.mozart(&["pause", &job]);
    assert!(out.status.success(), "pause: {}", stdout(&out));
    let running = squeue(&format!("mozart-{job}-"));
    assert_eq!(
        running.len(),
        2,
        "the running jobs are not cancelled: {running:?}"
    );
    let doc = wait_status(&env, &job, 60.0, |d| {
        d["sheets"]
            .as_object()
            .is_some_and(|s| s.values().filter(|sh| sh["status"] == "completed").count() == 2)
    });
    assert_eq!(doc["status"], "paused", "{doc:#}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        ledger(&led).len(),
        2,
        "nothing new was submitted while paused"
    );
    assert!(squeue(&format!("mozart-{job}-")).is_empty());
    let out = env.mozart(&["resume", &job]);
    assert!(out.status.success(), "resume: {}", stdout(&out));
    let doc = wait_terminal(&env, &job, 120.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let ran = counts(&led);
    assert_eq!(ran.len(), 4, "{ran:?}");
    assert!(ran.values().all(|c| *c == 1), "{ran:?}");
}

/// Issue 25: `doctor` asks Slurm about the partitions the instrument profiles name: a
/// profile placed on a partition the cluster does not have is an error naming it and the
/// partitions that exist; one on a real partition is fine.
#[test]
fn doctor_checks_the_partitions_of_slurm_profiles() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    let base = std::fs::read_to_string(env.home.join("instruments/standin-text.yaml")).unwrap();
    let real = String::from_utf8_lossy(
        &Command::new("sinfo")
            .args(["-h", "-o", "%R"])
            .output()
            .unwrap()
            .stdout,
    )
    .lines()
    .next()
    .unwrap_or("")
    .trim()
    .to_string();
    for (name, partition) in [
        ("standin-nosuch", "nosuch-partition"),
        ("standin-real", &real),
    ] {
        let profile = base.replace("name: standin-text", &format!("name: {name}"))
            + &format!("placement: {{type: slurm, partition: {partition}}}\n");
        std::fs::write(env.home.join(format!("instruments/{name}.yaml")), profile).unwrap();
    }
    let out = env.mozart(&["doctor"]);
    let text = stdout(&out);
    assert!(text.contains("Slurm placement:"), "{text}");
    let bad = text
        .lines()
        .rev()
        .find(|l| l.contains("standin-nosuch"))
        .unwrap_or_default();
    assert!(
        bad.contains('✗') && bad.contains("no partition 'nosuch-partition'") && bad.contains(&real),
        "{text}"
    );
    let good = text
        .lines()
        .rev()
        .find(|l| l.contains("standin-real"))
        .unwrap_or_default();
    assert!(good.contains('✓'), "{text}");
    assert!(text.contains("Mozart is not ready"), "{text}");
    let doc: serde_json::Value =
        serde_json::from_str(&stdout(&env.mozart(&["doctor", "--json"]))).unwrap();
    assert!(doc["errors_count"].as_u64().unwrap_or(0) >= 1, "{doc}");
    assert!(
        doc["slurm"].as_array().is_some_and(|a| a
            .iter()
            .any(|c| c["name"] == "standin-nosuch" && c["status"] == "error")),
        "{doc}"
    );
}
