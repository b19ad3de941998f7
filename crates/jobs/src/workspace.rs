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
use std::os::fd::{AsRawFd, OwnedFd};
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

/// Why archiving is refused (the job is then not run): a directory it would move files
/// into, or delete old archives from, is a symbolic link or another user's — following it
/// would move or delete files wherever it points.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ArchiveRefused(pub String);

/// Archiving failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file-system step failed (the run goes on, §9.12).
    #[error(transparent)]
    Failed(#[from] WorkspaceError),
    /// Not safe to archive: the job is not run.
    #[error(transparent)]
    Refused(#[from] ArchiveRefused),
}

/// What [`on_fresh_start`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FreshStart {
    /// The archive directory the previous run's files were moved into (`None`: archiving is
    /// off, the workspace was empty or missing, or it failed).
    pub archived: Option<PathBuf>,
    /// Why archiving failed, for the job log; the run goes on regardless.
    pub warning: Option<String>,
    /// Why archiving was refused ([`ArchiveRefused`]): nothing was moved, and the job must
    /// not run.
    pub refused: Option<String>,
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
                ..FreshStart::default()
            }
        }
        Err(ArchiveError::Failed(e)) => {
            tracing::warn!(job_id, error = %e, "workspace.archive_failed");
            FreshStart {
                warning: Some(e.to_string()),
                ..FreshStart::default()
            }
        }
        Err(ArchiveError::Refused(e)) => {
            tracing::warn!(job_id, error = %e, "workspace.archive_refused");
            FreshStart {
                refused: Some(e.to_string()),
                ..FreshStart::default()
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
) -> Result<Option<PathBuf>, ArchiveError> {
    archive_workspace_keeping(workspace, config, None)
}

/// [`archive_workspace`], leaving in place the top-level entry that is or holds `keep`.
///
/// The workspace and the archive directory are opened once and checked ([`open_archive_base`]),
/// and every move and deletion is made relative to those handles: a link another user puts in
/// their place meanwhile is never followed.
pub fn archive_workspace_keeping(
    workspace: &Path,
    config: &WorkspaceLifecycleConfig,
    keep: Option<&Path>,
) -> Result<Option<PathBuf>, ArchiveError> {
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

    // The names only: each is then moved relative to the workspace opened and checked.
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
            items.push(entry.file_name());
        }
    }
    if items.is_empty() {
        return Ok(None);
    }
    items.sort();

    let (ws_fd, base_fd) = open_archive_base(workspace, &config.archive_dir)?;
    let name = free_archive_name(&base_fd, &archive_name(workspace, config));
    let archive = archive_base.join(&name);
    let errno = |e: nix::errno::Errno| io::Error::from_raw_os_error(e as i32);
    nix::sys::stat::mkdirat(
        &base_fd,
        name.as_str(),
        nix::sys::stat::Mode::from_bits_truncate(0o777),
    )
    .map_err(|e| err("create the archive", &archive, errno(e)))?;
    let archive_fd =
        open_dir_at(&base_fd, &name).map_err(|e| err("create the archive", &archive, e))?;
    let mut moved = 0usize;
    for item in &items {
        match nix::fcntl::renameat(&ws_fd, item.as_os_str(), &archive_fd, item.as_os_str()) {
            Ok(()) => moved += 1,
            Err(e) => {
                tracing::warn!(item = %workspace.join(item).display(), error = %e, "workspace.archive_item_failed")
            }
        }
    }
    if moved == 0 {
        let _ = nix::unistd::unlinkat(
            &base_fd,
            name.as_str(),
            nix::unistd::UnlinkatFlags::RemoveDir,
        );
        return Ok(None);
    }
    if config.max_archives > 0 {
        rotate(&base_fd, &archive_base, config.max_archives as usize);
    }
    Ok(Some(archive))
}

/// The path through which a directory handle is read (`/proc/self/fd/N`: the directory
/// itself, whatever its path now holds).
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Open the directory `name` in `dir`, not through a link.
fn open_dir_at(dir: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| io::Error::from_raw_os_error(e as i32))
}

/// Whose a file is, when it is not yours nor root's (whose files are trusted).
fn foreign_owner(uid: u32) -> Option<String> {
    let me = nix::unistd::geteuid().as_raw();
    (uid != me && uid != 0).then(|| mozart_ipc::trust::describe_user(uid))
}

/// What to do about a refused archive directory.
const ARCHIVE_FIX: &str = "nothing was moved and the job was not run; remove it, or set workspace_lifecycle.archive_dir to a directory of yours";

/// Open the workspace (as resolved when the score was loaded) and its archive directory
/// (`archive_dir` of the score, made when missing) for archiving, refusing
/// ([`ArchiveRefused`]) an archive directory (or a directory on the way to it inside the
/// workspace) that is a symbolic link or another user's: files would be moved into, and old
/// archives deleted from, wherever it points.
fn open_archive_base(
    workspace: &Path,
    archive_dir: &str,
) -> Result<(OwnedFd, OwnedFd), ArchiveError> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, Mode};
    let io = |action, path: &Path, source| {
        ArchiveError::Failed(WorkspaceError {
            workspace: workspace.to_path_buf(),
            action,
            path: path.to_path_buf(),
            source,
        })
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let ws_fd = open(workspace, flags, Mode::empty()).map_err(|e| {
        io(
            "open the workspace",
            workspace,
            io::Error::from_raw_os_error(e as i32),
        )
    })?;
    let rel = Path::new(archive_dir);
    let (mut fd, mut path) = if rel.is_absolute() {
        let root = open(Path::new("/"), flags, Mode::empty()).map_err(|e| {
            io(
                "open",
                Path::new("/"),
                io::Error::from_raw_os_error(e as i32),
            )
        })?;
        (root, PathBuf::from("/"))
    } else {
        let again = open(workspace, flags, Mode::empty()).map_err(|e| {
            io(
                "open the workspace",
                workspace,
                io::Error::from_raw_os_error(e as i32),
            )
        })?;
        (again, workspace.to_path_buf())
    };
    for part in rel.components() {
        let name = match part {
            Component::Normal(name) => name.to_string_lossy().into_owned(),
            Component::ParentDir => "..".to_string(),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        };
        path.push(&name);
        let next = match open_dir_at(&fd, &name) {
            Ok(next) => next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match nix::sys::stat::mkdirat(&fd, name.as_str(), Mode::from_bits_truncate(0o777)) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => {
                        return Err(io(
                            "create the archive directory",
                            &path,
                            io::Error::from_raw_os_error(e as i32),
                        ))
                    }
                }
                open_dir_at(&fd, &name).map_err(|e| io("open the archive directory", &path, e))?
            }
            Err(e) => {
                let link = nix::sys::stat::fstatat(
                    &fd,
                    name.as_str(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .is_ok_and(|st| st.st_mode & libc_ifmt() == nix::sys::stat::SFlag::S_IFLNK.bits());
                if link {
                    let target = std::fs::read_link(&path)
                        .map(|t| t.display().to_string())
                        .unwrap_or_default();
                    return Err(ArchiveRefused(format!(
                        "Workspace archiving refused: {} is a symbolic link (to {target}): the workspace is not archived through one; {ARCHIVE_FIX}",
                        path.display()
                    ))
                    .into());
                }
                return Err(io("open the archive directory", &path, e));
            }
        };
        let st = fstat(&next).map_err(|e| {
            io(
                "open the archive directory",
                &path,
                io::Error::from_raw_os_error(e as i32),
            )
        })?;
        if name != ".." {
            if let Some(owner) = foreign_owner(st.st_uid) {
                return Err(ArchiveRefused(format!(
                    "Workspace archiving refused: {} belongs to {owner}, who could read, replace or remove what is archived there; {ARCHIVE_FIX}",
                    path.display()
                ))
                .into());
            }
        }
        fd = next;
    }
    Ok((ws_fd, fd))
}

fn libc_ifmt() -> u32 {
    nix::sys::stat::SFlag::S_IFMT.bits()
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

/// `wanted`, or `wanted-1` … `wanted-99` when taken, in the archive directory `base`.
fn free_archive_name(base: &OwnedFd, wanted: &str) -> String {
    let taken = |name: &str| {
        nix::sys::stat::fstatat(base, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    };
    if !taken(wanted) {
        return wanted.to_string();
    }
    for i in 1..=MAX_COLLISION_SUFFIX {
        let candidate = format!("{wanted}-{i}");
        if !taken(&candidate) {
            return candidate;
        }
    }
    let now = mozart_state::Timestamp::now();
    let time = now.as_str().get(11..19).unwrap_or("").replace(':', "");
    format!("{wanted}-{time}")
}

/// Whether `name` is one Mozart gives an archive: `archive-YYYYMMDD-HHMMSS` or
/// `iteration-N`, with a collision suffix.
fn is_archive_name(name: &str) -> bool {
    let rest = name
        .strip_prefix("archive-")
        .or_else(|| name.strip_prefix("iteration-"));
    rest.is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
}

/// Keep only the newest `keep` archives (by modification time) in the archive directory
/// open as `base` (its path `base_path`). Only what Mozart made is counted and removed:
/// directories of yours named as an archive ([`is_archive_name`]), never a link, nor
/// anything else someone keeps there.
fn rotate(base: &OwnedFd, base_path: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(fd_path(base)) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut dirs: Vec<(i64, i64, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if !is_archive_name(&name) {
                return None;
            }
            let st = nix::sys::stat::fstatat(
                base,
                name.as_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .ok()?;
            let dir = st.st_mode & libc_ifmt() == nix::sys::stat::SFlag::S_IFDIR.bits();
            (dir && st.st_uid == me).then_some((st.st_mtime, st.st_mtime_nsec, name))
        })
        .collect();
    dirs.sort();
    let excess = dirs.len().saturating_sub(keep);
    for (_, _, old) in dirs.into_iter().take(excess) {
        let path = base_path.join(&old);
        match remove_tree_at(base, &old) {
            Ok(()) => tracing::info!(removed = %path.display(), "workspace.archive_rotated"),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "workspace.archive_rotation_failed")
            }
        }
    }
}

/// Remove the directory `name` in `dir` and everything in it, relative to open handles:
/// a link inside is removed, never followed.
fn remove_tree_at(dir: &OwnedFd, name: &str) -> io::Result<()> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let errno = |e: nix::errno::Errno| io::Error::from_raw_os_error(e as i32);
    let fd = open_dir_at(dir, name)?;
    for entry in std::fs::read_dir(fd_path(&fd))? {
        let entry = entry?;
        let child = entry.file_name();
        let st = nix::sys::stat::fstatat(
            &fd,
            child.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno)?;
        if st.st_mode & libc_ifmt() == nix::sys::stat::SFlag::S_IFDIR.bits() {
            remove_tree_at(&fd, &child.to_string_lossy())?;
        } else {
            unlinkat(&fd, child.as_os_str(), UnlinkatFlags::NoRemoveDir).map_err(errno)?;
        }
    }
    unlinkat(dir, name, UnlinkatFlags::RemoveDir).map_err(errno)
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
