//! Recording finished sheets and jobs (learning.md §6): the `executions` rows, feedback to
//! the patterns a prompt was given, and pattern detection over a finished job.

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::Result;
use crate::outcome::{JobLearningSummary, JobOutcome, SheetOutcome, SheetStatus};
use crate::patterns::PatternApplication;
use crate::store::{new_row_id, LearningStore};
use crate::time::Now;

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
                self.record_application(
                    &PatternApplication {
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
                    },
                    // Success factors (§11) in the same statement as the counters.
                    led_to_success.then_some(outcome),
                )?;
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
    // Found through idx_exec_started: few outcomes share a finish time.
    tx.prepare_cached(
        "SELECT id FROM executions WHERE job_hash = ?1 AND sheet_num = ?2 AND started_at = ?3
          LIMIT 1",
    )?
    .query_row(params![row.job_hash, sheet_num, row.started_at], |r| {
        r.get(0)
    })
    .optional()
}

/// Column list and values of an `executions` insert.
const INSERT_EXECUTION_SQL: &str =
    "INSERT INTO executions (id, workspace_hash, job_hash, sheet_num, started_at,
         completed_at, duration_seconds, status, retry_count, success_without_retry,
         validation_pass_rate, confidence_score, model, error_codes)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

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
    execute_insert(&mut tx.prepare_cached(INSERT_EXECUTION_SQL)?, &id, o, row)?;
    Ok(id)
}

/// Inserts the row unless the same outcome is stored already. Returns the row id and
/// whether it was written now. A lookup, then a plain insert: an `INSERT … SELECT … WHERE
/// NOT EXISTS` reading the table it writes buffers its row in a temporary table first.
fn insert_execution_once_tx(
    tx: &Connection,
    o: &SheetOutcome,
    row: &ExecutionRow,
) -> rusqlite::Result<(String, bool)> {
    match existing_execution_tx(tx, o.sheet_num, row)? {
        Some(existing) => Ok((existing, false)),
        None => Ok((insert_execution_tx(tx, o, row)?, true)),
    }
}
