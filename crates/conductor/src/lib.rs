//! The Mozart conductor daemon: paths, `conductor.yaml`, single-instance lock, socket,
//! signals, and the `daemon.*` methods. A job engine (`mozart-jobs`) plugs in through [`JobEngine`] and [`JobHost`].

pub mod config;
pub mod ctx;
pub mod daemon_methods;
pub mod error;
pub mod instance;
pub mod jobs;
pub mod lifecycle;
pub mod logging;
pub mod memory;
pub mod notify;
pub mod paths;
pub mod probe;
pub mod watchdog;

pub use config::DaemonConfig;
pub use ctx::{BoxFuture, ConductorCtx, JobCounts, JobHost, ShutdownRequest};
pub use error::ConductorError;
pub use instance::{
    detach_session, keep_inherited_fds_from_children, pid_alive, pid_holds_lock, pid_running,
    probe as probe_instance, read_pid, signal_conductor, RunState, StopSignal,
};
pub use jobs::JobEngine;
pub use lifecycle::{run_blocking, Conductor, ConductorSettings};
pub use paths::{mozart_home, ConductorPaths};
