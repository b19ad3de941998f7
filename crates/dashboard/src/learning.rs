//! The learning page's data: patterns and pattern-application entropy, read from the global
//! learning database (`$MOZART_HOME/global-learning.db`) as the CLI's pattern commands read it.

use std::path::Path;

use mozart_learning::LearningStore;
use serde::Serialize;

/// Patterns shown.
pub const PATTERN_LIMIT: usize = 100;

/// One pattern row.
#[derive(Debug, Clone, Serialize)]
pub struct PatternView {
    /// Pattern id.
    pub id: String,
    /// Type.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Effectiveness 0–1.
    pub effectiveness: f64,
    /// Success rate as every surface prints it (`66.7% (2 of 3 applications)`).
    pub success_rate: String,
    /// Effectiveness score as every surface prints it (`0.65`).
    pub effectiveness_text: String,
    /// Priority.
    pub priority: f64,
    /// Occurrences.
    pub occurrences: i64,
    /// Trust 0–1.
    pub trust: f64,
    /// Lifecycle state.
    pub status: String,
    /// Last seen.
    pub last_seen: String,
}

/// Entropy figures (learning.md §13.1).
#[derive(Debug, Clone, Serialize)]
pub struct EntropyView {
    /// Shannon entropy (bits).
    pub shannon: f64,
    /// H / H_max.
    pub diversity: f64,
    /// Pattern rows.
    pub patterns: i64,
    /// Patterns applied at least once.
    pub effective: i64,
    /// Applications.
    pub applications: i64,
    /// Share of the most applied pattern.
    pub dominant_share: f64,
    /// Recorded snapshots, oldest first: (when, diversity).
    pub history: Vec<(String, f64)>,
}

/// What the learning page shows.
#[derive(Debug, Clone, Serialize)]
pub struct LearningView {
    /// No database yet.
    pub missing: bool,
    /// A read failed: the message.
    pub error: Option<String>,
    /// Patterns, highest priority first.
    pub patterns: Vec<PatternView>,
    /// Entropy.
    pub entropy: Option<EntropyView>,
}

/// Read the learning database at `path`; never creates one.
pub fn read(path: &Path) -> LearningView {
    let empty = |missing: bool, error: Option<String>| LearningView {
        missing,
        error,
        patterns: Vec::new(),
        entropy: None,
    };
    if !path.is_file() {
        return empty(true, None);
    }
    let store = match LearningStore::open(path) {
        Ok(s) => s,
        Err(e) => return empty(false, Some(format!("Cannot open {}: {e}", path.display()))),
    };
    let patterns = match store.patterns(PATTERN_LIMIT) {
        Ok(p) => p,
        Err(e) => return empty(false, Some(e.to_string())),
    };
    let entropy = store.pattern_entropy().ok().map(|m| {
        let mut history: Vec<(String, f64)> = store
            .entropy_history(50)
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.calculated_at, s.diversity_index))
            .collect();
        history.reverse();
        EntropyView {
            shannon: m.shannon_entropy,
            diversity: m.diversity_index,
            patterns: m.unique_pattern_count,
            effective: m.effective_pattern_count,
            applications: m.total_applications,
            dominant_share: m.dominant_pattern_share,
            history,
        }
    });
    LearningView {
        missing: false,
        error: None,
        patterns: patterns
            .into_iter()
            .map(|p| {
                let success_rate = p.success_rate_text();
                PatternView {
                    id: p.id,
                    kind: p.pattern_type,
                    name: p.pattern_name,
                    description: p.description.unwrap_or_default(),
                    effectiveness: p.effectiveness_score,
                    success_rate,
                    effectiveness_text: format!("{:.2}", p.effectiveness_score),
                    priority: p.priority_score,
                    occurrences: p.occurrence_count,
                    trust: p.trust_score,
                    status: p.quarantine_status.as_str().to_string(),
                    last_seen: p.last_seen.unwrap_or_default(),
                }
            })
            .collect(),
        entropy,
    }
}
