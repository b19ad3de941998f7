//! `mozart clear` (cli.md §4.3).

use std::io::{BufRead, Write};

use mozart_ipc::methods;
use mozart_ipc::types::{ClearParams, ClearResult};

use super::status::{failed, job_call, JobCallError};
use crate::{CliError, Globals, OutputMode};

/// Statuses `clear` accepts (sorted, as the hint lists them).
const VALID_STATUSES: [&str; 4] = ["cancelled", "completed", "failed", "paused"];
/// What `clear` removes when no `--status` is given.
const DEFAULT_STATUSES: [&str; 3] = ["completed", "failed", "cancelled"];

/// Arguments of `mozart clear`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Specific score ID(s) to clear. Can be repeated.
    #[arg(short = 'j', long = "score", value_name = "TEXT")]
    pub score: Vec<String>,
    /// Status(es) to clear: failed, completed, cancelled, paused. Can be repeated.
    #[arg(short = 's', long = "status", value_name = "TEXT")]
    pub status: Vec<String>,
    /// Only clear scores older than this many seconds.
    #[arg(long = "older-than", value_name = "FLOAT")]
    pub older_than: Option<f64>,
    /// Skip confirmation prompt.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
}

/// A float as Python prints it (`3600.0`, `0.5`), for the prompt's `older than` note.
fn py_float(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// The confirmation question (without the ` [y/N]: ` suffix).
pub(crate) fn prompt_text(ids: &[String], statuses: &[String], older_than: Option<f64>) -> String {
    let target = if ids.is_empty() {
        format!("all [{}] scores", statuses.join(", "))
    } else {
        ids.join(", ")
    };
    let age = match older_than {
        Some(s) if s != 0.0 => format!(" older than {}s", py_float(s)),
        _ => String::new(),
    };
    format!("Clear {target}{age}?")
}

/// The answer to `question`: `Some(yes?)`, or `None` when there is none to read (standard
/// input closed or unreadable, as in a script or a cron job).
fn confirm(question: &str) -> Option<bool> {
    print!("{question} [y/N]: ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    match std::io::stdin().lock().read_line(&mut answer) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes")),
    }
}

/// Run `mozart clear`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let statuses: Vec<String> = if args.status.is_empty() {
        DEFAULT_STATUSES.iter().map(|s| s.to_string()).collect()
    } else {
        args.status.clone()
    };
    let invalid: Vec<&str> = statuses
        .iter()
        .map(String::as_str)
        .filter(|s| !VALID_STATUSES.contains(s))
        .collect();
    if !invalid.is_empty() {
        return Err(failed(
            format!("Invalid status(es): {}.", invalid.join(", ")),
            &[
                &format!("Valid values: {}", VALID_STATUSES.join(", ")),
                "Example: mozart clear --status failed --status cancelled",
            ],
            OutputMode::Human,
        ));
    }
    if !args.yes {
        match confirm(&prompt_text(&args.score, &statuses, args.older_than)) {
            Some(true) => {}
            Some(false) => {
                println!("Cancelled.");
                return Ok(0);
            }
            // No answer is not a "no": a script that forgot --yes must not read exit 0 as
            // "cleared" (upstream's prompt aborts with exit 1 too).
            None => {
                println!();
                return Err(failed(
                    "No answer to the confirmation (standard input is closed): nothing was cleared.",
                    &["Clear without asking: add --yes (-y)"],
                    OutputMode::Human,
                ));
            }
        }
    }
    let params = ClearParams {
        statuses: Some(statuses),
        older_than_seconds: args.older_than,
        // An empty `job_ids` list breaks upstream's SQL ([BUG] conductor.md §6.12).
        job_ids: (!args.score.is_empty()).then(|| args.score.clone()),
    };
    let result: ClearResult = match job_call(globals, methods::JOB_CLEAR, params, OutputMode::Human)
    {
        Ok(result) => result,
        Err(JobCallError::Cli(err)) => return Err(err),
        Err(err) => {
            return Err(failed(
                err.message(),
                &[
                    "Check conductor status: mozart conductor-status",
                    "The conductor must be running to clear scores.",
                ],
                OutputMode::Human,
            ))
        }
    };
    match result.deleted {
        0 if !result.hooks_running.is_empty() || !result.held_paused.is_empty() => {}
        0 => println!("No matching scores to clear."),
        n => println!("Cleared {}.", mozart_config::plural(n, "score", "scores")),
    }
    for id in &result.held_paused {
        println!(
            "Not cleared: {id} — it was paused while this conductor runs, which would resume it (cancel it first: mozart cancel {id}, then clear it)"
        );
    }
    for id in &result.hooks_running {
        println!(
            "Not cleared: {id} — its on_success hooks are still running (wait for them, or stop them with: mozart cancel {id})"
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_names_ids_or_statuses_and_the_age() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            prompt_text(&[], &s(&["completed", "failed", "cancelled"]), None),
            "Clear all [completed, failed, cancelled] scores?"
        );
        assert_eq!(
            prompt_text(&s(&["a", "b"]), &s(&["failed"]), Some(3600.0)),
            "Clear a, b older than 3600.0s?"
        );
        assert_eq!(
            prompt_text(&[], &s(&["paused"]), Some(0.5)),
            "Clear all [paused] scores older than 0.5s?"
        );
    }
}
