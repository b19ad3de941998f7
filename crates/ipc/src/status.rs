//! Results of the job-reading methods: `job.status`, `job.list`, `job.errors`,
//! `job.diagnose`, `job.recover`, `job.history` (conductor.md §8.2, §8.7, §8.9–§8.12) and
//! `daemon.observer_events` (§8.22). Each serialises to the exact JSON this port has always
//! sent (key order included), which upstream's CLI parses.

use serde::{Deserialize, Deserializer, Serialize};

use crate::checkpoint::JobCheckpoint;
use crate::types::MonitorEvent;

/// A job as the conductor holds it in memory, before or beside its checkpoint (`job.list`
/// rows of live jobs; `job.status` when a checkpoint cannot be encoded). Optional keys are
/// left out when unset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// The job ID.
    pub job_id: String,
    /// Conductor-level status (`queued`, `running`, `completed`, ...).
    pub status: String,
    /// Score file.
    pub config_path: String,
    /// Workspace.
    pub workspace: String,
    /// Submission time (epoch seconds).
    pub submitted_at: f64,
    /// Start time (epoch seconds), null until started.
    pub started_at: Option<f64>,
    /// Job-level error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Concert depth of a chained job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_depth: Option<u32>,
    /// End time (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<f64>,
    /// Sheets in the job, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_sheets: Option<u32>,
    /// Ours: paused, but this many sheets still run an attempt (`pausing` until they end);
    /// `status` stays `paused` for upstream's CLI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pausing: Option<u32>,
}

/// A job's registry row (upstream's `JobRecord.to_dict()`, conductor.md §10.2): `job.list`
/// rows of jobs not in memory, and `job.status` of a job without a checkpoint. Every key up
/// to `total_sheets` is always present; the three text fields are left out when empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryJob {
    /// The job ID.
    pub job_id: String,
    /// Score file.
    pub config_path: String,
    /// Workspace.
    pub workspace: String,
    /// Conductor-level status.
    pub status: String,
    /// PID of the process that ran it.
    pub pid: Option<u32>,
    /// Submission time (epoch seconds).
    pub submitted_at: f64,
    /// Start time (epoch seconds).
    pub started_at: Option<f64>,
    /// End time (epoch seconds).
    pub completed_at: Option<f64>,
    /// Sheet being processed.
    pub current_sheet: Option<u32>,
    /// Sheets in the job.
    pub total_sheets: Option<u32>,
    /// Job-level error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Conductor log of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_path: Option<String>,
    /// Config snapshot file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_path: Option<String>,
    /// Ours: the concert depth of a chained job (upstream's row leaves it out, so a chained
    /// job the conductor no longer holds — after a restart — showed none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_depth: Option<u32>,
}

/// One `job.list` row: a live job's summary or a registry row (told apart by `pid`, which
/// only registry rows carry).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum JobListEntry {
    /// A job the conductor holds in memory.
    Live(JobSummary),
    /// A job known only to the registry.
    Registry(RegistryJob),
}

impl JobListEntry {
    /// The job ID.
    pub fn job_id(&self) -> &str {
        match self {
            JobListEntry::Live(j) => &j.job_id,
            JobListEntry::Registry(j) => &j.job_id,
        }
    }

    /// Conductor-level status.
    pub fn status(&self) -> &str {
        match self {
            JobListEntry::Live(j) => &j.status,
            JobListEntry::Registry(j) => &j.status,
        }
    }

    /// Ours: sheets still running while the job is paused (`None` unless it is pausing).
    pub fn pausing(&self) -> Option<u32> {
        match self {
            JobListEntry::Live(j) => j.pausing.filter(|n| *n > 0 && j.status == "paused"),
            JobListEntry::Registry(_) => None,
        }
    }

    /// The status as a person or a script should read it: `pausing` while a paused job's
    /// sheets still run, else [`JobListEntry::status`].
    pub fn shown_status(&self) -> &str {
        if self.pausing().is_some() {
            "pausing"
        } else {
            self.status()
        }
    }

    /// Workspace.
    pub fn workspace(&self) -> &str {
        match self {
            JobListEntry::Live(j) => &j.workspace,
            JobListEntry::Registry(j) => &j.workspace,
        }
    }

    /// Score file.
    pub fn config_path(&self) -> &str {
        match self {
            JobListEntry::Live(j) => &j.config_path,
            JobListEntry::Registry(j) => &j.config_path,
        }
    }

    /// Submission time (epoch seconds).
    pub fn submitted_at(&self) -> f64 {
        match self {
            JobListEntry::Live(j) => j.submitted_at,
            JobListEntry::Registry(j) => j.submitted_at,
        }
    }

    /// Job-level error.
    pub fn error_message(&self) -> Option<&str> {
        match self {
            JobListEntry::Live(j) => j.error_message.as_deref(),
            JobListEntry::Registry(j) => j.error_message.as_deref(),
        }
    }
}

/// `job.list` result (§8.7) as a client reads it: the rows that parse, in order. A row of
/// unknown shape is left out rather than failing the whole listing (cli.md §10: only six
/// keys are guaranteed, and upstream's conductor mixes two row shapes).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct JobList(pub Vec<JobListEntry>);

impl<'de> Deserialize<'de> for JobList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let rows = Vec::<serde_json::Value>::deserialize(d)?;
        Ok(JobList(
            rows.into_iter()
                .filter_map(|row| serde_json::from_value(row).ok())
                .collect(),
        ))
    }
}

impl<'de> Deserialize<'de> for JobListEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let registry = value.get("pid").is_some();
        let parsed = if registry {
            serde_json::from_value(value).map(JobListEntry::Registry)
        } else {
            serde_json::from_value(value).map(JobListEntry::Live)
        };
        parsed.map_err(serde::de::Error::custom)
    }
}

/// `job.list_page` result (ours): one page of jobs, newest first, and how many match in all,
/// so a listing that is cut can say so.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    /// The rows of this page, as `job.list` shows them.
    pub jobs: JobList,
    /// Jobs matching the filter, on every page.
    pub total: u64,
    /// Rows skipped before this page.
    pub offset: u64,
    /// The page size asked for (`None`: no limit).
    pub limit: Option<u64>,
    /// Every job by lower-case status (all statuses, not only the filter's), when asked for
    /// with `counts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<std::collections::BTreeMap<String, u64>>,
    /// When asked for with `progress`: the progress of each row the conductor counts as
    /// `job.progress` would (loaded, with a checkpoint of at most [`PROGRESS_SHEETS`]
    /// sheets); a row left out is asked for with `job.status`. `None` from a conductor that
    /// does not give it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<std::collections::BTreeMap<String, JobProgress>>,
}

/// A job's progress as a row of a jobs list shows it (ours, `job.progress`): counted the
/// way every view counts a checkpoint, so the row agrees with the job's own page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobProgress {
    /// Sheets completed or skipped (a failed sheet is not done).
    pub done: u32,
    /// Sheets in the job (at least 1).
    pub total: u32,
    /// Estimated cost in USD: the job's total, or the sheets' sum when that is larger.
    pub cost: f64,
    /// Input + output tokens, the same way.
    pub tokens: u64,
    /// [`JobCheckpoint::cost_confidence`].
    pub cost_confidence: f64,
    /// The checkpoint's start (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<f64>,
    /// The checkpoint's end (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<f64>,
}

impl JobProgress {
    /// The progress of a checkpoint (a cut answer counts every sheet in its `sheets_view`).
    pub fn of<S>(cp: &JobCheckpoint<S>) -> JobProgress {
        use crate::checkpoint::SheetStatus;
        let done = match &cp.sheets_view {
            Some(v) => v.count("completed") + v.count("skipped"),
            None => cp
                .sheets
                .values()
                .filter(|s| matches!(s.status, SheetStatus::Completed | SheetStatus::Skipped))
                .count() as u32,
        };
        let sheet_cost: f64 = cp.sheets.values().filter_map(|s| s.estimated_cost).sum();
        let sheet_tokens: u64 = cp
            .sheets
            .values()
            .map(|s| s.input_tokens.unwrap_or(0) + s.output_tokens.unwrap_or(0))
            .sum();
        JobProgress {
            done,
            total: cp.total_sheets.max(1),
            cost: cp.total_estimated_cost.max(sheet_cost),
            tokens: (cp.total_input_tokens + cp.total_output_tokens).max(sheet_tokens),
            cost_confidence: cp.cost_confidence(),
            started: cp.started_at.as_ref().and_then(|t| t.to_epoch()),
            completed: cp.completed_at.as_ref().and_then(|t| t.to_epoch()),
        }
    }
}

/// `job.progress` result (ours): the progress of each job asked for that the conductor has
/// loaded with a checkpoint of at most [`PROGRESS_SHEETS`] sheets; a job left out is
/// asked for with `job.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressResult {
    /// Progress by job ID.
    pub jobs: std::collections::BTreeMap<String, JobProgress>,
}

/// Largest job `job.progress` counts: its answer walks each job's sheets on the conductor's
/// job table, so a larger job is left to `job.status`, which counts it without a walk.
pub const PROGRESS_SHEETS: u32 = 500;

/// `job.overview` result (ours): what `mozart status` without a score shows, in one answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    /// Seconds since the conductor started (as `daemon.health` gives it).
    pub uptime_seconds: f64,
    /// One page per page asked for, in the same order.
    pub pages: Vec<JobPage>,
}

/// `job.status` result (§8.2): the checkpoint when the job has one, else its metadata.
// One value per call: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum JobStatusResult {
    /// The checkpoint, with the job's `workspace` and registry hook results.
    Checkpoint(Box<JobCheckpoint>),
    /// A job without a checkpoint yet (queued, or rejected before it ran).
    Record(JobListEntry),
}

impl JobStatusResult {
    /// The checkpoint, if this is one.
    pub fn checkpoint(&self) -> Option<&JobCheckpoint> {
        match self {
            JobStatusResult::Checkpoint(cp) => Some(cp),
            JobStatusResult::Record(_) => None,
        }
    }

    /// The job's status (`queued`, `running`, `completed`, …).
    pub fn status(&self) -> &str {
        match self {
            JobStatusResult::Checkpoint(cp) => cp.status.as_str(),
            JobStatusResult::Record(entry) => entry.status(),
        }
    }

    /// The job-level error, if any.
    pub fn error_message(&self) -> Option<&str> {
        match self {
            JobStatusResult::Checkpoint(cp) => cp.error_message.as_deref(),
            JobStatusResult::Record(entry) => entry.error_message(),
        }
    }

    /// Ours: the job completed and its `on_success` hooks still run (one failing turns it
    /// `failed`).
    pub fn hooks_running(&self) -> bool {
        match self {
            JobStatusResult::Checkpoint(cp) => cp.hooks_running,
            JobStatusResult::Record(_) => false,
        }
    }

    /// Ours: what an accepted job that does not run waits for, when it will go on by itself
    /// (a job slot while queued; its pending `modify --resume` while paused).
    pub fn waiting_reason(&self) -> Option<&str> {
        match self {
            JobStatusResult::Checkpoint(cp) => cp.waiting_reason.as_deref(),
            JobStatusResult::Record(_) => None,
        }
    }

    /// The job's status as a person or a script should read it: `queued` for a job waiting
    /// for a job slot (its checkpoint says `pending`, upstream's checkpoint has no queued
    /// state), `pausing` for a paused job whose sheets still run, else
    /// [`JobStatusResult::status`].
    pub fn shown_status(&self) -> &str {
        match self {
            JobStatusResult::Checkpoint(cp) => cp.shown_status(),
            JobStatusResult::Record(entry) => entry.shown_status(),
        }
    }

    /// Ours: sheets still running while the job is paused (`None` unless it is pausing).
    pub fn pausing(&self) -> Option<u32> {
        match self {
            JobStatusResult::Checkpoint(cp) => cp.pausing_sheets(),
            JobStatusResult::Record(entry) => entry.pausing(),
        }
    }

    /// The exit code a job's outcome maps to for `mozart wait` and `mozart status --watch`
    /// (0 completed, 1 failed, 3 cancelled, 4 paused), or `None` while it goes on by itself —
    /// running, queued, pausing, or paused/failed with a resume pending.
    pub fn outcome_code(&self) -> Option<i32> {
        // Pausing is not paused yet: the running sheets still work (and spend).
        if self.waiting_reason().is_some() || self.pausing().is_some() || self.hooks_running() {
            return None;
        }
        match self.status() {
            "completed" => Some(0),
            "failed" => Some(1),
            "cancelled" => Some(3),
            "paused" => Some(4),
            _ => None,
        }
    }

    /// The job's workspace (`None` only for a checkpoint read from a state file).
    pub fn workspace(&self) -> Option<&str> {
        match self {
            JobStatusResult::Checkpoint(cp) => cp.workspace.as_deref(),
            JobStatusResult::Record(entry) => Some(entry.workspace()),
        }
    }

    /// Read a result as upstream's CLI does (cli.md §10): a checkpoint needs a string
    /// `job_name`, `total_sheets ≥ 1` and a `sheets` object, and must satisfy the model's
    /// constraints; anything else is metadata. `None` when it is neither.
    pub fn from_value(value: serde_json::Value) -> Option<JobStatusResult> {
        let obj = value.as_object()?;
        let has_shape = obj
            .get("job_name")
            .is_some_and(serde_json::Value::is_string)
            && obj
                .get("total_sheets")
                .and_then(serde_json::Value::as_u64)
                .is_some_and(|n| n >= 1)
            && obj.get("sheets").is_some_and(serde_json::Value::is_object);
        if has_shape {
            // Read through a reference: the document (every sheet of the job) is not copied.
            if let Ok(cp) = JobCheckpoint::deserialize(&value) {
                if cp.check().is_ok() {
                    return Some(JobStatusResult::Checkpoint(Box::new(cp)));
                }
            }
        }
        serde_json::from_value(value)
            .ok()
            .map(JobStatusResult::Record)
    }
}

impl<'de> Deserialize<'de> for JobStatusResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        JobStatusResult::from_value(value)
            .ok_or_else(|| serde::de::Error::custom("neither a checkpoint nor a job record"))
    }
}

/// `job.errors` result (§8.9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorsResult {
    /// What `job.status` returns for the job.
    pub state: JobStatusResult,
    /// Ours: which of the job's runs the errors in `state` come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<ErrorRuns>,
}

/// `job.diagnose` result (§8.10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseResult {
    /// What `job.status` returns for the job.
    pub state: JobStatusResult,
    /// The job's workspace.
    pub workspace: Option<String>,
    /// Ours: which of the job's runs the errors in `state` come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<ErrorRuns>,
}

/// Ours: which runs of a job `job.errors` / `job.diagnose` list the errors of. A job's
/// first submission starts its run 1, each fresh start (`--fresh`, or a completed job whose
/// score changed) the next; a resume continues its run. The errors listed are the current
/// run's unless `all_runs` was asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRuns {
    /// The job's current run: 1 for its first, one more for each fresh start.
    pub run: u32,
    /// When the current run started (epoch seconds); null for a run 1.
    #[serde(default)]
    pub started_at: Option<f64>,
    /// The errors listed are every run's (`all_runs`), not only the current run's.
    #[serde(default)]
    pub all_runs: bool,
    /// Failed attempts of earlier runs that are not listed (0 with `all_runs`).
    #[serde(default)]
    pub earlier_errors_not_shown: u64,
}

/// `job.recover` result (§8.12): the job's state, and (ours) what the conductor's own
/// recovery found and saved — upstream's conductor only reported and its CLI's recovery was
/// never saved ([BUG] cli.md §5.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoverResult {
    /// What `job.status` returns for the job (after the recovery).
    pub state: JobStatusResult,
    /// The job's workspace.
    pub workspace: Option<String>,
    /// True when nothing was changed.
    pub dry_run: bool,
    /// The one sheet asked about, if any.
    pub sheet_num: Option<u32>,
    /// Ours: each failed sheet's validations, re-run by the conductor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Vec<SheetRecovery>>,
}

/// Ours: one failed sheet re-validated by `job.recover`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SheetRecovery {
    /// The sheet.
    pub sheet_num: u32,
    /// Every rule that applies to it, in rule order.
    pub checks: Vec<RecoveryCheck>,
    /// Every rule passed.
    pub passed: bool,
    /// Marked completed and saved (passed and not a dry run).
    pub recovered: bool,
}

/// Ours: one validation rule of a [`SheetRecovery`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryCheck {
    /// `file_exists`, `command_succeeds`, …
    pub rule_type: String,
    /// The rule's description, else what it checks.
    pub description: String,
    /// `passed`, `failed` or `skipped`.
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One attempt in `job.history` (§8.11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// Row id.
    pub id: i64,
    /// The job.
    pub job_id: String,
    /// The sheet.
    pub sheet_num: u32,
    /// 1-based attempt.
    pub attempt_num: u32,
    /// Prompt sent.
    pub prompt: Option<String>,
    /// Output tail.
    pub output: Option<String>,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Duration.
    pub duration_seconds: Option<f64>,
    /// When (ISO-8601).
    pub executed_at: String,
    /// Ours: how the attempt ended — the sheet's state after it (`completed`, `failed`,
    /// `retry_scheduled`, ...), or `interrupted` when a cancel or a conductor stop cut it
    /// short and no result was recorded. Absent from older conductors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// `job.history` result (§8.11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryResult {
    /// The job.
    pub job_id: String,
    /// Always true here: the registry records every attempt.
    pub has_history: bool,
    /// Newest first, at most `limit`.
    pub records: Vec<HistoryRecord>,
    /// Ours: how many attempts match (the job's, or the sheet's) in all, listed or not
    /// (absent from an upstream conductor: `records` is all the client knows of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

/// `daemon.observer_events` result (§8.22): events newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObserverEventsResult {
    /// The events (the monitor stream's shape).
    pub events: Vec<MonitorEvent>,
}

/// One learned pattern in `daemon.learning.patterns` (conductor.md §8.25).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnedPattern {
    /// Pattern id (16 hex digits).
    pub id: String,
    /// Type text.
    pub pattern_type: String,
    /// Name.
    pub pattern_name: String,
    /// Description.
    pub description: Option<String>,
    /// Effectiveness in 0..1.
    pub effectiveness_score: f64,
    /// Selection priority.
    pub priority_score: f64,
    /// Times detected.
    pub occurrence_count: i64,
    /// Last seen (ISO-8601).
    pub last_seen: Option<String>,
    /// `pending`, `quarantined`, `validated` or `retired`.
    pub quarantine_status: String,
    /// Trust in 0..1.
    pub trust_score: f64,
}

/// `daemon.learning.patterns` result (§8.25): empty without a learning store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PatternsResult {
    /// Highest priority first.
    pub patterns: Vec<LearnedPattern>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(text: &str) {
        let parsed: T = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&parsed).unwrap(), text);
    }

    #[test]
    fn list_rows_keep_their_own_shapes() {
        let live = r#"{"job_id":"a","status":"running","config_path":"/s/a.yaml","workspace":"/w","submitted_at":1.5,"started_at":null,"total_sheets":3}"#;
        let row = r#"{"job_id":"b","config_path":"/s/b.yaml","workspace":"/w","status":"failed","pid":null,"submitted_at":1.0,"started_at":2.0,"completed_at":3.0,"current_sheet":null,"total_sheets":2,"error_message":"boom"}"#;
        round_trip::<JobListEntry>(live);
        round_trip::<JobListEntry>(row);
        round_trip::<Vec<JobListEntry>>(&format!("[{live},{row}]"));
        let parsed: JobListEntry = serde_json::from_str(row).unwrap();
        assert_eq!((parsed.job_id(), parsed.status()), ("b", "failed"));
        assert_eq!(parsed.error_message(), Some("boom"));
        let list: JobList =
            serde_json::from_str(&format!(r#"[{live},{{"job_id":1}},{row}]"#)).unwrap();
        assert_eq!(
            list.0.iter().map(JobListEntry::job_id).collect::<Vec<_>>(),
            ["a", "b"],
            "a row of unknown shape is left out"
        );
        assert!(serde_json::from_str::<JobList>(r#"{"jobs":[]}"#).is_err());
    }

    #[test]
    fn a_status_result_is_a_checkpoint_only_with_the_checkpoint_shape() {
        let row = r#"{"job_id":"q","config_path":"/s/q.yaml","workspace":"/w","status":"queued","pid":null,"submitted_at":1.0,"started_at":null,"completed_at":null,"current_sheet":null,"total_sheets":null}"#;
        round_trip::<JobStatusResult>(row);
        let zero = serde_json::json!({"job_id": "q", "job_name": "q", "total_sheets": 0,
                                      "sheets": {}, "status": "pending",
                                      "config_path": "/q", "workspace": "/w",
                                      "submitted_at": 1.0, "started_at": null});
        let parsed = JobStatusResult::from_value(zero).unwrap();
        assert!(parsed.checkpoint().is_none());
        assert_eq!((parsed.status(), parsed.error_message()), ("pending", None));
        let bad_key = serde_json::json!({"job_id": "q", "job_name": "q", "total_sheets": 1,
                                         "sheets": {"2": {"sheet_num": 1}}});
        assert!(JobStatusResult::from_value(bad_key).is_none());
        let good = serde_json::json!({"job_id": "q", "job_name": "q", "total_sheets": 1,
                                      "created_at": "2026-01-01T00:00:00Z",
                                      "updated_at": "2026-01-01T00:00:00Z",
                                      "sheets": {"1": {"sheet_num": 1}}, "workspace": "/w"});
        let parsed = JobStatusResult::from_value(good).unwrap();
        assert_eq!(parsed.checkpoint().unwrap().sheets[&1].cost_confidence, 1.0);
        let odd = serde_json::json!({"job_id": "q", "job_name": "q", "total_sheets": 1,
                                     "created_at": "2026-01-01T00:00:00Z",
                                     "updated_at": "2026-01-01T00:00:00Z",
                                     "sheets": {"1": {"sheet_num": 1, "error_category": "cosmic_ray"},
                                                "2": {"sheet_num": 2, "error_category": "timeout"}}});
        let odd = JobStatusResult::from_value(odd).unwrap();
        let sheets = &odd.checkpoint().unwrap().sheets;
        assert_eq!(
            sheets[&1].error_category, None,
            "unknown categories are dropped"
        );
        assert_eq!(
            sheets[&2].error_category,
            Some(crate::checkpoint::ErrorCategory::Timeout)
        );
        assert_eq!(parsed.workspace(), Some("/w"));
    }

    #[test]
    fn hook_output_is_null_for_command_hooks_and_absent_otherwise() {
        round_trip::<crate::checkpoint::HookResult>(
            r#"{"hook_type":"run_command","description":null,"success":false,"error_message":"exit 1","exit_code":1,"output":null}"#,
        );
        round_trip::<crate::checkpoint::HookResult>(
            r#"{"hook_type":"run_job","description":"next","success":true,"chained_job_id":"n"}"#,
        );
        let upstream: crate::checkpoint::HookResult = serde_json::from_str(
            r#"{"hook_type":"run_job","success":false,"hook_name":"h","error":"no"}"#,
        )
        .unwrap();
        assert_eq!(upstream.extra["hook_name"], "h");
    }

    #[test]
    fn job_method_results_keep_their_keys() {
        round_trip::<HistoryResult>(
            r#"{"job_id":"j","has_history":true,"records":[{"id":1,"job_id":"j","sheet_num":1,"attempt_num":1,"prompt":"p","output":null,"exit_code":0,"duration_seconds":0.5,"executed_at":"2026-01-01T00:00:00.000000Z"}]}"#,
        );
        round_trip::<PatternsResult>(
            r#"{"patterns":[{"id":"00aa","pattern_type":"validation_failure","pattern_name":"missing file","description":null,"effectiveness_score":0.55,"priority_score":0.5,"occurrence_count":3,"last_seen":"2026-01-01T00:00:00Z","quarantine_status":"pending","trust_score":0.5}]}"#,
        );
        round_trip::<ObserverEventsResult>(
            r#"{"events":[{"job_id":"j","sheet_num":1,"event":"baton.sheet.attempt_result","data":{"ok":true},"timestamp":1.5},{"job_id":"","sheet_num":0,"event":"x","data":null,"timestamp":2.0}]}"#,
        );
    }
}
