//! Read-only views for the learning CLI commands (learning.md §19).

use serde::Serialize;

use crate::error::Result;
use crate::store::LearningStore;

/// One `executions` row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExecutionRecord {
    /// Row id.
    pub id: String,
    /// Workspace hash.
    pub workspace_hash: String,
    /// Job hash.
    pub job_hash: String,
    /// Sheet number.
    pub sheet_num: i64,
    /// Outcome time.
    pub started_at: Option<String>,
    /// Recording time (naive local).
    pub completed_at: Option<String>,
    /// Duration.
    pub duration_seconds: Option<f64>,
    /// Status text.
    pub status: Option<String>,
    /// Retries.
    pub retry_count: i64,
    /// First-attempt success.
    pub success_without_retry: bool,
    /// Pass rate as stored (ours 0–1; upstream rows 0/50/100).
    pub validation_pass_rate: Option<f64>,
    /// Confidence score.
    pub confidence_score: Option<f64>,
    /// Model.
    pub model: Option<String>,
    /// Error codes.
    pub error_codes: Vec<String>,
}

/// One `pattern_entropy_history` row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EntropySnapshot {
    /// Row id.
    pub id: String,
    /// When.
    pub calculated_at: String,
    /// Shannon H.
    pub shannon_entropy: f64,
    /// H max.
    pub max_possible_entropy: f64,
    /// Diversity index.
    pub diversity_index: f64,
    /// Patterns.
    pub unique_pattern_count: i64,
    /// Patterns with applications.
    pub effective_pattern_count: i64,
    /// Applications.
    pub total_applications: i64,
    /// Dominant share.
    pub dominant_pattern_share: f64,
    /// Below the alert threshold.
    pub threshold_exceeded: bool,
}

/// One `entropy_responses` row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EntropyResponseRecord {
    /// Row id.
    pub id: String,
    /// Key the check ran under.
    pub job_hash: String,
    /// When.
    pub recorded_at: String,
    /// Diversity that triggered it.
    pub entropy_at_trigger: f64,
    /// Threshold.
    pub threshold_used: f64,
    /// Actions.
    pub actions_taken: Vec<String>,
    /// Budget was boosted.
    pub budget_boosted: bool,
    /// Patterns revisited.
    pub quarantine_revisits: i64,
    /// Their ids.
    pub patterns_revisited: Vec<String>,
}

fn json_list(text: Option<String>) -> Vec<String> {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

impl LearningStore {
    /// The most recent executions (by recording time), newest first.
    pub fn recent_executions(&self, limit: usize) -> Result<Vec<ExecutionRecord>> {
        self.recent_executions_from(0, limit)
    }

    /// [`Self::recent_executions`] after skipping the `offset` most recent: one page of
    /// them.
    pub fn recent_executions_from(
        &self,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ExecutionRecord>> {
        self.read(
            || "reading recent executions".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT id, workspace_hash, job_hash, sheet_num, started_at, completed_at,
                            duration_seconds, status, retry_count, success_without_retry,
                            validation_pass_rate, confidence_score, model, error_codes
                       FROM executions ORDER BY completed_at DESC LIMIT ?1 OFFSET ?2",
                )?;
                let to_sql = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
                let rows = stmt.query_map([to_sql(limit), to_sql(offset)], |r| {
                    Ok(ExecutionRecord {
                        id: r.get(0)?,
                        workspace_hash: r.get(1)?,
                        job_hash: r.get(2)?,
                        sheet_num: r.get(3)?,
                        started_at: r.get(4)?,
                        completed_at: r.get(5)?,
                        duration_seconds: r.get(6)?,
                        status: r.get(7)?,
                        retry_count: r.get::<_, Option<i64>>(8)?.unwrap_or(0),
                        success_without_retry: r.get::<_, Option<bool>>(9)?.unwrap_or(false),
                        validation_pass_rate: r.get(10)?,
                        confidence_score: r.get(11)?,
                        model: r.get(12)?,
                        error_codes: json_list(r.get(13)?),
                    })
                })?;
                rows.collect()
            },
        )
    }

    /// Recorded entropy snapshots, newest first.
    pub fn entropy_history(&self, limit: usize) -> Result<Vec<EntropySnapshot>> {
        self.read(
            || "reading entropy history".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT id, calculated_at, shannon_entropy, max_possible_entropy, diversity_index,
                            unique_pattern_count, effective_pattern_count, total_applications,
                            dominant_pattern_share, threshold_exceeded
                       FROM pattern_entropy_history ORDER BY calculated_at DESC LIMIT ?1",
                )?;
                let rows = stmt.query_map([limit as i64], |r| {
                    Ok(EntropySnapshot {
                        id: r.get(0)?,
                        calculated_at: r.get(1)?,
                        shannon_entropy: r.get(2)?,
                        max_possible_entropy: r.get(3)?,
                        diversity_index: r.get(4)?,
                        unique_pattern_count: r.get(5)?,
                        effective_pattern_count: r.get(6)?,
                        total_applications: r.get(7)?,
                        dominant_pattern_share: r.get(8)?,
                        threshold_exceeded: r.get::<_, Option<bool>>(9)?.unwrap_or(false),
                    })
                })?;
                rows.collect()
            },
        )
    }

    /// Entropy responses (for `job_hash`, or all), newest first.
    pub fn entropy_response_history(
        &self,
        job_hash: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EntropyResponseRecord>> {
        self.read(
            || "reading entropy responses".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT id, job_hash, recorded_at, entropy_at_trigger, threshold_used,
                            actions_taken, budget_boosted, quarantine_revisits, patterns_revisited
                       FROM entropy_responses WHERE (?1 IS NULL OR job_hash = ?1)
                      ORDER BY recorded_at DESC LIMIT ?2",
                )?;
                let rows = stmt.query_map(rusqlite::params![job_hash, limit as i64], |r| {
                    Ok(EntropyResponseRecord {
                        id: r.get(0)?,
                        job_hash: r.get(1)?,
                        recorded_at: r.get(2)?,
                        entropy_at_trigger: r.get(3)?,
                        threshold_used: r.get(4)?,
                        actions_taken: json_list(r.get(5)?),
                        budget_boosted: r.get::<_, Option<bool>>(6)?.unwrap_or(false),
                        quarantine_revisits: r.get::<_, Option<i64>>(7)?.unwrap_or(0),
                        patterns_revisited: json_list(r.get(8)?),
                    })
                })?;
                rows.collect()
            },
        )
    }
}
