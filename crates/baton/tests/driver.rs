//! The tokio driver end to end: real timers, real musician tasks running `bash`, the real
//! validation engine deciding success, and a host that records what it was asked to do.
#![allow(clippy::unwrap_used)] // tests may unwrap (common.md rule 5)

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use mozart_baton::validation::{run_validations, MtimeSnapshot, ValidationCheck, ValidationRule};
use mozart_baton::{
    spawn, AttemptContext, AttemptResult, BatonConfig, BatonCore, BatonHost, Event, Failure,
    FailureKind, HostCaller, HostError, JobOutcome, JobSpec, SheetSpec, SheetStatus, SkipSpec,
    StateChange,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

struct Host {
    workspace: PathBuf,
    /// Sheet → how many more attempts should fail.
    failures: HashMap<u32, u32>,
    /// Refuse to persist this sheet's completion.
    refuse_completion_of: Option<u32>,
    log: Vec<String>,
    done: UnboundedSender<(String, JobOutcome, Option<String>)>,
    /// When set, each musician hands its sheet number to the host with a call just before it
    /// reports (as the conductor's musicians hand over their attempt's details).
    caller: Option<HostCaller<Host>>,
    /// Sheets whose musician's call has run.
    noted: Vec<u32>,
}

impl BatonHost for Host {
    fn persist(&mut self, change: &StateChange) -> Result<(), HostError> {
        if let StateChange::Sheet(c) = change {
            if Some(c.sheet_num) == self.refuse_completion_of && c.status == SheetStatus::Completed
            {
                return Err(HostError::new("saving checkpoint of job 'j'", "disk full"));
            }
            self.log
                .push(format!("persist {} {}", c.sheet_num, c.status.as_str()));
            if self.caller.is_some() && c.status == SheetStatus::Completed {
                let noted = self.noted.contains(&c.sheet_num);
                self.log
                    .push(format!("sheet {} noted: {noted}", c.sheet_num));
            }
        }
        Ok(())
    }

    fn dispatch(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        attempt: AttemptContext,
        inbox: UnboundedSender<Event>,
    ) {
        self.log.push(format!(
            "dispatch {sheet_num} attempt {}",
            attempt.attempt_number
        ));
        let fail = self.failures.get_mut(&sheet_num).is_some_and(|n| {
            let failing = *n > 0;
            *n = n.saturating_sub(1);
            failing
        });
        let workspace = self.workspace.clone();
        let job_id = job_id.to_owned();
        let caller = self.caller.clone();
        tokio::spawn(async move {
            let script = if fail {
                "exit 1".to_owned()
            } else {
                format!("echo {sheet_num} >> order.txt; touch sheet-{sheet_num}.txt")
            };
            let status = tokio::process::Command::new("bash")
                .arg("-c")
                .arg(&script)
                .current_dir(&workspace)
                .status()
                .await
                .unwrap();
            let rule = ValidationRule {
                retry_count: 0,
                ..ValidationRule::new(ValidationCheck::FileExists {
                    path: workspace.join(format!("sheet-{sheet_num}.txt")),
                })
            };
            let report = run_validations(&[rule], &MtimeSnapshot::default()).await;
            let mut r = AttemptResult::success(job_id, sheet_num, attempt.dispatch_id);
            r.execution_success = status.success();
            r.exit_code = status.code();
            r.validations_total = report.results.len() as u32;
            r.validations_passed = report.passed_count() as u32;
            r.validation_pass_rate = report.pass_rate();
            if !status.success() {
                r.failure = Some(Failure {
                    kind: FailureKind::Transient,
                    code: None,
                    message: "exit 1".into(),
                });
            }
            if let Some(caller) = caller {
                let _ = caller.send(Box::new(move |h: &mut Host| h.noted.push(sheet_num)));
            }
            let _ = inbox.send(Event::SheetAttemptResult(Box::new(r)));
        });
    }

    fn kill(&mut self, _job_id: &str, sheet_num: u32) {
        self.log.push(format!("kill {sheet_num}"));
    }

    fn job_finished(&mut self, job_id: &str, outcome: JobOutcome, reason: Option<&str>) {
        let _ = self
            .done
            .send((job_id.to_owned(), outcome, reason.map(str::to_owned)));
    }

    fn evaluate_skip(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        rule: &SkipSpec,
        inbox: UnboundedSender<Event>,
    ) {
        let skip = rule.when.as_deref() == Some("True");
        let _ = inbox.send(Event::SkipEvaluated {
            job_id: job_id.to_owned(),
            sheet_num,
            skip_reason: skip.then(|| "Condition met: True".to_owned()),
        });
    }

    fn escalate(&mut self, _job_id: &str, sheet_num: u32, reason: &str) {
        self.log.push(format!("escalate {sheet_num}: {reason}"));
    }

    fn persistence_failed(&mut self, job_id: Option<&str>, error: &HostError) {
        self.log
            .push(format!("persistence failed {job_id:?}: {error}"));
    }
}

fn host(
    workspace: PathBuf,
) -> (
    Host,
    UnboundedReceiver<(String, JobOutcome, Option<String>)>,
) {
    let (done, rx) = unbounded_channel();
    (
        Host {
            workspace,
            failures: HashMap::new(),
            refuse_completion_of: None,
            log: Vec::new(),
            done,
            caller: None,
            noted: Vec::new(),
        },
        rx,
    )
}

fn chain(n: u32) -> JobSpec {
    let sheets = (1..=n)
        .map(|i| {
            let mut s = SheetSpec::new(i, "bash");
            if i > 1 {
                s.dependencies = vec![i - 1];
            }
            s.retry.base_delay = Duration::from_millis(50);
            s.retry.jitter = false;
            s.timeout = Duration::from_secs(30);
            s
        })
        .collect();
    JobSpec::new("j", sheets)
}

#[tokio::test]
async fn a_job_runs_through_retries_and_skips_to_completion() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, mut done) = host(dir.path().to_path_buf());
    h.failures.insert(2, 1);
    let baton = spawn(BatonCore::new(BatonConfig::default()), h);
    let mut spec = chain(4);
    spec.sheets[2].skip = Some(SkipSpec {
        when: Some("True".into()),
        command: None,
        description: None,
        command_timeout: None,
    });
    baton.send(Event::RegisterJob(Box::new(spec))).unwrap();

    let (job, outcome, reason) = tokio::time::timeout(Duration::from_secs(20), done.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (job.as_str(), outcome, reason),
        ("j", JobOutcome::Completed, None)
    );
    let order = std::fs::read_to_string(dir.path().join("order.txt")).unwrap();
    assert_eq!(
        order, "1\n2\n4\n",
        "sheet 2 retried once (its failed try wrote nothing), sheet 3 skipped"
    );

    baton
        .send(Event::ShutdownRequested { graceful: true })
        .unwrap();
    let h = baton.join().await.unwrap();
    let pos = |s: &str| {
        h.log
            .iter()
            .position(|l| l == s)
            .unwrap_or_else(|| panic!("{s} missing from {:#?}", h.log))
    };
    assert!(pos("persist 1 completed") < pos("dispatch 2 attempt 1"));
    assert!(pos("dispatch 2 attempt 1") < pos("persist 2 retry_scheduled"));
    assert!(pos("persist 2 retry_scheduled") < pos("dispatch 2 attempt 2"));
    assert!(pos("persist 3 skipped") < pos("dispatch 4 attempt 1"));
}

#[tokio::test]
async fn a_host_call_sent_before_a_result_runs_before_the_result_is_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let (h, mut done) = host(dir.path().to_path_buf());
    let baton = spawn(BatonCore::new(BatonConfig::default()), h);
    let caller = baton.caller();
    let own = caller.clone();
    caller
        .send(Box::new(move |h: &mut Host| h.caller = Some(own)))
        .unwrap();
    let mut spec = chain(6);
    // Independent sheets: their musicians report at the same time, in bursts.
    for s in &mut spec.sheets {
        s.dependencies.clear();
    }
    baton.send(Event::RegisterJob(Box::new(spec))).unwrap();
    let (_, outcome, _) = tokio::time::timeout(Duration::from_secs(20), done.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome, JobOutcome::Completed);

    // A call answers on a channel of its own: how a reader asks the host.
    let (tx, rx) = tokio::sync::oneshot::channel();
    caller
        .send(Box::new(move |h: &mut Host| {
            let _ = tx.send(h.noted.len());
        }))
        .unwrap();
    assert_eq!(rx.await.unwrap(), 6, "every musician's call ran");

    baton
        .send(Event::ShutdownRequested { graceful: true })
        .unwrap();
    let h = baton.join().await.unwrap();
    let noted: Vec<&String> = h.log.iter().filter(|l| l.contains("noted")).collect();
    assert_eq!(noted.len(), 6, "{:#?}", h.log);
    assert!(
        noted.iter().all(|l| l.ends_with("noted: true")),
        "each sheet's call ran before its completion was persisted: {noted:#?}"
    );
}

#[tokio::test]
async fn a_failed_checkpoint_write_stops_the_job_from_going_further() {
    let dir = tempfile::tempdir().unwrap();
    let (mut h, mut done) = host(dir.path().to_path_buf());
    h.refuse_completion_of = Some(1);
    let baton = spawn(BatonCore::new(BatonConfig::default()), h);
    baton.send(Event::RegisterJob(Box::new(chain(2)))).unwrap();
    let started = std::time::Instant::now();
    // Nothing finishes: sheet 2 must never run without sheet 1 being durable.
    assert!(
        tokio::time::timeout(Duration::from_millis(800), done.recv())
            .await
            .is_err()
    );
    baton
        .send(Event::ShutdownRequested { graceful: true })
        .unwrap();
    let h = baton.join().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the dropped dispatch must not count as in flight: {:#?}",
        h.log
    );
    assert!(
        h.log.iter().any(|l| l.starts_with(
            "persistence failed Some(\"j\"): saving checkpoint of job 'j': disk full"
        )),
        "{:#?}",
        h.log
    );
    assert!(
        !h.log.iter().any(|l| l.starts_with("dispatch 2")),
        "{:#?}",
        h.log
    );
    assert!(!dir.path().join("sheet-2.txt").exists());
}

#[tokio::test]
async fn hard_shutdown_kills_in_flight_and_returns_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (h, _done) = host(dir.path().to_path_buf());
    let baton = spawn(BatonCore::new(BatonConfig::default()), h);
    let mut spec = chain(1);
    spec.sheets[0].dependencies.clear();
    baton.send(Event::RegisterJob(Box::new(spec))).unwrap();
    baton
        .send(Event::ShutdownRequested { graceful: false })
        .unwrap();
    let h = tokio::time::timeout(Duration::from_secs(5), baton.join())
        .await
        .unwrap()
        .unwrap();
    assert!(h.log.iter().any(|l| l == "kill 1"), "{:#?}", h.log);
    // Let the musician of the killed attempt finish before the workspace goes away.
    tokio::time::sleep(Duration::from_millis(200)).await;
}
