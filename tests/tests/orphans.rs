//! No orphans: an instrument process group never outlives its own deadline, even when the
//! conductor that started it is killed with SIGKILL (issue #4: "killing the conductor with
//! kill -9 leaves no instrument process running longer than its own timeout").

use std::time::{Duration, Instant};

use mozart_tests::{alive, signal, stdout, TestEnv};

fn read_pids(path: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn instrument_group_dies_at_its_deadline_after_the_conductor_is_killed() {
    let env = TestEnv::new();
    // The sheet starts a grandchild and both sleep far past the 2 s sheet timeout; they
    // record their pids so the test can look for survivors.
    let score = env.write_score(
        "orphan",
        r#"name: orphan
workspace: ./orphan-ws
instrument: shell
backend:
  timeout_seconds: 2
pause_between_sheets_seconds: 0
sheet: {size: 1, total_items: 1}
retry: {max_retries: 0}
prompt:
  template: |
    RUN: (sleep 60 & echo $! >> "{{ workspace }}/pids"; wait) &
    RUN: echo $$ >> "{{ workspace }}/pids"; sleep 60
"#,
    );
    let out = env.start_conductor();
    assert_eq!(out.status.code(), Some(0), "start: {}", stdout(&out));
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));

    let pids_file = env.work.join("orphan-ws").join("pids");
    let deadline = Instant::now() + Duration::from_secs(10);
    while read_pids(&pids_file).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the sheet never started its processes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pids = read_pids(&pids_file);
    assert!(
        pids.iter().all(|p| alive(*p)),
        "processes should be running before the kill"
    );

    let conductor = env.conductor_pid().expect("conductor pid");
    signal(conductor, "KILL");
    let started = Instant::now();

    // Deadline 2 s (+1 s watchdog slack) and a kill grace: all gone well within 15 s, and
    // certainly not after the 60 s they asked for.
    let deadline = Instant::now() + Duration::from_secs(15);
    while pids.iter().any(|p| alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "instrument processes {pids:?} survived {:?} after the conductor was killed",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A sheet whose driver shell dies of SIGTERM while its child ignores SIGTERM: after a
/// `cancel` the group is left without its leader for the kill grace (5 s) before SIGKILL.
fn stubborn_score(env: &TestEnv) -> std::path::PathBuf {
    env.write_score(
        "stubborn",
        r#"name: stubborn
workspace: ./stubborn-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet: {size: 1, total_items: 1}
retry: {max_retries: 0}
prompt:
  template: |
    RUN: echo $$ >> "{{ workspace }}/driver"; sh -c 'trap "" TERM; echo $$ >> "{{ workspace }}/pids"; exec sleep 300'
"#,
    )
}

/// Start the stubborn score and wait for its driver and its stubborn child; (driver, child).
fn start_stubborn(env: &TestEnv) -> (u32, u32) {
    let score = stubborn_score(env);
    let out = env.start_conductor();
    assert_eq!(out.status.code(), Some(0), "start: {}", stdout(&out));
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    let ws = env.work.join("stubborn-ws");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (driver, child) = (read_pids(&ws.join("driver")), read_pids(&ws.join("pids")));
        if let (Some(d), Some(c)) = (driver.first(), child.first()) {
            return (*d, *c);
        }
        assert!(Instant::now() < deadline, "the sheet never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `mozart cancel`, then wait until the driver shell died of the SIGTERM (the stubborn
/// child lives on, its group leaderless, until the kill grace's SIGKILL).
fn cancel_until_leaderless(env: &TestEnv, driver: u32, child: u32) {
    let out = env.mozart(&["cancel", "stubborn"]);
    assert_eq!(out.status.code(), Some(0), "cancel: {}", stdout(&out));
    let deadline = Instant::now() + Duration::from_secs(4);
    while alive(driver) {
        assert!(
            Instant::now() < deadline,
            "the driver shell outlived SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(alive(child), "the child ignores SIGTERM");
}

fn assert_ends(pid: u32, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}: process {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The conductor's watchdog (`mozart __watchdog`, a child of the conductor).
fn watchdog_of(conductor: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let is_watchdog = cmdline.split(|b| *b == 0).any(|a| a == b"__watchdog");
        (ppid == conductor && is_watchdog).then_some(pid)
    })
}

/// `kill -9` of the conductor while a cancelled sheet's processes are being ended (the
/// driver shell gone, a child that ignores SIGTERM waiting for SIGKILL): the watchdog
/// still ends the child — the group is known as the attempt's by the tag its member
/// carries, though its leader is gone.
#[test]
fn a_cancelled_sheets_stubborn_child_dies_when_the_conductor_is_killed_during_the_grace() {
    let env = TestEnv::new();
    let (driver, child) = start_stubborn(&env);
    let conductor = env.conductor_pid().expect("conductor pid");
    cancel_until_leaderless(&env, driver, child);
    signal(conductor, "KILL");
    assert_ends(
        child,
        Duration::from_secs(15),
        "the cancelled sheet's child outlived the killed conductor",
    );
}

/// The same with the watchdog gone too: the next `mozart start` ends the leaderless group
/// from the in-flight journal, which kept the cancelled attempt until its group was empty.
/// (The conductor is stopped, SIGSTOP, while its watchdog is killed, so it cannot start
/// another before it is killed too.)
#[test]
fn a_cancelled_sheets_stubborn_child_is_reaped_by_the_next_start() {
    let env = TestEnv::new();
    let (driver, child) = start_stubborn(&env);
    let conductor = env.conductor_pid().expect("conductor pid");
    let watchdog = watchdog_of(conductor).expect("the conductor's watchdog");
    cancel_until_leaderless(&env, driver, child);
    signal(conductor, "STOP");
    signal(watchdog, "KILL");
    signal(conductor, "KILL");
    assert_ends(watchdog, Duration::from_secs(5), "the watchdog");
    assert_ends(conductor, Duration::from_secs(5), "the conductor");
    assert!(alive(child), "nothing else ended the child");
    env.start_conductor();
    assert_ends(
        child,
        Duration::from_secs(10),
        "the next start left the cancelled sheet's child running",
    );
}

/// A watchdog killed by hand (or by the OOM killer) is replaced: the conductor starts
/// another, which follows the same in-flight journal, so a `kill -9` of the conductor
/// afterwards still ends its running instrument. It was never replaced: the instrument ran
/// on, re-parented to init, until the next `mozart start`.
#[test]
fn a_killed_watchdog_is_replaced_and_instruments_still_die_with_the_conductor() {
    let env = TestEnv::new();
    let (_driver, child) = start_stubborn(&env);
    let conductor = env.conductor_pid().expect("conductor pid");
    let first = watchdog_of(conductor).expect("the conductor's watchdog");
    signal(first, "KILL");
    assert_ends(first, Duration::from_secs(5), "the watchdog");
    // Its replacement (looked for up to 15 s; without one the check below fails).
    let deadline = Instant::now() + Duration::from_secs(15);
    while watchdog_of(conductor).is_none_or(|w| w == first) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // It follows the journal (has it open): the instrument, which it was not told of
    // directly, dies with the conductor.
    let journal = env.home.join("inflight").join("journal");
    let follows = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == journal))
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !watchdog_of(conductor).is_some_and(|w| w != first && follows(w))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(conductor, "KILL");
    assert_ends(conductor, Duration::from_secs(5), "the conductor");
    assert_ends(
        child,
        Duration::from_secs(15),
        "the instrument outlived the killed conductor whose watchdog had been killed",
    );
}
