//! `mozart start`.

use crate::{CliError, Globals};

/// Arguments of `mozart start`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart start`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("start"))
}
