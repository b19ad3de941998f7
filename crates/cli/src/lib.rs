//! The `mozart` command-line interface.

/// Entry point: parse arguments, run the command, return the process exit code.
pub fn main() -> i32 {
    eprintln!("mozart: not yet implemented");
    2
}
