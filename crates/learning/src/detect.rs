//! Pattern detection over one job's sheet outcomes (learning.md §7) and the guidance text
//! each detected pattern contributes to prompts (§7.11).

use indexmap::IndexMap;

use crate::model::percent;
use crate::model::PatternType;
use crate::outcome::SheetOutcome;
use crate::patterns::PatternDraft;

const MIN_PATTERN_FREQUENCY: usize = 2;
const MIN_ERROR_CATEGORY_FREQUENCY: usize = 3;
const MIN_FIX_SUGGESTION_FREQUENCY: usize = 3;
const MIN_SUCCESSES_WITHOUT_RETRY: usize = 3;
const LOW_CONFIDENCE_THRESHOLD: f64 = 0.7;
const MAX_NORMALIZABLE_REASON_LENGTH: usize = 50;
const EVIDENCE_KEPT: usize = 5;

/// Failure-reason phrases, first match wins (§7.6).
const REASON_PHRASES: &[&str] = &[
    "file not created",
    "file not modified",
    "pattern not found",
    "content empty",
    "content missing",
    "command failed",
    "timeout",
    "permission denied",
    "rate limit",
    "connection refused",
    "connection failed",
    "connection",
    "not found",
    "syntax error",
    "import error",
    "type error",
    "authentication",
    "authorization",
    "access denied",
];

/// A pattern found in a job's outcomes, before it is stored.
#[derive(Clone, Debug, PartialEq)]
pub struct DetectedPattern {
    /// Detector family.
    pub pattern_type: PatternType,
    /// What was seen.
    pub description: String,
    /// How often.
    pub frequency: usize,
    /// Success rate among the evidence.
    pub success_rate: f64,
    /// Context tags; the first one names the stored pattern (§7.12).
    pub context_tags: Vec<String>,
    /// Sheet ids that showed it (at most 5).
    pub evidence: Vec<String>,
    /// Detector confidence in 0–1.
    pub confidence: f64,
}

impl DetectedPattern {
    /// The one-line guidance for prompts (§7.11; detected patterns carry no trust yet).
    pub fn to_prompt_guidance(&self) -> String {
        let d = &self.description;
        let freq = self.frequency;
        match self.pattern_type {
            PatternType::ValidationFailure => format!("⚠️ Common issue: {d} (seen {freq}x)"),
            PatternType::RetrySuccess => {
                format!(
                    "✓ Tip: {d} (works {} of the time)",
                    percent(self.success_rate)
                )
            }
            PatternType::CompletionMode => format!("📝 Partial completion: {d}"),
            PatternType::FirstAttemptSuccess => format!("✓ Best practice: {d}"),
            PatternType::LowConfidence => format!("⚠️ Needs attention: {d}"),
            PatternType::SemanticFailure => format!("🔍 Semantic insight: {d} (seen {freq}x)"),
            PatternType::SemanticInsight => format!("🧠 LLM insight: {d}"),
            PatternType::ResourceAnomaly => format!("⚡ Resource anomaly: {d} (seen {freq}x)"),
            PatternType::ResourceCorrelation => format!("📊 Resource pattern: {d}"),
            PatternType::HighConfidence | PatternType::OutputPattern => d.clone(),
        }
    }

    /// Storage name: `"{type}:{first tag}"`, else the description's first 30 characters
    /// with spaces as underscores, lowercased (§7.12).
    pub fn storage_name(&self) -> String {
        let t = self.pattern_type.as_str();
        match self.context_tags.first() {
            Some(tag) => format!("{t}:{tag}"),
            None => {
                let head: String = self.description.chars().take(30).collect();
                format!("{t}:{}", head.replace(' ', "_").to_lowercase())
            }
        }
    }

    /// The `record_pattern` arguments the job-end aggregation uses (§6.2 step 3).
    pub fn to_draft(&self, instrument: Option<String>) -> PatternDraft {
        PatternDraft {
            pattern_type: self.pattern_type.as_str().to_string(),
            pattern_name: self.storage_name(),
            description: Some(self.description.clone()),
            context_tags: self.context_tags.clone(),
            suggested_action: Some(self.to_prompt_guidance()),
            provenance: None,
            instrument_name: instrument,
        }
    }
}

fn sheet_id(o: &SheetOutcome) -> String {
    format!("{}_sheet_{}", o.job_id, o.sheet_num)
}

fn first_evidence(ids: &[String]) -> Vec<String> {
    ids.iter().take(EVIDENCE_KEPT).cloned().collect()
}

/// Counter that remembers first-insertion order (Python dict semantics).
#[derive(Default)]
struct Tally {
    counts: IndexMap<String, (usize, Vec<String>)>,
}

impl Tally {
    fn add(&mut self, key: &str, evidence: Option<String>, dedup: bool) {
        let entry = self.counts.entry(key.to_string()).or_default();
        entry.0 += 1;
        if let Some(e) = evidence {
            if !(dedup && entry.1.contains(&e)) {
                entry.1.push(e);
            }
        }
    }
}

/// Runs every detector in upstream order and sorts by confidence, stably (§7).
pub fn detect_all(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let mut all = Vec::new();
    all.extend(validation_failures(outcomes));
    all.extend(retry_successes(outcomes));
    all.extend(completion_modes(outcomes));
    all.extend(first_attempt_successes(outcomes));
    all.extend(low_confidence(outcomes));
    all.extend(semantic_failures(outcomes));
    all.extend(error_codes(outcomes));
    all.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    all
}

fn validation_failures(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let mut tally = Tally::default();
    for o in outcomes.iter().filter(|o| !o.fully_validated()) {
        for v in o.validations.iter().filter(|v| !v.passed) {
            let key = if v.rule_type.is_empty() {
                "unknown"
            } else {
                &v.rule_type
            };
            tally.add(key, Some(sheet_id(o)), false);
        }
    }
    tally
        .counts
        .iter()
        .filter(|(_, (n, _))| *n >= MIN_PATTERN_FREQUENCY)
        .map(|(vtype, (n, ev))| DetectedPattern {
            pattern_type: PatternType::ValidationFailure,
            description: format!("'{vtype}' validation tends to fail"),
            frequency: *n,
            success_rate: 0.0,
            context_tags: vec![format!("validation:{vtype}")],
            evidence: first_evidence(ev),
            confidence: (0.5 + 0.1 * *n as f64).min(0.9),
        })
        .collect()
}

fn retry_successes(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let hits: Vec<&SheetOutcome> = outcomes
        .iter()
        .filter(|o| o.retry_count() > 0 && o.fully_validated())
        .collect();
    if hits.len() < MIN_PATTERN_FREQUENCY {
        return Vec::new();
    }
    let n = hits.len();
    let avg = hits.iter().map(|o| f64::from(o.retry_count())).sum::<f64>() / n as f64;
    vec![DetectedPattern {
        pattern_type: PatternType::RetrySuccess,
        description: format!("Retrying works: avg {avg:.1} retries lead to success"),
        frequency: n,
        success_rate: 1.0,
        context_tags: vec!["retry:effective".into()],
        evidence: hits
            .iter()
            .take(EVIDENCE_KEPT)
            .map(|o| sheet_id(o))
            .collect(),
        confidence: (0.5 + 0.1 * n as f64).min(0.8),
    }]
}

fn completion_modes(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let hits: Vec<&SheetOutcome> = outcomes
        .iter()
        .filter(|o| o.completion_attempts > 0)
        .collect();
    if hits.len() < MIN_PATTERN_FREQUENCY {
        return Vec::new();
    }
    let n = hits.len();
    let rate = hits.iter().filter(|o| o.fully_validated()).count() as f64 / n as f64;
    vec![DetectedPattern {
        pattern_type: PatternType::CompletionMode,
        description: format!("Completion mode used {n}x ({} success rate)", percent(rate)),
        frequency: n,
        success_rate: rate,
        context_tags: vec!["completion:used".into()],
        evidence: hits
            .iter()
            .take(EVIDENCE_KEPT)
            .map(|o| sheet_id(o))
            .collect(),
        confidence: (0.4 + 0.1 * n as f64).min(0.7),
    }]
}

fn first_attempt_successes(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let hits: Vec<&SheetOutcome> = outcomes
        .iter()
        .filter(|o| o.success_without_retry())
        .collect();
    if hits.len() < MIN_SUCCESSES_WITHOUT_RETRY {
        return Vec::new();
    }
    let rate = hits.len() as f64 / outcomes.len() as f64;
    vec![DetectedPattern {
        pattern_type: PatternType::FirstAttemptSuccess,
        // "at detection": the share in the job it was detected in, not the pattern's
        // success rate over its applications (a different figure, issue 23).
        description: format!("First-attempt success rate at detection: {}", percent(rate)),
        frequency: hits.len(),
        success_rate: rate,
        context_tags: vec!["success:first_attempt".into()],
        evidence: hits
            .iter()
            .take(EVIDENCE_KEPT)
            .map(|o| sheet_id(o))
            .collect(),
        confidence: (0.6 + 0.3 * rate).min(0.9),
    }]
}

fn low_confidence(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let count = outcomes
        .iter()
        .flat_map(|o| &o.validations)
        .filter(|v| v.confidence.unwrap_or(1.0) < LOW_CONFIDENCE_THRESHOLD)
        .count();
    if count < MIN_PATTERN_FREQUENCY {
        return Vec::new();
    }
    vec![DetectedPattern {
        pattern_type: PatternType::LowConfidence,
        description: format!("{count} validations have low confidence - review needed"),
        frequency: count,
        success_rate: 0.0,
        context_tags: vec!["confidence:low".into()],
        evidence: Vec::new(),
        confidence: 0.6,
    }]
}

/// Maps a free-text failure reason onto a known phrase (§7.6); `""` = not aggregated.
pub fn normalize_failure_reason(reason: &str) -> String {
    let r = reason.trim().to_lowercase();
    if let Some(phrase) = REASON_PHRASES.iter().find(|p| r.contains(*p)) {
        return (*phrase).to_string();
    }
    if r.chars().count() <= MAX_NORMALIZABLE_REASON_LENGTH {
        r
    } else {
        String::new()
    }
}

fn semantic_failures(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let mut categories = Tally::default();
    let mut reasons = Tally::default();
    let mut fixes = Tally::default();
    for o in outcomes {
        for v in o.validations.iter().filter(|v| !v.passed) {
            if let Some(c) = v.failure_category.as_deref().filter(|c| !c.is_empty()) {
                categories.add(c, Some(sheet_id(o)), true);
            }
            if let Some(r) = v.failure_reason.as_deref() {
                let norm = normalize_failure_reason(r);
                if !norm.is_empty() {
                    reasons.add(&norm, Some(sheet_id(o)), true);
                }
            }
            if let Some(f) = v.suggested_fix.as_deref().filter(|f| !f.is_empty()) {
                fixes.add(f, None, false);
            }
        }
    }
    let mut out = Vec::new();
    for (c, (n, ev)) in &categories.counts {
        if *n >= MIN_PATTERN_FREQUENCY {
            out.push(DetectedPattern {
                pattern_type: PatternType::SemanticFailure,
                description: format!("'{c}' failures are common ({n}x)"),
                frequency: *n,
                success_rate: 0.0,
                context_tags: vec![format!("failure_category:{c}")],
                evidence: first_evidence(ev),
                confidence: (0.5 + 0.1 * *n as f64).min(0.85),
            });
        }
    }
    for (r, (n, ev)) in &reasons.counts {
        if *n >= MIN_PATTERN_FREQUENCY {
            out.push(DetectedPattern {
                pattern_type: PatternType::SemanticFailure,
                description: format!("Recurring issue: '{r}' ({n}x)"),
                frequency: *n,
                success_rate: 0.0,
                context_tags: vec![format!("failure_reason:{r}")],
                evidence: first_evidence(ev),
                confidence: (0.45 + 0.1 * *n as f64).min(0.80),
            });
        }
    }
    for (f, (n, _)) in &fixes.counts {
        if *n >= MIN_FIX_SUGGESTION_FREQUENCY {
            out.push(DetectedPattern {
                pattern_type: PatternType::SemanticFailure,
                description: format!("Suggested fix: '{f}' (recommended {n}x)"),
                frequency: *n,
                success_rate: 0.5,
                context_tags: vec!["fix_suggestion".into()],
                evidence: Vec::new(),
                confidence: (0.4 + 0.05 * *n as f64).min(0.70),
            });
        }
    }
    out
}

fn error_codes(outcomes: &[SheetOutcome]) -> Vec<DetectedPattern> {
    let mut codes = Tally::default();
    let mut categories = Tally::default();
    for o in outcomes {
        for code in o.error_codes.iter().filter(|c| !c.is_empty()) {
            codes.add(code, Some(sheet_id(o)), true);
            if code.starts_with('E') && code.len() >= 3 {
                let cat = format!("{}x", code.get(..3).unwrap_or(code));
                categories.add(&cat, None, false);
            }
        }
        for code in o.validations.iter().filter_map(|v| v.error_code.as_deref()) {
            if !code.is_empty() {
                codes.add(code, Some(sheet_id(o)), true);
            }
        }
    }
    let mut out = Vec::new();
    for (code, (n, ev)) in &codes.counts {
        if *n >= MIN_PATTERN_FREQUENCY {
            out.push(DetectedPattern {
                pattern_type: PatternType::ValidationFailure,
                description: format!("Error code '{code}' occurs frequently ({n}x)"),
                frequency: *n,
                success_rate: 0.0,
                context_tags: vec![format!("error_code:{code}")],
                evidence: first_evidence(ev),
                confidence: (0.5 + 0.1 * *n as f64).min(0.85),
            });
        }
    }
    for (cat, (n, _)) in &categories.counts {
        if *n >= MIN_ERROR_CATEGORY_FREQUENCY {
            out.push(DetectedPattern {
                pattern_type: PatternType::ValidationFailure,
                description: format!("Error category '{cat}' is common ({n}x)"),
                frequency: *n,
                success_rate: 0.0,
                context_tags: vec![format!("error_category:{cat}")],
                evidence: Vec::new(),
                confidence: (0.45 + 0.08 * *n as f64).min(0.80),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{SheetStatus, ValidationCheck};

    fn failed(sheet: u32, rule: &str, reason: &str) -> SheetOutcome {
        let mut o = SheetOutcome::new("job", sheet, "/tmp/ws");
        o.status = SheetStatus::Failed;
        o.attempts = 3;
        o.validation_pass_rate = Some(0.0);
        o.error_codes = vec!["E101".into(), "E101".into()];
        o.validations = vec![ValidationCheck {
            rule_type: rule.into(),
            passed: false,
            confidence: Some(0.5),
            failure_reason: Some(reason.into()),
            failure_category: Some("missing".into()),
            ..ValidationCheck::default()
        }];
        o
    }

    fn ok(sheet: u32, attempts: u32) -> SheetOutcome {
        let mut o = SheetOutcome::new("job", sheet, "/tmp/ws");
        o.status = SheetStatus::Completed;
        o.attempts = attempts;
        o.validation_pass_rate = Some(1.0);
        o
    }

    #[test]
    fn realistic_job_yields_upstream_descriptions() {
        let outcomes = vec![
            failed(1, "file_exists", "Expected file NOT created: out.md"),
            failed(2, "file_exists", "file not created"),
            ok(3, 1),
            ok(4, 1),
            ok(5, 1),
            ok(6, 2),
            ok(7, 3),
        ];
        let found = detect_all(&outcomes);
        let descs: Vec<&str> = found.iter().map(|p| p.description.as_str()).collect();
        assert!(
            descs.contains(&"'file_exists' validation tends to fail"),
            "{descs:?}"
        );
        assert!(descs.contains(&"Retrying works: avg 1.5 retries lead to success"));
        assert!(descs.contains(&"First-attempt success rate at detection: 43%"));
        assert!(descs.contains(&"2 validations have low confidence - review needed"));
        assert!(descs.contains(&"'missing' failures are common (2x)"));
        assert!(descs.contains(&"Recurring issue: 'file not created' (2x)"));
        assert!(descs.contains(&"Error code 'E101' occurs frequently (4x)"));
        assert!(descs.contains(&"Error category 'E10x' is common (4x)"));
        // Sorted by confidence, highest first.
        assert!(found.windows(2).all(|w| w[0].confidence >= w[1].confidence));
        let v = found
            .iter()
            .find(|p| p.context_tags == ["validation:file_exists"])
            .unwrap();
        assert_eq!(
            v.storage_name(),
            "validation_failure:validation:file_exists"
        );
        assert_eq!(
            v.to_prompt_guidance(),
            "⚠️ Common issue: 'file_exists' validation tends to fail (seen 2x)"
        );
    }

    #[test]
    fn single_occurrences_are_not_patterns() {
        assert!(detect_all(&[failed(1, "file_exists", "x"), ok(2, 1)])
            .iter()
            .all(|p| p.pattern_type == PatternType::ValidationFailure
                && p.description.starts_with("Error code")));
    }

    #[test]
    fn reason_normalization() {
        assert_eq!(
            normalize_failure_reason("  Connection Refused by host"),
            "connection refused"
        );
        assert_eq!(normalize_failure_reason("odd thing"), "odd thing");
        assert_eq!(normalize_failure_reason(&"x".repeat(51)), "");
    }
}
