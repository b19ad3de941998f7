//! Submitting a score: the short look at a just-accepted job (cli.md §3.1 step 8) and the
//! sheet failure that explains a job that already failed.

use std::time::{Duration, Instant};

use mozart_ipc::status::{JobList, JobStatusResult};
use mozart_ipc::types::JobIdParams;
use mozart_ipc::{methods, BlockingClient};
use serde_json::json;

/// How long and how often to watch a just-accepted job for an early failure (§3.1 step 8).
pub const EARLY_FAILURE_WINDOW: Duration = Duration::from_millis(1500);
const EARLY_FAILURE_POLL: Duration = Duration::from_millis(200);

fn job_params(job_id: &str) -> JobIdParams {
    JobIdParams {
        job_id: job_id.to_string(),
        workspace: None,
    }
}

/// The status result of a watched job that already failed or was cancelled (asked on the
/// same connection); None when it goes on or ended well, or the question fails.
pub fn ended(
    client: &mut BlockingClient,
    seen: &mozart_ipc::types::JobWatchResult,
) -> Option<JobStatusResult> {
    matches!(seen.status.as_str(), "failed" | "cancelled")
        .then(|| {
            client
                .call(methods::JOB_STATUS, job_params(&seen.job_id))
                .ok()
        })
        .flatten()
}

/// Watch a just-accepted job briefly; the status result if it already failed or was
/// cancelled. Errors are ignored: the submission itself succeeded. For a conductor that did
/// not watch the job on the submission itself (`JobRequest::watch_ms`: an older one).
pub fn early_failure(client: &mut BlockingClient, job_id: &str) -> Option<JobStatusResult> {
    // One call the conductor answers as soon as the job shows how it goes: its first
    // sheet completed (the instrument works: nothing to report), it ended, paused or
    // waits for a job slot. A shell loop of `mozart run` then costs each score about one
    // sheet's time instead of 1.5 s (issue 24). It goes on the submission's connection.
    // An older conductor without `job.watch` gets the poll below.
    let params = mozart_ipc::types::JobWatchParams {
        job_id: job_id.to_string(),
        timeout_ms: EARLY_FAILURE_WINDOW.as_millis() as u64,
        until_done: false,
    };
    match client.call::<_, mozart_ipc::types::JobWatchResult>(methods::JOB_WATCH, &params) {
        Ok(seen) => return ended(client, &seen),
        Err(mozart_ipc::IpcError::Rpc { error, .. }) if error.is_method_not_found() => {}
        Err(_) => return None,
    }
    let socket = client.socket().to_path_buf();
    let deadline = Instant::now() + EARLY_FAILURE_WINDOW;
    // A short job is often done before the first 0.2 s poll of upstream's schedule: look
    // almost at once, then less and less often up to upstream's pace (20, 40, 80, 160,
    // 200 ms …), so `mozart run` returns soon after a quick job ends.
    let mut wait = Duration::from_millis(20);
    while Instant::now() < deadline {
        std::thread::sleep(wait);
        wait = (wait * 2).min(EARLY_FAILURE_POLL);
        let Ok(mut client) = BlockingClient::connect(&socket) else {
            continue;
        };
        // `job.list` names every job's status without its checkpoint: a poll of a
        // 1,000-sheet job costs the conductor nothing (`job.status` serialises every sheet).
        let Ok(list) = client.call::<_, JobList>(methods::JOB_LIST, ()) else {
            continue;
        };
        let status = list
            .0
            .iter()
            .find(|j| j.job_id() == job_id)
            .map(|j| j.status().to_string());
        match status.as_deref() {
            Some("failed" | "cancelled") => {
                return client.call(methods::JOB_STATUS, job_params(job_id)).ok();
            }
            Some("completed") => return None,
            _ => {}
        }
    }
    None
}

/// The sheet failure that explains a failed job: the first failed sheet that was not just
/// blocked by another one (the root cause), else the first failed sheet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The failed sheet.
    pub sheet_num: u32,
    /// Its error code (`E006` …), when one was recorded.
    pub error_code: Option<String>,
    /// Its error message.
    pub message: String,
    /// The last line the instrument wrote to stderr, when the message does not carry it.
    pub stderr: Option<String>,
    /// Failed sheets besides this one (most were blocked by it).
    pub others: usize,
}

impl Cause {
    /// The cause as `mozart run --json` shows it (`failure`).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "sheet_num": self.sheet_num,
            "error_code": self.error_code,
            "error_message": self.message,
            "stderr": self.stderr,
        })
    }
}

/// Why a job failed, from its checkpoint (None when it has none or no sheet failed).
pub fn first_failure(status: &JobStatusResult) -> Option<Cause> {
    use mozart_ipc::checkpoint::SheetStatus;
    let cp = status.checkpoint()?;
    let failed: Vec<_> = cp
        .sheets
        .values()
        .filter(|s| s.status == SheetStatus::Failed)
        .collect();
    let blocked = |m: &str| m.starts_with("Blocked by failed dependency");
    let root = failed
        .iter()
        .find(|s| s.error_message.as_deref().is_some_and(|m| !blocked(m)))
        .or_else(|| failed.first())?;
    let message = root
        .error_message
        .clone()
        .unwrap_or_else(|| "no error message was recorded".to_string());
    // What the instrument said is often the real reason ("exit 3" is not).
    let stderr = root
        .stderr_tail
        .as_deref()
        .and_then(|t| t.lines().rev().map(str::trim).find(|l| !l.is_empty()))
        .filter(|line| !message.contains(line))
        .map(|line| line.chars().take(300).collect());
    Some(Cause {
        sheet_num: root.sheet_num,
        error_code: root.error_code.clone(),
        message,
        stderr,
        others: failed.len() - 1,
    })
}
