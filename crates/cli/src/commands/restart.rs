//! `mozart restart` (cli.md §2.3): stop if running (not running is fine — upstream's exit 1
//! there is a [BUG]), then start.

use mozart_ipc::paths::ConductorPaths;

use crate::commands::{start, stop};
use crate::{CliError, Globals};

/// Arguments of `mozart restart` (those of `mozart start`, plus `--force` for the stop).
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct Args {
    /// Start options.
    #[command(flatten)]
    pub start: start::Args,
    /// Stop with SIGKILL instead of a graceful shutdown.
    #[arg(long = "force")]
    pub force: bool,
    /// Restart even when jobs are running, without asking (needed when there is no
    /// terminal to ask on). Running sheets get shutdown_timeout_seconds to finish; one still
    /// running then runs again once the new conductor has started.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
}

/// Run `mozart restart`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    // The file's warnings are said by the start below.
    let (_, paths, _) = start::prepare_noting(globals, &args.start)?;
    // The home's conductor listening on another socket than the one named is stopped there:
    // the new one starts on the named socket.
    let moved = crate::conductor_client::elsewhere(&paths, true, crate::OutputMode::Human)
        .is_some()
        .then(|| paths.running_socket())
        .flatten();
    let stop_paths = match &moved {
        Some(real) => ConductorPaths {
            socket: real.clone(),
            ..paths.clone()
        },
        None => paths.clone(),
    };
    match stop::stop_conductor(
        &stop_paths,
        args.start.socket.is_some() && moved.is_none(),
        args.force,
        args.yes,
        &match &args.start.socket {
            Some(socket) => format!("restart --socket {}", socket.display()),
            None => "restart".to_string(),
        },
    )? {
        stop::StopOutcome::Aborted => {
            println!("Aborted.");
            return Ok(1);
        }
        stop::StopOutcome::NotRunning => println!("{} was not running", paths.who()),
        stop::StopOutcome::Stopped => {}
    }
    start::run(globals, args.start)
}
