//! Mozart backends: instruments (AI CLIs run as processes, HTTP APIs), their profiles,
//! process-group handling, output parsing, and error classification (execution.md §7).
//!
//! The baton calls [`Backend::execute`] with an [`ExecutionRequest`] and gets an
//! [`ExecutionResult`]; [`classify`] turns a failed result into an E-code with a retry
//! decision input and, for rate limits, a wait.

pub mod error;
pub mod process;
pub mod types;

pub use error::BackendError;
pub use types::{
    epoch_now, Backend, BoxFuture, ExecutionRequest, ExecutionResult, ExitReason, HealthStatus,
    Progress, DEFAULT_KILL_GRACE,
};
pub mod classify;
pub mod redact;

pub use classify::{classify, Classification, ErrorCategory, ErrorCode, RateLimitInfo};
pub use redact::redact;
pub mod claude;
pub mod cli_backend;
pub mod env;
pub mod http;
pub mod json_path;
pub mod placement;
pub mod profile;
pub mod registry;

pub use claude::{ClaudeCliBackend, ClaudeCliOptions, ClaudeOutputFormat};
pub use cli_backend::ProfileBackend;
pub use http::{
    AnthropicApiBackend, AnthropicApiOptions, OllamaBackend, OllamaOptions, OpenAiChatBackend,
    OpenAiChatOptions,
};
pub use placement::{Placement, PlacementKind, PlacementSpec, RemoteAttempt, RemoteJournal};
pub use profile::{InstrumentKind, InstrumentProfile};
pub use registry::{InstrumentRegistry, ProfileSource};
