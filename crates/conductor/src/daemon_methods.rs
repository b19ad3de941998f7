//! The `daemon.*` methods (conductor.md §8.13–§8.25) and our `daemon.hello`; the monitoring
//! ones (§8.18–§8.21) live with the job manager (`manager/rpc/monitor.rs`).

use std::sync::Arc;

use mozart_ipc::types::{
    ClearRateLimitsParams, ClearRateLimitsResult, DaemonStatus, HealthResult, HelloResult,
    ReadyResult, ShutdownParams, ShutdownResult,
};
use mozart_ipc::{methods, parse_params, ErrorObjectOwned, RpcError, RpcModule};

use crate::probe;
use crate::{ConductorCtx, ConductorError};

type Ctx = Arc<ConductorCtx>;
type RpcResult<T> = Result<T, ErrorObjectOwned>;

fn to_value<T: serde::Serialize>(value: T) -> RpcResult<serde_json::Value> {
    serde_json::to_value(value).map_err(|err| RpcError::internal(err).into())
}

fn reg(err: jsonrpsee_error::RegisterMethodError) -> ConductorError {
    ConductorError::Register(err.to_string())
}

/// Register every `daemon.*` method on `module`.
pub fn register_daemon_methods(module: &mut RpcModule<Ctx>) -> Result<(), ConductorError> {
    register_liveness(module)?;
    register_control(module)?;
    register_job_views(module)
}

/// `daemon.hello`, `daemon.health`, `daemon.ready` and `daemon.status`: whether the
/// conductor lives, can take work, and how it stands.
fn register_liveness(module: &mut RpcModule<Ctx>) -> Result<(), ConductorError> {
    module
        .register_method(methods::DAEMON_HELLO, |_, ctx, _| {
            to_value(HelloResult {
                protocol_version: mozart_ipc::PROTOCOL_VERSION,
                version: mozart_ipc::VERSION.to_string(),
                pid: ctx.pid,
            })
        })
        .map_err(reg)?;

    // Liveness must stay cheap and answer during shutdown (§7.8, §8.16).
    module
        .register_method(methods::DAEMON_HEALTH, |_, ctx, _| {
            to_value(HealthResult {
                status: "ok".into(),
                pid: ctx.pid,
                uptime_seconds: ctx.uptime_seconds(),
                shutting_down: ctx.is_shutting_down(),
            })
        })
        .map_err(reg)?;

    module
        .register_async_method(methods::DAEMON_READY, |_, ctx, _| async move {
            to_value(readiness(&ctx).await)
        })
        .map_err(reg)?;

    module
        .register_async_method(methods::DAEMON_STATUS, |_, ctx, _| async move {
            let counts = ctx.job_counts().await;
            to_value(DaemonStatus {
                pid: ctx.pid,
                uptime_seconds: ctx.uptime_seconds(),
                running_jobs: counts.running,
                total_jobs_active: counts.running,
                memory_usage_mb: probe::rss_mb(ctx.pid),
                version: mozart_ipc::VERSION.to_string(),
                socket: Some(ctx.paths.socket.display().to_string()),
                jobs_by_status: counts.by_status,
                protocol_version: Some(mozart_ipc::PROTOCOL_VERSION),
            })
        })
        .map_err(reg)?;

    Ok(())
}

/// `daemon.shutdown` and `daemon.config`: stop the conductor, show its configuration.
fn register_control(module: &mut RpcModule<Ctx>) -> Result<(), ConductorError> {
    module
        .register_method(methods::DAEMON_SHUTDOWN, |params, ctx, _| {
            let params: ShutdownParams = parse_params(&params)?;
            ctx.request_shutdown(params.graceful);
            to_value(ShutdownResult {
                shutting_down: true,
            })
        })
        .map_err(reg)?;

    module
        .register_method(methods::DAEMON_CONFIG, |_, ctx, _| {
            let mut config = to_value(ctx.config())?;
            fill_resolved_paths(&mut config, &ctx.paths);
            Ok::<_, ErrorObjectOwned>(config)
        })
        .map_err(reg)?;

    Ok(())
}

/// The job engine's views the conductor answers even without one: rate limits, observer
/// events, learned patterns.
fn register_job_views(module: &mut RpcModule<Ctx>) -> Result<(), ConductorError> {
    module
        .register_method(methods::DAEMON_RATE_LIMITS, |_, ctx, _| {
            to_value(ctx.job_host().map(|h| h.rate_limits()).unwrap_or_default())
        })
        .map_err(reg)?;

    module
        .register_method(methods::DAEMON_CLEAR_RATE_LIMITS, |params, ctx, _| {
            let params: ClearRateLimitsParams = parse_params(&params)?;
            let cleared = ctx
                .job_host()
                .map(|h| h.clear_rate_limits(params.instrument.as_deref()))
                .unwrap_or(0);
            to_value(ClearRateLimitsResult {
                cleared,
                instrument: params.instrument,
            })
        })
        .map_err(reg)?;

    // daemon.top, daemon.top.stream, daemon.events and daemon.monitor.stream read the jobs'
    // live state: the job manager registers them (manager/rpc/monitor.rs).
    // §8.22: `{"events": []}` without a job engine.
    module
        .register_async_method(
            methods::DAEMON_OBSERVER_EVENTS,
            |params, ctx, _| async move {
                let params: mozart_ipc::types::ObserverEventsParams =
                    parse_params(&params).map_err(ErrorObjectOwned::from)?;
                let events = match ctx.job_host() {
                    Some(h) => {
                        h.observer_events(params.job_id.as_deref(), params.limit)
                            .await
                    }
                    None => Vec::new(),
                };
                to_value(mozart_ipc::status::ObserverEventsResult { events })
            },
        )
        .map_err(reg)?;
    // §8.25: `{"patterns": []}` when there is no learning store.
    module
        .register_method(methods::DAEMON_LEARNING_PATTERNS, |params, ctx, _| {
            let params: mozart_ipc::types::PatternsParams =
                parse_params(&params).map_err(ErrorObjectOwned::from)?;
            let patterns = ctx
                .job_host()
                .map(|h| h.learning_patterns(params.limit))
                .unwrap_or_default();
            to_value(mozart_ipc::status::PatternsResult { patterns })
        })
        .map_err(reg)?;
    Ok(())
}

/// `daemon.ready`'s answer: ready only when started, not shutting down, and with room on
/// disk.
async fn readiness(ctx: &ConductorCtx) -> ReadyResult {
    let started = ctx.is_ready();
    let running_jobs = ctx.job_counts().await.running;
    // Submissions are refused on a full disk: "ready" would be untrue then.
    let reason = if started {
        probe::disk_full(&ctx.paths.home)
    } else if ctx.is_shutting_down() {
        Some("shutting down".into())
    } else {
        Some(ReadyResult::STARTING_UP.into())
    };
    let ready = started && reason.is_none();
    ReadyResult {
        status: if ready { "ready" } else { "not_ready" }.into(),
        running_jobs,
        memory_mb: probe::rss_mb(ctx.pid),
        child_processes: probe::child_count(ctx.pid),
        accepting_work: ready,
        shutting_down: ctx.is_shutting_down(),
        failure_rate_elevated: false,
        notifications_degraded: false,
        uptime_seconds: ctx.uptime_seconds(),
        reason,
    }
}

/// Name the paths this conductor really uses where the config leaves them unset: upstream's
/// `DaemonConfig` model (what its `mozart config show` validates the answer with) requires
/// `socket.path`, `pid_file` and `state_db_path` to be paths, never null (§3.5).
fn fill_resolved_paths(config: &mut serde_json::Value, paths: &crate::ConductorPaths) {
    let text = |p: &std::path::Path| serde_json::Value::from(p.display().to_string());
    if let Some(socket) = config.get_mut("socket") {
        if socket.get("path").is_some_and(serde_json::Value::is_null) {
            socket["path"] = text(&paths.socket);
        }
    }
    for (key, path) in [
        ("pid_file", &paths.pid_file),
        ("state_db_path", &paths.registry_db),
    ] {
        if config.get(key).is_some_and(serde_json::Value::is_null) {
            config[key] = text(path);
        }
    }
}

mod jsonrpsee_error {
    pub use mozart_ipc::jsonrpsee::core::error::RegisterMethodError;
}
