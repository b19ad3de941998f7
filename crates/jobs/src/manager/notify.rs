//! Score notifications from the job engine: turn job and sheet transitions into
//! `mozart_notify` events. Delivery runs in tasks of its own (never blocks the baton) and
//! never changes a job's outcome.

use mozart_config::model::NotificationEvent;
use mozart_state::{CheckpointState, SheetStatus};

use super::JobRun;

fn base(run: &JobRun, live: &CheckpointState, event: NotificationEvent) -> mozart_notify::Context {
    let mut ctx = mozart_notify::Context::new(event, &run.job_id, &live.job_name);
    ctx.total_sheets = Some(live.total_sheets);
    ctx
}

/// A job moved to `status` (`Running`, `Paused`, `Completed`, `Failed`…).
pub(crate) fn job_changed(
    run: &JobRun,
    live: &CheckpointState,
    status: mozart_state::DaemonJobStatus,
    reason: Option<&str>,
) {
    use mozart_state::DaemonJobStatus as S;
    if run.config.notifications.is_empty() {
        return;
    }
    let event = match status {
        S::Running => NotificationEvent::JobStart,
        S::Paused => NotificationEvent::JobPaused,
        S::Completed => NotificationEvent::JobComplete,
        S::Failed => NotificationEvent::JobFailed,
        _ => return,
    };
    let mut ctx = base(run, live, event);
    if matches!(
        event,
        NotificationEvent::JobComplete | NotificationEvent::JobFailed
    ) {
        add_job_end(&mut ctx, live);
    }
    // A failure's reason, and a pause's ("Cost limit: job cost $… exceeds limit $…",
    // "Paused by user", "Fermata on sheet N"): the message says why.
    if matches!(
        event,
        NotificationEvent::JobFailed | NotificationEvent::JobPaused
    ) {
        ctx.error_message = reason.map(str::to_string);
    }
    mozart_notify::notify(&run.config.notifications, &ctx);
}

/// The `job_complete` message of a job whose `on_success` hooks run first (sent, as
/// complete or failed, when they end); `None` when no channel takes either event.
pub(crate) fn completion(run: &JobRun, live: &CheckpointState) -> Option<mozart_notify::Context> {
    completion_of(&run.job_id, &run.config.notifications, live)
}

/// [`completion`] of a job the conductor holds no run of (its hooks owed at a start).
pub(crate) fn completion_of(
    job_id: &str,
    notifications: &[mozart_config::model::NotificationConfig],
    live: &CheckpointState,
) -> Option<mozart_notify::Context> {
    let wanted = notifications.iter().any(|c| {
        c.on_events.contains(&NotificationEvent::JobComplete)
            || c.on_events.contains(&NotificationEvent::JobFailed)
    });
    if !wanted {
        return None;
    }
    let mut ctx =
        mozart_notify::Context::new(NotificationEvent::JobComplete, job_id, &live.job_name);
    ctx.total_sheets = Some(live.total_sheets);
    add_job_end(&mut ctx, live);
    Some(ctx)
}

/// The figures a job's end message carries: its completed and failed sheets, how long it ran.
fn add_job_end(ctx: &mut mozart_notify::Context, live: &CheckpointState) {
    let count = |s: SheetStatus| live.sheets.statuses().filter(|(_, x)| *x == s).count() as u32;
    ctx.success_count = Some(count(SheetStatus::Completed));
    ctx.failure_count = Some(count(SheetStatus::Failed));
    ctx.duration_seconds = live
        .started_at
        .as_ref()
        .and_then(|t| t.to_epoch())
        .map(|t| (ctx.timestamp - t).max(0.0));
}

/// Sheet `sheet_num` moved to `status`.
pub(crate) fn sheet_changed(
    run: &JobRun,
    live: &CheckpointState,
    sheet_num: u32,
    status: SheetStatus,
) {
    if run.config.notifications.is_empty() {
        return;
    }
    let event = match status {
        SheetStatus::InProgress => NotificationEvent::SheetStart,
        SheetStatus::Completed => NotificationEvent::SheetComplete,
        SheetStatus::Failed => NotificationEvent::SheetFailed,
        _ => return,
    };
    let mut ctx = base(run, live, event);
    ctx.sheet_num = Some(sheet_num);
    if event == NotificationEvent::SheetFailed {
        ctx.error_message = live
            .sheets
            .get(&sheet_num)
            .and_then(|s| s.error_message.clone());
    }
    mozart_notify::notify(&run.config.notifications, &ctx);
}
