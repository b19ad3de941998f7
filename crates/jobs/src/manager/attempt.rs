//! What one attempt's parts share (the musician plays it, the reviewer judges it): the
//! details the checkpoint records about it, and its instrument run under watch. A leaf
//! below the job table, the musician and the reviewer.

use std::sync::Arc;
use std::time::Duration;

use mozart_backends::{ExecutionRequest, ExecutionResult};
use mozart_baton::validation::ValidationReport;

use super::Shared;

/// What the checkpoint records about an attempt beyond what the baton tracks.
#[derive(Debug, Clone, Default)]
pub(crate) struct AttemptDetails {
    pub attempt_number: u32,
    /// The instrument the attempt ran on (the sheet's may have changed since: a failure
    /// can move it to its fallback before the attempt is recorded).
    pub instrument: Option<String>,
    pub mode: String,
    pub started_at: f64,
    pub duration_seconds: f64,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub error_message: Option<String>,
    pub error_code: Option<String>,
    pub error_category: Option<String>,
    pub validation: Option<ValidationReport>,
    pub cost_usd: f64,
    /// How sure `cost_usd` is: 1.0 exact, lower when estimated, 0.0 unknown (the instrument
    /// reported neither a cost nor its tokens: `cost_usd` is then 0 for lack of a figure).
    pub cost_confidence: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model: Option<String>,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// Learned patterns injected into this attempt's prompt.
    pub applied: super::learning::Injected,
    /// The reviewer loop after this attempt (reviewed sheets, once a verdict is in).
    pub review: Option<mozart_state::review::ReviewState>,
}

/// Run the instrument, recording its process group once it has started and forgetting it
/// when the attempt ends — normally, or because the musician was aborted (then the guard is
/// dropped with the future). Watched in the attempt's own task: the record is made in the
/// same poll that spawned the process, with no task or channel per attempt.
pub(crate) async fn execute_watched(
    shared: &Arc<Shared>,
    job_id: &str,
    sheet_num: u32,
    timeout: Duration,
    backend: &dyn mozart_backends::Backend,
    req: ExecutionRequest,
) -> ExecutionResult {
    execute_watched_kept(shared, job_id, sheet_num, timeout, backend, req)
        .await
        .0
}

/// [`execute_watched`], handing back the guard that forgets the process group, for a
/// caller that drops it only once the attempt's result is reported: the watchdog's
/// `untrack` and the in-flight journal's update are then off the path from the
/// instrument's exit to the next sheet's start (issue 24). The group is gone by then
/// (the backend returns once it is), so nothing it guards still runs meanwhile.
pub(crate) async fn execute_watched_kept(
    shared: &Arc<Shared>,
    job_id: &str,
    sheet_num: u32,
    timeout: Duration,
    backend: &dyn mozart_backends::Backend,
    req: ExecutionRequest,
) -> (ExecutionResult, Option<Watched>) {
    let progress = Arc::clone(&req.progress);
    let execution = backend.execute(req);
    tokio::pin!(execution);
    // HTTP instruments never report a pid: then the execution simply ends first.
    let pid = tokio::select! {
        biased;
        result = &mut execution => return (result, None),
        pid = progress.started_pid() => pid,
    };
    let ticks = progress.start_ticks();
    let tag = progress.attempt_tag();
    let watched = Watched::start(
        shared,
        job_id,
        sheet_num,
        pid,
        ticks,
        tag.as_deref(),
        timeout,
    );
    (execution.await, Some(watched))
}

/// A started instrument group in the in-flight journal and under the watchdog, until dropped.
pub(crate) struct Watched {
    /// The group handed to the watchdog directly (the journal could not take it).
    tracked: Option<(Arc<Shared>, u32)>,
    _record: Option<super::reaper::InflightRecord>,
}

impl Watched {
    /// Put the process group `pid` (its leader's start time `ticks`, when the spawn knew
    /// it; the attempt's `tag`) of `job_id`'s `sheet_num` under watch until dropped. A
    /// job's hooks use sheet 0.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        job_id: &str,
        sheet_num: u32,
        pid: u32,
        ticks: Option<u64>,
        tag: Option<&str>,
        timeout: Duration,
    ) -> Self {
        let mut watched = Watched {
            tracked: None,
            _record: None,
        };
        // The spawn usually knows the start time (the value `/proc/<pid>/stat` shows);
        // read `/proc` only when it does not. (No start time: the process already ended,
        // nothing to guard.)
        let Some(ticks) = ticks.or_else(|| mozart_conductor::watchdog::start_ticks(pid)) else {
            return watched;
        };
        // Our own timer ends the attempt at `timeout`; the watchdog only acts if we cannot
        // (a few seconds later, or at once when the conductor dies). It reads the group from
        // the in-flight journal; only a group the journal could not take is sent to it.
        let deadline = mozart_state::epoch_now() + timeout.as_secs_f64() + 5.0;
        // The attempt's tag names its processes once the group's leader is gone (a shell
        // ended by SIGTERM while a child that ignores it runs on).
        watched._record = shared
            .inflight
            .record(job_id, sheet_num, pid, ticks, tag, deadline);
        if let (None, Some(w)) = (&watched._record, &shared.watchdog) {
            w.track_started(pid, ticks, tag, deadline);
            watched.tracked = Some((Arc::clone(shared), pid));
        }
        watched
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some((shared, pid)) = &self.tracked {
            if let Some(w) = &shared.watchdog {
                w.untrack(*pid);
            }
        }
    }
}
