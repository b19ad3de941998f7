//! What a large job keeps of its completed sheets in memory (issue 24). A leaf: the host
//! compacts a sheet once its row is saved, a submission the sheets it carries over, and
//! neither needs the other for it.

/// Whether the job's completed sheets keep only their facts in memory once their rows are
/// saved ([`compact_completed`]; issue 24): a job larger than a whole `job.status` answer
/// (views read a page's completed sheets back from the registry), unless something reads
/// the earlier sheets' whole state while it runs (`cross_sheet`, `skip_when` expressions)
/// or the JSON state file, which is rewritten whole from memory, is its store.
pub(super) fn compacts(run: &super::JobRun, live: &mozart_state::CheckpointState) -> bool {
    live.total_sheets > mozart_ipc::sheet_view::DEFAULT_FULL_SHEETS
        && run.config.cross_sheet.is_none()
        && run.config.sheet.skip_when.is_empty()
        && run.config.state_backend != mozart_config::model::StateBackend::Json
}

/// A completed sheet as a large job keeps it in memory (issue 24): its output tails and the
/// lists its validations wrote are in its registry row, and only views of that sheet show
/// them (read from there). What status counts, the learning outcome at the job's end and a
/// later dispatch need stays: state, times, attempt counts, error history, validation
/// verdict and pass rate, and a validation detail that failed or was unsure (the job-end
/// pattern detection reads those; passed, sure checks add nothing to it).
pub(super) fn compact_completed(sheet: &mut mozart_state::SheetState) {
    sheet.stdout_tail = None;
    sheet.stderr_tail = None;
    sheet.passed_validations = Vec::new();
    let clean = sheet.validation_details.as_ref().is_some_and(|details| {
        details
            .iter()
            .all(|d| d.passed && d.confidence.unwrap_or(1.0) >= 0.7)
    });
    if clean {
        sheet.validation_details = None;
    }
}
