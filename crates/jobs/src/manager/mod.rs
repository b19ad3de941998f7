//! The job manager: submit, status, list, pause, resume, cancel, clear, and restart recovery
//! (conductor.md §6, §11), wired to the baton loop, the SQLite registry and the instruments.
//!
//! Ownership: the baton loop owns sheet state transitions, and its host owns the job table
//! (`table.rs`): each loaded job's record and live checkpoint, which the host updates *and
//! persists* on every transition. Everything else (IPC handlers, musicians, hooks) reads and
//! changes the table through host calls that run on the baton task; no lock guards it.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod attempt;
mod compact;
mod events;
mod hooks;
mod host;
mod instruments;
mod learning;
mod live_facts;
mod musician;
mod notify;
mod owner;
mod placement;
mod reaper;
mod recover_sheets;
mod recovery;
mod review;
mod rpc;
mod specs;
mod status_view;
mod submit;
mod table;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::wire;
use live_facts::LiveFacts;
use mozart_backends::InstrumentRegistry;
use mozart_baton::driver::Inbox;
use mozart_baton::{BatonConfig, BatonCore, Event};
use mozart_config::{JobConfig, PlanOutline, PlannedSheet};
use mozart_ipc::checkpoint::HookResult;
use mozart_ipc::sheet_view::{SheetQuery, DEFAULT_FULL_SHEETS};
use mozart_ipc::status::{JobListEntry, JobStatusResult};
use mozart_ipc::types::{JobResponse, JobResponseStatus, MonitorEvent};
use mozart_state::{
    CheckpointState, DaemonJobStatus, DeleteFilter, JobRecord, JobStatus, Registry,
};

use mozart_conductor::ctx::{BoxFuture, JobCounts, JobHost};
use mozart_conductor::{ConductorCtx, ConductorError};

pub use rpc::register as register_rpc;
pub use submit::SubmitRequest;

/// Everything a running job needs that does not change while it runs.
#[derive(Debug)]
pub(crate) struct JobRun {
    pub job_id: String,
    pub config: JobConfig,
    /// The plan's counts; each sheet is made from `config` when it is needed
    /// ([`JobRun::sheet`]), not held for the job's life (issue 24).
    pub plan: PlanOutline,
    pub workspace: PathBuf,
    /// Where its sheets' output logs go: `{workspace}/logs`, or `{workspace}/logs/{job_id}`
    /// when another job's are there (`output_log::claim_sheet_logs_dir`).
    pub sheet_logs: PathBuf,
    /// The prompt template, compiled once for every sheet of the job.
    pub renderer: mozart_config::template::PromptRenderer,
    /// Where the instrument runs: the workspace, or the job's git worktree (`isolation:`).
    pub working_dir: PathBuf,
    /// The job's git worktree, when isolation gave it one.
    pub worktree: Option<crate::isolation::Worktree>,
    /// Directory of the score file (relative hook paths resolve against it).
    pub score_dir: PathBuf,
    /// Depth of this job in its concert (0 for a user submission).
    pub chain_depth: u32,
    /// A resume of a job that failed only in its `on_success` hooks, or failed before they
    /// ever ran: its hooks run when it completes, even with no new sheet work (the failed
    /// hook and those after it; the ones that succeeded are not repeated).
    pub hooks_owed: bool,
    /// The unfinished sheets of a failed or cancelled job that is run again (`mozart resume`,
    /// or the score submitted again), each with the attempts it made before: their retry
    /// budget starts afresh, their attempts keep counting (docs/cli.md `mozart resume`).
    pub fresh_budget: std::collections::HashMap<u32, u32>,
    /// `cross_sheet.capture_files` reads only files modified since this instant: the job's
    /// start (score.md §3.13), not the conductor's nor this run's.
    pub capture_since: Option<std::time::SystemTime>,
}

/// When a job's sheets' captured files may date from: its start, less a second for file
/// systems whose clocks are coarser than ours (a file written just after the start can
/// carry an mtime a few milliseconds before it).
pub(crate) fn capture_since(
    started_at: Option<&mozart_ipc::time::Timestamp>,
) -> Option<std::time::SystemTime> {
    let secs = started_at?.to_epoch()? - 1.0;
    let after = std::time::Duration::try_from_secs_f64(secs.max(0.0)).ok()?;
    std::time::UNIX_EPOCH.checked_add(after)
}

impl JobRun {
    /// Sheet `num` of the plan, made from the score now (`None` past the plan).
    pub fn sheet(&self, num: u32) -> Option<PlannedSheet> {
        self.plan.sheet(&self.config, num)
    }
}

/// One job as the manager knows it.
#[derive(Debug)]
pub(crate) struct JobEntry {
    pub record: JobRecord,
    /// Live checkpoint (kept for terminal jobs too, so status stays rich).
    pub live: Option<CheckpointState>,
    /// Present while the job is registered with the baton.
    pub run: Option<Arc<JobRun>>,
    /// A checkpoint write failed: the baton stopped dispatching this job until it is
    /// resumed (which re-registers it from its last durable checkpoint).
    pub halted: bool,
    /// Sheets whose last change is in `live` but not in the registry (its save failed):
    /// saved when the job is resumed; a restart before that runs them again.
    pub unsaved: std::collections::BTreeSet<u32>,
    /// The baton ended the job, but the changes that ended it could not be saved: the
    /// outcome and reason, recorded when the job is resumed.
    pub unsaved_end: Option<(mozart_baton::JobOutcome, Option<String>)>,
    /// Each sheet's last status once the job has finished (its checkpoint then lives only in
    /// the registry): what the monitor stream diffs against.
    pub final_sheets: Vec<(u32, mozart_state::SheetStatus)>,
    /// The job's progress once it has finished, kept from its last live checkpoint (which
    /// is then let go) when that was small enough to count (see [`JobEntry::progress_countable`]): a
    /// jobs page gives a finished row its progress with the rows, where without it the
    /// dashboard asked `job.status` of each finished row, a dozen more calls a render
    /// while 1,000 jobs run (issue 24).
    pub final_progress: Option<mozart_ipc::status::JobProgress>,
    /// What the running job's attempts hand over to the baton task.
    pub rt: table::RunState,
    /// Why a queued job does not run yet (`waiting for a job slot (…)`), shown by `status`.
    pub waiting: Option<String>,
    /// The job's registration is being replaced by one with a new score (a resume with
    /// `--config`, `modify --resume`): the old registration's end is not the job's end, so
    /// it is not recorded as `cancelled`.
    pub replacing: bool,
    /// What the conductor log has said about the job (its job events).
    pub log: events::JobLog,
    /// `job.watch` calls waiting for the job to show how it goes: woken when one of its
    /// sheets completes or its status changes (see [`JobManager::watch`]).
    /// The wake carries what the watch would ask for next, so a settled job is answered
    /// without a second question to the table's owner while it runs the job's next sheet.
    pub watchers: Vec<table::Watcher>,
    /// The live checkpoint's score as a sheet view shows it (`wire::view_snapshot`), made
    /// at the first view: parsing the snapshot on every `status` of a running job cost time
    /// in proportion to its planned sheets (issue 24). The snapshot changes only with a new
    /// entry (a submission, a resume with a new score).
    pub view_snapshot: std::sync::OnceLock<Option<serde_json::Value>>,
    /// Some completed sheet of the live checkpoint keeps only its facts
    /// (`compact::compact_completed`): its whole row is in the registry only, so the live
    /// checkpoint is never written whole over the rows, and views read such sheets back.
    pub compacted: bool,
    /// What a sheet view needs of each sheet of `live`, packed (made at the first view of a
    /// large job, then updated with each sheet transition the host persists): see
    /// [`live_facts`].
    pub view_facts: Option<LiveFacts>,
}

impl JobEntry {
    /// What `job.watch` sees of the job now.
    pub(crate) fn watch_seen(&self) -> table::WatchSeen {
        table::WatchSeen {
            status: self.record.status,
            sheet_completed: self
                .live
                .as_ref()
                .is_some_and(|l| l.last_completed_sheet > 0),
            waiting: self.waiting.is_some(),
        }
    }

    /// Wake the `job.watch` calls waiting on the job with what they see now.
    pub(crate) fn wake_watchers(&mut self) {
        if self.watchers.is_empty() {
            return;
        }
        let seen = self.watch_seen();
        for watcher in self.watchers.drain(..) {
            let _ = watcher.wake.send(seen);
        }
    }

    /// Whether the job's progress is counted on the table (`job.progress`, a jobs page's
    /// rows): a walk over its sheets, so only for a job of at most
    /// [`mozart_ipc::status::PROGRESS_SHEETS`] whose sheets are all whole in memory.
    pub(crate) fn progress_countable(&self, live: &CheckpointState) -> bool {
        !self.compacted && live.total_sheets <= mozart_ipc::status::PROGRESS_SHEETS
    }

    /// A job entering the table (`run` when the baton is to run it).
    pub(crate) fn new(
        record: JobRecord,
        live: Option<CheckpointState>,
        run: Option<Arc<JobRun>>,
    ) -> JobEntry {
        JobEntry {
            record,
            live,
            run,
            halted: false,
            unsaved: std::collections::BTreeSet::new(),
            unsaved_end: None,
            final_sheets: Vec::new(),
            final_progress: None,
            rt: table::RunState::default(),
            waiting: None,
            replacing: false,
            log: events::JobLog::default(),
            watchers: Vec::new(),
            view_snapshot: std::sync::OnceLock::new(),
            compacted: false,
            view_facts: None,
        }
    }
}

/// A registry row of `job.list`: job id, submission time, the row as upstream shows it.
pub(crate) type ListedRow = (String, f64, JobListEntry);

/// State shared by IPC handlers, the baton host and musicians.
pub(crate) struct Shared {
    pub registry: Mutex<Registry>,
    /// A read-only connection to the same registry for answers that only read (`job.list_page`,
    /// a stored job's status): a WAL reader never waits for the writer, where the writer's
    /// connection is held by the baton through each burst of sheet writes (issue 24). None
    /// when it could not be opened: those answers then use `registry`.
    pub reader: Option<Mutex<Registry>>,
    /// The job table, owned by the baton task.
    pub table: table::Table,
    pub instruments: InstrumentRegistry,
    /// The global learning store (None when it could not be opened).
    pub learning: Option<Arc<learning::Learning>>,
    /// Records of running instrument process groups (reaped after a crash).
    pub inflight_dir: PathBuf,
    /// The journal of running instrument groups in `inflight_dir`.
    pub inflight: Arc<reaper::Inflight>,
    /// The companion process that ends instrument groups if the conductor dies.
    pub watchdog: Option<mozart_conductor::watchdog::Watchdog>,
    pub inbox: OnceLock<Inbox>,
    pub hook_tx: OnceLock<tokio::sync::mpsc::UnboundedSender<hooks::HookRequest>>,
    /// Jobs whose `on_success` hooks are running: `mozart cancel` stops them through this.
    pub hook_cancels: Mutex<std::collections::HashMap<String, tokio::sync::watch::Sender<bool>>>,
    /// Jobs whose next start is their run going on, not a start: resumed by a conductor
    /// restart, or by the `modify --resume` that paused them. Their channels hear no
    /// `job_start` for it (the host takes the job out at its next status change).
    pub quiet_starts: Mutex<std::collections::HashSet<String>>,
    /// Running jobs a conductor restart continues: when their run's job timeout started
    /// counting (epoch seconds), for their registration to go on with it.
    pub restored_clocks: Mutex<std::collections::HashMap<String, f64>>,
    /// Job slots (`max_concurrent_jobs`), as last configured (start or reload).
    pub max_concurrent_jobs: std::sync::atomic::AtomicU32,
    /// Sheets the conductor runs at once across all jobs (`max_concurrent_sheets`, read at
    /// start only): `status` says when a job waits for one of them.
    pub max_concurrent_sheets: u32,
    /// Serialises submissions (conductor.md §6.4 step 8).
    pub submit_lock: tokio::sync::Mutex<()>,
    /// Ids of the jobs in the table, kept beside it so that `job.list_page` can tell a
    /// loaded job from a registry row without queueing a call on the baton task.
    pub loaded: Mutex<std::collections::HashSet<String>>,
    /// Checkpoints the registry's WAL every half second (a last one when the conductor
    /// stops).
    pub _registry_checkpointer: Option<mozart_state::registry::Checkpointer>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    /// The registry for a read-only answer: the reader connection, else the writer's.
    pub(crate) fn read_registry(&self) -> MutexGuard<'_, Registry> {
        lock(self.reader.as_ref().unwrap_or(&self.registry))
    }
}

/// Lock a mutex, recovering from poisoning (a panicked musician must not wedge the daemon).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The job engine installed on the conductor context.
#[derive(Debug, Clone)]
pub struct JobManager {
    shared: Arc<Shared>,
    baton: Arc<Mutex<Option<mozart_baton::BatonHandle<host::ConductorHost>>>>,
}

/// A job-level error returned to IPC handlers (mapped to `-32000`).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// No such job.
    #[error("Job '{0}' not found")]
    NotFound(String),
    /// The request cannot be done in the job's present state (the message says why).
    #[error("{0}")]
    Busy(String),
    /// The registry failed.
    #[error("registry error: {0}")]
    Registry(#[from] mozart_state::StateError),
}

/// Hook results live in the registry (conductor.md §19.5); a job's status shows them.
/// `doc.hooks_running` is set by whoever made `doc`, from the job record of the same moment
/// ([`hooks_due`]).
fn attach_hooks(
    registry: &mozart_state::Registry,
    job_id: &str,
    doc: &mut mozart_ipc::checkpoint::JobCheckpoint,
) {
    let hooks: Vec<HookResult> = registry
        .hook_results(job_id)
        .unwrap_or_default()
        .iter()
        .map(wire::hook_result)
        .collect();
    if !hooks.is_empty() {
        doc.hook_results = hooks;
    }
}

/// Completed, hooks not done: a failing one still turns the job `failed` (`mozart wait`
/// waits on). `record` must be no newer than `doc`'s status: the hooks change the job's
/// status before they clear their mark, so a mark read first and a status read after never
/// show a completed job whose hooks have ended but not said how. (Reading the mark again
/// after the document did: a hook that failed between the two reads made `mozart wait`
/// report the job completed, exit 0.)
pub(super) fn hooks_due(
    doc: &mozart_ipc::checkpoint::JobCheckpoint,
    record: &mozart_state::JobRecord,
) -> bool {
    doc.status == mozart_state::JobStatus::Completed
        && record.options.contains_key(hooks::HOOKS_PENDING)
}

/// How long `job.pause` waits for the sheets in Slurm's queue to be withdrawn (a hold, a
/// look and an scancel each, milliseconds on a healthy controller): well within the 5 s a
/// `mozart` command waits for an answer. The withdrawal goes on after it.
const WITHDRAW_WAIT: Duration = Duration::from_secs(3);

impl JobManager {
    /// Open the registry and load instrument profiles; the baton starts in [`JobHost::recover`].
    pub fn open(ctx: &ConductorCtx) -> Result<JobManager, ConductorError> {
        let config = ctx.config();
        let registry = Registry::open(&ctx.paths.registry_db).map_err(|e| {
            registry_error(&ctx.paths.registry_db, "cannot open the job registry", &e)
        })?;
        // Checkpoints (two fsyncs) leave the baton's commits for a thread of their own.
        let registry_checkpointer =
            match registry.checkpoint_in_background(std::time::Duration::from_millis(500)) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "registry checkpoints stay in the baton's commits");
                    None
                }
            };
        let instruments = InstrumentRegistry::load(&ctx.paths.home, None).map_err(|e| {
            ConductorError::Recovery(format!("cannot load instrument profiles: {e}"))
        })?;
        // A profile skipped, or one loaded with a key given twice.
        for warning in instruments.warnings() {
            tracing::warn!(err = %warning, "instrument profile");
        }
        // Created now, while the conductor's start-up umask keeps it private.
        let inflight_dir = ctx.paths.home.join("inflight");
        if let Err(e) = std::fs::create_dir_all(&inflight_dir) {
            tracing::warn!(dir = %inflight_dir.display(), error = %e, "cannot create the in-flight record directory");
        }
        let reader = match Registry::open_reader(&ctx.paths.registry_db) {
            Ok(r) => Some(Mutex::new(r)),
            Err(e) => {
                tracing::warn!(error = %e, "pages of the registry are read on the writer's connection");
                None
            }
        };
        let shared = Shared {
            registry: Mutex::new(registry),
            reader,
            table: table::Table::default(),
            instruments,
            learning: learning::Learning::open(&ctx.paths.learning_db),
            inflight: reaper::Inflight::new(inflight_dir.clone()),
            watchdog: match mozart_conductor::watchdog::Watchdog::spawn(Some(
                &inflight_dir.join(reaper::JOURNAL),
            )) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the instrument watchdog; instruments are reaped on restart only");
                    None
                }
            },
            inflight_dir,
            inbox: OnceLock::new(),
            hook_tx: OnceLock::new(),
            hook_cancels: Mutex::new(std::collections::HashMap::new()),
            quiet_starts: Mutex::new(std::collections::HashSet::new()),
            restored_clocks: Mutex::new(std::collections::HashMap::new()),
            max_concurrent_jobs: std::sync::atomic::AtomicU32::new(config.max_concurrent_jobs),
            max_concurrent_sheets: config.max_concurrent_sheets.max(1),
            submit_lock: tokio::sync::Mutex::new(()),
            loaded: Mutex::new(std::collections::HashSet::new()),
            _registry_checkpointer: registry_checkpointer,
        };
        Ok(JobManager {
            shared: Arc::new(shared),
            baton: Arc::new(Mutex::new(None)),
        })
    }

    /// Start the baton loop (once).
    fn start_baton(&self, ctx: &Arc<ConductorCtx>) {
        let mut slot = lock(&self.baton);
        if slot.is_some() {
            return;
        }
        let (hook_tx, mut hook_rx) = tokio::sync::mpsc::unbounded_channel::<hooks::HookRequest>();
        let _ = self.shared.hook_tx.set(hook_tx);
        let (mgr, hctx) = (self.clone(), ctx.clone());
        tokio::spawn(async move {
            while let Some(req) = hook_rx.recv().await {
                tokio::spawn(hooks::run_hooks(mgr.clone(), hctx.clone(), req));
            }
        });
        let config = ctx.config();
        // The built-in `shell` instrument runs the score's own commands: a command that fails
        // says nothing about the instrument, so its failures never open a breaker that would
        // hold every other job's shell sheets (an AI CLI's breaker protects a service).
        // For the same reason a rate limit one of its commands meets (an HTTP API's 429, or
        // output that only looks like one) holds back that job's shell sheets, not every job's.
        let mut shell = mozart_baton::InstrumentSpec::new("shell");
        shell.max_concurrent = config.max_concurrent_sheets;
        shell.circuit_breaker_threshold = u32::MAX;
        shell.rate_limit_per_job = true;
        let baton_config = BatonConfig {
            max_concurrent_sheets: config.max_concurrent_sheets,
            max_concurrent_jobs: config.max_concurrent_jobs,
            instruments: vec![shell],
            // Upstream caps every instrument at 4 whatever the score asks (bench README);
            // ours lets one instrument use every global slot unless its profile says less.
            default_instrument_concurrency: config.max_concurrent_sheets,
            jitter_seed: u64::from(std::process::id()),
            ..BatonConfig::default()
        };
        let core = BatonCore::new(baton_config);
        let host = host::ConductorHost::new(self.shared.clone());
        let handle = mozart_baton::spawn(core, host);
        let _ = self.shared.inbox.set(handle.inbox());
        let caller = handle.caller();
        self.shared.table.connect(Box::new(move |command| {
            caller
                .send(Box::new(move |h: &mut host::ConductorHost| {
                    h.handle(command)
                }))
                .is_ok()
        }));
        *slot = Some(handle);
    }

    fn send(&self, event: Event) -> Result<(), String> {
        match self.shared.inbox.get() {
            Some(inbox) => inbox
                .send(event)
                .map_err(|_| "the baton loop is not running".to_string()),
            None => Err("the baton loop has not started".to_string()),
        }
    }

    /// `job.submit` (conductor.md §6.4).
    pub async fn submit(&self, ctx: &ConductorCtx, req: SubmitRequest) -> JobResponse {
        submit::submit(self, ctx, req).await
    }

    /// `job.status` (conductor.md §6.10): the live checkpoint, else the stored one, else the
    /// registry record.
    pub async fn status(&self, job_id: &str) -> Result<JobStatusResult, JobError> {
        self.status_with(job_id, None).await
    }

    /// `job.status` with our optional sheet query (issue 24): without one, every sheet of a
    /// job of up to [`DEFAULT_FULL_SHEETS`] sheets (upstream's shape), else the summary;
    /// with one, the sheets it chooses and the counts of all.
    pub async fn status_with(
        &self,
        job_id: &str,
        sheets: Option<SheetQuery>,
    ) -> Result<JobStatusResult, JobError> {
        // The live document, the running sheets' progress and what the job waits for, in
        // one visit to the table.
        let (live, waiting, breakers) = self
            .shared
            .table
            .ask(|reply| table::Query::Status {
                job_id: job_id.to_string(),
                sheets: sheets.clone(),
                reply,
            })
            .await
            .unwrap_or_default();
        let (live, mut waiting, breakers) = (live, waiting, breakers);
        let registry = self.shared.read_registry();
        let (mut doc, progress, sheet_waits) = match live {
            Some((mut doc, progress, sheet_waits, compacted)) => {
                if !compacted.is_empty() {
                    for sheet in registry.load_sheets(job_id, &compacted)? {
                        doc.sheets.insert(sheet.sheet_num, sheet);
                    }
                }
                (doc, progress, sheet_waits)
            }
            None => {
                let Some(record) = registry.get_job(job_id)? else {
                    return Err(JobError::NotFound(job_id.to_string()));
                };
                // A view of a stored job is read without building every sheet (issue 24).
                let view = sheets.clone().or_else(|| {
                    record
                        .total_sheets
                        .is_some_and(|n| n > DEFAULT_FULL_SHEETS)
                        .then(|| SheetQuery::summary(DEFAULT_FULL_SHEETS))
                });
                if let Some(query) = view {
                    return match status_view::from_registry(&registry, &record, query)? {
                        Some(mut doc) => {
                            doc.hooks_running = hooks_due(&doc, &record);
                            attach_hooks(&registry, job_id, &mut doc);
                            drop(registry);
                            doc.waiting_reason = waiting;
                            Ok(JobStatusResult::Checkpoint(Box::new(doc)))
                        }
                        None => Ok(JobStatusResult::Record(JobListEntry::Registry(
                            wire::registry_job(&record),
                        ))),
                    };
                }
                match registry.load_checkpoint(job_id)? {
                    Some(cp) => {
                        let mut doc = status_doc(&cp, &record, sheets, || None);
                        doc.hooks_running = hooks_due(&doc, &record);
                        (doc, Vec::new(), Vec::new())
                    }
                    None => {
                        return Ok(JobStatusResult::Record(JobListEntry::Registry(
                            wire::registry_job(&record),
                        )))
                    }
                }
            }
        };
        attach_hooks(&registry, job_id, &mut doc);
        let unfinished = matches!(
            doc.status,
            mozart_state::JobStatus::Pending | mozart_state::JobStatus::Running
        );
        // The job's own waits first (a `shell` limit holds this job only), then the
        // instruments' waits, which hold every job.
        let limits = if !sheet_waits.is_empty() || unfinished {
            let now = mozart_state::epoch_now();
            let mut limits = registry.job_rate_limits(job_id, now).unwrap_or_default();
            limits.extend(registry.active_rate_limits(now).unwrap_or_default());
            limits
        } else {
            Vec::new()
        };
        let mut sheet_waits = sheet_waits;
        if unfinished && !limits.is_empty() {
            restored_waits(&doc, &progress, &limits, &mut sheet_waits);
        }
        if !sheet_waits.is_empty() {
            add_rate_limit_waits(&mut doc, sheet_waits, &limits, mozart_state::epoch_now());
        }
        drop(registry);
        if unfinished {
            add_instrument_holds(&mut doc, breakers, &limits, mozart_state::epoch_now());
            // Nothing of it runs and a hold keeps its next sheet back: say so (issue 22).
            if waiting.is_none() && progress.is_empty() {
                waiting = doc.instrument_holds.first().map(|h| h.describe());
            }
        }
        doc.waiting_reason = waiting;
        add_live_progress(&mut doc, progress);
        Ok(JobStatusResult::Checkpoint(Box::new(doc)))
    }

    /// `job.watch` (ours): wait at most `timeout` (capped at 5 s) until `job_id` shows how it
    /// goes — a sheet completed, or it is no longer simply running (it ended, paused, or waits
    /// for a job slot) — woken by the baton task when that happens, not by polling.
    pub async fn watch(
        &self,
        job_id: &str,
        timeout: std::time::Duration,
        until_done: bool,
    ) -> Result<mozart_ipc::types::JobWatchResult, JobError> {
        let deadline = tokio::time::Instant::now() + timeout.min(std::time::Duration::from_secs(5));
        loop {
            let seen = self
                .shared
                .table
                .ask_job(job_id, |job_id, reply| table::Query::Watch {
                    job_id,
                    until_done,
                    reply,
                })
                .await;
            let Some((seen, wake)) = seen else {
                // Not loaded: a finished job the registry knows, or none at all.
                let record = lock(&self.shared.registry).get_job(job_id)?;
                let Some(record) = record else {
                    return Err(JobError::NotFound(job_id.to_string()));
                };
                return Ok(mozart_ipc::types::JobWatchResult {
                    job_id: job_id.to_string(),
                    status: record.status.as_str().to_string(),
                    sheet_completed: false,
                    timed_out: false,
                });
            };
            let result = |seen: table::WatchSeen, timed_out| mozart_ipc::types::JobWatchResult {
                job_id: job_id.to_string(),
                status: seen.status.as_str().to_string(),
                sheet_completed: seen.sheet_completed,
                timed_out,
            };
            let Some(wake) = wake else {
                return Ok(result(seen, false));
            };
            match tokio::time::timeout_at(deadline, wake).await {
                // Woken with the change: answered from it when it settles the watch.
                Ok(Ok(now)) if now.settled(until_done) => return Ok(result(now, false)),
                // A change that settles nothing, or the job left the table (dropping the
                // sender): look again.
                Ok(_) => continue,
                Err(_) => return Ok(result(seen, true)),
            }
        }
    }

    /// `job.list` (conductor.md §6.12): in-memory jobs, then registry rows, newest first.
    pub async fn list(&self) -> Result<Vec<JobListEntry>, JobError> {
        let (mut out, seen, cached) = self
            .shared
            .table
            .ask(|reply| table::Query::List { reply })
            .await
            .unwrap_or_default();
        // At most 50 registry rows besides the jobs in memory (conductor.md §6.12), so a
        // registry of thousands of jobs keeps `status` and `list` instant.
        let rows = match cached {
            Some(rows) => rows,
            None => {
                let rows: Vec<ListedRow> = lock(&self.shared.registry)
                    .list_jobs_filtered(None, Some(50))?
                    .into_iter()
                    .map(|row| {
                        let entry = JobListEntry::Registry(wire::registry_job(&row));
                        (row.job_id, row.submitted_at, entry)
                    })
                    .collect();
                let rows = Arc::new(rows);
                let keep = rows.clone();
                self.shared.table.tell(table::Fact::ListedRows(Some(keep)));
                rows
            }
        };
        for (job_id, submitted_at, entry) in rows.iter() {
            if !seen.contains(job_id) {
                out.push((*submitted_at, entry.clone()));
            }
        }
        out.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(out.into_iter().map(|(_, v)| v).collect())
    }

    /// `job.list_page` (ours): one page of the registry's jobs, newest first, with how many
    /// match in all (and, when asked, how many there are of each status). Paged at the
    /// source: the registry holds every job and each transition's status (the baton writes
    /// both in the same step), so the page is one indexed query and its cost does not grow
    /// with the jobs loaded here. A loaded job is shown as `job.list` shows it (its row is
    /// its record). The job table — whose calls queue behind every sheet event on the baton
    /// task, tens of milliseconds with 1,000 jobs running — is asked only for a paused job
    /// on the page, for how many of its sheets still run, and (with `progress`) for the
    /// loaded rows' progress, once for both (issue 24).
    pub async fn list_page(
        &self,
        p: mozart_ipc::types::ListPageParams,
    ) -> Result<mozart_ipc::status::JobPage, JobError> {
        let statuses: Option<Vec<String>> = p
            .statuses
            .map(|v| v.iter().map(|s| s.trim().to_lowercase()).collect());
        let (rows, total, counts) = {
            let registry = self.shared.read_registry();
            let (rows, total) = registry.page_jobs(statuses.as_deref(), p.limit, p.offset)?;
            let counts = if p.counts {
                Some(registry.count_jobs_by_status()?)
            } else {
                None
            };
            (rows, total, counts)
        };
        let loaded: std::collections::HashSet<String> = {
            let set = lock(&self.shared.loaded);
            rows.iter()
                .filter(|r| set.contains(&r.job_id))
                .map(|r| r.job_id.clone())
                .collect()
        };
        let paused: Vec<String> = rows
            .iter()
            .filter(|r| r.status == DaemonJobStatus::Paused && loaded.contains(&r.job_id))
            .map(|r| r.job_id.clone())
            .collect();
        // Each loaded row's progress, when asked for: in the same visit to the table, so a
        // jobs page is one call (issue 24).
        let progress: Vec<String> = if p.progress {
            rows.iter()
                .filter(|r| loaded.contains(&r.job_id))
                .map(|r| r.job_id.clone())
                .collect()
        } else {
            Vec::new()
        };
        // A loaded job's status is memory's: its row may say otherwise when saving it failed
        // (a full disk), and a list must not show a held job as running.
        let statuses: Vec<(String, DaemonJobStatus)> = rows
            .iter()
            .filter(|r| loaded.contains(&r.job_id))
            .map(|r| (r.job_id.clone(), r.status))
            .collect();
        let (pausing, progress, unsaved) = if statuses.is_empty() {
            Default::default()
        } else {
            self.shared
                .table
                .ask(|reply| table::Query::PageFacts {
                    paused,
                    progress,
                    statuses,
                    reply,
                })
                .await
                .unwrap_or_default()
        };
        let jobs = rows
            .iter()
            .map(|row| {
                if loaded.contains(&row.job_id) {
                    let mut summary = match unsaved.get(&row.job_id) {
                        Some((status, error)) => {
                            let mut held = row.clone();
                            held.status = *status;
                            held.error_message.clone_from(error);
                            wire::job_summary(&held)
                        }
                        None => wire::job_summary(row),
                    };
                    summary.pausing = pausing.get(&row.job_id).copied();
                    JobListEntry::Live(summary)
                } else {
                    JobListEntry::Registry(wire::registry_job(row))
                }
            })
            .collect();
        Ok(mozart_ipc::status::JobPage {
            jobs: mozart_ipc::status::JobList(jobs),
            total,
            offset: p.offset,
            limit: p.limit.filter(|n| *n > 0),
            counts,
            progress: p.progress.then_some(progress),
        })
    }

    /// Where `job_id` stands in the table (None when the job is not loaded or the baton is
    /// not running).
    pub(crate) async fn job_facts(&self, job_id: &str) -> Option<table::JobFacts> {
        self.shared
            .table
            .ask_job(job_id, |job_id, reply| table::Query::Job { job_id, reply })
            .await
    }

    /// `job.pause` (conductor.md §6.6): stop new dispatches; in-flight sheets finish.
    pub async fn pause(
        &self,
        job_id: &str,
    ) -> Result<Vec<mozart_ipc::types::WithdrawnSheet>, String> {
        let status = self.current_status(job_id).await?;
        if status != DaemonJobStatus::Running && status != DaemonJobStatus::Queued {
            // A job whose pause waits for its running sheets reads `pausing` everywhere
            // (status, list): it is not yet paused, and saying so would contradict them.
            if let Some(n) = self
                .job_facts(job_id)
                .await
                .and_then(|f| f.pausing)
                .filter(|_| status == DaemonJobStatus::Paused)
            {
                return Err(format!(
                    "Job '{job_id}' is already pausing: {} to finish its attempt, then \
                     it is paused",
                    mozart_config::plural(u64::from(n), "running sheet", "running sheets"),
                ));
            }
            return Err(format!(
                "Job '{job_id}' is {}, not running",
                status.as_str()
            ));
        }
        self.send(Event::PauseJob {
            job_id: job_id.to_string(),
        })?;
        self.set_status(job_id, DaemonJobStatus::Paused, None).await;
        Ok(self.withdraw_queued(job_id).await)
    }

    /// The running attempts of `job_id`: (job, sheet, its live progress).
    async fn live_progress(
        &self,
        job_id: &str,
    ) -> Vec<(String, u32, Arc<mozart_backends::Progress>)> {
        self.shared
            .table
            .ask(|reply| table::Query::LiveProgress {
                job_id: Some(job_id.to_string()),
                reply,
            })
            .await
            .unwrap_or_default()
    }

    /// Pause's part on Slurm (docs/design/distributed.md): the running sheets whose Slurm
    /// jobs still wait in the queue are taken back — cancelled, their files (the
    /// environment with its keys) removed, the sheets pending again without spending a
    /// retry, submitted anew at `mozart resume` — as a local sheet not yet started would
    /// not start. Jobs that run finish, as local sheets do. Every running attempt is asked
    /// (one still being submitted is taken back once it is in the queue; local ones ignore
    /// it); the answer waits for those in the queue now, [`WITHDRAW_WAIT`] at most (later
    /// answers show in `mozart status`).
    async fn withdraw_queued(&self, job_id: &str) -> Vec<mozart_ipc::types::WithdrawnSheet> {
        let running = self.live_progress(job_id).await;
        let mut queued = Vec::new();
        for (_, sheet_num, progress) in running {
            progress.ask_withdraw();
            if progress.activity().queued {
                queued.push((sheet_num, progress));
            }
        }
        let deadline = tokio::time::Instant::now() + WITHDRAW_WAIT;
        while queued.iter().any(|(_, p)| p.withdrawal().is_none())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut withdrawn: Vec<mozart_ipc::types::WithdrawnSheet> = queued
            .iter()
            .filter_map(|(sheet_num, p)| match p.withdrawal() {
                Some(mozart_backends::Withdrawal::Withdrawn(remote_id)) => {
                    Some(mozart_ipc::types::WithdrawnSheet {
                        sheet_num: *sheet_num,
                        remote_id,
                    })
                }
                _ => None,
            })
            .collect();
        withdrawn.sort_by_key(|w| w.sheet_num);
        if !withdrawn.is_empty() {
            tracing::info!(job_id, sheets = ?withdrawn.iter().map(|w| w.sheet_num).collect::<Vec<_>>(),
                "pause withdrew sheets from Slurm's queue");
        }
        withdrawn
    }

    /// `job.resume` (conductor.md §6.7): paused jobs continue in the baton; failed or cancelled
    /// ones are re-registered from their checkpoint (completed sheets are kept).
    pub async fn resume(
        &self,
        ctx: &ConductorCtx,
        job_id: &str,
        config_path: Option<String>,
        workspace: Option<String>,
        no_reload: bool,
    ) -> JobResponse {
        let status = match self.current_status(job_id).await {
            Ok(s) => s,
            Err(_) => return rejected(job_id, format!("Score '{job_id}' not found")),
        };
        let in_baton = self.job_facts(job_id).await.is_some_and(|f| f.in_baton);
        // The score file is read again unless told not to: a paused job whose file changed
        // goes on with the new score (its registration replaced), not the one in memory.
        let reload = status == DaemonJobStatus::Paused
            && in_baton
            && config_path.is_none()
            && !no_reload
            && self.score_file_changed(job_id).await;
        match status {
            DaemonJobStatus::Paused if in_baton && config_path.is_none() && !reload => {
                // Its workspace gone, the job would go on without the finished sheets' work.
                let record = self
                    .shared
                    .table
                    .ask_job(job_id, |job_id, reply| table::Query::Record { job_id, reply })
                    .await;
                if let Some(refusal) = record.and_then(|r| {
                    submit::workspace_gone(self, job_id, Path::new(&r.workspace), &r.config_path)
                }) {
                    return rejected(job_id, refusal);
                }
                // A job paused because its state could not be saved: save what memory holds
                // first (or stay paused, saying why); it may have ended meanwhile.
                let caught_up = self
                    .shared
                    .table
                    .ask(|reply| table::Query::CatchUp {
                        job_id: job_id.to_string(),
                        reply,
                    })
                    .await;
                match caught_up {
                    Ok(Err(e)) => {
                        return rejected(
                            job_id,
                            format!(
                                "Cannot resume '{job_id}' yet: its state still cannot be saved ({e}). Fix the cause (e.g. free disk space), then run: mozart resume {job_id}"
                            ),
                        )
                    }
                    Ok(Ok(Some(outcome))) => {
                        return JobResponse::new(
                            job_id,
                            JobResponseStatus::Accepted,
                            Some(format!(
                                "The job had already ended ({}) while its state could not be saved; its end is saved now",
                                match outcome {
                                    mozart_baton::JobOutcome::Completed => "completed",
                                    mozart_baton::JobOutcome::Failed => "failed",
                                    mozart_baton::JobOutcome::Cancelled => "cancelled",
                                }
                            )),
                        )
                    }
                    Ok(Ok(None)) | Err(_) => {}
                }
                // Told before the event: a halted job dispatches again once resumed.
                self.shared.table.tell(table::Fact::Resuming {
                    job_id: job_id.to_string(),
                });
                // A pause's request to withdraw sheets from Slurm's queue that was not acted
                // on yet (an attempt still being submitted) no longer holds.
                let running = self.live_progress(job_id).await;
                for (_, _, progress) in running {
                    progress.unask_withdraw();
                }
                // Running from the caller's point of view at once; set before the event so
                // that the baton's answer (still `queued` when no job slot is free) lands
                // after it, not under it.
                self.set_status(job_id, DaemonJobStatus::Running, None).await;
                if let Err(e) = self.send(Event::ResumeJob {
                    job_id: job_id.to_string(),
                    new_limits: None,
                }) {
                    self.set_status(job_id, DaemonJobStatus::Paused, None).await;
                    return rejected(job_id, e);
                }
                JobResponse::new(
                    job_id,
                    JobResponseStatus::Accepted,
                    Some("Job resume queued".into()),
                )
            }
            DaemonJobStatus::Paused | DaemonJobStatus::Failed | DaemonJobStatus::Cancelled => {
                let record = self
                    .shared
                    .table
                    .ask_job(job_id, |job_id, reply| table::Query::Record { job_id, reply })
                .await;
                let record = match record {
                    Some(r) => Some(r),
                    None => lock(&self.shared.registry).get_job(job_id).ok().flatten(),
                };
                let Some(record) = record else {
                    return rejected(job_id, format!("Score '{job_id}' not found"));
                };
                let config_path_given = config_path.clone();
                // The workspace a `run --workspace` gave the job stays its workspace; else the
                // score's (re-read) `workspace:` is: a workspace moved and the score edited to
                // say where it is now goes on there, not in a new empty one at the old path.
                let workspace = workspace.or_else(|| {
                    (no_reload || self.workspace_overridden(&record))
                        .then(|| record.workspace.clone())
                });
                let req = SubmitRequest {
                    config_path: config_path.unwrap_or(record.config_path.clone()),
                    workspace,
                    fresh: false,
                    no_reload: no_reload && config_path_given.is_none(),
                    resume_of: Some(job_id.to_string()),
                    ..SubmitRequest::default()
                };
                if in_baton {
                    // The new score is checked first: refused, the job stays as it is (paused,
                    // its registration kept), not ended for a score that cannot replace it.
                    let checked = submit::dry_run(self, ctx, req.clone()).await;
                    if checked.status != JobResponseStatus::Accepted {
                        return rejected(job_id, checked.message.unwrap_or_default());
                    }
                    let workspace = match &req.workspace {
                        Some(w) => PathBuf::from(w),
                        None => mozart_config::load_score(Path::new(&req.config_path))
                            .map(|s| s.config.workspace)
                            .unwrap_or_else(|_| PathBuf::from(&record.workspace)),
                    };
                    if let Some(refusal) =
                        submit::workspace_gone(self, job_id, &workspace, &req.config_path)
                    {
                        return rejected(job_id, refusal);
                    }
                    // A paused job getting a new score: end the old registration first, and
                    // wait until the baton has let go of it — otherwise its late "finished"
                    // would land on the new registration. Meanwhile the job stays paused
                    // (its end is not recorded as a cancel).
                    self.shared.table.tell(table::Fact::Replacing {
                        job_id: job_id.to_string(),
                    });
                    // Answered once the fact is in: the table knows the registration is being
                    // replaced before the baton ends it (its sheets' ends are not logged as
                    // cancelled).
                    let _ = self.job_facts(job_id).await;
                    let _ = self.send(Event::CancelJob { job_id: job_id.to_string() });
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                    while self.job_facts(job_id).await.is_some_and(|f| f.in_baton) {
                        if tokio::time::Instant::now() >= deadline {
                            return rejected(
                                job_id,
                                format!("Score '{job_id}' is still stopping its running sheets; try again in a moment"),
                            );
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                let mut resp = submit::submit(self, ctx, req).await;
                if resp.status == JobResponseStatus::Accepted {
                    // What the new score changed (another sheet count) is said with it.
                    resp.message = Some(match resp.message.take() {
                        // Nothing was left to run: the job is completed, not queued.
                        Some(m) if resp.nothing_to_run => m,
                        Some(m) if m.starts_with(submit::RESIZED) => {
                            format!("Job resume queued. {m}")
                        }
                        _ => "Job resume queued".into(),
                    });
                }
                resp
            }
            other => rejected(
                job_id,
                format!(
                    "Score '{job_id}' is {}, only PAUSED, FAILED, or CANCELLED scores can be resumed",
                    other.as_str()
                ),
            ),
        }
    }

    /// Whether the job was submitted with a workspace other than its score's (`mozart run
    /// --workspace`): its record's workspace is not the one the score it was submitted with
    /// names. Unknown (no stored score, or it no longer loads): kept as the record says.
    fn workspace_overridden(&self, record: &JobRecord) -> bool {
        let stored = lock(&self.shared.registry)
            .job_score(&record.job_id)
            .ok()
            .flatten()
            .and_then(|s| s.yaml);
        let Some(text) = stored else {
            return true;
        };
        match mozart_config::load_score_str(&text, Path::new(&record.config_path)) {
            Ok(score) => score.config.workspace != Path::new(&record.workspace),
            Err(_) => true,
        }
    }

    /// Whether the score file of a loaded job now says something else than the score it
    /// runs (the registry's copy of the text it was submitted or resumed with).
    async fn score_file_changed(&self, job_id: &str) -> bool {
        let record = self
            .shared
            .table
            .ask_job(job_id, |job_id, reply| table::Query::Record {
                job_id,
                reply,
            })
            .await;
        let Some(record) = record else {
            return false;
        };
        let stored = lock(&self.shared.registry)
            .job_score(job_id)
            .ok()
            .flatten()
            .and_then(|s| s.yaml);
        match (stored, std::fs::read_to_string(&record.config_path)) {
            (Some(running), Ok(on_disk)) => running != on_disk,
            _ => false,
        }
    }

    /// `job.modify` (conductor.md §6.8): a stopped job resumes at once with the new score; a
    /// running one is paused first and must be resumed with the new score once paused.
    pub async fn modify(
        &self,
        ctx: &ConductorCtx,
        job_id: &str,
        config_path: String,
        workspace: Option<String>,
    ) -> JobResponse {
        match self.current_status(job_id).await {
            Err(_) => rejected(job_id, format!("Job '{job_id}' not found")),
            Ok(DaemonJobStatus::Paused | DaemonJobStatus::Failed | DaemonJobStatus::Cancelled) => {
                self.resume(ctx, job_id, Some(config_path), workspace, false).await
            }
            Ok(DaemonJobStatus::Running) => match self.pause(job_id).await {
                Ok(_) => rejected(
                    job_id,
                    format!(
                        "Pause signal sent. Resume with the new score once paused: mozart resume {job_id} --config {config_path}"
                    ),
                ),
                Err(e) => rejected(job_id, e),
            },
            Ok(other) => rejected(job_id, format!("Job '{job_id}' is {}, cannot modify", other.as_str())),
        }
    }

    /// `job.cancel` (conductor.md §6.9): false when nothing is running for the job.
    pub async fn cancel(&self, job_id: &str) -> bool {
        let active = self.job_facts(job_id).await.is_some_and(|f| {
            f.in_baton
                && matches!(
                    f.status,
                    DaemonJobStatus::Running | DaemonJobStatus::Queued | DaemonJobStatus::Paused
                )
        });
        if !active && self.current_status(job_id).await == Ok(DaemonJobStatus::Paused) {
            // Paused, and no longer held by the baton (found paused when the conductor
            // started, or its registration ended by a resume whose new score was refused):
            // nothing of it runs, so its state is all there is to change.
            self.set_status(job_id, DaemonJobStatus::Cancelled, None)
                .await;
            self.cancel_unfollowed_remote_attempts(job_id).await;
            tracing::info!(event = "job.cancelled", job_id, "cancelled");
            return true;
        }
        if !active {
            // A completed job whose `on_success` hooks are running: cancelling it stops the
            // hook that runs, runs none after it and submits no chained job.
            let asked = match lock(&self.shared.hook_cancels).get(job_id) {
                Some(cancel) => cancel.send(true).is_ok(),
                None => false,
            };
            if asked {
                // The hook is killed at once; answer once the job says cancelled.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while lock(&self.shared.hook_cancels).contains_key(job_id)
                    && tokio::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            return asked;
        }
        if self
            .send(Event::CancelJob {
                job_id: job_id.to_string(),
            })
            .is_err()
        {
            return false;
        }
        // Cancelled from the caller's point of view at once (conductor.md §6.9); the baton
        // kills the in-flight attempts and persists the final state right after.
        self.set_status(job_id, DaemonJobStatus::Cancelled, None)
            .await;
        true
    }

    /// The job's stored checkpoint; `None` when it has none, or (logged, with `why` it was
    /// read) when it cannot be read.
    pub(super) fn stored_checkpoint(
        &self,
        job_id: &str,
        why: &str,
    ) -> Option<mozart_state::CheckpointState> {
        let loaded = lock(&self.shared.registry).load_checkpoint(job_id);
        loaded.unwrap_or_else(|e| {
            tracing::error!(job_id, error = %e, "cannot read the checkpoint {why}");
            None
        })
    }

    /// The remote (Slurm) jobs a paused job's sheets still have from before a restart: no
    /// musician follows them (the job is paused), and the job is cancelled, so they are
    /// cancelled with their files and their records cleared — they must not run the sheets
    /// of a cancelled job, nor keep its environment on the shared filesystem.
    async fn cancel_unfollowed_remote_attempts(&self, job_id: &str) {
        let Some(checkpoint) = self.stored_checkpoint(job_id, "to cancel its Slurm jobs") else {
            return;
        };
        let mut cleared = Vec::new();
        for sheet in checkpoint.sheets.values() {
            let Some(remote) = &sheet.remote_attempt else {
                continue;
            };
            if remote.placement == "slurm" {
                mozart_backends::placement::slurm::cancel_unfollowed(
                    &remote.remote_id,
                    &remote.job_name,
                    std::path::Path::new(&remote.dir),
                )
                .await;
            }
            let mut sheet = sheet.clone();
            sheet.remote_attempt = None;
            cleared.push(sheet);
        }
        if cleared.is_empty() {
            return;
        }
        if let Err(e) = lock(&self.shared.registry).save_sheets(job_id, &cleared) {
            tracing::error!(job_id, error = %e, "cannot clear the cancelled Slurm jobs' records");
        }
    }

    /// `job.clear` (conductor.md §6.12).
    pub async fn clear(
        &self,
        statuses: Option<Vec<String>>,
        older_than_seconds: Option<f64>,
        job_ids: Option<Vec<String>>,
    ) -> Result<mozart_ipc::types::ClearResult, JobError> {
        let mut wanted: Vec<DaemonJobStatus> = statuses
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| vec!["completed".into(), "failed".into(), "cancelled".into()])
            .iter()
            .filter_map(|s| DaemonJobStatus::parse(s))
            .collect();
        wanted.retain(|s| !s.is_active() && *s != DaemonJobStatus::Pending);
        if wanted.is_empty() {
            return Ok(mozart_ipc::types::ClearResult::default());
        }
        let now = mozart_state::epoch_now();
        let ids = job_ids.filter(|ids| !ids.is_empty());
        // Never delete a job the baton is still running (e.g. `--status paused` on a paused
        // job that is still loaded): resolve the victims first and leave live ones out.
        let live: Vec<String> = self
            .shared
            .table
            .ask(|reply| table::Query::Clear {
                statuses: wanted.clone(),
                job_ids: ids.clone(),
                older_than_seconds,
                now,
                reply,
            })
            .await
            .unwrap_or_default();
        let matching: Vec<mozart_state::JobRecord> = lock(&self.shared.registry)
            .list_jobs(true)?
            .into_iter()
            .filter(|r| wanted.contains(&r.status))
            .filter(|r| ids.as_ref().is_none_or(|ids| ids.contains(&r.job_id)))
            .filter(|r| older_than_seconds.is_none_or(|age| r.submitted_at <= now - age))
            .collect();
        // A job the baton holds is never deleted under it; a paused one (paused during this
        // conductor's run, it would resume in it) is named, not silently skipped.
        let (held, matching): (Vec<_>, Vec<_>) =
            matching.into_iter().partition(|r| live.contains(&r.job_id));
        let held_paused: Vec<String> = held
            .into_iter()
            .filter(|r| r.status == DaemonJobStatus::Paused)
            .map(|r| r.job_id)
            .collect();
        // Its on_success hooks still run (and record their results, or fail the job): kept,
        // and said so.
        let (running, victims): (Vec<_>, Vec<_>) = matching
            .into_iter()
            .partition(|r| r.options.contains_key(hooks::HOOKS_PENDING));
        let hooks_running: Vec<String> = running.into_iter().map(|r| r.job_id).collect();
        let victims: Vec<String> = victims.into_iter().map(|r| r.job_id).collect();
        if victims.is_empty() {
            return Ok(mozart_ipc::types::ClearResult {
                deleted: 0,
                hooks_running,
                held_paused,
            });
        }
        let filter = DeleteFilter {
            job_ids: Some(victims),
            statuses: Some(wanted),
            older_than_seconds,
        };
        let deleted = lock(&self.shared.registry).delete_jobs(&filter)?;
        self.shared.table.tell(table::Fact::ListedRows(None));
        if deleted > 0 {
            reclaim_registry_space(Arc::clone(&self.shared));
        }
        Ok(mozart_ipc::types::ClearResult {
            deleted: deleted as u64,
            hooks_running,
            held_paused,
        })
    }

    async fn current_status(&self, job_id: &str) -> Result<DaemonJobStatus, String> {
        if let Some(facts) = self.job_facts(job_id).await {
            return Ok(facts.status);
        }
        match lock(&self.shared.registry).get_job(job_id) {
            Ok(Some(r)) => Ok(r.status),
            Ok(None) => Err(format!("Job '{job_id}' not found")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Set a job's registry + memory status (for transitions the baton does not report).
    async fn set_status(&self, job_id: &str, status: DaemonJobStatus, error: Option<&str>) {
        let done = self
            .shared
            .table
            .ask(|reply| table::Query::SetStatus {
                job_id: job_id.to_string(),
                status,
                error: error.map(str::to_string),
                reply,
            })
            .await;
        if done.is_err() {
            // Nobody owns a table (the conductor is stopping): the registry is all there is.
            set_stored_status(&lock(&self.shared.registry), job_id, status, error);
        }
    }
}

/// [`JobManager::set_status`] on the table's side. The record and the checkpoint must agree,
/// or `list` and `status` contradict each other (e.g. a job downgraded to failed by a
/// failing hook).
pub(super) fn set_status_in(
    table: &mut table::JobTable,
    shared: &Shared,
    job_id: &str,
    status: DaemonJobStatus,
    error: Option<&str>,
) {
    let registry = lock(&shared.registry);
    if let Some(e) = table.jobs.get_mut(job_id) {
        e.record.status = status;
        if status != DaemonJobStatus::Queued {
            e.waiting = None;
        }
        if let Some(msg) = error {
            e.record.error_message = Some(msg.to_string());
        } else if status.is_active() {
            // As the registry's row: a resumed job does not show its old error.
            e.record.error_message = None;
        }
        // A live job's sheet rows are saved with each transition; a compacted one's memory
        // no longer holds them whole, so only its header is written.
        let header_only = e.compacted && e.live.is_some();
        if let Some(live) = e.live.as_mut() {
            set_checkpoint_status(live, status, error);
            let saved = if header_only {
                registry.save_header(live)
            } else {
                registry.save_checkpoint(live)
            };
            if let Err(err) = saved {
                tracing::error!(job_id, error = %err, "cannot save the job's checkpoint");
            }
            if let Err(err) = registry.set_job_status(job_id, status, error) {
                tracing::error!(job_id, error = %err, "cannot update job status in the registry");
            }
            return;
        }
    }
    set_stored_status(&registry, job_id, status, error);
}

/// [`set_status_in`] of a job whose checkpoint lives only in the registry (a finished job,
/// one this conductor has not loaded — its owed hooks ran at the start —, or any job once
/// the table is gone): the record and the stored checkpoint both, or `list` says failed
/// while `status` and `wait` say completed.
fn set_stored_status(
    registry: &mozart_state::Registry,
    job_id: &str,
    status: DaemonJobStatus,
    error: Option<&str>,
) {
    if let Some(mut stored) = registry.load_checkpoint(job_id).ok().flatten() {
        set_checkpoint_status(&mut stored, status, error);
        if let Err(err) = registry.save_checkpoint(&stored) {
            tracing::error!(job_id, error = %err, "cannot save the job's checkpoint");
        }
    }
    if let Err(err) = registry.set_job_status(job_id, status, error) {
        tracing::error!(job_id, error = %err, "cannot update job status in the registry");
    }
}

fn set_checkpoint_status(
    live: &mut mozart_state::CheckpointState,
    status: DaemonJobStatus,
    error: Option<&str>,
) {
    live.status = match status {
        DaemonJobStatus::Queued | DaemonJobStatus::Pending => JobStatus::Pending,
        DaemonJobStatus::Running => JobStatus::Running,
        DaemonJobStatus::Paused => JobStatus::Paused,
        DaemonJobStatus::Completed => JobStatus::Completed,
        DaemonJobStatus::Failed => JobStatus::Failed,
        DaemonJobStatus::Cancelled => JobStatus::Cancelled,
    };
    if let Some(msg) = error {
        live.error_message = Some(msg.to_string());
    } else if status.is_active() {
        live.error_message = None;
    }
    live.updated_at = mozart_state::Timestamp::now();
}

/// The sheets parked on a rate limit: which instrument, until when, and why in the API's or
/// CLI's own words (issue 22: `status` said nothing about a limit while a job waited on it).
fn add_rate_limit_waits(
    doc: &mut mozart_ipc::checkpoint::JobCheckpoint,
    waiting: Vec<(u32, String)>,
    limits: &[mozart_state::RateLimitRecord],
    now: f64,
) {
    for (num, instrument) in waiting {
        let Some(sheet) = doc.sheets.get_mut(&num) else {
            continue;
        };
        let limit = limits.iter().find(|l| l.instrument == instrument);
        sheet.rate_limit = Some(Box::new(mozart_ipc::checkpoint::RateLimitWait {
            until: limit.map(|l| l.until),
            seconds_left: limit.map_or(0.0, |l| ((l.until - now).max(0.0) * 10.0).round() / 10.0),
            reason: limit.and_then(|l| l.reason.clone()),
            instrument,
        }));
    }
}

/// Sheets that waited on a rate limit when the conductor stopped (or died) and wait on it
/// again after the restart: the baton re-queued them behind the restored park, so they are
/// not among the waits it reports; `status` still shows them waiting, in the API's words
/// and with the time left (issue 22).
fn restored_waits(
    doc: &mozart_ipc::checkpoint::JobCheckpoint,
    running: &[(u32, Arc<mozart_backends::Progress>)],
    limits: &[mozart_state::RateLimitRecord],
    waits: &mut Vec<(u32, String)>,
) {
    use mozart_ipc::checkpoint::SheetStatus as S;
    for (num, sheet) in &doc.sheets {
        let parked = matches!(sheet.status, S::Pending | S::InProgress)
            && sheet.error_category.map(|c| c.as_str()) == Some("rate_limit");
        if !parked || waits.iter().any(|(n, _)| n == num) || running.iter().any(|(n, _)| n == num) {
            continue;
        }
        if let Some(instrument) = sheet
            .instrument_name
            .as_ref()
            .filter(|i| limits.iter().any(|l| &&l.instrument == i))
        {
            waits.push((*num, instrument.clone()));
        }
    }
}

/// The holds (an open circuit breaker, a rate-limit park) on the instruments the job's
/// unfinished sheets play, with the time left (issue 22: a job sat "pending" behind an open
/// breaker with no reason shown).
fn add_instrument_holds(
    doc: &mut mozart_ipc::checkpoint::JobCheckpoint,
    breakers: Vec<mozart_ipc::checkpoint::InstrumentHold>,
    limits: &[mozart_state::RateLimitRecord],
    now: f64,
) {
    use mozart_ipc::checkpoint::SheetStatus as S;
    // Nothing is held: no scan of the job's sheets (status of a 100k-sheet job stays cheap).
    if breakers.is_empty() && limits.is_empty() {
        return;
    }
    let mut playing: Vec<&str> = Vec::new();
    for sheet in doc.sheets.values() {
        if matches!(sheet.status, S::Pending | S::InProgress) {
            if let Some(name) = sheet.instrument_name.as_deref() {
                if !playing.contains(&name) {
                    playing.push(name);
                }
            }
        }
    }
    let left =
        |until: Option<f64>| until.map_or(0.0, |u| ((u - now).max(0.0) * 10.0).round() / 10.0);
    let mut holds: Vec<mozart_ipc::checkpoint::InstrumentHold> = breakers
        .into_iter()
        .filter(|b| playing.contains(&b.instrument.as_str()))
        .map(|mut b| {
            b.seconds_left = left(b.until);
            b
        })
        .collect();
    holds.extend(
        limits
            .iter()
            .filter(|l| playing.contains(&l.instrument.as_str()))
            .map(|l| mozart_ipc::checkpoint::InstrumentHold {
                instrument: l.instrument.clone(),
                kind: "rate_limit".into(),
                state: None,
                reason: l.reason.clone().unwrap_or_else(|| "rate limited".into()),
                until: Some(l.until),
                seconds_left: left(Some(l.until)),
                consecutive_failures: None,
            }),
    );
    holds.sort_by(|a, b| (&a.instrument, &a.kind).cmp(&(&b.instrument, &b.kind)));
    doc.instrument_holds = holds;
}

/// The `job.status` document of a checkpoint: with a query, the sheets it chooses; without
/// one, every sheet of a job of up to [`DEFAULT_FULL_SHEETS`] sheets (upstream's shape), the
/// summary of a larger one, marked as cut (issue 24).
///
/// `snapshot`: the view's snapshot when the caller keeps one (asked only for a view).
fn status_doc<'a>(
    cp: &CheckpointState,
    record: &JobRecord,
    query: Option<SheetQuery>,
    snapshot: impl FnOnce() -> Option<&'a serde_json::Value>,
) -> mozart_ipc::checkpoint::JobCheckpoint {
    match query {
        Some(q) => wire::job_status_view(cp, record, q, snapshot()),
        None if cp.total_sheets > DEFAULT_FULL_SHEETS
            || cp.sheets.len() > DEFAULT_FULL_SHEETS as usize =>
        {
            wire::job_status_view(
                cp,
                record,
                SheetQuery::summary(DEFAULT_FULL_SHEETS),
                snapshot(),
            )
        }
        None => wire::job_status_checkpoint(cp, record),
    }
}

/// The `job.status` document of a loaded job (None when it has no live checkpoint), as
/// [`status_doc`] makes it, but a view counts the packed facts kept beside the live
/// checkpoint ([`LiveFacts`], made at the first view and kept up to date by the host with
/// each sheet transition) instead of walking every sheet state, and copies only the sheets
/// it shows: a summary of a running 100,000-sheet job holds the baton task for a fraction
/// of a millisecond instead of tens (issue 24).
pub(super) fn live_status_doc(
    e: &mut JobEntry,
    query: Option<SheetQuery>,
) -> Option<mozart_ipc::checkpoint::JobCheckpoint> {
    let live = e.live.as_ref()?;
    let query = match query {
        Some(q) => q,
        None if live.total_sheets > DEFAULT_FULL_SHEETS
            || live.sheets.len() > DEFAULT_FULL_SHEETS as usize =>
        {
            SheetQuery::summary(DEFAULT_FULL_SHEETS)
        }
        None => return Some(wire::job_status_checkpoint(live, &e.record)),
    };
    if !e.view_facts.as_ref().is_some_and(|f| f.fits(live)) {
        e.view_facts = Some(LiveFacts::of(live));
    }
    let facts = e.view_facts.as_ref()?;
    let mut builder = mozart_ipc::sheet_view::ViewBuilder::new(query, live.total_sheets);
    facts.add_to(&mut builder);
    // The job-level part, then only the chosen sheets: the same document as
    // `wire::job_status_view` of the whole checkpoint.
    let mut header = live.header();
    for n in builder.chosen() {
        if let Some(sheet) = live.sheets.peek(n) {
            header.sheets.insert(*n, sheet.into_owned());
        }
    }
    let mut doc = wire::job_status_checkpoint(&header, &e.record);
    doc.config_snapshot = e
        .view_snapshot
        .get_or_init(|| live.config_snapshot.as_ref().map(wire::view_snapshot))
        .clone();
    doc.sheets_view = Some(builder.finish());
    Some(doc)
}

/// Pages of the registry freed by one reclaim step: 4 MiB of 4 KiB pages, a few
/// milliseconds of holding the registry.
const RECLAIM_STEP_PAGES: u32 = 1024;

/// Give the disk space of deleted jobs back (`mozart clear`), off the caller's path: a
/// blocking task frees the registry's free pages a step at a time, letting go of the
/// registry between steps so that running jobs' writes wait for one step at most.
fn reclaim_registry_space(shared: Arc<Shared>) {
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let (mut steps, mut longest) = (0u32, std::time::Duration::ZERO);
        loop {
            let step_started = std::time::Instant::now();
            let step = lock(&shared.registry).reclaim_free_pages(RECLAIM_STEP_PAGES);
            steps += 1;
            longest = longest.max(step_started.elapsed());
            match step {
                Ok(0) => break,
                Ok(_) => std::thread::yield_now(),
                Err(e) => {
                    tracing::warn!(error = %e, "registry.reclaim_failed");
                    return;
                }
            }
        }
        tracing::info!(
            steps,
            seconds = started.elapsed().as_secs_f64(),
            longest_step_seconds = longest.as_secs_f64(),
            "registry.space_reclaimed"
        );
    });
}

/// What the running sheets' instruments reported so far (issue 13: progress while a CLI
/// streams, not only after it exits).
fn add_live_progress(
    doc: &mut mozart_ipc::checkpoint::JobCheckpoint,
    running: Vec<(u32, Arc<mozart_backends::Progress>)>,
) {
    for (num, progress) in running {
        let Some(sheet) = doc.sheets.get_mut(&num) else {
            continue;
        };
        // A remote job a restarted conductor re-attached to began before this conductor
        // dispatched the sheet: the sheet's line (`in_progress (…)`, its start) counts from
        // the job's start, as Live Progress's "Running for" does — not from the restart.
        if let Some(began) = progress.began_at() {
            sheet.started_at = Some(mozart_ipc::time::Timestamp::from_epoch(began));
        }
        let a = progress.activity();
        sheet.live = Some(Box::new(mozart_ipc::checkpoint::LiveProgress {
            elapsed_seconds: progress.running_for().as_secs_f64(),
            idle_seconds: progress.idle_for().as_secs_f64(),
            output_bytes: progress.bytes_seen(),
            tool_calls: a.tool_calls,
            last_tool: a.last_tool,
            input_tokens: a.input_tokens,
            output_tokens: a.output_tokens,
            api_retries: a.api_retries,
            last_event: a.last_event,
            queued: a.queued,
        }));
    }
}

fn rejected(job_id: &str, message: String) -> JobResponse {
    JobResponse::rejected(job_id, message)
}

impl JobHost for JobManager {
    fn recover<'a>(
        &'a self,
        ctx: &'a Arc<ConductorCtx>,
    ) -> BoxFuture<'a, Result<(), ConductorError>> {
        Box::pin(async move {
            // Before any job resumes: end instrument groups a killed conductor left running,
            // so a re-dispatched attempt never runs beside its predecessor.
            let dir = self.shared.inflight_dir.clone();
            let _ = tokio::task::spawn_blocking(move || {
                reaper::reap_leftovers(&dir, Duration::from_secs(5))
            })
            .await;
            // The journal of this conductor's groups, which the watchdog follows from now on.
            match self.shared.inflight.open() {
                Ok(()) => {
                    if let Some(w) = &self.shared.watchdog {
                        w.journal_ready();
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot create the in-flight journal; the watchdog is told of each instrument group directly");
                }
            }
            self.start_baton(ctx);
            recovery::recover(self, ctx).await
        })
    }

    fn counts(&self) -> BoxFuture<'_, JobCounts> {
        Box::pin(async move {
            self.shared
                .table
                .ask(|reply| table::Query::Counts { reply })
                .await
                .unwrap_or_default()
        })
    }

    fn shutdown(&self, graceful: bool, timeout: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Remote attempts (Slurm jobs) outlive a stopping conductor and are re-attached to
            // by the next one, instead of being cancelled with it (docs/design/distributed.md).
            mozart_backends::placement::detach_remote_attempts();
            let _ = self.send(Event::ShutdownRequested { graceful });
            let handle = lock(&self.baton).take();
            if let Some(handle) = handle {
                let mut join = std::pin::pin!(handle.join());
                if tokio::time::timeout(timeout, &mut join).await.is_err() {
                    // Sheets still running now are the conductor's to interrupt, not failed
                    // attempts: the baton stops for good first (a forced stop kills them and
                    // changes no state), so that what the instruments report once they are
                    // ended below — "terminated by SIGTERM" — reaches no one. They stay in
                    // progress in the registry and run again on the next start without
                    // spending a retry, as after a conductor crash.
                    tracing::warn!(
                        "baton did not stop within the shutdown timeout; \
                         interrupting the sheets still running"
                    );
                    let _ = self.send(Event::ShutdownRequested { graceful: false });
                    if tokio::time::timeout(Duration::from_secs(10), &mut join)
                        .await
                        .is_err()
                    {
                        tracing::warn!("baton did not stop after the forced shutdown");
                    }
                }
            }
            // Attempts still running (the shutdown timeout passed, or a forced stop) and
            // what their instruments detached (setsid, double fork) end with the conductor,
            // not after it: SIGTERM, the kill grace, SIGKILL.
            let ended = tokio::task::spawn_blocking(|| {
                mozart_backends::descendants::end_all(mozart_backends::DEFAULT_KILL_GRACE)
            })
            .await
            .unwrap_or(0);
            if ended > 0 {
                tracing::info!(
                    attempts = ended,
                    "ended the processes of unfinished attempts"
                );
            }
            self.shared.inflight.close();
            // Outcomes the learning writer is still gathering go to the store before exit.
            if let Some(learning) = &self.shared.learning {
                learning.flush(Duration::from_secs(5)).await;
            }
        })
    }

    fn rate_limits(&self) -> mozart_ipc::types::RateLimitsResult {
        let now = mozart_state::epoch_now();
        let remaining = |until: f64| ((until - now) * 10.0).round() / 10.0;
        let mut result = mozart_ipc::types::RateLimitsResult::default();
        let registry = lock(&self.shared.registry);
        if let Ok(limits) = registry.active_rate_limits(now) {
            for l in limits {
                result.backends.insert(
                    l.instrument.clone(),
                    mozart_ipc::types::RateLimitWindow {
                        seconds_remaining: remaining(l.until),
                        until: Some(l.until),
                    },
                );
            }
        }
        // A `shell` limit holds only the job that hit it (its own row): listed with the job,
        // as `clear_rate_limits` clears it with the instrument's.
        if let Ok(limits) = registry.active_job_rate_limits(now) {
            result.job_limits = limits
                .into_iter()
                .map(|(job_id, l)| mozart_ipc::types::JobRateLimit {
                    job_id,
                    instrument: l.instrument,
                    seconds_remaining: remaining(l.until),
                    until: l.until,
                    reason: l.reason,
                })
                .collect();
        }
        drop(registry);
        result.active_limits = (result.backends.len() + result.job_limits.len()) as u64;
        result
    }

    fn observer_events<'a>(
        &'a self,
        job_id: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Vec<MonitorEvent>> {
        let job_id = job_id.map(str::to_string);
        Box::pin(async move {
            self.shared
                .table
                .ask(|reply| table::Query::ObserverEvents {
                    job_id,
                    limit,
                    reply,
                })
                .await
                .unwrap_or_default()
        })
    }

    fn learning_patterns(&self, limit: u32) -> Vec<mozart_ipc::status::LearnedPattern> {
        let Some(learning) = &self.shared.learning else {
            return Vec::new();
        };
        learning.patterns(limit)
    }

    fn config_reloaded(&self, config: &mozart_conductor::DaemonConfig) {
        use std::sync::atomic::Ordering;
        let before = self
            .shared
            .max_concurrent_jobs
            .swap(config.max_concurrent_jobs, Ordering::SeqCst);
        if before != config.max_concurrent_jobs {
            tracing::info!(
                from = before,
                to = config.max_concurrent_jobs,
                "manager.max_concurrent_jobs_changed"
            );
        }
        // The baton applies the limit to its next admissions; what holds a slot now keeps
        // it. (`max_concurrent_sheets` also sizes each instrument's default limit when the
        // instrument is first used, so it changes on restart only.)
        let _ = self.send(Event::ConfigReloaded {
            max_concurrent_sheets: None,
            max_concurrent_jobs: Some(config.max_concurrent_jobs),
            instruments: Vec::new(),
        });
    }

    fn clear_rate_limits(&self, instrument: Option<&str>) -> u64 {
        let cleared = lock(&self.shared.registry)
            .clear_rate_limit(instrument)
            .unwrap_or(0);
        let _ = self.send(Event::ClearRateLimit {
            instrument: instrument.map(str::to_string),
        });
        cleared as u64
    }
}

/// A registry error at start-up: a damaged file says what to do (it cannot be read, and no
/// retry helps), anything else is a failed recovery.
pub(crate) fn registry_error(
    path: &std::path::Path,
    doing: &str,
    e: &mozart_state::StateError,
) -> ConductorError {
    if !e.is_damaged() {
        return ConductorError::Recovery(format!("{doing}: {e}"));
    }
    ConductorError::RegistryDamaged {
        message: e.to_string(),
        fix: match e {
            mozart_state::StateError::NotARegistry { .. } => e.fix(path),
            _ => format!("Its jobs cannot be read. {}", e.fix(path)),
        },
    }
}
