//! A Slurm attempt leaves nothing on the shared filesystem (issue 21 part 4): its files —
//! the environment (API keys), the command line (the prompt), stdin, the wrapper script, the
//! outputs — are removed when the attempt ends, however it ends: success, failure, timeout,
//! `mozart cancel`, or `sbatch` refusing the job.
//!
//! The conductor runs with a secret in its environment (as an API key would be); after each
//! job no file under the attempts' state directory remains, and none holds the secret.
//! `tests/slurm/setup.sh` (run by `.ci/run`) starts a single-node Slurm; without one these
//! tests print why and pass without running (on CI, with `CI` set, they fail).

use crate::harness;
use crate::slurm_placement::slurm_up;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::*;
use mozart_tests::{stdout, TestEnv};

const SECRET: &str = "sk-mozart-test-key-never-left-on-disk";

/// A conductor whose environment holds [`SECRET`] (every instrument inherits it).
fn conductor() -> TestEnv {
    let env = TestEnv::new();
    let out = env
        .command(&["start"])
        .env("MOZART_TEST_API_KEY", SECRET)
        .output()
        .unwrap();
    assert!(out.status.success(), "start: {}{}", stdout(&out), env.log());
    env
}

/// A job of `voices` parallel `shell` sheets placed on Slurm; `body` is the sheets' `RUN:`
/// lines (a template: `{{ sheet_num }}` tells the voices apart).
fn score(
    env: &TestEnv,
    name: &str,
    voices: u32,
    placement: &str,
    extra: &str,
    body: &str,
) -> (PathBuf, PathBuf) {
    let ws = env.work.join(format!("{name}-ws"));
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
parallel: {{enabled: true, max_concurrent: {voices}}}
retry: {{max_retries: 0}}
placement: {{type: slurm, poll_interval_seconds: 0.2{placement}}}
{extra}sheet:
  size: 1
  total_items: 1
  fan_out: {{1: {voices}}}
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> "{{{{ workspace }}}}/ledger"
{body}"#,
        ws = ws.display(),
    );
    (env.write_score(name, &yaml), ws)
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Soon (30 s: a cancelled job's end waits for Slurm, slower while other tests use the
/// cluster), no file is left under the workspace's Slurm state directory; the message names
/// what is left, and which of it holds the secret.
/// The registry's notes of files to remove (written with each result) are gone with them.
fn assert_no_attempt_files(env: &TestEnv, ws: &Path, when: &str) {
    let state = ws.join(".mozart-slurm");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = files_under(&state);
        let noted = remote_leftovers(env);
        if left.is_empty() && noted.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let secret: Vec<&PathBuf> = left
                .iter()
                .filter(|p| {
                    std::fs::read(p)
                        .is_ok_and(|b| b.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()))
                })
                .collect();
            panic!("{when}: attempt files left on the shared filesystem: {left:#?}\nholding the API key: {secret:#?}\nnoted for removal: {noted:#?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Success, failure and timeout: three sheets of one job.
#[test]
fn attempt_files_are_removed_when_attempts_succeed_fail_or_time_out() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = conductor();
    let job = format!("slurm-files-{}", std::process::id());
    let (path, ws) = score(
        &env,
        &job,
        3,
        "",
        "backend: {timeout_seconds: 600, timeout_overrides: {3: 8}}\n",
        "    RUN: if [ {{ sheet_num }} = 2 ]; then exit 3; fi\n    RUN: if [ {{ sheet_num }} = 3 ]; then sleep 120; fi\n",
    );
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 180.0);
    assert_eq!(sheet(&doc, 1)["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 2)["status"], "failed", "{doc:#}");
    assert_eq!(sheet(&doc, 3)["status"], "failed", "{doc:#}");
    assert_eq!(
        ledger(&ws.join("ledger")).len(),
        3,
        "every sheet ran on Slurm"
    );
    assert_no_attempt_files(&env, &ws, "after success, failure and timeout");
}

#[test]
fn attempt_files_are_removed_when_the_job_is_cancelled() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = conductor();
    let job = format!("slurm-files-cancel-{}", std::process::id());
    let (path, ws) = score(&env, &job, 2, "", "", "    RUN: sleep 120\n");
    run(&env, &path, &[]);
    poll(&env, 120.0, "the sheets to start on Slurm", || {
        (ledger(&ws.join("ledger")).len() >= 2).then_some(())
    });
    let out = env.mozart(&["cancel", &job]);
    assert!(out.status.success(), "mozart cancel: {}", stdout(&out));
    let doc = wait_terminal(&env, &job, 60.0);
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    assert_no_attempt_files(&env, &ws, "after mozart cancel");
}

/// `sbatch` refuses the job (no such partition): the files written for it go too.
#[test]
fn attempt_files_are_removed_when_sbatch_refuses_the_job() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let env = conductor();
    let job = format!("slurm-files-refused-{}", std::process::id());
    let (path, ws) = score(&env, &job, 1, ", partition: no-such-partition", "", "");
    run(&env, &path, &[]);
    let doc = wait_terminal(&env, &job, 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_no_attempt_files(&env, &ws, "after sbatch refused the job");
}

/// The rows the registry keeps of finished attempts whose files are still to be removed.
pub(crate) fn remote_leftovers(env: &TestEnv) -> Vec<String> {
    let conn = rusqlite::Connection::open(env.home.join("registry.db")).unwrap();
    let mut st = conn.prepare("SELECT dir FROM remote_leftovers").unwrap();
    let rows = st.query_map([], |r| r.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

/// A conductor killed after it saved an attempt's result and before it removed the
/// attempt's files (the removal runs after the commit) leaves them noted in the registry:
/// the next conductor removes them at its start — an array task's directory, its link in
/// the array's directory and the array's script with it — and forgets them. A directory
/// not named as an attempt's is never touched, noted or not.
#[test]
fn the_files_a_kill_left_after_a_saved_result_go_at_the_next_start() {
    let env = TestEnv::new();
    env.start_conductor();
    env.stop_conductor();
    let ws = env.work.join("ws-left");
    let job_dir = ws.join(".mozart-slurm/left-job");
    let array = job_dir.join("array-1700000000000-42");
    let task = array.join("sheet-1-attempt-1-1700000000001");
    std::fs::create_dir_all(&task).unwrap();
    for (name, text) in [
        ("adopted", "1234_0\n"),
        ("stdout", "done\n"),
        ("exit", "0\n"),
    ] {
        std::fs::write(task.join(name), text).unwrap();
    }
    std::fs::write(array.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink("sheet-1-attempt-1-1700000000001", array.join("0")).unwrap();
    let other = ws.join("mine");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep"), "a user's file\n").unwrap();
    {
        let conn = rusqlite::Connection::open(env.home.join("registry.db")).unwrap();
        for dir in [&task, &other] {
            conn.execute(
                "INSERT INTO remote_leftovers (dir) VALUES (?1)",
                [dir.to_str().unwrap()],
            )
            .unwrap();
        }
    }
    env.start_conductor();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ws.join(".mozart-slurm").exists() || !remote_leftovers(&env).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left: {:#?}, noted: {:?}\n{}",
            files_under(&ws.join(".mozart-slurm")),
            remote_leftovers(&env),
            env.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        std::fs::read_to_string(other.join("keep")).unwrap(),
        "a user's file\n"
    );
}

/// A directory (`mkdir -m 755`, owned by the test's user) that the intruder can enter, and
/// removed with everything in it at the end.
struct Shared(PathBuf);

impl Shared {
    fn new(name: &str) -> Shared {
        let dir = PathBuf::from(format!("/tmp/{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        set_mode(&dir, 0o755);
        Shared(dir)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The error of a job's only sheet, once the job failed.
fn failed_sheet_error(env: &TestEnv, job: &str) -> String {
    let doc = wait_terminal(env, job, 120.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    sheet(&doc, 1)["error_message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A shared `state_dir` let another local user run any command as you: the conductor
/// reused a job directory the other user had made (0777, its name predictable) and the
/// job ran the `argv` it found in the attempt's directory — which that user could swap
/// while the job waited in the queue. Now a state directory others can write, or a job
/// directory of another user's, is refused before anything is submitted (the error names
/// the directory, its owner or mode, and what to do); and a job whose attempt's directory
/// was swapped anyway (its job directory left writable by others) runs nothing from it.
#[test]
fn another_user_cannot_run_commands_through_the_slurm_state_directory() {
    let _cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return;
    }
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let shared = Shared::new("mozart-slurm-shared");
    let env = conductor();

    // A world-writable state directory (`/tmp`-like, 1777).
    let scratch = shared.0.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    set_mode(&scratch, 0o1777);
    let job = format!("slurm-sd-open-{}", std::process::id());
    let (path, ws) = score(
        &env,
        &job,
        1,
        &format!(", state_dir: {}", scratch.display()),
        "",
        "",
    );
    run(&env, &path, &[]);
    let e = failed_sheet_error(&env, &job);
    assert!(
        e.contains(&format!(
            "{} can be written by every user (mode 1777)",
            scratch.display()
        )) && e.contains("placement.state_dir"),
        "{e}"
    );
    assert!(ledger(&ws.join("ledger")).is_empty(), "nothing ran");

    // The job's directory made by the other user in a state directory that is yours.
    let mine = shared.0.join("mine");
    std::fs::create_dir(&mine).unwrap();
    let job = format!("slurm-sd-theirs-{}", std::process::id());
    let theirs = mine.join(&job);
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(intruder.uid), Some(intruder.gid)).unwrap();
    set_mode(&theirs, 0o777);
    let (path, ws) = score(
        &env,
        &job,
        1,
        &format!(", state_dir: {}", mine.display()),
        "",
        "",
    );
    run(&env, &path, &[]);
    let e = failed_sheet_error(&env, &job);
    assert!(
        e.contains(&format!(
            "{} belongs to {} (uid {})",
            theirs.display(),
            intruder.name,
            intruder.uid
        )),
        "{e}"
    );
    assert!(ledger(&ws.join("ledger")).is_empty(), "nothing ran");

    // The swap, while the job waits in the queue, in a job directory left writable by others.
    let job = format!("slurm-sd-swap-{}", std::process::id());
    let (path, ws) = score(
        &env,
        &job,
        1,
        &format!(
            ", state_dir: {}, extra_args: [\"--begin=now+1hour\"]",
            mine.display()
        ),
        "",
        "",
    );
    let _scancel = crate::slurm_placement::Scancel(format!("mozart-{job}-"));
    run(&env, &path, &[]);
    let id = poll(&env, 120.0, "the sheet's Slurm job in the queue", || {
        crate::slurm_placement::squeue(&format!("mozart-{job}-"))
            .first()
            .map(|(id, _, _)| id.clone())
    });
    let job_dir = mine.join(&job);
    set_mode(&job_dir, 0o777);
    let pwned = shared.0.join("PWNED");
    let swap = format!(
        "cd {dir} && A=$(ls) && mv \"$A\" \"$A.orig\" && mkdir \"$A\" && printf {id} > \"$A/adopted\" \
         && printf 'sh\\0-c\\0id > {pwned}\\0' > \"$A/argv\"",
        dir = job_dir.display(),
        pwned = pwned.display(),
    );
    let out = intruder.command("sh").args(["-c", &swap]).output().unwrap();
    assert!(out.status.success(), "the swap: {out:?}");
    let out = std::process::Command::new("scontrol")
        .args(["update", &format!("jobid={id}"), "starttime=now"])
        .output()
        .unwrap();
    assert!(out.status.success(), "scontrol update: {out:?}");
    let doc = wait_terminal(&env, &job, 120.0);
    assert!(
        !pwned.exists(),
        "the other user's command ran as the conductor's user: {:?}",
        std::fs::read_to_string(&pwned)
    );
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert!(ledger(&ws.join("ledger")).is_empty(), "nothing ran");
}
