//! The Slurm placement: one attempt = one Slurm batch job (docs/design/distributed.md).
//!
//! The attempt's directory (on the filesystem the conductor and the compute nodes share)
//! receives the command line (`argv`, NUL-separated), the environment (`env`, mode 0600,
//! deleted by the job as soon as it has read it), the stdin bytes and a small wrapper script.
//! The wrapper runs the very command a local attempt would run, in the same working
//! directory, and writes `stdout`, `stderr`, `start` (epoch) and finally `exit` (the exit
//! status, written atomically). The conductor:
//!
//! 1. submits it held (`sbatch --parsable --hold`), records the job id in the sheet's
//!    checkpoint through the [`RemoteJournal`], and only then releases it — so a job that
//!    runs is always one a restarted conductor knows about, and a sheet never runs twice;
//! 2. follows it with one `squeue` per poll interval for all its jobs; a job that left the
//!    queue without writing its `exit` file (cancelled, node failure) is asked about with
//!    `scontrol show job` (which works without `slurmdbd`), or with `sacct` once the
//!    controller has forgotten it (clusters with accounting);
//! 3. on its own timeout — counted from the job's start, as a local timeout is counted from
//!    the spawn — or when the attempt is cancelled (the future dropped), runs `scancel`.
//!    `sbatch --time` is set a little past the timeout as a backstop for a conductor that is
//!    gone;
//! 4. reads the output files as they grow through the same capture and line sinks as a local
//!    pipe — so a verdict on the CLI's live output (a refused key, a rate limit,
//!    [`crate::live`]) stops the job with `scancel` as it stops a local process — and the backend
//!    parses them exactly as it parses a local run.

use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod array;

use super::{PlacedAttempt, PlacementSpec, RemoteAttempt, RemoteJournal};
use crate::process::{FileFollower, LineHook, LineSink, ProcessOutcome, ProcessSpec};
use crate::types::StreamKind;
use crate::types::{epoch_now, Progress};

/// Default poll interval of a running attempt.
pub const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// Longest wait for a Slurm command (`sbatch`, `scontrol`, `scancel`).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The Slurm job states after which a job runs no more.
const TERMINAL_STATES: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "SPECIAL_EXIT",
];

/// Submits attempts to Slurm; one per job and instrument.
#[derive(Debug)]
pub struct SlurmPlacement {
    spec: PlacementSpec,
    poll: Duration,
    watcher: Arc<Watcher>,
    /// Arrays being gathered (`array: true`): sheets dispatched together join one.
    arrays: Arc<array::Batches>,
}

/// What Slurm says about a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Pending, running, completing, …: not over yet.
    Active(String),
    /// Ended (`COMPLETED`, `CANCELLED`, …).
    Ended(String),
    /// Slurm no longer knows the job (it ended longer ago than `MinJobAge`).
    Unknown,
    /// Slurm could not be asked (controller down): try again later.
    Unreachable(String),
}

/// How following a job ended.
enum Followed {
    /// The wrapper wrote its exit status.
    Exited(i32),
    /// Our timeout fired; the job was cancelled.
    TimedOut,
    /// The conductor decided the run's outcome from its live output (a refused key, a
    /// rate limit: [`crate::live`]); the job was cancelled, as a local process is stopped.
    Stopped,
    /// The job ended without an exit status (cancelled from outside, node failure, …, or
    /// by us at `queue_timeout_seconds`): how, as far as Slurm can tell ("ended CANCELLED
    /// without an exit status").
    Vanished(String),
    /// Taken back from the queue before it started (`mozart pause`): cancelled, nothing ran.
    Withdrawn,
}

impl SlurmPlacement {
    /// A placement submitting with `spec`'s partition, account and extra arguments.
    pub fn new(spec: &PlacementSpec) -> Self {
        let poll = spec
            .poll_interval_seconds
            .map(Duration::from_secs_f64)
            .unwrap_or(DEFAULT_POLL);
        SlurmPlacement {
            spec: spec.clone(),
            poll,
            watcher: Arc::default(),
            arrays: Arc::default(),
        }
    }

    /// Run one attempt as a Slurm job (or re-attach to the one the journal recorded).
    pub(crate) async fn run(
        &self,
        req: &PlacedAttempt<'_>,
        mut spec: ProcessSpec,
        sink: Option<Box<dyn LineSink>>,
    ) -> (ProcessOutcome, Option<Box<dyn LineSink>>) {
        let started = Instant::now();
        let recorded = req
            .remote
            .as_ref()
            .and_then(|j| j.recorded())
            .filter(|r| r.placement == "slurm");
        // Armed as soon as a job name is recorded: an attempt abandoned anywhere between the
        // record and the follow (sbatch, the record's fsync, the release) must not leave a
        // held job behind.
        let mut guard = CancelGuard {
            attempt: None,
            journal: req.remote.cloned(),
            recorded: false,
            dir: None,
        };
        // Whether the attempt's job was submitted by an earlier conductor.
        let mut reattached = recorded.is_some();
        let attempt = match recorded {
            Some(rec) if !rec.remote_id.is_empty() => {
                guard.attempt = Some(rec.clone());
                guard.recorded = true;
                guard.dir = Some(rec.dir.clone());
                tracing::info!(job_id = %req.job_id, sheet = req.sheet_num, slurm_job = %rec.remote_id,
                    "re-attaching to the Slurm job of an attempt started before the restart");
                if let Err(e) = self.adopt(req, &rec, &spec, true).await {
                    return (failed_to_start(e, started), sink);
                }
                rec
            }
            Some(pending) => {
                // The previous conductor recorded the name and died before it learnt the id
                // (during sbatch, or before the id's record): Slurm's queue says whether
                // sbatch created the job.
                guard.attempt = Some(pending.clone());
                guard.recorded = true;
                guard.dir = Some(pending.dir.clone());
                match self.resolve_pending(req, &spec, &pending).await {
                    Ok(Some(rec)) => {
                        guard.attempt = Some(rec.clone());
                        rec
                    }
                    Ok(None) => {
                        // sbatch never created it: forget the old record, submit anew.
                        reattached = false;
                        guard.attempt = None;
                        guard.dir = None;
                        if let Some(j) = &req.remote {
                            j.forget("");
                        }
                        remove_attempt_dir(&pending.dir).await;
                        match self.submit(req, &spec, &mut guard).await {
                            Ok(rec) => rec,
                            // What submit recorded and may have created is the guard's now.
                            Err(message) => return (not_started(req, message, started), sink),
                        }
                    }
                    Err(message) => return (failed_to_start(message, started), sink),
                }
            }
            // The first attempts of sheets dispatched together go as one job array when the
            // placement asks for it; a retry is a job of its own (the array is never re-run).
            None if self.spec.array == Some(true) && req.attempt <= 1 => {
                match self.submit_in_array(req, &spec, &mut guard).await {
                    Ok(rec) => rec,
                    Err(message) => return (not_started(req, message, started), sink),
                }
            }
            None => match self.submit(req, &spec, &mut guard).await {
                Ok(rec) => rec,
                // What submit recorded and may have created is the guard's now (cancelled
                // by name, forgotten); a refused submission left it nothing.
                Err(message) => return (not_started(req, message, started), sink),
            },
        };
        if reattached {
            // The sheet has been under way since its job began, not since this conductor
            // started: `mozart status` says "running for" from there.
            req.progress.set_began_at(began_at(&attempt).await);
        }
        // The command line (the prompt) and stdin are in the attempt's files now: a follower
        // parked for hours need not hold them (10,000 of them would).
        spec.args = Vec::new();
        spec.stdin = None;
        spec.child_env = None;
        // The job's output is read as it grows, like a local pipe: the backend's line sinks
        // see the CLI's progress and retry announcements while it runs, and can stop it.
        let stderr_sink = spec
            .stderr_lines
            .clone()
            .map(|hook: LineHook| Box::new(hook) as Box<dyn LineSink>);
        let mut streams = Streams {
            stdout: FileFollower::new(spec.keep_full_stdout, sink),
            stderr: FileFollower::new(0, stderr_sink),
        };
        let followed = self
            .follow(&attempt, &spec, req.progress, &mut streams)
            .await;
        // Followed to its end: `collect` takes care of the files from here.
        guard.attempt = None;
        guard.dir = None;
        if matches!(followed, Followed::Withdrawn) {
            return (withdrawn(req, &attempt, started).await, None);
        }
        collect(&attempt, spec, followed, streams, started).await
    }

    /// Where an attempt runs (the sheet's working directory) and where its job files go
    /// (`state_dir`, else `.mozart-slurm` in that directory).
    fn attempt_places(&self, req: &PlacedAttempt<'_>, spec: &ProcessSpec) -> (PathBuf, PathBuf) {
        let cwd = spec
            .cwd
            .clone()
            .unwrap_or_else(|| req.working_dir.to_path_buf());
        let base = self
            .spec
            .state_dir
            .clone()
            .unwrap_or_else(|| cwd.join(DEFAULT_STATE_DIR));
        (cwd, base)
    }

    /// Write the attempt's files, record its job name, submit it held, record its id,
    /// release it.
    async fn submit(
        &self,
        req: &PlacedAttempt<'_>,
        spec: &ProcessSpec,
        guard: &mut CancelGuard,
    ) -> Result<RemoteAttempt, String> {
        let (cwd, base) = self.attempt_places(req, spec);
        let dir = base.join(safe_name(req.job_id)).join(attempt_dir_name(req));
        // From now on an abandoned attempt removes its files (its cancel guard).
        guard.dir = Some(dir.clone());
        let keep_inputs = self.spec.requeue_on_preemption.unwrap_or(false);
        if let Err(e) = write_attempt_files(&base, &dir, &cwd, spec, keep_inputs) {
            guard.dir = None;
            remove_attempt_dir(&dir).await;
            return Err(format!(
                "cannot prepare the Slurm job in {}: {e}",
                dir.display()
            ));
        }
        // Whatever stops the submission, the files written for it (the environment holds
        // API keys) do not stay on the shared filesystem.
        let submitted = self
            .submit_files(req, spec, guard, &cwd, &base, dir.clone())
            .await;
        if submitted.is_err() {
            guard.dir = None;
            remove_attempt_dir(&dir).await;
        }
        submitted
    }

    /// Submit the attempt whose files are in `dir`: its name recorded first, then sbatch
    /// (held), then its id recorded, then the release.
    async fn submit_files(
        &self,
        req: &PlacedAttempt<'_>,
        spec: &ProcessSpec,
        guard: &mut CancelGuard,
        cwd: &Path,
        base: &Path,
        dir: PathBuf,
    ) -> Result<RemoteAttempt, String> {
        let name = job_name(req.job_id, req.sheet_num, req.attempt, base);
        let mut args = sbatch_args(
            &self.spec,
            &name,
            &dir.join("slurm.out"),
            cwd,
            time_limit_minutes(spec.timeout, spec.kill_grace),
        );
        args.push(dir.join("run.sh").display().to_string());
        let pending = RemoteAttempt {
            placement: "slurm".into(),
            remote_id: String::new(),
            name: name.clone(),
            dir: dir.clone(),
            submitted_at: epoch_now(),
        };
        // A new submission of a name used before (the job run again, attempt numbers from 1)
        // is not a late duplicate of the old one: the old job is no longer claimed.
        self.watcher.unclaim(&name);
        // The name is durable before sbatch runs: whatever happens to this conductor or to
        // sbatch's answer, the job it may create can be found again (exactly once).
        record(req, &pending).await.map_err(|e| {
            format!("cannot record the Slurm job name {name} in the checkpoint, so nothing was submitted: {e}")
        })?;
        guard.attempt = Some(pending.clone());
        guard.recorded = req.remote.is_some();
        let remote_id = loop {
            match submit_held(args.clone()).await {
                Ok(id) => break id,
                Err(e) => {
                    // sbatch may have created the job even though it reported a failure
                    // (its client timed out, the controller accepted later): ask by name.
                    match self.find_held(req, spec, &name, None).await? {
                        Some(id) => break id,
                        None if controller_unreachable(&e) => {
                            self.wait_for_controller(req, spec, &e).await?;
                        }
                        None => {
                            if let Some(j) = &req.remote {
                                j.forget("");
                            }
                            guard.attempt = None;
                            return Err(refusal(&e, &self.spec));
                        }
                    }
                }
            }
        };
        // sbatch sent the script's text to slurmctld, which keeps its own copy: the file is
        // not needed any more.
        let _ = std::fs::remove_file(dir.join("run.sh"));
        let attempt = RemoteAttempt {
            remote_id: remote_id.clone(),
            ..pending
        };
        guard.attempt = Some(attempt.clone());
        if let Err(e) = record(req, &attempt).await {
            let _ = slurm_command("scancel", &[&remote_id]).await;
            return Err(format!(
                "cannot record Slurm job {remote_id} in the checkpoint, so it was cancelled: {e}"
            ));
        }
        self.adopt(req, &attempt, spec, false).await?;
        tracing::debug!(job_id = %req.job_id, sheet = req.sheet_num, slurm_job = %remote_id, "submitted to Slurm");
        Ok(attempt)
    }

    /// Make `attempt`'s job the only one of its name that runs the sheet and release it:
    /// its id goes into the attempt's `adopted` file (the wrapper of any other job of the
    /// same name exits without running anything), other jobs of the name are cancelled,
    /// and the watcher keeps cancelling late ones (an sbatch the controller accepted after
    /// its client gave up).
    async fn adopt(
        &self,
        req: &PlacedAttempt<'_>,
        attempt: &RemoteAttempt,
        spec: &ProcessSpec,
        reattach: bool,
    ) -> Result<(), String> {
        let adopted = attempt.dir.join("adopted");
        // A re-attached attempt's directory is as private as when it was made, or its files
        // are not trusted (nor is the job, which would refuse to run from it).
        if attempt.dir.exists() {
            if let Err(e) = check_private_dir(&attempt.dir, false) {
                // The attempt's cancel guard cancels the job and forgets it.
                return Err(format!("cannot run Slurm job {}: {e}", attempt.remote_id));
            }
        }
        if read_adopted(&attempt.dir).as_deref() != Some(attempt.remote_id.as_str()) {
            let tmp = attempt.dir.join("adopted.tmp");
            let written = std::fs::write(&tmp, format!("{}\n", attempt.remote_id))
                .and_then(|()| std::fs::rename(&tmp, &adopted));
            if let Err(e) = written {
                if attempt.dir.exists() {
                    return Err(format!("cannot write {}: {e}", adopted.display()));
                }
                // A job whose files are gone cannot run the sheet anyway (it finds no
                // command line); following it ends with its exit status or its absence.
            }
        }
        if !attempt.name.is_empty() {
            self.watcher.claim(&attempt.name, &attempt.remote_id);
            if let Ok(jobs) = jobs_named(&attempt.name).await {
                for (id, state) in jobs {
                    if base_id(&id) != base_id(&attempt.remote_id)
                        && !TERMINAL_STATES.contains(&state.as_str())
                    {
                        tracing::info!(slurm_job = %id, name = %attempt.name, "cancelling a duplicate Slurm job of an attempt");
                        let _ = slurm_command("scancel", &[&id]).await;
                    }
                }
            }
        }
        // The previous conductor released the job already: a hold on it now is someone
        // else's (its user's or an administrator's `scontrol hold`), and stays on.
        if reattach && attempt.dir.join(RELEASED).exists() {
            return Ok(());
        }
        loop {
            match slurm_command("scontrol", &["release", &attempt.remote_id]).await {
                Ok(_) => {
                    mark_released(&attempt.dir);
                    return Ok(());
                }
                Err(e) if controller_unreachable(&e) => {
                    self.wait_for_controller(req, spec, &e).await?;
                }
                // Re-attached to a job the previous conductor released already (it runs,
                // or ran): the follow tells what it does.
                Err(_) if reattach => return Ok(()),
                Err(e) => {
                    let _ = slurm_command("scancel", &[&attempt.remote_id]).await;
                    if let Some(journal) = &req.remote {
                        journal.forget(&attempt.remote_id);
                    }
                    return Err(format!(
                        "cannot release Slurm job {}: {e}",
                        attempt.remote_id
                    ));
                }
            }
        }
    }

    /// The pending record of a conductor that died during the submission: the job sbatch
    /// created under its name (adopted, recorded, released), or `None` when there is none.
    async fn resolve_pending(
        &self,
        req: &PlacedAttempt<'_>,
        spec: &ProcessSpec,
        pending: &RemoteAttempt,
    ) -> Result<Option<RemoteAttempt>, String> {
        if pending.name.is_empty() {
            return Ok(None);
        }
        let task = read_task(&pending.dir);
        let id = match self.find_held(req, spec, &pending.name, task).await? {
            Some(id) => id,
            None => match self.ran_under_name(pending).await {
                // The job of this name that the attempt adopted ran (or runs) it: follow
                // it to its result rather than run the sheet again.
                Some(id) => {
                    let attempt = RemoteAttempt {
                        remote_id: id,
                        ..pending.clone()
                    };
                    record(req, &attempt).await.map_err(|e| {
                        format!(
                            "cannot record Slurm job {} in the checkpoint: {e}",
                            attempt.remote_id
                        )
                    })?;
                    self.watcher.claim(&attempt.name, &attempt.remote_id);
                    return Ok(Some(attempt));
                }
                None => {
                    tracing::info!(job_id = %req.job_id, sheet = req.sheet_num, name = %pending.name,
                        "no Slurm job ran this attempt before the restart: submitting it");
                    return Ok(None);
                }
            },
        };
        tracing::info!(job_id = %req.job_id, sheet = req.sheet_num, slurm_job = %id,
            "re-attaching to the Slurm job of an attempt started before the restart (found by name)");
        let attempt = RemoteAttempt {
            remote_id: id.clone(),
            ..pending.clone()
        };
        if let Err(e) = record(req, &attempt).await {
            let _ = slurm_command("scancel", &[&id]).await;
            return Err(format!(
                "cannot record Slurm job {id} in the checkpoint, so it was cancelled: {e}"
            ));
        }
        self.adopt(req, &attempt, spec, false).await?;
        Ok(Some(attempt))
    }

    /// The job that ran `pending`'s attempt although the record holds only its name (the
    /// record of its id lost, e.g. a registry restored from a copy taken during the
    /// submission): the job the attempt's `adopted` file names — no other job of the name
    /// runs the sheet —, when Slurm still lists it, or, once the controller has forgotten
    /// it (`MinJobAge`), when Slurm's accounting (`sacct --name`) shows it started. Without
    /// accounting, the attempt's own `start` file is the evidence that it ran.
    async fn ran_under_name(&self, pending: &RemoteAttempt) -> Option<String> {
        let adopted = read_adopted(&pending.dir)?;
        if let Ok(jobs) = jobs_named(&pending.name).await {
            if jobs.iter().any(|(id, _)| *id == adopted) {
                tracing::info!(slurm_job = %adopted, name = %pending.name,
                    "re-attaching to the adopted Slurm job of an attempt whose record held only its name");
                return Some(adopted);
            }
        }
        match accounting_named(&pending.name, pending.submitted_at).await {
            Ok(jobs) => {
                let ran = jobs
                    .iter()
                    .find(|j| j.id == adopted)
                    .is_some_and(|j| j.started);
                if ran {
                    tracing::info!(slurm_job = %adopted, name = %pending.name,
                        "Slurm's accounting shows the adopted job of this attempt ran; collecting its result instead of running the sheet again");
                    return Some(adopted);
                }
                tracing::info!(slurm_job = %adopted, name = %pending.name,
                    "Slurm's accounting shows no job of this attempt that ran");
                None
            }
            Err(why) => {
                let started = pending.dir.join("start").exists();
                tracing::info!(slurm_job = %adopted, name = %pending.name, started, reason = %why,
                    "Slurm's accounting cannot say whether the adopted job ran; the attempt's start file decides");
                started.then_some(adopted)
            }
        }
    }

    /// The job sbatch created under `name` and that never ran (it is held): the oldest one
    /// (the others are cancelled by [`Self::adopt`]). Waits while the controller cannot be
    /// asked. A job of the name looked for twice, a little apart: a submission the
    /// controller accepts late is then seen more often than not (and if not, the watcher
    /// cancels it when it appears, and its wrapper would not run it).
    /// For an array task (`task`), the task of that index in the oldest array of the name.
    async fn find_held(
        &self,
        req: &PlacedAttempt<'_>,
        spec: &ProcessSpec,
        name: &str,
        task: Option<u32>,
    ) -> Result<Option<String>, String> {
        for look in 0..2 {
            if look > 0 {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            let jobs = loop {
                match jobs_named(name).await {
                    Ok(jobs) => break jobs,
                    Err(e) => self.wait_for_controller(req, spec, &e).await?,
                }
            };
            let mut held: Vec<u64> = jobs
                .iter()
                .filter(|(_, state)| state == "PENDING")
                .filter_map(|(id, _)| match (task, id.split_once('_')) {
                    (None, None) => id.parse().ok(),
                    (Some(t), Some((base, i))) if i == t.to_string() => base.parse().ok(),
                    _ => None,
                })
                .collect();
            held.sort_unstable();
            if let Some(id) = held.first() {
                return Ok(Some(match task {
                    Some(t) => format!("{id}_{t}"),
                    None => id.to_string(),
                }));
            }
        }
        Ok(None)
    }

    /// Sleep a while because the Slurm controller does not answer; `Err` once it has not
    /// answered for longer than the attempt's timeout (or an hour at most), and at once when
    /// a Slurm command is missing (no wait brings it back).
    async fn wait_for_controller(
        &self,
        req: &PlacedAttempt<'_>,
        spec: &ProcessSpec,
        error: &str,
    ) -> Result<(), String> {
        if command_missing(error) {
            return Err(error.to_string());
        }
        // `mozart pause`: a sheet whose job Slurm has not taken yet is not submitted after
        // it (nothing of it is in the queue to withdraw).
        if req.progress.withdraw_asked() {
            return Err(NOT_SUBMITTED.into());
        }
        let limit = spec.timeout.min(Duration::from_secs(3600));
        let waited = req.progress.elapsed();
        // A per-user submit limit (`MaxSubmitJobs`) is not an outage: the status says which
        // it is, so the user does not go looking for a broken controller.
        let limited = submit_limit(error);
        if waited > limit {
            return Err(if limited {
                format!(
                    "Slurm's submit limit stayed reached for {}s: {error}",
                    waited.as_secs()
                )
            } else {
                format!(
                    "the Slurm controller did not answer for {}s: {error}",
                    waited.as_secs()
                )
            });
        }
        req.progress.update_activity(|a| {
            a.last_event = Some(if limited {
                format!(
                    "waiting for Slurm to accept more jobs: the per-user submit limit is reached (not an attempt spent): {error}"
                )
            } else {
                format!("waiting for the Slurm controller (not an attempt spent): {error}")
            });
        });
        if limited {
            tracing::info!(job_id = %req.job_id, sheet = req.sheet_num, error = %error, "Slurm submit limit reached; waiting for earlier jobs to end");
        } else {
            tracing::warn!(job_id = %req.job_id, sheet = req.sheet_num, error = %error, "Slurm controller unavailable; waiting");
        }
        tokio::select! {
            () = tokio::time::sleep(self.poll.max(Duration::from_secs(2))) => {}
            () = req.progress.withdraw_wanted() => {}
        }
        if req.progress.withdraw_asked() {
            return Err(NOT_SUBMITTED.into());
        }
        Ok(())
    }

    /// Wait for the job to end, honouring the timeout from the job's start. The attempt
    /// sleeps until the placement's watcher sees its job change state in `squeue` (one call
    /// per poll interval for every job of the placement), its deadline comes, or a slow
    /// housekeeping tick (output growth for stale detection) is due.
    async fn follow(
        &self,
        attempt: &RemoteAttempt,
        spec: &ProcessSpec,
        progress: &Progress,
        streams: &mut Streams,
    ) -> Followed {
        let dir = &attempt.dir;
        let watch = self.watcher.watch(&attempt.remote_id, self.poll);
        let _unwatch = Unwatch {
            watcher: &self.watcher,
            id: &attempt.remote_id,
        };
        let mut timing = Timing::default();
        let mut suspended = false;
        let mut seen = (0u64, 0u64);
        let mut logs = LiveLogs::new(spec.log_base.as_ref());
        let grace = self
            .spec
            .exit_file_grace_seconds
            .map_or(DEFAULT_EXIT_FILE_GRACE, Duration::from_secs_f64);
        let requeue = self.spec.requeue_on_preemption.unwrap_or(false);
        // Someone reads the output as it comes (a verdict may stop the job): look at it
        // every second or poll interval while the job runs, not only at the slow
        // housekeeping tick. Not for a job Slurm may requeue: its next run writes its output
        // anew, and the line sinks, which cannot forget the first run's lines, would count
        // both (its output is read once, at its end, as before).
        let live = spec.stop.is_some() && !requeue;
        // Waiting in the queue is bounded only by `queue_timeout_seconds` when set.
        let queue_limit = self
            .spec
            .queue_timeout_seconds
            .map(|q| attempt.submitted_at + q);
        loop {
            let notified = watch.changed.notified();
            if progress.withdraw_asked() {
                // `mozart pause`: a job still in the queue is taken back, a started one runs on.
                let started = timing.deadline.is_some() || read_start(dir).is_some();
                match self.withdraw(attempt, started).await {
                    Ok(()) => return Followed::Withdrawn,
                    Err(why) => {
                        tracing::info!(slurm_job = %attempt.remote_id, why = %why, "not withdrawn from Slurm's queue");
                        progress.answer_withdraw(crate::types::Withdrawal::Kept {
                            remote_id: attempt.remote_id.clone(),
                            why,
                        });
                    }
                }
            }
            if live {
                streams.pump(dir);
            }
            if let Some(code) = read_exit(dir) {
                if requeue && code > 128 && requeued(&attempt.remote_id).await {
                    // Killed because Slurm requeued it (a preemption): it runs again under
                    // the same id; this exit status was not the attempt's end.
                    tracing::info!(slurm_job = %attempt.remote_id, "Slurm requeued the job; following its next run");
                    let _ = std::fs::remove_file(dir.join("exit"));
                    continue;
                }
                record_growth(dir, progress, &mut seen);
                return Followed::Exited(code);
            }
            record_growth(dir, progress, &mut seen);
            logs.pump(dir);
            timing.read_start(attempt, spec.timeout, progress);
            // A started job Slurm suspended (`scontrol suspend`, gang scheduling) is not
            // running: said as a wait in the queue is, until it runs again.
            if timing.deadline.is_some() {
                let now_suspended = watch.state().as_deref() == Some("SUSPENDED");
                if now_suspended != suspended {
                    suspended = now_suspended;
                    let id = &attempt.remote_id;
                    note(
                        progress,
                        if suspended {
                            format!("suspended by Slurm as job {id} (SUSPENDED; `scontrol resume {id}` lets it go on)")
                        } else {
                            format!("running as Slurm job {id} (resumed after a suspension)")
                        },
                        false,
                    );
                }
            }
            if requeue
                && timing.deadline.is_some()
                && watch.state().as_deref() == Some("PENDING")
                && requeued(&attempt.remote_id).await
            {
                // Requeued (a preemption, with `requeue_on_preemption`): back in the queue,
                // whose time is not the sheet's; the next start restarts the timeout. The
                // watcher's state may trail the start file (a poll from before the job
                // ran), so Slurm is asked afresh. Without the option Slurm never requeues
                // (`--no-requeue`), and a stale PENDING must not clear the deadline for good
                // (a sheet that would never time out).
                timing.forget_start(dir);
            }
            if timing.deadline.is_none() {
                let queued = (epoch_now() - attempt.submitted_at).max(0.0);
                note(
                    progress,
                    format!(
                        "in Slurm's queue as job {} ({}) for {queued:.0}s",
                        attempt.remote_id,
                        watch.described()
                    ),
                    true,
                );
            }
            if timing.over(queue_limit) {
                let queued = timing.deadline.is_none();
                let waited = watch.described();
                tracing::info!(slurm_job = %attempt.remote_id, queued, "timeout: cancelling the Slurm job");
                self.cancel_and_wait(&attempt.remote_id, spec.kill_grace)
                    .await;
                if !queued {
                    return Followed::TimedOut;
                }
                // The sheet's timeout never began: the queue's limit, not the sheet's, ran out.
                let limit = self.spec.queue_timeout_seconds.unwrap_or_default();
                let started = if read_start(dir).is_some() {
                    "as it started"
                } else {
                    "before it started"
                };
                return Followed::Vanished(format!(
                    "waited in Slurm's queue ({waited}) longer than \
                     placement.queue_timeout_seconds ({limit}s) and was cancelled {started}: \
                     raise queue_timeout_seconds or leave it out (no limit), or ask for \
                     resources the cluster has free"
                ));
            }
            if watch.gone() {
                return gone(attempt, grace, progress, &mut seen).await;
            }
            let wake = timing.wake(self.poll, live, queue_limit);
            let stopping = async {
                match &spec.stop {
                    Some(stop) => stop.notified().await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::time::timeout(wake, notified) => {}
                () = progress.withdraw_wanted() => {}
                () = stopping => {
                    tracing::info!(slurm_job = %attempt.remote_id, "stopped on the CLI's live output: cancelling the Slurm job");
                    self.cancel_and_wait(&attempt.remote_id, spec.kill_grace)
                        .await;
                    return Followed::Stopped;
                }
            }
        }
    }
}

/// A followed job's time: its start as its files tell, and the deadline the sheet's timeout
/// sets from it (`None` while it waits in the queue).
#[derive(Debug, Default)]
struct Timing {
    started_at: Option<f64>,
    deadline: Option<f64>,
}

impl Timing {
    /// Read the job's start file. The sheet's timeout counts from the job's start, not its
    /// submission: time in the queue is the cluster's, not the sheet's. (A job Slurm
    /// requeued — with `requeue_on_preemption` — writes a new start: the timeout counts
    /// from it.)
    fn read_start(&mut self, attempt: &RemoteAttempt, timeout: Duration, progress: &Progress) {
        let start = read_start(&attempt.dir);
        if start == self.started_at {
            return;
        }
        self.started_at = start;
        self.deadline = start.map(|s| s + timeout.as_secs_f64());
        if let Some(s) = start {
            let queued = (s - attempt.submitted_at).max(0.0);
            note(
                progress,
                format!(
                    "running as Slurm job {} (queued {queued:.0}s)",
                    attempt.remote_id
                ),
                false,
            );
        }
    }

    /// Drop the start of a run Slurm requeued, so that only the next run's start sets the
    /// deadline again.
    fn forget_start(&mut self, dir: &Path) {
        let _ = std::fs::remove_file(dir.join("start"));
        self.started_at = None;
        self.deadline = None;
    }

    /// Whether the job ran past its deadline, or waited in the queue past `queue_limit`.
    fn over(&self, queue_limit: Option<f64>) -> bool {
        match (self.deadline, queue_limit) {
            (Some(d), _) => epoch_now() >= d,
            (None, Some(q)) => epoch_now() >= q,
            (None, None) => false,
        }
    }

    /// How long to sleep before looking again, at most (a state change wakes it sooner).
    fn wake(&self, poll: Duration, live: bool, queue_limit: Option<f64>) -> Duration {
        let mut wake = HOUSEKEEPING;
        if let Some(d) = self.deadline {
            let left = (d - epoch_now()).max(0.0);
            wake = wake.min(Duration::from_secs_f64(left));
            if live {
                wake = wake.min(poll.max(LIVE_READ));
            }
        } else {
            // Not started yet as far as the files tell: look again at the next state
            // change (pending -> running) or soon.
            wake = wake.min(poll * 4);
            if let Some(q) = queue_limit {
                wake = wake.min(Duration::from_secs_f64((q - epoch_now()).max(0.0)));
            }
        }
        wake
    }
}

/// The job's stdout and stderr, followed in its attempt's files.
struct Streams {
    stdout: FileFollower,
    stderr: FileFollower,
}

impl Streams {
    /// Read what the job appended to its output files since the last look.
    fn pump(&mut self, dir: &Path) {
        self.stdout.pump(&dir.join("stdout"));
        self.stderr.pump(&dir.join("stderr"));
    }
}

impl SlurmPlacement {
    /// Take the attempt's job back from Slurm's queue if it has not started (`mozart
    /// pause`, [`withdraw_pending`]): `Ok` once it is cancelled without having run, `Err`
    /// with why it runs on.
    async fn withdraw(&self, attempt: &RemoteAttempt, started: bool) -> Result<(), String> {
        let id = attempt.remote_id.as_str();
        if started || id.is_empty() {
            return Err("it had started".into());
        }
        withdraw_pending(id).await
    }

    /// Cancel job `id` and wait for it to be gone (Slurm sends TERM, then KILL after its
    /// KillWait), at most the kill grace and 30 s.
    async fn cancel_and_wait(&self, id: &str, kill_grace: Duration) {
        let _ = slurm_command("scancel", &[id]).await;
        let until = Instant::now() + kill_grace + Duration::from_secs(30);
        while Instant::now() < until {
            if matches!(job_state(id).await, JobState::Ended(_) | JobState::Unknown) {
                break;
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

/// The attempt's job left Slurm's queue: its exit status when the exit file comes within
/// `grace` (it may trail the job's end on a network filesystem, `exit_file_grace_seconds`),
/// else the state Slurm last knew it in.
async fn gone(
    attempt: &RemoteAttempt,
    grace: Duration,
    progress: &Progress,
    seen: &mut (u64, u64),
) -> Followed {
    let dir = &attempt.dir;
    let until = Instant::now() + grace;
    loop {
        if let Some(code) = read_exit(dir) {
            record_growth(dir, progress, seen);
            return Followed::Exited(code);
        }
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let how = match job_state(&attempt.remote_id).await {
        // Slurm's own end (a time limit, say) kills the wrapper too, before it can write
        // the exit status: say what Slurm did.
        JobState::Ended(s) => match ended_by_slurm(&attempt.remote_id, 0).await {
            Some(how) => how,
            None => format!("ended {s} without an exit status"),
        },
        JobState::Active(s) => format!("ended {s} without an exit status"),
        // Purged from the controller's memory (`MinJobAge` after its end, e.g. while no
        // conductor was following it): the accounting database, when the cluster has one,
        // still knows how it ended.
        JobState::Unknown => accounting_state(&attempt.remote_id).await.describe(),
        JobState::Unreachable(e) => {
            format!("ended without an exit status; Slurm could not be asked how: {e}")
        }
    };
    Followed::Vanished(how)
}

/// Show `event` as the attempt's latest activity (`mozart status`), and whether its job
/// still waits in Slurm's queue.
fn note(progress: &Progress, event: String, queued: bool) {
    progress.update_activity(|a| {
        a.last_event = Some(event);
        a.queued = queued;
    });
}

/// How Slurm itself ended job `id`, whose command exited with `code` (0: the job left no
/// exit status), when it did: its time limit, an `scancel` from outside Mozart (Mozart's own cancels are not
/// followed to an exit), memory, a node failure, a preemption. `None` when the job ended
/// on its own (the command's exit is the story) or Slurm cannot say.
async fn ended_by_slurm(id: &str, code: i32) -> Option<String> {
    // Slurm sets the state before it signals the job, so a time limit or a cancel shows at
    // once; an out-of-memory kill shows when the job step has ended, a moment after the
    // wrapper wrote the exit status.
    let mut looks = if killed_by_signal(code) { 10 } else { 1 };
    let (state, limit) = loop {
        looks -= 1;
        match slurm_command("scontrol", &["show", "job", "-o", id]).await {
            Ok(out) => {
                let state = field(&out, "JobState").unwrap_or_default().to_string();
                if TERMINAL_STATES.contains(&state.as_str()) || looks == 0 {
                    break (state, field(&out, "TimeLimit").map(str::to_string));
                }
            }
            Err(e) if e.contains("Invalid job id") => match accounting_state(id).await {
                Accounting::Ended { state, .. } => break (state, None),
                _ => return None,
            },
            Err(_) => return None,
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // sacct's "CANCELLED by 0": the state is its first word.
    let state = state.split_whitespace().next().unwrap_or_default();
    let why = match state {
        "TIMEOUT" => format!(
            "Slurm stopped it at its time limit{}: raise placement.time, or leave it out \
             (the default is the sheet's timeout plus its kill grace and a minute)",
            limit.map(|l| format!(" ({l})")).unwrap_or_default()
        ),
        "CANCELLED" => {
            "it was cancelled outside Mozart (scancel by a user or an administrator)".to_string()
        }
        "OUT_OF_MEMORY" => {
            "it used more memory than Slurm allows it: raise placement.memory".to_string()
        }
        "NODE_FAIL" => "its node failed".to_string(),
        "BOOT_FAIL" => "its node failed to boot".to_string(),
        "PREEMPTED" => "Slurm preempted it for another job \
             (placement.requeue_on_preemption: true lets Slurm run it again, no attempt spent)"
            .to_string(),
        "DEADLINE" => "it reached its deadline (sbatch --deadline)".to_string(),
        _ => return None,
    };
    Some(format!("ended {state}: {why}"))
}

/// How long a job whose run just ended may still read RUNNING or COMPLETING while Slurm
/// puts it back in the queue.
const REQUEUE_SETTLE: Duration = Duration::from_secs(5);

/// Whether Slurm put the job back in the queue (requeued after a preemption). Asked as soon
/// as the run's exit file appears, the controller can still say RUNNING or COMPLETING for
/// a moment (a CI run read the requeue's SIGTERM as the attempt's end): it is asked again
/// until it settles, for [`REQUEUE_SETTLE`] at most.
async fn requeued(id: &str) -> bool {
    let until = tokio::time::Instant::now() + REQUEUE_SETTLE;
    loop {
        match job_state(id).await {
            JobState::Active(s) if s == "PENDING" || s.starts_with("REQUEUE") => return true,
            JobState::Active(s)
                if (s == "RUNNING" || s == "COMPLETING") && tokio::time::Instant::now() < until =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => return false,
        }
    }
}

/// How long a finished job's exit file may trail its end by default (a local or fast
/// shared filesystem; `exit_file_grace_seconds` for slower ones).
const DEFAULT_EXIT_FILE_GRACE: Duration = Duration::from_secs(2);

/// What Slurm's accounting (`sacct`) says of a job the controller no longer knows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Accounting {
    /// Its final state, exit code and reason (`CANCELLED by 0`, `0:15`, `None`).
    Ended {
        state: String,
        exit: String,
        reason: String,
    },
    /// `sacct` answered but does not know the job.
    NotFound,
    /// The cluster keeps no accounting (no `slurmdbd`), or `sacct` failed: its words.
    Unavailable(String),
}

impl Accounting {
    /// How the job ended, for the note a vanished attempt's stderr ends with.
    fn describe(&self) -> String {
        match self {
            Accounting::Ended {
                state,
                exit,
                reason,
            } => {
                let reason = if reason.is_empty() || reason == "None" {
                    String::new()
                } else {
                    format!(", reason {reason}")
                };
                format!(
                    "ended {state} without an exit status (from Slurm's accounting: exit code {exit}{reason})"
                )
            }
            Accounting::NotFound => "ended without an exit status; the reason is unknown: \
                 the controller has forgotten the job and Slurm's accounting (sacct) has no record of it"
                .into(),
            Accounting::Unavailable(why) => format!(
                "ended without an exit status; the reason is unknown: the controller has \
                 forgotten the job and sacct cannot say ({why})"
            ),
        }
    }
}

/// The final state and reason of a job from Slurm's accounting (`sacct`), for clusters that
/// keep one (`slurmdbd`); without it `sacct` says "Slurm accounting storage is disabled".
async fn accounting_state(id: &str) -> Accounting {
    match slurm_command(
        "sacct",
        &["-n", "-X", "-P", "-j", id, "-o", "State,ExitCode,Reason"],
    )
    .await
    {
        Ok(out) => parse_sacct(&out),
        Err(e) => Accounting::Unavailable(e.trim().to_string()),
    }
}

/// A job of a name as Slurm's accounting knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AccountedJob {
    /// `1234`, or `1234_5` for an array task.
    id: String,
    /// Whether it started (sacct shows a start time).
    started: bool,
}

/// Our jobs named `name` submitted since `since` (epoch seconds, an hour of slack) as Slurm's
/// accounting knows them, ended and purged ones included; `Err` with sacct's words when
/// the cluster keeps no accounting.
async fn accounting_named(name: &str, since: f64) -> Result<Vec<AccountedJob>, String> {
    // sacct lists jobs since midnight by default: a job submitted before would be missed.
    let since = format!(
        "--starttime=now-{}seconds",
        (epoch_now() - since).max(0.0) as u64 + 3600
    );
    let out = slurm_command(
        "sacct",
        &[
            "-n",
            "-X",
            "-P",
            &since,
            &format!("--name={name}"),
            "-o",
            "JobID,Start",
        ],
    )
    .await?;
    Ok(parse_sacct_named(&out))
}

/// `sacct -n -X -P -o JobID,Start` lines.
fn parse_sacct_named(out: &str) -> Vec<AccountedJob> {
    out.lines()
        .filter_map(|l| {
            let (id, start) = l.trim().split_once('|')?;
            let start = start.trim();
            Some(AccountedJob {
                id: id.trim().to_string(),
                started: !(start.is_empty() || start == "Unknown" || start == "None"),
            })
        })
        .collect()
}

/// `sacct -n -X -P -o State,ExitCode,Reason` output: the first line's fields.
fn parse_sacct(out: &str) -> Accounting {
    let Some(line) = out.lines().find(|l| !l.trim().is_empty()) else {
        return Accounting::NotFound;
    };
    let mut parts = line.split('|').map(str::trim);
    let state = parts.next().unwrap_or("");
    if state.is_empty() {
        return Accounting::NotFound;
    }
    Accounting::Ended {
        state: state.to_string(),
        exit: parts.next().unwrap_or("").to_string(),
        reason: parts.next().unwrap_or("").to_string(),
    }
}

/// How often a running attempt's output files are read for its live output (at most; the
/// poll interval when it is longer).
const LIVE_READ: Duration = Duration::from_secs(1);

/// Slow tick of a followed attempt: output growth (stale detection) and the start file.
const HOUSEKEEPING: Duration = Duration::from_secs(10);

/// The jobs one placement follows, looked at together: one `squeue --me` per poll interval
/// however many attempts run (per-attempt `scontrol` calls would cost the controller one
/// RPC per job per interval; docs/design/distributed.md "Conductor load").
#[derive(Debug, Default)]
struct Watcher {
    state: std::sync::Mutex<WatcherState>,
}

#[derive(Debug, Default)]
struct WatcherState {
    jobs: std::collections::HashMap<String, Arc<Watch>>,
    running: bool,
}

/// Job name -> the id adopted for it, and until when other jobs of that name are
/// cancelled (`None`: while the adopted job is followed). A late duplicate (an sbatch the
/// controller accepted after its client gave up) is cancelled by the watcher that lists it.
/// One map for the process: every placement's watcher enforces every claim.
type Claims = std::collections::HashMap<String, (String, Option<Instant>)>;

fn claims() -> std::sync::MutexGuard<'static, Claims> {
    static CLAIMS: std::sync::OnceLock<std::sync::Mutex<Claims>> = std::sync::OnceLock::new();
    lock(CLAIMS.get_or_init(Default::default))
}

/// How long after its attempt ended a job name is still watched for late duplicates.
const CLAIM_AFTER_END: Duration = Duration::from_secs(600);

/// One followed job: its last state in `squeue`, and a signal when that changes.
#[derive(Debug, Default)]
struct Watch {
    /// Last `squeue` state; `None` once the job is no longer listed (it ended).
    last: std::sync::Mutex<Option<String>>,
    /// Why Slurm keeps it waiting (`squeue`'s reason: `Priority`, `Resources`,
    /// `BadConstraints`, …), while it pends.
    reason: std::sync::Mutex<Option<String>>,
    ended: std::sync::atomic::AtomicBool,
    changed: tokio::sync::Notify,
}

impl Watch {
    /// The job's last state in `squeue`.
    fn state(&self) -> Option<String> {
        lock(&self.last).clone()
    }

    fn gone(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The job's last state with Slurm's reason for a pending one (`PENDING: Resources`),
    /// and who holds a held one (`PENDING: JobHeldAdmin, held by an administrator`): the
    /// conductor releases only its own submission's hold, so such a job waits for whoever
    /// put it on (`scontrol release`).
    fn described(&self) -> String {
        let state = self.state().unwrap_or_else(|| "PENDING".into());
        match lock(&self.reason).as_deref() {
            Some(reason @ "JobHeldAdmin") if state == "PENDING" => {
                format!("{state}: {reason}, held by an administrator")
            }
            Some(reason @ "JobHeldUser") if state == "PENDING" => {
                format!("{state}: {reason}, held by its user")
            }
            Some(reason) if state == "PENDING" => format!("{state}: {reason}"),
            _ => state,
        }
    }
}

/// Removes a job from the watcher when its follower ends (normally or dropped).
struct Unwatch<'a> {
    watcher: &'a Arc<Watcher>,
    id: &'a str,
}

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        let base = base_id(self.id);
        let siblings = {
            let mut state = lock(&self.watcher.state);
            state.jobs.remove(self.id);
            // Tasks of the same array still followed keep its claim open.
            state.jobs.keys().any(|k| base_id(k) == base)
        };
        if siblings {
            return;
        }
        for (id, until) in claims().values_mut() {
            if base_id(id) == base && until.is_none() {
                *until = Some(Instant::now() + CLAIM_AFTER_END);
            }
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watcher {
    /// `id` is the job of `name`: cancel any other job of that name seen while it is
    /// followed and for [`CLAIM_AFTER_END`] after.
    fn claim(&self, name: &str, id: &str) {
        let _ = self;
        claims().insert(name.to_string(), (id.to_string(), None));
    }

    /// Stop cancelling jobs named `name` (a new submission of that name begins).
    fn unclaim(&self, name: &str) {
        let _ = self;
        claims().remove(name);
    }

    /// Follow `id`; starts the polling task when it is not running.
    fn watch(self: &Arc<Self>, id: &str, poll: Duration) -> Arc<Watch> {
        let mut state = lock(&self.state);
        let watch = Arc::clone(state.jobs.entry(id.to_string()).or_default());
        if !state.running {
            state.running = true;
            tokio::spawn(Arc::clone(self).poll_loop(poll));
        }
        watch
    }

    /// Every `poll`: list our jobs once, and wake the followers of jobs that changed state
    /// or left the queue. Ends when nothing is followed (restarted by the next `watch`).
    async fn poll_loop(self: Arc<Self>, poll: Duration) {
        // However the task ends (nothing left to follow, or its runtime shut down), the
        // next `watch` starts a new one.
        struct Stopped(Arc<Watcher>);
        impl Drop for Stopped {
            fn drop(&mut self) {
                lock(&self.0.state).running = false;
            }
        }
        let _stopped = Stopped(Arc::clone(&self));
        loop {
            tokio::time::sleep(poll).await;
            {
                let now = Instant::now();
                let mut claims = claims();
                claims.retain(|_, (_, until)| until.is_none_or(|u| u > now));
                // Claims keep the watcher polling after its last job ended (for at most
                // CLAIM_AFTER_END): late duplicates come after the attempt's own job.
                let state = lock(&self.state);
                if state.jobs.is_empty() && claims.is_empty() {
                    return;
                }
            }
            let listed =
                match slurm_command("squeue", &["-h", "--me", "-r", "-o", "%i|%T|%r|%j"]).await {
                    Ok(out) => out,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list Slurm jobs; trying again");
                        continue;
                    }
                };
            let mut states: std::collections::HashMap<&str, (&str, &str)> =
                std::collections::HashMap::new();
            let mut duplicates = Vec::new();
            {
                let claims = claims();
                for line in listed.lines() {
                    let mut parts = line.trim().splitn(4, '|');
                    let (Some(id), Some(st), Some(reason), name) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    states.insert(id, (st, reason));
                    let claimed = name.and_then(|n| claims.get(n));
                    if claimed.is_some_and(|(ours, _)| base_id(ours) != base_id(id))
                        && !TERMINAL_STATES.contains(&st)
                    {
                        duplicates.push(id.to_string());
                    }
                }
            }
            for id in duplicates {
                tracing::info!(slurm_job = %id, "cancelling a late duplicate Slurm job of an attempt");
                let _ = slurm_command("scancel", &[&id]).await;
            }
            let jobs: Vec<(String, Arc<Watch>)> = lock(&self.state)
                .jobs
                .iter()
                .map(|(k, v)| (k.clone(), Arc::clone(v)))
                .collect();
            for (id, watch) in jobs {
                let listed = states.get(id.as_str());
                let now = listed.map(|(s, _)| (*s).to_string());
                let reason = listed
                    .map(|(_, r)| r.trim())
                    .filter(|r| !r.is_empty() && *r != "None")
                    .map(str::to_string);
                {
                    let mut known = lock(&watch.reason);
                    if *known != reason {
                        *known = reason;
                        watch.changed.notify_one();
                    }
                }
                let mut last = lock(&watch.last);
                let ended =
                    now.is_none() || now.as_deref().is_some_and(|s| TERMINAL_STATES.contains(&s));
                if ended {
                    watch
                        .ended
                        .store(true, std::sync::atomic::Ordering::Release);
                }
                if *last != now || ended {
                    *last = now;
                    watch.changed.notify_one();
                }
            }
        }
    }
}

/// `sbatch --hold` in a task of its own: an attempt abandoned while sbatch runs cannot
/// know the job's id, so the task itself cancels the held job it was not asked for.
async fn submit_held(args: Vec<String>) -> Result<String, String> {
    let (tx, rx) = tokio::sync::oneshot::channel::<Result<String, String>>();
    tokio::spawn(async move {
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let submitted = match slurm_command("sbatch", &arg_refs).await {
            Ok(out) => parse_job_id(&out)
                .ok_or_else(|| format!("sbatch printed no job id (output: {})", out.trim())),
            Err(e) => Err(format!("sbatch failed: {e}")),
        };
        if let Err(Ok(orphan)) = tx.send(submitted) {
            tracing::info!(slurm_job = %orphan, "attempt abandoned during sbatch: cancelling its held job");
            let _ = slurm_command("scancel", &[&orphan]).await;
        }
    });
    rx.await
        .unwrap_or_else(|_| Err("the sbatch task ended without an answer".into()))
}

/// Cancels the job when an attempt is abandoned (the musician aborted: `mozart cancel`,
/// pause, shutdown), and forgets it in the checkpoint. The work runs on a thread of its
/// own: the drop may happen anywhere, even where the checkpoint's locks are held.
struct CancelGuard {
    attempt: Option<RemoteAttempt>,
    journal: Option<Arc<dyn RemoteJournal>>,
    /// The checkpoint holds the job's record, so a next conductor can re-attach to it.
    recorded: bool,
    /// The attempt's directory: removed with everything in it when the attempt is abandoned
    /// (unless its job runs on for the next conductor).
    dir: Option<PathBuf>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let dir = self.dir.take();
        let Some(attempt) = self.attempt.take() else {
            // Abandoned before a job existed: only the files are left to remove.
            if let Some(dir) = dir {
                in_thread("mozart-slurm-files", move || remove_attempt_files(&dir));
            }
            return;
        };
        if super::detaching() && self.recorded {
            // The conductor is stopping: the job runs on, its record stays, and the next
            // conductor re-attaches to it. (A job not yet recorded is cancelled: nobody
            // could find it again.)
            tracing::info!(slurm_job = %attempt.remote_id, "conductor stopping: leaving the Slurm job running");
            return;
        }
        let journal = self.journal.take();
        let work = move || {
            let scancel = |args: &[String]| {
                std::process::Command::new("scancel")
                    .env_clear()
                    .envs(std::env::vars_os().filter(|(k, _)| {
                        let k = k.to_string_lossy();
                        SLURM_ENV.contains(&k.as_ref()) || k.starts_with("SLURM_")
                    }))
                    .args(args)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let mut cancelled =
                attempt.remote_id.is_empty() || scancel(std::slice::from_ref(&attempt.remote_id));
            let task = read_task(dir.as_deref().unwrap_or(&attempt.dir));
            if let (Some(task), true) = (task, attempt.remote_id.is_empty()) {
                // An array task whose id never came back: its array's other tasks belong to
                // other sheets, so only the task of this index is cancelled.
                let listed = std::process::Command::new("squeue")
                    .args(["-h", "--me", "-r", "-o", "%i"])
                    .arg(format!("--name={}", attempt.name))
                    .stderr(std::process::Stdio::null())
                    .output();
                if let Ok(out) = listed {
                    let suffix = format!("_{task}");
                    for id in String::from_utf8_lossy(&out.stdout).lines() {
                        if id.trim().ends_with(&suffix) {
                            cancelled &= scancel(&[id.trim().to_string()]);
                        }
                    }
                }
            } else if !attempt.name.is_empty() && task.is_none() {
                // By name as well: the job sbatch may have created without telling us its
                // id (abandoned during sbatch), and any duplicate of it.
                let uid = std::fs::metadata("/proc/self").map(|m| {
                    use std::os::unix::fs::MetadataExt as _;
                    m.uid()
                });
                if let Ok(uid) = uid {
                    cancelled &=
                        scancel(&[format!("--name={}", attempt.name), format!("--user={uid}")]);
                }
            }
            if !cancelled {
                tracing::warn!(slurm_job = %attempt.remote_id, name = %attempt.name, "scancel of an abandoned attempt failed");
            }
            // Cancelled: no conductor will collect it, so nothing of it is kept.
            remove_attempt_files(dir.as_deref().unwrap_or(&attempt.dir));
            if let Some(journal) = journal {
                journal.forget(&attempt.remote_id);
            }
        };
        in_thread("mozart-scancel", work);
    }
}

/// Run `work` on a thread of its own (a drop may happen anywhere, even under the
/// checkpoint's locks); logged when no thread can be started.
fn in_thread(name: &str, work: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(work) {
        tracing::warn!(error = %e, thread = name, "cannot start a clean-up thread");
    }
}

/// The files of an attempt the conductor writes for the job: the command line (the prompt),
/// the environment (API keys), stdin, the wrapper. Removed when the attempt ends; what the
/// job wrote stays until its result is recorded ([`remove_finished_attempt`]).
const INPUT_FILES: &[&str] = &["argv", "env", "stdin", "run.sh"];

/// Remove an attempt's directory and everything in it (and, for an array task, what is
/// left of its array once it was the last).
fn remove_attempt_files(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a Slurm attempt's files")
        }
    }
    remove_array_leftovers(dir);
    remove_empty_job_dir(dir);
}

/// The job's directory in the state directory (`<state_dir>/<job>/`) once its last attempt's
/// directory is gone — so a finished job leaves nothing behind —, and the workspace's
/// default `.mozart-slurm` with it when nothing else is in it. Only empty directories go
/// (`remove_dir`): whatever is still there stays. An attempt created at the same moment
/// creates the directories again ([`create_private_dir`]).
fn remove_empty_job_dir(dir: &Path) {
    let ours = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("sheet-") && n.contains("-attempt-"));
    let mut parent = dir.parent();
    if parent.is_some_and(is_array_dir) {
        parent = parent.and_then(Path::parent);
    }
    let Some(job_dir) = parent.filter(|_| ours) else {
        return;
    };
    if std::fs::remove_dir(job_dir).is_err() {
        return;
    }
    if let Some(base) = job_dir
        .parent()
        .filter(|b| b.file_name().is_some_and(|n| n == DEFAULT_STATE_DIR))
    {
        let _ = std::fs::remove_dir(base);
    }
}

/// The state directory's name in the workspace when the placement names none.
const DEFAULT_STATE_DIR: &str = ".mozart-slurm";

/// Whether `dir` is an array's directory (`array-<ms>-<pid>`).
fn is_array_dir(dir: &Path) -> bool {
    dir.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("array-"))
}

/// Create `dir` (`<state dir>/<job>/[array-…/]<attempt>`, under `base`, the state directory)
/// private (0700), level by level, refusing every level another user could change
/// ([`check_private_dir`]): the state directory (created 0700 with its missing parents when
/// there is none), then each level below it, created or reused — another user's directory
/// of the job's (predictable) name, or a symbolic link put there, is never used. The job's
/// directory may be removed by another attempt's end between the creation of it and of
/// `dir` ([`remove_empty_job_dir`]): then it is created again.
fn create_private_dir(base: &Path, dir: &Path) -> std::io::Result<()> {
    let below = dir.strip_prefix(base).map_err(|_| {
        std::io::Error::other(format!(
            "{} is not inside the Slurm state directory {}",
            dir.display(),
            base.display()
        ))
    })?;
    let mut tries = 0;
    'again: loop {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(base)?;
        check_private_dir(base, true)?;
        let mut level = base.to_path_buf();
        for part in below.components() {
            level.push(part);
            match std::fs::DirBuilder::new().mode(0o700).create(&level) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 5 => {
                    tries += 1;
                    continue 'again;
                }
                Err(e) => return Err(e),
            }
            check_private_dir(&level, false)?;
        }
        return Ok(());
    }
}

/// Refuse a directory the attempt's files would be in when another user could change what
/// is in it: one owned by someone else, or that others can write (they could rename the
/// attempt's directory away and put their own command line where the job reads it — the job
/// runs it as you). `follow`: the state directory may be a symbolic link the user chose; a
/// level Mozart creates below it may not.
fn check_private_dir(dir: &Path, follow: bool) -> std::io::Result<()> {
    let meta = if follow {
        std::fs::metadata(dir)
    } else {
        std::fs::symlink_metadata(dir)
    }?;
    let problem = if meta.file_type().is_symlink() {
        "is a symbolic link, not a directory Mozart created".to_string()
    } else if !meta.is_dir() {
        "is not a directory".to_string()
    } else if meta.uid() != nix::unistd::geteuid().as_raw() {
        format!(
            "belongs to {}, not to you (uid {})",
            user_name(meta.uid()),
            nix::unistd::geteuid().as_raw()
        )
    } else if meta.mode() & 0o022 != 0 {
        format!(
            "can be written by {} (mode {:04o})",
            if meta.mode() & 0o002 != 0 {
                "every user"
            } else {
                "its group"
            },
            meta.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(std::io::Error::other(format!(
        "{} {problem}: another user could replace the Slurm job's files in it and run commands \
         as you, {NOT_PRIVATE}. Slurm attempt files go only in directories that are \
         yours alone: remove it (or `chmod go-w` it, if it is yours), or set placement.state_dir \
         to a directory you own that no one else can write (e.g. `mkdir -m 700 \
         /shared/mozart-$USER`)",
        dir.display()
    )))
}

/// Says that a directory is refused as not private ([`check_private_dir`]).
const NOT_PRIVATE: &str = "so Mozart does not use it";

/// A user for a message: `name (uid N)`, `uid N` when the account has no name.
fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("{} (uid {uid})", user.name),
        _ => format!("uid {uid}"),
    }
}

/// Hold Slurm job `id`, and cancel it if it is still pending then (the withdrawal at pause,
/// and of a paused job's queued jobs after a restart): `Ok` once it is cancelled without
/// having run, `Err` with why it runs on.
///
/// A job can start between any look at its state and an `scancel`: it is held first
/// (`scontrol hold`; the controller starts no held job), and only a job Slurm then shows
/// still pending is cancelled. One that started meanwhile is released again (a hold on a
/// running job would only matter if Slurm requeued it) and followed as before.
async fn withdraw_pending(id: &str) -> Result<(), String> {
    if let Err(e) = slurm_command("scontrol", &["hold", id]).await {
        return Err(match job_state(id).await {
            JobState::Active(s) if s == "PENDING" => {
                format!("Slurm did not hold it: {e}")
            }
            JobState::Unreachable(e) => format!("Slurm could not be asked: {e}"),
            _ => "it had started".into(),
        });
    }
    match job_state(id).await {
        JobState::Active(s) if s == "PENDING" => {}
        JobState::Unreachable(e) => {
            // Its state is unknown: it runs on (released) and is followed.
            let _ = slurm_command("scontrol", &["release", id]).await;
            return Err(format!("Slurm could not be asked whether it started: {e}"));
        }
        _ => {
            let _ = slurm_command("scontrol", &["release", id]).await;
            return Err("it had started".into());
        }
    }
    // Held and pending: it cannot start any more.
    if let Err(e) = slurm_command("scancel", &[id]).await {
        let _ = slurm_command("scontrol", &["release", id]).await;
        return Err(format!("Slurm did not cancel it: {e}"));
    }
    Ok(())
}

/// Withdraw the Slurm job of an attempt no conductor follows — its Mozart job was paused,
/// and the conductor stopped before the pause had withdrawn the job from the queue — as
/// the pause would have: held, and cancelled if still pending, its files (the environment
/// with its keys among them) removed. `Err` says why it was kept (it started: a resume
/// collects its result).
pub async fn withdraw_unfollowed(remote_id: &str, dir: &Path) -> Result<(), String> {
    if remote_id.is_empty() {
        return Err("Slurm never answered with its job id".into());
    }
    withdraw_pending(remote_id).await?;
    remove_attempt_dir(dir).await;
    Ok(())
}

/// Cancel the Slurm job of an attempt no conductor follows — its Mozart job was cancelled
/// while paused after a restart, so no musician re-attached to it — and remove its files
/// (the environment with its keys among them): nothing is to run for it any more. By id,
/// else (a record from before `sbatch` answered) by its job name.
pub async fn cancel_unfollowed(remote_id: &str, job_name: &str, dir: &Path) {
    if !remote_id.is_empty() {
        if let Err(e) = slurm_command("scancel", &[remote_id]).await {
            tracing::warn!(slurm_job = %remote_id, error = %e, "cannot cancel the Slurm job of a cancelled job's attempt");
        }
    } else if !job_name.is_empty() {
        let by_name = format!("--name={job_name}");
        if let Err(e) = slurm_command("scancel", &["--me", &by_name]).await {
            tracing::warn!(name = %job_name, error = %e, "cannot cancel the Slurm job of a cancelled job's attempt");
        }
    }
    tracing::info!(slurm_job = %remote_id, name = %job_name, "cancelled the unfollowed Slurm job of a cancelled job");
    remove_attempt_dir(dir).await;
}

/// [`remove_attempt_files`] off the async workers.
async fn remove_attempt_dir(dir: &Path) {
    let dir = dir.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || remove_attempt_files(&dir)).await;
}

/// Remove the directory of a remote attempt whose result is recorded (durably: a restart
/// will not re-attach to it, so its output files are no longer needed). Only a directory
/// named as the placement names attempts (`sheet-<n>-attempt-<k>-<ms>`) is touched.
pub fn remove_finished_attempt(dir: &Path) {
    let ours = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("sheet-") && n.contains("-attempt-"));
    if ours {
        remove_attempt_files(dir);
    }
}

/// After a task of an array lost its directory: its link in the array's directory goes
/// too, and the array's directory with its last task.
fn remove_array_leftovers(dir: &Path) {
    let Some(parent) = dir.parent().filter(|p| is_array_dir(p)) else {
        return;
    };
    let mut members = 0;
    if let Ok(entries) = std::fs::read_dir(parent) {
        for entry in entries.flatten() {
            let path = entry.path();
            let dangling = std::fs::symlink_metadata(&path)
                .is_ok_and(|m| m.file_type().is_symlink())
                && !path.exists();
            if dangling {
                let _ = std::fs::remove_file(&path);
            } else if entry.file_name() != "run.sh" {
                members += 1;
            }
        }
    }
    if members == 0 {
        // No task's directory is left, so no submission needs the array's script: one a
        // conductor stopped or killed during the array's sbatch left behind goes with the
        // last of its tasks (after the restart re-attached to them or submitted them anew).
        let _ = std::fs::remove_file(parent.join("run.sh"));
    }
    // Fails while other tasks' directories are still there.
    let _ = std::fs::remove_dir(parent);
}

/// Turn the job's files into the outcome a local process would have had.
async fn collect(
    attempt: &RemoteAttempt,
    spec: ProcessSpec,
    followed: Followed,
    mut streams: Streams,
    started: Instant,
) -> (ProcessOutcome, Option<Box<dyn LineSink>>) {
    let dir = attempt.dir.clone();
    let remote_id = attempt.remote_id.clone();
    let submitted_at = attempt.submitted_at;
    let stopped = matches!(followed, Followed::Stopped);
    // A failed run may be Slurm's doing (its time limit, an scancel from outside, out of
    // memory): the instrument's exit, the consequence, must not be all the error says.
    let verdict = match &followed {
        Followed::Exited(code) if *code != 0 => ended_by_slurm(&remote_id, *code).await,
        _ => None,
    };
    let work = move || {
        // The attempt is over: what the conductor wrote for it goes now; the outputs stay
        // until its result is recorded (a conductor restarted before that re-attaches and
        // collects them again).
        for name in INPUT_FILES {
            let _ = std::fs::remove_file(dir.join(name));
        }
        let (exit_code, exit_signal, timed_out, note) = match followed {
            Followed::Exited(code) if killed_by_signal(code) => {
                (None, Some(code - 128), false, verdict)
            }
            Followed::Exited(code) => (Some(code), None, false, verdict),
            Followed::TimedOut => (None, None, true, None),
            Followed::Stopped => (None, None, false, None),
            Followed::Vanished(how) => (None, None, false, Some(how)),
            Followed::Withdrawn => (None, None, false, None),
        };
        let note = note.map(|how| format!("\n[Slurm job {remote_id} {how}]\n"));
        // The rest of the output, written after the last look.
        streams.pump(&dir);
        if let Some(note) = note {
            streams.stderr.feed(note.as_bytes());
        }
        let (stdout, sink) = streams.stdout.finish();
        let (stderr, _) = streams.stderr.finish();
        if let Some(base) = &spec.log_base {
            for (name, suffix) in [("stdout", ".stdout.log"), ("stderr", ".stderr.log")] {
                if dir.join(name).exists() {
                    // Private and redacted like a local attempt's log (issue 21).
                    if let Err(e) = base.copy_redacted(&dir.join(name), suffix) {
                        tracing::warn!(error = %e, "cannot copy the Slurm job's output log");
                    }
                }
            }
        }
        let start = read_start(&dir);
        let end = std::fs::metadata(dir.join("exit"))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64())
            .unwrap_or_else(epoch_now);
        let duration = match start {
            Some(s) if end >= s => Duration::from_secs_f64(end - s),
            _ => started.elapsed(),
        };
        (
            ProcessOutcome {
                exit_code,
                exit_signal,
                timed_out,
                escalated: false,
                lingered: false,
                stopped,
                spawn_error: None,
                stdout,
                stderr,
                duration,
                started_at_epoch: start.unwrap_or(submitted_at),
            },
            sink,
        )
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => (
            failed_to_start(
                format!("collecting the Slurm job's output failed: {e}"),
                started,
            ),
            None,
        ),
    }
}

/// Why a submission that waited for Slurm (its controller, the per-user submit limit) ended
/// without submitting anything: `mozart pause`.
pub(crate) const NOT_SUBMITTED: &str =
    "not submitted to Slurm: the job was paused while the submission waited for Slurm";

/// The end of an attempt whose submission ended in `message` without a job to follow: a
/// withdrawal when the pause stopped it before it was submitted (the sheet is pending again,
/// no attempt spent: the answer, with no job id, is on its progress), else a failure to start.
fn not_started(req: &PlacedAttempt<'_>, message: String, started: Instant) -> ProcessOutcome {
    if message == NOT_SUBMITTED {
        tracing::info!(job_id = %req.job_id, sheet = req.sheet_num,
            "paused while waiting to submit to Slurm: nothing submitted");
        req.progress
            .answer_withdraw(crate::types::Withdrawal::Withdrawn(String::new()));
    }
    failed_to_start(message, started)
}

/// The end of an attempt withdrawn from Slurm's queue: its files (the environment with its
/// keys among them) removed, its record forgotten, the answer on its progress; the outcome
/// says nothing ran (the musician reports the attempt as withdrawn, not as a result).
async fn withdrawn(
    req: &PlacedAttempt<'_>,
    attempt: &RemoteAttempt,
    started: Instant,
) -> ProcessOutcome {
    tracing::info!(job_id = %req.job_id, sheet = req.sheet_num, slurm_job = %attempt.remote_id,
        "withdrew the attempt's Slurm job from the queue before it started (pause)");
    remove_attempt_dir(&attempt.dir).await;
    if let Some(journal) = &req.remote {
        journal.forget(&attempt.remote_id);
    }
    req.progress
        .answer_withdraw(crate::types::Withdrawal::Withdrawn(
            attempt.remote_id.clone(),
        ));
    failed_to_start(
        format!(
            "Slurm job {} was withdrawn from the queue before it started (the job was paused)",
            attempt.remote_id
        ),
        started,
    )
}

/// Whether the wrapper's exit status `code` (bash's `$?`: 128 + N for a command ended by
/// signal N) means a signal ended the command. A status of 128 + N for a signal whose
/// default action does not end a process (SIGCHLD, SIGCONT, the stop signals, SIGURG,
/// SIGWINCH) is the command's own exit code: Gemini CLI exits 145 on a refused key, which
/// read as "killed by signal 17" hid the auth error behind a retried "signal" failure.
fn killed_by_signal(code: i32) -> bool {
    use nix::sys::signal::Signal;
    const NOT_FATAL: &[Signal] = &[
        Signal::SIGCHLD,
        Signal::SIGCONT,
        Signal::SIGSTOP,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGURG,
        Signal::SIGWINCH,
    ];
    code > 128 && code <= 128 + 64 && !NOT_FATAL.iter().any(|s| *s as i32 == code - 128)
}

fn failed_to_start(message: String, started: Instant) -> ProcessOutcome {
    // Slurm refused the job as configured (bad partition, account, QOS, resources): the
    // backends report it as a configuration error, not retried, in Slurm's own words.
    // So is a state directory another user could change: trying again does not help.
    let kind = if slurm_refused(&message) || message.contains(NOT_PRIVATE) {
        std::io::ErrorKind::InvalidInput
    } else {
        std::io::ErrorKind::Other
    };
    ProcessOutcome {
        exit_code: None,
        exit_signal: None,
        timed_out: false,
        escalated: false,
        lingered: false,
        stopped: false,
        spawn_error: Some(std::io::Error::new(kind, message)),
        stdout: Default::default(),
        stderr: Default::default(),
        duration: started.elapsed(),
        started_at_epoch: epoch_now(),
    }
}

/// The conductor's variables a Slurm command gets (besides `SLURM_*`, `SBATCH_*`, …): a
/// submitted job inherits sbatch's environment, and it must not carry the conductor's
/// credentials into Slurm's job record.
const SLURM_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"];

/// Run a Slurm command (with a scrubbed environment); its stdout, or an error with its stderr.
pub async fn slurm_command(program: &str, args: &[&str]) -> Result<String, String> {
    slurm_command_with(program, args, &[]).await
}

/// [`slurm_command`] with `env` set for it (e.g. `SLURM_TIME_FORMAT`).
async fn slurm_command_with(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear().envs(std::env::vars_os().filter(|(k, _)| {
        let k = k.to_string_lossy();
        SLURM_ENV.contains(&k.as_ref())
            || ["SLURM_", "SBATCH_", "SQUEUE_", "SCANCEL_"]
                .iter()
                .any(|p| k.starts_with(p))
    }));
    cmd.envs(env.iter().copied());
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(COMMAND_TIMEOUT, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{program} {NOT_ON_PATH}: sheets placed on Slurm need Slurm's client \
                 commands (sbatch, squeue, scontrol, scancel) where the conductor runs. Run \
                 the conductor on a Slurm submit host, or restart it with them on its PATH \
                 (mozart stop, then mozart start), or leave placement.type out to run the \
                 sheets on this machine"
            ))
        }
        Ok(Err(e)) => return Err(format!("cannot run {program}: {e}")),
        Err(_) => {
            return Err(format!(
                "{program} did not answer within {COMMAND_TIMEOUT:?}"
            ))
        }
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "{program} {}: {}",
            out.status,
            crate::redact::redact(stderr.trim())
        ))
    }
}

/// Ask Slurm about one job (`scontrol show job -o`; no accounting daemon needed).
pub async fn job_state(id: &str) -> JobState {
    match slurm_command("scontrol", &["show", "job", "-o", id]).await {
        Ok(out) => match field(&out, "JobState") {
            Some(state) if TERMINAL_STATES.contains(&state) => JobState::Ended(state.into()),
            Some(state) => JobState::Active(state.into()),
            None => JobState::Unknown,
        },
        Err(e) if e.contains("Invalid job id") => JobState::Unknown,
        Err(e) => JobState::Unreachable(e),
    }
}

/// When the job of an attempt submitted before a conductor restart began: Slurm's own
/// start time for it (`squeue`, else `sacct` once the controller has forgotten it), else
/// the start its wrapper wrote, else — still in the queue — its submission.
async fn began_at(attempt: &RemoteAttempt) -> f64 {
    let epoch = |text: &str| {
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|t| *t > 0.0 && *t <= epoch_now() + 60.0)
    };
    let id = attempt.remote_id.as_str();
    let listed = slurm_command_with(
        "squeue",
        &["-h", "-j", id, "-o", "%T|%S"],
        &[("SLURM_TIME_FORMAT", "%s")],
    )
    .await;
    if let Ok(out) = listed {
        if let Some((state, start)) = out.lines().next().and_then(|l| l.split_once('|')) {
            // A pending job's start time is Slurm's forecast, not a start.
            if state.trim() != "PENDING" {
                if let Some(t) = epoch(start) {
                    return t;
                }
            }
        }
    }
    let accounted = slurm_command_with(
        "sacct",
        &["-n", "-X", "-P", "-j", id, "-o", "Start"],
        &[("SLURM_TIME_FORMAT", "%s")],
    )
    .await;
    if let Some(t) = accounted
        .ok()
        .and_then(|out| out.lines().next().and_then(epoch))
    {
        return t;
    }
    read_start(&attempt.dir).unwrap_or(attempt.submitted_at)
}

/// Write `attempt` to the request's journal durably (off the async workers: an fsync).
async fn record(req: &PlacedAttempt<'_>, attempt: &RemoteAttempt) -> Result<(), String> {
    let Some(journal) = &req.remote else {
        return Ok(());
    };
    let (j, a) = (Arc::clone(journal), attempt.clone());
    tokio::task::spawn_blocking(move || j.record(&a))
        .await
        .unwrap_or_else(|e| Err(format!("recording task failed: {e}")))
}

/// Our jobs named `name` that Slurm still lists, as (id, state).
async fn jobs_named(name: &str) -> Result<Vec<(String, String)>, String> {
    let out = slurm_command(
        "squeue",
        &[
            "-h", "--me", "-r", "-t", "all", "--name", name, "-o", "%i|%T",
        ],
    )
    .await?;
    Ok(out
        .lines()
        .filter_map(|l| l.trim().split_once('|'))
        .map(|(id, st)| (id.to_string(), st.to_string()))
        .collect())
}

/// What a Slurm command missing from the conductor's `PATH` says after its name.
const NOT_ON_PATH: &str = "not found on the conductor's PATH";

/// Whether a Slurm command is missing from the conductor's `PATH`: nothing to wait for (the
/// conductor's PATH is fixed until it restarts).
pub fn command_missing(message: &str) -> bool {
    message.contains(NOT_ON_PATH)
}

/// Whether Slurm refused a submission as configured (invalid partition, account, QOS,
/// resources; Slurm's commands missing on this host): the same submission would be refused
/// again.
pub fn slurm_refused(message: &str) -> bool {
    command_missing(message)
        || !controller_unreachable(message)
            && (message.contains("Batch job submission failed")
                || message.contains("sbatch: error:")
                || message.contains(REFUSED))
}

/// The error of a submission Slurm refused as configured: Slurm's words, the placement
/// fields the job asked for (one of them is what Slurm refused) and where to fix them.
/// Other errors (a missing command, a failure to run sbatch) pass unchanged.
pub(crate) fn refusal(error: &str, spec: &PlacementSpec) -> String {
    if command_missing(error) || !slurm_refused(error) {
        return error.to_string();
    }
    let words: Vec<&str> = error
        .lines()
        .filter_map(|l| l.split_once("sbatch: error: ").map(|(_, w)| w.trim()))
        .filter(|w| !w.is_empty())
        .collect();
    let words = if words.is_empty() {
        error.trim().to_string()
    } else {
        words
            .iter()
            .map(|w| w.trim_start_matches("Batch job submission failed: "))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let cpus = spec.cpus.map(|c| c.to_string());
    let mut asked: Vec<String> = [
        ("partition", &spec.partition),
        ("account", &spec.account),
        ("qos", &spec.qos),
        ("time", &spec.time),
        ("cpus", &cpus),
        ("memory", &spec.memory),
        ("gpus", &spec.gpus),
        ("gres", &spec.gres),
        ("constraint", &spec.constraint),
    ]
    .into_iter()
    .filter_map(|(field, value)| Some(format!("placement.{field}: {}", value.as_ref()?)))
    .collect();
    if !spec.extra_args.is_empty() {
        asked.push(format!(
            "placement.extra_args: {}",
            spec.extra_args.join(" ")
        ));
    }
    let asked = if asked.is_empty() {
        "no placement field: the cluster's defaults".to_string()
    } else {
        asked.join(", ")
    };
    // The fields first: a table of errors keeps a message's start and end.
    format!(
        "{REFUSED} ({asked}): {words}. Fix the field Slurm refused in the score's or the \
         instrument profile's placement (`sinfo` lists partitions; `sacctmgr show \
         associations user=$USER`, accounts and QOS)"
    )
}

/// How [`refusal`]'s error begins.
const REFUSED: &str = "Slurm refused the job";

/// Whether `sbatch` was refused for a per-user (or per-association, per-QOS) submit limit:
/// the job is accepted once earlier jobs end.
pub fn submit_limit(message: &str) -> bool {
    [
        "MaxSubmitJob",
        "MaxSubmitJobs",
        "QOSMaxSubmitJob",
        "AssocMaxSubmitJob",
    ]
    .iter()
    .any(|p| message.contains(p))
}

/// Whether a Slurm command failed because the controller could not be reached (or is
/// too busy): worth waiting for, not a failure of the attempt.
pub fn controller_unreachable(message: &str) -> bool {
    [
        "Unable to contact slurm controller",
        "Socket timed out",
        "Zero Bytes were transmitted",
        "Connection refused",
        "did not answer within",
        "Slurm temporarily unable",
        "temporarily unavailable",
        "Communication connection failure",
        "Transport endpoint is not connected",
        "in standby mode",
        "slurm_receive_msg",
        "MaxSubmitJobs",
        "MaxSubmitJobsPerUser",
        "QOSMaxSubmitJob",
        "AssocMaxSubmitJob",
    ]
    .iter()
    .any(|p| message.contains(p))
}

/// `Key=value` out of `scontrol -o` output.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// The id in `sbatch --parsable` output (`123` or `123;cluster`).
fn parse_job_id(out: &str) -> Option<String> {
    let id = out.lines().last()?.split(';').next()?.trim();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit() || c == '_')).then(|| id.to_string())
}

/// `sbatch --time` in minutes: the attempt's timeout and kill grace, plus a minute, so
/// Slurm ends a job our own timer can no longer end (its conductor is gone).
fn time_limit_minutes(timeout: Duration, kill_grace: Duration) -> u64 {
    let secs = timeout.as_secs_f64() + kill_grace.as_secs_f64();
    (secs / 60.0).ceil() as u64 + 1
}

/// The `sbatch` options of a held submission named `name` (the script's path comes last,
/// added by the caller): the placement's contract, then the score's resources and
/// `extra_args`.
fn sbatch_args(
    spec: &PlacementSpec,
    name: &str,
    output: &Path,
    cwd: &Path,
    minutes: u64,
) -> Vec<String> {
    let requeue = spec.requeue_on_preemption.unwrap_or(false);
    let mut args = vec![
        "--parsable".to_string(),
        "--hold".into(),
        // A requeued job runs its script again: only when the score asks for it
        // (`requeue_on_preemption`), and then the follower waits for the new run.
        if requeue { "--requeue" } else { "--no-requeue" }.into(),
        // The job's environment is the `env` file, read by the wrapper. sbatch itself runs
        // with a scrubbed environment (`slurm_command`), so what Slurm stores with the job
        // holds no credentials. (`--export=NONE` would do the same but makes slurmd load
        // the user's login environment on the node: seconds per job.)
        "--export=ALL".into(),
        format!("--job-name={name}"),
        format!("--output={}", output.display()),
        format!("--chdir={}", cwd.display()),
    ];
    let has_time = spec.time.is_some()
        || spec
            .extra_args
            .iter()
            .any(|a| a == "-t" || a.starts_with("--time") || a.starts_with("-t"));
    if !has_time {
        args.push(format!("--time={minutes}"));
    }
    let cpus = spec.cpus.map(|c| c.to_string());
    for (flag, value) in [
        ("--partition", &spec.partition),
        ("--account", &spec.account),
        ("--qos", &spec.qos),
        ("--time", &spec.time),
        ("--cpus-per-task", &cpus),
        ("--mem", &spec.memory),
        ("--gpus", &spec.gpus),
        ("--gres", &spec.gres),
        ("--constraint", &spec.constraint),
    ] {
        if let Some(v) = value {
            args.push(format!("{flag}={v}"));
        }
    }
    args.extend(spec.extra_args.iter().cloned());
    args
}

/// The job an id belongs to: `1234` for the array task `1234_5` (every task of an array
/// is one submission, so none is a duplicate of another), the id itself otherwise.
fn base_id(id: &str) -> &str {
    id.split_once('_').map_or(id, |(base, _)| base)
}

/// The array task an attempt is, from its directory's `task` file (written before its
/// array's name is recorded); `None` for an attempt that is a job of its own.
fn read_task(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("task"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A Slurm job name naming the Mozart job, sheet and attempt (`squeue` shows it), made
/// unique to the state directory (`base`, under the job's workspace by default) by a short
/// hash of it: two conductors, or two runs of a job name in different workspaces, never
/// find each other's jobs by name.
pub fn job_name(job_id: &str, sheet: u32, attempt: u32, base: &Path) -> String {
    let mut name = format!("mozart-{}", safe_name(job_id));
    name.truncate(80);
    // FNV-1a: stable across releases and machines (the name outlives the conductor).
    let mut hash: u32 = 0x811c_9dc5;
    for b in base.as_os_str().as_bytes() {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{name}-s{sheet}-a{attempt}-{hash:08x}")
}

/// An attempt's directory name: sheet, attempt and the submission time in ms (unique even
/// when the same attempt number is submitted again after a restart).
fn attempt_dir_name(req: &PlacedAttempt<'_>) -> String {
    format!(
        "sheet-{}-attempt-{}-{}",
        req.sheet_num,
        req.attempt,
        (epoch_now() * 1000.0) as u64
    )
}

fn safe_name(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// `'text'` for a POSIX shell.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// The attempt's directory (`dir`, under the state directory `base`): command line,
/// environment, stdin, wrapper.
fn write_attempt_files(
    base: &Path,
    dir: &Path,
    cwd: &Path,
    spec: &ProcessSpec,
    keep_inputs: bool,
) -> std::io::Result<()> {
    // Directories we create (the state directory, the job's) are private too: their names
    // say which jobs and sheets run.
    create_private_dir(base, dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let mut argv = private_file(&dir.join("argv"))?;
    for arg in std::iter::once(&spec.program).chain(&spec.args) {
        argv.write_all(arg.as_bytes())?;
        argv.write_all(b"\0")?;
    }
    let env = spec
        .child_env
        .clone()
        .unwrap_or_else(|| crate::env::ChildEnv::resolve(&spec.env));
    let mut file = private_file(&dir.join("env"))?;
    for (k, v) in env.vars() {
        file.write_all(k.as_bytes())?;
        file.write_all(b"=")?;
        file.write_all(v.as_bytes())?;
        file.write_all(b"\0")?;
    }
    // The prompt (in argv or stdin) and the environment are deleted as soon as the job has
    // them open or read; the conductor deletes whatever is left when the attempt ends. A job
    // Slurm may requeue (`requeue_on_preemption`) runs this script again: it keeps them
    // (private, 0600) until the attempt ends.
    let rm = if keep_inputs { ":" } else { "rm -f" };
    let (open_stdin, stdin) = match &spec.stdin {
        Some(bytes) => {
            private_file(&dir.join("stdin"))?.write_all(bytes)?;
            (format!("exec 3< stdin && {rm} stdin\n"), "<&3 3<&-")
        }
        None => (String::new(), "< /dev/null"),
    };
    let script = format!(
        r#"#!/bin/bash
# Written by the Mozart conductor: one attempt of one sheet (docs/design/distributed.md).
PATH=/usr/local/bin:/usr/bin:/bin${{PATH:+:$PATH}}
d={dir}
# The attempt's files are read only from a directory of this user's that no one else can
# write (another user could put a command line there that this job would run as you); read
# from inside it ("."), which no rename of a directory above can swap after the check.
cd "$d" || exit 0
if [ "$(stat -c %u .)" != "$(id -u)" ] || [ $(( 0$(stat -c %a .) & 022 )) -ne 0 ]; then
  echo "mozart: $d is not yours alone (owner uid $(stat -c %u .), mode $(stat -c %a .)); not running anything from it" >&2
  exit 0
fi
# Only the job the conductor adopted runs the sheet: a duplicate of the same name (an sbatch
# the controller accepted after its client gave up, then released by someone) does nothing.
# (An array task is known as <array id>_<task>, which its array's script passes on.)
me="${{MOZART_SLURM_ID:-$SLURM_JOB_ID}}"
if [ "$(cat adopted 2>/dev/null)" != "$me" ]; then
  echo "mozart: Slurm job $me is not the adopted job of this attempt; not running it" >&2
  exit 0
fi
date +%s.%N > start.tmp && mv -f start.tmp start
mapfile -d '' -t argv < argv; {rm} argv
envv=()
if [ -f env ]; then mapfile -d '' -t envv < env; {rm} env; fi
{open_stdin}exec 4> stdout 5> stderr
done_with() {{ echo "$1" > "$d/exit.tmp" && mv -f "$d/exit.tmp" "$d/exit"; exit "$1"; }}
cd {cwd} || done_with 126
# The allocation as Slurm describes it (job id, node list, cpus, GPUs, per-job TMPDIR) on top
# of the instrument's own environment: the sheet sees what it was given.
alloc=()
while IFS= read -r -d '' kv; do
  case "$kv" in
    SLURM_*=* | SLURMD_*=* | CUDA_VISIBLE_DEVICES=* | GPU_DEVICE_ORDINAL=* | ROCR_VISIBLE_DEVICES=* | ZE_AFFINITY_MASK=* | TMPDIR=*) alloc+=("$kv") ;;
  esac
done < <(env -0)
env -i "${{envv[@]}}" "${{alloc[@]}}" "${{argv[@]}}" {stdin} >&4 2>&5 4>&- 5>&-
done_with $?
"#,
        dir = sh_quote(&dir.to_string_lossy()),
        cwd = sh_quote(&cwd.to_string_lossy()),
    );
    let mut run = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(dir.join("run.sh"))?;
    run.write_all(script.as_bytes())?;
    Ok(())
}

fn read_exit(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("exit"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The file (in the attempt's directory) that says the conductor released the job from the
/// hold it was submitted with: a restarted conductor releases only a job without it (its
/// predecessor stopped between the submission and the release), never another's hold.
pub(crate) const RELEASED: &str = "released";

/// Note that the job of the attempt in `dir` was released ([`RELEASED`]).
pub(crate) fn mark_released(dir: &Path) {
    if let Err(e) = private_file(&dir.join(RELEASED)) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot note the release of a Slurm job");
        }
    }
}

/// The id of the job the conductor chose to run the attempt (`adopted`, written before
/// the release).
fn read_adopted(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("adopted"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn read_start(dir: &Path) -> Option<f64> {
    std::fs::read_to_string(dir.join("start"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Count output the job wrote since the last look, for stale detection and `mozart status`.
/// A running placed sheet's output logs (`sheet-NN.<stream>.log`), written as the job's
/// output files grow, as a local attempt's are written as its pipes deliver: `mozart logs`
/// shows a running Slurm sheet's output, not "no output recorded" until the job ends.
/// Redacted as written; when the attempt ends, its whole output is copied over them
/// ([`collect`]).
struct LiveLogs(Vec<LiveLog>);

struct LiveLog {
    /// The job's output file in the attempt's directory (`stdout`, `stderr`).
    from: &'static str,
    to: crate::output_log::LogFile,
    log: Option<crate::output_log::RedactingLog>,
    /// Bytes of `from` written to the log so far.
    offset: u64,
    /// The log could not be created: not tried again.
    failed: bool,
}

/// The most a look copies into a log (the rest at the next look): a flood of output must not
/// hold the conductor's worker.
const LIVE_LOG_CHUNK: u64 = 1 << 20;

impl LiveLogs {
    fn new(base: Option<&crate::output_log::LogBase>) -> Self {
        let logs = base
            .map(|base| {
                [("stdout", ".stdout.log"), ("stderr", ".stderr.log")]
                    .into_iter()
                    .map(|(from, suffix)| {
                        let to = crate::output_log::LogFile {
                            base: base.clone(),
                            suffix,
                        };
                        LiveLog {
                            from,
                            to,
                            log: None,
                            offset: 0,
                            failed: false,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        LiveLogs(logs)
    }

    fn pump(&mut self, dir: &Path) {
        for log in &mut self.0 {
            log.pump(dir);
        }
    }
}

impl LiveLog {
    fn pump(&mut self, dir: &Path) {
        use std::io::{Read as _, Seek as _};
        if self.failed {
            return;
        }
        let from = dir.join(self.from);
        let Ok(len) = std::fs::metadata(&from).map(|m| m.len()) else {
            return;
        };
        if len < self.offset {
            // A requeued job's next run writes its output anew.
            self.log = None;
            self.offset = 0;
        }
        if len == self.offset {
            return;
        }
        if self.log.is_none() {
            match self.to.base.create(self.to.suffix) {
                Ok(file) => self.log = Some(crate::output_log::RedactingLog::new(file)),
                Err(e) => {
                    tracing::warn!(path = %self.to.path().display(), error = %e, "cannot create the Slurm sheet's output log");
                    self.failed = true;
                    return;
                }
            }
        }
        let Ok(mut file) = std::fs::File::open(&from) else {
            return;
        };
        if file.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = file.take(LIVE_LOG_CHUNK).read_to_end(&mut buf) else {
            return;
        };
        self.offset += n as u64;
        if let Some(log) = &mut self.log {
            let _ = log.write(&buf);
        }
    }
}

fn record_growth(dir: &Path, progress: &Progress, seen: &mut (u64, u64)) {
    let size = |name: &str| std::fs::metadata(dir.join(name)).map_or(0, |m| m.len());
    let (out, err) = (size("stdout"), size("stderr"));
    if out > seen.0 {
        progress.record(
            StreamKind::Stdout,
            usize::try_from(out - seen.0).unwrap_or(0),
        );
        seen.0 = out;
    }
    if err > seen.1 {
        progress.record(
            StreamKind::Stderr,
            usize::try_from(err - seen.1).unwrap_or(0),
        );
        seen.1 = err;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_status_past_128_is_a_signal_only_for_a_signal_that_ends_a_process() {
        assert!(killed_by_signal(137), "SIGKILL");
        assert!(killed_by_signal(143), "SIGTERM");
        assert!(
            !killed_by_signal(145),
            "Gemini CLI's own exit code, not SIGCHLD"
        );
        assert!(!killed_by_signal(1));
        assert!(!killed_by_signal(128));
        assert!(!killed_by_signal(255));
    }

    #[test]
    fn sbatch_output_and_scontrol_fields_parse() {
        assert_eq!(parse_job_id("123\n").as_deref(), Some("123"));
        assert_eq!(parse_job_id("77;cluster\n").as_deref(), Some("77"));
        assert_eq!(parse_job_id("Submitted batch job 5\n"), None);
        let line = "JobId=9 JobName=x JobState=CANCELLED Reason=None ExitCode=0:15";
        assert_eq!(field(line, "JobState"), Some("CANCELLED"));
        assert_eq!(field(line, "JobId"), Some("9"));
        assert_eq!(field(line, "Job"), None);
    }

    #[test]
    fn sacct_output_parses_and_reads_as_a_sentence() {
        let ended = parse_sacct("CANCELLED by 0|0:15|None\n");
        assert_eq!(
            ended.describe(),
            "ended CANCELLED by 0 without an exit status (from Slurm's accounting: exit code 0:15)"
        );
        let failed = parse_sacct("NODE_FAIL|0:0|NodeDown\n");
        assert!(failed.describe().contains("NODE_FAIL"), "{failed:?}");
        assert!(failed.describe().contains("reason NodeDown"), "{failed:?}");
        assert_eq!(parse_sacct("\n"), Accounting::NotFound);
        let off = Accounting::Unavailable(
            "sacct exit status: 1: Slurm accounting storage is disabled".into(),
        );
        assert!(off.describe().contains("the reason is unknown"));
        assert!(off.describe().contains("accounting storage is disabled"));
    }

    /// `sacct --name` lines: a job that started (a start time), one that never did
    /// (`Unknown`/`None`: cancelled while held), array tasks with their task ids.
    #[test]
    fn jobs_of_a_name_from_sacct_say_whether_they_started() {
        let jobs = parse_sacct_named(
            "1201|2026-11-27T08:12:59
1202|Unknown
1300_4|None

",
        );
        assert_eq!(
            jobs,
            vec![
                AccountedJob {
                    id: "1201".into(),
                    started: true
                },
                AccountedJob {
                    id: "1202".into(),
                    started: false
                },
                AccountedJob {
                    id: "1300_4".into(),
                    started: false
                },
            ]
        );
        assert_eq!(base_id("1300_4"), "1300");
        assert_eq!(base_id("1201"), "1201");
    }

    #[test]
    fn a_submit_limit_is_waited_for_and_told_apart_from_an_outage() {
        let refused = "sbatch exit status: 1: sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)";
        assert!(submit_limit(refused));
        assert!(controller_unreachable(refused));
        assert!(!slurm_refused(refused));
        assert!(!submit_limit(
            "sbatch: error: Unable to contact slurm controller"
        ));
    }

    #[test]
    fn names_and_limits() {
        let name = job_name("my job/1", 3, 2, Path::new("/ws/.mozart-slurm"));
        assert!(name.starts_with("mozart-my_job_1-s3-a2-"), "{name}");
        assert_ne!(
            name,
            job_name("my job/1", 3, 2, Path::new("/other/.mozart-slurm"))
        );
        let mut spec = ProcessSpec::new("x", vec![], Duration::from_secs(30));
        spec.kill_grace = Duration::from_secs(5);
        assert_eq!(time_limit_minutes(spec.timeout, spec.kill_grace), 2);
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
    }

    /// Another user who can write the job's directory renames the attempt's directory away
    /// while the job waits in the queue and puts their own `adopted` and `argv` in its
    /// place: the job runs nothing from it (it would run their command as you), and a state
    /// or job directory others can write, or another user's, is refused before anything is
    /// written there — naming the directory and why.
    #[test]
    fn attempt_files_are_trusted_only_in_a_directory_no_one_else_can_write() {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = tmp.path().join("work");
        std::fs::create_dir_all(&cwd).unwrap();
        let base = tmp.path().join("state");
        let job_dir = base.join("job");
        let dir = job_dir.join("sheet-1-attempt-1-1");
        let spec = ProcessSpec::new(
            "sh",
            vec!["-c".into(), "touch ran-the-sheet".into()],
            Duration::from_secs(30),
        );
        write_attempt_files(&base, &dir, &cwd, &spec, false).unwrap();
        let script = std::fs::read(dir.join("run.sh")).unwrap();
        // The job's directory left writable by others; the swap.
        std::fs::set_permissions(&job_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::rename(&dir, job_dir.join("orig")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let pwned = tmp.path().join("PWNED");
        std::fs::write(dir.join("adopted"), "4242").unwrap();
        std::fs::write(
            dir.join("argv"),
            format!("sh\0-c\0id > {}\0", pwned.display()),
        )
        .unwrap();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(String::from_utf8(script).unwrap())
            .env("SLURM_JOB_ID", "4242")
            .output()
            .unwrap();
        assert!(!pwned.exists(), "the planted command ran");
        assert!(!cwd.join("ran-the-sheet").exists());
        assert_eq!(read_exit(&dir), None);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("{} is not yours alone", dir.display())),
            "{said}"
        );
        // The conductor refuses such directories before it writes anything in them.
        let next = job_dir.join("sheet-1-attempt-2-2");
        let e = write_attempt_files(&base, &next, &cwd, &spec, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "{} can be written by every user (mode 0777)",
                job_dir.display()
            )),
            "{e}"
        );
        assert!(e.contains("placement.state_dir"), "{e}");
        assert!(!next.exists());
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = write_attempt_files(&base, &next, &cwd, &spec, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "{} can be written by every user (mode 1777)",
                base.display()
            )),
            "{e}"
        );
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A link put where the job's directory goes is not followed.
        std::fs::remove_dir_all(&job_dir).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("work"), &job_dir).unwrap();
        let e = write_attempt_files(&base, &next, &cwd, &spec, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert!(!cwd.join("sheet-1-attempt-2-2").exists());
    }

    /// The wrapper runs the command with exactly the given environment, stdin and working
    /// directory, and writes its outputs and exit status (bash is all it needs: run here).
    #[test]
    fn the_wrapper_runs_the_command_like_a_local_spawn() {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = tmp.path().join("work");
        std::fs::create_dir_all(&cwd).unwrap();
        let mut spec = ProcessSpec::new(
            "sh",
            vec![
                "-c".into(),
                "pwd; echo \"$SECRET\"; cat; echo oops >&2; exit 3".into(),
            ],
            Duration::from_secs(30),
        );
        spec.env = crate::env::EnvPlan {
            clear: true,
            set: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("SECRET".into(), "it's \"s3cret\"\nline2".into()),
            ],
            remove: vec![],
        };
        spec.stdin = Some(b"from stdin".to_vec());
        let dir = tmp.path().join("state").join("job").join("attempt");
        write_attempt_files(&tmp.path().join("state"), &dir, &cwd, &spec, false).unwrap();
        // Nobody but the conductor's user can read what it wrote (the environment holds API
        // keys), nor list the directories it created.
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for name in ["env", "argv", "stdin"] {
            assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
        }
        assert_eq!(mode(&dir.join("run.sh")), 0o700);
        for d in [
            &dir,
            &dir.parent().unwrap().to_path_buf(),
            &tmp.path().join("state"),
        ] {
            assert_eq!(mode(d) & 0o077, 0, "{}", d.display());
        }
        std::fs::write(dir.join("adopted"), "4242\n").unwrap();
        let status = std::process::Command::new("bash")
            .arg(dir.join("run.sh"))
            .env("SLURM_JOB_ID", "4242")
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(read_exit(&dir), Some(3));
        assert!(read_start(&dir).is_some());
        for name in ["env", "argv", "stdin"] {
            assert!(!dir.join(name).exists(), "the job deleted {name} once read");
        }
        let out = std::fs::read_to_string(dir.join("stdout")).unwrap();
        assert_eq!(
            out,
            format!(
                "{}\nit's \"s3cret\"\nline2\nfrom stdin",
                cwd.canonicalize().unwrap().display()
            )
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("stderr")).unwrap(),
            "oops\n"
        );
    }
}
