//! `mozart clear`.

use crate::{CliError, Globals};

/// Arguments of `mozart clear`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart clear`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("clear"))
}
