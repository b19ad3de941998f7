//! What the baton hands an instrument ([`ExecutionRequest`]) and the instrument interface
//! ([`Backend`]). Above `placement`, because a request says where its process runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::placement::{PlacedAttempt, Placement, RemoteJournal};
use crate::types::{BoxFuture, ExecutionResult, HealthStatus, Progress, DEFAULT_KILL_GRACE};

/// One execution of an instrument for one sheet attempt.
#[derive(Debug, Clone)]
pub struct ExecutionRequest {
    /// The fully rendered prompt.
    pub prompt: String,
    /// The sheet's workspace; the child's current directory.
    pub working_dir: PathBuf,
    /// Wall-clock limit; past it the process group is terminated.
    pub timeout: Duration,
    /// Model override (`instrument_config.model`); `None` uses the profile default.
    pub model: Option<String>,
    /// Extra environment for the child (score-level env), applied last.
    pub env: Vec<(String, String)>,
    /// Job this attempt belongs to (for logs only).
    pub job_id: String,
    /// Sheet number (for logs only).
    pub sheet_num: u32,
    /// Attempt number (for logs only).
    pub attempt: u32,
    /// Remaining `instrument_config` overrides for this attempt.
    pub options: serde_json::Map<String, serde_json::Value>,
    /// Live progress, readable by the caller while the execution runs.
    pub progress: Arc<Progress>,
    /// When set, full output is teed to `{base}.stdout.log` / `{base}.stderr.log`, made in
    /// the logs directory checked and opened when the attempt was prepared.
    pub output_log_base: Option<crate::output_log::LogBase>,
    /// Set instead of `output_log_base` when the sheet's logs directory could not be used:
    /// the logs' path without its suffix (`…/logs/sheet-02`) and why. Output that would have
    /// gone to a file is then said unwritten in the conductor's log
    /// ([`crate::output_log::UNWRITTEN_EVENT`]), which `mozart logs` reports.
    pub output_log_unavailable: Option<(PathBuf, String)>,
    /// Grace between SIGTERM and SIGKILL on timeout or cancellation.
    pub kill_grace: Duration,
    /// Where the instrument process runs (CLI instruments; `local` by default).
    pub placement: Placement,
    /// Where a remote placement records the attempt's remote id (the sheet's checkpoint).
    pub remote: Option<Arc<dyn RemoteJournal>>,
}

impl ExecutionRequest {
    /// A request with empty context fields and default progress / grace.
    pub fn new(
        prompt: impl Into<String>,
        working_dir: impl Into<PathBuf>,
        timeout: Duration,
    ) -> Self {
        ExecutionRequest {
            prompt: prompt.into(),
            working_dir: working_dir.into(),
            timeout,
            model: None,
            env: Vec::new(),
            job_id: String::new(),
            sheet_num: 0,
            attempt: 0,
            options: serde_json::Map::new(),
            progress: Arc::new(Progress::new()),
            output_log_base: None,
            output_log_unavailable: None,
            kill_grace: DEFAULT_KILL_GRACE,
            placement: Placement::Local,
            remote: None,
        }
    }

    /// Who the attempt is for and where it reports, as its placement needs them.
    pub(crate) fn placed(&self) -> PlacedAttempt<'_> {
        PlacedAttempt {
            job_id: &self.job_id,
            sheet_num: self.sheet_num,
            attempt: self.attempt,
            working_dir: &self.working_dir,
            progress: &self.progress,
            remote: self.remote.as_ref(),
        }
    }
}

/// Something that runs prompts: a CLI instrument process or an HTTP API.
pub trait Backend: Send + Sync {
    /// Display name (profile `display_name` or `claude-cli`).
    fn name(&self) -> &str;

    /// Run one prompt. Dropping the future cancels it: the process group is sent SIGTERM,
    /// then SIGKILL after the request's grace.
    fn execute(&self, req: ExecutionRequest) -> BoxFuture<'_, ExecutionResult>;

    /// Whether the instrument can run here (binary on PATH); never consumes quota.
    fn health_check(&self) -> BoxFuture<'_, HealthStatus>;
}
