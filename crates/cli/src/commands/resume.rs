//! `mozart resume SCORE_ID` (cli.md §3.2).

use std::path::PathBuf;

use mozart_ipc::methods;
use mozart_ipc::types::{JobResponse, JobResponseStatus, ResumeParams};

use super::status::{absolute_text, check_score_id, failed, job_call, JobCallError};
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart resume`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to resume.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: String,
    /// New score file to resume with.
    #[arg(short = 'c', long = "config", value_name = "PATH", value_parser = existing_file)]
    pub config: Option<PathBuf>,
    /// Workspace directory containing the score state (debug override).
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
    /// Resume even a completed score (workspace fallback only).
    #[arg(short = 'f', long = "force")]
    pub force: bool,
    /// Enable escalation (workspace fallback only).
    #[arg(short = 'e', long = "escalation")]
    pub escalation: bool,
    /// Use the stored config snapshot instead of re-reading the score file.
    #[arg(long = "no-reload")]
    pub no_reload: bool,
    /// Enable self-healing (workspace fallback only).
    #[arg(short = 'H', long = "self-healing")]
    pub self_healing: bool,
    /// Auto-confirm self-healing fixes (workspace fallback only).
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
}

/// clap validator: the path must exist (usage error, exit 2, otherwise — cli.md §1.1).
pub(crate) fn existing_file(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!("path '{text}' does not exist."))
    }
}

/// The explicit error for the in-process workspace fallback this port does not have.
pub(crate) fn no_workspace_fallback(command: &str, mode: OutputMode) -> CliError {
    failed(
        format!(
            "Mozart conductor is not running, and '{command} --workspace' without a \
             conductor is not supported in this port."
        ),
        &["Start it with: mozart start"],
        mode,
    )
}

/// Run `mozart resume`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    check_score_id(&args.score_id)?;
    let id = args.score_id.as_str();
    // Upstream sends `--config` as typed ([QUIRK] §3.2); a relative path would then resolve
    // in the conductor's directory, so this port sends it absolute (§10).
    let params = ResumeParams {
        job_id: id.to_string(),
        workspace: args.workspace.as_deref().map(absolute_text),
        config_path: args.config.as_deref().map(absolute_text),
        no_reload: args.no_reload,
    };
    let list_hint = "Run 'mozart list' to see available scores.";
    let result: JobResponse =
        match job_call(globals, methods::JOB_RESUME, params, OutputMode::Human) {
            Ok(result) => result,
            Err(JobCallError::Cli(_)) if args.workspace.is_some() => {
                return Err(no_workspace_fallback("resume", OutputMode::Human))
            }
            Err(JobCallError::Cli(err)) => return Err(err),
            Err(err) => return Err(failed(err.message(), &[list_hint], OutputMode::Human)),
        };
    let message = result.message.unwrap_or_default();
    if result.status == JobResponseStatus::Accepted {
        println!("Resume accepted for score '{id}'.");
        if !message.is_empty() {
            println!("{message}");
        }
        println!();
        crate::selector::say(format!("Monitor progress: mozart status {id}"));
        return Ok(0);
    }
    let completed = message.contains(&format!("Score '{id}' is completed,"));
    let mut refused = mozart_client::hints::resume_refused(id, Some(message));
    if completed {
        // Nothing is left to resume: say how to run it again instead.
        refused.hints.insert(0, run_again_hint(globals, id));
    }
    Err(CliError::failed(refused.message, refused.hints))
}

/// How to run a completed job again: its score file from the start.
fn run_again_hint(globals: &Globals, id: &str) -> String {
    let file = super::status::fetch(
        globals,
        id,
        None,
        mozart_ipc::sheet_view::SheetQuery::summary(0),
        OutputMode::Human,
    )
    .ok()
    .and_then(|status| match status {
        mozart_ipc::status::JobStatusResult::Checkpoint(cp) => cp.config_path.clone(),
        mozart_ipc::status::JobStatusResult::Record(entry) => Some(entry.config_path().to_string()),
    })
    .unwrap_or_else(|| format!("{id}.yaml"));
    format!("Every sheet of it is done. To run it again from the start: mozart run {file} --fresh")
}
