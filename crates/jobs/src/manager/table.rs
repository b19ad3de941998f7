//! The job table, owned by the baton task, and the handle everyone else reaches it through.
//!
//! Every job the conductor has loaded lives in one [`JobTable`] inside the baton host
//! (`host::ConductorHost`), which the baton task owns (architecture invariant 4: one task
//! mutates state, the others send messages). IPC handlers, musicians and hooks read and change it by
//! sending [`Command`]s through [`Table`]; the owner handles each on the baton task.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

pub(crate) mod feed;

use mozart_state::DaemonJobStatus;

use super::attempt::AttemptDetails;
use super::{JobEntry, ListedRow};

/// Every loaded job, and what the conductor keeps about each between calls.
#[derive(Debug, Default)]
pub(crate) struct JobTable {
    /// Loaded jobs by id.
    pub jobs: HashMap<String, JobEntry>,
    /// Recent observer events per job (the last 200, oldest first) for
    /// `daemon.observer_events` (conductor.md §8.22).
    pub observed: HashMap<String, VecDeque<mozart_baton::ObserverEvent>>,
    /// `job.list`'s registry rows (jobs this conductor has not loaded), read once: only
    /// `job.clear` changes them, and a watcher polling `job.list` would otherwise read the
    /// registry on every poll.
    pub listed_rows: Option<Arc<Vec<ListedRow>>>,
    /// One placement per distinct placement spec, for the conductor's life (its watcher is
    /// shared by every attempt placed alike).
    pub placements: HashMap<String, mozart_backends::Placement>,
    /// The newest pending `job.modify` per job (its claim number).
    pub pending_modify: HashMap<String, u64>,
}

/// The record option holding a pending `modify --resume` (`{"config_path", "workspace"}`).
pub(crate) const PENDING_MODIFY: &str = "pending_modify";

fn save_record(
    registry: &std::sync::Mutex<mozart_state::Registry>,
    record: &mozart_state::JobRecord,
) {
    let saved = super::lock(registry).update_job(record);
    if let Err(e) = saved {
        tracing::error!(job_id = %record.job_id, error = %e, "cannot save the job's pending modify");
    }
}

impl JobTable {
    /// The running state of `job_id` (None when the job has left the table).
    pub(crate) fn run_state(&mut self, job_id: &str) -> Option<&mut RunState> {
        self.jobs.get_mut(job_id).map(|e| &mut e.rt)
    }

    /// Take in a fact; what the baton must hear because of it comes back.
    pub(crate) fn apply(
        &mut self,
        fact: Fact,
        registry: &std::sync::Mutex<mozart_state::Registry>,
    ) -> Option<mozart_baton::Event> {
        match fact {
            Fact::AttemptFinished { details, result } => {
                if let (Some(details), Some(rt)) = (details, self.run_state(&result.job_id)) {
                    rt.attempt_details.insert(result.sheet_num, *details);
                }
                return Some(mozart_baton::Event::SheetAttemptResult(result));
            }
            Fact::Run { job_id, change } => {
                if let Some(rt) = self.run_state(&job_id) {
                    rt.apply(change);
                }
            }
            Fact::JobLoaded(entry) => {
                self.jobs.insert(entry.record.job_id.clone(), *entry);
            }
            Fact::ListedRows(rows) => self.listed_rows = rows,
            Fact::Resuming { job_id } => {
                if let Some(e) = self.jobs.get_mut(&job_id) {
                    e.halted = false;
                }
            }
            Fact::Replacing { job_id } => {
                if let Some(e) = self.jobs.get_mut(&job_id) {
                    e.replacing = true;
                }
            }
            Fact::ModifyPending {
                job_id,
                config_path,
                workspace,
            } => {
                // Durable in the job's record: a conductor restarted before the job settled
                // still resumes it with the new score (recovery.rs).
                if let Some(e) = self.jobs.get_mut(&job_id) {
                    e.record.options.insert(
                        PENDING_MODIFY.into(),
                        serde_json::json!({"config_path": config_path, "workspace": workspace}),
                    );
                    save_record(registry, &e.record);
                }
            }
            Fact::ModifyEnded { job_id, generation } => {
                if self.pending_modify.get(&job_id) == Some(&generation) {
                    self.pending_modify.remove(&job_id);
                    if let Some(e) = self.jobs.get_mut(&job_id) {
                        if e.record.options.remove(PENDING_MODIFY).is_some() {
                            save_record(registry, &e.record);
                        }
                    }
                }
            }
            Fact::RemoteAttempt {
                job_id,
                sheet_num,
                change,
                reply,
            } => {
                let forget = matches!(change, RemoteChange::Forget(_));
                let result = self.remote_attempt(&job_id, sheet_num, change, registry);
                match reply {
                    Some(reply) => {
                        let _ = reply.send(result);
                    }
                    None => {
                        if let (Err(e), true) = (&result, forget) {
                            tracing::debug!(job_id = %job_id, sheet = sheet_num, error = %e, "remote attempt not forgotten");
                        }
                    }
                }
            }
        }
        None
    }

    /// Change a sheet's `remote_attempt` in the live checkpoint and write the sheet's row
    /// (as every change of the checkpoint, on the baton task).
    fn remote_attempt(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        change: RemoteChange,
        registry: &std::sync::Mutex<mozart_state::Registry>,
    ) -> Result<(), String> {
        let sheet = self
            .jobs
            .get_mut(job_id)
            .and_then(|e| e.live.as_mut())
            .and_then(|live| live.sheets.get_mut(&sheet_num))
            .ok_or_else(|| format!("job '{job_id}' is no longer loaded"))?;
        match change {
            RemoteChange::Record(record) => sheet.remote_attempt = Some(Box::new(record)),
            RemoteChange::Forget(remote_id) => {
                let ours = sheet
                    .remote_attempt
                    .as_ref()
                    .is_some_and(|r| r.remote_id == remote_id);
                if !ours {
                    return Ok(());
                }
                sheet.remote_attempt = None;
            }
        }
        super::lock(registry)
            .save_sheet(job_id, sheet)
            .map_err(|e| e.to_string())
    }
}

/// What a running job's attempts hand over to the baton task, by sheet. Emptied when the
/// job leaves the baton.
#[derive(Default)]
pub(crate) struct RunState {
    /// Details of each sheet's last attempt, sent by the musician just before it reports;
    /// merged into the checkpoint when the baton persists the transition.
    pub attempt_details: HashMap<u32, AttemptDetails>,
    /// mtimes taken before a sheet's first attempt, for `file_modified` validations.
    pub mtimes: HashMap<u32, mozart_baton::validation::MtimeSnapshot>,
    /// Progress of the attempts running now (read by `job.status` and `logs --follow`).
    pub live: HashMap<u32, Arc<mozart_backends::Progress>>,
    /// Backends built for this job, per instrument: building one compiles its profile's
    /// error patterns, so it happens once per job, not once per attempt (the backend pool of
    /// instruments.md §1.2; per-attempt settings travel in the request).
    pub backends: HashMap<String, Arc<dyn mozart_backends::Backend>>,
    /// Ours: each sheet's own worktree (`isolation.scope: sheet`), once created.
    pub sheet_worktrees: HashMap<u32, crate::isolation::Worktree>,
    /// Sheets parked on a rate limit (baton `waiting`), by the instrument they wait for:
    /// `job.status` shows them waiting with the limit's words and time left.
    pub waiting: HashMap<u32, String>,
    /// Sheets waiting out a retry's backoff, with when the retry runs: `job.status` shows
    /// them retrying, not merely pending.
    pub retries: HashMap<u32, mozart_ipc::checkpoint::RetryWait>,
    /// When the job's pause between sheets (`pause_between_sheets_seconds`) ends (Unix
    /// epoch seconds) and how long it is: `job.status` says the job is pausing, not idle.
    pub pacing: Option<(f64, f64)>,
    /// Sheets whose Slurm job `mozart pause` withdrew from the queue, by that job's id:
    /// `job.status` says so until the sheet is dispatched again.
    pub withdrawn: HashMap<u32, String>,
}

impl RunState {
    /// Take in what an attempt handed over.
    fn apply(&mut self, change: RunChange) {
        match change {
            RunChange::BackendBuilt {
                instrument,
                backend,
            } => {
                self.backends.entry(instrument).or_insert(backend);
            }
            RunChange::MtimesTaken {
                sheet_num,
                snapshot,
            } => {
                self.mtimes.entry(sheet_num).or_insert(snapshot);
            }
            RunChange::AttemptLive {
                sheet_num,
                progress,
            } => {
                self.withdrawn.remove(&sheet_num);
                self.live.insert(sheet_num, progress);
            }
            RunChange::Withdrawn {
                sheet_num,
                remote_id,
            } => {
                self.withdrawn.insert(sheet_num, remote_id);
            }
            RunChange::AttemptGone {
                sheet_num,
                progress,
            } => {
                // Only its own attempt's entry: the sheet's next attempt (a retry started
                // before this one's entry was dropped) keeps its own.
                if self
                    .live
                    .get(&sheet_num)
                    .is_some_and(|live| Arc::ptr_eq(live, &progress))
                {
                    self.live.remove(&sheet_num);
                }
            }
            RunChange::WorktreeMade {
                sheet_num,
                worktree,
            } => {
                self.sheet_worktrees.insert(sheet_num, worktree);
            }
            RunChange::WorktreeReleased { sheet_num } => {
                self.sheet_worktrees.remove(&sheet_num);
            }
        }
    }
}

impl std::fmt::Debug for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunState")
            .field("attempt_details", &self.attempt_details.len())
            .field("live", &self.live.len())
            .field("backends", &self.backends.keys().collect::<Vec<_>>())
            .field("sheet_worktrees", &self.sheet_worktrees.len())
            .finish_non_exhaustive()
    }
}

/// The baton loop is not running (not started yet, or stopped): nobody owns the table.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the conductor's job table is not available (the baton loop is not running)")]
pub(crate) struct Stopped;

/// What the other tasks tell the owner of the job table: facts, each in one message; the
/// owner decides what follows.
pub(crate) enum Fact {
    /// An attempt is over: the details the checkpoint records (none when the sheet was not
    /// in the plan) and the result the baton judges, together, so the details are in place
    /// when the baton persists the transition the result causes.
    AttemptFinished {
        /// The attempt's details, kept until the transition is persisted.
        details: Option<Box<AttemptDetails>>,
        /// The result, handed on to the baton.
        result: Box<mozart_baton::AttemptResult>,
    },
    /// What a running attempt of `job_id` hands over (nothing when the job has left the
    /// table).
    Run { job_id: String, change: RunChange },
    /// A job was loaded (submitted, or found paused at start-up).
    JobLoaded(Box<JobEntry>),
    /// `job.list`'s registry rows, read once (`None`: read them again, the registry changed).
    ListedRows(Option<Arc<Vec<ListedRow>>>),
    /// A paused job is being resumed: it may dispatch again.
    Resuming { job_id: String },
    /// A paused job's registration is being replaced (a resume with a new score): its end
    /// is not a cancel.
    Replacing { job_id: String },
    /// A `job.modify --resume` waits for the job's running sheets: kept in the job's record
    /// until it ends.
    ModifyPending {
        job_id: String,
        config_path: String,
        workspace: Option<String>,
    },
    /// A `job.modify` claim ended: its slot is free unless a newer claim holds it.
    ModifyEnded { job_id: String, generation: u64 },
    /// A sheet's remote attempt (a Slurm job) was submitted (`Some`) or is forgotten
    /// (`None`, only if it is still `forget`): the live checkpoint and the sheet's row follow;
    /// the answer says whether the row was written.
    RemoteAttempt {
        job_id: String,
        sheet_num: u32,
        change: RemoteChange,
        reply: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    },
}

/// What a running job's attempts hand over to the table, in [`RunState`].
pub(crate) enum RunChange {
    /// The attempt's Slurm job was withdrawn from the queue before it started (pause).
    Withdrawn { sheet_num: u32, remote_id: String },
    /// A backend was built for `instrument` (building compiles its profile's error
    /// patterns): the job's later attempts use it.
    BackendBuilt {
        instrument: String,
        backend: Arc<dyn mozart_backends::Backend>,
    },
    /// The mtimes taken before a sheet's first attempt (`file_modified` validations).
    MtimesTaken {
        sheet_num: u32,
        snapshot: mozart_baton::validation::MtimeSnapshot,
    },
    /// An attempt's instrument runs: its progress is shown by `job.status` and `logs`.
    AttemptLive {
        sheet_num: u32,
        progress: Arc<mozart_backends::Progress>,
    },
    /// The attempt's instrument is done (or the attempt was aborted); `progress` is the one
    /// its [`RunChange::AttemptLive`] gave, which tells its entry from a later attempt's.
    AttemptGone {
        sheet_num: u32,
        progress: Arc<mozart_backends::Progress>,
    },
    /// A sheet's own worktree (`isolation.scope: sheet`) was created.
    WorktreeMade {
        sheet_num: u32,
        worktree: crate::isolation::Worktree,
    },
    /// A sheet's own worktree was handed to its reviewer and is no longer the table's.
    WorktreeReleased { sheet_num: u32 },
}

/// How a sheet's remote attempt record changes.
#[derive(Debug)]
pub(crate) enum RemoteChange {
    /// The attempt was submitted: record it.
    Record(mozart_state::RemoteAttemptRef),
    /// The attempt with this remote id is over: forget it (if it is still the recorded one).
    Forget(String),
}

impl std::fmt::Debug for Fact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Fact::AttemptFinished { .. } => "AttemptFinished",
            Fact::Run { .. } => "Run",
            Fact::JobLoaded(_) => "JobLoaded",
            Fact::ListedRows(_) => "ListedRows",
            Fact::Resuming { .. } => "Resuming",
            Fact::Replacing { .. } => "Replacing",
            Fact::ModifyPending { .. } => "ModifyPending",
            Fact::ModifyEnded { .. } => "ModifyEnded",
            Fact::RemoteAttempt { .. } => "RemoteAttempt",
        };
        f.write_str(name)
    }
}

/// Whether a job is loaded and where it stands, as [`Query::Job`] answers it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobFacts {
    /// The job's status (its record's).
    pub status: DaemonJobStatus,
    /// Whether the baton has it registered (it has a run).
    pub in_baton: bool,
    /// Paused with this many sheets still finishing their attempt (`pausing`), else None.
    pub pausing: Option<u32>,
}

/// The table's part of `job.status`: the live document with the running sheets' progress,
/// the sheets waiting on a rate limit and the compacted completed sheets (`None`: the job
/// is not loaded); what the job waits for; the instruments' holds.
pub(crate) type LiveStatus = (
    Option<(
        mozart_ipc::checkpoint::JobCheckpoint,
        Vec<(u32, Arc<mozart_backends::Progress>)>,
        Vec<(u32, String)>,
        Vec<u32>,
    )>,
    Option<String>,
    Vec<mozart_ipc::checkpoint::InstrumentHold>,
);

/// What `job.watch` looks at in a loaded job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchSeen {
    /// The job's status.
    pub status: DaemonJobStatus,
    /// Whether one of its sheets completed.
    pub sheet_completed: bool,
    /// Whether it waits for a job slot.
    pub waiting: bool,
}

impl WatchSeen {
    /// Whether the watch is over: with `until_done`, the job has ended or paused (it waits
    /// for an operator); otherwise it shows how it goes — a sheet completed, or it is no
    /// longer simply running (it ended, paused, or waits for a job slot).
    pub fn settled(&self, until_done: bool) -> bool {
        if until_done {
            return self.status.is_terminal() || self.status == DaemonJobStatus::Paused;
        }
        self.sheet_completed
            || self.status.is_terminal()
            || self.status == DaemonJobStatus::Paused
            || self.waiting
    }
}

/// A `job.watch` call waiting on a loaded job's next change.
#[derive(Debug)]
pub(crate) struct Watcher {
    /// Fires with what the job looks like at the change.
    pub wake: tokio::sync::oneshot::Sender<WatchSeen>,
    /// It waits for the job's end, not for its first completed sheet.
    pub until_done: bool,
}

/// One step of `job.watch`: what it sees of the job, and (not settled yet) a channel that
/// fires at its next change with what it sees then. None: not loaded.
pub(crate) type WatchStep = Option<(WatchSeen, Option<tokio::sync::oneshot::Receiver<WatchSeen>>)>;

/// The loaded jobs as `job.list` shows them (with their submission times), their ids, and
/// the registry rows read before (if still good).
pub(crate) type LiveList = (
    Vec<(f64, mozart_ipc::status::JobListEntry)>,
    std::collections::HashSet<String>,
    Option<Arc<Vec<ListedRow>>>,
);

/// [`Query::PageFacts`]' answer: the running sheets of paused jobs, rows' progress, and
/// the status (with its error) of each loaded row whose registry row says otherwise — a
/// status memory holds that could not be saved (a full disk).
pub(crate) type PageFacts = (
    HashMap<String, u32>,
    std::collections::BTreeMap<String, mozart_ipc::status::JobProgress>,
    HashMap<String, (mozart_state::DaemonJobStatus, Option<String>)>,
);

/// What the other tasks ask the owner of the job table; each question carries the channel
/// its answer comes back on.
pub(crate) enum Query {
    /// [`JobFacts`] of a job (None: not loaded).
    Job {
        job_id: String,
        reply: Reply<Option<JobFacts>>,
    },
    /// A loaded job's record.
    Record {
        job_id: String,
        reply: Reply<Option<mozart_state::JobRecord>>,
    },
    /// Sheets of a job still running an attempt (the live checkpoint's `in_progress` ones).
    InFlight {
        job_id: String,
        reply: Reply<Vec<u32>>,
    },
    /// The table's part of `job.status`, for the sheets `sheets` chooses.
    Status {
        job_id: String,
        sheets: Option<mozart_ipc::sheet_view::SheetQuery>,
        reply: Reply<LiveStatus>,
    },
    /// One step of `job.watch`: the job's status, whether a sheet completed, and (not
    /// settled yet) a channel that fires at its next change. None: not loaded.
    Watch {
        job_id: String,
        /// Settled only by the job's end or pause (`job.watch`'s `until_done`).
        until_done: bool,
        reply: Reply<WatchStep>,
    },
    /// The loaded jobs for `job.list`.
    List { reply: Reply<LiveList> },
    /// What a jobs page shows beside its registry rows, in one visit: how many sheets
    /// still run in each of the `paused` jobs (`pausing`), and the progress of each of the
    /// `progress` jobs as [`Query::Progress`] counts it.
    PageFacts {
        paused: Vec<String>,
        progress: Vec<String>,
        /// Loaded rows with the status their registry row gives.
        statuses: Vec<(String, mozart_state::DaemonJobStatus)>,
        reply: Reply<PageFacts>,
    },
    /// Save what memory holds of a job beyond the registry — a halted job's unsaved sheets
    /// and its unsaved end — before it is resumed. `Ok(None)`: the job goes on in the baton;
    /// `Ok(Some(outcome))`: it had ended, and its end is recorded now; `Err`: still cannot be
    /// saved (the job stays paused).
    CatchUp {
        job_id: String,
        reply: Reply<Result<Option<mozart_baton::JobOutcome>, String>>,
    },
    /// Unload the jobs `job.clear` deletes: matching status, not in the baton, in `job_ids`
    /// when given, submitted at least `older_than_seconds` before `now`; the answer is the
    /// ids of the jobs the baton still runs (never deleted).
    Clear {
        statuses: Vec<DaemonJobStatus>,
        job_ids: Option<Vec<String>>,
        older_than_seconds: Option<f64>,
        now: f64,
        reply: Reply<Vec<String>>,
    },
    /// Set a job's status in its record, checkpoint and registry row (transitions the baton
    /// does not report).
    SetStatus {
        job_id: String,
        status: DaemonJobStatus,
        error: Option<String>,
        reply: Reply<()>,
    },
    /// Loaded jobs by status, for the conductor's counts.
    Counts {
        reply: Reply<mozart_conductor::ctx::JobCounts>,
    },
    /// The newest observer events (of one job, or all), newest first.
    ObserverEvents {
        job_id: Option<String>,
        limit: u32,
        reply: Reply<Vec<mozart_ipc::types::MonitorEvent>>,
    },
    /// Running jobs, sheets in flight, and the progress of every unfinished job (`top`).
    Figures {
        reply: Reply<(u64, u64, Vec<mozart_ipc::types::JobProgress>)>,
    },
    /// The monitor stream's events since its cursor's last poll (none on the `first`).
    MonitorPoll {
        cursor: Box<feed::StreamCursor>,
        first: bool,
        reply: Reply<(
            Box<feed::StreamCursor>,
            Vec<mozart_ipc::types::MonitorEvent>,
        )>,
    },
    /// The progress of each of these loaded jobs (`job.progress`), leaving out the ones
    /// not loaded, without a live checkpoint, compacted, or too large to walk.
    Progress {
        job_ids: Vec<String>,
        reply: Reply<std::collections::BTreeMap<String, mozart_ipc::status::JobProgress>>,
    },
    /// A job's running sheets and where their output files are.
    RunningOutputs {
        job_id: String,
        reply: Reply<Vec<(u32, std::path::PathBuf)>>,
    },
    /// The progress of the running attempts (of one job, or all).
    LiveProgress {
        job_id: Option<String>,
        reply: Reply<Vec<(String, u32, Arc<mozart_backends::Progress>)>>,
    },
    /// Claim a job's pending-modify slot: the answer is the claim's number.
    ClaimModify { job_id: String, reply: Reply<u64> },
    /// Whether `generation` is still the job's newest pending modify.
    StillPending {
        job_id: String,
        generation: u64,
        reply: Reply<bool>,
    },
}

/// The channel a [`Query`]'s answer comes back on.
pub(crate) type Reply<T> = tokio::sync::oneshot::Sender<T>;

/// A message to the owner of the job table.
pub(crate) enum Command {
    /// A fact it takes in.
    Tell(Fact),
    /// A question it answers.
    Ask(Query),
}

/// Hands a [`Command`] to the task that owns the table (false: nobody owns it now).
pub(crate) type Deliver = Box<dyn Fn(Command) -> bool + Send + Sync>;

/// The way to the job table: commands are handled on the baton task, in the order they
/// are sent.
#[derive(Default)]
pub(crate) struct Table(OnceLock<Deliver>);

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("connected", &self.0.get().is_some())
            .finish()
    }
}

impl Table {
    /// Connect to the task that owns the table (once, when the baton starts).
    pub(crate) fn connect(&self, deliver: Deliver) {
        let _ = self.0.set(deliver);
    }

    /// Tell the owner `fact` without waiting (it is taken in before any event sent later).
    pub(crate) fn tell(&self, fact: Fact) {
        if self.send(Command::Tell(fact)).is_err() {
            tracing::debug!("job table fact dropped: the baton loop is not running");
        }
    }

    /// Ask the owner the question `question` makes of the reply channel, and wait for the
    /// answer.
    pub(crate) async fn ask<R>(
        &self,
        question: impl FnOnce(Reply<R>) -> Query,
    ) -> Result<R, Stopped> {
        self.request(question)?.await.map_err(|_| Stopped)
    }

    /// Ask a question about one job whose answer is None when the job is not loaded (None
    /// as well when nobody owns the table).
    pub(crate) async fn ask_job<R>(
        &self,
        job_id: &str,
        question: impl FnOnce(String, Reply<Option<R>>) -> Query,
    ) -> Option<R> {
        self.ask(|reply| question(job_id.to_string(), reply))
            .await
            .ok()
            .flatten()
    }

    /// [`Self::ask`] from a thread that may block (never a runtime worker).
    pub(crate) fn ask_blocking<R>(
        &self,
        question: impl FnOnce(Reply<R>) -> Query,
    ) -> Result<R, Stopped> {
        self.request(question)?.blocking_recv().map_err(|_| Stopped)
    }

    /// Send the question; its answer comes on the returned channel.
    pub(crate) fn request<R>(
        &self,
        question: impl FnOnce(Reply<R>) -> Query,
    ) -> Result<tokio::sync::oneshot::Receiver<R>, Stopped> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Command::Ask(question(tx)))?;
        Ok(rx)
    }

    /// Send `command`: an error when nobody owns the table.
    fn send(&self, command: Command) -> Result<(), Stopped> {
        match self.0.get() {
            Some(deliver) if deliver(command) => Ok(()),
            _ => Err(Stopped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sheet's attempt drops its live entry only after its result is reported, by which
    /// time the sheet's retry may be running with its own: `job.status` must keep showing
    /// the retry's progress, so the late drop removes only the attempt's own entry.
    #[test]
    fn a_late_attempt_gone_leaves_the_next_attempts_live_entry() {
        let mut rt = RunState::default();
        let first = Arc::new(mozart_backends::Progress::new());
        let retry = Arc::new(mozart_backends::Progress::new());
        rt.apply(RunChange::AttemptLive {
            sheet_num: 3,
            progress: Arc::clone(&first),
        });
        rt.apply(RunChange::AttemptLive {
            sheet_num: 3,
            progress: Arc::clone(&retry),
        });
        rt.apply(RunChange::AttemptGone {
            sheet_num: 3,
            progress: Arc::clone(&first),
        });
        let live = rt.live.get(&3).expect("the retry's entry is still shown");
        assert!(Arc::ptr_eq(live, &retry));
        rt.apply(RunChange::AttemptGone {
            sheet_num: 3,
            progress: retry,
        });
        assert!(rt.live.is_empty(), "its own drop removes the retry's entry");
    }
}
