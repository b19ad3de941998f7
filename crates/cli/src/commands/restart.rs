//! `mozart restart`.

use crate::{CliError, Globals};

/// Arguments of `mozart restart`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart restart`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("restart"))
}
