//! What the monitor methods read of the job table (conductor.md §8.18, §8.21): the running
//! figures of `daemon.top`, and the cursor of a monitor stream, which diffs the jobs' live
//! checkpoints between polls on the table's owner.

use std::collections::{BTreeMap, HashMap};

use mozart_ipc::types::{JobProgress, MonitorEvent};
use mozart_state::{DaemonJobStatus, SheetStatus};
use serde_json::json;

use super::JobTable;

/// Running jobs, sheets in flight, and the progress of every job not yet finished.
pub(crate) fn figures(table: &JobTable) -> (u64, u64, Vec<JobProgress>) {
    let jobs = &table.jobs;
    let mut running = 0;
    let mut active_sheets = 0;
    let mut progress = Vec::new();
    for (id, entry) in jobs.iter() {
        let status = entry.record.status;
        if status == DaemonJobStatus::Running {
            running += 1;
        }
        if !matches!(
            status,
            DaemonJobStatus::Running | DaemonJobStatus::Queued | DaemonJobStatus::Paused
        ) {
            continue;
        }
        let Some(live) = entry.live.as_ref() else {
            continue;
        };
        let in_flight: Vec<u32> = live
            .sheets
            .statuses()
            .filter(|(_, s)| *s == SheetStatus::InProgress)
            .map(|(n, _)| n)
            .collect();
        active_sheets += in_flight.len() as u64;
        progress.push(JobProgress {
            job_id: id.clone(),
            total_sheets: live.total_sheets.max(1),
            last_completed_sheet: live.last_completed_sheet,
            current_sheet: in_flight.first().copied().or(live.current_sheet),
            status: status.as_str().to_string(),
        });
    }
    progress.sort_by(|a, b| a.job_id.cmp(&b.job_id));
    (running, active_sheets, progress)
}

/// What a monitor stream remembers between polls.
#[derive(Default)]
pub(crate) struct StreamCursor {
    /// Per job: status and each sheet's status (in number order), and the poll that last
    /// saw the job.
    jobs: HashMap<String, Seen>,
    /// Per job: timestamp of the newest observer record sent, and how many records carry
    /// exactly that timestamp (several can share a millisecond).
    observed: HashMap<String, (f64, usize)>,
    /// Polls so far: a job not seen by the current one has left the table.
    polls: u64,
}

/// A job as the previous poll saw it.
struct Seen {
    status: DaemonJobStatus,
    sheets: Vec<(u32, SheetStatus)>,
    poll: u64,
}

impl StreamCursor {
    /// Collect the events since the previous poll (none on the first: a stream starts now).
    ///
    /// It runs on the table's owner — the baton task — every 100 ms for each
    /// subscriber, over every loaded job: a job or observer queue that did not change since
    /// the previous poll is compared in place, without a copy or an allocation, so 1,000
    /// loaded jobs cost a walk over their statuses, not 1,000 maps and id strings made ten
    /// times a second while sheet events wait (issue 24).
    pub(crate) fn poll(&mut self, table: &JobTable, first: bool) -> Vec<MonitorEvent> {
        let mut out = Vec::new();
        self.poll_jobs(table, first, &mut out);
        self.poll_observed(table, first, &mut out);
        out
    }

    /// The jobs' and sheets' status changes since the previous poll, into `out`.
    fn poll_jobs(&mut self, table: &JobTable, first: bool, out: &mut Vec<MonitorEvent>) {
        let now = mozart_state::epoch_now();
        self.polls += 1;
        let poll = self.polls;
        for (id, entry) in table.jobs.iter() {
            let status = entry.record.status;
            let live = entry.live.as_ref();
            let unchanged = self.jobs.get_mut(id).is_some_and(|seen| {
                let same = seen.status == status
                    && match live {
                        Some(l) => {
                            seen.sheets.len() == l.sheets.len()
                                && seen.sheets.iter().copied().eq(l.sheets.statuses())
                        }
                        None => seen.sheets == entry.final_sheets,
                    };
                if same {
                    seen.poll = poll;
                }
                same
            });
            if unchanged {
                continue;
            }
            let sheets: Vec<(u32, SheetStatus)> = match live {
                Some(l) => l.sheets.statuses().collect(),
                None => entry.final_sheets.clone(),
            };
            let before = self.jobs.get(id);
            if !first {
                let old: Option<BTreeMap<u32, SheetStatus>> =
                    before.map(|b| b.sheets.iter().copied().collect());
                for (num, st) in &sheets {
                    if old.as_ref().and_then(|o| o.get(num)) == Some(st) {
                        continue;
                    }
                    if let Some(event) = sheet_event(*st) {
                        out.push(MonitorEvent {
                            job_id: id.clone(),
                            sheet_num: *num,
                            event: event.to_string(),
                            data: None,
                            timestamp: now,
                        });
                    }
                }
                if before.map(|b| b.status) != Some(status) {
                    out.push(MonitorEvent {
                        job_id: id.clone(),
                        sheet_num: 0,
                        event: format!("job.{}", job_event(status)),
                        data: Some(json!({ "status": status.as_str() })),
                        timestamp: now,
                    });
                }
            }
            self.jobs.insert(
                id.clone(),
                Seen {
                    status,
                    sheets,
                    poll,
                },
            );
        }
        self.jobs.retain(|_, seen| seen.poll == poll);
    }

    /// The observer records queued since the previous poll, into `out`.
    fn poll_observed(&mut self, table: &JobTable, first: bool, out: &mut Vec<MonitorEvent>) {
        for (id, queue) in table.observed.iter() {
            let (start_last, start_same) = self.observed.get(id).copied().unwrap_or((f64::MIN, 0));
            // The baton stamps its records from a monotonic clock, so a queue is in time
            // order: nothing is fresh when its newest record is older than the last one
            // sent, or as old and no more of them share that time.
            let Some(newest) = queue.back().map(|r| r.at.as_secs_f64()) else {
                continue;
            };
            if newest < start_last
                || (newest == start_last
                    && queue
                        .iter()
                        .rev()
                        .take_while(|r| r.at.as_secs_f64() == start_last)
                        .count()
                        <= start_same)
            {
                continue;
            }
            let (mut last, mut same) = (start_last, start_same);
            let mut at_start = 0;
            for record in queue {
                let ts = record.at.as_secs_f64();
                let fresh = if ts > start_last {
                    true
                } else if ts == start_last {
                    at_start += 1;
                    at_start > start_same
                } else {
                    false
                };
                if !fresh {
                    continue;
                }
                if ts > last {
                    last = ts;
                    same = 1;
                } else {
                    same += 1;
                }
                if !first {
                    out.push(MonitorEvent {
                        job_id: record.job_id.clone(),
                        sheet_num: record.sheet_num,
                        event: record.event.clone(),
                        data: Some(record.data.clone()),
                        timestamp: ts,
                    });
                }
            }
            self.observed.insert(id.clone(), (last, same));
        }
    }
}

/// Upstream's runner event for a sheet reaching `status` (§8.21).
fn sheet_event(status: SheetStatus) -> Option<&'static str> {
    match status {
        SheetStatus::InProgress => Some("sheet.started"),
        SheetStatus::Completed => Some("sheet.completed"),
        SheetStatus::Failed => Some("sheet.failed"),
        SheetStatus::Skipped => Some("sheet.skipped"),
        SheetStatus::Pending => None,
    }
}

fn job_event(status: DaemonJobStatus) -> &'static str {
    match status {
        DaemonJobStatus::Running => "started",
        other => other.as_str(),
    }
}
