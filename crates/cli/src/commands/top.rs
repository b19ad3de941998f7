//! `mozart top` (cli.md §4.4): the conductor's processes and jobs, from `daemon.top`.
//!
//! `--json` streams one compact snapshot per interval, as upstream does. Upstream's default
//! mode is a Textual TUI; ours prints the same snapshot as a plain table per interval (like
//! `top -b`). `--history` and `--trace` read upstream's profiler database and strace, which
//! this port does not keep: they fail with a clear message.

use std::io::Write;
use std::time::Duration;

use mozart_ipc::methods;
use mozart_ipc::types::{ProcessMetric, SystemSnapshot, TopResult};

use crate::conductor_client;
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart top`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Stream JSON snapshots (NDJSON).
    #[arg(id = "json", long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Replay historical data (e.g., '1h', '30m').
    #[arg(long = "history", value_name = "TEXT")]
    pub history: Option<String>,
    /// Attach full strace to PID and stream output.
    #[arg(long = "trace", value_name = "INT")]
    pub trace: Option<u32>,
    /// Filter by score ID.
    #[arg(short = 's', long = "score", value_name = "TEXT")]
    pub score: Option<String>,
    /// Refresh interval in seconds.
    #[arg(short = 'i', long = "interval", default_value_t = 2.0)]
    pub interval: f64,
}

/// Run `mozart top` until interrupted.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    // Mode precedence: --trace > --history > --json > table (§4.4).
    if args.trace.is_some() {
        return Err(CliError::failed(
            "'mozart top --trace' is not available in this port.",
            vec!["Attach strace yourself: strace -f -t -p <PID>".into()],
        ));
    }
    if args.history.is_some() {
        return Err(CliError::failed(
            "'mozart top --history' is not available: this conductor keeps no monitor database.",
            vec!["Live snapshots: mozart top --json".into()],
        ));
    }
    if !(args.interval.is_finite() && args.interval > 0.0) {
        return Err(CliError::Usage(format!(
            "Invalid value for '--interval' / '-i': {} is not a positive number.",
            args.interval
        )));
    }
    let interval = Duration::from_secs_f64(args.interval);
    let paths = conductor_client::paths(globals, None)?;
    // Reachability first, as upstream's `daemon.status` probe; without a conductor there
    // is no monitor file to tail either (upstream's fallback).
    if let Err(err) = conductor_client::connect_socket(&paths.socket, OutputMode::Human) {
        if err.is_untrusted() {
            return Err(err);
        }
        // The standard words first, then upstream's.
        return Err(CliError::failed(
            "Mozart conductor is not running. No monitor data available.",
            vec!["Start it with: mozart start".into()],
        ));
    }
    if let Some(id) = &args.score {
        // A score the conductor does not know is said (with the usual hints), not shown as
        // an empty frame every interval.
        let query = mozart_ipc::sheet_view::SheetQuery {
            mode: mozart_ipc::sheet_view::SheetMode::Page,
            offset: 0,
            limit: Some(1),
            ..Default::default()
        };
        super::status::fetch(globals, id, None, query, OutputMode::Human)?;
    }
    if args.output.is_json() {
        eprintln!("Streaming NDJSON snapshots (Ctrl+C to stop)...");
    }
    loop {
        let mut result: TopResult = {
            let mut client = conductor_client::connect_socket(&paths.socket, args.output)?;
            client
                .call(methods::DAEMON_TOP, ())
                .map_err(|e| conductor_client::call_error(e, args.output))?
        };
        if let TopResult::Snapshot(snapshot) = &mut result {
            filter(snapshot, args.score.as_deref());
        }
        let mut out = std::io::stdout().lock();
        let written = if args.output.is_json() {
            let line = serde_json::to_string(&result).map_err(|e| {
                CliError::failed(format!("Cannot encode the snapshot: {e}"), vec![])
            })?;
            writeln!(out, "{line}")
        } else {
            match &result {
                TopResult::Snapshot(s) => write!(out, "{}", render(s)),
                // `{"error": "profiler not enabled"}` and the like (a result, §8.18).
                TopResult::Unavailable(why) => {
                    return Err(CliError::failed(
                        format!("No snapshot: {}.", why.error),
                        vec!["Enable it in conductor.yaml: profiler: {enabled: true}".into()],
                    ));
                }
            }
        };
        // A closed pipe (`mozart top --json | head -1`) ends the stream quietly.
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(0);
        }
        drop(out);
        std::thread::sleep(interval);
    }
}

/// Keep only `job`'s processes (§4.4) and its progress line.
fn filter(snapshot: &mut SystemSnapshot, job: Option<&str>) {
    if let Some(job) = job {
        snapshot
            .processes
            .retain(|p| p.job_id.as_deref() == Some(job));
        snapshot.job_progress.retain(|p| p.job_id == job);
    }
}

/// One plain-text frame: conductor line, jobs, processes.
fn render(s: &SystemSnapshot) -> String {
    let mut text = format!(
        "Mozart conductor PID {}  up {:.0}s  load {:.2} {:.2} {:.2}  mem {:.0}/{:.0} MB  pressure {}\n",
        s.daemon_pid,
        s.conductor_uptime_seconds,
        s.load_avg_1,
        s.load_avg_5,
        s.load_avg_15,
        s.system_memory_used_mb,
        s.system_memory_total_mb,
        s.pressure_level,
    );
    text.push_str(&format!(
        "Jobs running: {}  sheets in flight: {}  zombies: {}\n",
        s.running_jobs, s.active_sheets, s.zombie_count
    ));
    for job in &s.job_progress {
        let current = job
            .current_sheet
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        text.push_str(&format!(
            "  {:<24} {:<9} sheet {current}/{}  (last completed {})\n",
            crate::output::plain(&job.job_id),
            job.status,
            job.total_sheets,
            job.last_completed_sheet
        ));
    }
    text.push_str(&format!(
        "{:>7} {:>7} {:1} {:>6} {:>8} {:>7}  {:<16} {:>5}  COMMAND\n",
        "PID", "PPID", "S", "CPU%", "RSS MB", "AGE", "SCORE", "SHEET"
    ));
    for p in &s.processes {
        text.push_str(&process_line(p));
    }
    text.push('\n');
    text
}

fn process_line(p: &ProcessMetric) -> String {
    // A process's name and arguments are what an instrument chose: shown, not obeyed (a
    // window title, a screen clear).
    let command: String = crate::output::plain(&p.command)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(60)
        .collect();
    format!(
        "{:>7} {:>7} {:1} {:>6.1} {:>8.1} {:>6.0}s  {:<16} {:>5}  {}\n",
        p.pid,
        p.ppid,
        p.state,
        p.cpu_percent,
        p.rss_mb,
        p.age_seconds,
        crate::output::plain(p.job_id.as_deref().unwrap_or("-")),
        p.sheet_num
            .map_or_else(|| "-".to_string(), |n| n.to_string()),
        command
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn score_filter_keeps_that_jobs_processes() {
        let process = |pid: u32, job: Option<&str>| {
            json!({"pid": pid, "ppid": 1, "command": "sh", "state": "S", "cpu_percent": 0.0,
                   "rss_mb": 1.0, "vms_mb": 2.0, "threads": 1, "open_fds": 3,
                   "age_seconds": 1.0, "job_id": job, "sheet_num": null})
        };
        let snapshot: SystemSnapshot = serde_json::from_value(json!({
            "timestamp": 1.0, "daemon_pid": 1, "system_memory_total_mb": 1.0,
            "system_memory_available_mb": 1.0, "system_memory_used_mb": 0.0,
            "daemon_rss_mb": 1.0, "load_avg_1": 0.0, "load_avg_5": 0.0, "load_avg_15": 0.0,
            "processes": [process(1, None), process(2, Some("a"))], "gpus": [],
            "pressure_level": "none", "running_jobs": 1, "active_sheets": 1,
            "zombie_count": 0, "zombie_pids": [], "job_progress": [],
            "conductor_uptime_seconds": 1.0
        }))
        .unwrap();
        let pids = |job: Option<&str>| {
            let mut s = snapshot.clone();
            filter(&mut s, job);
            s.processes.iter().map(|p| p.pid).collect::<Vec<_>>()
        };
        assert_eq!(pids(Some("a")), [2]);
        assert_eq!(pids(None), [1, 2]);
        assert!(pids(Some("b")).is_empty());
    }
}
