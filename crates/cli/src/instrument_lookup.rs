//! Where instruments are looked for: in the running conductor's environment — they run with
//! it, and a conductor started by systemd or from another shell has another `PATH` and other
//! variables than this shell — read from `/proc/<pid>/environ` (readable for the user who
//! runs it); else in this shell's. `mozart doctor`, `mozart instruments list/check` and
//! `mozart validate` (V213) all look through [`Lookup`].

use std::path::PathBuf;

use mozart_backends::process::which;
use mozart_backends::{HttpReadiness, InstrumentProfile};

use crate::{Globals, OutputMode};

/// A CLI instrument's program as this shell's `PATH` finds it.
pub(crate) fn binary(profile: &InstrumentProfile) -> Option<PathBuf> {
    profile
        .cli
        .as_ref()
        .and_then(|cli| which(&cli.command.executable))
}

/// The environment instruments are looked up in (see the module's doc).
pub(crate) struct Lookup {
    /// The running conductor's environment (name, value), when it runs and can be read.
    conductor: Option<Environ>,
    /// Why this shell's environment is used instead, when it is.
    fallback: Fallback,
}

/// A process's environment as `/proc/<pid>/environ` holds it: (name, value) bytes.
type Environ = Vec<(Vec<u8>, Vec<u8>)>;

/// Why a lookup uses this shell's environment rather than the running conductor's.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fallback {
    /// It does not: the conductor's environment was read.
    None,
    /// No conductor is running.
    NotRunning,
    /// A conductor holds the lock, but no PID file says which process it is.
    NoPid,
    /// `/proc/<pid>/environ` could not be read (another user's conductor, no `/proc`).
    Unreadable { pid: u32, error: String },
    /// The conductor's environment has no `PATH` (started with none).
    NoPath { pid: u32 },
    /// No conductor holds this Mozart home's lock, but the socket is there: a conductor of
    /// another home answering on it, or one that died and left it.
    NotThisHomes { socket: PathBuf },
}

impl Lookup {
    /// The environment of the conductor running as `pid` (this shell's when it cannot be
    /// read: another user's conductor, no `/proc`).
    pub(crate) fn conductor(pid: Option<u32>) -> Lookup {
        match pid {
            Some(pid) => Lookup::from_environ(pid, std::fs::read(format!("/proc/{pid}/environ"))),
            None => Lookup::shells(Fallback::NotRunning),
        }
    }

    fn shells(fallback: Fallback) -> Lookup {
        Lookup {
            conductor: None,
            fallback,
        }
    }

    /// The lookup of the conductor running as `pid`, given what reading its environment gave.
    fn from_environ(pid: u32, environ: std::io::Result<Vec<u8>>) -> Lookup {
        let environ = match environ {
            Ok(bytes) => bytes,
            Err(e) => {
                return Lookup::shells(Fallback::Unreadable {
                    pid,
                    error: format!("/proc/{pid}/environ: {e}"),
                })
            }
        };
        let vars: Environ = environ
            .split(|b| *b == 0)
            .filter_map(|e| {
                let at = e.iter().position(|b| *b == b'=')?;
                Some((e[..at].to_vec(), e[at + 1..].to_vec()))
            })
            .collect();
        // An environment without PATH (unreadable in full, or a conductor started with
        // none) says nothing about where programs are: this shell's is all there is.
        if !vars.iter().any(|(k, _)| k == b"PATH") {
            return Lookup::shells(Fallback::NoPath { pid });
        }
        Lookup {
            conductor: Some(vars),
            fallback: Fallback::None,
        }
    }

    /// Why this shell's environment is looked in rather than the running conductor's, in
    /// words (`no conductor is running`, `the running conductor's environment could not be
    /// read — … — so this shell's was used`); `None` when it is the conductor's.
    pub(crate) fn why_this_shell(&self) -> Option<String> {
        const USED: &str = "so this shell's was used";
        Some(match &self.fallback {
            Fallback::None => return None,
            Fallback::NotRunning => "no conductor is running".to_string(),
            Fallback::NoPid => format!(
                "a conductor is running, but its PID file does not say which process it is, {USED}"
            ),
            Fallback::Unreadable { error, .. } => format!(
                "the running conductor's environment could not be read — {error} — {USED}"
            ),
            Fallback::NoPath { pid } => format!(
                "the running conductor's environment (PID {pid}) has no PATH, {USED}"
            ),
            Fallback::NotThisHomes { socket } => format!(
                "no conductor of this Mozart home is running, though a socket is at {} — a conductor of another home answering there, or one that died — {USED}",
                socket.display()
            ),
        })
    }

    /// The running conductor's, when running (as `globals` find it: its lock, else a
    /// conductor answering on the socket).
    pub(crate) fn of(globals: &Globals) -> Lookup {
        let state = crate::conductor_client::paths(globals, None)
            .ok()
            .and_then(|paths| {
                crate::conductor_client::conductor_state(&paths, OutputMode::Human).ok()
            });
        Lookup::of_state(state)
    }

    /// The lookup for a conductor found in `state` (`None`: none found).
    pub(crate) fn of_state(state: Option<mozart_conductor::RunState>) -> Lookup {
        state
            .and_then(Lookup::running)
            .unwrap_or_else(|| Lookup::conductor(None))
    }

    /// The lookup of a conductor in `state` when it runs (with no PID known, which process it
    /// is — and so its environment — is not: not "no conductor"); `None` when it is stopped.
    fn running(state: mozart_conductor::RunState) -> Option<Lookup> {
        match state {
            mozart_conductor::RunState::Running { pid: Some(pid) } => {
                Some(Lookup::conductor(Some(pid)))
            }
            mozart_conductor::RunState::Running { pid: None } => {
                Some(Lookup::shells(Fallback::NoPid))
            }
            mozart_conductor::RunState::Stopped { .. } => None,
        }
    }

    /// The running conductor's, found by its lock and PID file alone: no socket round trip,
    /// for `mozart validate`, which must stay fast (docs/performance.md).
    pub(crate) fn by_lock(globals: &Globals) -> Lookup {
        let Ok(paths) = crate::conductor_client::paths(globals, None) else {
            return Lookup::shells(Fallback::NotRunning);
        };
        Lookup::running(mozart_conductor::probe_instance(&paths)).unwrap_or_else(|| {
            // A stat, not a connection: validate stays fast.
            if paths.socket.exists() {
                Lookup::shells(Fallback::NotThisHomes {
                    socket: paths.socket,
                })
            } else {
                Lookup::shells(Fallback::NotRunning)
            }
        })
    }

    /// Whether this is the running conductor's environment.
    pub(crate) fn is_conductor(&self) -> bool {
        self.conductor.is_some()
    }

    fn var(&self, name: &str) -> Option<&[u8]> {
        self.conductor.as_ref().and_then(|vars| {
            vars.iter()
                .find(|(k, _)| k == name.as_bytes())
                .map(|(_, v)| v.as_slice())
        })
    }

    /// The running conductor's `PATH`; `None` when this is this shell's lookup (the programs
    /// are looked for on this process's `PATH`).
    pub(crate) fn path(&self) -> Option<std::ffi::OsString> {
        use std::os::unix::ffi::OsStrExt;
        self.var("PATH")
            .map(|v| std::ffi::OsStr::from_bytes(v).to_os_string())
    }

    /// A CLI instrument's program, found where the instruments run.
    pub(crate) fn binary(&self, profile: &InstrumentProfile) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        if self.conductor.is_none() {
            return binary(profile);
        }
        let program = profile.cli.as_ref()?.command.executable.as_str();
        let path = self.var("PATH").map(std::ffi::OsStr::from_bytes);
        mozart_backends::process::which_on(program, path)
    }

    /// A CLI instrument's program that is there but not executable (where [`Self::binary`]
    /// looks), so "not found" would be untrue.
    pub(crate) fn not_executable(&self, profile: &InstrumentProfile) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let program = profile.cli.as_ref()?.command.executable.as_str();
        match self.conductor {
            None => mozart_backends::process::non_executable_on(
                program,
                std::env::var_os("PATH").as_deref(),
            ),
            Some(_) => {
                let path = self.var("PATH").map(std::ffi::OsStr::from_bytes);
                mozart_backends::process::non_executable_on(program, path)
            }
        }
    }

    /// Where this shell finds a CLI instrument's program that the running conductor's `PATH`
    /// lacks (its sheets would fail to start all the same); `None` when the conductor finds
    /// it, when this shell does not either, or when this is this shell's lookup.
    pub(crate) fn only_in_this_shell(&self, profile: &InstrumentProfile) -> Option<PathBuf> {
        if !self.is_conductor() || self.binary(profile).is_some() {
            return None;
        }
        binary(profile)
    }

    /// An HTTP instrument's readiness in words, saying whose environment lacks its key.
    pub(crate) fn describe(&self, readiness: &HttpReadiness) -> String {
        match readiness {
            HttpReadiness::MissingKey(var) if self.is_conductor() => {
                format!("{var} is not set in the running conductor's environment")
            }
            other => other.describe(),
        }
    }

    /// Whether `name` is set (not empty) where the instruments run.
    pub(crate) fn is_set(&self, name: &str) -> bool {
        match &self.conductor {
            Some(_) => self.var(name).is_some_and(|v| !v.is_empty()),
            None => std::env::var_os(name).is_some_and(|v| !v.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running conductor whose environment cannot be read is not "no conductor".
    #[test]
    fn an_unreadable_environment_is_named_as_such() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let lookup = Lookup::from_environ(4242, Err(denied));
        assert!(!lookup.is_conductor());
        let why = lookup.why_this_shell().unwrap_or_default();
        assert!(
            why.starts_with(
                "the running conductor's environment could not be read — /proc/4242/environ: "
            ),
            "{why}"
        );
        assert!(why.ends_with("so this shell's was used"), "{why}");
        assert!(!why.contains("no conductor is running"), "{why}");

        let lookup = Lookup::from_environ(7, Ok(b"HOME=/root\0LANG=C\0".to_vec()));
        let why = lookup.why_this_shell().unwrap_or_default();
        assert!(why.contains("(PID 7) has no PATH"), "{why}");

        let lookup = Lookup::from_environ(7, Ok(b"PATH=/bin\0".to_vec()));
        assert!(lookup.is_conductor());
        assert_eq!(lookup.why_this_shell(), None);
        assert_eq!(
            Lookup::conductor(None).why_this_shell().as_deref(),
            Some("no conductor is running")
        );
    }
}
