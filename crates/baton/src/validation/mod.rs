//! Validation engine (execution.md §6): "validation is success" (invariant 3).
//!
//! Callers hand in checks whose strings are already placeholder-expanded and whose
//! `condition:` was already evaluated (`applies`). This module does real I/O and runs
//! commands, so it is async and kept out of the deterministic core.

mod command;
mod run;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

pub use run::run_validations;

/// A `command_succeeds` check to run: `bash -c command` in `working_dir`, ended at `timeout`.
#[derive(Debug, Clone)]
pub struct CommandRequest {
    /// Command line (placeholders already replaced).
    pub command: String,
    /// Working directory.
    pub working_dir: PathBuf,
    /// Wall-clock limit.
    pub timeout: Duration,
}

/// How a command check ended.
#[derive(Debug)]
pub enum CommandOutcome {
    /// The command exited with this code (`None` when killed by a signal). `output` is its
    /// stdout then its stderr — their starts only when `cut` (bounded memory).
    Exited {
        /// Exit code.
        code: Option<i32>,
        /// What it printed (or the start of it).
        output: String,
        /// Only the start of a larger output is in `output`.
        cut: bool,
    },
    /// The timeout expired and every process of the check was ended; `killed` when one of
    /// them needed SIGKILL after ignoring SIGTERM.
    TimedOut {
        /// SIGKILL was needed.
        killed: bool,
    },
    /// The command could not be started.
    SpawnFailed(std::io::Error),
}

/// Runs a command check and ends every process it started — the conductor's runner tags
/// them as an instrument's are (descendants, the in-flight journal, the end at `mozart
/// stop`).
pub type CommandRunner = std::sync::Arc<
    dyn Fn(
            CommandRequest,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = CommandOutcome> + Send>>
        + Send
        + Sync,
>;

tokio::task_local! {
    /// The [`CommandRunner`] of the validations run in this task's scope
    /// (`RUN_COMMANDS.scope(runner, run_validations(..))`); outside a scope a command check
    /// runs in its own process group, ended as a group at its timeout.
    pub static RUN_COMMANDS: CommandRunner;
}

/// What one rule checks (§6.1 `type`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum ValidationCheck {
    /// The path exists and is a regular file.
    FileExists {
        /// Absolute path.
        path: PathBuf,
    },
    /// The file's mtime is newer than the snapshot taken before the sheet's first attempt.
    FileModified {
        /// Absolute path.
        path: PathBuf,
    },
    /// The file contains `pattern` literally.
    ContentContains {
        /// Absolute path.
        path: PathBuf,
        /// Literal substring.
        pattern: String,
    },
    /// The file matches `pattern` (multi-line mode).
    ContentRegex {
        /// Absolute path.
        path: PathBuf,
        /// Regular expression (Rust `regex` syntax; look-around is rejected as an error).
        pattern: String,
    },
    /// `bash -c command` exits 0.
    CommandSucceeds {
        /// Command line (placeholders already replaced with shell-quoted values).
        command: String,
        /// Working directory (the workspace unless the rule names one).
        working_dir: PathBuf,
        /// Kill the process group after this long (upstream default 3600 s).
        timeout: Duration,
    },
}

impl ValidationCheck {
    /// Upstream's `rule_type` string.
    pub fn rule_type(&self) -> &'static str {
        match self {
            Self::FileExists { .. } => "file_exists",
            Self::FileModified { .. } => "file_modified",
            Self::ContentContains { .. } => "content_contains",
            Self::ContentRegex { .. } => "content_regex",
            Self::CommandSucceeds { .. } => "command_succeeds",
        }
    }

    /// The file this check looks at, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::FileExists { path }
            | Self::FileModified { path }
            | Self::ContentContains { path, .. }
            | Self::ContentRegex { path, .. } => Some(path),
            Self::CommandSucceeds { .. } => None,
        }
    }

    /// The pattern, for content checks.
    pub fn pattern(&self) -> Option<&str> {
        match self {
            Self::ContentContains { pattern, .. } | Self::ContentRegex { pattern, .. } => {
                Some(pattern)
            }
            _ => None,
        }
    }
}

/// One rule with its execution settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationRule {
    /// The check.
    pub check: ValidationCheck,
    /// Human description.
    pub description: Option<String>,
    /// Stage (1..10); a failing stage stops later stages (§6.3, ported intent).
    pub stage: u8,
    /// Extra attempts after a failure (upstream default 3).
    pub retry_count: u32,
    /// Pause between attempts (upstream default 200 ms).
    pub retry_delay: Duration,
    /// Result of the rule's `condition:` for this sheet; non-applicable rules are not run.
    pub applies: bool,
}

impl ValidationRule {
    /// A rule with upstream defaults (stage 1, 3 retries 200 ms apart, applies).
    pub fn new(check: ValidationCheck) -> Self {
        ValidationRule {
            check,
            description: None,
            stage: 1,
            retry_count: 3,
            retry_delay: Duration::from_millis(200),
            applies: true,
        }
    }
}

/// Modification times taken before a sheet's first attempt (§6.3 `file_modified`, pitfall 5).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MtimeSnapshot {
    mtimes: HashMap<PathBuf, SystemTime>,
}

impl MtimeSnapshot {
    /// The recorded mtime of `path`, if the file existed at snapshot time.
    pub fn get(&self, path: &std::path::Path) -> Option<SystemTime> {
        self.mtimes.get(path).copied()
    }

    /// Record `mtime` as the time `path` had before the sheet ran (a snapshot rebuilt from
    /// what a run recorded, as `mozart recover` does).
    pub fn record(&mut self, path: PathBuf, mtime: SystemTime) {
        self.mtimes.insert(path, mtime);
    }
}

/// The mtime a `file_modified` check compared against, read back from the expected value
/// it recorded (`mtime>SECS`, see `run.rs`): `Some(Some(t))`; `Some(None)` when the file did
/// not exist before the sheet ran (`modified`: any file counts); `None` for anything else.
/// The recorded seconds are rounded to the microsecond, so `t` is one microsecond later:
/// a file left as it was never reads as modified.
pub fn recorded_baseline(expected: &str) -> Option<Option<SystemTime>> {
    if expected == "modified" {
        return Some(None);
    }
    let secs: f64 = expected.strip_prefix("mtime>")?.parse().ok()?;
    let secs = Duration::try_from_secs_f64(secs + 1e-6).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(secs).map(Some)
}

/// Snapshot the mtimes of every `file_modified` path (missing files are simply absent, so any
/// later file counts as modified).
pub fn snapshot_mtimes(rules: &[ValidationRule]) -> MtimeSnapshot {
    let mut snap = MtimeSnapshot::default();
    for rule in rules {
        if let ValidationCheck::FileModified { path } = &rule.check {
            if let Ok(modified) = std::fs::metadata(path).and_then(|m| m.modified()) {
                snap.mtimes.insert(path.clone(), modified);
            }
        }
    }
    snap
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Passed.
    Passed,
    /// Failed.
    Failed,
    /// Not run: an earlier stage failed.
    Skipped,
}

/// Result of one rule (§6.4 `ValidationDetailDict`, the fields we can fill).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Index of the rule in the input slice.
    pub rule_index: usize,
    /// `file_exists`, ...
    pub rule_type: String,
    /// Rule description.
    pub description: Option<String>,
    /// Path checked.
    pub path: Option<PathBuf>,
    /// Pattern checked.
    pub pattern: Option<String>,
    /// Passed, failed or skipped.
    pub status: CheckStatus,
    /// What was found.
    pub actual_value: Option<String>,
    /// What was expected.
    pub expected_value: Option<String>,
    /// Why it failed.
    pub error_message: Option<String>,
    /// `missing`, `stale`, `incomplete`, `malformed`, `error`, `skipped`.
    pub failure_category: Option<String>,
    /// How to fix it.
    pub suggested_fix: Option<String>,
    /// 1.0 on a pass, 0.8 for a failed command, 0 when skipped.
    pub confidence: f64,
    /// Attempts made (1 + retries used).
    pub attempts: u32,
    /// Time spent on all attempts.
    pub duration: Duration,
}

impl CheckResult {
    /// `[{CATEGORY}] {reason} Fix: {fix}` (§6.4 failure summary for prompts).
    pub fn failure_summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(cat) = &self.failure_category {
            parts.push(format!("[{}]", cat.to_uppercase()));
        }
        if let Some(msg) = &self.error_message {
            // One line: the summaries of a sheet's failed rules are joined into its error
            // message, which `status`, `diagnose` and the notifications show on one line; a
            // failing command's output (lines of its own in the rule's detail) would break it.
            let lines: Vec<&str> = msg
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            parts.push(lines.join(" ⏎ "));
        }
        if let Some(fix) = &self.suggested_fix {
            parts.push(format!("Fix: {fix}"));
        }
        parts.join(" ")
    }
}

/// All results of one validation run, with the aggregates of §6.4.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationReport {
    /// One result per applicable rule, in rule order.
    pub results: Vec<CheckResult>,
}

impl ValidationReport {
    /// Rules that passed.
    pub fn passed_count(&self) -> usize {
        self.count(CheckStatus::Passed)
    }

    /// Rules that failed (skipped ones excluded).
    pub fn failed_count(&self) -> usize {
        self.count(CheckStatus::Failed)
    }

    /// Rules not run because an earlier stage failed.
    pub fn skipped_count(&self) -> usize {
        self.count(CheckStatus::Skipped)
    }

    /// Whether every rule passed (true when there are none).
    pub fn all_passed(&self) -> bool {
        self.results.iter().all(|r| r.status == CheckStatus::Passed)
    }

    /// `passed / len * 100`, 100 when there are no checks (§6.4 `pass_percentage`). This is the
    /// rate the baton uses: skipped rules count as not passed.
    pub fn pass_rate(&self) -> f64 {
        if self.results.is_empty() {
            100.0
        } else {
            self.passed_count() as f64 / self.results.len() as f64 * 100.0
        }
    }

    /// `passed / executed * 100`, 100 when nothing executed.
    pub fn executed_pass_rate(&self) -> f64 {
        let executed = self.results.len() - self.skipped_count();
        if executed == 0 {
            100.0
        } else {
            self.passed_count() as f64 / executed as f64 * 100.0
        }
    }

    /// Weighted mean confidence (weight 1 for passes, 0.5 for failures; 1.0 when empty).
    pub fn aggregate_confidence(&self) -> f64 {
        let (mut sum, mut weights) = (0.0, 0.0);
        for r in &self.results {
            let w = if r.status == CheckStatus::Passed {
                1.0
            } else {
                0.5
            };
            sum += r.confidence * w;
            weights += w;
        }
        if weights == 0.0 {
            1.0
        } else {
            sum / weights
        }
    }

    /// Failure summaries of failed rules, for the next attempt's prompt.
    pub fn failure_summaries(&self) -> Vec<String> {
        self.results
            .iter()
            .filter(|r| r.status == CheckStatus::Failed)
            .map(CheckResult::failure_summary)
            .collect()
    }

    fn count(&self, status: CheckStatus) -> usize {
        self.results.iter().filter(|r| r.status == status).count()
    }
}

#[cfg(test)]
mod tests;
