//! `mozart instruments list|check`.

use crate::{CliError, Globals};

/// Subcommands of `mozart instruments`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the instruments Mozart knows.
    List {},
    /// Check that an instrument is usable here.
    Check {},
}

/// Run `mozart instruments ...`.
pub fn run(_globals: &Globals, _command: Command) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("instruments"))
}
