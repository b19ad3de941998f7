//! Errors of the conductor's lifecycle, each naming the file, field or socket involved.

use std::path::PathBuf;

/// Why the conductor could not start, reload or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ConductorError {
    /// No Mozart home could be determined.
    #[error("cannot locate the Mozart home: set MOZART_HOME or HOME")]
    NoHome,
    /// conductor.yaml could not be read.
    #[error("cannot read conductor config {path}: {source}")]
    ConfigRead {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// conductor.yaml is not valid YAML or does not match the schema.
    #[error("invalid conductor config {path}: {message}")]
    ConfigInvalid {
        /// The config file (or `<defaults>`).
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid conductor config {path}: field '{field}': {message}")]
    ConfigField {
        /// The config file (or `<defaults>`).
        path: PathBuf,
        /// Dotted field path, e.g. `socket.backlog`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// `--profile` named no built-in profile.
    #[error("Unknown daemon profile '{0}'. Available profiles: dev, intensive, minimal")]
    UnknownProfile(String),
    /// Another conductor holds the lock or answers on the socket.
    #[error("{who} is already running (PID {pid})")]
    AlreadyRunning {
        /// "Mozart conductor" or "clone conductor".
        who: String,
        /// Its PID, or "unknown".
        pid: String,
    },
    /// Something else answers on the socket.
    #[error("another conductor already answers on {0}")]
    SocketInUse(PathBuf),
    /// Refused to use a symlinked socket or PID path (possible attack).
    #[error("{what} is a symlink (possible attack): {path}")]
    Symlink {
        /// "Socket path" or "PID file".
        what: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// The Mozart home, or something in it the conductor reads or writes, belongs to another
    /// user (or is their symbolic link): they could give the conductor an instrument to run,
    /// read its log, or have it chmod a directory of theirs choosing.
    #[error("{problem}")]
    UnsafeHome {
        /// The path refused.
        path: PathBuf,
        /// Why it is refused.
        problem: String,
        /// What to do about it.
        fix: String,
    },
    /// The socket's directory belongs to another user or others can write it (issue 21):
    /// whoever controls it could put their own program where clients look for the conductor.
    #[error("{problem}")]
    UnsafeSocketDir {
        /// The directory.
        dir: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// Who owns it, and why that is refused.
        problem: String,
        /// What to do about it.
        fix: String,
    },
    /// A file-system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we tried, e.g. "cannot bind socket".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A protocol-level failure (socket path too long, …).
    #[error(transparent)]
    Ipc(#[from] mozart_ipc::IpcError),
    /// Registering RPC methods failed (a duplicate name: a programming error).
    #[error("cannot register RPC method: {0}")]
    Register(String),
    /// Restart recovery (the job hook) failed.
    #[error("job recovery failed: {0}")]
    Recovery(String),
    /// The job registry's file is damaged: it cannot be read, and no retry helps.
    #[error("the job registry is damaged: {message}")]
    RegistryDamaged {
        /// What SQLite said, with the file.
        message: String,
        /// What to do.
        fix: String,
    },
    /// Logging could not be set up.
    #[error("cannot set up logging to {path}: {message}")]
    Logging {
        /// The log file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

impl ConductorError {
    /// What the user can do about this error, when there is something specific.
    pub fn hint(&self) -> Option<&str> {
        match self {
            ConductorError::UnsafeSocketDir { fix, .. } => Some(fix),
            ConductorError::UnsafeHome { fix, .. } => Some(fix),
            ConductorError::RegistryDamaged { fix, .. } => Some(fix),
            ConductorError::Ipc(mozart_ipc::IpcError::Untrusted { fix, .. }) => Some(fix),
            _ => None,
        }
    }

    /// Wrap an I/O error with what we were doing and where.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ConductorError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
