//! Pattern-application entropy, the automatic entropy response and the exploration budget
//! (learning.md §13).

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::error::Result;
use crate::store::{new_row_id, LearningStore};
use crate::time::{parse_stored, Now};

/// Diversity of pattern usage (§13.1).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EntropyMetrics {
    /// Shannon entropy in bits.
    pub shannon_entropy: f64,
    /// `log2(k)` for k effective patterns (1.0 when k ≤ 1).
    pub max_possible_entropy: f64,
    /// `H / H_max` — the "entropy" every decision uses.
    pub diversity_index: f64,
    /// Pattern rows (any status, inactive included).
    pub unique_pattern_count: i64,
    /// Patterns with at least one application.
    pub effective_pattern_count: i64,
    /// Applications counted.
    pub total_applications: i64,
    /// Largest share of applications held by one pattern.
    pub dominant_pattern_share: f64,
}

/// Entropy of a list of per-pattern application counts (zeros ignored).
pub fn entropy_of_counts(counts: &[i64]) -> EntropyMetrics {
    let used: Vec<i64> = counts.iter().copied().filter(|c| *c > 0).collect();
    let total: i64 = used.iter().sum();
    let mut m = EntropyMetrics {
        unique_pattern_count: counts.len() as i64,
        ..EntropyMetrics::default()
    };
    if total == 0 {
        return m;
    }
    let probs: Vec<f64> = used.iter().map(|c| *c as f64 / total as f64).collect();
    m.shannon_entropy = -probs.iter().map(|p| p * p.log2()).sum::<f64>();
    // Python's sum of -p·log2(p) gives exactly 0 for one pattern; avoid a "-0".
    // (`f64::max` may keep -0.0: it treats the two zeros as equal.)
    if m.shannon_entropy <= 0.0 {
        m.shannon_entropy = 0.0;
    }
    m.effective_pattern_count = used.len() as i64;
    m.max_possible_entropy = if used.len() > 1 {
        (used.len() as f64).log2()
    } else {
        1.0
    };
    m.diversity_index = m.shannon_entropy / m.max_possible_entropy;
    m.total_applications = total;
    m.dominant_pattern_share = probs.iter().copied().fold(0.0, f64::max);
    m
}

/// Answer of [`LearningStore::check_entropy_response_needed`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EntropyCheck {
    /// A response should be triggered.
    pub needs_response: bool,
    /// The diversity index, when computed.
    pub current_entropy: Option<f64>,
    /// Human-readable reason (upstream wording).
    pub reason: String,
}

/// Settings of one entropy response (§13.2, conductor defaults in §13.3).
#[derive(Clone, Debug, PartialEq)]
pub struct EntropyResponseConfig {
    /// Raise the exploration budget.
    pub boost_budget: bool,
    /// Move quarantined patterns back to pending.
    pub revisit_quarantine: bool,
    /// At most this many revisits.
    pub max_quarantine_revisits: usize,
    /// Budget floor.
    pub budget_floor: f64,
    /// Budget ceiling.
    pub budget_ceiling: f64,
    /// Budget boost amount.
    pub budget_boost_amount: f64,
}

impl Default for EntropyResponseConfig {
    fn default() -> Self {
        EntropyResponseConfig {
            boost_budget: true,
            revisit_quarantine: true,
            max_quarantine_revisits: 3,
            budget_floor: 0.05,
            budget_ceiling: 0.50,
            budget_boost_amount: 0.10,
        }
    }
}

/// What an entropy response did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EntropyResponse {
    /// `entropy_responses.id`.
    pub id: String,
    /// `budget_boost`, `quarantine_revisit`.
    pub actions_taken: Vec<String>,
    /// New budget when boosted.
    pub new_budget: Option<f64>,
    /// Patterns moved from quarantined to pending.
    pub patterns_revisited: Vec<String>,
}

/// One `exploration_budget` row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetRecord {
    /// Row id.
    pub id: String,
    /// Caller-given key (not hashed).
    pub job_hash: String,
    /// When recorded.
    pub recorded_at: String,
    /// Stored (clamped) value.
    pub budget_value: f64,
    /// Entropy at the time.
    pub entropy_at_time: Option<f64>,
    /// `initial`, `boost`, `decay`, `floor_enforced`, `ceiling_enforced`.
    pub adjustment_type: String,
    /// Why.
    pub adjustment_reason: Option<String>,
}

/// Budget proposal rules of `calculate_budget_adjustment` (§13.4).
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetRules {
    /// Floor.
    pub floor: f64,
    /// Ceiling.
    pub ceiling: f64,
    /// Multiplier when entropy is healthy.
    pub decay_rate: f64,
    /// Addition when entropy is low.
    pub boost_amount: f64,
    /// Entropy below which the budget is boosted.
    pub entropy_threshold: f64,
    /// First value.
    pub initial_budget: f64,
}

impl Default for BudgetRules {
    fn default() -> Self {
        BudgetRules {
            floor: 0.05,
            ceiling: 0.50,
            decay_rate: 0.95,
            boost_amount: 0.10,
            entropy_threshold: 0.3,
            initial_budget: 0.15,
        }
    }
}

impl LearningStore {
    /// Current entropy of pattern applications (§13.1).
    pub fn pattern_entropy(&self) -> Result<EntropyMetrics> {
        self.read(
            || "computing pattern entropy".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT COUNT(pa.id) FROM patterns p
                   LEFT JOIN pattern_applications pa ON pa.pattern_id = p.id GROUP BY p.id",
                )?;
                let counts: Vec<i64> = stmt
                    .query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                Ok(entropy_of_counts(&counts))
            },
        )
    }

    /// Persists an entropy snapshot (`patterns-entropy --record`); returns its id.
    pub fn record_entropy_snapshot(
        &self,
        m: &EntropyMetrics,
        threshold_exceeded: bool,
    ) -> Result<String> {
        let now = self.now();
        let id = new_row_id();
        self.write(
            || "recording entropy snapshot".into(),
            |tx| {
                tx.execute(
                    "INSERT INTO pattern_entropy_history (id, calculated_at, shannon_entropy,
                     max_possible_entropy, diversity_index, unique_pattern_count,
                     effective_pattern_count, total_applications, dominant_pattern_share,
                     threshold_exceeded) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
                        id,
                        now.local_iso(),
                        m.shannon_entropy,
                        m.max_possible_entropy,
                        m.diversity_index,
                        m.unique_pattern_count,
                        m.effective_pattern_count,
                        m.total_applications,
                        m.dominant_pattern_share,
                        threshold_exceeded
                    ],
                )
            },
        )?;
        Ok(id)
    }

    /// Whether pattern usage has collapsed enough to need a response (§13.1).
    pub fn check_entropy_response_needed(
        &self,
        job_hash: &str,
        entropy_threshold: f64,
        cooldown_seconds: f64,
    ) -> Result<EntropyCheck> {
        let now = self.now();
        let last: Option<String> = self.read(
            || format!("reading entropy responses of {job_hash}"),
            |conn| {
                conn.query_row(
                    "SELECT recorded_at FROM entropy_responses WHERE job_hash = ?1
                  ORDER BY recorded_at DESC LIMIT 1",
                    [job_hash],
                    |r| r.get(0),
                )
                .optional()
            },
        )?;
        if let Some(then) = last.as_deref().and_then(parse_stored) {
            let elapsed = now.seconds_since(then);
            if elapsed < cooldown_seconds {
                return Ok(EntropyCheck {
                    needs_response: false,
                    current_entropy: None,
                    reason: format!(
                        "Cooldown active ({:.0}s remaining)",
                        cooldown_seconds - elapsed
                    ),
                });
            }
        }
        let m = self.pattern_entropy()?;
        if m.total_applications == 0 {
            return Ok(EntropyCheck {
                needs_response: false,
                current_entropy: None,
                reason: "No pattern applications to analyze".into(),
            });
        }
        let d = m.diversity_index;
        Ok(if d < entropy_threshold {
            EntropyCheck {
                needs_response: true,
                current_entropy: Some(d),
                reason: format!("Entropy {d:.3} < threshold {entropy_threshold:.3}"),
            }
        } else {
            EntropyCheck {
                needs_response: false,
                current_entropy: Some(d),
                reason: format!("Entropy {d:.3} >= threshold {entropy_threshold:.3} (healthy)"),
            }
        })
    }

    /// Responds to low diversity: boost the budget, revisit quarantined patterns, and
    /// record what was done (§13.2).
    pub fn trigger_entropy_response(
        &self,
        job_hash: &str,
        entropy_at_trigger: f64,
        threshold_used: f64,
        cfg: &EntropyResponseConfig,
    ) -> Result<EntropyResponse> {
        let now = self.now();
        self.write(|| format!("entropy response for {job_hash}"), |tx| {
            let mut actions = Vec::new();
            let mut new_budget = None;
            if cfg.boost_budget {
                let prev = latest_budget_tx(tx, job_hash)?;
                let proposed = prev.unwrap_or(0.15) + cfg.budget_boost_amount;
                let reason = format!(
                    "Entropy response: diversity {entropy_at_trigger:.3} < {threshold_used:.3}"
                );
                let rec = insert_budget_tx(tx, &now, job_hash, proposed, "boost",
                    Some(entropy_at_trigger), Some(&reason), cfg.budget_floor, cfg.budget_ceiling)?;
                new_budget = Some(rec.budget_value);
                actions.push("budget_boost".to_string());
            }
            let mut revisited = Vec::new();
            if cfg.revisit_quarantine && cfg.max_quarantine_revisits > 0 {
                let mut stmt = tx.prepare(
                    "SELECT id FROM patterns WHERE quarantine_status = 'quarantined'
                      ORDER BY last_seen DESC LIMIT ?1",
                )?;
                revisited = stmt
                    .query_map([cfg.max_quarantine_revisits as i64], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                for id in &revisited {
                    tx.execute(
                        "UPDATE patterns SET quarantine_status = 'pending',
                                quarantine_reason = 'Entropy response: revisiting for revalidation'
                          WHERE id = ?1",
                        [id],
                    )?;
                }
                if !revisited.is_empty() {
                    actions.push("quarantine_revisit".to_string());
                }
            }
            let id = new_row_id();
            tx.execute(
                "INSERT INTO entropy_responses (id, job_hash, recorded_at, entropy_at_trigger,
                     threshold_used, actions_taken, budget_boosted, quarantine_revisits,
                     patterns_revisited) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![id, job_hash, now.local_iso(), entropy_at_trigger, threshold_used,
                    serde_json::to_string(&actions).unwrap_or_else(|_| "[]".into()),
                    new_budget.is_some(), revisited.len() as i64,
                    serde_json::to_string(&revisited).unwrap_or_else(|_| "[]".into())],
            )?;
            tracing::info!(job_hash, entropy = entropy_at_trigger, actions = ?actions, "learning.entropy_response_triggered");
            Ok(EntropyResponse { id, actions_taken: actions, new_budget, patterns_revisited: revisited })
        })
    }

    /// Stores a budget value clamped to `[floor, ceiling]` (§13.4).
    #[allow(clippy::too_many_arguments)] // mirrors upstream's keyword arguments one to one
    pub fn update_exploration_budget(
        &self,
        job_hash: &str,
        value: f64,
        adjustment_type: &str,
        entropy_at_time: Option<f64>,
        reason: Option<&str>,
        floor: f64,
        ceiling: f64,
    ) -> Result<BudgetRecord> {
        let now = self.now();
        self.write(
            || format!("updating exploration budget of {job_hash}"),
            |tx| {
                insert_budget_tx(
                    tx,
                    &now,
                    job_hash,
                    value,
                    adjustment_type,
                    entropy_at_time,
                    reason,
                    floor,
                    ceiling,
                )
            },
        )
    }

    /// Proposes and stores the next budget from the current entropy (§13.4).
    pub fn calculate_budget_adjustment(
        &self,
        job_hash: &str,
        current_entropy: f64,
        rules: &BudgetRules,
    ) -> Result<BudgetRecord> {
        let now = self.now();
        self.write(
            || format!("adjusting exploration budget of {job_hash}"),
            |tx| {
                let (value, kind, reason) = match latest_budget_tx(tx, job_hash)? {
                    None => (
                        rules.initial_budget,
                        "initial",
                        "Initial budget set".to_string(),
                    ),
                    Some(prev) if current_entropy < rules.entropy_threshold => (
                        prev + rules.boost_amount,
                        "boost",
                        format!(
                            "Entropy {current_entropy:.3} < threshold {:.3}",
                            rules.entropy_threshold
                        ),
                    ),
                    Some(prev) => (
                        prev * rules.decay_rate,
                        "decay",
                        format!("Entropy {current_entropy:.3} >= threshold, decaying"),
                    ),
                };
                insert_budget_tx(
                    tx,
                    &now,
                    job_hash,
                    value,
                    kind,
                    Some(current_entropy),
                    Some(&reason),
                    rules.floor,
                    rules.ceiling,
                )
            },
        )
    }

    /// Budget history for `job_hash` (all keys when `None`), newest first.
    pub fn exploration_budget_history(
        &self,
        job_hash: Option<&str>,
        limit: usize,
    ) -> Result<Vec<BudgetRecord>> {
        self.read(
            || "reading exploration budget history".into(),
            |conn| {
                let mut stmt = conn.prepare(
                "SELECT id, job_hash, recorded_at, budget_value, entropy_at_time, adjustment_type,
                        adjustment_reason FROM exploration_budget
                  WHERE (?1 IS NULL OR job_hash = ?1) ORDER BY recorded_at DESC LIMIT ?2",
            )?;
                let rows = stmt.query_map(params![job_hash, limit as i64], |r| {
                    Ok(BudgetRecord {
                        id: r.get(0)?,
                        job_hash: r.get(1)?,
                        recorded_at: r.get(2)?,
                        budget_value: r.get(3)?,
                        entropy_at_time: r.get(4)?,
                        adjustment_type: r.get(5)?,
                        adjustment_reason: r.get(6)?,
                    })
                })?;
                rows.collect()
            },
        )
    }
}

fn latest_budget_tx(tx: &Connection, job_hash: &str) -> rusqlite::Result<Option<f64>> {
    tx.query_row(
        "SELECT budget_value FROM exploration_budget WHERE job_hash = ?1
          ORDER BY recorded_at DESC, rowid DESC LIMIT 1",
        [job_hash],
        |r| r.get(0),
    )
    .optional()
}

#[allow(clippy::too_many_arguments)]
fn insert_budget_tx(
    tx: &Connection,
    now: &Now,
    job_hash: &str,
    value: f64,
    adjustment_type: &str,
    entropy_at_time: Option<f64>,
    reason: Option<&str>,
    floor: f64,
    ceiling: f64,
) -> rusqlite::Result<BudgetRecord> {
    let (stored, kind, why) = if value < floor {
        (
            floor,
            "floor_enforced".to_string(),
            Some(format!("Budget {value:.3} enforced to floor {floor:.3}")),
        )
    } else if value > ceiling {
        (
            ceiling,
            "ceiling_enforced".to_string(),
            Some(format!(
                "Budget {value:.3} enforced to ceiling {ceiling:.3}"
            )),
        )
    } else {
        (value, adjustment_type.to_string(), reason.map(String::from))
    };
    let rec = BudgetRecord {
        id: new_row_id(),
        job_hash: job_hash.to_string(),
        recorded_at: now.local_iso(),
        budget_value: stored,
        entropy_at_time,
        adjustment_type: kind,
        adjustment_reason: why,
    };
    tx.execute(
        "INSERT INTO exploration_budget (id, job_hash, recorded_at, budget_value, entropy_at_time,
             adjustment_type, adjustment_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            rec.id,
            rec.job_hash,
            rec.recorded_at,
            rec.budget_value,
            rec.entropy_at_time,
            rec.adjustment_type,
            rec.adjustment_reason
        ],
    )?;
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_matches_spec_vectors() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        let one = entropy_of_counts(&[5]);
        assert_eq!(
            (
                one.shannon_entropy,
                one.max_possible_entropy,
                one.diversity_index
            ),
            (0.0, 1.0, 0.0)
        );
        assert_eq!(one.dominant_pattern_share, 1.0);
        let even = entropy_of_counts(&[10, 10]);
        assert!(close(even.shannon_entropy, 1.0) && close(even.diversity_index, 1.0));
        assert!(close(even.dominant_pattern_share, 0.5));
        let skew = entropy_of_counts(&[90, 10, 0]);
        assert!(close(skew.shannon_entropy, 0.4689956) && close(skew.diversity_index, 0.4689956));
        assert_eq!(skew.unique_pattern_count, 3);
        assert!(close(entropy_of_counts(&[3; 5]).diversity_index, 1.0));
        assert_eq!(entropy_of_counts(&[0, 0]).total_applications, 0);
    }
}
