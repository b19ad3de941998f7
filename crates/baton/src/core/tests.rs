//! Feeding events to the core and asserting transitions and effects, including every upstream
//! defect we fix (dependencies, retry timers, rate-limit expiry, breaker recovery, pause,
//! persistence order, restart restoration).

use std::time::Duration;

use super::BatonCore;
use crate::effect::{AttemptContext, Effect, JobOutcome, StateChange};
use crate::event::{AttemptResult, EscalationDecision, Event, FailureKind, ResourceSeverity};
use crate::spec::{
    BatonConfig, CostLimitsUpdate, InstrumentSpec, JobSpec, RestoredSheet, SheetSpec, SkipSpec,
};
use crate::status::{AttemptMode, CircuitState, JobStatus, SheetStatus};
use crate::time::Millis;
use crate::timer::TimerWheel;

/// A tiny deterministic driver: a clock we move by hand and a real timer wheel.
struct Rig {
    core: BatonCore,
    now: Millis,
    wheel: TimerWheel<Event>,
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

impl Rig {
    fn new() -> Self {
        Self::with(BatonConfig {
            jitter_seed: 1,
            ..BatonConfig::default()
        })
    }

    fn with(config: BatonConfig) -> Self {
        Rig {
            core: BatonCore::new(config),
            now: Millis(1_000_000),
            wheel: TimerWheel::new(),
        }
    }

    fn send(&mut self, event: Event) -> Vec<Effect> {
        let out = self.core.handle_collect(event, self.now);
        self.track_timers(&out);
        out
    }

    fn track_timers(&mut self, out: &[Effect]) {
        for e in out {
            match e {
                Effect::ScheduleTimer { id, at, event } => {
                    self.wheel.schedule(*id, *at, event.clone())
                }
                Effect::CancelTimer { id } => {
                    self.wheel.cancel(*id);
                }
                _ => {}
            }
        }
    }

    /// Move the clock forward, firing due timers at their own deadlines.
    fn advance(&mut self, d: Duration) -> Vec<Effect> {
        let target = self.now.plus(d);
        let mut all = Vec::new();
        while let Some(at) = self.wheel.next_deadline() {
            if at > target {
                break;
            }
            let Some((_, event)) = self.wheel.pop_due(at) else {
                break;
            };
            self.now = at;
            all.extend(self.send(event));
        }
        self.now = target;
        all
    }

    fn register(&mut self, spec: JobSpec) -> Vec<Effect> {
        self.send(Event::RegisterJob(Box::new(spec)))
    }

    fn result(&mut self, r: AttemptResult) -> Vec<Effect> {
        self.send(Event::SheetAttemptResult(Box::new(r)))
    }

    fn succeed(&mut self, job: &str, sheet: u32, effects: &[Effect]) -> Vec<Effect> {
        let id = dispatch_id(effects, job, sheet);
        self.result(AttemptResult::success(job, sheet, id))
    }

    fn fail(
        &mut self,
        job: &str,
        sheet: u32,
        effects: &[Effect],
        kind: FailureKind,
    ) -> Vec<Effect> {
        let id = dispatch_id(effects, job, sheet);
        self.result(AttemptResult::failed(job, sheet, id, kind, "boom"))
    }

    fn status(&self, job: &str, sheet: u32) -> SheetStatus {
        self.core
            .sheet(job, sheet)
            .map(|s| s.status)
            .unwrap_or(SheetStatus::Completed)
    }
}

fn dispatched(effects: &[Effect]) -> Vec<(String, u32)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Dispatch {
                job_id, sheet_num, ..
            } => Some((job_id.clone(), *sheet_num)),
            _ => None,
        })
        .collect()
}

fn nums(effects: &[Effect]) -> Vec<u32> {
    dispatched(effects).into_iter().map(|(_, n)| n).collect()
}

fn attempt_of(effects: &[Effect], sheet: u32) -> AttemptContext {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Dispatch {
                sheet_num, attempt, ..
            } if *sheet_num == sheet => Some(attempt.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("sheet {sheet} was not dispatched in {effects:#?}"))
}

fn dispatch_id(effects: &[Effect], _job: &str, sheet: u32) -> u64 {
    attempt_of(effects, sheet).dispatch_id
}

fn finished(effects: &[Effect]) -> Option<(JobOutcome, Option<String>)> {
    effects.iter().find_map(|e| match e {
        Effect::JobFinished {
            outcome, reason, ..
        } => Some((*outcome, reason.clone())),
        _ => None,
    })
}

fn sheet_persists(effects: &[Effect], sheet: u32) -> Vec<SheetStatus> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist(StateChange::Sheet(c)) if c.sheet_num == sheet => Some(c.status),
            _ => None,
        })
        .collect()
}

fn position(effects: &[Effect], pred: impl Fn(&Effect) -> bool) -> usize {
    effects
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("effect not found in {effects:#?}"))
}

fn chain(job: &str, n: u32) -> JobSpec {
    let sheets = (1..=n)
        .map(|i| {
            let mut s = SheetSpec::new(i, "claude-code");
            if i > 1 {
                s.dependencies = vec![i - 1];
            }
            s.retry.jitter = false;
            s
        })
        .collect();
    JobSpec::new(job, sheets)
}

fn independent(job: &str, n: u32, parallel: u32) -> JobSpec {
    let mut spec = chain(job, n);
    for s in &mut spec.sheets {
        s.dependencies.clear();
    }
    spec.max_concurrent_sheets = parallel;
    spec
}

#[test]
fn dependencies_are_honoured_even_with_parallel_slots() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 3);
    spec.max_concurrent_sheets = 3;
    let e = rig.register(spec);
    assert_eq!(nums(&e), vec![1], "only the root may start");
    let e = rig.succeed("j", 1, &e);
    assert_eq!(nums(&e), vec![2]);
    let e = rig.succeed("j", 2, &e);
    assert_eq!(nums(&e), vec![3]);
    let e = rig.succeed("j", 3, &e);
    assert_eq!(finished(&e), Some((JobOutcome::Completed, None)));
}

#[test]
fn fan_out_runs_voices_together_and_joins() {
    let mut rig = Rig::new();
    let mut spec = independent("j", 4, 4);
    spec.sheets[1].dependencies = vec![1];
    spec.sheets[2].dependencies = vec![1];
    spec.sheets[3].dependencies = vec![2, 3];
    let e = rig.register(spec);
    assert_eq!(nums(&e), vec![1]);
    let e = rig.succeed("j", 1, &e);
    assert_eq!(nums(&e), vec![2, 3]);
    let e2 = rig.succeed("j", 2, &e);
    assert!(nums(&e2).is_empty(), "sheet 4 still waits for sheet 3");
    let e3 = rig.succeed("j", 3, &e);
    assert_eq!(nums(&e3), vec![4]);
}

#[test]
fn persist_precedes_dependent_dispatch_and_job_finish() {
    let mut rig = Rig::new();
    let e = rig.register(chain("j", 2));
    // The dispatched state itself is saved before the musician starts.
    let p = position(
        &e,
        |x| matches!(x, Effect::Persist(StateChange::Sheet(c)) if c.status == SheetStatus::Dispatched),
    );
    let d = position(&e, |x| matches!(x, Effect::Dispatch { .. }));
    assert!(p < d);
    let e = rig.succeed("j", 1, &e);
    let p = position(
        &e,
        |x| matches!(x, Effect::Persist(StateChange::Sheet(c)) if c.sheet_num == 1 && c.status == SheetStatus::Completed),
    );
    let d = position(&e, |x| matches!(x, Effect::Dispatch { sheet_num: 2, .. }));
    assert!(p < d, "sheet 1 must be durable before sheet 2 runs");
    let e = rig.succeed("j", 2, &e);
    let p = position(
        &e,
        |x| matches!(x, Effect::Persist(StateChange::Job(c)) if c.status == JobStatus::Completed),
    );
    let f = position(&e, |x| matches!(x, Effect::JobFinished { .. }));
    assert!(p < f);
}

#[test]
fn retries_fire_after_the_policy_backoff_and_exhaustion_fails_dependents() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 3);
    spec.sheets[0].retry.base_delay = secs(4);
    let e = rig.register(spec);
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(rig.status("j", 1), SheetStatus::RetryScheduled);
    assert!(nums(&e).is_empty());
    assert!(
        nums(&rig.advance(Duration::from_millis(3_999))).is_empty(),
        "not before the delay"
    );
    let e = rig.advance(Duration::from_millis(1));
    let a = attempt_of(&e, 1);
    assert_eq!(a.attempt_number, 2);
    assert_eq!(a.previous_failure.as_deref(), Some("boom"));
    // Second failure: 4 * 2 = 8 s.
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    assert!(nums(&rig.advance(secs(7))).is_empty());
    let e = {
        let mut e2 = e;
        e2.extend(rig.advance(secs(1)));
        e2
    };
    assert_eq!(attempt_of(&e, 1).attempt_number, 3);
    // Third failure: max_retries = 3 spent, no fallback/escalation: the sheet fails.
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(rig.core.sheet("j", 1), None, "job finished and reaped");
    let reasons: Vec<_> = e
        .iter()
        .filter_map(|x| match x {
            Effect::Persist(StateChange::Sheet(c)) if c.status == SheetStatus::Failed => {
                Some((c.sheet_num, c.reason.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(reasons.len(), 3);
    assert!(reasons[0]
        .1
        .as_deref()
        .is_some_and(|r| r.contains("Failed after 3 attempts")));
    for (num, reason) in &reasons[1..] {
        assert!(
            reason.as_deref() == Some("Blocked by failed dependency: sheet 1 failed"),
            "sheet {num}: {reason:?}"
        );
    }
    let (outcome, reason) = finished(&e).expect("job finished");
    assert_eq!(outcome, JobOutcome::Failed);
    assert!(reason.is_some_and(|r| r.contains("[1, 2, 3]")));
}

#[test]
fn rate_limit_parks_the_instrument_without_spending_a_retry_and_redispatches_on_expiry() {
    let mut rig = Rig::new();
    let e = rig.register(independent("j", 2, 1));
    let id = dispatch_id(&e, "j", 1);
    let mut r = AttemptResult::failed("j", 1, id, stated_limit(secs(120)), "429");
    r.instrument = "claude-code".into();
    let e = rig.result(r);
    assert_eq!(rig.status("j", 1), SheetStatus::Waiting);
    assert_eq!(rig.core.sheet("j", 1).map(|s| s.normal_attempts), Some(0));
    assert!(nums(&e).is_empty(), "sheet 2 shares the parked instrument");
    let until = rig.now.plus(secs(120));
    assert!(e.iter().any(|x| matches!(x, Effect::Persist(StateChange::Instrument(c)) if c.rate_limited_until == Some(until))));
    assert_eq!(rig.core.rate_limited_until("claude-code"), Some(until));
    assert!(nums(&rig.advance(secs(119))).is_empty());
    let e = rig.advance(secs(1));
    assert_eq!(nums(&e), vec![1], "the waiting sheet goes first");
    assert_eq!(attempt_of(&e, 1).attempt_number, 1, "no retry was spent");
    assert!(e.iter().any(|x| matches!(x, Effect::Persist(StateChange::Instrument(c)) if c.rate_limited_until.is_none())));
}

#[test]
fn rate_limits_without_a_stated_time_probe_on_a_short_escalating_schedule() {
    // Issue 22: a limit that named no time parked the instrument for an hour; the job must
    // go on by itself soon after the API recovers.
    let mut rig = Rig::new();
    let e = rig.register(independent("j", 1, 1));
    rig.fail("j", 1, &e, unstated_limit());
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(15)))
    );
    let e = rig.advance(secs(15));
    assert_eq!(nums(&e), vec![1]);
    // Limited again: the next step, 30 s; then 60 s.
    rig.fail("j", 1, &e, unstated_limit());
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(30)))
    );
    let e = rig.advance(secs(30));
    let persisted = |e: &[Effect]| {
        e.iter().find_map(|x| match x {
            Effect::Persist(StateChange::Instrument(c)) => c.rate_limit_reason.clone(),
            _ => None,
        })
    };
    let e2 = rig.fail("j", 1, &e, unstated_limit());
    let reason = persisted(&e2).unwrap_or_default();
    assert!(
        reason.contains("no wait named by the API: trying again in 1m (probe 3)"),
        "{reason}"
    );
    // Any other outcome ends the run: the next limit starts at the first step again.
    let e = rig.advance(secs(60));
    assert_eq!(nums(&e), vec![1]);
    rig.fail("j", 1, &e, FailureKind::Transient);
    let mut e = Vec::new();
    for _ in 0..600 {
        e = rig.advance(secs(1));
        if !nums(&e).is_empty() {
            break;
        }
    }
    assert_eq!(nums(&e), vec![1], "the retry after the backoff");
    rig.fail("j", 1, &e, unstated_limit());
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(15)))
    );
}

#[test]
fn a_stated_wait_is_honoured_then_backs_off_when_refused_again() {
    let mut rig = Rig::new();
    let e = rig.register(independent("j", 1, 1));
    let limited = stated_limit(secs(3));
    let id = dispatch_id(&e, "j", 1);
    let e = rig.result(AttemptResult::failed(
        "j",
        1,
        id,
        limited.clone(),
        "HTTP 429: retry after 3s",
    ));
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(3)))
    );
    let reason = e
        .iter()
        .find_map(|x| match x {
            Effect::Persist(StateChange::Instrument(c)) => c.rate_limit_reason.clone(),
            _ => None,
        })
        .unwrap_or_default();
    assert_eq!(
        reason,
        "HTTP 429: retry after 3s — waiting 3s, as the API said; no retry spent"
    );
    let e = rig.advance(secs(3));
    assert_eq!(nums(&e), vec![1]);
    // Refused again at once: at least the first probe step now.
    rig.fail("j", 1, &e, limited);
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(15)))
    );
    assert_eq!(rig.core.sheet("j", 1).map(|s| s.normal_attempts), Some(0));
}

/// A wait restored after a restart keeps its place in the run of limits: the next limit
/// goes one step further on the probe schedule, not back to its first step.
#[test]
fn a_restored_wait_goes_on_with_its_run_of_limits() {
    let mut rig = Rig::new();
    rig.send(Event::RateLimitHit {
        instrument: "claude-code".into(),
        wait: secs(10),
        job_id: None,
        sheet_num: None,
        reason: None,
        streak: Some(2),
    });
    let e = rig.register(independent("j", 1, 1));
    assert!(nums(&e).is_empty(), "instrument is parked");
    let e = rig.advance(secs(10));
    assert_eq!(nums(&e), vec![1]);
    let e = rig.fail("j", 1, &e, unstated_limit());
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(60))),
        "the third limit in a row waits the third step"
    );
    assert!(e.iter().any(|x| matches!(x,
        Effect::Persist(StateChange::Instrument(c)) if c.rate_limit_streak == 3)));
}

/// A run of limits whose wait had ended when the conductor stopped (its retry unanswered)
/// comes back as a zero wait: nothing is parked, the next limit goes one step further, and
/// once the instrument answers otherwise the persisted run ends (streak 0, no deadline).
#[test]
fn an_ended_wait_restores_its_run_only_and_an_answer_ends_it() {
    let mut rig = Rig::new();
    rig.send(Event::RateLimitHit {
        instrument: "claude-code".into(),
        wait: Duration::ZERO,
        job_id: None,
        sheet_num: None,
        reason: None,
        streak: Some(1),
    });
    let e = rig.register(independent("j", 2, 1));
    assert_eq!(nums(&e), vec![1], "nothing is parked");
    rig.fail("j", 1, &e, unstated_limit());
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(30))),
        "the second limit in a row waits the second step"
    );
    let e = rig.advance(secs(30));
    assert_eq!(nums(&e), vec![1]);
    let e = rig.succeed("j", 1, &e);
    assert!(
        e.iter().any(|x| matches!(x,
            Effect::Persist(StateChange::Instrument(c))
                if c.rate_limit_streak == 0 && c.rate_limited_until.is_none())),
        "the run's end is persisted: {e:?}"
    );
}

#[test]
fn external_rate_limit_hit_and_clear() {
    let mut rig = Rig::new();
    rig.send(Event::RateLimitHit {
        instrument: "claude-code".into(),
        wait: secs(300),
        job_id: None,
        sheet_num: None,
        reason: None,
        streak: None,
    });
    let e = rig.register(independent("j", 1, 1));
    assert!(nums(&e).is_empty(), "instrument is parked");
    let e = rig.send(Event::ClearRateLimit { instrument: None });
    assert_eq!(nums(&e), vec![1]);
    assert_eq!(rig.core.rate_limited_until("claude-code"), None);
}

#[test]
fn restored_rate_limit_survives_restart() {
    let mut config = BatonConfig::default();
    let mut inst = InstrumentSpec::new("claude-code");
    inst.rate_limited_until = Some(Millis(1_000_000 + 30_000));
    config.instruments.push(inst);
    let mut rig = Rig::with(config);
    let e = rig.register(independent("j", 1, 1));
    assert!(nums(&e).is_empty(), "no stampede after restart");
    assert_eq!(nums(&rig.advance(secs(30))), vec![1]);
}

/// A baton whose `shell` instrument holds one job only on a rate limit (as the conductor's).
fn shell_rig() -> Rig {
    let mut shell = InstrumentSpec::new("shell");
    shell.rate_limit_per_job = true;
    Rig::with(BatonConfig {
        jitter_seed: 1,
        instruments: vec![shell],
        ..BatonConfig::default()
    })
}

/// `n` independent sheets on `instrument`, one at a time.
fn on(instrument: &str, job: &str, n: u32) -> JobSpec {
    let mut spec = independent(job, n, 1);
    for s in &mut spec.sheets {
        s.instrument = instrument.into();
    }
    spec
}

/// A rate limit that named no time.
fn unstated_limit() -> FailureKind {
    FailureKind::RateLimited {
        reset_after: None,
        said_after: None,
    }
}

/// A rate limit that named `wait` (and no shorter time a minimum lengthened).
fn stated_limit(wait: Duration) -> FailureKind {
    FailureKind::RateLimited {
        reset_after: Some(wait),
        said_after: None,
    }
}

/// Job `job`'s sheet `sheet` (dispatched in `effects`) is told to wait `wait` by `instrument`.
fn rate_limited(
    rig: &mut Rig,
    job: &str,
    sheet: u32,
    effects: &[Effect],
    instrument: &str,
    wait: u64,
) -> Vec<Effect> {
    let id = dispatch_id(effects, job, sheet);
    let mut r = AttemptResult::failed(
        job,
        sheet,
        id,
        stated_limit(secs(wait)),
        "HTTP 429 Too Many Requests",
    );
    r.instrument = instrument.into();
    rig.result(r)
}

fn job_waits(effects: &[Effect], job: &str) -> Vec<Option<Millis>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist(StateChange::JobWait(w)) if w.job_id == job => {
                Some(w.rate_limited_until)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_shell_rate_limit_holds_the_jobs_own_shell_sheets_and_not_another_jobs() {
    let mut rig = shell_rig();
    let a = rig.register(on("shell", "a", 2));
    let b = rig.register(on("shell", "b", 2));
    assert_eq!(dispatched(&a), vec![("a".into(), 1)]);
    assert_eq!(dispatched(&b), vec![("b".into(), 1)]);
    let e = rate_limited(&mut rig, "a", 1, &a, "shell", 120);
    assert_eq!(rig.status("a", 1), SheetStatus::Waiting);
    assert_eq!(rig.core.sheet("a", 1).map(|s| s.normal_attempts), Some(0));
    let reason = rig
        .core
        .sheet("a", 1)
        .and_then(|s| s.reason)
        .unwrap_or_default();
    assert!(
        reason.starts_with("Rate limited on shell (this job's shell sheets wait; other jobs' run)"),
        "{reason}"
    );
    assert!(nums(&e).is_empty(), "a's sheet 2 waits with its sheet 1");
    let until = rig.now.plus(secs(120));
    assert_eq!(
        job_waits(&e, "a"),
        vec![Some(until)],
        "the deadline is persisted"
    );
    assert!(
        !e.iter()
            .any(|x| matches!(x, Effect::Persist(StateChange::Instrument(_)))),
        "the instrument is not parked"
    );
    assert_eq!(rig.core.rate_limited_until("shell"), None);
    assert_eq!(rig.core.job_rate_limited_until("a", "shell"), Some(until));
    assert_eq!(rig.core.job_rate_limited_until("b", "shell"), None);
    // Job b goes on while a waits.
    let e = rig.succeed("b", 1, &b);
    assert_eq!(dispatched(&e), vec![("b".into(), 2)]);
    let e = rig.succeed("b", 2, &e);
    assert!(finished(&e).is_some_and(|(o, _)| o == JobOutcome::Completed));
    assert_eq!(rig.status("a", 2), SheetStatus::Pending);
    // A job submitted now runs too.
    let c = rig.register(on("shell", "c", 1));
    assert_eq!(dispatched(&c), vec![("c".into(), 1)]);
    // The wait ends: a's waiting sheet runs first, its retry budget untouched.
    assert!(nums(&rig.advance(secs(119))).is_empty());
    let e = rig.advance(secs(1));
    assert_eq!(dispatched(&e), vec![("a".into(), 1)]);
    assert_eq!(attempt_of(&e, 1).attempt_number, 1, "no retry was spent");
    assert_eq!(
        job_waits(&e, "a"),
        vec![None],
        "the persisted deadline is cleared"
    );
    assert_eq!(rig.core.job_rate_limited_until("a", "shell"), None);
    let e = rig.succeed("a", 1, &e);
    assert_eq!(dispatched(&e), vec![("a".into(), 2)]);
}

#[test]
fn a_jobs_shell_wait_follows_the_probe_schedule_of_its_own_run_of_limits() {
    let mut rig = shell_rig();
    let a = rig.register(on("shell", "a", 1));
    rig.fail("a", 1, &a, unstated_limit());
    assert_eq!(
        rig.core.job_rate_limited_until("a", "shell"),
        Some(rig.now.plus(secs(15)))
    );
    let e = rig.advance(secs(15));
    assert_eq!(nums(&e), vec![1]);
    // Another job's first limit starts its own run; a's second waits the second step.
    let b = rig.register(on("shell", "b", 1));
    rig.fail("a", 1, &e, unstated_limit());
    rig.fail("b", 1, &b, unstated_limit());
    assert_eq!(
        rig.core.job_rate_limited_until("a", "shell"),
        Some(rig.now.plus(secs(30)))
    );
    assert_eq!(
        rig.core.job_rate_limited_until("b", "shell"),
        Some(rig.now.plus(secs(15)))
    );
}

#[test]
fn clearing_rate_limits_lifts_a_jobs_shell_wait() {
    for clear in [Some("shell".to_owned()), None] {
        let mut rig = shell_rig();
        let a = rig.register(on("shell", "a", 1));
        rate_limited(&mut rig, "a", 1, &a, "shell", 3600);
        let e = rig.send(Event::ClearRateLimit {
            instrument: clear.clone(),
        });
        assert_eq!(
            dispatched(&e),
            vec![("a".into(), 1)],
            "cleared by {clear:?}"
        );
        assert_eq!(job_waits(&e, "a"), vec![None]);
        assert_eq!(rig.core.job_rate_limited_until("a", "shell"), None);
        assert!(
            e.iter().any(|x| matches!(x, Effect::CancelTimer { .. })),
            "the wait's timer is cancelled"
        );
    }
}

#[test]
fn a_paused_or_cancelled_job_keeps_or_ends_its_shell_wait() {
    let mut rig = shell_rig();
    let a = rig.register(on("shell", "a", 2));
    rate_limited(&mut rig, "a", 1, &a, "shell", 60);
    rig.send(Event::PauseJob { job_id: "a".into() });
    // The wait ends while the job is paused: nothing runs until it is resumed.
    assert!(nums(&rig.advance(secs(60))).is_empty());
    assert_eq!(rig.status("a", 1), SheetStatus::Pending);
    let e = rig.send(Event::ResumeJob {
        job_id: "a".into(),
        new_limits: None,
    });
    assert_eq!(nums(&e), vec![1]);
    // Limited again, then cancelled: the job ends, and its persisted wait with it.
    rate_limited(&mut rig, "a", 1, &e, "shell", 600);
    let e = rig.send(Event::CancelJob { job_id: "a".into() });
    assert!(finished(&e).is_some_and(|(o, _)| o == JobOutcome::Cancelled));
    assert_eq!(job_waits(&e, "a"), vec![None]);
    assert!(rig.advance(secs(600)).is_empty(), "its timer was cancelled");
}

#[test]
fn a_restored_job_wait_holds_that_job_after_a_restart_and_no_other() {
    let mut rig = shell_rig();
    let mut a = on("shell", "a", 1);
    a.rate_waits.push(crate::spec::RestoredRateWait {
        instrument: "shell".into(),
        wait: secs(30),
        reason: Some("HTTP 429 — waiting 30s".into()),
        streak: 1,
    });
    let e = rig.register(a);
    assert!(nums(&e).is_empty(), "a keeps waiting after the restart");
    assert_eq!(
        rig.core.job_rate_limited_until("a", "shell"),
        Some(rig.now.plus(secs(30)))
    );
    let b = rig.register(on("shell", "b", 1));
    assert_eq!(dispatched(&b), vec![("b".into(), 1)]);
    assert_eq!(dispatched(&rig.advance(secs(30))), vec![("a".into(), 1)]);
}

#[test]
fn an_ai_instruments_rate_limit_still_holds_every_job() {
    let mut rig = shell_rig();
    let a = rig.register(on("claude-code", "a", 1));
    let b = rig.register(on("claude-code", "b", 1));
    let c = rig.register(on("shell", "c", 1));
    assert_eq!(dispatched(&c), vec![("c".into(), 1)]);
    rate_limited(&mut rig, "a", 1, &a, "claude-code", 120);
    // b's sheet ran before the limit; its retry (and a new job) wait for the instrument.
    rig.fail("b", 1, &b, FailureKind::Transient);
    assert_eq!(rig.status("b", 1), SheetStatus::RetryScheduled);
    let d = rig.register(on("claude-code", "d", 1));
    assert!(
        nums(&d).is_empty(),
        "every job waits for the parked instrument"
    );
    assert_eq!(
        rig.core.rate_limited_until("claude-code"),
        Some(rig.now.plus(secs(120)))
    );
    assert_eq!(rig.core.job_rate_limited_until("a", "claude-code"), None);
    let mut e = rig.advance(secs(119));
    assert!(nums(&e).is_empty(), "b's retry came due and waits too");
    e = rig.advance(secs(1));
    assert_eq!(
        dispatched(&e),
        vec![("a".into(), 1), ("b".into(), 1), ("d".into(), 1)]
    );
}

#[test]
fn circuit_breaker_opens_then_recovers_through_a_single_probe() {
    let mut config = BatonConfig::default();
    let mut inst = InstrumentSpec::new("claude-code");
    inst.circuit_breaker_threshold = 2;
    config.instruments.push(inst);
    let mut rig = Rig::with(config);
    let mut spec = independent("j", 4, 2);
    for s in &mut spec.sheets {
        s.retry.base_delay = secs(1);
    }
    let e = rig.register(spec);
    assert_eq!(nums(&e), vec![1, 2]);
    let e1 = rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(nums(&e1), vec![3]);
    let e2 = rig.fail("j", 2, &e, FailureKind::Crash);
    assert_eq!(
        rig.core.circuit_state("claude-code"),
        Some(CircuitState::Open)
    );
    assert!(nums(&e2).is_empty());
    // Retries come due but the breaker holds them.
    assert!(nums(&rig.advance(secs(29))).is_empty());
    let e = rig.advance(secs(1));
    assert_eq!(
        rig.core.circuit_state("claude-code"),
        Some(CircuitState::HalfOpen)
    );
    assert_eq!(
        nums(&e),
        vec![1],
        "exactly one probe, although the job has a free slot"
    );
    // Sheet 3 (dispatched before the breaker opened) succeeds: closes the breaker.
    let e = rig.succeed("j", 3, &e1);
    assert_eq!(
        rig.core.circuit_state("claude-code"),
        Some(CircuitState::Closed)
    );
    assert_eq!(nums(&e), vec![2]);
}

#[test]
fn half_open_allows_exactly_one_probe_and_reopens_on_failure() {
    let mut config = BatonConfig::default();
    let mut inst = InstrumentSpec::new("claude-code");
    inst.circuit_breaker_threshold = 1;
    config.instruments.push(inst);
    let mut rig = Rig::with(config);
    let mut spec = independent("j", 3, 3);
    spec.sheets[0].retry.max_retries = 5;
    let e = rig.register(spec);
    assert_eq!(nums(&e), vec![1, 2, 3]);
    rig.fail("j", 1, &e, FailureKind::Transient);
    rig.fail("j", 2, &e, FailureKind::Transient);
    assert_eq!(
        rig.core.circuit_state("claude-code"),
        Some(CircuitState::Open)
    );
    assert!(
        nums(&rig.advance(secs(29))).is_empty(),
        "retries wait for the breaker"
    );
    let e = rig.advance(secs(1));
    assert_eq!(
        nums(&e),
        vec![1],
        "one probe even though sheet 2 is due too"
    );
    rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(
        rig.core.circuit_state("claude-code"),
        Some(CircuitState::Open)
    );
    // consecutive_failures = 3, threshold 1: recovery grows to 30 * 2^2 = 120 s.
    assert!(nums(&rig.advance(secs(119))).is_empty());
    let e = rig.advance(secs(1));
    assert_eq!(nums(&e).len(), 1);
    let e = rig.succeed("j", nums(&e)[0], &e);
    assert_eq!(
        rig.core.circuit_state("claude-code"),
        Some(CircuitState::Closed)
    );
    assert_eq!(nums(&e).len(), 1, "after the probe succeeds the rest flows");
}

#[test]
fn open_breaker_switches_a_sheet_with_fallbacks_to_the_next_instrument() {
    let mut config = BatonConfig::default();
    let mut inst = InstrumentSpec::new("claude-code");
    inst.circuit_breaker_threshold = 1;
    config.instruments.push(inst);
    let mut rig = Rig::with(config);
    let mut spec = independent("j", 2, 1);
    spec.sheets[1].fallbacks = vec!["gemini-cli".into()];
    spec.sheets[0].retry.max_retries = 1;
    let e = rig.register(spec);
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(attempt_of(&e, 2).instrument, "gemini-cli");
}

#[test]
fn exhaustion_falls_back_with_a_fresh_budget() {
    let mut rig = Rig::new();
    let mut spec = independent("j", 1, 1);
    spec.sheets[0].retry.max_retries = 1;
    spec.sheets[0].fallbacks = vec!["codex-cli".into()];
    let e = rig.register(spec);
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    let a = attempt_of(&e, 1);
    assert_eq!(a.instrument, "codex-cli");
    // Its attempts keep their numbers across the fallback: this is its second.
    assert_eq!(a.attempt_number, 2);
    assert_eq!(rig.core.sheet("j", 1).map(|s| s.normal_attempts), Some(0));
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Failed));
    let reason = e.iter().find_map(|x| match x {
        Effect::Persist(StateChange::Sheet(c)) if c.status == SheetStatus::Failed => {
            c.reason.clone()
        }
        _ => None,
    });
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.starts_with("Failed after 2 attempts")),
        "{reason:?}"
    );
}

#[test]
fn auth_failure_fails_at_once_without_retry() {
    let mut rig = Rig::new();
    let e = rig.register(chain("j", 1));
    let e = rig.fail("j", 1, &e, FailureKind::Auth);
    let (outcome, _) = finished(&e).expect("finished");
    assert_eq!(outcome, JobOutcome::Failed);
    assert!(!e.iter().any(|x| matches!(
        x,
        Effect::ScheduleTimer {
            event: Event::RetryDue { .. },
            ..
        }
    )));
}

#[test]
fn partial_pass_enters_completion_mode_above_threshold_only() {
    let mut rig = Rig::new();
    let e = rig.register(independent("j", 2, 2));
    let mut r = AttemptResult::success("j", 1, dispatch_id(&e, "j", 1));
    r.validations_total = 4;
    r.validations_passed = 3;
    r.validation_pass_rate = 75.0;
    let e1 = rig.result(r);
    let a = attempt_of(&e1, 1);
    assert_eq!(
        a.mode,
        AttemptMode::Completion,
        "immediate completion re-dispatch"
    );
    assert_eq!(
        a.completion_suffix.as_deref(),
        Some(crate::effect::COMPLETION_SUFFIX)
    );
    assert_eq!(a.attempt_number, 2);

    let mut r = AttemptResult::success("j", 2, dispatch_id(&e, "j", 2));
    r.validations_total = 4;
    r.validations_passed = 1;
    r.validation_pass_rate = 25.0;
    rig.result(r);
    assert_eq!(
        rig.status("j", 2),
        SheetStatus::RetryScheduled,
        "below threshold: a normal retry"
    );
    assert_eq!(rig.core.sheet("j", 2).map(|s| s.normal_attempts), Some(1));
}

#[test]
fn completion_budget_exhausted_falls_back_to_normal_retries() {
    let mut rig = Rig::new();
    let mut spec = independent("j", 1, 1);
    spec.sheets[0].max_completion_attempts = 1;
    let mut e = rig.register(spec);
    let partial = |id| {
        let mut r = AttemptResult::success("j", 1, id);
        r.validations_total = 2;
        r.validations_passed = 1;
        r.validation_pass_rate = 50.0;
        r
    };
    e = rig.result(partial(dispatch_id(&e, "j", 1)));
    assert_eq!(attempt_of(&e, 1).mode, AttemptMode::Completion);
    rig.result(partial(dispatch_id(&e, "j", 1)));
    assert_eq!(rig.status("j", 1), SheetStatus::RetryScheduled);
}

#[test]
fn successful_run_with_zero_pass_rate_counts_as_a_failure() {
    let mut rig = Rig::new();
    let e = rig.register(independent("j", 1, 1));
    let mut r = AttemptResult::success("j", 1, dispatch_id(&e, "j", 1));
    r.validations_total = 2;
    r.validation_pass_rate = 0.0;
    rig.result(r);
    assert_eq!(rig.core.sheet("j", 1).map(|s| s.normal_attempts), Some(1));
}

#[test]
fn pause_stops_new_dispatches_and_resume_restarts_them() {
    let mut rig = Rig::new();
    let e = rig.register(chain("j", 2));
    let p = rig.send(Event::PauseJob { job_id: "j".into() });
    assert!(p.iter().any(
        |x| matches!(x, Effect::Persist(StateChange::Job(c)) if c.status == JobStatus::Paused)
    ));
    let e = rig.succeed("j", 1, &e);
    assert!(
        nums(&e).is_empty(),
        "in-flight finished, nothing new starts"
    );
    assert_eq!(rig.core.job_status("j"), Some(JobStatus::Paused));
    let e = rig.send(Event::ResumeJob {
        job_id: "j".into(),
        new_limits: None,
    });
    assert_eq!(nums(&e), vec![2]);
}

/// A paused job's attempt taken back before it started (its Slurm job withdrawn from the
/// queue): the sheet is pending again, no retry is spent, nothing is dispatched while the
/// job is paused, and the resume dispatches it again as the same attempt.
#[test]
fn a_withdrawn_attempt_goes_back_to_pending_without_spending_a_retry() {
    let mut rig = Rig::new();
    let e = rig.register(chain("j", 2));
    let first = attempt_of(&e, 1).attempt_number;
    let p = rig.send(Event::PauseJob { job_id: "j".into() });
    assert!(p.iter().any(
        |x| matches!(x, Effect::Persist(StateChange::Job(c)) if c.status == JobStatus::Paused)
    ));
    let w = rig.fail("j", 1, &e, FailureKind::Withdrawn);
    assert!(nums(&w).is_empty(), "nothing starts while paused: {w:?}");
    assert_eq!(rig.status("j", 1), SheetStatus::Pending);
    assert_eq!(rig.core.sheet("j", 1).map(|s| s.normal_attempts), Some(0));
    assert_eq!(rig.core.in_flight(), 0);
    assert_eq!(rig.core.job_status("j"), Some(JobStatus::Paused));
    let e = rig.send(Event::ResumeJob {
        job_id: "j".into(),
        new_limits: None,
    });
    assert_eq!(nums(&e), vec![1]);
    assert_eq!(attempt_of(&e, 1).attempt_number, first);
}

#[test]
fn cancel_kills_in_flight_and_finishes_cancelled() {
    let mut rig = Rig::new();
    rig.register(independent("j", 3, 2));
    let e = rig.send(Event::CancelJob { job_id: "j".into() });
    let kills = e
        .iter()
        .filter(|x| matches!(x, Effect::Kill { .. }))
        .count();
    assert_eq!(kills, 2);
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Cancelled));
    assert_eq!(rig.core.in_flight(), 0);
}

#[test]
fn job_timeout_kills_and_fails_with_upstream_message() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    spec.timeout = Some(secs(600));
    rig.register(spec);
    let e = rig.advance(secs(600));
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Kill { sheet_num: 1, .. })));
    let (outcome, reason) = finished(&e).expect("finished");
    assert_eq!(outcome, JobOutcome::Failed);
    assert_eq!(
        reason.as_deref(),
        Some("Job exceeded timeout of 600s (ran for 600s)")
    );
}

/// A resumed job's run gets its job timeout afresh (upstream's resumed task does): a job
/// paused for 40 s of a 60 s limit and resumed was killed 20 s later, "ran for 60s".
#[test]
fn a_resumed_job_gets_its_job_timeout_afresh() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 3);
    spec.timeout = Some(secs(60));
    let e = rig.register(spec);
    rig.advance(secs(10));
    let e = rig.succeed("j", 1, &e);
    assert_eq!(nums(&e), vec![2]);
    rig.send(Event::PauseJob { job_id: "j".into() });
    let e2 = rig.succeed("j", 2, &e);
    assert!(nums(&e2).is_empty());
    assert!(
        finished(&rig.advance(secs(40))).is_none(),
        "paused: no timeout"
    );
    let e = rig.send(Event::ResumeJob {
        job_id: "j".into(),
        new_limits: None,
    });
    assert_eq!(nums(&e), vec![3]);
    assert!(
        finished(&rig.advance(secs(59))).is_none(),
        "the resumed run has its own 60 s"
    );
    let (outcome, reason) = finished(&rig.advance(secs(1))).expect("finished");
    assert_eq!(outcome, JobOutcome::Failed);
    assert_eq!(
        reason.as_deref(),
        Some("Job exceeded timeout of 60s (ran for 60s)")
    );
}

/// A run a conductor restart continues keeps the time it has had: it got its slot 40 s
/// before the new registration, so a 60 s limit ends it 20 s later (it ran its full 60 s
/// again after each restart).
#[test]
fn a_run_a_restart_continues_keeps_the_time_it_had() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    spec.timeout = Some(secs(60));
    spec.clock_started_at = Some(Millis(rig.now.0 - 40_000));
    let e = rig.register(spec);
    let clock = e.iter().find_map(|x| match x {
        Effect::Persist(StateChange::Job(c)) if c.status == JobStatus::Running => {
            c.clock_started_at
        }
        _ => None,
    });
    assert_eq!(
        clock,
        Some(Millis(rig.now.0 - 40_000)),
        "persisted as it was"
    );
    assert!(finished(&rig.advance(secs(19))).is_none());
    let (_, reason) = finished(&rig.advance(secs(1))).expect("finished");
    assert_eq!(
        reason.as_deref(),
        Some("Job exceeded timeout of 60s (ran for 60s)")
    );
}

#[test]
fn stale_dispatch_is_killed_and_retried() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 1);
    spec.sheets[0].timeout = secs(100);
    let first = rig.register(spec);
    let e = rig.advance(secs(160));
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Kill { sheet_num: 1, .. })));
    assert_eq!(rig.status("j", 1), SheetStatus::RetryScheduled);
    // The late result of the killed attempt is ignored.
    let late = rig.succeed("j", 1, &first);
    assert!(finished(&late).is_none());
    assert_eq!(rig.status("j", 1), SheetStatus::RetryScheduled);
}

#[test]
fn process_exit_is_a_crash_failure() {
    let mut rig = Rig::new();
    rig.register(chain("j", 1));
    rig.send(Event::ProcessExited {
        job_id: "j".into(),
        sheet_num: 1,
        pid: 42,
        exit_code: Some(137),
    });
    let s = rig.core.sheet("j", 1).expect("sheet");
    assert_eq!(s.status, SheetStatus::RetryScheduled);
    assert_eq!(s.normal_attempts, 1);
}

/// Progress restored from a checkpoint: `status`, `normal` failed attempts, `cost` spent,
/// and what was left of a retry's backoff.
fn restored(
    status: SheetStatus,
    normal: u32,
    cost: f64,
    retry_in: Option<Duration>,
) -> RestoredSheet {
    RestoredSheet {
        status,
        normal_attempts: normal,
        completion_attempts: 0,
        healing_attempts: 0,
        total_cost_usd: cost,
        instrument: None,
        earlier_attempts: 0,
        retry_in,
    }
}

#[test]
fn restart_restoration_does_not_redo_completed_nor_spend_retries() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 3);
    spec.sheets[0].restored = Some(restored(SheetStatus::Completed, 0, 0.5, None));
    spec.sheets[1].restored = Some(restored(SheetStatus::Dispatched, 1, 0.1, None));
    let e = rig.register(spec);
    assert_eq!(nums(&e), vec![2], "completed sheet 1 is not run again");
    assert_eq!(
        sheet_persists(&e, 2),
        vec![SheetStatus::Pending, SheetStatus::Dispatched]
    );
    assert_eq!(
        attempt_of(&e, 2).attempt_number,
        2,
        "one failure carried, none added"
    );
    assert_eq!(rig.core.sheet("j", 2).map(|s| s.normal_attempts), Some(1));
}

/// A sheet that was waiting out a retry's backoff when the conductor stopped waits out the
/// rest of it after the restart (the retry is not brought forward), then runs as the
/// attempt it was to be; the stored change says when it is due.
#[test]
fn a_restored_retry_waits_out_the_rest_of_its_backoff() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 1);
    spec.sheets[0].restored = Some(restored(SheetStatus::Pending, 1, 0.0, Some(secs(20))));
    let e = rig.register(spec);
    assert!(nums(&e).is_empty(), "the retry ran at once: {e:?}");
    assert_eq!(
        rig.core.sheet("j", 1).map(|s| s.status),
        Some(SheetStatus::RetryScheduled)
    );
    let due = e.iter().find_map(|x| match x {
        Effect::Persist(StateChange::Sheet(c)) if c.sheet_num == 1 => c.retry_due,
        _ => None,
    });
    assert_eq!(due, Some(rig.now.plus(secs(20))));
    assert!(
        nums(&rig.advance(secs(19))).is_empty(),
        "ran before its backoff ended"
    );
    let e = rig.advance(secs(2));
    assert_eq!(nums(&e), vec![1]);
    assert_eq!(
        attempt_of(&e, 1).attempt_number,
        2,
        "one failure carried, none added"
    );
}

#[test]
fn restored_failure_blocks_dependents_at_registration() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    spec.sheets[0].restored = Some(restored(SheetStatus::Failed, 3, 0.0, None));
    let e = rig.register(spec);
    assert!(nums(&e).is_empty());
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Failed));
}

#[test]
fn cycles_and_duplicates_are_rejected_with_a_named_reason() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 3);
    spec.sheets[0].dependencies = vec![3];
    let e = rig.register(spec);
    let (outcome, reason) = finished(&e).expect("rejected");
    assert_eq!(outcome, JobOutcome::Failed);
    assert!(reason.is_some_and(|r| r.contains("dependency cycle among sheets [1, 2, 3]")));
    let mut spec = chain("k", 2);
    spec.sheets[1].num = 1;
    let reason = finished(&rig.register(spec)).and_then(|f| f.1);
    assert!(reason.is_some_and(|r| r.contains("duplicate sheet number 1")));
}

#[test]
fn escalation_fermata_pauses_the_job_and_resolution_continues() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    spec.escalation_enabled = true;
    spec.sheets[0].retry.max_retries = 1;
    let e = rig.register(spec);
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(rig.status("j", 1), SheetStatus::Fermata);
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Escalate { sheet_num: 1, .. })));
    assert_eq!(rig.core.job_status("j"), Some(JobStatus::Paused));
    let e = rig.send(Event::EscalationResolved {
        job_id: "j".into(),
        sheet_num: 1,
        decision: EscalationDecision::Accept,
    });
    assert_eq!(nums(&e), vec![2]);
    assert_eq!(rig.core.job_status("j"), Some(JobStatus::Running));
}

#[test]
fn escalation_retry_gives_one_more_attempt() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 1);
    spec.escalation_enabled = true;
    spec.sheets[0].retry.max_retries = 1;
    let e = rig.register(spec);
    rig.fail("j", 1, &e, FailureKind::Transient);
    let e = rig.send(Event::EscalationResolved {
        job_id: "j".into(),
        sheet_num: 1,
        decision: EscalationDecision::Retry,
    });
    assert_eq!(nums(&e), vec![1]);
}

#[test]
fn escalation_timeout_fails_the_sheet_not_the_job() {
    let mut rig = Rig::new();
    let mut spec = independent("j", 2, 1);
    spec.escalation_enabled = true;
    spec.escalation_timeout = Some(secs(300));
    spec.sheets[0].retry.max_retries = 1;
    let e = rig.register(spec);
    rig.fail("j", 1, &e, FailureKind::Transient);
    let e = rig.advance(secs(300));
    assert_eq!(
        nums(&e),
        vec![2],
        "the job carries on with independent work"
    );
    let e = rig.succeed("j", 2, &e);
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Failed));
}

#[test]
fn external_escalation_needed_kills_the_attempt() {
    let mut rig = Rig::new();
    rig.register(chain("j", 1));
    let e = rig.send(Event::EscalationNeeded {
        job_id: "j".into(),
        sheet_num: 1,
        reason: "help".into(),
    });
    assert!(e.iter().any(|x| matches!(x, Effect::Kill { .. })));
    assert_eq!(rig.status("j", 1), SheetStatus::Fermata);
    assert_eq!(rig.core.in_flight(), 0);
}

#[test]
fn self_healing_grants_one_healing_attempt() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 1);
    spec.self_healing_enabled = true;
    spec.sheets[0].retry.max_retries = 1;
    let e = rig.register(spec);
    rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(rig.status("j", 1), SheetStatus::RetryScheduled);
    let e = rig.advance(secs(10));
    assert_eq!(attempt_of(&e, 1).mode, AttemptMode::Healing);
    // The second attempt that ran, not the third.
    assert_eq!(attempt_of(&e, 1).attempt_number, 2);
    let e = rig.fail("j", 1, &e, FailureKind::Transient);
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Failed));
}

/// The skip rule `skip_when: "True"`.
fn skip_when_true() -> Option<SkipSpec> {
    Some(SkipSpec {
        when: Some("True".into()),
        command: None,
        description: None,
        command_timeout: None,
    })
}

/// The host's answer that sheet `n` of job `j` is skipped.
fn skipped(n: u32) -> Event {
    Event::SkipEvaluated {
        job_id: "j".into(),
        sheet_num: n,
        skip_reason: Some("Condition met: True".into()),
    }
}

#[test]
fn skip_rules_are_evaluated_by_the_host_before_dispatch() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 3);
    spec.sheets[1].skip = skip_when_true();
    let e = rig.register(spec);
    let e = rig.succeed("j", 1, &e);
    assert!(nums(&e).is_empty());
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::EvaluateSkip { sheet_num: 2, .. })));
    let e = rig.send(skipped(2));
    assert_eq!(nums(&e), vec![3], "skipped satisfies dependents");
    let e = rig.succeed("j", 3, &e);
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Completed));
}

/// A job that plays one sheet at a time keeps sheet-number order whatever order the host
/// answers its skip rules in: voices 2 and 3 are skipped, 4 follows 2 and 5 follows 3; the
/// answer for 3 coming first does not start 5 before 4.
#[test]
fn one_at_a_time_keeps_sheet_order_whichever_skip_answer_comes_first() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 5);
    for (i, deps) in [(1, vec![1]), (2, vec![1]), (3, vec![2]), (4, vec![3])] {
        spec.sheets[i].dependencies = deps;
    }
    for i in [1, 2] {
        spec.sheets[i].skip = skip_when_true();
    }
    let e = rig.register(spec);
    let e = rig.succeed("j", 1, &e);
    assert!(nums(&e).is_empty());
    let e = rig.send(skipped(3));
    assert!(
        nums(&e).is_empty(),
        "sheet 5 started while 2's skip was undecided"
    );
    let e = rig.send(skipped(2));
    assert_eq!(nums(&e), vec![4]);
    let e = rig.succeed("j", 4, &e);
    assert_eq!(nums(&e), vec![5]);
}

#[test]
fn skip_evaluation_proceed_dispatches() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 1);
    spec.sheets[0].skip = Some(SkipSpec {
        when: None,
        command: Some("false".into()),
        description: None,
        command_timeout: None,
    });
    let e = rig.register(spec);
    assert!(nums(&e).is_empty());
    let e = rig.send(Event::SkipEvaluated {
        job_id: "j".into(),
        sheet_num: 1,
        skip_reason: None,
    });
    assert_eq!(nums(&e), vec![1]);
}

#[test]
fn external_skip_of_a_sheet() {
    let mut rig = Rig::new();
    rig.register(chain("j", 2));
    let e = rig.send(Event::SheetSkipped {
        job_id: "j".into(),
        sheet_num: 1,
        reason: "user".into(),
    });
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Kill { sheet_num: 1, .. })));
    assert_eq!(nums(&e), vec![2]);
}

#[test]
fn global_instrument_and_model_limits_hold() {
    let mut config = BatonConfig {
        max_concurrent_sheets: 5,
        ..BatonConfig::default()
    };
    let mut inst = InstrumentSpec::new("claude-code");
    inst.max_concurrent = 3;
    inst.model_limits = vec![("opus".into(), 1)];
    config.instruments.push(inst);
    let mut rig = Rig::with(config);
    let mut spec = independent("a", 4, 10);
    spec.sheets[0].model = Some("opus".into());
    spec.sheets[1].model = Some("opus".into());
    let e = rig.register(spec);
    assert_eq!(
        nums(&e),
        vec![1, 3, 4],
        "one opus at a time, three per instrument"
    );
    let mut other = independent("b", 4, 10);
    for s in &mut other.sheets {
        s.instrument = "gemini-cli".into();
    }
    let e = rig.register(other);
    assert_eq!(nums(&e), vec![1, 2], "global limit 5");
    assert_eq!(rig.core.in_flight(), 5);
}

#[test]
fn pacing_delays_the_next_sheet() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    spec.pause_between_sheets = secs(5);
    let e = rig.register(spec);
    let e = rig.succeed("j", 1, &e);
    assert!(nums(&e).is_empty());
    // The pause is announced (for `status`), with its length.
    assert!(e.iter().any(|x| matches!(x, Effect::Observer(o)
        if o.event == "baton.pacing.started" && o.data["seconds"] == 5.0)));
    assert!(nums(&rig.advance(secs(4))).is_empty());
    assert_eq!(nums(&rig.advance(secs(1))), vec![2]);
}

#[test]
fn job_cost_limit_pauses_and_resume_with_new_limit_continues() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    spec.max_cost_usd = Some(1.0);
    let e = rig.register(spec);
    let mut r = AttemptResult::success("j", 1, dispatch_id(&e, "j", 1));
    r.cost_usd = 1.5;
    let e = rig.result(r);
    assert!(nums(&e).is_empty());
    assert_eq!(rig.core.job_status("j"), Some(JobStatus::Paused));
    let e = rig.send(Event::ResumeJob {
        job_id: "j".into(),
        new_limits: None,
    });
    assert!(nums(&e).is_empty(), "still over the limit: re-paused");
    let limits = CostLimitsUpdate {
        max_cost_per_job: Some(10.0),
        max_cost_per_sheet: None,
    };
    let e = rig.send(Event::ResumeJob {
        job_id: "j".into(),
        new_limits: Some(limits),
    });
    assert_eq!(nums(&e), vec![2]);
}

#[test]
fn sheet_cost_limit_fails_the_sheet() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 1);
    spec.sheets[0].max_cost_usd = Some(0.1);
    let e = rig.register(spec);
    let mut r = AttemptResult::failed("j", 1, dispatch_id(&e, "j", 1), FailureKind::Transient, "x");
    r.cost_usd = 0.2;
    let e = rig.result(r);
    let (_, reason) = finished(&e).expect("finished");
    assert!(reason.is_some());
    assert!(e.iter().any(|x| matches!(x, Effect::Persist(StateChange::Sheet(c)) if c.reason.as_deref().is_some_and(|r| r.starts_with("Cost limit: sheet 1 cost $0.2000 exceeds limit $0.1000")))));
}

#[test]
fn sheet_cost_limit_pauses_the_job_after_a_failed_attempt_without_retrying() {
    let mut rig = Rig::new();
    let mut spec = independent("j", 2, 2);
    spec.sheets[0].max_cost_usd = Some(0.1);
    let e = rig.register(spec);
    let d2 = dispatch_id(&e, "j", 2);
    let mut r = AttemptResult::failed("j", 1, dispatch_id(&e, "j", 1), FailureKind::Transient, "x");
    r.cost_usd = 0.2;
    let e = rig.result(r);
    assert!(nums(&e).is_empty(), "no retry of the sheet over its limit");
    assert_eq!(rig.core.job_status("j"), Some(JobStatus::Paused));
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Persist(StateChange::Job(c))
        if c.reason.as_deref() == Some("Cost limit: sheet 1 cost $0.2000 exceeds limit $0.1000"))));
    // The sheet in flight finishes; the paused job dispatches nothing more.
    let e = rig.result(AttemptResult::success("j", 2, d2));
    assert!(nums(&e).is_empty());
    let (_, reason) = finished(&e).expect("every sheet is done: the job ends");
    let reason = reason.unwrap_or_default();
    assert!(reason.contains("sheet 1: Cost limit"), "{reason}");
}

#[test]
fn sheet_cost_limit_pauses_the_job_after_a_passing_attempt_and_keeps_the_sheet() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    for s in &mut spec.sheets {
        s.max_cost_usd = Some(0.5);
    }
    let e = rig.register(spec);
    let mut r = AttemptResult::success("j", 1, dispatch_id(&e, "j", 1));
    r.cost_usd = 3.0;
    let e = rig.result(r);
    assert!(nums(&e).is_empty(), "sheet 2 waits: the job is paused");
    assert_eq!(rig.core.job_status("j"), Some(JobStatus::Paused));
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Persist(StateChange::Sheet(c))
        if c.sheet_num == 1 && c.status == SheetStatus::Completed)));
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Persist(StateChange::Job(c))
        if c.reason.as_deref() == Some("Cost limit: sheet 1 cost $3.0000 exceeds limit $0.5000"))));
    // A resume goes on with the other sheets: the limit is checked per sheet, after its
    // own attempts.
    let e = rig.send(Event::ResumeJob {
        job_id: "j".into(),
        new_limits: None,
    });
    assert_eq!(nums(&e), vec![2]);
}

#[test]
fn graceful_shutdown_stops_dispatch_hard_shutdown_kills_without_state_change() {
    let mut rig = Rig::new();
    let e = rig.register(independent("j", 3, 1));
    rig.send(Event::ShutdownRequested { graceful: true });
    let e = rig.succeed("j", 1, &e);
    assert!(nums(&e).is_empty());
    assert_eq!(rig.core.in_flight(), 0);

    let mut rig = Rig::new();
    rig.register(independent("j", 3, 2));
    let e = rig.send(Event::ShutdownRequested { graceful: false });
    assert_eq!(
        e.iter()
            .filter(|x| matches!(x, Effect::Kill { .. }))
            .count(),
        2
    );
    assert!(
        !e.iter().any(|x| matches!(x, Effect::Persist(_))),
        "in-flight stay in progress for restart"
    );
    assert_eq!(rig.core.in_flight(), 0);
}

/// `mozart stop` past `shutdown_timeout_seconds`: the graceful shutdown becomes a forced one
/// before the conductor ends the sheets still running, so they stay in progress for the
/// restart — not a failed attempt, no retry spent (docs/cli.md `mozart stop`).
#[test]
fn a_graceful_shutdown_out_of_time_interrupts_in_flight_sheets_without_state_change() {
    let mut rig = Rig::new();
    rig.register(independent("j", 2, 2));
    let e = rig.send(Event::ShutdownRequested { graceful: true });
    assert!(!e.iter().any(|x| matches!(x, Effect::Kill { .. })));
    assert_eq!(rig.core.in_flight(), 2, "a graceful stop lets them finish");
    let e = rig.send(Event::ShutdownRequested { graceful: false });
    assert_eq!(
        e.iter()
            .filter(|x| matches!(x, Effect::Kill { .. }))
            .count(),
        2
    );
    assert!(
        !e.iter().any(|x| matches!(x, Effect::Persist(_))),
        "interrupted, not failed: {e:?}"
    );
    assert_eq!(rig.core.in_flight(), 0);
}

#[test]
fn config_reload_and_backpressure_change_dispatch() {
    let mut rig = Rig::with(BatonConfig {
        max_concurrent_sheets: 1,
        ..BatonConfig::default()
    });
    rig.send(Event::ResourceAnomaly {
        severity: ResourceSeverity::Critical,
        metric: "memory".into(),
        value: 97.0,
    });
    let e = rig.register(independent("j", 3, 3));
    assert!(nums(&e).is_empty(), "backpressure holds dispatch");
    let e = rig.send(Event::ResourceAnomaly {
        severity: ResourceSeverity::Normal,
        metric: "memory".into(),
        value: 40.0,
    });
    assert_eq!(nums(&e), vec![1]);
    let e = rig.send(Event::ConfigReloaded {
        max_concurrent_sheets: Some(3),
        max_concurrent_jobs: None,
        instruments: vec![],
    });
    assert_eq!(nums(&e), vec![2, 3]);
    assert!(nums(&rig.send(Event::DispatchRetry)).is_empty());
}

#[test]
fn unknown_jobs_and_sheets_are_ignored() {
    let mut rig = Rig::with(BatonConfig {
        emit_observer_events: false,
        ..BatonConfig::default()
    });
    let events = vec![
        Event::RetryDue {
            job_id: "nope".into(),
            sheet_num: 1,
        },
        Event::PauseJob {
            job_id: "nope".into(),
        },
        Event::CancelJob {
            job_id: "nope".into(),
        },
        Event::JobTimeout {
            job_id: "nope".into(),
        },
        Event::PacingComplete {
            job_id: "nope".into(),
        },
        Event::EscalationTimeout {
            job_id: "nope".into(),
            sheet_num: 1,
        },
        Event::CircuitBreakerRecovery {
            instrument: "nope".into(),
        },
        Event::RateLimitExpired {
            instrument: "nope".into(),
            job_id: None,
        },
        Event::RateLimitExpired {
            instrument: "nope".into(),
            job_id: Some("nope".into()),
        },
        Event::StaleCheck {
            job_id: "nope".into(),
            sheet_num: 1,
            dispatch_id: 1,
        },
    ];
    for ev in events {
        assert!(rig.send(ev).is_empty());
    }
}

#[test]
fn observer_events_carry_upstream_names() {
    let mut rig = Rig::new();
    let e = rig.register(chain("j", 1));
    let e = rig.succeed("j", 1, &e);
    let names: Vec<_> = e
        .iter()
        .filter_map(|x| match x {
            Effect::Observer(o) => Some(o.event.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec!["baton.sheet.attempt_result", "job.completed"]);
}

#[test]
fn duplicate_registration_is_ignored() {
    let mut rig = Rig::new();
    rig.register(chain("j", 1));
    let e = rig.register(chain("j", 1));
    assert!(nums(&e).is_empty());
    assert!(e
        .iter()
        .any(|x| matches!(x, Effect::Observer(o) if o.event == "baton.job.duplicate")));
}

#[test]
fn jittered_retry_is_bounded_and_reproducible() {
    let delay_of = |seed: u64| {
        let mut rig = Rig::with(BatonConfig {
            jitter_seed: seed,
            ..BatonConfig::default()
        });
        let mut spec = chain("j", 1);
        spec.sheets[0].retry.jitter = true;
        let e = rig.register(spec);
        let e = rig.fail("j", 1, &e, FailureKind::Transient);
        e.iter()
            .find_map(|x| match x {
                Effect::ScheduleTimer {
                    at,
                    event: Event::RetryDue { .. },
                    ..
                } => Some(at.since(rig.now)),
                _ => None,
            })
            .expect("retry scheduled")
    };
    let a = delay_of(42);
    assert_eq!(a, delay_of(42), "same seed, same delay");
    assert!(
        a >= secs(5) && a < secs(15),
        "10 s base jittered into [5, 15): {a:?}"
    );
}

#[test]
fn only_the_probe_frees_the_half_open_slot() {
    let mut config = BatonConfig::default();
    let mut inst = InstrumentSpec::new("claude-code");
    inst.circuit_breaker_threshold = 1;
    config.instruments.push(inst);
    let mut rig = Rig::with(config);
    let mut spec = independent("j", 4, 4);
    spec.sheets[0].retry.max_retries = 5;
    let first = rig.register(spec);
    assert_eq!(nums(&first), vec![1, 2, 3, 4]);
    rig.fail("j", 1, &first, FailureKind::Transient);
    let e = rig.advance(secs(30));
    assert_eq!(nums(&e), vec![1], "the probe");
    // Sheet 2 was in flight before the breaker opened; it reports a validation failure (not
    // a breaker event). That must not open a second probe slot.
    let mut r = AttemptResult::success("j", 2, dispatch_id(&first, "j", 2));
    r.validations_total = 1;
    r.validation_pass_rate = 0.0;
    rig.result(r);
    let e = rig.advance(secs(10));
    assert!(
        nums(&e).is_empty(),
        "sheet 2's retry waits for the probe: {e:#?}"
    );
}

#[test]
fn process_exit_message_names_pid_and_code() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 1);
    spec.sheets[0].retry.max_retries = 1;
    rig.register(spec);
    let e = rig.send(Event::ProcessExited {
        job_id: "j".into(),
        sheet_num: 1,
        pid: 4242,
        exit_code: Some(137),
    });
    let (_, reason) = finished(&e).expect("finished");
    assert!(reason.is_some());
    assert!(e.iter().any(|x| matches!(x, Effect::Persist(StateChange::Sheet(c))
        if c.reason.as_deref() == Some("Failed after 1 attempt: Backend process 4242 exited unexpectedly with code 137"))));
}

#[test]
fn events_and_effects_round_trip_through_json() {
    let mut rig = Rig::new();
    let mut spec = chain("j", 2);
    spec.timeout = Some(secs(60));
    let event = Event::RegisterJob(Box::new(spec));
    let json = serde_json::to_string(&event).expect("serialize event");
    let back: Event = serde_json::from_str(&json).expect("deserialize event");
    assert_eq!(back, event);
    let mut effects = rig.send(event);
    effects.extend(rig.send(Event::CancelJob { job_id: "j".into() }));
    assert!(effects
        .iter()
        .any(|e| matches!(e, Effect::CancelTimer { .. })));
    for effect in effects {
        let json = serde_json::to_string(&effect).expect("serialize effect");
        let back: Effect = serde_json::from_str(&json).expect("deserialize effect");
        assert_eq!(back, effect);
    }
}

fn job_persists(effects: &[Effect], job: &str) -> Vec<(JobStatus, Option<String>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist(StateChange::Job(c)) if c.job_id == job => {
                Some((c.status, c.reason.clone()))
            }
            _ => None,
        })
        .collect()
}

fn slots(limit: u32) -> Rig {
    Rig::with(BatonConfig {
        jitter_seed: 1,
        max_concurrent_jobs: limit,
        ..BatonConfig::default()
    })
}

#[test]
fn job_slots_queue_jobs_beyond_the_limit_and_admit_them_in_order() {
    let mut rig = slots(2);
    let a = rig.register(chain("a", 1));
    let b = rig.register(chain("b", 1));
    assert_eq!(job_persists(&a, "a"), vec![(JobStatus::Running, None)]);
    assert_eq!(nums(&a), vec![1]);
    assert_eq!(nums(&b), vec![1]);
    let c = rig.register(chain("c", 1));
    assert!(dispatched(&c).is_empty(), "no slot for c: {c:#?}");
    assert_eq!(
        job_persists(&c, "c"),
        vec![(
            JobStatus::Queued,
            Some("waiting for a job slot (max_concurrent_jobs: 2)".to_string())
        )]
    );
    let d = rig.register(chain("d", 1));
    assert!(dispatched(&d).is_empty());
    assert_eq!(rig.core.job_status("d"), Some(JobStatus::Queued));
    assert_eq!(rig.core.jobs_admitted(), 2);
    // b ends first: c (submitted before d) takes the slot, and says so.
    let e = rig.succeed("b", 1, &b);
    assert_eq!(dispatched(&e), vec![("c".to_string(), 1)]);
    assert_eq!(job_persists(&e, "c"), vec![(JobStatus::Running, None)]);
    assert!(
        job_persists(&e, "d").is_empty(),
        "d is still queued, said once"
    );
    let e = rig.succeed("a", 1, &a);
    assert_eq!(dispatched(&e), vec![("d".to_string(), 1)]);
}

/// A waiting job gets a slot before the jobs submitted after it, whatever order they were
/// registered in: a job resumed after a restart (registered last) keeps its place.
#[test]
fn a_slot_goes_to_the_waiting_job_submitted_first_not_registered_first() {
    let mut rig = slots(1);
    let submitted = |job: &str, n: u32, at: f64| {
        let mut spec = chain(job, n);
        spec.submitted_at = Some(at);
        spec
    };
    let a = rig.register(submitted("a", 1, 10.0));
    rig.register(submitted("c", 1, 30.0));
    rig.register(submitted("b", 1, 20.0));
    assert_eq!(rig.core.job_status("b"), Some(JobStatus::Queued));
    assert_eq!(rig.core.job_status("c"), Some(JobStatus::Queued));
    let e = rig.succeed("a", 1, &a);
    assert_eq!(dispatched(&e), vec![("b".to_string(), 1)]);
    assert_eq!(rig.core.job_status("c"), Some(JobStatus::Queued));
}

#[test]
fn a_paused_job_frees_its_slot_once_nothing_runs_and_queues_again_on_resume() {
    let mut rig = slots(1);
    let a = rig.register(chain("a", 2));
    rig.register(chain("b", 1));
    rig.send(Event::PauseJob { job_id: "a".into() });
    assert_eq!(rig.core.job_status("b"), Some(JobStatus::Queued));
    // a's sheet 1 was still running: the slot is freed when it ends.
    let e = rig.succeed("a", 1, &a);
    assert_eq!(dispatched(&e), vec![("b".to_string(), 1)]);
    let e = rig.send(Event::ResumeJob {
        job_id: "a".into(),
        new_limits: None,
    });
    assert!(dispatched(&e).is_empty());
    assert_eq!(rig.core.job_status("a"), Some(JobStatus::Queued));
    assert_eq!(job_persists(&e, "a")[0].0, JobStatus::Queued);
}

#[test]
fn a_reloaded_job_limit_applies_to_the_next_admissions() {
    let mut rig = slots(1);
    rig.register(chain("a", 1));
    rig.register(chain("b", 1));
    rig.register(chain("c", 1));
    let e = rig.send(Event::ConfigReloaded {
        max_concurrent_sheets: None,
        max_concurrent_jobs: Some(2),
        instruments: vec![],
    });
    assert_eq!(dispatched(&e), vec![("b".to_string(), 1)]);
    assert_eq!(
        job_persists(&e, "c"),
        vec![(
            JobStatus::Queued,
            Some("waiting for a job slot (max_concurrent_jobs: 2)".to_string())
        )],
        "the queued job's reason names the new limit"
    );
}

#[test]
fn a_queued_job_can_be_cancelled_and_its_timeout_starts_only_with_its_slot() {
    let mut rig = slots(1);
    let a = rig.register(chain("a", 1));
    let mut spec = chain("b", 1);
    spec.timeout = Some(secs(10));
    rig.register(spec);
    rig.register(chain("c", 1));
    // Queued longer than its timeout: it must not fail for time it never had.
    rig.advance(secs(60));
    assert_eq!(rig.core.job_status("b"), Some(JobStatus::Queued));
    let e = rig.send(Event::CancelJob { job_id: "c".into() });
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Cancelled));
    let e = rig.succeed("a", 1, &a);
    assert_eq!(dispatched(&e), vec![("b".to_string(), 1)]);
    let e = rig.advance(secs(11));
    assert_eq!(finished(&e).map(|f| f.0), Some(JobOutcome::Failed));
}

#[test]
fn no_job_is_admitted_once_a_shutdown_began() {
    let mut rig = slots(1);
    let a = rig.register(chain("a", 1));
    rig.register(chain("b", 1));
    rig.send(Event::ShutdownRequested { graceful: true });
    let e = rig.succeed("a", 1, &a);
    assert!(dispatched(&e).is_empty());
    assert_eq!(rig.core.job_status("b"), Some(JobStatus::Queued));
}

#[test]
fn a_planned_sheet_holds_no_attempt_state() {
    // Issue 24: a planned sheet of a 100,000-sheet job must not carry a running sheet's
    // dispatch id, slots, reasons and timers (~130 bytes before).
    assert!(
        std::mem::size_of::<super::Sheet>() <= 72,
        "Sheet is {} bytes",
        std::mem::size_of::<super::Sheet>()
    );
    let mut rig = Rig::new();
    let mut spec = JobSpec::new("j", (1..=3).map(|n| SheetSpec::new(n, "cli")).collect());
    spec.max_concurrent_sheets = 1;
    let e = rig.register(spec);
    let live = |rig: &Rig| -> Vec<bool> {
        rig.core.jobs[0]
            .sheets
            .iter()
            .map(|s| s.live.is_some())
            .collect()
    };
    assert_eq!(live(&rig), vec![true, false, false]);
    // A sheet that completes with nothing to say gives its attempt state back.
    rig.succeed("j", 1, &e);
    assert_eq!(live(&rig), vec![false, true, false]);
}

#[test]
fn the_ready_set_iterates_in_order_and_skips_emptied_words() {
    let mut ready = super::ReadySet::with_sheets(200);
    for i in [130, 5, 64, 199, 0] {
        assert!(ready.insert(i));
    }
    assert!(!ready.insert(64));
    assert_eq!(ready.iter().collect::<Vec<_>>(), vec![0, 5, 64, 130, 199]);
    assert!(ready.remove(0) && ready.remove(5));
    assert!(!ready.remove(5));
    assert_eq!(ready.first, 1);
    assert_eq!(ready.iter().collect::<Vec<_>>(), vec![64, 130, 199]);
    assert!(ready.insert(3));
    assert_eq!(ready.iter().collect::<Vec<_>>(), vec![3, 64, 130, 199]);
    for i in [3, 64, 130, 199] {
        assert!(ready.remove(i));
    }
    assert!(ready.is_empty());
    assert_eq!(ready.iter().count(), 0);
    // An index past the planned sheets still counts.
    assert!(ready.insert(300));
    assert_eq!(ready.iter().collect::<Vec<_>>(), vec![300]);
}

/// Sheets made one at a time, counting how many whole specs were asked for.
struct CountingSource {
    specs: Vec<SheetSpec>,
    made: std::sync::atomic::AtomicUsize,
}

impl crate::spec::SheetSource for CountingSource {
    fn len(&self) -> usize {
        self.specs.len()
    }
    fn num(&self, i: usize) -> u32 {
        self.specs[i].num
    }
    fn dependencies(&self, i: usize) -> &[u32] {
        &self.specs[i].dependencies
    }
    fn sheet(&self, i: usize) -> SheetSpec {
        self.made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.specs[i].clone()
    }
}

#[test]
fn a_job_whose_sheets_come_from_a_source_runs_as_one_given_them_all() {
    // Issue 24: a large job's sheet specs are made one at a time, each once.
    let mut spec = chain("j", 3);
    spec.sheets[2].dependencies = vec![1];
    let source = std::sync::Arc::new(CountingSource {
        specs: std::mem::take(&mut spec.sheets),
        made: Default::default(),
    });
    spec.source = Some(crate::spec::SheetSourceRef(source.clone()));
    spec.max_concurrent_sheets = 3;
    let mut rig = Rig::new();
    let e = rig.register(spec);
    assert_eq!(dispatched(&e), vec![("j".to_string(), 1)]);
    assert_eq!(source.made.load(std::sync::atomic::Ordering::SeqCst), 3);
    let e = rig.succeed("j", 1, &e);
    assert_eq!(
        dispatched(&e),
        vec![("j".to_string(), 2), ("j".to_string(), 3)]
    );
    // The shape checks read the source too.
    let mut bad = chain("k", 2);
    bad.sheets[0].dependencies = vec![2];
    let bad_source = CountingSource {
        specs: std::mem::take(&mut bad.sheets),
        made: Default::default(),
    };
    bad.source = Some(crate::spec::SheetSourceRef(std::sync::Arc::new(bad_source)));
    let e = rig.register(bad);
    assert!(
        matches!(finished(&e), Some((JobOutcome::Failed, Some(why))) if why.contains("cycle")),
        "{e:#?}"
    );
}
