//! `mozart modify SCORE_ID --config PATH` (cli.md §3.4).

use std::path::PathBuf;

use mozart_ipc::methods;
use mozart_ipc::status::JobStatusResult;
use mozart_ipc::types::{JobResponse, JobResponseStatus, ModifyParams, PauseResult};
use serde_json::json;

use super::resume::{existing_file, no_workspace_fallback};
use super::status::{
    absolute_text, check_score_id, coded_error, failed, job_call, job_params, JobCallError,
};
use crate::output::print_json;
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart modify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to modify.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: String,
    /// New score file.
    #[arg(short = 'c', long = "config", value_name = "PATH", value_parser = existing_file)]
    pub config: PathBuf,
    /// Workspace directory containing the score state (debug override).
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
    /// Resume with the new config: a running score is paused, the sheets it is playing
    /// finish, then it resumes with the new config (the conductor does this on its own).
    #[arg(short = 'r', long = "resume")]
    pub resume: bool,
    /// Wait for the pause to be acknowledged (workspace fallback only).
    #[arg(long = "wait")]
    pub wait: bool,
    /// Timeout in seconds for --wait.
    #[arg(short = 't', long = "timeout", default_value_t = 60)]
    pub timeout: u64,
    /// Output result as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart modify`: load the new score, read the job's status, pause it (or refuse),
/// then let the conductor resume it with the new score or print how to.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    check_score_id(&args.score_id)?;
    let id = args.score_id.as_str();
    let mode = args.output;
    let config_text = args.config.display().to_string();

    // 1. The new score must load before anything is touched (§3.4 step 1).
    let score = match mozart_config::load_score(&args.config) {
        Ok(score) => score,
        Err(err) => {
            return Err(coded_error(
                "E505",
                &format!("Invalid config file: {err}"),
                &["Check YAML syntax and schema in your score file."],
                mode,
                &[("job_id", json!(id)), ("config_file", json!(config_text))],
            ))
        }
    };
    let total_sheets = mozart_config::plan::total_sheets(&score.config.sheet);
    let ws = args.workspace.as_deref().map(absolute_text);

    // 2. Current status; 3. pause a running score, refuse states that cannot be modified.
    let status = current_status(globals, &args, ws.as_deref())?;
    pause_or_refuse(globals, &args, &status)?;

    // 4.
    if !mode.is_json() {
        println!("Config validated: {config_text}");
        println!("Score name: {}", score.config.name);
        println!("Sheets: {total_sheets}");
    }

    // 5. Let the conductor do pause → resume atomically.
    if args.resume {
        return modify_and_resume(globals, &args, ws.as_deref());
    }

    // 6. Instructions only.
    print_instructions(id, &status, &config_text, mode);
    Ok(0)
}

/// The job's status string. A metadata dict (no checkpoint yet) still carries `status`;
/// upstream crashes on it ([BUG] §3.4 step 2).
fn current_status(globals: &Globals, args: &Args, ws: Option<&str>) -> Result<String, CliError> {
    let (id, mode) = (args.score_id.as_str(), args.output);
    // Its state, not its sheets (a full document carries every sheet of the job).
    let params = mozart_ipc::sheet_view::StatusParams {
        job_id: id.to_string(),
        workspace: ws.map(str::to_string),
        sheets: Some(mozart_ipc::sheet_view::SheetQuery::state_only()),
    };
    let current: JobStatusResult = match job_call(globals, methods::JOB_STATUS, params, mode) {
        Ok(current) => current,
        Err(JobCallError::Cli(_)) if args.workspace.is_some() => {
            return Err(no_workspace_fallback("modify", mode))
        }
        Err(JobCallError::Cli(err)) => return Err(err),
        Err(err) => {
            return Err(coded_error(
                "E501",
                &err.message(),
                &[
                    "Run 'mozart list' to see available scores.",
                    "Check conductor status: mozart conductor-status",
                ],
                mode,
                &[("job_id", json!(id))],
            ))
        }
    };
    Ok(current.status().to_string())
}

/// Pause a running score; refuse one that is neither running nor stopped.
fn pause_or_refuse(globals: &Globals, args: &Args, status: &str) -> Result<(), CliError> {
    let (id, mode) = (args.score_id.as_str(), args.output);
    if status == "running" && args.resume {
        // `job.modify` pauses a running job and books its resume in one step: nobody (a
        // `mozart wait`, a watcher) sees it paused with nothing pending in between, as they
        // would after a separate `job.pause`.
        return Ok(());
    }
    if status == "running" {
        let paused: Result<PauseResult, _> =
            job_call(globals, methods::JOB_PAUSE, job_params(id, None), mode);
        match paused {
            Ok(r) if r.paused => {
                if !mode.is_json() {
                    println!("Pause signal sent to score '{id}'.");
                }
            }
            Err(JobCallError::Cli(err)) if !args.resume => return Err(err),
            _ if args.resume => {
                if !mode.is_json() {
                    println!("Score is no longer running, skipping pause.");
                }
            }
            Ok(r) => {
                let mut msg = format!("Failed to pause score '{id}'");
                if let Some(e) = r.error.filter(|e| !e.is_empty()) {
                    msg.push_str(&format!(": {e}"));
                }
                return Err(coded_error(
                    "E503",
                    &msg,
                    &[
                        &format!("Check score status: mozart status {id}"),
                        "Only running scores can be paused.",
                    ],
                    mode,
                    &[("job_id", json!(id))],
                ));
            }
            Err(err) => {
                return Err(coded_error(
                    "E503",
                    &err.message(),
                    &[
                        "Check conductor status: mozart conductor-status",
                        "Restart if needed: mozart restart",
                    ],
                    mode,
                    &[("job_id", json!(id))],
                ))
            }
        }
    } else if !matches!(status, "paused" | "failed" | "cancelled") {
        let hint: &[&str] = match status {
            "completed" => &["Score has already completed."],
            "pending" | "queued" => &["Use 'mozart run' to start the score."],
            _ => &[],
        };
        return Err(coded_error(
            "E502",
            &format!("Score '{id}' is {status}, cannot modify."),
            hint,
            mode,
            &[("job_id", json!(id)), ("status", json!(status))],
        ));
    }

    Ok(())
}

/// `--resume`: the conductor applies the new score once the paused job's sheets finish.
fn modify_and_resume(globals: &Globals, args: &Args, ws: Option<&str>) -> Result<i32, CliError> {
    let (id, mode) = (args.score_id.as_str(), args.output);
    // Absolute, unlike upstream's as-typed path ([QUIRK] §3.2, §10).
    let params = ModifyParams {
        job_id: id.to_string(),
        config_path: Some(absolute_text(&args.config)),
        workspace: ws.map(str::to_string),
    };
    let result: JobResponse = match job_call(globals, methods::JOB_MODIFY, params, mode) {
        Ok(result) => result,
        Err(JobCallError::Cli(err)) => return Err(err),
        Err(err) => {
            return Err(coded_error(
                "E506",
                &err.message(),
                &[
                    "Check conductor status: mozart conductor-status",
                    "The conductor must be running to modify a score.",
                ],
                mode,
                &[("job_id", json!(id))],
            ))
        }
    };
    if result.status == JobResponseStatus::Rejected {
        let msg = result.message.as_deref().unwrap_or("Modify rejected");
        return Err(failed(
            msg,
            &[
                "The score must be paused before modifying its config.",
                &format!("Try: mozart pause {id} && mozart modify {id} --config <path> --resume"),
            ],
            mode,
        ));
    }
    if mode.is_json() {
        print_json(&result);
    } else {
        let msg = result.message.as_deref().unwrap_or("Modify accepted");
        println!("{msg}");
        crate::selector::say(format!("\nMonitor: mozart status {id}"));
    }
    Ok(0)
}

/// Without `--resume`: how to resume with the new score (or the old one).
fn print_instructions(id: &str, status: &str, config_text: &str, mode: OutputMode) {
    if mode.is_json() {
        print_json(&json!({
            "success": true,
            "job_id": id,
            "status": status,
            "config_validated": true,
            "config_file": config_text,
            "message": "Config validated. Score paused and ready to resume.",
        }));
    } else {
        println!();
        println!("When ready to resume with new config:");
        crate::selector::say(format!("  mozart resume {id} --config {config_text}"));
        println!();
        // A plain `resume` reads the score file again (which may be the file just edited):
        // the score as submitted is `--no-reload`'s.
        println!("Or to resume with the score as it was submitted:");
        crate::selector::say(format!("  mozart resume {id} --no-reload"));
    }
}
