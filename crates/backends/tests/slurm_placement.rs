//! The Slurm placement against a real Slurm (tests/slurm/setup.sh starts a single-node one;
//! without it these tests print why and pass without running).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod slurm;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_backends::placement::{Placement, PlacementSpec, RemoteAttempt, RemoteJournal};
use mozart_backends::Backend;
use slurm::{
    backend, request, slurm_up, squeue_has, wait_gone_from_queue, wait_recorded, MemJournal,
};

#[tokio::test]
async fn output_exit_code_and_working_dir_come_back_from_the_job() {
    if !slurm_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let result = backend()
        .execute(request(
            "pwd; echo out-line; echo err-line >&2; exit 4",
            dir.path(),
            Duration::from_secs(60),
        ))
        .await;
    assert_eq!(result.exit_code, Some(4), "{result:?}");
    assert!(!result.success);
    assert!(result.stdout.contains("out-line"), "{result:?}");
    assert!(result.stdout.contains(&dir.path().display().to_string()));
    assert!(result.stderr.contains("err-line"));

    let ok = backend()
        .execute(request("echo fine", dir.path(), Duration::from_secs(60)))
        .await;
    assert!(ok.success, "{ok:?}");
    assert_eq!(ok.exit_code, Some(0));
}

#[tokio::test]
async fn our_timeout_cancels_the_job() {
    if !slurm_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(MemJournal::default());
    let mut req = request("sleep 60", dir.path(), Duration::from_secs(2));
    req.remote = Some(journal.clone());
    let started = Instant::now();
    let result = backend().execute(req).await;
    assert!(result.timed_out, "{result:?}");
    assert!(!result.success);
    assert!(started.elapsed() < Duration::from_secs(40));
    let id = journal.recorded().unwrap().remote_id;
    assert!(!squeue_has(&id), "job {id} still queued after the timeout");
}

/// Start a `sleep 60` attempt and drop it (a cancel) as soon as its job is recorded; the
/// journal's write takes `record_delay`, so a long one drops it before the release.
async fn drop_once_recorded(record_delay: Duration) -> (RemoteAttempt, Arc<MemJournal>) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(MemJournal::slow(record_delay));
    let mut req = request("sleep 60", dir.path(), Duration::from_secs(120));
    req.remote = Some(journal.clone());
    let b = backend();
    let mut exec = b.execute(req);
    let attempt = tokio::select! {
        _ = &mut exec => panic!("finished early"),
        a = wait_recorded(&journal) => a,
    };
    drop(exec);
    (attempt, journal)
}

#[tokio::test]
async fn a_dropped_attempt_is_scancelled_and_forgotten() {
    if !slurm_up() {
        return;
    }
    let (attempt, journal) = drop_once_recorded(Duration::ZERO).await;
    let within = Duration::from_secs(30);
    wait_gone_from_queue(&attempt.remote_id, within, "after its attempt was dropped").await;
    let until = Instant::now() + within;
    while journal.recorded().is_some() {
        assert!(Instant::now() < until, "the journal still has the job");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Dropped inside the record's durable write: the job is held in Slurm, not yet released.
#[tokio::test]
async fn an_attempt_dropped_before_its_release_leaves_no_held_job() {
    if !slurm_up() {
        return;
    }
    let (attempt, _journal) = drop_once_recorded(Duration::from_millis(1500)).await;
    let what = "held after its attempt was dropped before the release";
    wait_gone_from_queue(&attempt.remote_id, Duration::from_secs(30), what).await;
}

/// A conductor that vanishes (no drop, no clean-up) leaves the job running; the next
/// execution of the same attempt finds it in the journal and collects it: one run.
#[tokio::test]
async fn a_lost_follower_is_replaced_by_reattaching_not_resubmitting() {
    if !slurm_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("runs");
    let prompt = format!("echo run >> {}; sleep 3; echo finished", count.display());
    let journal = Arc::new(MemJournal::default());
    let b = backend();
    let mut req = request(&prompt, dir.path(), Duration::from_secs(60));
    req.remote = Some(journal.clone());
    let mut exec = b.execute(req);
    let first = tokio::select! {
        _ = &mut exec => panic!("finished early"),
        a = wait_recorded(&journal) => a,
    };
    // A crash: the follower disappears without running any destructor.
    std::mem::forget(exec);

    let mut req = request(&prompt, dir.path(), Duration::from_secs(60));
    req.remote = Some(journal.clone());
    let result = b.execute(req).await;
    assert!(result.success, "{result:?}");
    assert!(result.stdout.contains("finished"));
    assert_eq!(journal.recorded().unwrap().remote_id, first.remote_id);
    let runs = std::fs::read_to_string(&count).unwrap();
    assert_eq!(runs.lines().count(), 1, "the command ran {runs:?}");
}

/// A job that never leaves the queue does not hold its sheet forever when the placement
/// bounds the wait (`queue_timeout_seconds`): the job is cancelled, and the attempt says it
/// waited in the queue past that limit — not that it timed out, which would read as the
/// sheet's own timeout (never begun).
#[tokio::test]
async fn a_job_stuck_in_the_queue_times_out_and_is_cancelled() {
    if !slurm_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec: PlacementSpec = mozart_yaml::from_str(
        "type: slurm\npoll_interval_seconds: 0.2\nqueue_timeout_seconds: 2\nextra_args: ['--begin=now+3600']\n",
    )
    .unwrap();
    let journal = Arc::new(MemJournal::default());
    let mut req = request("echo never", dir.path(), Duration::from_secs(2));
    req.placement = Placement::from_spec(&spec).unwrap();
    req.remote = Some(journal.clone());
    let result = backend().execute(req).await;
    assert!(!result.success && !result.timed_out, "{result:?}");
    assert!(
        result.stderr.contains(
            "longer than placement.queue_timeout_seconds (2s) and was cancelled before it started"
        ),
        "{result:?}"
    );
    let id = journal.recorded().unwrap().remote_id;
    assert!(!squeue_has(&id), "job {id} still queued after the timeout");
}

/// Time in the queue is not the sheet's (issue 25): a job that waits in the queue longer
/// than the sheet's timeout, then runs briefly, succeeds; status meanwhile says it is
/// queued.
#[tokio::test]
async fn queue_time_does_not_count_against_the_sheet_timeout() {
    if !slurm_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec: PlacementSpec = mozart_yaml::from_str(
        "type: slurm\npoll_interval_seconds: 0.2\nextra_args: ['--begin=now+8']\n",
    )
    .unwrap();
    let mut req = request("echo ran", dir.path(), Duration::from_secs(3));
    req.placement = Placement::from_spec(&spec).unwrap();
    let progress = Arc::clone(&req.progress);
    let b = backend();
    let exec = b.execute(req);
    tokio::pin!(exec);
    let mut said_queued = false;
    let result = loop {
        tokio::select! {
            r = &mut exec => break r,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                said_queued |= progress
                    .activity()
                    .last_event
                    .is_some_and(|e| e.contains("in Slurm's queue"));
            }
        }
    };
    assert!(!result.timed_out, "{result:?}");
    assert!(result.success, "{result:?}");
    assert!(result.stdout.contains("ran"));
    assert!(said_queued, "the queue wait was shown");
}

/// Credentials reach the job through its private `env` file only: neither Slurm's stored
/// copy of the job (environment and script, kept by slurmctld while the job exists) nor the
/// attempt directory after the job started hold them.
#[tokio::test]
async fn credentials_stay_out_of_slurms_job_record() {
    if !slurm_up() {
        return;
    }
    let state = std::path::Path::new("/var/tmp/mozart-slurm/state");
    if !state.is_dir() {
        eprintln!("SKIPPED: not the test cluster of tests/slurm/setup.sh (no {state:?})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = "sk-test-0123456789abcdef";
    let spec: PlacementSpec =
        mozart_yaml::from_str("type: slurm\npoll_interval_seconds: 0.2\n").unwrap();
    let journal = Arc::new(MemJournal::default());
    let mut req = request(
        "echo \"key=$MOZART_TEST_KEY\"; sleep 2",
        dir.path(),
        Duration::from_secs(60),
    );
    req.placement = Placement::from_spec(&spec).unwrap();
    req.env = vec![("MOZART_TEST_KEY".into(), secret.into())];
    req.remote = Some(journal.clone());
    let b = backend();
    let mut exec = b.execute(req);
    let attempt = tokio::select! {
        _ = &mut exec => panic!("finished early"),
        a = wait_recorded(&journal) => a,
    };
    let id: u64 = attempt.remote_id.parse().unwrap();
    let job_dir = state.join(format!("hash.{}/job.{id}", id % 10));
    assert!(
        job_dir.join("environment").exists(),
        "Slurm keeps the job's environment in {job_dir:?}"
    );
    for name in ["environment", "script"] {
        if let Ok(bytes) = std::fs::read(job_dir.join(name)) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(secret),
                "{name} of Slurm job {id} holds the key"
            );
            assert!(
                !text.contains("CARGO_MANIFEST_DIR"),
                "{name} of Slurm job {id} holds the submitter's environment"
            );
        }
    }
    let result = exec.await;
    // The key reached the job (and, printed, was redacted from what Mozart keeps).
    assert!(
        result.stdout.contains("key=[REDACTED_ENV:MOZART_TEST_KEY]"),
        "{result:?}"
    );
    assert!(!attempt.dir.join("env").exists(), "the env file is deleted");
}

/// `requeue_on_preemption` (issue 25): a job Slurm requeues (a preemption; here `scontrol
/// requeue`) runs again under the same id and the attempt follows it to its end — not a
/// failed attempt — with its command and environment still there for the new run.
#[tokio::test]
async fn a_requeued_job_is_followed_to_its_end_without_failing_the_attempt() {
    if !slurm_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("runs");
    let spec: PlacementSpec = mozart_yaml::from_str(
        "type: slurm\npoll_interval_seconds: 0.2\nrequeue_on_preemption: true\n",
    )
    .unwrap();
    let journal = Arc::new(MemJournal::default());
    let mut req = request(
        &format!(
            "echo run >> {}; sleep 4; echo \"finished $KEEP\"",
            count.display()
        ),
        dir.path(),
        Duration::from_secs(120),
    );
    req.env = vec![("KEEP".into(), "env-kept".into())];
    req.placement = Placement::from_spec(&spec).unwrap();
    req.remote = Some(journal.clone());
    let b = backend();
    let exec = b.execute(req);
    tokio::pin!(exec);
    let attempt = tokio::select! {
        _ = &mut exec => panic!("finished early"),
        a = wait_recorded(&journal) => a,
    };
    let until = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&count)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(Instant::now() < until, "the job never started");
        tokio::select! {
            _ = &mut exec => panic!("finished early"),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    let out = std::process::Command::new("scontrol")
        .args(["requeue", &attempt.remote_id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = tokio::time::timeout(Duration::from_secs(300), exec)
        .await
        .expect("the requeued job ends (Slurm delays a requeued job by about two minutes)");
    assert!(result.success, "{result:?}");
    assert!(result.stdout.contains("finished env-kept"), "{result:?}");
    let runs = std::fs::read_to_string(&count).unwrap();
    assert_eq!(
        runs.lines().count(),
        2,
        "ran, was requeued, ran again: {runs:?}"
    );
    assert!(
        !attempt.dir.join("env").exists(),
        "the env file is gone once the attempt ended"
    );
}

/// `mozart pause` asks a running attempt to be withdrawn (Progress::ask_withdraw): a job
/// still in Slurm's queue is cancelled before it starts, its files (the environment with
/// its keys) removed and its record forgotten, and the answer says so; a job that has
/// started runs on to its result.
#[tokio::test]
async fn a_queued_job_is_withdrawn_and_a_started_one_runs_on() {
    if !slurm_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec: PlacementSpec = mozart_yaml::from_str(
        "type: slurm\npoll_interval_seconds: 0.2\nextra_args: ['--begin=now+3600']\n",
    )
    .unwrap();
    let journal = Arc::new(MemJournal::default());
    let ran = dir.path().join("ran");
    let mut req = request(
        &format!("touch {}", ran.display()),
        dir.path(),
        Duration::from_secs(60),
    );
    req.placement = Placement::from_spec(&spec).unwrap();
    req.remote = Some(journal.clone());
    let progress = Arc::clone(&req.progress);
    let b = backend();
    let exec = b.execute(req);
    tokio::pin!(exec);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    let result = loop {
        tokio::select! {
            r = &mut exec => break r,
            () = tokio::time::sleep_until(give_up) => panic!("the queued job was not withdrawn"),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                if progress.activity().queued && !progress.withdraw_asked() {
                    progress.ask_withdraw();
                }
            }
        }
    };
    assert!(!result.success, "{result:?}");
    let Some(mozart_backends::Withdrawal::Withdrawn(id)) = progress.withdrawal() else {
        panic!("not withdrawn: {:?} {result:?}", progress.withdrawal());
    };
    assert!(
        !squeue_has(&id),
        "job {id} still queued after its withdrawal"
    );
    assert!(journal.recorded().is_none(), "the record is forgotten");
    assert!(
        !dir.path().join(".mozart-slurm").exists(),
        "the attempt's files are removed"
    );
    assert!(!ran.exists(), "the withdrawn job did not run");

    // Started: asked to withdraw, it runs on and is collected.
    let mut req = request("sleep 3; echo done", dir.path(), Duration::from_secs(60));
    let progress = Arc::clone(&req.progress);
    req.remote = Some(Arc::new(MemJournal::default()));
    let exec = b.execute(req);
    tokio::pin!(exec);
    let result = loop {
        tokio::select! {
            r = &mut exec => break r,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                let running = progress
                    .activity()
                    .last_event
                    .is_some_and(|e| e.contains("running as Slurm job"));
                if running && progress.withdrawal().is_none() && !progress.withdraw_asked() {
                    progress.ask_withdraw();
                }
            }
        }
    };
    assert!(result.success, "{result:?}");
    assert!(result.stdout.contains("done"), "{result:?}");
    assert!(
        matches!(
            progress.withdrawal(),
            Some(mozart_backends::Withdrawal::Kept { ref why, .. }) if why.contains("started")
        ),
        "{:?}",
        progress.withdrawal()
    );
}
