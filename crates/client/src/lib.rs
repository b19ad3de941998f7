//! The one client of the conductor: what the CLI, the dashboard and the MCP server share to
//! talk to it and to word its answers for a user.
//!
//! - [`hints`]: score-loading errors and refused submissions as a message plus hints.
//! - [`error`]: a failed call sorted once into what the user is told ([`ClientError`]).
//! - [`blocking`]: connecting and calling from a command that waits (the CLI).
//! - [`conductor`]: the async operations (`job.*` calls) with their user-facing errors.
//! - [`submit`]: the short look at a just-submitted job and the cause of its failure.
//! - [`daemon`]: starting a conductor in the background and waiting until it is ready.
//! - [`diagnose`]: the diagnose report and the error records `errors` shares with it.
//! - [`money`]: amounts of money as every view shows them.
//!
//! A crate of its own rather than a module of `ipc`: the hints word `mozart-config`'s
//! score-loading errors, and `ipc` stays the dependency-light protocol crate.

pub mod blocking;
pub mod conductor;
pub mod conductor_config;
pub mod daemon;
pub mod diagnose;
pub mod error;
pub mod hints;
pub mod money;
pub mod submit;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

use mozart_ipc::checkpoint::{HookResult, JobCheckpoint};
use mozart_ipc::status::JobStatusResult;

pub use conductor::{Conductor, OpError};
pub use error::ClientError;

/// A `job.status` answer about one job.
#[derive(Debug, Clone)]
pub struct JobDetail {
    /// Score ID.
    pub job_id: String,
    /// The answer: the checkpoint, or metadata for a job that has none yet.
    pub result: JobStatusResult,
}

impl JobDetail {
    /// The checkpoint, when the job has one (a queued job may only have metadata).
    pub fn checkpoint(&self) -> Option<&JobCheckpoint> {
        self.result.checkpoint()
    }

    fn record(&self) -> Option<&mozart_ipc::status::JobListEntry> {
        match &self.result {
            JobStatusResult::Record(entry) => Some(entry),
            JobStatusResult::Checkpoint(_) => None,
        }
    }

    /// Lower-case job status.
    pub fn status(&self) -> String {
        match self.checkpoint() {
            Some(cp) => cp.status.as_str().to_string(),
            None => self
                .record()
                .map(|f| f.status().to_lowercase())
                .unwrap_or_default(),
        }
    }

    /// The status as a person reads it (`queued`, `pausing` …) and its label with what it
    /// waits for (`pausing (1 running)`).
    pub fn shown_status(&self) -> (String, String) {
        let shown = self.result.shown_status().to_lowercase();
        let label = match self.result.pausing() {
            Some(n) => format!("pausing ({n} running)"),
            None => shown.clone(),
        };
        (shown, label)
    }

    /// The job's workspace.
    pub fn workspace(&self) -> Option<&str> {
        self.result.workspace().filter(|w| !w.is_empty())
    }

    /// The score file.
    pub fn config_path(&self) -> Option<&str> {
        match self.checkpoint() {
            Some(cp) => cp.config_path.as_deref(),
            None => self.record().map(|f| f.config_path()),
        }
        .filter(|p| !p.is_empty())
    }

    /// The job-level error.
    pub fn error_message(&self) -> Option<&str> {
        match self.checkpoint() {
            Some(cp) => cp.error_message.as_deref(),
            None => self.record().and_then(|f| f.error_message()),
        }
    }

    /// Hook results the conductor attached.
    pub fn hook_results(&self) -> &[HookResult] {
        self.checkpoint()
            .map(|cp| cp.hook_results.as_slice())
            .unwrap_or(&[])
    }
}
