//! `mozart pause`.

use crate::{CliError, Globals};

/// Arguments of `mozart pause`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart pause`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("pause"))
}
