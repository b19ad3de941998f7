//! Registry behaviour against real SQLite files in temporary directories.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use mozart_state::checkpoint::SheetFailure;
use mozart_state::registry::{
    AttemptRecord, DaemonJobStatus, DeleteFilter, HookResultRecord, JobRecord, JobScore, Registry,
    ERROR_OUTPUT_TAIL_CHARS,
};
use mozart_state::{CheckpointState, JobStatus, SheetState, SheetStatus, StateError};
use serde_json::json;

fn open(dir: &tempfile::TempDir) -> Registry {
    Registry::open(&dir.path().join("home/registry.db")).unwrap()
}

fn job(id: &str) -> JobRecord {
    JobRecord::new(id, format!("/scores/{id}.yaml"), format!("/ws/{id}"))
}

#[test]
fn migrations_apply_once_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    assert_eq!(reg.schema_version().unwrap(), mozart_state::SCHEMA_VERSION);
    reg.create_job(&job("a")).unwrap();
    drop(reg);
    let reg = open(&dir);
    assert_eq!(reg.schema_version().unwrap(), mozart_state::SCHEMA_VERSION);
    assert!(
        reg.get_job("a").unwrap().is_some(),
        "data kept across reopen"
    );
    let conn = rusqlite::Connection::open(reg.path()).unwrap();
    let applied: i64 = conn
        .query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(applied, i64::from(mozart_state::SCHEMA_VERSION));
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn refuses_a_database_from_a_newer_mozart() {
    let dir = tempfile::tempdir().unwrap();
    let path = open(&dir).path().to_path_buf();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO schema_migrations VALUES (99, '0099_future', 0)",
        [],
    )
    .unwrap();
    drop(conn);
    let err = Registry::open(&path).unwrap_err();
    assert!(
        matches!(err, StateError::SchemaTooNew { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("registry.db"), "{err}");
}

#[test]
fn job_record_round_trips_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let mut rec = job("chain");
    rec.pid = Some(4242);
    rec.error_traceback = Some("trace".into());
    rec.current_sheet = Some(2);
    rec.total_sheets = Some(5);
    rec.log_path = Some("/logs/chain.log".into());
    rec.concert_id = Some("concert-1".into());
    rec.chain_depth = Some(3);
    rec.parent_job_id = Some("parent".into());
    rec.concert_config = Some(json!({"enabled": true, "max_chain_depth": 5}));
    rec.hook_config = Some(json!([{"type": "run_job", "job_path": "next.yaml"}]));
    rec.completed_new_work = true;
    rec.options.insert("fresh".into(), json!(true));
    rec.options.insert("start_sheet".into(), json!(2));
    reg.create_job_with_score(
        &rec,
        &JobScore {
            yaml: Some("name: chain\n".into()),
            snapshot: Some((&json!({"name": "chain"})).into()),
        },
    )
    .unwrap();
    let got = reg.get_job("chain").unwrap().unwrap();
    assert_eq!(
        JobRecord {
            updated_at: rec.updated_at,
            ..got.clone()
        },
        rec
    );
    let score = reg.job_score("chain").unwrap().unwrap();
    assert_eq!(score.yaml.as_deref(), Some("name: chain\n"));
    assert_eq!(
        score.snapshot.map(|s| s.to_value()),
        Some(json!({"name": "chain"}))
    );

    assert!(reg.get_job("nope").unwrap().is_none());
}

#[test]
fn status_transitions_stamp_times_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("j")).unwrap();
    reg.set_job_status("j", DaemonJobStatus::Running, None)
        .unwrap();
    let r = reg.get_job("j").unwrap().unwrap();
    assert!(r.started_at.is_some());
    assert!(r.completed_at.is_none());
    reg.set_job_status(
        "j",
        DaemonJobStatus::Failed,
        Some("Daemon restarted while job was active"),
    )
    .unwrap();
    let r = reg.get_job("j").unwrap().unwrap();
    assert!(r.completed_at.is_some());
    assert_eq!(
        r.error_message.as_deref(),
        Some("Daemon restarted while job was active")
    );
    reg.set_job_status("j", DaemonJobStatus::Paused, None)
        .unwrap();
    assert!(reg.get_job("j").unwrap().unwrap().error_message.is_some());
    reg.set_job_status("j", DaemonJobStatus::Queued, None)
        .unwrap();
    let r = reg.get_job("j").unwrap().unwrap();
    assert!(r.error_message.is_none() && r.completed_at.is_none());
    let err = reg
        .set_job_status("ghost", DaemonJobStatus::Running, None)
        .unwrap_err();
    assert!(matches!(err, StateError::JobNotFound { .. }), "{err}");
    assert!(err.to_string().contains("ghost"));
}

#[test]
fn listing_a_thousand_jobs_is_fast_and_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    for i in 0..1000 {
        let mut r = job(&format!("job-{i:04}"));
        r.submitted_at = 1_700_000_000.0 + f64::from(i);
        r.status = if i % 2 == 0 {
            DaemonJobStatus::Completed
        } else {
            DaemonJobStatus::Running
        };
        reg.create_job(&r).unwrap();
    }
    let t = Instant::now();
    let all = reg.list_jobs(true).unwrap();
    let elapsed = t.elapsed();
    assert_eq!(all.len(), 1000);
    assert_eq!(all[0].job_id, "job-0999");
    assert_eq!(all[999].job_id, "job-0000");
    assert!(elapsed.as_millis() < 500, "list took {elapsed:?}");
    let live = reg.list_jobs(false).unwrap();
    assert_eq!(live.len(), 500);
    assert!(live.iter().all(|j| j.status == DaemonJobStatus::Running));
    let page = reg.list_jobs_filtered(None, Some(50)).unwrap();
    assert_eq!(page.len(), 50);
    assert_eq!(reg.orphaned_jobs().unwrap().len(), 500);

    // Pages say how many rows match in all, so a listing that is cut can tell.
    let (rows, total) = reg.page_jobs(None, Some(20), 0).unwrap();
    assert_eq!((rows.len(), total), (20, 1000));
    assert_eq!(rows[0].job_id, "job-0999");
    let (rows, total) = reg
        .page_jobs(Some(&["completed".to_string()]), Some(20), 490)
        .unwrap();
    assert_eq!((rows.len(), total), (10, 500));
    assert!(rows.iter().all(|j| j.status == DaemonJobStatus::Completed));
    let (rows, _) = reg.page_jobs(None, None, 990).unwrap();
    assert_eq!(rows.len(), 10);
    assert_eq!(rows[9].job_id, "job-0000");
}

#[test]
fn delete_never_touches_active_jobs_and_cascades() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    for (id, st) in [
        ("done", DaemonJobStatus::Completed),
        ("bad", DaemonJobStatus::Failed),
        ("live", DaemonJobStatus::Running),
        ("nap", DaemonJobStatus::Paused),
    ] {
        let mut r = job(id);
        r.status = st;
        reg.create_job(&r).unwrap();
    }
    let mut cp = CheckpointState::new("done", "done", 1);
    cp.mark_sheet_started(1);
    reg.save_checkpoint(&cp).unwrap();
    reg.record_attempt(&AttemptRecord {
        job_id: "done".into(),
        sheet_num: 1,
        attempt_num: 1,
        mode: "normal".into(),
        outcome: "success".into(),
        ..Default::default()
    })
    .unwrap();

    let none = DeleteFilter {
        job_ids: Some(vec![]),
        ..Default::default()
    };
    assert_eq!(
        reg.delete_jobs(&none).unwrap(),
        0,
        "empty id list deletes nothing"
    );
    let active = DeleteFilter {
        statuses: Some(vec![DaemonJobStatus::Running, DaemonJobStatus::Queued]),
        ..Default::default()
    };
    assert_eq!(reg.delete_jobs(&active).unwrap(), 0);
    let recent = DeleteFilter {
        older_than_seconds: Some(3600.0),
        ..Default::default()
    };
    assert_eq!(
        reg.delete_jobs(&recent).unwrap(),
        0,
        "all submitted just now"
    );
    assert_eq!(reg.delete_jobs(&DeleteFilter::default()).unwrap(), 2);
    assert!(reg.get_job("done").unwrap().is_none());
    assert!(reg.attempts("done", None, 10).unwrap().is_empty());
    assert!(reg.load_checkpoint("done").unwrap().is_none());
    let paused = DeleteFilter {
        statuses: Some(vec![DaemonJobStatus::Paused]),
        job_ids: Some(vec!["nap".into()]),
        ..Default::default()
    };
    assert_eq!(reg.delete_jobs(&paused).unwrap(), 1);
    assert!(reg.get_job("live").unwrap().is_some());
}

fn sample_checkpoint(id: &str, sheets: u32) -> CheckpointState {
    let mut cp = CheckpointState::new(id, "Sample", sheets);
    cp.config_snapshot = Some((&json!({"name": "Sample", "sheet": {"size": 1}})).into());
    cp.set_running_pid(None);
    cp.mark_sheet_started(1);
    cp.mark_sheet_completed(1, true, None, Some(2.5));
    cp.mark_sheet_started(2);
    cp.mark_sheet_failed(
        2,
        SheetFailure {
            message: "validation failed".into(),
            category: Some(mozart_state::ErrorCategory::Validation),
            exit_code: Some(0),
            error_code: Some("E201".into()),
            ..Default::default()
        },
    );
    cp.sheets.get_mut(&2).unwrap().estimated_cost = Some(0.25);
    cp.total_estimated_cost = 0.25;
    cp
}

#[test]
fn checkpoint_round_trips_through_rows() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("cp")).unwrap();
    assert!(reg.load_checkpoint("cp").unwrap().is_none());
    let cp = sample_checkpoint("cp", 3);
    reg.save_checkpoint(&cp).unwrap();
    let loaded = reg.load_checkpoint("cp").unwrap().unwrap();
    assert_eq!(loaded, cp);
    let row = reg.get_job("cp").unwrap().unwrap();
    assert_eq!(row.total_sheets, Some(3));

    let mut next = loaded;
    next.mark_sheet_started(3);
    reg.save_sheet_transition(&next, 3).unwrap();
    let again = reg.load_checkpoint("cp").unwrap().unwrap();
    assert_eq!(again.sheets[&3].status, SheetStatus::InProgress);
    assert_eq!(again.current_sheet, Some(3));
    assert_eq!(again.config_snapshot, cp.config_snapshot);

    let mut shrunk = again.clone();
    shrunk.total_sheets = 2;
    shrunk.sheets.remove(&3);
    reg.save_checkpoint(&shrunk).unwrap();
    assert_eq!(
        reg.load_checkpoint("cp").unwrap().unwrap().sheets.len(),
        2,
        "a full save drops rows of sheets the checkpoint no longer has"
    );

    reg.clear_checkpoint("cp").unwrap();
    assert!(reg.load_checkpoint("cp").unwrap().is_none());

    let err = reg
        .save_checkpoint(&sample_checkpoint("unregistered", 2))
        .unwrap_err();
    assert!(matches!(err, StateError::JobNotFound { .. }), "{err}");
}

#[test]
fn failed_multi_row_write_leaves_previous_state() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("tx")).unwrap();
    let cp = sample_checkpoint("tx", 3);
    reg.save_checkpoint(&cp).unwrap();

    let mut changed = reg.load_checkpoint("tx").unwrap().unwrap().sheets[&1].clone();
    changed.status = SheetStatus::Failed;
    changed.error_message = Some("should not persist".into());
    // Sheet 0 violates the table's CHECK constraint, after sheet 1 was already written
    // inside the same transaction.
    let invalid = SheetState::new(0);
    let err = reg.save_sheets("tx", &[changed, invalid]).unwrap_err();
    assert!(err.to_string().contains("job 'tx'"), "{err}");
    let after = reg.load_checkpoint("tx").unwrap().unwrap();
    assert_eq!(after, cp, "the whole batch rolled back");

    let mut bad = cp.clone();
    bad.status = JobStatus::Completed;
    bad.sheets.insert(0, SheetState::new(0));
    assert!(reg.save_checkpoint(&bad).is_err());
    assert_eq!(reg.load_checkpoint("tx").unwrap().unwrap(), cp);
}

#[test]
fn sheet_transition_rewrites_one_row_of_a_large_job() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("big")).unwrap();
    let mut cp = CheckpointState::new("big", "Big", 1000);
    for n in 1..=1000 {
        cp.sheets.insert(n, SheetState::new(n));
    }
    reg.save_checkpoint(&cp).unwrap();
    let stamp = |reg: &Registry| -> Vec<f64> {
        let conn = rusqlite::Connection::open(reg.path()).unwrap();
        let mut st = conn
            .prepare("SELECT updated_at FROM sheets WHERE job_id='big' ORDER BY sheet_num")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let before = stamp(&reg);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let t = Instant::now();
    for _ in 0..100 {
        cp.mark_sheet_started(500);
        reg.save_sheet_transition(&cp, 500).unwrap();
    }
    let per = t.elapsed() / 100;
    let after = stamp(&reg);
    let changed: Vec<usize> = (0..1000).filter(|&i| before[i] != after[i]).collect();
    assert_eq!(changed, vec![499], "only sheet 500's row was rewritten");
    assert!(per.as_millis() < 50, "transition took {per:?}");
    assert_eq!(
        reg.load_checkpoint("big").unwrap().unwrap().sheets[&500].attempt_count,
        100
    );
}

#[test]
fn zombie_checkpoint_is_paused_and_saved_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("z")).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let mut cp = CheckpointState::new("z", "Z", 2);
    cp.mark_sheet_started(1);
    cp.pid = Some(dead);
    reg.save_checkpoint(&cp).unwrap();
    assert_eq!(
        reg.load_checkpoint("z").unwrap().unwrap().status,
        JobStatus::Running,
        "plain load is pure"
    );
    let rec = reg.load_checkpoint_recovering_zombie("z").unwrap().unwrap();
    assert_eq!(rec.status, JobStatus::Paused);
    let stored = reg.load_checkpoint("z").unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Paused);
    assert!(stored
        .error_message
        .unwrap()
        .ends_with("Trigger: Detected on state load - process no longer running"));
}

#[test]
fn attempt_errors_lists_each_sheets_failed_attempts_newest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("e")).unwrap();
    reg.create_job(&job("other")).unwrap();
    let attempt = |job: &str, sheet: u32, n: u32, failed: bool| AttemptRecord {
        job_id: job.into(),
        sheet_num: sheet,
        attempt_num: n,
        mode: "normal".into(),
        outcome: if failed {
            "retry_scheduled"
        } else {
            "completed"
        }
        .into(),
        error_code: failed.then(|| "E900".into()),
        error_message: failed.then(|| format!("attempt {n} failed")),
        output: Some(format!("{}end of {n}", "x".repeat(1000))),
        executed_at: 1_709_210_096.0 + f64::from(n),
        ..Default::default()
    };
    // Sheet 2: six failures then a success; sheet 1: one failure; sheet 3: success only.
    for n in 1..=6 {
        reg.record_attempt(&attempt("e", 2, n, true)).unwrap();
    }
    reg.record_attempt(&attempt("e", 2, 7, false)).unwrap();
    reg.record_attempt(&attempt("e", 1, 1, true)).unwrap();
    reg.record_attempt(&attempt("e", 3, 1, false)).unwrap();
    reg.record_attempt(&attempt("other", 1, 1, true)).unwrap();

    let sheets = reg.attempt_errors("e", 4, 0).unwrap();
    let summary: Vec<(u32, Vec<u32>, u64)> = sheets
        .iter()
        .map(|s| {
            let nums = s.attempts.iter().map(|a| a.attempt_num).collect();
            (s.sheet_num, nums, s.omitted)
        })
        .collect();
    assert_eq!(summary, vec![(1, vec![1], 0), (2, vec![3, 4, 5, 6], 2)]);
    let newest = &sheets[1].attempts[3];
    assert_eq!(newest.error_message.as_deref(), Some("attempt 6 failed"));
    assert_eq!(newest.error_code.as_deref(), Some("E900"));
    let output = newest.output.as_deref().unwrap();
    assert_eq!(output.chars().count(), ERROR_OUTPUT_TAIL_CHARS);
    assert!(
        output.ends_with("end of 6"),
        "the end of the output is kept"
    );
    assert!(newest.prompt.is_none());
    assert!(reg.attempt_errors("none", 50, 0).unwrap().is_empty());
}

/// A fresh start begins the job's next run: its views of errors read the attempts
/// recorded since, and count the earlier runs' failed ones; another job's attempts never
/// move the boundary, and a job that never started another run is in run 1 with them all.
#[test]
fn a_fresh_run_reads_its_own_attempts_and_counts_the_earlier_runs_errors() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let mut ended = job("r");
    ended.status = DaemonJobStatus::Completed;
    reg.create_job(&ended).unwrap();
    reg.create_job(&job("other")).unwrap();
    let failed = |job: &str, sheet: u32, n: u32| AttemptRecord {
        job_id: job.into(),
        sheet_num: sheet,
        attempt_num: n,
        mode: "normal".into(),
        outcome: "failed".into(),
        error_code: Some("E009".into()),
        error_message: Some(format!("{job} sheet {sheet} attempt {n} failed")),
        executed_at: 1_709_210_096.0,
        ..Default::default()
    };
    reg.record_attempt(&failed("r", 1, 1)).unwrap();
    reg.record_attempt(&failed("r", 1, 2)).unwrap();
    assert_eq!(
        reg.current_run("r").unwrap(),
        mozart_state::RunRecord::FIRST
    );
    let run = reg.start_run("r").unwrap();
    assert_eq!(run.run, 2);
    assert_eq!(reg.current_run("r").unwrap(), run);
    assert_eq!(reg.earlier_runs_errors("r", &run).unwrap(), 2);
    assert!(reg
        .attempt_errors("r", 10, run.after_attempt)
        .unwrap()
        .is_empty());
    assert_eq!(
        reg.recent_attempt_errors("r", 10, run.after_attempt)
            .unwrap()
            .1,
        0
    );
    assert!(reg
        .last_attempts("r", run.after_attempt)
        .unwrap()
        .is_empty());
    // Another job's attempt comes between: still not this run's.
    reg.record_attempt(&failed("other", 1, 1)).unwrap();
    reg.record_attempt(&failed("r", 2, 1)).unwrap();
    let listed = reg.attempt_errors("r", 10, run.after_attempt).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].sheet_num, 2);
    assert_eq!(reg.attempt_errors("r", 10, 0).unwrap().len(), 2, "all runs");
    let (recent, total) = reg
        .recent_attempt_errors("r", 10, run.after_attempt)
        .unwrap();
    assert_eq!((recent.len(), total), (1, 1));
    assert_eq!(reg.last_attempts("r", run.after_attempt).unwrap().len(), 1);
    // The next fresh start: run 3, the run-2 error now an earlier one too.
    let third = reg.start_run("r").unwrap();
    assert_eq!(third.run, 3);
    assert_eq!(reg.earlier_runs_errors("r", &third).unwrap(), 3);
    assert_eq!(reg.current_run("other").unwrap().run, 1);
    // The run goes with its job.
    let gone = reg
        .delete_jobs(&DeleteFilter {
            job_ids: Some(vec!["r".into()]),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(gone, 1);
    assert_eq!(
        reg.current_run("r").unwrap(),
        mozart_state::RunRecord::FIRST
    );
}

#[test]
fn attempts_hooks_and_rate_limits_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("h")).unwrap();
    for (sheet, n) in [(1, 1), (1, 2), (2, 1)] {
        reg.record_attempt(&AttemptRecord {
            job_id: "h".into(),
            sheet_num: sheet,
            attempt_num: n,
            mode: "normal".into(),
            outcome: if n == 2 { "success" } else { "failed" }.into(),
            error_code: (n == 1).then(|| "E001".into()),
            exit_code: Some(1),
            duration_seconds: Some(1.5),
            cost_usd: Some(0.01),
            prompt: Some("do it".into()),
            executed_at: 1_709_210_096.0,
            ..Default::default()
        })
        .unwrap();
    }
    let s1 = reg.attempts("h", Some(1), 50).unwrap();
    assert_eq!(
        s1.iter().map(|a| a.attempt_num).collect::<Vec<_>>(),
        vec![2, 1]
    );
    assert_eq!(reg.attempts("h", None, 2).unwrap().len(), 2);
    assert_eq!(s1[0].prompt.as_deref(), Some("do it"));

    reg.record_hook_result(
        "h",
        &HookResultRecord {
            hook_index: 0,
            hook_type: "run_job".into(),
            description: Some("chain it".into()),
            success: true,
            output: Some("Chained job submitted (job_id=chain)".into()),
            chained_job_id: Some("chain".into()),
            ..Default::default()
        },
    )
    .unwrap();
    reg.record_hook_result(
        "h",
        &HookResultRecord {
            hook_index: 1,
            hook_type: "run_command".into(),
            success: true,
            exit_code: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    // Stored and read back in order (the JSON shape is `mozart_jobs::wire::hook_result`'s).
    let hooks = reg.hook_results("h").unwrap();
    assert_eq!(
        hooks
            .iter()
            .map(|h| (h.hook_type.as_str(), h.output.as_deref(), h.exit_code))
            .collect::<Vec<_>>(),
        [
            (
                "run_job",
                Some("Chained job submitted (job_id=chain)"),
                None
            ),
            ("run_command", None, Some(0))
        ]
    );
    assert_eq!(hooks[0].chained_job_id.as_deref(), Some("chain"));
    assert_eq!(hooks[1].fingerprint, None, "a row without one reads None");
    // Replaced as a whole: the kept result moves to its new position, with its fingerprint.
    let moved = HookResultRecord {
        hook_index: 2,
        fingerprint: Some("0123abcd".into()),
        ..hooks[1].clone()
    };
    reg.replace_hook_results("h", std::slice::from_ref(&moved))
        .unwrap();
    assert_eq!(reg.hook_results("h").unwrap(), [moved]);
    reg.clear_hook_results("h").unwrap();
    assert!(reg.hook_results("h").unwrap().is_empty());

    reg.set_rate_limit("claude-code", 2000.0, Some("usage limit"), 1)
        .unwrap();
    reg.set_rate_limit("gemini-cli", 500.0, None, 1).unwrap();
    drop(reg);
    let reg = open(&dir);
    let active = reg.active_rate_limits(1000.0).unwrap();
    assert_eq!(active.len(), 1, "expired limits are not active");
    assert_eq!(active[0].instrument, "claude-code");
    assert_eq!(active[0].reason.as_deref(), Some("usage limit"));
    assert_eq!(
        active[0].streak, 1,
        "the run of limits is kept with the wait"
    );
    assert_eq!(reg.clear_rate_limit(Some("claude-code")).unwrap(), 1);
    assert_eq!(reg.clear_rate_limit(None).unwrap(), 1, "expired ones count");
    assert!(reg.integrity_check().unwrap());
}

#[test]
fn a_jobs_own_rate_limit_is_kept_for_that_job_cleared_with_the_instruments_and_goes_with_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("a")).unwrap();
    reg.create_job(&job("b")).unwrap();
    reg.set_job_rate_limit("a", "shell", 2000.0, Some("HTTP 429"), 1)
        .unwrap();
    reg.set_job_rate_limit("a", "shell", 3000.0, Some("HTTP 429 again"), 2)
        .unwrap();
    drop(reg);
    let reg = open(&dir);
    let waits = reg.job_rate_limits("a", 1000.0).unwrap();
    assert_eq!(waits.len(), 1, "one wait a job and instrument");
    assert_eq!(
        (waits[0].until, waits[0].reason.as_deref(), waits[0].streak),
        (3000.0, Some("HTTP 429 again"), 2)
    );
    assert!(reg.job_rate_limits("b", 1000.0).unwrap().is_empty());
    assert!(
        reg.active_rate_limits(1000.0).unwrap().is_empty(),
        "no instrument is parked for every job"
    );
    assert!(
        reg.job_rate_limits("a", 3000.0).unwrap().is_empty(),
        "expired"
    );
    reg.clear_job_rate_limit("a", Some("claude-code")).unwrap();
    assert_eq!(reg.job_rate_limits("a", 1000.0).unwrap().len(), 1);
    reg.clear_job_rate_limit("a", None).unwrap();
    assert!(reg.job_rate_limits("a", 1000.0).unwrap().is_empty());
    // `clear-rate-limits shell` lifts every job's wait on it and counts them.
    reg.set_job_rate_limit("a", "shell", 2000.0, None, 1)
        .unwrap();
    reg.set_job_rate_limit("b", "shell", 2000.0, None, 1)
        .unwrap();
    assert_eq!(reg.clear_rate_limit(Some("claude-code")).unwrap(), 0);
    assert_eq!(reg.clear_rate_limit(Some("shell")).unwrap(), 2);
    // A deleted job's wait goes with it.
    reg.set_job_rate_limit("a", "shell", 2000.0, None, 1)
        .unwrap();
    reg.set_job_status("a", DaemonJobStatus::Cancelled, None)
        .unwrap();
    let filter = DeleteFilter {
        statuses: None,
        job_ids: Some(vec!["a".into()]),
        older_than_seconds: None,
    };
    assert_eq!(reg.delete_jobs(&filter).unwrap(), 1);
    assert_eq!(reg.clear_rate_limit(None).unwrap(), 0);
}

#[test]
fn a_second_connection_reads_while_the_first_writes() {
    let dir = tempfile::tempdir().unwrap();
    let writer = open(&dir);
    let reader = open(&dir);
    writer.create_job(&job("shared")).unwrap();
    assert!(reader.get_job("shared").unwrap().is_some());
    reader
        .set_job_status("shared", DaemonJobStatus::Running, None)
        .unwrap();
    assert_eq!(
        writer.get_job("shared").unwrap().unwrap().status,
        DaemonJobStatus::Running
    );
}

#[test]
fn corrupt_column_in_a_row_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("odd")).unwrap();
    let conn = rusqlite::Connection::open(reg.path()).unwrap();
    conn.execute(
        "UPDATE jobs SET options_json='not json' WHERE job_id='odd'",
        [],
    )
    .unwrap();
    let err = reg.get_job("odd").unwrap_err();
    assert!(
        matches!(
            err,
            StateError::BadRow {
                column: "options_json",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn restart_recovery_keeps_started_work_and_fails_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let with_ws = |id: &str, status| {
        let mut r = JobRecord::new(id, format!("/s/{id}.yaml"), ws.to_string_lossy());
        r.status = status;
        r.pid = Some(1);
        r
    };
    reg.create_job(&with_ws("never-started", DaemonJobStatus::Queued))
        .unwrap();
    reg.create_job(&with_ws("mid-run", DaemonJobStatus::Running))
        .unwrap();
    reg.create_job(&with_ws("legacy.paused", DaemonJobStatus::Running))
        .unwrap();
    reg.create_job(&with_ws("done", DaemonJobStatus::Completed))
        .unwrap();
    let mut cp = CheckpointState::new("mid-run", "Mid", 2);
    cp.set_running_pid(None);
    cp.mark_sheet_started(1);
    cp.mark_sheet_completed(1, true, None, None);
    cp.mark_sheet_started(2);
    reg.save_checkpoint(&cp).unwrap();
    let mut legacy = CheckpointState::new("legacy.paused", "L", 1);
    legacy.mark_job_paused();
    mozart_state::json_state::save(
        &mozart_state::json_state::state_file_path(&ws, "legacy.paused"),
        &legacy,
    )
    .unwrap();

    let report = reg.recover_orphans().unwrap();
    assert_eq!(report.failed, vec!["never-started".to_string()]);
    let mut paused = report.paused.clone();
    paused.sort();
    assert_eq!(
        paused,
        vec!["legacy.paused".to_string(), "mid-run".to_string()]
    );

    let failed = reg.get_job("never-started").unwrap().unwrap();
    assert_eq!(failed.status, DaemonJobStatus::Failed);
    assert_eq!(
        failed.error_message.as_deref(),
        Some("Daemon restarted while job was active")
    );
    assert!(failed.completed_at.is_some() && failed.pid.is_none());
    let kept = reg.load_checkpoint("mid-run").unwrap().unwrap();
    assert_eq!(kept.status, JobStatus::Paused);
    assert_eq!(
        kept.sheets[&1].status,
        SheetStatus::Completed,
        "finished work kept"
    );
    assert_eq!(
        reg.get_job("done").unwrap().unwrap().status,
        DaemonJobStatus::Completed
    );
    assert_eq!(
        reg.recover_orphans().unwrap(),
        Default::default(),
        "idempotent"
    );
}

#[test]
fn registry_can_move_to_a_dedicated_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Registry>();
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let handle = std::thread::spawn(move || {
        reg.create_job(&job("threaded")).unwrap();
        reg
    });
    let reg = handle.join().unwrap();
    assert!(reg.get_job("threaded").unwrap().is_some());
}

#[test]
fn a_batch_commits_its_writes_together_and_a_failed_write_inside_only_loses_itself() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("b")).unwrap();
    let cp = sample_checkpoint("b", 3);
    reg.save_checkpoint(&cp).unwrap();
    let other = rusqlite::Connection::open(reg.path()).unwrap();
    let completed = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row(
            "SELECT COUNT(*) FROM sheets WHERE job_id='b' AND status='completed'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let before = completed(&other);
    let results = reg
        .batch(|r| {
            let mut s1 = cp.sheets[&2].clone();
            s1.status = SheetStatus::Completed;
            let first = r.save_sheet("b", &s1);
            // Not visible to another reader until the batch commits.
            assert_eq!(completed(&other), before);
            // A write for a job that does not exist fails on its own...
            let missing = r.save_sheet("nope", &s1);
            // (the hot path's row without its job's document, too: on the row's reference)
            let missing_row = r.save_sheet_row("nope", &s1);
            let mut s2 = SheetState::new(3);
            s2.status = SheetStatus::Completed;
            let second = r.save_sheet_row("b", &s2);
            (first, missing, second, missing_row)
        })
        .unwrap();
    assert!(results.0.is_ok() && results.2.is_ok(), "{results:?}");
    assert!(matches!(results.1, Err(StateError::JobNotFound { .. })));
    assert!(
        matches!(results.3, Err(StateError::JobNotFound { .. })),
        "{:?}",
        results.3
    );
    // ...and both good writes are durable after it.
    assert_eq!(completed(&other), before + 2);
    let loaded = reg.load_checkpoint("b").unwrap().unwrap();
    assert_eq!(loaded.sheets[&2].status, SheetStatus::Completed);
    assert_eq!(loaded.sheets[&3].status, SheetStatus::Completed);
    assert!(reg.integrity_check().unwrap());
}

#[test]
fn a_sheet_saved_without_a_row_gets_one_and_a_saved_one_is_updated_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("r")).unwrap();
    reg.save_checkpoint(&sample_checkpoint("r", 2)).unwrap();
    let mut late = SheetState::new(3);
    late.status = SheetStatus::InProgress;
    let mut second = SheetState::new(2);
    second.status = SheetStatus::Completed;
    second.error_message = Some("kept".into());
    reg.batch(|r| {
        // Sheet 3 has no row: its start and its end each write a whole one.
        r.save_sheet_started("r", &late).unwrap();
        late.status = SheetStatus::Failed;
        r.save_sheet_row("r", &late).unwrap();
        r.save_sheet_row("r", &second).unwrap();
    })
    .unwrap();
    let loaded = reg.load_checkpoint("r").unwrap().unwrap();
    assert_eq!(loaded.sheets[&3].status, SheetStatus::Failed);
    assert_eq!(loaded.sheets[&2].status, SheetStatus::Completed);
    assert_eq!(loaded.sheets[&2].error_message.as_deref(), Some("kept"));
    let rows: i64 = rusqlite::Connection::open(reg.path())
        .unwrap()
        .query_row("SELECT COUNT(*) FROM sheets WHERE job_id='r'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(rows, 3, "one row a sheet");
}

#[test]
fn saving_the_header_keeps_every_sheet_row() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("h")).unwrap();
    let mut cp = sample_checkpoint("h", 2);
    reg.save_checkpoint(&cp).unwrap();
    cp.status = JobStatus::Completed;
    cp.total_estimated_cost = 9.5;
    reg.save_header(&cp).unwrap();
    let loaded = reg.load_checkpoint("h").unwrap().unwrap();
    assert_eq!(loaded.status, JobStatus::Completed);
    assert!((loaded.total_estimated_cost - 9.5).abs() < 1e-9);
    assert_eq!(loaded.sheets.len(), cp.sheets.len());
    assert_eq!(loaded.sheets[&2].status, SheetStatus::Failed);
    assert!(matches!(
        reg.save_header(&sample_checkpoint("missing", 1)),
        Err(StateError::JobNotFound { .. })
    ));
    // A sheet's transition of a job that is not registered writes nothing either.
    assert!(matches!(
        reg.save_sheet_transition(&sample_checkpoint("missing", 1), 1),
        Err(StateError::JobNotFound { .. })
    ));
    assert!(reg.load_checkpoint("missing").unwrap().is_none());
    assert!(reg.integrity_check().unwrap());
}

/// A registry database at `path` as a build of schema `version` (1 or 2) left it: its
/// migration files applied and recorded, no rows.
fn registry_at_schema(path: &std::path::Path, version: u32) -> rusqlite::Connection {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY NOT NULL, \
         name TEXT NOT NULL, applied_at REAL NOT NULL);",
    )
    .unwrap();
    let files = [
        (
            "0001_initial",
            include_str!("../migrations/0001_initial.sql"),
        ),
        (
            "0002_small_hot_rows",
            include_str!("../migrations/0002_small_hot_rows.sql"),
        ),
    ];
    for (n, (name, sql)) in (1..=version).zip(files) {
        conn.execute_batch(sql).unwrap();
        conn.execute(
            "INSERT INTO schema_migrations VALUES (?1, ?2, 0)",
            rusqlite::params![n, name],
        )
        .unwrap();
    }
    conn
}

/// A registry written by schema 1 (score in the `jobs` row, WITHOUT ROWID sheets) opens
/// with everything kept: the score, the checkpoint's sheets, and writes work afterwards.
#[test]
fn schema_1_registry_migrates_keeping_scores_and_sheets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home/registry.db");
    {
        let conn = registry_at_schema(&path, 1);
        conn.execute_batch(
            "
             INSERT INTO jobs (job_id, config_path, workspace, status, submitted_at, updated_at,
                 score_yaml, config_snapshot_json, checkpoint_json)
             VALUES ('old', '/s/old.yaml', '/ws/old', 'completed', 1, 1, 'name: old',
                 '{\"name\": \"old\"}', NULL);
             INSERT INTO attempts (job_id, sheet_num, attempt_num, mode, outcome, executed_at)
             VALUES ('old', 1, 1, 'normal', 'failed', 5);",
        )
        .unwrap();
    }
    let reg = Registry::open(&path).unwrap();
    assert_eq!(reg.schema_version().unwrap(), mozart_state::SCHEMA_VERSION);
    let score = reg.job_score("old").unwrap().unwrap();
    assert_eq!(score.yaml.as_deref(), Some("name: old"));
    assert_eq!(
        score.snapshot.map(|s| s.to_value()),
        Some(json!({"name": "old"}))
    );
    let kept = reg.attempts("old", None, 10).unwrap();
    assert_eq!(kept.len(), 1, "attempt history kept");
    assert_eq!((kept[0].sheet_num, kept[0].outcome.as_str()), (1, "failed"));
    let mut next = kept[0].clone();
    next.attempt_num = 2;
    let id = reg.record_attempt(&next).unwrap();
    assert!(id > kept[0].id, "new attempt ids follow the old ones");

    // The migrated database takes checkpoints and sheet transitions as a new one does.
    let mut cp = sample_checkpoint("old", 3);
    reg.save_checkpoint(&cp).unwrap();
    cp.mark_sheet_started(3);
    reg.save_sheet_transition(&cp, 3).unwrap();
    let loaded = reg.load_checkpoint("old").unwrap().unwrap();
    assert_eq!(loaded.sheets.len(), 3);
    assert_eq!(loaded.sheets[&3].status, SheetStatus::InProgress);
    assert_eq!(loaded.config_snapshot, cp.config_snapshot);

    // Deleting the job takes its score and rows with it.
    let n = reg.delete_jobs(&DeleteFilter::default()).unwrap();
    assert_eq!(n, 1);
    assert!(reg.job_score("old").unwrap().is_none());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let left: i64 = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM job_scores) + (SELECT COUNT(*) FROM sheets)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0, "no orphan score or sheet rows");
}

/// A sheet's start is saved as a few columns; loading lays them over the sheet's document,
/// so the checkpoint reads back exactly as if the whole sheet had been saved.
#[test]
fn a_started_sheet_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("st")).unwrap();
    let mut cp = sample_checkpoint("st", 3);
    reg.save_checkpoint(&cp).unwrap();

    // Sheet 2 failed; its retry starts.
    let sheet = cp.sheets.get_mut(&2).unwrap();
    sheet.status = SheetStatus::InProgress;
    sheet.started_at = Some(mozart_state::Timestamp::now());
    sheet.attempt_count = 2;
    sheet.completion_attempts = 1;
    sheet.healing_attempts = 1;
    sheet.instrument_name = Some("gemini-cli".into());
    reg.save_sheet_started("st", &cp.sheets[&2]).unwrap();
    let loaded = reg.load_checkpoint("st").unwrap().unwrap();
    assert_eq!(loaded.sheets[&2], cp.sheets[&2]);
    assert_eq!(loaded.sheets[&1], cp.sheets[&1], "other sheets untouched");

    // The sheet then ends with a full save: that wins over the columns it replaces.
    let sheet = cp.sheets.get_mut(&2).unwrap();
    sheet.status = SheetStatus::Completed;
    sheet.attempt_count = 3;
    reg.save_sheet_transition(&cp, 2).unwrap();
    assert_eq!(
        reg.load_checkpoint("st").unwrap().unwrap().sheets[&2],
        cp.sheets[&2]
    );

    // A sheet with no row yet is saved whole; an unknown job is an error.
    let mut fresh = cp.sheets[&2].clone();
    fresh.sheet_num = 3;
    fresh.status = SheetStatus::InProgress;
    reg.save_sheet_started("st", &fresh).unwrap();
    assert_eq!(
        reg.load_checkpoint("st").unwrap().unwrap().sheets[&3],
        fresh
    );
    let err = reg.save_sheet_started("nosuch", &fresh).unwrap_err();
    assert!(matches!(err, StateError::JobNotFound { .. }), "{err}");
}

/// With checkpoints moved to their own thread, the writes still reach the database file
/// itself (not only the WAL), while the writing connection never checkpoints.
#[test]
fn background_checkpoints_copy_the_wal_into_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let checkpointer = reg
        .checkpoint_in_background(std::time::Duration::from_millis(20))
        .unwrap();
    for i in 0..50 {
        reg.create_job(&job(&format!("job-{i}"))).unwrap();
    }
    // A copy of the database file alone (no WAL beside it) has every job once the
    // background checkpoint ran: wait for that (a few 20 ms periods), not a fixed time.
    let copy = dir.path().join("copy.db");
    let copied_jobs = || -> i64 {
        for stale in ["copy.db", "copy.db-wal", "copy.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(stale));
        }
        std::fs::copy(reg.path(), &copy).unwrap();
        let conn = rusqlite::Connection::open(&copy).unwrap();
        conn.query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut n = copied_jobs();
    while n < 50 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        n = copied_jobs();
    }
    assert_eq!(n, 50);

    // More writes after the last periodic run: dropping the checkpointer copies them too.
    reg.create_job(&job("late")).unwrap();
    drop(checkpointer);
    let copy = dir.path().join("copy2.db");
    std::fs::copy(reg.path(), &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let late: i64 = conn
        .query_row("SELECT COUNT(*) FROM jobs WHERE job_id='late'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(late, 1);
}

/// A WAL started over syncs its new header to disk first (an fsync) — paid by whichever
/// commit finds every frame already copied. The background checkpointer starts it over
/// itself, so the conductor's next commit (a sheet's completion, a job's submission after
/// a quiet spell) only appends (issue 24). Nothing is lost by it.
#[test]
fn the_checkpointer_starts_the_wal_over_so_the_next_commit_only_appends() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let _checkpointer = reg
        .checkpoint_in_background(std::time::Duration::from_millis(20))
        .unwrap();
    for i in 0..50 {
        reg.create_job(&job(&format!("job-{i}"))).unwrap();
    }
    let wal = dir.path().join("home/registry.db-wal");
    let page: u64 = rusqlite::Connection::open(reg.path())
        .unwrap()
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    // WAL header (32 bytes), then one frame: its header (24 bytes) and the page.
    let one_frame = 32 + 24 + page;
    let size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    // Quiet: every write copied, the file cut back, and the WAL already started over.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while size() != one_frame && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        size(),
        one_frame,
        "once quiet, the WAL holds the checkpointer's restart alone"
    );
    // Several periods more: the restart page stays uncopied (a copied one would make the
    // next commit start the WAL over again).
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(size(), one_frame);
    // A restart draws new salts (WAL header bytes 16..24): the next commit keeps them.
    let salts = || std::fs::read(&wal).unwrap()[16..24].to_vec();
    let before = salts();
    reg.create_job(&job("after-quiet")).unwrap();
    assert_eq!(salts(), before, "the commit started the WAL over itself");
    assert!(size() > one_frame, "the commit was appended to the WAL");
    assert!(reg.get_job("after-quiet").unwrap().is_some());
    assert_eq!(reg.list_jobs(true).unwrap().len(), 51);
}

/// Sheet rows are stored compactly (issue 24: a 100,000-sheet job's registry): no null or
/// empty fields and nothing a column of the row already holds in the state document — and
/// a sheet comes back exactly as it was saved.
#[test]
fn compact_sheet_rows_round_trip_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("c")).unwrap();
    let mut cp = CheckpointState::new("c", "c", 2);
    cp.mark_sheet_started(1);
    cp.mark_sheet_completed(
        1,
        true,
        Some(vec![mozart_state::ValidationDetail {
            rule_type: Some("file_exists".into()),
            path: Some("/ws/out-1.txt".into()),
            passed: true,
            confidence: Some(1.0),
            ..Default::default()
        }]),
        Some(0.5),
    );
    {
        let s = cp.sheets.get_mut(&1).unwrap();
        s.instrument_name = Some("instant".into());
        s.healing_attempts = 1;
        s.stdout_tail = Some("ok\n".into());
    }
    cp.sheets.insert(2, mozart_state::SheetState::new(2));
    reg.save_checkpoint(&cp).unwrap();
    let back = reg.load_checkpoint("c").unwrap().unwrap();
    assert_eq!(back.sheets[&1], cp.sheets[&1]);
    assert_eq!(back.sheets[&2], cp.sheets[&2]);

    let conn = rusqlite::Connection::open(reg.path()).unwrap();
    let doc: String = conn
        .query_row(
            "SELECT state_json FROM sheets WHERE job_id='c' AND sheet_num=1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!doc.contains("null"), "{doc}");
    assert!(!doc.contains("validation_details"), "{doc}");
    assert!(
        !doc.contains("out-1.txt"),
        "the details are in their column: {doc}"
    );
    assert!(doc.len() < 500, "{} bytes: {doc}", doc.len());
}

/// Schema 3 writes the `status` constraints of `jobs` and `sheets` as comparisons (an `IN`
/// list made SQLite build a temporary b-tree on every write of those rows): a registry of
/// schema 2 keeps its rows, and a status outside the set is still refused in both tables.
#[test]
fn schema_3_status_checks_hold_without_in_lists() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home/registry.db");
    {
        let conn = registry_at_schema(&path, 2);
        conn.execute_batch(
            "INSERT INTO jobs (job_id, config_path, workspace, status, submitted_at, updated_at)
             VALUES ('two', '/s/two.yaml', '/ws/two', 'running', 1, 1);
             INSERT INTO sheets (job_id, sheet_num, status, state_json, updated_at)
             VALUES ('two', 1, 'completed', '{}', 1);",
        )
        .unwrap();
    }
    let reg = Registry::open(&path).unwrap();
    assert_eq!(reg.schema_version().unwrap(), mozart_state::SCHEMA_VERSION);
    assert!(reg.get_job("two").unwrap().is_some(), "job row kept");
    drop(reg);
    let conn = rusqlite::Connection::open(&path).unwrap();
    for table in ["jobs", "sheets"] {
        let sql: String = conn
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!sql.contains("status IN ("), "{table}: {sql}");
        assert!(sql.contains("status = 'completed' OR"), "{table}: {sql}");
    }
    let kept: String = conn
        .query_row("SELECT status FROM sheets WHERE job_id = 'two'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(kept, "completed");
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    // Still enforced, in both tables, for a fresh connection that parsed the new schema.
    let bad_sheet = conn.execute(
        "UPDATE sheets SET status = 'bogus' WHERE job_id = 'two'",
        [],
    );
    assert!(
        bad_sheet.is_err(),
        "a sheet status outside the set is refused"
    );
    let bad_job = conn.execute("UPDATE jobs SET status = 'bogus' WHERE job_id = 'two'", []);
    assert!(bad_job.is_err(), "a job status outside the set is refused");
    conn.execute(
        "UPDATE sheets SET status = 'skipped' WHERE job_id = 'two'",
        [],
    )
    .unwrap();
    conn.execute("UPDATE jobs SET status = 'paused' WHERE job_id = 'two'", [])
        .unwrap();
}

/// `all_or_nothing` keeps every write when the closure succeeds and none when it fails: a
/// job whose checkpoint cannot be saved leaves no row (a refused submission never lists).
#[test]
fn all_or_nothing_rolls_back_every_write_when_it_fails() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let failed: Result<(), &str> = reg
        .all_or_nothing(|r| {
            r.create_job(&job("ghost")).unwrap();
            Err("the checkpoint could not be saved")
        })
        .unwrap();
    assert_eq!(failed, Err("the checkpoint could not be saved"));
    assert!(reg.get_job("ghost").unwrap().is_none());
    let kept: Result<(), &str> = reg
        .all_or_nothing(|r| {
            r.create_job(&job("real")).unwrap();
            r.save_checkpoint(&sample_checkpoint("real", 2)).unwrap();
            Ok(())
        })
        .unwrap();
    assert_eq!(kept, Ok(()));
    assert!(reg.get_job("real").unwrap().is_some());
    assert!(reg.load_checkpoint("real").unwrap().is_some());
}

/// `job.status` asks every call for a job's newest failed attempts: they come from the
/// partial index of failed attempts, newest first with their count, and a job's passed
/// attempts are never read for it (issue 24: a 100,000-sheet job has 100,000 of them).
#[test]
fn recent_attempt_errors_come_from_the_failed_attempts_index() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    reg.create_job(&job("r")).unwrap();
    for n in 1..=30u32 {
        let failed = n % 10 == 0;
        reg.record_attempt(&AttemptRecord {
            job_id: "r".into(),
            sheet_num: n,
            attempt_num: 1,
            outcome: if failed { "failed" } else { "completed" }.into(),
            error_message: failed.then(|| format!("sheet {n} failed")),
            executed_at: 1_709_210_096.0 + f64::from(n),
            ..Default::default()
        })
        .unwrap();
    }
    let (newest, total) = reg.recent_attempt_errors("r", 2, 0).unwrap();
    assert_eq!(total, 3);
    let sheets: Vec<u32> = newest.iter().map(|a| a.sheet_num).collect();
    assert_eq!(sheets, [30, 20]);
    assert_eq!(
        reg.recent_attempt_errors("none", 2, 0).unwrap(),
        (Vec::new(), 0)
    );
    drop(reg);
    let conn = rusqlite::Connection::open(dir.path().join("home/registry.db")).unwrap();
    for sql in [
        "SELECT COUNT(*) FROM attempts WHERE job_id='r' \
         AND (error_code IS NOT NULL OR error_message IS NOT NULL)",
        "SELECT id FROM attempts WHERE job_id='r' \
         AND (error_code IS NOT NULL OR error_message IS NOT NULL) ORDER BY id DESC LIMIT 2",
    ] {
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plan.iter().any(|p| p.contains("idx_attempts_failed")),
            "{sql}: {plan:?}"
        );
    }
}

/// A finished remote attempt's directory is noted with the write that saves its result
/// (gone with it when that write is undone), once however often it is noted, and listed
/// until its removal is forgotten — what a restart reads to remove the files a kill left.
#[test]
fn remote_leftovers_are_noted_with_the_result_and_listed_until_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(&dir);
    let undone: Result<(), &str> = reg
        .all_or_nothing(|r| {
            r.note_remote_leftover("/ws/.mozart-slurm/j/sheet-1-attempt-1-5")
                .unwrap();
            Err("the result could not be saved")
        })
        .unwrap();
    assert!(undone.is_err());
    assert!(reg.remote_leftovers().unwrap().is_empty());
    reg.batch(|r| {
        for d in [
            "a/sheet-1-attempt-1-5",
            "a/sheet-2-attempt-1-6",
            "a/sheet-1-attempt-1-5",
        ] {
            r.note_remote_leftover(d).unwrap();
        }
    })
    .unwrap();
    let mut listed = reg.remote_leftovers().unwrap();
    listed.sort();
    assert_eq!(listed, ["a/sheet-1-attempt-1-5", "a/sheet-2-attempt-1-6"]);
    drop(reg);
    let reg = open(&dir);
    reg.forget_remote_leftovers(&["a/sheet-1-attempt-1-5".to_string()])
        .unwrap();
    assert_eq!(reg.remote_leftovers().unwrap(), ["a/sheet-2-attempt-1-6"]);
}
