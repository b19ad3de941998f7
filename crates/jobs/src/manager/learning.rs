//! The conductor's use of the global learning store (learning.md §6, §10): learned patterns
//! go into prompts, sheet and job outcomes go into the store. A learning failure never fails
//! a job or blocks the baton loop: writes run on the blocking pool and errors are logged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mozart_learning::{
    ApplicationMode, ContextTags, JobOutcome, LearningStore, PatternSelection, SelectionConfig,
    SheetOutcome, ValidationCheck, XorShift64,
};
use mozart_state::{SheetState, SheetStatus};

use super::{lock, JobRun};

/// Patterns chosen for one prompt.
#[derive(Debug, Clone, Default)]
pub(crate) struct Injected {
    pub section: Option<String>,
    pub pattern_ids: Vec<String>,
    pub exploration: bool,
}

impl From<PatternSelection> for Injected {
    fn from(selection: PatternSelection) -> Self {
        Injected {
            section: selection.prompt_section(),
            pattern_ids: selection.pattern_ids(),
            exploration: selection.mode == ApplicationMode::Exploration,
        }
    }
}

/// The learning store, if it could be opened.
pub(crate) struct Learning {
    store: Arc<LearningStore>,
    rng: Mutex<XorShift64>,
    /// Outcomes waiting to be written, in order; one writer drains them on the blocking
    /// pool, all consecutive sheet outcomes in one transaction.
    queue: Arc<Mutex<VecDeque<Outcome>>>,
    writing: Arc<AtomicBool>,
}

enum Outcome {
    Sheet(SheetOutcome),
    Job(JobOutcome),
}

impl std::fmt::Debug for Learning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learning").finish_non_exhaustive()
    }
}

impl Learning {
    /// Open the store; on failure the conductor runs without learning (and says why).
    pub(crate) fn open(path: &std::path::Path) -> Option<Arc<Learning>> {
        match LearningStore::open(path) {
            Ok(store) => Some(Arc::new(Learning {
                store: Arc::new(store),
                rng: Mutex::new(XorShift64::from_entropy()),
                queue: Arc::default(),
                writing: Arc::default(),
            })),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "learning store unavailable; running without learning");
                None
            }
        }
    }

    /// The "Learned Patterns" section for a sheet whose validations have these types.
    /// Blocking (SQLite reads): call it from the blocking pool, or try [`Learning::try_select`]
    /// first.
    pub(crate) fn select(&self, run: &JobRun, rule_types: &[String], instrument: &str) -> Injected {
        if let Some(injected) = self.try_select(run, rule_types, instrument) {
            return injected;
        }
        let Some((tags, selection_cfg)) = Self::query(run, rule_types, instrument) else {
            return Injected::default();
        };
        let mut rng = lock(&self.rng);
        match self
            .store
            .patterns_for_prompt(&tags, &selection_cfg, &mut rng)
        {
            Ok(selection) => Injected::from(selection),
            Err(e) => {
                tracing::warn!(job_id = %run.job_id, error = %e, "learning: pattern selection failed");
                Injected::default()
            }
        }
    }

    /// [`Learning::select`] when the store can answer from memory (the usual case: every
    /// sheet of a job asks the same question), without blocking; `None` when SQLite has to
    /// be asked — then call `select` on the blocking pool. Same choices either way.
    pub(crate) fn try_select(
        &self,
        run: &JobRun,
        rule_types: &[String],
        instrument: &str,
    ) -> Option<Injected> {
        let Some((tags, selection_cfg)) = Self::query(run, rule_types, instrument) else {
            return Some(Injected::default());
        };
        let mut rng = lock(&self.rng);
        self.store
            .cached_patterns_for_prompt(&tags, &selection_cfg, &mut rng)
            .map(Injected::from)
    }

    /// What a sheet's selection asks, or `None` when the score does not use global patterns.
    fn query(
        run: &JobRun,
        rule_types: &[String],
        instrument: &str,
    ) -> Option<(ContextTags, SelectionConfig)> {
        let cfg = &run.config.learning;
        if !cfg.enabled || !cfg.use_global_patterns {
            return None;
        }
        let selection_cfg = SelectionConfig {
            exploration_rate: cfg.exploration_rate,
            exploration_min_priority: cfg.exploration_min_priority,
            instrument: Some(instrument.to_string()),
            ..SelectionConfig::default()
        };
        Some((ContextTags::for_validations(rule_types), selection_cfg))
    }

    /// Learned patterns for `daemon.learning.patterns` (errors give an empty list).
    pub(crate) fn patterns(&self, limit: u32) -> Vec<mozart_ipc::status::LearnedPattern> {
        match self.store.patterns(limit as usize) {
            Ok(list) => list.iter().map(crate::wire::learned_pattern).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "learning: cannot list patterns");
                Vec::new()
            }
        }
    }

    /// Record a sheet's terminal outcome (fire and forget).
    pub(crate) fn record_sheet(&self, outcome: SheetOutcome) {
        self.enqueue(Outcome::Sheet(outcome));
    }

    /// Record a finished job: pattern detection, then lifecycle and trust (fire and forget).
    /// Written after every sheet outcome recorded before it.
    pub(crate) fn record_job(&self, job: JobOutcome) {
        self.enqueue(Outcome::Job(job));
    }

    /// Wait (at most `limit`) until every queued outcome is written — at shutdown, so the
    /// writer's gathering pause loses nothing.
    pub(crate) async fn flush(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while (self.writing.load(Ordering::Acquire) || !lock(&self.queue).is_empty())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    fn enqueue(&self, outcome: Outcome) {
        lock(&self.queue).push_back(outcome);
        if self.writing.swap(true, Ordering::AcqRel) {
            return; // the writer running now takes it
        }
        let (store, queue, writing) =
            (self.store.clone(), self.queue.clone(), self.writing.clone());
        tokio::task::spawn_blocking(move || loop {
            // Let outcomes gather: a commit (WAL frames for the executions table and its
            // indexes) costs about as much as the rows in it, and 20 sheets in flight
            // finish a few milliseconds apart. An outcome lost to a crash in this window is
            // written again from the checkpoint when the job ends (the store keeps it once).
            std::thread::sleep(COALESCE);
            let batch: Vec<Outcome> = lock(&queue).drain(..).collect();
            if batch.is_empty() {
                writing.store(false, Ordering::Release);
                // Something queued between the drain and the store: take it ourselves
                // unless another writer already did.
                if lock(&queue).is_empty() || writing.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            write_outcomes(&store, batch);
        });
    }
}

/// How long the writer waits for more outcomes before a commit.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(50);

fn write_outcomes(store: &LearningStore, batch: Vec<Outcome>) {
    let mut sheets: Vec<SheetOutcome> = Vec::new();
    for outcome in batch {
        match outcome {
            Outcome::Sheet(o) => sheets.push(o),
            Outcome::Job(job) => {
                write_sheets(store, std::mem::take(&mut sheets));
                if let Err(e) = store.record_job_outcome(&job) {
                    tracing::warn!(job_id = %job.job_id, error = %e, "learning: cannot record job outcome");
                    continue;
                }
                if let Err(e) = store.maintain_after_job() {
                    tracing::warn!(job_id = %job.job_id, error = %e, "learning: pattern maintenance failed");
                }
            }
        }
    }
    write_sheets(store, sheets);
}

fn write_sheets(store: &LearningStore, sheets: Vec<SheetOutcome>) {
    if sheets.is_empty() {
        return;
    }
    let committed = store.batch(|s| {
        for o in &sheets {
            if let Err(e) = s.record_sheet_outcome(o) {
                tracing::warn!(job_id = %o.job_id, sheet = o.sheet_num, error = %e, "learning: cannot record sheet outcome");
            }
        }
    });
    if let Err(e) = committed {
        tracing::warn!(outcomes = sheets.len(), error = %e, "learning: cannot record sheet outcomes");
    }
}

/// Whether a sheet has an outcome for the learning store: it ran (an attempt reached its
/// instrument) or was skipped (learning.md §6.2: started, completed, failed or skipped). A
/// sheet blocked by a failed dependency or stopped by a cancel before it started is no
/// execution: recording it counted never-run sheets in `learning-stats` ("18 executions,
/// 33 % first-attempt success" for 8 sheets that ran, 6 of them at once).
pub(crate) fn has_outcome(sheet: &SheetState) -> bool {
    match sheet.status {
        SheetStatus::Completed | SheetStatus::Skipped => true,
        SheetStatus::Failed => sheet.attempt_count > 0,
        SheetStatus::Pending | SheetStatus::InProgress => false,
    }
}

/// A sheet's outcome as the learning store wants it.
pub(crate) fn sheet_outcome(run: &JobRun, sheet: &SheetState, applied: &Injected) -> SheetOutcome {
    let mut o = SheetOutcome::new(&run.job_id, sheet.sheet_num, &run.workspace);
    o.status = sheet.status;
    o.attempts = sheet.attempt_count;
    o.completion_attempts = sheet.completion_attempts;
    o.validation_pass_rate = sheet.last_pass_percentage.map(|p| p / 100.0);
    o.validations = sheet
        .validation_details
        .iter()
        .flatten()
        .map(|d| ValidationCheck {
            rule_type: d.rule_type.clone().unwrap_or_default(),
            passed: d.passed,
            confidence: d.confidence,
            failure_reason: d.failure_reason.clone(),
            failure_category: None,
            error_code: None,
            suggested_fix: None,
        })
        .collect();
    o.error_codes = sheet.error_code.iter().cloned().collect();
    o.duration_seconds = sheet.execution_duration_seconds.unwrap_or(0.0);
    o.model = sheet.instrument_model.clone();
    o.instrument = sheet.instrument_name.clone();
    // The sheet's own completion time keys the outcome, so the per-sheet record and the
    // job-end batch name the same outcome and the store keeps it once.
    o.finished_at_epoch = sheet
        .completed_at
        .as_ref()
        .and_then(|t| t.to_epoch())
        .unwrap_or_else(mozart_state::epoch_now);
    o.applied_patterns = applied.pattern_ids.clone();
    o.application_mode = if applied.exploration {
        ApplicationMode::Exploration
    } else {
        ApplicationMode::Exploitation
    };
    o
}
