//! `mozart resume`.

use crate::{CliError, Globals};

/// Arguments of `mozart resume`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Run `mozart resume`.
pub fn run(_globals: &Globals, _args: Args) -> Result<i32, CliError> {
    Err(CliError::NotImplemented("resume"))
}
