//! The Mozart conductor protocol: method names, typed params and results, JSON-RPC error
//! codes, exit codes, NDJSON framing over a Unix socket, the server loop and the client.
//!
//! Every machine-readable document that crosses the socket is typed here (as
//! nextest-metadata does for nextest): [`checkpoint`] (the job checkpoint, which is also the
//! JSON state file), [`status`] (the job-reading results), [`types`] (params and the other
//! results); [`time`] holds their ISO-8601 timestamps, [`paths`] where a client finds
//! the conductor and [`trust`] whether it may talk to what it
//! found. The checkpoint is also the conductor's own model (`mozart-state` stores it), so
//! there is one definition of it: [`checkpoint`] with its behaviour and [`sheet_map`].
//!
//! Dependency-light on purpose so tests and other tools can import it (architecture.md).

pub mod checkpoint;
pub mod client;
pub mod error;
pub mod framing;
pub mod job_id;
pub mod methods;
pub mod own_path;
pub mod paths;
pub mod server;
pub mod status;
pub mod time;
pub mod trust;
pub mod types;
pub mod workspace_file;

// The checkpoint's sheet container and views, at their usual paths.
pub use checkpoint::{sheet_map, sheet_view};
pub use client::{connect_stream, BlockingClient, Client, ClientTimeouts};
pub use error::{IpcError, RpcError};
pub use server::{parse_params, serve, ServerLimits};

/// Re-exported so the conductor registers methods against the same jsonrpsee version.
pub use jsonrpsee;
pub use jsonrpsee::types::{ErrorObjectOwned, Params};
pub use jsonrpsee::RpcModule;

/// Version of this port's protocol, reported by `daemon.hello`. Bump on incompatible changes.
pub const PROTOCOL_VERSION: u32 = 1;

/// Version string the conductor reports (`daemon.status.version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Exit codes of the `mozart` command (cli.md §1.8).
pub mod exit {
    /// Success.
    pub const SUCCESS: i32 = 0;
    /// Any reported failure.
    pub const FAILURE: i32 = 1;
    /// Usage errors and "cannot validate".
    pub const USAGE: i32 = 2;
}
