//! `mozart dashboard`: serve the live web UI (crate `mozart-dashboard`).

use std::net::IpAddr;

use crate::{conductor_client, CliError, Globals};

/// Arguments of `mozart dashboard`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port to listen on (0 = any free port; the URL is printed).
    #[arg(short = 'p', long = "port", default_value_t = 8000)]
    pub port: u16,
    /// Address to bind. Anything but loopback requires --token.
    #[arg(long = "host", default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Access token (at least 16 characters) to use instead of the owner's token file
    /// ($MOZART_HOME/dashboard.token, made on first use, readable by you only). Every
    /// request needs the token either way. Required to bind a non-loopback address. On the
    /// command line it is visible to every local user (ps): prefer MOZART_DASHBOARD_TOKEN.
    #[arg(long = "token", env = "MOZART_DASHBOARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Run `mozart dashboard` until Ctrl-C.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    // A command line is every local user's to read (`ps`, /proc/PID/cmdline): a token given
    // there is theirs too. Said, not refused: the environment variable is the way.
    if std::env::args().any(|a| a == "--token" || a.starts_with("--token=")) {
        eprintln!(
            "Warning: a token given with --token is visible to every user of this machine (ps shows command lines), and whoever has it controls your jobs. Pass it as MOZART_DASHBOARD_TOKEN=… (or dashboard.token in conductor.yaml) instead."
        );
    }
    let paths = conductor_client::paths(globals, None)?;
    let options = mozart_dashboard::Options {
        host: args.host,
        port: args.port,
        token: args.token,
        home: paths.home,
        socket: paths.socket,
        learning_db: paths.learning_db,
    };
    mozart_dashboard::run_blocking(options).map_err(|e| CliError::failed(e.to_string(), vec![]))?;
    Ok(0)
}
