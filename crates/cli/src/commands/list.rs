//! `mozart list`.

use crate::{CliError, Globals};

/// Arguments of `mozart list`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart list`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("list"))
}
