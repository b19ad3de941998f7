//! `mozart mcp`: a Model Context Protocol server on stdio (crate `mozart-mcp`).

use crate::{conductor_client, CliError, Globals};

/// Arguments of `mozart mcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory inline scores submitted through the `run` tool are saved in
    /// (default: $MOZART_HOME/mcp-scores).
    #[arg(long = "scores-dir", value_name = "DIR")]
    pub scores_dir: Option<std::path::PathBuf>,
}

/// Run `mozart mcp` until the client closes stdin.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let paths = conductor_client::paths(globals, None)?;
    let options = mozart_mcp::Options {
        socket: paths.socket,
        scores_dir: args
            .scores_dir
            .unwrap_or_else(|| paths.home.join("mcp-scores")),
    };
    mozart_mcp::run_blocking(options).map_err(|e| CliError::failed(e.to_string(), vec![]))?;
    Ok(0)
}
