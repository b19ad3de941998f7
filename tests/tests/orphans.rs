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
