//! No process outlives its sheet (issue 21 part 4): what an instrument detaches from its
//! process group — `setsid cmd &`, a daemon's double fork (fork, setsid, fork), `nohup cmd &`
//! disowned by a job-control shell, and a plain double fork — is ended when the sheet
//! completes, when the job is cancelled, when the sheet times out, and when the conductor
//! stops (`mozart stop`), with the defaults a user gets.
//!
//! Each escaped process is a `sleep` with a duration no other process on the machine has
//! (the marker), and writes its pid before it starts sleeping; the test then looks through
//! `/proc` for any process still running with the marker.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};

/// The ways an instrument's child leaves its reach, each as one `RUN:` line that starts
/// `sleep <marker>` and records its pid in `<ws>/pid-<name>` first.
const ESCAPES: &[(&str, &str)] = &[
    // A new session (and so a new process group).
    ("setsid", "setsid sh -c 'echo $$ > {ws}/pid-setsid; exec sleep {m}' > /dev/null 2>&1 < /dev/null &"),
    // A daemon: fork, setsid, fork; the middle process exits at once.
    ("daemon", "( setsid sh -c \"sh -c 'echo \\$\\$ > {ws}/pid-daemon; exec sleep {m}' > /dev/null 2>&1 < /dev/null &\" & )"),
    // `nohup … & disown` in a job-control shell: its own process group, parent gone.
    ("nohup", "bash -c \"set -m; nohup sh -c 'echo \\$\\$ > {ws}/pid-nohup; exec sleep {m}' > /dev/null 2>&1 < /dev/null & disown\""),
    // A plain double fork: still in the instrument's group, its parent gone.
    ("double-fork", "( ( sh -c 'echo $$ > {ws}/pid-double-fork; exec sleep {m}' > /dev/null 2>&1 < /dev/null & ) & )"),
];

/// The marker of each escape; whatever still runs with one is killed when dropped, so a
/// failing test leaves nothing behind.
struct Markers(Vec<(&'static str, String)>);

impl std::ops::Deref for Markers {
    type Target = [(&'static str, String)];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Drop for Markers {
    fn drop(&mut self) {
        for (_, marker) in &self.0 {
            for pid in running_with(marker) {
                mozart_tests::signal(pid, "KILL");
            }
        }
    }
}

/// A marker sleep duration per escape, unique to this test process and case: seconds
/// enough to outlive any test, with a fraction nobody else uses.
fn markers() -> Markers {
    static CASE: AtomicU32 = AtomicU32::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    Markers(
        ESCAPES
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                (
                    *name,
                    format!("{}.{}{case}{i}", 3000 + i, std::process::id()),
                )
            })
            .collect(),
    )
}

/// A one-sheet `shell` score that starts every escape, then runs `then` (its last lines).
fn score(
    env: &TestEnv,
    name: &str,
    markers: &[(&str, String)],
    extra: &str,
    then: &str,
) -> std::path::PathBuf {
    let ws = env.work.join(format!("{name}-ws"));
    let mut lines = String::new();
    for ((_, template), (_, marker)) in ESCAPES.iter().zip(markers) {
        let line = template
            .replace("{ws}", &ws.display().to_string())
            .replace("{m}", marker);
        lines.push_str(&format!("    RUN: {line}\n"));
    }
    for line in then.lines() {
        lines.push_str(&format!("    RUN: {line}\n"));
    }
    let yaml = format!(
        "name: {name}\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 1}}\nretry: {{max_retries: 0}}\n{extra}\
         prompt:\n  template: |\n{lines}",
        ws = ws.display(),
    );
    env.write_score(name, &yaml)
}

/// Pids of the processes whose command line has `marker` as an argument.
fn running_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes()) && mozart_tests::alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Wait until every escape has recorded its pid and is running (the sheet really started
/// them).
fn wait_started(ws: &Path, markers: &[(&str, String)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for (name, marker) in markers {
        while !ws.join(format!("pid-{name}")).exists() || running_with(marker).is_empty() {
            assert!(
                Instant::now() < deadline,
                "the sheet never started its '{name}' process"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Assert that no process with any marker runs within `within`; the survivors are named
/// (and killed when their [`Markers`] are dropped).
fn assert_none_left(markers: &[(&str, String)], within: Duration, when: &str) {
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<(&str, Vec<u32>)> = markers
            .iter()
            .map(|(name, m)| (*name, running_with(m)))
            .filter(|(_, pids)| !pids.is_empty())
            .collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{when}: processes the sheet started are still running {within:?} later: {left:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The conductor adopts what an instrument detaches, so it must also reap it: within
/// `within`, none of its children is a zombie.
fn assert_no_zombie_children(conductor: u32, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let zombies: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                    let mut f = stat
                        .rsplit_once(')')
                        .map_or("", |(_, r)| r)
                        .split_whitespace();
                    let state = f.next();
                    let ppid = f.next().and_then(|p| p.parse::<u32>().ok());
                    state == Some("Z") && ppid == Some(conductor)
                })
            })
            .collect();
        if zombies.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the conductor left adopted processes {zombies:?} unreaped"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A job's status through `mozart status --json`.
fn job_status(env: &TestEnv, job: &str) -> String {
    let out = env.mozart(&["status", job, "--json"]);
    serde_json::from_str::<serde_json::Value>(&stdout(&out))
        .ok()
        .and_then(|d| d["status"].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[test]
fn processes_a_sheet_detached_end_when_it_completes() {
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let ws = env.work.join("done-ws");
    // The sheet waits for the test to have seen its processes, then ends successfully.
    let score = score(
        &env,
        "done",
        &markers,
        "",
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done",
            ws.join("go").display()
        ),
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_started(&ws, &markers);
    std::fs::write(ws.join("go"), "").unwrap();
    env.wait_completed("done");
    assert_none_left(
        &markers,
        Duration::from_secs(15),
        "after the sheet completed",
    );
    assert_no_zombie_children(env.conductor_pid().unwrap(), Duration::from_secs(5));
}

#[test]
fn processes_a_sheet_detached_end_when_the_job_is_cancelled() {
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let ws = env.work.join("cancelled-ws");
    let score = score(&env, "cancelled", &markers, "", "sleep 120");
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_started(&ws, &markers);
    let out = env.mozart(&["cancel", "cancelled"]);
    assert_eq!(out.status.code(), Some(0), "cancel: {}", stdout(&out));
    // SIGTERM, the 5 s kill grace at most (sleep ends at SIGTERM), some slack for load.
    assert_none_left(&markers, Duration::from_secs(15), "after mozart cancel");
    assert_no_zombie_children(env.conductor_pid().unwrap(), Duration::from_secs(5));
}

#[test]
fn processes_a_sheet_detached_end_when_it_times_out() {
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let ws = env.work.join("slow-ws");
    let score = score(
        &env,
        "slow",
        &markers,
        "backend: {timeout_seconds: 4}\n",
        "sleep 120",
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    // The escapes record their pids before the timeout; once the sheet has failed on it,
    // nothing of it may run.
    let deadline = Instant::now() + Duration::from_secs(60);
    while job_status(&env, "slow") != "failed" {
        assert!(
            Instant::now() < deadline,
            "the sheet did not time out: {}",
            stdout(&env.mozart(&["status", "slow"]))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for (name, _) in markers.iter() {
        assert!(
            ws.join(format!("pid-{name}")).exists(),
            "the sheet never started its '{name}' process"
        );
    }
    assert_none_left(
        &markers,
        Duration::from_secs(10),
        "after the sheet timed out",
    );
    assert_no_zombie_children(env.conductor_pid().unwrap(), Duration::from_secs(5));
}

/// `mozart stop` with the defaults: the running sheet is let finish (graceful stop), and
/// what it detached ends with it.
#[test]
fn processes_a_sheet_detached_end_when_the_conductor_stops() {
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let ws = env.work.join("stopped-ws");
    let score = score(&env, "stopped", &markers, "", "sleep 3");
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_started(&ws, &markers);
    stop_confirmed(&env);
    assert_none_left(&markers, Duration::from_secs(10), "after mozart stop");
}

/// `mozart stop` when the running sheet outlasts `shutdown_timeout_seconds`: the conductor
/// ends the sheet's processes, detached ones included, before it exits.
#[test]
fn processes_a_sheet_detached_end_when_the_conductor_stops_before_the_sheet_does() {
    let env = TestEnv::new();
    std::fs::write(
        env.home.join("conductor.yaml"),
        "shutdown_timeout_seconds: 10\n",
    )
    .unwrap();
    env.start_conductor();
    let markers = markers();
    let ws = env.work.join("cut-ws");
    let score = score(&env, "cut", &markers, "", "sleep 120");
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_started(&ws, &markers);
    stop_confirmed(&env);
    assert_none_left(
        &markers,
        Duration::from_secs(10),
        "after mozart stop (shutdown timeout passed)",
    );
}

/// `mozart stop --yes` (jobs are running, and a script has no terminal to confirm); waits until the
/// conductor is gone.
fn stop_confirmed(env: &TestEnv) {
    let out = env.command(&["stop", "--yes"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stop: {}\n{}",
        stdout(&out),
        env.log()
    );
}

/// Architecture invariant 5: only processes the conductor started are signalled. Processes
/// elsewhere on the machine that copy a running attempt's tag — the test's own, and one of
/// another local user — are left alone when the attempt's processes are ended.
#[test]
fn a_copied_attempt_tag_does_not_make_a_stranger_the_conductors() {
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let ws = env.work.join("tagged-ws");
    let score = score(
        &env,
        "tagged",
        &markers,
        "",
        &format!(
            "echo \"$MOZART_ATTEMPT\" > {}\nwhile [ ! -e {} ]; do sleep 0.05; done",
            ws.join("tag").display(),
            ws.join("go").display()
        ),
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_started(&ws, &markers);
    let tag = std::fs::read_to_string(ws.join("tag"))
        .unwrap()
        .trim()
        .to_string();
    assert!(!tag.is_empty(), "the instrument has no MOZART_ATTEMPT");

    let stranger_marker = format!("3999.{}7", std::process::id());
    let mut mine = std::process::Command::new("sleep")
        .arg(&stranger_marker)
        .env("MOZART_ATTEMPT", &tag)
        .spawn()
        .unwrap();
    let mut theirs = intruder
        .command("sleep")
        .arg(&stranger_marker)
        .env("MOZART_ATTEMPT", &tag)
        .spawn()
        .unwrap();

    std::fs::write(ws.join("go"), "").unwrap();
    env.wait_completed("tagged");
    assert_none_left(
        &markers,
        Duration::from_secs(15),
        "after the sheet completed",
    );
    let alive = (
        mine.try_wait().unwrap().is_none(),
        theirs.try_wait().unwrap().is_none(),
    );
    let _ = mine.kill();
    let _ = theirs.kill();
    let _ = (mine.wait(), theirs.wait());
    assert_eq!(
        alive,
        (true, true),
        "(test's process, intruder's process) alive after the sheet ended: a process the conductor did not start was signalled"
    );
}

/// A conductor started from inside an instrument inherits that attempt's `MOZART_ATTEMPT`.
/// Its own instruments still carry exactly one tag, their own: the inherited one would let
/// the outer conductor's clean-up end them and this one's miss what they detach. (Read from
/// the instrument's `/proc/<pid>/environ`, where the clean-up reads it: a shell's `env`
/// shows one of two copies. The `shell` instrument runs its RUN lines in a nested `sh -ec`,
/// whose parent is the instrument.)
#[test]
fn a_conductor_started_by_an_instrument_gives_its_attempts_their_own_tag() {
    let env = TestEnv::new();
    let out = env
        .command(&["start"])
        .env("MOZART_ATTEMPT", "4242.1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "start: {}\n{}",
        stdout(&out),
        env.log()
    );
    let ws = env.work.join("nested-ws");
    let yaml = format!(
        "name: nested\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    \
         RUN: tr '\\0' '\\n' < /proc/$PPID/environ | grep '^MOZART_ATTEMPT=' > {tags}\n",
        ws = ws.display(),
        tags = ws.join("tags.txt").display(),
    );
    let score = env.write_score("nested", &yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    env.wait_completed("nested");
    let tags = std::fs::read_to_string(ws.join("tags.txt")).unwrap();
    let pid = env.conductor_pid().expect("the conductor's pid");
    let tags: Vec<&str> = tags.lines().collect();
    assert_eq!(tags.len(), 1, "{tags:?}");
    assert!(
        tags[0].starts_with(&format!("MOZART_ATTEMPT={pid}.")),
        "{tags:?}"
    );
    stop_confirmed(&env);
}

/// A one-sheet `shell` score whose `command_succeeds` check starts every escape, one more
/// process that keeps the check's output pipe open (`( sleep & )`, marker `holder`), then
/// runs `then`; `rule` is added to the check.
fn check_score(
    env: &TestEnv,
    name: &str,
    markers: &[(&str, String)],
    holder: &str,
    rule: &str,
    then: &str,
) -> std::path::PathBuf {
    let ws = env.work.join(format!("{name}-ws"));
    let mut lines = String::new();
    for ((_, template), (_, marker)) in ESCAPES.iter().zip(markers) {
        let line = template
            .replace("{ws}", &ws.display().to_string())
            .replace("{m}", marker);
        lines.push_str(&format!("      {line}\n"));
    }
    lines.push_str(&format!("      ( sh -c 'exec sleep {holder}' & )\n"));
    for line in then.lines() {
        lines.push_str(&format!("      {line}\n"));
    }
    let yaml = format!(
        "name: {name}\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 1}}\nretry: {{max_retries: 0}}\n\
         prompt:\n  template: |\n    RUN: echo hi\n\
         validations:\n  - type: command_succeeds\n{rule}    command: |\n{lines}",
        ws = ws.display(),
    );
    env.write_score(name, &yaml)
}

/// The marker of the process that holds a check's output pipe (see [`check_score`]).
fn holder_marker(markers: &Markers) -> String {
    format!("3900.{}", &markers[0].1[5..])
}

/// Wait until `job`'s status is `want` (`mozart status --json`), within 60 s.
fn wait_status(env: &TestEnv, job: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while job_status(env, job) != want {
        assert!(
            Instant::now() < deadline,
            "{job} is not {want} after 60 s: {}",
            stdout(&env.mozart(&["status", job]))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A `command_succeeds` check is no instrument, but what it starts must not outlive it
/// either: the check passes once `bash` exits (not when a background child closes the
/// output pipe it holds) and every process it left is ended.
#[test]
fn processes_a_validation_command_detached_end_when_it_exits() {
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let holder = holder_marker(&markers);
    let _holder = Markers(vec![("holder", holder.clone())]);
    let ws = env.work.join("vdone-ws");
    let score = check_score(&env, "vdone", &markers, &holder, "", "true");
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_status(&env, "vdone", "completed");
    for (name, _) in markers.iter() {
        assert!(
            ws.join(format!("pid-{name}")).exists(),
            "the check never started its '{name}' process"
        );
    }
    assert_none_left(
        &[("holder", holder)],
        Duration::from_secs(15),
        "after the check passed",
    );
    assert_none_left(&markers, Duration::from_secs(15), "after the check passed");
    assert_no_zombie_children(env.conductor_pid().unwrap(), Duration::from_secs(5));
}

#[test]
fn processes_a_validation_command_detached_end_when_the_job_is_cancelled() {
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let holder = holder_marker(&markers);
    let _holder = Markers(vec![("holder", holder.clone())]);
    let ws = env.work.join("vcancel-ws");
    let score = check_score(&env, "vcancel", &markers, &holder, "", "sleep 120");
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_started(&ws, &markers);
    let out = env.mozart(&["cancel", "vcancel"]);
    assert_eq!(out.status.code(), Some(0), "cancel: {}", stdout(&out));
    assert_none_left(&markers, Duration::from_secs(15), "after mozart cancel");
    assert_none_left(
        &[("holder", holder)],
        Duration::from_secs(5),
        "after mozart cancel",
    );
}

#[test]
fn processes_a_validation_command_detached_end_when_the_conductor_stops() {
    let env = TestEnv::new();
    std::fs::write(
        env.home.join("conductor.yaml"),
        "shutdown_timeout_seconds: 10\n",
    )
    .unwrap();
    env.start_conductor();
    let markers = markers();
    let holder = holder_marker(&markers);
    let _holder = Markers(vec![("holder", holder.clone())]);
    let ws = env.work.join("vstop-ws");
    let score = check_score(&env, "vstop", &markers, &holder, "", "sleep 120");
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_started(&ws, &markers);
    stop_confirmed(&env);
    assert_none_left(&markers, Duration::from_secs(10), "after mozart stop");
    assert_none_left(
        &[("holder", holder)],
        Duration::from_secs(5),
        "after mozart stop",
    );
}

/// A check that outlives its `timeout_seconds` is ended with everything it started, and
/// its failure says how: a command that ignored SIGTERM was killed with SIGKILL.
#[test]
fn processes_a_validation_command_detached_end_when_it_times_out() {
    let env = TestEnv::new();
    env.start_conductor();
    let markers = markers();
    let holder = holder_marker(&markers);
    let _holder = Markers(vec![("holder", holder.clone())]);
    let ws = env.work.join("vslow-ws");
    let score = check_score(
        &env,
        "vslow",
        &markers,
        &holder,
        "    timeout_seconds: 3\n",
        "trap '' TERM; sleep 120",
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    wait_status(&env, "vslow", "failed");
    for (name, _) in markers.iter() {
        assert!(
            ws.join(format!("pid-{name}")).exists(),
            "the check never started its '{name}' process"
        );
    }
    assert_none_left(
        &markers,
        Duration::from_secs(10),
        "after the check timed out",
    );
    assert_none_left(
        &[("holder", holder)],
        Duration::from_secs(5),
        "after the check timed out",
    );
    let errors = stdout(&env.mozart(&["errors", "vslow", "-V"]));
    assert!(
        errors.contains("timed out after 3s (it ignored SIGTERM and was killed with SIGKILL)"),
        "{errors}"
    );
}
