//! `mozart status`.

use crate::{CliError, Globals};

/// Arguments of `mozart status`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart status`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("status"))
}
