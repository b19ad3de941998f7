//! `mozart cancel SCORE_ID` (cli.md §3.5).

use mozart_ipc::methods;
use mozart_ipc::types::CancelResult;
use serde_json::json;

use super::status::{check_score_id, failed, job_call, job_params, JobCallError};
use crate::output::print_json;
use crate::{CliError, ErrorKind, Globals, OutputMode};

/// Arguments of `mozart cancel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to cancel.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: String,
    /// Output result as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart cancel`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    check_score_id(&args.score_id)?;
    cancel(globals, &args.score_id, args.output)
}

/// Cancel one score (also `pause --force`, §3.3).
pub(crate) fn cancel(globals: &Globals, id: &str, mode: OutputMode) -> Result<i32, CliError> {
    let result: CancelResult =
        match job_call(globals, methods::JOB_CANCEL, job_params(id, None), mode) {
            Ok(result) => result,
            Err(JobCallError::Cli(err)) => return Err(err),
            Err(err) => {
                return Err(failed(
                    err.message(),
                    &["Check conductor status: mozart conductor-status"],
                    mode,
                ))
            }
        };
    if result.cancelled {
        if mode.is_json() {
            print_json(&json!({"success": true, "job_id": id}));
        } else {
            println!("Score '{id}' cancelled.");
        }
        Ok(0)
    } else {
        let missed = mozart_client::hints::cancel_missed(id);
        Err(CliError::of(
            ErrorKind::Command,
            missed.message,
            missed.hints,
            mode,
        ))
    }
}
