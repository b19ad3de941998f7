//! `mozart pause SCORE_ID` (cli.md §3.3).

use std::path::PathBuf;

use mozart_ipc::methods;
use mozart_ipc::types::PauseResult;
use serde_json::json;

use super::status::{check_score_id, coded_error, job_call, job_params, JobCallError};
use crate::output::print_json;
use crate::{CliError, Globals, OutputMode};

/// Message of a delivered pause (reported before the job actually pauses, [QUIRK] §3.3).
const PAUSE_SENT: &str = "Pause signal sent. Score will pause at next sheet boundary.";

/// Arguments of `mozart pause`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to pause.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: String,
    /// Workspace directory containing the score state (debug override).
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
    /// No effect: pause returns once the signal is sent (upstream waits only in a workspace
    /// fallback this CLI does not have). To wait until the score is paused: mozart wait
    /// SCORE_ID (exit 4 when paused).
    #[arg(long = "wait")]
    pub wait: bool,
    /// No effect (see --wait); kept for upstream's command lines.
    #[arg(short = 't', long = "timeout", default_value_t = 60)]
    pub timeout: u64,
    /// Output result as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Cancel immediately instead of pausing at a sheet boundary.
    #[arg(short = 'f', long = "force")]
    pub force: bool,
}

/// Run `mozart pause`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    check_score_id(&args.score_id)?;
    let id = args.score_id.as_str();
    if args.force {
        return super::cancel::cancel(globals, id, args.output);
    }
    let result: PauseResult = match job_call(
        globals,
        methods::JOB_PAUSE,
        job_params(id, None),
        args.output,
    ) {
        Ok(result) => result,
        Err(JobCallError::Cli(_)) if args.workspace.is_some() => {
            return Err(super::resume::no_workspace_fallback("pause", args.output));
        }
        Err(JobCallError::Cli(err)) => return Err(err),
        Err(err) => {
            return Err(coded_error(
                "E501",
                &err.message(),
                &["Run 'mozart list' to see available scores."],
                args.output,
                &[],
            ))
        }
    };
    if result.paused {
        if args.output.is_json() {
            print_json(&json!({
                "success": true,
                "job_id": id,
                "status": "paused",
                "message": PAUSE_SENT,
                "acknowledged": true,
                "withdrawn": result.withdrawn,
            }));
        } else {
            println!("Pause signal sent to score '{id}'.");
            crate::selector::say(format!(
                "No new sheet starts; running sheets finish their attempt first ('mozart status {id}' says pausing until then)."
            ));
            if !result.withdrawn.is_empty() {
                let sheets: Vec<String> = result
                    .withdrawn
                    .iter()
                    .map(|w| format!("sheet {} (Slurm job {})", w.sheet_num, w.remote_id))
                    .collect();
                println!(
                    "Withdrawn from Slurm's queue before they started: {}. They are pending again (no retry spent); resuming submits them anew.",
                    sheets.join(", ")
                );
            }
            println!();
            crate::selector::say(format!("To resume: mozart resume {id}"));
            crate::selector::say(format!(
                "To resume with new config: mozart resume {id} --config new.yaml"
            ));
        }
        return Ok(0);
    }
    let refused = mozart_client::hints::pause_refused(id, result.error);
    let hints: Vec<&str> = refused.hints.iter().map(String::as_str).collect();
    Err(coded_error(
        "E502",
        &refused.message,
        &hints,
        args.output,
        &[("job_id", json!(id))],
    ))
}
