//! Map a validated score + sheet plan (+ restored checkpoint) onto the baton's `JobSpec`.

use std::collections::HashMap;
use std::time::Duration;

use mozart_baton::{JobSpec, RestoredSheet, RetryPolicy, SheetSpec, SheetStatus, SkipSpec};
use mozart_config::{plan, JobConfig, PlanOutline};
use mozart_state::CheckpointState;

/// Dependencies of every sheet: the score's explicit `sheet.dependencies` when it has any
/// (upstream's baton ignores them, execution.md §1.3 [GAP]); otherwise the stage chain —
/// every sheet of movement k waits for every sheet of the previous movement, which gives
/// sequential scores their order and fan-out voices their parallelism.
fn dependencies(config: &JobConfig, outline: &PlanOutline) -> Vec<Vec<u32>> {
    let nums = 1..=outline.total_sheets;
    if !config.sheet.dependencies.is_empty() {
        // As the plan gives them (`PlannedSheet::dependencies`), without making each sheet.
        return nums
            .map(|n| {
                config
                    .sheet
                    .dependencies
                    .get(&i64::from(n))
                    .map(|d| d.iter().map(|x| *x as u32).collect())
                    .unwrap_or_default()
            })
            .collect();
    }
    // The plan's movement of a sheet (`PlannedSheet::movement`).
    let movement = |n: u32| plan::fan_meta(&config.sheet, i64::from(n)).0.max(0) as u32;
    // Each movement's sheets, gathered once: looking them up per sheet scanned the whole
    // plan for every sheet (O(sheets²): 10¹⁰ steps for a 100,000-sheet fan-out between two
    // single sheets).
    let mut by_movement: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for n in nums.clone() {
        by_movement.entry(movement(n)).or_default().push(n);
    }
    let previous: HashMap<u32, u32> = by_movement
        .keys()
        .zip(by_movement.keys().skip(1))
        .map(|(prev, next)| (*next, *prev))
        .collect();
    nums.map(|n| match previous.get(&movement(n)) {
        Some(prev) => by_movement.get(prev).cloned().unwrap_or_default(),
        None => Vec::new(),
    })
    .collect()
}

fn secs(v: f64) -> Duration {
    if v.is_finite() && v > 0.0 {
        Duration::from_secs_f64(v)
    } else {
        Duration::ZERO
    }
}

fn restored(cp: &CheckpointState, num: u32) -> Option<RestoredSheet> {
    // Not `get`: that would keep a whole copy of every compact (planned) sheet.
    let s = cp.sheets.peek(&num)?;
    let status = match s.status {
        mozart_state::SheetStatus::Completed => SheetStatus::Completed,
        mozart_state::SheetStatus::Skipped => SheetStatus::Skipped,
        // Failed sheets are retried on resume; in-flight ones become pending without
        // spending a retry (architecture invariant 1).
        _ => SheetStatus::Pending,
    };
    if status == SheetStatus::Pending && s.attempt_count == 0 && s.completion_attempts == 0 {
        return None;
    }
    Some(RestoredSheet {
        status,
        normal_attempts: if status == SheetStatus::Pending {
            0
        } else {
            s.attempt_count
        },
        completion_attempts: s.completion_attempts,
        healing_attempts: s.healing_attempts,
        total_cost_usd: 0.0,
        instrument: s.instrument_name.clone(),
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

/// The baton's view of one job.
pub(super) fn job_spec(
    job_id: &str,
    config: &JobConfig,
    plan: &PlanOutline,
    checkpoint: &CheckpointState,
    self_healing: bool,
) -> JobSpec {
    let deps = dependencies(config, plan);
    let retry = &config.retry;
    let policy = RetryPolicy {
        max_retries: u32::try_from(retry.max_retries.max(0)).unwrap_or(u32::MAX),
        base_delay: secs(retry.base_delay_seconds),
        exponential_base: retry.exponential_base,
        max_delay: secs(retry.max_delay_seconds),
        jitter: retry.jitter,
    };
    let sheets = plan
        .sheets(config)
        .zip(deps)
        .map(|(sheet, dependencies)| {
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
            SheetSpec {
                num: sheet.num,
                dependencies,
                instrument: sheet.instrument.clone(),
                model: sheet.model.clone(),
                fallbacks: sheet.instrument_fallbacks.clone(),
                retry: reviewed_policy(config, sheet.movement, &policy),
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
                restored: restored(checkpoint, sheet.num),
            }
        })
        .collect();
    let mut spec = JobSpec::new(job_id, sheets);
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

    #[test]
    fn sequential_scores_chain_and_fan_out_voices_run_side_by_side() {
        let (config, plan) = plan_of(
            "name: t\nworkspace: ./ws\nsheet: {size: 1, total_items: 3, fan_out: {2: 3}}\nprompt: {template: hi}\n",
        );
        let deps = dependencies(&config, &plan);
        // movement 1 = sheet 1; movement 2 = sheets 2..4 (voices); movement 3 = sheet 5
        assert_eq!(deps[0], Vec::<u32>::new());
        assert_eq!(deps[1], vec![1]);
        assert_eq!(deps[3], vec![1]);
        assert_eq!(deps[4], vec![2, 3, 4]);
    }
}
