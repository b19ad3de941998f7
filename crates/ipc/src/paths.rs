//! Where the conductor keeps its files: the Mozart home, the socket, the PID and lock
//! files, the registry (architecture.md "Paths", conductor.md §20 clones). One module for
//! the CLI, the conductor and any other client, so they always agree.

use std::path::{Path, PathBuf};

use crate::IpcError;

/// Environment variable naming the Mozart home (default `~/.mozart`).
pub const HOME_ENV: &str = "MOZART_HOME";

/// Neither `$MOZART_HOME` nor `$HOME` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot locate the Mozart home: set MOZART_HOME or HOME")]
pub struct NoHome;

/// The file in a workspace's `logs/` that names the job whose sheet logs are there.
pub const SHEET_LOGS_OWNER: &str = ".mozart-job";

/// Where job `job_id`'s sheet logs are in `workspace`: upstream's `{workspace}/logs` for the
/// job that holds it, else the job's own `{workspace}/logs/{job_id}`. Upstream has one
/// `logs/` for every job of a workspace, so the second job of a concert sharing it
/// overwrote the first one's logs; here the first job to write there claims it
/// ([`SHEET_LOGS_OWNER`]) and any other job finding it claimed (or holding sheet logs no job
/// claimed: an older Mozart's) writes in its own subdirectory. `logs/` claimed by no job and
/// no subdirectory of the job's own: `logs/` (logs an older Mozart wrote).
pub fn sheet_logs_dir(workspace: &Path, job_id: &str) -> PathBuf {
    let logs = workspace.join("logs");
    match sheet_logs_owner(&logs) {
        Some(owner) if owner == job_id => logs,
        Some(_) => job_sheet_logs_subdir(&logs, job_id),
        None => {
            let own = job_sheet_logs_subdir(&logs, job_id);
            if own.is_dir() {
                own
            } else {
                logs
            }
        }
    }
}

/// The job that claimed the sheet logs directory `logs` ([`SHEET_LOGS_OWNER`]), if any.
pub fn sheet_logs_owner(logs: &Path) -> Option<String> {
    let text = std::fs::read_to_string(logs.join(SHEET_LOGS_OWNER)).ok()?;
    let owner = text.trim_end_matches(['\n', '\r']);
    (!owner.is_empty()).then(|| owner.to_string())
}

/// A job's own directory of sheet logs under a workspace's `logs` held by another job: the
/// job id as the directory's name (a score file's name without `.yaml`), or, for an id that
/// is not one file name, `_` and the id with every character other than letters, digits,
/// `-`, `_` and `.` replaced by `_`.
pub fn job_sheet_logs_subdir(logs: &Path, job_id: &str) -> PathBuf {
    let plain =
        !job_id.is_empty() && job_id != "." && job_id != ".." && !job_id.contains(['/', '\0']);
    if plain {
        return logs.join(job_id);
    }
    let safe: String = job_id
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    logs.join(format!("_{safe}"))
}

/// The name of a sheet's live output file in its job's sheet logs directory:
/// upstream's `sheet-NN.<stream>.log` (`stream` is `stdout` or `stderr`).
pub fn sheet_log_file(logs: &Path, sheet: u32, stream: &str) -> PathBuf {
    logs.join(format!("sheet-{sheet:02}.{stream}.log"))
}

/// A sheet's live output file, upstream's `{workspace}/logs/sheet-NN.<stream>.log` in the
/// directory of job `job_id`'s sheet logs ([`sheet_logs_dir`]): the one name the conductor
/// writes and every client reads.
pub fn sheet_output_log(workspace: &Path, job_id: &str, sheet: u32, stream: &str) -> PathBuf {
    sheet_log_file(&sheet_logs_dir(workspace, job_id), sheet, stream)
}

/// The Mozart home: `$MOZART_HOME`, else `$HOME/.mozart`.
pub fn mozart_home() -> Result<PathBuf, NoHome> {
    if let Some(home) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".mozart"))
        .ok_or(NoHome)
}

/// Where user instrument profiles live, in the order they are read: the Mozart home's
/// `instruments/`, then the project's `./.mozart/instruments/`.
pub fn instrument_profile_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = mozart_home()
        .map(|h| h.join("instruments"))
        .into_iter()
        .collect();
    dirs.push(PathBuf::from(".mozart").join("instruments"));
    dirs
}

/// Every path one conductor (production or a clone) uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConductorPaths {
    /// The Mozart home.
    pub home: PathBuf,
    /// `conductor.yaml` (shared by clones).
    pub config_file: PathBuf,
    /// The IPC socket.
    pub socket: PathBuf,
    /// PID file (informational; the lock decides who runs).
    pub pid_file: PathBuf,
    /// Lock file held with `flock` for the conductor's lifetime: the single-instance guard.
    pub lock_file: PathBuf,
    /// Job registry database.
    pub registry_db: PathBuf,
    /// Global learning database (shared by clones, §20).
    pub learning_db: PathBuf,
    /// Conductor log file.
    pub log_file: PathBuf,
    /// `None` for production, else the clone's file stem (`clone`, `clone-NAME`).
    pub clone_stem: Option<String>,
}

impl ConductorPaths {
    /// Resolve paths for `home`, an explicit `--socket`, the config file's `socket.path`,
    /// and an optional clone name (`Some("")` = the default clone).
    pub fn resolve(
        home: &Path,
        explicit_socket: Option<&Path>,
        config_socket: Option<&Path>,
        clone: Option<&str>,
    ) -> ConductorPaths {
        let stem = clone_stem(clone);
        let prefix = stem.clone().unwrap_or_else(|| "conductor".to_string());
        let registry = match &stem {
            None => "registry.db".to_string(),
            Some(stem) => format!("{stem}-registry.db"),
        };
        ConductorPaths {
            home: home.to_path_buf(),
            config_file: home.join("conductor.yaml"),
            socket: resolve_socket_path(explicit_socket, config_socket, clone),
            pid_file: home.join(format!("{prefix}.pid")),
            lock_file: home.join(format!("{prefix}.lock")),
            registry_db: home.join(registry),
            learning_db: home.join("global-learning.db"),
            log_file: home.join("logs").join(format!("{prefix}.log")),
            clone_stem: stem,
        }
    }

    /// Resolve from the environment: `$MOZART_HOME`, `conductor.yaml`'s `socket.path`
    /// (read leniently), an explicit socket and a clone name; without a socket named, the one
    /// a running conductor listens on ([`Self::follow_running`]).
    pub fn discover(
        explicit_socket: Option<&Path>,
        clone: Option<&str>,
    ) -> Result<ConductorPaths, NoHome> {
        let home = mozart_home()?;
        let config_socket = socket_path_from_file(&home.join("conductor.yaml"));
        Ok(
            Self::resolve(&home, explicit_socket, config_socket.as_deref(), clone)
                .follow_running(explicit_socket.is_some()),
        )
    }

    /// Where a running conductor records the socket it listens on (`<home>/conductor.socket`,
    /// `<home>/clone-NAME.socket`): written once it listens, removed when it stops.
    pub fn socket_record(&self) -> PathBuf {
        self.lock_file.with_extension("socket")
    }

    /// The socket the conductor of these paths listens on, when one runs (its instance lock
    /// is held) and recorded it ([`Self::socket_record`]).
    pub fn running_socket(&self) -> Option<PathBuf> {
        if !lock_held(&self.lock_file) {
            return None;
        }
        let text = std::fs::read(self.socket_record()).ok()?;
        if text.is_empty() {
            return None;
        }
        use std::os::unix::ffi::OsStringExt;
        Some(PathBuf::from(std::ffi::OsString::from_vec(text)))
    }

    /// These paths with the socket the running conductor listens on, unless a socket was
    /// named (`--socket`: `explicit`, or `$MOZART_SOCKET`): a `socket.path` changed in the
    /// file (or a conductor started with `-c FILE`) must not hide the running conductor,
    /// which keeps its socket until it is restarted.
    pub fn follow_running(mut self, explicit: bool) -> ConductorPaths {
        let env_named = std::env::var_os(SOCKET_ENV).is_some_and(|v| !v.is_empty());
        if explicit || env_named {
            return self;
        }
        if let Some(socket) = self.running_socket() {
            self.socket = socket;
        }
        self
    }

    /// The log this conductor writes: `log_file` from its config (`configured`), else the
    /// home's `logs/conductor.log`. A clone always writes its own `logs/clone-NAME.log`,
    /// never production's (upstream overrides `log_file` for clones too).
    pub fn log_for(&self, configured: Option<&Path>) -> PathBuf {
        match (&self.clone_stem, configured) {
            (None, Some(file)) => file.to_path_buf(),
            _ => self.log_file.clone(),
        }
    }

    /// "Mozart conductor" or "clone conductor", as upstream's messages say.
    pub fn who(&self) -> &'static str {
        if self.clone_stem.is_some() {
            "clone conductor"
        } else {
            "Mozart conductor"
        }
    }
}

/// Read only `socket.path` from a conductor.yaml, leniently: clients must find the
/// conductor even when the rest of the file is invalid.
pub fn socket_path_from_file(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    // YAML 1.1, as the conductor reads the same file.
    let root = mozart_yaml::parse(&text).ok()??;
    root.get("socket")?.get("path")?.as_str().map(PathBuf::from)
}

/// Is the `flock` on `lock_file` held (by a running conductor)? Probed with a shared,
/// non-blocking lock that is released at once.
fn lock_held(lock_file: &Path) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let Ok(file) = std::fs::File::open(lock_file) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(lock) => {
            drop(lock);
            false
        }
        Err((_, errno)) => errno == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// Environment variable naming the socket; beaten only by an explicit `--socket`.
pub const SOCKET_ENV: &str = "MOZART_SOCKET";

/// File name of the production socket inside the socket directory.
pub const SOCKET_FILE_NAME: &str = "mozart.sock";

/// Longest socket path Linux accepts: `sun_path` is 108 bytes including the trailing NUL.
pub const SUN_PATH_MAX: usize = 107;

/// Sanitize a clone name as upstream does (§20): every character outside `[A-Za-z0-9_-]`
/// becomes `-`, runs of `-` collapse, no trimming, at most 64 characters.
pub fn sanitize_clone_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for ch in name.chars() {
        let ch = if ch.is_ascii_alphanumeric() || ch == '_' || ch == '-' {
            ch
        } else {
            '-'
        };
        if ch == '-' && out.ends_with('-') {
            continue;
        }
        out.push(ch);
    }
    out.chars().take(64).collect()
}

/// The stem that names a clone's files: `None` for production, `clone` for the default
/// clone (`--conductor-clone=`), `clone-<sanitized>` for a named one.
pub fn clone_stem(clone: Option<&str>) -> Option<String> {
    let name = sanitize_clone_name(clone?);
    if name.is_empty() {
        Some("clone".to_string())
    } else {
        Some(format!("clone-{name}"))
    }
}

/// The directory that holds the socket when nothing names it: `$XDG_RUNTIME_DIR/mozart`,
/// else `/tmp/mozart-$UID` (per-user, so two users on one host never collide).
pub fn default_socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("mozart"),
        _ => PathBuf::from(format!("/tmp/mozart-{}", nix::unistd::getuid())),
    }
}

/// Resolve the socket path.
///
/// Precedence: `explicit` (`--socket`) as given; else `$MOZART_SOCKET`, else `config_socket`
/// (`socket.path` from conductor.yaml), else [`default_socket_dir`]`/mozart.sock`. With a
/// clone (and no explicit path) the clone socket `mozart-<stem>.sock` sits next to that base.
pub fn resolve_socket_path(
    explicit: Option<&Path>,
    config_socket: Option<&Path>,
    clone: Option<&str>,
) -> PathBuf {
    if let Some(path) = explicit {
        return path.to_path_buf();
    }
    let base = match std::env::var_os(SOCKET_ENV) {
        Some(env) if !env.is_empty() => PathBuf::from(env),
        _ => match config_socket {
            Some(path) => path.to_path_buf(),
            None => default_socket_dir().join(SOCKET_FILE_NAME),
        },
    };
    match clone_stem(clone) {
        None => base,
        Some(stem) => {
            let dir = base.parent().map(Path::to_path_buf).unwrap_or_default();
            dir.join(format!("mozart-{stem}.sock"))
        }
    }
}

/// Refuse a path that cannot be bound or connected to because it overflows `sun_path`.
pub fn check_socket_path(path: &Path) -> Result<(), IpcError> {
    let len = path.as_os_str().len();
    if len > SUN_PATH_MAX {
        return Err(IpcError::SocketPathTooLong {
            path: path.to_path_buf(),
            len,
            max: SUN_PATH_MAX,
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A workspace's `logs/` is its claimant's; another job's logs are in its own
    /// subdirectory; unclaimed logs (an older Mozart's) are read where they are.
    #[test]
    fn each_job_reads_its_own_sheet_logs() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let logs = ws.join("logs");
        assert_eq!(sheet_logs_dir(ws, "a"), logs, "nothing there yet");
        std::fs::create_dir_all(&logs).unwrap();
        assert_eq!(sheet_logs_dir(ws, "b"), logs, "unclaimed");
        std::fs::create_dir(logs.join("b")).unwrap();
        assert_eq!(
            sheet_logs_dir(ws, "b"),
            logs.join("b"),
            "its own, unclaimed"
        );
        std::fs::write(logs.join(SHEET_LOGS_OWNER), "a\n").unwrap();
        assert_eq!(sheet_logs_owner(&logs).as_deref(), Some("a"));
        assert_eq!(sheet_logs_dir(ws, "a"), logs);
        assert_eq!(sheet_logs_dir(ws, "b"), logs.join("b"));
        assert_eq!(
            sheet_logs_dir(ws, "c"),
            logs.join("c"),
            "claimed by another"
        );
        assert_eq!(
            sheet_output_log(ws, "c", 3, "stderr"),
            logs.join("c/sheet-03.stderr.log")
        );
        assert_eq!(job_sheet_logs_subdir(&logs, ".."), logs.join("_.."));
        assert_eq!(job_sheet_logs_subdir(&logs, "x/y"), logs.join("_x_y"));
    }

    #[test]
    fn clone_names_are_sanitized_like_upstream() {
        assert_eq!(sanitize_clone_name("a b//c"), "a-b-c");
        assert_eq!(sanitize_clone_name("-x-"), "-x-");
        assert_eq!(sanitize_clone_name(&"y".repeat(80)).len(), 64);
        assert_eq!(clone_stem(None), None);
        assert_eq!(clone_stem(Some("")).as_deref(), Some("clone"));
        assert_eq!(clone_stem(Some("t 1")).as_deref(), Some("clone-t-1"));
    }

    #[test]
    fn explicit_socket_wins_and_clones_sit_next_to_the_base() {
        let explicit = Path::new("/run/x.sock");
        assert_eq!(
            resolve_socket_path(Some(explicit), None, Some("a")),
            explicit
        );
        // MOZART_SOCKET may be set in the environment running the tests; only the
        // clone file name is asserted here.
        let clone = resolve_socket_path(None, Some(Path::new("/srv/m/m.sock")), Some("b"));
        assert_eq!(clone.file_name().unwrap(), "mozart-clone-b.sock");
    }

    #[test]
    fn clones_get_their_own_registry_lock_and_log_but_share_learning() {
        let home = Path::new("/h");
        let prod = ConductorPaths::resolve(home, Some(Path::new("/s/m.sock")), None, None);
        let clone = ConductorPaths::resolve(home, None, Some(Path::new("/s/m.sock")), Some("x y"));
        assert_eq!(prod.registry_db, Path::new("/h/registry.db"));
        assert_eq!(prod.lock_file, Path::new("/h/conductor.lock"));
        assert_eq!(prod.log_file, Path::new("/h/logs/conductor.log"));
        assert_eq!(clone.registry_db, Path::new("/h/clone-x-y-registry.db"));
        assert_eq!(clone.lock_file, Path::new("/h/clone-x-y.lock"));
        assert_eq!(clone.learning_db, prod.learning_db);
        assert_eq!(clone.socket.file_name().unwrap(), "mozart-clone-x-y.sock");
        assert_eq!(clone.who(), "clone conductor");
    }

    #[test]
    fn overlong_socket_paths_are_refused_with_the_length() {
        let long = PathBuf::from(format!("/tmp/{}", "s".repeat(120)));
        let err = check_socket_path(&long).unwrap_err();
        assert!(err.to_string().contains("125 bytes"), "{err}");
        assert!(check_socket_path(Path::new("/tmp/m.sock")).is_ok());
    }
}
