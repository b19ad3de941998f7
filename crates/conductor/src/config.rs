//! `conductor.yaml`: the `DaemonConfig` schema of conductor.md §3, profiles, and loading.
//!
//! Unknown keys are refused everywhere (upstream models use `extra="forbid"`); the error
//! names the field path. Fields this port does not act on are accepted and warned about
//! at startup, as upstream does for its reserved fields (§3.3).

use std::path::{Path, PathBuf};

use mozart_yaml::{Node, NodeKind};
use serde::{Deserialize, Serialize};

use crate::ConductorError;

/// Top-level conductor configuration (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// The IPC socket.
    pub socket: SocketConfig,
    /// PID file; defaults to `<home>/conductor.pid`.
    pub pid_file: Option<PathBuf>,
    /// Jobs run at once (1..=50).
    pub max_concurrent_jobs: u32,
    /// Sheets run at once across jobs (1..=100).
    pub max_concurrent_sheets: u32,
    /// Resource budgets.
    pub resource_limits: ResourceLimitConfig,
    /// Only `sqlite`.
    pub state_backend_type: String,
    /// Job registry; defaults to `<home>/registry.db`.
    pub state_db_path: Option<PathBuf>,
    /// `debug`, `info`, `warning` or `error`.
    pub log_level: String,
    /// Log file; defaults to `<home>/logs/conductor.log`.
    pub log_file: Option<PathBuf>,
    /// Per-job wall-clock cap (>= 60).
    pub job_timeout_seconds: f64,
    /// Graceful-shutdown wait (>= 10).
    pub shutdown_timeout_seconds: f64,
    /// Resource monitor period (>= 5).
    pub monitor_interval_seconds: f64,
    /// Terminal jobs kept in memory (>= 10).
    pub max_job_history: u32,
    /// Injected into scores without a thinking method.
    pub default_thinking_method: Option<String>,
    /// Observer settings (accepted; no observer yet).
    pub observer: ObserverConfig,
    /// Semantic learning settings.
    pub learning: SemanticLearningConfig,
    /// Profiler settings (accepted; no profiler yet).
    pub profiler: ProfilerConfig,
    /// Preflight token thresholds.
    pub preflight: PreflightConfig,
    /// Baton engine (the only engine in this port).
    pub use_baton: bool,
    /// Ours: serve the web dashboard from the conductor process (docs/dashboard.md). Never
    /// sent by `daemon.config`: upstream's model has no such key, and the token stays here.
    #[serde(skip_serializing)]
    pub dashboard: DashboardConfig,
    /// The file this config came from (set on load).
    pub config_file: Option<PathBuf>,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: SocketConfig::default(),
            pid_file: None,
            max_concurrent_jobs: 15,
            max_concurrent_sheets: 10,
            resource_limits: ResourceLimitConfig::default(),
            state_backend_type: "sqlite".into(),
            state_db_path: None,
            log_level: "info".into(),
            log_file: None,
            job_timeout_seconds: 86400.0,
            shutdown_timeout_seconds: 300.0,
            monitor_interval_seconds: 15.0,
            max_job_history: 1000,
            default_thinking_method: None,
            observer: ObserverConfig::default(),
            learning: SemanticLearningConfig::default(),
            profiler: ProfilerConfig::default(),
            preflight: PreflightConfig::default(),
            use_baton: true,
            dashboard: DashboardConfig::default(),
            config_file: None,
        }
    }
}

/// `dashboard:` (ours): the web dashboard inside the conductor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DashboardConfig {
    /// Serve it.
    pub enabled: bool,
    /// Address to bind; anything but loopback needs `token`.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Access token (at least 16 characters); without it the owner's token file
    /// (`dashboard.token` in the Mozart home) guards the dashboard.
    pub token: Option<String>,
}

/// A field of `conductor.yaml` that fails its check, and why.
type FieldError = (&'static str, String);

impl DashboardConfig {
    /// The dashboard's host is an IP address; off loopback it needs a token of 16
    /// characters or more.
    fn check(&self) -> Result<(), FieldError> {
        let d = self;
        match d.host.parse::<std::net::IpAddr>() {
            Err(_) => return Err(("dashboard.host", "must be an IP address".into())),
            Ok(ip) if d.enabled && !ip.is_loopback() && d.token.is_none() => {
                return Err((
                    "dashboard.token",
                    "is required when dashboard.host is not a loopback address".into(),
                ))
            }
            Ok(_) => {}
        }
        if d.token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(("dashboard.token", "must be at least 16 characters".into()));
        }
        Ok(())
    }
}

impl Default for DashboardConfig {
    fn default() -> Self {
        DashboardConfig {
            enabled: false,
            host: "127.0.0.1".into(),
            port: 8000,
            token: None,
        }
    }
}

/// `socket:` (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SocketConfig {
    /// Socket path; defaults per architecture.md "Paths".
    pub path: Option<PathBuf>,
    /// Accepted for compatibility; the socket is always 0600 (invariant 6).
    pub permissions: u32,
    /// Connections served at once (upstream's meaning, §7.3); our default is larger.
    pub backlog: u32,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            path: None,
            permissions: 0o600,
            backlog: 64,
        }
    }
}

/// `resource_limits:` (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceLimitConfig {
    /// Conductor RSS budget (>= 512).
    pub max_memory_mb: u64,
    /// Descendant process budget (>= 5).
    pub max_processes: u32,
    /// Must stay 60 (not enforced upstream either).
    pub max_api_calls_per_minute: u32,
}

impl Default for ResourceLimitConfig {
    fn default() -> Self {
        ResourceLimitConfig {
            max_memory_mb: 8192,
            max_processes: 50,
            max_api_calls_per_minute: 60,
        }
    }
}

/// The largest decimal setting: a year, in seconds (a timeout, an interval).
const MAX_SETTING_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// `observer:` (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObserverConfig {
    /// Enable the observer.
    pub enabled: bool,
    /// Poll period (>= 0.5).
    pub watch_interval_seconds: f64,
    /// Snapshot retention (>= 1).
    pub snapshot_ttl_hours: u32,
    /// Per-subscriber queue (>= 100).
    pub max_queue_size: u32,
    /// Write `.mozart-observer.jsonl`.
    pub persist_events: bool,
    /// Ignored paths.
    pub exclude_patterns: Vec<String>,
    /// Event coalescing window (>= 0).
    pub coalesce_window_seconds: f64,
    /// Timeline cap (>= 4096).
    pub max_timeline_bytes: u64,
}

impl Default for ObserverConfig {
    fn default() -> Self {
        ObserverConfig {
            enabled: true,
            watch_interval_seconds: 2.0,
            snapshot_ttl_hours: 168,
            max_queue_size: 1000,
            persist_events: true,
            exclude_patterns: [".git/", "__pycache__/", "node_modules/", ".venv/", "*.pyc"]
                .map(String::from)
                .to_vec(),
            coalesce_window_seconds: 2.0,
            max_timeline_bytes: 10_485_760,
        }
    }
}

/// `learning:` (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SemanticLearningConfig {
    /// Enable the semantic analyzer.
    pub enabled: bool,
    /// The analyzer's backend (a score `BackendConfig`, kept as given).
    pub backend: serde_json::Value,
    /// `success` and/or `failure`.
    pub analyze_on: Vec<String>,
    /// 1..=20.
    pub max_concurrent_analyses: u32,
    /// 0..=1.
    pub entropy_threshold: f64,
    /// 0.05..=0.5.
    pub exploration_budget: f64,
    /// >= 60.
    pub entropy_check_interval_seconds: f64,
}

impl Default for SemanticLearningConfig {
    fn default() -> Self {
        SemanticLearningConfig {
            enabled: true,
            backend: serde_json::json!({
                "type": "anthropic_api",
                "model": "claude-sonnet-4-5-20250929",
                "temperature": 0.3,
                "max_tokens": 4096,
                "timeout_seconds": 120.0,
            }),
            analyze_on: vec!["success".into(), "failure".into()],
            max_concurrent_analyses: 3,
            entropy_threshold: 0.1,
            exploration_budget: 0.15,
            entropy_check_interval_seconds: 3600.0,
        }
    }
}

/// `profiler:` (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfilerConfig {
    /// Enable the profiler.
    pub enabled: bool,
    /// Snapshot period (>= 1).
    pub interval_seconds: f64,
    /// strace sampling.
    pub strace_enabled: bool,
    /// Full strace on demand.
    pub strace_full_on_demand: bool,
    /// GPU probing.
    pub gpu_enabled: bool,
    /// Profiler DB.
    pub storage_path: String,
    /// Profiler JSONL stream.
    pub jsonl_path: String,
    /// JSONL cap (>= 1 MiB).
    pub jsonl_max_bytes: u64,
    /// Retention windows.
    pub retention: RetentionConfig,
    /// Anomaly thresholds.
    pub anomaly: AnomalyConfig,
    /// Correlation analysis.
    pub correlation: CorrelationConfig,
}

impl Default for ProfilerConfig {
    fn default() -> Self {
        ProfilerConfig {
            enabled: true,
            interval_seconds: 5.0,
            strace_enabled: false,
            strace_full_on_demand: true,
            gpu_enabled: false,
            storage_path: "~/.mozart/monitor.db".into(),
            jsonl_path: "~/.mozart/monitor.jsonl".into(),
            jsonl_max_bytes: 52_428_800,
            retention: RetentionConfig::default(),
            anomaly: AnomalyConfig::default(),
            correlation: CorrelationConfig::default(),
        }
    }
}

/// `profiler.retention:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Hours at full resolution.
    pub full_resolution_hours: u32,
    /// Days downsampled.
    pub downsampled_days: u32,
    /// Days of process events.
    pub events_days: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            full_resolution_hours: 24,
            downsampled_days: 7,
            events_days: 30,
        }
    }
}

/// `profiler.anomaly:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnomalyConfig {
    /// Memory spike factor.
    pub memory_spike_threshold: f64,
    /// Memory spike window.
    pub memory_spike_window_seconds: f64,
    /// Runaway CPU percent.
    pub runaway_cpu_threshold: f64,
    /// Runaway duration.
    pub runaway_duration_seconds: f64,
}

impl Default for AnomalyConfig {
    fn default() -> Self {
        AnomalyConfig {
            memory_spike_threshold: 1.5,
            memory_spike_window_seconds: 30.0,
            runaway_cpu_threshold: 90.0,
            runaway_duration_seconds: 60.0,
        }
    }
}

/// `profiler.correlation:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorrelationConfig {
    /// Analysis period.
    pub interval_minutes: u32,
    /// Minimum samples.
    pub min_sample_size: u32,
}

impl Default for CorrelationConfig {
    fn default() -> Self {
        CorrelationConfig {
            interval_minutes: 30,
            min_sample_size: 5,
        }
    }
}

/// `preflight:` (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PreflightConfig {
    /// Warn above this many prompt tokens (0 disables).
    pub token_warning_threshold: u64,
    /// Fail above this many prompt tokens (0 disables).
    pub token_error_threshold: u64,
}

impl Default for PreflightConfig {
    fn default() -> Self {
        PreflightConfig {
            token_warning_threshold: 50_000,
            token_error_threshold: 150_000,
        }
    }
}

/// Built-in profiles (§3.4), deep-merged over the file's data.
fn profile_yaml(name: &str) -> Result<&'static str, ConductorError> {
    match name {
        "dev" => Ok("log_level: debug\nmax_concurrent_jobs: 2\nprofiler: {enabled: true, strace_enabled: true, interval_seconds: 2.0}\n"),
        "intensive" => Ok("job_timeout_seconds: 172800\nresource_limits: {max_memory_mb: 16384, max_processes: 100}\n"),
        "minimal" => Ok("max_concurrent_jobs: 2\nprofiler: {enabled: false}\nlearning: {enabled: false}\n"),
        other => Err(ConductorError::UnknownProfile(other.to_string())),
    }
}

/// Merge `over` into `base` key by key (mappings recursively; anything else replaces).
fn deep_merge(base: &mut Node, over: Node) {
    match (&mut base.kind, over.kind) {
        (NodeKind::Map(entries), NodeKind::Map(over)) => {
            for (key, value) in over {
                match entries
                    .iter_mut()
                    .find(|(k, _)| k.key_text() == key.key_text())
                {
                    Some((_, slot)) => deep_merge(slot, value),
                    None => entries.push((key, value)),
                }
            }
        }
        (_, kind) => {
            base.kind = kind;
            base.line = over.line;
        }
    }
}

/// Line 0 everywhere: a built-in profile's values are not in the user's file, so an error
/// about one must not point at a line of it.
fn unplaced(node: &mut Node) {
    node.line = 0;
    match &mut node.kind {
        NodeKind::Seq(items) => items.iter_mut().for_each(unplaced),
        NodeKind::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            unplaced(k);
            unplaced(v);
        }),
        _ => {}
    }
}

/// An empty mapping (a missing or empty file).
fn empty_mapping() -> Node {
    Node {
        kind: NodeKind::Map(Vec::new()),
        line: 0,
        col: 0,
    }
}

/// What to do about a conductor.yaml that does not load.
const FIX: &str =
    "Correct it in the file (docs/conductor.md lists the keys), then run 'mozart config check'";

/// The line of the dotted `field` (`socket.backlog`) in the file's tree; `None` when it is
/// not there (a default) or came from a built-in profile (line 0).
fn line_of(root: &Node, field: &str) -> Option<usize> {
    let mut node = root;
    for part in field.split('.') {
        let NodeKind::Map(entries) = &node.kind else {
            return None;
        };
        node = &entries.iter().find(|(k, _)| k.key_text() == part)?.1;
    }
    (node.line > 0).then_some(node.line)
}

/// Where config errors point when no file was involved.
fn defaults_path() -> PathBuf {
    PathBuf::from("<defaults>")
}

impl DaemonConfig {
    /// Load `file` if it exists (a missing file means defaults, §3.1 step 1), merge the
    /// profile over it, validate, and record `config_file`.
    pub fn load(
        file: Option<&Path>,
        profile: Option<&str>,
    ) -> Result<DaemonConfig, ConductorError> {
        Self::load_noting(file, profile).map(|(config, _)| config)
    }

    /// [`load`](Self::load), with what the file's reader should be told though it loads: each
    /// key given twice in one mapping (`duplicate key 'socket.backlog' on lines 3 and 7: only
    /// the last value (line 7) is used`), as a score's are.
    pub fn load_noting(
        file: Option<&Path>,
        profile: Option<&str>,
    ) -> Result<(DaemonConfig, Vec<String>), ConductorError> {
        let mut warnings = Vec::new();
        let (mut data, origin) = match file {
            Some(path) if path.exists() => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ConductorError::ConfigRead {
                        path: path.to_path_buf(),
                        source,
                    })?;
                // The score loader's YAML 1.1 (`enabled: yes`, `on`, octal, …), so what a
                // score accepts conductor.yaml accepts too.
                let (node, duplicates) =
                    mozart_yaml::parse_noting_duplicates(&text).map_err(|err| {
                        ConductorError::ConfigInvalid {
                            path: path.to_path_buf(),
                            message: format!("{err}. {FIX}"),
                        }
                    })?;
                warnings.extend(duplicates.iter().map(mozart_yaml::DuplicateKey::warning));
                (node, Some(path.to_path_buf()))
            }
            _ => (None, None),
        };
        let shown = origin.clone().unwrap_or_else(defaults_path);
        if let Some(name) = profile {
            let mut over = mozart_yaml::parse(profile_yaml(name)?)
                .map_err(|err| ConductorError::ConfigInvalid {
                    path: shown.clone(),
                    message: format!("profile {name}: {err}"),
                })?
                .unwrap_or_else(empty_mapping);
            unplaced(&mut over);
            deep_merge(data.get_or_insert_with(empty_mapping), over);
        }
        let mut config = DaemonConfig::from_node(data.as_ref(), &shown)?;
        config.config_file = origin.map(|p| std::path::absolute(&p).unwrap_or(p));
        // A relative `log_file` is the config file's neighbour, wherever a command runs
        // (`mozart logs` from another directory finds the log the conductor writes).
        if let (Some(file), Some(log)) = (&config.config_file, &config.log_file) {
            if log.is_relative() {
                if let Some(dir) = file.parent() {
                    config.log_file = Some(dir.join(log));
                }
            }
        }
        Ok((config, warnings))
    }

    /// The config a loaded conductor.yaml tree gives (`None` or `null`: all defaults),
    /// validated; errors name `path`, the field path and the line in the file.
    pub fn from_node(node: Option<&Node>, path: &Path) -> Result<DaemonConfig, ConductorError> {
        // Straight from the tree: an error names the field path and the line in the user's
        // file (`line 7: socket.backlog: must be a whole number …, not the text "lots"`).
        let config: DaemonConfig = match node {
            // A file with no document (empty, or only comments) is all defaults.
            None
            | Some(Node {
                kind: NodeKind::Null,
                ..
            }) => DaemonConfig::default(),
            Some(node) => {
                mozart_yaml::from_node(node).map_err(|err| ConductorError::ConfigInvalid {
                    path: path.to_path_buf(),
                    message: format!("{err}. {FIX}"),
                })?
            }
        };
        config.validate(path).map_err(|err| match err {
            // Out of range: where it is in the file, and what to do, as for a misfit type.
            ConductorError::ConfigField {
                path,
                field,
                message,
            } => {
                let at = node
                    .and_then(|n| line_of(n, &field))
                    .map(|line| format!("line {line}: "))
                    .unwrap_or_default();
                ConductorError::ConfigInvalid {
                    path,
                    message: format!("{at}{field}: {message}. {FIX}"),
                }
            }
            other => other,
        })?;
        Ok(config)
    }

    /// Range checks of §3.2, naming the field.
    pub fn validate(&self, path: &Path) -> Result<(), ConductorError> {
        self.check_numbers()
            .and_then(|()| self.check_limits())
            .and_then(|()| self.check_settings())
            .and_then(|()| self.check_preflight_and_learning())
            .and_then(|()| self.check_section_bounds())
            .and_then(|()| self.dashboard.check())
            .map_err(|(field, message)| ConductorError::ConfigField {
                path: path.to_path_buf(),
                field: field.to_string(),
                message,
            })
    }

    /// What `mozart start` would refuse about the paths this config names, found without
    /// starting one (`config check`, `config set`, and `restart` before it stops the running
    /// conductor): the directory of `log_file` and, when `check_socket` (no `--socket` or
    /// `$MOZART_SOCKET` overrides it), of `socket.path` must exist or be creatable, and be
    /// writable. The error names the file and the key.
    pub fn check_paths(&self, path: &Path, check_socket: bool) -> Result<(), ConductorError> {
        let field = |field: &str, message: String| ConductorError::ConfigField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if let Some(log) = &self.log_file {
            // Relative: beside the config file (as `load` resolves it).
            let log = &match (log.is_relative(), path.parent()) {
                (true, Some(dir)) => dir.join(log),
                _ => log.clone(),
            };
            if let Some(problem) = dir_problem(log.parent().unwrap_or(Path::new("/"))) {
                return Err(field(
                    "log_file",
                    format!("{problem}, so the conductor could not write its log {}. Set it to a file in a directory you can write (mozart config set log_file PATH)", log.display()),
                ));
            }
        }
        if let (true, Some(socket)) = (check_socket, &self.socket.path) {
            if let Some(problem) = dir_problem(socket.parent().unwrap_or(Path::new("/"))) {
                return Err(field(
                    "socket.path",
                    format!("{problem}, so the conductor could not listen on {}. Set it to a path in a directory you can write (mozart config set socket.path PATH)", socket.display()),
                ));
            }
        }
        Ok(())
    }

    /// Every decimal setting is a number and not beyond what a timer can hold: `.inf`, `.nan`
    /// or `1e300` passed the range checks below (NaN and infinity compare as neither too small
    /// nor wrong) and then panicked the conductor when it made a duration of it (`mozart stop`
    /// with `shutdown_timeout_seconds: inf`), failed every job at once (`job_timeout_seconds:
    /// .nan`) or every submission (`1e300`).
    fn check_numbers(&self) -> Result<(), FieldError> {
        let numbers = [
            ("job_timeout_seconds", self.job_timeout_seconds),
            ("shutdown_timeout_seconds", self.shutdown_timeout_seconds),
            ("monitor_interval_seconds", self.monitor_interval_seconds),
            (
                "observer.watch_interval_seconds",
                self.observer.watch_interval_seconds,
            ),
            (
                "observer.coalesce_window_seconds",
                self.observer.coalesce_window_seconds,
            ),
            (
                "learning.entropy_threshold",
                self.learning.entropy_threshold,
            ),
            (
                "learning.exploration_budget",
                self.learning.exploration_budget,
            ),
            (
                "learning.entropy_check_interval_seconds",
                self.learning.entropy_check_interval_seconds,
            ),
            ("profiler.interval_seconds", self.profiler.interval_seconds),
            (
                "profiler.anomaly.memory_spike_threshold",
                self.profiler.anomaly.memory_spike_threshold,
            ),
            (
                "profiler.anomaly.memory_spike_window_seconds",
                self.profiler.anomaly.memory_spike_window_seconds,
            ),
            (
                "profiler.anomaly.runaway_cpu_threshold",
                self.profiler.anomaly.runaway_cpu_threshold,
            ),
            (
                "profiler.anomaly.runaway_duration_seconds",
                self.profiler.anomaly.runaway_duration_seconds,
            ),
        ];
        for (field, value) in numbers {
            if !value.is_finite() {
                return Err((field, format!("must be a number, not {value}")));
            }
            if value.abs() > MAX_SETTING_SECONDS {
                return Err((
                    field,
                    format!("must be at most {MAX_SETTING_SECONDS:.0} (a year), not {value:e}"),
                ));
            }
        }
        Ok(())
    }

    /// Upstream's lower bounds of the `observer:`, `learning:` and `profiler:` fields (spec
    /// conductor.md §3.2): a file upstream refuses is refused here too, even where this port
    /// does not use the field.
    fn check_section_bounds(&self) -> Result<(), FieldError> {
        let (o, p) = (&self.observer, &self.profiler);
        let floats = [
            (
                "observer.watch_interval_seconds",
                o.watch_interval_seconds,
                0.5,
            ),
            (
                "observer.coalesce_window_seconds",
                o.coalesce_window_seconds,
                0.0,
            ),
            (
                "learning.entropy_check_interval_seconds",
                self.learning.entropy_check_interval_seconds,
                60.0,
            ),
            ("profiler.interval_seconds", p.interval_seconds, 1.0),
        ];
        for (field, value, min) in floats {
            if value < min {
                return Err((field, format!("must be at least {min}, not {value}")));
            }
        }
        let whole = [
            (
                "observer.snapshot_ttl_hours",
                u64::from(o.snapshot_ttl_hours),
                1,
            ),
            ("observer.max_queue_size", u64::from(o.max_queue_size), 100),
            ("observer.max_timeline_bytes", o.max_timeline_bytes, 4096),
            ("profiler.jsonl_max_bytes", p.jsonl_max_bytes, 1_048_576),
            (
                "profiler.retention.full_resolution_hours",
                u64::from(p.retention.full_resolution_hours),
                1,
            ),
            (
                "profiler.retention.downsampled_days",
                u64::from(p.retention.downsampled_days),
                1,
            ),
            (
                "profiler.retention.events_days",
                u64::from(p.retention.events_days),
                1,
            ),
            (
                "profiler.correlation.interval_minutes",
                u64::from(p.correlation.interval_minutes),
                5,
            ),
            (
                "profiler.correlation.min_sample_size",
                u64::from(p.correlation.min_sample_size),
                2,
            ),
        ];
        for (field, value, min) in whole {
            if value < min {
                return Err((field, format!("must be at least {min}, not {value}")));
            }
        }
        Ok(())
    }

    /// The concurrency, socket and resource limits.
    fn check_limits(&self) -> Result<(), FieldError> {
        if !(1..=50).contains(&self.max_concurrent_jobs) {
            return Err((
                "max_concurrent_jobs",
                format!("must be from 1 to 50, not {}", self.max_concurrent_jobs),
            ));
        }
        if !(1..=100).contains(&self.max_concurrent_sheets) {
            return Err((
                "max_concurrent_sheets",
                format!("must be from 1 to 100, not {}", self.max_concurrent_sheets),
            ));
        }
        if self.socket.permissions > 0o777 {
            return Err((
                "socket.permissions",
                format!("{} is greater than 511 (0o777)", self.socket.permissions),
            ));
        }
        if self.socket.backlog < 1 {
            return Err(("socket.backlog", "must be at least 1".into()));
        }
        if let Some(path) = &self.socket.path {
            let len = path.as_os_str().len();
            if len > mozart_ipc::paths::SUN_PATH_MAX {
                return Err((
                    "socket.path",
                    format!(
                        "is {len} bytes long; a Unix socket path can be at most {} bytes (choose a shorter one)",
                        mozart_ipc::paths::SUN_PATH_MAX
                    ),
                ));
            }
        }
        if self.resource_limits.max_memory_mb < 512 {
            return Err((
                "resource_limits.max_memory_mb",
                "must be at least 512".into(),
            ));
        }
        if self.resource_limits.max_processes < 5 {
            return Err(("resource_limits.max_processes", "must be at least 5".into()));
        }
        if self.resource_limits.max_api_calls_per_minute != 60 {
            return Err((
                "resource_limits.max_api_calls_per_minute",
                format!("ResourceLimitConfig.max_api_calls_per_minute={} is not yet enforced. Remove it or set it to 60.", self.resource_limits.max_api_calls_per_minute),
            ));
        }
        Ok(())
    }

    /// The state backend, log level, timeouts and history length.
    fn check_settings(&self) -> Result<(), FieldError> {
        if self.state_backend_type != "sqlite" {
            return Err((
                "state_backend_type",
                format!(
                    "'{}' is not supported; only 'sqlite'",
                    self.state_backend_type
                ),
            ));
        }
        if !["debug", "info", "warning", "error"].contains(&self.log_level.as_str()) {
            return Err((
                "log_level",
                format!(
                    "'{}' is not one of debug, info, warning, error",
                    self.log_level
                ),
            ));
        }
        if self.job_timeout_seconds < 60.0 {
            return Err(("job_timeout_seconds", "must be at least 60".into()));
        }
        if self.shutdown_timeout_seconds < 10.0 {
            return Err(("shutdown_timeout_seconds", "must be at least 10".into()));
        }
        if self.monitor_interval_seconds < 5.0 {
            return Err(("monitor_interval_seconds", "must be at least 5".into()));
        }
        if self.max_job_history < 10 {
            return Err(("max_job_history", "must be at least 10".into()));
        }
        Ok(())
    }

    /// The preflight token thresholds and the learning settings.
    fn check_preflight_and_learning(&self) -> Result<(), FieldError> {
        let p = &self.preflight;
        if p.token_warning_threshold > 0
            && p.token_error_threshold > 0
            && p.token_warning_threshold >= p.token_error_threshold
        {
            return Err((
                "preflight.token_warning_threshold",
                "must be less than preflight.token_error_threshold".into(),
            ));
        }
        let l = &self.learning;
        if l.analyze_on.is_empty()
            || l.analyze_on
                .iter()
                .any(|v| v != "success" && v != "failure")
        {
            return Err((
                "learning.analyze_on",
                "must list 'success' and/or 'failure'".into(),
            ));
        }
        if !(0.05..=0.5).contains(&l.exploration_budget) {
            return Err((
                "learning.exploration_budget",
                "must be in 0.05..=0.5".into(),
            ));
        }
        if !(0.0..=1.0).contains(&l.entropy_threshold) {
            return Err(("learning.entropy_threshold", "must be in 0..=1".into()));
        }
        Ok(())
    }

    /// Fields accepted but not acted on by this port, as `(field, note)` for startup warnings.
    pub fn unimplemented_fields(&self) -> Vec<(&'static str, &'static str)> {
        let d = DaemonConfig::default();
        let mut out = Vec::new();
        if self.pid_file.is_some() {
            out.push(("pid_file", "the PID file always lives in the Mozart home"));
        }
        if self.state_db_path.is_some() {
            out.push((
                "state_db_path",
                "the registry always lives in the Mozart home",
            ));
        }
        if self.socket.permissions != d.socket.permissions {
            out.push(("socket.permissions", "the socket is always 0600"));
        }
        if self.socket.backlog != d.socket.backlog {
            out.push(("socket.backlog", "1024 clients are served at once"));
        }
        if self.observer != d.observer {
            out.push(("observer", "no file-system observer in this port yet"));
        }
        // `profiler.enabled` and `.interval_seconds` drive `mozart top`; the rest is not used.
        let unused_profiler = ProfilerConfig {
            enabled: d.profiler.enabled,
            interval_seconds: d.profiler.interval_seconds,
            ..self.profiler.clone()
        };
        if unused_profiler != d.profiler {
            out.push((
                "profiler",
                "only profiler.enabled and profiler.interval_seconds are used in this port",
            ));
        }
        if !self.use_baton {
            out.push(("use_baton", "the baton is the only engine in this port"));
        }
        out
    }
}

pub use mozart_ipc::paths::socket_path_from_file;

/// Why the conductor could not create (or write in) directory `dir`, if it could not: the
/// first missing directory is created and removed again to find out (the conductor would
/// create it), an existing one must be writable.
fn dir_problem(dir: &Path) -> Option<String> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut at = dir;
    let mut first_missing = None;
    loop {
        match std::fs::metadata(at) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => return Some(format!("{} is not a directory", at.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                first_missing = Some(at);
                match at.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => at = parent,
                    _ => break,
                }
            }
            Err(e) => return Some(format!("cannot read {}: {e}", at.display())),
        }
    }
    match first_missing {
        Some(missing) => match std::fs::create_dir(missing) {
            Ok(()) => {
                let _ = std::fs::remove_dir(missing);
                None
            }
            Err(e) => Some(format!(
                "cannot create directory {}: {e}",
                missing.display()
            )),
        },
        None => nix::unistd::access(
            dir,
            nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
        )
        .err()
        .map(|e| format!("cannot write in directory {}: {e}", dir.display())),
    }
}

/// When a `conductor.yaml` key takes effect in this conductor — what `mozart config show`
/// and `config set` say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// Read again on a reload (SIGHUP, or `mozart config set` with the conductor running).
    Reload,
    /// Read once at start: takes effect on `mozart restart`.
    Restart,
    /// Accepted for upstream's files, but nothing here uses it (the text says why).
    Unused(&'static str),
}

impl Applies {
    /// `reload`, `restart` or `not used`.
    pub fn label(self) -> &'static str {
        match self {
            Applies::Reload => "reload",
            Applies::Restart => "restart",
            Applies::Unused(_) => "not used",
        }
    }
}

/// When the dotted `key` takes effect (unknown keys count as read at start).
pub fn applies(key: &str) -> Applies {
    let under = |section: &str| key == section || key.starts_with(&format!("{section}."));
    match key {
        "max_concurrent_jobs"
        | "log_level"
        | "job_timeout_seconds"
        | "shutdown_timeout_seconds" => Applies::Reload,
        // They set the pressure level `top` and the dashboard report (nothing is refused).
        "resource_limits.max_memory_mb" | "resource_limits.max_processes" => Applies::Reload,
        "resource_limits.max_api_calls_per_minute" => Applies::Unused("no API-call limiter"),
        // Read when `top` or a monitor stream asks.
        "profiler.enabled" | "profiler.interval_seconds" => Applies::Reload,
        "socket.permissions" => Applies::Unused("the socket is always 0600"),
        "socket.backlog" => Applies::Unused(
            "1024 clients are served at once, so clients that never speak cannot lock the CLI out",
        ),
        "pid_file" | "state_db_path" => Applies::Unused("always in the Mozart home"),
        "state_backend_type" => Applies::Unused("the SQLite registry is the only store"),
        "use_baton" => Applies::Unused("the baton is the only engine"),
        "monitor_interval_seconds" | "max_job_history" | "default_thinking_method" => {
            Applies::Unused("not read by this conductor")
        }
        _ if under("profiler") => Applies::Unused("no profiler storage in this port"),
        _ if under("observer") => Applies::Unused("no file-system observer in this port"),
        _ if under("preflight") => Applies::Unused("no prompt preflight in this port"),
        _ if under("learning") => {
            Applies::Unused("each score's learning: section decides; the store is always on")
        }
        _ => Applies::Restart,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn load_text(text: &str, profile: Option<&str>) -> Result<DaemonConfig, ConductorError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conductor.yaml");
        std::fs::write(&path, text).unwrap();
        DaemonConfig::load(Some(&path), profile)
    }

    /// The message of the error loading `text` gives.
    fn load_err(text: &str, profile: Option<&str>) -> String {
        load_text(text, profile).unwrap_err().to_string()
    }

    #[test]
    fn a_missing_file_means_defaults() {
        let c = DaemonConfig::load(Some(Path::new("/nonexistent/c.yaml")), None).unwrap();
        assert_eq!(c, DaemonConfig::default());
        assert!(c.config_file.is_none());
    }

    /// `.inf`, `.nan` and `1e300` are refused naming the field: they passed the range checks
    /// and then panicked the conductor (a duration of them) or failed every job.
    #[test]
    fn a_setting_that_is_no_number_or_beyond_a_year_is_refused() {
        for (text, field) in [
            (
                "shutdown_timeout_seconds: .inf\n",
                "shutdown_timeout_seconds",
            ),
            ("job_timeout_seconds: .nan\n", "job_timeout_seconds"),
            ("job_timeout_seconds: 1e300\n", "job_timeout_seconds"),
            (
                "profiler: {interval_seconds: 1e300}\n",
                "profiler.interval_seconds",
            ),
        ] {
            let err = load_err(text, None);
            assert!(err.contains(field), "{text}: {err}");
            assert!(
                err.contains("must be a number")
                    || err.contains("must be at most 31536000 (a year)"),
                "{text}: {err}"
            );
        }
        assert!(load_text("job_timeout_seconds: 604800\n", None).is_ok());
    }

    #[test]
    fn unknown_keys_are_refused_with_their_path() {
        let err = load_err("socket:\n  pathh: /tmp/x.sock\n", None);
        assert!(err.contains("pathh"), "{err}");
        assert!(err.contains("socket"), "{err}");
        let err = load_err("bogus: 1\n", None);
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn a_wrongly_typed_field_names_its_path_and_its_line_in_the_file() {
        // Comments and blank lines before it: the line is the user's, not a re-written copy's.
        let err = load_err(
            "# my conductor\n\n# settings\nlog_level: info\n\nsocket:\n  backlog: lots\n",
            None,
        );
        assert!(
            err.contains("line 7: socket.backlog: must be a whole number from 0 to 4294967295, not the text \"lots\""),
            "{err}"
        );
        assert!(err.contains("mozart config check"), "{err}");
        let err = load_err("observer:\n  exclude_patterns:\n    - a\n    - [b]\n", None);
        assert!(
            err.contains("line 4: observer.exclude_patterns[1]"),
            "{err}"
        );
    }

    #[test]
    fn yaml_11_booleans_and_empty_files_load() {
        let c = load_text("dashboard:\n  enabled: yes\nuse_baton: on\n", None).unwrap();
        assert!(c.dashboard.enabled);
        assert!(c.use_baton);
        let c = load_text("# nothing but a comment\n", Some("minimal")).unwrap();
        assert_eq!(c.max_concurrent_jobs, 2);
        // Merged with a profile, the user's values keep their lines.
        let err = load_err("\nprofiler:\n  gpu_enabled: maybe\n", Some("dev"));
        assert!(err.contains("line 3: profiler.gpu_enabled"), "{err}");
    }

    #[test]
    fn ranges_are_checked_naming_the_field() {
        let err = load_err("log_level: info\nmax_concurrent_jobs: 0\n", None);
        assert!(
            err.contains("line 2: max_concurrent_jobs: must be from 1 to 50, not 0"),
            "{err}"
        );
        assert!(err.contains("mozart config check"), "{err}");
        let err = load_err("socket:\n  backlog: 0\n", None);
        assert!(
            err.contains("line 2: socket.backlog: must be at least 1"),
            "{err}"
        );
        let err = load_err("resource_limits: {max_api_calls_per_minute: 30}\n", None);
        assert!(err.contains("is not yet enforced"), "{err}");
    }

    /// The profiler keys `mozart top` uses are not reported as ignored; the others are.
    #[test]
    fn only_the_unused_profiler_keys_are_reported_ignored() {
        let used = load_text("profiler: {enabled: false, interval_seconds: 9.0}\n", None);
        assert_eq!(used.unwrap().unimplemented_fields(), []);
        let unused = load_text("profiler: {gpu_enabled: true}\n", None).unwrap();
        let fields: Vec<&str> = unused
            .unimplemented_fields()
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        assert_eq!(fields, ["profiler"]);
    }

    #[test]
    fn profiles_merge_over_the_file_and_unknown_ones_are_named() {
        let c = load_text(
            "max_concurrent_jobs: 7\nprofiler: {interval_seconds: 9.0}\n",
            Some("dev"),
        )
        .unwrap();
        assert_eq!(c.max_concurrent_jobs, 2);
        assert!(c.profiler.strace_enabled);
        assert_eq!(c.profiler.interval_seconds, 2.0);
        assert!(c.config_file.is_some());
        let err = DaemonConfig::load(None, Some("turbo"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "Unknown daemon profile 'turbo'. Available profiles: dev, intensive, minimal"
        );
    }

    #[test]
    fn clients_read_the_socket_path_even_from_an_invalid_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conductor.yaml");
        std::fs::write(&path, "socket: {path: /tmp/q.sock}\nbogus: 1\n").unwrap();
        assert_eq!(
            socket_path_from_file(&path),
            Some(PathBuf::from("/tmp/q.sock"))
        );
    }
}
