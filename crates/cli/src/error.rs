//! One error type for every command, mapped to the documented exit codes (cli.md §1.8).

use thiserror::Error;

/// A command failure, reported once at the edge.
#[derive(Debug, Error)]
pub enum CliError {
    /// Bad arguments: printed to stderr, exit 2.
    #[error("{0}")]
    Usage(String),
    /// A reported failure: `Error: <message>` plus hints on stdout, exit 1.
    #[error("{message}")]
    Failed {
        /// What went wrong.
        message: String,
        /// What to do about it.
        hints: Vec<String>,
        /// Print as a JSON error object instead of text.
        json: bool,
    },
    /// The conductor's socket, its directory or the process behind it belongs to another
    /// user (issue 21): nothing was sent. Printed like [`CliError::Failed`], exit 1 (the
    /// code of "conductor not usable"); a variant of its own so commands that word "not
    /// running" their own way never hide it.
    #[error("{message}")]
    Untrusted {
        /// Who owns what, and why that is refused.
        message: String,
        /// What to do about it.
        hints: Vec<String>,
        /// Print as a JSON error object instead of text.
        json: bool,
    },
    /// The command exists upstream but this port does not have it yet.
    #[error("'mozart {0}' is not implemented yet in this port")]
    NotImplemented(&'static str),
}

impl CliError {
    /// A failure with hints.
    pub fn failed(message: impl Into<String>, hints: Vec<String>) -> Self {
        CliError::Failed {
            message: message.into(),
            hints,
            json: false,
        }
    }

    /// True for [`CliError::Untrusted`].
    pub fn is_untrusted(&self) -> bool {
        matches!(self, CliError::Untrusted { .. })
    }

    /// Print the error the way upstream does and return the exit code.
    pub fn report(&self) -> i32 {
        match self {
            CliError::Usage(msg) => {
                eprintln!("Error: {msg}");
                2
            }
            CliError::Failed {
                message,
                hints,
                json,
            }
            | CliError::Untrusted {
                message,
                hints,
                json,
            } => {
                if *json {
                    crate::output::print_json(&serde_json::json!({
                        "success": false,
                        "message": message,
                        "hints": hints,
                    }));
                } else {
                    crate::output::print_error(message, hints);
                }
                1
            }
            CliError::NotImplemented(_) => {
                println!("Error: {self}");
                1
            }
        }
    }
}
