//! What the conductor tells the store about finished sheets and jobs (learning.md §6); the
//! `record` module stores it.

use std::path::PathBuf;

use serde::Serialize;

use crate::model::ApplicationMode;

/// Final state of a sheet, as stored in `executions.status`: the checkpoint's sheet status
/// (its wire strings are the stored text).
pub use mozart_ipc::checkpoint::SheetStatus;

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

/// What [`LearningStore::record_job_outcome`](crate::LearningStore::record_job_outcome) did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JobLearningSummary {
    /// `executions` rows written (sheets already recorded are not written again).
    pub outcomes_recorded: usize,
    /// Patterns detected and upserted.
    pub patterns_detected: usize,
    /// Patterns whose priority was re-weighted.
    pub priorities_reweighted: usize,
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
