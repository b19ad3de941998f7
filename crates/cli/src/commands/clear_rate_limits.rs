//! `mozart clear-rate-limits` (cli.md §2.5): forget the conductor's active rate limits.

use mozart_ipc::methods;
use mozart_ipc::types::{ClearRateLimitsParams, ClearRateLimitsResult};

use crate::conductor_client;
use crate::{CliError, ErrorKind, Globals, OutputMode};

/// Arguments of `mozart clear-rate-limits`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this instrument (default: all instruments).
    #[arg(short = 'i', long = "instrument", value_name = "TEXT")]
    pub instrument: Option<String>,
    /// Output the raw result as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart clear-rate-limits`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    // This command words "not running" its own way (cli.md §1.5).
    let not_running = || {
        CliError::of(
            ErrorKind::NotRunning,
            "Mozart conductor is not running",
            vec![
                "Start the conductor: mozart start".into(),
                "Check status: mozart conductor-status".into(),
            ],
            args.output,
        )
    };
    let mut client = conductor_client::connect_in(globals, args.output).map_err(|err| {
        if err.is_untrusted() {
            err
        } else {
            not_running()
        }
    })?;
    let params = ClearRateLimitsParams {
        instrument: args.instrument.clone(),
    };
    let result: ClearRateLimitsResult = client
        .call(methods::DAEMON_CLEAR_RATE_LIMITS, params)
        .map_err(|err| match conductor_client::call_error(err, args.output) {
            CliError::Failed {
                kind,
                message,
                mode,
                hints,
            } if hints.is_empty() => CliError::Failed {
                kind,
                message,
                mode,
                hints: vec!["Check conductor status: mozart conductor-status".into()],
            },
            other => other,
        })?;
    if args.output.is_json() {
        crate::output::print_json(&serde_json::json!({
            "cleared": result.cleared,
            "instrument": result.instrument,
        }));
        return Ok(0);
    }
    let target = args
        .instrument
        .as_deref()
        .map_or_else(|| "all instruments".to_string(), str::to_string);
    if result.cleared > 0 {
        println!(
            "Cleared {} on {target}",
            mozart_config::plural(result.cleared, "rate limit", "rate limits")
        );
    } else {
        println!("No active rate limits on {target}");
    }
    Ok(0)
}
