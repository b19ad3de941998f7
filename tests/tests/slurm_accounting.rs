//! How a Slurm job that ended abnormally while no conductor followed it is reported, once
//! Slurm's controller has forgotten it (issue 25; docs/design/distributed.md, "Follow"):
//! with accounting (`slurmdbd`, which `tests/slurm/setup.sh` starts) the sheet's error
//! carries the job's real final state from `sacct`; without accounting it says the reason is
//! unknown and why.
//!
//! The cluster without accounting is the same cluster seen through a submit host whose
//! `slurm.conf` has no `AccountingStorageType` (the conductor's `SLURM_CONF`): `sacct` there
//! answers "Slurm accounting storage is disabled", exactly as on a cluster that runs no
//! `slurmdbd`, while jobs run on the one real controller.

use crate::harness;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::*;
use mozart_tests::users::missing;
use mozart_tests::{stdout, TestEnv};

/// Whether a Slurm node is up and `sacct` answers from slurmdbd; prints why not.
fn slurm_with_accounting() -> bool {
    if !crate::slurm_placement::slurm_up() {
        return false;
    }
    let sacct = Command::new("sacct").args(["-n", "-X", "-j", "1"]).output();
    if !sacct.is_ok_and(|o| o.status.success()) {
        missing(
            "Slurm accounting (sacct answering from slurmdbd)",
            "run tests/slurm/setup.sh",
        );
        return false;
    }
    true
}

/// One sheet on Slurm that records its start in `ledger`, then sleeps long enough to be
/// killed from outside.
fn long_sheet(env: &TestEnv, job: &str) -> (PathBuf, PathBuf) {
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
retry: {{max_retries: 0}}
placement:
  type: slurm
  poll_interval_seconds: 0.2
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep 600
"#,
        ws = ws.display()
    );
    (env.write_score(job, &yaml), ws)
}

/// The id of our Slurm job whose name starts with `prefix`.
fn slurm_job(prefix: &str) -> Option<String> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%i|%j"])
        .output()
        .ok()?;
    stdout(&out).lines().find_map(|l| {
        let (id, name) = l.trim().split_once('|')?;
        name.starts_with(prefix).then(|| id.to_string())
    })
}

/// Whether the controller has forgotten job `id` (purged `MinJobAge` after its end).
fn forgotten(id: &str) -> bool {
    Command::new("scontrol")
        .args(["show", "job", "-o", id])
        .output()
        .is_ok_and(|o| {
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("Invalid job id")
        })
}

/// Start the sheet under a conductor with `vars`, kill the conductor (-9) while the job
/// runs, cancel the job as an administrator would, wait until the controller has forgotten
/// it, restart the conductor (same `vars`): the failed sheet's status, as JSON text, and
/// the job id.
fn killed_while_unfollowed(env: &TestEnv, job: &str, vars: &[(&str, &Path)]) -> (String, String) {
    install_instruments(env);
    start_with_env(env, vars);
    let (path, ws) = long_sheet(env, job);
    run(env, &path, &[]);
    poll(env, 120.0, "the sheet to start on Slurm", || {
        (!ledger(&ws.join("ledger")).is_empty()).then_some(())
    });
    let id = slurm_job(&format!("mozart-{job}-")).expect("the sheet's Slurm job");
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    // Killed from outside while nobody follows it, every process of it at once, its
    // wrapper first (as when the kernel's OOM killer or a node's death takes it): it never
    // writes its exit status. (`scancel` would let the wrapper record the sheet's exit.)
    let out = Command::new("scontrol")
        .args(["listpids", &id])
        .output()
        .unwrap();
    let mut pids: Vec<u32> = stdout(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    pids.sort_unstable();
    assert!(!pids.is_empty(), "the processes of Slurm job {id}: {out:?}");
    let out = Command::new("kill")
        .arg("-KILL")
        .args(pids.iter().map(u32::to_string))
        .output()
        .unwrap();
    assert!(out.status.success(), "kill -KILL {pids:?}: {out:?}");
    // MinJobAge=30 on the test cluster; slurmctld purges once a minute.
    poll(env, 240.0, "the controller to forget the job", || {
        forgotten(&id).then_some(())
    });
    start_with_env(env, vars);
    let doc = wait_terminal(env, job, 120.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let s = sheet(&doc, 1);
    assert_eq!(s["attempt_count"], 1, "{s:#}");
    (s.to_string(), id)
}

/// With accounting: the job's real final state and exit code, as `sacct` records them, are
/// in the sheet's error.
#[test]
fn a_purged_job_killed_from_outside_reports_its_state_from_sacct() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_with_accounting() {
        return;
    }
    let env = TestEnv::new();
    let job = format!("slurm-acct-{}", std::process::id());
    let (text, id) = killed_while_unfollowed(&env, &job, &[]);
    let out = Command::new("sacct")
        .args(["-n", "-X", "-P", "-j", &id, "-o", "State,ExitCode"])
        .output()
        .unwrap();
    let record = stdout(&out);
    let (state, exit) = record.trim().split_once('|').expect("sacct knows the job");
    assert!(!state.is_empty(), "{record}");
    assert!(
        text.contains(&format!(
            "Slurm job {id} ended {state} without an exit status (from Slurm's accounting: exit code {exit}"
        )),
        "the sheet says how its job really ended: {text}\nlog:\n{}",
        tail(&env.log(), 4000)
    );
}

/// Without accounting: the sheet says the reason is unknown, and why.
#[test]
fn without_accounting_a_purged_job_says_its_reason_is_unknown() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_with_accounting() {
        return;
    }
    let env = TestEnv::new();
    let conf = std::fs::read_to_string("/etc/slurm/slurm.conf").expect("read slurm.conf");
    let no_accounting: String = conf
        .lines()
        .filter(|l| !l.starts_with("AccountingStorage"))
        .map(|l| format!("{l}\n"))
        .collect();
    let conf_path = env.root().join("slurm-no-accounting.conf");
    std::fs::write(&conf_path, no_accounting).unwrap();
    let job = format!("slurm-noacct-{}", std::process::id());
    let (text, id) = killed_while_unfollowed(&env, &job, &[("SLURM_CONF", &conf_path)]);
    assert!(
        text.contains(&format!(
            "Slurm job {id} ended without an exit status; the reason is unknown"
        )) && text.contains("accounting storage is disabled"),
        "the sheet says the reason is unknown and why: {text}\nlog:\n{}",
        tail(&env.log(), 4000)
    );
}

/// A fan-out larger than the user's submit limit (`MaxSubmitJobsPerUser=2` on the test
/// cluster's QOS `mozart-limited`, enforced by the accounting): sheets beyond the limit wait
/// for Slurm to accept them — status says it is the submit limit, not a broken controller —
/// and every sheet runs once, with no attempt spent on the wait.
#[test]
fn a_fan_out_beyond_the_submit_limit_waits_its_turn_and_says_why() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_with_accounting() {
        return;
    }
    let qos = Command::new("sacctmgr")
        .args(["-n", "-P", "list", "qos", "format=name"])
        .output();
    if !qos.is_ok_and(|o| stdout(&o).lines().any(|l| l.trim() == "mozart-limited")) {
        missing(
            "the Slurm QOS mozart-limited (MaxSubmitJobsPerUser=2)",
            "run tests/slurm/setup.sh",
        );
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    env.start_conductor();
    let job = format!("slurm-limit-{}", std::process::id());
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: 5}}
retry: {{max_retries: 0}}
placement:
  type: slurm
  qos: mozart-limited
  poll_interval_seconds: 0.2
sheet:
  size: 1
  total_items: 1
  fan_out: {{1: 5}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep 4
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    run(&env, &path, &[]);
    let prefix = format!("mozart-{job}-");
    let mut most = 0;
    let mut told = false;
    let doc = loop {
        let queued = Command::new("squeue")
            .args(["-h", "-o", "%j"])
            .output()
            .map(|o| {
                stdout(&o)
                    .lines()
                    .filter(|l| l.starts_with(&prefix))
                    .count()
            })
            .unwrap_or(0);
        most = most.max(queued);
        let doc = status(&env, &job);
        told |= doc["sheets"].as_object().is_some_and(|s| {
            s.values().any(|sh| {
                sh["live"]["last_event"]
                    .as_str()
                    .is_some_and(|e| e.contains("the per-user submit limit is reached"))
            })
        });
        if matches!(
            doc["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            break doc;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(most <= 2, "at most 2 jobs in Slurm at once, saw {most}");
    assert!(
        told,
        "status said the sheets wait for the submit limit\nlog:\n{}",
        tail(&env.log(), 4000)
    );
    let ran = ledger(&ws.join("ledger"));
    let mut sorted: Vec<u32> = ran.iter().map(|l| l.trim().parse().unwrap()).collect();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![1, 2, 3, 4, 5], "every sheet ran once");
    for n in 1..=5 {
        assert_eq!(
            sheet(&doc, n)["attempt_count"],
            1,
            "no attempt spent: {doc:#}"
        );
    }
}

/// The Slurm jobs (id, state) accounting knows of whose name starts with `prefix`, cancelled
/// ones included.
fn accounted(prefix: &str) -> Vec<(String, String)> {
    let out = Command::new("sacct")
        .args(["-n", "-X", "-P", "-S", "now-1hour", "-E", "now"])
        // A held job cancelled in the queue was never eligible: only a state filter lists it.
        .args(["-s", "PD,R,CA,CD,F,TO", "-o", "JobName,JobID,State"])
        .output()
        .unwrap();
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('|');
            let name = parts.next()?;
            let id = parts.next()?.to_string();
            let state = parts.next()?.to_string();
            name.starts_with(prefix).then_some((id, state))
        })
        .collect()
}

/// `mozart pause` while sheets wait for Slurm to accept more jobs (the per-user submit
/// limit): they are not submitted — before, each was submitted after the pause as soon as
/// the limit allowed, then cancelled a moment later — and are pending again; the running
/// jobs finish, and `resume` runs the rest, each sheet once.
#[test]
fn pause_submits_nothing_for_sheets_waiting_on_the_submit_limit() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_with_accounting() {
        return;
    }
    let env = TestEnv::new();
    install_instruments(&env);
    env.start_conductor();
    let job = format!("slurm-limitpause-{}", std::process::id());
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: 4}}
retry: {{max_retries: 0}}
placement:
  type: slurm
  qos: mozart-limited
  poll_interval_seconds: 0.2
sheet:
  size: 1
  total_items: 1
  fan_out: {{1: 4}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep 8
"#,
        ws = ws.display()
    );
    let path = env.write_score(&job, &yaml);
    run(&env, &path, &[]);
    let led = ws.join("ledger");
    poll(
        &env,
        120.0,
        "two sheets running, two waiting for the submit limit",
        || {
            let doc = status(&env, &job);
            let waiting = doc["sheets"].as_object().map_or(0, |s| {
                s.values()
                    .filter(|sh| {
                        sh["live"]["last_event"]
                            .as_str()
                            .is_some_and(|e| e.contains("the per-user submit limit is reached"))
                    })
                    .count()
            });
            (ledger(&led).len() == 2 && waiting == 2).then_some(())
        },
    );
    let out = env.mozart(&["pause", &job]);
    assert!(out.status.success(), "pause: {}", stdout(&out));
    let count = |d: &serde_json::Value, status: &str| {
        d["sheets"].as_object().map_or(0, |s| {
            s.values().filter(|sh| sh["status"] == status).count()
        })
    };
    // The waiting sheets pending again, the running ones completed.
    let doc = wait_status(&env, &job, 120.0, |d| {
        d["status"] == "paused" && count(d, "completed") == 2 && count(d, "pending") == 2
    });
    for sh in doc["sheets"].as_object().unwrap().values() {
        assert!(
            sh["slurm_withdrawn"].is_null(),
            "no Slurm job was submitted, so none was withdrawn: {sh:#}"
        );
    }
    let prefix = format!("mozart-{job}-");
    let jobs = poll(
        &env,
        60.0,
        "accounting to record the two jobs' ends",
        || {
            let jobs = accounted(&prefix);
            (jobs.iter().filter(|(_, st)| st == "COMPLETED").count() == 2).then_some(jobs)
        },
    );
    assert_eq!(
        jobs.len(),
        2,
        "only the two running sheets were ever submitted: {jobs:?}"
    );
    assert_eq!(ledger(&led).len(), 2);
    let out = env.mozart(&["resume", &job]);
    assert!(out.status.success(), "resume: {}", stdout(&out));
    let doc = wait_terminal(&env, &job, 180.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let mut ran: Vec<u32> = ledger(&led)
        .iter()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    ran.sort_unstable();
    assert_eq!(ran, vec![1, 2, 3, 4], "every sheet ran once");
}

/// A sheet whose Slurm job ran to its end while no conductor followed it, and whose
/// checkpoint record holds only the job's *name* (the registry restored from a copy taken
/// during the submission, after the name was written and before the id was), once the
/// controller has forgotten the job (`squeue --name` finds nothing): the restarted
/// conductor asks Slurm's accounting (`sacct --name`) whether a job of that name ran,
/// finds the attempt's adopted job did, and collects its result — the sheet is completed
/// and ran once, not submitted again.
#[test]
fn a_purged_job_known_only_by_name_is_adopted_through_sacct() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_with_accounting() {
        return;
    }
    let env = TestEnv::new();
    let job = format!("slurm-byname-{}", std::process::id());
    known_only_by_name(&env, &job, &[]);
}

/// The same on a cluster without accounting (`sacct` answers "accounting storage is
/// disabled"): the attempt's own `start` file, written by the adopted job's wrapper and
/// only by it, is the evidence that it ran.
#[test]
fn without_accounting_a_purged_job_known_only_by_name_is_adopted_by_its_files() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_with_accounting() {
        return;
    }
    let env = TestEnv::new();
    let conf_path = conf_without_accounting(&env);
    let job = format!("slurm-byname-noacct-{}", std::process::id());
    known_only_by_name(&env, &job, &[("SLURM_CONF", &conf_path)]);
}

/// A `slurm.conf` for the conductor without `AccountingStorage*` (see the module's doc).
fn conf_without_accounting(env: &TestEnv) -> PathBuf {
    let conf = std::fs::read_to_string("/etc/slurm/slurm.conf").expect("read slurm.conf");
    let no_accounting: String = conf
        .lines()
        .filter(|l| !l.starts_with("AccountingStorage"))
        .map(|l| format!("{l}\n"))
        .collect();
    let conf_path = env.root().join("slurm-no-accounting.conf");
    std::fs::write(&conf_path, no_accounting).unwrap();
    conf_path
}

/// Run one sheet under a conductor with `vars`, kill the conductor while its job runs, let
/// the job end and the controller forget it, roll the record back to the name alone,
/// restart: the sheet must be completed from the job's result, having run once.
fn known_only_by_name(env: &TestEnv, job: &str, vars: &[(&str, &Path)]) {
    install_instruments(env);
    start_with_env(env, vars);
    let ws = env.work.join(format!("{job}-ws"));
    let yaml = format!(
        r#"name: {job}
workspace: {ws}
instrument: standin-text
retry: {{max_retries: 0}}
placement:
  type: slurm
  poll_interval_seconds: 0.2
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
    RUN: sleep 4
    RUN: echo done > "{{{{ workspace }}}}/out-1.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-1.txt"
"#,
        ws = ws.display()
    );
    let path = env.write_score(job, &yaml);
    run(env, &path, &[]);
    poll(env, 120.0, "the sheet to start on Slurm", || {
        (!ledger(&ws.join("ledger")).is_empty()).then_some(())
    });
    let id = slurm_job(&format!("mozart-{job}-")).expect("the sheet's Slurm job");
    let pid = env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    poll(env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    // The job ends on its own; MinJobAge=30 on the test cluster, purged once a minute.
    poll(env, 240.0, "the controller to forget the job", || {
        forgotten(&id).then_some(())
    });
    assert!(ws.join("out-1.txt").exists(), "the job ran to its end");
    // The record as it was between the name's write and the id's.
    let db = rusqlite::Connection::open(env.home.join("registry.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE sheets SET state_json = json_set(state_json, '$.remote_attempt.remote_id', '') \
             WHERE job_id = ?1 AND json_extract(state_json, '$.remote_attempt.remote_id') = ?2",
            [job, id.as_str()],
        )
        .unwrap();
    assert_eq!(changed, 1, "the sheet's record of Slurm job {id}");
    drop(db);
    start_with_env(env, vars);
    let doc = wait_terminal(env, job, 120.0);
    assert_eq!(
        doc["status"],
        "completed",
        "{doc:#}\nlog:\n{}",
        tail(&env.log(), 4000)
    );
    assert_eq!(
        ledger(&ws.join("ledger")).len(),
        1,
        "the sheet ran once, its finished job adopted: log:\n{}",
        tail(&env.log(), 4000)
    );
    assert_eq!(sheet(&doc, 1)["attempt_count"], 1, "{doc:#}");
}
