//! Where a sheet's instrument process runs (docs/design/distributed.md): the score's
//! `placement`, else the instrument profile's, else `local`; and the sheet's checkpoint as
//! the journal of its remote attempt (the Slurm job id is durable before the job runs).

use std::collections::HashMap;
use std::sync::Arc;

use mozart_backends::placement::{Placement, RemoteAttempt, RemoteJournal};
use mozart_state::RemoteAttemptRef;

use super::table::{Fact, RemoteChange, Stopped};
use super::{JobRun, Shared};

/// Instruments the conductor calls over HTTP itself: there is no process to place.
const HTTP_NATIVE: &[&str] = &["anthropic_api", "ollama"];

/// The placement of sheet `sheet_num`'s attempts on `instrument` in `run`: the layers
/// merged field by field, most specific winning — the instrument profile's `placement`,
/// the score's, the sheet's movement's (`movements.<n>.placement`), the sheet's own
/// (`sheet.per_sheet_placement.<n>`); `local` when none is given. `known` holds one
/// placement per distinct merged spec for the conductor's life (the job table's):
/// attempts sharing it share its watcher (one `squeue` per poll interval for all of them,
/// not one per attempt).
pub(crate) fn placement_for(
    known: &mut HashMap<String, Placement>,
    instruments: &mozart_backends::InstrumentRegistry,
    run: &JobRun,
    sheet_num: u32,
    instrument: &str,
) -> Result<Placement, String> {
    let profile = instruments.get(instrument);
    let to_value = |v: &dyn erased::Ser| v.value().map_err(|e| format!("placement: {e}"));
    let mut layers = Vec::new();
    if let Some(p) = profile.and_then(|p| p.placement.as_ref()) {
        layers.push(to_value(p)?);
    }
    if let Some(p) = &run.config.placement {
        layers.push(to_value(p)?);
    }
    let movement = run.sheet(sheet_num).map(|s| i64::from(s.movement));
    if let Some(p) = movement
        .and_then(|m| run.config.movements.get(&m))
        .and_then(|m| m.placement.as_ref())
    {
        layers.push(to_value(p)?);
    }
    if let Some(p) = run
        .config
        .sheet
        .per_sheet_placement
        .get(&i64::from(sheet_num))
    {
        layers.push(to_value(p)?);
    }
    if layers.is_empty() {
        return Ok(Placement::Local);
    }
    let spec =
        mozart_backends::placement::merge_layers(&layers).map_err(|e| format!("placement: {e}"))?;
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
    let key = serde_json::to_string(&spec).map_err(|e| format!("placement: {e}"))?;
    if let Some(p) = known.get(&key) {
        return Ok(p.clone());
    }
    let placement = Placement::from_spec(&spec).map_err(|e| format!("placement.{e}"))?;
    known.insert(key, placement.clone());
    Ok(placement)
}

/// The sheet's checkpoint as the record of its remote attempt.
#[derive(Debug)]
pub(crate) struct SheetJournal {
    shared: Arc<Shared>,
    job_id: String,
    sheet_num: u32,
    attempt_number: u32,
    /// The remote attempt the checkpoint held when the attempt was dispatched.
    recorded: Option<RemoteAttemptRef>,
}

impl SheetJournal {
    pub(crate) fn new(
        shared: Arc<Shared>,
        job_id: &str,
        sheet_num: u32,
        attempt_number: u32,
        recorded: Option<RemoteAttemptRef>,
    ) -> SheetJournal {
        SheetJournal {
            shared,
            job_id: job_id.to_string(),
            sheet_num,
            attempt_number,
            recorded,
        }
    }
}

impl RemoteJournal for SheetJournal {
    fn recorded(&self) -> Option<RemoteAttempt> {
        let r = self.recorded.clone()?;
        Some(RemoteAttempt {
            placement: r.placement,
            remote_id: r.remote_id,
            name: r.job_name,
            dir: r.dir.into(),
            submitted_at: r.submitted_at,
        })
    }

    /// Called from a blocking thread: waits until the record is durable.
    fn record(&self, attempt: &RemoteAttempt) -> Result<(), String> {
        let record = RemoteAttemptRef {
            placement: attempt.placement.clone(),
            remote_id: attempt.remote_id.clone(),
            dir: attempt.dir.to_string_lossy().into_owned(),
            submitted_at: attempt.submitted_at,
            attempt_number: self.attempt_number,
            job_name: attempt.name.clone(),
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.shared.table.tell(Fact::RemoteAttempt {
            job_id: self.job_id.clone(),
            sheet_num: self.sheet_num,
            change: RemoteChange::Record(record),
            reply: Some(reply),
        });
        // No answer: nobody owns the table (the fact was dropped).
        answer.blocking_recv().map_err(|_| Stopped.to_string())?
    }

    fn forget(&self, remote_id: &str) {
        self.shared.table.tell(Fact::RemoteAttempt {
            job_id: self.job_id.clone(),
            sheet_num: self.sheet_num,
            change: RemoteChange::Forget(remote_id.to_string()),
            reply: None,
        });
    }
}

/// Serialize any placement layer (the profile's spec, a score's config) to JSON.
mod erased {
    /// A placement layer that serializes to a JSON object of the fields it sets.
    pub(crate) trait Ser {
        /// The layer as JSON.
        fn value(&self) -> Result<serde_json::Value, serde_json::Error>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn value(&self) -> Result<serde_json::Value, serde_json::Error> {
            serde_json::to_value(self)
        }
    }
}
