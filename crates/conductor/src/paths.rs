//! Where the conductor keeps its files (architecture.md "Paths"; clones per conductor.md §20).

use std::path::{Path, PathBuf};

use crate::ConductorError;

/// Environment variable naming the Mozart home (default `~/.mozart`).
pub const HOME_ENV: &str = "MOZART_HOME";

/// The Mozart home: `$MOZART_HOME`, else `$HOME/.mozart`.
pub fn mozart_home() -> Result<PathBuf, ConductorError> {
    if let Some(home) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|home| PathBuf::from(home).join(".mozart"))
        .ok_or(ConductorError::NoHome)
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
        let stem = mozart_ipc::paths::clone_stem(clone);
        let prefix = stem.clone().unwrap_or_else(|| "conductor".to_string());
        let registry = match &stem {
            None => "registry.db".to_string(),
            Some(stem) => format!("{stem}-registry.db"),
        };
        ConductorPaths {
            home: home.to_path_buf(),
            config_file: home.join("conductor.yaml"),
            socket: mozart_ipc::paths::resolve_socket_path(explicit_socket, config_socket, clone),
            pid_file: home.join(format!("{prefix}.pid")),
            lock_file: home.join(format!("{prefix}.lock")),
            registry_db: home.join(registry),
            learning_db: home.join("global-learning.db"),
            log_file: home.join("logs").join(format!("{prefix}.log")),
            clone_stem: stem,
        }
    }

    /// Resolve from the environment: `$MOZART_HOME`, `conductor.yaml`'s `socket.path`
    /// (read leniently), an explicit socket and a clone name.
    pub fn discover(
        explicit_socket: Option<&Path>,
        clone: Option<&str>,
    ) -> Result<ConductorPaths, ConductorError> {
        let home = mozart_home()?;
        let config_socket = crate::config::socket_path_from_file(&home.join("conductor.yaml"));
        Ok(Self::resolve(
            &home,
            explicit_socket,
            config_socket.as_deref(),
            clone,
        ))
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
}
