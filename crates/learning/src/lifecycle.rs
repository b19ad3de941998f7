//! Quarantine lifecycle and trust (learning.md §12).

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::error::Result;
use crate::model::{pattern_from_row, PatternRecord, QuarantineStatus, PATTERN_COLUMNS};
use crate::store::LearningStore;
use crate::time::Now;

/// Applications (`n`, not occurrences) needed before a pattern is judged (§12.2).
const MIN_APPLICATIONS_FOR_PROMOTION: i64 = 3;
const PROMOTION_EFFECTIVENESS_THRESHOLD: f64 = 0.60;
const QUARANTINE_EFFECTIVENESS_THRESHOLD: f64 = 0.35;
const DEGRADATION_THRESHOLD: f64 = 0.30;

/// Ids moved by one [`LearningStore::promote_ready_patterns`] call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PromotionReport {
    /// `pending → validated`.
    pub promoted: Vec<String>,
    /// `pending → quarantined`.
    pub quarantined: Vec<String>,
    /// `validated → quarantined`.
    pub degraded: Vec<String>,
}

/// Trust of §12.4 from stored values.
pub fn trust_score(
    s: i64,
    f: i64,
    occurrences: i64,
    days_since_confirmed: i64,
    status: QuarantineStatus,
) -> f64 {
    let total = if occurrences == 0 { 1 } else { occurrences } as f64;
    let success_rate = (s as f64 / total).min(1.0);
    let failure_rate = (f as f64 / total).min(1.0);
    let age_factor = 0.9f64.powf(days_since_confirmed as f64 / 30.0);
    let mut trust = 0.5 + 0.3 * success_rate - 0.4 * failure_rate + 0.2 * age_factor;
    match status {
        QuarantineStatus::Quarantined => trust -= 0.2,
        QuarantineStatus::Validated => trust += 0.1,
        _ => {}
    }
    trust.clamp(0.0, 1.0)
}

impl LearningStore {
    /// Automatic lifecycle transitions after a completed or failed job (§12.2).
    pub fn promote_ready_patterns(&self) -> Result<PromotionReport> {
        let now = self.now();
        self.write(
            || "promoting ready patterns".into(),
            |tx| promote_tx(tx, &now),
        )
    }

    /// Everything the conductor runs after a job ends as completed or failed: lifecycle
    /// transitions, then trust recalculation. Upstream never recalculates trust, which
    /// leaves auto-apply inert (§12.4 wiring); we do it here.
    pub fn maintain_after_job(&self) -> Result<PromotionReport> {
        let report = self.promote_ready_patterns()?;
        self.recalculate_all_trust_scores()?;
        Ok(report)
    }

    /// Quarantines a pattern by hand. False for unknown ids.
    pub fn quarantine_pattern(&self, id: &str, reason: Option<&str>) -> Result<bool> {
        let ts = self.now().local_iso();
        self.write(
            || format!("quarantining pattern {id}"),
            |tx| {
                Ok(tx.execute(
                    "UPDATE patterns SET quarantine_status = 'quarantined', quarantined_at = ?2,
                            quarantine_reason = ?3 WHERE id = ?1",
                    params![id, ts, reason],
                )? > 0)
            },
        )
    }

    /// Validates a pattern by hand (clears the quarantine reason). False for unknown ids.
    pub fn validate_pattern(&self, id: &str) -> Result<bool> {
        let ts = self.now().local_iso();
        self.write(
            || format!("validating pattern {id}"),
            |tx| {
                Ok(tx.execute(
                    "UPDATE patterns SET quarantine_status = 'validated', validated_at = ?2,
                            quarantine_reason = NULL WHERE id = ?1",
                    params![id, ts],
                )? > 0)
            },
        )
    }

    /// Retires a pattern. False for unknown ids.
    pub fn retire_pattern(&self, id: &str) -> Result<bool> {
        self.write(
            || format!("retiring pattern {id}"),
            |tx| {
                Ok(tx.execute(
                    "UPDATE patterns SET quarantine_status = 'retired' WHERE id = ?1",
                    [id],
                )? > 0)
            },
        )
    }

    /// Computes, stores and returns a pattern's trust (§12.4); `None` for unknown ids.
    pub fn calculate_trust_score(&self, id: &str) -> Result<Option<f64>> {
        let now = self.now();
        self.write(
            || format!("calculating trust of pattern {id}"),
            |tx| {
                let p = tx
                    .query_row(
                        &format!("SELECT {PATTERN_COLUMNS} FROM patterns WHERE id = ?1"),
                        [id],
                        pattern_from_row,
                    )
                    .optional()?;
                p.map(|p| store_trust_tx(tx, &p, &now)).transpose()
            },
        )
    }

    /// Adds `delta` to a pattern's trust, clamped to 0–1; `None` for unknown ids.
    pub fn update_trust_score(&self, id: &str, delta: f64) -> Result<Option<f64>> {
        let ts = self.now().local_iso();
        self.write(
            || format!("adjusting trust of pattern {id}"),
            |tx| {
                let cur: Option<f64> = tx
                    .query_row(
                        "SELECT COALESCE(trust_score, 0.5) FROM patterns WHERE id = ?1",
                        [id],
                        |r| r.get(0),
                    )
                    .optional()?;
                let Some(cur) = cur else { return Ok(None) };
                let t = (cur + delta).clamp(0.0, 1.0);
                tx.execute(
                    "UPDATE patterns SET trust_score = ?2, trust_calculation_date = ?3 WHERE id = ?1",
                    params![id, t, ts],
                )?;
                Ok(Some(t))
            },
        )
    }

    /// Recomputes every pattern's trust; returns how many rows were updated.
    pub fn recalculate_all_trust_scores(&self) -> Result<usize> {
        let now = self.now();
        self.write(
            || "recalculating trust scores".into(),
            |tx| {
                let all = all_patterns_tx(tx, "")?;
                for p in &all {
                    store_trust_tx(tx, p, &now)?;
                }
                Ok(all.len())
            },
        )
    }

    /// Patterns trusted enough to apply without being asked (§12.4): trust ≥ threshold,
    /// not retired (and validated when required), best trust first, then those sharing a
    /// tag with `context_tags` when given.
    pub fn get_patterns_for_auto_apply(
        &self,
        trust_threshold: f64,
        require_validated: bool,
        limit: usize,
        context_tags: Option<&[String]>,
    ) -> Result<Vec<PatternRecord>> {
        self.read(
            || "querying auto-apply patterns".into(),
            |conn| {
                let mut sql = format!(
                    "SELECT {PATTERN_COLUMNS} FROM patterns WHERE COALESCE(trust_score, 0.5) >= ?1
                       AND COALESCE(quarantine_status, 'pending') != 'retired'"
                );
                if require_validated {
                    sql.push_str(" AND quarantine_status = 'validated'");
                }
                sql.push_str(" ORDER BY trust_score DESC, priority_score DESC LIMIT ?2");
                let mut stmt = conn.prepare(&sql)?;
                let fetched: Vec<PatternRecord> = stmt
                    .query_map(
                        params![trust_threshold, (limit * 2) as i64],
                        pattern_from_row,
                    )?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(fetched
                    .into_iter()
                    .filter(|p| match context_tags {
                        Some(tags) => p.context_tags.iter().any(|t| tags.contains(t)),
                        None => true,
                    })
                    .take(limit)
                    .collect())
            },
        )
    }
}

fn all_patterns_tx(tx: &Connection, filter: &str) -> rusqlite::Result<Vec<PatternRecord>> {
    let mut stmt = tx.prepare(&format!("SELECT {PATTERN_COLUMNS} FROM patterns {filter}"))?;
    let rows = stmt.query_map([], pattern_from_row)?;
    rows.collect()
}

fn store_trust_tx(tx: &Connection, p: &PatternRecord, now: &Now) -> rusqlite::Result<f64> {
    let t = trust_score(
        p.led_to_success_count,
        p.led_to_failure_count,
        p.occurrence_count,
        now.whole_days_since(p.last_confirmed.as_deref()),
        p.quarantine_status,
    );
    tx.execute(
        "UPDATE patterns SET trust_score = ?2, trust_calculation_date = ?3 WHERE id = ?1",
        params![p.id, t, now.local_iso()],
    )?;
    Ok(t)
}

fn promote_tx(tx: &Connection, now: &Now) -> rusqlite::Result<PromotionReport> {
    let ts = now.local_iso();
    let mut report = PromotionReport::default();
    let pending = all_patterns_tx(
        tx,
        "WHERE COALESCE(quarantine_status, 'pending') = 'pending'",
    )?;
    for p in pending
        .iter()
        .filter(|p| p.applications() >= MIN_APPLICATIONS_FOR_PROMOTION)
    {
        if p.effectiveness_score >= PROMOTION_EFFECTIVENESS_THRESHOLD {
            tx.execute(
                "UPDATE patterns SET quarantine_status = 'validated', validated_at = ?2 WHERE id = ?1",
                params![p.id, ts],
            )?;
            report.promoted.push(p.id.clone());
        } else if p.effectiveness_score < QUARANTINE_EFFECTIVENESS_THRESHOLD {
            tx.execute(
                "UPDATE patterns SET quarantine_status = 'quarantined', quarantined_at = ?2 WHERE id = ?1",
                params![p.id, ts],
            )?;
            report.quarantined.push(p.id.clone());
        }
    }
    let trusted = all_patterns_tx(tx, "WHERE quarantine_status IN ('validated', 'active')")?;
    for p in trusted.iter().filter(|p| {
        p.applications() >= MIN_APPLICATIONS_FOR_PROMOTION
            && p.effectiveness_score < DEGRADATION_THRESHOLD
    }) {
        tx.execute(
            "UPDATE patterns SET quarantine_status = 'quarantined', quarantined_at = ?2 WHERE id = ?1",
            params![p.id, ts],
        )?;
        report.degraded.push(p.id.clone());
    }
    if report != PromotionReport::default() {
        tracing::info!(
            promoted = report.promoted.len(),
            quarantined = report.quarantined.len(),
            degraded = report.degraded.len(),
            "learning.patterns_promoted"
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_matches_spec_vectors() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-4;
        assert!(close(
            trust_score(0, 0, 1, 0, QuarantineStatus::Pending),
            0.7
        ));
        assert!(close(
            trust_score(8, 2, 10, 0, QuarantineStatus::Pending),
            0.86
        ));
        assert!(close(
            trust_score(8, 2, 10, 0, QuarantineStatus::Validated),
            0.96
        ));
        assert!(close(
            trust_score(0, 3, 1, 90, QuarantineStatus::Pending),
            0.2458
        ));
    }
}
