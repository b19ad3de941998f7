//! The global learning store of Mozart (spec: learning.md).
//!
//! The conductor records what happened to each sheet and job; this crate turns those
//! outcomes into patterns, tracks how well each pattern works when injected into prompts,
//! and chooses which patterns a new sheet's prompt gets. Every entry point returns a
//! [`Result`] and never panics: a learning failure must never fail a job, so callers log
//! the error and carry on. Every operation is a handful of small SQLite statements, safe to
//! run from a blocking thread.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))] // tests may unwrap (common.md rule 5)

mod detect;
mod drift;
mod entropy;
mod error;
mod hash;
mod lifecycle;
mod model;
mod outcome;
mod patterns;
mod rate_limits;
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
pub use hash::{content_hash, hash_job, hash_workspace, normalize_pattern_name, pattern_id};
pub use lifecycle::{trust_score, PromotionReport};
pub use model::{PatternRecord, PatternSummary, PatternType, QuarantineStatus};
pub use outcome::{JobLearningSummary, JobOutcome, SheetOutcome, SheetStatus, ValidationCheck};
pub use patterns::{
    effectiveness, store_priority, weighter_priority, ApplicationMode, PatternApplication,
    PatternDraft, PatternQuery,
};
pub use rate_limits::{ExecutionWindow, LearnedDelay, RateLimitEvent};
pub use schema::SCHEMA_VERSION;
pub use select::{
    dedup_patterns, render_pattern, render_prompt_section, AutoApply, ContextTags, PatternGuidance,
    PatternSelection, SelectionConfig, XorShift64, MAX_PROMPT_PATTERNS,
};
pub use stats::LearningStats;
pub use store::LearningStore;
pub use success::{time_bucket, SuccessFactors};
