//! Success factors: the context in which a pattern's applications succeeded (learning.md §11).

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::outcome::SheetOutcome;
use crate::store::LearningStore;
use crate::time::Now;

/// The JSON object stored in `patterns.success_factors`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SuccessFactors {
    /// Sorted distinct validation rule types seen on successful sheets.
    #[serde(default)]
    pub validation_types: Vec<String>,
    /// Sorted distinct error categories.
    #[serde(default)]
    pub error_categories: Vec<String>,
    /// Status of the previous sheet.
    #[serde(default)]
    pub prior_sheet_status: Option<String>,
    /// `morning` / `afternoon` / `evening` / `night` (local time).
    #[serde(default)]
    pub time_of_day_bucket: Option<String>,
    /// Retries before the success.
    #[serde(default)]
    pub retry_iteration: u32,
    /// Whether an escalation was pending.
    #[serde(default)]
    pub escalation_was_pending: bool,
    /// Grounding confidence.
    #[serde(default)]
    pub grounding_confidence: Option<f64>,
    /// Successful applications observed.
    #[serde(default = "one")]
    pub occurrence_count: i64,
    /// `s / (s + f)`.
    #[serde(default = "one_f")]
    pub success_rate: f64,
}

fn one() -> i64 {
    1
}
fn one_f() -> f64 {
    1.0
}

/// Local-hour bucket of §11.
pub fn time_bucket(hour: i8) -> &'static str {
    match hour {
        5..=11 => "morning",
        12..=16 => "afternoon",
        17..=20 => "evening",
        _ => "night",
    }
}

impl LearningStore {
    /// Folds one successful application's context into the pattern's success factors.
    /// Unknown ids are ignored (returns false).
    pub fn update_success_factors(&self, pattern_id: &str, outcome: &SheetOutcome) -> Result<bool> {
        let now = self.now();
        self.write(
            || format!("updating success factors of pattern {pattern_id}"),
            |tx| {
                let row: Option<(Option<String>, i64, i64)> = crate::store::query_one(
                    tx,
                    "SELECT success_factors, COALESCE(led_to_success_count, 0),
                                COALESCE(led_to_failure_count, 0) FROM patterns WHERE id = ?1",
                    [pattern_id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
                let Some((stored, s, f)) = row else {
                    return Ok(false);
                };
                let text = folded_success_factors(stored, s, f, outcome, &now);
                crate::store::exec(
                    tx,
                    "UPDATE patterns SET success_factors = ?2, success_factors_updated_at = ?3
                      WHERE id = ?1",
                    params![pattern_id, text, now.local_iso()],
                )?;
                Ok(true)
            },
        )
    }
}

/// The success factors (JSON text) after folding in one successful application of a
/// pattern whose stored factors are `stored` and whose counts, this application included,
/// are `s` successes and `f` failures (§11).
pub(crate) fn folded_success_factors(
    stored: Option<String>,
    s: i64,
    f: i64,
    outcome: &SheetOutcome,
    now: &Now,
) -> String {
    factors_text(&fold_success_factors(
        parse_factors(stored),
        s,
        f,
        outcome,
        now,
    ))
}

/// Stored success factors as their object; `None` when absent or not a factors object
/// (folding then starts afresh).
pub(crate) fn parse_factors(stored: Option<String>) -> Option<SuccessFactors> {
    stored.and_then(|t| serde_json::from_str::<SuccessFactors>(&t).ok())
}

/// The text stored for `factors`.
pub(crate) fn factors_text(factors: &SuccessFactors) -> String {
    serde_json::to_string(factors).unwrap_or_else(|_| "{}".into())
}

/// [`folded_success_factors`] on the factors as an object: a batch folds each of its
/// applications into the one object and writes its text once (issue 24: parsing and
/// writing the text again for every application was half the folding's cost).
pub(crate) fn fold_success_factors(
    existing: Option<SuccessFactors>,
    s: i64,
    f: i64,
    outcome: &SheetOutcome,
    now: &Now,
) -> SuccessFactors {
    let mut types: Vec<String> = outcome
        .validations
        .iter()
        .map(|v| v.rule_type.clone())
        .collect();
    types.sort();
    types.dedup();
    let bucket = time_bucket(now.local_hour()).to_string();
    match existing {
        Some(mut sf) => {
            sf.occurrence_count += 1;
            sf.validation_types.extend(types);
            sf.validation_types.sort();
            sf.validation_types.dedup();
            sf.time_of_day_bucket = Some(bucket);
            sf.retry_iteration = outcome.retry_count();
            sf.escalation_was_pending = false;
            if outcome.grounding_confidence.is_some() {
                sf.grounding_confidence = outcome.grounding_confidence;
            }
            if s + f > 0 {
                sf.success_rate = s as f64 / (s + f) as f64;
            }
            sf
        }
        None => SuccessFactors {
            validation_types: types,
            error_categories: Vec::new(),
            prior_sheet_status: None,
            time_of_day_bucket: Some(bucket),
            retry_iteration: outcome.retry_count(),
            escalation_was_pending: false,
            grounding_confidence: outcome.grounding_confidence,
            occurrence_count: 1,
            success_rate: 1.0,
        },
    }
}

/// `analyze_pattern_why` result (§11), the data behind `mozart patterns-why`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhyAnalysis {
    /// Pattern id.
    pub pattern_id: String,
    /// Name.
    pub pattern_name: String,
    /// Type.
    pub pattern_type: String,
    /// Success factors were captured.
    pub has_factors: bool,
    /// Trust.
    pub trust_score: f64,
    /// Effectiveness.
    pub effectiveness_score: f64,
    /// One-line summary.
    pub factors_summary: String,
    /// Conditions under which it succeeds.
    pub key_conditions: Vec<String>,
    /// `min(1, observations / 10) × success rate`.
    pub confidence: f64,
    /// Advice.
    pub recommendations: Vec<String>,
    /// Successful applications observed.
    pub observation_count: i64,
    /// Success rate: the pattern's applications that led to success, `s / (s + f)` (the
    /// same figure `patterns-list` and the dashboard show), else the factors' own rate.
    pub success_rate: f64,
    /// The success rate as every surface prints it (`66.7% (2 of 3 applications)`).
    pub success_rate_text: String,
}

/// Builds the WHY analysis of one pattern from its record.
pub fn analyze_why(p: &crate::model::PatternRecord) -> WhyAnalysis {
    let factors = p
        .success_factors
        .clone()
        .and_then(|v| serde_json::from_value::<SuccessFactors>(v).ok());
    let mut out = WhyAnalysis {
        pattern_id: p.id.clone(),
        pattern_name: p.pattern_name.clone(),
        pattern_type: p.pattern_type.clone(),
        has_factors: factors.is_some(),
        trust_score: p.trust_score,
        effectiveness_score: p.effectiveness_score,
        factors_summary: "No success factors captured yet".into(),
        key_conditions: Vec::new(),
        confidence: 0.0,
        recommendations: vec!["Apply this pattern more times to capture success factors".into()],
        observation_count: 0,
        success_rate: p.success_rate().unwrap_or(0.0),
        success_rate_text: p.success_rate_text(),
    };
    let Some(f) = factors else { return out };
    let occurrences = f.occurrence_count.max(1);
    // The pattern's current counts, not the rate the factors stored at their last update
    // (upstream's, taken before that application was counted: 100 % while the pattern
    // stood at 2 of 3).
    let rate = p
        .success_rate()
        .unwrap_or_else(|| f.success_rate.clamp(0.0, 1.0));
    let mut parts = Vec::new();
    if !f.validation_types.is_empty() {
        parts.push(format!(
            "validation types: {}",
            f.validation_types.join(", ")
        ));
    }
    if !f.error_categories.is_empty() {
        parts.push(format!(
            "error categories: {}",
            f.error_categories.join(", ")
        ));
    }
    if let Some(b) = &f.time_of_day_bucket {
        parts.push(format!("typically succeeds in: {b}"));
    }
    if let Some(s) = &f.prior_sheet_status {
        parts.push(format!("prior sheet was: {s}"));
    }
    out.factors_summary = if parts.is_empty() {
        "Context captured".into()
    } else {
        parts.join("; ")
    };
    if let Some(g) = f.grounding_confidence.filter(|g| *g > 0.7) {
        out.key_conditions
            .push(format!("High grounding confidence ({g:.2})"));
    }
    out.key_conditions.push(if f.retry_iteration == 0 {
        "Succeeds on first attempt".into()
    } else {
        format!("Often succeeds after {} retries", f.retry_iteration)
    });
    if !f.validation_types.is_empty() {
        let n = f.validation_types.len();
        out.key_conditions.push(format!(
            "Works with {n} validation type{}",
            if n == 1 { "" } else { "s" }
        ));
    }
    if !f.escalation_was_pending {
        out.key_conditions
            .push("Succeeds without escalation".into());
    }
    out.confidence = (occurrences as f64 / 10.0).min(1.0) * rate;
    out.recommendations.clear();
    if occurrences < 5 {
        out.recommendations
            .push("Need more observations for reliable analysis".into());
    }
    if rate > 0.8 {
        out.recommendations
            .push("High confidence pattern - consider for auto-apply".into());
    } else if rate < 0.5 {
        out.recommendations
            .push("Low success rate - review pattern relevance".into());
    }
    if let Some(b) = &f.time_of_day_bucket {
        out.recommendations.push(format!("Best applied during {b}"));
    }
    out.observation_count = occurrences;
    out.success_rate = rate;
    if p.success_rate().is_none() {
        out.success_rate_text = format!("{:.1}% (from its success factors)", rate * 100.0);
    }
    out
}

impl LearningStore {
    /// WHY analysis of one pattern; `None` for unknown ids.
    pub fn analyze_pattern_why(&self, id: &str) -> Result<Option<WhyAnalysis>> {
        Ok(self.get_pattern(id)?.as_ref().map(analyze_why))
    }

    /// Patterns with captured success factors (inactive included), best priority and
    /// trust first, then those with at least `min_observations` observations (§11).
    pub fn patterns_with_why(
        &self,
        min_observations: i64,
        limit: usize,
    ) -> Result<Vec<WhyAnalysis>> {
        let rows = self.read(
            || "querying patterns with success factors".into(),
            |conn| {
                let mut stmt = conn.prepare(&format!(
                    "SELECT {} FROM patterns WHERE success_factors IS NOT NULL
                      ORDER BY priority_score DESC, trust_score DESC LIMIT ?1",
                    crate::model::PATTERN_COLUMNS
                ))?;
                let rows = stmt.query_map([limit as i64], crate::model::pattern_from_row)?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            },
        )?;
        Ok(rows
            .iter()
            .map(analyze_why)
            .filter(|w| w.has_factors && w.observation_count >= min_observations)
            .collect())
    }
}
