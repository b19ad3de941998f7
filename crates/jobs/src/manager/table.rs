//! The job table, owned by the baton task, and the handle everyone else reaches it through.
//!
//! Every job the conductor has loaded lives in one [`JobTable`] inside the
//! [`ConductorHost`], which the baton task owns (architecture invariant 4: one task mutates
//! state, the others send messages). IPC handlers, musicians and hooks read and change it by
//! sending calls through [`Table`]; a call sent before an event runs before the baton handles
//! that event, so a musician's details are in place when its result is persisted.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};

use mozart_baton::HostCaller;

use super::host::ConductorHost;
use super::musician::AttemptDetails;
use super::{JobEntry, ListedRow};

/// Every loaded job, and what the conductor keeps about each between calls.
#[derive(Debug, Default)]
pub(crate) struct JobTable {
    /// Loaded jobs by id.
    pub jobs: HashMap<String, JobEntry>,
    /// Recent observer events per job (the last 200, oldest first) for
    /// `daemon.observer_events` (conductor.md §8.22).
    pub observed: HashMap<String, VecDeque<mozart_baton::ObserverEvent>>,
    /// `job.list`'s registry rows (jobs this conductor has not loaded), read once: only
    /// `job.clear` changes them, and a watcher polling `job.list` would otherwise read the
    /// registry on every poll.
    pub listed_rows: Option<Arc<Vec<ListedRow>>>,
    /// One placement per distinct placement spec, for the conductor's life (its watcher is
    /// shared by every attempt placed alike).
    pub placements: HashMap<String, mozart_backends::Placement>,
    /// The newest pending `job.modify` per job (its claim number).
    pub pending_modify: HashMap<String, u64>,
}

/// What a running job's attempts hand over to the baton task, by sheet. Emptied when the
/// job leaves the baton.
#[derive(Default)]
pub(crate) struct RunState {
    /// Details of each sheet's last attempt, sent by the musician just before it reports;
    /// merged into the checkpoint when the baton persists the transition.
    pub attempt_details: HashMap<u32, AttemptDetails>,
    /// mtimes taken before a sheet's first attempt, for `file_modified` validations.
    pub mtimes: HashMap<u32, mozart_baton::validation::MtimeSnapshot>,
    /// Progress of the attempts running now (read by `job.status` and `logs --follow`).
    pub live: HashMap<u32, Arc<mozart_backends::Progress>>,
    /// Backends built for this job, per instrument: building one compiles its profile's
    /// error patterns, so it happens once per job, not once per attempt (the backend pool of
    /// instruments.md §1.2; per-attempt settings travel in the request).
    pub backends: HashMap<String, Arc<dyn mozart_backends::Backend>>,
    /// Ours: each sheet's own worktree (`isolation.scope: sheet`), once created.
    pub sheet_worktrees: HashMap<u32, crate::isolation::Worktree>,
    /// Sheets parked on a rate limit (baton `waiting`), by the instrument they wait for:
    /// `job.status` shows them waiting with the limit's words and time left.
    pub waiting: HashMap<u32, String>,
}

impl std::fmt::Debug for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunState")
            .field("attempt_details", &self.attempt_details.len())
            .field("live", &self.live.len())
            .field("backends", &self.backends.keys().collect::<Vec<_>>())
            .field("sheet_worktrees", &self.sheet_worktrees.len())
            .finish_non_exhaustive()
    }
}

/// The baton loop is not running (not started yet, or stopped): nobody owns the table.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the conductor's job table is not available (the baton loop is not running)")]
pub(crate) struct Stopped;

/// The way to the job table: calls run on the baton task, in the order they are sent.
#[derive(Default)]
pub(crate) struct Table(OnceLock<HostCaller<ConductorHost>>);

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("connected", &self.0.get().is_some())
            .finish()
    }
}

impl Table {
    /// Connect to the baton task that owns the table (once, when the baton starts).
    pub(crate) fn connect(&self, caller: HostCaller<ConductorHost>) {
        let _ = self.0.set(caller);
    }

    /// Run `f` on the table and wait for its answer.
    pub(crate) async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ConductorHost) -> R + Send + 'static,
    ) -> Result<R, Stopped> {
        self.ask(f)?.await.map_err(|_| Stopped)
    }

    /// Run `f` on the table and wait for its answer, from a thread that may block (never a
    /// runtime worker).
    pub(crate) fn call_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ConductorHost) -> R + Send + 'static,
    ) -> Result<R, Stopped> {
        self.ask(f)?.blocking_recv().map_err(|_| Stopped)
    }

    /// Send `f`; its answer comes on the returned channel.
    pub(crate) fn ask<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ConductorHost) -> R + Send + 'static,
    ) -> Result<tokio::sync::oneshot::Receiver<R>, Stopped> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(move |host| {
            let _ = tx.send(f(host));
        })?;
        Ok(rx)
    }

    /// Run `f` on the table without waiting (it still runs before any event sent later).
    pub(crate) fn tell(&self, f: impl FnOnce(&mut ConductorHost) + Send + 'static) {
        if self.send(f).is_err() {
            tracing::debug!("job table call dropped: the baton loop is not running");
        }
    }

    /// Change the running state of `job_id` (nothing when the job has left the table).
    pub(crate) fn tell_rt(&self, job_id: &str, f: impl FnOnce(&mut RunState) + Send + 'static) {
        let id = job_id.to_string();
        self.tell(move |h| {
            if let Some(e) = h.table.jobs.get_mut(&id) {
                f(&mut e.rt);
            }
        });
    }

    fn send(&self, f: impl FnOnce(&mut ConductorHost) + Send + 'static) -> Result<(), Stopped> {
        self.0
            .get()
            .ok_or(Stopped)?
            .send(Box::new(f))
            .map_err(|_| Stopped)
    }
}
