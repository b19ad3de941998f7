//! The state every RPC handler shares, and the seam where the job engine plugs in.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::{ConductorError, ConductorPaths, DaemonConfig};

/// A boxed, sendable future (no extra crate for async traits).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Job counts the `daemon.*` methods report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Jobs in the `running` state.
    pub running: u64,
    /// Jobs by status string (`queued`, `running`, `completed`, …).
    pub by_status: BTreeMap<String, u64>,
}

/// The job engine as the daemon lifecycle sees it. `jobs::install` puts one on the context.
pub trait JobHost: Send + Sync + 'static {
    /// Restart recovery (conductor.md §11): runs after the socket is bound and before the
    /// conductor reports ready (`daemon.ready`, sd_notify `READY=1`).
    fn recover<'a>(
        &'a self,
        ctx: &'a Arc<ConductorCtx>,
    ) -> BoxFuture<'a, Result<(), ConductorError>>;
    /// Current job counts (cheap: `daemon.ready`/`daemon.status` ask for them).
    fn counts(&self) -> BoxFuture<'_, JobCounts>;
    /// Stop running jobs: graceful waits up to `timeout`, then cancels (§5.2).
    fn shutdown(&self, graceful: bool, timeout: Duration) -> BoxFuture<'_, ()>;
    /// `daemon.rate_limits` result.
    fn rate_limits(&self) -> mozart_ipc::types::RateLimitsResult {
        mozart_ipc::types::RateLimitsResult::default()
    }
    /// `daemon.observer_events`: recent events of one job or all, newest first (§8.22).
    fn observer_events<'a>(
        &'a self,
        _job_id: Option<&'a str>,
        _limit: u32,
    ) -> BoxFuture<'a, Vec<mozart_ipc::types::MonitorEvent>> {
        Box::pin(async { Vec::new() })
    }
    /// `daemon.learning.patterns`: up to `limit` learned patterns (conductor.md §8.25).
    fn learning_patterns(&self, _limit: u32) -> Vec<mozart_ipc::status::LearnedPattern> {
        Vec::new()
    }
    /// Clear rate limits for one instrument (or all); returns how many were cleared.
    fn clear_rate_limits(&self, _instrument: Option<&str>) -> u64 {
        0
    }
    /// The configuration was reloaded (SIGHUP): apply what the engine reads at run time
    /// (`max_concurrent_jobs`).
    fn config_reloaded(&self, _config: &DaemonConfig) {}
}

/// A request to stop, from a signal or `daemon.shutdown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownRequest {
    /// Wait for running jobs.
    pub graceful: bool,
}

/// Shared conductor state, handed to every RPC handler as `Arc<ConductorCtx>`.
pub struct ConductorCtx {
    /// Our PID.
    pub pid: u32,
    /// When the conductor started (monotonic).
    pub started: Instant,
    /// Every path in use.
    pub paths: ConductorPaths,
    config: RwLock<DaemonConfig>,
    ready: AtomicBool,
    shutting_down: AtomicBool,
    shutdown_tx: watch::Sender<Option<ShutdownRequest>>,
    job_host: OnceLock<Arc<dyn JobHost>>,
}

impl std::fmt::Debug for ConductorCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConductorCtx")
            .field("pid", &self.pid)
            .field("paths", &self.paths)
            .field("ready", &self.is_ready())
            .field("shutting_down", &self.is_shutting_down())
            .finish_non_exhaustive()
    }
}

impl ConductorCtx {
    /// A fresh context (not ready, no job host).
    pub fn new(config: DaemonConfig, paths: ConductorPaths) -> Arc<ConductorCtx> {
        let (shutdown_tx, _) = watch::channel(None);
        Arc::new(ConductorCtx {
            pid: std::process::id(),
            started: Instant::now(),
            paths,
            config: RwLock::new(config),
            ready: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            shutdown_tx,
            job_host: OnceLock::new(),
        })
    }

    /// A snapshot of the live configuration.
    pub fn config(&self) -> DaemonConfig {
        match self.config.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replace the live configuration (SIGHUP reload).
    pub fn set_config(&self, config: DaemonConfig) {
        match self.config.write() {
            Ok(mut guard) => *guard = config,
            Err(poisoned) => *poisoned.into_inner() = config,
        }
    }

    /// Seconds since start, rounded to one decimal as upstream reports it.
    pub fn uptime_seconds(&self) -> f64 {
        (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0
    }

    /// True once recovery ran and until shutdown begins.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.is_shutting_down()
    }

    /// Mark recovery done.
    pub(crate) fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// True once shutdown began.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Ask the conductor to stop. Idempotent: the first request wins (upstream's second
    /// concurrent shutdown is a [BUG], §5.1).
    pub fn request_shutdown(&self, graceful: bool) {
        if !self.shutting_down.swap(true, Ordering::SeqCst) {
            self.shutdown_tx
                .send_replace(Some(ShutdownRequest { graceful }));
        }
    }

    /// Watch for a shutdown request.
    pub fn shutdown_receiver(&self) -> watch::Receiver<Option<ShutdownRequest>> {
        self.shutdown_tx.subscribe()
    }

    /// Install the job engine (once).
    pub fn install_job_host(&self, host: Arc<dyn JobHost>) -> Result<(), ConductorError> {
        self.job_host
            .set(host)
            .map_err(|_| ConductorError::Recovery("a job host is already installed".into()))
    }

    /// The job engine, if one is installed.
    pub fn job_host(&self) -> Option<&Arc<dyn JobHost>> {
        self.job_host.get()
    }

    /// Job counts, zero without a job host.
    pub async fn job_counts(&self) -> JobCounts {
        match self.job_host() {
            Some(h) => h.counts().await,
            None => JobCounts::default(),
        }
    }
}
