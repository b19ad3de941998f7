//! The owner's dashboard token (issue 21): a random secret in `<Mozart home>/dashboard.token`
//! that only the dashboard's user can read. A dashboard started without `--token` requires
//! it on every request, so another local account reaching the loopback port gets nothing.
//!
//! The file is made on first use (mode 0600, never through a symlink), and checked on every
//! start: it must be a regular file of this user with no permission for anyone else. One
//! that others could read or write is refused rather than repaired: its token may already
//! be known to them.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::DashboardError;

/// The token file's name in the Mozart home.
pub const TOKEN_FILE: &str = "dashboard.token";
/// Random bytes in a new token (shown as twice as many hex digits).
const TOKEN_BYTES: usize = 32;
/// Shortest token accepted from the file (as for `--token`).
pub const MIN_TOKEN_LEN: usize = 16;

/// The owner's token and where it is kept.
#[derive(Debug, Clone)]
pub struct OwnerToken {
    /// The secret.
    pub token: String,
    /// The file it was read from (or created as).
    pub path: PathBuf,
}

/// Read the token file in `home`, creating it (and `home`, mode 0700) when missing.
pub fn owner_token(home: &Path) -> Result<OwnerToken, DashboardError> {
    let path = home.join(TOKEN_FILE);
    let io = |source: std::io::Error| DashboardError::TokenFileIo {
        path: path.clone(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home)
        .map_err(io)?;
    // Two tries: a missing file is created (or another process creates it first), then read.
    for _ in 0..2 {
        match read(&path) {
            Ok(token) => return Ok(OwnerToken { token, path }),
            Err(DashboardError::TokenFileIo { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                create(home, &path)?;
            }
            Err(e) => return Err(e),
        }
    }
    read(&path).map(|token| OwnerToken { token, path })
}

/// Open without following a symlink, check owner and mode on the open file, read the token.
fn read(path: &Path) -> Result<String, DashboardError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) {
                DashboardError::TokenFileNotRegular {
                    path: path.to_path_buf(),
                }
            } else {
                DashboardError::TokenFileIo {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|source| DashboardError::TokenFileIo {
            path: path.to_path_buf(),
            source,
        })?;
    if !meta.is_file() {
        return Err(DashboardError::TokenFileNotRegular {
            path: path.to_path_buf(),
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(DashboardError::TokenFileNotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            you: me,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o066 != 0 {
        return Err(DashboardError::TokenFileExposed {
            path: path.to_path_buf(),
            mode,
        });
    }
    if mode != 0o600 {
        // Only the owner's own bits (or execute bits) differ: nothing leaked, set it right.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|source| DashboardError::TokenFileIo {
                path: path.to_path_buf(),
                source,
            })?;
        tracing::info!(path = %path.display(), old_mode = format!("{mode:o}"), "dashboard token file mode set to 600");
    }
    let mut text = String::new();
    file.take(4096)
        .read_to_string(&mut text)
        .map_err(|source| DashboardError::TokenFileIo {
            path: path.to_path_buf(),
            source,
        })?;
    let token = text.trim();
    let bad = |why: &str| DashboardError::TokenFileBad {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    if token.len() < MIN_TOKEN_LEN {
        return Err(bad(&format!(
            "it holds {} characters, fewer than {MIN_TOKEN_LEN}",
            token.len()
        )));
    }
    if !token.bytes().all(url_safe) {
        return Err(bad(
            "it holds characters other than letters, digits, '-', '_', '.' and '~'",
        ));
    }
    Ok(token.to_string())
}

/// Whether a token byte can go into a URL as it is.
pub fn url_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// Write a new token to a private scratch file, then link it into place: a reader never
/// sees a half-written file, and a file another process made first wins.
fn create(home: &Path, path: &Path) -> Result<(), DashboardError> {
    let io = |source: std::io::Error| DashboardError::TokenFileIo {
        path: path.to_path_buf(),
        source,
    };
    let token = random_hex(TOKEN_BYTES).map_err(DashboardError::NoRandom)?;
    let scratch = home.join(format!(".{TOKEN_FILE}.{}.new", std::process::id()));
    let _ = std::fs::remove_file(&scratch);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&scratch)?;
        f.write_all(format!("{token}\n").as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&scratch);
        return Err(io(e));
    }
    let linked = std::fs::hard_link(&scratch, path);
    let _ = std::fs::remove_file(&scratch);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// `n` bytes from the kernel's random source, as hex. No fallback: a guessable secret
/// would be worse than none.
pub fn random_hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn made_once_private_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let first = owner_token(&home).unwrap();
        assert_eq!(first.path, home.join(TOKEN_FILE));
        assert_eq!(first.token.len(), TOKEN_BYTES * 2);
        assert_eq!(mode_of(&first.path), 0o600);
        assert_eq!(mode_of(&home), 0o700);
        assert_eq!(owner_token(&home).unwrap().token, first.token);
        // No scratch file is left behind.
        let names: Vec<_> = std::fs::read_dir(&home).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_file_others_can_read_or_write_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let t = owner_token(dir.path()).unwrap();
        for mode in [0o644, 0o620, 0o604] {
            std::fs::set_permissions(&t.path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = owner_token(dir.path()).unwrap_err().to_string();
            assert!(e.contains("other users can read or change it"), "{e}");
            assert!(e.contains(&t.path.display().to_string()), "{e}");
            assert_eq!(mode_of(&t.path), mode, "refused, not silently changed");
        }
        // Only the owner's bits differ: set right.
        std::fs::set_permissions(&t.path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(owner_token(dir.path()).unwrap().token, t.token);
        assert_eq!(mode_of(&t.path), 0o600);
    }

    #[test]
    fn symlinks_and_junk_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("elsewhere");
        std::fs::write(&other, "0123456789abcdef0123\n").unwrap();
        std::os::unix::fs::symlink(&other, dir.path().join(TOKEN_FILE)).unwrap();
        let e = owner_token(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_file(dir.path().join(TOKEN_FILE)).unwrap();
        let p = dir.path().join(TOKEN_FILE);
        std::fs::write(&p, "short\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = owner_token(dir.path()).unwrap_err().to_string();
        assert!(e.contains("fewer than 16"), "{e}");
        std::fs::write(&p, "0123456789abcdef<script>\n").unwrap();
        let e = owner_token(dir.path()).unwrap_err().to_string();
        assert!(e.contains("characters other than"), "{e}");
    }

    #[test]
    fn another_users_file_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: needs root to give the file away");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let t = owner_token(dir.path()).unwrap();
        std::os::unix::fs::chown(&t.path, Some(65534), None).unwrap();
        let e = owner_token(dir.path()).unwrap_err().to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
    }
}
