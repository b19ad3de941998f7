//! Paths Mozart creates files in — a score's workspace — followed only through symbolic
//! links the user can trust (docs/security.md "Files"), in the spirit of the kernel's
//! `protected_symlinks`.
//!
//! A workspace path that is another local user's link (`/tmp/shared/ws -> /root/.ssh`) would
//! have Mozart create its files, and the instrument work, in whatever directory of yours they
//! chose. So a link met on the way — the path's own components and those of every link's
//! target — is followed only when it is yours, or root's in a directory nobody else may
//! write. Any other is refused ([`ForeignLink`]): one of another user's, and one not yours in
//! a directory others may write (sticky ones like `/tmp` included).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, Mode, SFlag};

use crate::trust::{current_uid, describe_user};

/// Most links followed on one path (the kernel's limit).
const MAX_LINKS: usize = 40;

/// A symbolic link that is not followed: another user's, or not yours in a directory others
/// may write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is a symbolic link of {}, to {}{}", link.display(), describe_user(*owner), target.display(), shared_text(shared.as_ref()))]
pub struct ForeignLink {
    /// The link, as reached (the real path of its directory, and its name).
    pub link: PathBuf,
    /// Its owner's uid.
    pub owner: u32,
    /// What it points to, as written in it.
    pub target: PathBuf,
    /// For a link of root's (not yours): the directory holding it, and its mode, which lets
    /// others write there.
    pub shared: Option<(PathBuf, u32)>,
}

fn shared_text(shared: Option<&(PathBuf, u32)>) -> String {
    match shared {
        None => String::new(),
        Some((dir, mode)) => {
            let who = if mode & 0o002 != 0 {
                "every other user"
            } else {
                "a group not yours"
            };
            format!(
                ", in {}, which {who} may write (mode {:o})",
                dir.display(),
                mode & 0o7777
            )
        }
    }
}

impl ForeignLink {
    /// The refusal of `path`, given as `what` (`the workspace`, `--workspace`), for going
    /// through this link: what it is, whose, where it leads, and what to do.
    pub fn refusal(&self, what: &str, path: &Path) -> String {
        format!(
            "Refusing {what} {}: {self}. Mozart follows a symbolic link there only when it is \
             yours, or root's in a directory nobody else may write: another user's link would \
             choose where your files go and where the instrument works. Give the real path, \
             not the link, if that is where you mean to work, or use a path of your own.",
            path.display()
        )
    }
}

/// Why a workspace could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// A link on the way is not followed.
    #[error("{0}")]
    Foreign(ForeignLink),
    /// A directory could not be opened or made.
    #[error("{}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// The first link on the way to `path` (made absolute against the current directory) that
/// is not followed, if any. Components past one that does not exist are not looked at (a
/// `..` stepping back out of it resumes the walk), nor is anything past a directory that
/// cannot be read: what cannot be reached cannot lead anywhere either.
pub fn foreign_link(path: &Path) -> Option<ForeignLink> {
    match walk(path, false) {
        Err(CreateError::Foreign(link)) => Some(link),
        _ => None,
    }
}

/// `std::fs::create_dir_all`, following only the links [`foreign_link`] accepts: each
/// component is looked at and opened relative to the directory opened before it, without
/// following a link (a link is judged, then its target walked the same way), and each
/// missing one is made there (mode 0777 less the umask) — so nothing is created through a
/// link of another user's, also one planted after a check.
pub fn create_dir_all(path: &Path) -> Result<(), CreateError> {
    walk(path, true)
}

fn io_error(path: &Path, errno: Errno) -> CreateError {
    CreateError::Io {
        path: path.to_path_buf(),
        source: io::Error::from_raw_os_error(errno as i32),
    }
}

/// The components of `path` still to walk, `..` kept (resolved physically, as the kernel
/// does, after the link before it).
fn parts(path: &Path) -> impl DoubleEndedIterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name.to_os_string()),
        Component::ParentDir => Some(OsString::from("..")),
        _ => None,
    })
}

fn open_root() -> Result<OwnedFd, CreateError> {
    open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_error(Path::new("/"), e))
}

/// Directories are opened `O_PATH`: searching them is enough, as for a path (a home
/// directory of mode 0711 cannot be read, but its workspace can be made).
fn open_dir_at(dir: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn is_type(mode: u32, kind: SFlag) -> bool {
    mode & SFlag::S_IFMT.bits() == kind.bits()
}

/// Whether the link `name` in `dir` (at `dir_path`), owned by `owner`, may be followed.
fn judge(
    dir: &OwnedFd,
    dir_path: &Path,
    name: &OsStr,
    owner: u32,
    target: &Path,
) -> Option<ForeignLink> {
    let me = current_uid();
    if owner == me {
        return None;
    }
    let foreign = |shared| ForeignLink {
        link: dir_path.join(name),
        owner,
        target: target.to_path_buf(),
        shared,
    };
    if owner != 0 {
        return Some(foreign(None));
    }
    // Root's link: followed where nobody else could have replaced it.
    let st = fstat(dir).ok()?;
    let mode = st.st_mode;
    let others_write =
        mode & 0o002 != 0 || (mode & 0o020 != 0 && st.st_gid != nix::unistd::getgid().as_raw());
    others_write.then(|| foreign(Some((dir_path.to_path_buf(), mode))))
}

fn walk(path: &Path, create: bool) -> Result<(), CreateError> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| CreateError::Io {
                path: path.to_path_buf(),
                source,
            })?
            .join(path)
    };
    let mut dir = open_root()?;
    // The real path of `dir`, for messages.
    let mut at = PathBuf::from("/");
    let mut todo: VecDeque<OsString> = parts(&absolute).collect();
    // Links followed, and retries of a component that changed under the walk.
    let mut hops = 0usize;
    // (Checking only) how deep the walk is below a component that does not exist.
    let mut missing = 0usize;
    while let Some(name) = todo.pop_front() {
        if missing > 0 {
            if name == ".." {
                missing -= 1;
            } else {
                missing += 1;
            }
            continue;
        }
        if name == ".." {
            dir = openat(
                &dir,
                "..",
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| io_error(&at, e))?;
            at.pop();
            continue;
        }
        let here = at.join(&name);
        match fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if is_type(st.st_mode, SFlag::S_IFLNK) => {
                let target = match readlinkat(&dir, name.as_os_str()) {
                    Ok(target) => PathBuf::from(target),
                    Err(e) if create => return Err(io_error(&here, e)),
                    Err(_) => return Ok(()),
                };
                if let Some(link) = judge(&dir, &at, &name, st.st_uid, &target) {
                    return Err(CreateError::Foreign(link));
                }
                hops += 1;
                if hops > MAX_LINKS {
                    return if create {
                        Err(io_error(&here, Errno::ELOOP))
                    } else {
                        Ok(())
                    };
                }
                if target.is_absolute() {
                    dir = open_root()?;
                    at = PathBuf::from("/");
                }
                for part in parts(&target).rev() {
                    todo.push_front(part);
                }
            }
            Ok(st) if is_type(st.st_mode, SFlag::S_IFDIR) => match open_dir_at(&dir, &name) {
                Ok(next) => {
                    dir = next;
                    at = here;
                }
                // Swapped since it was looked at: look again.
                Err(Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT) if hops < MAX_LINKS => {
                    hops += 1;
                    todo.push_front(name);
                }
                Err(e) if create => return Err(io_error(&here, e)),
                Err(_) => return Ok(()),
            },
            Ok(_) if create => return Err(io_error(&here, Errno::ENOTDIR)),
            Err(Errno::ENOENT) if create => {
                match mkdirat(&dir, name.as_os_str(), Mode::from_bits_truncate(0o777)) {
                    Ok(()) => {}
                    Err(Errno::EEXIST) if hops < MAX_LINKS => hops += 1,
                    Err(e) => return Err(io_error(&here, e)),
                }
                // Opened (never followed) as what is there now.
                todo.push_front(name);
            }
            Err(e) if create => return Err(io_error(&here, e)),
            // Not there, not a directory, or not readable: nothing further down this way.
            Ok(_) | Err(_) => missing = 1,
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn own_links_are_followed_and_the_directories_made_through_them() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path();
        std::fs::create_dir_all(base.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("abs")).unwrap();
        std::os::unix::fs::symlink("real/sub", base.join("rel")).unwrap();
        std::os::unix::fs::symlink("../../real", base.join("real/sub/up")).unwrap();
        for tail in [
            "abs/x",
            "rel/y",
            "rel/up/sub/z",
            "missing/../abs/w",
            "abs/deep/er",
        ] {
            let path = base.join(tail);
            assert_eq!(foreign_link(&path), None, "{tail}");
            create_dir_all(&path).unwrap_or_else(|e| panic!("{tail}: {e}"));
        }
        for made in [
            "real/x",
            "real/sub/y",
            "real/sub/z",
            "real/w",
            "real/deep/er",
        ] {
            assert!(base.join(made).is_dir(), "{made}");
        }
        // Already there, through a link: nothing to do.
        create_dir_all(&base.join("abs")).unwrap();
        // A file on the way, a link loop: errors, not a loop.
        std::fs::write(base.join("file"), "").unwrap();
        assert!(matches!(
            create_dir_all(&base.join("file/x")),
            Err(CreateError::Io { .. })
        ));
        std::os::unix::fs::symlink(base.join("loop"), base.join("loop")).unwrap();
        assert_eq!(foreign_link(&base.join("loop/x")), None);
        assert!(matches!(
            create_dir_all(&base.join("loop/x")),
            Err(CreateError::Io { .. })
        ));
    }

    /// Root's links in root's directories (`/var/run -> /run`) are followed by everyone;
    /// the rule's refusals need a second account, tested in
    /// `tests/tests/security_workspace_files.rs`.
    #[test]
    fn a_system_link_is_followed() {
        let var_run = Path::new("/var/run");
        if std::fs::symlink_metadata(var_run).is_ok_and(|m| m.file_type().is_symlink()) {
            assert_eq!(foreign_link(&var_run.join("mozart-none/x")), None);
        }
    }

    #[test]
    fn the_refusal_names_the_link_its_owner_its_target_and_the_fix() {
        let link = ForeignLink {
            link: PathBuf::from("/tmp/shared/ws"),
            owner: 0,
            target: PathBuf::from("/root/.ssh"),
            shared: Some((PathBuf::from("/tmp/shared"), 0o1777)),
        };
        let text = link.refusal("the workspace", Path::new("/tmp/shared/ws"));
        assert!(
            text.starts_with(
                "Refusing the workspace /tmp/shared/ws: /tmp/shared/ws is a symbolic link of "
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "to /root/.ssh, in /tmp/shared, which every other user may write (mode 1777)"
            ),
            "{text}"
        );
        assert!(text.ends_with("or use a path of your own."), "{text}");
    }
}
