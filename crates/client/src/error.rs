//! A failed conductor call, sorted once into the cases a user is told about differently.
//! Each client words them in one function (the CLI's `conductor_client::user_error`, the
//! async [`crate::conductor`]'s `call_error`); nobody reads an error's text for its kind.

use mozart_ipc::{error as rpc, IpcError};

use crate::hints::NOT_RUNNING;

/// Why a call to the conductor did not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No conductor answers on the socket.
    #[error("{NOT_RUNNING}")]
    NotRunning,
    /// The socket, its directory or the process behind it belongs to another user (issue
    /// 21): nothing was sent.
    #[error("{problem}")]
    Untrusted {
        /// Who owns what, and why that is refused.
        problem: String,
        /// What to do about it.
        fix: String,
    },
    /// The conductor says the job is unknown or has no state (`-32000`, `-32004`,
    /// `-32005`: upstream's "job error", cli.md §1.5).
    #[error("{message}")]
    Job {
        /// The conductor's words.
        message: String,
    },
    /// The conductor has no such method.
    #[error("Conductor does not support '{method}'.")]
    Unsupported {
        /// The method called.
        method: String,
        /// The conductor knows the method but has not implemented it yet (`data.reason`).
        not_implemented: bool,
    },
    /// The conductor refused the call for another reason; its message is shown as is.
    #[error("{message}")]
    Refused {
        /// The conductor's words.
        message: String,
    },
    /// The conductor did not answer in time (it is busy).
    #[error("{0}")]
    Timeout(IpcError),
    /// The connection broke or the answer was malformed.
    #[error("{0}")]
    Transport(IpcError),
}

impl ClientError {
    /// A connection that did not happen: the refusal of an untrusted socket, else "not
    /// running" (whatever the reason the socket did not answer).
    pub fn from_connect(err: IpcError) -> ClientError {
        match err {
            IpcError::Untrusted { problem, fix, .. } => ClientError::Untrusted { problem, fix },
            _ => ClientError::NotRunning,
        }
    }

    /// A call that failed after the connection was made.
    pub fn from_call(err: IpcError) -> ClientError {
        match err {
            IpcError::NotRunning { .. } => ClientError::NotRunning,
            IpcError::Untrusted { problem, fix, .. } => ClientError::Untrusted { problem, fix },
            IpcError::Rpc { error, .. }
                if matches!(
                    error.code,
                    rpc::JOB_NOT_FOUND | rpc::JOB_NOT_RESUMABLE | rpc::WORKSPACE_NOT_FOUND
                ) =>
            {
                ClientError::Job {
                    message: error.message,
                }
            }
            IpcError::Rpc { method, error } if error.is_method_not_found() => {
                let not_implemented = error
                    .data
                    .as_ref()
                    .and_then(|d| d.get("reason"))
                    .is_some_and(|r| r == "not_implemented");
                ClientError::Unsupported {
                    method,
                    not_implemented,
                }
            }
            IpcError::Rpc { error, .. } => ClientError::Refused {
                message: error.message,
            },
            err @ IpcError::Timeout { .. } => ClientError::Timeout(err),
            other => ClientError::Transport(other),
        }
    }

    /// True when the conductor could not be reached at all (nothing was asked of it).
    pub fn conductor_down(&self) -> bool {
        matches!(
            self,
            ClientError::NotRunning
                | ClientError::Untrusted { .. }
                | ClientError::Transport(IpcError::Io { .. })
        )
    }
}
