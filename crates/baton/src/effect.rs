//! What the core asks its driver to do, in order.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::spec::SkipSpec;
use crate::status::{AttemptMode, CircuitState, JobStatus, SheetStatus};
use crate::time::Millis;

/// Identifier of a timer the core scheduled (so it can cancel it later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TimerId(pub u64);

/// Prompt suffix for completion attempts (upstream's exact text, §2.10 step 4).
pub const COMPLETION_SUFFIX: &str =
    "Some validations passed but not all. Review what's done and complete the remaining work.";

/// Everything a musician needs to know about the attempt it plays (§2.2 `AttemptContext`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptContext {
    /// Unique per dispatch; the result must echo it.
    pub dispatch_id: u64,
    /// 1-based: the attempts that ended so far (normal + completion; a healing attempt is
    /// one of those), plus one.
    pub attempt_number: u32,
    /// Normal, completion or healing.
    pub mode: AttemptMode,
    /// [`COMPLETION_SUFFIX`] in completion mode.
    pub completion_suffix: Option<String>,
    /// Instrument to play (after any fallback).
    pub instrument: String,
    /// Model override, if any.
    pub model: Option<String>,
    /// Message of the previous failed attempt, to feed back into the prompt.
    pub previous_failure: Option<String>,
    /// Attempt timeout.
    pub timeout: Duration,
}

/// A sheet's durable state after a transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SheetChange {
    /// Job.
    pub job_id: String,
    /// Sheet.
    pub sheet_num: u32,
    /// New baton status (map with [`SheetStatus::checkpoint_status`]).
    pub status: SheetStatus,
    /// Failed normal attempts.
    pub normal_attempts: u32,
    /// Completion attempts.
    pub completion_attempts: u32,
    /// Healing attempts granted (self-healing: at most 1). The healing attempt itself, once
    /// ended, is in the normal or completion count.
    pub healing_attempts: u32,
    /// Instrument currently assigned (changes on fallback).
    pub instrument: String,
    /// Total cost of the sheet.
    pub total_cost_usd: f64,
    /// Why the sheet failed, was skipped or is waiting, when that applies.
    pub reason: Option<String>,
    /// When the retry a `RetryScheduled` sheet waits for is due (stored, so a restart
    /// keeps the rest of the backoff instead of running the retry at once).
    #[serde(default)]
    pub retry_due: Option<Millis>,
}

/// A job's durable state after a transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobChange {
    /// Job.
    pub job_id: String,
    /// New status.
    pub status: JobStatus,
    /// Why (pause reason, failure reason).
    pub reason: Option<String>,
    /// Total cost so far.
    pub total_cost_usd: f64,
    /// The job is paused because its cost exceeded `cost_limits.max_cost_per_job` (the
    /// checkpoint's `cost_limit_reached`).
    #[serde(default)]
    pub cost_limit_reached: bool,
    /// When the job's run started counting against `job_timeout_seconds` (once it got its
    /// slot), for a restart to go on with it.
    #[serde(default)]
    pub clock_started_at: Option<Millis>,
}

/// An instrument's durable state (rate limits survive restarts, invariant 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstrumentChange {
    /// Instrument.
    pub instrument: String,
    /// Parked until this time, or not rate-limited.
    pub rate_limited_until: Option<Millis>,
    /// Why it is parked, in the API's or CLI's own words, with how the wait was chosen.
    #[serde(default)]
    pub rate_limit_reason: Option<String>,
    /// Rate limits in a row the wait belongs to (the probe schedule's step), so a restart
    /// goes on from it.
    #[serde(default)]
    pub rate_limit_streak: u32,
    /// Breaker state.
    pub circuit: CircuitState,
    /// Why the breaker is not closed: the failures in a row and the last one's message.
    #[serde(default)]
    pub circuit_reason: Option<String>,
    /// When an open breaker lets its next probe through.
    #[serde(default)]
    pub circuit_until: Option<Millis>,
    /// Failures in a row on the instrument.
    #[serde(default)]
    pub consecutive_failures: u32,
}

/// A job's own rate-limit wait on an instrument (instruments whose limits hold one job
/// only, [`crate::InstrumentSpec::rate_limit_per_job`]); persisted so a restart keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobWaitChange {
    /// Job whose sheets wait.
    pub job_id: String,
    /// Instrument they wait for.
    pub instrument: String,
    /// Waiting until this time, or the wait is over.
    pub rate_limited_until: Option<Millis>,
    /// Why, in the API's or CLI's own words, with how the wait was chosen.
    pub rate_limit_reason: Option<String>,
    /// Rate limits in a row the wait belongs to (the probe schedule's step).
    #[serde(default)]
    pub rate_limit_streak: u32,
}

/// A change to persist before anything that depends on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum StateChange {
    /// Sheet transition.
    Sheet(SheetChange),
    /// Job transition.
    Job(JobChange),
    /// Instrument transition.
    Instrument(InstrumentChange),
    /// A job's own rate-limit wait began, grew or ended.
    JobWait(JobWaitChange),
}

impl StateChange {
    /// Job the change belongs to (`None` for instrument changes).
    pub fn job_id(&self) -> Option<&str> {
        match self {
            StateChange::Sheet(s) => Some(&s.job_id),
            StateChange::Job(j) => Some(&j.job_id),
            StateChange::JobWait(w) => Some(&w.job_id),
            StateChange::Instrument(_) => None,
        }
    }
}

/// An observer-stream record (§2.3 `to_observer_event`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObserverEvent {
    /// Job, or `""` for instrument/global events.
    pub job_id: String,
    /// Sheet, or 0.
    pub sheet_num: u32,
    /// Event name, e.g. `baton.sheet.attempt_result`.
    pub event: String,
    /// Event-specific data.
    pub data: serde_json::Value,
    /// When.
    pub at: Millis,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobOutcome {
    /// Every sheet completed or skipped.
    Completed,
    /// A sheet failed, or the job timed out.
    Failed,
    /// Cancelled by the user.
    Cancelled,
}

impl JobOutcome {
    /// The job status this outcome persists as.
    pub fn status(self) -> JobStatus {
        match self {
            JobOutcome::Completed => JobStatus::Completed,
            JobOutcome::Failed => JobStatus::Failed,
            JobOutcome::Cancelled => JobStatus::Cancelled,
        }
    }
}

/// One instruction for the driver. Effects are carried out in order; a `Persist` always comes
/// before anything that depends on it ("checkpoint before consequence", invariant 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "effect")]
pub enum Effect {
    /// Save this change synchronously; if it fails, nothing after it for that job may happen.
    Persist(StateChange),
    /// Start a musician for one attempt.
    Dispatch {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Attempt details.
        attempt: AttemptContext,
    },
    /// Kill the in-flight attempt of a sheet (process group: TERM, grace, KILL).
    Kill {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
    },
    /// Deliver `event` back to the baton at `at`.
    ScheduleTimer {
        /// Handle for cancellation.
        id: TimerId,
        /// When.
        at: Millis,
        /// What.
        event: Event,
    },
    /// Forget a scheduled timer.
    CancelTimer {
        /// The timer.
        id: TimerId,
    },
    /// Evaluate the sheet's skip rule and answer with [`Event::SkipEvaluated`].
    EvaluateSkip {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// The rule.
        rule: SkipSpec,
    },
    /// A sheet entered a fermata: ask someone to decide (answer with
    /// [`Event::EscalationResolved`]).
    Escalate {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Why.
        reason: String,
    },
    /// The job is over (its final state was persisted just before).
    JobFinished {
        /// Job.
        job_id: String,
        /// Outcome.
        outcome: JobOutcome,
        /// Why it failed or was cancelled.
        reason: Option<String>,
    },
    /// For status and observer streams.
    Observer(ObserverEvent),
}

impl Effect {
    /// Job the effect concerns, if any.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Effect::Persist(c) => c.job_id(),
            Effect::Dispatch { job_id, .. }
            | Effect::Kill { job_id, .. }
            | Effect::EvaluateSkip { job_id, .. }
            | Effect::Escalate { job_id, .. }
            | Effect::JobFinished { job_id, .. } => Some(job_id),
            Effect::ScheduleTimer { event, .. } => event.job_id(),
            Effect::CancelTimer { .. } => None,
            Effect::Observer(o) if !o.job_id.is_empty() => Some(&o.job_id),
            Effect::Observer(_) => None,
        }
    }
}
