//! Whom a client trusts with its requests (architecture invariant 6, issue 21).
//!
//! A request carries score paths, workspaces and prompts, and its answer is believed. Before
//! connecting, a client checks that the socket's directory and the socket file belong to it
//! (or to root) and that nobody else can replace the socket; after connecting, that the
//! process listening runs as the same user (or root), through `SO_PEERCRED`. Otherwise it
//! sends nothing and says who owns what and what to do ([`IpcError::Untrusted`]).
//!
//! Root is trusted everywhere (it can read and signal anything anyway). A root client also
//! accepts a socket that belongs, with its directory, to one other user, outside root's own
//! default directory: that is root driving that user's conductor on purpose
//! (`MOZART_SOCKET=/tmp/mozart-1000/mozart.sock mozart status`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::IpcError;

pub use crate::error::TrustSubject;

/// A user as messages name them: `mozart-intruder (uid 1001)`, or `uid 1001` when the
/// account has no name.
pub fn describe_user(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// The user this process runs as, addressed: `you (alice, uid 1000)`.
pub fn describe_you(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("you ({name}, uid {uid})"),
        None => format!("you (uid {uid})"),
    }
}

/// The account name of `uid`, if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// The user this process acts as (its effective uid: what owns the files it creates and
/// what `SO_PEERCRED` reports to the other end).
pub fn current_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The directory a socket path lives in (`.` for a bare file name).
pub fn socket_dir(socket: &Path) -> PathBuf {
    match socket.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Group or others may write (mode bits 022).
pub fn writable_by_others(mode: u32) -> bool {
    mode & 0o022 != 0
}

/// The sticky bit: in such a directory (like `/tmp`) nobody can remove or rename another
/// user's entry, so a socket there stays the one its owner bound.
pub fn sticky(mode: u32) -> bool {
    mode & 0o1000 != 0
}

/// Who group/others are, for a mode with [`writable_by_others`].
fn who_may_write(mode: u32) -> &'static str {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "its group and every other user",
        (true, false) => "its group",
        _ => "every other user",
    }
}

/// The owners one client accepts for one socket, decided before connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketTrust {
    socket: PathBuf,
    me: u32,
    /// For a root client: the one other user whose private directory holds the socket.
    foreign: Option<u32>,
}

/// What to do when the way to the conductor cannot be trusted: a socket of one's own, the
/// example in the actual Mozart home (`$MOZART_HOME` when set, not a fixed `~/.mozart`).
pub fn private_socket_fix() -> String {
    private_socket_fix_in(crate::paths::mozart_home().ok().as_deref())
}

fn private_socket_fix_in(home: Option<&Path>) -> String {
    let example = match home {
        Some(home) => home.join("mozart.sock").display().to_string(),
        None => "$HOME/.mozart/mozart.sock".to_string(),
    };
    format!("or set MOZART_SOCKET to a socket in a directory only you can write (e.g. MOZART_SOCKET={example}, for every mozart command you run)")
}

impl SocketTrust {
    /// True if `uid` may own the directory, the socket or the process behind it.
    pub fn trusts(&self, uid: u32) -> bool {
        uid == self.me || uid == 0 || Some(uid) == self.foreign
    }

    /// "you (mozart-victim, uid 1002) or root", the owners this client accepts.
    fn accepted(&self) -> String {
        let me = if self.me == 0 {
            describe_you(0)
        } else {
            format!("{} or root", describe_you(self.me))
        };
        match self.foreign {
            Some(uid) => format!("{me} or {}", describe_user(uid)),
            None => me,
        }
    }

    /// After connecting: the listening process must run as a trusted user. `peer` is its
    /// uid and pid (`None` when the kernel would not say).
    pub fn check_peer(&self, peer: Option<(u32, Option<i32>)>) -> Result<(), IpcError> {
        let socket = self.socket.display();
        if matches!(peer, Some((uid, _)) if self.trusts(uid)) {
            return Ok(());
        }
        let fix = private_socket_fix();
        match peer {
            Some((uid, _)) if self.trusts(uid) => Ok(()),
            Some((uid, pid)) => {
                let pid = pid.map(|p| format!(" (PID {p})")).unwrap_or_default();
                Err(IpcError::Untrusted {
                    socket: self.socket.clone(),
                    subject: TrustSubject::Peer,
                    owner: Some(uid),
                    problem: format!(
                        "Refusing the conductor socket {socket}: the process listening on it{pid} runs as {}, not as {}; it may be another user's program posing as your conductor, so nothing was sent to it.",
                        describe_user(uid),
                        self.accepted()
                    ),
                    fix: format!(
                        "Have that process stopped and {socket} removed ({} or root can), {fix}.",
                        user_name(uid).unwrap_or_else(|| format!("uid {uid}"))
                    ),
                })
            }
            None => Err(IpcError::Untrusted {
                socket: self.socket.clone(),
                subject: TrustSubject::Peer,
                owner: None,
                problem: format!(
                    "Refusing the conductor socket {socket}: the kernel would not tell which user the process listening on it runs as, so nothing was sent to it."
                ),
                fix: format!("Start your conductor again (mozart start), {fix}."),
            }),
        }
    }
}

/// Before connecting: check the socket's directory and the socket file.
///
/// The directory must belong to this user or root (a root client also accepts one other
/// user's private directory outside its own default directory) and be writable by nobody
/// else, unless it is sticky like `/tmp`. The socket file must belong to a user trusted the
/// same way. A missing directory or socket is [`IpcError::NotRunning`]; anything untrusted
/// is [`IpcError::Untrusted`].
pub fn check_socket(socket: &Path) -> Result<SocketTrust, IpcError> {
    let dir = socket_dir(socket);
    let fix = private_socket_fix();
    let not_running = |reason: String| IpcError::NotRunning {
        socket: socket.to_path_buf(),
        reason,
    };
    let me = current_uid();
    let dir_meta = match std::fs::metadata(&dir) {
        Ok(meta) => meta,
        Err(err) => {
            return Err(not_running(format!(
                "socket directory {}: {err}",
                dir.display()
            )))
        }
    };
    let mode = dir_meta.mode();
    let loose = writable_by_others(mode);
    let is_default = dir == crate::paths::default_socket_dir();
    let owner = dir_meta.uid();
    let trust = SocketTrust {
        socket: socket.to_path_buf(),
        me,
        foreign: (me == 0 && owner != 0 && !is_default && !loose).then_some(owner),
    };
    let shown = socket.display();
    let dir_shown = dir.display();
    if !trust.trusts(owner) {
        let owner_name = user_name(owner).unwrap_or_else(|| format!("uid {owner}"));
        return Err(IpcError::Untrusted {
            socket: socket.to_path_buf(),
            subject: TrustSubject::Directory,
            owner: Some(owner),
            problem: format!(
                "Refusing the conductor socket {shown}: its directory {dir_shown} belongs to {}, not to {}; whatever listens there may be another user's program posing as your conductor, so nothing was sent to it.",
                describe_user(owner),
                trust.accepted()
            ),
            fix: format!(
                "Have {dir_shown} removed ({owner_name} or root can), {fix}."
            ),
        });
    }
    if loose && !sticky(mode) {
        return Err(IpcError::Untrusted {
            socket: socket.to_path_buf(),
            subject: TrustSubject::Directory,
            owner: Some(owner),
            problem: format!(
                "Refusing the conductor socket {shown}: its directory {dir_shown} (owner {}) can be written by {} (mode {:04o}), so another user could have replaced the socket; nothing was sent to it.",
                describe_user(owner),
                who_may_write(mode),
                mode & 0o7777
            ),
            fix: format!(
                "Run chmod 700 {dir_shown} as its owner (mozart start does this for its own directory), {fix}."
            ),
        });
    }
    let file_meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_running("no socket file".into()))
        }
        Err(err) => return Err(not_running(err.to_string())),
    };
    // A symlink is judged by its own owner and by its target's.
    let mut owners = vec![file_meta.uid()];
    if file_meta.file_type().is_symlink() {
        match std::fs::metadata(socket) {
            Ok(target) => owners.push(target.uid()),
            Err(err) => return Err(not_running(err.to_string())),
        }
    }
    if let Some(&owner) = owners.iter().find(|uid| !trust.trusts(**uid)) {
        let owner_name = user_name(owner).unwrap_or_else(|| format!("uid {owner}"));
        return Err(IpcError::Untrusted {
            socket: socket.to_path_buf(),
            subject: TrustSubject::SocketFile,
            owner: Some(owner),
            problem: format!(
                "Refusing the conductor socket {shown}: the socket file belongs to {}, not to {}; it may be another user's program posing as your conductor, so nothing was sent to it.",
                describe_user(owner),
                trust.accepted()
            ),
            fix: format!(
                "Have {shown} removed ({owner_name} or root can) and start your conductor again, {fix}."
            ),
        });
    }
    Ok(trust)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_private_socket_example_is_in_the_actual_mozart_home() {
        let fix = private_socket_fix_in(Some(Path::new("/srv/mz")));
        assert!(fix.contains("MOZART_SOCKET=/srv/mz/mozart.sock,"), "{fix}");
        assert!(
            !fix.contains("~/.mozart") && !fix.contains("$HOME/.mozart"),
            "{fix}"
        );
        let fix = private_socket_fix_in(None);
        assert!(
            fix.contains("MOZART_SOCKET=$HOME/.mozart/mozart.sock,"),
            "{fix}"
        );
    }

    #[test]
    fn a_private_directory_and_own_socket_are_trusted_and_others_peers_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("m.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let trust = check_socket(&socket).unwrap();
        let me = current_uid();
        assert!(trust.check_peer(Some((me, Some(1)))).is_ok());
        assert!(trust.check_peer(Some((0, None))).is_ok());
        if me != 0 {
            let err = trust.check_peer(Some((me + 1, Some(42)))).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("(PID 42)") && text.contains("nothing was sent"),
                "{text}"
            );
        }
        assert!(trust.check_peer(None).is_err());
    }

    #[test]
    fn a_directory_others_can_write_is_refused_unless_sticky() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("m.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_socket(&socket).unwrap_err();
        assert!(
            matches!(
                err,
                IpcError::Untrusted {
                    subject: TrustSubject::Directory,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("mode 0777"), "{err}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check_socket(&socket).is_ok());
    }

    #[test]
    fn a_missing_directory_or_socket_is_not_running() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_socket(&dir.path().join("m.sock"))
            .unwrap_err()
            .is_not_running());
        assert!(check_socket(&dir.path().join("nope/m.sock"))
            .unwrap_err()
            .is_not_running());
    }
}
