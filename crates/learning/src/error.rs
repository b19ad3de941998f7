//! The one error type of the learning store. Every public entry point returns it instead of
//! panicking, so the conductor can log it and carry on (a learning failure never fails a job).

use std::path::PathBuf;

/// Shorthand for results of this crate.
pub type Result<T, E = LearningError> = std::result::Result<T, E>;

/// What went wrong, with the database path and the operation that was running.
#[derive(Debug, thiserror::Error)]
pub enum LearningError {
    /// The parent directory of the database could not be created.
    #[error("cannot create the learning store directory {path}: {source}")]
    CreateDir {
        /// Directory that could not be created.
        path: PathBuf,
        /// Underlying I/O error.
        source: std::io::Error,
    },
    /// The file exists but is not an SQLite database (or is damaged).
    #[error(
        "{path} is not a usable SQLite learning database (corrupt or not a database): {source}"
    )]
    NotADatabase {
        /// Database path.
        path: PathBuf,
        /// SQLite's complaint.
        source: rusqlite::Error,
    },
    /// The file is an SQLite database of something else (e.g. the job registry).
    #[error("{path} is an SQLite database but not a Mozart learning store (it has tables {tables:?} and no learning schema)")]
    ForeignDatabase {
        /// Database path.
        path: PathBuf,
        /// The tables found.
        tables: Vec<String>,
    },
    /// A schema migration step failed.
    #[error("migrating learning store {path} to schema version {version} failed during {step}: {source}")]
    Migration {
        /// Database path.
        path: PathBuf,
        /// Target version.
        version: u32,
        /// Which step (e.g. "add column patterns.trust_score").
        step: String,
        /// SQLite error.
        source: rusqlite::Error,
    },
    /// An ordinary query or write failed.
    #[error("learning store {path}: {operation} failed: {source}")]
    Sqlite {
        /// Database path.
        path: PathBuf,
        /// What we were doing (names the pattern / job when known).
        operation: String,
        /// SQLite error.
        source: rusqlite::Error,
    },
    /// A JSON column held text we could not read.
    #[error("learning store {path}: column {table}.{column} of row {row_id} holds invalid JSON: {source}")]
    BadJson {
        /// Database path.
        path: PathBuf,
        /// Table name.
        table: &'static str,
        /// Column name.
        column: &'static str,
        /// Row id.
        row_id: String,
        /// Parser error.
        source: serde_json::Error,
    },
    /// A caller passed a value outside its documented range.
    #[error("invalid learning input {field}: {reason}")]
    InvalidInput {
        /// Which argument.
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// The store's connection lock was poisoned by a panic in another thread.
    #[error("learning store {path}: connection lock poisoned by an earlier panic")]
    Poisoned {
        /// Database path.
        path: PathBuf,
    },
}
