//! JSON-RPC method names (conductor.md §8.26), plus our own `daemon.hello`.
//!
//! Names are the wire contract with upstream's Python CLI: never rename one.

/// Submit a score as a job (§8.1).
pub const JOB_SUBMIT: &str = "job.submit";
/// One job's checkpoint or metadata (§8.2).
pub const JOB_STATUS: &str = "job.status";
/// Pause a running job (§8.3).
pub const JOB_PAUSE: &str = "job.pause";
/// Resume a paused / failed / cancelled job (§8.4).
pub const JOB_RESUME: &str = "job.resume";
/// Apply a new score file to a job (§8.5).
pub const JOB_MODIFY: &str = "job.modify";
/// Cancel a job (§8.6).
pub const JOB_CANCEL: &str = "job.cancel";
/// List jobs (§8.7).
pub const JOB_LIST: &str = "job.list";
/// Remove finished jobs from the registry (§8.8).
pub const JOB_CLEAR: &str = "job.clear";
/// A job's state for `mozart errors` (§8.9).
pub const JOB_ERRORS: &str = "job.errors";
/// A job's state and workspace for `mozart diagnose` (§8.10).
pub const JOB_DIAGNOSE: &str = "job.diagnose";
/// Execution history rows (§8.11).
pub const JOB_HISTORY: &str = "job.history";
/// State for local recovery (§8.12).
pub const JOB_RECOVER: &str = "job.recover";
/// Conductor overview (§8.13).
pub const DAEMON_STATUS: &str = "daemon.status";
/// Graceful or immediate shutdown (§8.14).
pub const DAEMON_SHUTDOWN: &str = "daemon.shutdown";
/// The live configuration (§8.15).
pub const DAEMON_CONFIG: &str = "daemon.config";
/// Liveness probe (§8.16).
pub const DAEMON_HEALTH: &str = "daemon.health";
/// Readiness probe (§8.17).
pub const DAEMON_READY: &str = "daemon.ready";
/// Latest system snapshot (§8.18).
pub const DAEMON_TOP: &str = "daemon.top";
/// Location of the profiler's JSONL stream (§8.19).
pub const DAEMON_TOP_STREAM: &str = "daemon.top.stream";
/// Recent process events (§8.20).
pub const DAEMON_EVENTS: &str = "daemon.events";
/// Streaming event subscription (§8.21).
pub const DAEMON_MONITOR_STREAM: &str = "daemon.monitor.stream";
/// Observer ring buffer (§8.22).
pub const DAEMON_OBSERVER_EVENTS: &str = "daemon.observer_events";
/// Active rate limits (§8.23).
pub const DAEMON_RATE_LIMITS: &str = "daemon.rate_limits";
/// Clear rate limits (§8.24).
pub const DAEMON_CLEAR_RATE_LIMITS: &str = "daemon.clear_rate_limits";
/// Learned patterns (§8.25).
pub const DAEMON_LEARNING_PATTERNS: &str = "daemon.learning.patterns";
/// Ours, not upstream's: version handshake returning [`crate::types::HelloResult`].
pub const DAEMON_HELLO: &str = "daemon.hello";

/// Ours, not upstream's: subscription streaming the conductor's log lines about one job
/// (or all) and the live progress of its running sheets (`mozart logs --follow`).
pub const JOB_LOGS_FOLLOW: &str = "job.logs.follow";
/// Unsubscribe method of [`JOB_LOGS_FOLLOW`].
pub const JOB_LOGS_UNFOLLOW: &str = "job.logs.unfollow";
/// Server → client notification of [`JOB_LOGS_FOLLOW`]: a [`crate::types::LogFollowItem`].
pub const JOB_LOGS_NOTIFICATION: &str = "job.logs.entry";

/// Ours, not upstream's: one page of `job.list` with the total — params
/// [`crate::types::ListPageParams`], result [`crate::status::JobPage`].
pub const JOB_LIST_PAGE: &str = "job.list_page";

/// Ours, not upstream's: `mozart status`'s overview in one round trip — the conductor's
/// uptime and several [`JOB_LIST_PAGE`] pages; params [`crate::types::OverviewParams`],
/// result [`crate::status::Overview`].
pub const JOB_OVERVIEW: &str = "job.overview";

/// Ours, not upstream's: the progress of several loaded jobs in one call (a jobs list's
/// rows); params [`crate::types::ProgressParams`], result [`crate::status::ProgressResult`].
pub const JOB_PROGRESS: &str = "job.progress";

/// Ours, not upstream's: wait (a bounded time) until a just-submitted job shows whether it
/// runs — its first sheet completed, it ended, paused or waits for a job slot — params
/// [`crate::types::JobWatchParams`], result [`crate::types::JobWatchResult`]. `mozart run`'s
/// early-failure watch (cli.md §3.1 step 8) in one call instead of a poll loop.
pub const JOB_WATCH: &str = "job.watch";

/// Ours, not upstream's: the instrument profiles the running conductor loaded (it reads
/// them when it starts) — no params, result `{"instruments": {NAME: PROFILE, …}}`, each
/// profile as the conductor holds it. `mozart instruments list/check` compare them with the
/// profile files: one added or changed since the conductor started is not what it runs.
pub const DAEMON_INSTRUMENTS: &str = "daemon.instruments";

/// Server → client notification carrying a monitor event (§7.7).
pub const MONITOR_EVENT_NOTIFICATION: &str = "monitor.event";

/// Every `job.*` method, in the order of the spec's index.
pub const JOB_METHODS: [&str; 12] = [
    JOB_SUBMIT,
    JOB_STATUS,
    JOB_PAUSE,
    JOB_RESUME,
    JOB_MODIFY,
    JOB_CANCEL,
    JOB_LIST,
    JOB_CLEAR,
    JOB_ERRORS,
    JOB_DIAGNOSE,
    JOB_HISTORY,
    JOB_RECOVER,
];

/// Every `daemon.*` method of the spec (13), without our `daemon.hello`.
pub const DAEMON_METHODS: [&str; 13] = [
    DAEMON_STATUS,
    DAEMON_SHUTDOWN,
    DAEMON_CONFIG,
    DAEMON_HEALTH,
    DAEMON_READY,
    DAEMON_TOP,
    DAEMON_TOP_STREAM,
    DAEMON_EVENTS,
    DAEMON_MONITOR_STREAM,
    DAEMON_OBSERVER_EVENTS,
    DAEMON_RATE_LIMITS,
    DAEMON_CLEAR_RATE_LIMITS,
    DAEMON_LEARNING_PATTERNS,
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_lists_twenty_five_methods_all_distinct() {
        let mut all: Vec<&str> = JOB_METHODS
            .iter()
            .chain(DAEMON_METHODS.iter())
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 25);
        assert!(!all.contains(&DAEMON_HELLO));
    }
}
