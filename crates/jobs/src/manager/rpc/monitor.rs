//! `daemon.top`, `daemon.top.stream`, `daemon.events` and `daemon.monitor.stream`
//! (conductor.md §8.18–§8.21), the methods upstream's `mozart top` reads.
//!
//! Upstream fills them from a background profiler (periodic snapshots, strace, GPU probes).
//! Ours samples on demand instead, so a conductor nobody watches pays nothing: each
//! `daemon.top` / `daemon.events` call refreshes the process table (sysinfo) of the conductor
//! and everything below it, and the difference to the previous sample becomes `spawn` /
//! `exit` events. A process that starts and ends between two samples is not seen. The
//! monitor stream diffs the jobs' live checkpoints (upstream's runner events `job.*`,
//! `sheet.*`), forwards new baton observer records, and sends a `monitor.snapshot` per
//! profiler interval.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mozart_ipc::types::{
    EventsResult, JobProgress, LimitParams, MonitorEvent, ProcessEvent, ProcessEventType,
    ProcessMetric, SystemSnapshot, TopResult, Unavailable,
};
use mozart_ipc::{methods, parse_params, ErrorObjectOwned, RpcModule};
use sysinfo::{Pid, ProcessRefreshKind, ProcessStatus, ProcessesToUpdate, System, UpdateKind};

use super::super::table::feed::StreamCursor;
use super::super::table::Query;
use super::super::{lock, JobManager};
use mozart_conductor::probe::round1;
use mozart_conductor::{ConductorCtx, ConductorError};

type Ctx = Arc<ConductorCtx>;

/// Process events kept for `daemon.events`.
const EVENT_RING: usize = 1000;
/// How often a monitor stream looks for new events (the dashboard's live latency: a change
/// shows within this plus the page's own work, under the 200 ms bar).
const STREAM_POLL: Duration = Duration::from_millis(100);
/// What the monitoring methods answer when `profiler.enabled` is false (§8.18–§8.20).
const PROFILER_OFF: &str = "profiler not enabled";
/// Unsubscribe method jsonrpsee requires next to a subscription (ours, not upstream's).
const MONITOR_UNSUBSCRIBE: &str = "daemon.monitor.unsubscribe";

const MB: f64 = 1024.0 * 1024.0;
/// Longest command line reported per process.
const COMMAND_CHARS: usize = 500;

/// A process's command line as reported: its arguments (its name when it has none), cut to
/// [`COMMAND_CHARS`] — an instrument's command line carries the whole prompt; upstream keeps
/// 500 characters too.
fn command_line(p: &sysinfo::Process) -> String {
    let mut command = p
        .cmd()
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    if command.is_empty() {
        command = p.name().to_string_lossy().into_owned();
    }
    if let Some((cut, _)) = command.char_indices().nth(COMMAND_CHARS) {
        command.truncate(cut);
    }
    command
}

/// What the previous sample knew about a process, to describe its exit.
#[derive(Debug, Clone)]
struct Seen {
    command: String,
    job_id: Option<String>,
    sheet_num: Option<u32>,
}

/// The on-demand profiler: sysinfo's process table (kept, so CPU usage is measured between
/// samples), the previous sample and the recent process events.
struct Profiler {
    system: System,
    previous: HashMap<u32, Seen>,
    primed: bool,
    events: VecDeque<ProcessEvent>,
}

impl Profiler {
    fn new() -> Profiler {
        Profiler {
            system: System::new(),
            previous: HashMap::new(),
            primed: false,
            events: VecDeque::new(),
        }
    }

    /// Refresh the table and return the conductor (first) and its descendants, recording
    /// spawns and exits since the last sample.
    fn sample(&mut self, daemon_pid: u32, inflight_dir: &Path) -> Vec<ProcessMetric> {
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::All,
            true,
            ProcessRefreshKind::nothing()
                .with_cpu()
                .with_memory()
                .with_cmd(UpdateKind::OnlyIfNotSet),
        );
        let now = mozart_state::epoch_now();
        let groups = inflight_groups(inflight_dir);
        let order = self.descendants(daemon_pid);
        let mut metrics = Vec::with_capacity(order.len());
        let mut current = HashMap::with_capacity(order.len());
        for pid in order {
            if self.system.process(pid).is_none() {
                continue;
            }
            let raw = pid.as_u32();
            // Before the process is borrowed from the table: this may name a spawn event.
            let (job_id, sheet_num) = self.attempt_of(raw, &groups);
            let Some(p) = self.system.process(pid) else {
                continue;
            };
            let command = command_line(p);
            if raw != daemon_pid {
                current.insert(
                    raw,
                    Seen {
                        command: command.clone(),
                        job_id: job_id.clone(),
                        sheet_num,
                    },
                );
            }
            metrics.push(ProcessMetric {
                pid: raw,
                ppid: p.parent().map_or(0, |pp| pp.as_u32()),
                command,
                state: state_letter(p.status()).to_string(),
                cpu_percent: round1(f64::from(p.cpu_usage()).max(0.0)),
                rss_mb: round1(p.memory() as f64 / MB),
                vms_mb: round1(p.virtual_memory() as f64 / MB),
                threads: p.tasks().map_or(1, |t| t.len().max(1) as u32),
                open_fds: p.open_files().map_or(0, |n| n as u32),
                age_seconds: round1((now - p.start_time() as f64).max(0.0)),
                job_id,
                sheet_num,
                syscall_counts: BTreeMap::new(),
                syscall_time_pct: BTreeMap::new(),
            });
        }
        if self.primed {
            self.record_changes(now, &current);
        }
        self.previous = current;
        self.primed = true;
        metrics
    }

    /// The conductor and every process below it in the refreshed table, parents before
    /// their children (each level in pid order).
    fn descendants(&self, daemon_pid: u32) -> Vec<Pid> {
        let mut children: HashMap<Pid, Vec<Pid>> = HashMap::new();
        for (pid, process) in self.system.processes() {
            // sysinfo lists threads as tasks too; only processes count.
            if process.thread_kind().is_some() {
                continue;
            }
            if let Some(parent) = process.parent() {
                children.entry(parent).or_default().push(*pid);
            }
        }
        let mut order = vec![Pid::from_u32(daemon_pid)];
        let mut next = 0;
        while next < order.len() {
            if let Some(kids) = children.get(&order[next]) {
                let mut kids = kids.clone();
                kids.sort_unstable();
                order.extend(kids);
            }
            next += 1;
        }
        order
    }

    /// The job and sheet whose attempt a process belongs to (by its process group), if any.
    fn attempt_of(
        &mut self,
        raw: u32,
        groups: &HashMap<u32, (String, u32)>,
    ) -> (Option<String>, Option<u32>) {
        let (job_id, sheet_num) = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(
            i32::try_from(raw).unwrap_or(i32::MAX),
        )))
        .ok()
        .and_then(|pgid| groups.get(&(pgid.as_raw() as u32)).cloned())
        .map(|(job, sheet)| (Some(job), Some(sheet)))
        // Its attempt's record may be gone already (the attempt is ending): the job
        // the previous sample saw.
        .or_else(|| {
            self.previous
                .get(&raw)
                .filter(|s| s.job_id.is_some())
                .map(|s| (s.job_id.clone(), s.sheet_num))
        })
        .unwrap_or((None, None));
        // Seen first before its attempt's record was written: its spawn event gets the
        // job now.
        if job_id.is_some() && self.previous.get(&raw).is_some_and(|s| s.job_id.is_none()) {
            if let Some(spawn) = self.events.iter_mut().rev().find(|e| {
                e.pid == raw && e.event_type == ProcessEventType::Spawn && e.job_id.is_none()
            }) {
                spawn.job_id = job_id.clone();
                spawn.sheet_num = sheet_num;
            }
        }
        (job_id, sheet_num)
    }

    /// Spawn and exit events for the processes that came and went since the last sample.
    fn record_changes(&mut self, now: f64, current: &HashMap<u32, Seen>) {
        for (pid, seen) in current {
            if !self.previous.contains_key(pid) {
                self.record(now, *pid, ProcessEventType::Spawn, seen);
            }
        }
        let gone: Vec<(u32, Seen)> = self
            .previous
            .iter()
            .filter(|(pid, _)| !current.contains_key(pid))
            .map(|(pid, seen)| (*pid, seen.clone()))
            .collect();
        for (pid, seen) in gone {
            self.record(now, pid, ProcessEventType::Exit, &seen);
        }
    }

    fn record(&mut self, now: f64, pid: u32, event_type: ProcessEventType, seen: &Seen) {
        if self.events.len() >= EVENT_RING {
            self.events.pop_front();
        }
        self.events.push_back(ProcessEvent {
            timestamp: now,
            pid,
            event_type,
            exit_code: None,
            signal_num: None,
            job_id: seen.job_id.clone(),
            sheet_num: seen.sheet_num,
            details: seen.command.clone(),
        });
    }
}

/// The process groups of attempts in flight: pgid → (job, sheet), from the records the
/// musicians keep under `inflight/` (see `reaper`): one `<job>.<sheet>.<pgid>` file per
/// attempt, or the `journal` of `+ pgid ticks sheet job` / `- pgid` lines.
fn inflight_groups(dir: &Path) -> HashMap<u32, (String, u32)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return HashMap::new();
    };
    let mut groups = HashMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "journal" {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let journal = super::super::reaper::replay_journal(&text);
            groups.extend(
                journal
                    .into_iter()
                    .map(|(pgid, r)| (pgid, (r.job, r.sheet))),
            );
            continue;
        }
        let mut parts = name.rsplitn(3, '.');
        let (Some(pgid), Some(sheet), Some(job)) = (
            parts.next().and_then(|p| p.parse().ok()),
            parts.next().and_then(|s| s.parse().ok()),
            parts.next(),
        ) else {
            continue;
        };
        groups.insert(pgid, (job.to_string(), sheet));
    }
    groups
}

fn state_letter(status: ProcessStatus) -> &'static str {
    match status {
        ProcessStatus::Run => "R",
        ProcessStatus::UninterruptibleDiskSleep => "D",
        ProcessStatus::Zombie => "Z",
        ProcessStatus::Stop => "T",
        ProcessStatus::Tracing => "t",
        ProcessStatus::Dead => "X",
        ProcessStatus::Idle => "I",
        _ => "S",
    }
}

/// Backpressure level from the conductor's memory and process count (conductor.md §14.1).
fn pressure_level(ctx: &ConductorCtx, memory_mb: f64, processes: usize) -> &'static str {
    let limits = ctx.config().resource_limits;
    let pct = memory_mb / (limits.max_memory_mb.max(1) as f64);
    let process_pct = processes as f64 / f64::from(limits.max_processes.max(1));
    // An instrument's limit (every job waits), not one job's own wait on `shell`.
    let rate_limited = ctx
        .job_host()
        .is_some_and(|h| !h.rate_limits().backends.is_empty());
    if pct > 0.95 || pct >= 0.80 || process_pct >= 0.80 || !ctx.is_ready() {
        "critical"
    } else if pct > 0.85 || rate_limited {
        "high"
    } else if pct > 0.70 {
        "medium"
    } else if pct > 0.50 {
        "low"
    } else {
        "none"
    }
}

/// Build a `daemon.top` snapshot.
fn snapshot(profiler: &Mutex<Profiler>, ctx: &ConductorCtx, mgr: &JobManager) -> SystemSnapshot {
    let (processes, memory) = {
        let mut profiler = lock(profiler);
        let processes = profiler.sample(ctx.pid, &mgr.shared.inflight_dir);
        profiler.system.refresh_memory();
        let s = &profiler.system;
        let memory = (
            round1(s.total_memory() as f64 / MB),
            round1(s.available_memory() as f64 / MB),
            round1(s.used_memory() as f64 / MB),
        );
        (processes, memory)
    };
    let daemon_rss_mb = processes
        .iter()
        .find(|p| p.pid == ctx.pid)
        .map_or(0.0, |p| p.rss_mb);
    let tree_rss: f64 = processes.iter().map(|p| p.rss_mb).sum();
    let zombie_pids: Vec<u32> = processes
        .iter()
        .filter(|p| p.state == "Z")
        .map(|p| p.pid)
        .collect();
    let (running_jobs, active_sheets, job_progress) = job_figures(mgr);
    let load = System::load_average();
    SystemSnapshot {
        timestamp: mozart_state::epoch_now(),
        daemon_pid: ctx.pid,
        system_memory_total_mb: memory.0,
        system_memory_available_mb: memory.1,
        system_memory_used_mb: memory.2,
        daemon_rss_mb,
        load_avg_1: load.one,
        load_avg_5: load.five,
        load_avg_15: load.fifteen,
        pressure_level: pressure_level(ctx, tree_rss, processes.len().saturating_sub(1))
            .to_string(),
        processes,
        gpus: Vec::new(),
        running_jobs,
        active_sheets,
        zombie_count: zombie_pids.len() as u64,
        zombie_pids,
        job_progress,
        conductor_uptime_seconds: ctx.uptime_seconds(),
    }
}

/// Running jobs, sheets in flight, and the progress of every job not yet finished.
fn job_figures(mgr: &JobManager) -> (u64, u64, Vec<JobProgress>) {
    mgr.shared
        .table
        .ask_blocking(|reply| Query::Figures { reply })
        .unwrap_or_default()
}

/// The cursor's events since its previous poll (none on the first: a stream starts now),
/// polled by the table's owner: the cursor goes there and comes back with the events (None
/// once the baton loop has stopped).
async fn poll_table(
    cursor: Box<StreamCursor>,
    mgr: &JobManager,
    first: bool,
) -> Option<(Box<StreamCursor>, Vec<MonitorEvent>)> {
    mgr.shared
        .table
        .ask(|reply| Query::MonitorPoll {
            cursor,
            first,
            reply,
        })
        .await
        .ok()
}

/// Register the monitoring methods, served from `mgr`.
fn unavailable(error: &str) -> Unavailable {
    Unavailable {
        error: error.to_string(),
    }
}

fn to_value<T: serde::Serialize>(value: T) -> Result<serde_json::Value, ErrorObjectOwned> {
    serde_json::to_value(value)
        .map_err(|e| ErrorObjectOwned::from(mozart_ipc::RpcError::internal(e)))
}

/// One `daemon.monitor.stream` subscriber: the jobs' changes every [`STREAM_POLL`], and a
/// `monitor.snapshot` per profiler interval when the profiler is on, until it goes away.
async fn stream_monitor(
    mut sink: mozart_ipc::jsonrpsee::SubscriptionSink,
    ctx: Ctx,
    m: JobManager,
    p: Arc<Mutex<Profiler>>,
) {
    let profiler = ctx.config().profiler;
    // Upstream's TUI refreshes on `monitor.snapshot` events, which upstream's own profiler
    // never publishes; ours sends one per profiler interval.
    let period = Duration::from_secs_f64(profiler.interval_seconds.max(1.0));
    let mut next_snapshot = profiler.enabled.then(tokio::time::Instant::now);
    let Some((mut cursor, _)) = poll_table(Box::default(), &m, true).await else {
        return;
    };
    loop {
        tokio::select! {
            _ = sink.closed() => return,
            _ = tokio::time::sleep(STREAM_POLL) => {}
        }
        let Some((next, mut events)) = poll_table(cursor, &m, false).await else {
            return;
        };
        cursor = next;
        if next_snapshot.is_some_and(|at| tokio::time::Instant::now() >= at) {
            next_snapshot = Some(tokio::time::Instant::now() + period);
            let (p, c, mm) = (p.clone(), ctx.clone(), m.clone());
            if let Ok(snap) = tokio::task::spawn_blocking(move || snapshot(&p, &c, &mm)).await {
                events.push(MonitorEvent {
                    job_id: String::new(),
                    sheet_num: 0,
                    event: "monitor.snapshot".into(),
                    data: serde_json::to_value(&snap).ok(),
                    timestamp: snap.timestamp,
                });
            }
        }
        for event in events {
            let Ok(message) = serde_json::value::to_raw_value(&event) else {
                continue;
            };
            // A full buffer drops the new event for this subscriber (§8.21).
            if let Err(mozart_ipc::jsonrpsee::core::server::TrySendError::Closed(_)) =
                sink.try_send(message)
            {
                return;
            }
        }
    }
}

/// Register `daemon.top`, `daemon.top.stream`, `daemon.events` and `daemon.monitor.stream`.
pub(in crate::manager) fn register(
    module: &mut RpcModule<Ctx>,
    mgr: JobManager,
) -> Result<(), ConductorError> {
    let reg = |err: mozart_ipc::jsonrpsee::core::RegisterMethodError| {
        ConductorError::Register(err.to_string())
    };
    let profiler = Arc::new(Mutex::new(Profiler::new()));

    let (p, m) = (profiler.clone(), mgr.clone());
    module
        .register_blocking_method(methods::DAEMON_TOP, move |_, ctx, _| {
            let result = if ctx.config().profiler.enabled {
                TopResult::Snapshot(snapshot(&p, &ctx, &m))
            } else {
                TopResult::Unavailable(unavailable(PROFILER_OFF))
            };
            to_value(result)
        })
        .map_err(reg)?;

    // No JSONL file is written: snapshots are served on demand (a result, §8.19).
    module
        .register_method(methods::DAEMON_TOP_STREAM, |_, ctx, _| {
            let error = if ctx.config().profiler.enabled {
                "JSONL not configured"
            } else {
                PROFILER_OFF
            };
            to_value(unavailable(error))
        })
        .map_err(reg)?;

    let (p, m) = (profiler.clone(), mgr.clone());
    module
        .register_blocking_method(methods::DAEMON_EVENTS, move |params, ctx, _| {
            let params: LimitParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
            if !ctx.config().profiler.enabled {
                return to_value(EventsResult {
                    events: Vec::new(),
                    error: Some(PROFILER_OFF.to_string()),
                });
            }
            let mut profiler = lock(&p);
            profiler.sample(ctx.pid, &m.shared.inflight_dir);
            let skip = profiler.events.len().saturating_sub(params.limit as usize);
            let events = profiler.events.iter().skip(skip).cloned().collect();
            to_value(EventsResult {
                events,
                error: None,
            })
        })
        .map_err(reg)?;

    let m = mgr;
    module
        .register_subscription(
            methods::DAEMON_MONITOR_STREAM,
            methods::MONITOR_EVENT_NOTIFICATION,
            MONITOR_UNSUBSCRIBE,
            move |_, pending, ctx, _| {
                let (m, p) = (m.clone(), profiler.clone());
                async move {
                    let Ok(sink) = pending.accept().await else {
                        return;
                    };
                    stream_monitor(sink, Arc::clone(&ctx), m, p).await;
                }
            },
        )
        .map_err(reg)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflight_records_map_groups_to_job_and_sheet() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("my.job.3.4242"), "4242 1\n").unwrap();
        std::fs::write(dir.path().join("garbage"), "").unwrap();
        std::fs::write(
            dir.path().join("journal"),
            "+ 100 5 1 job with spaces\n+ 200 6 2 other\n- 200\n",
        )
        .unwrap();
        let groups = inflight_groups(dir.path());
        assert_eq!(groups.get(&4242), Some(&("my.job".to_string(), 3)));
        assert_eq!(groups.get(&100), Some(&("job with spaces".to_string(), 1)));
        assert_eq!(groups.len(), 2, "{groups:?}");
    }

    #[test]
    fn a_child_that_comes_and_goes_is_a_spawn_then_an_exit() {
        let dir = tempfile::tempdir().unwrap();
        let mut profiler = Profiler::new();
        let me = std::process::id();
        let first = profiler.sample(me, dir.path());
        assert_eq!(first[0].pid, me);
        assert!(first[0].rss_mb > 0.0);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id();
        let second = profiler.sample(me, dir.path());
        let metric = second.iter().find(|p| p.pid == pid).unwrap();
        assert!(metric.command.contains("sleep 5"), "{metric:?}");
        assert_eq!(metric.ppid, me);
        child.kill().unwrap();
        child.wait().unwrap();
        profiler.sample(me, dir.path());
        let kinds: Vec<ProcessEventType> = profiler
            .events
            .iter()
            .filter(|e| e.pid == pid)
            .map(|e| e.event_type)
            .collect();
        assert_eq!(kinds, [ProcessEventType::Spawn, ProcessEventType::Exit]);
    }
}
