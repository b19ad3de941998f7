//! Where a sheet's instrument process runs (docs/design/distributed.md): the score's
//! `placement`, else the instrument profile's, else `local`; and the sheet's checkpoint as
//! the journal of its remote attempt (the Slurm job id is durable before the job runs).

use std::collections::HashMap;
use std::sync::Arc;

use mozart_backends::placement::{Placement, PlacementSpec, RemoteAttempt, RemoteJournal};
use mozart_state::RemoteAttemptRef;

use super::{lock, JobRun, Shared};

/// Instruments the conductor calls over HTTP itself: there is no process to place.
const HTTP_NATIVE: &[&str] = &["anthropic_api", "ollama"];

/// The placement of `instrument`'s attempts in `run`.
pub(crate) fn placement_for(
    shared: &Shared,
    run: &JobRun,
    instrument: &str,
) -> Result<Placement, String> {
    let profile = shared.instruments.get(instrument);
    let spec = match (
        &run.config.placement,
        profile.and_then(|p| p.placement.as_ref()),
    ) {
        (None, None) => return Ok(Placement::Local),
        (Some(score), _) => serde_json::to_value(score)
            .and_then(serde_json::from_value::<PlacementSpec>)
            .map_err(|e| format!("placement: {e}"))?,
        (None, Some(from_profile)) => from_profile.clone(),
    };
    if spec.kind == mozart_backends::PlacementKind::Local {
        return Ok(Placement::Local);
    }
    let http = HTTP_NATIVE.contains(&instrument)
        || profile.is_some_and(|p| p.kind == mozart_backends::InstrumentKind::Http);
    if http {
        return Err(format!(
            "placement '{}' cannot run instrument '{instrument}': it is called over HTTP from the conductor, there is no process to place (use a CLI instrument, or placement: local)",
            spec.kind.as_str()
        ));
    }
    // One placement per distinct spec for the conductor's life: attempts sharing it share
    // its watcher (one `squeue` per poll interval for all of them, not one per attempt).
    static CACHE: std::sync::LazyLock<std::sync::Mutex<HashMap<String, Placement>>> =
        std::sync::LazyLock::new(Default::default);
    let key = serde_json::to_string(&spec).map_err(|e| format!("placement: {e}"))?;
    let mut cache = lock(&CACHE);
    if let Some(p) = cache.get(&key) {
        return Ok(p.clone());
    }
    let placement = Placement::from_spec(&spec).map_err(|e| format!("placement.{e}"))?;
    cache.insert(key, placement.clone());
    Ok(placement)
}

/// The sheet's checkpoint as the record of its remote attempt.
#[derive(Debug)]
pub(crate) struct SheetJournal {
    pub shared: Arc<Shared>,
    pub job_id: String,
    pub sheet_num: u32,
    pub attempt_number: u32,
}

impl SheetJournal {
    /// Change the sheet's `remote_attempt` in the live checkpoint and write the sheet's row
    /// (the same lock order as the baton's persistence: jobs, then registry).
    fn update(
        &self,
        change: impl FnOnce(&mut Option<RemoteAttemptRef>) -> bool,
    ) -> Result<(), String> {
        let mut jobs = lock(&self.shared.jobs);
        let sheet = jobs
            .get_mut(&self.job_id)
            .and_then(|e| e.live.as_mut())
            .and_then(|live| live.sheets.get_mut(&self.sheet_num))
            .ok_or_else(|| format!("job '{}' is no longer loaded", self.job_id))?;
        if !change(&mut sheet.remote_attempt) {
            return Ok(());
        }
        let registry = lock(&self.shared.registry);
        registry
            .save_sheet(&self.job_id, sheet)
            .map_err(|e| e.to_string())
    }
}

impl RemoteJournal for SheetJournal {
    fn recorded(&self) -> Option<RemoteAttempt> {
        let jobs = lock(&self.shared.jobs);
        let r = jobs
            .get(&self.job_id)?
            .live
            .as_ref()?
            .sheets
            .get(&self.sheet_num)?
            .remote_attempt
            .clone()?;
        Some(RemoteAttempt {
            placement: r.placement,
            remote_id: r.remote_id,
            dir: r.dir.into(),
            submitted_at: r.submitted_at,
        })
    }

    fn record(&self, attempt: &RemoteAttempt) -> Result<(), String> {
        let record = RemoteAttemptRef {
            placement: attempt.placement.clone(),
            remote_id: attempt.remote_id.clone(),
            dir: attempt.dir.to_string_lossy().into_owned(),
            submitted_at: attempt.submitted_at,
            attempt_number: self.attempt_number,
        };
        self.update(|slot| {
            *slot = Some(record);
            true
        })
    }

    fn forget(&self, remote_id: &str) {
        let result = self.update(|slot| {
            let ours = slot.as_ref().is_some_and(|r| r.remote_id == remote_id);
            if ours {
                *slot = None;
            }
            ours
        });
        if let Err(e) = result {
            tracing::debug!(job_id = %self.job_id, sheet = self.sheet_num, error = %e, "remote attempt not forgotten");
        }
    }
}
