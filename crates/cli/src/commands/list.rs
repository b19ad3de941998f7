//! `mozart list` (cli.md §4.2).

use std::path::PathBuf;

use mozart_ipc::methods;
use mozart_ipc::status::JobList;

use super::status::job_call;
use crate::output::print_json;
use crate::render::{jobs, Style};
use crate::{CliError, Globals};

/// Arguments of `mozart list`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show all scores including completed, failed, and cancelled.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Filter by score status (queued, running, completed, failed, paused).
    #[arg(short = 's', long = "status", value_name = "TEXT")]
    pub status: Option<String>,
    /// Maximum number of scores to display.
    #[arg(short = 'l', long = "limit", default_value_t = 20)]
    pub limit: usize,
    /// Output as JSON array for machine parsing.
    #[arg(long = "json")]
    pub json: bool,
    /// Reserved for future per-workspace filtering.
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
}

/// Run `mozart list`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let all: JobList =
        job_call(globals, methods::JOB_LIST, (), args.json).map_err(|e| e.into_cli(args.json))?;
    let shown = jobs::filter_list(&all.0, args.all, args.status.as_deref(), args.limit);
    if args.json {
        print_json(&shown);
    } else {
        print!(
            "{}",
            jobs::render_list(
                &shown,
                args.all,
                args.status.as_deref(),
                &Style::for_stdout()
            )
        );
    }
    Ok(0)
}
