//! `mozart conductor-status`.

use crate::{CliError, Globals};

/// Arguments of `mozart conductor-status`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart conductor-status`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("conductor-status"))
}
