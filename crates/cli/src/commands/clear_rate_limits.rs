//! `mozart clear-rate-limits` (cli.md §2.5): forget the conductor's active rate limits.

use mozart_ipc::methods;
use mozart_ipc::types::{ClearRateLimitsParams, ClearRateLimitsResult};

use crate::conductor_client;
use crate::{CliError, Globals};

/// Arguments of `mozart clear-rate-limits`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this instrument (default: all instruments).
    #[arg(short = 'i', long = "instrument", value_name = "TEXT")]
    pub instrument: Option<String>,
    /// Output the raw result as JSON.
    #[arg(short = 'j', long = "json")]
    pub json: bool,
}

/// Run `mozart clear-rate-limits`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    // This command words "not running" its own way (cli.md §1.5).
    let not_running = || CliError::Failed {
        message: "Mozart conductor is not running".into(),
        hints: vec![
            "Start the conductor: mozart start".into(),
            "Check status: mozart conductor-status".into(),
        ],
        json: args.json,
    };
    let mut client = conductor_client::connect_json(globals, args.json).map_err(|err| {
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
        .map_err(|err| match conductor_client::call_error(err, args.json) {
            CliError::Failed {
                message,
                json,
                hints,
            } if hints.is_empty() => CliError::Failed {
                message,
                json,
                hints: vec!["Check conductor status: mozart conductor-status".into()],
            },
            other => other,
        })?;
    if args.json {
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
        println!("Cleared {} rate limit(s) on {target}", result.cleared);
    } else {
        println!("No active rate limits on {target}");
    }
    Ok(0)
}
