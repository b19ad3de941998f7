//! Cross-job rate-limit events and learned retry waits (learning.md §14.1–§14.2).

use rusqlite::params;
use serde::Serialize;

use crate::error::{LearningError, Result};
use crate::hash::hash_job;
use crate::store::{new_row_id, LearningStore};
use crate::time::parse_stored;

/// Events expire after 80 % of the expected wait, so others resume slightly early (§14.1).
const RATE_LIMIT_TTL_FRACTION: f64 = 0.8;

/// An unexpired rate-limit event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateLimitEvent {
    /// Row id.
    pub id: String,
    /// Error code (`E101`, …).
    pub error_code: String,
    /// Model that was limited.
    pub model: Option<String>,
    /// When recorded (UTC ISO).
    pub recorded_at: String,
    /// When it stops applying (UTC ISO).
    pub expires_at: String,
    /// Hash of the job that hit it.
    pub source_job_hash: String,
    /// The wait the job expected.
    pub duration_seconds: f64,
}

/// How a retry delay was chosen (§14.2 `get_learned_wait_time_with_fallback`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LearnedDelay {
    /// Seconds to wait.
    pub delay_seconds: f64,
    /// Confidence in the learned part, 0–1.
    pub confidence: f64,
    /// `static_fallback`, `global_learned` or `global_learned_blend`.
    pub strategy: &'static str,
}

/// Hours that tend to go well or badly (§14.2 `get_optimal_execution_window`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExecutionWindow {
    /// Local hours with success rate ≥ 0.7 (≥ 3 samples).
    pub optimal_hours: Vec<i64>,
    /// Local hours with success rate ≤ 0.3 (≥ 3 samples).
    pub avoid_hours: Vec<i64>,
    /// `min(samples / 50, 1)`.
    pub confidence: f64,
    /// Samples considered.
    pub sample_count: i64,
}

impl LearningStore {
    /// Broadcasts a rate limit hit by `job_id` so other jobs on the same model wait too.
    pub fn record_rate_limit_event(
        &self,
        error_code: &str,
        duration_seconds: f64,
        job_id: &str,
        model: Option<&str>,
    ) -> Result<String> {
        if !duration_seconds.is_finite() || duration_seconds < 0.0 {
            return Err(LearningError::InvalidInput {
                field: "duration_seconds",
                reason: format!("must be a non-negative number of seconds, got {duration_seconds}"),
            });
        }
        let now = self.now();
        let id = new_row_id();
        self.write(
            || format!("recording rate limit {error_code} of job {job_id}"),
            |tx| {
                tx.execute(
                    "INSERT INTO rate_limit_events (id, error_code, model, recorded_at, expires_at,
                         source_job_hash, duration_seconds) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        id,
                        error_code,
                        model,
                        now.utc_iso(),
                        now.utc_iso_plus(duration_seconds * RATE_LIMIT_TTL_FRACTION),
                        hash_job(job_id),
                        duration_seconds
                    ],
                )
            },
        )?;
        Ok(id)
    }

    /// Seconds until the latest unexpired rate limit for `model` (and `error_code` when
    /// given) ends, or `None` when nothing applies. A job honours its own events too.
    pub fn rate_limit_remaining(
        &self,
        model: Option<&str>,
        error_code: Option<&str>,
    ) -> Result<Option<f64>> {
        let events = self.active_rate_limits(model)?;
        let now = self.now();
        Ok(events
            .iter()
            .filter(|e| error_code.is_none_or(|c| c == e.error_code))
            .filter_map(|e| parse_stored(&e.expires_at))
            .map(|exp| -now.seconds_since(exp))
            .filter(|s| *s > 0.0)
            .reduce(f64::max))
    }

    /// Unexpired rate-limit events, latest expiry first.
    pub fn active_rate_limits(&self, model: Option<&str>) -> Result<Vec<RateLimitEvent>> {
        let now = self.now().utc_iso();
        self.read(
            || "querying active rate limits".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT id, error_code, model, recorded_at, expires_at, source_job_hash,
                            duration_seconds FROM rate_limit_events
                      WHERE expires_at > ?1 AND (?2 IS NULL OR model = ?2)
                      ORDER BY expires_at DESC",
                )?;
                let rows = stmt.query_map(params![now, model], |r| {
                    Ok(RateLimitEvent {
                        id: r.get(0)?,
                        error_code: r.get(1)?,
                        model: r.get(2)?,
                        recorded_at: r.get(3)?,
                        expires_at: r.get(4)?,
                        source_job_hash: r.get(5)?,
                        duration_seconds: r.get(6)?,
                    })
                })?;
                rows.collect()
            },
        )
    }

    /// Deletes expired rate-limit events; returns how many.
    pub fn cleanup_expired_rate_limits(&self) -> Result<usize> {
        let now = self.now().utc_iso();
        self.write(
            || "cleaning up expired rate limits".into(),
            |tx| {
                tx.execute(
                    "DELETE FROM rate_limit_events WHERE expires_at <= ?1",
                    [now],
                )
            },
        )
    }

    /// Records whether waiting `actual_wait` seconds after `error_code` let the next attempt
    /// succeed (§6.1 step 5).
    pub fn record_error_recovery(
        &self,
        error_code: &str,
        suggested_wait: f64,
        actual_wait: f64,
        recovery_success: bool,
        model: Option<&str>,
    ) -> Result<String> {
        let now = self.now();
        let id = new_row_id();
        self.write(
            || format!("recording recovery from {error_code}"),
            |tx| {
                tx.execute(
                    "INSERT INTO error_recoveries (id, error_code, suggested_wait, actual_wait,
                         recovery_success, recorded_at, model, time_of_day)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        id,
                        error_code,
                        suggested_wait,
                        actual_wait,
                        recovery_success,
                        now.local_iso(),
                        model,
                        now.local_hour()
                    ],
                )
            },
        )?;
        Ok(id)
    }

    /// `(mean + min) / 2` of the 20 most recent successful waits for `error_code`, or
    /// `None` with fewer than `min_samples` (§14.2).
    pub fn learned_wait_time(
        &self,
        error_code: &str,
        model: Option<&str>,
        min_samples: usize,
    ) -> Result<Option<f64>> {
        let waits: Vec<f64> = self.read(
            || format!("reading learned waits for {error_code}"),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT actual_wait FROM error_recoveries
                      WHERE error_code = ?1 AND recovery_success = 1 AND (?2 IS NULL OR model = ?2)
                        AND actual_wait IS NOT NULL
                      ORDER BY recorded_at DESC LIMIT 20",
                )?;
                let rows = stmt.query_map(params![error_code, model], |r| r.get(0))?;
                rows.collect()
            },
        )?;
        if waits.is_empty() || waits.len() < min_samples {
            return Ok(None);
        }
        let mean = waits.iter().sum::<f64>() / waits.len() as f64;
        let min = waits.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(Some((mean + min) / 2.0))
    }

    /// Learned delay blended with the static one by confidence (§14.2).
    pub fn learned_wait_time_with_fallback(
        &self,
        error_code: &str,
        static_delay: f64,
        model: Option<&str>,
    ) -> Result<LearnedDelay> {
        const MIN_CONFIDENCE: f64 = 0.7;
        let Some(learned) = self.learned_wait_time(error_code, model, 3)? else {
            return Ok(LearnedDelay {
                delay_seconds: static_delay,
                confidence: 0.0,
                strategy: "static_fallback",
            });
        };
        let samples: i64 = self.read(
            || format!("counting recoveries from {error_code}"),
            |conn| {
                conn.query_row(
                    "SELECT COUNT(*) FROM error_recoveries WHERE error_code = ?1 AND recovery_success = 1",
                    [error_code],
                    |r| r.get(0),
                )
            },
        )?;
        let confidence = (samples as f64 / 10.0).min(1.0);
        let floored = learned.max(0.5 * static_delay);
        if confidence >= MIN_CONFIDENCE {
            return Ok(LearnedDelay {
                delay_seconds: floored,
                confidence,
                strategy: "global_learned",
            });
        }
        let w = confidence / MIN_CONFIDENCE;
        Ok(LearnedDelay {
            delay_seconds: w * floored + (1.0 - w) * static_delay,
            confidence,
            strategy: "global_learned_blend",
        })
    }

    /// Hours of the day that went well or badly for recoveries (§14.2).
    pub fn optimal_execution_window(&self, error_code: Option<&str>) -> Result<ExecutionWindow> {
        let rows: Vec<(i64, i64, i64)> = self.read(
            || "reading execution windows".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT time_of_day, COUNT(*), SUM(CASE WHEN recovery_success THEN 1 ELSE 0 END)
                       FROM error_recoveries WHERE time_of_day IS NOT NULL
                        AND (?1 IS NULL OR error_code = ?1)
                      GROUP BY time_of_day ORDER BY time_of_day",
                )?;
                let rows =
                    stmt.query_map([error_code], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                rows.collect()
            },
        )?;
        let mut w = ExecutionWindow::default();
        for (hour, total, ok) in rows {
            w.sample_count += total;
            if total >= 3 {
                let rate = ok as f64 / total as f64;
                if rate >= 0.7 {
                    w.optimal_hours.push(hour);
                } else if rate <= 0.3 {
                    w.avoid_hours.push(hour);
                }
            }
        }
        w.confidence = (w.sample_count as f64 / 50.0).min(1.0);
        Ok(w)
    }

    /// Number of successful recoveries recorded for `error_code`.
    pub fn error_recovery_sample_count(&self, error_code: &str) -> Result<i64> {
        self.read(
            || format!("counting recoveries from {error_code}"),
            |conn| {
                conn.query_row(
                    "SELECT COUNT(*) FROM error_recoveries WHERE error_code = ?1 AND recovery_success = 1",
                    [error_code],
                    |r| r.get(0),
                )
            },
        )
    }
}
