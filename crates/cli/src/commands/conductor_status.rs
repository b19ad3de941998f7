//! `mozart conductor-status` (cli.md §2.4): lock/PID first, then health, readiness, status.

use std::path::PathBuf;

use mozart_conductor::RunState;
use mozart_ipc::types::{DaemonStatus, HealthResult, ReadyResult};
use mozart_ipc::{methods, BlockingClient};
use serde::de::DeserializeOwned;

use crate::conductor_client::{self, conductor_state};
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
    let pid = match conductor_state(&paths, args.output)? {
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
    let pid = pid.or_else(|| health.as_ref().map(|h| h.pid));
    if args.output.is_json() {
        crate::output::print_json(&serde_json::json!({
            "running": true,
            "pid": pid,
            "socket": paths.socket.display().to_string(),
            "health": health,
            "ready": ready,
            "status": status,
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
    Ok(0)
}

/// One probe on its own connection; a failed one (or an answer of another shape) just drops
/// its lines (§2.4).
fn ask<R: DeserializeOwned>(socket: &std::path::Path, method: &str) -> Option<R> {
    BlockingClient::connect(socket).ok()?.call(method, ()).ok()
}
