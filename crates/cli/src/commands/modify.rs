//! `mozart modify`.

use crate::{CliError, Globals};

/// Arguments of `mozart modify`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart modify`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("modify"))
}
