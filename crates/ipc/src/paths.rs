//! Where the conductor's socket lives (architecture.md "Paths", conductor.md §20 clones).

use std::path::{Path, PathBuf};

use crate::IpcError;

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
    fn overlong_socket_paths_are_refused_with_the_length() {
        let long = PathBuf::from(format!("/tmp/{}", "s".repeat(120)));
        let err = check_socket_path(&long).unwrap_err();
        assert!(err.to_string().contains("125 bytes"), "{err}");
        assert!(check_socket_path(Path::new("/tmp/m.sock")).is_ok());
    }
}
