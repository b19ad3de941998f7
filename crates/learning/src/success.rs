//! Success factors: the context in which a pattern's applications succeeded (learning.md §11).

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::outcome::SheetOutcome;
use crate::store::LearningStore;

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
        let mut types: Vec<String> = outcome
            .validations
            .iter()
            .map(|v| v.rule_type.clone())
            .collect();
        types.sort();
        types.dedup();
        self.write(
            || format!("updating success factors of pattern {pattern_id}"),
            |tx| {
                let row: Option<(Option<String>, i64, i64)> = tx
                    .query_row(
                        "SELECT success_factors, COALESCE(led_to_success_count, 0),
                                COALESCE(led_to_failure_count, 0) FROM patterns WHERE id = ?1",
                        [pattern_id],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()?;
                let Some((stored, s, f)) = row else {
                    return Ok(false);
                };
                let bucket = time_bucket(now.local_hour()).to_string();
                let existing = stored.and_then(|t| serde_json::from_str::<SuccessFactors>(&t).ok());
                let factors = match existing {
                    Some(mut sf) => {
                        sf.occurrence_count += 1;
                        sf.validation_types.extend(types.iter().cloned());
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
                        validation_types: types.clone(),
                        error_categories: Vec::new(),
                        prior_sheet_status: None,
                        time_of_day_bucket: Some(bucket),
                        retry_iteration: outcome.retry_count(),
                        escalation_was_pending: false,
                        grounding_confidence: outcome.grounding_confidence,
                        occurrence_count: 1,
                        success_rate: 1.0,
                    },
                };
                let text = serde_json::to_string(&factors).unwrap_or_else(|_| "{}".into());
                tx.execute(
                    "UPDATE patterns SET success_factors = ?2, success_factors_updated_at = ?3
                      WHERE id = ?1",
                    params![pattern_id, text, now.local_iso()],
                )?;
                Ok(true)
            },
        )
    }
}
