//! Record types read from and written to the store (learning.md §2.1, §3, §12.1), and the
//! vocabulary of prompt selection (§10) that the caches below the store also hold.

use serde::Serialize;

/// Lifecycle state of a pattern (`patterns.quarantine_status`, §12.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuarantineStatus {
    /// Newly detected, not yet judged.
    Pending,
    /// Judged harmful; kept out of prompts.
    Quarantined,
    /// Proven useful; eligible for auto-apply.
    Validated,
    /// Withdrawn by hand.
    Retired,
    /// Legacy value from old upstream databases, treated like `validated` (§12.1).
    Active,
}

impl QuarantineStatus {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Quarantined => "quarantined",
            Self::Validated => "validated",
            Self::Retired => "retired",
            Self::Active => "active",
        }
    }

    /// Reads stored text; NULL and unknown values read as `pending` (§2.1).
    pub fn from_stored(text: Option<&str>) -> Self {
        match text {
            Some("quarantined") => Self::Quarantined,
            Some("validated") => Self::Validated,
            Some("retired") => Self::Retired,
            Some("active") => Self::Active,
            _ => Self::Pending,
        }
    }
}

/// The pattern types detection and the conductor-side writers produce (§7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PatternType {
    /// A validation rule type that keeps failing (also used for error-code patterns, §7.8).
    ValidationFailure,
    /// Retrying led to success.
    RetrySuccess,
    /// Completion mode effectiveness.
    CompletionMode,
    /// Sheets that succeed on the first attempt.
    FirstAttemptSuccess,
    /// Declared upstream, never produced.
    HighConfidence,
    /// Many low-confidence validations.
    LowConfidence,
    /// Recurring failure categories, reasons, fixes.
    SemanticFailure,
    /// Error signatures in captured output.
    OutputPattern,
    /// LLM-derived insight (conductor semantic analyzer).
    SemanticInsight,
    /// Resource monitor anomaly.
    ResourceAnomaly,
    /// Resource/outcome correlation.
    ResourceCorrelation,
}

impl PatternType {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ValidationFailure => "validation_failure",
            Self::RetrySuccess => "retry_success",
            Self::CompletionMode => "completion_mode",
            Self::FirstAttemptSuccess => "first_attempt_success",
            Self::HighConfidence => "high_confidence",
            Self::LowConfidence => "low_confidence",
            Self::SemanticFailure => "semantic_failure",
            Self::OutputPattern => "output_pattern",
            Self::SemanticInsight => "semantic_insight",
            Self::ResourceAnomaly => "resource_anomaly",
            Self::ResourceCorrelation => "resource_correlation",
        }
    }
}

/// One row of `patterns`, with upstream's read-side defaults and clamps applied (§2.1).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PatternRecord {
    /// 16-hex id (§5).
    pub id: String,
    /// Stored type text (other writers use values outside [`PatternType`]).
    pub pattern_type: String,
    /// Name as given.
    pub pattern_name: String,
    /// Human description.
    pub description: Option<String>,
    /// Times detected/recorded.
    pub occurrence_count: i64,
    /// First detection.
    pub first_seen: Option<String>,
    /// Latest detection.
    pub last_seen: Option<String>,
    /// Latest successful application (or insert).
    pub last_confirmed: Option<String>,
    /// Applications that led to success (`s`).
    pub led_to_success_count: i64,
    /// Applications that led to failure (`f`).
    pub led_to_failure_count: i64,
    /// Effectiveness in 0–1 (§9.1).
    pub effectiveness_score: f64,
    /// Outcome variance (never updated upstream).
    pub variance: f64,
    /// Guidance text for prompts.
    pub suggested_action: Option<String>,
    /// Context tags.
    pub context_tags: Vec<String>,
    /// Selection priority (§9.2/§9.3).
    pub priority_score: f64,
    /// Lifecycle state.
    pub quarantine_status: QuarantineStatus,
    /// Job hash that first produced it.
    pub provenance_job_hash: Option<String>,
    /// Sheet that first produced it.
    pub provenance_sheet_num: Option<i64>,
    /// When quarantined.
    pub quarantined_at: Option<String>,
    /// When validated.
    pub validated_at: Option<String>,
    /// Why quarantined.
    pub quarantine_reason: Option<String>,
    /// Trust in 0–1 (§12.4).
    pub trust_score: f64,
    /// When trust was computed.
    pub trust_calculation_date: Option<String>,
    /// Success factors JSON object (§11).
    pub success_factors: Option<serde_json::Value>,
    /// False when soft-deleted.
    pub active: bool,
    /// Content hash (§5).
    pub content_hash: Option<String>,
    /// Instrument the pattern was learned on.
    pub instrument_name: Option<String>,
}

impl PatternRecord {
    /// Number of recorded applications, `n = s + f`.
    pub fn applications(&self) -> i64 {
        self.led_to_success_count + self.led_to_failure_count
    }

    /// Success rate: the share of recorded applications that led to success, `s / (s + f)`
    /// (`None` before the first application). Every surface shows this figure as "success
    /// rate"; `effectiveness_score` is a different figure (weighted, decayed, cold-start
    /// 0.55) and is shown as a 0–1 score, never as a percentage.
    pub fn success_rate(&self) -> Option<f64> {
        let n = self.applications();
        (n > 0).then(|| (self.led_to_success_count.max(0) as f64 / n as f64).clamp(0.0, 1.0))
    }

    /// The success rate as every surface prints it: `66.7% (2 of 3 applications)`, or
    /// `no applications yet`.
    pub fn success_rate_text(&self) -> String {
        match self.success_rate() {
            Some(r) => format!(
                "{:.1}% ({} of {} applications)",
                r * 100.0,
                self.led_to_success_count,
                self.applications()
            ),
            None => "no applications yet".to_string(),
        }
    }
}

/// The column list every pattern query selects, in [`PatternRecord`] field order.
pub(crate) const PATTERN_COLUMNS: &str = "id, pattern_type, pattern_name, description, \
    occurrence_count, first_seen, last_seen, last_confirmed, led_to_success_count, \
    led_to_failure_count, effectiveness_score, variance, suggested_action, context_tags, \
    priority_score, quarantine_status, provenance_job_hash, provenance_sheet_num, \
    quarantined_at, validated_at, quarantine_reason, trust_score, trust_calculation_date, \
    success_factors, active, content_hash, instrument_name";

/// Reads a timestamp column that upstream may have stored as TEXT (or, rarely, a number).
fn text_col(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    use rusqlite::types::ValueRef;
    Ok(match row.get_ref(idx)? {
        ValueRef::Null => None,
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Integer(i) => Some(i.to_string()),
        ValueRef::Real(r) => Some(r.to_string()),
    })
}

/// Maps a row selected with [`PATTERN_COLUMNS`]. Bad JSON in tags/factors reads as empty
/// rather than failing the whole query: one damaged row must not hide every pattern.
pub(crate) fn pattern_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PatternRecord> {
    let tags_text = text_col(row, 13)?;
    let context_tags = tags_text
        .as_deref()
        .and_then(|t| serde_json::from_str::<Vec<String>>(t).ok())
        .unwrap_or_default();
    let factors = text_col(row, 23)?.and_then(|t| serde_json::from_str(&t).ok());
    Ok(PatternRecord {
        id: row.get(0)?,
        pattern_type: row.get(1)?,
        pattern_name: row.get(2)?,
        description: row.get(3)?,
        occurrence_count: row.get::<_, Option<i64>>(4)?.unwrap_or(1),
        first_seen: text_col(row, 5)?,
        last_seen: text_col(row, 6)?,
        last_confirmed: text_col(row, 7)?,
        led_to_success_count: row.get::<_, Option<i64>>(8)?.unwrap_or(0),
        led_to_failure_count: row.get::<_, Option<i64>>(9)?.unwrap_or(0),
        effectiveness_score: row
            .get::<_, Option<f64>>(10)?
            .unwrap_or(0.5)
            .clamp(0.0, 1.0),
        variance: row.get::<_, Option<f64>>(11)?.unwrap_or(0.0).max(0.0),
        suggested_action: row.get(12)?,
        context_tags,
        priority_score: row.get::<_, Option<f64>>(14)?.unwrap_or(0.5).max(0.0),
        quarantine_status: QuarantineStatus::from_stored(text_col(row, 15)?.as_deref()),
        provenance_job_hash: row.get(16)?,
        provenance_sheet_num: row.get(17)?,
        quarantined_at: text_col(row, 18)?,
        validated_at: text_col(row, 19)?,
        quarantine_reason: row.get(20)?,
        trust_score: row
            .get::<_, Option<f64>>(21)?
            .unwrap_or(0.5)
            .clamp(0.0, 1.0),
        trust_calculation_date: text_col(row, 22)?,
        success_factors: factors,
        active: row.get::<_, Option<i64>>(24)?.unwrap_or(1) != 0,
        content_hash: row.get(25)?,
        instrument_name: row.get(26)?,
    })
}

/// Whether a pattern was injected because it ranked high or by an exploration draw (§10.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplicationMode {
    /// Chosen by priority (≥ 0.3).
    Exploitation,
    /// Chosen by the epsilon draw (priority ≥ the exploration floor).
    Exploration,
}

/// Auto-apply settings (score `learning.auto_apply`, §10.3 step 1, §12.4).
#[derive(Clone, Debug, PartialEq)]
pub struct AutoApply {
    /// Minimum trust.
    pub trust_threshold: f64,
    /// At most this many auto-applied patterns per sheet.
    pub max_patterns_per_sheet: usize,
    /// Only `validated` patterns qualify.
    pub require_validated: bool,
}

impl Default for AutoApply {
    fn default() -> Self {
        AutoApply {
            trust_threshold: 0.85,
            max_patterns_per_sheet: 3,
            require_validated: true,
        }
    }
}

/// One pattern chosen for a prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct PatternGuidance {
    /// Pattern id, for feedback ([`crate::SheetOutcome::applied_patterns`]).
    pub pattern_id: String,
    /// The rendered line (§10.5).
    pub text: String,
    /// Came from the auto-apply query.
    pub auto_applied: bool,
    /// Priority below the exploitation floor (logged as exploration).
    pub exploration: bool,
}

/// Python's `{x:.0%}`.
pub(crate) fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}
