//! The instruments' output logs (`{workspace}/logs/sheet-NN.stdout.log` / `.stderr.log`):
//! private to their owner — files 0600 in a 0700 directory, whatever the umask — and
//! redacted like everything else Mozart keeps (issue 21). Other users on the machine read
//! neither the prompts' answers nor a key an instrument printed.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use crate::redact::redact_owned;

/// Longest run without a line end written as it comes; a longer one is redacted and written
/// in pieces of this size (a secret cut by such a piece boundary may be missed: output that
/// long without a newline is not text a person reads).
const MAX_PENDING: usize = 64 * 1024;

/// Longest stretch held back while a PEM private key block is still open, so the whole
/// block is redacted at once.
const MAX_HELD_KEY: usize = 256 * 1024;

/// A sheet logs directory, opened once it was checked (a directory, yours or root's, not
/// a symbolic link, 0700): the logs are created relative to this handle, never by path, so
/// a `logs` another user swaps for a link (or for their own directory) after the check
/// receives nothing — the handle still names the directory that was checked.
#[derive(Debug, Clone)]
pub struct LogDir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

impl LogDir {
    /// The directory's path (for messages, and readers).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Where one sheet's logs go: `{dir}/{stem}.stdout.log` and `{dir}/{stem}.stderr.log`,
/// made in the checked directory [`LogDir`].
#[derive(Debug, Clone)]
pub struct LogBase {
    dir: LogDir,
    stem: String,
}

impl LogBase {
    /// Logs named `{stem}{suffix}` in `dir`.
    pub fn new(dir: LogDir, stem: impl Into<String>) -> Self {
        LogBase {
            dir,
            stem: stem.into(),
        }
    }

    /// The logs of `base` (`{dir}/{stem}`): its directory made private ([`private_dir`])
    /// and opened now.
    pub fn at(base: &Path) -> io::Result<Self> {
        let (Some(dir), Some(stem)) = (base.parent(), base.file_name()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} names no log file", base.display()),
            ));
        };
        Ok(LogBase::new(
            private_dir(dir)?,
            stem.to_string_lossy().into_owned(),
        ))
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.stem)
    }

    /// The path of the log `{stem}{suffix}` (for messages and readers).
    pub fn path(&self, suffix: &str) -> PathBuf {
        self.dir.path.join(self.name(suffix))
    }

    /// Create (or replace) the log `{stem}{suffix}`, private ([`create_private_at`]).
    pub fn create(&self, suffix: &str) -> io::Result<File> {
        create_private_at(&self.dir, &self.name(suffix))
    }

    /// Remove an earlier attempt's log `{stem}{suffix}` ([`remove_stale`]).
    pub fn remove_stale(&self, suffix: &str) {
        remove_stale_at(&self.dir, &self.name(suffix));
    }

    /// Write `text` redacted to the new private log `{stem}{suffix}`.
    pub fn write_redacted(&self, suffix: &str, text: &str) -> io::Result<()> {
        let mut file = self.create(suffix)?;
        file.write_all(redact_owned(text.to_string()).as_bytes())
    }

    /// Copy `from` redacted into the new private log `{stem}{suffix}`.
    pub fn copy_redacted(&self, from: &Path, suffix: &str) -> io::Result<()> {
        copy_into(from, self.create(suffix)?)
    }
}

/// One stream's log of a sheet: `suffix` (`.stdout.log`, `.stderr.log`) of a [`LogBase`].
#[derive(Debug, Clone)]
pub struct LogFile {
    /// The sheet's logs.
    pub base: LogBase,
    /// The stream's suffix.
    pub suffix: &'static str,
}

impl LogFile {
    /// The log's path (for messages).
    pub fn path(&self) -> PathBuf {
        self.base.path(self.suffix)
    }
}

fn errno(err: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(err as i32)
}

/// Open the directory `name` in `parent` (its path `path`) as a sheet logs directory,
/// creating it 0700 when missing: refused when it is a symbolic link, not a directory, or
/// another user's (root's is trusted: root can do all of that anyway); made 0700 through
/// the handle when its mode is wider (a workspace from an older Mozart). Returns the
/// handle, its status, and whether this call created it.
fn private_at(
    parent: impl AsFd,
    name: &std::ffi::OsStr,
    path: &Path,
) -> io::Result<(OwnedFd, nix::sys::stat::FileStat, bool)> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let parent = parent.as_fd();
    let mut created = false;
    let fd = loop {
        match openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => break fd,
            Err(nix::errno::Errno::ENOENT) if !created => {
                match mkdirat(parent, name, Mode::from_bits_truncate(0o700)) {
                    Ok(()) => created = true,
                    Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            // O_NOFOLLOW on a link gives ELOOP, O_DIRECTORY on anything else ENOTDIR.
            Err(e @ (nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR)) => {
                let link =
                    nix::sys::stat::fstatat(parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| {
                            SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
                        });
                if link {
                    // Another user who can write the workspace put a link here: followed,
                    // it would have the logs written, and a directory of their choosing
                    // made private, wherever it points.
                    return Err(io::Error::other(format!(
                        "{} is a symbolic link: sheet logs are not written through one (remove it)",
                        path.display()
                    )));
                }
                return Err(io::Error::new(
                    errno(e).kind(),
                    format!(
                        "{} is not a directory: sheet logs are not written there (remove it)",
                        path.display()
                    ),
                ));
            }
            Err(e) => return Err(errno(e)),
        }
    };
    let st = fstat(&fd).map_err(errno)?;
    // A directory of another user's: they could read, replace or remove the logs.
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me && st.st_uid != 0 {
        return Err(io::Error::other(format!(
            "{} belongs to another user (uid {}): sheet logs are not written there (remove it)",
            path.display(),
            st.st_uid
        )));
    }
    if st.st_mode & 0o777 != 0o700 {
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o700)).map_err(errno)?;
    }
    Ok((fd, st, created))
}

/// Open the directory `path` (relative to the directory open as `base`, whose path is
/// `base_path`) one component at a time, each a private sheet logs directory
/// ([`private_at`]): a link or another user's directory anywhere below `base` is refused.
fn private_below(base: OwnedFd, base_path: &Path, rel: &Path) -> io::Result<LogDir> {
    let mut fd = base;
    let mut path = base_path.to_path_buf();
    let mut last = None;
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a plain directory name", rel.display()),
            ));
        };
        path.push(name);
        let (next, st, created) = private_at(&fd, name, &path)?;
        fd = next;
        last = Some((st, created));
    }
    let Some((st, created)) = last else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: no logs directory named", base_path.display()),
        ));
    };
    known_dir(&path, (st.st_dev, st.st_ino), created);
    Ok(LogDir {
        fd: Arc::new(fd),
        path,
    })
}

/// Open a directory by path for [`private_below`] (following links: the path the user
/// named, such as the workspace).
fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    use nix::fcntl::{open, OFlag};
    open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| io::Error::new(errno(e).kind(), format!("{}: {e}", path.display())))
}

/// Create `dir` (and its missing parents) and make it 0700: the directory of the logs. An
/// existing directory (a workspace from an older Mozart) is restricted too. Its last
/// component must not be a symbolic link nor another user's ([`private_at`]); the handle
/// returned is what the logs are then created in.
///
/// The directory's sheet logs are known from then on ([`may_exist`]): a directory this
/// call creates holds none; one met for the first time (or replaced since: another inode)
/// is listed once.
pub fn private_dir(dir: &Path) -> io::Result<LogDir> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: no logs directory named", dir.display()),
        ));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    if !parent.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    private_below(open_dir(parent)?, parent, Path::new(name))
}

/// Open job's sheet logs directory `logs` in `workspace` (`{workspace}/logs` or
/// `{workspace}/logs/{job}`): from the workspace down, every directory a private one of
/// yours, never a link ([`private_at`]). The handle is what the attempt's logs are created in.
pub fn open_sheet_logs(workspace: &Path, logs: &Path) -> io::Result<LogDir> {
    match logs.strip_prefix(workspace) {
        Ok(rel) if !rel.as_os_str().is_empty() => {
            private_below(open_dir(workspace)?, workspace, rel)
        }
        _ => private_dir(logs),
    }
}

/// Make the directory of job `job_id`'s sheet logs in `workspace`, claiming upstream's
/// `{workspace}/logs` for the job when no other job's sheet logs are there, and return it
/// (the one [`mozart_ipc::paths::sheet_logs_dir`] then names to every reader). A job that
/// finds `logs/` claimed by another job, or holding sheet logs no job claimed (an older
/// Mozart's), writes in `logs/{job_id}` instead: a second job in the same workspace (the
/// next score of a concert) no longer overwrites the first one's logs. A job that claimed
/// `logs/` before (a resume, a new run of the same score) writes there again.
pub fn claim_sheet_logs_dir(workspace: &Path, job_id: &str) -> io::Result<PathBuf> {
    use mozart_ipc::paths::{job_sheet_logs_subdir, sheet_logs_owner, SHEET_LOGS_OWNER};
    let logs = workspace.join("logs");
    let dir = open_sheet_logs(workspace, &logs)?;
    let own = job_sheet_logs_subdir(&logs, job_id);
    let ours = match sheet_logs_owner(&logs) {
        Some(owner) => owner == job_id,
        None if own.is_dir() || holds_sheet_logs(&logs)? => false,
        None => {
            use nix::fcntl::{openat, OFlag};
            let claimed = openat(
                &*dir.fd,
                SHEET_LOGS_OWNER,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
            );
            match claimed {
                Ok(fd) => {
                    File::from(fd).write_all(format!("{job_id}\n").as_bytes())?;
                    true
                }
                // Another job claimed it meanwhile (or left an empty claim).
                Err(nix::errno::Errno::EEXIST) => {
                    sheet_logs_owner(&logs).as_deref() == Some(job_id)
                }
                Err(err) => return Err(errno(err)),
            }
        }
    };
    if ours {
        return Ok(logs);
    }
    open_sheet_logs(workspace, &own)?;
    Ok(own)
}

/// Whether the directory `logs` holds a sheet log (`sheet-N.stdout.log` / `.stderr.log`).
fn holds_sheet_logs(logs: &Path) -> io::Result<bool> {
    for entry in std::fs::read_dir(logs)? {
        if log_bit(&entry?.file_name()).is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Most logs directories whose sheet logs this process keeps track of; past it, the
/// record starts over (a directory met again is listed again).
const MAX_KNOWN_DIRS: usize = 1024;

/// Highest sheet number whose logs are tracked; a log of a higher one is always looked for.
const MAX_TRACKED_SHEET: u64 = 1 << 21;

/// The sheet logs (`sheet-N.stdout.log`, `sheet-N.stderr.log`) present in one logs
/// directory, as far as this process knows: what the directory held when it was first
/// met, plus every log created through [`create_private`] since. Two bits a sheet: a
/// 100,000-sheet job's directory costs 25 KB, not a name per file.
struct LogsDir {
    /// Device and inode of the directory the record is for: a directory removed and made
    /// again (or another workspace moved into its place) is listed anew.
    id: (u64, u64),
    present: Vec<u64>,
    /// Known under another name too: every log is looked for.
    untracked: bool,
}

impl LogsDir {
    fn set(&mut self, bit: u64, on: bool) {
        let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        if word >= self.present.len() {
            if !on {
                return;
            }
            self.present.resize(word + 1, 0);
        }
        if on {
            self.present[word] |= mask;
        } else {
            self.present[word] &= !mask;
        }
    }

    fn get(&self, bit: u64) -> bool {
        self.present
            .get((bit / 64) as usize)
            .is_some_and(|w| w & (1u64 << (bit % 64)) != 0)
    }
}

/// The known logs directories, by the bytes of their path as the job names it (a `Path` key
/// hashes component by component: 2 k instructions a look, three a sheet — issue 24). Two
/// spellings of one directory are two entries with the same id: aliases, untracked.
fn known_dirs() -> std::sync::MutexGuard<'static, HashMap<std::ffi::OsString, LogsDir>> {
    static DIRS: LazyLock<Mutex<HashMap<std::ffi::OsString, LogsDir>>> =
        LazyLock::new(Mutex::default);
    DIRS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bit of a sheet log's file name (`sheet-NN.stdout.log` → 2·NN, `.stderr.log` →
/// 2·NN + 1); `None` for any other name.
fn log_bit(name: &std::ffi::OsStr) -> Option<u64> {
    let name = name.to_str()?;
    let rest = name.strip_prefix("sheet-")?;
    let (num, stream) = rest.split_once('.')?;
    let stream = match stream {
        "stdout.log" => 0,
        "stderr.log" => 1,
        _ => return None,
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let num: u64 = num.parse().ok()?;
    (num <= MAX_TRACKED_SHEET).then_some(num * 2 + stream)
}

/// Record the logs directory `dir` (whose device and inode are `id`): nothing to do when it
/// is the one already known; else it is empty when just `created`, or listed.
fn known_dir(dir: &Path, id: (u64, u64), created: bool) {
    use std::os::unix::fs::MetadataExt;
    // Listed under the lock, once per directory: a log another attempt creates meanwhile
    // is then either in the listing or noted in the record after it, never lost.
    let mut dirs = known_dirs();
    if dirs.get(dir.as_os_str()).is_some_and(|d| d.id == id) {
        return;
    }
    dirs.remove(dir.as_os_str());
    let mut record = LogsDir {
        id,
        present: Vec::new(),
        untracked: false,
    };
    if !created {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let Ok(entry) = entry else {
                // Not fully listed: nothing is recorded, every log is looked for.
                return;
            };
            if let Some(bit) = log_bit(&entry.file_name()) {
                record.set(bit, true);
            }
        }
    }
    // The same directory under another name (a symbolic link, `..`): a log created through
    // one name would not be noted under the other, so neither is tracked. (A record whose
    // directory is gone, its inode now another's, is just dropped.)
    let same_id = |path: &Path| std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == id);
    let aliases: Vec<std::ffi::OsString> = dirs
        .iter()
        .filter(|(_, known)| known.id == id)
        .map(|(path, _)| path.clone())
        .collect();
    let mut aliased = false;
    for path in aliases {
        if same_id(Path::new(&path)) {
            aliased = true;
            if let Some(known) = dirs.get_mut(&path) {
                known.untracked = true;
            }
        } else {
            dirs.remove(&path);
        }
    }
    if aliased {
        dirs.insert(
            dir.as_os_str().to_owned(),
            LogsDir {
                id,
                present: Vec::new(),
                untracked: true,
            },
        );
        return;
    }
    if dirs.len() >= MAX_KNOWN_DIRS {
        dirs.clear();
    }
    dirs.insert(dir.as_os_str().to_owned(), record);
}

/// Note that the log at `path` exists now (`present`) or is gone.
fn note_log(path: &Path, present: bool) {
    let (Some(dir), Some(bit)) = (path.parent(), path.file_name().and_then(log_bit)) else {
        return;
    };
    let mut dirs = known_dirs();
    if let Some(known) = dirs.get_mut(dir.as_os_str()) {
        known.set(bit, present);
    }
}

/// Whether a sheet log can exist at `path`: false only when its directory's logs are known
/// ([`private_dir`]) and none of that name was there or has been created since.
pub fn may_exist(path: &Path) -> bool {
    let (Some(dir), Some(bit)) = (path.parent(), path.file_name().and_then(log_bit)) else {
        return true;
    };
    known_dirs()
        .get(dir.as_os_str())
        .is_none_or(|known| known.untracked || known.get(bit))
}

/// Remove an earlier attempt's log at `path`, so the file holds the coming attempt's
/// output only. No system call when the log cannot exist ([`may_exist`]): a fresh job's
/// attempts — nearly all of a fan-out's — make none (issue 24).
pub fn remove_stale(path: &Path) {
    if !may_exist(path) {
        return;
    }
    match std::fs::remove_file(path) {
        Ok(()) => note_log(path, false),
        Err(err) if err.kind() == io::ErrorKind::NotFound => note_log(path, false),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot remove an earlier instrument output log");
        }
    }
}

/// [`remove_stale`] for the log `name` in the checked directory `dir`.
fn remove_stale_at(dir: &LogDir, name: &str) {
    let path = dir.path.join(name);
    if !may_exist(&path) {
        return;
    }
    match nix::unistd::unlinkat(&*dir.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => note_log(&path, false),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot remove an earlier instrument output log");
        }
    }
}

/// Create (or replace) `path` as a file only its owner can read and write
/// ([`create_private_at`] in its directory, opened by path).
pub fn create_private(path: &Path) -> io::Result<File> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        ));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir = LogDir {
        fd: Arc::new(open_dir(dir)?),
        path: dir.to_path_buf(),
    };
    create_private_at(&dir, &name.to_string_lossy())
}

/// Create the log `name` in the checked directory `dir` as a new file only its owner can
/// read and write (0600 whatever the umask): exclusively, never through a link. A file
/// already there (an earlier attempt's, or whatever else was put there) is removed first
/// and a new one made in its place: its mode, owner and links are never what the log
/// gets.
pub fn create_private_at(dir: &LogDir, name: &str) -> io::Result<File> {
    use nix::fcntl::{openat, OFlag};
    let path = dir.path.join(name);
    let create = || {
        openat(
            &*dir.fd,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
    };
    // Known absent (a fresh job's log): one `open`. Found there after all (another program
    // made it): removed, then made anew.
    let fd = match (!may_exist(&path)).then(create) {
        Some(Ok(fd)) => fd,
        Some(Err(nix::errno::Errno::EEXIST)) | None => {
            match nix::unistd::unlinkat(&*dir.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        errno(e).kind(),
                        format!("{}: {e}", path.display()),
                    ))
                }
            }
            create()
                .map_err(|e| io::Error::new(errno(e).kind(), format!("{}: {e}", path.display())))?
        }
        Some(Err(e)) => return Err(errno(e)),
    };
    note_log(&path, true);
    // Created exclusively: its mode is 0600 less the umask, never wider, so no `fstat` is
    // needed to check it.
    Ok(File::from(fd))
}

/// The conductor log's event for a sheet log that could not be written (`path`, `error`).
pub const UNWRITTEN_EVENT: &str = "sheet_log.unwritten";

/// A sheet's output as a reader shows it: the stream's log file when there is one, else the
/// tail the registry kept (a short, quick stream leaves no file — issue 24).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SheetOutput {
    /// The output, redacted.
    pub text: String,
    /// The log file it was read from; `None` for the registry's tail.
    pub file: Option<PathBuf>,
    /// Why the log file is not shown (a link, a FIFO or another user's file in its place,
    /// see [`crate::shown_log`]); `text` is then the registry's tail, if any.
    pub refused: Option<String>,
}

/// Read sheet `sheet`'s `stream` output of job `job_id`: its `sheet-NN.<stream>.log` in the
/// job's sheet logs directory ([`mozart_ipc::paths::sheet_logs_dir`]) when it exists, else
/// `registry_tail` (the attempt's row). `None` when neither holds any text. The file is
/// written redacted; it is redacted again for a log an older Mozart wrote (issue 21).
pub fn read_sheet_output(
    workspace: Option<&Path>,
    job_id: &str,
    sheet: u32,
    stream: &str,
    registry_tail: Option<&str>,
) -> Option<SheetOutput> {
    let mut refused = None;
    let from_file = workspace.and_then(|w| {
        let path = mozart_ipc::paths::sheet_output_log(w, job_id, sheet, stream);
        // Not through a link, a FIFO or another user's file (crate::shown_log): said.
        let bytes = crate::shown_log::read_shown_log(&path)
            .map_err(|e| refused = (!e.is_missing()).then(|| e.to_string()))
            .ok()?;
        // An empty log is one that could not be written (a log is created for output that
        // goes to it): the registry's tail is what there is.
        (!bytes.is_empty()).then(|| SheetOutput {
            text: redact_owned(String::from_utf8_lossy(&bytes).into_owned()),
            file: Some(path),
            refused: None,
        })
    });
    from_file
        .or_else(|| {
            (registry_tail.is_some() || refused.is_some()).then(|| SheetOutput {
                text: registry_tail.unwrap_or_default().to_string(),
                file: None,
                refused,
            })
        })
        .filter(|out| !out.text.is_empty() || out.refused.is_some())
}

/// The end of a sheet's output ([`read_sheet_output_tail`]): at most the bytes asked for,
/// and how much came before them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SheetOutputTail {
    /// The end of the output, redacted; whole lines unless one line alone is longer than
    /// the bytes asked for.
    pub text: String,
    /// The log file it was read from; `None` for the registry's tail.
    pub file: Option<PathBuf>,
    /// Bytes of the output before `text` (0: `text` is all of it).
    pub skipped_bytes: u64,
    /// Why the log file is not shown ([`SheetOutput::refused`]).
    pub refused: Option<String>,
}

/// The last `max_bytes` of sheet `sheet`'s `stream` output (as [`read_sheet_output`] finds
/// it), without reading a whole log: an instrument may print gigabytes. A cut falls after a
/// line end when the bytes kept hold one. `None` when there is no text.
pub fn read_sheet_output_tail(
    workspace: Option<&Path>,
    job_id: &str,
    sheet: u32,
    stream: &str,
    registry_tail: Option<&str>,
    max_bytes: usize,
) -> Option<SheetOutputTail> {
    let mut refused = None;
    let from_file = workspace.and_then(|w| {
        let path = mozart_ipc::paths::sheet_output_log(w, job_id, sheet, stream);
        // Not through a link, a FIFO or another user's file (crate::shown_log): said.
        let file = crate::shown_log::open_shown_log(&path)
            .map_err(|e| refused = (!e.is_missing()).then(|| e.to_string()))
            .ok()?;
        let (bytes, skipped_bytes) = read_file_tail(file, max_bytes).ok()?;
        if bytes.is_empty() && skipped_bytes == 0 {
            // An empty log: it could not be written; the registry's tail is what there is.
            return None;
        }
        Some(SheetOutputTail {
            text: redact_owned(String::from_utf8_lossy(&bytes).into_owned()),
            file: Some(path),
            skipped_bytes,
            refused: None,
        })
    });
    from_file
        .or_else(|| {
            if registry_tail.is_none() && refused.is_some() {
                return Some(SheetOutputTail {
                    text: String::new(),
                    file: None,
                    skipped_bytes: 0,
                    refused: refused.clone(),
                });
            }
            registry_tail.map(|t| {
                let start = t.len().saturating_sub(max_bytes);
                let start = (start..=t.len())
                    .find(|i| t.is_char_boundary(*i))
                    .unwrap_or(t.len());
                SheetOutputTail {
                    text: t[start..].to_string(),
                    file: None,
                    skipped_bytes: start as u64,
                    refused: refused.clone(),
                }
            })
        })
        .filter(|out| !out.text.is_empty() || out.refused.is_some())
}

/// The last `max_bytes` of `file` (from just after a line end when they hold one), and how
/// many bytes come before what is returned.
fn read_file_tail(mut file: File, max_bytes: usize) -> io::Result<(Vec<u8>, u64)> {
    use std::io::{Seek, SeekFrom};
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max_bytes as u64);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity(usize::try_from(len - start).unwrap_or(max_bytes));
    file.take(max_bytes as u64).read_to_end(&mut bytes)?;
    if start == 0 {
        return Ok((bytes, 0));
    }
    // Started inside the file: drop the partial first line, unless it is all there is.
    match bytes.iter().position(|b| *b == b'\n') {
        Some(i) if i + 1 < bytes.len() => {
            bytes.drain(..=i);
            Ok((bytes, start + i as u64 + 1))
        }
        _ => Ok((bytes, start)),
    }
}

/// The last `n` lines of `text` (all of it for 0), ending in a newline when `text` did.
pub fn last_lines(text: &str, n: usize) -> String {
    if n == 0 {
        return text.to_string();
    }
    let all: Vec<&str> = text.lines().collect();
    let mut out = all[all.len().saturating_sub(n)..].join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Write `text` redacted to a new private file at `path` (a log written in one piece).
pub fn write_redacted(path: &Path, text: &str) -> io::Result<()> {
    let mut file = create_private(path)?;
    file.write_all(redact_owned(text.to_string()).as_bytes())
}

/// Copy `from` into a new private file at `to`, redacted on the way (an output file a remote
/// attempt left behind).
pub fn copy_redacted(from: &Path, to: &Path) -> io::Result<()> {
    copy_into(from, create_private(to)?)
}

fn copy_into(from: &Path, to: File) -> io::Result<()> {
    let mut src = File::open(from)?;
    let mut log = RedactingLog::new(to);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match src.read(&mut buf)? {
            0 => break,
            n => log.write(&buf[..n])?,
        }
    }
    log.finish()
}

/// A log file written as output arrives, redacted line by line: each complete line is
/// redacted before it is written (a secret never reaches the disk), the unfinished rest waits
/// for its line end. Dropping it writes what is left.
#[derive(Debug)]
pub struct RedactingLog {
    file: Option<File>,
    pending: Vec<u8>,
}

static KEY_ARMOUR: LazyLock<regex::bytes::Regex> = LazyLock::new(|| {
    regex::bytes::Regex::new(r"-----(BEGIN|END) [A-Z0-9 ]*PRIVATE KEY-----")
        .unwrap_or_else(|err| panic!("built-in pattern does not compile: {err}"))
});

impl RedactingLog {
    /// Write through to `file`.
    pub fn new(file: File) -> Self {
        RedactingLog {
            file: Some(file),
            pending: Vec::new(),
        }
    }

    /// Create the private file at `path` and write through to it.
    pub fn create(path: &Path) -> io::Result<Self> {
        create_private(path).map(Self::new)
    }

    /// Take `chunk` of output: the complete lines so far are redacted and written.
    pub fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.pending.extend_from_slice(chunk);
        let Some(end) = self
            .pending
            .iter()
            .rposition(|&b| b == b'\n' || b == b'\r')
            .map(|i| i + 1)
        else {
            if self.pending.len() > MAX_PENDING {
                return self.flush_piece();
            }
            return Ok(());
        };
        if self.key_open(end) && self.pending.len() < MAX_HELD_KEY {
            return Ok(());
        }
        self.emit(end)
    }

    /// Write what is left (an unfinished last line) and flush.
    pub fn finish(&mut self) -> io::Result<()> {
        let end = self.pending.len();
        if end > 0 {
            self.emit(end)?;
        }
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }

    /// A private key block starts in the first `end` bytes and does not end there.
    fn key_open(&self, end: usize) -> bool {
        KEY_ARMOUR
            .captures_iter(&self.pending[..end])
            .last()
            .is_some_and(|c| &c[1] == b"BEGIN")
    }

    /// Redact and write a piece of a very long line, ending on a character boundary.
    fn flush_piece(&mut self) -> io::Result<()> {
        let mut end = self.pending.len();
        if let Err(e) = std::str::from_utf8(&self.pending) {
            // Up to the last complete character (an invalid byte earlier is written lossily).
            if e.error_len().is_none() {
                end = e.valid_up_to().max(1);
            }
        }
        self.emit(end)
    }

    fn emit(&mut self, end: usize) -> io::Result<()> {
        let rest = self.pending.split_off(end);
        let head = std::mem::replace(&mut self.pending, rest);
        let text = match String::from_utf8(head) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        if let Err(err) = file.write_all(redact_owned(text).as_bytes()) {
            // One failure ends the log: a later write would leave a hole in it.
            self.file = None;
            return Err(err);
        }
        Ok(())
    }
}

impl Drop for RedactingLog {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_tail_is_read_from_a_line_end_and_counts_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        std::fs::write(&path, "first line\nsecond\nthird\n").unwrap();
        // 10 bytes from the end fall inside "second": only whole lines are kept.
        assert_eq!(
            read_file_tail(File::open(&path).unwrap(), 10).unwrap(),
            (b"third\n".to_vec(), 18)
        );
        assert_eq!(
            read_file_tail(File::open(&path).unwrap(), 100).unwrap().1,
            0
        );
        // One line longer than the bytes asked for: its end, cut inside it.
        std::fs::write(&path, "a".repeat(50)).unwrap();
        assert_eq!(
            read_file_tail(File::open(&path).unwrap(), 8).unwrap(),
            (b"aaaaaaaa".to_vec(), 42)
        );
        let tail = read_sheet_output_tail(None, "j", 1, "stdout", Some("héllo"), 4).unwrap();
        assert_eq!((tail.text.as_str(), tail.skipped_bytes), ("llo", 3));
    }

    #[test]
    fn a_sheets_output_is_its_file_else_the_registry_tail() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        // No file: the registry's tail, said to be from there.
        let out = read_sheet_output(Some(ws), "j", 3, "stdout", Some("short\n")).unwrap();
        assert_eq!(out.text, "short\n");
        assert_eq!(out.file, None);
        assert_eq!(read_sheet_output(Some(ws), "j", 3, "stdout", None), None);
        assert_eq!(
            read_sheet_output(Some(ws), "j", 3, "stdout", Some("")),
            None
        );
        // A file (one an older Mozart wrote unredacted): it wins, and is redacted.
        let path = mozart_ipc::paths::sheet_output_log(ws, "j", 3, "stdout");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "full\nANTHROPIC_API_KEY=sk-ant-secret1\n").unwrap();
        let out = read_sheet_output(Some(ws), "j", 3, "stdout", Some("tail")).unwrap();
        assert_eq!(
            out.text,
            "full\nANTHROPIC_API_KEY=[REDACTED_ANTHROPIC_KEY]\n"
        );
        assert_eq!(out.file, Some(path));
        // Without a workspace only the tail can answer.
        let out = read_sheet_output(None, "j", 3, "stdout", Some("tail")).unwrap();
        assert_eq!((out.text.as_str(), out.file), ("tail", None));
    }

    /// The first job in a workspace claims `logs/`; another writes in its own subdirectory,
    /// leaving the first one's logs as they are; each finds its own again, and readers agree.
    #[test]
    fn a_second_job_in_a_workspace_keeps_its_logs_apart() {
        use mozart_ipc::paths::sheet_logs_dir;
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let logs = ws.join("logs");
        assert_eq!(claim_sheet_logs_dir(ws, "a").unwrap(), logs);
        std::fs::write(logs.join("sheet-01.stdout.log"), "a's").unwrap();
        assert_eq!(claim_sheet_logs_dir(ws, "a").unwrap(), logs, "a re-run");
        assert_eq!(claim_sheet_logs_dir(ws, "b").unwrap(), logs.join("b"));
        assert_eq!(mode(&logs.join("b")), 0o700);
        assert_eq!(claim_sheet_logs_dir(ws, "b").unwrap(), logs.join("b"));
        assert_eq!(sheet_logs_dir(ws, "a"), logs);
        assert_eq!(sheet_logs_dir(ws, "b"), logs.join("b"));
        assert_eq!(
            std::fs::read_to_string(logs.join("sheet-01.stdout.log")).unwrap(),
            "a's"
        );

        // Sheet logs nobody claimed (an older Mozart's): kept, the job writes apart.
        let old = tempfile::tempdir().unwrap();
        let old_logs = old.path().join("logs");
        std::fs::create_dir_all(&old_logs).unwrap();
        std::fs::write(old_logs.join("sheet-1.stderr.log"), "old").unwrap();
        let own = claim_sheet_logs_dir(old.path(), "c").unwrap();
        assert_eq!(own, old_logs.join("c"));
        assert_eq!(sheet_logs_dir(old.path(), "c"), own);
        assert_eq!(
            sheet_logs_dir(old.path(), "d"),
            old_logs,
            "unclaimed: as it was"
        );
        // A `logs/` with no sheet log in it (the user's own files) is claimed.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(other.path().join("logs")).unwrap();
        std::fs::write(other.path().join("logs/notes.txt"), "mine").unwrap();
        assert_eq!(
            claim_sheet_logs_dir(other.path(), "e").unwrap(),
            other.path().join("logs")
        );
    }

    #[test]
    fn last_lines_keeps_the_end_and_its_newline() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a\nb\n", 5), "a\nb\n");
        assert_eq!(last_lines("a\nb\n", 0), "a\nb\n");
    }

    #[test]
    fn logs_are_private_and_redacted_even_when_a_secret_spans_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("ws/logs");
        private_dir(&logs).unwrap();
        assert_eq!(mode(&logs), 0o700);
        let path = logs.join("sheet-01.stdout.log");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut log = RedactingLog::create(&path).unwrap();
        assert_eq!(mode(&path), 0o600, "an existing 0644 file is restricted");
        for chunk in [
            "start\nANTHROPIC_API_KEY=sk-an".as_bytes(),
            b"t-short1 and MY_TOKEN=hun",
            b"ter2hunter2\nkey:\n-----BEGIN RSA PRIVATE KEY-----\nMIIE",
            b"pAIBAAK\n-----END RSA PRIVATE KEY-----\nunfinished sk-proj-abc1",
        ] {
            log.write(chunk).unwrap();
        }
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "start\nANTHROPIC_API_KEY=[REDACTED_ANTHROPIC_KEY] and MY_TOKEN=[REDACTED]\nkey:\n\
             [REDACTED_PRIVATE_KEY]\nunfinished [REDACTED_OPENAI_KEY]"
        );
    }

    #[test]
    fn existing_directories_are_restricted_and_copies_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&logs).unwrap();
        assert_eq!(mode(&logs), 0o700);
        let src = dir.path().join("remote.out");
        std::fs::write(&src, "token=abc123\n").unwrap();
        let dst = logs.join("sheet-02.stdout.log");
        copy_redacted(&src, &dst).unwrap();
        assert_eq!(std::fs::read_to_string(&dst).unwrap(), "token=[REDACTED]\n");
        assert_eq!(mode(&dst), 0o600);
        write_redacted(&dst, "password: hunter2").unwrap();
        assert_eq!(
            std::fs::read_to_string(&dst).unwrap(),
            "password: [REDACTED]"
        );
    }

    /// A logs directory is looked at once: a fresh one holds no log, a directory met
    /// later is listed, what is created since is noted, and a directory replaced at the
    /// same path is listed anew.
    #[test]
    fn the_logs_that_can_exist_are_known_without_looking() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("fresh/logs");
        private_dir(&logs).unwrap();
        let out = logs.join("sheet-07.stdout.log");
        assert!(!may_exist(&out), "a directory just created holds no log");
        assert!(
            may_exist(&logs.join("notes.txt")),
            "any other name is looked for"
        );
        drop(RedactingLog::create(&out).unwrap());
        assert!(may_exist(&out), "a log created since is known");
        remove_stale(&out);
        assert!(!out.exists());
        assert!(!may_exist(&out), "and known gone once removed");

        // A directory with logs from before this process (a resumed job).
        let old = dir.path().join("old/logs");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("sheet-3.stderr.log"), "earlier").unwrap();
        private_dir(&old).unwrap();
        assert!(may_exist(&old.join("sheet-3.stderr.log")));
        assert!(!may_exist(&old.join("sheet-3.stdout.log")));
        assert!(!may_exist(&old.join("sheet-4.stderr.log")));
        remove_stale(&old.join("sheet-3.stderr.log"));
        assert!(!old.join("sheet-3.stderr.log").exists());

        // The directory replaced by another (a workspace moved into place).
        let moved = dir.path().join("moved");
        std::fs::create_dir_all(&moved).unwrap();
        std::fs::write(moved.join("sheet-9.stdout.log"), "other").unwrap();
        std::fs::remove_dir_all(&old).unwrap();
        std::fs::rename(&moved, &old).unwrap();
        private_dir(&old).unwrap();
        assert!(may_exist(&old.join("sheet-9.stdout.log")));
        remove_stale(&old.join("sheet-9.stdout.log"));
        assert!(!old.join("sheet-9.stdout.log").exists());
    }

    #[test]
    fn long_lines_are_written_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let mut log = RedactingLog::create(&path).unwrap();
        let line = "é".repeat(MAX_PENDING);
        log.write(line.as_bytes()).unwrap();
        assert!(
            std::fs::metadata(&path).unwrap().len() > 0,
            "a long line is not held whole"
        );
        log.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), line);
    }
}
