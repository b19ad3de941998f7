//! `mozart conductor-status` (cli.md §2.4): lock/PID first, then health, readiness, status.

use std::path::PathBuf;

use mozart_conductor::RunState;
use mozart_ipc::types::{DaemonStatus, HealthResult, RateLimitsResult, ReadyResult};
use mozart_ipc::{methods, BlockingClient};
use serde::de::DeserializeOwned;

use crate::conductor_client::{self, conductor_at};
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart conductor-status`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Socket path of the conductor to ask.
    #[arg(long = "socket", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(id = "json", long = "json", short = 'j', action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart conductor-status`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let paths = conductor_client::paths(globals, args.socket.as_deref())?;
    let pid = match conductor_at(&paths, args.socket.is_some(), args.output)?.0 {
        RunState::Stopped { stale_pid } => {
            if stale_pid.is_some() {
                let _ = std::fs::remove_file(&paths.pid_file);
            }
            if args.output.is_json() {
                crate::output::print_json(&serde_json::json!({
                    "running": false,
                    "socket": paths.socket.display().to_string(),
                }));
            } else {
                println!("{} is not running", paths.who());
            }
            return Ok(1);
        }
        RunState::Running { pid } => pid,
    };
    let health: Option<HealthResult> = ask(&paths.socket, methods::DAEMON_HEALTH);
    let ready: Option<ReadyResult> = ask(&paths.socket, methods::DAEMON_READY);
    let status: Option<DaemonStatus> = ask(&paths.socket, methods::DAEMON_STATUS);
    let limits: Option<RateLimitsResult> = ask(&paths.socket, methods::DAEMON_RATE_LIMITS);
    let pid = pid.or_else(|| health.as_ref().map(|h| h.pid));
    if args.output.is_json() {
        crate::output::print_json(&serde_json::json!({
            "running": true,
            "pid": pid,
            "socket": paths.socket.display().to_string(),
            "health": health,
            "ready": ready,
            "status": status,
            "rate_limits": limits,
        }));
        return Ok(0);
    }
    let shown = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    println!("{} is running (PID {shown})", paths.who());
    if let Some(h) = health {
        let secs = h.uptime_seconds.max(0.0) as u64;
        println!(
            "  Uptime: {}h {}m {}s",
            secs / 3600,
            (secs % 3600) / 60,
            secs % 60
        );
    }
    if let Some(r) = ready {
        if r.is_ready() {
            println!("  [+] Readiness: ready");
        } else {
            match &r.reason {
                Some(why) => println!("  [-] Readiness: {} — {why}", r.status),
                None => println!("  [-] Readiness: {}", r.status),
            }
        }
        println!("  Running jobs: {}", r.running_jobs);
        println!("  Memory: {:.1} MB", r.memory_mb);
        println!("  Child processes: {}", r.child_processes);
        println!(
            "  Accepting work: {}",
            if r.accepting_work { "yes" } else { "no" }
        );
    }
    if let Some(s) = status {
        println!("  Version: {}", s.version);
        if let Some(socket) = &s.socket {
            println!("  Socket: {socket}");
        }
    }
    if let Some(limits) = limits {
        for line in rate_limit_lines(&limits) {
            println!("{line}");
        }
    }
    Ok(0)
}

/// The `Rate limits:` lines: each instrument's limit (it holds every job) and each job's own
/// (a `shell` limit holds only the job that hit it), with the time left and when it clears.
fn rate_limit_lines(limits: &RateLimitsResult) -> Vec<String> {
    use crate::render::time::{format_compact_duration, format_timestamp};
    let clears = |seconds: f64, until: Option<f64>| {
        let at = until
            .map(|u| {
                let ts = mozart_ipc::time::Timestamp::from_epoch(u);
                format!(" (at {})", format_timestamp(ts.as_str()))
            })
            .unwrap_or_default();
        format!("clears in {}{at}", format_compact_duration(seconds))
    };
    let mut lines: Vec<String> = limits
        .backends
        .iter()
        .filter(|(_, w)| w.seconds_remaining > 0.0)
        .map(|(name, w)| {
            format!(
                "    {name}: every job waits — {}",
                clears(w.seconds_remaining, w.until)
            )
        })
        .collect();
    lines.extend(
        limits
            .job_limits
            .iter()
            .filter(|l| l.seconds_remaining > 0.0)
            .map(|l| {
                format!(
                    "    {}: job {} waits (its own limit) — {}",
                    l.instrument,
                    l.job_id,
                    clears(l.seconds_remaining, Some(l.until))
                )
            }),
    );
    if lines.is_empty() {
        return vec!["  Rate limits: none".into()];
    }
    lines.insert(0, "  Rate limits:".into());
    lines.push("  Lift them with: mozart clear-rate-limits [--instrument NAME]".into());
    lines
}

/// One probe on its own connection; a failed one (or an answer of another shape) just drops
/// its lines (§2.4).
fn ask<R: DeserializeOwned>(socket: &std::path::Path, method: &str) -> Option<R> {
    BlockingClient::connect(socket).ok()?.call(method, ()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mozart_ipc::types::{JobRateLimit, RateLimitWindow};

    #[test]
    fn rate_limit_lines_name_the_instrument_the_job_and_when_each_clears() {
        assert_eq!(
            rate_limit_lines(&RateLimitsResult::default()),
            vec!["  Rate limits: none"]
        );
        let mut limits = RateLimitsResult::default();
        limits.backends.insert(
            "claude-code".into(),
            RateLimitWindow {
                seconds_remaining: 250.0,
                until: Some(1_748_787_180.0),
            },
        );
        limits.job_limits.push(JobRateLimit {
            job_id: "api-sync".into(),
            instrument: "shell".into(),
            seconds_remaining: 598.0,
            until: 1_748_787_300.0,
            reason: Some("HTTP 429".into()),
        });
        assert_eq!(
            rate_limit_lines(&limits),
            vec![
                "  Rate limits:",
                "    claude-code: every job waits — clears in 4m 10s (at 2025-06-01 14:13:00 UTC)",
                "    shell: job api-sync waits (its own limit) — clears in 9m 58s (at 2025-06-01 14:15:00 UTC)",
                "  Lift them with: mozart clear-rate-limits [--instrument NAME]",
            ]
        );
    }
}
