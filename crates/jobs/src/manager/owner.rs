//! The owner of the job table: how the baton host takes in the facts other tasks tell it
//! and answers their questions (architecture invariant 4: one task owns the table, the
//! others send it messages). Each message is handled on the baton task, in the order sent.

use std::sync::Arc;

use mozart_conductor::ctx::JobCounts;
use mozart_ipc::status::JobListEntry;
use mozart_state::{DaemonJobStatus, SheetStatus};

use super::host::ConductorHost;
use super::table::{Command, JobFacts, LiveList, LiveStatus, Query, WatchStep};
use super::{lock, wire};

impl ConductorHost {
    /// Handle one message from another task.
    pub(super) fn handle(&mut self, command: Command) {
        match command {
            Command::Tell(fact) => {
                // What the baton hears next is sent once the table has taken in the fact (an
                // attempt's result after its details: the transition is persisted with them).
                if let (Some(event), Some(inbox)) = (
                    self.table.apply(fact, &self.shared.registry),
                    self.shared.inbox.get(),
                ) {
                    let _ = inbox.send(event);
                }
            }
            Command::Ask(query) => self.answer(query),
        }
    }

    /// Answer a question on its reply channel (a caller that stopped waiting is no error).
    fn answer(&mut self, query: Query) {
        match query {
            Query::Job { job_id, reply } => {
                let pausing = self.pausing(&job_id);
                let facts = self.table.jobs.get(&job_id).map(|e| JobFacts {
                    status: e.record.status,
                    in_baton: e.run.is_some(),
                    pausing,
                });
                let _ = reply.send(facts);
            }
            Query::Record { job_id, reply } => {
                let _ = reply.send(self.table.jobs.get(&job_id).map(|e| e.record.clone()));
            }
            Query::InFlight { job_id, reply } => {
                let _ = reply.send(self.in_flight(&job_id));
            }
            Query::Status {
                job_id,
                sheets,
                reply,
            } => {
                let _ = reply.send(self.live_status(&job_id, sheets));
            }
            Query::Watch {
                job_id,
                until_done,
                reply,
            } => {
                let _ = reply.send(self.watch_step(&job_id, until_done));
            }
            Query::List { reply } => {
                let _ = reply.send(self.live_list());
            }
            Query::Progress { job_ids, reply } => {
                let _ = reply.send(self.progress(job_ids));
            }
            Query::PageFacts {
                paused,
                progress,
                statuses,
                reply,
            } => {
                let _ = reply.send((
                    self.pausing_jobs(&paused),
                    self.progress(progress),
                    self.unsaved_statuses(&statuses),
                ));
            }
            Query::CatchUp { job_id, reply } => {
                let _ = reply.send(self.catch_up(&job_id));
            }
            Query::Clear {
                statuses,
                job_ids,
                older_than_seconds,
                now,
                reply,
            } => {
                let _ = reply.send(self.unload(&statuses, job_ids, older_than_seconds, now));
            }
            Query::SetStatus {
                job_id,
                status,
                error,
                reply,
            } => {
                super::set_status_in(
                    &mut self.table,
                    &self.shared,
                    &job_id,
                    status,
                    error.as_deref(),
                );
                let _ = reply.send(());
            }
            Query::Counts { reply } => {
                let _ = reply.send(self.counts());
            }
            Query::ObserverEvents {
                job_id,
                limit,
                reply,
            } => {
                let _ = reply.send(self.observer_events(job_id.as_deref(), limit));
            }
            Query::Figures { reply } => {
                let _ = reply.send(super::table::feed::figures(&self.table));
            }
            Query::MonitorPoll {
                mut cursor,
                first,
                reply,
            } => {
                let events = cursor.poll(&self.table, first);
                let _ = reply.send((cursor, events));
            }
            Query::RunningOutputs { job_id, reply } => {
                let _ = reply.send(self.running_outputs(&job_id));
            }
            Query::LiveProgress { job_id, reply } => {
                let _ = reply.send(self.live_progress(job_id.as_deref()));
            }
            Query::ClaimModify { job_id, reply } => {
                let _ = reply.send(self.claim_modify(job_id));
            }
            Query::StillPending {
                job_id,
                generation,
                reply,
            } => {
                let _ = reply.send(self.table.pending_modify.get(&job_id) == Some(&generation));
            }
        }
    }

    /// Each asked-for job's progress, for the jobs small enough to count here (`job.progress`
    /// and a jobs page's rows; a finished job's as its last live checkpoint gave it). It
    /// leaves out jobs not loaded, without a checkpoint, with completed sheets kept as facts
    /// only, or larger than [`mozart_ipc::status::PROGRESS_SHEETS`]: the caller asks
    /// `job.status` about those.
    fn progress(
        &self,
        job_ids: Vec<String>,
    ) -> std::collections::BTreeMap<String, mozart_ipc::status::JobProgress> {
        job_ids
            .into_iter()
            .filter_map(|id| {
                let e = self.table.jobs.get(&id)?;
                let progress = match e.live.as_ref() {
                    Some(live) if e.progress_countable(live) => {
                        mozart_ipc::status::JobProgress::of(live)
                    }
                    Some(_) => return None,
                    // Finished: what its last live checkpoint said (kept at its end).
                    None => e.final_progress.clone()?,
                };
                Some((id, progress))
            })
            .collect()
    }

    /// The asked-for jobs that are pausing, with the sheets still running in each.
    /// Of `rows` (loaded jobs with their registry row's status), those whose status in
    /// memory is another: the status and error memory holds.
    fn unsaved_statuses(
        &self,
        rows: &[(String, mozart_state::DaemonJobStatus)],
    ) -> std::collections::HashMap<String, (mozart_state::DaemonJobStatus, Option<String>)> {
        rows.iter()
            .filter_map(|(id, stored)| {
                let e = self.table.jobs.get(id)?;
                (e.record.status != *stored).then(|| {
                    (
                        id.clone(),
                        (e.record.status, e.record.error_message.clone()),
                    )
                })
            })
            .collect()
    }

    fn pausing_jobs(&self, job_ids: &[String]) -> std::collections::HashMap<String, u32> {
        job_ids
            .iter()
            .filter_map(|id| Some((id.clone(), self.pausing(id)?)))
            .collect()
    }

    /// A new generation of pending modifications of `job_id` (the latest claim wins).
    fn claim_modify(&mut self, job_id: String) -> u64 {
        let slots = &mut self.table.pending_modify;
        let generation = slots.get(&job_id).map_or(1, |g| g + 1);
        slots.insert(job_id, generation);
        generation
    }

    fn in_flight(&self, job_id: &str) -> Vec<u32> {
        self.table
            .jobs
            .get(job_id)
            .and_then(|e| e.live.as_ref())
            .map(|live| {
                live.sheets
                    .statuses()
                    .filter(|(_, s)| *s == SheetStatus::InProgress)
                    .map(|(n, _)| n)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Why a running job runs nothing although it has sheets to run: every one of the
    /// conductor's `max_concurrent_sheets` slots runs another job's sheet (jobs are served
    /// in the order they came, as upstream's). `None` when it runs a sheet, has none
    /// pending, or a slot is free.
    fn sheet_slot_words(&self, id: &str) -> Option<String> {
        let e = self.table.jobs.get(id)?;
        let live = e.live.as_ref()?;
        let limit = self.shared.max_concurrent_sheets;
        let running_here = self.running.iter().filter(|(job, _)| job == id).count();
        let pending = live
            .sheets
            .statuses()
            .any(|(_, s)| s == SheetStatus::Pending);
        (e.record.status == DaemonJobStatus::Running
            && running_here == 0
            && pending
            && self.running.len() >= limit as usize)
            .then(|| {
                format!(
                    "waiting for a sheet slot: the conductor runs its max_concurrent_sheets ({limit}) sheets for other jobs"
                )
            })
    }

    /// The live document, the running sheets' progress and what the job waits for, in one
    /// visit to the table.
    fn live_status(
        &mut self,
        id: &str,
        live_query: Option<mozart_ipc::sheet_view::SheetQuery>,
    ) -> LiveStatus {
        let e = self.table.jobs.get(id);
        // A pending modify resumes a paused (or just failed) job by itself.
        let settling = e.is_some_and(|e| {
            matches!(
                e.record.status,
                DaemonJobStatus::Paused | DaemonJobStatus::Failed
            )
        });
        let waiting = e
            .and_then(|e| e.waiting.clone())
            .or_else(|| {
                (settling && self.table.pending_modify.contains_key(id)).then(|| {
                    "resuming with its new score (modify --resume) once its running sheets finish"
                        .to_string()
                })
            })
            .or_else(|| e.and_then(pacing_words))
            .or_else(|| self.sheet_slot_words(id));
        let pausing = self.pausing(id);
        let live = self.table.jobs.get_mut(id).and_then(|e| {
            let mut doc = super::live_status_doc(e, live_query)?;
            doc.pausing = pausing;
            // From the same moment as the document (see `hooks_due`).
            doc.hooks_running = super::hooks_due(&doc, &e.record);
            let now = mozart_state::epoch_now();
            for (num, retry) in &e.rt.retries {
                if let Some(sheet) = doc.sheets.get_mut(num) {
                    let mut retry = retry.clone();
                    let left = retry.at.map_or(0.0, |at| (at - now).max(0.0));
                    retry.seconds_left = (left * 10.0).round() / 10.0;
                    sheet.retry_wait = Some(Box::new(retry));
                }
            }
            for (num, remote_id) in &e.rt.withdrawn {
                if let Some(sheet) = doc
                    .sheets
                    .get_mut(num)
                    .filter(|s| s.status == mozart_ipc::checkpoint::SheetStatus::Pending)
                {
                    sheet.slurm_withdrawn = Some(remote_id.clone());
                }
            }
            // Completed sheets that keep only their facts in memory are shown whole from
            // their registry rows (read by the caller, off the baton task).
            let compacted: Vec<u32> = if e.compacted {
                doc.sheets
                    .values()
                    .filter(|s| s.status == mozart_ipc::checkpoint::SheetStatus::Completed)
                    .map(|s| s.sheet_num)
                    .collect()
            } else {
                Vec::new()
            };
            let progress: Vec<(u32, Arc<mozart_backends::Progress>)> =
                e.rt.live.iter().map(|(n, p)| (*n, Arc::clone(p))).collect();
            // Sheets parked on an instrument's rate limit.
            let sheet_waits: Vec<(u32, String)> =
                e.rt.waiting.iter().map(|(n, i)| (*n, i.clone())).collect();
            Some((doc, progress, sheet_waits, compacted))
        });
        let breakers: Vec<mozart_ipc::checkpoint::InstrumentHold> =
            self.breakers.values().cloned().collect();
        (live, waiting, breakers)
    }

    fn watch_step(&mut self, id: &str, until_done: bool) -> WatchStep {
        let entry = self.table.jobs.get_mut(id)?;
        let seen = entry.watch_seen();
        let wake = if seen.settled(until_done) {
            None
        } else {
            // Watches whose caller has gone (its time ran out) are dropped here: one that
            // waits for a long job's end is not woken by its sheets, and a client calling
            // again every few seconds must not pile them up.
            entry.watchers.retain(|w| !w.wake.is_closed());
            let (tx, rx) = tokio::sync::oneshot::channel();
            entry.watchers.push(super::table::Watcher {
                wake: tx,
                until_done,
            });
            Some(rx)
        };
        Some((seen, wake))
    }

    fn live_list(&self) -> LiveList {
        let mut out: Vec<(f64, JobListEntry)> = Vec::with_capacity(self.table.jobs.len());
        let mut seen = std::collections::HashSet::new();
        for (id, entry) in &self.table.jobs {
            seen.insert(id.clone());
            let mut summary = wire::job_summary(&entry.record);
            summary.pausing = self.pausing(id);
            out.push((entry.record.submitted_at, JobListEntry::Live(summary)));
        }
        (out, seen, self.table.listed_rows.clone())
    }

    /// Unload the jobs `job.clear` deletes; the ids of the jobs the baton still runs.
    fn unload(
        &mut self,
        statuses: &[DaemonJobStatus],
        job_ids: Option<Vec<String>>,
        older_than_seconds: Option<f64>,
        now: f64,
    ) -> Vec<String> {
        let mut loaded = lock(&self.shared.loaded);
        self.table.jobs.retain(|id, entry| {
            let matches = statuses.contains(&entry.record.status)
                && entry.run.is_none()
                && job_ids.as_ref().is_none_or(|ids| ids.contains(id))
                && older_than_seconds.is_none_or(|age| entry.record.submitted_at <= now - age);
            if matches {
                loaded.remove(id);
            }
            !matches
        });
        self.table
            .jobs
            .iter()
            .filter(|(_, e)| e.run.is_some())
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn counts(&self) -> JobCounts {
        let mut counts = JobCounts::default();
        for entry in self.table.jobs.values() {
            let s = entry.record.status;
            if s == DaemonJobStatus::Running {
                counts.running += 1;
            }
            *counts.by_status.entry(s.as_str().to_string()).or_default() += 1;
        }
        counts
    }

    fn observer_events(
        &self,
        job_id: Option<&str>,
        limit: u32,
    ) -> Vec<mozart_ipc::types::MonitorEvent> {
        let observed = &self.table.observed;
        let mut events: Vec<&mozart_baton::ObserverEvent> = match job_id {
            Some(id) => observed
                .get(id)
                .map(|q| q.iter().collect())
                .unwrap_or_default(),
            None => observed.values().flatten().collect(),
        };
        // Newest first (§8.22); stable, so events of the same instant keep their order.
        events.sort_by_key(|e| std::cmp::Reverse(e.at));
        events
            .into_iter()
            .take(limit as usize)
            .map(wire::observer_event)
            .collect()
    }

    fn running_outputs(&self, job_id: &str) -> Vec<(u32, std::path::PathBuf)> {
        let Some(entry) = self.table.jobs.get(job_id) else {
            return Vec::new();
        };
        let Some(run) = &entry.run else {
            return Vec::new();
        };
        let logs = run.sheet_logs.clone();
        entry.rt.live.keys().map(|n| (*n, logs.clone())).collect()
    }

    fn live_progress(
        &self,
        job_id: Option<&str>,
    ) -> Vec<(String, u32, Arc<mozart_backends::Progress>)> {
        self.table
            .jobs
            .iter()
            .filter(|(id, _)| job_id.is_none_or(|j| j == id.as_str()))
            .flat_map(|(id, e)| {
                e.rt.live
                    .iter()
                    .map(|(n, p)| (id.clone(), *n, Arc::clone(p)))
            })
            .collect()
    }
}

/// A running job between two sheets (`pause_between_sheets_seconds`) with nothing running:
/// `pausing 20s between sheets (pause_between_sheets_seconds); the next sheet starts in 16s`.
fn pacing_words(e: &super::JobEntry) -> Option<String> {
    let (until, secs) = e.rt.pacing?;
    let left = until - mozart_state::epoch_now();
    let idle = e.record.status == DaemonJobStatus::Running && e.rt.live.is_empty();
    (idle && left > 0.0).then(|| {
        format!(
            "pausing {secs:.0}s between sheets (pause_between_sheets_seconds); the next sheet \
             starts in {:.0}s",
            left.ceil()
        )
    })
}
