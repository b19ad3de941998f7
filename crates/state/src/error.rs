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
    /// The file at the registry's path is not a Mozart job registry: empty (0 bytes), or a
    /// database of other tables (another program's, Mozart's learning store). Taken as a new
    /// registry it would silently lose every job the real one held.
    #[error("{path} is not a Mozart job registry: {what}")]
    NotARegistry {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        what: String,
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

/// What to do with a file at the registry's path that is not a registry
/// ([`StateError::NotARegistry`]).
pub fn not_a_registry_fix(path: &Path) -> String {
    let p = path.display();
    format!(
        "If it should hold your jobs, restore the registry from a backup. To start with a new, \
         empty registry, move it aside: mv {p} {p}.not-registry (with {p}-wal and {p}-shm if \
         present), then run mozart start again. Workspaces keep their files."
    )
}

impl StateError {
    /// Whether the registry file itself is damaged (SQLite: "database disk image is
    /// malformed", "file is not a database"), or is no registry at all: no retry helps, the
    /// file must be replaced ([`StateError::fix`] says how).
    pub fn is_damaged(&self) -> bool {
        let source = match self {
            StateError::Sqlite { source, .. } | StateError::Migration { source, .. } => source,
            StateError::NotARegistry { .. } => return true,
            _ => return false,
        };
        matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
        )
    }

    /// What to do about the registry file at `path` that this error says must be replaced
    /// ([`StateError::is_damaged`]).
    pub fn fix(&self, path: &Path) -> String {
        match self {
            StateError::NotARegistry { .. } => not_a_registry_fix(path),
            _ => damaged_registry_fix(path),
        }
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
