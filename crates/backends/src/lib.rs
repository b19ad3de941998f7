//! Mozart backends: instruments (AI CLIs run as processes, HTTP APIs), their profiles,
//! process-group handling, output parsing, and error classification (execution.md §7).
//!
//! The baton calls [`Backend::execute`] with an [`ExecutionRequest`] and gets an
//! [`ExecutionResult`]; [`classify`] turns a failed result into an E-code with a retry
//! decision input and, for rate limits, a wait.
//!
//! Modules depend in one direction, each only on those above it (no import circles):
//! 1. leaves: `error`, `redact`, `json_path`, `types` (result, failure kind, progress, stream
//!    kind, the `placement:` spec), `output_log` (private, redacted output logs, on `redact`);
//! 2. `classify` (E-codes from a result); `profile` (instrument profiles), then `env` (a
//!    child's environment plan from a profile); `live` (a CLI's retry announcements judged
//!    as they come: stop it, or let it retry);
//! 3. `descendants` (signals an attempt's group and finds everything it started), then
//!    `subreaper` (keeps what it detaches within the conductor's reach) and `process` (runs
//!    a child under its plan), then `placement` (here or on Slurm), then `request` (what the
//!    baton hands an instrument, which names its placement, and the `Backend` trait);
//! 4. the instruments: `http`, `cli_backend`, `claude` (on `cli_backend`);
//! 5. `registry`, which builds an instrument from a profile, then `readiness` (whether an
//!    HTTP instrument could run here, for `mozart doctor`).

pub mod descendants;
pub mod error;
pub mod process;
mod spawn;
pub mod types;

pub use error::BackendError;
pub use request::{Backend, ExecutionRequest};
pub use types::{
    epoch_now, plausible_cost, token_count, Activity, BoxFuture, ExecutionResult, ExitReason,
    FailureKind, HealthStatus, Progress, Withdrawal, COST_ESTIMATED, COST_EXACT,
    DEFAULT_KILL_GRACE, MAX_ATTEMPT_COST_USD, MAX_ATTEMPT_TOKENS,
};
pub mod classify;
pub mod output_log;
pub mod redact;

pub use classify::{
    classify, classify_for, Classification, ErrorCategory, ErrorCode, RateLimitInfo,
};
pub use redact::redact;
pub mod claude;
pub mod cli_backend;
pub mod env;
pub mod http;
pub mod json_path;
pub mod live;
pub mod placement;
pub mod profile;
pub mod readiness;
pub mod registry;
pub mod request;
pub mod shown_log;
pub mod subreaper;

pub use claude::{ClaudeCliBackend, ClaudeCliOptions, ClaudeOutputFormat};
pub use cli_backend::ProfileBackend;
pub use http::{
    AnthropicApiBackend, AnthropicApiOptions, OllamaBackend, OllamaOptions, OpenAiChatBackend,
    OpenAiChatOptions,
};
pub use placement::{
    PlacedAttempt, Placement, PlacementKind, PlacementSpec, RemoteAttempt, RemoteJournal,
};
pub use profile::{InstrumentKind, InstrumentProfile};
pub use readiness::{http_readiness, http_readiness_in, HttpReadiness};
pub use registry::{InstrumentRegistry, ProfileSource};
