//! Torture (a): `kill -9` the conductor at random moments while a mix of jobs runs on the
//! `shell` instrument, restart it, and check that every job still finishes with every
//! sheet's output in place, no instrument process is left behind, and the registry passes
//! `PRAGMA integrity_check` (architecture invariant 1: checkpoint before consequence).
//!
//! Short mode (default): three jobs, two kills. Long mode (`MOZART_TORTURE_LONG=1`): eight
//! jobs submitted in waves, a kill every 0.3–3 s for as long as jobs run (at most 25).
//! `MOZART_TORTURE_SEED` replays the kill moments of an earlier run.

use crate::support;

use std::time::Duration;

use mozart_tests::TestEnv;
use support::*;

#[test]
fn kill_9_at_random_moments_loses_no_job_and_no_output() {
    let env = TestEnv::new();
    let mut rng = Rng::from_env("kill9");
    let long = long_mode();
    env.start_conductor();

    let shapes: Vec<Shape> = if long {
        vec![
            Shape::Sequential(6),
            Shape::FanOut(4),
            Shape::Parallel(5),
            Shape::Sequential(3),
            Shape::FanOut(3),
            Shape::Parallel(8),
            Shape::Sequential(10),
            Shape::FanOut(6),
        ]
    } else {
        vec![Shape::Sequential(4), Shape::FanOut(3), Shape::Parallel(3)]
    };
    let sleep = if long { 0.4 } else { 0.25 };
    let mut jobs: Vec<(String, Shape, std::path::PathBuf)> = Vec::new();
    let mut pending: Vec<(String, Shape, std::path::PathBuf, std::path::PathBuf)> = shapes
        .iter()
        .enumerate()
        .map(|(i, shape)| {
            let name = format!("tort-{i}");
            let (score, ws) = shell_score(&env, &name, *shape, sleep);
            (name, *shape, score, ws)
        })
        .collect();
    // Half the jobs go in before the first kill; in long mode the rest arrive between kills.
    let first_wave = if long {
        pending.len() / 2
    } else {
        pending.len()
    };
    for (name, shape, score, ws) in pending.drain(..first_wave) {
        let resp = submit(&env, &score);
        assert_eq!(resp["status"], "accepted", "{resp}");
        jobs.push((name, shape, ws));
    }

    let max_kills = if long { 25 } else { 2 };
    let mut kills = 0;
    while kills < max_kills {
        std::thread::sleep(Duration::from_millis(
            rng.range(300, if long { 3000 } else { 900 }),
        ));
        let ids: Vec<String> = jobs.iter().map(|j| j.0.clone()).collect();
        let all_done = ids
            .iter()
            .all(|id| status(&env, id).as_ref().is_some_and(is_terminal));
        if all_done && pending.is_empty() {
            break;
        }
        kill9_conductor(&env);
        kills += 1;
        // Sometimes restart at once, sometimes let orphaned instruments finish first.
        std::thread::sleep(Duration::from_millis(rng.range(0, 400)));
        env.start_conductor();
        if let Some((name, shape, score, ws)) = pending.pop() {
            let resp = submit(&env, &score);
            assert_eq!(resp["status"], "accepted", "{resp}");
            jobs.push((name, shape, ws));
        }
    }
    for (name, shape, score, ws) in pending.drain(..) {
        let resp = submit(&env, &score);
        assert_eq!(resp["status"], "accepted", "{resp}");
        jobs.push((name, shape, ws));
    }
    eprintln!("kill9: {kills} kills");

    let ids: Vec<String> = jobs.iter().map(|j| j.0.clone()).collect();
    let docs = wait_all_terminal(&env, &ids, if long { 600 } else { 90 });
    for ((name, shape, ws), doc) in jobs.iter().zip(&docs) {
        assert_eq!(
            doc["status"], "completed",
            "{name} after {kills} kills: {doc:#}"
        );
        for n in 1..=shape.sheets() {
            assert_eq!(
                sheet(doc, n)["status"],
                "completed",
                "{name} sheet {n}: {doc:#}"
            );
            let out = ws.join(format!("out-{n}.txt"));
            let text = std::fs::read_to_string(&out)
                .unwrap_or_else(|e| panic!("{name}: {} missing: {e}", out.display()));
            assert_eq!(text, format!("sheet {n}\n"));
        }
        // A sheet runs again only if it was in flight at a kill: at most one extra run
        // per kill, never a re-run of everything (invariant 1).
        let ledger = std::fs::read_to_string(ws.join("ledger.txt")).unwrap_or_default();
        let runs = ledger.lines().count() as u32;
        assert!(
            runs >= shape.sheets() && runs <= shape.sheets() + kills * shape.sheets().min(8),
            "{name}: {runs} sheet runs for {} sheets and {kills} kills:\n{ledger}",
            shape.sheets()
        );
    }

    let left = wait_no_processes_under(env.root(), 10.0);
    assert!(
        left.is_empty(),
        "instrument processes left behind: {left:#?}"
    );
    assert_eq!(integrity_check(&env.home.join("registry.db")), "ok");
    assert_eq!(env.stop_conductor().status.code(), Some(0));
    assert_eq!(integrity_check(&env.home.join("registry.db")), "ok");
}

/// An attempt in flight at the kill is re-dispatched after the restart; its old process
/// group must not keep running beside the new attempt in the same workspace.
#[test]
fn kill_9_does_not_leave_the_in_flight_instrument_running_beside_its_retry() {
    let env = TestEnv::new();
    env.start_conductor();
    let (score, ws) = shell_score(&env, "hang", Shape::Sequential(1), 30.0);
    let resp = submit(&env, &score);
    assert_eq!(resp["status"], "accepted", "{resp}");
    // Wait until the instrument is running.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while processes_under(env.root(), &[]).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "instrument never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    kill9_conductor(&env);
    env.start_conductor();
    std::thread::sleep(Duration::from_secs(2));
    // Exactly one attempt's process tree may be alive: `sh` (driver) → `sh -e` → `sleep`.
    let sleepers: Vec<_> = processes_under(env.root(), &[])
        .into_iter()
        .filter(|(_, cmd)| cmd.starts_with("sleep"))
        .collect();
    assert!(
        sleepers.len() <= 1,
        "two attempts of one sheet run at once in {}: {sleepers:#?}",
        ws.display()
    );
    let _ = env.mozart(&["cancel", "hang"]);
    let left = wait_no_processes_under(env.root(), 15.0);
    assert!(left.is_empty(), "left after cancel: {left:#?}");
}

/// The large-job path (issue 24): a 2,000-sheet fan-out, its sheet rows written in the
/// registry's compact form while the WAL is checkpointed and truncated beside it. `kill -9`
/// twice in the middle of it: after the restarts the job completes, every sheet completed
/// and its output is there, and no sheet that had completed ran again — only the ones in
/// flight at a kill (at most 20 each time) ran twice.
#[test]
fn kill_9_in_the_middle_of_a_2000_sheet_job_loses_nothing_and_reruns_nothing_completed() {
    const SHEETS: u32 = 2_000;
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("big-ws");
    let yaml = format!(
        r#"name: big
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
parallel:
  enabled: true
  max_concurrent: 20
retry:
  max_retries: 0
sheet:
  size: 1
  total_items: 1
  fan_out:
    1: {SHEETS}
prompt:
  template: |
    RUN: echo "{{{{ sheet_num }}}}" >> "{{{{ workspace }}}}/ledger.txt"
    RUN: echo "sheet {{{{ sheet_num }}}}" > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
        ws = ws.display()
    );
    let score = env.write_score("big", &yaml);
    let resp = submit(&env, &score);
    assert_eq!(resp["status"], "accepted", "{resp}");
    let ledger_lines = || {
        std::fs::read_to_string(ws.join("ledger.txt"))
            .map(|t| t.lines().count() as u32)
            .unwrap_or(0)
    };
    let mut kills = 0;
    for at in [SHEETS / 4, SHEETS / 2] {
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while ledger_lines() < at {
            assert!(
                std::time::Instant::now() < deadline,
                "no progress to {at} sheets: {}",
                log_tail(&env, 3000)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        kill9_conductor(&env);
        kills += 1;
        // What the registry holds at the kill is one consistent moment: the job's own
        // document (its last completed sheet, its totals) as current as its sheets' rows —
        // a burst saves the document once, after its sheets, in the same transaction.
        let (header_last, rows_last, completed) = registry_progress(&env, "big");
        assert!(completed > 0, "no completed sheet saved by the kill");
        assert_eq!(
            header_last, rows_last,
            "the job's last completed sheet against its {completed} completed rows"
        );
        env.start_conductor();
    }
    let docs = wait_all_terminal(&env, &["big".to_string()], 600);
    let doc = &docs[0];
    assert_eq!(doc["status"], "completed", "after {kills} kills");
    let ledger = std::fs::read_to_string(ws.join("ledger.txt")).unwrap();
    let mut runs = vec![0u32; SHEETS as usize + 1];
    for line in ledger.lines() {
        let n: usize = line.trim().parse().unwrap();
        runs[n] += 1;
    }
    // `status --json` of a job this size is a summary (issue 24): read every sheet a page
    // at a time.
    let mut all = serde_json::Map::new();
    for offset in (0..SHEETS).step_by(1000) {
        let out = env.mozart(&[
            "status",
            "big",
            "--json",
            "--sheets",
            "--offset",
            &offset.to_string(),
            "--limit",
            "1000",
        ]);
        let page: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        all.extend(page["sheets"].as_object().cloned().unwrap_or_default());
    }
    let paged = serde_json::json!({ "sheets": all });
    for n in 1..=SHEETS {
        assert_eq!(sheet(&paged, n)["status"], "completed", "sheet {n}");
        assert!(runs[n as usize] >= 1, "sheet {n} never ran");
        let out = std::fs::read_to_string(ws.join(format!("out-{n}.txt"))).unwrap();
        assert_eq!(out, format!("sheet {n}\n"));
    }
    let extra: u32 = runs.iter().map(|r| r.saturating_sub(1)).sum();
    assert!(
        extra <= kills * 20,
        "{extra} sheets ran twice after {kills} kills: more than were in flight"
    );
    assert_eq!(integrity_check(&env.home.join("registry.db")), "ok");
    assert_eq!(env.stop_conductor().status.code(), Some(0));
}

/// From the registry file: the job document's `last_completed_sheet`, the highest completed
/// sheet row, and how many rows are completed.
fn registry_progress(env: &TestEnv, job: &str) -> (u64, u64, u64) {
    let conn = rusqlite::Connection::open(env.home.join("registry.db")).unwrap();
    let header: String = conn
        .query_row(
            "SELECT checkpoint_json FROM jobs WHERE job_id = ?1",
            [job],
            |r| r.get(0),
        )
        .unwrap();
    let header: serde_json::Value = serde_json::from_str(&header).unwrap();
    let (rows_last, completed): (Option<u64>, u64) = conn
        .query_row(
            "SELECT MAX(sheet_num), COUNT(*) FROM sheets WHERE job_id = ?1 AND status = 'completed'",
            [job],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    (
        header["last_completed_sheet"].as_u64().unwrap_or(0),
        rows_last.unwrap_or(0),
        completed,
    )
}
