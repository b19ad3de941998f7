//! `mozart run`.

use crate::{CliError, Globals};

/// Arguments of `mozart run`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart run`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("run"))
}
