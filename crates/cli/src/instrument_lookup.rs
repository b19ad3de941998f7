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
}

/// A process's environment as `/proc/<pid>/environ` holds it: (name, value) bytes.
type Environ = Vec<(Vec<u8>, Vec<u8>)>;

impl Lookup {
    /// The environment of the conductor running as `pid` (this shell's when it cannot be
    /// read: another user's conductor, no `/proc`).
    pub(crate) fn conductor(pid: Option<u32>) -> Lookup {
        let read = |pid: u32| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let vars = environ
                .split(|b| *b == 0)
                .filter_map(|e| {
                    let at = e.iter().position(|b| *b == b'=')?;
                    Some((e[..at].to_vec(), e[at + 1..].to_vec()))
                })
                .collect();
            Some(vars)
        };
        Lookup {
            // An environment without PATH (unreadable in full, or a conductor started with
            // none) says nothing about where programs are: this shell's is all there is.
            conductor: pid
                .and_then(read)
                .filter(|vars: &Environ| vars.iter().any(|(k, _)| k == b"PATH")),
        }
    }

    /// The running conductor's, when running (as `globals` find it: its lock, else a
    /// conductor answering on the socket).
    pub(crate) fn of(globals: &Globals) -> Lookup {
        let pid = crate::conductor_client::paths(globals, None)
            .ok()
            .and_then(|paths| {
                crate::conductor_client::conductor_state(&paths, OutputMode::Human).ok()
            })
            .and_then(running_pid);
        Lookup::conductor(pid)
    }

    /// The running conductor's, found by its lock and PID file alone: no socket round trip,
    /// for `mozart validate`, which must stay fast (docs/performance.md).
    pub(crate) fn by_lock(globals: &Globals) -> Lookup {
        let pid = crate::conductor_client::paths(globals, None)
            .ok()
            .and_then(|paths| running_pid(mozart_conductor::probe_instance(&paths)));
        Lookup::conductor(pid)
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

fn running_pid(state: mozart_conductor::RunState) -> Option<u32> {
    match state {
        mozart_conductor::RunState::Running { pid } => pid,
        mozart_conductor::RunState::Stopped { .. } => None,
    }
}
