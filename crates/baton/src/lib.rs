//! The baton: Mozart's event-driven execution core.
//!
//! * [`BatonCore`] — a deterministic state machine over jobs, sheets and instruments. Feed it
//!   [`Event`]s and the current time ([`Millis`]); it returns [`Effect`]s in the order the driver
//!   must carry them out. No tokio, no I/O (execution.md §2).
//! * [`TimerWheel`] — deadlines with cancellation (§2.9).
//! * [`driver`] — the tokio loop that owns a core, an inbox and a timer wheel, and carries out
//!   effects through a [`driver::BatonHost`] the conductor implements.
//! * [`validation`] — the validation engine (§6), async and doing real I/O.
//!
//! Where upstream's baton (ed990b3) is half-wired we implement the documented intent: explicit
//! dependencies are honoured, retry / rate-limit / breaker-recovery / pacing / escalation timers
//! are scheduled, the retry policy comes from the score, pause and cost limits are honoured,
//! every transition is persisted before its consequences, and restored in-flight sheets re-run
//! without spending a retry.
#![forbid(unsafe_code)]

mod core;
pub mod driver;
mod effect;
mod event;
mod spec;
mod status;
mod time;
mod timer;
pub mod validation;

pub use crate::core::{
    breaker_recovery_delay, jitter_sample, queued_reason, retry_delay, BatonCore, SheetView,
};
pub use driver::{spawn, BatonHandle, BatonHost, DriverError, HostCall, HostCaller, HostError};
pub use effect::{
    AttemptContext, Effect, InstrumentChange, JobChange, JobOutcome, JobWaitChange, ObserverEvent,
    SheetChange, StateChange, TimerId, COMPLETION_SUFFIX,
};
pub use event::{AttemptResult, EscalationDecision, Event, Failure, FailureKind, ResourceSeverity};
pub use spec::{
    BatonConfig, CostLimitsUpdate, InstrumentSpec, JobSpec, RestoredRateWait, RestoredSheet,
    RetryPolicy, SheetSource, SheetSourceRef, SheetSpec, SkipSpec,
};
pub use status::{AttemptMode, CheckpointSheetStatus, CircuitState, JobStatus, SheetStatus};
pub use time::{secs, AnchoredClock, Millis};
pub use timer::TimerWheel;
