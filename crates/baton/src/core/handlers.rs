//! One handler per event (execution.md §2.4), with the \[LATER\] intent where upstream is
//! half-wired: retries fire, rate limits expire, breakers recover, pause is honoured.

use std::time::Duration;

use std::sync::Arc;

use super::{backoff, BatonCore, Ending, Rules, SheetTimer, WaitScope};
use crate::effect::Effect;
use crate::event::{
    AttemptResult, EscalationDecision, Event, Failure, FailureKind, ResourceSeverity,
};
use crate::spec::{CostLimitsUpdate, InstrumentSpec};
use crate::status::{AttemptMode, CircuitState, JobStatus, SheetStatus};
use crate::time::Millis;

impl BatonCore {
    pub(super) fn apply(&mut self, event: Event, now: Millis, out: &mut Vec<Effect>) {
        match event {
            Event::RegisterJob(spec) => self.register_job(*spec, now, out),
            Event::SheetAttemptResult(result) => self.on_attempt_result(*result, now, out),
            Event::SkipEvaluated {
                job_id,
                sheet_num,
                skip_reason,
            } => self.on_skip_evaluated(&job_id, sheet_num, skip_reason, now, out),
            Event::SheetSkipped {
                job_id,
                sheet_num,
                reason,
            } => self.on_sheet_skipped(&job_id, sheet_num, reason, now, out),
            Event::RateLimitHit {
                instrument,
                wait,
                reason,
                job_id,
                streak,
                ..
            } => {
                let ii = self.instrument_idx(&instrument);
                let scope = match job_id.as_deref().and_then(|j| self.job_index(j)) {
                    Some(ji) => self.wait_scope(ji, ii),
                    None => WaitScope::Instrument(ii),
                };
                self.restore_streak(scope, streak);
                // A run of limits whose last wait had ended (the retry after it was running
                // when the conductor stopped): only its place in the probe schedule goes on.
                if !wait.is_zero() {
                    self.park(scope, wait, reason, now, out);
                }
            }
            Event::RateLimitExpired { instrument, job_id } => {
                self.on_rate_limit_expired(&instrument, job_id.as_deref(), now, out)
            }
            Event::ClearRateLimit { instrument } => self.on_clear_rate_limit(instrument, out),
            Event::RetryDue { job_id, sheet_num } => self.on_retry_due(&job_id, sheet_num, out),
            Event::StaleCheck {
                job_id,
                sheet_num,
                dispatch_id,
            } => self.on_stale_check(&job_id, sheet_num, dispatch_id, now, out),
            Event::JobTimeout { job_id } => self.on_job_timeout(&job_id, now, out),
            Event::PacingComplete { job_id } => self.on_pacing_complete(&job_id, now),
            Event::EscalationNeeded {
                job_id,
                sheet_num,
                reason,
            } => self.on_escalation_needed(&job_id, sheet_num, reason, now, out),
            Event::EscalationResolved {
                job_id,
                sheet_num,
                decision,
            } => self.on_escalation_resolved(&job_id, sheet_num, decision, now, out),
            Event::EscalationTimeout { job_id, sheet_num } => {
                self.on_escalation_timeout(&job_id, sheet_num, now, out)
            }
            Event::CircuitBreakerRecovery { instrument } => {
                self.on_circuit_breaker_recovery(&instrument, out)
            }
            Event::PauseJob { job_id } => self.on_pause(&job_id, out),
            Event::ResumeJob { job_id, new_limits } => {
                self.on_resume(&job_id, new_limits, now, out);
            }
            Event::CancelJob { job_id } => self.on_cancel(&job_id, now, out),
            Event::ShutdownRequested { graceful } => self.on_shutdown_requested(graceful, out),
            Event::ProcessExited {
                job_id,
                sheet_num,
                pid,
                exit_code,
            } => self.on_process_exited(job_id, sheet_num, pid, exit_code, now, out),
            Event::ConfigReloaded {
                max_concurrent_sheets,
                max_concurrent_jobs,
                instruments,
            } => {
                if let Some(limit) = max_concurrent_jobs {
                    self.set_job_limit(limit);
                }
                self.on_config_reloaded(max_concurrent_sheets, &instruments)
            }
            Event::ResourceAnomaly { severity, .. } => match severity {
                ResourceSeverity::Critical => self.backpressure = true,
                ResourceSeverity::Normal => self.backpressure = false,
                ResourceSeverity::Warning => {}
            },
            Event::DispatchRetry => {}
        }
    }

    // ---- small event handlers -------------------------------------------------------------

    /// `SheetSkipped`: a skip decided outside the baton ends the sheet.
    fn on_sheet_skipped(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        reason: String,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        if let Some((ji, si)) = self.locate(job_id, sheet_num) {
            self.kill_if_dispatched(ji, si, out);
            self.finish_sheet(
                ji,
                si,
                Ending::not_run(SheetStatus::Skipped, Some(reason)),
                now,
                out,
            );
        }
    }

    /// `RateLimitExpired`: end the wait (the instrument's, or one job's on it) unless a
    /// later hit extended it.
    fn on_rate_limit_expired(
        &mut self,
        instrument: &str,
        job_id: Option<&str>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let Some(&ii) = self.instrument_index.get(instrument) else {
            return;
        };
        let scope = match job_id {
            None => WaitScope::Instrument(ii),
            Some(job_id) => match self.job_index(job_id) {
                Some(ji) => WaitScope::Job(ji, ii),
                None => return,
            },
        };
        if self.rate_wait(scope).is_some_and(|w| !w.active(now)) {
            self.rate_wait_mut(scope).timer = None;
            self.unpark(scope, out);
        }
    }

    /// `ClearRateLimit`: lift the wait of one instrument, or of all.
    fn on_clear_rate_limit(&mut self, instrument: Option<String>, out: &mut Vec<Effect>) {
        let targets: Vec<usize> = match instrument {
            Some(name) => self
                .instrument_index
                .get(&name)
                .copied()
                .into_iter()
                .collect(),
            None => (0..self.instruments.len()).collect(),
        };
        for ii in targets {
            let mut scopes = vec![WaitScope::Instrument(ii)];
            scopes.extend(
                (0..self.jobs.len())
                    .filter(|&ji| self.jobs[ji].rate_wait(ii).is_some())
                    .map(|ji| WaitScope::Job(ji, ii)),
            );
            for scope in scopes {
                // The user says the limit is over: the next one starts a new run.
                let wait = self.rate_wait_mut(scope);
                let had_run = std::mem::take(&mut wait.streak) > 0;
                if wait.until.is_some() {
                    let mut slot = wait.timer.take();
                    Self::cancel_timer(out, &mut slot);
                    self.unpark(scope, out);
                } else if had_run {
                    self.persist_wait(scope, out);
                }
                self.tidy_wait(scope);
            }
        }
    }

    /// `RetryDue`: a sheet whose backoff ended goes back to the queue.
    fn on_retry_due(&mut self, job_id: &str, sheet_num: u32, out: &mut Vec<Effect>) {
        if let Some((ji, si)) = self.locate(job_id, sheet_num) {
            let sheet = &mut self.jobs[ji].sheets[si];
            if sheet.status == SheetStatus::RetryScheduled {
                sheet.take_timer(SheetTimer::Retry);
                let mode = sheet.next_mode;
                self.requeue(ji, si, mode, out);
            }
        }
    }

    /// `PacingComplete`: the pause between sheets is over.
    fn on_pacing_complete(&mut self, job_id: &str, now: Millis) {
        if let Some(ji) = self.job_index(job_id) {
            let job = &mut self.jobs[ji];
            if job.pacing_until.is_some_and(|until| until <= now) {
                job.pacing_until = None;
                job.pacing_timer = None;
            }
        }
    }

    /// `EscalationNeeded`: a live sheet stops and waits for a decision.
    fn on_escalation_needed(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        reason: String,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        if let Some((ji, si)) = self.locate(job_id, sheet_num) {
            if !self.jobs[ji].sheets[si].status.is_terminal() {
                self.kill_if_dispatched(ji, si, out);
                self.enter_fermata(ji, si, reason, now, out);
            }
        }
    }

    /// `EscalationTimeout`: no decision came in time.
    fn on_escalation_timeout(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        if let Some((ji, si)) = self.locate(job_id, sheet_num) {
            if self.jobs[ji].sheets[si].status == SheetStatus::Fermata {
                // The sheet fails, not the job (brief: escalation timeout).
                self.jobs[ji].sheets[si].take_timer(SheetTimer::Escalation);
                let reason = Some("Escalation timed out without a decision".to_owned());
                self.finish_sheet(
                    ji,
                    si,
                    Ending::not_run(SheetStatus::Failed, reason),
                    now,
                    out,
                );
            }
        }
    }

    /// `CircuitBreakerRecovery`: an open breaker lets one probe through.
    fn on_circuit_breaker_recovery(&mut self, instrument: &str, out: &mut Vec<Effect>) {
        if let Some(&ii) = self.instrument_index.get(instrument) {
            let inst = &mut self.instruments[ii];
            inst.recovery_timer = None;
            if inst.circuit == CircuitState::Open {
                inst.circuit = CircuitState::HalfOpen;
                inst.probe_in_flight = false;
                inst.breaker_until = None;
                self.persist_instrument(ii, out);
            }
        }
    }

    /// `PauseJob`: no new dispatches; running sheets finish.
    fn on_pause(&mut self, job_id: &str, out: &mut Vec<Effect>) {
        if let Some(ji) = self.job_index(job_id) {
            if !self.jobs[ji].user_paused {
                self.jobs[ji].user_paused = true;
                self.persist_job(
                    ji,
                    JobStatus::Paused,
                    Some("Paused by user".to_owned()),
                    out,
                );
            }
        }
    }

    /// `CancelJob`: every sheet that has not ended is cancelled.
    fn on_cancel(&mut self, job_id: &str, now: Millis, out: &mut Vec<Effect>) {
        if let Some(ji) = self.job_index(job_id) {
            self.jobs[ji].cancelled = true;
            self.end_all_sheets(ji, SheetStatus::Cancelled, "Job cancelled", now, out);
        }
    }

    /// `ShutdownRequested`: stop dispatching; a forced shutdown kills in-flight sheets.
    fn on_shutdown_requested(&mut self, graceful: bool, out: &mut Vec<Effect>) {
        self.shutting_down = true;
        if !graceful {
            // In-flight sheets are killed but stay `dispatched` in the checkpoint, so a
            // restart re-runs them without spending a retry (invariant 1).
            for ji in 0..self.jobs.len() {
                for si in 0..self.jobs[ji].sheets.len() {
                    if self.jobs[ji].sheets[si].status == SheetStatus::Dispatched {
                        self.kill_if_dispatched(ji, si, out);
                        self.release(ji, si);
                    }
                }
            }
        }
    }

    /// `ProcessExited`: a backend that died without a result counts as a crashed attempt.
    fn on_process_exited(
        &mut self,
        job_id: String,
        sheet_num: u32,
        pid: u32,
        exit_code: Option<i32>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        if let Some((ji, si)) = self.locate(&job_id, sheet_num) {
            let sheet = &self.jobs[ji].sheets[si];
            if sheet.status == SheetStatus::Dispatched {
                let mut message = format!("Backend process {pid} exited unexpectedly");
                if let Some(code) = exit_code {
                    message.push_str(&format!(" with code {code}"));
                }
                let mut r = AttemptResult::failed(
                    job_id,
                    sheet_num,
                    sheet.live().dispatch_id,
                    FailureKind::Crash,
                    message,
                );
                r.exit_code = exit_code;
                r.instrument = self.instruments[sheet.inst()].name.clone();
                self.on_attempt_result(r, now, out);
            }
        }
    }

    /// `ConfigReloaded`: new global limit and instrument settings.
    fn on_config_reloaded(
        &mut self,
        max_concurrent_sheets: Option<u32>,
        instruments: &[InstrumentSpec],
    ) {
        if let Some(limit) = max_concurrent_sheets {
            self.max_concurrent_sheets = limit.max(1);
        }
        for spec in instruments {
            self.upsert_instrument(spec);
        }
    }

    // ---- attempt results ------------------------------------------------------------------

    /// §2.4 `SheetAttemptResult`, with the \[LATER\] rate-limit and threshold behaviour.
    fn on_attempt_result(&mut self, r: AttemptResult, now: Millis, out: &mut Vec<Effect>) {
        let Some((ji, si, ii)) = self.take_result(&r, out) else {
            return;
        };
        // Taken back before it started (a Slurm job withdrawn from the queue at pause): not
        // an attempt; the sheet waits to be dispatched again.
        if r.failure
            .as_ref()
            .is_some_and(|f| f.kind == FailureKind::Withdrawn)
        {
            let mode = self.jobs[ji].sheets[si].next_mode;
            self.requeue(ji, si, mode, out);
            return;
        }
        // Rate limits are tempo, not failure (invariant 2): park the instrument, keep the
        // retry budget, re-dispatch when the wait is over.
        if r.is_rate_limited_failure() {
            self.on_rate_limited(ji, si, ii, &r, now, out);
            return;
        }
        // Any other outcome on the instrument (of this job's, when its limits hold one job
        // only) ends a run of rate limits.
        let scope = self.wait_scope(ji, ii);
        if self.rate_wait(scope).is_some_and(|w| w.streak > 0) {
            self.rate_wait_mut(scope).streak = 0;
            // The persisted run of limits ends with it (a restart starts the schedule anew).
            self.persist_wait(scope, out);
            self.tidy_wait(scope);
        }

        let rate = if r.execution_success && r.validations_total == 0 {
            100.0 // F-018: no validations means nothing to fail.
        } else {
            r.validation_pass_rate
        };
        let message = r.failure.as_ref().map(|f| f.message.clone());

        if r.execution_success && rate >= 100.0 {
            self.breaker_success(ii, out);
            self.check_job_cost(ji, out);
            // Over its own limit: the job pauses; the sheet's work passed, so it is kept.
            self.check_sheet_cost(ji, si, out);
            self.finish_sheet(ji, si, Ending::ran(SheetStatus::Completed, None), now, out);
            return;
        }
        if r.execution_success && rate > 0.0 {
            self.breaker_success(ii, out);
            self.on_partial_pass(ji, si, rate, message, now, out);
            return;
        }
        self.on_failed_attempt(ji, si, ii, &r, now, out);
    }

    /// The indexes of the sheet a result is for and of its instrument, with the dispatch
    /// released, its stale timer cancelled and its cost counted; `None` for a stale result.
    fn take_result(
        &mut self,
        r: &AttemptResult,
        out: &mut Vec<Effect>,
    ) -> Option<(usize, usize, usize)> {
        let (ji, si) = self.locate(&r.job_id, r.sheet_num)?;
        {
            let sheet = &self.jobs[ji].sheets[si];
            // Results of killed or superseded attempts, or after a terminal transition, are
            // stale: ignoring them keeps one source of truth per dispatch.
            if sheet.status != SheetStatus::Dispatched || sheet.live().dispatch_id != r.dispatch_id
            {
                return None;
            }
        }
        let ii = self.jobs[ji].sheets[si].inst();
        self.release(ji, si);
        let job = &mut self.jobs[ji];
        let sheet = &mut job.sheets[si];
        BatonCore::cancel_sheet_timer(out, sheet, SheetTimer::Stale);
        if r.cost_usd.is_finite() && r.cost_usd > 0.0 {
            sheet.total_cost += r.cost_usd;
            job.total_cost += r.cost_usd;
        }
        Some((ji, si, ii))
    }

    /// A rate-limited attempt: the sheet waits, the instrument is parked for the wait the
    /// API stated (or the backoff) — for every job, or, when its limits hold one job only,
    /// for this sheet's job — and no retry is spent.
    fn on_rate_limited(
        &mut self,
        ji: usize,
        si: usize,
        ii: usize,
        r: &AttemptResult,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let (stated, said_after, said) = match &r.failure {
            Some(Failure {
                kind:
                    FailureKind::RateLimited {
                        reset_after,
                        said_after,
                    },
                message,
                ..
            }) => (*reset_after, *said_after, message.clone()),
            _ => (None, None, String::new()),
        };
        let scope = self.wait_scope(ji, ii);
        let (wait, how) = self.rate_limit_wait(scope, stated, said_after, now);
        let instrument = self.instruments[ii].name.clone();
        let reason = if said.is_empty() {
            how
        } else {
            format!("{said} — {how}")
        };
        let whose = match scope {
            WaitScope::Instrument(_) => String::new(),
            WaitScope::Job(..) => {
                format!(" (this job's {instrument} sheets wait; other jobs' run)")
            }
        };
        {
            let sheet = &mut self.jobs[ji].sheets[si];
            sheet.status = SheetStatus::Waiting;
            sheet.live_mut().reason =
                Some(format!("Rate limited on {instrument}{whose}: {reason}"));
        }
        self.persist_sheet(ji, si, out);
        let job_id = self.jobs[ji].id.clone();
        self.rate_wait_mut(scope)
            .waiting
            .push((job_id, r.sheet_num));
        self.park(scope, wait, Some(reason), now, out);
        self.check_job_cost(ji, out);
        self.check_sheet_cost(ji, si, out);
    }

    /// A successful execution whose validations passed in part: a completion attempt when
    /// the pass rate reaches the sheet's threshold and its completion budget lasts, else
    /// an ordinary failed attempt.
    fn on_partial_pass(
        &mut self,
        ji: usize,
        si: usize,
        rate: f64,
        message: Option<String>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let sheet = &mut self.jobs[ji].sheets[si];
        sheet.live_mut().last_failure =
            Some(message.unwrap_or_else(|| format!("{rate:.0}% of validations passed")));
        if rate >= sheet.rules.completion_threshold
            && sheet.completion_attempts < sheet.rules.max_completion
        {
            sheet.completion_attempts += 1;
            self.check_job_cost(ji, out);
            if !self.sheet_over_cost(ji, si, now, out) {
                self.requeue(ji, si, AttemptMode::Completion, out);
            }
            return;
        }
        // Below the threshold, or completion budget spent: an ordinary failed attempt,
        // so remaining normal retries are used before exhaustion ([LATER] step 4b).
        self.jobs[ji].sheets[si].normal_attempts += 1;
        self.after_failure(ji, si, now, out);
    }

    /// A failed execution (counted by the instrument's breaker unless its kind says not;
    /// final when not retriable), or a successful one whose validations all failed (F-065).
    fn on_failed_attempt(
        &mut self,
        ji: usize,
        si: usize,
        ii: usize,
        r: &AttemptResult,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let message = r.failure.as_ref().map(|f| f.message.clone());
        let kind = r.failure.as_ref().map(|f| f.kind.clone());
        if !r.execution_success {
            if kind.as_ref().is_none_or(FailureKind::counts_for_breaker) {
                self.breaker_failure(ii, message.as_deref(), now, out);
            }
            if kind.as_ref().is_some_and(|k| !k.is_retriable()) {
                let why = message.unwrap_or_else(|| "Non-retriable failure".to_owned());
                self.jobs[ji].sheets[si].live_mut().last_failure = Some(why.clone());
                self.check_job_cost(ji, out);
                self.check_sheet_cost(ji, si, out);
                self.finish_sheet(
                    ji,
                    si,
                    Ending::ran(SheetStatus::Failed, Some(why)),
                    now,
                    out,
                );
                return;
            }
        }
        let sheet = &mut self.jobs[ji].sheets[si];
        sheet.normal_attempts += 1;
        sheet.live_mut().last_failure = Some(message.unwrap_or_else(|| {
            if r.execution_success {
                "No validations passed".to_owned()
            } else {
                match r.exit_code {
                    Some(code) => format!("Execution failed with exit code {code}"),
                    None => "Execution failed".to_owned(),
                }
            }
        }));
        self.after_failure(ji, si, now, out);
    }

    /// After a counted failure: cost limit, then retry or exhaustion (§2.4 steps 9-10).
    fn after_failure(&mut self, ji: usize, si: usize, now: Millis, out: &mut Vec<Effect>) {
        self.check_job_cost(ji, out);
        if self.sheet_over_cost(ji, si, now, out) {
            return;
        }
        if self.jobs[ji].sheets[si].can_retry() {
            self.schedule_retry(ji, si, AttemptMode::Normal, now, out);
        } else {
            self.exhausted(ji, si, now, out);
        }
    }

    /// §9.6: a sheet whose cost exceeds its own limit retries no more: it fails (and its
    /// dependents with it), and the job pauses ([`Self::check_sheet_cost`]).
    fn sheet_over_cost(
        &mut self,
        ji: usize,
        si: usize,
        now: Millis,
        out: &mut Vec<Effect>,
    ) -> bool {
        let Some(reason) = self.check_sheet_cost(ji, si, out) else {
            return false;
        };
        // Why it stopped (its last attempt's own error stays in the attempt history).
        self.jobs[ji].sheets[si].live_mut().last_failure = Some(reason.clone());
        self.finish_sheet(
            ji,
            si,
            Ending::ran(SheetStatus::Failed, Some(reason)),
            now,
            out,
        );
        true
    }

    /// §9.6 (legacy runner, execution.md §9.6): after an attempt that leaves the sheet's cost
    /// over its `max_cost_per_sheet`, the job is paused with `Cost limit: {reason}` (as the
    /// job limit pauses it: `cost_limit_reached`, resumable); the reason, or `None` when the
    /// sheet is within its limit. A job already paused by a cost limit keeps its first
    /// reason.
    fn check_sheet_cost(&mut self, ji: usize, si: usize, out: &mut Vec<Effect>) -> Option<String> {
        let job = &self.jobs[ji];
        let sheet = &job.sheets[si];
        let limit = sheet.rules.cost_limit?;
        if sheet.total_cost <= limit {
            return None;
        }
        let reason = format!(
            "Cost limit: sheet {} cost ${:.4} exceeds limit ${:.4}",
            sheet.num, sheet.total_cost, limit
        );
        if !job.cost_paused && !job.finished {
            self.jobs[ji].cost_paused = true;
            self.persist_job(ji, JobStatus::Paused, Some(reason.clone()), out);
        }
        Some(reason)
    }

    /// §2.7 with the sheet's own policy; the timer is always scheduled (upstream \[GAP\]).
    fn schedule_retry(
        &mut self,
        ji: usize,
        si: usize,
        mode: AttemptMode,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let delay = {
            let job = &self.jobs[ji];
            let sheet = &job.sheets[si];
            let failures = sheet.normal_attempts.max(1);
            let u = backoff::jitter_sample(
                self.jitter_seed,
                &job.id,
                sheet.num,
                sheet.attempt_number(),
            );
            backoff::retry_delay(&sheet.rules.retry, failures, u)
        };
        self.retry_after(ji, si, mode, delay, now, out);
    }

    /// The sheet waits `delay` for its retry in `mode`: stored with when it is due (a
    /// restart waits out the rest, [`BatonCore::register`]), its timer set, `status` told.
    pub(super) fn retry_after(
        &mut self,
        ji: usize,
        si: usize,
        mode: AttemptMode,
        delay: Duration,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let due = now.plus(delay);
        let (job_id, sheet_num, attempt, max_retries) = {
            let job = &mut self.jobs[ji];
            let sheet = &mut job.sheets[si];
            sheet.status = SheetStatus::RetryScheduled;
            sheet.next_mode = mode;
            BatonCore::cancel_sheet_timer(out, sheet, SheetTimer::Retry);
            sheet.live_mut().retry_due = Some(due);
            (
                job.id.clone(),
                sheet.num,
                sheet.attempt_number(),
                sheet.rules.retry.max_retries,
            )
        };
        self.persist_sheet(ji, si, out);
        let id = self.timer(
            out,
            due,
            Event::RetryDue {
                job_id: job_id.clone(),
                sheet_num,
            },
        );
        self.jobs[ji].sheets[si].live_mut().retry_timer = Some(id);
        self.observe(
            out,
            &job_id,
            sheet_num,
            "baton.sheet.retry_scheduled",
            // The attempt the retry will be and the sheet's budget, for `status`.
            serde_json::json!({
                "delay_seconds": delay.as_secs_f64(),
                "mode": mode,
                "attempt": attempt,
                "max_retries": max_retries,
            }),
            now,
        );
    }

    /// §2.5 exhaustion tree: fallback, healing, escalation, failure.
    fn exhausted(&mut self, ji: usize, si: usize, now: Millis, out: &mut Vec<Effect>) {
        if self.jobs[ji].sheets[si].has_fallback() {
            self.advance_fallback(ji, si, "retries_exhausted", now, out);
            self.requeue(ji, si, AttemptMode::Normal, out);
            return;
        }
        let (healing_ok, escalate) = {
            let job = &self.jobs[ji];
            let sheet = &job.sheets[si];
            (
                job.self_healing_enabled && sheet.healing_attempts < 1,
                job.escalation_enabled,
            )
        };
        if healing_ok {
            self.jobs[ji].sheets[si].healing_attempts += 1;
            self.schedule_retry(ji, si, AttemptMode::Healing, now, out);
            return;
        }
        let sheet = &self.jobs[ji].sheets[si];
        let last = sheet
            .live()
            .last_failure
            .clone()
            .unwrap_or_else(|| "unknown error".to_owned());
        let attempts = sheet.attempt_number() - 1;
        let noun = if attempts == 1 { "attempt" } else { "attempts" };
        let reason = format!("Failed after {attempts} {noun}: {last}");
        if escalate {
            self.enter_fermata(ji, si, reason, now, out);
        } else {
            self.finish_sheet(
                ji,
                si,
                Ending::ran(SheetStatus::Failed, Some(reason)),
                now,
                out,
            );
        }
    }

    // ---- instruments ----------------------------------------------------------------------

    /// How long a rate limit parks its wait (`scope`: the instrument's, or one job's on
    /// it), and why, in words: what the API or CLI said (`stated`), else the probe
    /// schedule's step for this run of limits; from the second limit in a row at least the
    /// previous step, so a short `retry-after` that keeps being refused backs off. A limit
    /// reported while the wait is already on (a concurrent sheet's) does not lengthen the run.
    fn rate_limit_wait(
        &mut self,
        scope: WaitScope,
        stated: Option<Duration>,
        said_after: Option<Duration>,
        now: Millis,
    ) -> (Duration, String) {
        let limit = self.rate_wait_mut(scope);
        if !limit.active(now) {
            limit.streak = limit.streak.saturating_add(1);
        }
        let n = limit.streak.max(1) as usize;
        let step = |i: usize| {
            self.rate_limit_probe
                .get(i.min(self.rate_limit_probe.len().saturating_sub(1)))
                .copied()
                .unwrap_or(Duration::from_secs(60))
        };
        let words = crate::time::words;
        // What the API said: shorter than `d` when a minimum lengthened the wait.
        let said = |d: Duration| said_after.filter(|s| *s < d).unwrap_or(d);
        match stated {
            Some(d) if n == 1 || step(n - 2) <= d => {
                let how = if said(d) < d {
                    format!(
                        "the API said {}; waiting the {} minimum; no retry spent",
                        words(said(d)),
                        words(d)
                    )
                } else {
                    format!("waiting {}, as the API said; no retry spent", words(d))
                };
                (d, how)
            }
            Some(d) => {
                let probe = step(n - 2);
                (
                    probe,
                    format!(
                        "rate limited {n} times in a row: waiting {} (the API said {}); no \
                         retry spent",
                        words(probe),
                        words(said(d))
                    ),
                )
            }
            None => {
                let probe = step(n - 1);
                (
                    probe,
                    format!(
                        "no wait named by the API: trying again in {} (probe {n}); no retry \
                         spent",
                        words(probe)
                    ),
                )
            }
        }
    }

    /// A wait restored after a restart goes on with the run of limits it was persisted in.
    pub(super) fn restore_streak(&mut self, scope: WaitScope, streak: Option<u32>) {
        if let Some(n) = streak {
            let limit = self.rate_wait_mut(scope);
            limit.streak = limit.streak.max(n);
        }
    }

    /// Park a wait (`scope`: an instrument's, or one job's on it) until `now + wait`
    /// (extending, never shortening, an existing wait), persisted so a restart does not
    /// stampede (invariant 2).
    pub(super) fn park(
        &mut self,
        scope: WaitScope,
        wait: Duration,
        reason: Option<String>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let until = now.plus(wait);
        let limit = self.rate_wait_mut(scope);
        if limit.until.is_some_and(|u| u >= until) {
            return;
        }
        limit.until = Some(until);
        limit.reason = reason;
        let mut slot = limit.timer.take();
        Self::cancel_timer(out, &mut slot);
        self.persist_wait(scope, out);
        let event = self.expiry_event(scope);
        let id = self.timer(out, until, event);
        self.rate_wait_mut(scope).timer = Some(id);
    }

    /// End a wait and send its waiting sheets back to `pending` (no retry spent).
    fn unpark(&mut self, scope: WaitScope, out: &mut Vec<Effect>) {
        let limit = self.rate_wait_mut(scope);
        limit.until = None;
        limit.reason = None;
        let waiting = std::mem::take(&mut limit.waiting);
        self.persist_wait(scope, out);
        self.tidy_wait(scope);
        for (job_id, sheet_num) in waiting {
            if let Some((ji, si)) = self.locate(&job_id, sheet_num) {
                let sheet = &mut self.jobs[ji].sheets[si];
                if sheet.status == SheetStatus::Waiting {
                    sheet.set_reason(None);
                    let mode = sheet.next_mode;
                    self.requeue(ji, si, mode, out);
                }
            }
        }
    }

    fn breaker_success(&mut self, ii: usize, out: &mut Vec<Effect>) {
        let inst = &mut self.instruments[ii];
        inst.consecutive_failures = 0;
        if inst.circuit == CircuitState::HalfOpen {
            inst.circuit = CircuitState::Closed;
            inst.breaker_reason = None;
            inst.breaker_until = None;
            self.persist_instrument(ii, out);
        }
    }

    /// Count a failure; on opening, schedule the recovery probe (\[LATER\] §2.2 formula).
    /// `message` (the failure's) becomes the reason `status` gives for the open breaker.
    fn breaker_failure(
        &mut self,
        ii: usize,
        message: Option<&str>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let inst = &mut self.instruments[ii];
        inst.consecutive_failures += 1;
        if let Some(m) = message {
            inst.last_failure = Some(m.to_owned());
        }
        let opens = match inst.circuit {
            CircuitState::HalfOpen => true,
            CircuitState::Closed => inst.consecutive_failures >= inst.threshold,
            CircuitState::Open => false,
        };
        if !opens {
            return;
        }
        inst.circuit = CircuitState::Open;
        let delay = backoff::breaker_recovery_delay(
            inst.recovery,
            inst.max_recovery,
            inst.consecutive_failures,
            inst.threshold,
        );
        inst.breaker_until = Some(now.plus(delay));
        inst.breaker_reason = Some(match &inst.last_failure {
            Some(last) => format!(
                "{} failures in a row; the last: {last}",
                inst.consecutive_failures
            ),
            None => format!("{} failures in a row", inst.consecutive_failures),
        });
        let name = inst.name.clone();
        let mut slot = inst.recovery_timer.take();
        Self::cancel_timer(out, &mut slot);
        self.persist_instrument(ii, out);
        let id = self.timer(
            out,
            now.plus(delay),
            Event::CircuitBreakerRecovery { instrument: name },
        );
        self.instruments[ii].recovery_timer = Some(id);
    }

    // ---- other handlers -------------------------------------------------------------------

    fn on_skip_evaluated(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        skip_reason: Option<String>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let Some((ji, si)) = self.locate(job_id, sheet_num) else {
            return;
        };
        let job = &mut self.jobs[ji];
        let sheet = &mut job.sheets[si];
        if sheet.skip_state != super::SkipState::Evaluating {
            return;
        }
        sheet.skip_state = super::SkipState::Clear;
        job.skips_pending = job.skips_pending.saturating_sub(1);
        if sheet.status != SheetStatus::Pending {
            return;
        }
        match skip_reason {
            Some(reason) => self.finish_sheet(
                ji,
                si,
                Ending::not_run(SheetStatus::Skipped, Some(reason)),
                now,
                out,
            ),
            None => self.make_ready(ji, si, out),
        }
    }

    fn on_stale_check(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        dispatch_id: u64,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let Some((ji, si)) = self.locate(job_id, sheet_num) else {
            return;
        };
        let sheet = &mut self.jobs[ji].sheets[si];
        if sheet.status != SheetStatus::Dispatched || sheet.live().dispatch_id != dispatch_id {
            return;
        }
        sheet.take_timer(SheetTimer::Stale);
        let message = format!(
            "No result within {:.0}s of dispatch (timeout {:.0}s)",
            self.stale_grace
                .map_or(0.0, |g| (sheet.rules.timeout + g).as_secs_f64()),
            sheet.rules.timeout.as_secs_f64()
        );
        let instrument = self.instruments[sheet.inst()].name.clone();
        out.push(Effect::Kill {
            job_id: job_id.to_owned(),
            sheet_num,
        });
        let mut r = AttemptResult::failed(
            job_id,
            sheet_num,
            dispatch_id,
            FailureKind::Timeout,
            message,
        );
        r.exit_code = None;
        r.instrument = instrument;
        self.on_attempt_result(r, now, out);
    }

    fn on_job_timeout(&mut self, job_id: &str, now: Millis, out: &mut Vec<Effect>) {
        let Some(ji) = self.job_index(job_id) else {
            return;
        };
        let job = &mut self.jobs[ji];
        job.timeout_timer = None;
        let limit = job.timeout.map_or(0.0, |t| t.as_secs_f64());
        let ran = now.since(job.started_at).as_secs_f64();
        // §9.14 message, verbatim.
        let reason = format!("Job exceeded timeout of {limit:.0}s (ran for {ran:.0}s)");
        job.failure_reason = Some(reason.clone());
        self.end_all_sheets(ji, SheetStatus::Cancelled, &reason, now, out);
    }

    /// Kill in-flight attempts and end every non-terminal sheet (cancel, job timeout).
    fn end_all_sheets(
        &mut self,
        ji: usize,
        status: SheetStatus,
        reason: &str,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        for si in 0..self.jobs[ji].sheets.len() {
            if !self.jobs[ji].sheets[si].status.is_terminal() {
                self.kill_if_dispatched(ji, si, out);
                self.finish_sheet(
                    ji,
                    si,
                    Ending::not_run(status, Some(reason.to_owned())),
                    now,
                    out,
                );
            }
        }
        self.check_job_done(ji, now, out);
    }

    fn kill_if_dispatched(&mut self, ji: usize, si: usize, out: &mut Vec<Effect>) {
        let job = &self.jobs[ji];
        let sheet = &job.sheets[si];
        if sheet.status == SheetStatus::Dispatched {
            out.push(Effect::Kill {
                job_id: job.id.clone(),
                sheet_num: sheet.num,
            });
            self.release(ji, si);
        }
    }

    /// §2.5 step 4: the sheet waits for a decision and its job pauses.
    fn enter_fermata(
        &mut self,
        ji: usize,
        si: usize,
        reason: String,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let was_paused = self.jobs[ji].paused();
        let (job_id, sheet_num, timeout) = {
            let job = &mut self.jobs[ji];
            job.ready_remove(si);
            job.escalation_paused = true;
            let sheet = &mut job.sheets[si];
            sheet.status = SheetStatus::Fermata;
            sheet.live_mut().reason = Some(reason.clone());
            BatonCore::cancel_sheet_timer(out, sheet, SheetTimer::Retry);
            (job.id.clone(), sheet.num, job.escalation_timeout)
        };
        self.persist_sheet(ji, si, out);
        if !was_paused {
            self.persist_job(
                ji,
                JobStatus::Paused,
                Some(format!("Fermata on sheet {sheet_num}")),
                out,
            );
        }
        if let Some(t) = timeout {
            let event = Event::EscalationTimeout {
                job_id: job_id.clone(),
                sheet_num,
            };
            let id = self.timer(out, now.plus(t), event);
            self.jobs[ji].sheets[si].live_mut().escalation_timer = Some(id);
        }
        out.push(Effect::Escalate {
            job_id,
            sheet_num,
            reason,
        });
    }

    fn on_escalation_resolved(
        &mut self,
        job_id: &str,
        sheet_num: u32,
        decision: EscalationDecision,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let Some((ji, si)) = self.locate(job_id, sheet_num) else {
            return;
        };
        if self.jobs[ji].sheets[si].status != SheetStatus::Fermata {
            return;
        }
        match decision {
            EscalationDecision::Retry => {
                let sheet = &mut self.jobs[ji].sheets[si];
                BatonCore::cancel_sheet_timer(out, sheet, SheetTimer::Escalation);
                sheet.set_reason(None);
                self.requeue(ji, si, AttemptMode::Normal, out);
                self.fermata_closed(ji, out);
                self.check_job_cost(ji, out);
            }
            EscalationDecision::Skip => {
                let reason = Some("Skipped by escalation decision".to_owned());
                self.finish_sheet(
                    ji,
                    si,
                    Ending::not_run(SheetStatus::Skipped, reason),
                    now,
                    out,
                );
            }
            EscalationDecision::Accept => {
                self.finish_sheet(
                    ji,
                    si,
                    Ending::not_run(SheetStatus::Completed, None),
                    now,
                    out,
                );
            }
            EscalationDecision::Abort => {
                let reason = Some("Aborted via escalation".to_owned());
                self.finish_sheet(
                    ji,
                    si,
                    Ending::not_run(SheetStatus::Failed, reason),
                    now,
                    out,
                );
            }
        }
    }

    fn on_resume(
        &mut self,
        job_id: &str,
        new_limits: Option<CostLimitsUpdate>,
        now: Millis,
        out: &mut Vec<Effect>,
    ) {
        let Some(ji) = self.job_index(job_id) else {
            return;
        };
        let was_paused = self.jobs[ji].paused() || self.jobs[ji].halted;
        let job = &mut self.jobs[ji];
        // A resume is the user saying the cause of a failed checkpoint write is fixed:
        // dispatching may continue (the next failure halts it again).
        job.halted = false;
        if let Some(limits) = new_limits {
            job.cost_limit = limits.max_cost_per_job;
            // Sheets that shared their rules share the changed ones.
            let mut changed: Vec<(Arc<Rules>, Arc<Rules>)> = Vec::new();
            for sheet in &mut job.sheets {
                let new = match changed
                    .iter()
                    .find(|(old, _)| Arc::ptr_eq(old, &sheet.rules))
                {
                    Some((_, new)) => Arc::clone(new),
                    None => {
                        let mut rules = Rules::clone(&sheet.rules);
                        rules.cost_limit = limits.max_cost_per_sheet;
                        let new = Arc::new(rules);
                        changed.push((Arc::clone(&sheet.rules), Arc::clone(&new)));
                        new
                    }
                };
                sheet.rules = new;
            }
        }
        job.user_paused = false;
        job.cost_paused = false;
        job.escalation_paused = false;
        // A resumed job's run gets `job_timeout_seconds` afresh (upstream's resumed job task
        // does): from now when it still holds its slot, else from when it gets one.
        if was_paused && !job.finished {
            if job.admitted {
                self.start_clock(ji, now, out);
            } else {
                let job = &mut self.jobs[ji];
                job.clock_started = false;
                Self::cancel_timer(out, &mut job.timeout_timer);
            }
        }
        self.check_job_cost(ji, out);
        // Still holding its slot (sheets were in flight): running again at once. Otherwise
        // it asks for a slot like any waiting job, and `admit_jobs` persists running or
        // queued.
        if was_paused && !self.jobs[ji].paused() && self.jobs[ji].admitted {
            self.persist_job(ji, JobStatus::Running, None, out);
        }
    }
}
