//! What the conductor tells the store about finished sheets and jobs (learning.md §6), and
//! the `executions` rows made from it.

use std::path::PathBuf;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::error::Result;
use crate::patterns::{ApplicationMode, PatternApplication};
use crate::store::{new_row_id, LearningStore};
use crate::time::Now;

/// Final state of a sheet, as stored in `executions.status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SheetStatus {
    /// Never started.
    Pending,
    /// Still running (an interrupted job).
    InProgress,
    /// Validations passed.
    Completed,
    /// Retries exhausted or fatal error.
    Failed,
    /// Skipped by a condition or by the user.
    Skipped,
}

impl SheetStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

/// One validation check's result, as far as detection cares (§6.3 `validation_results`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValidationCheck {
    /// Rule type (`file_exists`, `content_contains`, …).
    pub rule_type: String,
    /// Whether it passed.
    pub passed: bool,
    /// The check's confidence (1.0 when the rule has none).
    pub confidence: Option<f64>,
    /// Why it failed.
    pub failure_reason: Option<String>,
    /// Failure category (e.g. `missing`, `malformed`).
    pub failure_category: Option<String>,
    /// A fix the validator proposed.
    pub suggested_fix: Option<String>,
    /// Error code attached to the failure.
    pub error_code: Option<String>,
}

/// Everything the store needs about one sheet's final outcome. The conductor maps its
/// checkpoint onto these plain fields.
#[derive(Clone, Debug, PartialEq)]
pub struct SheetOutcome {
    /// Job id (hashed for storage, §5).
    pub job_id: String,
    /// 1-based sheet number.
    pub sheet_num: u32,
    /// Job workspace (hashed for storage, §5).
    pub workspace: PathBuf,
    /// Final status.
    pub status: SheetStatus,
    /// Cumulative execution attempts (1 = first try).
    pub attempts: u32,
    /// Completion-mode attempts.
    pub completion_attempts: u32,
    /// Share of validations passed, 0.0–1.0; `None` when no validation ran.
    pub validation_pass_rate: Option<f64>,
    /// Individual validation results.
    pub validations: Vec<ValidationCheck>,
    /// Error codes of failed attempts, oldest first (`E101`, …).
    pub error_codes: Vec<String>,
    /// Wall-clock execution time.
    pub duration_seconds: f64,
    /// Model used, when known.
    pub model: Option<String>,
    /// Instrument profile name (scopes learned patterns).
    pub instrument: Option<String>,
    /// When the sheet finished (epoch seconds; [`SheetOutcome::new`] sets "now"). Together
    /// with job and sheet it identifies the outcome, so recording it twice stores it once.
    pub finished_at_epoch: f64,
    /// Ids of the patterns injected into this sheet's prompt, and how they were chosen.
    pub applied_patterns: Vec<String>,
    /// Mode of the injection draw.
    pub application_mode: ApplicationMode,
    /// Grounding confidence, when grounding hooks ran.
    pub grounding_confidence: Option<f64>,
}

impl SheetOutcome {
    /// An outcome with neutral defaults, to fill in field by field.
    pub fn new(job_id: impl Into<String>, sheet_num: u32, workspace: impl Into<PathBuf>) -> Self {
        SheetOutcome {
            job_id: job_id.into(),
            sheet_num,
            workspace: workspace.into(),
            status: SheetStatus::Pending,
            attempts: 1,
            completion_attempts: 0,
            validation_pass_rate: None,
            validations: Vec::new(),
            error_codes: Vec::new(),
            duration_seconds: 0.0,
            model: None,
            instrument: None,
            finished_at_epoch: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            applied_patterns: Vec::new(),
            application_mode: ApplicationMode::Exploitation,
            grounding_confidence: None,
        }
    }

    /// Retries used: attempts beyond the first.
    pub fn retry_count(&self) -> u32 {
        self.attempts.saturating_sub(1)
    }

    /// Completed on the first attempt without completion mode. Upstream counts any sheet
    /// with ≤ 1 attempt, even a failed one (§6.3); a failure is not a success.
    pub fn success_without_retry(&self) -> bool {
        self.status == SheetStatus::Completed && self.attempts <= 1 && self.completion_attempts == 0
    }

    /// Pass rate on the 0–1 scale, 0.5 when unknown. Upstream's runner passes 0/50/100 to
    /// thresholds written for 0–1 (§6.3 scale quirk); we use the scale the detector expects.
    pub fn pass_rate(&self) -> f64 {
        self.validation_pass_rate.unwrap_or(0.5).clamp(0.0, 1.0)
    }

    /// Every validation passed.
    pub fn fully_validated(&self) -> bool {
        self.pass_rate() >= 1.0
    }

    /// `executions.confidence_score` (§6.4).
    pub fn confidence_score(&self) -> f64 {
        let mut c = self.pass_rate() - 0.1 * f64::from(self.retry_count().min(5));
        if self.success_without_retry() {
            c = (c + 0.1).min(1.0);
        }
        c.clamp(0.0, 1.0)
    }
}

/// How one job's run ended, for pattern detection over all its sheets (§6.2).
#[derive(Clone, Debug, PartialEq)]
pub struct JobOutcome {
    /// Job id.
    pub job_id: String,
    /// Every sheet that ran in this job (completed, failed or skipped).
    pub sheets: Vec<SheetOutcome>,
    /// Instrument the job ran on (scopes the detected patterns).
    pub instrument: Option<String>,
}

/// What [`LearningStore::record_job_outcome`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JobLearningSummary {
    /// `executions` rows written (sheets already recorded are not written again).
    pub outcomes_recorded: usize,
    /// Patterns detected and upserted.
    pub patterns_detected: usize,
    /// Patterns whose priority was re-weighted.
    pub priorities_reweighted: usize,
}

impl LearningStore {
    /// Records one sheet's final outcome: an `executions` row, then feedback for every
    /// pattern that was injected into its prompt (§6.1 steps 6–7, §10.6). Skipped and
    /// never-finished sheets give no feedback. Returns the execution row id. Recording the
    /// same outcome again (same job, sheet and finish time — a replay after a conductor
    /// restart) returns the existing row and gives no second feedback.
    pub fn record_sheet_outcome(&self, outcome: &SheetOutcome) -> Result<String> {
        let now = self.now();
        let row = self.execution_row(outcome, &now);
        let (exec_id, fresh) = self.write_one(
            || {
                format!(
                    "recording outcome of job {} sheet {}",
                    outcome.job_id, outcome.sheet_num
                )
            },
            |tx| insert_execution_once_tx(tx, outcome, &row),
        )?;
        if fresh && matches!(outcome.status, SheetStatus::Completed | SheetStatus::Failed) {
            // Success means validations passed on the first try: a success after a retry
            // counts against the pattern (§10.6).
            let led_to_success = outcome.fully_validated() && outcome.success_without_retry();
            for pattern_id in &outcome.applied_patterns {
                self.record_pattern_application(&PatternApplication {
                    pattern_id: pattern_id.clone(),
                    execution_id: exec_id.clone(),
                    led_to_success,
                    retry_count_before: 0,
                    retry_count_after: if outcome.success_without_retry() {
                        0
                    } else {
                        1
                    },
                    grounding_confidence: outcome.grounding_confidence,
                })?;
                if led_to_success {
                    self.update_success_factors(pattern_id, outcome)?;
                }
            }
        }
        Ok(exec_id)
    }

    /// Job-end aggregation (§6.2): writes `executions` rows for sheets not recorded yet,
    /// detects patterns across the job's sheets, upserts them, and re-weights priorities.
    /// Safe to call again for a resumed job: a sheet outcome already stored (same job,
    /// sheet and finish time) is not stored twice, unlike upstream.
    pub fn record_job_outcome(&self, job: &JobOutcome) -> Result<JobLearningSummary> {
        let now = self.now();
        // One transaction for all of the job's rows: at job end nearly every sheet is
        // already stored, so this is a lookup per sheet, and a commit per lookup cost more
        // than the lookups. A failure stores none of them (the job end can be replayed).
        let outcomes_recorded = self.write(
            || format!("recording sheet outcomes of job {}", job.job_id),
            |tx| {
                let mut written = 0;
                for sheet in &job.sheets {
                    let row = self.execution_row(sheet, &now);
                    if existing_execution_tx(tx, sheet.sheet_num, &row)?.is_none() {
                        insert_execution_tx(tx, sheet, &row)?;
                        written += 1;
                    }
                }
                Ok(written)
            },
        )?;
        let mut summary = JobLearningSummary {
            outcomes_recorded,
            ..JobLearningSummary::default()
        };
        let detected = crate::detect::detect_all(&job.sheets);
        for pattern in &detected {
            let draft = pattern.to_draft(job.instrument.clone());
            match self.record_pattern(&draft) {
                Ok(_) => summary.patterns_detected += 1,
                Err(e) => tracing::warn!(job_id = %job.job_id, pattern = %draft.pattern_name,
                    error = %e, "learning.pattern_record_failed"),
            }
        }
        summary.priorities_reweighted = self.reweight_priorities()?;
        Ok(summary)
    }
}

/// What an `executions` row stores beyond the outcome's own fields, computed before the
/// transaction. Job, sheet and `started_at` identify the outcome (§6.1, recorded once).
struct ExecutionRow {
    job_hash: String,
    workspace_hash: String,
    /// The outcome's finish time, UTC (§2.1).
    started_at: String,
    /// When it was recorded, naive local time.
    completed_at: String,
}

impl LearningStore {
    fn execution_row(&self, o: &SheetOutcome, now: &Now) -> ExecutionRow {
        ExecutionRow {
            job_hash: self.job_hash(&o.job_id),
            workspace_hash: self.workspace_hash(&o.workspace),
            started_at: now.utc_iso_of_epoch(o.finished_at_epoch),
            completed_at: now.local_iso(),
        }
    }
}

fn existing_execution_tx(
    tx: &Connection,
    sheet_num: u32,
    row: &ExecutionRow,
) -> rusqlite::Result<Option<String>> {
    tx.prepare_cached(
        "SELECT id FROM executions WHERE job_hash = ?1 AND sheet_num = ?2 AND started_at = ?3
          LIMIT 1",
    )?
    .query_row(params![row.job_hash, sheet_num, row.started_at], |r| {
        r.get(0)
    })
    .optional()
}

/// Column list and values of an `executions` insert; `?3`–`?5` are job hash, sheet and
/// `started_at`, which the duplicate check reuses.
macro_rules! insert_execution_sql {
    () => {
        "INSERT INTO executions (id, workspace_hash, job_hash, sheet_num, started_at,
             completed_at, duration_seconds, status, retry_count, success_without_retry,
             validation_pass_rate, confidence_score, model, error_codes)
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14"
    };
}

fn execute_insert(
    stmt: &mut rusqlite::CachedStatement<'_>,
    id: &str,
    o: &SheetOutcome,
    row: &ExecutionRow,
) -> rusqlite::Result<usize> {
    stmt.execute(params![
        id,
        row.workspace_hash,
        row.job_hash,
        o.sheet_num,
        row.started_at,
        row.completed_at,
        o.duration_seconds,
        o.status.as_str(),
        o.retry_count(),
        o.success_without_retry(),
        o.pass_rate(),
        o.confidence_score(),
        o.model,
        error_codes_json(o)
    ])
}

fn error_codes_json(o: &SheetOutcome) -> String {
    if o.error_codes.is_empty() {
        return "[]".into();
    }
    serde_json::to_string(&o.error_codes).unwrap_or_else(|_| "[]".into())
}

fn insert_execution_tx(
    tx: &Connection,
    o: &SheetOutcome,
    row: &ExecutionRow,
) -> rusqlite::Result<String> {
    let id = new_row_id();
    execute_insert(
        &mut tx.prepare_cached(insert_execution_sql!())?,
        &id,
        o,
        row,
    )?;
    Ok(id)
}

/// Inserts the row unless the same outcome is stored already; one statement for the usual
/// case of a new outcome. Returns the row id and whether it was written now.
fn insert_execution_once_tx(
    tx: &Connection,
    o: &SheetOutcome,
    row: &ExecutionRow,
) -> rusqlite::Result<(String, bool)> {
    let id = new_row_id();
    let mut insert = tx.prepare_cached(concat!(
        insert_execution_sql!(),
        " WHERE NOT EXISTS (SELECT 1 FROM executions
              WHERE job_hash = ?3 AND sheet_num = ?4 AND started_at = ?5)"
    ))?;
    let written = execute_insert(&mut insert, &id, o, row)?;
    drop(insert);
    if written > 0 {
        return Ok((id, true));
    }
    match existing_execution_tx(tx, o.sheet_num, row)? {
        Some(existing) => Ok((existing, false)),
        None => Err(rusqlite::Error::QueryReturnedNoRows),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_score_follows_spec() {
        let mut o = SheetOutcome::new("j", 1, "/tmp");
        o.status = SheetStatus::Completed;
        o.validation_pass_rate = Some(1.0);
        assert_eq!(o.confidence_score(), 1.0);
        o.attempts = 3;
        assert!((o.confidence_score() - 0.8).abs() < 1e-9);
        o.attempts = 10;
        assert!((o.confidence_score() - 0.5).abs() < 1e-9);
        o.validation_pass_rate = Some(0.0);
        assert_eq!(o.confidence_score(), 0.0);
        let mut first = SheetOutcome::new("j", 1, "/tmp");
        first.status = SheetStatus::Completed;
        first.validation_pass_rate = Some(0.5);
        assert!((first.confidence_score() - 0.6).abs() < 1e-9);
        first.status = SheetStatus::Failed;
        assert!(!first.success_without_retry());
    }
}
