//! Choosing patterns for a sheet's prompt and rendering the "Learned Patterns" section
//! (learning.md §10).

use std::sync::LazyLock;
use std::time::Instant;

use regex::Regex;

use crate::cache::{CachedSelection, PatternsVersion};
use crate::error::Result;
use crate::model::{
    percent, ApplicationMode, AutoApply, PatternGuidance, PatternRecord, QuarantineStatus,
};
use crate::patterns::PatternQuery;
use crate::store::LearningStore;

/// Most patterns a prompt shows (§10.6).
pub const MAX_PROMPT_PATTERNS: usize = 5;
/// Priority floor in exploitation mode (§10.2, hard-coded upstream).
const EXPLOITATION_MIN_PRIORITY: f64 = 0.3;

/// A tiny xorshift64* generator: deterministic under a seed, no `rand` dependency.
#[derive(Clone, Debug)]
pub struct XorShift64 {
    state: u64,
}

impl XorShift64 {
    /// A generator from `seed` (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Self {
        XorShift64 {
            state: if seed == 0 {
                0x9E37_79B9_7F4A_7C15
            } else {
                seed
            },
        }
    }

    /// Seeded from the clock and process id (production use).
    pub fn from_entropy() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self::new(nanos ^ (u64::from(std::process::id()) << 32))
    }

    /// Next raw value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Context tags a sheet's pattern query uses (§10.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextTags(pub Vec<String>);

impl ContextTags {
    /// `validation:{type}` for each distinct validation type of the score (in order), then
    /// the three generic tags upstream always adds.
    pub fn for_validations<S: AsRef<str>>(validation_types: &[S]) -> Self {
        let mut tags: Vec<String> = Vec::new();
        for t in validation_types {
            let tag = format!("validation:{}", t.as_ref());
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
        tags.extend(
            [
                "success:first_attempt",
                "retry:effective",
                "completion:used",
            ]
            .map(String::from),
        );
        ContextTags(tags)
    }
}

/// How a sheet's patterns are chosen (score `learning:` keys, §18).
#[derive(Clone, Debug, PartialEq)]
pub struct SelectionConfig {
    /// Epsilon of the epsilon-greedy draw (default 0.15).
    pub exploration_rate: f64,
    /// Priority floor in exploration mode (default 0.05).
    pub exploration_min_priority: f64,
    /// Instrument the sheet runs on.
    pub instrument: Option<String>,
    /// Auto-apply, when enabled in the score.
    pub auto_apply: Option<AutoApply>,
}

impl Default for SelectionConfig {
    fn default() -> Self {
        SelectionConfig {
            exploration_rate: 0.15,
            exploration_min_priority: 0.05,
            instrument: None,
            auto_apply: None,
        }
    }
}

/// The patterns chosen for one sheet.
#[derive(Clone, Debug, PartialEq)]
pub struct PatternSelection {
    /// Which mode the draw picked.
    pub mode: ApplicationMode,
    /// Chosen patterns, in prompt order (at most [`MAX_PROMPT_PATTERNS`]).
    pub patterns: Vec<PatternGuidance>,
}

impl PatternSelection {
    /// Ids to put into [`crate::SheetOutcome::applied_patterns`].
    pub fn pattern_ids(&self) -> Vec<String> {
        self.patterns.iter().map(|p| p.pattern_id.clone()).collect()
    }

    /// The `## Learned Patterns` prompt section, or `None` when nothing was chosen.
    pub fn prompt_section(&self) -> Option<String> {
        let lines: Vec<&str> = self.patterns.iter().map(|p| p.text.as_str()).collect();
        render_prompt_section(&lines)
    }
}

/// Renders the section exactly as upstream's prompt builder does (§10.6): at most 5 items.
pub fn render_prompt_section<S: AsRef<str>>(items: &[S]) -> Option<String> {
    if items.is_empty() {
        return None;
    }
    let mut lines = vec![
        "## Learned Patterns".to_string(),
        String::new(),
        "Based on previous executions, here are relevant insights:".to_string(),
        String::new(),
    ];
    for (i, item) in items.iter().take(MAX_PROMPT_PATTERNS).enumerate() {
        lines.push(format!("{}. {}", i + 1, item.as_ref()));
    }
    lines.push(String::new());
    lines.push("Consider these patterns when executing this sheet.".to_string());
    lines.push("Key: ✓ = high effectiveness, ○ = moderate, ⚠ = low/untested".to_string());
    lines.push(String::new());
    Some(lines.join("\n"))
}

/// One global pattern as a prompt line (§10.5).
pub fn render_pattern(p: &PatternRecord) -> String {
    let eff = p.effectiveness_score;
    let indicator = if eff > 0.7 {
        "✓"
    } else if eff > 0.4 {
        "○"
    } else {
        "⚠"
    };
    let what = p.description.as_deref().unwrap_or(&p.pattern_name);
    format!(
        "{indicator} {what} (seen {}x, {} effective)",
        p.occurrence_count,
        percent(eff)
    )
}

/// Dedup key of §10.4.
fn dedup_key(p: &PatternRecord, noise: &Regex) -> String {
    let text = p
        .description
        .as_deref()
        .filter(|d| !d.is_empty())
        .unwrap_or(&p.pattern_name)
        .to_lowercase()
        .replace('_', " ");
    let stripped = noise.replace_all(&text, "");
    let collapsed = stripped.split_whitespace().collect::<Vec<_>>().join(" ");
    collapsed.chars().take(30).collect()
}

/// Keeps, per dedup group, the pattern with the strictly highest effectiveness; groups stay
/// in first-appearance order (§10.4).
pub fn dedup_patterns(patterns: Vec<PatternRecord>) -> Vec<PatternRecord> {
    // Compiled once: a case-insensitive Unicode alternation costs ~0.5 ms to build, which
    // per prompt was the conductor's largest single cost.
    static NOISE: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"(?i)\b(error|issue|problem|failed|failure|the|a|an)\b").ok());
    if patterns.len() < 2 {
        return patterns;
    }
    let Some(noise) = NOISE.as_ref() else {
        return patterns;
    };
    let mut groups: indexmap::IndexMap<String, PatternRecord> = indexmap::IndexMap::new();
    for p in patterns {
        let key = dedup_key(&p, noise);
        match groups.get_mut(&key) {
            Some(kept) if p.effectiveness_score > kept.effectiveness_score => *kept = p,
            Some(_) => {}
            None => {
                groups.insert(key, p);
            }
        }
    }
    groups.into_values().collect()
}

/// The epsilon-greedy draw (§10.2) and the priority floor it sets.
fn draw_mode(config: &SelectionConfig, rng: &mut XorShift64) -> (ApplicationMode, f64) {
    if rng.next_f64() < config.exploration_rate {
        (
            ApplicationMode::Exploration,
            config.exploration_min_priority,
        )
    } else {
        (ApplicationMode::Exploitation, EXPLOITATION_MIN_PRIORITY)
    }
}

impl LearningStore {
    /// Chooses the patterns for one sheet's prompt (§10.2–§10.5): one epsilon-greedy draw,
    /// auto-apply patterns first, then the best tag-matching patterns, falling back to the
    /// best of any tag. Quarantined and retired patterns are never injected (upstream did
    /// not filter them, §10.3).
    pub fn patterns_for_prompt(
        &self,
        tags: &ContextTags,
        config: &SelectionConfig,
        rng: &mut XorShift64,
    ) -> Result<PatternSelection> {
        let (mode, min_priority) = draw_mode(config, rng);
        let key = SelectionKey::new(tags, config, min_priority);
        // The version is taken before the queries: a change that races them moves it past
        // what the cached answer is stored at.
        let version = self.recent_patterns_version();
        if let Some(version) = &version {
            if let Some(patterns) = self.cached_selection(&key, version) {
                return Ok(PatternSelection { mode, patterns });
            }
        }
        let patterns = self.select_uncached(tags, config, min_priority)?;
        if let Some(version) = version {
            self.remember_selection(&key, version, &patterns);
        }
        Ok(PatternSelection { mode, patterns })
    }

    /// [`LearningStore::patterns_for_prompt`] when it can be answered from memory — the
    /// same choice, by the same draw — without a statement or waiting for the connection,
    /// so an async caller need not move to a blocking thread for it. `None` (and `rng`
    /// untouched) when SQLite has to be asked.
    pub fn cached_patterns_for_prompt(
        &self,
        tags: &ContextTags,
        config: &SelectionConfig,
        rng: &mut XorShift64,
    ) -> Option<PatternSelection> {
        let mut draw = rng.clone();
        let (mode, min_priority) = draw_mode(config, &mut draw);
        let version = self.ready_patterns_version()?;
        let patterns =
            self.cached_selection(&SelectionKey::new(tags, config, min_priority), &version)?;
        *rng = draw;
        Some(PatternSelection { mode, patterns })
    }

    fn select_uncached(
        &self,
        tags: &ContextTags,
        config: &SelectionConfig,
        min_priority: f64,
    ) -> Result<Vec<PatternGuidance>> {
        let auto: Vec<PatternRecord> = match &config.auto_apply {
            Some(a) => self.get_patterns_for_auto_apply(
                a.trust_threshold,
                a.require_validated,
                a.max_patterns_per_sheet,
                Some(&tags.0),
            )?,
            None => Vec::new(),
        };
        let base = PatternQuery {
            min_priority,
            limit: MAX_PROMPT_PATTERNS,
            instrument: config.instrument.clone(),
            exclude_statuses: vec![QuarantineStatus::Quarantined, QuarantineStatus::Retired],
            ..PatternQuery::default()
        };
        let mut queried = self.get_patterns(&PatternQuery {
            context_tags: Some(tags.0.clone()),
            ..base.clone()
        })?;
        queried.retain(|p| !auto.iter().any(|a| a.id == p.id));
        if auto.is_empty() && queried.is_empty() {
            queried = self.get_patterns(&base)?;
        }
        let auto_ids: Vec<String> = auto.iter().map(|p| p.id.clone()).collect();
        let combined: Vec<PatternRecord> = auto.into_iter().chain(queried).collect();
        let mut seen_text: Vec<String> = Vec::new();
        let mut chosen = Vec::new();
        for p in dedup_patterns(combined) {
            let text = render_pattern(&p);
            if seen_text.contains(&text) {
                continue;
            }
            seen_text.push(text.clone());
            let auto_applied = auto_ids.contains(&p.id);
            chosen.push(PatternGuidance {
                exploration: !auto_applied && p.priority_score < EXPLOITATION_MIN_PRIORITY,
                pattern_id: p.id,
                text,
                auto_applied,
            });
        }
        // Upstream credits every selected pattern, shown or not (§10.6); only the ones the
        // prompt actually shows can have helped, so only those are kept.
        chosen.truncate(MAX_PROMPT_PATTERNS);
        Ok(chosen)
    }

    fn cached_selection(
        &self,
        key: &SelectionKey<'_>,
        version: &PatternsVersion,
    ) -> Option<Vec<PatternGuidance>> {
        let cache = self.prompt_cache.lock().ok()?;
        let hit = cache.iter().find(|c| key.matches(c))?;
        hit.version
            .still_valid(hit.at, version)
            .then(|| hit.patterns.clone())
    }

    fn remember_selection(
        &self,
        key: &SelectionKey<'_>,
        version: PatternsVersion,
        patterns: &[PatternGuidance],
    ) {
        let Ok(mut cache) = self.prompt_cache.lock() else {
            return;
        };
        cache.retain(|c| !key.matches(c));
        if cache.len() >= PROMPT_CACHE_LIMIT {
            cache.remove(0);
        }
        cache.push(CachedSelection {
            tags: key.tags.to_vec(),
            min_priority: key.min_priority,
            instrument: key.instrument.map(str::to_string),
            auto_apply: key.auto_apply.cloned(),
            version,
            at: Instant::now(),
            patterns: patterns.to_vec(),
        });
    }
}

/// Most prompt queries remembered (a job's sheets ask one or two; a few jobs run at once).
const PROMPT_CACHE_LIMIT: usize = 64;

/// What a prompt's selection depends on besides the store's contents (§10.1–§10.3).
struct SelectionKey<'a> {
    tags: &'a [String],
    min_priority: f64,
    instrument: Option<&'a str>,
    auto_apply: Option<&'a AutoApply>,
}

impl<'a> SelectionKey<'a> {
    fn new(tags: &'a ContextTags, config: &'a SelectionConfig, min_priority: f64) -> Self {
        SelectionKey {
            tags: &tags.0,
            min_priority,
            instrument: config.instrument.as_deref(),
            auto_apply: config.auto_apply.as_ref(),
        }
    }

    fn matches(&self, c: &CachedSelection) -> bool {
        c.min_priority.to_bits() == self.min_priority.to_bits()
            && c.tags == self.tags
            && c.instrument.as_deref() == self.instrument
            && c.auto_apply.as_ref() == self.auto_apply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_deterministic_and_uniformish() {
        let mut a = XorShift64::new(42);
        let mut b = XorShift64::new(42);
        let xs: Vec<f64> = (0..1000).map(|_| a.next_f64()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.next_f64()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let below = xs.iter().filter(|x| **x < 0.15).count();
        assert!((100..200).contains(&below), "{below}");
    }

    #[test]
    fn context_tags_follow_upstream_order() {
        let t = ContextTags::for_validations(&["file_exists", "command_succeeds", "file_exists"]);
        assert_eq!(
            t.0,
            [
                "validation:file_exists",
                "validation:command_succeeds",
                "success:first_attempt",
                "retry:effective",
                "completion:used"
            ]
        );
    }

    #[test]
    fn prompt_section_is_byte_exact_and_capped() {
        let items: Vec<String> = (1..=7).map(|i| format!("item {i}")).collect();
        let s = render_prompt_section(&items).unwrap();
        assert_eq!(
            s,
            "## Learned Patterns\n\nBased on previous executions, here are relevant insights:\n\n\
             1. item 1\n2. item 2\n3. item 3\n4. item 4\n5. item 5\n\n\
             Consider these patterns when executing this sheet.\n\
             Key: ✓ = high effectiveness, ○ = moderate, ⚠ = low/untested\n"
        );
        assert!(render_prompt_section::<String>(&[]).is_none());
    }
}
