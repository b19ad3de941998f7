//! Other local accounts for the adversarial tests (issue 21): a hostile second user and an
//! unprivileged owner, created by `tests/security/setup.sh` (CI runs it as root).

use std::process::Command;

/// The hostile second user on the same machine.
pub const INTRUDER: &str = "mozart-intruder";
/// An unprivileged owner, for cases where the owner must not be root.
pub const VICTIM: &str = "mozart-victim";

/// A local account a test runs commands as.
#[derive(Debug, Clone)]
pub struct LocalUser {
    /// The account's name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its home directory.
    pub home: std::path::PathBuf,
}

impl LocalUser {
    /// A command run as this user through `setpriv` (its uid and gid, no supplementary
    /// groups; `HOME` and `USER` its own; no `XDG_RUNTIME_DIR`, `MOZART_SOCKET` or
    /// `MOZART_HOME`). The test process must be root.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--clear-groups")
            .arg("--")
            .arg(program)
            .env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("MOZART_SOCKET")
            .env_remove("MOZART_HOME")
            .current_dir(&self.home);
        cmd
    }
}

/// Whether this run is on CI, where a missing tool or account fails the test instead of
/// skipping it.
pub fn on_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Skip (outside CI) or fail (on CI) a test whose prerequisite is missing.
///
/// A skip is also appended to `skipped-tests.log` next to the test binaries, which `tests/run`
/// counts at the end of the run (cargo itself reports a skipped test as "ok").
///
/// # Panics
/// On CI, always: a test that did not run must not count as passed there.
pub fn missing(what: &str, fix: &str) {
    assert!(!on_ci(), "{what} is missing on CI: {fix}");
    eprintln!("SKIPPED: {what} ({fix})");
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_string();
    let line = format!("{test}: {what} ({fix})\n");
    // One write of one short line with O_APPEND: lines from parallel tests do not interleave.
    let log = crate::bin_dir().join(SKIP_LOG);
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = std::io::Write::write_all(&mut file, line.as_bytes());
    }
}

/// The file, next to the test binaries, that lists this run's skipped tests.
pub const SKIP_LOG: &str = "skipped-tests.log";

/// The account `name`, when this process is root and the account exists; otherwise `None`
/// after [`missing`] (which fails the test on CI).
pub fn local_user(name: &str) -> Option<LocalUser> {
    if !nix::unistd::geteuid().is_root() {
        missing(
            &format!("root, to act as the local user {name}"),
            "run the adversarial tests as root",
        );
        return None;
    }
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Some(LocalUser {
            name: name.to_string(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: user.dir,
        }),
        _ => {
            missing(
                &format!("the local user {name}"),
                "run tests/security/setup.sh as root",
            );
            None
        }
    }
}

/// The hostile second user ([`INTRUDER`]).
pub fn intruder() -> Option<LocalUser> {
    local_user(INTRUDER)
}

/// The unprivileged owner ([`VICTIM`]).
pub fn victim() -> Option<LocalUser> {
    local_user(VICTIM)
}
