//! Effectiveness and epistemic drift of patterns (learning.md §14.4–§14.5).

use rusqlite::params;
use serde::Serialize;

use crate::error::Result;
use crate::store::LearningStore;

/// Change of a pattern's success between its older and recent applications (§14.4).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EffectivenessDrift {
    /// Pattern id.
    pub pattern_id: String,
    /// Pattern name.
    pub pattern_name: String,
    /// Smoothed success of the older window.
    pub effectiveness_before: f64,
    /// Smoothed success of the recent window.
    pub effectiveness_after: f64,
    /// `|after − before|`.
    pub drift_magnitude: f64,
    /// `positive`, `negative` or `stable`.
    pub drift_direction: &'static str,
    /// Mean grounding over both windows (1.0 when none).
    pub grounding_confidence_avg: f64,
    /// `2 × window`.
    pub applications_analyzed: usize,
    /// Magnitude (grounding-weighted) exceeds the threshold.
    pub threshold_exceeded: bool,
}

/// Change of a pattern's grounding confidence between windows (§14.5).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EpistemicDrift {
    /// Pattern id.
    pub pattern_id: String,
    /// Pattern name.
    pub pattern_name: String,
    /// Mean confidence of the older window.
    pub confidence_before: f64,
    /// Mean confidence of the recent window.
    pub confidence_after: f64,
    /// `after − before`.
    pub belief_change: f64,
    /// `min(1, std / mean)` over both windows.
    pub belief_entropy: f64,
    /// `strengthening`, `weakening` or `stable`.
    pub drift_direction: &'static str,
    /// `2 × window`.
    pub applications_analyzed: usize,
    /// `|change| × (1 + entropy)` exceeds the threshold.
    pub threshold_exceeded: bool,
}

/// Effectiveness drift from outcomes newest first (`recent` = first `window`), §14.4.
pub fn effectiveness_drift(
    outcomes: &[(bool, Option<f64>)],
    window: usize,
    threshold: f64,
) -> Option<(f64, f64, f64, &'static str, f64, bool)> {
    if window == 0 || outcomes.len() < 2 * window {
        return None;
    }
    let take = &outcomes[..2 * window];
    let eff = |xs: &[(bool, Option<f64>)]| {
        (xs.iter().filter(|(ok, _)| *ok).count() as f64 + 0.5) / (window as f64 + 1.0)
    };
    let after = eff(&take[..window]);
    let before = eff(&take[window..]);
    let groundings: Vec<f64> = take.iter().filter_map(|(_, g)| *g).collect();
    let avg_g = if groundings.is_empty() {
        1.0
    } else {
        groundings.iter().sum::<f64>() / groundings.len() as f64
    };
    let drift = after - before;
    let direction = if drift > 0.05 {
        "positive"
    } else if drift < -0.05 {
        "negative"
    } else {
        "stable"
    };
    let magnitude = drift.abs();
    let exceeded = magnitude / avg_g.max(0.5) > threshold;
    Some((before, after, magnitude, direction, avg_g, exceeded))
}

/// Epistemic drift from grounding confidences newest first, §14.5:
/// `(before, after, change, entropy, direction, exceeded)`.
pub fn epistemic_drift(
    confidences: &[f64],
    window: usize,
    threshold: f64,
) -> Option<(f64, f64, f64, f64, &'static str, bool)> {
    if window == 0 || confidences.len() < 2 * window {
        return None;
    }
    let take = &confidences[..2 * window];
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let after = mean(&take[..window]);
    let before = mean(&take[window..]);
    let change = after - before;
    let all_mean = mean(take);
    let std = (take.iter().map(|x| (x - all_mean).powi(2)).sum::<f64>() / take.len() as f64).sqrt();
    let entropy = if all_mean > 0.0 {
        (std / all_mean).min(1.0)
    } else {
        0.0
    };
    let direction = if change > 0.05 {
        "strengthening"
    } else if change < -0.05 {
        "weakening"
    } else {
        "stable"
    };
    let exceeded = change.abs() * (1.0 + entropy) > threshold;
    Some((before, after, change, entropy, direction, exceeded))
}

impl LearningStore {
    fn applications_newest_first(&self, pattern_id: &str) -> Result<Vec<(bool, Option<f64>)>> {
        self.read(
            || format!("reading applications of pattern {pattern_id}"),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT pattern_led_to_success, grounding_confidence FROM pattern_applications
                      WHERE pattern_id = ?1 ORDER BY applied_at DESC",
                )?;
                let rows = stmt.query_map([pattern_id], |r| {
                    Ok((r.get::<_, Option<bool>>(0)?.unwrap_or(false), r.get(1)?))
                })?;
                rows.collect()
            },
        )
    }

    fn drift_candidates(&self, min_apps: usize) -> Result<Vec<(String, String)>> {
        self.read(
            || "listing drift candidates".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT p.id, p.pattern_name FROM patterns p
                       JOIN pattern_applications pa ON pa.pattern_id = p.id
                      GROUP BY p.id HAVING COUNT(pa.id) >= ?1",
                )?;
                let rows =
                    stmt.query_map(params![min_apps as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
                rows.collect()
            },
        )
    }

    /// Effectiveness drift of one pattern; `None` with fewer than `2 × window` applications.
    pub fn calculate_effectiveness_drift(
        &self,
        pattern_id: &str,
        window: usize,
        threshold: f64,
    ) -> Result<Option<EffectivenessDrift>> {
        let name = match self.get_pattern(pattern_id)? {
            Some(p) => p.pattern_name,
            None => return Ok(None),
        };
        let apps = self.applications_newest_first(pattern_id)?;
        Ok(effectiveness_drift(&apps, window, threshold).map(
            |(before, after, magnitude, direction, avg_g, exceeded)| EffectivenessDrift {
                pattern_id: pattern_id.to_string(),
                pattern_name: name,
                effectiveness_before: before,
                effectiveness_after: after,
                drift_magnitude: magnitude,
                drift_direction: direction,
                grounding_confidence_avg: avg_g,
                applications_analyzed: 2 * window,
                threshold_exceeded: exceeded,
            },
        ))
    }

    /// Patterns whose effectiveness drifted past `threshold`, largest drift first.
    pub fn drifting_patterns(
        &self,
        threshold: f64,
        window: usize,
        limit: usize,
    ) -> Result<Vec<EffectivenessDrift>> {
        let mut out = Vec::new();
        for (id, _) in self.drift_candidates(2 * window)? {
            if let Some(d) = self.calculate_effectiveness_drift(&id, window, threshold)? {
                if d.threshold_exceeded {
                    out.push(d);
                }
            }
        }
        out.sort_by(|a, b| b.drift_magnitude.total_cmp(&a.drift_magnitude));
        out.truncate(limit);
        Ok(out)
    }

    /// Epistemic drift of one pattern (grounded applications only).
    pub fn calculate_epistemic_drift(
        &self,
        pattern_id: &str,
        window: usize,
        threshold: f64,
    ) -> Result<Option<EpistemicDrift>> {
        let name = match self.get_pattern(pattern_id)? {
            Some(p) => p.pattern_name,
            None => return Ok(None),
        };
        let confidences: Vec<f64> = self
            .applications_newest_first(pattern_id)?
            .into_iter()
            .filter_map(|(_, g)| g)
            .collect();
        Ok(epistemic_drift(&confidences, window, threshold).map(
            |(before, after, change, entropy, direction, exceeded)| EpistemicDrift {
                pattern_id: pattern_id.to_string(),
                pattern_name: name,
                confidence_before: before,
                confidence_after: after,
                belief_change: change,
                belief_entropy: entropy,
                drift_direction: direction,
                applications_analyzed: 2 * window,
                threshold_exceeded: exceeded,
            },
        ))
    }

    /// Patterns whose grounding confidence drifted past `threshold`, largest change first.
    pub fn epistemic_drifting_patterns(
        &self,
        threshold: f64,
        window: usize,
        limit: usize,
    ) -> Result<Vec<EpistemicDrift>> {
        let mut out = Vec::new();
        for (id, _) in self.drift_candidates(2 * window)? {
            if let Some(d) = self.calculate_epistemic_drift(&id, window, threshold)? {
                if d.threshold_exceeded {
                    out.push(d);
                }
            }
        }
        out.sort_by(|a, b| b.belief_change.abs().total_cmp(&a.belief_change.abs()));
        out.truncate(limit);
        Ok(out)
    }

    /// Retires patterns whose effectiveness is drifting downwards: priority 0 and an
    /// explanatory suggested action (§14.4). Returns `(id, name, magnitude)`.
    pub fn retire_drifting_patterns(
        &self,
        threshold: f64,
        window: usize,
    ) -> Result<Vec<(String, String, f64)>> {
        let mut retired = Vec::new();
        for d in self.drifting_patterns(threshold, window, 100)? {
            if d.drift_direction != "negative" {
                continue;
            }
            let action = format!(
                "Auto-retired: drift {} ({:.2}), effectiveness {:.2} → {:.2}",
                d.drift_direction, d.drift_magnitude, d.effectiveness_before, d.effectiveness_after
            );
            self.write(
                || format!("retiring drifting pattern {}", d.pattern_id),
                |tx| {
                    tx.execute(
                        "UPDATE patterns SET priority_score = 0, suggested_action = ?2 WHERE id = ?1",
                        params![d.pattern_id, action],
                    )
                },
            )?;
            retired.push((d.pattern_id, d.pattern_name, d.drift_magnitude));
        }
        Ok(retired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_matches_spec_vectors() {
        let mut apps = vec![(false, None); 5];
        apps.extend(vec![(true, None); 5]);
        let (before, after, mag, dir, _, exceeded) = effectiveness_drift(&apps, 5, 0.2).unwrap();
        assert!((after - 0.0833333).abs() < 1e-6 && (before - 0.9166667).abs() < 1e-6);
        assert!((mag - 0.8333333).abs() < 1e-6);
        assert_eq!((dir, exceeded), ("negative", true));
        assert!(effectiveness_drift(&apps[..9], 5, 0.2).is_none());

        let mut conf = vec![0.5; 5];
        conf.extend(vec![0.9; 5]);
        let (_, _, change, entropy, dir, exceeded) = epistemic_drift(&conf, 5, 0.15).unwrap();
        assert!((change + 0.4).abs() < 1e-9);
        assert!((entropy - 0.2857143).abs() < 1e-6);
        assert_eq!((dir, exceeded), ("weakening", true));
    }
}
