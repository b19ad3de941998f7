//! Workspace lifecycle on a fresh start: `workspace_lifecycle.archive_on_fresh` moves the
//! previous run's files into `<workspace>/<archive_dir>/<name>` so stale artifacts cannot make
//! a new run's validations pass, and `max_archives` rotates old archives (score.md §3.14,
//! execution.md §9.12). Also home of [`FnMatch`], Python `fnmatch` semantics, which the
//! preserve patterns and the cross-sheet `capture_files` globs share.
//!
//! Intended call site (for the job manager): in `submit`, when the run starts from a fresh
//! checkpoint — `--fresh`, or the auto-fresh of a changed score (conductor.md §6.4 step 8) —
//! *after* the previous checkpoint/registry state is deleted (that part is the manager's) and
//! *before* the new checkpoint is created and any sheet runs:
//! `let fresh = workspace::on_fresh_start(&job_id, &config.workspace, &config.workspace_lifecycle);`
//! and log / show `fresh.archived`. Blocking file I/O: wrap in `spawn_blocking` for large
//! workspaces. Archiving problems never fail the job (§9.12); they come back in
//! `fresh.warning`.
//!
//! Differences from upstream, deliberate: the baton path archives too (upstream only archives
//! in the legacy runner, \[GAP\]); the archive directory itself and the worktree base
//! `.worktrees` are never moved even when `preserve_patterns` omits them (upstream would try to
//! move the archive into itself, or break live worktrees).

use std::io;
use std::path::{Component, Path, PathBuf};

use mozart_config::model::{ArchiveNaming, WorkspaceLifecycleConfig};

/// Collision suffixes tried after the plain archive name (`-1` … `-99`, §9.12).
const MAX_COLLISION_SUFFIX: u32 = 99;

/// A file-system step of archiving failed.
#[derive(Debug, thiserror::Error)]
#[error("workspace {workspace}: cannot {action} {path}: {source}")]
pub struct WorkspaceError {
    /// Workspace being archived.
    pub workspace: PathBuf,
    /// What was being done.
    pub action: &'static str,
    /// Path involved.
    pub path: PathBuf,
    /// OS error.
    pub source: io::Error,
}

/// What [`on_fresh_start`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FreshStart {
    /// The archive directory the previous run's files were moved into (`None`: archiving is
    /// off, the workspace was empty or missing, or it failed).
    pub archived: Option<PathBuf>,
    /// Why archiving failed, for the job log; the run goes on regardless.
    pub warning: Option<String>,
}

/// Archive the workspace before a fresh run when `archive_on_fresh` is set. Never fails.
pub fn on_fresh_start(
    job_id: &str,
    workspace: &Path,
    config: &WorkspaceLifecycleConfig,
) -> FreshStart {
    on_fresh_start_keeping(job_id, workspace, config, None)
}

/// [`on_fresh_start`], never moving `keep` (the score file, when the workspace holds it:
/// `workspace: .`) nor the directory of the workspace that holds it.
pub fn on_fresh_start_keeping(
    job_id: &str,
    workspace: &Path,
    config: &WorkspaceLifecycleConfig,
    keep: Option<&Path>,
) -> FreshStart {
    if !config.archive_on_fresh {
        return FreshStart::default();
    }
    match archive_workspace_keeping(workspace, config, keep) {
        Ok(archived) => {
            if let Some(path) = &archived {
                tracing::info!(job_id, archive = %path.display(), "workspace.archived");
            }
            FreshStart {
                archived,
                warning: None,
            }
        }
        Err(e) => {
            tracing::warn!(job_id, error = %e, "workspace.archive_failed");
            FreshStart {
                archived: None,
                warning: Some(e.to_string()),
            }
        }
    }
}

/// Move every top-level workspace entry not matched by `preserve_patterns` into a new
/// archive directory, then rotate to `max_archives`. Returns the archive, or `None` when
/// nothing needed moving. A single entry that cannot be moved is logged and left in place.
pub fn archive_workspace(
    workspace: &Path,
    config: &WorkspaceLifecycleConfig,
) -> Result<Option<PathBuf>, WorkspaceError> {
    archive_workspace_keeping(workspace, config, None)
}

/// [`archive_workspace`], leaving in place the top-level entry that is or holds `keep`.
pub fn archive_workspace_keeping(
    workspace: &Path,
    config: &WorkspaceLifecycleConfig,
    keep: Option<&Path>,
) -> Result<Option<PathBuf>, WorkspaceError> {
    let keep = keep.map(mozart_config::resolve_path);
    let err = |action, path: &Path, source| WorkspaceError {
        workspace: workspace.to_path_buf(),
        action,
        path: path.to_path_buf(),
        source,
    };
    if !workspace.is_dir() {
        return Ok(None);
    }
    let archive_base = workspace.join(&config.archive_dir);
    let preserved = Preserver::new(workspace, &archive_base, &config.preserve_patterns);

    let mut items = Vec::new();
    let entries =
        std::fs::read_dir(workspace).map_err(|e| err("list the workspace", workspace, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| err("list the workspace", workspace, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let holds_kept = keep
            .as_deref()
            .is_some_and(|k| k.starts_with(mozart_config::resolve_path(&workspace.join(&name))));
        if !preserved.keeps(&name) && !holds_kept {
            items.push(entry.path());
        }
    }
    if items.is_empty() {
        return Ok(None);
    }
    items.sort();

    let archive = free_archive_path(&archive_base.join(archive_name(workspace, config)));
    std::fs::create_dir_all(&archive).map_err(|e| err("create the archive", &archive, e))?;
    let mut moved = 0usize;
    for item in &items {
        let Some(name) = item.file_name() else {
            continue;
        };
        match std::fs::rename(item, archive.join(name)) {
            Ok(()) => moved += 1,
            Err(e) => {
                tracing::warn!(item = %item.display(), error = %e, "workspace.archive_item_failed")
            }
        }
    }
    if moved == 0 {
        let _ = std::fs::remove_dir_all(&archive);
        return Ok(None);
    }
    if config.max_archives > 0 {
        rotate(&archive_base, config.max_archives as usize);
    }
    Ok(Some(archive))
}

/// `iteration-{n}` from a parsable `.iteration` file when naming is `iteration`, else
/// `archive-%Y%m%d-%H%M%S` in UTC.
fn archive_name(workspace: &Path, config: &WorkspaceLifecycleConfig) -> String {
    if config.archive_naming == ArchiveNaming::Iteration {
        let file = workspace.join(".iteration");
        // A regular file only, read without waiting: a FIFO there froze the conductor.
        match mozart_ipc::workspace_file::read_regular(&file) {
            Ok(bytes) => match python_int(String::from_utf8_lossy(&bytes).trim()) {
                Some(n) => return format!("iteration-{n}"),
                None => tracing::warn!(path = %file.display(), "workspace.iteration_unreadable"),
            },
            Err(e) if !e.is_not_found() => {
                tracing::warn!(path = %file.display(), error = %e, "workspace.iteration_unreadable")
            }
            Err(_) => {}
        }
    }
    let now = mozart_state::Timestamp::now();
    let stamp = now.as_str();
    // `YYYY-MM-DDTHH:MM:SS.ffffffZ`
    let date: String = stamp.get(0..10).unwrap_or("").replace('-', "");
    let time: String = stamp.get(11..19).unwrap_or("").replace(':', "");
    format!("archive-{date}-{time}")
}

/// Python `int(str)` for what a `.iteration` file holds: optional sign, digits, `_`
/// separators between digits.
fn python_int(text: &str) -> Option<i64> {
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    digits
        .replace('_', "")
        .parse::<i64>()
        .ok()
        .map(|n| sign * n)
}

fn free_archive_path(wanted: &Path) -> PathBuf {
    if !wanted.exists() {
        return wanted.to_path_buf();
    }
    let name = wanted
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for i in 1..=MAX_COLLISION_SUFFIX {
        let candidate = wanted.with_file_name(format!("{name}-{i}"));
        if !candidate.exists() {
            return candidate;
        }
    }
    let now = mozart_state::Timestamp::now();
    let time = now.as_str().get(11..19).unwrap_or("").replace(':', "");
    wanted.with_file_name(format!("{name}-{time}"))
}

/// Keep only the newest `keep` archive directories (by modification time).
fn rotate(archive_base: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(archive_base) else {
        return;
    };
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    dirs.sort();
    let excess = dirs.len().saturating_sub(keep);
    for (_, old) in dirs.into_iter().take(excess) {
        match std::fs::remove_dir_all(&old) {
            Ok(()) => tracing::info!(removed = %old.display(), "workspace.archive_rotated"),
            Err(e) => {
                tracing::warn!(path = %old.display(), error = %e, "workspace.archive_rotation_failed")
            }
        }
    }
}

/// Which top-level names stay in the workspace.
struct Preserver {
    patterns: Vec<(FnMatch, Option<FnMatch>)>,
    always: Vec<String>,
}

impl Preserver {
    fn new(workspace: &Path, archive_base: &Path, patterns: &[String]) -> Self {
        let mut always = vec![".worktrees".to_string()];
        if let Ok(rel) = archive_base.strip_prefix(workspace) {
            if let Some(Component::Normal(first)) = rel.components().next() {
                always.push(first.to_string_lossy().into_owned());
            }
        }
        let patterns = patterns
            .iter()
            .map(|p| {
                // `dir/**` also preserves `dir` itself (§9.12).
                let dir = p.strip_suffix("/**").map(FnMatch::new);
                (FnMatch::new(p), dir)
            })
            .collect();
        Preserver { patterns, always }
    }

    fn keeps(&self, name: &str) -> bool {
        self.always.iter().any(|a| a == name)
            || self
                .patterns
                .iter()
                .any(|(p, dir)| p.matches(name) || dir.as_ref().is_some_and(|d| d.matches(name)))
    }
}

/// A shell-style pattern with Python `fnmatch.fnmatchcase` semantics: `*` (also across
/// `/`), `?`, `[seq]`, `[!seq]`; an unclosed `[` is literal.
pub struct FnMatch {
    pattern: String,
    matcher: Box<dyn Fn(&str) -> bool + Send + Sync>,
}

impl std::fmt::Debug for FnMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FnMatch").field(&self.pattern).finish()
    }
}

impl FnMatch {
    /// Compile a pattern; one the regex engine cannot take matches nothing (and is logged).
    pub fn new(pattern: &str) -> Self {
        let source = fnmatch_translate(pattern);
        let matcher: Box<dyn Fn(&str) -> bool + Send + Sync> =
            match mozart_config::pyregex::compile(&source) {
                Ok(Some(re)) => Box::new(move |s: &str| re.is_match(s)),
                _ => {
                    tracing::warn!(pattern, "fnmatch.unusable_pattern");
                    Box::new(|_: &str| false)
                }
            };
        FnMatch {
            pattern: pattern.to_string(),
            matcher,
        }
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        (self.matcher)(name)
    }

    /// Whether the pattern has any wildcard (Python `glob.has_magic`).
    pub fn has_magic(pattern: &str) -> bool {
        pattern.contains(['*', '?', '['])
    }
}

/// Python `fnmatch.translate`, producing syntax for the `regex` crate.
fn fnmatch_translate(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from("^(?s:");
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '*' => {
                while chars.get(i) == Some(&'*') {
                    i += 1;
                }
                out.push_str(".*");
            }
            '?' => out.push('.'),
            '[' => {
                let mut j = i;
                if chars.get(j) == Some(&'!') {
                    j += 1;
                }
                if chars.get(j) == Some(&']') {
                    j += 1;
                }
                while j < chars.len() && chars[j] != ']' {
                    j += 1;
                }
                if j >= chars.len() {
                    out.push_str("\\[");
                    continue;
                }
                let body: Vec<char> = chars[i..j].to_vec();
                i = j + 1;
                out.push('[');
                for (k, ch) in body.iter().enumerate() {
                    match ch {
                        '!' if k == 0 => out.push('^'),
                        '^' if k == 0 => out.push_str("\\^"),
                        // Characters the regex crate treats specially inside a class.
                        '\\' | '[' | '&' | '~' => {
                            out.push('\\');
                            out.push(*ch);
                        }
                        other => out.push(*other),
                    }
                }
                out.push(']');
            }
            other => push_escaped(&mut out, other),
        }
    }
    out.push_str(")\\z");
    out
}

fn push_escaped(out: &mut String, c: char) {
    if "\\.+*?()|[]{}^$#&-~".contains(c) {
        out.push('\\');
    }
    out.push(c);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fnmatch_like_python() {
        let m = |p: &str, s: &str| FnMatch::new(p).matches(s);
        assert!(m(".mozart-*", ".mozart-state.json"));
        assert!(!m(".mozart-*", "mozart-x"));
        assert!(m("*.md", "a/b.md"), "`*` crosses `/` in fnmatch");
        assert!(m("file?.txt", "file1.txt"));
        assert!(m("[!a]bc", "xbc"));
        assert!(!m("[!a]bc", "abc"));
        assert!(m("[a-c]x", "bx"));
        assert!(m("[", "["), "an unclosed bracket is literal");
        assert!(m("a+b(c)", "a+b(c)"));
        assert!(m("[[]x", "[x"));
        assert!(!m("*.MD", "a.md"), "case-sensitive");
        assert!(m("line\nend*", "line\nend2"));
    }

    #[test]
    fn iteration_numbers_parse_like_python_int() {
        assert_eq!(python_int("7"), Some(7));
        assert_eq!(python_int("+3"), Some(3));
        assert_eq!(python_int("1_000"), Some(1000));
        assert_eq!(python_int("-2"), Some(-2));
        assert_eq!(python_int("1.5"), None);
        assert_eq!(python_int("_1"), None);
        assert_eq!(python_int(""), None);
    }
}
