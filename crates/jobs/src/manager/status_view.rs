//! `job.status` of a job that is not loaded, with a sheet query (issue 24): answered from
//! the registry without building every sheet. The summary's facts of every sheet are read
//! from columns (and cached per job while its sheet rows do not change); only the sheets
//! the answer shows are loaded whole.

use std::sync::{Arc, Mutex};

use mozart_ipc::checkpoint::JobCheckpoint;
use mozart_ipc::sheet_view::{SheetFacts, SheetQuery, ViewBuilder};
use mozart_state::{CheckpointState, JobRecord, Registry, StateError, StoredSheetFacts};

use crate::wire;

/// Jobs whose sheet facts are kept (the largest are ~10 MB each at 100,000 sheets).
const CACHED_JOBS: usize = 4;
/// Only jobs of at least this many sheets are cached.
const CACHE_FROM_SHEETS: usize = 1_000;

/// (registry path, job id) → (the job's state stamp, facts), most recently used last.
type Cache = Vec<((String, String), String, Arc<Vec<StoredSheetFacts>>)>;

static CACHE: Mutex<Cache> = Mutex::new(Vec::new());

/// What changes whenever a stored job's sheet rows do: the job-level document is written
/// with every sheet of a job that is not loaded (`save_checkpoint`, `save_sheet_transition`);
/// only a loaded job's sheets are written alone, and a loaded job is answered from memory.
/// Reading a column of each sheet row instead would scan the whole table (100 MB at
/// 100,000 sheets) on every call.
fn stamp(header: &CheckpointState) -> String {
    format!(
        "{}|{}|{}|{}",
        header.updated_at.as_str(),
        header.status.as_str(),
        header.total_sheets,
        header.last_completed_sheet
    )
}

/// The facts of every sheet of `job_id`, from the cache while the job's stamp is
/// unchanged, else from the registry.
fn facts(
    registry: &Registry,
    job_id: &str,
    stamp: String,
) -> Result<Arc<Vec<StoredSheetFacts>>, StateError> {
    let key = (registry.path().display().to_string(), job_id.to_string());
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = cache.iter().position(|(k, _, _)| *k == key) {
        let entry = cache.remove(i);
        if entry.1 == stamp {
            let facts = Arc::clone(&entry.2);
            cache.push(entry);
            return Ok(facts);
        }
    }
    drop(cache);
    let facts = Arc::new(registry.sheet_facts(job_id)?);
    // Small jobs are cheap to read again; caching them would push the large ones out.
    if facts.len() < CACHE_FROM_SHEETS {
        return Ok(facts);
    }
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache.retain(|(k, _, _)| *k != key);
    cache.push((key, stamp, Arc::clone(&facts)));
    let over = cache.len().saturating_sub(CACHED_JOBS);
    cache.drain(..over);
    Ok(facts)
}

/// The `job.status` document of a stored job for `query`; `None` when it has no checkpoint.
pub(super) fn from_registry(
    registry: &Registry,
    record: &JobRecord,
    query: SheetQuery,
) -> Result<Option<JobCheckpoint>, StateError> {
    let Some(mut header) = registry.load_checkpoint_header(&record.job_id)? else {
        return Ok(None);
    };
    let facts = facts(registry, &record.job_id, stamp(&header))?;
    let mut builder = ViewBuilder::new(query, header.total_sheets);
    for f in facts.iter() {
        builder.add(&SheetFacts {
            num: f.num,
            status: f.status,
            failed_validation: f.failed_validation,
            movement: f.movement,
            voice: f.voice,
            duration: f.duration,
            instrument: f.instrument.as_deref(),
        });
    }
    for sheet in registry.load_sheets(&record.job_id, builder.chosen())? {
        header.sheets.insert(sheet.sheet_num, sheet);
    }
    // Converted once, without the per-voice stage map (see `wire::view_snapshot`).
    let snapshot = header.config_snapshot.take();
    let mut doc = wire::job_status_checkpoint(&header, record);
    doc.config_snapshot = snapshot.as_ref().map(wire::view_snapshot);
    doc.sheets_view = Some(builder.finish());
    Ok(Some(doc))
}
