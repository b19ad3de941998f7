//! Cross-sheet context (`cross_sheet:`): what earlier sheets printed and wrote, offered to a
//! sheet's prompt as `previous_outputs`, `previous_files` and `skipped_upstream`
//! (score.md §3.13, §5.8.5; execution.md §9.1).
//!
//! Intended call site (for the job manager / musician): when rendering a sheet's prompt,
//! before `mozart_config::template::build_sheet_prompt`:
//! ```ignore
//! let (tails, skipped) = cross_sheet::prior_from_checkpoint(&checkpoint);
//! let found = cross_sheet::collect(&CrossSheetInput {
//!     job: &config, sheet: &planned, workspace: &run.workspace,
//!     stdout_tails: &tails, skipped: &skipped, files_modified_since: None,
//! });
//! found.apply(&mut render_ctx); // fills previous_outputs / previous_files / skipped_upstream
//! ```
//! Blocking file I/O (globbing, reading files): fine inside the musician task's
//! `spawn_blocking`, or call it where the prompt is already rendered off the loop.
//!
//! Differences from upstream, deliberate: a `capture_files` pattern is a real template —
//! any Jinja expression (`{{ sheet_num - 1 }}`, `{{ workspace }}`, user variables, …) is
//! rendered with the sheet's template variables, then single-brace `{placeholders}` are
//! expanded (upstream replaces only four literal spellings and leaves the rest, so the
//! documented `{{ sheet_num - 1 }}` matched nothing, \[GAP\] §5.8.5). A pattern that fails to
//! render is reported in [`CrossSheetContext::warnings`] and skipped. Glob results are
//! sorted (Python's order is the directory's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use mozart_config::model::CrossSheetConfig;
use mozart_config::{placeholders, plan, template, JobConfig, PlannedSheet, RenderContext};
use mozart_state::{CheckpointState, SheetStatus};

use crate::workspace::FnMatch;

/// Appended to an output or file cut at `max_output_chars` (§3.13).
const TRUNCATION_MARK: &str = "\n... [truncated]";

/// What [`collect`] reads.
#[derive(Debug, Clone, Copy)]
pub struct CrossSheetInput<'a> {
    /// The score (its `cross_sheet` section, variables, sheet layout).
    pub job: &'a JobConfig,
    /// The sheet about to run.
    pub sheet: &'a PlannedSheet,
    /// The run's workspace (relative `capture_files` patterns are taken from here).
    pub workspace: &'a Path,
    /// Stored stdout tails of earlier *completed* sheets, by sheet number.
    pub stdout_tails: &'a BTreeMap<u32, String>,
    /// Earlier sheets that were skipped.
    pub skipped: &'a BTreeSet<u32>,
    /// Ignore captured files last modified before this instant: the job's start (score.md
    /// §3.13: files from before the job are not its sheets' work); `None` keeps all.
    pub files_modified_since: Option<SystemTime>,
}

/// The cross-sheet values for one sheet's prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrossSheetContext {
    /// Sheet number → stdout tail (truncated) or `[SKIPPED]`.
    pub previous_outputs: BTreeMap<u32, String>,
    /// Absolute file path → content (credential-redacted, truncated), in pattern order.
    pub previous_files: Vec<(String, String)>,
    /// Skipped sheets in the lookback window.
    pub skipped_upstream: Vec<u32>,
    /// Patterns that could not be rendered and files that could not be read.
    pub warnings: Vec<String>,
}

impl CrossSheetContext {
    /// Put the values into the render context the prompt is built from.
    pub fn apply(self, ctx: &mut RenderContext) {
        ctx.previous_outputs = self.previous_outputs;
        ctx.previous_files.clear();
        for (path, content) in self.previous_files {
            ctx.previous_files.insert(path, content);
        }
        ctx.skipped_upstream = self.skipped_upstream;
    }
}

/// Stdout tails of completed sheets and the set of skipped sheets, from a checkpoint (the
/// baton's rule: only completed sheets contribute output, §9.1).
pub fn prior_from_checkpoint(cp: &CheckpointState) -> (BTreeMap<u32, String>, BTreeSet<u32>) {
    prior_in(cp, ..)
}

/// What [`collect`] reads for sheet `n` of `job`: the tails and skips of its lookback window
/// only (nothing without `auto_capture_stdout`), so a dispatch copies a few tails, not every
/// completed sheet's.
pub fn prior_for_sheet(
    cp: &CheckpointState,
    job: &JobConfig,
    n: u32,
) -> (BTreeMap<u32, String>, BTreeSet<u32>) {
    match &job.cross_sheet {
        Some(cfg) if cfg.auto_capture_stdout => prior_in(cp, window(cfg, n)),
        _ => Default::default(),
    }
}

fn prior_in(
    cp: &CheckpointState,
    sheets: impl std::ops::RangeBounds<u32>,
) -> (BTreeMap<u32, String>, BTreeSet<u32>) {
    let mut tails = BTreeMap::new();
    let mut skipped = BTreeSet::new();
    for (num, sheet) in cp.sheets.range(sheets) {
        match sheet.status {
            SheetStatus::Completed => {
                if let Some(tail) = sheet.stdout_tail.as_ref().filter(|t| !t.is_empty()) {
                    tails.insert(*num, tail.clone());
                }
            }
            SheetStatus::Skipped => {
                skipped.insert(*num);
            }
            _ => {}
        }
    }
    (tails, skipped)
}

/// The sheets whose output sheet `n` sees: max(1, n - lookback) .. n-1; lookback 0 means
/// from sheet 1 (§3.13).
fn window(cfg: &CrossSheetConfig, n: u32) -> std::ops::Range<u32> {
    let start = match u32::try_from(cfg.lookback_sheets) {
        Ok(lb) if lb > 0 => n.saturating_sub(lb).max(1),
        _ => 1,
    };
    start..n
}

/// Compute `previous_outputs`, `previous_files` and `skipped_upstream` for a sheet. Empty
/// when the score has no `cross_sheet` section.
pub fn collect(input: &CrossSheetInput<'_>) -> CrossSheetContext {
    let mut out = CrossSheetContext::default();
    let Some(cfg) = &input.job.cross_sheet else {
        return out;
    };
    let max_chars = usize::try_from(cfg.max_output_chars).unwrap_or(usize::MAX);
    let n = input.sheet.num;
    if cfg.auto_capture_stdout {
        for prev in window(cfg, n) {
            if input.skipped.contains(&prev) {
                out.previous_outputs.insert(prev, "[SKIPPED]".into());
                out.skipped_upstream.push(prev);
            } else if let Some(tail) = input.stdout_tails.get(&prev).filter(|t| !t.is_empty()) {
                out.previous_outputs.insert(prev, truncate(tail, max_chars));
            }
        }
        if !out.skipped_upstream.is_empty() {
            tracing::warn!(sheet = n, skipped = ?out.skipped_upstream, "cross_sheet.upstream_skipped");
        }
    }
    for pattern in &cfg.capture_files {
        let expanded = match expand_pattern(input, pattern) {
            Ok(p) => p,
            Err(message) => {
                out.warnings.push(format!(
                    "sheet {n}: cross_sheet.capture_files pattern '{pattern}' skipped: {message}"
                ));
                continue;
            }
        };
        // A sheet may have left a link among the files: nothing is read through a link
        // that leads out of where the pattern points (the workspace, or the directory an
        // outside pattern names), so instrument output cannot pull another file into a
        // prompt.
        let root = capture_root(Path::new(&expanded), input.workspace);
        for path in glob(&expanded) {
            if out.previous_files.iter().any(|(p, _)| Path::new(p) == path) {
                continue;
            }
            match read_captured(&path, &root, input.files_modified_since, max_chars) {
                Ok(Some(text)) => {
                    // Credentials go before truncation, so a key cut in half is still caught.
                    let text = truncate(&mozart_backends::redact(&text), max_chars);
                    out.previous_files
                        .push((path.to_string_lossy().into_owned(), text));
                }
                Ok(None) => {}
                Err(message) => out.warnings.push(format!(
                    "sheet {n}: captured file {} not read: {message}",
                    path.display()
                )),
            }
        }
    }
    for w in &out.warnings {
        tracing::warn!(sheet = n, "{w}");
    }
    out
}

/// `path` with `.` and `..` taken out as written (no link is read).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The directory a captured file must really be in: the workspace for a pattern inside it,
/// else the literal directory an outside pattern names (before its first wildcard).
fn capture_root(pattern: &Path, workspace: &Path) -> PathBuf {
    let pattern = lexical(pattern);
    let workspace = lexical(workspace);
    if pattern.starts_with(&workspace) {
        return workspace;
    }
    let parts: Vec<Component<'_>> = pattern.components().collect();
    let mut root = PathBuf::new();
    for (i, c) in parts.iter().enumerate() {
        if i + 1 == parts.len() || FnMatch::has_magic(&c.as_os_str().to_string_lossy()) {
            break;
        }
        root.push(c.as_os_str());
    }
    root
}

/// A captured file's text: `None` when it is not a regular file or is older than `since`;
/// an error when it cannot be read or really lies outside `root` (a link out of it).
fn read_captured(
    path: &Path,
    root: &Path,
    since: Option<SystemTime>,
    max_chars: usize,
) -> Result<Option<String>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let outside = |real: &Path| {
        format!(
            "it leads to {}, outside {}: a link out of it is not followed",
            real.display(),
            root.display(),
        )
    };
    let root_real = std::fs::canonicalize(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let real = match std::fs::canonicalize(path) {
        Ok(real) => real,
        // A dangling link, or gone since the glob: nothing to read.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !real.starts_with(&root_real) {
        return Err(outside(&real));
    }
    // The resolved path, opened without following a link put there since (nor blocking on
    // a FIFO); what was opened is checked again where the system says what it is.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(&real)
        .map_err(|e| e.to_string())?;
    if let Ok(opened) = std::fs::read_link(format!("/proc/self/fd/{}", fd_of(&file))) {
        if !opened.starts_with(&root_real) {
            return Err(outside(&opened));
        }
    }
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Ok(None);
    }
    if let (Some(since), Ok(mtime)) = (since, meta.modified()) {
        if mtime < since {
            return Ok(None);
        }
    }
    // Only what can be kept is read (bounded memory for any file): `max_chars` characters
    // of up to 4 bytes, and a margin past them so that a credential across the cut is
    // still seen whole by the redaction; a longer file is cut, which [`truncate`] marks.
    let limit = u64::try_from(max_chars)
        .unwrap_or(u64::MAX)
        .saturating_mul(4)
        .saturating_add(CAPTURE_MARGIN);
    let mut bytes = Vec::new();
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let cut = meta.len() > limit || bytes.len() as u64 == limit;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(text)),
        // Cut inside a character: the whole characters before it.
        Err(e) if cut && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            Ok(Some(String::from_utf8(bytes).unwrap_or_default()))
        }
        Err(_) => Err("it is not UTF-8 text".to_string()),
    }
}

/// Bytes read past a captured file's kept characters ([`read_captured`]).
const CAPTURE_MARGIN: u64 = 64 * 1024;

fn libc_flags() -> i32 {
    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits()
}

fn fd_of(file: &std::fs::File) -> i32 {
    use std::os::fd::AsRawFd;
    file.as_raw_fd()
}

/// Render a `capture_files` pattern (Jinja, then `{placeholders}`) and anchor it in the
/// workspace.
fn expand_pattern(input: &CrossSheetInput<'_>, pattern: &str) -> Result<String, String> {
    let mut text = pattern.to_string();
    if text.contains("{{") || text.contains("{%") {
        let ctx = RenderContext {
            workspace: Some(input.workspace.to_path_buf()),
            ..RenderContext::default()
        };
        let vars = template::template_vars(input.job, input.sheet, &ctx);
        text = template::environment(true)
            .render_str(&text, vars)
            .map_err(|e| template::jinja_message(&e))?;
    }
    if text.contains('{') {
        let total = u32::try_from(plan::total_sheets(&input.job.sheet)).unwrap_or(0);
        let movements = u32::try_from(plan::total_stages(&input.job.sheet)).unwrap_or(0);
        let mut vars = placeholders::sheet_vars(input.job, input.sheet, total, movements);
        vars.insert(
            "workspace".into(),
            input.workspace.to_string_lossy().into_owned(),
        );
        text = placeholders::expand(&text, &vars, false);
    }
    let path = Path::new(&text);
    Ok(if path.is_absolute() {
        text
    } else {
        input.workspace.join(path).to_string_lossy().into_owned()
    })
}

/// Cut to `max` characters plus the truncation mark.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}{TRUNCATION_MARK}", &text[..at]),
        None => text.to_string(),
    }
}

/// Python `glob.glob` without `recursive` (`**` acts as `*`): wildcards match within one
/// path component, and a wildcard never matches a name starting with `.` unless the pattern
/// component does. Results are sorted within each directory.
pub fn glob(pattern: &str) -> Vec<PathBuf> {
    if !FnMatch::has_magic(pattern) {
        let p = PathBuf::from(pattern);
        return if p.symlink_metadata().is_ok() {
            vec![p]
        } else {
            Vec::new()
        };
    }
    let path = Path::new(pattern);
    let mut current: Vec<PathBuf> = vec![PathBuf::new()];
    for component in path.components() {
        let part = match component {
            Component::Normal(p) => p.to_string_lossy().into_owned(),
            other => {
                for c in &mut current {
                    c.push(other.as_os_str());
                }
                continue;
            }
        };
        if !FnMatch::has_magic(&part) {
            for c in &mut current {
                c.push(&part);
            }
            continue;
        }
        let matcher = FnMatch::new(&part);
        let hidden_ok = part.starts_with('.');
        let mut next = Vec::new();
        for dir in &current {
            let listing = if dir.as_os_str().is_empty() {
                std::fs::read_dir(".")
            } else {
                std::fs::read_dir(dir)
            };
            let Ok(entries) = listing else {
                continue;
            };
            let mut names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| (hidden_ok || !name.starts_with('.')) && matcher.matches(name))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|name| dir.join(name)));
        }
        current = next;
        if current.is_empty() {
            break;
        }
    }
    current.retain(|p| p.symlink_metadata().is_ok());
    current
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters_and_marks_the_cut() {
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(truncate("héllo", 2), "hé\n... [truncated]");
    }
}
