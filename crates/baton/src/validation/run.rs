//! Running rules: per-rule retries, stages, and the five check types (§6.3).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::command::{run_command, truncate_output, CommandOutcome};
use super::{
    CheckResult, CheckStatus, MtimeSnapshot, ValidationCheck, ValidationReport, ValidationRule,
};

/// Result of one attempt at one check, before retry bookkeeping.
struct Attempt {
    passed: bool,
    actual: Option<String>,
    expected: Option<String>,
    error: Option<String>,
    category: Option<&'static str>,
    fix: Option<String>,
    confidence: f64,
}

impl Attempt {
    fn pass(actual: Option<String>) -> Self {
        Attempt {
            passed: true,
            actual,
            expected: None,
            error: None,
            category: None,
            fix: None,
            confidence: 1.0,
        }
    }

    fn fail(category: &'static str, error: String, fix: Option<String>) -> Self {
        Attempt {
            passed: false,
            actual: None,
            expected: None,
            error: Some(error),
            category: Some(category),
            fix,
            confidence: 1.0,
        }
    }
}

/// Run the applicable rules stage by stage (ascending); once a stage has a failure, rules of
/// later stages are reported as skipped (§6.3 staged fail-fast — upstream never calls it, we
/// port the intent).
pub async fn run_validations(
    rules: &[ValidationRule],
    snapshot: &MtimeSnapshot,
) -> ValidationReport {
    let mut order: Vec<usize> = (0..rules.len()).filter(|&i| rules[i].applies).collect();
    // Stable: rule order is kept within a stage.
    order.sort_by_key(|&i| rules[i].stage);
    let mut results: Vec<CheckResult> = Vec::with_capacity(order.len());
    let mut failed_stage: Option<u8> = None;
    for i in order {
        let rule = &rules[i];
        let result = match failed_stage {
            Some(stage) if rule.stage > stage => skipped(i, rule, stage),
            _ => run_rule(i, rule, snapshot).await,
        };
        if result.status == CheckStatus::Failed && failed_stage.is_none() {
            failed_stage = Some(rule.stage);
        }
        results.push(result);
    }
    results.sort_by_key(|r| r.rule_index);
    ValidationReport { results }
}

fn skipped(index: usize, rule: &ValidationRule, failed_stage: u8) -> CheckResult {
    CheckResult {
        rule_index: index,
        rule_type: rule.check.rule_type().to_owned(),
        description: rule.description.clone(),
        path: rule.check.path().map(Into::into),
        pattern: rule.check.pattern().map(Into::into),
        status: CheckStatus::Skipped,
        actual_value: None,
        expected_value: None,
        error_message: Some(format!("Skipped: stage {failed_stage} failed")),
        failure_category: Some("skipped".to_owned()),
        suggested_fix: None,
        confidence: 0.0,
        attempts: 0,
        duration: Duration::ZERO,
    }
}

async fn run_rule(index: usize, rule: &ValidationRule, snapshot: &MtimeSnapshot) -> CheckResult {
    let started = Instant::now();
    let attempts_allowed = rule.retry_count + 1;
    let mut attempts = 0;
    let mut last;
    loop {
        attempts += 1;
        last = check_once(&rule.check, snapshot).await;
        if last.passed || attempts >= attempts_allowed {
            break;
        }
        tokio::time::sleep(rule.retry_delay).await;
    }
    CheckResult {
        rule_index: index,
        rule_type: rule.check.rule_type().to_owned(),
        description: rule.description.clone(),
        path: rule.check.path().map(Into::into),
        pattern: rule.check.pattern().map(Into::into),
        status: if last.passed {
            CheckStatus::Passed
        } else {
            CheckStatus::Failed
        },
        actual_value: last.actual,
        expected_value: last.expected,
        error_message: last.error,
        failure_category: last.category.map(str::to_owned),
        suggested_fix: last.fix,
        confidence: last.confidence,
        attempts,
        duration: started.elapsed(),
    }
}

fn mtime_secs(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The most a `content_regex` check reads into memory; a larger file fails the check,
/// saying so (`content_contains` reads any size, a chunk at a time).
pub const CONTENT_READ_CAP: u64 = 64 * 1024 * 1024;

/// Bytes `content_contains` holds at a time (plus the pattern's length).
pub(super) const SEARCH_CHUNK: usize = 1024 * 1024;

/// The file a content check reads: a regular file only, opened without waiting (a FIFO the
/// instrument left at the path fails the check, saying so, instead of holding the sheet,
/// its cancel and the conductor's stop for ever). `read` then runs on the blocking pool.
async fn with_file<T: Send + 'static>(
    path: &std::path::Path,
    read: impl FnOnce(std::fs::File) -> std::io::Result<T> + Send + 'static,
) -> Result<T, Attempt> {
    use mozart_ipc::workspace_file::{open_regular, ReadError};
    let owned = path.to_path_buf();
    let done = tokio::task::spawn_blocking(move || {
        let file = open_regular(&owned)?;
        read(file).map_err(|source| ReadError::Io {
            path: owned,
            source,
        })
    })
    .await
    .unwrap_or_else(|e| {
        Err(ReadError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })
    });
    match done {
        Ok(value) => Ok(value),
        Err(e) if e.is_not_found() => Err(Attempt::fail(
            "missing",
            format!("File not found: {}", path.display()),
            Some(format!("Create {}", path.display())),
        )),
        Err(e @ ReadError::NotRegular { .. }) => Err(Attempt::fail(
            "missing",
            e.to_string(),
            Some(format!(
                "Make {} a regular file (remove what is there)",
                path.display()
            )),
        )),
        Err(ReadError::Io { source, .. }) => {
            Err(Attempt::fail("error", format!("I/O error: {source}"), None))
        }
    }
}

/// Whether `file` holds `pattern`, read a chunk at a time (bounded memory for any size),
/// each chunk searched with the end of the one before it (a pattern's length less one) in
/// front, so a match across two chunks is found.
fn file_contains(mut file: std::fs::File, pattern: &str) -> std::io::Result<bool> {
    use std::io::Read;
    if pattern.is_empty() {
        return Ok(true);
    }
    let finder =
        regex::bytes::Regex::new(&regex::escape(pattern)).map_err(std::io::Error::other)?;
    let keep = pattern.len() - 1;
    let mut buf: Vec<u8> = Vec::with_capacity(SEARCH_CHUNK + keep);
    let mut chunk = vec![0u8; SEARCH_CHUNK];
    loop {
        let n = match file.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        if finder.is_match(&buf) {
            return Ok(true);
        }
        let cut = buf.len().saturating_sub(keep);
        buf.drain(..cut);
    }
}

/// The text of `file` (lossy UTF-8), or `Err(size)` when it is larger than
/// [`CONTENT_READ_CAP`].
fn read_capped(file: std::fs::File) -> std::io::Result<Result<String, u64>> {
    use std::io::Read;
    let size = file.metadata()?.len();
    if size > CONTENT_READ_CAP {
        return Ok(Err(size));
    }
    let mut bytes = Vec::new();
    // It may have grown since: never more than the cap and one byte.
    file.take(CONTENT_READ_CAP + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > CONTENT_READ_CAP {
        return Ok(Err(bytes.len() as u64));
    }
    Ok(Ok(String::from_utf8_lossy(&bytes).into_owned()))
}

/// `bytes` for a person: `1.0 GiB`, `65.0 MiB`, `12 KiB`, `300 bytes`.
fn size_words(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b >= KIB * KIB * KIB {
        format!("{:.1} GiB", b / (KIB * KIB * KIB))
    } else if b >= KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{:.0} KiB", b / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

async fn check_once(check: &ValidationCheck, snapshot: &MtimeSnapshot) -> Attempt {
    match check {
        ValidationCheck::FileExists { path } => file_exists(path),
        ValidationCheck::FileModified { path } => file_modified(path, snapshot),
        ValidationCheck::ContentContains { path, pattern } => content_contains(path, pattern).await,
        ValidationCheck::ContentRegex { path, pattern } => content_regex(path, pattern).await,
        ValidationCheck::CommandSucceeds {
            command,
            working_dir,
            timeout,
        } => command_succeeds(command, working_dir, *timeout).await,
    }
}

/// `file_exists`: a regular file at `path`.
fn file_exists(path: &Path) -> Attempt {
    // A stat is one short syscall: made in place, not handed to the blocking pool and back
    // (two thread hops per sheet on the sequential path). Content reads below still go
    // through tokio::fs.
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Attempt::pass(Some(path.display().to_string())),
        Ok(_) => Attempt::fail(
            "missing",
            format!("Not a regular file: {}", path.display()),
            None,
        ),
        Err(_) => Attempt::fail(
            "missing",
            format!("File not found: {}", path.display()),
            Some(format!("Create {}", path.display())),
        ),
    }
}

/// `file_modified`: `path` changed since the snapshot taken before the sheet ran.
fn file_modified(path: &Path, snapshot: &MtimeSnapshot) -> Attempt {
    let modified = match std::fs::metadata(path).and_then(|m| m.modified()) {
        Ok(t) => t,
        Err(_) => {
            return Attempt::fail(
                "missing",
                format!("File not found: {}", path.display()),
                None,
            )
        }
    };
    let before = snapshot.get(path);
    let actual = Some(format!("mtime={:.6}", mtime_secs(modified)));
    let expected = Some(match before {
        Some(b) => format!("mtime>{:.6}", mtime_secs(b)),
        None => "modified".to_owned(),
    });
    if before.is_none_or(|b| modified > b) {
        Attempt {
            actual,
            expected,
            ..Attempt::pass(None)
        }
    } else {
        Attempt {
            actual,
            expected,
            ..Attempt::fail(
                "stale",
                format!("File was not modified: {}", path.display()),
                Some(format!("Update {}", path.display())),
            )
        }
    }
}

/// `content_contains`: `path` holds `pattern` as plain text (searched a chunk at a time:
/// a file of any size, in bounded memory).
async fn content_contains(path: &Path, pattern: &str) -> Attempt {
    let needle = pattern.to_owned();
    match with_file(path, move |file| file_contains(file, &needle)).await {
        Err(a) => a,
        Ok(true) => Attempt::pass(Some(pattern.to_owned())),
        Ok(false) => Attempt {
            expected: Some(pattern.to_owned()),
            ..Attempt::fail(
                "incomplete",
                format!("{} does not contain '{pattern}'", path.display()),
                Some(format!("Add '{pattern}' to {}", path.display())),
            )
        },
    }
}

/// `content_regex`: `path` matches `pattern` (multi-line).
async fn content_regex(path: &Path, pattern: &str) -> Attempt {
    // Python's `\Z` (end of text) is the engine's `\z`, as the score's load check reads it.
    let re = match regex::RegexBuilder::new(&end_of_text(pattern))
        .multi_line(true)
        .build()
    {
        Ok(re) => re,
        Err(e) => return Attempt::fail("error", format!("Regex error: {e}"), None),
    };
    match with_file(path, read_capped).await {
        Err(a) => a,
        Ok(Err(size)) => Attempt::fail(
            "error",
            format!(
                "{} is {}; content_regex reads at most {}",
                path.display(),
                size_words(size),
                size_words(CONTENT_READ_CAP)
            ),
            Some(format!(
                "Check a smaller file, or use content_contains (any size) or command_succeeds (e.g. grep -E) for {}",
                path.display()
            )),
        ),
        Ok(Ok(text)) => match re.find(&text) {
            Some(m) => Attempt::pass(Some(m.as_str().to_owned())),
            None => Attempt {
                expected: Some(pattern.to_owned()),
                ..Attempt::fail(
                    "malformed",
                    format!("{} does not match /{pattern}/", path.display()),
                    None,
                )
            },
        },
    }
}

/// `pattern` with Python's `\Z` spelled `\z` (an escaped backslash before `Z` left alone).
fn end_of_text(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '\\' {
            match chars.next() {
                Some('Z') => out.push('z'),
                Some(next) => out.push(next),
                None => {}
            }
        }
    }
    out
}

/// `command_succeeds`: `command` exits 0 in `working_dir` within `timeout`.
async fn command_succeeds(command: &str, working_dir: &Path, timeout: Duration) -> Attempt {
    match run_command(command, working_dir, timeout).await {
        CommandOutcome::Exited { code: Some(0), .. } => Attempt::pass(Some("exit 0".to_owned())),
        CommandOutcome::Exited { code, output, cut } => {
            let code = code.map_or_else(|| "signal".to_owned(), |c| c.to_string());
            let mut msg = format!("Command failed (exit {code}): {command}");
            if !output.is_empty() {
                msg.push('\n');
                msg.push_str(&truncate_output(&output, cut));
            }
            Attempt {
                actual: Some(format!("exit {code}")),
                expected: Some("exit 0".to_owned()),
                confidence: 0.8,
                ..Attempt::fail("error", msg, None)
            }
        }
        CommandOutcome::TimedOut { killed } => Attempt::fail(
            "error",
            format!(
                "Command timed out after {:.0}s{}: {command}",
                timeout.as_secs_f64(),
                if killed {
                    " (it ignored SIGTERM and was killed with SIGKILL)"
                } else {
                    ""
                }
            ),
            None,
        ),
        CommandOutcome::SpawnFailed(e) => Attempt::fail(
            "error",
            format!("Could not run command in {}: {e}", working_dir.display()),
            None,
        ),
    }
}
