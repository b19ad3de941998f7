//! Errors raised while loading instrument profiles or building a backend.
//!
//! Failures of an *execution* are never errors: they come back inside an
//! [`ExecutionResult`](crate::ExecutionResult) so the baton can classify them.

use std::path::PathBuf;

use thiserror::Error;

/// Why an instrument profile could not be loaded or a backend could not be built.
#[derive(Debug, Error)]
pub enum BackendError {
    /// A profile file could not be read.
    #[error("cannot read instrument profile {path}: {source}")]
    ReadProfile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A profile file that is another user's (or others may write it) is not read.
    #[error(transparent)]
    UntrustedProfile(mozart_config::profile_trust::ProfileFileError),
    /// A profile file is not valid YAML or does not match the schema (instruments.md §4.1).
    #[error("invalid instrument profile {origin}: {message}")]
    InvalidProfile {
        /// The file, or `built-in <name>` for embedded profiles.
        origin: String,
        /// What is wrong, with the field path when serde knows it.
        message: String,
    },
    /// A regex in a profile's `cli.errors` section does not compile.
    #[error("instrument profile '{profile}': invalid pattern in {field}: {message}")]
    InvalidPattern {
        /// Profile name.
        profile: String,
        /// e.g. `cli.errors.rate_limit_patterns[2]`.
        field: String,
        /// The regex error.
        message: String,
    },
    /// No profile with this name is loaded.
    #[error("unknown instrument: '{name}'")]
    UnknownInstrument {
        /// The requested name.
        name: String,
    },
    /// The instrument exists but cannot execute in this port (yet).
    #[error("{backend}: {reason}")]
    Unsupported {
        /// Instrument or backend name.
        backend: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// An `instrument_config` / backend override has the wrong shape.
    #[error("instrument '{instrument}': invalid option '{key}': {message}")]
    InvalidOption {
        /// Instrument name.
        instrument: String,
        /// The option key.
        key: String,
        /// What is wrong.
        message: String,
    },
}
