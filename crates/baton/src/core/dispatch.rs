//! Ready-sheet dispatch under global, per-job, per-instrument and per-model limits (§2.8).

use super::{BatonCore, InFlight};
use crate::effect::{AttemptContext, Effect, COMPLETION_SUFFIX};
use crate::event::Event;
use crate::status::{AttemptMode, CircuitState, SheetStatus};
use crate::time::Millis;

/// Why a ready sheet cannot start right now.
enum Gate {
    Open(Option<usize>),
    /// The whole instrument is blocked for this cycle.
    InstrumentBlocked,
    /// Only this sheet's model is at its limit.
    ModelBlocked,
    /// Breaker open and the sheet has a fallback to switch to.
    NeedsFallback,
}

impl BatonCore {
    /// Start every ready sheet the limits allow, jobs in registration order, sheets in number
    /// order. Runs after every event.
    pub(super) fn dispatch_cycle(&mut self, now: Millis, out: &mut Vec<Effect>, depth: u32) {
        if self.shutting_down || self.backpressure {
            return;
        }
        let mut fallbacks: Vec<(usize, usize)> = Vec::new();
        for ji in 0..self.jobs.len() {
            if self.global_running >= self.max_concurrent_sheets {
                break;
            }
            {
                let job = &self.jobs[ji];
                if job.finished
                    || !job.admitted
                    || job.halted
                    || job.paused()
                    || job.ready.is_empty()
                    || job.running >= job.max_concurrent
                    || job.pacing_until.is_some_and(|until| until > now)
                    || (job.max_concurrent == 1 && job.skips_pending > 0)
                {
                    continue;
                }
            }
            let mut picked = std::mem::take(&mut self.scratch);
            let mut blocked = std::mem::take(&mut self.blocked_scratch);
            picked.clear();
            blocked.clear();
            {
                let job = &mut self.jobs[ji];
                let distinct = job.ready_per_instrument.len();
                for si in job.ready.iter() {
                    if job.running >= job.max_concurrent
                        || self.global_running >= self.max_concurrent_sheets
                    {
                        break;
                    }
                    let sheet = &job.sheets[si];
                    let ii = sheet.inst();
                    if blocked.contains(&ii) {
                        continue;
                    }
                    let inst = &mut self.instruments[ii];
                    let gate = if inst.limit.active(now)
                        || job.rate_wait(ii).is_some_and(|w| w.active(now))
                    {
                        Gate::InstrumentBlocked
                    } else if inst.circuit == CircuitState::Open
                        || (inst.circuit == CircuitState::HalfOpen && inst.probe_in_flight)
                    {
                        if inst.circuit == CircuitState::Open && sheet.has_fallback() {
                            Gate::NeedsFallback
                        } else {
                            Gate::InstrumentBlocked
                        }
                    } else if inst.running >= inst.max_concurrent {
                        Gate::InstrumentBlocked
                    } else {
                        match sheet
                            .rules
                            .model
                            .as_deref()
                            .and_then(|m| inst.models.iter().position(|s| s.name == m))
                        {
                            Some(slot) if inst.models[slot].running >= inst.models[slot].limit => {
                                Gate::ModelBlocked
                            }
                            slot => Gate::Open(slot),
                        }
                    };
                    match gate {
                        Gate::Open(slot) => {
                            inst.running += 1;
                            if let Some(slot) = slot {
                                inst.models[slot].running += 1;
                            }
                            let probe = inst.circuit == CircuitState::HalfOpen;
                            if probe {
                                inst.probe_in_flight = true;
                            }
                            job.running += 1;
                            self.global_running += 1;
                            picked.push(si);
                            let flight = InFlight {
                                instrument: ii,
                                model_slot: slot,
                                probe,
                            };
                            job.sheets[si].live_mut().in_flight = Some(flight);
                        }
                        Gate::InstrumentBlocked => {
                            blocked.push(ii);
                            if blocked.len() >= distinct {
                                break;
                            }
                        }
                        Gate::ModelBlocked => {}
                        Gate::NeedsFallback => fallbacks.push((ji, si)),
                    }
                }
            }
            for &si in &picked {
                self.jobs[ji].ready_remove(si);
                self.start_attempt(ji, si, now, out);
            }
            self.scratch = picked;
            self.blocked_scratch = blocked;
        }
        if !fallbacks.is_empty() {
            for (ji, si) in fallbacks {
                self.jobs[ji].ready_remove(si);
                self.advance_fallback(ji, si, "unavailable", now, out);
                self.make_ready(ji, si, out);
            }
            // Each pass consumes a fallback, so this terminates; the bound is a safety net.
            if depth < 8 {
                self.dispatch_cycle(now, out, depth + 1);
            }
        }
    }

    /// Persist `dispatched`, then hand the attempt to a musician (checkpoint before
    /// consequence).
    fn start_attempt(&mut self, ji: usize, si: usize, now: Millis, out: &mut Vec<Effect>) {
        let dispatch_id = self.next_dispatch;
        self.next_dispatch += 1;
        let (attempt, stale_at) = {
            let sheet = &mut self.jobs[ji].sheets[si];
            sheet.status = SheetStatus::Dispatched;
            sheet.live_mut().dispatch_id = dispatch_id;
            let mode = sheet.next_mode;
            let attempt = AttemptContext {
                dispatch_id,
                attempt_number: sheet.attempt_number(),
                mode,
                completion_suffix: (mode == AttemptMode::Completion)
                    .then(|| COMPLETION_SUFFIX.to_owned()),
                instrument: self.instruments[sheet.inst()].name.clone(),
                model: sheet.rules.model.clone(),
                previous_failure: sheet.live().last_failure.clone(),
                timeout: sheet.rules.timeout,
            };
            let stale_at = match self.stale_grace {
                Some(grace) if !sheet.rules.timeout.is_zero() => {
                    Some(now.plus(sheet.rules.timeout + grace))
                }
                _ => None,
            };
            (attempt, stale_at)
        };
        self.persist_sheet(ji, si, out);
        let job_id = self.jobs[ji].id.clone();
        let sheet_num = self.jobs[ji].sheets[si].num;
        if let Some(at) = stale_at {
            let event = Event::StaleCheck {
                job_id: job_id.clone(),
                sheet_num,
                dispatch_id,
            };
            let id = self.timer(out, at, event);
            self.jobs[ji].sheets[si].live_mut().stale_timer = Some(id);
        }
        out.push(Effect::Dispatch {
            job_id,
            sheet_num,
            attempt,
        });
    }

    /// Switch a sheet to its next fallback instrument with a fresh retry budget (§2.5 step 2;
    /// healing attempts are not reset, pitfall 12).
    pub(super) fn advance_fallback(
        &mut self,
        ji: usize,
        si: usize,
        reason: &str,
        now: Millis,
        out: &mut Vec<Effect>,
    ) -> bool {
        let Some(next) = ({
            let sheet = &self.jobs[ji].sheets[si];
            sheet
                .rules
                .fallbacks
                .get(sheet.fallback_pos as usize)
                .cloned()
        }) else {
            return false;
        };
        let ii = self.instrument_idx(&next);
        let from = {
            let sheet = &mut self.jobs[ji].sheets[si];
            let from = sheet.inst();
            sheet.fallback_pos += 1;
            sheet.instrument = ii as u32;
            let spent = sheet.normal_attempts + sheet.completion_attempts;
            sheet.live_mut().earlier_attempts += spent;
            sheet.normal_attempts = 0;
            sheet.completion_attempts = 0;
            sheet.next_mode = AttemptMode::Normal;
            from
        };
        let job_id = self.jobs[ji].id.clone();
        let sheet_num = self.jobs[ji].sheets[si].num;
        self.observe(
            out,
            &job_id,
            sheet_num,
            "baton.instrument.fallback",
            serde_json::json!({
                "from_instrument": self.instruments[from].name,
                "to_instrument": next,
                "reason": reason,
            }),
            now,
        );
        true
    }
}
