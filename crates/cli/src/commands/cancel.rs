//! `mozart cancel`.

use crate::{CliError, Globals};

/// Arguments of `mozart cancel`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart cancel`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("cancel"))
}
