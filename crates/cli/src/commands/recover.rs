//! `mozart recover SCORE_ID` (hidden upstream, cli.md §5.5): re-run the validations of a
//! finished job's failed sheets and mark those that now pass as completed, so `mozart resume`
//! runs only what is left. The conductor runs the validations and saves the result
//! (`job.recover`); upstream changed a local copy that was never saved ([BUG] §5.5).

use mozart_ipc::methods;
use mozart_ipc::status::RecoverResult;
use mozart_ipc::types::RecoverParams;

use super::status::{absolute_text, check_score_id, failed, job_call, JobCallError};
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart recover` (upstream's options, so scripts parse).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID of the job.
    #[arg(value_name = "SCORE_ID")]
    pub job_id: String,
    /// Only this sheet (default: every failed sheet).
    #[arg(short = 's', long = "sheet", value_name = "INTEGER")]
    pub sheet: Option<u32>,
    /// Workspace of the job (debug fallback).
    #[arg(short = 'w', long = "workspace", value_name = "DIRECTORY", hide = true)]
    pub workspace: Option<std::path::PathBuf>,
    /// Report what would be recovered without changing anything.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
}

/// Run `mozart recover`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    check_score_id(&args.job_id)?;
    let params = RecoverParams {
        job_id: args.job_id.clone(),
        workspace: args.workspace.as_deref().map(absolute_text),
        sheet_num: args.sheet,
        dry_run: args.dry_run,
    };
    let result: RecoverResult =
        match job_call(globals, methods::JOB_RECOVER, params, OutputMode::Human) {
            Ok(result) => result,
            // Upstream's words for an unknown job, as `history`, `errors` and `diagnose` say.
            Err(JobCallError::Job(message))
                if message == format!("Job '{}' not found", args.job_id) =>
            {
                return Err(failed(
                    format!("Score not found: {}", args.job_id),
                    &["Run 'mozart list' to see available scores."],
                    OutputMode::Human,
                ))
            }
            Err(e) => return Err(e.into_cli(OutputMode::Human)),
        };
    let sheets = result.recovery.unwrap_or_default();
    if sheets.is_empty() {
        println!("No failed sheets to recover");
        return Ok(0);
    }
    for sheet in &sheets {
        println!("Sheet {}:", sheet.sheet_num);
        for check in &sheet.checks {
            let mark = match check.status.as_str() {
                "passed" => "✓",
                "skipped" => "-",
                _ => "✗",
            };
            match &check.error {
                Some(error) if check.status != "passed" => {
                    println!("  {mark} {}: {error}", check.description)
                }
                _ => println!("  {mark} {}", check.description),
            }
        }
        if sheet.checks.is_empty() {
            println!("  (no validation rules apply: nothing proves the sheet's work)");
        }
    }
    let recovered = sheets.iter().filter(|s| s.recovered).count();
    if args.dry_run {
        let would = sheets.iter().filter(|s| s.passed).count();
        println!(
            "{} would be recovered",
            mozart_config::plural(would, "sheet", "sheets")
        );
        println!("Dry run complete - no changes made");
    } else if recovered > 0 {
        println!(
            "Recovered {}",
            mozart_config::plural(recovered, "sheet", "sheets")
        );
        crate::selector::say(format!(
            "Run 'mozart resume {}' to run what is left.",
            args.job_id
        ));
    } else {
        println!("No sheets could be recovered");
    }
    Ok(0)
}
