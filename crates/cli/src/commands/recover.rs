//! `mozart recover SCORE_ID` (hidden upstream, cli.md §5.5): re-run the validations of a
//! job's failed sheets and mark those that now pass as completed.
//!
//! Not in this port yet: upstream's version changes only a local copy of the state when
//! routed through the conductor ([BUG] §5.5), so a faithful port needs a conductor method
//! that re-validates and saves; until it exists the command says so plainly (exit 1)
//! instead of pretending to recover anything.

use crate::{CliError, Globals};

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
pub fn run(_globals: &Globals, args: Args) -> Result<i32, CliError> {
    crate::render::validate_score_id(&args.job_id)
        .map_err(|e| CliError::Usage(format!("Invalid value: {e}")))?;
    Err(CliError::Failed {
        message: "'mozart recover' is not implemented yet in this port".into(),
        hints: vec![format!(
            "To run the failed sheets again: mozart resume {}",
            args.job_id
        )],
        json: false,
    })
}
