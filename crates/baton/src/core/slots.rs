//! Job slots (`max_concurrent_jobs`, conductor.md §6.5): at most N jobs dispatch sheets at
//! once; the others wait, queued, and are admitted in registration (submission) order as
//! slots free up.
//!
//! A job holds its slot from admission until it ends, or until it is paused (by the user, a
//! cost limit, a fermata or a failed checkpoint write) and nothing of it is in flight any
//! more: a paused job waits for an operator and must not keep the queue waiting. Resumed, it
//! asks for a slot again like any other job.

use super::BatonCore;
use crate::effect::Effect;
use crate::event::Event;
use crate::status::JobStatus;
use crate::time::Millis;

/// Why a queued job does not run: what `mozart status` shows beside `queued`.
pub fn queued_reason(max_concurrent_jobs: u32) -> String {
    format!("waiting for a job slot (max_concurrent_jobs: {max_concurrent_jobs})")
}

impl BatonCore {
    /// Give back the slots of paused jobs with nothing in flight, admit waiting jobs while
    /// slots are free, and persist every queued ↔ running change. Runs after every event,
    /// before dispatch. Nothing is admitted once a shutdown began: a job still queued then is
    /// queued in the registry and waits for the next conductor.
    pub(super) fn admit_jobs(&mut self, now: Millis, out: &mut Vec<Effect>) {
        let mut held = 0u32;
        for job in self.jobs.values_mut() {
            if job.finished {
                continue;
            }
            if job.admitted && (job.paused() || job.halted) && job.running == 0 {
                job.admitted = false;
            }
            if job.admitted {
                held += 1;
            }
        }
        let limit = self.max_concurrent_jobs;
        let free = if self.shutting_down {
            0
        } else if limit == 0 {
            usize::MAX
        } else {
            limit.saturating_sub(held) as usize
        };
        // The jobs that wait, gathered only when a slot is free (this runs after every
        // event; with every slot taken, waiting jobs only need saying so once).
        let mut waiting = Vec::new();
        for ji in 0..self.jobs.len() {
            let job = &self.jobs[ji];
            // Paused jobs show `paused` (their handlers persist it); a halted job's checkpoint
            // cannot be written anyway.
            if job.finished || job.paused() || job.halted {
                continue;
            }
            if job.admitted {
                if job.shown != Some(JobStatus::Running) {
                    self.persist_job(ji, JobStatus::Running, None, out);
                }
            } else if free > 0 {
                waiting.push(ji);
            } else if job.shown != Some(JobStatus::Queued) {
                self.persist_job(ji, JobStatus::Queued, Some(queued_reason(limit)), out);
            }
        }
        if free < waiting.len() {
            // Slots for some of them only: the ones submitted first (a job resumed after a
            // restart was registered late but keeps its place); ties in registration order.
            waiting.sort_by(|&a, &b| {
                self.jobs[a]
                    .submitted_at
                    .total_cmp(&self.jobs[b].submitted_at)
                    .then(a.cmp(&b))
            });
        }
        for (n, ji) in waiting.into_iter().enumerate() {
            if n < free {
                self.admit(ji, now, out);
            } else if self.jobs[ji].shown != Some(JobStatus::Queued) {
                self.persist_job(ji, JobStatus::Queued, Some(queued_reason(limit)), out);
            }
        }
    }

    /// The job takes a slot: it may dispatch from now on, and its clock starts (once).
    fn admit(&mut self, ji: usize, now: Millis, out: &mut Vec<Effect>) {
        let job = &mut self.jobs[ji];
        job.admitted = true;
        if !job.clock_started {
            let from = job.restored_clock.take().unwrap_or(now);
            self.start_clock(ji, from, out);
        }
        if self.jobs[ji].shown != Some(JobStatus::Running) {
            self.persist_job(ji, JobStatus::Running, None, out);
        }
    }

    /// The job's run starts counting against `job_timeout_seconds` at `from` (now, or when
    /// the run a restart continues started).
    pub(super) fn start_clock(&mut self, ji: usize, from: Millis, out: &mut Vec<Effect>) {
        let job = &mut self.jobs[ji];
        job.clock_started = true;
        job.started_at = from;
        Self::cancel_timer(out, &mut job.timeout_timer);
        if let Some(t) = job.timeout {
            let event = Event::JobTimeout {
                job_id: job.id.clone(),
            };
            let id = self.timer(out, from.plus(t), event);
            self.jobs[ji].timeout_timer = Some(id);
        }
    }

    /// A new job-slot limit: it applies to the next admissions (jobs holding a slot keep
    /// it), and queued jobs show the new limit in their reason.
    pub(super) fn set_job_limit(&mut self, limit: u32) {
        self.max_concurrent_jobs = limit;
        for job in self.jobs.values_mut() {
            if job.shown == Some(JobStatus::Queued) {
                job.shown = None;
            }
        }
    }

    /// Jobs holding a slot now.
    pub fn jobs_admitted(&self) -> usize {
        self.jobs
            .values()
            .filter(|j| !j.finished && j.admitted)
            .count()
    }
}
