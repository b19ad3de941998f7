//! A job's runs (schema 6): its first submission starts run 1, each fresh start the next.
//! The attempt history keeps every run's attempts; the views of a job's errors show the
//! current run's, so a user who ran a job again with `--fresh` is not shown what the run
//! before it failed on as if it were this run's.

use rusqlite::{params, OptionalExtension};

use super::Registry;
use crate::error::Result;
use crate::time::epoch_now;

/// Which attempts of a job belong to its current run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunRecord {
    /// 1 for the job's first run, one more for each fresh start.
    pub run: u32,
    /// The current run's attempts are those with a larger id (0: every attempt).
    pub after_attempt: i64,
    /// When the run started (epoch seconds); `None` for a run 1 (its submission time is the
    /// job's).
    pub started_at: Option<f64>,
}

impl RunRecord {
    /// A job's first run: every attempt is its.
    pub const FIRST: RunRecord = RunRecord {
        run: 1,
        after_attempt: 0,
        started_at: None,
    };
}

impl Registry {
    /// Starts the next run of `job_id` (a fresh start): the attempts recorded from now on
    /// are the new run's. The job must be registered.
    pub fn start_run(&self, job_id: &str) -> Result<RunRecord> {
        let ctx = format!("starting a new run of job '{job_id}'");
        let now = epoch_now();
        let run = self
            .conn
            .prepare_cached(
                "INSERT INTO job_runs (job_id, run, after_attempt, started_at) \
                 VALUES (?1, 2, (SELECT COALESCE(MAX(id), 0) FROM attempts WHERE job_id=?1), ?2) \
                 ON CONFLICT(job_id) DO UPDATE SET run=run+1, \
                 after_attempt=excluded.after_attempt, started_at=excluded.started_at \
                 RETURNING run, after_attempt",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![job_id, now], |r| Ok((r.get(0)?, r.get(1)?)))
            })
            .map_err(self.err(ctx))?;
        Ok(RunRecord {
            run: run.0,
            after_attempt: run.1,
            started_at: Some(now),
        })
    }

    /// The current run of `job_id` ([`RunRecord::FIRST`] when it never started another,
    /// or is not registered).
    pub fn current_run(&self, job_id: &str) -> Result<RunRecord> {
        let row = self
            .conn
            .prepare_cached("SELECT run, after_attempt, started_at FROM job_runs WHERE job_id=?1")
            .and_then(|mut stmt| {
                stmt.query_row([job_id], |r| {
                    Ok(RunRecord {
                        run: r.get(0)?,
                        after_attempt: r.get(1)?,
                        started_at: r.get(2)?,
                    })
                })
                .optional()
            })
            .map_err(self.err_lazy(|| format!("reading the current run of job '{job_id}'")))?;
        Ok(row.unwrap_or(RunRecord::FIRST))
    }

    /// How many failed attempts (those that recorded an error) `job_id` has from before
    /// `run` started.
    pub fn earlier_runs_errors(&self, job_id: &str, run: &RunRecord) -> Result<u64> {
        if run.after_attempt <= 0 {
            return Ok(0);
        }
        // The condition of the failed attempts' partial index (schema 4), word for word.
        let count: i64 = self
            .conn
            .prepare_cached(
                "SELECT COUNT(*) FROM attempts WHERE job_id=?1 AND id<=?2 \
                 AND (error_code IS NOT NULL OR error_message IS NOT NULL)",
            )
            .and_then(|mut stmt| stmt.query_row(params![job_id, run.after_attempt], |r| r.get(0)))
            .map_err(self.err_lazy(|| {
                format!("counting the failed attempts of earlier runs of job '{job_id}'")
            }))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}
