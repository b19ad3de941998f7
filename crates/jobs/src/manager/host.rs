//! The conductor's side of the baton loop: persistence (checkpoint before consequence),
//! musicians, kills, skip evaluation and job completion.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mozart_baton::driver::Inbox;
use mozart_baton::{
    AttemptContext, BatonHost, Event, HostError, JobOutcome, SkipSpec, StateChange,
};
use mozart_state::{
    AttemptRecord, DaemonJobStatus, JobStatus, Registry, SheetStatus, Timestamp, ValidationDetail,
};
use tokio::task::AbortHandle;

use super::attempt::AttemptDetails;
use super::events;
use super::musician;
use super::table::JobTable;
use super::{lock, Shared};

/// Implements [`BatonHost`] for the conductor.
pub(crate) struct ConductorHost {
    pub(super) shared: Arc<Shared>,
    /// Every loaded job: owned here, on the baton task (others reach it through
    /// [`super::table::Table`]).
    pub(crate) table: JobTable,
    inflight: HashMap<(String, u32), AbortHandle>,
    /// Jobs in which at least one sheet moved to completed during this run (the zero-work
    /// guard of conductor.md §19.1, done right).
    new_work: std::collections::HashSet<String>,
    /// The `job_complete` notification of a job whose hooks run, sent when they end.
    completion_notices: std::collections::HashMap<String, super::hooks::CompletionNotice>,
    /// Anchored when the baton loop starts (within microseconds of the driver's own clock),
    /// to turn the baton's monotonic deadlines into wall time for the registry.
    clock: mozart_baton::AnchoredClock,
    /// Directories of remote attempts whose results this burst records: removed once the
    /// burst is committed (before that, a restart re-attaches to them and needs their files).
    finished_remote: Vec<std::path::PathBuf>,
    /// Jobs whose sheet rows a burst saved without their job-level document, which the
    /// burst then writes once (see [`save_sheet`]).
    header_due: std::collections::HashSet<String>,
    /// Attempts handed to musicians whose result is not persisted yet (what a pause waits for).
    pub(super) running: std::collections::HashSet<(String, u32)>,
    /// Each parked instrument's wall-clock end of its rate-limit wait (for the log).
    rate_limits: HashMap<String, f64>,
    /// The same of each job's own wait (job, instrument), on an instrument whose rate
    /// limits hold one job only (`shell`).
    job_rate_limits: HashMap<(String, String), f64>,
    /// Instruments whose circuit breaker is not closed, as `status` shows them (issue 22:
    /// a job waited ~100 s on an open breaker with no reason shown). Not persisted: a new
    /// conductor starts with every breaker closed.
    pub(crate) breakers: HashMap<String, mozart_ipc::checkpoint::InstrumentHold>,
    /// Job events of the burst being saved, logged once it is durable: keyed by the change
    /// they belong to (its address in the burst), so a change that was not saved logs nothing.
    staged: Vec<(usize, Staged)>,
}

/// A job event waiting for its change to be committed.
type Staged = Box<dyn FnOnce(&mut ConductorHost) + Send>;

impl std::fmt::Debug for ConductorHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConductorHost")
            .field("inflight", &self.inflight.len())
            .finish_non_exhaustive()
    }
}

impl ConductorHost {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        ConductorHost {
            shared,
            table: JobTable::default(),
            inflight: HashMap::new(),
            new_work: std::collections::HashSet::new(),
            completion_notices: std::collections::HashMap::new(),
            clock: mozart_baton::AnchoredClock::new(),
            finished_remote: Vec::new(),
            header_due: std::collections::HashSet::new(),
            running: std::collections::HashSet::new(),
            rate_limits: HashMap::new(),
            job_rate_limits: HashMap::new(),
            breakers: HashMap::new(),
            staged: Vec::new(),
        }
    }
}

/// The job-row option saying when the job's run started counting against
/// `job_timeout_seconds` (epoch seconds).
pub(super) const RUN_CLOCK: &str = "timeout_clock_started_at";

/// Fold the musician's details of the attempt into the sheet state.
fn apply_details(sheet: &mut mozart_state::SheetState, d: &AttemptDetails) {
    sheet.exit_code = d.exit_code;
    sheet.exit_signal = d.exit_signal;
    sheet.execution_duration_seconds = Some(d.duration_seconds);
    sheet.error_code = d.error_code.clone();
    sheet.error_category = d
        .error_category
        .as_deref()
        .and_then(mozart_state::ErrorCategory::parse);
    if let Some(model) = &d.model {
        sheet.instrument_model = Some(model.clone());
    }
    // The sheet's tokens and cost add up over its attempts; its confidence is its least sure
    // attempt's (an attempt whose cost is unknown makes the sheet's unknown, 0.0).
    if d.input_tokens > 0 || d.output_tokens > 0 {
        sheet.input_tokens = Some(
            sheet
                .input_tokens
                .unwrap_or(0)
                .saturating_add(d.input_tokens),
        );
        sheet.output_tokens = Some(
            sheet
                .output_tokens
                .unwrap_or(0)
                .saturating_add(d.output_tokens),
        );
    }
    if d.cost_confidence > 0.0 {
        sheet.estimated_cost = Some(sheet.estimated_cost.unwrap_or(0.0) + d.cost_usd);
    }
    sheet.cost_confidence = sheet.cost_confidence.min(d.cost_confidence);
    // Kept (redacted) for `mozart errors` and for cross-sheet context (`previous_outputs`).
    sheet.capture_output(
        &d.stdout_tail,
        &d.stderr_tail,
        10_000,
        mozart_backends::redact,
    );
    if let Some(review) = &d.review {
        sheet.review = Some(Box::new(review.clone()));
    }
    if let Some(report) = &d.validation {
        sheet.validation_passed = Some(report.all_passed());
        sheet.last_pass_percentage = Some(report.pass_rate());
        sheet.passed_validations = report
            .results
            .iter()
            .filter(|c| c.status == mozart_baton::validation::CheckStatus::Passed)
            .map(|c| c.description.clone().unwrap_or_else(|| c.rule_type.clone()))
            .collect();
        sheet.failed_validations = report
            .results
            .iter()
            .filter(|c| c.status == mozart_baton::validation::CheckStatus::Failed)
            .map(|c| c.description.clone().unwrap_or_else(|| c.rule_type.clone()))
            .collect();
        sheet.validation_details = Some(report.results.iter().map(validation_detail).collect());
    } else {
        sheet.validation_passed = None;
    }
}

/// A completed sheet of a large job once its row is saved: its whole state goes
/// ([`super::compact::compact_completed`]) and what is left is its facts, held as those
/// (~0.2 KB instead of ~1.1 KB), so the job's memory does not grow back with the sheets it
/// completes. True when the sheet was there to compact.
fn compact_sheet(live: &mut mozart_state::CheckpointState, sheet_num: u32) -> bool {
    let found = match live.sheets.get_mut(&sheet_num) {
        Some(sheet) => {
            super::compact::compact_completed(sheet);
            true
        }
        None => false,
    };
    live.sheets.compact(sheet_num);
    found
}

/// The status a sheet's transition stores. Cancel is not failure (issue 23): a sheet the
/// cancel stopped (never started, or killed mid-run) is recorded as not run, `pending`, with
/// no error, so status shows no fake error, no attempt and no inferred circuit breaker for
/// it. Upstream's table maps `cancelled` to `failed`; `pending` is in its vocabulary, so its
/// readers cope.
fn stored_status(status: mozart_baton::SheetStatus) -> SheetStatus {
    match status {
        mozart_baton::SheetStatus::Cancelled => SheetStatus::Pending,
        other => other.checkpoint_status(),
    }
}

impl ConductorHost {
    /// A dispatched attempt's job and what the table knows for it (None: not loaded).
    fn given(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        instrument: &str,
    ) -> Option<(Arc<super::JobRun>, musician::Given)> {
        let run = self.table.jobs.get(job_id)?.run.clone()?;
        // Where the attempt runs (a Slurm placement's watcher is made once and shared).
        let placement = super::placement::placement_for(
            &mut self.table.placements,
            &self.shared.instruments,
            &run,
            sheet_num,
            instrument,
        );
        let entry = self.table.jobs.get(job_id)?;
        let live_sheet = entry.live.as_ref().and_then(|l| l.sheets.get(&sheet_num));
        let reviewed = run.config.review.is_some();
        let given = musician::Given {
            // The worker's instrument and (reviewed sheets) the reviewer's.
            backends: entry
                .rt
                .backends
                .iter()
                .filter(|(name, _)| reviewed || name.as_str() == instrument)
                .map(|(name, b)| (name.clone(), Arc::clone(b)))
                .collect(),
            mtimes: entry.rt.mtimes.get(&sheet_num).cloned(),
            worktree: entry.rt.sheet_worktrees.get(&sheet_num).cloned(),
            review: match reviewed {
                true => live_sheet
                    .and_then(|s| s.review.as_deref().cloned())
                    .unwrap_or_default(),
                false => Default::default(),
            },
            prior: match (&run.config.cross_sheet, &entry.live) {
                (Some(_), Some(live)) => Some(crate::cross_sheet::prior_for_sheet(
                    live,
                    &run.config,
                    sheet_num,
                )),
                _ => None,
            },
            remote: live_sheet.and_then(|s| s.remote_attempt.as_deref().cloned()),
            placement,
        };
        Some((run, given))
    }

    /// Persist a sheet's transition: fold the attempt's details into the live checkpoint,
    /// save its row, then what follows from it (watchers, learning, the job event, compaction).
    /// Without `save`, only the live checkpoint takes it (the row is saved at the resume).
    fn persist_sheet(
        &mut self,
        jobs: &mut HashMap<String, super::JobEntry>,
        registry: &Registry,
        change: &mozart_baton::SheetChange,
        save: bool,
    ) -> Result<(), HostError> {
        let Some(entry) = jobs.get_mut(&change.job_id) else {
            return Ok(());
        };
        let details = entry.rt.attempt_details.remove(&change.sheet_num);
        if change.status == mozart_baton::SheetStatus::Waiting {
            entry
                .rt
                .waiting
                .insert(change.sheet_num, change.instrument.clone());
        } else {
            entry.rt.waiting.remove(&change.sheet_num);
        }
        if change.status != mozart_baton::SheetStatus::RetryScheduled {
            entry.rt.retries.remove(&change.sheet_num);
        }
        let sheet_logs = entry.run.as_ref().map(|r| r.sheet_logs.clone());
        let Some(live) = entry.live.as_mut() else {
            return Ok(());
        };
        let status = stored_status(change.status);
        // A cancel that cut an attempt short: its result never comes, the history says so.
        // (A sheet parked on a rate limit runs no attempt: nothing was cut short.)
        let in_flight = self
            .running
            .contains(&(change.job_id.clone(), change.sheet_num));
        let interrupted = (change.status == mozart_baton::SheetStatus::Cancelled
            && details.is_none()
            && in_flight)
            .then(|| live.sheets.get(&change.sheet_num))
            .flatten()
            .filter(|s| s.status == SheetStatus::InProgress)
            .map(|s| s.started_at.as_ref().and_then(Timestamp::to_epoch));
        // The remote attempt whose result this write records (update_sheet clears it).
        let finished_remote = details.as_ref().and_then(|_| {
            let sheet = live.sheets.get(&change.sheet_num)?;
            Some(std::path::PathBuf::from(
                &sheet.remote_attempt.as_ref()?.dir,
            ))
        });
        // The baton's monotonic due time as wall time: what a restart waits for.
        let retry_at = change
            .retry_due
            .map(|due| mozart_state::epoch_now() + due.since(self.clock.now()).as_secs_f64());
        if update_sheet(live, change, status, details.as_ref(), retry_at) {
            self.new_work.insert(change.job_id.clone());
        }
        if status == SheetStatus::Completed && !entry.watchers.is_empty() {
            // `job.watch` waits for the first completed sheet (those watchers are gone
            // after); one waiting for the job's end is woken by the job's own change.
            let seen = super::table::WatchSeen {
                status: entry.record.status,
                sheet_completed: live.last_completed_sheet > 0,
                waiting: entry.waiting.is_some(),
            };
            for watcher in entry.watchers.extract_if(.., |w| !w.until_done) {
                let _ = watcher.wake.send(seen);
            }
        }
        if change.status == mozart_baton::SheetStatus::Cancelled {
            if let Some(sheet) = live.sheets.get_mut(&change.sheet_num) {
                sheet.error_message = None;
                // The attempt the cancel cut short may have spent money the instrument never
                // got to report: the sheet's (and so the job's) cost is unknown, not $0.00.
                let free = sheet
                    .instrument_name
                    .as_deref()
                    .is_some_and(super::musician::costs_nothing);
                if interrupted.is_some() && !free {
                    sheet.cost_confidence = 0.0;
                }
            }
        }
        // The views' packed facts follow the sheet (the only place its facts change).
        if let (Some(facts), Some(sheet)) = (
            entry.view_facts.as_mut(),
            live.sheets.get(&change.sheet_num),
        ) {
            facts.update(sheet);
        }
        update_totals(live, change, status, details.as_ref());
        if !save {
            return Ok(());
        }
        let header_due =
            save_sheet(registry, live, change, status, details.is_some()).map_err(|e| {
                HostError::new(
                    format!(
                        "saving sheet {} of job '{}'",
                        change.sheet_num, change.job_id
                    ),
                    e,
                )
            })?;
        if header_due && !self.header_due.contains(&change.job_id) {
            self.header_due.insert(change.job_id.clone());
        }
        if let Some(dir) = finished_remote {
            // With the result, in its transaction: a removal owed even if a kill comes first.
            if let Err(e) = registry.note_remote_leftover(&dir.to_string_lossy()) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot note a finished Slurm attempt's files for removal");
            }
            self.finished_remote.push(dir);
        }
        if let Some(run) = &entry.run {
            super::notify::sheet_changed(run, live, change.sheet_num, status);
        }
        self.record_learning(entry.run.as_deref(), live, change, status, details.as_ref());
        if let Some(d) = &details {
            record_attempt(registry, change, d);
        } else if let Some(started) = interrupted {
            record_interrupted(registry, change, started);
        }
        let validations = live
            .sheets
            .get(&change.sheet_num)
            .filter(|_| details.as_ref().is_some_and(|d| d.validation.is_some()))
            .map(|s| {
                let passed = s.passed_validations.len();
                (passed, passed + s.failed_validations.len())
            });
        // A registration being replaced (a paused job resumed with its edited score) ends
        // its pending sheets; the job's sheets are not cancelled, and the log does not say so.
        let replaced = entry.replacing;
        self.stage_sheet_event(change, details.as_ref(), validations, sheet_logs, replaced);
        // Everything above that reads the sheet's details has run, and its row is saved.
        if status == SheetStatus::Completed
            && entry
                .run
                .as_deref()
                .is_some_and(|run| super::compact::compacts(run, live))
            && compact_sheet(live, change.sheet_num)
        {
            entry.compacted = true;
        }
        // Whole copies of compact sheets that readers asked for since the last transition
        // (the dispatch of a planned sheet reads it) go: memory follows running sheets.
        live.sheets.release_copies();
        Ok(())
    }

    /// A sheet that ended (completed, failed, skipped) with an outcome worth learning from
    /// goes to the learning store, when the job learns.
    fn record_learning(
        &self,
        run: Option<&super::JobRun>,
        live: &mozart_state::CheckpointState,
        change: &mozart_baton::SheetChange,
        status: SheetStatus,
        details: Option<&AttemptDetails>,
    ) {
        if !matches!(
            status,
            SheetStatus::Completed | SheetStatus::Failed | SheetStatus::Skipped
        ) {
            return;
        }
        let (Some(learning), Some(run)) = (&self.shared.learning, run) else {
            return;
        };
        if !run.config.learning.enabled {
            return;
        }
        if let Some(sheet) = live
            .sheets
            .get(&change.sheet_num)
            .filter(|s| super::learning::has_outcome(s))
        {
            let applied = details.map(|d| d.applied.clone()).unwrap_or_default();
            learning.record_sheet(super::learning::sheet_outcome(run, sheet, &applied));
        }
    }

    /// The job event of a sheet's transition, logged once the change is committed.
    fn stage_sheet_event(
        &mut self,
        change: &mozart_baton::SheetChange,
        details: Option<&AttemptDetails>,
        validations: Option<(usize, usize)>,
        sheet_logs: Option<std::path::PathBuf>,
        replaced: bool,
    ) {
        use mozart_baton::SheetStatus as S;
        let key = (change.job_id.clone(), change.sheet_num);
        let attempt_ended = change.status != S::Dispatched;
        // A command that exited 0 did not fail (a validation did): its last line is no cause.
        let cause = details
            .filter(|d| d.exit_code != Some(0))
            .and_then(|d| events::last_output_line(&d.stderr_tail, &d.stdout_tail));
        let failed = details.map(|d| events::FailedAttempt {
            attempt: Some(d.attempt_number),
            error_code: d.error_code.clone(),
            message: d.error_message.clone(),
            cause: cause.clone(),
        });
        let outcome_data = details.map(|d| {
            (
                d.attempt_number,
                d.duration_seconds,
                d.exit_code,
                d.error_code.clone(),
                d.error_message.clone(),
                d.cost_usd,
                d.input_tokens,
                d.output_tokens,
            )
        });
        let change = change.clone();
        let event: Staged = Box::new(move |host: &mut ConductorHost| {
            if attempt_ended {
                host.running.remove(&key);
            }
            let (job_id, sheet) = (change.job_id.as_str(), change.sheet_num);
            let o = outcome_data.as_ref();
            let outcome = events::Outcome {
                attempt: o.map(|o| o.0),
                duration_seconds: o.map(|o| o.1),
                exit_code: o.and_then(|o| o.2),
                error_code: o.and_then(|o| o.3.as_deref()),
                error_message: o.and_then(|o| o.4.as_deref()),
                cause: cause.as_deref(),
                validations,
                cost_usd: o.map(|o| o.5),
                input_tokens: o.map(|o| o.6),
                output_tokens: o.map(|o| o.7),
            };
            let logs = sheet_logs.as_deref();
            match change.status {
                S::Completed => events::sheet_completed(job_id, sheet, &outcome, logs),
                S::Failed => {
                    events::sheet_failed(job_id, sheet, &outcome, change.reason.as_deref(), logs)
                }
                S::Skipped => events::sheet_skipped(job_id, sheet, change.reason.as_deref()),
                S::Cancelled if replaced => {}
                S::Cancelled => events::sheet_cancelled(job_id, sheet),
                S::RetryScheduled => {
                    // Logged when the baton says when the retry runs (`observe`).
                    if let (Some(failed), Some(entry)) = (failed, host.table.jobs.get_mut(job_id)) {
                        entry.log.retries.insert(sheet, failed);
                    }
                }
                S::Waiting => {
                    if let Some(failed) = failed {
                        let until = host
                            .job_rate_limits
                            .get(&(job_id.to_owned(), change.instrument.clone()))
                            .or_else(|| host.rate_limits.get(&change.instrument))
                            .copied();
                        events::sheet_rate_limited(
                            job_id,
                            sheet,
                            &change.instrument,
                            &failed,
                            until,
                        );
                    }
                }
                S::Pending | S::Dispatched | S::Fermata => {}
            }
            if attempt_ended {
                let running = host.running_sheets(job_id);
                if let Some(entry) = host.table.jobs.get_mut(job_id) {
                    events::maybe_paused(&mut entry.log, job_id, running);
                }
            }
        });
        self.staged.push((0, event));
    }

    /// Keep [`Self::breakers`] in step with an instrument's breaker.
    fn note_breaker(&mut self, i: &mozart_baton::InstrumentChange) {
        let state = match i.circuit {
            mozart_baton::CircuitState::Closed => {
                self.breakers.remove(&i.instrument);
                return;
            }
            mozart_baton::CircuitState::Open => "open",
            mozart_baton::CircuitState::HalfOpen => "half_open",
        };
        // The baton's clock is monotonic; status shows wall time.
        let until = i
            .circuit_until
            .map(|t| mozart_state::epoch_now() + t.since(self.clock.now()).as_secs_f64());
        let reason = i
            .circuit_reason
            .clone()
            .unwrap_or_else(|| format!("{} failures in a row", i.consecutive_failures));
        self.breakers.insert(
            i.instrument.clone(),
            mozart_ipc::checkpoint::InstrumentHold {
                instrument: i.instrument.clone(),
                kind: "circuit_breaker".into(),
                state: Some(state.into()),
                reason,
                until,
                seconds_left: 0.0,
                consecutive_failures: Some(i.consecutive_failures),
            },
        );
    }

    /// Attempts of `job_id` still with their musicians.
    fn running_sheets(&self, job_id: &str) -> usize {
        self.running.iter().filter(|(j, _)| j == job_id).count()
    }

    /// Sheets of `job_id` still running while the job is paused: it is `pausing` until they
    /// end (`None` when it is not paused or nothing runs).
    pub(super) fn pausing(&self, job_id: &str) -> Option<u32> {
        let paused = self
            .table
            .jobs
            .get(job_id)
            .is_some_and(|e| e.record.status == DaemonJobStatus::Paused);
        let n = if paused {
            self.running_sheets(job_id)
        } else {
            0
        };
        (n > 0).then(|| u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// [`super::table::Query::CatchUp`]: before a halted job resumes, save what memory holds
    /// beyond the registry — its sheets whose rows could not be saved, and the end the
    /// baton reached meanwhile (then recorded as the baton would have, and the job finished).
    pub(super) fn catch_up(&mut self, job_id: &str) -> Result<Option<JobOutcome>, String> {
        let shared = self.shared.clone();
        let Some(entry) = self.table.jobs.get_mut(job_id) else {
            return Ok(None);
        };
        if !entry.halted {
            return Ok(None);
        }
        if let Some(live) = entry.live.as_mut() {
            let registry = lock(&shared.registry);
            // A compacted job's memory holds its saved sheets as facts only: write the rows
            // that are not saved, and the header; otherwise the whole checkpoint.
            let saved = if entry.compacted {
                let rows: Vec<mozart_state::SheetState> = entry
                    .unsaved
                    .iter()
                    .filter_map(|n| live.sheets.get(n).cloned())
                    .collect();
                registry
                    .save_sheets(job_id, &rows)
                    .and_then(|()| registry.save_header(live))
            } else {
                registry.save_checkpoint(live)
            };
            saved.map_err(|e| e.to_string())?;
            entry.unsaved.clear();
            let Some((outcome, reason)) = entry.unsaved_end.clone() else {
                return Ok(None);
            };
            // The pause for the failed save is over: its message goes with it.
            registry
                .clear_job_error(job_id)
                .map_err(|e| e.to_string())?;
            drop(registry);
            entry.record.error_message = None;
            live.error_message = None;
            let status = match outcome {
                JobOutcome::Completed => mozart_baton::JobStatus::Completed,
                JobOutcome::Failed => mozart_baton::JobStatus::Failed,
                JobOutcome::Cancelled => mozart_baton::JobStatus::Cancelled,
            };
            let change = StateChange::Job(mozart_baton::JobChange {
                job_id: job_id.to_string(),
                status,
                reason: reason.clone(),
                total_cost_usd: live.total_estimated_cost,
                cost_limit_reached: false,
                clock_started_at: None,
            });
            if let Some(Err(e)) = self.persist_all(&[&change]).pop() {
                return Err(e.to_string());
            }
            if let Some(entry) = self.table.jobs.get_mut(job_id) {
                entry.unsaved_end = None;
                entry.halted = false;
            }
            self.job_finished(job_id, outcome, reason.as_deref());
            return Ok(Some(outcome));
        }
        Ok(None)
    }

    /// Persist a job's transition: the record, the live checkpoint's header and the
    /// registry's status, then the job event once the burst is durable.
    fn persist_job(
        &mut self,
        jobs: &mut HashMap<String, super::JobEntry>,
        registry: &Registry,
        change: &mozart_baton::JobChange,
    ) -> Result<(), HostError> {
        let (daemon, cp) = job_statuses(change.status);
        let Some(entry) = jobs.get_mut(&change.job_id) else {
            return Ok(());
        };
        if entry.replacing && daemon == DaemonJobStatus::Cancelled {
            // The end of a registration being replaced (a resume with a new score): the job
            // itself goes on, paused until the new registration takes over.
            return Ok(());
        }
        let admitted =
            daemon == DaemonJobStatus::Running && entry.record.status == DaemonJobStatus::Queued;
        if admitted {
            // It got its job slot now: that is when it started.
            entry.record.started_at = Some(mozart_state::epoch_now());
        }
        // The checkpoint's start too (status's Started, Duration, "Running for"): the
        // submission stamped it, but a job waiting for a slot has not started (its Created
        // is the submission), and the time in the queue is not running time. A job that ran
        // before keeps its first start.
        if admitted || daemon == DaemonJobStatus::Queued {
            if let Some(live) = entry.live.as_mut().filter(|l| {
                l.sheets
                    .values()
                    .all(|s| s.started_at.is_none() && s.attempt_count == 0)
            }) {
                live.started_at = admitted.then(Timestamp::now);
            }
        }
        entry.waiting = match daemon {
            DaemonJobStatus::Queued => change.reason.clone(),
            _ => None,
        };
        entry.record.status = daemon;
        entry.wake_watchers();
        if daemon == DaemonJobStatus::Completed {
            self.note_completion(entry, registry, &change.job_id);
        }
        if daemon.is_terminal() {
            entry.record.completed_at = Some(mozart_state::epoch_now());
        }
        if let Some(reason) = &change.reason {
            if daemon == DaemonJobStatus::Failed {
                entry.record.error_message = Some(reason.clone());
            }
        }
        if let Some(live) = entry.live.as_mut() {
            update_job(live, change, daemon, cp);
            // Every sheet row was saved with its own transition: only the job-level
            // document changes here (a full rewrite cost O(sheets) per job transition).
            registry
                .save_header(live)
                .map_err(|e| HostError::new(format!("saving job '{}'", change.job_id), e))?;
        }
        let error = if daemon == DaemonJobStatus::Failed {
            change.reason.as_deref()
        } else {
            None
        };
        registry
            .set_job_status(&change.job_id, daemon, error)
            .map_err(|e| HostError::new(format!("saving status of job '{}'", change.job_id), e))?;
        // When the run's job timeout started counting, once per run: a restart goes on
        // with it (the row's `started_at` is stamped by every return to running).
        if let Some(at) = change.clock_started_at {
            let at = serde_json::Value::from(at.as_secs_f64());
            if entry.record.options.get(RUN_CLOCK) != Some(&at) {
                registry
                    .set_job_option(&change.job_id, RUN_CLOCK, at.clone())
                    .map_err(|e| {
                        HostError::new(format!("saving the clock of job '{}'", change.job_id), e)
                    })?;
                entry.record.options.insert(RUN_CLOCK.to_owned(), at);
            }
        }
        // A completed job whose hooks will run is told complete (or failed) when they end:
        // a failing hook turns it failed, and "Complete ✓" would be false.
        let hooks_due = daemon == DaemonJobStatus::Completed
            && entry
                .record
                .options
                .contains_key(super::hooks::HOOKS_PENDING);
        // Not news: the pause of a `modify --resume`, which resumes by itself, and the start
        // of a run going on (after a restart, or that modify).
        let quiet = match daemon {
            DaemonJobStatus::Paused => entry
                .record
                .options
                .contains_key(super::table::PENDING_MODIFY),
            DaemonJobStatus::Queued => false,
            DaemonJobStatus::Running => lock(&self.shared.quiet_starts).remove(&change.job_id),
            _ => {
                lock(&self.shared.quiet_starts).remove(&change.job_id);
                false
            }
        };
        if let (Some(run), Some(live), false) = (&entry.run, &entry.live, hooks_due || quiet) {
            super::notify::job_changed(run, live, daemon, change.reason.as_deref());
        }
        if let (Some(run), Some(live), true) = (&entry.run, &entry.live, hooks_due) {
            if let Some(ctx) = super::notify::completion(run, live) {
                self.completion_notices.insert(
                    change.job_id.clone(),
                    (run.config.notifications.clone(), ctx),
                );
            }
        }
        self.stage_job_event(change, entry.run.as_ref().map(|r| r.sheet_logs.clone()));
        if daemon == DaemonJobStatus::Completed {
            save_hook_state(registry, &change.job_id, &entry.record)?;
        }
        Ok(())
    }

    /// A completed job: whether it did new work, and (with `on_success` hooks to run) the
    /// hooks marked pending in its record before it is reported finished.
    fn note_completion(&self, entry: &mut super::JobEntry, registry: &Registry, job_id: &str) {
        let did_work = self.new_work.contains(job_id);
        let owed = entry.run.as_ref().is_some_and(|r| r.hooks_owed);
        let new_work = did_work || owed;
        entry.record.completed_new_work = new_work;
        let has_hooks = entry
            .run
            .as_ref()
            .is_some_and(|r| !r.config.on_success.is_empty());
        if new_work && has_hooks {
            // Durable before the job is reported finished: a crash from here on still
            // runs the hooks on restart.
            entry.record.options.insert(
                super::hooks::HOOKS_PENDING.into(),
                serde_json::Value::Bool(true),
            );
            // Results of an earlier completion of this job belong to that run. A resume
            // that only owes its hooks keeps the ones that succeeded (a chained job is not
            // submitted twice) and runs the failed one and those after it again.
            let cleared = if did_work {
                registry.clear_hook_results(job_id)
            } else {
                registry.clear_failed_hook_results(job_id)
            };
            if let Err(e) = cleared {
                tracing::warn!(job_id = %job_id, error = %e, "cannot clear old hook results");
            }
        }
    }

    /// The job event of a job's transition, logged once the change is committed.
    fn stage_job_event(
        &mut self,
        change: &mozart_baton::JobChange,
        sheet_logs: Option<std::path::PathBuf>,
    ) {
        let job_change = change.clone();
        self.staged.push((
            0,
            Box::new(move |host: &mut ConductorHost| {
                let running = host.running_sheets(&job_change.job_id);
                if let Some(entry) = host.table.jobs.get_mut(&job_change.job_id) {
                    events::job_status(
                        &mut entry.log,
                        &job_change.job_id,
                        job_change.status,
                        job_change.reason.as_deref(),
                        sheet_logs.as_deref(),
                        running,
                    );
                }
            }),
        ));
    }
}

/// The registry's and the checkpoint's status for the baton's job status. A queued job has
/// no sheet started: its checkpoint is `pending` (upstream's checkpoint has no queued
/// state); the registry row says `queued`.
fn job_statuses(status: mozart_baton::JobStatus) -> (DaemonJobStatus, JobStatus) {
    match status {
        mozart_baton::JobStatus::Queued => (DaemonJobStatus::Queued, JobStatus::Pending),
        mozart_baton::JobStatus::Running => (DaemonJobStatus::Running, JobStatus::Running),
        mozart_baton::JobStatus::Paused => (DaemonJobStatus::Paused, JobStatus::Paused),
        mozart_baton::JobStatus::Completed => (DaemonJobStatus::Completed, JobStatus::Completed),
        mozart_baton::JobStatus::Failed => (DaemonJobStatus::Failed, JobStatus::Failed),
        mozart_baton::JobStatus::Cancelled => (DaemonJobStatus::Cancelled, JobStatus::Cancelled),
    }
}

/// A job's transition in its live checkpoint's job-level fields.
fn update_job(
    live: &mut mozart_state::CheckpointState,
    change: &mozart_baton::JobChange,
    daemon: DaemonJobStatus,
    cp: JobStatus,
) {
    live.status = cp;
    live.updated_at = Timestamp::now();
    if daemon.is_terminal() {
        live.completed_at = Some(Timestamp::now());
    }
    if daemon == DaemonJobStatus::Failed {
        live.error_message = change.reason.clone();
    }
    // Upstream's cost-limit rule (execution.md §9.6): paused, `cost_limit_reached`, and the
    // reason ("Cost limit: …") as the job's error message. A resume (which lifts the pause
    // with a new limit) clears both.
    if change.cost_limit_reached && daemon == DaemonJobStatus::Paused {
        live.cost_limit_reached = true;
        live.error_message = change.reason.clone();
    } else if live.cost_limit_reached && daemon == DaemonJobStatus::Running {
        live.cost_limit_reached = false;
        live.error_message = None;
    }
}

/// A completed job's hook state (new work done, hooks pending) into its stored record.
fn save_hook_state(
    registry: &Registry,
    job_id: &str,
    record: &mozart_state::JobRecord,
) -> Result<(), HostError> {
    if let Ok(Some(mut stored)) = registry.get_job(job_id) {
        stored.completed_new_work = record.completed_new_work;
        stored.options = record.options.clone();
        registry
            .update_job(&stored)
            .map_err(|e| HostError::new(format!("saving hook state of job '{job_id}'"), e))?;
    }
    Ok(())
}

impl ConductorHost {
    /// Apply `change` to the table and, with `save`, to the registry (without: an earlier
    /// change of its job could not be saved, so it is taken in memory only).
    fn persist_one(
        &mut self,
        jobs: &mut HashMap<String, super::JobEntry>,
        registry: &Registry,
        change: &StateChange,
        save: bool,
    ) -> Result<(), HostError> {
        let first = self.staged.len();
        let result = self.persist_change(jobs, registry, change, save);
        let key = std::ptr::from_ref(change) as usize;
        for staged in &mut self.staged[first..] {
            staged.0 = key;
        }
        result
    }

    fn persist_change(
        &mut self,
        jobs: &mut HashMap<String, super::JobEntry>,
        registry: &Registry,
        change: &StateChange,
        save: bool,
    ) -> Result<(), HostError> {
        match change {
            StateChange::Sheet(s) => self.persist_sheet(jobs, registry, s, save),
            // A job's end that could not be saved is kept by `job_finished_unsaved`.
            StateChange::Job(_) if !save => Ok(()),
            StateChange::Job(j) => self.persist_job(jobs, registry, j),
            StateChange::Instrument(i) => {
                self.note_breaker(i);
                let result = match i.rate_limited_until {
                    Some(until) => {
                        // The baton's clock is monotonic; persist wall time for restarts.
                        let wall =
                            mozart_state::epoch_now() + until.since(self.clock.now()).as_secs_f64();
                        let reason = i.rate_limit_reason.as_deref().unwrap_or("rate limited");
                        self.rate_limits.insert(i.instrument.clone(), wall);
                        registry.set_rate_limit(
                            &i.instrument,
                            wall,
                            Some(reason),
                            i.rate_limit_streak,
                        )
                    }
                    // The wait is over but the run of limits goes on until the instrument
                    // answers otherwise: kept as an ended wait, so a restart during the
                    // retry goes on one step further on the probe schedule.
                    None if i.rate_limit_streak > 0 => {
                        self.rate_limits.remove(&i.instrument);
                        registry.set_rate_limit(
                            &i.instrument,
                            mozart_state::epoch_now(),
                            None,
                            i.rate_limit_streak,
                        )
                    }
                    None => {
                        self.rate_limits.remove(&i.instrument);
                        registry.clear_rate_limit(Some(&i.instrument)).map(|_| ())
                    }
                };
                result.map_err(|e| {
                    HostError::new(format!("saving rate limit of '{}'", i.instrument), e)
                })
            }
            // Its job's earlier change could not be saved: nothing more of it is written.
            StateChange::JobWait(_) if !save => Ok(()),
            StateChange::JobWait(w) => {
                let key = (w.job_id.clone(), w.instrument.clone());
                let result = match w.rate_limited_until {
                    Some(until) => {
                        let wall =
                            mozart_state::epoch_now() + until.since(self.clock.now()).as_secs_f64();
                        let reason = w.rate_limit_reason.as_deref().unwrap_or("rate limited");
                        self.job_rate_limits.insert(key, wall);
                        registry.set_job_rate_limit(
                            &w.job_id,
                            &w.instrument,
                            wall,
                            Some(reason),
                            w.rate_limit_streak,
                        )
                    }
                    None if w.rate_limit_streak > 0 => {
                        self.job_rate_limits.remove(&key);
                        registry.set_job_rate_limit(
                            &w.job_id,
                            &w.instrument,
                            mozart_state::epoch_now(),
                            None,
                            w.rate_limit_streak,
                        )
                    }
                    None => {
                        self.job_rate_limits.remove(&key);
                        registry.clear_job_rate_limit(&w.job_id, Some(&w.instrument))
                    }
                };
                result.map_err(|e| {
                    HostError::new(
                        format!(
                            "saving the rate limit of job '{}' on '{}'",
                            w.job_id, w.instrument
                        ),
                        e,
                    )
                })
            }
        }
    }
}

/// Scores with `state_backend: json` also get upstream's JSON state file in their
/// workspace (`{workspace}/{safe_id}.json`, execution.md §8.5), rewritten atomically after
/// each burst that changed the job — still before any consequence is carried out. The
/// registry stays the conductor's source of truth; the file is for tools and people that
/// read the workspace (`mozart status --workspace`), so failing to write it is a warning.
fn mirror_json_state(
    jobs: &HashMap<String, super::JobEntry>,
    changes: &[&StateChange],
    results: &[Result<(), HostError>],
) {
    let mut done: Vec<&str> = Vec::new();
    for (change, result) in changes.iter().zip(results) {
        let Some(job_id) = change.job_id() else {
            continue;
        };
        if result.is_err() || done.contains(&job_id) {
            continue;
        }
        done.push(job_id);
        let Some(entry) = jobs.get(job_id) else {
            continue;
        };
        let (Some(run), Some(live)) = (&entry.run, &entry.live) else {
            continue;
        };
        if run.config.state_backend != mozart_config::model::StateBackend::Json {
            continue;
        }
        let path = mozart_state::json_state::state_file_path(&run.workspace, job_id);
        if let Err(e) = mozart_state::json_state::save(&path, live) {
            tracing::warn!(job_id, path = %path.display(), error = %e, "cannot write the JSON state file");
        }
    }
}

/// The sheet's row after `change` (and the attempt's details, when one just ended). True
/// when the sheet has just completed.
fn update_sheet(
    live: &mut mozart_state::CheckpointState,
    change: &mozart_baton::SheetChange,
    status: SheetStatus,
    details: Option<&AttemptDetails>,
    retry_at: Option<f64>,
) -> bool {
    let now = Timestamp::now();
    let sheet = live.sheets.get_or_insert_with(change.sheet_num, || {
        mozart_state::SheetState::new(change.sheet_num)
    });
    let was = sheet.status;
    sheet.status = status;
    sheet.instrument_name = Some(change.instrument.clone());
    // A healing attempt is in the normal or completion count once it ended
    // (`healing_attempts` counts the grant).
    sheet.attempt_count = change.normal_attempts
        + change.completion_attempts
        + u32::from(status == SheetStatus::Completed);
    sheet.completion_attempts = change.completion_attempts;
    sheet.healing_attempts = change.healing_attempts;
    sheet.retry_at = retry_at;
    if status == SheetStatus::InProgress && was != SheetStatus::InProgress {
        sheet.started_at = Some(now.clone());
    }
    if let Some(d) = details {
        // An attempt that failed the sheet without spending a retry (a non-retriable
        // failure) is not in the baton's counts, but it was started; neither are the
        // attempts on instruments the sheet fell back from (the attempt's number counts
        // them). (A rate-limited one is not an attempt: the sheet waits and runs it again.)
        if matches!(status, SheetStatus::Failed | SheetStatus::Completed) {
            sheet.attempt_count = sheet.attempt_count.max(d.attempt_number);
        }
        apply_details(sheet, d);
        // The attempt's result is recorded in this very write: its remote job (if any) is
        // done with, and a restart must not re-attach to it.
        sheet.remote_attempt = None;
    }
    match status {
        SheetStatus::Completed => {
            sheet.completed_at = Some(now);
            sheet.error_message = None;
            sheet.success_without_retry = change.normal_attempts == 0;
        }
        SheetStatus::Failed | SheetStatus::Skipped => {
            sheet.completed_at = Some(now);
            if let Some(reason) = &change.reason {
                sheet.error_message = Some(reason.clone());
            } else if let Some(d) = details {
                sheet.error_message = d.error_message.clone();
            }
        }
        _ => {
            if let Some(d) = details {
                sheet.error_message = d.error_message.clone();
            }
        }
    }
    status == SheetStatus::Completed && was != SheetStatus::Completed
}

/// The job's totals and position after `change`.
fn update_totals(
    live: &mut mozart_state::CheckpointState,
    change: &mozart_baton::SheetChange,
    status: SheetStatus,
    details: Option<&AttemptDetails>,
) {
    if let Some(d) = details {
        live.total_input_tokens = live.total_input_tokens.saturating_add(d.input_tokens);
        live.total_output_tokens = live.total_output_tokens.saturating_add(d.output_tokens);
        live.total_estimated_cost += d.cost_usd;
        if d.attempt_number > 1 {
            live.total_retry_count += 1;
        }
        // A rate-limited attempt parks the sheet (baton `waiting`) without spending a
        // retry: count the wait, which `status` shows.
        if change.status == mozart_baton::SheetStatus::Waiting {
            live.rate_limit_waits += 1;
        }
    }
    // A cancel ends every sheet not yet done, the last planned last: the job was at the
    // sheet it last started, not at its last sheet (`list --json` said `current_sheet: 1200`
    // of a job cancelled at 11/1200).
    if change.status != mozart_baton::SheetStatus::Cancelled {
        live.current_sheet = Some(change.sheet_num);
    }
    // Kept incrementally: a scan of every sheet per transition was O(sheets²) per job.
    if status == SheetStatus::Completed {
        live.last_completed_sheet = live.last_completed_sheet.max(change.sheet_num);
    } else if live.last_completed_sheet == change.sheet_num {
        // The highest completed sheet is running again (a resumed or re-run job).
        live.last_completed_sheet = live.highest_completed();
    }
    live.updated_at = Timestamp::now();
}

/// Saves the sheet's row as `change` left it; whether the job-level document is due too. A
/// sheet moving between pending and in-progress changes only its own row; one that ended
/// changes the job's totals, current and last completed sheet: its row is
/// saved now, the job-level document once the burst's changes are (by
/// [`ConductorHost::persist_all`], in the same transaction): a fan-out's burst ends several
/// sheets of one job, and the document written with each was ~4 % of the conductor's
/// instructions a sheet (issue 24).
fn save_sheet(
    registry: &Registry,
    live: &mozart_state::CheckpointState,
    change: &mozart_baton::SheetChange,
    status: SheetStatus,
    with_details: bool,
) -> Result<bool, mozart_state::StateError> {
    let ended = !matches!(status, SheetStatus::Pending | SheetStatus::InProgress);
    match live.sheets.get(&change.sheet_num) {
        Some(sheet) if ended => registry
            .save_sheet_row(&change.job_id, sheet)
            .map(|()| true),
        // Names the missing sheet in its error.
        None if ended => registry
            .save_sheet_transition(live, change.sheet_num)
            .map(|()| false),
        // A dispatch changes only the columns save_sheet_started writes; an attempt's details
        // (a retry reported in the same breath) need the whole document.
        Some(sheet) if status == SheetStatus::InProgress && !with_details => registry
            .save_sheet_started(&change.job_id, sheet)
            .map(|()| false),
        Some(sheet) => registry.save_sheet(&change.job_id, sheet).map(|()| false),
        None => Ok(false),
    }
}

/// Remove the files of remote attempts whose results are saved, then forget the registry's
/// notes of them (what a conductor killed before the files were gone carries out at its
/// next start). Slow on a shared filesystem: run off the baton's task.
pub(super) fn remove_finished_remote(shared: &Shared, dirs: &[std::path::PathBuf]) {
    for dir in dirs {
        mozart_backends::placement::slurm::remove_finished_attempt(dir);
    }
    let dirs: Vec<String> = dirs
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    let registry = lock(&shared.registry);
    if let Err(e) = registry
        .batch(|r| r.forget_remote_leftovers(&dirs))
        .and_then(|r| r)
    {
        tracing::warn!(error = %e, "cannot forget removed Slurm attempts' files");
    }
}

/// The attempt in the registry's history.
fn record_attempt(registry: &Registry, change: &mozart_baton::SheetChange, d: &AttemptDetails) {
    let record = AttemptRecord {
        job_id: change.job_id.clone(),
        sheet_num: change.sheet_num,
        attempt_num: d.attempt_number,
        mode: d.mode.clone(),
        outcome: change.status.as_str().to_string(),
        // The attempt history is what tells a rate-limited attempt (tempo) from a failed
        // one (budget) after the fact; keep the category with it. The attempt's own
        // instrument: a failure may already have moved the sheet to its fallback.
        instrument: d
            .instrument
            .clone()
            .or_else(|| Some(change.instrument.clone())),
        error_category: d.error_category.clone(),
        input_tokens: Some(d.input_tokens),
        output_tokens: Some(d.output_tokens),
        error_code: d.error_code.clone(),
        error_message: d.error_message.clone(),
        exit_code: d.exit_code,
        duration_seconds: Some(d.duration_seconds),
        cost_usd: Some(d.cost_usd),
        output: Some(format!("{}{}", d.stdout_tail, d.stderr_tail)),
        executed_at: d.started_at,
        ..AttemptRecord::default()
    };
    if let Err(e) = registry.record_attempt(&record) {
        tracing::warn!(job_id = %change.job_id, error = %e, "cannot record attempt history");
    }
}

/// An attempt a cancel cut short, in the registry's history (outcome `interrupted`).
fn record_interrupted(
    registry: &Registry,
    change: &mozart_baton::SheetChange,
    started: Option<f64>,
) {
    let record = AttemptRecord {
        job_id: change.job_id.clone(),
        sheet_num: change.sheet_num,
        // The baton's counts are of the attempts that ended; this one is the next.
        attempt_num: change.normal_attempts + change.completion_attempts + 1,
        outcome: "interrupted".into(),
        instrument: Some(change.instrument.clone()),
        executed_at: started.unwrap_or_else(mozart_state::epoch_now),
        ..AttemptRecord::default()
    };
    if let Err(e) = registry.record_attempt(&record) {
        tracing::warn!(job_id = %change.job_id, error = %e, "cannot record attempt history");
    }
}

impl BatonHost for ConductorHost {
    fn persist(&mut self, change: &StateChange) -> Result<(), HostError> {
        self.persist_all(&[change])
            .pop()
            .unwrap_or_else(|| Err(HostError::new("saving a change", "nothing was saved")))
    }

    /// All changes of a burst in one registry transaction (one commit, one WAL sync), each
    /// in its own savepoint; durable before any consequence is carried out.
    fn persist_all(&mut self, changes: &[&StateChange]) -> Vec<Result<(), HostError>> {
        let shared = self.shared.clone();
        // Out of `self` while the changes are saved (they need `self` too); put back below.
        let mut jobs = std::mem::take(&mut self.table.jobs);
        let registry = lock(&shared.registry);
        let batch = registry.batch(|r| {
            let results = mozart_baton::driver::persist_in_order_or(changes, |change, save| {
                self.persist_one(&mut jobs, r, change, save)
            });
            // The job-level document of each job whose sheets the burst saved, once, as the
            // burst left it (its totals, current and last completed sheet), in the same
            // transaction as those sheets.
            for job_id in self.header_due.drain() {
                let Some(live) = jobs.get(&job_id).and_then(|e| e.live.as_ref()) else {
                    continue;
                };
                if let Err(e) = r.save_header(live) {
                    tracing::warn!(job_id = %job_id, error = %e,
                        "cannot save the job's state after its sheets");
                }
            }
            results
        });
        drop(registry);
        if let Ok(results) = &batch {
            mirror_json_state(&jobs, changes, results);
        }
        let finished_remote = std::mem::take(&mut self.finished_remote);
        if batch.is_ok() && !finished_remote.is_empty() {
            // The results are durable: no restart will re-attach to these attempts, so their
            // files (on a shared filesystem, possibly slow) go, off the baton task.
            // The registry noted them with the results; a kill before they are gone leaves
            // the removal to the next conductor's start ([`super::recovery`]).
            let removing = std::thread::Builder::new()
                .name("mozart-slurm-files".into())
                .spawn(move || remove_finished_remote(&shared, &finished_remote));
            if let Err(e) = removing {
                tracing::warn!(error = %e, "cannot start a thread to remove finished Slurm attempts' files");
            }
        }
        // What memory holds beyond the registry: the sheets whose last change is not saved
        // (`mozart resume` saves them), and no attempt that ended is counted as running.
        for (i, change) in changes.iter().enumerate() {
            let StateChange::Sheet(s) = change else {
                continue;
            };
            let saved = batch
                .as_ref()
                .is_ok_and(|r| r.get(i).is_some_and(Result::is_ok));
            let Some(entry) = jobs.get_mut(&s.job_id) else {
                continue;
            };
            if saved {
                entry.unsaved.remove(&s.sheet_num);
            } else {
                entry.unsaved.insert(s.sheet_num);
                if s.status != mozart_baton::SheetStatus::Dispatched {
                    self.running.remove(&(s.job_id.clone(), s.sheet_num));
                }
            }
        }
        self.table.jobs = jobs;
        // The burst is durable (or not at all): log what was saved, in order.
        let staged = std::mem::take(&mut self.staged);
        if let Ok(results) = &batch {
            let saved: std::collections::HashSet<usize> = changes
                .iter()
                .zip(results)
                .filter(|(_, r)| r.is_ok())
                .map(|(c, _)| std::ptr::from_ref::<StateChange>(c) as usize)
                .collect();
            for (key, event) in staged {
                if saved.contains(&key) {
                    event(self);
                }
            }
        }
        match batch {
            Ok(results) => results,
            // The commit failed: none of it is durable.
            Err(e) => {
                let error = HostError::new("saving the baton's changes", e);
                changes.iter().map(|_| Err(error.clone())).collect()
            }
        }
    }

    fn dispatch(&mut self, job_id: &str, sheet_num: u32, attempt: AttemptContext, inbox: Inbox) {
        let Some((run, given)) = self.given(job_id, sheet_num, &attempt.instrument) else {
            let r = mozart_baton::AttemptResult::failed(
                job_id,
                sheet_num,
                attempt.dispatch_id,
                mozart_baton::FailureKind::Dispatch,
                format!("job '{job_id}' is not loaded"),
            );
            let _ = inbox.send(Event::SheetAttemptResult(Box::new(r)));
            return;
        };
        events::sheet_started(job_id, sheet_num, &attempt);
        self.running.insert((job_id.to_string(), sheet_num));
        // Boxed before it is spawned: the musician's future is several KB, and tokio moves a
        // future by value into its task cell and out of it again when it completes — one
        // copy into the box instead of three of the whole state a sheet (issue 24).
        let task = tokio::spawn(Box::pin(musician::play(
            self.shared.clone(),
            run,
            sheet_num,
            attempt,
            given,
        )));
        // A handle keeps its finished task's allocation (the whole musician future, ~3 KB)
        // alive: drop the handles of musicians that are done, or a 1,000-sheet job holds
        // every one of them until it ends.
        self.inflight.retain(|_, handle| !handle.is_finished());
        self.inflight
            .insert((job_id.to_string(), sheet_num), task.abort_handle());
    }

    fn kill(&mut self, job_id: &str, sheet_num: u32) {
        // Aborting the musician drops the backend's execute future, whose guard sends
        // SIGTERM to the instrument's process group, then SIGKILL after the grace period.
        if let Some(handle) = self.inflight.remove(&(job_id.to_string(), sheet_num)) {
            handle.abort();
        }
    }

    fn job_finished(&mut self, job_id: &str, outcome: JobOutcome, reason: Option<&str>) {
        self.inflight.retain(|(j, _), _| j != job_id);
        self.running.retain(|(j, _)| j != job_id);
        // The job's checkpoint, plan and outcomes are freed below and by the learning
        // writer: give those pages back once that is done.
        mozart_conductor::memory::trim_after_job();
        let new_work = self.new_work.remove(job_id);
        // As upstream: a finished job's events leave the ring buffer (bounded memory over
        // days of jobs); its history stays in the registry.
        self.table.observed.remove(job_id);
        if let Some(entry) = self.table.jobs.get_mut(job_id) {
            let run = entry.run.take();
            entry.rt = super::table::RunState::default();
            // The registry holds every row of the finished job: `job.status` reads it from
            // there, so a conductor that runs jobs for days does not keep each one's
            // checkpoint in memory (upstream never lets finished jobs go).
            let live = entry.live.take();
            entry.view_facts = None;
            if let Some(live) = &live {
                entry.final_sheets = live.sheets.statuses().collect();
                entry.final_progress = entry
                    .progress_countable(live)
                    .then(|| mozart_ipc::status::JobProgress::of(live));
            }
            tracing::debug!(job_id, ?outcome, reason, new_work, "job finished");
            let Some(run) = run else { return };
            if let (Some(learning), Some(live)) = (&self.shared.learning, &live) {
                if run.config.learning.enabled {
                    let none = super::learning::Injected::default();
                    learning.record_job(mozart_learning::JobOutcome {
                        job_id: job_id.to_string(),
                        // `scan`: compact sheets made whole one at a time, not kept.
                        sheets: live
                            .sheets
                            .scan()
                            .filter(|(_, s)| super::learning::has_outcome(s))
                            .map(|(_, s)| super::learning::sheet_outcome(&run, &s, &none))
                            .collect(),
                        instrument: live.instruments_used.first().cloned(),
                    });
                }
            }
            if let Some(wt) = run.worktree.clone() {
                finish_worktree(self.shared.clone(), job_id.to_string(), wt, outcome, &run);
            }
            if outcome == JobOutcome::Completed {
                // Every verdict is in the checkpoint now.
                super::review::forget_all(&run.workspace);
            }
            if crate::sheet_worktrees::per_sheet(&run.config) {
                let (run2, jid) = (run.clone(), job_id.to_string());
                let outcome = match outcome {
                    JobOutcome::Completed => crate::isolation::RunOutcome::Completed,
                    JobOutcome::Failed => crate::isolation::RunOutcome::Failed,
                    JobOutcome::Cancelled => crate::isolation::RunOutcome::Cancelled,
                };
                tokio::task::spawn_blocking(move || {
                    crate::sheet_worktrees::finish_all(&run2.config, &jid, outcome)
                });
            }
            if outcome != JobOutcome::Completed || run.config.on_success.is_empty() {
                return;
            }
            if !new_work && !run.hooks_owed {
                tracing::info!(
                    event = "hooks.skipped_zero_work",
                    job_id,
                    "on_success hooks not run: no sheet completed in this run (zero-work guard; `fresh: true` or `mozart run --fresh` redoes the work)"
                );
                return;
            }
            let req = super::hooks::HookRequest {
                job_id: job_id.to_string(),
                score_dir: run.score_dir.clone(),
                workspace: run.workspace.clone(),
                hooks: run.config.on_success.clone(),
                concert: run.config.concert.clone(),
                chain_depth: run.chain_depth,
                notice: self.completion_notices.remove(job_id),
            };
            if let Some(tx) = self.shared.hook_tx.get() {
                let _ = tx.send(req);
            }
        }
    }

    fn evaluate_skip(&mut self, job_id: &str, sheet_num: u32, rule: &SkipSpec, inbox: Inbox) {
        let entry = self.table.jobs.get(job_id);
        let run = entry.and_then(|e| e.run.clone());
        // Only `skip_when` expressions read the sheets' states.
        let sheets_state = match rule.when {
            Some(_) => entry.and_then(|e| e.live.clone()),
            None => None,
        };
        // A sheet's own worktree, once it has one, gives `{task_branch}` its real name.
        let branch = entry
            .and_then(|e| e.rt.sheet_worktrees.get(&sheet_num))
            .map(|w| w.branch.clone());
        let rule = rule.clone();
        let job_id = job_id.to_string();
        tokio::spawn(async move {
            let reason =
                evaluate_skip(run, sheets_state, (&job_id, sheet_num, branch), &rule).await;
            let _ = inbox.send(Event::SkipEvaluated {
                job_id,
                sheet_num,
                skip_reason: reason,
            });
        });
    }

    fn escalate(&mut self, job_id: &str, sheet_num: u32, reason: &str) {
        events::sheet_escalated(job_id, sheet_num, reason);
    }

    fn observe(&mut self, event: mozart_baton::ObserverEvent) {
        if event.job_id.is_empty() {
            return;
        }
        if event.event == "baton.pacing.started" {
            if let Some(secs) = event.data.get("seconds").and_then(|d| d.as_f64()) {
                if let Some(e) = self.table.jobs.get_mut(&event.job_id) {
                    e.rt.pacing = Some((mozart_state::epoch_now() + secs, secs));
                }
            }
        }
        // The retry's delay is known once the baton scheduled it (its timer is not ours).
        if event.event == "baton.sheet.retry_scheduled" {
            if let Some(delay) = event.data.get("delay_seconds").and_then(|d| d.as_f64()) {
                let entry = self.table.jobs.get_mut(&event.job_id);
                let failed = entry.and_then(|e| {
                    e.rt.retries
                        .insert(event.sheet_num, retry_wait(&event.data, delay));
                    e.log.retries.remove(&event.sheet_num)
                });
                if let Some(failed) = failed {
                    events::sheet_retry_scheduled(
                        &event.job_id,
                        event.sheet_num,
                        &failed,
                        Some(delay),
                    );
                }
            }
        }
        // Kept as the baton made it; turned into JSON only when someone asks
        // (`daemon.observer_events`, the monitor stream) — most events never are.
        let observed = &mut self.table.observed;
        let queue = match observed.get_mut(&event.job_id) {
            Some(queue) => queue,
            None => observed.entry(event.job_id.clone()).or_default(),
        };
        if queue.len() >= 200 {
            queue.pop_front();
        }
        queue.push_back(event);
    }

    fn job_finished_unsaved(&mut self, job_id: &str, outcome: JobOutcome, reason: Option<&str>) {
        tracing::warn!(
            job_id,
            ?outcome,
            "the job ended, but its end could not be saved; `mozart resume` records it"
        );
        // Nothing of the job runs any more: a pause waits for no sheet.
        self.inflight.retain(|(j, _), _| j != job_id);
        self.running.retain(|(j, _)| j != job_id);
        if outcome == JobOutcome::Cancelled {
            // A cancel: nothing to resume in place, so the job is let go of; its status
            // stays the one in memory (the registry may not have taken the cancel).
            let live = self.table.jobs.get(job_id).and_then(|e| e.live.clone());
            self.job_finished(job_id, outcome, reason);
            if let Some(entry) = self.table.jobs.get_mut(job_id) {
                entry.live = live;
            }
            return;
        }
        if let Some(entry) = self.table.jobs.get_mut(job_id) {
            entry.unsaved_end = Some((outcome, reason.map(str::to_string)));
        }
    }

    fn persistence_failed(&mut self, job_id: Option<&str>, error: &HostError) {
        tracing::error!(job_id, error = %error, "checkpoint write failed; dispatching stopped for the job");
        let Some(job_id) = job_id else { return };
        // Say so where users look: the job is paused with the cause, and `mozart resume`
        // continues it from the last durable checkpoint once the problem is fixed.
        let mut message = format!(
            "Paused: a checkpoint could not be saved ({error}). Fix the cause (e.g. free disk space), then run: mozart resume {job_id}"
        );
        if let Some((sheets, plural)) = self.table.jobs.get(job_id).and_then(unsaved_finished) {
            let (it, runs) = if plural {
                ("them", "they run")
            } else {
                ("it", "it runs")
            };
            message.push_str(&format!(
                ". {sheets} finished but not saved yet: the resume saves {it}; if the conductor stops before, {runs} again"
            ));
        }
        if let Some(entry) = self.table.jobs.get_mut(job_id) {
            entry.halted = true;
            if entry.record.status == DaemonJobStatus::Cancelled {
                // Being cancelled: the user's cancel stands (nothing to resume in place).
                return;
            }
            entry.record.status = DaemonJobStatus::Paused;
            entry.record.error_message = Some(message.clone());
            if let Some(live) = entry.live.as_mut() {
                live.status = JobStatus::Paused;
                live.error_message = Some(message.clone());
            }
        }
        if let Err(e) = lock(&self.shared.registry).set_job_status(
            job_id,
            DaemonJobStatus::Paused,
            Some(&message),
        ) {
            tracing::warn!(job_id, error = %e, "cannot record the pause either");
        }
    }
}

/// "Sheet 3" / "Sheets 2, 3 and 4": the sheets of `entry` that finished (completed, failed,
/// skipped) in memory while their rows could not be saved, and whether they are several
/// (None: none).
fn unsaved_finished(entry: &super::JobEntry) -> Option<(String, bool)> {
    let live = entry.live.as_ref()?;
    let finished: Vec<String> = entry
        .unsaved
        .iter()
        .filter(|n| {
            live.sheets.get(n).is_some_and(|s| {
                matches!(
                    s.status,
                    SheetStatus::Completed | SheetStatus::Failed | SheetStatus::Skipped
                )
            })
        })
        .map(u32::to_string)
        .collect();
    match finished.as_slice() {
        [] => None,
        [one] => Some((format!("Sheet {one}"), false)),
        [rest @ .., last] => Some((format!("Sheets {} and {last}", rest.join(", ")), true)),
    }
}

/// `skip_when` then `skip_when_command` (execution.md §9.2, seed 003): Some(reason) = skip.
async fn evaluate_skip(
    run: Option<Arc<super::JobRun>>,
    state: Option<mozart_state::CheckpointState>,
    (job_id, sheet_num, branch): (&str, u32, Option<String>),
    rule: &SkipSpec,
) -> Option<String> {
    if let Some(expr) = &rule.when {
        let ctx = expr_context(state.as_ref());
        match mozart_config::expr::evaluate(expr, &ctx) {
            Ok(true) => return Some(format!("skip_when: {expr}")),
            Ok(false) => {}
            Err(e) => events::skip_rule_failed(
                job_id,
                sheet_num,
                &format!("its skip_when could not be evaluated ({e}): {expr}"),
            ),
        }
    }
    let (Some(command), Some(run)) = (&rule.command, run) else {
        return None;
    };
    let sheet = run.sheet(sheet_num)?;
    let vars = musician::placeholder_vars(&run, &sheet, branch.as_deref());
    let command = mozart_config::placeholders::expand(command, &vars, true);
    let timeout = rule.command_timeout.unwrap_or(Duration::from_secs(10));
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(&command)
        .current_dir(&run.workspace)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            events::skip_rule_failed(
                job_id,
                sheet_num,
                &format!("its skip_when_command could not start ({e}): {command}"),
            );
            return None;
        }
    };
    let pid = child.id();
    let mut child = child;
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) if status.success() => Some(
            rule.description
                .clone()
                .unwrap_or_else(|| format!("skip_when_command succeeded: {command}")),
        ),
        Ok(_) => None,
        Err(_) => {
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            events::skip_rule_failed(
                job_id,
                sheet_num,
                &format!(
                    "its skip_when_command timed out after {}s (timeout_seconds): {command}",
                    timeout.as_secs_f64()
                ),
            );
            None
        }
    }
}

/// `sheets[N].…` and `job.…` for `skip_when` expressions, from the live checkpoint.
fn expr_context(state: Option<&mozart_state::CheckpointState>) -> mozart_config::expr::ExprContext {
    let mut ctx = mozart_config::expr::ExprContext::default();
    let Some(state) = state else {
        return ctx;
    };
    for (num, sheet) in &state.sheets {
        if let Ok(serde_json::Value::Object(map)) = serde_json::to_value(sheet) {
            ctx.sheets.insert(*num, map);
        }
    }
    if let Ok(serde_json::Value::Object(mut map)) = serde_json::to_value(state.header()) {
        map.remove("sheets");
        ctx.job = map;
    }
    ctx
}

/// A validation check result as the checkpoint records it (execution.md §6.4).
fn validation_detail(c: &mozart_baton::validation::CheckResult) -> ValidationDetail {
    use mozart_baton::validation::CheckStatus;
    ValidationDetail {
        rule_type: Some(c.rule_type.clone()),
        description: c.description.clone(),
        path: c.path.as_ref().map(|p| p.display().to_string()),
        pattern: c.pattern.clone(),
        passed: c.status == CheckStatus::Passed,
        actual_value: c.actual_value.clone(),
        expected_value: c.expected_value.clone(),
        error_message: c.error_message.clone(),
        check_duration_ms: Some(c.duration.as_secs_f64() * 1000.0),
        confidence: Some(c.confidence),
        failure_reason: c.failure_category.clone(),
        ..ValidationDetail::default()
    }
}

/// Release the job's worktree (removed on success when the score says so, kept and unlocked
/// on failure) off the baton task, and forget it in the checkpoint once removed.
fn finish_worktree(
    shared: Arc<Shared>,
    job_id: String,
    wt: crate::isolation::Worktree,
    outcome: JobOutcome,
    run: &super::JobRun,
) {
    let cfg = run.config.isolation.clone();
    let outcome = match outcome {
        JobOutcome::Completed => crate::isolation::RunOutcome::Completed,
        JobOutcome::Failed => crate::isolation::RunOutcome::Failed,
        JobOutcome::Cancelled => crate::isolation::RunOutcome::Cancelled,
    };
    tokio::task::spawn_blocking(move || match crate::isolation::finish(&wt, outcome, &cfg) {
        Ok(crate::isolation::Cleanup::Removed) => {
            let registry = lock(&shared.registry);
            match registry.load_checkpoint(&job_id) {
                Ok(Some(mut cp)) => {
                    crate::isolation::clear_checkpoint(&mut cp);
                    if let Err(e) = registry.save_checkpoint(&cp) {
                        tracing::warn!(job_id, error = %e, "cannot save checkpoint after worktree cleanup");
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(job_id, error = %e, "cannot load checkpoint after worktree cleanup");
                }
            }
        }
        Ok(crate::isolation::Cleanup::Kept { .. }) => {}
        Err(e) => tracing::warn!(job_id, error = %e, "worktree cleanup failed"),
    });
}

/// The retry a `baton.sheet.retry_scheduled` event announces, due `delay` seconds from now.
fn retry_wait(data: &serde_json::Value, delay: f64) -> mozart_ipc::checkpoint::RetryWait {
    let count = |key: &str| {
        data.get(key)
            .and_then(serde_json::Value::as_u64)
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    mozart_ipc::checkpoint::RetryWait {
        attempt: count("attempt"),
        max_retries: count("max_retries"),
        mode: data
            .get("mode")
            .and_then(|m| m.as_str())
            .map(str::to_string),
        at: Some(mozart_state::epoch_now() + delay),
        seconds_left: delay,
    }
}
