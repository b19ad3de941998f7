//! Conductor operations of the async clients (the dashboard and the MCP server): the same
//! `job.*` calls the CLI makes, over the same Unix socket, with the same messages and hints.
//!
//! Every failure is an [`OpError`]: a one-line message plus hints, never a panic or a raw
//! protocol dump, so a page or a tool result can show it as is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mozart_ipc::status::{JobListEntry, JobStatusResult};
use mozart_ipc::types::{CancelResult, HealthResult, JobResponse, JobResponseStatus, PauseResult};
use mozart_ipc::{methods, Client, ClientTimeouts, IpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::hints::{
    self, rejection_headline, rejection_hints, Advice, LIST_HINT, NOT_RUNNING, START_HINT,
};
use crate::{ClientError, JobDetail};

/// A failed operation as a user should see it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    /// What went wrong, one line.
    pub message: String,
    /// What to do about it.
    pub hints: Vec<String>,
    /// The CLI's error code where it shows one (`E501`, `E502`).
    pub code: Option<String>,
    /// True when the conductor could not be reached at all.
    pub conductor_down: bool,
}

impl OpError {
    /// An error with hints.
    pub fn new(message: impl Into<String>, hints: &[&str]) -> OpError {
        OpError {
            message: message.into(),
            hints: hints.iter().map(|h| h.to_string()).collect(),
            code: None,
            conductor_down: false,
        }
    }

    /// The standard "not running" error.
    pub fn not_running() -> OpError {
        OpError {
            conductor_down: true,
            ..OpError::new(NOT_RUNNING, &[START_HINT])
        }
    }

    fn with_code(mut self, code: &str) -> OpError {
        self.code = Some(code.to_string());
        self
    }

    /// `Error [E502]: message` style text with hints on following lines (tool results).
    pub fn render_text(&self) -> String {
        let mut out = match &self.code {
            Some(code) => format!("Error [{code}]: {}", self.message),
            None => format!("Error: {}", self.message),
        };
        if !self.hints.is_empty() {
            out.push_str("\n\nHints:");
            for h in &self.hints {
                out.push_str("\n  - ");
                out.push_str(h);
            }
        }
        out
    }
}

impl From<Advice> for OpError {
    fn from(advice: Advice) -> OpError {
        OpError {
            message: advice.message,
            hints: advice.hints,
            code: None,
            conductor_down: false,
        }
    }
}

/// Check a score ID the way the CLI does before sending it (cli.md §1.7).
pub fn check_job_id(id: &str) -> Result<(), OpError> {
    let bad = id.is_empty()
        || id.len() > 255
        || id.contains('/')
        || id.contains('\0')
        || id.chars().any(char::is_control)
        || id == "."
        || id == "..";
    if bad {
        return Err(OpError::new(
            format!("Invalid score ID: {id:?}"),
            &[
                "A score ID is the score file's name without .yaml.",
                LIST_HINT,
            ],
        ));
    }
    Ok(())
}

/// A handle on one conductor socket. Each call opens its own connection, as the CLI does,
/// so a slow call never blocks another and a restarted conductor is picked up at once.
#[derive(Debug, Clone)]
pub struct Conductor {
    socket: PathBuf,
    timeouts: ClientTimeouts,
}

impl Conductor {
    /// The conductor listening on `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Conductor {
        Conductor {
            socket: socket.into(),
            // Short connect: a page must say "not running" quickly, not hang.
            timeouts: ClientTimeouts {
                connect: Duration::from_secs(2),
                response: Duration::from_secs(30),
            },
        }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A fresh connection.
    pub async fn connect(&self) -> Result<Client, OpError> {
        Client::connect_with(&self.socket, self.timeouts)
            .await
            .map_err(|err| user_error(ClientError::from_connect(err)))
    }

    /// Call one method and decode its result.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: P,
    ) -> Result<R, OpError> {
        let mut client = self.connect().await?;
        client.call(method, params).await.map_err(call_error)
    }

    /// Liveness probe.
    pub async fn health(&self) -> Result<HealthResult, OpError> {
        self.call(methods::DAEMON_HEALTH, json!({})).await
    }

    /// `job.list`: the jobs, newest first.
    pub async fn list(&self) -> Result<Vec<JobListEntry>, OpError> {
        self.call(methods::JOB_LIST, json!({})).await
    }

    /// `job.list_page` (ours): one page of jobs, newest first, with how many match in all.
    pub async fn list_page(
        &self,
        params: &mozart_ipc::types::ListPageParams,
    ) -> Result<mozart_ipc::status::JobPage, OpError> {
        self.call(methods::JOB_LIST_PAGE, params).await
    }

    /// `job.progress` (ours): the progress of the loaded jobs among `ids`, in one call.
    pub async fn progress(
        &self,
        ids: Vec<String>,
    ) -> Result<mozart_ipc::status::ProgressResult, OpError> {
        let params = mozart_ipc::types::ProgressParams { job_ids: ids };
        self.call(methods::JOB_PROGRESS, params).await
    }

    /// `job.status`: the checkpoint, or metadata for a job not yet started.
    pub async fn status(&self, id: &str) -> Result<JobDetail, OpError> {
        let value = self
            .job_call(methods::JOB_STATUS, id, json!({"job_id": id}))
            .await?;
        detail(id, value)
    }

    /// A call about job `id` (checked first); an unknown job is "Score not found".
    async fn job_call(&self, method: &str, id: &str, params: Value) -> Result<Value, OpError> {
        check_job_id(id)?;
        self.call(method, params)
            .await
            .map_err(|e| not_found_as(id, e))
    }

    /// `job.status` with a sheet query (issue 24): the sheets it chooses, and `sheets_view`
    /// with the counts of every sheet — what a page about one job of any size shows.
    pub async fn status_view(
        &self,
        id: &str,
        query: &mozart_ipc::sheet_view::SheetQuery,
    ) -> Result<JobDetail, OpError> {
        let params = json!({"job_id": id, "sheets": query});
        let value = self.job_call(methods::JOB_STATUS, id, params).await?;
        detail(id, value)
    }

    /// `job.errors`: the job's state, as `job.status` gives it, with the errors of its
    /// current run (of every run with `all_runs`), and which runs those are.
    pub async fn errors(
        &self,
        id: &str,
        all_runs: bool,
    ) -> Result<(JobDetail, Option<mozart_ipc::status::ErrorRuns>), OpError> {
        let params = mozart_ipc::types::ErrorsParams {
            job_id: id.to_string(),
            workspace: None,
            all_runs,
        };
        let value = self
            .job_call(methods::JOB_ERRORS, id, json!(params))
            .await?;
        let runs = value
            .get("runs")
            .and_then(|r| serde_json::from_value(r.clone()).ok());
        let state = detail(id, value.get("state").cloned().unwrap_or(Value::Null))?;
        Ok((state, runs))
    }

    /// `job.pause`, with `mozart pause`'s E501/E502 messages.
    pub async fn pause(&self, id: &str) -> Result<String, OpError> {
        check_job_id(id)?;
        let result: PauseResult = match self.call(methods::JOB_PAUSE, json!({"job_id": id})).await {
            Ok(r) => r,
            Err(e) if e.conductor_down => return Err(e),
            Err(e) => return Err(OpError::new(e.message, &[LIST_HINT]).with_code("E501")),
        };
        if result.paused {
            return Ok(format!(
                "Pause signal sent to score '{id}'. Score will pause at next sheet boundary."
            ));
        }
        Err(OpError::from(hints::pause_refused(id, result.error)).with_code("E502"))
    }

    /// `job.resume`, with `mozart resume`'s messages.
    pub async fn resume(&self, id: &str) -> Result<String, OpError> {
        check_job_id(id)?;
        let params =
            json!({"job_id": id, "workspace": null, "config_path": null, "no_reload": false});
        let result: JobResponse = match self.call(methods::JOB_RESUME, params).await {
            Ok(r) => r,
            Err(e) if e.conductor_down => return Err(e),
            Err(e) => return Err(OpError::new(e.message, &[LIST_HINT])),
        };
        let message = result.message.unwrap_or_default();
        if result.status == JobResponseStatus::Accepted {
            return Ok(if message.is_empty() {
                format!("Resume accepted for score '{id}'.")
            } else {
                format!("Resume accepted for score '{id}'. {message}")
            });
        }
        Err(hints::resume_refused(id, Some(message)).into())
    }

    /// `job.cancel`, with `mozart cancel`'s messages.
    pub async fn cancel(&self, id: &str) -> Result<String, OpError> {
        check_job_id(id)?;
        let result: CancelResult = match self.call(methods::JOB_CANCEL, json!({"job_id": id})).await
        {
            Ok(r) => r,
            Err(e) if e.conductor_down => return Err(e),
            Err(e) => {
                return Err(OpError::new(
                    e.message,
                    &["Check conductor status: mozart conductor-status"],
                ))
            }
        };
        if result.cancelled {
            Ok(format!("Score '{id}' cancelled."))
        } else {
            Err(hints::cancel_missed(id).into())
        }
    }

    /// `job.submit` of a score file (absolute path), with `mozart run`'s rejection hints.
    pub async fn submit(&self, score: &Path, fresh: bool) -> Result<JobResponse, OpError> {
        let path = std::path::absolute(score).unwrap_or_else(|_| score.to_path_buf());
        if !path.is_file() {
            return Err(OpError::new(
                format!("Score file not found: {}", path.display()),
                &["Check the file path and try again."],
            ));
        }
        // Answered once the conductor has seen whether the job got a job slot (and, within
        // the early-failure window, how its first sheet went): "queued" only when it waits.
        let params = json!({
            "config_path": path.display().to_string(),
            "fresh": fresh,
            "watch_ms": crate::submit::EARLY_FAILURE_WINDOW.as_millis() as u64,
        });
        let response: JobResponse = self.call(methods::JOB_SUBMIT, params).await?;
        match response.status {
            JobResponseStatus::Accepted | JobResponseStatus::Pending => Ok(response),
            JobResponseStatus::Rejected | JobResponseStatus::Error => {
                let reason = response.rejection_reason();
                let message = response.message.unwrap_or_default();
                let id = if response.job_id.is_empty() {
                    path.file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default()
                } else {
                    response.job_id
                };
                Err(OpError {
                    message: rejection_headline(Some(&message)),
                    hints: rejection_hints(reason, &id, &path.display().to_string(), fresh).0,
                    code: None,
                    conductor_down: false,
                })
            }
        }
    }
}

/// Decode a `job.status`-shaped answer (null = unknown job).
fn detail(id: &str, value: Value) -> Result<JobDetail, OpError> {
    if value.is_null() {
        return Err(score_not_found(id));
    }
    match JobStatusResult::from_value(value) {
        Some(result) => Ok(JobDetail {
            job_id: id.to_string(),
            result,
        }),
        None => Err(OpError::new(
            format!(
                "The conductor's answer about '{id}' is neither a checkpoint nor a job record."
            ),
            &["Check the conductor's log: mozart logs -n 50"],
        )),
    }
}

fn score_not_found(id: &str) -> OpError {
    OpError::new(format!("Score not found: {id}"), &[LIST_HINT])
}

/// A job error from the conductor (unknown job, no state) becomes "Score not found".
fn not_found_as(id: &str, err: OpError) -> OpError {
    if err.code.as_deref() == Some("job") {
        score_not_found(id)
    } else {
        err
    }
}

/// Translate a failed call the way the CLI's `call_error` does (cli.md §1.5).
fn call_error(err: IpcError) -> OpError {
    user_error(ClientError::from_call(err))
}

/// What a page or a tool result says about a failed call: the one translation of
/// [`ClientError`] for the async clients.
fn user_error(err: ClientError) -> OpError {
    let conductor_down = err.conductor_down();
    let error = match err {
        ClientError::NotRunning => OpError::not_running(),
        // Another user's socket (issue 21): nothing was sent; say whose and what to do.
        ClientError::Untrusted { problem, fix } => OpError::new(problem, &[fix.as_str()]),
        // Marked so callers can turn it into their own "not found" text.
        ClientError::Job { message } => OpError::new(message, &[LIST_HINT]).with_code("job"),
        err @ ClientError::Unsupported { .. } => OpError::new(
            err.to_string(),
            &["Restart the conductor to pick up code changes: mozart restart"],
        ),
        ClientError::Refused { message } => OpError::new(message, &[]),
        err @ ClientError::Timeout(_) => OpError::new(
            err.to_string(),
            &["Check conductor health: mozart conductor-status"],
        ),
        ClientError::Transport(err @ IpcError::Io { .. }) => {
            OpError::new(err.to_string(), &[START_HINT])
        }
        other => OpError::new(
            other.to_string(),
            &["Check the conductor's log: mozart logs -n 50"],
        ),
    };
    OpError {
        conductor_down,
        ..error
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_is_the_clis_not_running_message() {
        let dir = tempfile::tempdir().unwrap();
        let c = Conductor::new(dir.path().join("none.sock"));
        let err = c.list().await.unwrap_err();
        assert_eq!(err.message, NOT_RUNNING);
        assert_eq!(err.hints, vec![START_HINT.to_string()]);
        assert!(err.conductor_down);
    }

    #[test]
    fn bad_job_ids_are_refused_before_any_call() {
        assert!(check_job_id("../etc").is_err());
        assert!(check_job_id("").is_err());
        assert!(check_job_id("my-score").is_ok());
    }

    #[test]
    fn error_text_shows_the_code_and_hints() {
        let e = OpError::new("nope", &["do this"]).with_code("E502");
        assert_eq!(e.render_text(), "Error [E502]: nope\n\nHints:\n  - do this");
    }
}
