//! The global learning store of Mozart (spec: learning.md).
//!
//! The conductor records what happened to each sheet and job; this crate turns those
//! outcomes into patterns, tracks how well each pattern works when injected into prompts,
//! and chooses which patterns a new sheet's prompt gets. Every entry point returns a
//! [`Result`] and never panics: a learning failure must never fail a job, so callers log
//! the error and carry on. Every operation is a handful of small SQLite statements, safe to
//! run from a blocking thread.
//!
//! How the conductor uses it (the hook points of learning.md §6):
//!
//! ```
//! use mozart_learning::*;
//! # fn main() -> Result<()> {
//! # let dir = tempfile::tempdir().map_err(|e| LearningError::InvalidInput { field: "tmp", reason: e.to_string() })?;
//! let store = LearningStore::open(dir.path().join("global-learning.db"))?;
//!
//! // Building sheet 1's prompt: choose patterns, insert the section before the
//! // validation requirements.
//! let tags = ContextTags::for_validations(&["file_exists"]);
//! let mut rng = XorShift64::from_entropy();
//! let selection = store.patterns_for_prompt(&tags, &SelectionConfig::default(), &mut rng)?;
//! let _section: Option<String> = selection.prompt_section();
//!
//! // Sheet 1 reached a terminal state: record it with the patterns it was given.
//! let mut outcome = SheetOutcome::new("my-job", 1, dir.path());
//! outcome.status = SheetStatus::Completed;
//! outcome.validation_pass_rate = Some(1.0);
//! outcome.applied_patterns = selection.pattern_ids();
//! outcome.application_mode = selection.mode;
//! store.record_sheet_outcome(&outcome)?;
//!
//! // The job finished: detect patterns over its sheets, then lifecycle and trust.
//! let summary = store.record_job_outcome(&JobOutcome {
//!     job_id: "my-job".into(),
//!     sheets: vec![outcome],
//!     instrument: Some("claude-code".into()),
//! })?;
//! assert_eq!(summary.outcomes_recorded, 0); // already recorded above
//! store.maintain_after_job()?;
//!
//! // `daemon.learning.patterns`.
//! let _patterns: Vec<PatternRecord> = store.patterns(20)?;
//! # Ok(())
//! # }
//! ```
//!
//! Modules depend in one direction, each only on those above it:
//! 1. leaves: `error`, `hash`, `time`, `schema` (tables and migrations), `model` (pattern
//!    records and the selection vocabulary), `outcome` (what the conductor reports);
//! 2. `cache` (remembered query answers and their validity), then `store` (the connection
//!    and its caches);
//! 3. `patterns` (pattern rows, effectiveness and priority), `detect` (patterns found in a
//!    finished job's outcomes), and the store's other tables: `rate_limits`, `history`,
//!    `entropy`, `drift`, `lifecycle`, `stats`, `success`;
//! 4. `select` (a prompt's patterns) and `record` (outcomes in, detection and feedback).
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))] // tests may unwrap (common.md rule 5)

mod cache;
mod detect;
mod drift;
mod entropy;
mod error;
mod evolution;
mod hash;
mod history;
mod lifecycle;
mod model;
mod outcome;
mod patterns;
mod rate_limits;
mod record;
mod schema;
mod select;
mod stats;
mod store;
mod success;
mod time;

pub use detect::{detect_all, normalize_failure_reason, DetectedPattern};
pub use drift::{effectiveness_drift, epistemic_drift, EffectivenessDrift, EpistemicDrift};
pub use entropy::{
    entropy_of_counts, BudgetRecord, BudgetRules, EntropyCheck, EntropyMetrics, EntropyResponse,
    EntropyResponseConfig,
};
pub use error::{LearningError, Result};
pub use evolution::EvolutionEntry;
pub use hash::{
    content_hash, hash_job, hash_workspace, normalize_pattern_name, pattern_id, sha256_hex_prefix,
};
pub use history::{EntropyResponseRecord, EntropySnapshot, ExecutionRecord};
pub use lifecycle::{trust_score, PromotionReport};
pub use model::{
    ApplicationMode, AutoApply, PatternGuidance, PatternRecord, PatternType, QuarantineStatus,
};
pub use outcome::{JobLearningSummary, JobOutcome, SheetOutcome, SheetStatus, ValidationCheck};
pub use patterns::{
    effectiveness, store_priority, weighter_priority, PatternApplication, PatternDraft,
    PatternQuery,
};
pub use rate_limits::{ExecutionWindow, LearnedDelay, RateLimitEvent};
pub use schema::{BUSY_TIMEOUT, SCHEMA_VERSION};
pub use select::{
    dedup_patterns, render_pattern, render_prompt_section, ContextTags, PatternSelection,
    SelectionConfig, XorShift64, MAX_PROMPT_PATTERNS,
};
pub use stats::LearningStats;
pub use store::{LearningStore, FOREIGN_WRITE_STALENESS};
pub use success::{analyze_why, time_bucket, SuccessFactors, WhyAnalysis};
