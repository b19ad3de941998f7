//! One error type for every command, mapped to the documented exit codes (cli.md §1.8).

use thiserror::Error;

use crate::output::OutputMode;

/// A command failure, reported once at the edge.
#[derive(Debug, Error)]
pub enum CliError {
    /// Bad arguments: printed to stderr, exit 2.
    #[error("{0}")]
    Usage(String),
    /// A reported failure: `Error: <message>` plus hints on stdout (or the JSON error
    /// object), exit 1.
    #[error("{message}")]
    Failed {
        /// What kind of failure, for a command that treats one kind its own way.
        kind: ErrorKind,
        /// What went wrong.
        message: String,
        /// What to do about it.
        hints: Vec<String>,
        /// Text or the JSON error object.
        mode: OutputMode,
    },
    /// A failure with more to it than a message and hints — an error code, lines after the
    /// hints, a JSON document of its own or an exit code other than 1 (`mozart run`'s refused
    /// submission, `modify`'s and `pause`'s coded errors, an unknown instrument, a score
    /// `validate` cannot load).
    #[error("{}", .0.message)]
    Detailed(Box<Detailed>),
    /// The command exists upstream but this port does not have it yet.
    #[error("'mozart {0}' is not implemented yet in this port")]
    NotImplemented(&'static str),
}

/// What [`CliError::Detailed`] reports: as text `Error: ` (or `Error [<code>]: `), the
/// message, the hints and then `after`; in JSON mode `document` as it is.
#[derive(Debug)]
pub struct Detailed {
    /// The error code shown in brackets (`E502`, `INSTR-001`), if any.
    pub code: Option<String>,
    /// The headline.
    pub message: String,
    /// What to do about it.
    pub hints: Vec<String>,
    /// Lines printed after the hints (a refused submission's active rate limits), each as
    /// it is.
    pub after: Vec<String>,
    /// The JSON document printed instead in JSON mode (the conductor's answer to a refused
    /// submission, upstream's `run --json` shape, cli.md §3.1 step 7; the error object with
    /// its `error_code`, §1.6).
    pub document: serde_json::Value,
    /// Text or the JSON document.
    pub mode: OutputMode,
    /// The exit code (1, or 2 for `validate`'s score that does not load, cli.md §1.8).
    pub exit: i32,
}

/// The kinds of [`CliError::Failed`] a command may word or handle its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The command could not do what was asked.
    Command,
    /// No conductor answers (`mozart run --json` words it its own way).
    NotRunning,
    /// The conductor's socket, its directory or the process behind it belongs to another
    /// user (issue 21): nothing was sent. Exit 1, the code of "conductor not usable"; a
    /// kind of its own so commands that word "not running" their own way never hide it.
    Untrusted,
    /// `mozart run` submitted nothing (the score does not load, a refused flag, no
    /// conductor): its JSON error is upstream's `{"error": message}` (cli.md §3.1).
    NotSubmitted,
}

impl CliError {
    /// A command failure with hints, printed as text.
    pub fn failed(message: impl Into<String>, hints: Vec<String>) -> Self {
        CliError::of(ErrorKind::Command, message, hints, OutputMode::Human)
    }

    /// A failure of this kind, printed in `mode`.
    pub fn of(
        kind: ErrorKind,
        message: impl Into<String>,
        hints: Vec<String>,
        mode: OutputMode,
    ) -> Self {
        CliError::Failed {
            kind,
            message: message.into(),
            hints,
            mode,
        }
    }

    /// The kind of a reported failure (`None` for usage errors, detailed failures and missing commands).
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            CliError::Failed { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The message of a reported or detailed failure (`None` for usage errors and missing
    /// commands).
    pub fn message(&self) -> Option<&str> {
        match self {
            CliError::Failed { message, .. } => Some(message),
            CliError::Detailed(detailed) => Some(&detailed.message),
            _ => None,
        }
    }

    /// True for a socket another user controls ([`ErrorKind::Untrusted`]).
    pub fn is_untrusted(&self) -> bool {
        self.kind() == Some(ErrorKind::Untrusted)
    }

    /// Print the error the way upstream does and return the exit code.
    pub fn report(&self) -> i32 {
        match self {
            CliError::Usage(msg) => {
                eprintln!("Error: {msg}");
                2
            }
            CliError::Failed {
                kind,
                message,
                hints,
                mode,
            } => {
                let with_doctor;
                let hints = if registry_damaged(message)
                    && !hints.iter().any(|h| h.contains("mozart doctor"))
                {
                    with_doctor = [
                        hints.as_slice(),
                        &["The job registry is damaged: `mozart doctor` checks it and says what to do".to_string()],
                    ]
                    .concat();
                    &with_doctor
                } else {
                    hints
                };
                match (mode, kind) {
                    (OutputMode::Json, ErrorKind::NotSubmitted) => {
                        crate::output::print_json(&serde_json::json!({ "error": message }))
                    }
                    (OutputMode::Json, _) => crate::output::print_json(&serde_json::json!({
                        "success": false,
                        "message": crate::selector::commands(message),
                        "hints": hints
                            .iter()
                            .map(|h| crate::selector::commands(h))
                            .collect::<Vec<_>>(),
                    })),
                    (OutputMode::Human, _) => crate::output::print_error(message, hints),
                }
                1
            }
            CliError::Detailed(d) => {
                match (d.mode, &d.code) {
                    (OutputMode::Json, _) => crate::output::print_json(&d.document),
                    (OutputMode::Human, code) => {
                        let headline = match code {
                            Some(code) => format!("Error [{code}]: {}", d.message),
                            None => format!("Error: {}", d.message),
                        };
                        crate::output::print_headline(&headline, &d.hints);
                        for line in &d.after {
                            println!("{line}");
                        }
                    }
                }
                d.exit
            }
            CliError::NotImplemented(_) => {
                println!("Error: {self}");
                1
            }
        }
    }
}

/// Whether an error's text is SQLite's word for a damaged registry file (the conductor's
/// answers carry it as text).
fn registry_damaged(message: &str) -> bool {
    message.contains("database disk image is malformed")
        || message.contains("file is not a database")
}
