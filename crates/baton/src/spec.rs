//! Inputs the conductor builds from a validated score and the conductor config.
//!
//! This crate deliberately does not depend on `mozart-config`: the conductor maps a `SheetPlan`
//! onto these plain records.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::status::SheetStatus;
use crate::time::Millis;

/// Retry policy of one sheet (score `retry:`), read per sheet rather than hard-coded
/// (upstream's baton ignores `RetryConfig`, §2.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Failed normal attempts allowed; total normal executions = `max_retries` (§2.7).
    pub max_retries: u32,
    /// Delay before the first retry.
    pub base_delay: Duration,
    /// Growth factor per further failure.
    pub exponential_base: f64,
    /// Upper bound on any retry delay.
    pub max_delay: Duration,
    /// Multiply the delay by a factor in `[0.5, 1.5)` (§3.6 `_get_retry_delay`).
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_secs(10),
            exponential_base: 2.0,
            max_delay: Duration::from_secs(3600),
            jitter: true,
        }
    }
}

/// A skip rule the host evaluates before the sheet's first dispatch (§9.2).
///
/// The core never interprets it: it hands it back in [`crate::Effect::EvaluateSkip`] so the host
/// does not have to look the rule up again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkipSpec {
    /// `skip_when` expression, if any.
    pub when: Option<String>,
    /// `skip_when_command` command line, if any.
    pub command: Option<String>,
    /// Human description of the command rule.
    pub description: Option<String>,
    /// Timeout of the command rule.
    pub command_timeout: Option<Duration>,
}

/// Progress of a sheet restored from a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoredSheet {
    /// Status found in the checkpoint. `Dispatched`/`Waiting`/`Fermata`/`RetryScheduled` become
    /// pending again without spending a retry (architecture invariant 1).
    pub status: SheetStatus,
    /// Failed normal attempts already spent.
    pub normal_attempts: u32,
    /// Completion attempts already spent (carried so a restart cannot loop forever, §2.10).
    pub completion_attempts: u32,
    /// Healing attempts granted (the healing attempt, once ended, is in the normal count).
    pub healing_attempts: u32,
    /// Cost already spent on this sheet.
    pub total_cost_usd: f64,
    /// Instrument the sheet was last playing on (after fallbacks), if known.
    pub instrument: Option<String>,
    /// Attempts made before the budget above started afresh (a failed sheet of a job that
    /// is run again): the sheet's next attempts keep counting from them, as they do across
    /// a fallback.
    #[serde(default)]
    pub earlier_attempts: u32,
    /// What is left of the backoff of the retry a pending sheet was waiting for when the
    /// conductor stopped: the retry runs when it is over, not at once.
    #[serde(default)]
    pub retry_in: Option<Duration>,
}

/// One sheet of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SheetSpec {
    /// Sheet number (1-based).
    pub num: u32,
    /// Sheets that must be completed or skipped first; unknown numbers count as satisfied (§2.8).
    pub dependencies: Vec<u32>,
    /// Instrument (profile name) that plays this sheet.
    pub instrument: String,
    /// Model override, if any (per-model concurrency, §2.8 \[LATER\]).
    pub model: Option<String>,
    /// Instruments to fall back to, in order, when this one is exhausted or unavailable.
    pub fallbacks: Vec<String>,
    /// Retry policy.
    pub retry: RetryPolicy,
    /// Completion attempts allowed on a partial validation pass.
    pub max_completion_attempts: u32,
    /// Minimum pass rate (percent) for a partial pass to enter completion mode.
    pub completion_threshold_percent: f64,
    /// Skip rule evaluated by the host, if any.
    pub skip: Option<SkipSpec>,
    /// Per-attempt timeout (the host enforces it; the core uses it for stale detection).
    pub timeout: Duration,
    /// Per-sheet cost limit in USD (§9.6).
    pub max_cost_usd: Option<f64>,
    /// Restored progress (resume after restart); `None` for a fresh sheet.
    pub restored: Option<RestoredSheet>,
}

impl SheetSpec {
    /// A fresh sheet with upstream defaults (timeout 1800 s, 3 retries, completion 5 at 50 %).
    pub fn new(num: u32, instrument: impl Into<String>) -> Self {
        SheetSpec {
            num,
            dependencies: Vec::new(),
            instrument: instrument.into(),
            model: None,
            fallbacks: Vec::new(),
            retry: RetryPolicy::default(),
            max_completion_attempts: 5,
            completion_threshold_percent: 50.0,
            skip: None,
            timeout: Duration::from_secs(1800),
            max_cost_usd: None,
            restored: None,
        }
    }
}

/// A job's sheets made one at a time, for a job too large to hold every sheet's spec at
/// once (a 100,000-sheet job's specs were ~33 MB, alive while the baton built its sheets:
/// the conductor's whole-life peak, issue 24). The baton asks for the numbers and
/// dependencies in its passes over the job and for each whole spec once.
pub trait SheetSource: Send + Sync {
    /// How many sheets.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The number of sheet `i` (0-based, in the job's order).
    fn num(&self, i: usize) -> u32;
    /// The dependencies of sheet `i` (as [`SheetSpec::dependencies`]).
    fn dependencies(&self, i: usize) -> &[u32];
    /// The whole spec of sheet `i`.
    fn sheet(&self, i: usize) -> SheetSpec;
}

/// A [`SheetSource`] in a [`JobSpec`]: compared by identity, never serialised.
#[derive(Clone)]
pub struct SheetSourceRef(pub std::sync::Arc<dyn SheetSource>);

impl std::fmt::Debug for SheetSourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SheetSource({} sheets)", self.0.len())
    }
}

impl PartialEq for SheetSourceRef {
    fn eq(&self, other: &SheetSourceRef) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One job (a submitted score) as the baton runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Job id (unique among live jobs).
    pub job_id: String,
    /// Its sheets (unless `source` gives them).
    pub sheets: Vec<SheetSpec>,
    /// Its sheets made one at a time; when set, `sheets` is not read.
    #[serde(skip)]
    pub source: Option<SheetSourceRef>,
    /// `parallel.max_concurrent` when parallel, else 1.
    pub max_concurrent_sheets: u32,
    /// Pause between sequential dispatches of this job (`pause_between_sheets_seconds`).
    pub pause_between_sheets: Duration,
    /// Job cost limit in USD (§9.6); exceeding it pauses the job.
    pub max_cost_usd: Option<f64>,
    /// Wall-clock limit of the whole job (§9.14).
    pub timeout: Option<Duration>,
    /// Exhausted sheets go to a fermata instead of failing (§2.5 step 4).
    pub escalation_enabled: bool,
    /// Exhausted sheets get one healing attempt (§2.5 step 3).
    pub self_healing_enabled: bool,
    /// How long a fermata waits for a decision before failing the sheet; `None` waits forever.
    pub escalation_timeout: Option<Duration>,
    /// The job's own rate-limit waits restored from the registry (instruments with
    /// [`InstrumentSpec::rate_limit_per_job`]): a restart keeps the job waiting.
    #[serde(default)]
    pub rate_waits: Vec<RestoredRateWait>,
    /// When the job was submitted (Unix epoch seconds): a job waiting for a job slot gets
    /// one before the jobs submitted after it, in whatever order they were registered (a
    /// job resumed after a restart keeps its place). `None`: its registration time.
    #[serde(default)]
    pub submitted_at: Option<f64>,
    /// When the job timeout of the run a conductor restart continues started counting
    /// (the run keeps its time); `None`: it starts when the job gets its slot.
    #[serde(default)]
    pub clock_started_at: Option<Millis>,
}

/// A job's rate-limit wait on one instrument, restored after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoredRateWait {
    /// Instrument the job's sheets wait for.
    pub instrument: String,
    /// How much of the wait is left.
    pub wait: Duration,
    /// What the API or CLI said and how the wait was chosen, as persisted.
    pub reason: Option<String>,
    /// Rate limits in a row it belongs to, as persisted: the next limit goes one step
    /// further on the probe schedule.
    #[serde(default)]
    pub streak: u32,
}

impl JobSpec {
    /// How many sheets the job has.
    pub fn sheet_count(&self) -> usize {
        match &self.source {
            Some(source) => source.0.len(),
            None => self.sheets.len(),
        }
    }

    /// Sheet `i`'s number.
    pub(crate) fn num(&self, i: usize) -> u32 {
        match &self.source {
            Some(source) => source.0.num(i),
            None => self.sheets[i].num,
        }
    }

    /// Sheet `i`'s dependencies.
    pub(crate) fn dependencies(&self, i: usize) -> &[u32] {
        match &self.source {
            Some(source) => source.0.dependencies(i),
            None => &self.sheets[i].dependencies,
        }
    }

    /// Sheet `i`'s whole spec (made now from a source).
    pub(crate) fn sheet(&self, i: usize) -> std::borrow::Cow<'_, SheetSpec> {
        match &self.source {
            Some(source) => std::borrow::Cow::Owned(source.0.sheet(i)),
            None => std::borrow::Cow::Borrowed(&self.sheets[i]),
        }
    }

    /// A job with sequential execution and no limits.
    pub fn new(job_id: impl Into<String>, sheets: Vec<SheetSpec>) -> Self {
        JobSpec {
            job_id: job_id.into(),
            sheets,
            source: None,
            max_concurrent_sheets: 1,
            pause_between_sheets: Duration::ZERO,
            max_cost_usd: None,
            timeout: None,
            escalation_enabled: false,
            self_healing_enabled: false,
            escalation_timeout: None,
            rate_waits: Vec::new(),
            submitted_at: None,
            clock_started_at: None,
        }
    }
}

/// Limits of one instrument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstrumentSpec {
    /// Profile name.
    pub name: String,
    /// Sheets of this instrument running at once (upstream: 4).
    pub max_concurrent: u32,
    /// Per-model limits (`"{instrument}:{model}"` in later upstream); others use `max_concurrent`.
    pub model_limits: Vec<(String, u32)>,
    /// Consecutive execution failures that open the breaker (upstream: 5).
    pub circuit_breaker_threshold: u32,
    /// First recovery delay after opening (upstream \[LATER\]: 30 s, doubling).
    pub circuit_breaker_recovery: Duration,
    /// Cap on the recovery delay (upstream \[LATER\]: 300 s).
    pub circuit_breaker_max_recovery: Duration,
    /// A restored rate-limit expiry, so a restart does not stampede (invariant 2).
    pub rate_limited_until: Option<Millis>,
    /// A rate limit seen by one job's sheet holds back that job's sheets on this instrument
    /// only, not every job's (the built-in `shell`: its sheets run each score's own
    /// commands, which share no API account). Off: the whole instrument is parked (an AI
    /// CLI's account is shared by every job).
    #[serde(default)]
    pub rate_limit_per_job: bool,
}

impl InstrumentSpec {
    /// An instrument with upstream defaults.
    pub fn new(name: impl Into<String>) -> Self {
        InstrumentSpec {
            name: name.into(),
            max_concurrent: 4,
            model_limits: Vec::new(),
            circuit_breaker_threshold: 5,
            circuit_breaker_recovery: Duration::from_secs(30),
            circuit_breaker_max_recovery: Duration::from_secs(300),
            rate_limited_until: None,
            rate_limit_per_job: false,
        }
    }
}

/// [`BatonConfig::rate_limit_probe`] by default, in seconds: 15 s, 30 s, 1, 2, 5, 10 minutes,
/// then every 15 minutes.
pub const DEFAULT_RATE_LIMIT_PROBE: [u64; 7] = [15, 30, 60, 120, 300, 600, 900];

/// Baton-wide settings (from conductor.yaml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatonConfig {
    /// Sheets running at once across all jobs (`max_concurrent_sheets`, default 10).
    pub max_concurrent_sheets: u32,
    /// Jobs holding a slot at once (`max_concurrent_jobs`; 0 = no limit). A job holds its
    /// slot from admission until it ends, or until it is paused with nothing in flight;
    /// the others wait, queued, and are admitted in registration order.
    pub max_concurrent_jobs: u32,
    /// Known instruments; unknown ones are auto-registered with `default_instrument_concurrency`.
    pub instruments: Vec<InstrumentSpec>,
    /// Limit for auto-registered instruments (upstream: 4).
    pub default_instrument_concurrency: u32,
    /// Waits when a rate limit names no time (ours; upstream waited a flat 60 minutes, its
    /// \[LATER\] design 60 s): the n-th limit in a row on an instrument waits the n-th step,
    /// the last step repeating. A limit that names its time waits that long, and from the
    /// second limit in a row at least the step before it, so a CLI that keeps being limited
    /// after a short `retry-after` backs off.
    pub rate_limit_probe: Vec<Duration>,
    /// A dispatched sheet with no result after `timeout + stale_grace` is killed and counted as
    /// a timeout; `None` disables the check.
    pub stale_grace: Option<Duration>,
    /// Emit [`crate::Effect::Observer`] for every event (§2.3 `to_observer_event`).
    pub emit_observer_events: bool,
    /// Seed mixed into retry jitter so tests are deterministic and jobs do not retry in lockstep.
    pub jitter_seed: u64,
}

impl Default for BatonConfig {
    fn default() -> Self {
        BatonConfig {
            max_concurrent_sheets: 10,
            max_concurrent_jobs: 0,
            instruments: Vec::new(),
            default_instrument_concurrency: 4,
            rate_limit_probe: DEFAULT_RATE_LIMIT_PROBE
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
            stale_grace: Some(Duration::from_secs(60)),
            emit_observer_events: true,
            jitter_seed: 0,
        }
    }
}

/// New cost limits carried by a resume (upstream's `ResumeJob.new_config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostLimitsUpdate {
    /// New job limit (`None` removes it).
    pub max_cost_per_job: Option<f64>,
    /// New per-sheet limit for every sheet (`None` removes it).
    pub max_cost_per_sheet: Option<f64>,
}
