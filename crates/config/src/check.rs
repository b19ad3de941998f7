//! Field constraints and cross-field rules of the score schema (score.md §2–3), checked after
//! serde has produced the raw model. Every violation becomes a pydantic-shaped
//! [`FieldError`] with its dotted location and line.

use crate::de::FieldError;
use crate::model::*;
use crate::yaml::{python_float, Node, NodeKind};

/// Collects violations; `root` is used to find lines.
pub struct Checker<'a> {
    root: &'a Node,
    /// Violations found so far, in model order.
    pub errors: Vec<FieldError>,
}

/// The node at a dotted path of `root`, if present.
pub fn find_node<'a>(root: &'a Node, path: &str) -> Option<&'a Node> {
    let mut node = root;
    if path.is_empty() {
        return Some(node);
    }
    for part in path.split('.') {
        node = match &node.kind {
            NodeKind::Map(entries) => &entries.iter().find(|(k, _)| k.key_text() == part)?.1,
            NodeKind::Seq(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(node)
}

/// The line of the entry a dotted path names: its key's line in a mapping (`2:` of
/// `sheet.dependencies.2`), the item's in a list.
pub fn key_line(root: &Node, path: &str) -> Option<usize> {
    let (parent, last) = path.rsplit_once('.').unwrap_or(("", path));
    match &find_node(root, parent)?.kind {
        NodeKind::Map(entries) => entries
            .iter()
            .find(|(k, _)| k.key_text() == last)
            .map(|(k, _)| k.line),
        NodeKind::Seq(items) => items.get(last.parse::<usize>().ok()?).map(|n| n.line),
        _ => None,
    }
}

fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        python_float(v)
    }
}

impl<'a> Checker<'a> {
    /// A checker over a parsed document.
    pub fn new(root: &'a Node) -> Self {
        Checker {
            root,
            errors: Vec::new(),
        }
    }

    /// The node at a dotted path, if present.
    pub fn find(&self, path: &str) -> Option<&'a Node> {
        find_node(self.root, path)
    }

    /// A custom validator's `ValueError` reported at `loc` (pydantic's location, as upstream
    /// prints it) but said to be on the line of the entry `at` names (`sheet.dependencies.2`):
    /// the model's first line told nothing of where the fault is.
    pub fn value_error_at(&mut self, loc: &str, at: &str, msg: impl Into<String>) {
        self.value_error(loc, msg);
        if let (Some(line), Some(error)) = (key_line(self.root, at), self.errors.last_mut()) {
            error.line = Some(line);
        }
    }

    /// Record an error at `path`.
    pub fn push(&mut self, path: &str, kind: &str, message: String) {
        let mut error = FieldError::new(kind, message);
        error.loc = if path.is_empty() {
            Vec::new()
        } else {
            path.split('.').map(str::to_string).collect()
        };
        if let Some(node) = self.find(path) {
            error.line = Some(node.line);
            error.input = Some(node.repr());
            error.input_type = Some(node.type_name().to_string());
        } else if let Some(parent) = path.rsplit_once('.').and_then(|(p, _)| self.find(p)) {
            error.line = Some(parent.line);
        }
        self.errors.push(error);
    }

    /// A custom validator's `ValueError` (`Value error, {msg}`).
    pub fn value_error(&mut self, path: &str, msg: impl Into<String>) {
        self.push(path, "value_error", msg.into());
    }

    fn ge(&mut self, path: &str, v: f64, min: f64) {
        if v.is_nan() || v < min {
            self.push(
                path,
                "greater_than_equal",
                format!("Input should be greater than or equal to {}", fmt_num(min)),
            );
        }
    }

    fn gt(&mut self, path: &str, v: f64, min: f64) {
        if v.is_nan() || v <= min {
            self.push(
                path,
                "greater_than",
                format!("Input should be greater than {}", fmt_num(min)),
            );
        }
    }

    fn le(&mut self, path: &str, v: f64, max: f64) {
        if v.is_nan() || v > max {
            self.push(
                path,
                "less_than_equal",
                format!("Input should be less than or equal to {}", fmt_num(max)),
            );
        }
    }

    fn range(&mut self, path: &str, v: f64, min: f64, max: f64) {
        let before = self.errors.len();
        self.ge(path, v, min);
        if self.errors.len() == before {
            self.le(path, v, max);
        }
    }

    fn min_len(&mut self, path: &str, s: &str, n: usize) {
        if s.chars().count() < n {
            self.push(
                path,
                "string_too_short",
                format!(
                    "String should have at least {n} character{}",
                    if n == 1 { "" } else { "s" }
                ),
            );
        }
    }

    fn max_len(&mut self, path: &str, s: &str, n: usize) {
        if s.chars().count() > n {
            self.push(
                path,
                "string_too_long",
                format!("String should have at most {n} characters"),
            );
        }
    }

    fn regex_ok(pattern: &str) -> Result<(), String> {
        crate::pyregex::compile(pattern).map(|_| ())
    }
}

/// `sbatch` options the Slurm placement sets itself or that would break its contract (one
/// attempt = one job that runs once, whose output files the conductor reads), with the
/// reason given when a score's `extra_args` has one. (The same list guards instrument
/// profiles in mozart-backends' `placement` module.)
pub const REFUSED_SBATCH_OPTIONS: &[(&str, &str)] = &[
    ("--array", "one attempt is one Slurm job, or one task of the job array the placement submits itself with 'array: true'; a job array of your own would run the sheet many times"),
    ("-a", "one attempt is one Slurm job, or one task of the job array the placement submits itself with 'array: true'; a job array of your own would run the sheet many times"),
    ("--requeue", "a requeued job runs the sheet again; use 'requeue_on_preemption: true' to let Slurm requeue a preempted job"),
    ("--no-requeue", "the placement sets it (see 'requeue_on_preemption')"),
    ("--wrap", "the placement submits its own wrapper script"),
    ("--output", "the placement reads the job's output from its own files"),
    ("-o", "the placement reads the job's output from its own files"),
    ("--error", "the placement reads the job's output from its own files"),
    ("-e", "the placement reads the job's output from its own files"),
    ("--input", "the sheet's stdin comes from the placement's own files"),
    ("-i", "the sheet's stdin comes from the placement's own files"),
    ("--parsable", "the placement sets it to read the job id"),
    ("--hold", "the placement holds and releases the job itself (exactly once)"),
    ("-H", "the placement holds and releases the job itself (exactly once)"),
    ("--job-name", "the job name identifies the attempt (exactly once)"),
    ("-J", "the job name identifies the attempt (exactly once)"),
    ("--chdir", "the job runs in the sheet's working directory"),
    ("-D", "the job runs in the sheet's working directory"),
    ("--export", "the job's environment is the instrument's (and Slurm's allocation)"),
    ("--export-file", "the job's environment is the instrument's (and Slurm's allocation)"),
    ("--wait", "the conductor follows the job itself"),
    ("-W", "the conductor follows the job itself"),
    ("--test-only", "the job would never run"),
];

/// Why `arg` (one `extra_args` entry) is refused, if it is.
pub fn refused_sbatch_option(arg: &str) -> Option<&'static str> {
    let flag = arg.split_once('=').map_or(arg, |(f, _)| f);
    REFUSED_SBATCH_OPTIONS.iter().find_map(|(opt, why)| {
        let hit = if opt.starts_with("--") {
            flag == *opt
        } else {
            // Short options take their value attached too (`-oout.txt`).
            flag == *opt || (arg.starts_with(opt) && !arg.starts_with("--"))
        };
        hit.then_some(*why)
    })
}

/// `placement` (docs/scores.md "Placement") at `at` (`placement`,
/// `movements.2.placement`, `sheet.per_sheet_placement.3`): the same rules as a profile's.
fn check_placement(c: &mut Checker<'_>, at: &str, p: &PlacementConfig) {
    match p.kind {
        Some(PlacementType::Kubernetes) => c.value_error(
            &format!("{at}.type"),
            "placement type 'kubernetes' is designed (docs/design/distributed.md) but not implemented yet; use 'local' or 'slurm'",
        ),
        Some(PlacementType::Local) => {
            for (field, set) in [
                ("partition", p.partition.is_some()),
                ("account", p.account.is_some()),
                ("qos", p.qos.is_some()),
                ("time", p.time.is_some()),
                ("cpus", p.cpus.is_some()),
                ("memory", p.memory.is_some()),
                ("gpus", p.gpus.is_some()),
                ("gres", p.gres.is_some()),
                ("constraint", p.constraint.is_some()),
                ("extra_args", !p.extra_args.is_empty()),
                ("state_dir", p.state_dir.is_some()),
                ("poll_interval_seconds", p.poll_interval_seconds.is_some()),
                ("queue_timeout_seconds", p.queue_timeout_seconds.is_some()),
                ("exit_file_grace_seconds", p.exit_file_grace_seconds.is_some()),
                ("requeue_on_preemption", p.requeue_on_preemption.is_some()),
                ("array", p.array.is_some()),
            ] {
                if set {
                    c.value_error(
                        &format!("{at}.{field}"),
                        format!("'{field}' is only used by 'type: slurm' (this placement is local)"),
                    );
                }
            }
        }
        Some(PlacementType::Slurm) | None => {}
    }
    if let Some(v) = p.poll_interval_seconds {
        if !(0.05..=60.0).contains(&v) {
            c.value_error(
                &format!("{at}.poll_interval_seconds"),
                "poll_interval_seconds must be between 0.05 and 60",
            );
        }
    }
    for (field, v) in [
        ("queue_timeout_seconds", p.queue_timeout_seconds),
        ("exit_file_grace_seconds", p.exit_file_grace_seconds),
    ] {
        if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
            c.value_error(
                &format!("{at}.{field}"),
                format!("{field} must be a number of seconds, 0 or more"),
            );
        }
    }
    if p.cpus == Some(0) {
        c.value_error(&format!("{at}.cpus"), "cpus must be 1 or more");
    }
    for (field, value) in [
        ("partition", &p.partition),
        ("account", &p.account),
        ("qos", &p.qos),
        ("time", &p.time),
        ("memory", &p.memory),
        ("gpus", &p.gpus),
        ("gres", &p.gres),
        ("constraint", &p.constraint),
    ] {
        if let Some(v) = value {
            c.min_len(&format!("{at}.{field}"), v.trim(), 1);
        }
    }
    for (i, arg) in p.extra_args.iter().enumerate() {
        if !arg.starts_with('-') {
            c.value_error(
                &format!("{at}.extra_args.{i}"),
                format!("each extra_args entry is one sbatch option starting with '-' (e.g. '--mem=4G'), got '{arg}'"),
            );
        } else if let Some(why) = refused_sbatch_option(arg) {
            c.value_error(
                &format!("{at}.extra_args.{i}"),
                format!("'{arg}' is not allowed here: {why}"),
            );
        }
    }
}

/// Check every constraint of the raw model (before fan-out expansion).
pub fn check_job(c: &mut Checker<'_>, job: &JobConfig) {
    if let Some(p) = &job.placement {
        check_placement(c, "placement", p);
    }
    for (n, m) in &job.movements {
        if let Some(p) = &m.placement {
            check_placement(c, &format!("movements.{n}.placement"), p);
        }
    }
    for (n, p) in &job.sheet.per_sheet_placement {
        check_placement(c, &format!("sheet.per_sheet_placement.{n}"), p);
    }
    check_instruments(c, job);
    check_sheet(c, &job.sheet);
    check_prompt(c, &job.prompt);
    check_backend(c, &job.backend);
    check_bridge(c, job);
    for (i, v) in job.validations.iter().enumerate() {
        check_validation(c, i, v);
    }
    check_retry(c, job);
    check_rate_limit(c, job);
    check_circuit_breaker(c, job);
    check_cost_limits(c, job);
    check_learning(c, &job.learning);
    check_grounding(c, job);
    check_ai_review(c, job);
    check_logging(c, job);
    check_workspace_lifecycle(c, job);
    check_isolation(c, job);
    check_conductor(c, job);
    check_parallel(c, job);
    check_stale_detection(c, job);
    check_checkpoints(c, job);
    check_cross_sheet(c, job);
    check_feedback(c, job);
    check_notifications(c, job);
    check_on_success(c, job);
    check_concert(c, job);
    check_spec_fragments(c, job);
    check_top_level(c, job);
}

/// `instrument`, `instruments` profiles and `movements`.
fn check_instruments(c: &mut Checker<'_>, job: &JobConfig) {
    if let Some(i) = &job.instrument {
        c.min_len("instrument", i, 1);
    }
    for (name, def) in &job.instruments {
        c.min_len(&format!("instruments.{name}.profile"), &def.profile, 1);
    }
    for (k, m) in &job.movements {
        if let Some(i) = &m.instrument {
            c.min_len(&format!("movements.{k}.instrument"), i, 1);
        }
        if let Some(v) = m.voices {
            c.ge(&format!("movements.{k}.voices"), v as f64, 1.0);
        }
    }
    // The sheet's timeout when set (ours: upstream never reads it, score.md §3.5 [GAP]): a
    // value that is not a positive number was dropped, leaving the sheet without the timeout
    // the score asks for.
    let mut timeouts: Vec<(String, &crate::model::FreeMap)> =
        vec![("instrument_config".into(), &job.instrument_config)];
    for (name, def) in &job.instruments {
        timeouts.push((format!("instruments.{name}.config"), &def.config));
    }
    for (k, m) in &job.movements {
        timeouts.push((
            format!("movements.{k}.instrument_config"),
            &m.instrument_config,
        ));
    }
    for (n, cfg) in &job.sheet.per_sheet_instrument_config {
        timeouts.push((format!("sheet.per_sheet_instrument_config.{n}"), cfg));
    }
    for (at, cfg) in timeouts {
        if let Some(v) = cfg.get("timeout_seconds").filter(|v| !v.is_null()) {
            if let Some(problem) = bad_timeout(v) {
                c.value_error(
                    &format!("{at}.timeout_seconds"),
                    format!(
                        "timeout_seconds must be a number of seconds greater than 0, got {problem}: \
                         write a number (e.g. timeout_seconds: 1800), or leave it out to use \
                         backend.timeout_seconds"
                    ),
                );
            }
        }
    }
    for k in job.movements.keys() {
        if *k < 1 {
            c.value_error_at(
                "movements",
                &format!("movements.{k}"),
                format!("Movement number must be a positive integer, got {k}"),
            );
            break;
        }
    }
}

/// Why an `instrument_config.timeout_seconds` value cannot be a timeout, if it cannot.
fn bad_timeout(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(t) if t > 0.0 && t.is_finite() => None,
            _ => Some(n.to_string()),
        },
        serde_json::Value::String(text) => {
            Some(format!("{} (a string)", crate::yaml::python_str_repr(text)))
        }
        serde_json::Value::Bool(b) => Some(format!("{b} (a boolean)")),
        other => Some(format!("{other}")),
    }
}

/// `bridge`: thresholds and MCP server env that must not override secrets.
fn check_bridge(c: &mut Checker<'_>, job: &JobConfig) {
    if let Some(bridge) = &job.bridge {
        c.range(
            "bridge.complexity_threshold",
            bridge.complexity_threshold,
            0.0,
            1.0,
        );
        c.range(
            "bridge.context_budget_percent",
            bridge.context_budget_percent as f64,
            10.0,
            95.0,
        );
        const BLOCKED: [&str; 12] = [
            "PATH",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "DYLD_LIBRARY_PATH",
            "PYTHONPATH",
            "NODE_PATH",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
        ];
        for (i, server) in bridge.mcp_servers.iter().enumerate() {
            for key in server.env.keys() {
                if BLOCKED.contains(&key.to_uppercase().as_str()) {
                    c.value_error(
                        &format!("bridge.mcp_servers.{i}.env"),
                        format!(
                            "MCP server env cannot override security-sensitive variable: {key}"
                        ),
                    );
                }
            }
        }
    }
}

/// `retry`: delays, attempts and the completion threshold.
fn check_retry(c: &mut Checker<'_>, job: &JobConfig) {
    let r = &job.retry;
    c.ge("retry.max_retries", r.max_retries as f64, 0.0);
    c.gt("retry.base_delay_seconds", r.base_delay_seconds, 0.0);
    c.gt("retry.max_delay_seconds", r.max_delay_seconds, 0.0);
    c.gt("retry.exponential_base", r.exponential_base, 1.0);
    c.ge(
        "retry.max_completion_attempts",
        r.max_completion_attempts as f64,
        0.0,
    );
    c.ge(
        "retry.completion_delay_seconds",
        r.completion_delay_seconds,
        0.0,
    );
    let before = c.errors.len();
    c.gt(
        "retry.completion_threshold_percent",
        r.completion_threshold_percent,
        0.0,
    );
    if c.errors.len() == before {
        c.le(
            "retry.completion_threshold_percent",
            r.completion_threshold_percent,
            100.0,
        );
    }
    if r.base_delay_seconds > r.max_delay_seconds {
        c.value_error(
            "retry",
            format!(
                "base_delay_seconds ({}) must not exceed max_delay_seconds ({})",
                python_float(r.base_delay_seconds),
                python_float(r.max_delay_seconds)
            ),
        );
    }
}

/// `rate_limit`: user detection patterns compile, waits are positive.
fn check_rate_limit(c: &mut Checker<'_>, job: &JobConfig) {
    let rl = &job.rate_limit;
    for (i, p) in rl.detection_patterns.iter().enumerate() {
        if crate::model::is_default_detection_pattern(p) {
            continue;
        }
        if let Err(e) = Checker::regex_ok(p) {
            c.value_error(
                "rate_limit.detection_patterns",
                format!(
                    "detection_patterns[{i}] is not valid regex: {} — {e}",
                    crate::yaml::python_str_repr(p)
                ),
            );
        }
    }
    c.ge("rate_limit.wait_minutes", rl.wait_minutes as f64, 1.0);
    c.ge("rate_limit.max_waits", rl.max_waits as f64, 1.0);
    c.ge("rate_limit.max_quota_waits", rl.max_quota_waits as f64, 1.0);
}

/// `circuit_breaker` bounds.
fn check_circuit_breaker(c: &mut Checker<'_>, job: &JobConfig) {
    let cb = &job.circuit_breaker;
    c.range(
        "circuit_breaker.failure_threshold",
        cb.failure_threshold as f64,
        1.0,
        100.0,
    );
    c.gt(
        "circuit_breaker.recovery_timeout_seconds",
        cb.recovery_timeout_seconds,
        0.0,
    );
    c.le(
        "circuit_breaker.recovery_timeout_seconds",
        cb.recovery_timeout_seconds,
        3600.0,
    );
}

/// `cost_limits`: positive prices, and limits when enabled.
fn check_cost_limits(c: &mut Checker<'_>, job: &JobConfig) {
    let cl = &job.cost_limits;
    if let Some(v) = cl.max_cost_per_sheet {
        c.gt("cost_limits.max_cost_per_sheet", v, 0.0);
    }
    if let Some(v) = cl.max_cost_per_job {
        c.gt("cost_limits.max_cost_per_job", v, 0.0);
    }
    c.gt(
        "cost_limits.cost_per_1k_input_tokens",
        cl.cost_per_1k_input_tokens,
        0.0,
    );
    c.gt(
        "cost_limits.cost_per_1k_output_tokens",
        cl.cost_per_1k_output_tokens,
        0.0,
    );
    c.gt("cost_limits.warn_at_percent", cl.warn_at_percent, 0.0);
    c.le("cost_limits.warn_at_percent", cl.warn_at_percent, 100.0);
    if cl.enabled && cl.max_cost_per_sheet.is_none() && cl.max_cost_per_job.is_none() {
        c.value_error("cost_limits", "CostLimitConfig has enabled=True but no limits set. Set max_cost_per_sheet and/or max_cost_per_job, or disable cost limits.");
    }
}

/// `grounding`: timeout, and hooks when enabled.
fn check_grounding(c: &mut Checker<'_>, job: &JobConfig) {
    let g = &job.grounding;
    c.gt("grounding.timeout_seconds", g.timeout_seconds, 0.0);
    if g.enabled && g.hooks.is_empty() {
        c.value_error("grounding", "GroundingConfig has enabled=True but no hooks configured. Add at least one hook or set enabled=False.");
    }
}

/// `ai_review` score bounds.
fn check_ai_review(c: &mut Checker<'_>, job: &JobConfig) {
    let ar = &job.ai_review;
    c.range("ai_review.min_score", ar.min_score as f64, 0.0, 100.0);
    c.range("ai_review.target_score", ar.target_score as f64, 0.0, 100.0);
    c.range(
        "ai_review.max_retry_for_review",
        ar.max_retry_for_review as f64,
        0.0,
        5.0,
    );
    if ar.min_score > ar.target_score {
        c.value_error(
            "ai_review",
            format!(
                "min_score ({}) must be <= target_score ({})",
                ar.min_score, ar.target_score
            ),
        );
    }
}

/// `logging`: file size, backups, and a file for `format: both`.
fn check_logging(c: &mut Checker<'_>, job: &JobConfig) {
    let lg = &job.logging;
    c.gt("logging.max_file_size_mb", lg.max_file_size_mb as f64, 0.0);
    c.le(
        "logging.max_file_size_mb",
        lg.max_file_size_mb as f64,
        1000.0,
    );
    c.range("logging.backup_count", lg.backup_count as f64, 0.0, 100.0);
    if lg.format == LogFormat::Both && lg.file_path.is_none() {
        c.value_error("logging", "file_path is required when format='both'");
    }
}

/// `workspace_lifecycle`: archives, non-empty preserve patterns.
fn check_workspace_lifecycle(c: &mut Checker<'_>, job: &JobConfig) {
    let wl = &job.workspace_lifecycle;
    c.ge(
        "workspace_lifecycle.max_archives",
        wl.max_archives as f64,
        0.0,
    );
    if wl.preserve_patterns.iter().any(String::is_empty) {
        c.value_error(
            "workspace_lifecycle.preserve_patterns",
            "preserve_patterns must not contain empty strings",
        );
    }
}

/// `isolation.branch_prefix` is a valid git branch prefix.
fn check_isolation(c: &mut Checker<'_>, job: &JobConfig) {
    // `^[a-zA-Z][a-zA-Z0-9_-]*$`, checked without building the regex.
    let prefix = job.isolation.branch_prefix.as_bytes();
    let valid = prefix.first().is_some_and(u8::is_ascii_alphabetic)
        && prefix
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !valid {
        c.push(
            "isolation.branch_prefix",
            "string_pattern_mismatch",
            "String should match pattern '^[a-zA-Z][a-zA-Z0-9_-]*$'".into(),
        );
    }
}

/// `conductor` identity lengths and escalation timeout.
fn check_conductor(c: &mut Checker<'_>, job: &JobConfig) {
    let cd = &job.conductor;
    c.min_len("conductor.name", &cd.name, 1);
    c.max_len("conductor.name", &cd.name, 100);
    if let Some(ic) = &cd.identity_context {
        c.max_len("conductor.identity_context", ic, 500);
    }
    c.gt(
        "conductor.preferences.escalation_response_timeout_seconds",
        cd.preferences.escalation_response_timeout_seconds,
        0.0,
    );
}

/// `parallel` bounds; `budget_partition: false` is not implemented.
fn check_parallel(c: &mut Checker<'_>, job: &JobConfig) {
    let p = &job.parallel;
    c.range(
        "parallel.max_concurrent",
        p.max_concurrent as f64,
        1.0,
        20.0,
    );
    c.range(
        "parallel.stagger_delay_ms",
        p.stagger_delay_ms as f64,
        0.0,
        5000.0,
    );
    if !p.budget_partition {
        c.value_error("parallel", "ParallelConfig.budget_partition=False is not yet implemented. Cost checks currently use global total regardless of this setting. Remove 'budget_partition: false' from your config or keep the default (true).");
    }
}

/// `stale_detection`: the check interval is shorter than the idle timeout.
fn check_stale_detection(c: &mut Checker<'_>, job: &JobConfig) {
    let sd = &job.stale_detection;
    c.gt(
        "stale_detection.idle_timeout_seconds",
        sd.idle_timeout_seconds,
        0.0,
    );
    c.gt(
        "stale_detection.check_interval_seconds",
        sd.check_interval_seconds,
        0.0,
    );
    if sd.check_interval_seconds >= sd.idle_timeout_seconds {
        c.value_error(
            "stale_detection",
            format!(
                "check_interval_seconds ({}) must be less than idle_timeout_seconds ({})",
                python_float(sd.check_interval_seconds),
                python_float(sd.idle_timeout_seconds)
            ),
        );
    }
}

/// `checkpoints`: every trigger has a condition, triggers when enabled.
fn check_checkpoints(c: &mut Checker<'_>, job: &JobConfig) {
    let cp = &job.checkpoints;
    for (i, t) in cp.triggers.iter().enumerate() {
        if let Some(n) = t.min_retry_count {
            c.ge(
                &format!("checkpoints.triggers.{i}.min_retry_count"),
                n as f64,
                0.0,
            );
        }
        let has = t.sheet_nums.as_ref().is_some_and(|v| !v.is_empty())
            || t.prompt_contains.as_ref().is_some_and(|v| !v.is_empty())
            || t.min_retry_count.is_some();
        if !has {
            c.value_error(
                &format!("checkpoints.triggers.{i}"),
                format!("CheckpointTrigger '{}' must have at least one non-empty condition (sheet_nums, prompt_contains, or min_retry_count)", t.name),
            );
        }
    }
    if cp.enabled && cp.triggers.is_empty() {
        c.value_error("checkpoints", "CheckpointConfig has enabled=True but no triggers configured. Add at least one trigger or set enabled=False.");
    }
}

/// `cross_sheet` bounds.
fn check_cross_sheet(c: &mut Checker<'_>, job: &JobConfig) {
    if let Some(cs) = &job.cross_sheet {
        c.gt(
            "cross_sheet.max_output_chars",
            cs.max_output_chars as f64,
            0.0,
        );
        c.ge(
            "cross_sheet.lookback_sheets",
            cs.lookback_sheets as f64,
            0.0,
        );
    }
}

/// `feedback.pattern` compiles. The default is known to (a unit test compiles it):
/// compiling it at every load cost `mozart run` about a tenth of its CPU (issue 24).
fn check_feedback(c: &mut Checker<'_>, job: &JobConfig) {
    if crate::model::is_default_feedback_pattern(&job.feedback.pattern) {
        return;
    }
    if let Err(e) = Checker::regex_ok(&job.feedback.pattern) {
        c.value_error(
            "feedback.pattern",
            format!(
                "pattern is not valid regex: {} — {e}",
                crate::yaml::python_str_repr(&job.feedback.pattern)
            ),
        );
    }
}

/// `notifications`: each kind has its destination.
fn check_notifications(c: &mut Checker<'_>, job: &JobConfig) {
    for (i, n) in job.notifications.iter().enumerate() {
        let truthy = |k: &str| {
            n.config.get(k).is_some_and(|v| match v {
                serde_json::Value::Null => false,
                serde_json::Value::Bool(b) => *b,
                serde_json::Value::String(s) => !s.is_empty(),
                serde_json::Value::Number(n) => n.as_f64() != Some(0.0),
                serde_json::Value::Array(a) => !a.is_empty(),
                serde_json::Value::Object(o) => !o.is_empty(),
            })
        };
        let path = format!("notifications.{i}");
        match n.kind {
            NotificationType::Webhook if !truthy("url") && !truthy("url_env") => c.value_error(
                &path,
                "Webhook notification requires 'url' or 'url_env' in config",
            ),
            NotificationType::Slack if !truthy("webhook_url") && !truthy("webhook_url_env") => c
                .value_error(
                    &path,
                    "Slack notification requires 'webhook_url' or 'webhook_url_env' in config",
                ),
            _ => {}
        }
    }
}

/// `on_success` hooks carry the field their type needs.
fn check_on_success(c: &mut Checker<'_>, job: &JobConfig) {
    for (i, h) in job.on_success.iter().enumerate() {
        let path = format!("on_success.{i}");
        c.gt(&format!("{path}.timeout_seconds"), h.timeout_seconds, 0.0);
        match h.kind {
            HookType::RunJob if h.job_path.is_none() => {
                c.value_error(&path, "Hook type 'run_job' requires 'job_path' field")
            }
            HookType::RunCommand | HookType::RunScript if h.command.is_none() => c.value_error(
                &path,
                format!("Hook type '{}' requires 'command' field", h.kind.as_str()),
            ),
            _ => {}
        }
    }
}

/// `concert` bounds.
fn check_concert(c: &mut Checker<'_>, job: &JobConfig) {
    let co = &job.concert;
    c.range(
        "concert.max_chain_depth",
        co.max_chain_depth as f64,
        1.0,
        100.0,
    );
    c.ge(
        "concert.cooldown_between_jobs_seconds",
        co.cooldown_between_jobs_seconds,
        0.0,
    );
}

/// `spec.fragments` have a name and content.
fn check_spec_fragments(c: &mut Checker<'_>, job: &JobConfig) {
    for (i, f) in job.spec.fragments.iter().enumerate() {
        if f.name.trim().is_empty() {
            c.value_error(
                &format!("spec.fragments.{i}.name"),
                "SpecFragment name must not be empty",
            );
        }
        if f.content.trim().is_empty() {
            c.value_error(
                &format!("spec.fragments.{i}.content"),
                "SpecFragment content must not be empty",
            );
        }
    }
}

/// Top-level pause, and `instrument:` together with a non-default `backend.type`.
fn check_top_level(c: &mut Checker<'_>, job: &JobConfig) {
    c.ge(
        "pause_between_sheets_seconds",
        job.pause_between_sheets_seconds as f64,
        0.0,
    );
    if let Some(i) = &job.instrument {
        if job.backend.kind != BackendType::ClaudeCli {
            c.value_error("", format!("Cannot specify both 'instrument: {i}' and 'backend.type: {}'. Use instrument: for config-driven instruments, or backend: for native backends. Not both.", job.backend.kind.as_str()));
        }
    }
}

fn check_sheet(c: &mut Checker<'_>, s: &SheetConfig) {
    c.ge("sheet.size", s.size as f64, 1.0);
    c.ge("sheet.total_items", s.total_items as f64, 1.0);
    c.ge("sheet.start_item", s.start_item as f64, 1.0);
    for (k, name) in &s.per_sheet_instruments {
        if *k < 1 {
            c.value_error(
                "sheet.per_sheet_instruments",
                format!("Per-sheet instrument key must be a positive integer, got {k}"),
            );
        } else if name.trim().is_empty() {
            c.value_error(
                "sheet.per_sheet_instruments",
                format!("Per-sheet instrument name for sheet {k} must not be empty"),
            );
        }
    }
    for k in s.per_sheet_fallbacks.keys() {
        if *k < 1 {
            c.value_error(
                "sheet.per_sheet_fallbacks",
                format!("Per-sheet fallback key must be a positive integer, got {k}"),
            );
        }
    }
    let mut seen: Vec<(i64, &str)> = Vec::new();
    'map: for (name, sheets) in &s.instrument_map {
        if name.trim().is_empty() {
            c.value_error(
                "sheet.instrument_map",
                "Instrument name in instrument_map must not be empty",
            );
            break;
        }
        for n in sheets {
            if *n < 1 {
                c.value_error("sheet.instrument_map", format!("Sheet number in instrument_map must be a positive integer, got {n} for instrument '{name}'"));
                break 'map;
            }
            if let Some((_, first)) = seen.iter().find(|(m, _)| m == n) {
                c.value_error("sheet.instrument_map", format!("Sheet {n} assigned to multiple instruments in instrument_map: '{first}' and '{name}'"));
                break 'map;
            }
            seen.push((*n, name));
        }
    }
    for (stage, count) in &s.fan_out {
        if *stage < 1 {
            c.value_error(
                "sheet.fan_out",
                format!("Fan-out stage must be positive integer, got {stage}"),
            );
            break;
        }
        if *count < 1 {
            c.value_error(
                "sheet.fan_out",
                format!("Fan-out count for stage {stage} must be >= 1, got {count}"),
            );
            break;
        }
    }
    'deps: for (k, deps) in &s.dependencies {
        if *k < 1 {
            c.value_error(
                "sheet.dependencies",
                format!("Sheet number must be positive integer, got {k}"),
            );
            break;
        }
        for d in deps {
            if *d < 1 {
                c.value_error(
                    "sheet.dependencies",
                    format!("Dependency must be positive integer, got {d} for sheet {k}"),
                );
                break 'deps;
            }
            if d == k {
                c.value_error(
                    "sheet.dependencies",
                    format!("Sheet {k} cannot depend on itself"),
                );
                break 'deps;
            }
        }
    }
    // A skip_when that does not parse was only logged when its sheet came up, and the sheet
    // ran: said before the score runs, with where it goes wrong.
    for (k, expr) in &s.skip_when {
        if let Err(crate::expr::ExprError::Parse { pos, message }) = crate::expr::parse(expr) {
            c.value_error(
                &format!("sheet.skip_when.{k}"),
                format!(
                    "the skip_when of sheet {k} cannot be parsed at column {pos}: {message}: {}",
                    crate::yaml::python_str_repr(expr)
                ),
            );
        }
    }
    for (k, cmd) in &s.skip_when_command {
        let path = format!("sheet.skip_when_command.{k}.timeout_seconds");
        c.gt(&path, cmd.timeout_seconds, 0.0);
        c.le(&path, cmd.timeout_seconds, 60.0);
    }
}

fn check_prompt(c: &mut Checker<'_>, p: &PromptConfig) {
    if p.template.is_some() && p.template_file.is_some() {
        c.value_error(
            "prompt",
            "prompt accepts 'template' or 'template_file', not both",
        );
    }
}

fn check_backend(c: &mut Checker<'_>, b: &BackendConfig) {
    c.gt("backend.timeout_seconds", b.timeout_seconds, 0.0);
    c.gt(
        "backend.max_output_capture_bytes",
        b.max_output_capture_bytes as f64,
        0.0,
    );
    c.ge("backend.max_tokens", b.max_tokens as f64, 1.0);
    c.range("backend.temperature", b.temperature, 0.0, 1.0);
    for (k, o) in &b.sheet_overrides {
        if let Some(t) = o.temperature {
            c.range(
                &format!("backend.sheet_overrides.{k}.temperature"),
                t,
                0.0,
                1.0,
            );
        }
        if let Some(m) = o.max_tokens {
            c.ge(
                &format!("backend.sheet_overrides.{k}.max_tokens"),
                m as f64,
                1.0,
            );
        }
        if let Some(t) = o.timeout_seconds {
            c.gt(
                &format!("backend.sheet_overrides.{k}.timeout_seconds"),
                t,
                0.0,
            );
        }
    }
    c.gt(
        "backend.recursive_light.timeout",
        b.recursive_light.timeout,
        0.0,
    );
    let o = &b.ollama;
    c.ge("backend.ollama.num_ctx", o.num_ctx as f64, 4096.0);
    c.gt("backend.ollama.timeout_seconds", o.timeout_seconds, 0.0);
    c.range(
        "backend.ollama.max_tool_iterations",
        o.max_tool_iterations as f64,
        1.0,
        50.0,
    );
}

/// Whether `v` is within `min..=max` (what [`Checker::range`] accepts).
fn within(v: f64, min: f64, max: f64) -> bool {
    !v.is_nan() && v >= min && v <= max
}

/// One validation rule's bounds and required fields. The field paths are made only for a
/// rule that breaks one: the corpus score has 923 rules, and formatting five paths for
/// each was a tenth of loading it.
fn check_validation(c: &mut Checker<'_>, i: usize, v: &ValidationRule) {
    let at = |field: &str| format!("validations.{i}.{field}");
    if !within(v.stage as f64, 1.0, 10.0) {
        c.range(&at("stage"), v.stage as f64, 1.0, 10.0);
    }
    if !within(v.retry_count as f64, 0.0, 10.0) {
        c.range(&at("retry_count"), v.retry_count as f64, 0.0, 10.0);
    }
    if let Some(t) = v.timeout_seconds {
        if t.is_nan() || t <= 0.0 {
            c.gt(&at("timeout_seconds"), t, 0.0);
        }
    }
    if !within(v.retry_delay_ms as f64, 0.0, 5000.0) {
        c.range(&at("retry_delay_ms"), v.retry_delay_ms as f64, 0.0, 5000.0);
    }
    if let Some(s) = v.sheet {
        if (s as f64) < 1.0 {
            c.ge(&at("sheet"), s as f64, 1.0);
        }
    }
    let path = || format!("validations.{i}");
    let ty = v.kind.as_str();
    if v.kind.needs_path() && v.path.is_none() {
        c.value_error(
            &path(),
            format!("Validation type '{ty}' requires 'path' field"),
        );
    } else if v.kind.needs_pattern() && v.pattern.is_none() {
        c.value_error(
            &path(),
            format!("Validation type '{ty}' requires 'pattern' field"),
        );
    } else if v.kind == ValidationType::CommandSucceeds && v.command.is_none() {
        c.value_error(
            &path(),
            "Validation type 'command_succeeds' requires 'command' field",
        );
    } else if v.kind == ValidationType::ContentRegex {
        if let Some(p) = &v.pattern {
            if let Err(e) = crate::pyregex::compile_content_regex(p) {
                c.value_error(
                    &path(),
                    format!("Invalid regex pattern for content_regex validation: {e}"),
                );
            }
        }
    }
}

fn check_learning(c: &mut Checker<'_>, l: &LearningConfig) {
    for (name, v) in [
        ("min_confidence_threshold", l.min_confidence_threshold),
        ("high_confidence_threshold", l.high_confidence_threshold),
        ("exploration_rate", l.exploration_rate),
        ("exploration_min_priority", l.exploration_min_priority),
        ("entropy_alert_threshold", l.entropy_alert_threshold),
        ("auto_apply_trust_threshold", l.auto_apply_trust_threshold),
    ] {
        c.range(&format!("learning.{name}"), v, 0.0, 1.0);
    }
    c.ge(
        "learning.entropy_check_interval",
        l.entropy_check_interval as f64,
        1.0,
    );
    let eb = &l.exploration_budget;
    for (name, v) in [
        ("floor", eb.floor),
        ("ceiling", eb.ceiling),
        ("decay_rate", eb.decay_rate),
        ("initial_budget", eb.initial_budget),
    ] {
        c.range(&format!("learning.exploration_budget.{name}"), v, 0.0, 1.0);
    }
    c.range(
        "learning.exploration_budget.boost_amount",
        eb.boost_amount,
        0.0,
        0.5,
    );
    if eb.floor > eb.ceiling {
        c.value_error(
            "learning.exploration_budget",
            format!(
                "floor ({}) must not exceed ceiling ({})",
                python_float(eb.floor),
                python_float(eb.ceiling)
            ),
        );
    } else if eb.initial_budget < eb.floor || eb.initial_budget > eb.ceiling {
        c.value_error(
            "learning.exploration_budget",
            format!(
                "initial_budget ({}) must be between floor ({}) and ceiling ({})",
                python_float(eb.initial_budget),
                python_float(eb.floor),
                python_float(eb.ceiling)
            ),
        );
    }
    let er = &l.entropy_response;
    c.range(
        "learning.entropy_response.entropy_threshold",
        er.entropy_threshold,
        0.0,
        1.0,
    );
    c.ge(
        "learning.entropy_response.cooldown_seconds",
        er.cooldown_seconds as f64,
        60.0,
    );
    c.range(
        "learning.entropy_response.max_quarantine_revisits",
        er.max_quarantine_revisits as f64,
        0.0,
        10.0,
    );
    if let Some(aa) = &l.auto_apply {
        c.range(
            "learning.auto_apply.trust_threshold",
            aa.trust_threshold,
            0.0,
            1.0,
        );
        c.range(
            "learning.auto_apply.max_patterns_per_sheet",
            aa.max_patterns_per_sheet as f64,
            1.0,
            10.0,
        );
    }
    if l.min_confidence_threshold >= l.high_confidence_threshold {
        c.value_error(
            "learning",
            format!(
                "min_confidence_threshold ({}) must be less than high_confidence_threshold ({})",
                python_float(l.min_confidence_threshold),
                python_float(l.high_confidence_threshold)
            ),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
