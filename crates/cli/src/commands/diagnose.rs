//! `mozart diagnose SCORE_ID` (cli.md §5.3): one report of a score's progress, timing,
//! prompt metrics, timeline, errors and log files, from the checkpoint the conductor
//! returns for `job.diagnose` (conductor.md §8.10).

use std::path::{Path, PathBuf};

use mozart_client::diagnose::{self, ReportOptions, LOG_TAIL_LINES};
use mozart_ipc::checkpoint::JobCheckpoint;
use mozart_ipc::methods;
use mozart_ipc::time::Timestamp;
use serde_json::Value;

use super::errors::{cut, fetch_checkpoint, titled_panel, type_cell, StateLookup};
use super::status::check_score_id;
use crate::output::{console_width, print_json};
use crate::render::style::{job_status_color, sheet_status_color};
use crate::render::table::{self, Cell};
use crate::render::time::{format_duration, format_timestamp, thousands};
use crate::render::{Color, Style};
use crate::{CliError, Globals, OutputMode};
use mozart_ipc::time::epoch_now;

/// Rows of the timeline / preflight warnings the human report shows.
pub const TIMELINE_ROWS: usize = 20;
/// Rows of the error table the human report shows.
pub const ERROR_ROWS: usize = 15;
/// Characters of an error message in the human report.
pub const ERROR_MESSAGE_CHARS: usize = 80;

/// Arguments of `mozart diagnose`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to diagnose.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: String,
    /// Workspace directory holding the score's JSON state file (`state_backend: json`), for
    /// scores not in the conductor registry.
    #[arg(short = 'w', long = "workspace")]
    pub workspace: Option<PathBuf>,
    /// Output diagnostic report as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Inline the last 50 lines from each sheet/hook log file in the output.
    #[arg(long = "include-logs")]
    pub include_logs: bool,
    /// Include the resource profile (upstream's peak memory, CPU time, syscalls; this port
    /// records none for past runs and says so: `mozart top` shows them live).
    #[arg(long = "resources")]
    pub resources: bool,
    /// Also list the errors of the score's earlier runs (before its latest `run --fresh`);
    /// by default only the current run's are shown.
    #[arg(long = "all-runs")]
    pub all_runs: bool,
}

/// Run `mozart diagnose`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let id = args.score_id.as_str();
    check_score_id(id)?;
    let fetched = fetch_checkpoint(
        globals,
        methods::JOB_DIAGNOSE,
        id,
        args.workspace.as_deref(),
        args.all_runs,
        args.output,
        &StateLookup {
            not_found_hints: &[
                "Run 'mozart list' to see available scores.",
                "Use -w to specify the workspace directory.",
                "Run 'mozart doctor' to check your environment.",
            ],
            workspace_on_unknown_job: true,
        },
    )?;
    let now = epoch_now();
    let mut report = diagnose::report(
        &fetched.state,
        fetched.workspace.as_deref(),
        now,
        ReportOptions {
            include_logs: args.include_logs,
            resources: args.resources,
        },
    );
    if let Some(runs) = &fetched.runs {
        super::errors::add_runs_json(&mut report, runs);
    }
    if args.output.is_json() {
        print_json(&report);
    } else {
        print!(
            "{}",
            crate::output::terminal_safe(&render_report(
                &fetched.state,
                &report,
                now,
                &Style::for_stdout()
            ))
        );
    }
    Ok(0)
}

fn size_text(size: u64) -> String {
    if size >= 1024 * 1024 {
        format!("{:.1} MB", size as f64 / (1024.0 * 1024.0))
    } else if size >= 1024 {
        format!("{:.1} KB", size as f64 / 1024.0)
    } else {
        format!("{size} B")
    }
}

fn first_chars(v: &Value, n: usize) -> String {
    v.as_str().unwrap_or("").chars().take(n).collect()
}

/// The human report (upstream's section order; cli.md §5.3): one function per section,
/// each reading its part of the JSON report.
pub fn render_report(job: &JobCheckpoint, report: &Value, now: f64, style: &Style) -> String {
    let mut out = report_header(job, now, style);
    progress_section(&mut out, report, style);
    timing_section(&mut out, report, style);
    preflight_section(&mut out, report, style);
    prompt_metrics_section(&mut out, report, style);
    timeline_section(&mut out, report, style);
    statistics_section(&mut out, report, style);
    holds_section(&mut out, job, style);
    errors_section(&mut out, job, report, style);
    if let Some(e) = report.get("job_error").and_then(Value::as_str) {
        out.push(String::new());
        out.push(format!("{} {e}", style.paint("Score Error:", Color::Red)));
    }
    // A job failed by an `on_success` hook: which hook and why.
    let hook_failures: Vec<&mozart_ipc::checkpoint::HookResult> =
        job.hook_results.iter().filter(|h| !h.success).collect();
    if !hook_failures.is_empty() {
        out.push(
            super::errors::render_hook_failures(&job.job_id, &hook_failures, style)
                .trim_end()
                .to_string(),
        );
    }
    log_files_section(&mut out, job, report, style);
    let mut text = out.join("\n") + "\n";
    text.push_str(&log_contents_text(report, style));
    text.push_str(&resource_profile_text(report, style));
    text
}

/// Holds on the job's instruments (an open circuit breaker, a rate limit) and what the job
/// waits for.
fn holds_section(out: &mut Vec<String>, job: &JobCheckpoint, style: &Style) {
    if job.instrument_holds.is_empty() && job.waiting_reason.is_none() {
        return;
    }
    out.push(String::new());
    out.push(style.paint("Instrument Holds", Color::Bold));
    for hold in &job.instrument_holds {
        let text = hold.describe();
        out.push(format!("  {}", style.paint(&text, Color::Yellow)));
    }
    if let Some(w) = &job.waiting_reason {
        out.push(format!("  Waiting: {w}"));
    }
}

/// Title, score, ID, status and generation time.
fn report_header(job: &JobCheckpoint, now: f64, style: &Style) -> Vec<String> {
    let status = job.status.as_str();
    let mut out = vec![style.paint("Diagnostic Report", Color::Bold)];
    out.push(format!("  {}", style.paint(&job.job_name, Color::Bold)));
    out.push(format!("  ID: {}", style.paint(&job.job_id, Color::Cyan)));
    out.push(format!(
        "  Status: {}",
        style.paint(&status.to_uppercase(), job_status_color(status))
    ));
    out.push(format!(
        "  Generated: {}",
        format_timestamp(Timestamp::from_epoch(now).as_str())
    ));
    out
}

/// Sheets completed and failed.
fn progress_section(out: &mut Vec<String>, report: &Value, style: &Style) {
    let progress = &report["progress"];
    out.push(String::new());
    out.push(style.paint("Progress", Color::Cyan));
    let percent = progress["percent"].as_f64().unwrap_or(0.0);
    match progress["skipped"].as_u64() {
        Some(skipped) => out.push(format!(
            "  Sheets: {}/{} done ({percent:.1}%): {} completed, {skipped} skipped",
            progress["completed"].as_u64().unwrap_or(0) + skipped,
            progress["total_sheets"],
            progress["completed"],
        )),
        None => out.push(format!(
            "  Sheets: {}/{} completed ({percent:.1}%)",
            progress["completed"], progress["total_sheets"],
        )),
    }
    let failed = progress["failed"].as_u64().unwrap_or(0);
    if failed > 0 {
        out.push(format!(
            "  Failed: {}",
            style.paint(&failed.to_string(), Color::Red)
        ));
    }
    // A job too large to list whole: what the timeline and errors below cover.
    let listed = &report["sheets_listed"];
    if listed.is_object() {
        let n = |k: &str| thousands(listed[k].as_u64().unwrap_or(0));
        out.push(style.paint(
            &format!(
                "  This report covers {} of {} sheets ({} of {} failed); every failed sheet: {}",
                n("listed"),
                n("total_sheets"),
                n("failed_listed"),
                n("failed"),
                listed["see_failed"].as_str().unwrap_or_default()
            ),
            Color::Dim,
        ));
    }
}

/// Duration and start / end, when the score has run.
fn timing_section(out: &mut Vec<String>, report: &Value, style: &Style) {
    let timing = &report["timing"];
    if let Some(d) = timing["duration_seconds"].as_f64().filter(|d| *d != 0.0) {
        out.push(String::new());
        out.push(style.paint("Timing", Color::Cyan));
        out.push(format!("  Duration: {}", format_duration(Some(d))));
        if timing["started_at"].is_string() {
            out.push(format!(
                "  Started: {}",
                first_chars(&timing["started_at"], 19)
            ));
        }
        if timing["completed_at"].is_string() {
            out.push(format!(
                "  Completed: {}",
                first_chars(&timing["completed_at"], 19)
            ));
        }
    }
}

/// Up to [`TIMELINE_ROWS`] preflight warnings.
fn preflight_section(out: &mut Vec<String>, report: &Value, style: &Style) {
    let warnings = report["preflight_warnings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !warnings.is_empty() {
        out.push(String::new());
        out.push(style.paint(
            &format!("Preflight Warnings ({})", warnings.len()),
            Color::Yellow,
        ));
        for w in warnings.iter().take(TIMELINE_ROWS) {
            out.push(format!(
                "  {} Sheet {}: {}",
                style.paint("•", Color::Yellow),
                w["sheet_num"],
                w["warning"].as_str().unwrap_or("")
            ));
        }
        if warnings.len() > TIMELINE_ROWS {
            out.push(style.paint(
                &format!("  ... and {} more warnings", warnings.len() - TIMELINE_ROWS),
                Color::Dim,
            ));
        }
    }
}

/// Token statistics, when any sheet has prompt metrics.
fn prompt_metrics_section(out: &mut Vec<String>, report: &Value, style: &Style) {
    if let Some(t) = report.get("token_statistics") {
        let n = |k: &str| t[k].as_f64().unwrap_or(0.0).max(0.0) as u64;
        out.push(String::new());
        out.push(style.paint("Prompt Metrics", Color::Cyan));
        out.push(format!(
            "  Tokens: min={}, max={}, avg={}",
            thousands(n("min")),
            thousands(n("max")),
            thousands(n("avg"))
        ));
        out.push(format!(
            "  Total tokens processed: {}",
            thousands(n("total"))
        ));
    }
}

/// The per-sheet timeline table.
fn timeline_section(out: &mut Vec<String>, report: &Value, style: &Style) {
    let timeline = report["execution_timeline"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !timeline.is_empty() {
        out.push(String::new());
        out.push(style.paint("Execution Timeline", Color::Cyan));
        let rows: Vec<Vec<Cell>> = timeline
            .iter()
            .take(TIMELINE_ROWS)
            .map(|e| {
                let status = e["status"].as_str().unwrap_or("unknown");
                let duration = e["duration_seconds"]
                    .as_f64()
                    .filter(|d| *d != 0.0)
                    .map_or_else(
                        || "-".to_string(),
                        |d| crate::render::time::format_duration(Some(d)),
                    );
                // The sheet's attempt count holds its completion attempts: shown as the
                // others plus those (`1+2c` is three attempts, not five).
                let total = e["attempt_count"].as_u64().unwrap_or(0);
                let completion = e["completion_attempts"].as_u64().unwrap_or(0);
                let attempts = if completion > 0 {
                    format!("{}+{completion}c", total.saturating_sub(completion))
                } else {
                    total.to_string()
                };
                vec![
                    Cell::from(e["sheet_num"].to_string()),
                    Cell::colored(status, sheet_status_color(status)),
                    Cell::from(duration),
                    Cell::from(attempts),
                    Cell::from(e["execution_mode"].as_str().unwrap_or("-")),
                    Cell::from(e["outcome_category"].as_str().unwrap_or("-")),
                ]
            })
            .collect();
        out.extend(table::render(
            &["#", "Status", "Duration", "Attempts", "Mode", "Outcome"],
            &rows,
            "  ",
            "  ",
            style,
        ));
        if timeline.len() > TIMELINE_ROWS {
            out.push(style.paint(
                &format!("  ... and {} more sheets", timeline.len() - TIMELINE_ROWS),
                Color::Dim,
            ));
        }
    }
}

/// Retries, rate-limit waits and the attempt count.
fn statistics_section(out: &mut Vec<String>, report: &Value, style: &Style) {
    let stats = &report["execution_stats"];
    let retries = stats["total_retry_count"].as_u64().unwrap_or(0);
    let waits = stats["rate_limit_waits"].as_u64().unwrap_or(0);
    let history_count = report
        .get("execution_history_count")
        .and_then(Value::as_i64);
    if retries > 0 || waits > 0 || history_count.is_some() {
        out.push(String::new());
        out.push(style.paint("Execution Statistics", Color::Cyan));
        if let Some(n) = history_count {
            out.push(format!("  Execution History: {n} recorded attempt(s)"));
        }
        if retries > 0 {
            out.push(format!("  Total Retries: {retries}"));
        }
        if waits > 0 {
            out.push(format!(
                "  Rate Limit Waits: {}",
                style.paint(&waits.to_string(), Color::Yellow)
            ));
        }
    }
}

/// Up to [`ERROR_ROWS`] errors and the hint to `mozart errors`.
fn errors_section(out: &mut Vec<String>, job: &JobCheckpoint, report: &Value, style: &Style) {
    let errors = report["errors"].as_array().cloned().unwrap_or_default();
    if !errors.is_empty() {
        out.push(String::new());
        out.push(style.paint(&format!("Errors ({})", errors.len()), Color::Red));
        let rows: Vec<Vec<Cell>> = errors
            .iter()
            .take(ERROR_ROWS)
            .map(|e| {
                vec![
                    Cell::colored(e["sheet_num"].to_string(), Color::Cyan),
                    type_cell(e["error_type"].as_str().unwrap_or("unknown")),
                    Cell::from(e["error_code"].as_str().unwrap_or("")),
                    Cell::from(match e["attempt_number"].as_u64() {
                        // A sheet blocked by a failed dependency never ran.
                        Some(0) => "not run".to_string(),
                        _ => e["attempt_number"].to_string(),
                    }),
                    Cell::from(cut(
                        e["error_message"].as_str().unwrap_or(""),
                        ERROR_MESSAGE_CHARS + 3,
                    )),
                ]
            })
            .collect();
        out.extend(table::render(
            &["Sheet", "Type", "Code", "Attempt", "Message"],
            &rows,
            "  ",
            "  ",
            style,
        ));
        if errors.len() > ERROR_ROWS {
            out.push(style.paint(
                &format!("  ... and {} more errors", errors.len() - ERROR_ROWS),
                Color::Dim,
            ));
        }
        out.push(String::new());
        out.push(style.paint(
            &format!(
                "Use 'mozart errors {} --verbose' for full error details",
                job.job_id
            ),
            Color::Dim,
        ));
    }
    if let Some(note) = super::errors::runs_of_json(report)
        .and_then(|runs| super::errors::earlier_runs_note(&job.job_id, "diagnose", &runs))
    {
        if errors.is_empty() {
            out.push(String::new());
        }
        out.push(style.paint(&note, Color::Dim));
    }
}

/// The workspace's log files and the hint to `--include-logs`.
fn log_files_section(out: &mut Vec<String>, job: &JobCheckpoint, report: &Value, style: &Style) {
    let logs = report["log_files"].as_array().cloned().unwrap_or_default();
    if !logs.is_empty() {
        out.push(String::new());
        out.push(style.paint(&format!("Log Files ({})", logs.len()), Color::Cyan));
        let rows: Vec<Vec<Cell>> = logs
            .iter()
            .map(|l| {
                let modified = first_chars(&l["modified_at"], 19);
                vec![
                    Cell::colored(l["name"].as_str().unwrap_or(""), Color::Cyan),
                    Cell::from(size_text(l["size_bytes"].as_u64().unwrap_or(0))),
                    Cell::colored(
                        if modified.is_empty() {
                            "-".into()
                        } else {
                            modified
                        },
                        Color::Dim,
                    ),
                    Cell::from(l["category"].as_str().unwrap_or("")),
                ]
            })
            .collect();
        out.extend(table::render(
            &["File", "Size", "Modified", "Category"],
            &rows,
            "  ",
            "  ",
            style,
        ));
        // The files in a log's place that are not shown, and why.
        for l in &logs {
            if let Some(why) = l["not_shown"].as_str() {
                out.push(style.paint(&format!("  ! {}", crate::output::plain(why)), Color::Yellow));
            }
        }
        if let Some(hint) = report.get("log_rotation_hint").and_then(Value::as_str) {
            out.push(String::new());
            out.push(format!("{} {hint}", style.paint("Hint:", Color::Yellow)));
        }
        out.push(String::new());
        out.push(style.paint(
            &format!(
                "Use 'mozart diagnose {} --include-logs' to inline log content",
                job.job_id
            ),
            Color::Dim,
        ));
    }
}

/// `--include-logs`: each log's tail in a titled panel (empty when not asked for).
fn log_contents_text(report: &Value, style: &Style) -> String {
    let mut text = String::new();
    if let Some(contents) = report.get("log_contents").and_then(Value::as_object) {
        if !contents.is_empty() {
            text.push('\n');
            text.push_str(&style.paint(
                &format!("Log Contents (last {LOG_TAIL_LINES} lines each)"),
                Color::Cyan,
            ));
            text.push('\n');
            let width = console_width();
            for (path, content) in contents {
                let name = Path::new(path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.clone());
                let body: Vec<String> = match content.as_str().unwrap_or("") {
                    "" => vec!["<empty>".to_string()],
                    c => c.lines().map(str::to_string).collect(),
                };
                text.push_str(&titled_panel(&name, &body, width));
            }
        }
    }
    text
}

/// `--resources`: the profile, or why it is unavailable (empty when not asked for).
fn resource_profile_text(report: &Value, style: &Style) -> String {
    let mut text = String::new();
    if let Some(profile) = report.get("resource_profile") {
        text.push('\n');
        text.push_str(&style.paint("Resource Profile", Color::Cyan));
        text.push('\n');
        let error = profile["error"]
            .as_str()
            .unwrap_or("Resource data unavailable");
        text.push_str(&style.paint(&format!("  {error}"), Color::Dim));
        text.push('\n');
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::render::status_json::parse_checkpoint;
    use mozart_client::diagnose::build_report;

    /// The failed three-sheet job the client's report tests use.
    fn job() -> JobCheckpoint {
        let text = include_str!("../../../client/testdata/diagnose_job.json");
        parse_checkpoint(&serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn human_report_shows_sections_in_order() {
        let job = job();
        let report = build_report(&job, None, 1_767_261_700.0);
        let text = render_report(&job, &report, 1_767_261_700.0, &Style::plain());
        let order = [
            "Diagnostic Report\n  demo\n  ID: d\n  Status: FAILED\n  Generated: ",
            "\nProgress\n  Sheets: 1/3 completed (33.3%)\n  Failed: 2\n",
            "\nTiming\n  Duration: 1m 30s\n  Started: 2026-01-01T10:00:00\n",
            "\nPreflight Warnings (1)\n  • Sheet 1: prompt is long\n",
            "\nPrompt Metrics\n  Tokens: min=1,200, max=3,001, avg=2,101\n  Total tokens processed: 4,201\n",
            "\nExecution Timeline\n  #  Status     Duration  Attempts  Mode    Outcome\n  1  completed  4.2s      1         normal  success_first_try\n  2  failed     -         2+1c      -       -\n",
            "\nExecution Statistics\n  Total Retries: 2\n",
            "\nErrors (2)\n",
            "\nUse 'mozart errors d --verbose' for full error details\n",
            "\nScore Error: sheets [2, 3] failed\n",
        ];
        let mut at = 0;
        for part in order {
            let found = text[at..]
                .find(part)
                .unwrap_or_else(|| panic!("missing {part:?} after byte {at} in:\n{text}"));
            at += found + part.len();
        }
        assert!(!text.contains("Log Files"), "no workspace, no log files");
    }

    #[test]
    fn log_files_and_their_tails_are_shown() {
        // The files as the client found and tailed them (its own tests read real files).
        let job = job();
        let mut report = build_report(&job, None, 1_767_261_700.0);
        let tail: Vec<String> = (11..=60).map(|i| format!("line {i}")).collect();
        report["log_files"] = serde_json::json!([
            {"path": "/ws/logs/sheet-01.log", "name": "sheet-01.log", "size_bytes": 470,
             "modified_at": "2026-01-01T10:00:10.123456+00:00", "category": "sheet_log"},
            {"path": "/ws/hooks/hook-1.log", "name": "hook-1.log", "size_bytes": 0,
             "modified_at": "2026-01-01T10:00:20+00:00", "category": "hook_log"},
        ]);
        report["log_contents"] = serde_json::json!({
            "/ws/logs/sheet-01.log": tail.join("\n"),
            "/ws/hooks/hook-1.log": "",
        });
        let text = render_report(&job, &report, 1_767_261_700.0, &Style::plain());
        assert!(
            text.contains("\n  sheet-01.log  470 B  2026-01-01T10:00:10  sheet_log\n"),
            "{text}"
        );
        assert!(
            text.contains("\nLog Files (2)\n  File          Size   Modified"),
            "{text}"
        );
        assert!(
            text.contains("\nLog Contents (last 50 lines each)\n╭"),
            "{text}"
        );
        assert!(text.contains("│ line 11"), "{text}");
        assert!(text.contains(" hook-1.log "), "{text}");
        assert!(text.contains("│ <empty>"), "{text}");
    }

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(size_text(12), "12 B");
        assert_eq!(size_text(2048), "2.0 KB");
        assert_eq!(size_text(3 * 1024 * 1024 + 1), "3.0 MB");
    }
}
