//! `mozart validate`.

use crate::{CliError, Globals};

/// Arguments of `mozart validate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart validate`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("validate"))
}
