//! Map a validated score + sheet plan (+ restored checkpoint) onto the baton's `JobSpec`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mozart_baton::{
    JobSpec, RestoredRateWait, RestoredSheet, RetryPolicy, SheetSource, SheetSourceRef, SheetSpec,
    SheetStatus, SkipSpec,
};
use mozart_config::{plan, JobConfig, PlanOutline};
use mozart_state::CheckpointState;

use super::JobRun;

/// Dependencies of every sheet: the score's explicit `sheet.dependencies` when it has any
/// (upstream's baton ignores them, execution.md §1.3 [GAP]); otherwise the stage chain —
/// every sheet of movement k waits for every sheet of the previous movement, which gives
/// sequential scores their order and fan-out voices their parallelism. Held per movement,
/// not per sheet: the voices of a 100,000-voice stage share one list (issue 24).
enum Dependencies {
    /// The score's own `sheet.dependencies`, by sheet.
    Explicit(HashMap<u32, Vec<u32>>),
    /// The stage chain: each movement's sheets, and the movement before each movement.
    Chain {
        by_movement: BTreeMap<u32, Vec<u32>>,
        previous: HashMap<u32, u32>,
    },
}

/// The plan's movement of sheet `n` (`PlannedSheet::movement`).
fn movement_of(config: &JobConfig, n: u32) -> u32 {
    plan::fan_meta(&config.sheet, i64::from(n)).0.max(0) as u32
}

impl Dependencies {
    fn of(config: &JobConfig, outline: &PlanOutline) -> Dependencies {
        let nums = 1..=outline.total_sheets;
        if !config.sheet.dependencies.is_empty() {
            // As the plan gives them (`PlannedSheet::dependencies`), without making each
            // sheet.
            return Dependencies::Explicit(
                config
                    .sheet
                    .dependencies
                    .iter()
                    .filter_map(|(n, d)| {
                        let n = u32::try_from(*n).ok()?;
                        Some((n, d.iter().map(|x| *x as u32).collect()))
                    })
                    .collect(),
            );
        }
        // Each movement's sheets, gathered once: looking them up per sheet scanned the whole
        // plan for every sheet (O(sheets²): 10¹⁰ steps for a 100,000-sheet fan-out between
        // two single sheets).
        let mut by_movement: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for n in nums {
            by_movement
                .entry(movement_of(config, n))
                .or_default()
                .push(n);
        }
        let previous = by_movement
            .keys()
            .zip(by_movement.keys().skip(1))
            .map(|(prev, next)| (*next, *prev))
            .collect();
        Dependencies::Chain {
            by_movement,
            previous,
        }
    }

    /// Sheet `n`'s dependencies.
    fn of_sheet(&self, config: &JobConfig, n: u32) -> &[u32] {
        match self {
            Dependencies::Explicit(map) => map.get(&n).map_or(&[], Vec::as_slice),
            Dependencies::Chain {
                by_movement,
                previous,
            } => previous
                .get(&movement_of(config, n))
                .and_then(|prev| by_movement.get(prev))
                .map_or(&[], Vec::as_slice),
        }
    }
}

fn secs(v: f64) -> Duration {
    if v.is_finite() && v > 0.0 {
        Duration::from_secs_f64(v)
    } else {
        Duration::ZERO
    }
}

fn restored(s: &mozart_state::SheetState) -> Option<RestoredSheet> {
    let status = match s.status {
        mozart_state::SheetStatus::Completed => SheetStatus::Completed,
        mozart_state::SheetStatus::Skipped => SheetStatus::Skipped,
        // Failed sheets are retried on resume; in-flight ones become pending without
        // spending a retry (architecture invariant 1).
        _ => SheetStatus::Pending,
    };
    // What the sheet's attempts spent counts against the cost limits after a restart or a
    // resume as it did before (a limit that forgot it let a paused job spend it again).
    let spent_usd = s
        .estimated_cost
        .filter(|c| c.is_finite() && *c > 0.0)
        .unwrap_or(0.0);
    if status == SheetStatus::Pending
        && s.attempt_count == 0
        && s.completion_attempts == 0
        && spent_usd == 0.0
    {
        return None;
    }
    // The retries a sheet has spent survive a restart: its row counts the attempts that
    // ended (`update_sheet`: normal + completion, one more once completed; a healing attempt
    // is one of those), never the one that was running — that one was interrupted and is
    // free. A sheet whose job failed gets a fresh budget when the job is resumed.
    let spent = s.attempt_count.saturating_sub(s.completion_attempts);
    Some(RestoredSheet {
        status,
        normal_attempts: match (status, s.status) {
            (SheetStatus::Pending, mozart_state::SheetStatus::Failed) => 0,
            (SheetStatus::Pending, _) => spent,
            _ => s.attempt_count,
        },
        completion_attempts: s.completion_attempts,
        healing_attempts: s.healing_attempts,
        total_cost_usd: spent_usd,
        instrument: s.instrument_name.clone(),
        earlier_attempts: 0,
        // The rest of the backoff the sheet was waiting out (none once it is due).
        retry_in: s
            .retry_at
            .filter(|_| {
                status == SheetStatus::Pending && s.status == mozart_state::SheetStatus::Pending
            })
            .map(|at| at - mozart_state::epoch_now())
            .filter(|left| *left > 0.0)
            .map(std::time::Duration::from_secs_f64),
    })
}

/// A reviewed sheet's `RETRY` verdicts ride on its retries (docs/mochi.md): its budget is
/// `review.max_iterations` on top of `retry.max_retries` (which stays for worker crashes);
/// the loop itself stops at `max_iterations`.
fn reviewed_policy(config: &JobConfig, movement: u32, policy: &RetryPolicy) -> RetryPolicy {
    let mut policy = policy.clone();
    if let Some(r) = config
        .review
        .as_ref()
        .filter(|r| r.reviews(config, movement))
    {
        let extra = u32::try_from(r.max_iterations.max(1)).unwrap_or(u32::MAX);
        policy.max_retries = policy.max_retries.max(1).saturating_add(extra);
    }
    policy
}

/// The baton's view of one job: its sheets made one at a time from the run's score as the
/// baton builds its own (a spec of every sheet at once was the conductor's whole-life peak
/// for a large job: ~330 bytes a sheet, issue 24).
pub(super) fn job_spec(
    job_id: &str,
    run: &Arc<JobRun>,
    checkpoint: &CheckpointState,
    self_healing: bool,
) -> JobSpec {
    let config = &run.config;
    let retry = &config.retry;
    let policy = RetryPolicy {
        max_retries: u32::try_from(retry.max_retries.max(0)).unwrap_or(u32::MAX),
        base_delay: secs(retry.base_delay_seconds),
        exponential_base: retry.exponential_base,
        max_delay: secs(retry.max_delay_seconds),
        jitter: retry.jitter,
    };
    // Only the sheets with progress to restore (none for a new job).
    let mut restored: HashMap<u32, RestoredSheet> = checkpoint
        .sheets
        .scan()
        .filter_map(|(num, sheet)| Some((num, restored(&sheet)?)))
        .collect();
    // A failed or cancelled job run again: its unfinished sheets get a fresh budget, and
    // their next attempt is numbered after the ones they made.
    for (&num, &earlier) in &run.fresh_budget {
        let sheet = restored.entry(num).or_insert_with(|| RestoredSheet {
            status: SheetStatus::Pending,
            normal_attempts: 0,
            completion_attempts: 0,
            healing_attempts: 0,
            total_cost_usd: 0.0,
            instrument: None,
            earlier_attempts: 0,
            retry_in: None,
        });
        sheet.normal_attempts = 0;
        sheet.completion_attempts = 0;
        sheet.healing_attempts = 0;
        sheet.earlier_attempts = earlier;
    }
    let source = PlanSheets {
        run: Arc::clone(run),
        deps: Dependencies::of(config, &run.plan),
        policy,
        restored,
    };
    let mut spec = JobSpec::new(job_id, Vec::new());
    spec.source = Some(SheetSourceRef(Arc::new(source)));
    spec.max_concurrent_sheets = if config.parallel.enabled {
        u32::try_from(config.parallel.max_concurrent.max(1)).unwrap_or(1)
    } else {
        1
    };
    spec.pause_between_sheets =
        Duration::from_secs(u64::try_from(config.pause_between_sheets_seconds.max(0)).unwrap_or(0));
    spec.max_cost_usd = if config.cost_limits.enabled {
        config.cost_limits.max_cost_per_job
    } else {
        None
    };
    spec.self_healing_enabled = self_healing;
    spec
}

/// The job's own rate-limit waits still in force (instruments whose limits hold one job
/// only, `shell`), for a job that goes on from its checkpoint: a restart keeps it waiting
/// (invariant 2). Any other run of the id starts without them, and their rows go.
pub(super) fn rate_waits(
    registry: &mozart_state::Registry,
    job_id: &str,
    resumed: bool,
) -> Vec<RestoredRateWait> {
    if !resumed {
        if let Err(e) = registry.clear_job_rate_limit(job_id, None) {
            tracing::warn!(job_id, error = %e, "cannot clear the last run's rate limits");
        }
        return Vec::new();
    }
    let now = mozart_state::epoch_now();
    match registry.job_rate_limit_runs(job_id, now) {
        Ok(limits) => limits
            .into_iter()
            .map(|l| {
                tracing::info!(job_id, instrument = %l.instrument, wait_seconds = l.until - now, "rate_limit.restored");
                RestoredRateWait {
                    instrument: l.instrument,
                    wait: Duration::from_secs_f64((l.until - now).max(0.0)),
                    reason: l.reason,
                    streak: l.streak,
                }
            })
            .collect(),
        Err(e) => {
            tracing::error!(job_id, error = %e, "cannot read the job's persisted rate limits; its sheets start without waiting");
            Vec::new()
        }
    }
}

/// A job's sheets for the baton, made from the run's score when the baton asks.
struct PlanSheets {
    run: Arc<JobRun>,
    deps: Dependencies,
    policy: RetryPolicy,
    restored: HashMap<u32, RestoredSheet>,
}

impl SheetSource for PlanSheets {
    fn len(&self) -> usize {
        self.run.plan.total_sheets as usize
    }

    fn num(&self, i: usize) -> u32 {
        // The plan numbers its sheets 1, 2, 3…
        u32::try_from(i + 1).unwrap_or(u32::MAX)
    }

    fn dependencies(&self, i: usize) -> &[u32] {
        self.deps.of_sheet(&self.run.config, self.num(i))
    }

    fn sheet(&self, i: usize) -> SheetSpec {
        let num = self.num(i);
        let config = &self.run.config;
        let Some(sheet) = self.run.sheet(num) else {
            // Past the plan: `len` says there is no such sheet.
            return SheetSpec::new(num, String::new());
        };
        let skip = if sheet.skip_when.is_some() || sheet.skip_when_command.is_some() {
            Some(SkipSpec {
                when: sheet.skip_when.clone(),
                command: sheet.skip_when_command.as_ref().map(|c| c.command.clone()),
                description: sheet
                    .skip_when_command
                    .as_ref()
                    .and_then(|c| c.description.clone()),
                command_timeout: sheet
                    .skip_when_command
                    .as_ref()
                    .map(|c| secs(c.timeout_seconds)),
            })
        } else {
            None
        };
        let retry = &config.retry;
        SheetSpec {
            num,
            dependencies: self.dependencies(i).to_vec(),
            instrument: sheet.instrument.clone(),
            model: sheet.model.clone(),
            fallbacks: sheet.instrument_fallbacks.clone(),
            retry: reviewed_policy(config, sheet.movement, &self.policy),
            max_completion_attempts: u32::try_from(retry.max_completion_attempts.max(0))
                .unwrap_or(0),
            completion_threshold_percent: retry.completion_threshold_percent,
            skip,
            timeout: secs(sheet.timeout_seconds).max(Duration::from_secs(1)),
            max_cost_usd: if config.cost_limits.enabled {
                config.cost_limits.max_cost_per_sheet
            } else {
                None
            },
            restored: self.restored.get(&num).cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(yaml: &str) -> (JobConfig, PlanOutline) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.yaml");
        std::fs::write(&path, yaml).unwrap();
        let score = mozart_config::load_score(&path).unwrap();
        let plan = PlanOutline::of(&score.config).unwrap();
        (score.config, plan)
    }

    /// A restart keeps the retries a sheet has spent (one waiting out its backoff, one whose
    /// next attempt was running); only a failed sheet, resumed by the user, starts afresh.
    #[test]
    fn a_restart_keeps_the_retries_a_sheet_has_spent() {
        let row = |status, attempts, completion| {
            let mut s = mozart_state::SheetState::new(1);
            s.status = status;
            s.attempt_count = attempts;
            s.completion_attempts = completion;
            restored(&s).map(|r| (r.status, r.normal_attempts, r.completion_attempts))
        };
        use mozart_state::SheetStatus as Row;
        assert_eq!(row(Row::Pending, 2, 0), Some((SheetStatus::Pending, 2, 0)));
        assert_eq!(
            row(Row::InProgress, 1, 0),
            Some((SheetStatus::Pending, 1, 0))
        );
        assert_eq!(
            row(Row::InProgress, 3, 1),
            Some((SheetStatus::Pending, 2, 1))
        );
        assert_eq!(row(Row::Failed, 3, 0), Some((SheetStatus::Pending, 0, 0)));
        assert_eq!(
            row(Row::Completed, 2, 0),
            Some((SheetStatus::Completed, 2, 0))
        );
        assert_eq!(row(Row::Pending, 0, 0), None);
    }

    #[test]
    fn sequential_scores_chain_and_fan_out_voices_run_side_by_side() {
        let (config, plan) = plan_of(
            "name: t\nworkspace: ./ws\nsheet: {size: 1, total_items: 3, fan_out: {2: 3}}\nprompt: {template: hi}\n",
        );
        let deps = Dependencies::of(&config, &plan);
        let deps: Vec<&[u32]> = (1..=plan.total_sheets)
            .map(|n| deps.of_sheet(&config, n))
            .collect();
        // movement 1 = sheet 1; movement 2 = sheets 2..4 (voices); movement 3 = sheet 5
        assert_eq!(deps[0], &[] as &[u32]);
        assert_eq!(deps[1], &[1]);
        assert_eq!(deps[3], &[1]);
        assert_eq!(deps[4], &[2, 3, 4]);
    }
}
