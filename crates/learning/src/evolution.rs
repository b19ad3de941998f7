//! The evolution trajectory (learning.md §3.10): one row per self-improvement cycle, written
//! by `mozart learning-record-evolution` and read by `mozart learning-export`.

use rusqlite::params;
use serde::Serialize;

use crate::error::Result;
use crate::store::{new_row_id, LearningStore};

/// One evolution cycle as the operator records it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EvolutionEntry {
    /// Row id (set on insert).
    pub id: String,
    /// Cycle number (unique).
    pub cycle: i64,
    /// When it was recorded (local ISO time).
    pub recorded_at: String,
    /// Evolutions completed in the cycle.
    pub evolutions_completed: i64,
    /// Evolutions deferred.
    pub evolutions_deferred: i64,
    /// Issue classes addressed.
    pub issue_classes: Vec<String>,
    /// Average consciousness volume (upstream's name).
    pub cv_avg: f64,
    /// Implementation lines of code.
    pub implementation_loc: i64,
    /// Test lines of code.
    pub test_loc: i64,
    /// Accuracy of the LOC estimate.
    pub loc_accuracy: f64,
    /// Free-form notes.
    pub notes: String,
}

impl LearningStore {
    /// Records one cycle; returns the new row id. A cycle recorded twice is an error.
    pub fn record_evolution_entry(&self, entry: &EvolutionEntry) -> Result<String> {
        let id = new_row_id();
        let now = self.now().local_iso();
        let classes = serde_json::to_string(&entry.issue_classes).unwrap_or_else(|_| "[]".into());
        self.write(
            || format!("recording evolution cycle {}", entry.cycle),
            |tx| {
                tx.execute(
                    "INSERT INTO evolution_trajectory (id, cycle, recorded_at, evolutions_completed,
                     evolutions_deferred, issue_classes, cv_avg, implementation_loc, test_loc,
                     loc_accuracy, notes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    params![
                        id,
                        entry.cycle,
                        now,
                        entry.evolutions_completed,
                        entry.evolutions_deferred,
                        classes,
                        entry.cv_avg,
                        entry.implementation_loc,
                        entry.test_loc,
                        entry.loc_accuracy,
                        entry.notes
                    ],
                )
            },
        )?;
        Ok(id)
    }

    /// The newest `limit` cycles, newest first.
    pub fn evolution_trajectory(&self, limit: usize) -> Result<Vec<EvolutionEntry>> {
        self.read(
            || "reading the evolution trajectory".into(),
            |conn| {
                let mut stmt = conn.prepare(
                    "SELECT id, cycle, recorded_at, evolutions_completed, evolutions_deferred,
                            issue_classes, cv_avg, implementation_loc, test_loc, loc_accuracy,
                            notes FROM evolution_trajectory ORDER BY cycle DESC LIMIT ?1",
                )?;
                let rows = stmt.query_map([limit as i64], |r| {
                    let classes: Option<String> = r.get(5)?;
                    Ok(EvolutionEntry {
                        id: r.get(0)?,
                        cycle: r.get(1)?,
                        recorded_at: r.get(2)?,
                        evolutions_completed: r.get(3)?,
                        evolutions_deferred: r.get(4)?,
                        issue_classes: classes
                            .and_then(|c| serde_json::from_str(&c).ok())
                            .unwrap_or_default(),
                        cv_avg: r.get(6)?,
                        implementation_loc: r.get(7)?,
                        test_loc: r.get(8)?,
                        loc_accuracy: r.get(9)?,
                        notes: r.get::<_, Option<String>>(10)?.unwrap_or_default(),
                    })
                })?;
                rows.collect()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_round_trip_and_a_duplicate_cycle_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = LearningStore::open(dir.path().join("l.db")).unwrap();
        let entry = EvolutionEntry {
            cycle: 3,
            evolutions_completed: 2,
            issue_classes: vec!["infra".into(), "docs".into()],
            implementation_loc: 120,
            test_loc: 40,
            loc_accuracy: 1.0,
            ..EvolutionEntry::default()
        };
        store.record_evolution_entry(&entry).unwrap();
        assert!(store.record_evolution_entry(&entry).is_err());
        let rows = store.evolution_trajectory(5).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].issue_classes, ["infra", "docs"]);
        assert_eq!(rows[0].test_loc, 40);
    }
}
