//! Typed params and results (conductor.md §8). Field names are the upstream ones, so the
//! Python CLI and this port can drive each other's conductor.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

fn default_true() -> bool {
    true
}

fn default_limit_50() -> u32 {
    50
}

fn default_limit_20() -> u32 {
    20
}

/// `job.submit` params (`JobRequest`, §8.1). Unknown keys are ignored, as upstream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobRequest {
    /// Score file (absolute path).
    pub config_path: String,
    /// Overrides the score's workspace.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Discard previous state first.
    #[serde(default)]
    pub fresh: bool,
    /// Enable self-healing.
    #[serde(default)]
    pub self_healing: bool,
    /// Auto-confirm self-healing fixes.
    #[serde(default)]
    pub self_healing_auto_confirm: bool,
    /// First sheet to run (legacy engine).
    #[serde(default)]
    pub start_sheet: Option<u32>,
    /// Validate only.
    #[serde(default)]
    pub dry_run: bool,
    /// Concert depth of a chained job.
    #[serde(default)]
    pub chain_depth: Option<u32>,
    /// Ours: answer an accepted submission only once the job shows how it goes — what
    /// `job.watch` would answer, in the response's `watched` — waiting at most this many
    /// milliseconds (capped at 5 s). `mozart run`'s early-failure look then costs no second
    /// call, sent while the conductor starts the job's first sheet (issue 24). Absent:
    /// answered at once, as upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_ms: Option<u64>,
    /// Ours: the directory `mozart run` was called from. A job its `run_job` hooks chain,
    /// whose score has no `workspace:` key, runs in `./workspace` of this directory (as
    /// `mozart run` of that score there would), not of the conductor's. Absent (another
    /// client): a chained score's own directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// Outcome of a submission, resume or modify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobResponseStatus {
    /// Queued.
    Accepted,
    /// Refused; `message` says why.
    Rejected,
    /// Waiting for rate limits to clear.
    Pending,
    /// Failed unexpectedly.
    Error,
}

/// `JobResponse` (§8.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResponse {
    /// The job ID (config file stem); empty when rejected before one was assigned.
    pub job_id: String,
    /// Outcome.
    pub status: JobResponseStatus,
    /// Human-readable detail.
    #[serde(default)]
    pub message: Option<String>,
    /// Ours: why a submission was refused, typed, so a client picks its hints without
    /// reading the words. Absent from accepted answers and from upstream's conductor (a
    /// client then classifies `message` with [`RejectionReason::from_message`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<RejectionReason>,
    /// Ours: where the accepted job stood when the submission was answered, for a
    /// submission that asked to wait (`watch_ms`); absent otherwise (upstream's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watched: Option<JobWatchResult>,
    /// Ours: the accepted job had nothing left to run — every sheet completed (or was
    /// skipped) in an earlier run of the unchanged score, so it ended at once without
    /// running anything (`--fresh` runs it again). Absent when false (upstream's shape).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nothing_to_run: bool,
}

impl JobResponse {
    /// An accepted (or otherwise not refused) answer.
    pub fn new(
        job_id: impl Into<String>,
        status: JobResponseStatus,
        message: Option<String>,
    ) -> Self {
        JobResponse {
            job_id: job_id.into(),
            status,
            message,
            reason: None,
            watched: None,
            nothing_to_run: false,
        }
    }

    /// A refusal of a resume or modify, in upstream's shape (no `reason`).
    pub fn rejected(job_id: impl Into<String>, message: impl Into<String>) -> Self {
        JobResponse::new(job_id, JobResponseStatus::Rejected, Some(message.into()))
    }

    /// A refused submission with its message and typed reason, classified from the message
    /// once, here, where the conductor words it.
    pub fn submission_rejected(job_id: impl Into<String>, message: impl Into<String>) -> Self {
        let message = message.into();
        JobResponse {
            job_id: job_id.into(),
            status: JobResponseStatus::Rejected,
            reason: Some(RejectionReason::from_message(&message)),
            message: Some(message),
            watched: None,
            nothing_to_run: false,
        }
    }

    /// Why this answer refused the submission: the typed field when the conductor sent one,
    /// else the message classified as upstream's CLI reads it (cli.md §3.1 step 7).
    pub fn rejection_reason(&self) -> RejectionReason {
        self.reason
            .unwrap_or_else(|| RejectionReason::from_message(self.message.as_deref().unwrap_or("")))
    }
}

/// Why the conductor refused a submission (ours, on `JobResponse.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectionReason {
    /// The conductor is shutting down.
    ShuttingDown,
    /// Backpressure: the machine is under memory or rate-limit pressure.
    Pressure,
    /// A job of this name is already running or queued.
    AlreadyActive,
    /// Ours: a job of this name is paused in the conductor, which holds it to resume it.
    Paused,
    /// The score does not parse or validate.
    ScoreInvalid,
    /// The workspace does not exist or is not writable.
    WorkspaceInvalid,
    /// The score file was not found.
    ScoreNotFound,
    /// Ours: the job's (or its sheets') git worktree could not be set up (`Cannot isolate
    /// …`: not a git repository, a dirty tree, a missing remote for `dispatch: pr`).
    Isolation,
    /// Anything else.
    Other,
}

impl RejectionReason {
    /// The reason a refusal's words give, tested in upstream's order (cli.md §3.1 step 7):
    /// the one place that reads a message for its kind.
    pub fn from_message(message: &str) -> RejectionReason {
        let m = message.to_lowercase();
        if m.contains("shutting down") {
            RejectionReason::ShuttingDown
        } else if m.contains("pressure") {
            RejectionReason::Pressure
        } else if m.contains("' is paused") {
            RejectionReason::Paused
        } else if m.contains("already") && (m.contains("running") || m.contains("queued")) {
            RejectionReason::AlreadyActive
        } else if m.contains("parse") {
            RejectionReason::ScoreInvalid
        } else if m.contains("workspace")
            && (m.contains("not exist")
                || m.contains("not writable")
                || m.contains("not a directory"))
        {
            RejectionReason::WorkspaceInvalid
        } else if m.contains("not found") && m.contains("config") {
            RejectionReason::ScoreNotFound
        } else if m.starts_with("cannot isolate") {
            RejectionReason::Isolation
        } else {
            RejectionReason::Other
        }
    }
}

/// Params naming one job (`job.status`, `job.pause`, `job.cancel`; `job.errors` and
/// `job.diagnose` take [`ErrorsParams`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobIdParams {
    /// The job ID.
    pub job_id: String,
    /// Overrides the stored workspace where the method honours it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// `job.errors` / `job.diagnose` params: [`JobIdParams`] and (ours) `all_runs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorsParams {
    /// The job ID.
    pub job_id: String,
    /// Overrides the stored workspace where the method honours it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// List the errors of every run of the job, not only of its current run (the one the
    /// latest fresh start began).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_runs: bool,
}

impl From<JobIdParams> for ErrorsParams {
    fn from(p: JobIdParams) -> Self {
        ErrorsParams {
            job_id: p.job_id,
            workspace: p.workspace,
            all_runs: false,
        }
    }
}

/// `job.watch` params (ours).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobWatchParams {
    /// The job ID.
    pub job_id: String,
    /// Longest wait in milliseconds (the conductor caps it at 5,000).
    pub timeout_ms: u64,
    /// Wait until the job has ended (completed, failed or cancelled) or paused, instead of
    /// its first sign of how it goes: for a client that waits for a job without polling its
    /// status (`mozart wait`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub until_done: bool,
}

/// `job.watch` result (ours): where the job stands when the watch ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobWatchResult {
    /// The job ID.
    pub job_id: String,
    /// Conductor-level status (`queued`, `running`, `completed`, `failed`, ...).
    pub status: String,
    /// At least one sheet of the job has completed.
    pub sheet_completed: bool,
    /// The watch ended because its time ran out, not because the job showed how it goes.
    pub timed_out: bool,
}

/// `job.pause` result (§8.3): failures are results, not errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseResult {
    /// Whether the pause signal was delivered.
    pub paused: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Ours: the sheets whose Slurm jobs the pause withdrew from Slurm's queue before they
    /// started (pending again; `job.resume` submits them anew).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<WithdrawnSheet>,
}

/// Ours: a sheet whose Slurm job `job.pause` withdrew from the queue ([`PauseResult`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithdrawnSheet {
    /// The sheet.
    pub sheet_num: u32,
    /// The Slurm job that was cancelled before it started.
    pub remote_id: String,
}

/// `job.resume` params (§8.4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumeParams {
    /// The job ID.
    pub job_id: String,
    /// Workspace override for this resume.
    #[serde(default)]
    pub workspace: Option<String>,
    /// New score file to adopt.
    #[serde(default)]
    pub config_path: Option<String>,
    /// Use the config snapshot instead of re-reading the score.
    #[serde(default)]
    pub no_reload: bool,
}

/// `job.modify` params (§8.5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModifyParams {
    /// The job ID.
    pub job_id: String,
    /// The new score file.
    #[serde(default)]
    pub config_path: Option<String>,
    /// Workspace override.
    #[serde(default)]
    pub workspace: Option<String>,
}

/// `job.cancel` result (§8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelResult {
    /// False when no running task existed.
    pub cancelled: bool,
}

/// `job.list_page` params (ours): which jobs, and which slice of them, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListPageParams {
    /// Only jobs with one of these statuses (lower case); `None` for every status.
    #[serde(default)]
    pub statuses: Option<Vec<String>>,
    /// At most this many rows; `None` (or 0) for all of them.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Rows to skip first.
    #[serde(default)]
    pub offset: u64,
    /// Also count every job by status ([`crate::status::JobPage::counts`]), for a filter bar
    /// that shows how many of each there are without listing them all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counts: bool,
    /// Also give each loaded row's progress ([`crate::status::JobPage::progress`]), so a
    /// jobs page renders from this one call instead of a `job.progress` after it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub progress: bool,
}

/// `job.overview` params (ours): the pages to answer, each as `job.list_page` would.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverviewParams {
    /// The pages, answered in this order.
    #[serde(default)]
    pub pages: Vec<ListPageParams>,
}

/// `job.progress` params (ours): the jobs whose progress a jobs list shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressParams {
    /// Job IDs (at most [`PROGRESS_JOBS`]).
    #[serde(default)]
    pub job_ids: Vec<String>,
}

/// Most jobs one `job.progress` call answers for (a page of the dashboard holds 100).
pub const PROGRESS_JOBS: usize = 200;

/// `job.clear` params (§8.8).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClearParams {
    /// Statuses to clear (default: terminal ones).
    #[serde(default)]
    pub statuses: Option<Vec<String>>,
    /// Only jobs submitted at least this long ago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than_seconds: Option<f64>,
    /// Only these jobs. Left out when unset: upstream's conductor turns an empty list into
    /// invalid SQL ([BUG] conductor.md §6.12), so a client sends the key only with IDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ids: Option<Vec<String>>,
}

/// `job.clear` result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearResult {
    /// Registry rows deleted.
    pub deleted: u64,
    /// Ours: jobs that matched but were kept because their `on_success` hooks still run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks_running: Vec<String>,
    /// Ours: paused jobs that matched but were kept because this conductor holds them
    /// (paused during its run, they resume in it): cancel them first to clear them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_paused: Vec<String>,
}

/// `job.history` params (§8.11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryParams {
    /// The job ID.
    pub job_id: String,
    /// Workspace override.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Only this sheet.
    #[serde(default)]
    pub sheet_num: Option<u32>,
    /// Maximum rows.
    #[serde(default = "default_limit_50")]
    pub limit: u32,
}

/// `job.recover` params (§8.12).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoverParams {
    /// The job ID.
    pub job_id: String,
    /// Workspace override.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Only this sheet.
    #[serde(default)]
    pub sheet_num: Option<u32>,
    /// Report only.
    #[serde(default)]
    pub dry_run: bool,
}

/// `daemon.status` result (§8.13). The first six keys are required by upstream's client;
/// the rest are ours and ignored by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// Conductor PID.
    pub pid: u32,
    /// Seconds since start (1 decimal).
    pub uptime_seconds: f64,
    /// Jobs currently running.
    pub running_jobs: u64,
    /// Same as `running_jobs` (upstream keeps both).
    pub total_jobs_active: u64,
    /// Conductor RSS in MB (1 decimal; 0.0 if unknown).
    pub memory_usage_mb: f64,
    /// Conductor version.
    pub version: String,
    /// The socket this conductor listens on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// Job counts by status (`queued`, `running`, `completed`, …).
    #[serde(default)]
    pub jobs_by_status: BTreeMap<String, u64>,
    /// Protocol version spoken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<u32>,
}

/// `daemon.health` result (§8.16).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthResult {
    /// Always `"ok"`.
    pub status: String,
    /// Conductor PID.
    pub pid: u32,
    /// Seconds since start (1 decimal).
    pub uptime_seconds: f64,
    /// Whether shutdown has begun.
    pub shutting_down: bool,
}

/// `daemon.ready` result (§8.17).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadyResult {
    /// `"ready"` or `"not_ready"`.
    pub status: String,
    /// Jobs currently running.
    pub running_jobs: u64,
    /// Conductor RSS in MB (1 decimal).
    pub memory_mb: f64,
    /// Live child processes.
    pub child_processes: u64,
    /// Equals `status == "ready"`.
    pub accepting_work: bool,
    /// Whether shutdown has begun.
    pub shutting_down: bool,
    /// Recent job failure rate is high.
    pub failure_rate_elevated: bool,
    /// Notifications are failing.
    pub notifications_degraded: bool,
    /// Seconds since start (1 decimal).
    pub uptime_seconds: f64,
    /// Ours: why the conductor is not accepting work (e.g. the disk is full), when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ReadyResult {
    /// The `reason` while the conductor is still starting (recovering its jobs).
    pub const STARTING_UP: &'static str = "starting up";

    /// True when the conductor accepts work.
    pub fn is_ready(&self) -> bool {
        self.status == "ready"
    }
}

/// `daemon.shutdown` params (§8.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownParams {
    /// Wait for running jobs (default true).
    #[serde(default = "default_true")]
    pub graceful: bool,
}

impl Default for ShutdownParams {
    fn default() -> Self {
        ShutdownParams { graceful: true }
    }
}

/// `daemon.shutdown` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownResult {
    /// Always true.
    pub shutting_down: bool,
}

/// `daemon.hello` result: our version handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloResult {
    /// [`crate::PROTOCOL_VERSION`] of the conductor.
    pub protocol_version: u32,
    /// Conductor package version.
    pub version: String,
    /// Conductor PID.
    pub pid: u32,
}

/// One backend's rate-limit window in `daemon.rate_limits`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateLimitWindow {
    /// Seconds until the limit clears (1 decimal).
    pub seconds_remaining: f64,
    /// Ours: when the limit clears (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<f64>,
}

/// `daemon.rate_limits` result (§8.23).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RateLimitsResult {
    /// Active limits by backend or instrument name: each holds every job's sheets on it.
    pub backends: BTreeMap<String, RateLimitWindow>,
    /// Number of active limits: `backends` and (ours) `job_limits`.
    pub active_limits: u64,
    /// Rate-limit events in the last hour.
    pub recent_events_count: u64,
    /// Ours: active limits that hold one job's sheets on an instrument, not every job's (a
    /// `shell` instrument's: its sheets run each score's own commands), soonest-clearing
    /// first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_limits: Vec<JobRateLimit>,
}

/// Ours: a rate limit that holds one job's sheets on an instrument (`daemon.rate_limits`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRateLimit {
    /// The job held.
    pub job_id: String,
    /// The instrument its sheets wait for.
    pub instrument: String,
    /// Seconds until the limit clears (1 decimal).
    pub seconds_remaining: f64,
    /// When the limit clears (epoch seconds).
    pub until: f64,
    /// Why, in the words of the output that hit it.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `daemon.clear_rate_limits` params (§8.24).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClearRateLimitsParams {
    /// Only this instrument (all when null).
    #[serde(default)]
    pub instrument: Option<String>,
}

/// `daemon.clear_rate_limits` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClearRateLimitsResult {
    /// Entries removed.
    pub cleared: u64,
    /// The instrument asked for.
    pub instrument: Option<String>,
}

/// `daemon.events` params (§8.20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitParams {
    /// Maximum items.
    #[serde(default = "default_limit_50")]
    pub limit: u32,
}

/// `daemon.observer_events` params (§8.22).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObserverEventsParams {
    /// Only this job (all when null).
    #[serde(default)]
    pub job_id: Option<String>,
    /// Maximum events.
    #[serde(default = "default_limit_50")]
    pub limit: u32,
}

/// `daemon.learning.patterns` params (§8.25).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatternsParams {
    /// Maximum patterns.
    #[serde(default = "default_limit_20")]
    pub limit: u32,
}

/// An event on the monitor stream (`monitor.event` params, §8.21).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonitorEvent {
    /// The job.
    pub job_id: String,
    /// The sheet (0 for job-level events).
    pub sheet_num: u32,
    /// Event name, e.g. `sheet.completed`.
    pub event: String,
    /// Payload.
    #[serde(default)]
    pub data: Option<serde_json::Value>,
    /// Epoch seconds.
    pub timestamp: f64,
}

/// One process in a [`SystemSnapshot`] (`ProcessMetric`, §8.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessMetric {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Command line.
    pub command: String,
    /// State letter (`R`, `S`, `D`, `Z`, `T`, …).
    pub state: String,
    /// CPU usage in percent since the previous sample.
    pub cpu_percent: f64,
    /// Resident memory in MB.
    pub rss_mb: f64,
    /// Virtual memory in MB.
    pub vms_mb: f64,
    /// Threads.
    pub threads: u32,
    /// Open file descriptors.
    pub open_fds: u32,
    /// Seconds since the process started.
    pub age_seconds: f64,
    /// The job whose sheet this process runs, if any.
    pub job_id: Option<String>,
    /// The sheet this process runs, if any.
    pub sheet_num: Option<u32>,
    /// Syscall counts (upstream fills these from `strace -c`; always empty here).
    #[serde(default)]
    pub syscall_counts: BTreeMap<String, u64>,
    /// Syscall time shares (always empty here, as `syscall_counts`).
    #[serde(default)]
    pub syscall_time_pct: BTreeMap<String, f64>,
}

/// One GPU in a [`SystemSnapshot`] (`GpuMetric`, §8.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuMetric {
    /// Device index.
    pub index: u32,
    /// Utilization in percent.
    pub utilization_pct: f64,
    /// Memory used in MB.
    pub memory_used_mb: f64,
    /// Total memory in MB.
    pub memory_total_mb: f64,
    /// Temperature in °C.
    pub temperature_c: f64,
}

/// Progress of one job in a [`SystemSnapshot`] (`JobProgress`, §8.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobProgress {
    /// The job.
    pub job_id: String,
    /// Sheets in the job (at least 1).
    pub total_sheets: u32,
    /// Highest sheet completed in order.
    pub last_completed_sheet: u32,
    /// A sheet currently running.
    pub current_sheet: Option<u32>,
    /// Job status string.
    pub status: String,
}

/// `daemon.top` result (`SystemSnapshot`, §8.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemSnapshot {
    /// Epoch seconds.
    pub timestamp: f64,
    /// Conductor PID.
    pub daemon_pid: u32,
    /// Machine memory in MB.
    pub system_memory_total_mb: f64,
    /// Available memory in MB.
    pub system_memory_available_mb: f64,
    /// Used memory in MB.
    pub system_memory_used_mb: f64,
    /// Conductor RSS in MB.
    pub daemon_rss_mb: f64,
    /// 1-minute load average.
    pub load_avg_1: f64,
    /// 5-minute load average.
    pub load_avg_5: f64,
    /// 15-minute load average.
    pub load_avg_15: f64,
    /// The conductor and every process below it.
    pub processes: Vec<ProcessMetric>,
    /// GPUs (none probed here).
    pub gpus: Vec<GpuMetric>,
    /// `none|low|medium|high|critical`.
    pub pressure_level: String,
    /// Jobs running.
    pub running_jobs: u64,
    /// Sheets with an attempt in flight.
    pub active_sheets: u64,
    /// Zombie processes below the conductor.
    pub zombie_count: u64,
    /// Their pids.
    pub zombie_pids: Vec<u32>,
    /// Per-job progress of the jobs the conductor holds live.
    pub job_progress: Vec<JobProgress>,
    /// Seconds since the conductor started.
    pub conductor_uptime_seconds: f64,
}

/// Kind of a [`ProcessEvent`] (§8.20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessEventType {
    /// A process appeared.
    Spawn,
    /// A process ended.
    Exit,
    /// A process received a signal.
    Signal,
    /// A process was killed.
    Kill,
    /// A process was killed by the OOM killer.
    Oom,
}

/// One process lifecycle event in `daemon.events` (`ProcessEvent`, §8.20).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessEvent {
    /// Epoch seconds.
    pub timestamp: f64,
    /// Process id.
    pub pid: u32,
    /// What happened.
    pub event_type: ProcessEventType,
    /// Exit code, when known.
    pub exit_code: Option<i32>,
    /// Signal number, when known.
    pub signal_num: Option<i32>,
    /// The job whose sheet the process ran, if any.
    pub job_id: Option<String>,
    /// The sheet, if any.
    pub sheet_num: Option<u32>,
    /// Context (the command line).
    pub details: String,
}

/// `daemon.events` result (§8.20).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventsResult {
    /// The last `limit` events, oldest first.
    pub events: Vec<ProcessEvent>,
    /// Why there are none (the profiler is off); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A monitoring result the conductor cannot give (`daemon.top`, `daemon.top.stream` with
/// the profiler off, §8.18–§8.19): the reason, as upstream sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// Why.
    pub error: String,
}

/// `daemon.top` result (§8.18): the latest snapshot, or why there is none.
// One value per call: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TopResult {
    /// The snapshot.
    Snapshot(SystemSnapshot),
    /// The profiler is off.
    Unavailable(Unavailable),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn job_request_accepts_the_python_clients_minimal_params() {
        let req: JobRequest =
            serde_json::from_str(r#"{"config_path": "/x/a.yaml", "unknown": 1}"#).unwrap();
        assert_eq!(req.config_path, "/x/a.yaml");
        assert!(!req.fresh && req.workspace.is_none() && req.chain_depth.is_none());
    }

    #[test]
    fn shutdown_defaults_to_graceful_when_params_are_empty() {
        let p: ShutdownParams = serde_json::from_str("{}").unwrap();
        assert!(p.graceful);
    }

    #[test]
    fn monitoring_results_say_why_when_the_profiler_is_off() {
        let off: TopResult = serde_json::from_str(r#"{"error":"profiler off"}"#).unwrap();
        assert!(matches!(&off, TopResult::Unavailable(u) if u.error == "profiler off"));
        assert_eq!(
            serde_json::to_string(&off).unwrap(),
            r#"{"error":"profiler off"}"#
        );
        let events = EventsResult {
            events: Vec::new(),
            error: Some("profiler off".into()),
        };
        assert_eq!(
            serde_json::to_string(&events).unwrap(),
            r#"{"events":[],"error":"profiler off"}"#
        );
    }

    #[test]
    fn clear_params_name_job_ids_only_when_given() {
        let all = ClearParams {
            statuses: Some(vec!["failed".into()]),
            ..ClearParams::default()
        };
        assert_eq!(
            serde_json::to_string(&all).unwrap(),
            r#"{"statuses":["failed"]}"#
        );
        let some = ClearParams {
            statuses: None,
            older_than_seconds: Some(60.0),
            job_ids: Some(vec!["a".into()]),
        };
        assert_eq!(
            serde_json::to_string(&some).unwrap(),
            r#"{"statuses":null,"older_than_seconds":60.0,"job_ids":["a"]}"#
        );
    }

    #[test]
    fn job_response_status_is_lowercase_on_the_wire() {
        let r = JobResponse::new("a", JobResponseStatus::Rejected, Some("no".into()));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"job_id":"a","status":"rejected","message":"no"}"#
        );
        // Ours: a refusal names its reason; upstream's CLI ignores the extra field.
        let r = JobResponse::submission_rejected("a", "Daemon is shutting down");
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"job_id":"a","status":"rejected","message":"Daemon is shutting down","reason":"shutting_down"}"#
        );
    }
}

/// `job.logs.follow` params (ours): which job's log to stream (all when absent).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogFollowParams {
    /// Only lines mentioning this job, and its sheets' progress.
    #[serde(default)]
    pub job_id: Option<String>,
    /// Lines already in the log to send first.
    #[serde(default)]
    pub backlog_lines: usize,
}

/// One `job.logs.entry` notification: a raw conductor log line, or a progress entry of a
/// running sheet (a log-shaped object: `timestamp`, `level`, `event`, `job_id`, …).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFollowItem {
    /// First item of every stream: the log file the conductor follows.
    Started(String),
    /// A line of the conductor's log file, as written.
    Line(String),
    /// A structured entry made by the conductor (sheet progress).
    Entry(serde_json::Map<String, serde_json::Value>),
}

/// A server → client notification as the conductor writes it on a streaming connection
/// (upstream's shape, §7.7: `{"jsonrpc":"2.0","method":M,"params":<event>}`), e.g. a
/// [`MonitorEvent`] or a [`LogFollowItem`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notification<T> {
    /// [`crate::methods::MONITOR_EVENT_NOTIFICATION`] or
    /// [`crate::methods::JOB_LOGS_NOTIFICATION`].
    pub method: String,
    /// The event.
    pub params: T,
}
