//! The backend contract: what a musician hands an instrument and what comes back
//! (instruments.md §2).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub mod placement;

/// A boxed, sendable future; the trait stays object-safe without `async-trait`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Grace between SIGTERM and SIGKILL of an instrument's process group (instruments.md §3.1).
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// Live counters of a running execution, for stale detection and `mozart status`.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    stdout_bytes: AtomicU64,
    stderr_bytes: AtomicU64,
    /// Milliseconds after `started` of the last output chunk (0 = none yet).
    last_activity_ms: AtomicU64,
    pid: AtomicU32,
    /// Start time of the process in clock ticks since boot (0 = not known).
    start_ticks: AtomicU64,
    /// Signalled when the process starts (its pid becomes known).
    pid_set: tokio::sync::Notify,
    /// What the instrument's structured output said so far (issue 13: live progress).
    activity: std::sync::Mutex<Activity>,
    /// The attempt tag its processes carry (`MOZART_ATTEMPT`), once spawned.
    attempt_tag: std::sync::Mutex<Option<String>>,
    /// When the attempt began as its scheduler tells (Unix epoch, ms; 0 = as `started`): a
    /// remote job re-attached after a conductor restart began before this progress did.
    began_epoch_ms: AtomicU64,
    /// `mozart pause` asks a remote attempt still waiting in its scheduler's queue to be
    /// taken back ([`Progress::ask_withdraw`]), and how the placement answered.
    withdraw: Withdraw,
}

/// A request to take an attempt back from a remote queue, and its answer.
#[derive(Debug, Default)]
struct Withdraw {
    asked: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
    answer: std::sync::Mutex<Option<Withdrawal>>,
}

/// How a placement answered [`Progress::ask_withdraw`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withdrawal {
    /// The remote job (its id) had not started: it was cancelled, the attempt ends without
    /// a result, and the sheet is to be dispatched again later (no retry spent).
    Withdrawn(String),
    /// The remote job runs on and is followed: why (it had started, perhaps just then, or
    /// Slurm could not be asked).
    Kept {
        /// The remote job's id.
        remote_id: String,
        /// Why it was not withdrawn.
        why: String,
    },
}

/// What a running instrument has reported so far through its structured output (Claude's
/// stream-json, a JSONL profile's events): shown by `mozart status` while the sheet runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Activity {
    /// Tool calls the model made.
    pub tool_calls: u32,
    /// Name of the last tool called.
    pub last_tool: Option<String>,
    /// Input tokens so far.
    pub input_tokens: u64,
    /// Output tokens so far.
    pub output_tokens: u64,
    /// Retries of the model API the CLI made by itself (Claude's `api_retry`).
    pub api_retries: u32,
    /// The latest notable event, in words (e.g. "API retry 1/2 after HTTP 429").
    pub last_event: Option<String>,
    /// The attempt waits in a remote queue (Slurm's): its command has not started.
    #[serde(default)]
    pub queued: bool,
    /// Structured events seen.
    pub events: u64,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Fresh counters starting now.
    pub fn new() -> Self {
        Progress {
            started: Instant::now(),
            stdout_bytes: AtomicU64::new(0),
            stderr_bytes: AtomicU64::new(0),
            last_activity_ms: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            start_ticks: AtomicU64::new(0),
            pid_set: tokio::sync::Notify::new(),
            activity: std::sync::Mutex::new(Activity::default()),
            attempt_tag: std::sync::Mutex::new(None),
            began_epoch_ms: AtomicU64::new(0),
            withdraw: Withdraw::default(),
        }
    }

    /// How long the attempt has been under way: since its remote job began when a placement
    /// said when ([`Progress::set_began_at`]: a job re-attached after a conductor restart),
    /// else since the progress was created (the dispatch).
    pub fn running_for(&self) -> Duration {
        match self.began_epoch_ms.load(Ordering::Relaxed) {
            0 => self.elapsed(),
            ms => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                now.saturating_sub(Duration::from_millis(ms))
            }
        }
    }

    /// When the attempt began (Unix seconds), when a placement said so
    /// ([`Progress::set_began_at`]); `None` for an attempt under way since its dispatch.
    pub fn began_at(&self) -> Option<f64> {
        match self.began_epoch_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(ms as f64 / 1000.0),
        }
    }

    /// The attempt began at `epoch` (Unix seconds), before this progress was created: a
    /// remote job that ran on while the conductor restarted.
    pub fn set_began_at(&self, epoch: f64) {
        if epoch.is_finite() && epoch > 0.0 {
            self.began_epoch_ms
                .store((epoch * 1000.0) as u64, Ordering::Relaxed);
        }
    }

    /// Ask the attempt's placement to take it back if its remote job has not started
    /// (`mozart pause`); local attempts ignore it.
    pub fn ask_withdraw(&self) {
        self.withdraw.asked.store(true, Ordering::SeqCst);
        self.withdraw.wake.notify_waiters();
    }

    /// Take a withdrawal request back (`mozart resume` before it was answered).
    pub fn unask_withdraw(&self) {
        self.withdraw.asked.store(false, Ordering::SeqCst);
    }

    /// Whether the attempt is asked to be taken back.
    pub fn withdraw_asked(&self) -> bool {
        self.withdraw.asked.load(Ordering::SeqCst)
    }

    /// Resolves when [`Progress::ask_withdraw`] is called (at once when it was).
    pub async fn withdraw_wanted(&self) {
        loop {
            let wake = self.withdraw.wake.notified();
            if self.withdraw_asked() {
                return;
            }
            wake.await;
        }
    }

    /// The placement's answer to a withdrawal request.
    pub fn answer_withdraw(&self, answer: Withdrawal) {
        self.withdraw.asked.store(false, Ordering::SeqCst);
        *self
            .withdraw
            .answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(answer);
    }

    /// How the placement answered a withdrawal request, if it did.
    pub fn withdrawal(&self) -> Option<Withdrawal> {
        self.withdraw
            .answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A copy of what the instrument reported so far.
    pub fn activity(&self) -> Activity {
        self.activity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Update the reported activity (called by the backends' output parsers).
    pub fn update_activity(&self, f: impl FnOnce(&mut Activity)) {
        let mut a = self
            .activity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        a.events += 1;
        f(&mut a);
    }

    /// Bytes of stdout seen so far.
    pub fn stdout_bytes(&self) -> u64 {
        self.stdout_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of stderr seen so far.
    pub fn stderr_bytes(&self) -> u64 {
        self.stderr_bytes.load(Ordering::Relaxed)
    }

    /// Total bytes seen on both streams.
    pub fn bytes_seen(&self) -> u64 {
        self.stdout_bytes() + self.stderr_bytes()
    }

    /// When output last arrived (the start instant if none arrived yet).
    pub fn last_activity(&self) -> Instant {
        self.started + Duration::from_millis(self.last_activity_ms.load(Ordering::Relaxed))
    }

    /// How long the execution has produced no output.
    pub fn idle_for(&self) -> Duration {
        self.last_activity().elapsed()
    }

    /// Time since the progress was created.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// PID of the instrument process while it runs (`None` before spawn / after exit).
    pub fn pid(&self) -> Option<u32> {
        match self.pid.load(Ordering::Acquire) {
            0 => None,
            pid => Some(pid),
        }
    }

    /// The process's pid once it has started (never resolves for HTTP instruments).
    pub async fn started_pid(&self) -> u32 {
        loop {
            if let Some(pid) = self.pid() {
                return pid;
            }
            self.pid_set.notified().await;
        }
    }

    /// The running process's start time (`/proc/<pid>/stat` field 22, clock ticks since
    /// boot) when the spawn could tell it without reading `/proc`; `None` otherwise, and
    /// once the process has ended.
    pub fn start_ticks(&self) -> Option<u64> {
        match self.start_ticks.load(Ordering::Acquire) {
            0 => None,
            ticks => Some(ticks),
        }
    }

    /// The tag every process of the running attempt carries in its environment
    /// ([`crate::descendants::ATTEMPT_VAR`]), once it has been spawned.
    pub fn attempt_tag(&self) -> Option<String> {
        self.attempt_tag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_attempt_tag(&self, tag: &str) {
        *self
            .attempt_tag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tag.to_string());
    }

    pub(crate) fn set_pid(&self, pid: Option<u32>) {
        self.set_started(pid, None);
    }

    /// Publish the started process (its start time first, so a reader that sees the pid
    /// sees the time with it).
    pub(crate) fn set_started(&self, pid: Option<u32>, start_ticks: Option<u64>) {
        self.start_ticks
            .store(start_ticks.unwrap_or(0), Ordering::Release);
        self.pid.store(pid.unwrap_or(0), Ordering::Release);
        if pid.is_some() {
            self.pid_set.notify_one();
        }
    }

    pub(crate) fn record(&self, stream: StreamKind, bytes: usize) {
        let counter = match stream {
            StreamKind::Stdout => &self.stdout_bytes,
            StreamKind::Stderr => &self.stderr_bytes,
        };
        counter.fetch_add(bytes as u64, Ordering::Relaxed);
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_activity_ms.store(ms.max(1), Ordering::Relaxed);
    }
}

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// How an execution ended (instruments.md §2.1 `exit_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The process exited on its own.
    #[default]
    Completed,
    /// Mozart stopped it at the timeout.
    Timeout,
    /// A signal killed it (not sent for a timeout).
    Killed,
    /// It could not be started or run (spawn failure, configuration).
    Error,
}

/// What kind of failure an instrument reported (`ExecutionResult::error_type`). The serde
/// names are the tags the result has always carried on the wire and in storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The instrument (or its profile's timeout pattern) reported a timeout.
    Timeout,
    /// A rate limit: the instrument's own report, a profile pattern or an HTTP 429.
    RateLimit,
    /// The program is not installed (`exit 127`).
    NotFound,
    /// A CLI refused its credentials (Claude, or a profile's auth pattern).
    Auth,
    /// An HTTP API refused the credentials (401 / 403).
    Authentication,
    /// Refused as configured: a retry would be refused the same way.
    Configuration,
    /// The instrument could not be started or called (an unexpected I/O error).
    Exception,
    /// A profile's crash pattern matched.
    Crash,
    /// A profile's stale pattern matched.
    Stale,
    /// A profile's capacity pattern matched.
    Capacity,
    /// A structured instrument ended "successfully" without its answer.
    NoResult,
    /// Claude ended with an error that is none of the above.
    Execution,
    /// An HTTP API answered 400.
    BadRequest,
    /// An HTTP API answered another error status.
    ApiError,
    /// An HTTP API could not be reached.
    Connection,
    /// An HTTP API's answer could not be read.
    BadResponse,
}

impl FailureKind {
    /// The tag as it is stored and sent (`rate_limit`, `not_found`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Timeout => "timeout",
            FailureKind::RateLimit => "rate_limit",
            FailureKind::NotFound => "not_found",
            FailureKind::Auth => "auth",
            FailureKind::Authentication => "authentication",
            FailureKind::Configuration => "configuration",
            FailureKind::Exception => "exception",
            FailureKind::Crash => "crash",
            FailureKind::Stale => "stale",
            FailureKind::Capacity => "capacity",
            FailureKind::NoResult => "no_result",
            FailureKind::Execution => "execution",
            FailureKind::BadRequest => "bad_request",
            FailureKind::ApiError => "api_error",
            FailureKind::Connection => "connection",
            FailureKind::BadResponse => "bad_response",
        }
    }
}

/// Confidence of a cost the instrument reported, or priced from exact tokens of a model its
/// profile lists.
pub const COST_EXACT: f64 = 1.0;

/// The most one attempt can be taken to have cost, USD. An instrument that reports more (or
/// an infinite or negative figure, or a price that makes one) reports no cost: added up, such
/// figures become infinite, which no checkpoint can store.
pub const MAX_ATTEMPT_COST_USD: f64 = 1e9;

/// Whether `usd` can be one attempt's cost: finite, not negative, at most
/// [`MAX_ATTEMPT_COST_USD`].
#[must_use]
pub fn plausible_cost(usd: f64) -> bool {
    usd.is_finite() && (0.0..=MAX_ATTEMPT_COST_USD).contains(&usd)
}

/// The most tokens one attempt can be taken to have used, in or out (a trillion: a thousand
/// times the largest context window). An instrument that reports more — or a negative, a
/// fraction of infinity, 2^63 — reports no count: stored, such a count cannot be saved, and
/// added up it wraps round.
pub const MAX_ATTEMPT_TOKENS: u64 = 1_000_000_000_000;

/// A token count an instrument reported in `v`, when it can be one: a whole number from 0 to
/// [`MAX_ATTEMPT_TOKENS`] (written as an integer or as a float like `1200.0`).
#[must_use]
pub fn token_count(v: &serde_json::Value) -> Option<u64> {
    let n = match v.as_u64() {
        Some(n) => n,
        None => {
            let f = v.as_f64()?;
            if !(f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= MAX_ATTEMPT_TOKENS as f64) {
                return None;
            }
            f as u64
        }
    };
    (n <= MAX_ATTEMPT_TOKENS).then_some(n)
}
/// Confidence of a cost priced from exact tokens at a price that may not be the model's
/// (the model that ran is not in the profile's list: its default or first model, or the
/// fallback $3 / $15 per million).
pub const COST_ESTIMATED: f64 = 0.5;

/// The outcome of one execution (instruments.md §2.1), never an `Err`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct ExecutionResult {
    /// Exit code in the profile's success set (and, for Claude, no `is_error`).
    pub success: bool,
    /// Process exit code (HTTP status for API backends); `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// Signal number when a signal ended the process.
    pub exit_signal: Option<i32>,
    /// How it ended.
    pub exit_reason: ExitReason,
    /// Last bytes of raw stdout (bounded by the process runner).
    pub stdout: String,
    /// Last bytes of raw stderr (bounded).
    pub stderr: String,
    /// The answer extracted from structured output (`result` field etc.), if any.
    pub result_text: Option<String>,
    /// Total stdout bytes produced.
    pub stdout_bytes: u64,
    /// Total stderr bytes produced.
    pub stderr_bytes: u64,
    /// Wall-clock duration of the execution.
    pub duration_seconds: f64,
    /// Start time, Unix epoch seconds.
    pub started_at_epoch: f64,
    /// The instrument reported a rate / usage limit.
    pub rate_limited: bool,
    /// When the limit resets (Unix epoch seconds), when the instrument said so.
    pub rate_limit_reset: Option<f64>,
    /// HTTP status of the failing API call as reported by the instrument (Claude's
    /// `api_error_status`).
    pub api_error_status: Option<u16>,
    /// How long the API asked the client to wait before retrying (its `retry-after`), when
    /// the instrument passed that on (Claude's `api_retry` events).
    pub retry_after_seconds: Option<f64>,
    /// Input tokens reported by the instrument.
    pub input_tokens: Option<u64>,
    /// Output tokens reported by the instrument.
    pub output_tokens: Option<u64>,
    /// Cost reported by the instrument (Claude's `total_cost_usd`), or priced from the
    /// profile's models when the instrument reported only its tokens.
    pub cost_usd: Option<f64>,
    /// How sure `cost_usd` is (checkpoint `cost_confidence`): `None` with a cost means the
    /// instrument or the API reported it ([`COST_EXACT`]); [`COST_ESTIMATED`] when the tokens
    /// were exact but the model that ran is not priced in its profile.
    #[serde(default)]
    pub cost_confidence: Option<f64>,
    /// Model that ran.
    pub model: Option<String>,
    /// Instrument session id (telemetry only; claude-code-output.md §8.1).
    pub session_id: Option<String>,
    /// What kind of failure this was, as the backend saw it (`timeout`, `rate_limit`, …).
    pub error_type: Option<FailureKind>,
    /// Human-readable error, credential-redacted.
    pub error_message: Option<String>,
    /// The timeout fired.
    pub timed_out: bool,
}

impl ExecutionResult {
    /// The answer text: the extracted result when structured, else the stdout tail.
    pub fn output_text(&self) -> &str {
        self.result_text.as_deref().unwrap_or(&self.stdout)
    }

    /// `stdout + "\n" + stderr`, trimmed (instruments.md §2.1 `output`).
    pub fn combined_output(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
            .trim()
            .to_string()
    }

    /// A failed result for an execution that could not start.
    pub fn start_failure(exit_code: Option<i32>, error_type: FailureKind, message: String) -> Self {
        ExecutionResult {
            success: false,
            exit_code,
            exit_reason: ExitReason::Error,
            stderr: message.clone(),
            started_at_epoch: epoch_now(),
            error_type: Some(error_type),
            error_message: Some(message),
            ..Default::default()
        }
    }
}

/// Availability of an instrument here, without spending quota.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthStatus {
    /// The instrument can run.
    pub ready: bool,
    /// Resolved executable, for CLI instruments.
    pub binary_path: Option<PathBuf>,
    /// One line saying why (not) ready.
    pub detail: String,
}

/// Current time as Unix epoch seconds (one clock for every crate, owned by the protocol).
pub use mozart_ipc::time::epoch_now;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_token_count_is_a_whole_number_an_attempt_can_have() {
        use serde_json::json;
        for (v, want) in [
            (json!(1200), Some(1200)),
            (json!(1200.0), Some(1200)),
            (json!(0), Some(0)),
            (json!(MAX_ATTEMPT_TOKENS), Some(MAX_ATTEMPT_TOKENS)),
            (json!(MAX_ATTEMPT_TOKENS + 1), None),
            (json!(9_223_372_036_854_775_808u64), None),
            (json!(1e300), None),
            (json!(-5000), None),
            (json!(12.5), None),
            (json!("lots"), None),
        ] {
            assert_eq!(token_count(&v), want, "{v}");
        }
    }

    #[test]
    fn failure_kinds_keep_their_stored_tags() {
        // The tags are what results and checkpoints carried when `error_type` was a string.
        let tags = [
            (FailureKind::Timeout, "timeout"),
            (FailureKind::RateLimit, "rate_limit"),
            (FailureKind::NotFound, "not_found"),
            (FailureKind::Auth, "auth"),
            (FailureKind::Authentication, "authentication"),
            (FailureKind::Configuration, "configuration"),
            (FailureKind::Exception, "exception"),
            (FailureKind::Crash, "crash"),
            (FailureKind::Stale, "stale"),
            (FailureKind::Capacity, "capacity"),
            (FailureKind::NoResult, "no_result"),
            (FailureKind::Execution, "execution"),
            (FailureKind::BadRequest, "bad_request"),
            (FailureKind::ApiError, "api_error"),
            (FailureKind::Connection, "connection"),
            (FailureKind::BadResponse, "bad_response"),
        ];
        for (kind, tag) in tags {
            assert_eq!(kind.as_str(), tag);
            assert_eq!(serde_json::to_value(kind).unwrap(), tag);
            let back: FailureKind = serde_json::from_value(tag.into()).unwrap();
            assert_eq!(back, kind);
        }
        let r = ExecutionResult {
            error_type: Some(FailureKind::RateLimit),
            ..Default::default()
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["error_type"], "rate_limit");
    }
}
