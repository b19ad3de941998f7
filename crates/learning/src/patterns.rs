//! Recording patterns (dedup and merge, learning.md §8), querying them (§10.3), and the
//! feedback loop of applications → effectiveness → priority (§9).

use std::collections::HashMap;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use crate::error::Result;
use crate::hash::{content_hash, pattern_id};
use crate::model::{pattern_from_row, PatternRecord, QuarantineStatus, PATTERN_COLUMNS};
use crate::outcome::SheetOutcome;
use crate::store::{new_row_id, LearningStore};
use crate::time::Now;

/// A pattern to record (§8.1 `record_pattern` arguments).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PatternDraft {
    /// Type text (see [`crate::PatternType::as_str`]).
    pub pattern_type: String,
    /// Name; normalized only for the id.
    pub pattern_name: String,
    /// Description.
    pub description: Option<String>,
    /// Context tags (overwrite the stored ones on re-detection).
    pub context_tags: Vec<String>,
    /// Guidance text for prompts.
    pub suggested_action: Option<String>,
    /// `(job_hash, sheet_num)` that produced it.
    pub provenance: Option<(String, i64)>,
    /// Instrument it was learned on.
    pub instrument_name: Option<String>,
}

/// Filters for [`LearningStore::get_patterns`]; defaults match upstream's `get_patterns`.
#[derive(Clone, Debug, PartialEq)]
pub struct PatternQuery {
    /// `priority_score >= min_priority` (default 0.01).
    pub min_priority: f64,
    /// Maximum rows (default 20).
    pub limit: usize,
    /// Exact type.
    pub pattern_type: Option<String>,
    /// Keep rows sharing at least one tag with these.
    pub context_tags: Option<Vec<String>>,
    /// Keep rows learned on this instrument or on no particular instrument.
    pub instrument: Option<String>,
    /// Exact lifecycle state.
    pub quarantine_status: Option<QuarantineStatus>,
    /// Drop rows in these states.
    pub exclude_statuses: Vec<QuarantineStatus>,
    /// `trust_score >= min_trust`.
    pub min_trust: Option<f64>,
    /// `trust_score <= max_trust`.
    pub max_trust: Option<f64>,
    /// Include soft-deleted rows.
    pub include_inactive: bool,
}

impl Default for PatternQuery {
    fn default() -> Self {
        PatternQuery {
            min_priority: 0.01,
            limit: 20,
            pattern_type: None,
            context_tags: None,
            instrument: None,
            quarantine_status: None,
            exclude_statuses: Vec::new(),
            min_trust: None,
            max_trust: None,
            include_inactive: false,
        }
    }
}

/// Minimum applications before effectiveness leaves the cold-start value (§9.1).
const MIN_APPLICATIONS: i64 = 3;
const COLD_START_EFFECTIVENESS: f64 = 0.55;
const DECAY_BASE: f64 = 0.9;
const DECAY_PERIOD_DAYS: f64 = 30.0;
const GROUNDING_BASE_WEIGHT: f64 = 0.7;
const GROUNDING_SENSITIVITY: f64 = 0.3;
const RECENT_WEIGHT: f64 = 0.7;
const FREQUENCY_FACTOR_FLOOR: f64 = 0.6;

/// Effectiveness after an application (§9.1). `recent` holds up to the 5 most recent
/// outcomes, `groundings` their non-NULL grounding confidences.
pub fn effectiveness(s: i64, f: i64, recent: &[bool], groundings: &[f64], days: i64) -> f64 {
    let n = s + f;
    if n < MIN_APPLICATIONS {
        return COLD_START_EFFECTIVENESS;
    }
    let historical = (s as f64 + 0.5) / (n as f64 + 1.0);
    let recent_rate = if recent.is_empty() {
        historical
    } else {
        recent.iter().filter(|ok| **ok).count() as f64 / recent.len() as f64
    };
    let avg_grounding = if groundings.is_empty() {
        1.0
    } else {
        groundings.iter().sum::<f64>() / groundings.len() as f64
    };
    let decay = DECAY_BASE.powf(days as f64 / DECAY_PERIOD_DAYS);
    (RECENT_WEIGHT * recent_rate + (1.0 - RECENT_WEIGHT) * historical)
        * decay
        * (GROUNDING_BASE_WEIGHT + GROUNDING_SENSITIVITY * avg_grounding)
}

/// Priority written with each application (§9.2).
pub fn store_priority(effectiveness: f64, occurrences: i64, variance: f64) -> f64 {
    let freq = ((occurrences as f64 + 1.0).log10() / 2.0).min(1.0);
    (effectiveness * freq.max(FREQUENCY_FACTOR_FLOOR) * (1.0 - variance)).clamp(0.0, 1.0)
}

/// Priority written by the job-end re-weighting (§9.3, upstream `PatternWeighter`).
pub fn weighter_priority(s: i64, f: i64, occurrences: i64, days: i64, variance: f64) -> f64 {
    let n = s + f;
    let eff = if n < MIN_APPLICATIONS {
        0.5
    } else {
        (s as f64 + 0.5) / (n as f64 + 1.0)
    };
    let recency = (1.0f64 - 0.1).powf(days as f64 / 30.0).clamp(0.0, 1.0);
    let frequency = if occurrences <= 0 {
        0.0
    } else {
        ((occurrences as f64 + 1.0).ln() / 100f64.ln()).min(1.0)
    };
    (eff * recency * frequency * (1.0 - variance.min(1.0))).clamp(0.0, 1.0)
}

impl LearningStore {
    /// Records a detection: bumps an existing row (by id, then by content hash) or inserts a
    /// new pending one (§8.1). Returns the row id.
    pub fn record_pattern(&self, draft: &PatternDraft) -> Result<String> {
        let now = self.now();
        self.write(
            || {
                format!(
                    "recording pattern {}:{}",
                    draft.pattern_type, draft.pattern_name
                )
            },
            |tx| record_pattern_tx(tx, draft, &now),
        )
    }

    /// Patterns matching `query`, highest priority first.
    pub fn get_patterns(&self, query: &PatternQuery) -> Result<Vec<PatternRecord>> {
        self.read(
            || "querying patterns".into(),
            |conn| {
                let Some(version) = self.patterns_version(conn) else {
                    return query_patterns(conn, query);
                };
                let key = format!("{query:?}");
                let mut cache = match self.pattern_cache.lock() {
                    Ok(c) => c,
                    Err(_) => return query_patterns(conn, query),
                };
                if let Some((v, at, rows)) = cache.get(&key) {
                    if v.still_valid(*at, &version) {
                        return Ok(rows.clone());
                    }
                }
                let rows = query_patterns(conn, query)?;
                if cache.len() >= 256 {
                    cache.clear();
                }
                cache.insert(key, (version, std::time::Instant::now(), rows.clone()));
                Ok(rows)
            },
        )
    }

    /// One pattern by id (inactive included).
    pub fn get_pattern(&self, id: &str) -> Result<Option<PatternRecord>> {
        self.read(
            || format!("reading pattern {id}"),
            |conn| {
                conn.query_row(
                    &format!("SELECT {PATTERN_COLUMNS} FROM patterns WHERE id = ?1"),
                    [id],
                    pattern_from_row,
                )
                .optional()
            },
        )
    }

    /// The patterns `daemon.learning.patterns` lists (conductor.md §8.25; the conductor
    /// shapes them as `mozart_ipc::status::LearnedPattern`): active patterns of any priority,
    /// highest first.
    pub fn patterns(&self, limit: usize) -> Result<Vec<PatternRecord>> {
        self.get_patterns(&PatternQuery {
            min_priority: 0.0,
            limit,
            ..PatternQuery::default()
        })
    }

    /// Records that a pattern was applied to a sheet and whether it helped, then recomputes
    /// its effectiveness and priority (§9.4). Unknown ids write nothing and return `None`.
    pub fn record_pattern_application(
        &self,
        application: &PatternApplication,
    ) -> Result<Option<String>> {
        self.record_application(application, None)
    }

    /// [`LearningStore::record_pattern_application`]; for a successful application with
    /// `success_of` given, the same statement also folds that sheet's context into the
    /// pattern's success factors ([`LearningStore::update_success_factors`], §11).
    pub(crate) fn record_application(
        &self,
        application: &PatternApplication,
        success_of: Option<&SheetOutcome>,
    ) -> Result<Option<String>> {
        let now = self.now();
        self.write_application(
            || {
                format!(
                    "recording application of pattern {}",
                    application.pattern_id
                )
            },
            |tx| match self.pending_patterns().as_mut() {
                // Inside a batch the pattern's row is written once, at its commit.
                Some(pending) => {
                    record_application_batched(tx, pending, application, success_of, &now)
                }
                None => record_application_tx(tx, application, success_of, &now),
            },
        )
    }

    /// Soft-deletes a pattern (hidden from queries unless `include_inactive`). Returns
    /// whether a row changed.
    pub fn soft_delete_pattern(&self, id: &str) -> Result<bool> {
        self.write(
            || format!("soft-deleting pattern {id}"),
            |tx| {
                Ok(crate::store::exec(
                    tx,
                    "UPDATE patterns SET active = 0 WHERE id = ?1 AND COALESCE(active, 1) = 1",
                    [id],
                )? > 0)
            },
        )
    }

    /// Job-end re-weighting of every applied pattern's priority (§9.3). Returns how many
    /// rows were updated.
    pub fn reweight_priorities(&self) -> Result<usize> {
        let now = self.now();
        self.write(
            || "re-weighting pattern priorities".into(),
            |tx| reweight_tx(tx, &now),
        )
    }
}

/// One application of a pattern to a sheet (§9.4 arguments).
#[derive(Clone, Debug, PartialEq)]
pub struct PatternApplication {
    /// Pattern id.
    pub pattern_id: String,
    /// Execution this was applied to (the `executions` row id when known).
    pub execution_id: String,
    /// Validation passed on the first attempt.
    pub led_to_success: bool,
    /// Retries before.
    pub retry_count_before: i64,
    /// Retries after.
    pub retry_count_after: i64,
    /// Grounding confidence when grounding hooks ran.
    pub grounding_confidence: Option<f64>,
}

pub(crate) fn record_pattern_tx(
    tx: &Connection,
    d: &PatternDraft,
    now: &Now,
) -> rusqlite::Result<String> {
    let id = pattern_id(&d.pattern_type, &d.pattern_name);
    let chash = content_hash(&d.pattern_type, &d.pattern_name, d.description.as_deref());
    let ts = now.local_iso();
    let tags = serde_json::to_string(&d.context_tags).unwrap_or_else(|_| "[]".into());
    let exists: bool = crate::store::query_one(
        tx,
        "SELECT EXISTS(SELECT 1 FROM patterns WHERE id = ?1)",
        [&id],
        |r| r.get(0),
    )?;
    if exists {
        crate::store::exec(
            tx,
            "UPDATE patterns SET occurrence_count = occurrence_count + 1, last_seen = ?2,
                    description = COALESCE(?3, description),
                    suggested_action = COALESCE(?4, suggested_action),
                    context_tags = ?5, content_hash = ?6, active = 1
              WHERE id = ?1",
            params![id, ts, d.description, d.suggested_action, tags, chash],
        )?;
        return Ok(id);
    }
    let by_content: Option<String> = crate::store::query_one(
        tx,
        "SELECT id FROM patterns WHERE content_hash = ?1 ORDER BY priority_score DESC LIMIT 1",
        [&chash],
        |r| r.get(0),
    )
    .optional()?;
    if let Some(existing) = by_content {
        crate::store::exec(tx,
            "UPDATE patterns SET occurrence_count = occurrence_count + 1, last_seen = ?2, active = 1
              WHERE id = ?1",
            params![existing, ts],
        )?;
        tracing::debug!(pattern_id = %existing, "learning.pattern_merged_by_content_hash");
        return Ok(existing);
    }
    let (prov_job, prov_sheet) = match &d.provenance {
        Some((j, s)) => (Some(j.as_str()), Some(*s)),
        None => (None, None),
    };
    crate::store::exec(
        tx,
        "INSERT INTO patterns (id, pattern_type, pattern_name, description, occurrence_count,
             first_seen, last_seen, last_confirmed, led_to_success_count, led_to_failure_count,
             effectiveness_score, variance, suggested_action, context_tags, priority_score,
             quarantine_status, provenance_job_hash, provenance_sheet_num, trust_score,
             trust_calculation_date, content_hash, instrument_name, active)
         VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5, ?5, 0, 0, 0.5, 0.0, ?6, ?7, 0.5, 'pending', ?8, ?9,
                 0.5, ?5, ?10, ?11, 1)",
        params![
            id,
            d.pattern_type,
            d.pattern_name,
            d.description,
            ts,
            d.suggested_action,
            tags,
            prov_job,
            prov_sheet,
            chash,
            d.instrument_name
        ],
    )?;
    Ok(id)
}

pub(crate) fn query_patterns(
    conn: &rusqlite::Connection,
    q: &PatternQuery,
) -> rusqlite::Result<Vec<PatternRecord>> {
    let mut sql = format!("SELECT {PATTERN_COLUMNS} FROM patterns WHERE priority_score >= ?");
    let mut args: Vec<rusqlite::types::Value> = vec![q.min_priority.into()];
    if !q.include_inactive {
        sql.push_str(" AND COALESCE(active, 1) = 1");
    }
    if let Some(t) = &q.pattern_type {
        sql.push_str(" AND pattern_type = ?");
        args.push(t.clone().into());
    }
    if let Some(i) = &q.instrument {
        // Upstream matches the instrument exactly, which hides every conductor-written
        // (NULL) row and mismatches profile vs backend names (§10.3); unscoped rows apply
        // to every instrument.
        sql.push_str(" AND (instrument_name IS NULL OR instrument_name = ?)");
        args.push(i.clone().into());
    }
    if let Some(s) = q.quarantine_status {
        sql.push_str(" AND COALESCE(quarantine_status, 'pending') = ?");
        args.push(s.as_str().to_string().into());
    }
    for s in &q.exclude_statuses {
        sql.push_str(" AND COALESCE(quarantine_status, 'pending') != ?");
        args.push(s.as_str().to_string().into());
    }
    if let Some(t) = q.min_trust {
        sql.push_str(" AND COALESCE(trust_score, 0.5) >= ?");
        args.push(t.into());
    }
    if let Some(t) = q.max_trust {
        sql.push_str(" AND COALESCE(trust_score, 0.5) <= ?");
        args.push(t.into());
    }
    if let Some(tags) = &q.context_tags {
        if !tags.is_empty() {
            let marks = vec!["?"; tags.len()].join(", ");
            sql.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(patterns.context_tags) \
                 THEN patterns.context_tags ELSE '[]' END) WHERE json_each.value IN ({marks}))"
            ));
            args.extend(tags.iter().map(|t| t.clone().into()));
        }
    }
    sql.push_str(" ORDER BY priority_score DESC LIMIT ?");
    args.push((q.limit.min(i64::MAX as usize) as i64).into());
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), pattern_from_row)?;
    rows.collect()
}

fn record_application_tx(
    tx: &Connection,
    a: &PatternApplication,
    success_of: Option<&SheetOutcome>,
    now: &Now,
) -> rusqlite::Result<Option<String>> {
    // The pattern's counters, read once: they tell whether it exists and, with the new
    // application, give the values the refresh of §9.4 computes. One UPDATE then writes
    // counters, confirmation time, effectiveness and priority together.
    let Some(mut stats) = pattern_stats_tx(tx, &a.pattern_id)? else {
        tracing::debug!(pattern_id = %a.pattern_id, "learning.pattern_application_skipped");
        return Ok(None);
    };
    let ts = now.local_iso();
    let app_id = insert_application_tx(tx, a, &ts)?;
    let folded = stats.count(a, success_of, &ts, now);
    let (eff, priority) = refreshed_scores_tx(tx, &a.pattern_id, &stats, now)?;
    if folded {
        crate::store::exec(
            tx,
            "UPDATE patterns SET led_to_success_count = ?2, last_confirmed = ?3,
                    effectiveness_score = ?4, priority_score = ?5,
                    success_factors = ?6, success_factors_updated_at = ?3 WHERE id = ?1",
            params![
                a.pattern_id,
                stats.successes,
                ts,
                eff,
                priority,
                stats.factors_text()
            ],
        )?;
    } else if a.led_to_success {
        crate::store::exec(
            tx,
            "UPDATE patterns SET led_to_success_count = ?2, last_confirmed = ?3,
                    effectiveness_score = ?4, priority_score = ?5 WHERE id = ?1",
            params![a.pattern_id, stats.successes, ts, eff, priority],
        )?;
    } else {
        crate::store::exec(
            tx,
            "UPDATE patterns SET led_to_failure_count = ?2,
                    effectiveness_score = ?3, priority_score = ?4 WHERE id = ?1",
            params![a.pattern_id, stats.failures, eff, priority],
        )?;
    }
    Ok(Some(app_id))
}

fn insert_application_tx(
    tx: &Connection,
    a: &PatternApplication,
    ts: &str,
) -> rusqlite::Result<String> {
    let app_id = new_row_id();
    crate::store::exec(
        tx,
        "INSERT INTO pattern_applications (id, pattern_id, execution_id, applied_at,
             pattern_led_to_success, retry_count_before, retry_count_after, grounding_confidence)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            app_id,
            a.pattern_id,
            a.execution_id,
            ts,
            a.led_to_success,
            a.retry_count_before,
            a.retry_count_after,
            a.grounding_confidence
        ],
    )?;
    Ok(app_id)
}

/// A pattern's counters as the applications of an open batch ([`LearningStore::batch`])
/// left them. A fan-out applies the same few patterns to every sheet: each application
/// read the pattern's row, refreshed its scores from its newest applications and rewrote
/// it (with its indexes) — ~40 % of the learning writer's work a sheet (issue 24). In a
/// batch each application still inserts its own row and is counted here; the pattern's
/// row is read once and written once, at the commit, with the scores the last
/// application would have given it (they depend only on the counters, the newest
/// applications and the time).
#[derive(Debug)]
pub(crate) struct PendingPattern {
    stats: PatternStats,
    /// The time of the batch's last application (the recency of the refreshed scores).
    now: Now,
    succeeded: bool,
    failed: bool,
    /// When the success factors were last folded in, if they were in this batch.
    factors_at: Option<String>,
}

fn record_application_batched(
    tx: &Connection,
    pending: &mut HashMap<String, PendingPattern>,
    a: &PatternApplication,
    success_of: Option<&SheetOutcome>,
    now: &Now,
) -> rusqlite::Result<Option<String>> {
    if !pending.contains_key(&a.pattern_id) {
        let Some(stats) = pattern_stats_tx(tx, &a.pattern_id)? else {
            tracing::debug!(pattern_id = %a.pattern_id, "learning.pattern_application_skipped");
            return Ok(None);
        };
        pending.insert(
            a.pattern_id.clone(),
            PendingPattern {
                stats,
                now: now.clone(),
                succeeded: false,
                failed: false,
                factors_at: None,
            },
        );
    }
    let ts = now.local_iso();
    let app_id = insert_application_tx(tx, a, &ts)?;
    if let Some(p) = pending.get_mut(&a.pattern_id) {
        if p.stats.count(a, success_of, &ts, now) {
            p.factors_at = Some(ts);
        }
        p.succeeded |= a.led_to_success;
        p.failed |= !a.led_to_success;
        p.now = now.clone();
    }
    Ok(Some(app_id))
}

/// Writes the counters a batch's applications left in `p` to the pattern's row (see
/// [`PendingPattern`]): only the columns those applications changed.
pub(crate) fn write_pending_tx(
    tx: &Connection,
    pattern_id: &str,
    p: &PendingPattern,
) -> rusqlite::Result<()> {
    let (eff, priority) = refreshed_scores_tx(tx, pattern_id, &p.stats, &p.now)?;
    crate::store::exec(
        tx,
        "UPDATE patterns SET
            led_to_success_count = CASE WHEN ?2 THEN ?3 ELSE led_to_success_count END,
            last_confirmed = CASE WHEN ?2 THEN ?4 ELSE last_confirmed END,
            led_to_failure_count = CASE WHEN ?5 THEN ?6 ELSE led_to_failure_count END,
            effectiveness_score = ?7, priority_score = ?8,
            success_factors = CASE WHEN ?9 IS NOT NULL THEN ?10 ELSE success_factors END,
            success_factors_updated_at = COALESCE(?9, success_factors_updated_at)
          WHERE id = ?1",
        params![
            pattern_id,
            p.succeeded,
            p.stats.successes,
            p.stats.last_confirmed,
            p.failed,
            p.stats.failures,
            eff,
            priority,
            p.factors_at,
            p.stats.factors_text()
        ],
    )?;
    Ok(())
}

/// What effectiveness and priority are computed from (§9.1, §9.2).
#[derive(Debug)]
struct PatternStats {
    successes: i64,
    failures: i64,
    occurrences: i64,
    variance: f64,
    last_confirmed: Option<String>,
    /// The stored success factors (JSON text), read for a successful application.
    success_factors: Option<String>,
    /// The factors with this batch's successful applications folded in, once one was.
    folded: Option<crate::success::SuccessFactors>,
}

impl PatternStats {
    /// Counts one application at `ts`: a success or a failure, and a success's factors
    /// folded into the stored ones (§11). Returns whether the factors were folded.
    fn count(
        &mut self,
        a: &PatternApplication,
        success_of: Option<&SheetOutcome>,
        ts: &str,
        now: &Now,
    ) -> bool {
        if a.led_to_success {
            self.successes += 1;
            self.last_confirmed = Some(ts.to_owned());
        } else {
            self.failures += 1;
        }
        match (a.led_to_success, success_of) {
            (true, Some(outcome)) => {
                let existing = match self.folded.take() {
                    Some(folded) => Some(folded),
                    None => crate::success::parse_factors(self.success_factors.take()),
                };
                self.folded = Some(crate::success::fold_success_factors(
                    existing,
                    self.successes,
                    self.failures,
                    outcome,
                    now,
                ));
                true
            }
            _ => false,
        }
    }

    /// The success factors to store: the folded ones as text, else those read.
    fn factors_text(&self) -> Option<String> {
        match &self.folded {
            Some(folded) => Some(crate::success::factors_text(folded)),
            None => self.success_factors.clone(),
        }
    }
}

/// [`PatternStats`] of one pattern, `None` when there is no such pattern.
fn pattern_stats_tx(tx: &Connection, pattern_id: &str) -> rusqlite::Result<Option<PatternStats>> {
    crate::store::query_one(
        tx,
        "SELECT COALESCE(led_to_success_count, 0), COALESCE(led_to_failure_count, 0),
                COALESCE(occurrence_count, 1), COALESCE(variance, 0.0), last_confirmed,
                success_factors
           FROM patterns WHERE id = ?1",
        [pattern_id],
        |r| {
            Ok(PatternStats {
                successes: r.get(0)?,
                failures: r.get(1)?,
                occurrences: r.get(2)?,
                variance: r.get(3)?,
                last_confirmed: r.get(4)?,
                success_factors: r.get(5)?,
                folded: None,
            })
        },
    )
    .optional()
}

/// Effectiveness (§9.1) and priority (§9.2) of a pattern with these stats, from its five
/// newest applications.
fn refreshed_scores_tx(
    tx: &Connection,
    pattern_id: &str,
    stats: &PatternStats,
    now: &Now,
) -> rusqlite::Result<(f64, f64)> {
    // The 5 newest applications. Rows are only ever appended at application time, so rowid
    // order is applied_at order; it lets SQLite walk idx_app_pattern backwards and stop
    // after 5 rows, where ORDER BY applied_at sorted every application of the pattern — on
    // each new application, quadratic over a pattern's life.
    let mut stmt = tx.prepare_cached(
        "SELECT pattern_led_to_success, grounding_confidence FROM pattern_applications
          WHERE pattern_id = ?1 ORDER BY rowid DESC LIMIT 5",
    )?;
    let recent: Vec<(bool, Option<f64>)> = stmt
        .query_map([pattern_id], |r| {
            Ok((r.get::<_, Option<bool>>(0)?.unwrap_or(false), r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let outcomes: Vec<bool> = recent.iter().map(|(ok, _)| *ok).collect();
    let groundings: Vec<f64> = recent.iter().filter_map(|(_, g)| *g).collect();
    let days = now.whole_days_since(stats.last_confirmed.as_deref());
    let eff = effectiveness(
        stats.successes,
        stats.failures,
        &outcomes,
        &groundings,
        days,
    );
    Ok((eff, store_priority(eff, stats.occurrences, stats.variance)))
}

fn reweight_tx(tx: &Connection, now: &Now) -> rusqlite::Result<usize> {
    let rows = query_patterns(
        tx,
        &PatternQuery {
            min_priority: 0.0,
            limit: 1000,
            ..PatternQuery::default()
        },
    )?;
    let mut updated = 0;
    for p in rows.iter().filter(|p| p.applications() > 0) {
        let days = now.whole_days_since(p.last_confirmed.as_deref());
        let priority = weighter_priority(
            p.led_to_success_count,
            p.led_to_failure_count,
            p.occurrence_count,
            days,
            p.variance,
        );
        crate::store::exec(
            tx,
            "UPDATE patterns SET priority_score = ?2 WHERE id = ?1",
            params![p.id, priority],
        )?;
        updated += 1;
    }
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn effectiveness_matches_spec_vectors() {
        assert!(close(effectiveness(2, 0, &[true, true], &[], 0), 0.55));
        assert!(close(effectiveness(3, 0, &[true; 3], &[], 0), 0.9625));
        assert!(close(
            effectiveness(2, 1, &[true, true, false], &[], 0),
            0.6541667
        ));
        assert!(close(effectiveness(0, 3, &[false; 3], &[], 0), 0.0375));
        let recent = [true, true, true, false, false];
        assert!(close(effectiveness(8, 2, &recent, &[0.5], 0), 0.5540455));
    }

    #[test]
    fn priorities_match_spec_vectors() {
        assert!(close(store_priority(0.55, 1, 0.0), 0.33));
        assert!(close(store_priority(0.55, 15, 0.0), 0.3311330));
        assert!(close(store_priority(0.55, 99, 0.0), 0.55));
        assert!(close(store_priority(0.9625, 1, 0.0), 0.5775));
        assert!(close(weighter_priority(3, 0, 1, 0, 0.0), 0.1317006));
        assert!(close(weighter_priority(3, 0, 10, 0, 0.0), 0.4556093));
        assert!(close(weighter_priority(1, 0, 1, 0, 0.0), 0.0752575));
    }
}
