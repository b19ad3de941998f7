//! Reads for views of large jobs (issue 24): a checkpoint's job-level document without its
//! sheets, the few facts a summary needs of every sheet (mostly from columns, without
//! building each sheet's state), the full state of only the sheets an answer shows, and a
//! job's newest failed attempts (`status`'s Recent Errors).

use rusqlite::{params_from_iter, OptionalExtension};
use serde::Deserialize;

use super::{
    attempt_summary, parse_snapshot, sheet_from_row, AttemptRecord, Registry, SheetRowError,
    SHEET_ROW_COLUMNS,
};
use crate::checkpoint::{CheckpointState, SheetState, SheetStatus};
use crate::error::{Result, StateError};

/// What a summary needs of one stored sheet.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSheetFacts {
    /// Sheet number.
    pub num: u32,
    /// Its state.
    pub status: SheetStatus,
    /// Its validations failed.
    pub failed_validation: bool,
    /// Movement, if any.
    pub movement: Option<u32>,
    /// Voice, if any.
    pub voice: Option<u32>,
    /// Its last run's duration.
    pub duration: Option<f64>,
    /// The instrument it ran on.
    pub instrument: Option<String>,
}

/// The only keys of a sheet's document a summary reads that have no column.
#[derive(Deserialize)]
struct Placement {
    #[serde(default)]
    movement: Option<u32>,
    #[serde(default)]
    voice: Option<u32>,
}

impl Registry {
    /// The checkpoint's job-level document and score snapshot, with no sheets; `None` when
    /// the job has no checkpoint yet.
    pub fn load_checkpoint_header(&self, job_id: &str) -> Result<Option<CheckpointState>> {
        let ctx = format!("loading the state of job '{job_id}'");
        let row: Option<(Option<String>, Option<String>)> = self
            .conn
            .query_row(
                "SELECT j.checkpoint_json, s.config_snapshot_json FROM jobs j \
                 LEFT JOIN job_scores s ON s.job_id = j.job_id WHERE j.job_id=?1",
                [job_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.err(&ctx))?;
        let Some((Some(header), snapshot)) = row else {
            return Ok(None);
        };
        let mut state: CheckpointState =
            serde_json::from_str(&header).map_err(|e| StateError::CorruptCheckpoint {
                job_id: job_id.to_owned(),
                reason: e.to_string(),
            })?;
        state.config_snapshot = parse_snapshot(job_id, snapshot)?;
        state.sheets = crate::sheet_map::SheetMap::new();
        Ok(Some(state))
    }

    /// Every sheet's [`StoredSheetFacts`], in sheet order: state, validation, duration and
    /// instrument from their columns; movement and voice read from the document without
    /// building the sheet.
    pub fn sheet_facts(&self, job_id: &str) -> Result<Vec<StoredSheetFacts>> {
        let ctx = format!("reading the sheets of job '{job_id}'");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT sheet_num, status, validation_passed, duration_seconds, instrument_name, \
                 state_json FROM sheets WHERE job_id=?1 ORDER BY sheet_num",
            )
            .map_err(self.err(&ctx))?;
        let mut rows = stmt.query([job_id]).map_err(self.err(&ctx))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(self.err(&ctx))? {
            let num: u32 = r.get(0).map_err(self.err(&ctx))?;
            let status: String = r.get(1).map_err(self.err(&ctx))?;
            let status =
                SheetStatus::parse(&status).ok_or_else(|| StateError::CorruptCheckpoint {
                    job_id: job_id.to_owned(),
                    reason: format!("sheet {num}: unknown status '{status}'"),
                })?;
            let passed: Option<bool> = r.get(2).map_err(self.err(&ctx))?;
            let duration: Option<f64> = r.get(3).map_err(self.err(&ctx))?;
            let instrument: Option<String> = r.get(4).map_err(self.err(&ctx))?;
            let text = r.get_ref(5).map_err(self.err(&ctx))?;
            let placement: Placement = text
                .as_str()
                .ok()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(Placement {
                    movement: None,
                    voice: None,
                });
            out.push(StoredSheetFacts {
                num,
                status,
                failed_validation: passed == Some(false),
                movement: placement.movement,
                voice: placement.voice,
                duration,
                instrument,
            });
        }
        Ok(out)
    }

    /// The full state of the sheets numbered in `nums` (those that exist), as
    /// [`Registry::load_checkpoint`] builds them.
    pub fn load_sheets(&self, job_id: &str, nums: &[u32]) -> Result<Vec<SheetState>> {
        let ctx = format!("loading sheets of job '{job_id}'");
        let mut out = Vec::with_capacity(nums.len());
        // SQLite's default limit on bound parameters is 32,766; stay well under it.
        for chunk in nums.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(",");
            let sql = format!(
                "SELECT {SHEET_ROW_COLUMNS} FROM sheets WHERE job_id=? AND sheet_num IN ({marks}) \
                 ORDER BY sheet_num"
            );
            let mut args: Vec<rusqlite::types::Value> = vec![job_id.to_owned().into()];
            args.extend(
                chunk
                    .iter()
                    .map(|n| rusqlite::types::Value::from(i64::from(*n))),
            );
            let mut stmt = self.conn.prepare(&sql).map_err(self.err(&ctx))?;
            let mut rows = stmt
                .query(params_from_iter(args.iter()))
                .map_err(self.err(&ctx))?;
            while let Some(r) = rows.next().map_err(self.err(&ctx))? {
                let mut sheet = sheet_from_row(r, job_id).map_err(|e| match e {
                    SheetRowError::Sql(e) => self.err(&ctx)(e),
                    SheetRowError::Corrupt(e) => e,
                })?;
                sheet
                    .validate()
                    .map_err(|reason| StateError::CorruptCheckpoint {
                        job_id: job_id.to_owned(),
                        reason,
                    })?;
                sheet.normalize();
                out.push(sheet);
            }
        }
        Ok(out)
    }

    /// The job's newest `limit` failed attempts (those that recorded an error), over all
    /// sheets, newest first, without their prompt and output; and how many it has in all.
    /// Only the attempts with an id above `after_attempt` count (a run's
    /// [`super::RunRecord::after_attempt`]; 0 for all).
    pub fn recent_attempt_errors(
        &self,
        job_id: &str,
        limit: usize,
        after_attempt: i64,
    ) -> Result<(Vec<AttemptRecord>, u64)> {
        let ctx = format!("reading the recent failed attempts of job '{job_id}'");
        // Both read the partial index of failed attempts (schema 4): a job with none costs
        // one index probe, whatever its number of attempts (issue 24). The condition must
        // be the index's own, word for word, for SQLite to use it.
        let total: i64 = self
            .conn
            .prepare_cached(
                "SELECT COUNT(*) FROM attempts WHERE job_id=?1 AND id>?2 \
                 AND (error_code IS NOT NULL OR error_message IS NOT NULL)",
            )
            .and_then(|mut stmt| {
                stmt.query_row(rusqlite::params![job_id, after_attempt], |r| r.get(0))
            })
            .map_err(self.err(&ctx))?;
        if total == 0 {
            return Ok((Vec::new(), 0));
        }
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, sheet_num, attempt_num, mode, outcome, instrument, error_code, \
                 error_category, error_message, exit_code, duration_seconds, cost_usd, \
                 input_tokens, output_tokens, executed_at \
                 FROM attempts WHERE job_id=?1 AND id>?3 \
                 AND (error_code IS NOT NULL OR error_message IS NOT NULL) \
                 ORDER BY id DESC LIMIT ?2",
            )
            .map_err(self.err(&ctx))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(rusqlite::params![job_id, limit, after_attempt], |r| {
                Ok(AttemptRecord {
                    cost_usd: r.get(11)?,
                    input_tokens: r.get(12)?,
                    output_tokens: r.get(13)?,
                    executed_at: r.get(14)?,
                    ..attempt_summary(r, job_id)?
                })
            })
            .map_err(self.err(&ctx))?;
        let out = rows
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err(&ctx))?;
        Ok((out, u64::try_from(total).unwrap_or(0)))
    }

    /// Each sheet's last recorded attempt (without its prompt and output) and how many
    /// attempts the sheet has recorded, by sheet number (`diagnose`'s timeline). Only the
    /// attempts with an id above `after_attempt` count (a run's
    /// [`super::RunRecord::after_attempt`]; 0 for all).
    pub fn last_attempts(
        &self,
        job_id: &str,
        after_attempt: i64,
    ) -> Result<Vec<(AttemptRecord, u64)>> {
        let ctx = format!("reading the last attempts of job '{job_id}'");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, sheet_num, attempt_num, mode, outcome, instrument, error_code, \
                 error_category, error_message, exit_code, duration_seconds, executed_at, total \
                 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY sheet_num ORDER BY id DESC) \
                 AS newest, COUNT(*) OVER (PARTITION BY sheet_num) AS total \
                 FROM attempts WHERE job_id=?1 AND id>?2) WHERE newest = 1 ORDER BY sheet_num",
            )
            .map_err(self.err(&ctx))?;
        let rows = stmt
            .query_map(rusqlite::params![job_id, after_attempt], |r| {
                let total: i64 = r.get(12)?;
                Ok((
                    AttemptRecord {
                        executed_at: r.get(11)?,
                        ..attempt_summary(r, job_id)?
                    },
                    u64::try_from(total).unwrap_or(0),
                ))
            })
            .map_err(self.err(&ctx))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err(&ctx))
    }
}
