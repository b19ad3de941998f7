//! The deterministic baton state machine: feed it events and the current time, get effects.
//!
//! No tokio, no I/O, no clock reads: every decision is a pure function of the events seen so
//! far, which is what makes the engine testable by feeding events (architecture: `baton`).

mod backoff;
mod dispatch;
mod handlers;
mod registry;
mod slots;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;

use crate::effect::{
    Effect, InstrumentChange, JobChange, JobOutcome, JobWaitChange, ObserverEvent, SheetChange,
    StateChange, TimerId,
};
use crate::event::Event;
use crate::spec::{BatonConfig, InstrumentSpec, RetryPolicy, SkipSpec};
use crate::status::{AttemptMode, CircuitState, JobStatus, SheetStatus};
use crate::time::Millis;

pub use backoff::{breaker_recovery_delay, jitter_sample, retry_delay};
pub use slots::queued_reason;

/// Whether a sheet's skip rule still has to be asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkipState {
    /// No rule, or already answered "proceed".
    Clear,
    /// A rule exists and has not been evaluated.
    Unevaluated,
    /// [`Effect::EvaluateSkip`] was emitted; waiting for [`Event::SkipEvaluated`].
    Evaluating,
}

/// Resources a dispatched attempt holds, released when it leaves `dispatched`.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    instrument: usize,
    model_slot: Option<usize>,
    /// This attempt is the half-open breaker's single probe.
    probe: bool,
}

/// What a sheet's spec tells the baton to do with it. Shared by the job's sheets whose
/// rules are the same (consecutive sheets of a fan-out nearly always): a planned sheet of a
/// 100,000-sheet job holds a pointer, not its own copy (issue 24).
#[derive(Debug, Clone, PartialEq)]
struct Rules {
    model: Option<String>,
    fallbacks: Vec<String>,
    retry: RetryPolicy,
    max_completion: u32,
    completion_threshold: f64,
    skip: Option<SkipSpec>,
    timeout: Duration,
    cost_limit: Option<f64>,
}

/// Per-sheet execution state (§2.2 `SheetExecutionState`).
#[derive(Debug)]
struct Sheet {
    num: u32,
    status: SheetStatus,
    /// Indexes of the sheets that depend on this one (u32 and boxed: a planned sheet of a
    /// 100,000-sheet job is 72 bytes, issue 24).
    dependents: Box<[u32]>,
    /// Dependencies not yet completed or skipped; ready when zero (O(1) readiness, no scans).
    unmet: u32,
    /// Index of its instrument in the baton's instruments ([`Sheet::inst`]).
    instrument: u32,
    rules: Arc<Rules>,
    fallback_pos: u32,
    skip_state: SkipState,
    normal_attempts: u32,
    completion_attempts: u32,
    healing_attempts: u32,
    total_cost: f64,
    next_mode: AttemptMode,
    /// What only a sheet that ran, or is running, has: boxed, so that a planned sheet of a
    /// 100,000-sheet job costs a pointer instead of ~130 bytes (issue 24). `None` is the same
    /// as an empty [`Live`]; [`Sheet::tidy`] drops an emptied one.
    live: Option<Box<Live>>,
}

/// A sheet's attempt state: the dispatch it waits for, the slots it holds, its timers, and
/// what the last failure and the status's reason say.
#[derive(Debug, Default)]
struct Live {
    dispatch_id: u64,
    in_flight: Option<InFlight>,
    last_failure: Option<String>,
    reason: Option<String>,
    retry_timer: Option<TimerId>,
    /// When the retry timer fires (what a restart must wait out).
    retry_due: Option<Millis>,
    stale_timer: Option<TimerId>,
    escalation_timer: Option<TimerId>,
    /// Attempts made on the instruments the sheet fell back from (their counters start
    /// again on the next one): its attempts keep their numbers across a fallback.
    earlier_attempts: u32,
}

/// What a sheet that never ran reads (no box allocated for it).
static NOT_LIVE: Live = Live {
    dispatch_id: 0,
    in_flight: None,
    last_failure: None,
    reason: None,
    retry_timer: None,
    retry_due: None,
    stale_timer: None,
    escalation_timer: None,
    earlier_attempts: 0,
};

/// Which of a sheet's timers.
#[derive(Debug, Clone, Copy)]
enum SheetTimer {
    Retry,
    Stale,
    Escalation,
}

impl Live {
    /// Nothing in it a reader could tell from [`NOT_LIVE`] (the dispatch id only matters
    /// while an attempt is in flight, which holds its slots).
    fn is_empty(&self) -> bool {
        self.in_flight.is_none()
            && self.last_failure.is_none()
            && self.reason.is_none()
            && self.retry_timer.is_none()
            && self.stale_timer.is_none()
            && self.escalation_timer.is_none()
            && self.earlier_attempts == 0
    }

    fn timer(&mut self, which: SheetTimer) -> &mut Option<TimerId> {
        match which {
            SheetTimer::Retry => &mut self.retry_timer,
            SheetTimer::Stale => &mut self.stale_timer,
            SheetTimer::Escalation => &mut self.escalation_timer,
        }
    }
}

impl Sheet {
    /// The sheet's attempt state (an empty one for a sheet that never ran).
    fn live(&self) -> &Live {
        self.live.as_deref().unwrap_or(&NOT_LIVE)
    }

    /// The sheet's attempt state, boxed on first write.
    fn live_mut(&mut self) -> &mut Live {
        self.live.get_or_insert_with(Box::default)
    }

    /// Take one of the sheet's timers (allocating nothing for a sheet that has none).
    fn take_timer(&mut self, which: SheetTimer) -> Option<TimerId> {
        self.live.as_deref_mut().and_then(|l| l.timer(which).take())
    }

    /// Take the slots an in-flight attempt holds.
    fn take_in_flight(&mut self) -> Option<InFlight> {
        self.live.as_deref_mut().and_then(|l| l.in_flight.take())
    }

    /// Set the status's reason (a `None` allocates nothing).
    fn set_reason(&mut self, reason: Option<String>) {
        match (reason, self.live.as_deref_mut()) {
            (None, None) => {}
            (None, Some(l)) => l.reason = None,
            (reason, _) => self.live_mut().reason = reason,
        }
    }

    /// Drop the attempt state once nothing is in it: a completed sheet of a large job holds
    /// no more than a planned one.
    fn tidy(&mut self) {
        if self.live.as_deref().is_some_and(Live::is_empty) {
            self.live = None;
        }
    }

    fn can_retry(&self) -> bool {
        self.normal_attempts < self.rules.retry.max_retries
    }

    fn has_fallback(&self) -> bool {
        (self.fallback_pos as usize) < self.rules.fallbacks.len()
    }

    /// Index of the sheet's instrument.
    fn inst(&self) -> usize {
        self.instrument as usize
    }

    /// The next attempt's number, counting every attempt the sheet made (on instruments it
    /// fell back from too). A healing attempt is counted, as any attempt, by the normal or
    /// completion count when it ends; `healing_attempts` counts the grants (adding it counted
    /// the healing attempt twice: three attempts ran, numbered 1, 2, 4).
    fn attempt_number(&self) -> u32 {
        self.live().earlier_attempts + self.normal_attempts + self.completion_attempts + 1
    }
}

/// How a sheet ends: terminal status, reason, and whether it actually ran (which starts the
/// pause between sheets).
#[derive(Debug)]
struct Ending {
    status: SheetStatus,
    reason: Option<String>,
    executed: bool,
}

impl Ending {
    fn ran(status: SheetStatus, reason: Option<String>) -> Self {
        Ending {
            status,
            reason,
            executed: true,
        }
    }

    fn not_run(status: SheetStatus, reason: Option<String>) -> Self {
        Ending {
            status,
            reason,
            executed: false,
        }
    }
}

/// Where each sheet number sits in a job's sheets: by arithmetic when they are numbered
/// 1, 2, 3… in order (every job the conductor plans), else by a map — which cost ~30 bytes
/// a sheet (issue 24).
#[derive(Debug)]
enum SheetIndex {
    /// Sheet `n` is at `n - 1`, for `n` in `1..=len`.
    Dense(usize),
    /// Any other numbering.
    Map(HashMap<u32, usize>),
}

impl SheetIndex {
    fn of(nums: impl ExactSizeIterator<Item = u32> + Clone) -> SheetIndex {
        let len = nums.len();
        if nums
            .clone()
            .enumerate()
            .all(|(i, n)| usize::try_from(n).is_ok_and(|n| n == i + 1))
        {
            return SheetIndex::Dense(len);
        }
        SheetIndex::Map(nums.enumerate().map(|(i, n)| (n, i)).collect())
    }

    fn get(&self, num: u32) -> Option<usize> {
        match self {
            SheetIndex::Dense(len) => {
                let n = usize::try_from(num).ok()?;
                (1..=*len).contains(&n).then(|| n - 1)
            }
            SheetIndex::Map(map) => map.get(&num).copied(),
        }
    }
}

/// A job's ready sheets by index: one bit a sheet, where a B-tree set cost ~20 bytes a ready
/// sheet — and every planned sheet of a fan-out is ready (issue 24). Iterates in index
/// order, from the first word that may hold a ready sheet.
#[derive(Debug, Default)]
struct ReadySet {
    words: Vec<u64>,
    len: usize,
    /// No word before this one has a bit set.
    first: usize,
}

impl ReadySet {
    /// An empty set for sheet indexes `0..sheets`.
    fn with_sheets(sheets: usize) -> ReadySet {
        ReadySet {
            words: vec![0; sheets.div_ceil(64)],
            len: 0,
            first: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Add `i`; whether it was not there.
    fn insert(&mut self, i: usize) -> bool {
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        if self.words[w] & bit != 0 {
            return false;
        }
        self.words[w] |= bit;
        self.len += 1;
        self.first = self.first.min(w);
        true
    }

    /// Remove `i`; whether it was there.
    fn remove(&mut self, i: usize) -> bool {
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        match self.words.get_mut(w) {
            Some(word) if *word & bit != 0 => {
                *word &= !bit;
                self.len -= 1;
                // Sheets leave in number order as they are dispatched: move past the
                // emptied words once, so iterating never rescans them.
                while self.first < self.words.len() && self.words[self.first] == 0 {
                    self.first += 1;
                }
                true
            }
            _ => false,
        }
    }

    /// The ready indexes, lowest first.
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let start = self.first.min(self.words.len());
        self.words[start..]
            .iter()
            .enumerate()
            .flat_map(move |(k, &word)| {
                let base = (start + k) * 64;
                std::iter::successors((word != 0).then_some(word), |w| {
                    let rest = w & (w - 1);
                    (rest != 0).then_some(rest)
                })
                .map(move |w| base + w.trailing_zeros() as usize)
            })
    }
}

/// Per-job record (§2.2 `_JobRecord`), plus the readiness bookkeeping.
#[derive(Debug)]
struct Job {
    id: String,
    sheets: Vec<Sheet>,
    index: SheetIndex,
    /// Pending sheets whose dependencies are satisfied and skip rule answered, by sheet index
    /// (sheet-number order for dispatch, §2.8).
    ready: ReadySet,
    /// How many ready sheets each instrument has: lets a dispatch cycle stop as soon as every
    /// instrument this job needs is blocked, instead of scanning the whole ready set.
    ready_per_instrument: Vec<(usize, u32)>,
    running: u32,
    max_concurrent: u32,
    pause_between: Duration,
    pacing_until: Option<Millis>,
    pacing_timer: Option<TimerId>,
    user_paused: bool,
    cost_paused: bool,
    escalation_paused: bool,
    cost_limit: Option<f64>,
    total_cost: f64,
    escalation_enabled: bool,
    self_healing_enabled: bool,
    escalation_timeout: Option<Duration>,
    timeout: Option<Duration>,
    timeout_timer: Option<TimerId>,
    started_at: Millis,
    terminal: usize,
    cancelled: bool,
    failure_reason: Option<String>,
    /// Persistence failed: no new dispatches until the host recovers (brief: never continue as
    /// if saved).
    halted: bool,
    finished: bool,
    /// Holds one of the `max_concurrent_jobs` slots: only such a job dispatches.
    admitted: bool,
    /// Its place in the queue for a slot: its submission (epoch seconds).
    submitted_at: f64,
    /// The job's clock (`started_at`, the job timeout) runs from its first admission, not
    /// from the time it spent queued; a resume starts it again.
    clock_started: bool,
    /// When the clock of the run a restart continues started (taken at its admission).
    restored_clock: Option<Millis>,
    /// The job status last persisted by the baton (what the registry shows), so the slot
    /// bookkeeping persists each queued/running transition once.
    shown: Option<JobStatus>,
    /// The job's own rate-limit waits, by instrument index (instruments whose limits hold
    /// one job only, [`Instrument::per_job`]).
    rate_waits: Vec<(usize, RateWait)>,
    /// Sheets whose skip rule the host is evaluating. A job that plays one sheet at a time
    /// dispatches none meanwhile: the sheet-number order must not depend on which answer
    /// comes first (a voice whose skip is answered late ran after the next one).
    skips_pending: u32,
}

impl Job {
    fn paused(&self) -> bool {
        self.user_paused || self.cost_paused || self.escalation_paused
    }

    fn status(&self) -> JobStatus {
        if self.paused() {
            JobStatus::Paused
        } else if self.admitted {
            JobStatus::Running
        } else {
            JobStatus::Queued
        }
    }

    /// The job's own wait on instrument `ii`, if it has one.
    fn rate_wait(&self, ii: usize) -> Option<&RateWait> {
        self.rate_waits
            .iter()
            .find(|(i, _)| *i == ii)
            .map(|(_, w)| w)
    }

    fn ready_insert(&mut self, si: usize) {
        if self.ready.insert(si) {
            let inst = self.sheets[si].inst();
            match self
                .ready_per_instrument
                .iter_mut()
                .find(|(i, _)| *i == inst)
            {
                Some((_, n)) => *n += 1,
                None => self.ready_per_instrument.push((inst, 1)),
            }
        }
    }

    fn ready_remove(&mut self, si: usize) {
        if self.ready.remove(si) {
            let inst = self.sheets[si].inst();
            if let Some(pos) = self
                .ready_per_instrument
                .iter()
                .position(|(i, _)| *i == inst)
            {
                self.ready_per_instrument[pos].1 -= 1;
                if self.ready_per_instrument[pos].1 == 0 {
                    self.ready_per_instrument.swap_remove(pos);
                }
            }
        }
    }
}

/// Per-model concurrency slot on an instrument.
#[derive(Debug)]
struct ModelSlot {
    name: String,
    limit: u32,
    running: u32,
}

/// A rate limit's wait (invariant 2: tempo, not failure): until when, why, the run of limits
/// it belongs to, its timer and the sheets parked in `waiting` on it. An instrument has one,
/// which holds every job's sheets; an instrument whose limits hold one job only
/// ([`Instrument::per_job`]) has one per job that hit a limit on it ([`Job::rate_waits`]).
#[derive(Debug, Default)]
struct RateWait {
    until: Option<Millis>,
    /// What parked it (shown by `status`; persisted with the limit).
    reason: Option<String>,
    /// Rate limits in a row (each hit while not already waiting counts), for the probe
    /// schedule; any other result ends the streak.
    streak: u32,
    timer: Option<TimerId>,
    /// Sheets parked in `waiting` on this wait.
    waiting: Vec<(String, u32)>,
}

impl RateWait {
    fn active(&self, now: Millis) -> bool {
        self.until.is_some_and(|until| until > now)
    }

    /// Nothing left of it: no wait, no run of limits, no timer, no sheet.
    fn is_idle(&self) -> bool {
        self.until.is_none() && self.streak == 0 && self.timer.is_none() && self.waiting.is_empty()
    }
}

/// Whose rate-limit wait: an instrument's (every job's sheets on it), or one job's on an
/// instrument (job index, instrument index).
#[derive(Debug, Clone, Copy)]
enum WaitScope {
    Instrument(usize),
    Job(usize, usize),
}

/// Per-instrument state (§2.2 `InstrumentState`).
#[derive(Debug)]
struct Instrument {
    name: String,
    max_concurrent: u32,
    running: u32,
    models: Vec<ModelSlot>,
    /// The instrument's rate-limit wait (every job's sheets on it wait).
    limit: RateWait,
    /// A rate limit holds back only the sheets of the job that hit it
    /// ([`InstrumentSpec::rate_limit_per_job`]).
    per_job: bool,
    circuit: CircuitState,
    consecutive_failures: u32,
    threshold: u32,
    recovery: Duration,
    max_recovery: Duration,
    probe_in_flight: bool,
    recovery_timer: Option<TimerId>,
    /// The last counted failure's message, and why the breaker opened (shown by `status`).
    last_failure: Option<String>,
    breaker_reason: Option<String>,
    /// When the open breaker lets its probe through.
    breaker_until: Option<Millis>,
}

impl Instrument {
    fn from_spec(spec: &InstrumentSpec) -> Self {
        Instrument {
            name: spec.name.clone(),
            max_concurrent: spec.max_concurrent.max(1),
            running: 0,
            models: spec
                .model_limits
                .iter()
                .map(|(name, limit)| ModelSlot {
                    name: name.clone(),
                    limit: *limit,
                    running: 0,
                })
                .collect(),
            limit: RateWait {
                until: spec.rate_limited_until,
                ..RateWait::default()
            },
            per_job: spec.rate_limit_per_job,
            circuit: CircuitState::Closed,
            consecutive_failures: 0,
            threshold: spec.circuit_breaker_threshold.max(1),
            recovery: spec.circuit_breaker_recovery,
            max_recovery: spec.circuit_breaker_max_recovery,
            probe_in_flight: false,
            recovery_timer: None,
            last_failure: None,
            breaker_reason: None,
            breaker_until: None,
        }
    }

    fn update_limits(&mut self, spec: &InstrumentSpec) {
        self.max_concurrent = spec.max_concurrent.max(1);
        self.threshold = spec.circuit_breaker_threshold.max(1);
        self.recovery = spec.circuit_breaker_recovery;
        self.max_recovery = spec.circuit_breaker_max_recovery;
        self.per_job = spec.rate_limit_per_job;
        for (name, limit) in &spec.model_limits {
            match self.models.iter_mut().find(|m| &m.name == name) {
                Some(slot) => slot.limit = *limit,
                None => self.models.push(ModelSlot {
                    name: name.clone(),
                    limit: *limit,
                    running: 0,
                }),
            }
        }
    }

    fn change(&self) -> InstrumentChange {
        InstrumentChange {
            instrument: self.name.clone(),
            rate_limited_until: self.limit.until,
            rate_limit_reason: self
                .limit
                .reason
                .clone()
                .filter(|_| self.limit.until.is_some()),
            rate_limit_streak: self.limit.streak,
            circuit: self.circuit,
            circuit_reason: self
                .breaker_reason
                .clone()
                .filter(|_| self.circuit != CircuitState::Closed),
            circuit_until: self
                .breaker_until
                .filter(|_| self.circuit == CircuitState::Open),
            consecutive_failures: self.consecutive_failures,
        }
    }
}

/// Snapshot of one sheet, for status queries and tests: the fields the baton persists.
pub type SheetView = SheetChange;

/// The baton: per-job, per-sheet and per-instrument state machines plus dispatch.
#[derive(Debug)]
pub struct BatonCore {
    max_concurrent_sheets: u32,
    /// Job slots (0 = no limit).
    max_concurrent_jobs: u32,
    default_instrument_concurrency: u32,
    rate_limit_probe: Vec<Duration>,
    stale_grace: Option<Duration>,
    emit_observer: bool,
    jitter_seed: u64,
    jobs: IndexMap<String, Job>,
    instruments: Vec<Instrument>,
    instrument_index: HashMap<String, usize>,
    global_running: u32,
    next_timer: u64,
    next_dispatch: u64,
    shutting_down: bool,
    backpressure: bool,
    booted: bool,
    scratch: Vec<usize>,
    blocked_scratch: Vec<usize>,
}

impl BatonCore {
    /// A baton with the given limits and no jobs.
    pub fn new(config: BatonConfig) -> Self {
        let mut core = BatonCore {
            max_concurrent_sheets: config.max_concurrent_sheets.max(1),
            max_concurrent_jobs: config.max_concurrent_jobs,
            default_instrument_concurrency: config.default_instrument_concurrency.max(1),
            rate_limit_probe: config.rate_limit_probe,
            stale_grace: config.stale_grace,
            emit_observer: config.emit_observer_events,
            jitter_seed: config.jitter_seed,
            jobs: IndexMap::new(),
            instruments: Vec::new(),
            instrument_index: HashMap::new(),
            global_running: 0,
            next_timer: 1,
            next_dispatch: 1,
            shutting_down: false,
            backpressure: false,
            booted: false,
            scratch: Vec::new(),
            blocked_scratch: Vec::new(),
        };
        for spec in &config.instruments {
            core.upsert_instrument(spec);
        }
        core
    }

    /// Handle one event at time `now`, appending the resulting effects to `out` in the order
    /// they must be carried out. Never panics on unknown jobs/sheets: those events are ignored.
    pub fn handle(&mut self, event: Event, now: Millis, out: &mut Vec<Effect>) {
        if !self.booted {
            self.boot(now, out);
        }
        if self.emit_observer {
            out.push(Effect::Observer(observer_for(&event, now)));
        }
        self.apply(event, now, out);
        self.admit_jobs(now, out);
        self.dispatch_cycle(now, out, 0);
        self.reap_finished();
    }

    /// Convenience wrapper around [`BatonCore::handle`] returning a fresh vector.
    pub fn handle_collect(&mut self, event: Event, now: Millis) -> Vec<Effect> {
        let mut out = Vec::new();
        self.handle(event, now, &mut out);
        out
    }

    /// The host could not persist a change of `job_id`: stop dispatching that job (in-flight
    /// sheets still report) until [`BatonCore::persistence_recovered`] is called.
    pub fn persistence_failed(&mut self, job_id: &str) {
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.halted = true;
        }
    }

    /// The driver dropped a [`Effect::Dispatch`] (its job's persistence failed): the attempt
    /// never started, so give its slots back and leave the sheet pending without spending a
    /// retry. Returns the effects (timer cancellations) to carry out.
    pub fn dispatch_not_started(&mut self, job_id: &str, sheet_num: u32) -> Vec<Effect> {
        let mut out = Vec::new();
        let Some((ji, si)) = self.locate(job_id, sheet_num) else {
            return out;
        };
        if self.jobs[ji].sheets[si].status != SheetStatus::Dispatched {
            return out;
        }
        self.release(ji, si);
        let job = &mut self.jobs[ji];
        let sheet = &mut job.sheets[si];
        sheet.status = SheetStatus::Pending;
        Self::cancel_sheet_timer(&mut out, sheet, SheetTimer::Stale);
        job.ready_insert(si);
        out
    }

    /// Persistence works again for `job_id`: dispatching may resume on the next event.
    pub fn persistence_recovered(&mut self, job_id: &str) {
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.halted = false;
        }
    }

    /// Sheets currently dispatched across all jobs.
    pub fn in_flight(&self) -> u32 {
        self.global_running
    }

    /// Whether a shutdown was requested.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Ids of live (unfinished) jobs in registration order.
    pub fn job_ids(&self) -> impl Iterator<Item = &str> {
        self.jobs.keys().map(String::as_str)
    }

    /// Current status of a live job.
    pub fn job_status(&self, job_id: &str) -> Option<JobStatus> {
        self.jobs.get(job_id).map(Job::status)
    }

    /// Snapshot of one sheet of a live job.
    pub fn sheet(&self, job_id: &str, sheet_num: u32) -> Option<SheetView> {
        let (ji, _, job) = self.jobs.get_full(job_id)?;
        let si = job.index.get(sheet_num)?;
        Some(self.sheet_change(ji, si))
    }

    /// Circuit-breaker state of an instrument, if known.
    pub fn circuit_state(&self, instrument: &str) -> Option<CircuitState> {
        self.instrument_index
            .get(instrument)
            .map(|&i| self.instruments[i].circuit)
    }

    /// When an instrument's rate limit ends, if it is parked (for every job).
    pub fn rate_limited_until(&self, instrument: &str) -> Option<Millis> {
        self.instrument_index
            .get(instrument)
            .and_then(|&i| self.instruments[i].limit.until)
    }

    /// When a live job's own rate-limit wait on an instrument ends, if its sheets on it wait
    /// (instruments whose limits hold one job only).
    pub fn job_rate_limited_until(&self, job_id: &str, instrument: &str) -> Option<Millis> {
        let ii = *self.instrument_index.get(instrument)?;
        self.jobs.get(job_id)?.rate_wait(ii)?.until
    }

    // ---- shared helpers -------------------------------------------------------------------

    /// Schedule timers for state restored at construction (rate limits that outlive a restart).
    fn boot(&mut self, now: Millis, out: &mut Vec<Effect>) {
        self.booted = true;
        for ii in 0..self.instruments.len() {
            match self.instruments[ii].limit.until {
                Some(until) if until > now => {
                    let event = self.expiry_event(WaitScope::Instrument(ii));
                    let id = self.timer(out, until, event);
                    self.instruments[ii].limit.timer = Some(id);
                }
                Some(_) => self.instruments[ii].limit.until = None,
                None => {}
            }
        }
    }

    fn upsert_instrument(&mut self, spec: &InstrumentSpec) -> usize {
        if let Some(&ii) = self.instrument_index.get(&spec.name) {
            self.instruments[ii].update_limits(spec);
            return ii;
        }
        let ii = self.instruments.len();
        self.instruments.push(Instrument::from_spec(spec));
        self.instrument_index.insert(spec.name.clone(), ii);
        ii
    }

    /// Index of an instrument, auto-registering unknown names (§2.10: limit 4 by default).
    fn instrument_idx(&mut self, name: &str) -> usize {
        if let Some(&ii) = self.instrument_index.get(name) {
            return ii;
        }
        let mut spec = InstrumentSpec::new(name);
        spec.max_concurrent = self.default_instrument_concurrency;
        self.upsert_instrument(&spec)
    }

    fn timer(&mut self, out: &mut Vec<Effect>, at: Millis, event: Event) -> TimerId {
        let id = TimerId(self.next_timer);
        self.next_timer += 1;
        out.push(Effect::ScheduleTimer { id, at, event });
        id
    }

    fn cancel_timer(out: &mut Vec<Effect>, slot: &mut Option<TimerId>) {
        if let Some(id) = slot.take() {
            out.push(Effect::CancelTimer { id });
        }
    }

    /// Cancel one of a sheet's timers, if it has it.
    fn cancel_sheet_timer(out: &mut Vec<Effect>, sheet: &mut Sheet, which: SheetTimer) {
        if let Some(id) = sheet.take_timer(which) {
            out.push(Effect::CancelTimer { id });
        }
    }

    fn locate(&self, job_id: &str, sheet_num: u32) -> Option<(usize, usize)> {
        let (ji, _, job) = self.jobs.get_full(job_id)?;
        if job.finished {
            return None;
        }
        let si = job.index.get(sheet_num)?;
        Some((ji, si))
    }

    fn job_index(&self, job_id: &str) -> Option<usize> {
        match self.jobs.get_full(job_id) {
            Some((ji, _, job)) if !job.finished => Some(ji),
            _ => None,
        }
    }

    fn persist_sheet(&self, ji: usize, si: usize, out: &mut Vec<Effect>) {
        out.push(Effect::Persist(StateChange::Sheet(
            self.sheet_change(ji, si),
        )));
    }

    /// A sheet's persisted fields as they are now.
    fn sheet_change(&self, ji: usize, si: usize) -> SheetChange {
        let job = &self.jobs[ji];
        let sheet = &job.sheets[si];
        SheetChange {
            job_id: job.id.clone(),
            sheet_num: sheet.num,
            status: sheet.status,
            normal_attempts: sheet.normal_attempts,
            completion_attempts: sheet.completion_attempts,
            healing_attempts: sheet.healing_attempts,
            instrument: self.instruments[sheet.inst()].name.clone(),
            total_cost_usd: sheet.total_cost,
            reason: sheet.live().reason.clone(),
            retry_due: if sheet.status == SheetStatus::RetryScheduled {
                sheet.live().retry_due
            } else {
                None
            },
        }
    }

    fn persist_job(
        &mut self,
        ji: usize,
        status: JobStatus,
        reason: Option<String>,
        out: &mut Vec<Effect>,
    ) {
        let job = &mut self.jobs[ji];
        job.shown = Some(status);
        out.push(Effect::Persist(StateChange::Job(JobChange {
            job_id: job.id.clone(),
            status,
            reason,
            total_cost_usd: job.total_cost,
            cost_limit_reached: job.cost_paused,
            clock_started_at: job.clock_started.then_some(job.started_at),
        })));
    }

    fn persist_instrument(&self, ii: usize, out: &mut Vec<Effect>) {
        out.push(Effect::Persist(StateChange::Instrument(
            self.instruments[ii].change(),
        )));
    }

    /// Whose wait a rate limit of job `ji`'s sheet on instrument `ii` is.
    fn wait_scope(&self, ji: usize, ii: usize) -> WaitScope {
        if self.instruments[ii].per_job {
            WaitScope::Job(ji, ii)
        } else {
            WaitScope::Instrument(ii)
        }
    }

    /// The wait of `scope`, if there is one.
    fn rate_wait(&self, scope: WaitScope) -> Option<&RateWait> {
        match scope {
            WaitScope::Instrument(ii) => Some(&self.instruments[ii].limit),
            WaitScope::Job(ji, ii) => self.jobs[ji].rate_wait(ii),
        }
    }

    /// The wait of `scope`, made for a job that had none.
    fn rate_wait_mut(&mut self, scope: WaitScope) -> &mut RateWait {
        match scope {
            WaitScope::Instrument(ii) => &mut self.instruments[ii].limit,
            WaitScope::Job(ji, ii) => {
                let waits = &mut self.jobs[ji].rate_waits;
                let pos = match waits.iter().position(|(i, _)| *i == ii) {
                    Some(pos) => pos,
                    None => {
                        waits.push((ii, RateWait::default()));
                        waits.len() - 1
                    }
                };
                &mut waits[pos].1
            }
        }
    }

    /// Drop a job's wait once nothing is left of it.
    fn tidy_wait(&mut self, scope: WaitScope) {
        if let WaitScope::Job(ji, ii) = scope {
            self.jobs[ji]
                .rate_waits
                .retain(|(i, w)| *i != ii || !w.is_idle());
        }
    }

    /// The timer event that ends the wait of `scope`.
    fn expiry_event(&self, scope: WaitScope) -> Event {
        match scope {
            WaitScope::Instrument(ii) => Event::RateLimitExpired {
                instrument: self.instruments[ii].name.clone(),
                job_id: None,
            },
            WaitScope::Job(ji, ii) => Event::RateLimitExpired {
                instrument: self.instruments[ii].name.clone(),
                job_id: Some(self.jobs[ji].id.clone()),
            },
        }
    }

    /// Persist the wait of `scope` as it is now (the instrument's row, or the job's).
    fn persist_wait(&self, scope: WaitScope, out: &mut Vec<Effect>) {
        match scope {
            WaitScope::Instrument(ii) => self.persist_instrument(ii, out),
            WaitScope::Job(ji, ii) => {
                let wait = self.jobs[ji].rate_wait(ii);
                let until = wait.and_then(|w| w.until);
                out.push(Effect::Persist(StateChange::JobWait(JobWaitChange {
                    job_id: self.jobs[ji].id.clone(),
                    instrument: self.instruments[ii].name.clone(),
                    rate_limited_until: until,
                    rate_limit_reason: wait
                        .and_then(|w| w.reason.clone())
                        .filter(|_| until.is_some()),
                    rate_limit_streak: wait.map_or(0, |w| w.streak),
                })));
            }
        }
    }

    fn observe(
        &self,
        out: &mut Vec<Effect>,
        job_id: &str,
        sheet_num: u32,
        event: &str,
        data: serde_json::Value,
        now: Millis,
    ) {
        if self.emit_observer {
            out.push(Effect::Observer(ObserverEvent {
                job_id: job_id.to_owned(),
                sheet_num,
                event: event.to_owned(),
                data,
                at: now,
            }));
        }
    }

    /// Give back the concurrency slots an in-flight attempt holds.
    fn release(&mut self, ji: usize, si: usize) {
        let Some(flight) = self.jobs[ji].sheets[si].take_in_flight() else {
            return;
        };
        let job = &mut self.jobs[ji];
        job.running = job.running.saturating_sub(1);
        self.global_running = self.global_running.saturating_sub(1);
        let inst = &mut self.instruments[flight.instrument];
        inst.running = inst.running.saturating_sub(1);
        if let Some(slot) = flight.model_slot {
            inst.models[slot].running = inst.models[slot].running.saturating_sub(1);
        }
        if flight.probe {
            inst.probe_in_flight = false;
        }
    }

    /// Move a sheet back to `pending` (retry due, rate limit over, escalation retry...).
    fn requeue(&mut self, ji: usize, si: usize, mode: AttemptMode, out: &mut Vec<Effect>) {
        self.release(ji, si);
        {
            let sheet = &mut self.jobs[ji].sheets[si];
            sheet.status = SheetStatus::Pending;
            sheet.next_mode = mode;
            Self::cancel_sheet_timer(out, sheet, SheetTimer::Retry);
            Self::cancel_sheet_timer(out, sheet, SheetTimer::Stale);
        }
        self.persist_sheet(ji, si, out);
        self.make_ready(ji, si, out);
    }

    /// A pending sheet whose dependencies are met joins the ready set, after its skip rule.
    fn make_ready(&mut self, ji: usize, si: usize, out: &mut Vec<Effect>) {
        let job = &mut self.jobs[ji];
        let sheet = &mut job.sheets[si];
        if sheet.status != SheetStatus::Pending || sheet.unmet > 0 {
            return;
        }
        match sheet.skip_state {
            SkipState::Clear => job.ready_insert(si),
            SkipState::Evaluating => {}
            SkipState::Unevaluated => {
                sheet.skip_state = SkipState::Evaluating;
                job.skips_pending += 1;
                if let Some(rule) = sheet.rules.skip.clone() {
                    let sheet_num = sheet.num;
                    out.push(Effect::EvaluateSkip {
                        job_id: job.id.clone(),
                        sheet_num,
                        rule,
                    });
                } else {
                    sheet.skip_state = SkipState::Clear;
                    job.ready_insert(si);
                }
            }
        }
    }

    /// Put a sheet into a terminal status, persist it, then unblock or fail its dependents
    /// (§2.6) and finish the job when nothing is left. `executed` marks a sheet that actually
    /// ran, which starts the pause between sheets.
    fn finish_sheet(
        &mut self,
        ji: usize,
        si: usize,
        end: Ending,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let Ending {
            status,
            reason,
            executed,
        } = end;
        debug_assert!(status.is_terminal());
        if self.jobs[ji].sheets[si].status.is_terminal() {
            return;
        }
        let root_num = self.jobs[ji].sheets[si].num;
        let mut work = vec![(si, status, reason)];
        let mut visited: Option<Vec<bool>> = None;
        while let Some((i, st, why)) = work.pop() {
            if self.jobs[ji].sheets[i].status.is_terminal() {
                // §2.6: traversal continues through terminal sheets.
                if st == SheetStatus::Failed && i != si {
                    let seen =
                        visited.get_or_insert_with(|| vec![false; self.jobs[ji].sheets.len()]);
                    if !seen[i] {
                        seen[i] = true;
                        let deps = self.jobs[ji].sheets[i].dependents.clone();
                        for d in deps {
                            work.push((d as usize, SheetStatus::Failed, blocked_reason(root_num)));
                        }
                    }
                }
                continue;
            }
            self.release(ji, i);
            let job = &mut self.jobs[ji];
            job.ready_remove(i);
            let sheet = &mut job.sheets[i];
            let was = sheet.status;
            sheet.status = st;
            sheet.set_reason(why);
            sheet.skip_state = SkipState::Clear;
            Self::cancel_sheet_timer(out, sheet, SheetTimer::Retry);
            Self::cancel_sheet_timer(out, sheet, SheetTimer::Stale);
            Self::cancel_sheet_timer(out, sheet, SheetTimer::Escalation);
            sheet.tidy();
            job.terminal += 1;
            if was == SheetStatus::Fermata {
                self.fermata_closed(ji, out);
            }
            self.persist_sheet(ji, i, out);
            let dependents = self.jobs[ji].sheets[i].dependents.clone();
            if st.satisfies_dependents() {
                for d in dependents {
                    let d = d as usize;
                    let dep = &mut self.jobs[ji].sheets[d];
                    dep.unmet = dep.unmet.saturating_sub(1);
                    if dep.unmet == 0 {
                        self.make_ready(ji, d, out);
                    }
                }
            } else if st == SheetStatus::Failed {
                for d in dependents {
                    work.push((d as usize, SheetStatus::Failed, blocked_reason(root_num)));
                }
            }
        }
        if executed {
            self.start_pacing(ji, now, out);
        }
        self.check_job_done(ji, now, out);
    }

    /// A fermata ended; unpause the job once none is left (§2.4 `EscalationResolved`).
    fn fermata_closed(&mut self, ji: usize, out: &mut Vec<Effect>) {
        let job = &self.jobs[ji];
        let open = job.sheets.iter().any(|s| s.status == SheetStatus::Fermata);
        if !open && job.escalation_paused {
            self.jobs[ji].escalation_paused = false;
            let status = self.jobs[ji].status();
            if status == JobStatus::Running {
                self.persist_job(ji, status, None, out);
            }
        }
    }

    fn start_pacing(&mut self, ji: usize, now: Millis, out: &mut Vec<Effect>) {
        let job = &self.jobs[ji];
        if job.pause_between.is_zero() || job.terminal == job.sheets.len() {
            return;
        }
        let until = now.plus(job.pause_between);
        let job_id = job.id.clone();
        let mut slot = self.jobs[ji].pacing_timer.take();
        Self::cancel_timer(out, &mut slot);
        let id = self.timer(out, until, Event::PacingComplete { job_id });
        let job = &mut self.jobs[ji];
        job.pacing_until = Some(until);
        job.pacing_timer = Some(id);
        // Ours: `status` says the job is pausing between sheets, not idle for no reason.
        let (job_id, seconds) = (job.id.clone(), job.pause_between.as_secs_f64());
        self.observe(
            out,
            &job_id,
            0,
            "baton.pacing.started",
            serde_json::json!({ "seconds": seconds }),
            now,
        );
    }

    /// Pause the job when its cost exceeds the limit (strictly, §2.4 `_check_job_cost_limit`).
    fn check_job_cost(&mut self, ji: usize, out: &mut Vec<Effect>) {
        let job = &self.jobs[ji];
        let Some(limit) = job.cost_limit else { return };
        if job.total_cost > limit && !job.cost_paused && !job.finished {
            let reason = format!(
                "Cost limit: job cost ${:.4} exceeds limit ${:.4}",
                job.total_cost, limit
            );
            self.jobs[ji].cost_paused = true;
            self.persist_job(ji, JobStatus::Paused, Some(reason), out);
        }
    }

    /// Finish the job once every sheet is terminal: persist first, then announce.
    fn check_job_done(&mut self, ji: usize, now: Millis, out: &mut Vec<Effect>) {
        let job = &self.jobs[ji];
        if job.finished || job.terminal < job.sheets.len() {
            return;
        }
        let (outcome, reason) = if job.cancelled {
            (JobOutcome::Cancelled, Some("Job cancelled".to_owned()))
        } else if let Some(reason) = &job.failure_reason {
            (JobOutcome::Failed, Some(reason.clone()))
        } else {
            let failed: Vec<u32> = job
                .sheets
                .iter()
                .filter(|s| matches!(s.status, SheetStatus::Failed | SheetStatus::Cancelled))
                .map(|s| s.num)
                .collect();
            if failed.is_empty() {
                (JobOutcome::Completed, None)
            } else {
                // Say why: the first sheet that failed by itself (the others may only be
                // blocked by it), so `run`, `wait` and `status` name the cause.
                let cause = job
                    .sheets
                    .iter()
                    .filter(|s| s.status == SheetStatus::Failed)
                    .find_map(|s| Some((s.num, s.live().last_failure.as_deref()?)))
                    .map(|(num, why)| {
                        let why: String = why.chars().take(300).collect();
                        format!(" — sheet {num}: {why}")
                    })
                    .unwrap_or_default();
                (
                    JobOutcome::Failed,
                    Some(format!("{} failed{cause}", failed_sheets(&failed))),
                )
            }
        };
        self.end_job_waits(ji, out);
        self.persist_job(ji, outcome.status(), reason.clone(), out);
        let job = &mut self.jobs[ji];
        job.finished = true;
        let job_id = job.id.clone();
        Self::cancel_timer(out, &mut job.timeout_timer);
        Self::cancel_timer(out, &mut job.pacing_timer);
        let elapsed = now.since(job.started_at).as_secs_f64();
        self.observe(
            out,
            &job_id,
            0,
            if outcome == JobOutcome::Completed {
                "job.completed"
            } else {
                "job.failed"
            },
            serde_json::json!({"outcome": outcome, "reason": reason, "elapsed_seconds": elapsed}),
            now,
        );
        out.push(Effect::JobFinished {
            job_id,
            outcome,
            reason,
        });
    }

    /// A job that ends waits for nothing: its own rate-limit waits end, and their
    /// persisted deadlines with them.
    fn end_job_waits(&mut self, ji: usize, out: &mut Vec<Effect>) {
        let waits = std::mem::take(&mut self.jobs[ji].rate_waits);
        for (ii, mut wait) in waits {
            Self::cancel_timer(out, &mut wait.timer);
            if wait.until.is_some() {
                self.persist_wait(WaitScope::Job(ji, ii), out);
            }
        }
    }

    /// Drop finished jobs at the end of an event (indices stay valid during handling).
    fn reap_finished(&mut self) {
        if self.jobs.values().any(|j| j.finished) {
            self.jobs.retain(|_, j| !j.finished);
        }
    }
}

/// How many failed sheets a job's error names before it says how many more there are.
const FAILED_SHEETS_NAMED: usize = 10;

/// `sheets [2, 3] failed` as upstream names them; past [`FAILED_SHEETS_NAMED`] the first few and
/// how many more (`sheets [1, 2, … 10] and 9,990 more`), so the error of a job with thousands of
/// failed sheets is one readable line wherever it is shown.
fn failed_sheets(failed: &[u32]) -> String {
    if failed.len() <= FAILED_SHEETS_NAMED {
        return format!("sheets {failed:?}");
    }
    let more = failed.len() - FAILED_SHEETS_NAMED;
    format!(
        "sheets {:?} and {} more",
        &failed[..FAILED_SHEETS_NAMED],
        thousands(more)
    )
}

/// `9990` → `9,990`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn blocked_reason(root: u32) -> Option<String> {
    Some(format!("Blocked by failed dependency: sheet {root} failed"))
}

/// Observer record for an incoming event (§2.3 `to_observer_event`).
fn observer_for(event: &Event, now: Millis) -> ObserverEvent {
    use serde_json::json;
    let data = match event {
        Event::SheetAttemptResult(r) => json!({
            "instrument": r.instrument,
            "model": r.model_used,
            "dispatch_id": r.dispatch_id,
            "success": r.execution_success,
            "validation_pass_rate": r.validation_pass_rate,
            "cost_usd": r.cost_usd,
            "rate_limited": r.is_rate_limited_failure(),
            "duration_seconds": r.duration.as_secs_f64(),
            "error_classification": r.failure.as_ref().map(|f| f.kind.as_str()),
        }),
        Event::SheetSkipped { reason, .. } => json!({"reason": reason}),
        Event::SkipEvaluated { skip_reason, .. } => json!({"skip_reason": skip_reason}),
        Event::RateLimitHit {
            instrument, wait, ..
        } => {
            json!({"instrument": instrument, "estimated_seconds": wait.as_secs_f64()})
        }
        Event::RateLimitExpired { instrument, .. } => json!({"instrument": instrument}),
        Event::ClearRateLimit { instrument } => json!({"instrument": instrument}),
        Event::EscalationNeeded { reason, .. } => json!({"reason": reason, "options": []}),
        Event::EscalationResolved { decision, .. } => json!({"decision": decision}),
        Event::CircuitBreakerRecovery { instrument } => json!({"instrument": instrument}),
        Event::PauseJob { .. } => json!({"reason": "user"}),
        Event::ResumeJob { new_limits, .. } => json!({"config_changed": new_limits.is_some()}),
        Event::ShutdownRequested { graceful } => json!({"graceful": graceful}),
        Event::ProcessExited { pid, exit_code, .. } => json!({"pid": pid, "exit_code": exit_code}),
        Event::ResourceAnomaly {
            severity,
            metric,
            value,
        } => {
            json!({"severity": severity, "metric": metric, "value": value})
        }
        Event::RegisterJob(spec) => json!({"sheet_count": spec.sheet_count()}),
        _ => json!({}),
    };
    ObserverEvent {
        job_id: event.job_id().unwrap_or("").to_owned(),
        sheet_num: event.sheet_num(),
        event: event.observer_name().to_owned(),
        data,
        at: now,
    }
}

#[cfg(test)]
mod tests;
