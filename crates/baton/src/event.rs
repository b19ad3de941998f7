//! Events the baton reacts to (execution.md §2.3).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::{CostLimitsUpdate, InstrumentSpec, JobSpec};

/// Why an attempt did not succeed; the conductor maps the backends' error classification
/// (E-codes, §7) onto this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FailureKind {
    /// Rate limit or quota: tempo, not failure (invariant 2). Never spends a retry.
    RateLimited {
        /// Parsed reset time, if the output gave one.
        reset_after: Option<Duration>,
        /// What the output said, when a minimum made `reset_after` longer than it (a
        /// reset "in 1 minute" waits 5); `None` when `reset_after` is what it said.
        #[serde(default)]
        said_after: Option<Duration>,
    },
    /// Network blips, 5xx and other retriable errors.
    Transient,
    /// The attempt hit its timeout.
    Timeout,
    /// No output for longer than the idle limit.
    Stale,
    /// Authentication failure: retrying cannot help, the sheet fails at once (§2.4 step 7).
    Auth,
    /// Any other non-retriable error: the sheet fails at once.
    Fatal,
    /// The process ran but validations did not pass.
    Validation,
    /// The backend process died unexpectedly.
    Crash,
    /// The host could not start the attempt (backend acquisition failed, E505).
    Dispatch,
    /// Ours: the work was refused for good without the instrument being at fault (a
    /// reviewer loop out of iterations, a result that could not be dispatched): the sheet
    /// fails at once and the circuit breaker does not count it.
    Rejected,
    /// Ours: the attempt was taken back before its instrument started (its Slurm job
    /// withdrawn from the queue when the job was paused): the sheet is pending again, no
    /// retry spent, and runs when dispatched again.
    Withdrawn,
}

impl FailureKind {
    /// Whether this failure counts against the instrument's circuit breaker.
    pub fn counts_for_breaker(&self) -> bool {
        !matches!(
            self,
            Self::RateLimited { .. } | Self::Validation | Self::Rejected | Self::Withdrawn
        )
    }

    /// Whether retrying can help.
    pub fn is_retriable(&self) -> bool {
        !matches!(self, Self::Auth | Self::Fatal | Self::Rejected)
    }

    /// Short stable name for observers and persisted error categories.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::RateLimited { .. } => "rate_limited",
            Self::Transient => "transient",
            Self::Timeout => "timeout",
            Self::Stale => "stale",
            Self::Auth => "auth",
            Self::Fatal => "fatal",
            Self::Validation => "validation",
            Self::Crash => "crash",
            Self::Dispatch => "dispatch",
            Self::Rejected => "rejected",
            Self::Withdrawn => "withdrawn",
        }
    }
}

/// Classified failure of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Category.
    pub kind: FailureKind,
    /// Upstream error code (e.g. `E101`), if known.
    pub code: Option<String>,
    /// Human message, shown in status and fed to the next attempt.
    pub message: String,
}

/// What a musician reports after one attempt (`SheetAttemptResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptResult {
    /// Job.
    pub job_id: String,
    /// Sheet.
    pub sheet_num: u32,
    /// Echo of [`crate::AttemptContext::dispatch_id`]; results of superseded attempts are ignored.
    pub dispatch_id: u64,
    /// Instrument that played.
    pub instrument: String,
    /// Whether the process finished successfully.
    pub execution_success: bool,
    /// Exit code, if any.
    pub exit_code: Option<i32>,
    /// Wall time of the attempt.
    pub duration: Duration,
    /// Validations passed.
    pub validations_passed: u32,
    /// Validations run (0 when the sheet has none).
    pub validations_total: u32,
    /// Pass rate in percent (100 when there are no checks, §6.4).
    pub validation_pass_rate: f64,
    /// Classified failure, if the attempt did not fully succeed.
    pub failure: Option<Failure>,
    /// Cost of the attempt in USD.
    pub cost_usd: f64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Model that actually answered.
    pub model_used: Option<String>,
}

impl AttemptResult {
    /// A fully successful attempt (no validations), for tests and simple hosts.
    pub fn success(job_id: impl Into<String>, sheet_num: u32, dispatch_id: u64) -> Self {
        AttemptResult {
            job_id: job_id.into(),
            sheet_num,
            dispatch_id,
            instrument: String::new(),
            execution_success: true,
            exit_code: Some(0),
            duration: Duration::ZERO,
            validations_passed: 0,
            validations_total: 0,
            validation_pass_rate: 100.0,
            failure: None,
            cost_usd: 0.0,
            input_tokens: 0,
            output_tokens: 0,
            model_used: None,
        }
    }

    /// A failed attempt of the given kind.
    pub fn failed(
        job_id: impl Into<String>,
        sheet_num: u32,
        dispatch_id: u64,
        kind: FailureKind,
        message: impl Into<String>,
    ) -> Self {
        let mut r = Self::success(job_id, sheet_num, dispatch_id);
        r.execution_success = false;
        r.exit_code = Some(1);
        r.validation_pass_rate = 0.0;
        r.failure = Some(Failure {
            kind,
            code: None,
            message: message.into(),
        });
        r
    }

    /// Whether this is a rate-limited, unsuccessful attempt (§2.4 step 3 \[LATER\]).
    pub fn is_rate_limited_failure(&self) -> bool {
        !self.execution_success
            && matches!(
                self.failure,
                Some(Failure {
                    kind: FailureKind::RateLimited { .. },
                    ..
                })
            )
    }
}

/// Decision that resolves a fermata (§2.4 `EscalationResolved`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscalationDecision {
    /// Try again with a fresh normal attempt.
    Retry,
    /// Skip the sheet (dependents run).
    Skip,
    /// Accept the work as completed.
    Accept,
    /// Fail the sheet.
    Abort,
}

/// Severity of a resource anomaly from the conductor's monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceSeverity {
    /// Back to normal: dispatch resumes.
    Normal,
    /// Worth noting; dispatch continues.
    Warning,
    /// Backpressure: no new dispatches until `Normal`.
    Critical,
}

/// Everything the baton reacts to. Musicians, the timer wheel and the conductor only send
/// these; the baton loop alone mutates state (invariant 4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Event {
    /// Start tracking a job (fresh or restored from a checkpoint).
    RegisterJob(Box<JobSpec>),
    /// A musician finished one attempt.
    SheetAttemptResult(Box<AttemptResult>),
    /// The host's answer to [`crate::Effect::EvaluateSkip`]: `Some(reason)` skips the sheet.
    SkipEvaluated {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Skip reason, or `None` to proceed with dispatch.
        skip_reason: Option<String>,
    },
    /// Skip a sheet from outside (terminal guard applies).
    SheetSkipped {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Why.
        reason: String,
    },
    /// An instrument is rate-limited for `wait`.
    RateLimitHit {
        /// Instrument.
        instrument: String,
        /// How long to park it.
        wait: Duration,
        /// Job that observed it, if any.
        job_id: Option<String>,
        /// Sheet that observed it, if any.
        sheet_num: Option<u32>,
        /// What the API or CLI said and how the wait was chosen (a wait restored after a
        /// restart keeps the words it was persisted with).
        #[serde(default)]
        reason: Option<String>,
        /// A wait restored after a restart: the rate limits in a row it belongs to, as
        /// persisted, so the next limit goes one step further on the probe schedule.
        #[serde(default)]
        streak: Option<u32>,
    },
    /// The rate-limit wait of an instrument is over (timer).
    RateLimitExpired {
        /// Instrument.
        instrument: String,
        /// The job whose own wait it is (instruments whose limits hold one job only);
        /// `None`: the instrument's wait.
        #[serde(default)]
        job_id: Option<String>,
    },
    /// Clear rate limits now (`mozart clear-rate-limits`); `None` clears every instrument.
    ClearRateLimit {
        /// Instrument, or all.
        instrument: Option<String>,
    },
    /// A retry delay is over (timer).
    RetryDue {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
    },
    /// A dispatched attempt should have reported by now (timer).
    StaleCheck {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Dispatch being checked.
        dispatch_id: u64,
    },
    /// The job's wall-clock limit is over (timer).
    JobTimeout {
        /// Job.
        job_id: String,
    },
    /// The pause between sheets of a job is over (timer).
    PacingComplete {
        /// Job.
        job_id: String,
    },
    /// Put a sheet into a fermata and pause its job.
    EscalationNeeded {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Why.
        reason: String,
    },
    /// A fermata was resolved.
    EscalationResolved {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Decision.
        decision: EscalationDecision,
    },
    /// Nobody resolved a fermata in time: the sheet fails, not the job (timer).
    EscalationTimeout {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
    },
    /// An open circuit breaker may probe again (timer).
    CircuitBreakerRecovery {
        /// Instrument.
        instrument: String,
    },
    /// Stop new dispatches of a job; in-flight sheets finish.
    PauseJob {
        /// Job.
        job_id: String,
    },
    /// Undo a pause (user, cost or escalation), optionally with new cost limits.
    ResumeJob {
        /// Job.
        job_id: String,
        /// New limits from a reloaded score, if any.
        new_limits: Option<CostLimitsUpdate>,
    },
    /// Cancel a job: kill in-flight sheets, everything else becomes cancelled.
    CancelJob {
        /// Job.
        job_id: String,
    },
    /// Stop the baton. Graceful: let in-flight sheets finish. Otherwise kill them, leaving them
    /// in progress in the checkpoint so a restart re-dispatches them without spending a retry.
    ShutdownRequested {
        /// Whether to let in-flight sheets finish.
        graceful: bool,
    },
    /// The process of a dispatched sheet exited without a result.
    ProcessExited {
        /// Job.
        job_id: String,
        /// Sheet.
        sheet_num: u32,
        /// Process id.
        pid: u32,
        /// Exit code, if known.
        exit_code: Option<i32>,
    },
    /// The conductor config was reloaded (SIGHUP): new global and instrument limits.
    ConfigReloaded {
        /// New global limit, if changed.
        max_concurrent_sheets: Option<u32>,
        /// New job-slot limit (`max_concurrent_jobs`, 0 = none), if changed: it applies to
        /// the next admissions; jobs already holding a slot keep it.
        max_concurrent_jobs: Option<u32>,
        /// Instruments to add or update (rate-limit state is kept).
        instruments: Vec<InstrumentSpec>,
    },
    /// Resource monitor report; `Critical` holds new dispatches.
    ResourceAnomaly {
        /// Severity.
        severity: ResourceSeverity,
        /// `memory`, `cpu` or `processes`.
        metric: String,
        /// Measured value.
        value: f64,
    },
    /// Nothing changed; just run a dispatch cycle.
    DispatchRetry,
}

impl Event {
    /// Upstream's observer event name for this event (§2.3).
    pub fn observer_name(&self) -> &'static str {
        match self {
            Event::RegisterJob(_) => "baton.job.registered",
            Event::SheetAttemptResult(_) => "baton.sheet.attempt_result",
            Event::SkipEvaluated { .. } => "baton.sheet.skip_evaluated",
            Event::SheetSkipped { .. } => "baton.sheet.skipped",
            Event::RateLimitHit { .. } => "baton.rate_limit.active",
            Event::RateLimitExpired { .. } | Event::ClearRateLimit { .. } => {
                "baton.rate_limit.cleared"
            }
            Event::RetryDue { .. } => "baton.sheet.retry_scheduled",
            Event::StaleCheck { .. } => "baton.sheet.stale_check",
            Event::JobTimeout { .. } => "baton.job.timeout",
            Event::PacingComplete { .. } => "baton.pacing.complete",
            Event::EscalationNeeded { .. } => "baton.fermata",
            Event::EscalationResolved { .. } => "baton.fermata.resolved",
            Event::EscalationTimeout { .. } => "baton.fermata.timeout",
            Event::CircuitBreakerRecovery { .. } => "baton.circuit_breaker.recovery",
            Event::PauseJob { .. } => "baton.job.paused",
            Event::ResumeJob { .. } => "baton.job.resumed",
            Event::CancelJob { .. } => "baton.job.cancelled",
            Event::ShutdownRequested { .. } => "baton.shutdown.requested",
            Event::ProcessExited { .. } => "baton.process.exited",
            Event::ConfigReloaded { .. } => "baton.config.reloaded",
            Event::ResourceAnomaly { .. } => "baton.resource.anomaly",
            Event::DispatchRetry => "baton.dispatch.retry",
        }
    }

    /// The job this event concerns, if any.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Event::RegisterJob(spec) => Some(&spec.job_id),
            Event::SheetAttemptResult(r) => Some(&r.job_id),
            Event::SkipEvaluated { job_id, .. }
            | Event::SheetSkipped { job_id, .. }
            | Event::RetryDue { job_id, .. }
            | Event::StaleCheck { job_id, .. }
            | Event::JobTimeout { job_id }
            | Event::PacingComplete { job_id }
            | Event::EscalationNeeded { job_id, .. }
            | Event::EscalationResolved { job_id, .. }
            | Event::EscalationTimeout { job_id, .. }
            | Event::PauseJob { job_id }
            | Event::ResumeJob { job_id, .. }
            | Event::CancelJob { job_id }
            | Event::ProcessExited { job_id, .. } => Some(job_id),
            Event::RateLimitHit { job_id, .. } | Event::RateLimitExpired { job_id, .. } => {
                job_id.as_deref()
            }
            _ => None,
        }
    }

    /// The sheet this event concerns, or 0 (§2.3: 0 for instrument/global events).
    pub fn sheet_num(&self) -> u32 {
        match self {
            Event::SheetAttemptResult(r) => r.sheet_num,
            Event::SkipEvaluated { sheet_num, .. }
            | Event::SheetSkipped { sheet_num, .. }
            | Event::RetryDue { sheet_num, .. }
            | Event::StaleCheck { sheet_num, .. }
            | Event::EscalationNeeded { sheet_num, .. }
            | Event::EscalationResolved { sheet_num, .. }
            | Event::EscalationTimeout { sheet_num, .. }
            | Event::ProcessExited { sheet_num, .. } => *sheet_num,
            Event::RateLimitHit { sheet_num, .. } => sheet_num.unwrap_or(0),
            _ => 0,
        }
    }
}
