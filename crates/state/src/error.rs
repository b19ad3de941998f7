//! The one error type of this crate; every variant names the file, job or sheet involved.

use std::path::{Path, PathBuf};

/// Everything that can go wrong reading or writing Mozart state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Filesystem failure on a named path.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we were doing ("writing", "renaming", ...).
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A state file exists but is not a valid checkpoint (upstream `StateCorruptionError`).
    #[error("state file {path} is corrupt: {reason}")]
    CorruptStateFile {
        /// The state file.
        path: PathBuf,
        /// Parser or validation message.
        reason: String,
    },
    /// A checkpoint document stored in the registry does not parse.
    #[error("stored checkpoint for job '{job_id}' is corrupt: {reason}")]
    CorruptCheckpoint {
        /// The job whose checkpoint is bad.
        job_id: String,
        /// Parser or validation message.
        reason: String,
    },
    /// A checkpoint violates a model constraint (execution.md §8.1–8.2).
    #[error("invalid checkpoint for job '{job_id}': {reason}")]
    InvalidCheckpoint {
        /// The job.
        job_id: String,
        /// Which constraint failed.
        reason: String,
    },
    /// Failure from SQLite, with the registry file and the operation attempted.
    #[error("registry {path}: {operation}: {source}")]
    Sqlite {
        /// The registry database file.
        path: PathBuf,
        /// What we were doing ("saving sheet 3 of job 'x'", ...).
        operation: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// A migration failed; the database stays at the previous version.
    #[error("registry {path}: migration {version} ({name}) failed: {source}")]
    Migration {
        /// The registry database file.
        path: PathBuf,
        /// Migration number.
        version: u32,
        /// Migration file name.
        name: &'static str,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by a newer Mozart than this one.
    #[error(
        "registry {path} has schema version {found}, newer than this build supports ({supported}); upgrade Mozart"
    )]
    SchemaTooNew {
        /// The registry database file.
        path: PathBuf,
        /// Version found in the database.
        found: u32,
        /// Highest version this build knows.
        supported: u32,
    },
    /// An operation named a job the registry does not have.
    #[error("job '{job_id}' not found in registry")]
    JobNotFound {
        /// The missing job.
        job_id: String,
    },
    /// JSON encoding of a value failed (should not happen for our own types).
    #[error("encoding {what} for job '{job_id}' as JSON: {source}")]
    Encode {
        /// The job.
        job_id: String,
        /// What was being encoded.
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A stored value could not be interpreted (unknown status string, bad JSON column).
    #[error("registry row for job '{job_id}': column {column}: {reason}")]
    BadRow {
        /// The job.
        job_id: String,
        /// The column.
        column: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// What to do with a damaged registry file ([`StateError::is_damaged`]), said the same by
/// `mozart start` and `mozart doctor`.
pub fn damaged_registry_fix(path: &Path) -> String {
    let p = path.display();
    format!(
        "To start with a new, empty registry, move it aside: mv {p} {p}.damaged (with {p}-wal and \
         {p}-shm if present), then run mozart start again. Workspaces keep their files; keep the \
         damaged copy to recover from (e.g. sqlite3 {p}.damaged .recover)."
    )
}

impl StateError {
    /// Whether the registry file itself is damaged (SQLite: "database disk image is
    /// malformed", "file is not a database"): no retry helps, the file must be replaced.
    pub fn is_damaged(&self) -> bool {
        let source = match self {
            StateError::Sqlite { source, .. } | StateError::Migration { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
        )
    }

    /// The `map_err` adapter for a SQLite error of `operation` on the database at `path`.
    pub(crate) fn sqlite(
        path: &Path,
        operation: impl Into<String>,
    ) -> impl FnOnce(rusqlite::Error) -> StateError {
        let path = path.to_path_buf();
        let operation = operation.into();
        move |source| StateError::Sqlite {
            path,
            operation,
            source,
        }
    }
}
