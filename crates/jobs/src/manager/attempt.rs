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

/// How much of each stream of a `command_succeeds` check is kept: the failure message shows
/// its first 500 characters.
const CHECK_OUTPUT_KEPT: usize = 64 * 1024;

/// The start of one stream of a command check, fed line by line.
#[derive(Default)]
struct Head {
    kept: Vec<u8>,
    cut: bool,
}

impl Head {
    fn push(&mut self, line: &[u8]) {
        let room = CHECK_OUTPUT_KEPT.saturating_sub(self.kept.len());
        if line.len() + 1 > room {
            self.kept.extend_from_slice(&line[..line.len().min(room)]);
            self.cut = true;
        } else {
            self.kept.extend_from_slice(line);
            self.kept.push(b'\n');
        }
    }
}

/// A stream's [`Head`] as a line sink.
struct HeadSink(Arc<std::sync::Mutex<Head>>);

impl mozart_backends::process::LineSink for HeadSink {
    fn line(&mut self, line: &[u8]) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
    }
}

/// The runner of `job_id`'s `sheet_num`'s `command_succeeds` checks: each runs as an
/// instrument does ([`mozart_backends::process::run_process`]) — tagged, so that whatever it
/// starts (`cmd &`, `nohup`, `setsid`) is ended with it: once `bash` exits (after a short
/// drain, not waiting for pipes a background child holds), at its timeout, when the check
/// is cancelled (the future dropped) and when the conductor stops; and recorded in the
/// in-flight journal like an attempt's group, so a conductor killed meanwhile leaves it to
/// the watchdog and the next start, not running beside the sheet's re-run.
pub(crate) fn check_runner(
    shared: &Arc<Shared>,
    job_id: &str,
    sheet_num: u32,
) -> mozart_baton::validation::CommandRunner {
    let (shared, job_id) = (Arc::clone(shared), job_id.to_owned());
    Arc::new(move |req| {
        let (shared, job_id) = (Arc::clone(&shared), job_id.clone());
        Box::pin(async move { run_check(&shared, &job_id, sheet_num, req).await })
    })
}

async fn run_check(
    shared: &Arc<Shared>,
    job_id: &str,
    sheet_num: u32,
    req: mozart_baton::validation::CommandRequest,
) -> mozart_baton::validation::CommandOutcome {
    use mozart_backends::process::{run_process, LineHook, ProcessSpec};
    use mozart_baton::validation::CommandOutcome;
    let mut spec = ProcessSpec::new("bash", vec!["-c".into(), req.command], req.timeout);
    spec.cwd = Some(req.working_dir);
    spec.owner = Some(job_id.to_owned());
    let out = Arc::new(std::sync::Mutex::new(Head::default()));
    let err = Arc::new(std::sync::Mutex::new(Head::default()));
    let err_lines = Arc::clone(&err);
    spec.stderr_lines = Some(LineHook(Arc::new(move |line: &[u8]| {
        err_lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
    })));
    let progress = Arc::new(mozart_backends::Progress::new());
    let sink: Box<dyn mozart_backends::process::LineSink> = Box::new(HeadSink(Arc::clone(&out)));
    let execution = run_process(spec, Arc::clone(&progress), Some(sink));
    tokio::pin!(execution);
    // A spawn that failed ends before any pid is known.
    let started = tokio::select! {
        biased;
        done = &mut execution => Err(done),
        pid = progress.started_pid() => Ok(pid),
    };
    let (outcome, _sink) = match started {
        Err(done) => done,
        Ok(pid) => {
            let tag = progress.attempt_tag();
            let _watched = Watched::start(
                shared,
                job_id,
                sheet_num,
                pid,
                progress.start_ticks(),
                tag.as_deref(),
                req.timeout,
            );
            execution.await
        }
    };
    if let Some(e) = outcome.spawn_error {
        return CommandOutcome::SpawnFailed(e);
    }
    if outcome.timed_out {
        return CommandOutcome::TimedOut {
            killed: outcome.escalated,
        };
    }
    let take = |h: &std::sync::Mutex<Head>| {
        std::mem::take(&mut *h.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    };
    let (out, err) = (take(&out), take(&err));
    let mut output = String::from_utf8_lossy(&out.kept).into_owned();
    output.push_str(&String::from_utf8_lossy(&err.kept));
    CommandOutcome::Exited {
        code: outcome.exit_code,
        output,
        cut: out.cut || err.cut,
    }
}
