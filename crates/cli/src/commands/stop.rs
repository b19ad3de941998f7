//! `mozart stop`.

use crate::{CliError, Globals};

/// Arguments of `mozart stop`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart stop`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("stop"))
}
