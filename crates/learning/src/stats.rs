//! Aggregate statistics for `mozart learning-stats` (learning.md §19).

use serde::Serialize;
use serde_json::json;

use crate::error::Result;
use crate::store::LearningStore;

/// Raw numbers behind `mozart learning-stats`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LearningStats {
    /// `executions` rows.
    pub total_executions: i64,
    /// Share (0–1) of executions that succeeded without retry.
    pub success_without_retry_rate: f64,
    /// `patterns` rows (all).
    pub total_patterns: i64,
    /// Mean stored effectiveness (0 when none).
    pub avg_pattern_effectiveness: f64,
    /// Distinct workspace hashes among executions.
    pub unique_workspaces: i64,
    /// `error_recoveries` rows.
    pub total_error_recoveries: i64,
    /// Share (0–1) of recoveries that succeeded. Upstream always printed 0.0 (§19).
    pub error_recovery_success_rate: f64,
    /// `output_pattern` patterns with priority ≥ 0.01.
    pub output_patterns: i64,
    /// Patterns whose name contains `error_code` (priority ≥ 0.01).
    pub error_code_patterns: i64,
    /// `semantic_failure` patterns (priority ≥ 0.01).
    pub semantic_failure_patterns: i64,
}

fn round(x: f64, dp: i32) -> f64 {
    let f = 10f64.powi(dp);
    (x * f).round() / f
}

impl LearningStats {
    /// No executions yet: upstream suggests importing workspace-local outcomes.
    pub fn migration_needed(&self) -> bool {
        self.total_executions == 0
    }

    /// The `--json` document of `mozart learning-stats`.
    pub fn to_cli_json(&self) -> serde_json::Value {
        json!({
            "executions": {
                "total": self.total_executions,
                "success_without_retry_rate": round(self.success_without_retry_rate * 100.0, 1),
            },
            "patterns": {
                "total": self.total_patterns,
                "avg_effectiveness": round(self.avg_pattern_effectiveness, 3),
            },
            "workspaces": {"unique": self.unique_workspaces},
            "error_recoveries": {
                "total": self.total_error_recoveries,
                "success_rate": round(self.error_recovery_success_rate * 100.0, 1),
            },
            "migration_needed": self.migration_needed(),
        })
    }
}

impl LearningStore {
    /// Aggregate statistics over the whole store.
    pub fn stats(&self) -> Result<LearningStats> {
        self.read(
            || "computing learning statistics".into(),
            |conn| {
                let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, Option<f64>>(0));
                let int = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0));
                Ok(LearningStats {
                    total_executions: int("SELECT COUNT(*) FROM executions")?,
                    success_without_retry_rate: one(
                        "SELECT AVG(CASE WHEN success_without_retry THEN 1.0 ELSE 0.0 END) FROM executions",
                    )?
                    .unwrap_or(0.0),
                    total_patterns: int("SELECT COUNT(*) FROM patterns")?,
                    avg_pattern_effectiveness: one("SELECT AVG(effectiveness_score) FROM patterns")?
                        .unwrap_or(0.0),
                    unique_workspaces: int("SELECT COUNT(DISTINCT workspace_hash) FROM executions")?,
                    total_error_recoveries: int("SELECT COUNT(*) FROM error_recoveries")?,
                    error_recovery_success_rate: one(
                        "SELECT AVG(CASE WHEN recovery_success THEN 1.0 ELSE 0.0 END) FROM error_recoveries",
                    )?
                    .unwrap_or(0.0),
                    output_patterns: int(
                        "SELECT COUNT(*) FROM patterns WHERE pattern_type = 'output_pattern'
                            AND priority_score >= 0.01 AND COALESCE(active, 1) = 1",
                    )?,
                    error_code_patterns: int(
                        "SELECT COUNT(*) FROM patterns WHERE instr(pattern_name, 'error_code') > 0
                            AND priority_score >= 0.01 AND COALESCE(active, 1) = 1",
                    )?,
                    semantic_failure_patterns: int(
                        "SELECT COUNT(*) FROM patterns WHERE pattern_type = 'semantic_failure'
                            AND priority_score >= 0.01 AND COALESCE(active, 1) = 1",
                    )?,
                })
            },
        )
    }
}
