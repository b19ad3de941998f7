//! What the store remembers between queries, and when a remembered answer is still
//! valid. Below the store (which owns the caches) and the modules that fill them.

use std::time::{Duration, Instant};

use crate::model::{AutoApply, PatternGuidance, PatternRecord};

/// When the `patterns` table last changed: SQLite's `data_version` (moves when another
/// connection commits), and counters that hooks on this connection bump on its writes —
/// rows added or removed, rows updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PatternsVersion {
    pub(crate) data: i64,
    pub(crate) rows: u64,
    pub(crate) updates: u64,
}

impl PatternsVersion {
    /// Whether a query answered at `self` (at `then`) still answers at `now`. Every sheet's
    /// outcome updates the counters of the patterns it applied; those changes reach the
    /// next selections within a second instead of emptying the cache per sheet. Added or
    /// removed patterns are seen at once; another process's write at once by
    /// [`LearningStore::get_patterns`](crate::LearningStore::get_patterns), within
    /// [`FOREIGN_WRITE_STALENESS`](crate::FOREIGN_WRITE_STALENESS) by a prompt's selection
    /// (see `LearningStore::recent_patterns_version`).
    pub(crate) fn still_valid(&self, then: Instant, now: &PatternsVersion) -> bool {
        self.data == now.data
            && self.rows == now.rows
            && (self.updates == now.updates || then.elapsed() < PATTERN_UPDATE_STALENESS)
    }
}

/// How long a cached pattern query may miss counter updates (see [`PatternsVersion`]).
const PATTERN_UPDATE_STALENESS: Duration = Duration::from_secs(1);

/// A cached pattern query: the version and time it was answered at, and the rows.
pub(crate) type CachedPatterns = (PatternsVersion, Instant, Vec<PatternRecord>);

/// A finished selection, valid while the store's [`PatternsVersion`] says so: every sheet
/// of a job asks the same question, and an empty store answers it the same way each time.
#[derive(Debug)]
pub(crate) struct CachedSelection {
    pub(crate) tags: Vec<String>,
    pub(crate) min_priority: f64,
    pub(crate) instrument: Option<String>,
    pub(crate) auto_apply: Option<AutoApply>,
    pub(crate) version: PatternsVersion,
    pub(crate) at: Instant,
    pub(crate) patterns: Vec<PatternGuidance>,
}
