//! Error classification (execution.md §7): E-codes, pattern sets, reset-time parsing and
//! the multi-phase classifier with root-cause selection.
//!
//! Deliberate differences from upstream (see `docs/differences.md`):
//! * A successful execution that is not flagged rate-limited classifies as E209
//!   ("validation needed") without scanning its text, so an answer that merely quotes
//!   "429" or "quota" does not park the instrument (execution.md §7.5 note,
//!   claude-code-output.md §6.2 false positives).
//! * Structured signals from the instrument (Claude's `rate_limit_event.resetsAt`,
//!   `api_error_status`) are used before any prose (claude-code-output.md §6.4).

mod codes;
pub mod patterns;
mod reset;

pub use codes::{ErrorCategory, ErrorCode, Severity};
pub use reset::{
    parse_reset_time, parse_reset_time_at, ResetTime, DEFAULT_RATE_LIMIT_WAIT_SECONDS,
    MAX_DATED_WAIT_SECONDS, MAX_WAIT_SECONDS, MIN_WAIT_SECONDS,
};

use serde::{Deserialize, Serialize};

use crate::types::{epoch_now, ExecutionResult, ExitReason, FailureKind};

/// Slack added after a structured reset instant before retrying (claude-code-output.md §6.4).
pub const STRUCTURED_RESET_SLACK_SECONDS: f64 = 60.0;

/// How long to park an instrument for a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateLimitInfo {
    /// When the limit resets (Unix epoch seconds), if known.
    pub reset_at_epoch: Option<f64>,
    /// Seconds to wait from the moment of classification.
    pub wait_seconds: f64,
    /// The wait is what the API or the CLI said (a `retry-after`, a reset time, "retry in
    /// 3s"); when false it is only this classifier's guess for the kind of limit, and the
    /// conductor probes on its own schedule instead (docs/differences.md).
    #[serde(default)]
    pub stated: bool,
    /// What the API or the CLI said, seconds, when a minimum made the wait longer (a
    /// reset "in 1 minute" waits the 5-minute minimum); `None` when the wait is what it said.
    #[serde(default)]
    pub said_seconds: Option<f64>,
}

/// One classified error (upstream `ClassifiedError`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifiedError {
    /// The E-code.
    pub code: ErrorCode,
    /// Its category.
    pub category: ErrorCategory,
    /// Whether retrying can help (may differ from the code's default).
    pub retriable: bool,
    /// What happened.
    pub message: String,
    /// Suggested wait before retrying, seconds.
    pub suggested_wait_seconds: Option<f64>,
    /// Reset instant for rate limits, when known.
    pub reset_at_epoch: Option<f64>,
    /// The suggested wait is what the API or the CLI said, not a default.
    #[serde(default)]
    pub wait_stated: bool,
    /// What the API or the CLI said, seconds, when a minimum made the suggested wait longer.
    #[serde(default)]
    pub said_wait_seconds: Option<f64>,
}

impl ClassifiedError {
    fn new(
        code: ErrorCode,
        category: ErrorCategory,
        retriable: bool,
        message: impl Into<String>,
        wait: Option<f64>,
    ) -> Self {
        ClassifiedError {
            code,
            category,
            retriable,
            message: message.into(),
            suggested_wait_seconds: wait,
            reset_at_epoch: None,
            wait_stated: false,
            said_wait_seconds: None,
        }
    }

    /// The same error, its wait being what the API or the CLI said.
    fn stated(mut self) -> Self {
        self.wait_stated = true;
        self
    }

    /// `retriable && category ∉ {auth, fatal}`.
    pub fn should_retry(&self) -> bool {
        self.retriable && !matches!(self.category, ErrorCategory::Auth | ErrorCategory::Fatal)
    }

    /// Category is `rate_limit`.
    pub fn is_rate_limit(&self) -> bool {
        self.category == ErrorCategory::RateLimit
    }
}

/// Which phase decided the classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassificationMethod {
    /// Structured output (JSON errors, rate-limit events, API status).
    Structured,
    /// Exit code or signal.
    ExitCode,
    /// Text patterns.
    RegexFallback,
}

/// The result of classifying a failed execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    /// Root-cause code.
    pub code: ErrorCode,
    /// Root-cause category.
    pub category: ErrorCategory,
    /// Whether retrying can help.
    pub retriable: bool,
    /// Root-cause message.
    pub message: String,
    /// Suggested wait before a retry, seconds.
    pub suggested_wait_seconds: Option<f64>,
    /// Set when the root cause is a rate limit: how long to park the instrument.
    pub rate_limit: Option<RateLimitInfo>,
    /// Other errors found, in detection order.
    pub secondary: Vec<ClassifiedError>,
    /// 0..1 confidence in the root-cause choice.
    pub confidence: f64,
    /// Which phase produced the root cause.
    pub method: ClassificationMethod,
}

impl Classification {
    /// `retriable && category ∉ {auth, fatal}`.
    pub fn should_retry(&self) -> bool {
        self.retriable && !matches!(self.category, ErrorCategory::Auth | ErrorCategory::Fatal)
    }
}

/// Signal names as upstream prints them.
pub fn signal_name(sig: i32) -> String {
    match sig {
        15 => "SIGTERM".into(),
        9 => "SIGKILL".into(),
        2 => "SIGINT".into(),
        11 => "SIGSEGV".into(),
        6 => "SIGABRT".into(),
        7 => "SIGBUS".into(),
        8 => "SIGFPE".into(),
        1 => "SIGHUP".into(),
        13 => "SIGPIPE".into(),
        n => format!("signal {n}"),
    }
}

/// Backends' rate-limit check (instruments.md §2.2 `_detect_rate_limit`): the 11-pattern
/// set over both streams; false without an exit code or with no output.
pub fn detect_rate_limit(stdout: &str, stderr: &str, exit_code: Option<i32>) -> bool {
    if exit_code.is_none() || (stdout.is_empty() && stderr.is_empty()) {
        return false;
    }
    patterns::mentions_rate_limit(stdout) || patterns::mentions_rate_limit(stderr)
}

fn signal_error(sig: i32, exit_reason: ExitReason, combined_lower: &str) -> ClassifiedError {
    use ErrorCategory as C;
    use ErrorCode as E;
    let name = signal_name(sig);
    if exit_reason == ExitReason::Timeout {
        return ClassifiedError::new(
            E::E001,
            C::Timeout,
            true,
            format!("Process killed by {name} due to timeout"),
            Some(60.0),
        );
    }
    match sig {
        11 | 7 | 6 | 8 | 4 => ClassifiedError::new(
            E::E003,
            C::Fatal,
            false,
            format!("Process crashed with {name}"),
            None,
        ),
        9 if patterns::OOM_INDICATORS
            .iter()
            .any(|i| combined_lower.contains(i)) =>
        {
            ClassifiedError::new(
                E::E005,
                C::Fatal,
                false,
                format!("Process killed by {name} (possible OOM)"),
                None,
            )
        }
        // Mozart's own SIGKILL (timeout escalation) is the Timeout case above, and a
        // cancelled or stopped attempt never gets here: say so, and where to look.
        9 => ClassifiedError::new(
            E::E002,
            C::Signal,
            true,
            format!(
                "Process killed by {name}, not by Mozart (no timeout or cancel): a user, \
                 another program or the kernel's out-of-memory killer ended it (check \
                 `dmesg`). A failed attempt: the sheet runs again only if it has attempts \
                 left (retry.max_retries counts every attempt, the first one included)"
            ),
            Some(30.0),
        ),
        15 | 1 | 13 => ClassifiedError::new(
            E::E002,
            C::Signal,
            true,
            format!("Process terminated by {name}"),
            Some(10.0),
        ),
        2 => ClassifiedError::new(
            E::E004,
            C::Fatal,
            false,
            format!("Process interrupted by {name}"),
            None,
        ),
        _ => ClassifiedError::new(
            E::E002,
            C::Signal,
            true,
            format!("Process killed by {name}"),
            Some(30.0),
        ),
    }
}

fn timeout_error(combined_lower: &str) -> ClassifiedError {
    if combined_lower.contains("stale execution") {
        ClassifiedError::new(
            ErrorCode::E006,
            ErrorCategory::Timeout,
            true,
            "Stale execution: no output progress",
            Some(120.0),
        )
    } else {
        ClassifiedError::new(
            ErrorCode::E001,
            ErrorCategory::Timeout,
            true,
            "Command timed out",
            Some(60.0),
        )
    }
}

/// A rate-limit error from text: E104 with the parsed reset when quota patterns match,
/// else E103 (capacity) or E101 with the default wait (execution.md §7.4 step 3).
fn rate_limit_from_text(combined: &str, forced: bool) -> Option<ClassifiedError> {
    rate_limit_from(combined, forced, false)
}

/// [`rate_limit_from_text`]; `strict` (a `shell` command's output) also wants a service's
/// words ([`patterns::SHELL_RATE_LIMIT`]) before it reads a limit.
fn rate_limit_from(combined: &str, forced: bool, strict: bool) -> Option<ClassifiedError> {
    if strict && !forced && !patterns::SHELL_RATE_LIMIT.is_match(combined) {
        return None;
    }
    let limited = forced || patterns::mentions_rate_limit(combined);
    let reset = parse_reset_time(combined);
    // A server rate limit that says when to come back ("Please try again in 2s", Gemini's
    // "Please retry in 2s" / `retryDelay`): wait that, not an hour.
    if limited && reset.is_none() {
        if let Some(secs) = retry_hint_seconds(combined) {
            return Some(
                ClassifiedError::new(
                    ErrorCode::E101,
                    ErrorCategory::RateLimit,
                    true,
                    format!("API rate limit, the API asked to retry after {secs:.0}s"),
                    Some(secs.clamp(MIN_RETRY_AFTER_SECONDS, MAX_WAIT_SECONDS)),
                )
                .stated(),
            );
        }
    }
    if patterns::QUOTA_EXHAUSTION.is_match(combined) || (limited && reset.is_some()) {
        let mut err = ClassifiedError::new(
            ErrorCode::E104,
            ErrorCategory::RateLimit,
            true,
            "Token quota exhausted - waiting until reset",
            Some(reset.map_or(DEFAULT_RATE_LIMIT_WAIT_SECONDS, |r| r.wait_seconds)),
        );
        err.reset_at_epoch = reset.map(|r| r.reset_at_epoch);
        err.wait_stated = reset.is_some();
        err.said_wait_seconds = reset
            .filter(|r| r.said_seconds < r.wait_seconds)
            .map(|r| r.said_seconds);
        return Some(err);
    }
    if limited {
        let code = if patterns::CAPACITY.is_match(combined) {
            ErrorCode::E103
        } else {
            ErrorCode::E101
        };
        let wait = if code == ErrorCode::E103 {
            ErrorCode::E103.delay_seconds()
        } else {
            DEFAULT_RATE_LIMIT_WAIT_SECONDS
        };
        return Some(ClassifiedError::new(
            code,
            ErrorCategory::RateLimit,
            true,
            "Rate limit detected",
            Some(wait),
        ));
    }
    None
}

/// The single-output classifier (execution.md §7.4): signal, timeout, text patterns, exit code.
pub fn classify_output(
    stdout: &str,
    stderr: &str,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    exit_reason: ExitReason,
) -> ClassifiedError {
    classify_output_of(stdout, stderr, (exit_code, exit_signal, exit_reason), false)
}

/// [`classify_output`]; `shell`: the output is a `shell` command's ([`rate_limit_from`]'s
/// strict reading).
fn classify_output_of(
    stdout: &str,
    stderr: &str,
    (exit_code, exit_signal, exit_reason): (Option<i32>, Option<i32>, ExitReason),
    shell: bool,
) -> ClassifiedError {
    let combined = format!("{stdout}\n{stderr}");
    let lower = combined.to_lowercase();
    // checked: `-i32::MIN` overflows (found by fuzzing, docs/reliability.md).
    let exit_signal = exit_signal.or(exit_code.filter(|c| *c < 0).and_then(i32::checked_neg));
    if let Some(sig) = exit_signal {
        return signal_error(sig, exit_reason, &lower);
    }
    if exit_reason == ExitReason::Timeout {
        return timeout_error(&lower);
    }
    if let Some(err) = rate_limit_from(&combined, false, shell) {
        return err;
    }
    text_pattern_error(&combined).unwrap_or_else(|| exit_code_error(exit_code, &lower, stderr))
}

/// What a model the API does not know is called, before the CLI's own words.
const MODEL_NOT_FOUND_MESSAGE: &str = "The model is not available (check the score's \
     instrument_config.model, or backend.cli_model for claude_cli)";

/// [`MODEL_NOT_FOUND_MESSAGE`] when Mozart passed the CLI no model: the score sets none and
/// the profile has no `default_model` (Codex then runs its `config.toml`'s `model`).
const MODEL_FROM_CLI_CONFIG_MESSAGE: &str = "The model is not available (the score names no \
     model, so the CLI used the one its own configuration names, such as `model` in Codex's \
     config.toml: correct it there, or set instrument_config.model in the score)";

/// The first of the known configuration, auth and network texts in `combined`.
fn text_pattern_error(combined: &str) -> Option<ClassifiedError> {
    use ErrorCategory as C;
    use ErrorCode as E;
    type Check<'a> = (&'a regex::Regex, E, C, bool, Option<f64>, &'a str);
    let checks: [Check<'_>; 5] = [
        // Ours: a model the API does not know fails at once, where upstream retried it as
        // "exit code 1" (a typo in the score cost every retry and its backoff).
        (
            &patterns::MODEL_NOT_FOUND,
            E::E301,
            C::Configuration,
            false,
            None,
            MODEL_NOT_FOUND_MESSAGE,
        ),
        (
            &patterns::ENOENT,
            E::E505,
            C::Configuration,
            true,
            Some(30.0),
            "Backend binary or file not found",
        ),
        (
            &patterns::CLI_MODE,
            E::E306,
            C::Configuration,
            false,
            None,
            "CLI mode incompatible with the requested output",
        ),
        (
            &patterns::AUTH,
            E::E502,
            C::Auth,
            false,
            None,
            "Authentication or authorization failed",
        ),
        (
            &patterns::MCP,
            E::E305,
            C::Configuration,
            false,
            None,
            "MCP server configuration error",
        ),
    ];
    for (re, code, cat, retriable, wait, msg) in checks {
        if re.is_match(combined) {
            return Some(ClassifiedError::new(code, cat, retriable, msg, wait));
        }
    }
    let network: [(&regex::Regex, E, &str); 3] = [
        (&patterns::DNS, E::E902, "DNS resolution failed"),
        (&patterns::SSL, E::E903, "SSL/TLS error"),
        (&patterns::NETWORK, E::E901, "Network connection failed"),
    ];
    network
        .into_iter()
        .find(|(re, _, _)| re.is_match(combined))
        .map(|(_, code, msg)| ClassifiedError::new(code, C::Network, true, msg, Some(30.0)))
}

/// What the exit code alone says (execution.md §7.4 step 6); `lower` is the lowercased
/// output, for the non-transient markers of exit 1 and 2.
fn exit_code_error(exit_code: Option<i32>, lower: &str, stderr: &str) -> ClassifiedError {
    use ErrorCategory as C;
    use ErrorCode as E;
    match exit_code {
        Some(0) => ClassifiedError::new(
            E::E209,
            C::Validation,
            true,
            "Command succeeded but output validation needed",
            None,
        ),
        Some(code @ (1 | 2)) => {
            if patterns::NON_TRANSIENT.iter().any(|i| lower.contains(i)) {
                ClassifiedError::new(
                    E::E009,
                    C::Fatal,
                    false,
                    format!("Non-transient failure with exit code {code}"),
                    None,
                )
            } else {
                ClassifiedError::new(
                    E::E009,
                    C::Transient,
                    true,
                    format!("Command failed with exit code {code}"),
                    Some(10.0),
                )
            }
        }
        Some(124) => {
            ClassifiedError::new(E::E001, C::Timeout, true, "Command timed out", Some(60.0))
        }
        Some(127) => ClassifiedError::new(
            E::E505,
            C::Fatal,
            false,
            "Command not found (exit_code=127)",
            None,
        ),
        None => {
            let err_lower = stderr.to_lowercase();
            let killed = ["killed", "out of memory", "oom", "cannot allocate"]
                .iter()
                .any(|i| err_lower.contains(i));
            // A Slurm attempt whose job ended without an exit status says how it ended in a
            // stderr line of its own (placement/slurm.rs; the backend's error message may
            // follow it): the one fact the user needs here.
            let message = match slurm_note(stderr) {
                Some(note) => format!("Process terminated without an exit code: {note}"),
                None => "Process terminated without an exit code".to_string(),
            };
            ClassifiedError::new(
                E::E999,
                C::Transient,
                true,
                message,
                Some(if killed { 60.0 } else { 10.0 }),
            )
        }
        Some(code) => ClassifiedError::new(
            E::E999,
            C::Fatal,
            false,
            format!("Unknown error (exit_code={code})"),
            None,
        ),
    }
}

/// One entry of a JSON `errors` array.
#[derive(Debug, Clone, PartialEq)]
struct JsonError {
    kind: String,
    message: String,
}

/// Each JSON object in `text`, found by brace counting (strings and escapes honoured; an
/// unbalanced object runs to the end of the text), until `f` returns true.
fn scan_json_objects(
    text: &str,
    mut f: impl FnMut(&serde_json::Map<String, serde_json::Value>) -> bool,
) {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(rel) = text[start..].find('{') {
        let open = start + rel;
        let (mut depth, mut in_str, mut escaped, mut end) = (0i32, false, false, bytes.len());
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            if in_str {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_str = true,
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Ok(serde_json::Value::Object(obj)) = serde_json::from_str(&text[open..end]) {
            if f(&obj) {
                return;
            }
            start = end;
        } else {
            start = open + 1;
        }
    }
}

/// The errors of the first JSON object in `text` carrying an `errors` list.
fn json_errors(text: &str) -> Vec<JsonError> {
    let mut found = Vec::new();
    scan_json_objects(text, |obj| {
        if let Some(serde_json::Value::Array(items)) = obj.get("errors") {
            found = items
                .iter()
                .filter_map(|item| match item {
                    serde_json::Value::Object(o) => Some(JsonError {
                        kind: o
                            .get("type")
                            .and_then(|v| v.as_str())
                            .unwrap_or("unknown")
                            .to_string(),
                        message: o
                            .get("message")
                            .and_then(|v| v.as_str())
                            .unwrap_or("")
                            .to_string(),
                    }),
                    // Claude's error subtypes carry plain strings (claude-code-output.md §4).
                    serde_json::Value::String(s) => Some(JsonError {
                        kind: "unknown".into(),
                        message: s.clone(),
                    }),
                    _ => None,
                })
                .collect();
        }
        !found.is_empty()
    });
    found
}

fn contains_any(haystack: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| haystack.contains(n))
}

/// `classify_single_json_error` (execution.md §7.5 phase 1).
fn classify_json_error(err: &JsonError) -> ClassifiedError {
    use ErrorCategory as C;
    use ErrorCode as E;
    let m = err.message.to_lowercase();
    let msg = err.message.clone();
    match err.kind.as_str() {
        "system" => {
            if contains_any(
                &m,
                &[
                    "rate limit",
                    "rate_limit",
                    "quota",
                    "too many requests",
                    "429",
                    "hit your limit",
                    "limit exceeded",
                    "daily limit",
                ],
            ) {
                return if contains_any(
                    &m,
                    &["capacity", "overloaded", "try again later", "unavailable"],
                ) {
                    ClassifiedError::new(E::E103, C::RateLimit, true, msg, Some(300.0))
                } else {
                    ClassifiedError::new(E::E101, C::RateLimit, true, msg, Some(3600.0))
                };
            }
            if contains_any(
                &m,
                &[
                    "unauthorized",
                    "authentication",
                    "invalid api key",
                    "401",
                    "403",
                ],
            ) {
                return ClassifiedError::new(E::E502, C::Auth, false, msg, None);
            }
        }
        "user" => {
            if contains_any(&m, &["enoent", "command not found"]) {
                return ClassifiedError::new(E::E505, C::Configuration, true, msg, Some(30.0));
            }
            if contains_any(&m, &["permission denied", "access denied"]) {
                return ClassifiedError::new(E::E502, C::Auth, false, msg, None);
            }
            if contains_any(&m, &["no such file", "not found"]) {
                return ClassifiedError::new(E::E303, C::Configuration, false, msg, None);
            }
        }
        "tool" => {
            return if contains_any(&m, &["mcp", "server"]) {
                ClassifiedError::new(E::E305, C::Configuration, false, msg, None)
            } else {
                ClassifiedError::new(E::E203, C::Validation, true, msg, Some(10.0))
            };
        }
        _ => {}
    }
    if contains_any(
        &m,
        &[
            "connection refused",
            "connection reset",
            "econnrefused",
            "etimedout",
            "network unreachable",
        ],
    ) {
        ClassifiedError::new(E::E901, C::Network, true, msg, Some(30.0))
    } else if contains_any(&m, &["dns", "getaddrinfo", "enotfound", "resolve"]) {
        ClassifiedError::new(E::E902, C::Network, true, msg, Some(30.0))
    } else if contains_any(&m, &["ssl", "tls", "certificate", "handshake"]) {
        ClassifiedError::new(E::E903, C::Network, true, msg, Some(30.0))
    } else if contains_any(&m, &["timeout", "timed out"]) {
        ClassifiedError::new(E::E001, C::Timeout, true, msg, Some(60.0))
    } else {
        ClassifiedError::new(E::E999, C::Transient, true, msg, Some(30.0))
    }
}

/// Shortest wait taken from an API's retry-after hint.
pub const MIN_RETRY_AFTER_SECONDS: f64 = 1.0;

static RETRY_HINT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r#"(?i)(?:try again|retry) (?:in|after) (\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?)\b|"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"|retry-after:\s*(\d+(?:\.\d+)?)\b"#,
    )
    .unwrap_or_else(|err| panic!("retry-hint pattern does not compile: {err}"))
});

/// Seconds an API error text asks the client to wait ("Please try again in 2s",
/// "retry in 1.5 seconds", "Suggested retry after 3s", `"retryDelay": "2s"`,
/// `Retry-After: 40`), if it says.
pub fn retry_hint_seconds(text: &str) -> Option<f64> {
    let c = RETRY_HINT.captures(text)?;
    // `"retryDelay": "2s"`, or an HTTP `Retry-After: 40` header (seconds).
    if let Some(n) = c.get(3).or_else(|| c.get(4)) {
        return n.as_str().parse().ok();
    }
    let n: f64 = c.get(1)?.as_str().parse().ok()?;
    let unit = c.get(2).map_or("s", |u| u.as_str()).to_ascii_lowercase();
    Some(if unit.starts_with("ms") || unit.starts_with("milli") {
        n / 1000.0
    } else {
        n
    })
}

/// How every hint after a refused key ends (the backends' and this module's): a message
/// ending so already says what to check.
pub(crate) const KEY_HINT_END: &str = "or log the CLI in";

/// True when the text names no reset time (so a retry-after hint is the best signal).
fn reset_text_absent(text: &str) -> bool {
    parse_reset_time(text).is_none()
}

/// Errors from the instrument's structured signals (Claude's rate-limit event and
/// `api_error_status`), before any prose is read.
fn structured_signals(result: &ExecutionResult, combined: &str) -> Vec<ClassifiedError> {
    use ErrorCategory as C;
    use ErrorCode as E;
    let mut found = Vec::new();
    if let Some(reset) = result.rate_limit_reset {
        let wait = (reset - epoch_now() + STRUCTURED_RESET_SLACK_SECONDS)
            .clamp(STRUCTURED_RESET_SLACK_SECONDS, MAX_DATED_WAIT_SECONDS);
        let mut err = ClassifiedError::new(
            E::E101,
            C::RateLimit,
            true,
            "Usage limit reached (instrument reported the reset time)",
            Some(wait),
        );
        err.reset_at_epoch = Some(reset);
        found.push(err.stated());
        return found;
    }
    // What the instrument said about it: Claude's result text, else the backend's message
    // (Codex's "unexpected status 503 …").
    let said = [
        result.result_text.as_deref(),
        result.error_message.as_deref(),
    ]
    .into_iter()
    .flatten()
    .map(str::trim)
    .find(|t| !t.is_empty())
    .map(|t| format!(": {}", t.chars().take(200).collect::<String>()))
    .unwrap_or_default();
    match result.api_error_status {
        // A server rate limit with the API's own retry-after: wait that long (a plan
        // limit names its reset and is read from the text instead).
        Some(429) if result.retry_after_seconds.is_some() && reset_text_absent(combined) => {
            let secs = result
                .retry_after_seconds
                .unwrap_or(0.0)
                .clamp(MIN_RETRY_AFTER_SECONDS, MAX_WAIT_SECONDS);
            found.push(
                ClassifiedError::new(
                    E::E101,
                    C::RateLimit,
                    true,
                    format!(
                        "API rate limit (HTTP 429), the API asked to retry after {secs:.0}s{said}"
                    ),
                    Some(secs),
                )
                .stated(),
            );
        }
        Some(429) => {
            if let Some(mut err) = rate_limit_from_text(combined, true) {
                // HTTP 429 is a rate limit whatever its words: Claude Code's "… would exceed
                // your account's rate limit. Please try again later." read as capacity
                // (E103, "overloaded" in the docs' table) from "try again later".
                if err.code == E::E103 {
                    err.code = E::E101;
                }
                found.push(err);
            }
        }
        // Overload is transient (claude-code-output.md §6.5): the CLI has already retried
        // with its own backoff; retry the sheet with the score's backoff, do not park the
        // instrument for a plan window.
        Some(status @ (529 | 503)) => found.push(ClassifiedError::new(
            E::E103,
            C::Transient,
            true,
            format!("API overloaded (HTTP {status}){said}"),
            Some(30.0),
        )),
        Some(status @ (401 | 403)) => {
            // A backend message that already names the keys to check (a profile's own list,
            // Claude Code's) is kept whole: cut at 200 characters and followed by this
            // generic hint, it read "…, or. Check the key …".
            let hinted = result
                .error_message
                .as_deref()
                .map(str::trim)
                .filter(|m| m.ends_with(KEY_HINT_END));
            let message = match hinted {
                Some(m) => format!("API authentication failed (HTTP {status}): {m}"),
                None => format!(
                    "API authentication failed (HTTP {status}){said}. Check the key the \
                     instrument reads (ANTHROPIC_API_KEY for Claude Code) in the conductor's \
                     environment, {KEY_HINT_END}"
                ),
            };
            found.push(ClassifiedError::new(E::E502, C::Auth, false, message, None));
        }
        // Any other server-side failure is worth another try (upstream made HTTP 500 a
        // permanent failure by reporting it as the exit code).
        Some(status @ 500..=599) => found.push(ClassifiedError::new(
            E::E503,
            C::Transient,
            true,
            format!("API server error (HTTP {status})"),
            Some(15.0),
        )),
        _ => {}
    }
    found
}

/// The errors the phases found, one per code, with how each was found.
#[derive(Default)]
struct Found(Vec<(ClassifiedError, ClassificationMethod)>);

impl Found {
    /// Keep `err` unless an error with its code is already in.
    fn push(&mut self, err: ClassifiedError, method: ClassificationMethod) {
        if !self.0.iter().any(|(e, _)| e.code == err.code) {
            self.0.push((err, method));
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The multi-phase classifier (execution.md §7.5): structured signals and JSON errors,
/// exit code / signal, text patterns, the rate-limit override, then root-cause selection.
/// Its hints cannot name the instrument: [`classify_for`] does when the caller knows it.
pub fn classify(result: &ExecutionResult) -> Classification {
    classify_inner(result, None)
}

/// [`classify`] for a result of the instrument `instrument` (its name in the score): a hint
/// to check the instrument names it, so the user can run the command as it is written.
pub fn classify_for(result: &ExecutionResult, instrument: &str) -> Classification {
    classify_inner(result, Some(instrument))
}

fn classify_inner(result: &ExecutionResult, instrument: Option<&str>) -> Classification {
    let mut combined = format!("{}\n{}", result.stdout, result.stderr);
    if let Some(msg) = &result.error_message {
        if !combined.contains(msg.as_str()) {
            combined.push('\n');
            combined.push_str(msg);
        }
    }

    // Exit 0 that nobody flagged as limited: the output is the answer, not an error report.
    if result.success && !result.rate_limited {
        let err = ClassifiedError::new(
            ErrorCode::E209,
            ErrorCategory::Validation,
            true,
            "Command succeeded but output validation needed",
            None,
        );
        return finish(vec![(err, ClassificationMethod::ExitCode)]);
    }

    let mut found = Found::default();
    let exit_signal = process_phase(result, &combined.to_lowercase(), &mut found);
    structured_phase(result, &combined, exit_signal, &mut found);
    // Phase 2b: the instrument's own error patterns (profile `cli.errors.*_patterns`), which
    // the profile backend reports as `error_type`. The profile author knows the tool's
    // wording better than our generic patterns do.
    if found.is_empty() {
        // The backend's own message (the CLI's error, with a hint) reads better than the
        // start of raw stdout.
        let text = result.error_message.as_deref().unwrap_or(&combined);
        if let Some(err) = profile_tagged(result.error_type, text) {
            found.push(err, ClassificationMethod::RegexFallback);
        }
    }
    // A `shell` command's output is the user's own: only a service's words make it a rate
    // limit (a bare 429 or a name holding "rate_limit" is its own failure).
    let shell = instrument == Some("shell");
    // Phase 3: text patterns, then the exit code (the single-output classifier).
    if found.is_empty() {
        let err = classify_output_of(
            &result.stdout,
            &combined_stderr(result),
            (result.exit_code, exit_signal, result.exit_reason),
            shell,
        );
        let method = if matches!(
            err.code,
            ErrorCode::E209 | ErrorCode::E009 | ErrorCode::E999
        ) || err.code == ErrorCode::E505 && result.exit_code == Some(127)
        {
            ClassificationMethod::ExitCode
        } else {
            ClassificationMethod::RegexFallback
        };
        found.push(err, method);
    }
    // Phase 4: rate-limit override — a limit anywhere in the output (or flagged by the
    // instrument's own patterns) outranks a generic failure.
    if !found.0.iter().any(|(e, _)| e.is_rate_limit()) {
        if let Some(err) = rate_limit_from(&combined, result.rate_limited, shell) {
            found.push(err, ClassificationMethod::RegexFallback);
        }
    }
    let mut c = finish(found.0);
    add_backend_words(&mut c, result, instrument);
    add_slurm_verdict(&mut c, &result.stderr);
    c
}

/// The note a Slurm attempt's stderr ends with when Slurm itself ended its job
/// (placement/slurm.rs: `[Slurm job 1234 ended TIMEOUT: …]`), without its brackets.
fn slurm_note(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .rev()
        .filter_map(|l| l.trim().strip_prefix("[Slurm job ")?.strip_suffix(']'))
        .next()
        .map(|note| format!("Slurm job {note}"))
}

/// A Slurm attempt whose job Slurm ended — its time limit, an `scancel` from outside, out of
/// memory, a failed node — fails for that reason: the instrument's exit (killed, or exit 1
/// after its SIGTERM) is only its consequence, and alone it reads like the instrument's own
/// failure. Slurm's time limit is a timeout (E001), and so is a job cancelled in the queue at
/// `queue_timeout_seconds`.
fn add_slurm_verdict(c: &mut Classification, stderr: &str) {
    if matches!(c.category, ErrorCategory::RateLimit | ErrorCategory::Auth) {
        return;
    }
    let Some(note) = slurm_note(stderr) else {
        return;
    };
    // A job cancelled at `queue_timeout_seconds` ran nothing: the note is the whole story.
    let queue = note.contains("placement.queue_timeout_seconds");
    if note.contains(" ended TIMEOUT:") || queue {
        c.code = ErrorCode::E001;
        c.category = ErrorCategory::Timeout;
        c.retriable = true;
    }
    if queue {
        c.message = note;
    } else if !c.message.contains(&note) {
        c.message = format!("{note}. {}", c.message);
    }
}

/// Phase 1: the process-level facts (signal, timeout) and a refusal to run as configured
/// that the backend recognised. Returns the signal that ended the process, if one did.
fn process_phase(result: &ExecutionResult, lower: &str, found: &mut Found) -> Option<i32> {
    let exit_signal = result
        .exit_signal
        // checked: `-i32::MIN` overflows (found by fuzzing, docs/reliability.md).
        .or(result
            .exit_code
            .filter(|c| *c < 0)
            .and_then(i32::checked_neg));
    if let Some(sig) = exit_signal {
        found.push(
            signal_error(sig, result.exit_reason, lower),
            ClassificationMethod::ExitCode,
        );
    } else if result.exit_reason == ExitReason::Timeout || result.timed_out {
        found.push(timeout_error(lower), ClassificationMethod::ExitCode);
    }
    // The program could not be started because it is not there: no retry can change that
    // (the conductor's PATH is fixed until it restarts). Claude's "claude CLI not found in
    // PATH" also matches the retriable "binary or file not found" text, which let the default
    // instrument spend every retry and its backoff on it.
    if result.error_type == Some(FailureKind::NotFound) && exit_signal.is_none() {
        found.push(
            ClassifiedError::new(
                ErrorCode::E505,
                ErrorCategory::Fatal,
                false,
                "Command not found",
                None,
            ),
            ClassificationMethod::Structured,
        );
    }
    // The backend recognised a refusal to run as configured (e.g. Claude Code as root
    // without IS_SANDBOX): not worth a retry, and its message says what to change.
    if result.error_type == Some(FailureKind::Configuration) && exit_signal.is_none() {
        if let Some(msg) = &result.error_message {
            found.push(
                ClassifiedError::new(
                    ErrorCode::E306,
                    ErrorCategory::Configuration,
                    false,
                    msg.clone(),
                    None,
                ),
                ClassificationMethod::Structured,
            );
        }
    }
    exit_signal
}

/// Phase 2: structured output — the instrument's structured signals and the JSON errors
/// it printed (a process killed without an exit code after printing one is transient).
fn structured_phase(
    result: &ExecutionResult,
    combined: &str,
    exit_signal: Option<i32>,
    found: &mut Found,
) {
    for err in structured_signals(result, combined) {
        found.push(err, ClassificationMethod::Structured);
    }
    let mut json = json_errors(&result.stdout);
    for e in json_errors(&result.stderr) {
        if !json.iter().any(|j| j.message == e.message) {
            json.push(e);
        }
    }
    for e in &json {
        found.push(classify_json_error(e), ClassificationMethod::Structured);
    }
    if result.exit_code.is_none()
        && exit_signal.is_none()
        && !json.is_empty()
        && result.exit_reason != ExitReason::Timeout
    {
        let wait = if result.stderr.to_lowercase().contains("killed") {
            60.0
        } else {
            10.0
        };
        found.push(
            ClassifiedError::new(
                ErrorCode::E999,
                ErrorCategory::Transient,
                true,
                "Process killed without an exit code",
                Some(wait),
            ),
            ClassificationMethod::ExitCode,
        );
    }
}

/// Put what the backend said next to the generic text where the user has to act on it: a
/// missing program, an auth failure or rate limit, and a bare "exit code 1".
fn add_backend_words(c: &mut Classification, result: &ExecutionResult, instrument: Option<&str>) {
    let said = result.error_message.as_deref().map(str::trim);
    if c.code == ErrorCode::E505 {
        if let Some(msg) = said {
            if !msg.is_empty() && !c.message.contains(msg) {
                // A command the user can paste (issue 23): the instrument's own name, or,
                // when the caller does not know it, the list that shows every instrument's
                // readiness.
                let check = match instrument {
                    Some(name) => format!("mozart instruments check {name}"),
                    None => "mozart instruments list".to_string(),
                };
                c.message = if instrument == Some("shell") {
                    // The built-in `shell` is always there: what is missing is a program a
                    // `RUN:` line of the prompt names.
                    format!(
                        "{msg}: a command of the prompt's RUN: lines was not found; install \
                         it, or put it on the PATH the conductor was started with"
                    )
                } else {
                    format!(
                        "{msg}: install the CLI, or put it on the PATH the conductor was \
                         started with (check: {check})"
                    )
                };
            }
        }
    }
    // An auth failure is fixed by the user, a rate limit is waited out: either way the
    // instrument's own words (and the key to check) belong next to the generic text.
    if matches!(c.category, ErrorCategory::Auth | ErrorCategory::RateLimit) {
        if let Some(msg) = said {
            // The structured messages quote the start of it already.
            let head: String = msg.chars().take(100).collect();
            if !msg.is_empty() && !c.message.contains(&head) {
                c.message = crate::redact::redact(&format!("{}: {msg}", c.message));
            }
        }
    }
    // A timeout says how long the sheet was given ("Timed out after 1800s", the backend's
    // message): "due to timeout" alone leaves the user to guess which setting ran out.
    if c.category == ErrorCategory::Timeout {
        if let Some(msg) = said.filter(|m| m.starts_with("Timed out after")) {
            if !c.message.contains(msg) {
                c.message = format!("{}: {msg}", c.message);
            }
        }
    }
    // Which model, and why, is the CLI's to say.
    if c.code == ErrorCode::E301 && c.message == MODEL_NOT_FOUND_MESSAGE {
        // Mozart passed no model (the score names none, nor does the profile): the CLI took
        // the one of its own configuration, so the score's fields are not where it came from.
        if result.model.is_none() {
            c.message = MODEL_FROM_CLI_CONFIG_MESSAGE.to_string();
        }
        let said = said
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .or_else(|| cause_line(&result.stdout, &result.stderr));
        if let Some(said) = said {
            c.message = crate::redact::redact(&format!("{}: {said}", c.message));
        }
    }
    // "exit code 1" alone does not say why (issue 22): add what the instrument said — the
    // backend's message, which names the cause, else the line of output that does.
    if matches!(c.code, ErrorCode::E009 | ErrorCode::E999)
        && c.method == ClassificationMethod::ExitCode
        && result.exit_code.is_some_and(|code| code != 0)
    {
        let said = said
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .or_else(|| cause_line(&result.stdout, &result.stderr));
        if let Some(said) = said.filter(|s| !c.message.contains(s.as_str())) {
            // A backend message that names the exit code already says all of it.
            c.message = if said.contains("exited with code") {
                crate::redact::redact(&said)
            } else {
                crate::redact::redact(&format!("{}: {said}", c.message))
            };
        }
    }
    // An exit code Mozart does not retry fails the sheet at its first attempt, whatever
    // `max_retries` says: the message says so, not only the docs.
    if c.code == ErrorCode::E999 && !c.retriable && c.method == ClassificationMethod::ExitCode {
        if let Some(code) = result.exit_code.filter(|code| *code > 0) {
            c.message = format!(
                "{} (not retried: exit code {code} is not one Mozart retries; 1, 2 and 124 are)",
                c.message
            );
        }
    }
}

/// What a failed CLI's output says the cause was: the message of the last JSON error it
/// printed (`{"error": {"message": …}}`, `{"type": "error", "message": …}` — Gemini CLI's
/// error document, Codex's `turn.failed`), else the last line that mentions an error, else
/// the last line with any text; at each step stderr first, then stdout. Stack frames, JSON fragments,
/// bare brackets and the conductor's own notes (`[Slurm job …]`; `[Process killed by …]` in
/// attempts recorded by earlier versions) are skipped; at
/// most 300 characters.
pub fn cause_line(stdout: &str, stderr: &str) -> Option<String> {
    fn json_error(text: &str) -> Option<String> {
        let mut last = None;
        scan_json_objects(text, |obj| {
            let message = match obj.get("error") {
                Some(serde_json::Value::Object(e)) => e.get("message").and_then(|m| m.as_str()),
                Some(serde_json::Value::String(e)) => Some(e.as_str()),
                _ if obj.get("type").and_then(|t| t.as_str()) == Some("error") => {
                    obj.get("message").and_then(|m| m.as_str())
                }
                _ => None,
            };
            if let Some(m) = message.map(str::trim).filter(|m| !m.is_empty()) {
                last = Some(m.to_string());
            }
            false
        });
        last
    }
    /// The last line mentioning an error (`errors_only`), else the last line with text.
    fn line(text: &str, errors_only: bool) -> Option<String> {
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| {
                l.chars().any(char::is_alphanumeric)
                    && !l.starts_with("at ")
                    && !l.starts_with(['"', '{', '}', '[', ']'])
                    && !l.starts_with("Command timed out after")
            })
            .collect();
        let recent = &lines[lines.len().saturating_sub(20)..];
        let found = if errors_only {
            recent.iter().rev().find(|l| {
                let lower = l.to_lowercase();
                lower.contains("error") || lower.contains("fatal") || lower.contains("failed")
            })
        } else {
            recent.last()
        };
        found.map(|l| (*l).to_string())
    }
    let cause = json_error(stderr)
        .or_else(|| json_error(stdout))
        .or_else(|| line(stderr, true))
        .or_else(|| line(stdout, true))
        .or_else(|| line(stderr, false))
        .or_else(|| line(stdout, false))?;
    Some(short(&cause, 300))
}

/// The start of `text` on one line, at most `max` characters.
pub(crate) fn short(text: &str, max: usize) -> String {
    let one_line = text.trim().replace('\n', " ");
    let mut s: String = one_line.chars().take(max).collect();
    if one_line.chars().count() > max {
        s.push('…');
    }
    s
}

/// An error matched by an instrument profile's pattern set (instruments.md §4.1 `cli.errors`).
fn profile_tagged(error_type: Option<FailureKind>, text: &str) -> Option<ClassifiedError> {
    // Room for the CLI's message and the hint the backend appended to it.
    let snippet: String = text.trim().chars().take(600).collect();
    let err = match error_type? {
        FailureKind::Auth => ClassifiedError::new(
            ErrorCode::E502,
            ErrorCategory::Auth,
            false,
            format!("Authentication failed (instrument auth pattern): {snippet}"),
            None,
        ),
        // A structured instrument that ended "successfully" without its answer.
        FailureKind::NoResult => ClassifiedError::new(
            ErrorCode::E503,
            ErrorCategory::Transient,
            true,
            format!("Instrument gave no usable answer: {snippet}"),
            Some(15.0),
        ),
        FailureKind::Capacity => ClassifiedError::new(
            ErrorCode::E103,
            ErrorCategory::RateLimit,
            true,
            format!("Capacity exceeded (instrument capacity pattern): {snippet}"),
            Some(300.0),
        ),
        FailureKind::Timeout => ClassifiedError::new(
            ErrorCode::E504,
            ErrorCategory::Timeout,
            true,
            format!("Backend timed out (instrument timeout pattern): {snippet}"),
            Some(60.0),
        ),
        FailureKind::Crash => ClassifiedError::new(
            ErrorCode::E003,
            ErrorCategory::Signal,
            true,
            format!("Instrument crashed (instrument crash pattern): {snippet}"),
            Some(30.0),
        ),
        FailureKind::Stale => ClassifiedError::new(
            ErrorCode::E006,
            ErrorCategory::Timeout,
            true,
            format!("Instrument stalled (instrument stale pattern): {snippet}"),
            Some(120.0),
        ),
        _ => return None,
    };
    Some(err)
}

fn combined_stderr(result: &ExecutionResult) -> String {
    match &result.error_message {
        Some(msg) if !result.stderr.contains(msg.as_str()) => format!("{}\n{}", result.stderr, msg),
        _ => result.stderr.clone(),
    }
}

fn root_priority(code: ErrorCode, present: &[ErrorCode]) -> i32 {
    use ErrorCode as E;
    let has = |c: E| present.contains(&c);
    let mut p = code.root_priority();
    match code {
        E::E505 if present.len() > 1 => p -= 10,
        E::E303 => p -= 5,
        E::E502 if has(E::E101) || has(E::E102) => p -= 5,
        E::E901 | E::E902 | E::E903 if has(E::E504) || has(E::E101) => p -= 3,
        E::E305 if has(E::E203) => p -= 3,
        E::E306 if present.iter().any(|c| c.as_str().starts_with("E0")) => p -= 3,
        E::E001 if has(E::E101) => p += 5,
        _ => {}
    }
    p
}

fn finish(collected: Vec<(ClassifiedError, ClassificationMethod)>) -> Classification {
    let codes: Vec<ErrorCode> = collected.iter().map(|(e, _)| e.code).collect();
    let mut best = 0;
    let mut best_p = i32::MAX;
    let mut prios = Vec::with_capacity(collected.len());
    for (i, (err, _)) in collected.iter().enumerate() {
        let p = root_priority(err.code, &codes);
        prios.push(p);
        if p < best_p {
            best_p = p;
            best = i;
        }
    }
    let confidence = if collected.len() <= 1 {
        1.0
    } else {
        let gap = prios
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != best)
            .map(|(_, p)| p - best_p)
            .min()
            .unwrap_or(0);
        if gap == 0 {
            0.4
        } else {
            let bonus = if matches!(
                collected[best].0.code,
                ErrorCode::E505 | ErrorCode::E502 | ErrorCode::E303
            ) {
                0.15
            } else {
                0.0
            };
            (0.5 + 0.05 * f64::from(gap) + bonus).min(1.0)
        }
    };
    let mut secondary = Vec::new();
    let mut primary = None;
    for (i, (err, method)) in collected.into_iter().enumerate() {
        if i == best {
            primary = Some((err, method));
        } else {
            secondary.push(err);
        }
    }
    let (err, method) = primary.unwrap_or_else(|| {
        (
            ClassifiedError::new(
                ErrorCode::E999,
                ErrorCategory::Transient,
                true,
                "Unknown error",
                Some(30.0),
            ),
            ClassificationMethod::RegexFallback,
        )
    });
    let rate_limit = err.is_rate_limit().then(|| RateLimitInfo {
        stated: err.wait_stated,
        said_seconds: err.said_wait_seconds,
        reset_at_epoch: err.reset_at_epoch,
        wait_seconds: err
            .suggested_wait_seconds
            .unwrap_or(DEFAULT_RATE_LIMIT_WAIT_SECONDS),
    });
    Classification {
        code: err.code,
        category: err.category,
        retriable: err.retriable,
        message: crate::redact::redact(&err.message),
        suggested_wait_seconds: err.suggested_wait_seconds,
        rate_limit,
        secondary,
        confidence,
        method,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests;
