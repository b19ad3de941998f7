//! What the pages show, built from the conductor's typed answers (`mozart_ipc::status`:
//! [`JobListEntry`] rows of `job.list`, [`JobStatusResult`](mozart_ipc::status::JobStatusResult) of `job.status` with its
//! [`JobCheckpoint`]), the same structs the CLI reads.

use std::collections::HashMap;

use mozart_ipc::checkpoint::{JobCheckpoint, SheetCheckpoint, SheetStatus};
use mozart_ipc::status::{JobListEntry, JobProgress};
use serde::Serialize;

/// Statuses a job can be filtered by on the jobs page.
pub const STATUSES: [&str; 6] = [
    "queued",
    "running",
    "paused",
    "completed",
    "failed",
    "cancelled",
];

/// Progress and cost of one job, kept between renders (a finished job's never change).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobSummary {
    /// Sheets finished (completed, failed or skipped).
    pub done: u32,
    /// Sheets in the job.
    pub total: u32,
    /// Estimated cost in USD.
    pub cost: f64,
    /// Input + output tokens.
    pub tokens: u64,
    /// How sure the cost is ([`JobCheckpoint::cost_confidence`]): 0.0 when some sheet
    /// reported neither cost nor tokens, below 0.9 when priced at a default.
    pub cost_confidence: f64,
    /// Sheets running now (not those parked on a rate limit). Of the sheets the answer
    /// holds: [`running_sheets`] finds every one of a job whose answer is cut.
    pub running: Vec<u32>,
    /// The checkpoint's start and end (epoch seconds): the times `mozart status` and the job
    /// page measure the job by, so the list's elapsed time agrees with them (a resumed
    /// job's registry row starts at its resume).
    pub started: Option<f64>,
    /// See [`JobSummary::started`].
    pub completed: Option<f64>,
}

impl JobSummary {
    /// Summarise a checkpoint.
    pub fn of(cp: &JobCheckpoint) -> JobSummary {
        // Done means completed or skipped: a failed sheet is not done, so a failed job's
        // bar is not full (issue 23). A cut answer (issue 24) counts every sheet in its view.
        // Counted by the rule the conductor's `job.progress` uses, so a row agrees whichever
        // call filled it.
        let mut summary = JobSummary::from_progress(JobProgress::of(cp));
        summary.running = cp
            .sheets
            .values()
            .filter(|s| s.is_running())
            .map(|s| s.sheet_num)
            .collect();
        summary
    }

    /// A jobs-list row's summary from `job.progress` (without the running sheets, which
    /// only the job's own page shows).
    pub fn from_progress(p: JobProgress) -> JobSummary {
        JobSummary {
            done: p.done,
            total: p.total,
            cost: p.cost,
            tokens: p.tokens,
            cost_confidence: p.cost_confidence,
            running: Vec::new(),
            started: p.started,
            completed: p.completed,
        }
    }
}

/// Every running sheet of job `id`, whatever part of its sheets `cp` (an answer of
/// `job.status`) holds: a page (`offset`, `limit`, one `state`) or a capped summary may leave
/// running sheets out, and "running sheets" is the job's, not the page's. Asks the conductor
/// for the job's `in_progress` sheets only when `cp` may lack some.
pub async fn running_sheets(
    conductor: &mozart_client::Conductor,
    id: &str,
    cp: &JobCheckpoint,
) -> Vec<u32> {
    use mozart_ipc::sheet_view::{SheetMode, SheetQuery, MAX_PAGE_LIMIT};
    let listed = cp
        .sheets
        .values()
        .filter(|s| s.status == SheetStatus::InProgress)
        .count();
    let in_job = cp
        .sheets_view
        .as_ref()
        .map_or(0, |v| v.count("in_progress") as usize);
    if in_job <= listed {
        return JobSummary::of(cp).running;
    }
    let query = SheetQuery {
        mode: SheetMode::Page,
        states: Some(vec!["in_progress".to_string()]),
        limit: Some(MAX_PAGE_LIMIT),
        ..SheetQuery::default()
    };
    match conductor.status_view(id, &query).await {
        Ok(d) => d
            .checkpoint()
            .map(|c| JobSummary::of(c).running)
            .unwrap_or_default(),
        // The conductor went away between the two calls: the sheets the answer holds.
        Err(_) => JobSummary::of(cp).running,
    }
}

/// One row of the jobs table.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    /// Score ID.
    pub job_id: String,
    /// Lower-case status as a person reads it (`pausing` while a paused job's sheets run).
    pub status: String,
    /// The status with what it waits for: `pausing (1 running)`.
    pub label: String,
    /// Percent done (0–100), when known.
    pub percent: Option<u32>,
    /// `3/10`, when known.
    pub progress: Option<String>,
    /// `$0.0123`, when known.
    pub cost: Option<String>,
    /// Start time, `YYYY-MM-DD HH:MM:SS` UTC.
    pub started: String,
    /// Elapsed (running) or total (finished) time.
    pub elapsed: String,
    /// Score file.
    pub config_path: String,
    /// Workspace directory.
    pub workspace: String,
    /// Job error, if any.
    pub error: Option<String>,
}

/// The `job.list` fields a row shows, whichever shape the row has.
struct ListFields<'a> {
    id: &'a str,
    status: &'a str,
    submitted: f64,
    started: Option<f64>,
    completed: Option<f64>,
    total: Option<u32>,
    config_path: &'a str,
    workspace: &'a str,
    error: Option<&'a str>,
}

fn fields(job: &JobListEntry) -> ListFields<'_> {
    match job {
        JobListEntry::Live(j) => ListFields {
            id: &j.job_id,
            status: &j.status,
            submitted: j.submitted_at,
            started: j.started_at,
            completed: j.completed_at,
            total: j.total_sheets,
            config_path: &j.config_path,
            workspace: &j.workspace,
            error: j.error_message.as_deref(),
        },
        JobListEntry::Registry(j) => ListFields {
            id: &j.job_id,
            status: &j.status,
            submitted: j.submitted_at,
            started: j.started_at,
            completed: j.completed_at,
            total: j.total_sheets,
            config_path: &j.config_path,
            workspace: &j.workspace,
            error: j.error_message.as_deref(),
        },
    }
}

impl JobRow {
    /// A row from a `job.list` entry and the job's summary when one is known.
    pub fn from_list(job: &JobListEntry, summary: Option<&JobSummary>, now: f64) -> JobRow {
        let f = fields(job);
        let status = f.status.to_lowercase();
        let shown = job.shown_status().to_lowercase();
        let label = match job.pausing() {
            Some(n) => format!("pausing ({n} running)"),
            None => shown.clone(),
        };
        let positive = |t: Option<f64>| t.filter(|t| *t > 0.0);
        // A queued job waits for a slot: it has not started (its submission is not a start).
        let started = positive(summary.and_then(|s| s.started))
            .or(positive(f.started))
            .or(positive(Some(f.submitted)))
            .filter(|_| status != "queued");
        // An active job has no end yet (a resumed job's checkpoint may keep its last one).
        let end = positive(summary.and_then(|s| s.completed))
            .or(positive(f.completed))
            .filter(|_| !matches!(status.as_str(), "running" | "queued" | "paused"));
        let elapsed = match (started, end) {
            (Some(s), Some(e)) => format_duration(e - s),
            (Some(s), None) if matches!(status.as_str(), "running" | "queued" | "paused") => {
                format_duration(now - s)
            }
            _ => String::new(),
        };
        let total = summary.map(|s| s.total).or(f.total);
        let done = summary.map(|s| s.done).or(match status.as_str() {
            "completed" => total,
            _ => None,
        });
        let (percent, progress) = match (done, total) {
            (Some(d), Some(t)) if t > 0 => (Some((d * 100 / t).min(100)), Some(format!("{d}/{t}"))),
            _ => (None, None),
        };
        JobRow {
            job_id: f.id.to_string(),
            status: shown,
            label,
            percent,
            progress,
            cost: summary.map(|s| format_job_cost(s.cost, s.cost_confidence)),
            started: started.map(format_epoch).unwrap_or_default(),
            elapsed,
            config_path: f.config_path.to_string(),
            workspace: f.workspace.to_string(),
            error: f.error.map(str::to_string),
        }
    }
}

/// Build the rows of the jobs table, filtered by status (`None` = all).
pub fn job_rows(
    jobs: &[JobListEntry],
    summaries: &HashMap<String, JobSummary>,
    filter: Option<&str>,
    now: f64,
) -> Vec<JobRow> {
    jobs.iter()
        .filter(|j| filter.is_none_or(|f| j.status().eq_ignore_ascii_case(f)))
        .map(|j| JobRow::from_list(j, summaries.get(j.job_id()), now))
        .collect()
}

/// Counts per status for the filter bar.
pub fn status_counts(jobs: &[JobListEntry]) -> Vec<(String, usize)> {
    STATUSES
        .iter()
        .map(|s| {
            let n = jobs
                .iter()
                .filter(|j| j.status().eq_ignore_ascii_case(s))
                .count();
            (s.to_string(), n)
        })
        .collect()
}

/// A `job.status` answer for the job page (the clients' one type).
pub use mozart_client::JobDetail;

/// One sheet row of the job page.
#[derive(Debug, Clone, Serialize)]
pub struct SheetRow {
    /// Sheet number.
    pub num: u32,
    /// Movement (stage), if known.
    pub movement: Option<u32>,
    /// Voice (instance), if known.
    pub voice: Option<u32>,
    /// Display status (`failed` for a completed sheet whose validations failed, `waiting`
    /// for one parked on a rate limit).
    pub status: String,
    /// The state in words, as `mozart status --sheets` says it: `waiting (rate limit, 1m
    /// 37s left)`, `retrying (attempt 2 of 3) in 12s`, else the status.
    pub state: String,
    /// Attempts made.
    pub attempts: u32,
    /// Instrument (and model).
    pub instrument: String,
    /// Duration.
    pub duration: String,
    /// Cost.
    pub cost: String,
    /// Tokens in/out.
    pub tokens: String,
    /// `2/3 passed`.
    pub validation: String,
    /// E-code of the last error.
    pub error_code: Option<String>,
    /// Last error message.
    pub error: Option<String>,
}

/// An attempt (error record) of a sheet.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRow {
    /// Sheet.
    pub sheet: u32,
    /// Attempt number.
    pub attempt: u32,
    /// When.
    pub at: String,
    /// E-code.
    pub code: String,
    /// Error type (`transient`, `rate_limit`, `permanent`).
    pub kind: String,
    /// Message.
    pub message: String,
    /// What to do about this code.
    pub hint: String,
}

/// One validation result.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationRow {
    /// Sheet.
    pub sheet: u32,
    /// Rule type.
    pub rule: String,
    /// Description or path.
    pub target: String,
    /// Passed?
    pub passed: bool,
    /// Why not.
    pub detail: String,
}

/// Sheet rows of a checkpoint.
pub fn sheet_rows(cp: &JobCheckpoint) -> Vec<SheetRow> {
    let paused = cp.status == mozart_ipc::checkpoint::JobStatus::Paused;
    cp.sheets.values().map(|s| sheet_row(s, paused)).collect()
}

fn sheet_row(s: &SheetCheckpoint, paused: bool) -> SheetRow {
    let duration = s.execution_duration_seconds.or_else(|| {
        let start = s.started_at.as_ref()?.to_epoch()?;
        let end = s
            .completed_at
            .as_ref()
            .and_then(|t| t.to_epoch())
            .unwrap_or_else(mozart_ipc::time::epoch_now);
        (s.is_running() || s.completed_at.is_some()).then_some(end - start)
    });
    let passed = s.passed_validations.len();
    let failed = s.failed_validations.len();
    let validation = match (&s.validation_details, passed + failed) {
        (Some(d), _) if !d.is_empty() => {
            let ok = d.iter().filter(|v| v.passed).count();
            format!("{ok}/{} passed", d.len())
        }
        (_, 0) => match s.validation_passed {
            Some(true) => "passed".into(),
            Some(false) => "failed".into(),
            None => String::new(),
        },
        (_, n) => format!("{passed}/{n} passed"),
    };
    let last = s.error_history.last();
    SheetRow {
        num: s.sheet_num,
        movement: s.movement,
        voice: s.voice,
        status: if s.rate_limit.is_some() {
            "waiting".to_string()
        } else {
            s.display_status().to_string()
        },
        state: s.shown_state(paused),
        attempts: s.attempt_count,
        instrument: match (&s.instrument_name, &s.instrument_model) {
            (Some(i), Some(m)) => format!("{i} ({m})"),
            (Some(i), None) => i.clone(),
            _ => String::new(),
        },
        duration: duration.map(format_duration).unwrap_or_default(),
        cost: sheet_cost(s),
        tokens: match (s.input_tokens, s.output_tokens) {
            (None, None) => String::new(),
            (i, o) => format!("{} / {}", i.unwrap_or(0), o.unwrap_or(0)),
        },
        validation,
        error_code: s
            .error_code
            .clone()
            .or_else(|| last.map(|e| e.error_code.clone()))
            .filter(|_| s.error_message.is_some() || s.status == SheetStatus::Failed),
        error: s.error_message.clone(),
    }
}

/// Every error `mozart errors` lists for the checkpoint (its one list,
/// [`mozart_client::diagnose::collect_errors`]): each sheet's recorded attempts with their
/// types, or the last error of a sheet without history (a sheet parked on a rate limit, a
/// sheet a failed dependency blocked). By sheet, then time. `cp` should be a `job.errors`
/// answer: a `job.status` one may hold only some sheets.
pub fn attempt_rows(cp: &JobCheckpoint) -> Vec<AttemptRow> {
    use mozart_client::diagnose::{collect_errors, ErrorFilter};
    collect_errors(cp, &ErrorFilter::default(), mozart_ipc::time::epoch_now())
        .into_iter()
        .map(|e| AttemptRow {
            sheet: e.sheet_num,
            attempt: e.attempt_number,
            at: e
                .timestamp
                .as_deref()
                .map(|t| {
                    mozart_ipc::time::parse_iso8601(t)
                        .map(format_epoch)
                        .unwrap_or_else(|| t.to_string())
                })
                .unwrap_or_default(),
            hint: code_hint(&e.error_code, &cp.job_id),
            kind: e.error_type,
            code: e.error_code,
            message: e.error_message,
        })
        .collect()
}

/// Every validation result recorded on the sheets.
pub fn validation_rows(cp: &JobCheckpoint) -> Vec<ValidationRow> {
    let mut out = Vec::new();
    for s in cp.sheets.values() {
        match &s.validation_details {
            Some(details) if !details.is_empty() => {
                for d in details {
                    out.push(ValidationRow {
                        sheet: s.sheet_num,
                        rule: d.rule_type.clone().unwrap_or_default(),
                        target: d
                            .description
                            .clone()
                            .or_else(|| d.path.clone())
                            .or_else(|| d.pattern.clone())
                            .unwrap_or_default(),
                        passed: d.passed,
                        detail: d
                            .error_message
                            .clone()
                            .or_else(|| d.failure_reason.clone())
                            .unwrap_or_default(),
                    });
                }
            }
            _ => {
                for (list, passed) in [
                    (&s.passed_validations, true),
                    (&s.failed_validations, false),
                ] {
                    for v in list {
                        out.push(ValidationRow {
                            sheet: s.sheet_num,
                            rule: String::new(),
                            target: v.clone(),
                            passed,
                            detail: String::new(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// What to do about an error code (the families of execution.md §7.1), with the job's own
/// id in the commands it names.
pub fn code_hint(code: &str, job_id: &str) -> String {
    let generic = match code.get(..2) {
        Some("E0") if code == "E001" => {
            "The instrument timed out: raise the sheet timeout or split the work."
        }
        Some("E0") if code == "E006" => {
            "No output for too long: check the instrument, or raise stale_detection.idle_timeout_seconds."
        }
        // Not "it is retried": the last attempt of a sheet is not, and that is the one shown.
        Some("E0") => {
            return format!("The instrument process failed (retried while the score's retry.max_retries allow): read its stderr tail with mozart errors {job_id} --verbose.")
        }
        Some("E1") => "Rate or quota limit: Mozart waits and retries. See: mozart clear-rate-limits",
        Some("E2") => "Validation failed: compare the sheet's output with the score's validations.",
        Some("E3") => "Score or instrument configuration problem: fix the score, then check it with mozart validate.",
        Some("E4") => return format!("Checkpoint state problem: run mozart diagnose {job_id}."),
        // E505 is a program that is not there: credentials and network are no lead.
        Some("E5") if code == "E505" => {
            return format!("The instrument's program was not found on the conductor's PATH: install it there, or start the conductor with a PATH that has it, then mozart resume {job_id}.")
        }
        Some("E5") => "The instrument's backend refused or was unreachable: check credentials and network.",
        Some("E6") => "A preflight check failed: fix the reported prerequisite, then mozart resume.",
        Some("E7") if code == "E701" => {
            return format!("The reviewer never answered DONE: read its last feedback, then mozart resume {job_id} for more iterations.")
        }
        Some("E7") => {
            return format!("The reviewer accepted the work but its dispatch failed: fix the cause, then mozart resume {job_id}.")
        }
        _ => return format!("Run mozart diagnose {job_id} for details."),
    };
    generic.to_string()
}

/// `1h 02m 03s`-style duration.
pub fn format_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return String::new();
    }
    let total = secs.round() as u64;
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else if secs > 0.0 && secs < 0.05 {
        // A run of a few milliseconds did take time: "0.0s" reads as "never ran".
        "<0.1s".to_string()
    } else if secs < 10.0 {
        format!("{secs:.1}s")
    } else {
        format!("{s}s")
    }
}

/// `$1.23`, `$0.0033`: as `mozart status` shows it ([`mozart_client::money::usd`]).
pub fn format_cost(cost: f64) -> String {
    mozart_client::money::usd(cost)
}

/// A job's cost as `mozart status` words it (issue 22): `unknown` when nothing was
/// reported, `≥ $x` when some sheets' cost is unknown, `~$x` when priced at a default.
pub fn format_job_cost(cost: f64, confidence: f64) -> String {
    let figure = cost_figure(cost, confidence);
    if confidence == 0.0 && cost > 0.0 {
        format!("{figure} (some sheets' cost unknown)")
    } else if confidence > 0.0 && confidence < 0.9 {
        format!("{figure} (est.)")
    } else {
        figure
    }
}

/// The short form of [`format_job_cost`] (the chart's label): `unknown`, `≥ $x`, `~$x`, `$x`.
pub fn cost_figure(cost: f64, confidence: f64) -> String {
    if confidence == 0.0 && cost == 0.0 {
        "unknown".to_string()
    } else if confidence == 0.0 {
        format!("≥ {}", format_cost(cost))
    } else if confidence < 0.9 {
        format!("~{}", format_cost(cost))
    } else {
        format_cost(cost)
    }
}

/// A sheet's cost: blank before it ran, `unknown` when its instrument reported neither
/// cost nor tokens, `~$x` when estimated.
fn sheet_cost(s: &SheetCheckpoint) -> String {
    if s.attempt_count == 0 && s.estimated_cost.is_none() {
        return String::new();
    }
    if s.cost_confidence == 0.0 {
        return "unknown".to_string();
    }
    match s.estimated_cost {
        Some(c) if s.cost_confidence < 0.9 => format!("~{} (est.)", format_cost(c)),
        Some(c) => format_cost(c),
        None => String::new(),
    }
}

/// Epoch seconds as `YYYY-MM-DD HH:MM:SS` (UTC); outside jiff's years ±9999, the limit.
pub fn format_epoch(secs: f64) -> String {
    let total = secs.floor() as i64;
    let instant = jiff::Timestamp::from_second(total).unwrap_or(if total < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    instant.strftime("%Y-%m-%d %H:%M:%S").to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn epochs_format_as_utc_dates() {
        assert_eq!(format_epoch(0.0), "1970-01-01 00:00:00");
        assert_eq!(format_epoch(1_700_000_000.0), "2023-11-14 22:13:20");
        assert_eq!(format_epoch(-0.5), "1969-12-31 23:59:59");
        assert_eq!(format_epoch(1_709_210_096.9), "2024-02-29 12:34:56");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(3.25), "3.2s");
        assert_eq!(format_duration(75.0), "1m 15s");
        assert_eq!(format_duration(3723.0), "1h 02m 03s");
    }

    #[test]
    fn rows_filter_by_status_and_show_progress() {
        let jobs: Vec<JobListEntry> = serde_json::from_value(json!([
            {"job_id": "a", "status": "running", "config_path": "/a.yaml", "workspace": "/w",
             "submitted_at": 100.0, "started_at": 100.0},
            {"job_id": "b", "status": "completed", "config_path": "/b.yaml", "workspace": "/w",
             "pid": null, "submitted_at": 50.0, "started_at": 50.0, "completed_at": 60.0,
             "current_sheet": null, "total_sheets": 4},
        ]))
        .unwrap();
        let mut sums = HashMap::new();
        sums.insert(
            "a".to_string(),
            JobSummary {
                done: 1,
                total: 4,
                cost: 0.5,
                cost_confidence: 1.0,
                ..JobSummary::default()
            },
        );
        let rows = job_rows(&jobs, &sums, None, 130.0);
        assert_eq!(rows[0].percent, Some(25));
        assert_eq!(rows[0].elapsed, "30s");
        assert_eq!(rows[0].cost.as_deref(), Some("$0.50"));
        assert_eq!(rows[1].progress.as_deref(), Some("4/4"));
        assert_eq!(rows[1].elapsed, "10s");
        let only = job_rows(&jobs, &sums, Some("completed"), 130.0);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].job_id, "b");
    }

    #[test]
    fn a_failed_sheet_does_not_fill_the_bar() {
        let cp: JobCheckpoint = serde_json::from_value(serde_json::json!({
            "job_id": "j", "job_name": "j", "status": "failed",
            "created_at": "2026-01-02T03:04:05.000000Z",
            "updated_at": "2026-01-02T03:05:00.000000Z",
            "total_sheets": 2, "last_completed_sheet": 1,
            "sheets": {
                "1": {"sheet_num": 1, "status": "completed"},
                "2": {"sheet_num": 2, "status": "failed"}
            }
        }))
        .unwrap();
        assert_eq!(JobSummary::of(&cp).done, 1);
    }
}
