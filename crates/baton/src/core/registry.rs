//! Job registration, including restoration from a checkpoint (§2.10 `register_job`,
//! `recover_job`).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{BatonCore, Ending, Job, Rules, Sheet, SheetIndex, SkipState};
use crate::effect::{Effect, JobOutcome};
use crate::spec::{JobSpec, RestoredSheet, SheetSpec};
use crate::status::{AttemptMode, JobStatus, SheetStatus};
use crate::time::Millis;

impl BatonCore {
    pub(super) fn register_job(&mut self, spec: JobSpec, now: Millis, out: &mut Vec<Effect>) {
        if self.jobs.get(&spec.job_id).is_some_and(|j| !j.finished) {
            // Upstream logs a warning and ignores a duplicate registration (§2.10).
            self.observe(
                out,
                &spec.job_id,
                0,
                "baton.job.duplicate",
                serde_json::json!({"reason": "job is already registered"}),
                now,
            );
            return;
        }
        if let Err(reason) = check_shape(&spec) {
            self.reject(&spec.job_id, reason, now, out);
            return;
        }

        let count = spec.sheet_count();
        let index = SheetIndex::of((0..count).map(|i| spec.num(i)));
        let mut restored_in_flight = Vec::new();
        let mut restored_retries = Vec::new();
        let mut sheets: Vec<Sheet> = Vec::with_capacity(count);
        for i in 0..count {
            // Made one at a time from a source: never every spec at once (issue 24).
            let s = spec.sheet(i);
            let s = &*s;
            let rules = rules_of(s);
            // Shared with the sheet before when they are the same (issue 24).
            let rules = match sheets.last() {
                Some(prev) if *prev.rules == rules => Arc::clone(&prev.rules),
                _ => Arc::new(rules),
            };
            sheets.push(self.build_sheet(i, s, rules, &mut restored_in_flight));
            if let Some(RestoredSheet {
                status: SheetStatus::Pending,
                retry_in: Some(wait),
                ..
            }) = &s.restored
            {
                restored_retries.push((i, *wait));
            }
        }
        link_dependencies(&spec, &index, &mut sheets);
        let job = new_job(&spec, sheets, index, now);
        // A finished job with the same id may still sit in the map until reaped; replace it.
        let (ji, _) = self.jobs.insert_full(spec.job_id.clone(), job);

        // Running or queued is persisted by the job-slot step after this event
        // (`admit_jobs`), which also starts the job's clock when it gets a slot.
        for &i in &restored_in_flight {
            self.persist_sheet(ji, i, out);
        }
        // Its own rate-limit waits that outlived a restart: its sheets keep waiting.
        for wait in &spec.rate_waits {
            let ii = self.instrument_idx(&wait.instrument);
            let scope = super::WaitScope::Job(ji, ii);
            self.restore_streak(scope, Some(wait.streak));
            // A wait that had ended: only the run of limits it was in goes on.
            if !wait.wait.is_zero() {
                self.park(scope, wait.wait, wait.reason.clone(), now, out);
            }
        }
        // Sheets that were waiting out a retry's backoff wait out the rest of it (a restart
        // does not bring a retry forward); the retry is in the mode it was to run in.
        for (i, wait) in restored_retries {
            let mode = self.jobs[ji].sheets[i].next_mode;
            self.retry_after(ji, i, mode, wait, now, out);
        }
        self.block_restored_failures(ji, now, out);
        for i in 0..self.jobs[ji].sheets.len() {
            self.make_ready(ji, i, out);
        }
        self.check_job_cost(ji, out);
        self.check_job_done(ji, now, out);
    }

    /// The baton's sheet for a spec, restored from its checkpoint state if it has one; a
    /// sheet that was in flight is added to `restored_in_flight`.
    fn build_sheet(
        &mut self,
        i: usize,
        s: &SheetSpec,
        rules: Arc<Rules>,
        restored_in_flight: &mut Vec<usize>,
    ) -> Sheet {
        let mut instrument = self.instrument_idx(&s.instrument);
        let mut fallback_pos = 0;
        let mut status = SheetStatus::Pending;
        let (mut normal, mut completion, mut healing, mut cost) = (0, 0, 0, 0.0);
        let mut earlier = 0;
        if let Some(r) = &s.restored {
            status = match r.status {
                // Terminal sheets stay terminal: a completed sheet never runs again
                // (invariant 1).
                st if st.is_terminal() => st,
                SheetStatus::Pending => SheetStatus::Pending,
                _ => {
                    // In flight when the conductor stopped: re-run without spending a retry.
                    restored_in_flight.push(i);
                    SheetStatus::Pending
                }
            };
            normal = r.normal_attempts;
            completion = r.completion_attempts;
            healing = r.healing_attempts;
            cost = r.total_cost_usd;
            earlier = r.earlier_attempts;
            if let Some(name) = &r.instrument {
                if let Some(pos) = s.fallbacks.iter().position(|f| f == name) {
                    fallback_pos = u32::try_from(pos + 1).unwrap_or(u32::MAX);
                    instrument = self.instrument_idx(name);
                }
            }
        }
        let next_mode = if completion > 0 {
            AttemptMode::Completion
        } else if healing > 0 {
            AttemptMode::Healing
        } else {
            AttemptMode::Normal
        };
        let mut sheet = Sheet {
            num: s.num,
            status,
            dependents: Box::default(),
            unmet: 0,
            instrument: u32::try_from(instrument).unwrap_or(u32::MAX),
            fallback_pos,
            skip_state: if rules.skip.is_some() {
                SkipState::Unevaluated
            } else {
                SkipState::Clear
            },
            rules,
            normal_attempts: normal,
            completion_attempts: completion,
            healing_attempts: healing,
            total_cost: cost,
            next_mode,
            live: None,
        };
        if earlier > 0 {
            sheet.live_mut().earlier_attempts = earlier;
        }
        sheet
    }

    /// F-440: failures restored from a checkpoint still block their dependents.
    fn block_restored_failures(&mut self, ji: usize, now: Millis, out: &mut Vec<Effect>) {
        let failed: Vec<usize> = (0..self.jobs[ji].sheets.len())
            .filter(|&i| self.jobs[ji].sheets[i].status == SheetStatus::Failed)
            .collect();
        for i in failed {
            let root = self.jobs[ji].sheets[i].num;
            let dependents = self.jobs[ji].sheets[i].dependents.clone();
            for d in dependents {
                let d = d as usize;
                self.finish_sheet(
                    ji,
                    d,
                    Ending::not_run(SheetStatus::Failed, super::blocked_reason(root)),
                    now,
                    out,
                );
            }
        }
    }

    /// Refuse a malformed job: persist it as failed and announce why.
    fn reject(&mut self, job_id: &str, reason: String, now: Millis, out: &mut Vec<Effect>) {
        out.push(Effect::Persist(crate::effect::StateChange::Job(
            crate::effect::JobChange {
                job_id: job_id.to_owned(),
                status: JobStatus::Failed,
                reason: Some(reason.clone()),
                total_cost_usd: 0.0,
                cost_limit_reached: false,
                clock_started_at: None,
            },
        )));
        self.observe(
            out,
            job_id,
            0,
            "baton.job.rejected",
            serde_json::json!({"reason": reason}),
            now,
        );
        out.push(Effect::JobFinished {
            job_id: job_id.to_owned(),
            outcome: JobOutcome::Failed,
            reason: Some(reason),
        });
    }
}

/// What a sheet's spec says to do with it.
fn rules_of(s: &SheetSpec) -> Rules {
    Rules {
        model: s.model.clone(),
        fallbacks: s.fallbacks.clone(),
        retry: s.retry.clone(),
        max_completion: s.max_completion_attempts,
        completion_threshold: s.completion_threshold_percent,
        skip: s.skip.clone(),
        timeout: s.timeout,
        cost_limit: s.max_cost_usd,
    }
}

/// Reject jobs the dependency counters cannot run: duplicate numbers, self-dependencies and
/// cycles would otherwise leave sheets pending forever.
fn check_shape(spec: &JobSpec) -> Result<(), String> {
    let n = spec.sheet_count();
    if n == 0 {
        return Err(format!("job '{}' has no sheets", spec.job_id));
    }
    let index = SheetIndex::of((0..n).map(|i| spec.num(i)));
    if let SheetIndex::Map(map) = &index {
        if map.len() < n {
            let mut seen = std::collections::HashSet::with_capacity(n);
            let dup = (0..n).map(|i| spec.num(i)).find(|num| !seen.insert(*num));
            return Err(format!(
                "job '{}': duplicate sheet number {}",
                spec.job_id,
                dup.unwrap_or_default()
            ));
        }
    }
    for i in 0..n {
        let num = spec.num(i);
        if spec.dependencies(i).contains(&num) {
            return Err(format!(
                "job '{}': sheet {} depends on itself",
                spec.job_id, num
            ));
        }
    }
    // Kahn's algorithm: whatever is left unprocessed sits on a cycle.
    let mut indegree = vec![0u32; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, count) in indegree.iter_mut().enumerate() {
        let deps: BTreeSet<usize> = spec
            .dependencies(i)
            .iter()
            .filter_map(|d| index.get(*d))
            .collect();
        for d in deps {
            *count += 1;
            dependents[d].push(i);
        }
    }
    let mut queue: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = queue.pop() {
        done += 1;
        for &d in &dependents[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                queue.push(d);
            }
        }
    }
    if done < n {
        let cyclic: Vec<u32> = (0..n)
            .filter(|&i| indegree[i] > 0)
            .map(|i| spec.num(i))
            .collect();
        return Err(format!(
            "job '{}': dependency cycle among sheets {cyclic:?}",
            spec.job_id
        ));
    }
    Ok(())
}

/// Wire each sheet to its dependents and count the dependencies not yet satisfied.
fn link_dependencies(spec: &JobSpec, index: &SheetIndex, sheets: &mut [Sheet]) {
    let mut dependents: Vec<Vec<u32>> = vec![Vec::new(); sheets.len()];
    for i in 0..spec.sheet_count() {
        let mut seen = BTreeSet::new();
        for dep in spec.dependencies(i) {
            // §2.8: a dependency number not in the job counts as satisfied.
            let Some(d) = index.get(*dep) else { continue };
            if !seen.insert(d) {
                continue;
            }
            dependents[d].push(u32::try_from(i).unwrap_or(u32::MAX));
            if !sheets[d].status.satisfies_dependents() {
                sheets[i].unmet += 1;
            }
        }
    }
    for (sheet, list) in sheets.iter_mut().zip(dependents) {
        sheet.dependents = list.into_boxed_slice();
    }
}

/// The baton's job for a spec whose sheets are built.
fn new_job(spec: &JobSpec, sheets: Vec<Sheet>, index: SheetIndex, now: Millis) -> Job {
    let total_cost = sheets.iter().map(|s| s.total_cost).sum();
    let terminal = sheets.iter().filter(|s| s.status.is_terminal()).count();
    let count = sheets.len();
    Job {
        id: spec.job_id.clone(),
        sheets,
        index,
        ready: super::ReadySet::with_sheets(count),
        ready_per_instrument: Vec::new(),
        running: 0,
        max_concurrent: spec.max_concurrent_sheets.max(1),
        pause_between: spec.pause_between_sheets,
        pacing_until: None,
        pacing_timer: None,
        user_paused: false,
        cost_paused: false,
        escalation_paused: false,
        cost_limit: spec.max_cost_usd,
        total_cost,
        escalation_enabled: spec.escalation_enabled,
        self_healing_enabled: spec.self_healing_enabled,
        escalation_timeout: spec.escalation_timeout,
        timeout: spec.timeout,
        timeout_timer: None,
        started_at: now,
        terminal,
        cancelled: false,
        failure_reason: None,
        halted: false,
        finished: false,
        admitted: false,
        // The baton's clock is anchored to wall time: its registration, when not given.
        submitted_at: spec.submitted_at.unwrap_or_else(|| now.0 as f64 / 1000.0),
        clock_started: false,
        restored_clock: spec.clock_started_at,
        shown: None,
        rate_waits: Vec::new(),
        skips_pending: 0,
    }
}
