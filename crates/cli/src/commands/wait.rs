//! `mozart wait JOB` (ours, not upstream's): block until a job ends; the exit code is its
//! outcome, so shell scripts and CI can chain on a job.

use std::time::{Duration, Instant};

use mozart_ipc::status::JobStatusResult;
use mozart_ipc::types::JobIdParams;
use mozart_ipc::{methods, BlockingClient, IpcError};
use serde_json::json;

use crate::conductor_client;
use crate::{CliError, Globals, OutputMode};

/// Exit code when the job completed.
pub const EXIT_COMPLETED: i32 = 0;
/// Exit code when the job failed (or is unknown, or the conductor is not running).
pub const EXIT_FAILED: i32 = 1;
/// Exit code when the job was cancelled.
pub const EXIT_CANCELLED: i32 = 3;
/// Exit code when the job paused (it waits for an operator, so waiting ends) — once its
/// running sheets have finished: while `pausing` they still work.
pub const EXIT_PAUSED: i32 = 4;
/// Exit code when `--timeout` ran out first (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;

/// Arguments of `mozart wait`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID of the job to wait for.
    #[arg(value_name = "SCORE_ID")]
    pub job_id: String,
    /// Give up after this many seconds (exit 124).
    #[arg(short = 't', long = "timeout", value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Print the final status as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// The exit code of a job's status document, or `None` while the job goes on by itself
/// (running, queued for a job slot, or paused by `modify --resume` until its new score takes
/// over).
pub fn outcome(doc: &JobStatusResult) -> Option<i32> {
    let code = doc.outcome_code()?;
    debug_assert!([EXIT_COMPLETED, EXIT_FAILED, EXIT_CANCELLED, EXIT_PAUSED].contains(&code));
    Some(code)
}

/// Run `mozart wait`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    crate::render::validate_score_id(&args.job_id)
        .map_err(|e| CliError::Usage(format!("Invalid value: {e}")))?;
    let deadline = args
        .timeout
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map(|t| Instant::now() + Duration::from_secs_f64(t));
    let mut client: Option<BlockingClient> = None;
    let mut delay = Duration::from_millis(50);
    loop {
        let c = match client.take() {
            Some(c) => c,
            None => conductor_client::connect_in(globals, args.output)?,
        };
        let mut c = c;
        let params = JobIdParams {
            job_id: args.job_id.clone(),
            workspace: None,
        };
        let doc = c.call::<_, JobStatusResult>(methods::JOB_STATUS, params);
        let doc = match doc {
            Ok(d) => d,
            Err(IpcError::Rpc { error, .. })
                if matches!(
                    error.code,
                    mozart_ipc::error::JOB_NOT_FOUND | mozart_ipc::error::WORKSPACE_NOT_FOUND
                ) =>
            {
                return Err(CliError::Failed {
                    kind: crate::ErrorKind::Command,
                    message: format!("Score not found: {}", args.job_id),
                    hints: vec!["Run 'mozart list' to see available scores.".into()],
                    mode: args.output,
                });
            }
            Err(err) => return Err(conductor_client::call_error(err, args.output)),
        };
        client = Some(c);
        let status = doc.shown_status().to_string();
        if let Some(code) = outcome(&doc) {
            report(&args, &status, &doc);
            return Ok(code);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            if args.output.is_json() {
                crate::output::print_json(
                    &json!({"job_id": args.job_id, "status": status, "timed_out": true}),
                );
            } else {
                println!("Timed out waiting for {} (still {status})", args.job_id);
            }
            return Ok(EXIT_TIMEOUT);
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

fn report(args: &Args, status: &str, doc: &JobStatusResult) {
    if args.output.is_json() {
        crate::output::print_json(&json!({
            "job_id": args.job_id,
            "status": status,
            "error_message": doc.error_message(),
        }));
    } else if !matches!(status, "completed") {
        let why = doc
            .error_message()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        println!("{} {status}{why}", args.job_id);
    } else {
        println!("{} completed", args.job_id);
    }
}
