//! JSON-RPC error codes (conductor.md §7.6), the wire error object, and transport errors.

use std::path::PathBuf;

use jsonrpsee::types::ErrorObjectOwned;
use serde::{Deserialize, Serialize};

/// Which part of the way to the conductor failed the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustSubject {
    /// The directory holding the socket.
    Directory,
    /// The socket file itself.
    SocketFile,
    /// The process listening on the socket (`SO_PEERCRED`).
    Peer,
}

/// The line is not valid JSON (or not UTF-8, or too long).
pub const PARSE_ERROR: i32 = -32700;
/// Not a JSON-RPC request object.
pub const INVALID_REQUEST: i32 = -32600;
/// No such method; also used for methods this port registers but has not implemented.
pub const METHOD_NOT_FOUND: i32 = -32601;
/// Missing or ill-typed parameters.
pub const INVALID_PARAMS: i32 = -32602;
/// Anything else that went wrong inside the conductor.
pub const INTERNAL_ERROR: i32 = -32603;
/// Job not found / no state (upstream `JobSubmissionError`).
pub const JOB_NOT_FOUND: i32 = -32000;
/// Resources exhausted.
pub const RESOURCE_EXHAUSTED: i32 = -32001;
/// Another conductor / job already running.
pub const JOB_ALREADY_RUNNING: i32 = -32002;
/// The conductor is shutting down (reserved upstream).
pub const DAEMON_SHUTTING_DOWN: i32 = -32003;
/// The job cannot be resumed (reserved upstream).
pub const JOB_NOT_RESUMABLE: i32 = -32004;
/// The workspace does not exist (reserved upstream).
pub const WORKSPACE_NOT_FOUND: i32 = -32005;

/// A JSON-RPC error object as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} (JSON-RPC error {code})")]
pub struct RpcError {
    /// One of the codes above.
    pub code: i32,
    /// Human-readable message; upstream clients show it verbatim.
    pub message: String,
    /// Extra structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl RpcError {
    /// An error with a code and message and no data.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// `-32700 Parse error: malformed JSON` (§7.5 step 1).
    pub fn parse_error() -> Self {
        Self::new(PARSE_ERROR, "Parse error: malformed JSON")
    }

    /// `-32700` for a request line over the size limit (§7.2; upstream drops the connection).
    pub fn request_too_large(limit: usize) -> Self {
        Self::new(
            PARSE_ERROR,
            format!("Parse error: request line exceeds the {limit}-byte limit"),
        )
    }

    /// `-32600 Invalid request: <detail>` (§7.5 steps 2–3).
    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_REQUEST, format!("Invalid request: {detail}"))
    }

    /// `-32601 Method not found: <m>` with `data.method` (§7.5 step 4).
    pub fn method_not_found(method: &str) -> Self {
        RpcError {
            code: METHOD_NOT_FOUND,
            message: format!("Method not found: {method}"),
            data: Some(serde_json::json!({ "method": method })),
        }
    }

    /// A method this port knows but has not implemented yet.
    ///
    /// Uses `-32601` on purpose: upstream's Python CLI turns that code into "Conductor does
    /// not support '<method>'", whereas `-32603` would read as "conductor is not running" (§7.6).
    pub fn not_implemented(method: &str) -> Self {
        RpcError {
            code: METHOD_NOT_FOUND,
            message: format!("Method not implemented yet in this port: {method}"),
            data: Some(serde_json::json!({ "method": method, "reason": "not_implemented" })),
        }
    }

    /// `-32602 Invalid params: <detail>`.
    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// `-32603 Internal error: <detail>`.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(INTERNAL_ERROR, format!("Internal error: {detail}"))
    }

    /// `-32000` with the message as given (e.g. `Job 'x' not found`).
    pub fn job_not_found(message: impl Into<String>) -> Self {
        Self::new(JOB_NOT_FOUND, message)
    }

    /// `-32003` for requests refused because the conductor is stopping.
    pub fn shutting_down() -> Self {
        Self::new(DAEMON_SHUTTING_DOWN, "Daemon is shutting down")
    }

    /// True for `-32601` (method unknown to, or not implemented by, the conductor).
    pub fn is_method_not_found(&self) -> bool {
        self.code == METHOD_NOT_FOUND
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(err: RpcError) -> Self {
        ErrorObjectOwned::owned(err.code, err.message, err.data)
    }
}

impl From<ErrorObjectOwned> for RpcError {
    fn from(err: ErrorObjectOwned) -> Self {
        RpcError {
            code: err.code(),
            message: err.message().to_string(),
            data: err
                .data()
                .and_then(|raw| serde_json::from_str(raw.get()).ok()),
        }
    }
}

/// Transport-level failures of the client, the server and path resolution.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// Nothing answers at the socket (missing file, refused, or connect timeout).
    #[error("Mozart conductor is not running (socket {socket}: {reason})")]
    NotRunning {
        /// The socket we tried.
        socket: PathBuf,
        /// Why the connection failed.
        reason: String,
    },
    /// The socket path does not fit into `sockaddr_un.sun_path`.
    #[error("socket path {path} is {len} bytes long; Unix sockets allow at most {max} (set MOZART_SOCKET or --socket to a shorter path)")]
    SocketPathTooLong {
        /// The offending path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The platform maximum (excluding the trailing NUL).
        max: usize,
    },
    /// The conductor accepted the call but did not answer in time (§7.8).
    #[error("Conductor is running but did not respond to '{method}' in time. The conductor may be busy with a long operation.")]
    Timeout {
        /// The method that timed out.
        method: String,
    },
    /// The response line exceeded the size limit (§7.8).
    #[error(
        "Response too large for '{method}' — the job's checkpoint exceeds the IPC buffer limit"
    )]
    ResponseTooLarge {
        /// The method whose answer was too large.
        method: String,
    },
    /// The conductor answered with a JSON-RPC error.
    #[error("'{method}' failed: {error}")]
    Rpc {
        /// The method called.
        method: String,
        /// The error object received (boxed: it is rare and large).
        error: Box<RpcError>,
    },
    /// The conductor closed the connection or sent something that is not JSON-RPC.
    #[error("malformed or missing response to '{method}': {detail}")]
    Protocol {
        /// The method called.
        method: String,
        /// What was wrong.
        detail: String,
    },
    /// The socket's directory, the socket file or the process listening on it belongs to a
    /// user this client does not trust (issue 21, [`crate::trust`]): nothing was sent.
    #[error("{problem} {fix}")]
    Untrusted {
        /// The socket we were about to use.
        socket: PathBuf,
        /// Which part failed the check.
        subject: TrustSubject,
        /// The uid owning that part (the peer's uid for [`TrustSubject::Peer`]), when known.
        owner: Option<u32>,
        /// What is wrong: who owns what, and why that is refused.
        problem: String,
        /// What to do about it.
        fix: String,
    },
    /// An I/O error, with what we were doing.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl IpcError {
    /// True when the error means "no conductor at this socket".
    pub fn is_not_running(&self) -> bool {
        matches!(self, IpcError::NotRunning { .. })
    }

    /// True when the way to the conductor belongs to a user this client does not trust.
    pub fn is_untrusted(&self) -> bool {
        matches!(self, IpcError::Untrusted { .. })
    }

    /// The JSON-RPC error if the conductor answered with one.
    pub fn rpc_error(&self) -> Option<&RpcError> {
        match self {
            IpcError::Rpc { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}
