//! The human view of `mozart status <id>` (cli.md §4.1, "Per-score human view"): plain
//! aligned text in upstream's section order, colour only through [`Style`].

use mozart_client::money::usd;
use mozart_config::{noun, plural};
use mozart_ipc::checkpoint::{HookResult, JobCheckpoint, JobStatus, SheetCheckpoint, SheetStatus};
use mozart_ipc::sheet_view::{MovementSummary, SheetMode, SheetsView};
use mozart_ipc::status::JobListEntry;
use serde_json::Value;

use super::status_json::{
    circuit_breaker, configured_hooks, last_activity, movement_groups, recent_errors_of,
    sheet_descriptions, sheet_elapsed,
};
use super::style::{sheet_status_color, Color, Style};
use super::table::{self, Cell};
use super::time::{
    format_compact_duration, format_duration, format_epoch_minute, format_timestamp, thousands,
};

/// Scores with at least this many sheets get the compact summary instead of the table.
pub const LARGE_SCORE_THRESHOLD: usize = 50;
/// Width of the progress bar in cells.
pub const PROGRESS_BAR_WIDTH: usize = 40;
/// Movements listed in a large job's summary at most.
const MAX_MOVEMENT_LINES: usize = 20;
/// Running sheets whose live progress a large job's summary shows at most.
const LARGE_LIVE_PROGRESS: usize = 3;

/// `Sheets  ████░░░░  50% (2/4)`.
pub fn progress_bar(done: u32, total: u32) -> String {
    let fraction = if total == 0 {
        0.0
    } else {
        (f64::from(done) / f64::from(total)).clamp(0.0, 1.0)
    };
    let filled = (fraction * PROGRESS_BAR_WIDTH as f64).round() as usize;
    format!(
        "Sheets  {}{}  {:>3.0}% ({done}/{total})",
        "█".repeat(filled),
        "░".repeat(PROGRESS_BAR_WIDTH - filled),
        fraction * 100.0
    )
}

/// `completed (1.2s)`, `in_progress (3m 4s)` — status plus duration or elapsed time; a
/// reviewed sheet adds its loop (`· review 2: RETRY`, docs/mochi.md).
fn sheet_status_text(sheet: &SheetCheckpoint, now: f64, paused: bool) -> String {
    // Parked on a rate limit: not running, and not failed either.
    if let Some(wait) = &sheet.rate_limit {
        return if wait.seconds_left > 0.0 {
            format!(
                "waiting (rate limit, {} left)",
                format_compact_duration(wait.seconds_left.ceil())
            )
        } else {
            "waiting (rate limit over, starting)".to_string()
        };
    }
    // Failed and waiting out its backoff: `pending` alone hid that it failed.
    if let Some(retry) = sheet
        .retry_wait
        .as_ref()
        .filter(|_| sheet.status == SheetStatus::Pending)
    {
        return retry.describe(paused);
    }
    let label = sheet.display_status();
    let mut text = match sheet_elapsed(sheet, now).or(sheet.execution_duration_seconds) {
        Some(secs) => format!("{label} ({})", format_duration(Some(secs))),
        None => label.to_string(),
    };
    if let Some(r) = sheet.review.as_ref().filter(|r| r.iteration > 0) {
        text.push_str(&format!(
            " · review {}: {}",
            r.iteration,
            r.verdict.as_deref().unwrap_or("?")
        ));
    }
    text
}

fn validation_text(passed: Option<bool>) -> Cell {
    match passed {
        None => Cell::from("-"),
        Some(true) => Cell::colored("✓ Pass", Color::Green),
        Some(false) => Cell::colored("✗ Fail", Color::Red),
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        let head: String = text.chars().take(max).collect();
        format!("{head}...")
    } else {
        text.to_string()
    }
}

struct View<'a> {
    job: &'a JobCheckpoint,
    now: f64,
    style: &'a Style,
    out: Vec<String>,
}

impl View<'_> {
    /// Whether the job is paused: it starts nothing, whatever its sheets wait for.
    fn paused(&self) -> bool {
        self.job.status == JobStatus::Paused
    }

    fn heading(&mut self, title: &str) {
        self.out.push(String::new());
        self.out.push(self.style.paint(title, Color::Bold));
    }

    fn line(&mut self, text: impl Into<String>) {
        self.out.push(text.into());
    }

    fn header(&mut self) {
        let job = self.job;
        self.line(self.style.paint("Score Status", Color::Bold));
        self.line(format!(
            "  {}",
            self.style.paint(&job.job_name, Color::Bold)
        ));
        self.line(format!(
            "  ID: {}",
            self.style.paint(&job.job_id, Color::Cyan)
        ));
        let shown = super::status_json::shown_status(job);
        // Sheets of a pausing job whose Slurm job has not started: they still run (when
        // Slurm starts them), which "running" alone does not tell.
        let queued = job
            .sheets
            .values()
            .filter(|s| s.status == SheetStatus::InProgress)
            .filter(|s| s.live.as_ref().is_some_and(|l| l.queued))
            .count();
        let status = match job.pausing_sheets() {
            Some(n) if queued > 0 => {
                format!("PAUSING ({n} running, {queued} of them in Slurm's queue)")
            }
            Some(n) => format!("PAUSING ({n} running)"),
            None => shown.to_uppercase(),
        };
        self.line(format!(
            "  Status: {}",
            self.style
                .paint(&status, super::style::job_status_color(shown))
        ));
        if let Some(reason) = &job.waiting_reason {
            self.line(format!("  Waiting: {reason}"));
        }
        // A job found paused when the conductor started: its sheets read pending, but the
        // Slurm jobs they had submitted run on, followed by no one until `resume`.
        let unfollowed: Vec<&str> = job
            .sheets
            .values()
            .filter(|s| s.status == SheetStatus::Pending)
            .filter_map(|s| s.remote_attempt.as_ref())
            .map(|r| r.remote_id.as_str())
            .filter(|id| !id.is_empty())
            .collect();
        if self.paused() && job.pausing_sheets().is_none() && !unfollowed.is_empty() {
            self.line(format!(
                "  Slurm: {} submitted before the conductor restarted ({}) {} on while the job \
                 is paused: `mozart resume {id}` collects {} (no sheet runs again), \
                 `mozart cancel {id}` cancels {}",
                mozart_config::plural(unfollowed.len(), "job", "jobs"),
                unfollowed.join(", "),
                if unfollowed.len() == 1 { "runs" } else { "run" },
                if unfollowed.len() == 1 {
                    "its result"
                } else {
                    "their results"
                },
                if unfollowed.len() == 1 { "it" } else { "them" },
                id = job.job_id,
            ));
        }
        // Sheets whose Slurm jobs the pause took back from the queue before they started.
        let withdrawn: Vec<String> = job
            .sheets
            .values()
            .filter(|s| s.status == SheetStatus::Pending)
            .filter_map(|s| {
                let id = s.slurm_withdrawn.as_ref()?;
                Some(format!("sheet {} (job {id})", s.sheet_num))
            })
            .collect();
        if self.paused() && !withdrawn.is_empty() {
            let one = withdrawn.len() == 1;
            self.line(format!(
                "  Slurm: withdrawn from Slurm's queue at pause before {} started: {}; {}                  pending again (no retry spent), and `mozart resume {id}` submits {} anew",
                if one { "it" } else { "they" },
                withdrawn.join(", "),
                if one { "it is" } else { "they are" },
                if one { "it" } else { "them" },
                id = job.job_id,
            ));
        }
        if job.hooks_running {
            self.line(
                "  Hooks: on_success hooks are running; a failing one turns the job failed"
                    .to_string(),
            );
        }
        if let Some(n) = job.pausing_sheets() {
            let (sheets, finish) = if n == 1 {
                ("running sheet", "finishes its")
            } else {
                ("running sheets", "finish their")
            };
            self.line(format!(
                "  Pausing: {n} {sheets} {finish} attempt first; then the job is paused"
            ));
            if queued > 0 {
                let (them, waits) = if queued == 1 {
                    ("it", "waits")
                } else {
                    ("each", "wait")
                };
                self.line(format!(
                    "  {queued} of them still {waits} in Slurm's queue: {them} runs when Slurm \
                     starts it (`squeue` says why it waits; `mozart cancel {}` withdraws \
                     the job's Slurm jobs)",
                    job.job_id
                ));
            }
        }
        // Upstream never sets `started_at` (execution.md §8.1), so it never shows a
        // duration; falling back to `created_at` gives the user the obvious number.
        let start = job
            .started_at
            .as_ref()
            .unwrap_or(&job.created_at)
            .to_epoch();
        if let Some(start) = start {
            if let Some(end) = job.completed_at.as_ref().and_then(|t| t.to_epoch()) {
                if job.status != JobStatus::Running {
                    self.line(format!(
                        "  Duration: {}",
                        format_duration(Some(end - start))
                    ));
                }
            } else if job.status == JobStatus::Running {
                self.line(format!(
                    "  Running for: {}",
                    format_duration(Some(self.now - start))
                ));
            }
        }
        // Where each sheet's full output is (the conductor adds the workspace).
        if let Some(ws) = job.workspace.as_deref() {
            let dir = mozart_ipc::paths::sheet_logs_dir(std::path::Path::new(ws), &job.job_id);
            // Only a sheet that ran past 1 s or printed over 4,000 bytes has a file there; a
            // shorter one's output is in the registry. Say so, and name the reader of both.
            self.line(format!(
                "  Sheet logs: {} (sheets past 1 s or 4,000 bytes; `mozart logs {} --sheet N` shows any sheet's output)",
                dir.display(),
                self.job.job_id
            ));
        }
    }

    fn progress(&mut self) {
        self.heading("Progress");
        // Skipped sheets are done: they count towards the bar, and the line says how many
        // of the done sheets were skipped rather than run (issue 23).
        let skipped = super::status_json::skipped_sheets(self.job);
        let completed = super::status_json::completed_sheets(self.job);
        let bar = progress_bar(
            super::status_json::done_sheets(self.job),
            self.job.total_sheets,
        );
        if skipped > 0 {
            self.line(format!("  {bar}  {completed} completed, {skipped} skipped"));
        } else {
            self.line(format!("  {bar}"));
        }
    }

    fn parallel(&mut self) {
        let job = self.job;
        if !job.parallel_enabled {
            return;
        }
        self.heading("Parallel Execution");
        self.line("  Mode: Enabled");
        self.line(format!("  Max concurrent: {}", job.parallel_max_concurrent));
        self.line(format!(
            "  Batches executed: {}",
            job.parallel_batches_executed
        ));
        if !job.sheets_in_progress.is_empty() {
            let list: Vec<String> = job.sheets_in_progress.iter().map(u32::to_string).collect();
            self.line(format!("  Currently running: {}", list.join(", ")));
        }
    }

    fn synthesis(&mut self) {
        let job = self.job;
        if job.synthesis_results.is_empty() {
            return;
        }
        self.heading("Synthesis Results");
        let rows: Vec<Vec<Cell>> = job
            .synthesis_results
            .iter()
            .map(|(batch, result)| {
                let sheets: Vec<String> = result
                    .get("sheets")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().map(|v| v.to_string()).collect())
                    .unwrap_or_default();
                let mut shown = sheets
                    .iter()
                    .take(4)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if sheets.len() > 4 {
                    shown.push_str(&format!(" (+{})", sheets.len() - 4));
                }
                let text = |k: &str, d: &str| {
                    result
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or(d)
                        .to_string()
                };
                vec![
                    Cell::from(batch.chars().take(12).collect::<String>()),
                    Cell::from(shown),
                    Cell::from(text("strategy", "merge")),
                    Cell::from(text("status", "pending")),
                ]
            })
            .collect();
        let lines = table::render(
            &["Batch", "Sheets", "Strategy", "Status"],
            &rows,
            "  ",
            "  ",
            self.style,
        );
        self.out.extend(lines);
    }

    fn sheet_table(&mut self) {
        let job = self.job;
        let descriptions = sheet_descriptions(job);
        let has_instruments = job
            .sheets
            .values()
            .any(|s| s.instrument_name.as_deref().is_some_and(|n| !n.is_empty()));
        let mut headers = vec!["#"];
        if !descriptions.is_empty() {
            headers.push("Description");
        }
        if has_instruments {
            headers.push("Instrument");
        }
        headers.extend(["Status", "Attempts", "Validation", "Error"]);
        let rows: Vec<Vec<Cell>> = job
            .sheets
            .iter()
            .map(|(num, sheet)| {
                let mut row = vec![Cell::from(num.to_string())];
                if !descriptions.is_empty() {
                    row.push(Cell::from(
                        descriptions.get(num).cloned().unwrap_or_default(),
                    ));
                }
                if has_instruments {
                    row.push(Cell::from(
                        sheet.instrument_name.clone().unwrap_or_default(),
                    ));
                }
                row.push(Cell::colored(
                    sheet_status_text(sheet, self.now, self.paused()),
                    sheet_status_color(sheet.display_status()),
                ));
                row.push(Cell::from(sheet.attempt_count.to_string()));
                row.push(validation_text(sheet.validation_passed));
                row.push(Cell::from(
                    sheet
                        .error_message
                        .as_deref()
                        .map(|m| truncate(m, 50))
                        .unwrap_or_default(),
                ));
                row
            })
            .collect();
        self.heading("Sheet Details");
        let lines = table::render(&headers, &rows, "  ", "  ", self.style);
        self.out.extend(lines);
    }

    fn sheet_summary(&mut self) {
        let job = self.job;
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for sheet in job.sheets.values() {
            let label = sheet.display_status();
            match counts.iter_mut().find(|(l, _)| *l == label) {
                Some((_, n)) => *n += 1,
                None => counts.push((label, 1)),
            }
        }
        let order = [
            "completed",
            "failed",
            "running",
            "in_progress",
            "pending",
            "skipped",
        ];
        let mut parts: Vec<String> = Vec::new();
        for label in order {
            if let Some((_, n)) = counts.iter().find(|(l, _)| *l == label) {
                parts.push(
                    self.style
                        .paint(&format!("{n} {label}"), sheet_status_color(label)),
                );
            }
        }
        for (label, n) in &counts {
            if !order.contains(label) {
                parts.push(format!("{n} {label}"));
            }
        }
        self.heading("Sheet Summary");
        self.line(format!(
            "  {}: {}",
            plural(job.sheets.len(), "sheet", "sheets"),
            parts.join(", ")
        ));
        let mut instruments: std::collections::BTreeMap<&str, usize> = Default::default();
        for s in job.sheets.values() {
            if let Some(name) = s.instrument_name.as_deref().filter(|n| !n.is_empty()) {
                *instruments.entry(name).or_default() += 1;
            }
        }
        if !instruments.is_empty() {
            let list: Vec<String> = instruments
                .iter()
                .map(|(name, n)| format!("{name} ({n})"))
                .collect();
            self.line(format!("  Instruments: {}", list.join(", ")));
        }
        let interesting: Vec<(&u32, &SheetCheckpoint)> = job
            .sheets
            .iter()
            .filter(|(_, s)| {
                matches!(s.status, SheetStatus::InProgress | SheetStatus::Failed)
                    || (s.status == SheetStatus::Completed && s.validation_passed == Some(false))
            })
            .collect();
        if !interesting.is_empty() {
            self.heading("Active & Failed Sheets");
            for (num, sheet) in interesting.iter().take(20) {
                let status = self.style.paint(
                    &sheet_status_text(sheet, self.now, self.paused()),
                    sheet_status_color(sheet.display_status()),
                );
                let error = sheet
                    .error_message
                    .as_deref()
                    .map(|m| format!(" — {}...", m.chars().take(40).collect::<String>()))
                    .unwrap_or_default();
                self.line(format!("  Sheet {num:>4}: {status}{error}"));
            }
            if interesting.len() > 20 {
                self.line(format!("  ... and {} more", interesting.len() - 20));
            }
        }
    }

    /// The sheets part of a job too large to list (issue 24): counts by state, each
    /// movement's counts and durations, the running and failed sheets up to the cap (saying
    /// how many more), and how to page the rest.
    fn large_summary(&mut self, view: &SheetsView) {
        let id = &self.job.job_id;
        if view.movements.len() > 1 || view.movements.iter().any(|m| m.movement > 0) {
            self.movements_section(view);
        }
        self.heading("Sheet Summary");
        let parts: Vec<String> = view
            .shown_counts()
            .into_iter()
            .map(|(label, n)| {
                self.style.paint(
                    &format!("{} {label}", thousands(u64::from(n))),
                    sheet_status_color(label),
                )
            })
            .collect();
        self.line(format!(
            "  {} {}: {}",
            thousands(u64::from(view.total)),
            noun(&view.total, "sheet", "sheets"),
            parts.join(", ")
        ));
        self.capped_sheets(view);
        self.line(String::new());
        self.line(self.style.paint(
            &format!(
                "Every sheet, a page at a time: mozart status {id} --sheets \
                 [--state STATE] [--offset N] [--limit N]"
            ),
            Color::Dim,
        ));
    }

    /// Up to [`MAX_MOVEMENT_LINES`] movements, one line each.
    fn movements_section(&mut self, view: &SheetsView) {
        self.heading("Movements");
        let descriptions = sheet_descriptions(self.job);
        for m in view.movements.iter().take(MAX_MOVEMENT_LINES) {
            let line = self.movement_line(m, descriptions.get(&m.first_sheet));
            self.line(line);
        }
        if view.movements.len() > MAX_MOVEMENT_LINES {
            self.line(format!(
                "  ... and {} more movements",
                view.movements.len() - MAX_MOVEMENT_LINES
            ));
        }
    }

    /// A movement: its number and description, its sheets, then its status with counts by
    /// state and its longest and total durations.
    fn movement_line(&self, m: &MovementSummary, description: Option<&String>) -> String {
        let color = sheet_status_color(if m.status == "running" {
            "in_progress"
        } else {
            m.status.as_str()
        });
        let range = if m.first_sheet == m.last_sheet {
            format!("sheet {}", m.first_sheet)
        } else {
            format!("sheets {}–{}", m.first_sheet, m.last_sheet)
        };
        let mut line = format!("  Movement {}", m.movement);
        if let Some(d) = description {
            line.push_str(&format!(": {d}"));
        }
        line.push_str(&format!(
            " ({range}, {} sheet{})",
            thousands(u64::from(m.sheet_count)),
            if m.sheet_count == 1 { "" } else { "s" }
        ));
        let done = m.counts.get("completed").copied().unwrap_or(0);
        let mut detail = vec![format!(
            "{}: {}/{} completed",
            m.status,
            thousands(u64::from(done)),
            thousands(u64::from(m.sheet_count))
        )];
        for state in ["in_progress", "failed", "skipped"] {
            if let Some(n) = m.counts.get(state).filter(|n| **n > 0) {
                detail.push(format!("{} {state}", thousands(u64::from(*n))));
            }
        }
        if let Some(longest) = m.longest_seconds {
            detail.push(format!(
                "longest {}, total {}",
                format_duration(Some(longest)),
                format_duration(Some(m.total_seconds))
            ));
        }
        line.push_str(&format!(
            "    {}",
            self.style.paint(&detail.join(", "), color)
        ));
        line
    }

    /// The running and the failed sheets the view holds (up to the cap), each group saying
    /// how many more there are and how to list them.
    fn capped_sheets(&mut self, view: &SheetsView) {
        let job = self.job;
        let id = &job.job_id;
        let running: Vec<(&u32, &SheetCheckpoint)> = job
            .sheets
            .iter()
            .filter(|(_, s)| s.status == SheetStatus::InProgress)
            .collect();
        let failed: Vec<(&u32, &SheetCheckpoint)> = job
            .sheets
            .iter()
            .filter(|(_, s)| s.display_status() == "failed")
            .collect();
        let groups = [
            (
                "Running Sheets",
                running,
                view.count("in_progress"),
                "running",
            ),
            (
                "Failed Sheets",
                failed,
                view.count("failed") + view.failed_validation,
                "failed",
            ),
        ];
        for (title, shown, all, state) in groups {
            if all == 0 {
                continue;
            }
            self.heading(&format!(
                "{title} ({} of {})",
                shown.len(),
                thousands(u64::from(all))
            ));
            for (num, sheet) in &shown {
                let status = self.style.paint(
                    &sheet_status_text(sheet, self.now, self.paused()),
                    sheet_status_color(sheet.display_status()),
                );
                let error = sheet
                    .error_message
                    .as_deref()
                    .map(|m| format!(" — {}", truncate(m, 60)))
                    .unwrap_or_default();
                self.line(format!("  Sheet {num:>6}: {status}{error}"));
            }
            let more = u64::from(all).saturating_sub(shown.len() as u64);
            if more > 0 {
                self.line(format!(
                    "  ... and {} more: mozart status {id} --sheets --state {state}",
                    thousands(more)
                ));
            }
        }
    }

    /// One page of sheets (`status --sheets`): where it is in the list, and the next page.
    fn page_footer(&mut self, view: &SheetsView) {
        let id = &self.job.job_id;
        let matched = view.matched.unwrap_or(view.total);
        let offset = view.offset.unwrap_or(0);
        let states = view
            .states
            .as_ref()
            .map(|s| s.join(", "))
            .unwrap_or_else(|| "any".to_string());
        self.line(String::new());
        if view.returned == 0 {
            self.line(format!(
                "No sheets at offset {offset}: {} of {} {} match state {states}.",
                thousands(u64::from(matched)),
                thousands(u64::from(view.total)),
                noun(&view.total, "sheet", "sheets")
            ));
        } else {
            self.line(format!(
                "Sheets {}–{} of {} matching state {states} ({} {} in the job).",
                thousands(offset + 1),
                thousands(offset + u64::from(view.returned)),
                thousands(u64::from(matched)),
                thousands(u64::from(view.total)),
                noun(&view.total, "sheet", "sheets")
            ));
        }
        if let Some(next) = view.next_offset {
            let mut cmd = format!("mozart status {id} --sheets");
            for s in view.states.iter().flatten() {
                cmd.push_str(&format!(" --state {s}"));
            }
            cmd.push_str(&format!(" --offset {next}"));
            if let Some(limit) = view.limit {
                cmd.push_str(&format!(" --limit {limit}"));
            }
            self.line(format!("Next page: {cmd}"));
        }
    }

    fn movements(&mut self) {
        let groups = movement_groups(self.job);
        let mut all_instruments = std::collections::BTreeSet::new();
        for g in &groups {
            if let Some(i) = g["instrument"].as_str() {
                all_instruments.insert(i.to_string());
            }
            for i in g["instruments"].as_array().into_iter().flatten() {
                if let Some(i) = i.as_str() {
                    all_instruments.insert(i.to_string());
                }
            }
        }
        let icon = |status: &str| match status {
            "completed" => "✓",
            "running" | "in_progress" => "▶",
            "failed" => "✗",
            "pending" => "·",
            "skipped" => "⊘",
            _ => " ",
        };
        self.heading("Movements");
        for g in &groups {
            let status = g["status"].as_str().unwrap_or("pending");
            let color = sheet_status_color(if status == "running" {
                "in_progress"
            } else {
                status
            });
            let mut line = format!(
                "  {} Movement {}",
                self.style.paint(icon(status), color),
                g["movement"]
            );
            if let Some(d) = g["description"].as_str() {
                line.push_str(&format!(": {d}"));
            }
            let voices = g["voice_count"].as_u64().unwrap_or(0);
            // The conductor numbers a solo movement's only sheet voice 1; "(1 voices)" says
            // nothing, so the count shows only for harmonized movements.
            if voices > 1 {
                line.push_str(&format!(" ({voices} voices)"));
            }
            let sheet_nums: Vec<u32> = g["sheets"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_u64().map(|n| n as u32))
                        .collect()
                })
                .unwrap_or_default();
            // A solo movement whose sheet waits out a retry's backoff is retrying.
            let retry = match sheet_nums.as_slice() {
                [n] if voices <= 1 => self
                    .job
                    .sheets
                    .get(n)
                    .filter(|s| s.status == SheetStatus::Pending)
                    .and_then(|s| s.retry_wait.as_ref()),
                _ => None,
            };
            let detail = if let Some(retry) = retry {
                retry.describe(self.paused())
            } else if status == "running" && voices > 1 {
                format!("{}/{} complete", g["completed_count"], g["sheet_count"])
            } else if status == "completed" {
                // Wall time: first sheet's start to last sheet's end.
                match g["duration_seconds"].as_f64() {
                    Some(d) => format!("completed ({})", format_duration(Some(d))),
                    None => "completed".to_string(),
                }
            } else {
                status.to_string()
            };
            line.push_str(&format!("    {}", self.style.paint(&detail, color)));
            if all_instruments.len() > 1 {
                let instr = g["instrument"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        g["instruments"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(Value::as_str)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            })
                            .unwrap_or_default()
                    });
                if !instr.is_empty() {
                    line.push_str(&format!("  {instr}"));
                }
            }
            self.line(line);
            if voices > 1 {
                for n in &sheet_nums {
                    let Some(sheet) = self.job.sheets.get(n) else {
                        continue;
                    };
                    let Some(voice) = sheet.voice else { continue };
                    let label = sheet.display_status();
                    self.line(format!(
                        "      {} Voice {voice}  {}",
                        self.style.paint(icon(label), sheet_status_color(label)),
                        sheet_status_text(sheet, self.now, self.paused())
                    ));
                }
            }
        }
    }

    fn validation_failures(&mut self, cap: usize) {
        let mut failures: Vec<(u32, String)> = Vec::new();
        let mut sheets_with_failures = 0usize;
        for (num, sheet) in &self.job.sheets {
            if sheet.validation_passed != Some(false) {
                continue;
            }
            let failed: Vec<_> = sheet
                .validation_details
                .iter()
                .flatten()
                .filter(|v| !v.passed)
                .collect();
            if failed.is_empty() {
                continue;
            }
            sheets_with_failures += 1;
            if sheets_with_failures > cap {
                continue;
            }
            for v in failed {
                let desc = v
                    .description
                    .clone()
                    .or_else(|| v.rule_type.clone())
                    .unwrap_or_else(|| "unknown".into());
                let desc = self.style.paint(&desc, Color::Red);
                match v.error_message.as_deref().filter(|m| !m.is_empty()) {
                    Some(detail) => failures.push((*num, format!("{desc} — {detail}"))),
                    None => failures.push((*num, desc)),
                }
            }
        }
        if failures.is_empty() {
            return;
        }
        self.heading("Validation Failures");
        for (num, text) in failures {
            // A failing command's output follows its message on lines of its own: indented
            // under its sheet, not mistaken for the next entry.
            let mut lines = text.lines().filter(|l| !l.trim().is_empty());
            self.line(format!(
                "  Sheet {num}: {}",
                lines.next().unwrap_or_default()
            ));
            for more in lines {
                self.line(format!("      {}", more.trim_end()));
            }
        }
        if sheets_with_failures > cap {
            self.line(String::new());
            self.line(format!(
                "  ... and {} more validation failures. Run 'mozart errors {} --verbose' for details.",
                sheets_with_failures - cap,
                self.job.job_id
            ));
        }
    }

    /// Holds on the job's instruments (issue 22): an open circuit breaker or a rate limit,
    /// with the failure or the API's words and the time left.
    fn instrument_holds(&mut self) {
        if self.job.instrument_holds.is_empty() {
            return;
        }
        self.heading("Instrument Holds");
        for hold in &self.job.instrument_holds {
            let text = hold.describe();
            self.line(format!("  {}", self.style.paint(&text, Color::Yellow)));
        }
    }

    /// What the running sheets report, for at most `cap` of them (a large job runs many).
    fn live_progress(&mut self, cap: usize) {
        let reporting: Vec<(&u32, &SheetCheckpoint)> = self
            .job
            .sheets
            .iter()
            .filter(|(_, s)| {
                // A wait restored after a restart is on a sheet back to `pending`.
                (s.status == SheetStatus::Pending && s.rate_limit.is_some())
                    || (s.status == SheetStatus::InProgress
                        && (s.rate_limit.is_some()
                            || s.live.is_some()
                            || !s.progress_snapshots.is_empty()))
            })
            .collect();
        if reporting.len() > cap {
            self.heading(&format!(
                "Live Progress — {} of {} reporting sheets shown (mozart status {} --sheets --state running --json for all)",
                cap,
                reporting.len(),
                self.job.job_id
            ));
        }
        for (num, sheet) in reporting.into_iter().take(cap) {
            if let Some(wait) = &sheet.rate_limit {
                self.heading(&format!("Rate Limit — Sheet {num}"));
                self.line(format!(
                    "  Waiting on {}: {}",
                    wait.instrument,
                    wait.reason.as_deref().unwrap_or("rate limited")
                ));
                self.line(if self.paused() {
                    // A paused job starts nothing, whenever the limit ends.
                    let clears = if wait.seconds_left > 0.0 {
                        format!(
                            "the limit clears in {}",
                            format_compact_duration(wait.seconds_left.ceil())
                        )
                    } else {
                        "the limit is over".to_string()
                    };
                    format!(
                        "  Paused: {clears}; it runs again after 'mozart resume {}' (no retry spent)",
                        self.job.job_id
                    )
                } else if wait.seconds_left > 0.0 {
                    format!(
                        "  Runs again in {} (no retry spent)",
                        format_compact_duration(wait.seconds_left.ceil())
                    )
                } else {
                    "  The wait is over: it runs again now (no retry spent)".to_string()
                });
                continue;
            }
            if sheet.status != SheetStatus::InProgress {
                continue;
            }
            // What the running instrument reported so far (the conductor's own view).
            if let Some(live) = &sheet.live {
                self.heading(&format!("Live Progress — Sheet {num}"));
                self.line(format!(
                    "  Running for: {}",
                    format_duration(Some(live.elapsed_seconds))
                ));
                // The `shell` instrument runs commands, no model: it has no tool calls or
                // tokens to report, and "0" would read as a model that did nothing yet.
                if sheet.instrument_name.as_deref() != Some("shell") {
                    self.line(format!(
                        "  Tool calls: {}{}",
                        live.tool_calls,
                        live.last_tool
                            .as_deref()
                            .map(|t| format!(" (last: {t})"))
                            .unwrap_or_default()
                    ));
                    self.line(format!(
                        "  Tokens so far: {} in / {} out",
                        thousands(live.input_tokens),
                        thousands(live.output_tokens)
                    ));
                }
                if live.api_retries > 0 {
                    self.line(format!("  API retries by the CLI: {}", live.api_retries));
                }
                if let Some(e) = &live.last_event {
                    self.line(format!("  Latest: {e}"));
                }
                self.line(format!(
                    "  Output received: {} (idle {})",
                    format_bytes(live.output_bytes),
                    format_duration(Some(live.idle_seconds))
                ));
                continue;
            }
            let Some(latest) = sheet.progress_snapshots.last() else {
                continue;
            };
            self.heading(&format!("Live Progress — Sheet {num}"));
            self.line(format!(
                "  Phase: {}",
                latest.phase.as_deref().unwrap_or("unknown")
            ));
            if let Some(b) = latest.bytes_received {
                self.line(format!("  Output received: {}", format_bytes(b)));
            }
            if let Some(l) = latest.lines_received {
                self.line(format!("  Lines received: {}", thousands(l)));
            }
            if let Some(e) = latest.elapsed_seconds {
                self.line(format!("  Elapsed: {}", format_duration(Some(e))));
            }
            if let Some(t) = &sheet.last_activity_at {
                self.line(format!("  Last activity: {}", format_timestamp(t.as_str())));
            }
            if sheet.progress_snapshots.len() > 1 {
                self.line(format!(
                    "  ({} snapshots captured)",
                    sheet.progress_snapshots.len()
                ));
            }
        }
    }

    fn job_message(&mut self) {
        let Some(msg) = &self.job.error_message else {
            return;
        };
        self.line(String::new());
        if self.job.message_is_recovery_note() {
            self.line(format!("{} {msg}", self.style.paint("Note:", Color::Cyan)));
        } else {
            self.line(format!("{} {msg}", self.style.paint("Error:", Color::Red)));
        }
    }

    fn timing(&mut self) {
        let job = self.job;
        self.heading("Timing");
        self.line(format!(
            "  Created:  {}",
            format_timestamp(job.created_at.as_str())
        ));
        if let Some(t) = &job.started_at {
            self.line(format!("  Started:  {}", format_timestamp(t.as_str())));
        }
        self.line(format!(
            "  Updated:  {}",
            format_timestamp(job.updated_at.as_str())
        ));
        // Completed only for terminal states: a running job's completed_at would contradict
        // its RUNNING label (cli.md §4.1).
        let terminal = matches!(
            job.status,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled
        );
        if let (true, Some(t)) = (terminal, &job.completed_at) {
            self.line(format!("  Completed: {}", format_timestamp(t.as_str())));
        }
    }

    fn execution_stats(&mut self, active_limits: &[String]) {
        let job = self.job;
        if job.total_retry_count == 0 && job.rate_limit_waits == 0 && job.quota_waits == 0 {
            return;
        }
        self.heading("Execution Stats");
        self.line(format!("  Total retries: {}", job.total_retry_count));
        self.line(format!("  Rate limit waits: {}", job.rate_limit_waits));
        if job.quota_waits > 0 {
            self.line(format!("  Quota exhaustion waits: {}", job.quota_waits));
        }
        if job.rate_limit_waits > 0 && job.status == JobStatus::Running && !active_limits.is_empty()
        {
            self.line("  Active limits:");
            for l in active_limits {
                self.line(format!("    {}", self.style.paint(l, Color::Yellow)));
            }
        }
    }

    fn cost(&mut self) {
        let job = self.job;
        let limits = job
            .config_snapshot
            .as_ref()
            .and_then(|c| c.get("cost_limits"))
            .and_then(Value::as_object);
        let enabled = limits
            .and_then(|c| c.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let limit_text = cost_limit_text(limits, enabled);
        let confidence = job.cost_confidence();
        // Some sheet reported neither its cost nor its tokens (issue 22): what is shown is
        // only what the others reported.
        let unknown = confidence == 0.0;
        let estimated = confidence < 0.9;
        // Not rounded to whole cents: a $0.0033 sheet is not "$0.00" (mozart_client::money).
        let money = |v: f64| {
            if unknown {
                format!("at least {} (some sheets' cost is unknown)", usd(v))
            } else if estimated {
                format!("~{} (est.)", usd(v))
            } else {
                usd(v)
            }
        };
        let sheet_total: f64 = job
            .sheets
            .values()
            .filter_map(|s| s.estimated_cost)
            .filter(|c| *c > 0.0)
            .sum();
        self.heading("Cost Summary");
        if job.total_estimated_cost > 0.0 {
            self.line(format!(
                "  Cost: {} {limit_text}",
                self.style
                    .paint(&money(job.total_estimated_cost), Color::Yellow)
            ));
            self.line(format!(
                "  Input tokens:  {}",
                thousands(job.total_input_tokens)
            ));
            self.line(format!(
                "  Output tokens: {}",
                thousands(job.total_output_tokens)
            ));
            if estimated && !unknown {
                self.line(format!(
                    "  Cost is estimated (confidence {confidence:.2}): a model that ran is not \
                     in its instrument profile's price list, so a default price was used."
                ));
            }
            if job.cost_limit_reached {
                self.line(format!(
                    "  {}",
                    self.style.paint(cost_limit_words(job.status), Color::Red)
                ));
            }
        } else if sheet_total > 0.0 {
            self.line(format!(
                "  Cost: {} {limit_text} (from sheets)",
                self.style.paint(&money(sheet_total), Color::Yellow)
            ));
        } else if unknown && only_stopped_attempts_unknown(job) {
            // Nothing finished without a report: the unknown cost is that of an attempt a
            // cancel (or a conductor stop) cut short before the instrument could report it.
            self.line(format!(
                "  Cost: unknown {limit_text} — an attempt was stopped before the instrument \
                 reported its cost or tokens"
            ));
        } else if unknown && some_tokens_unpriced(job) {
            // One count without the other cannot be priced: not "neither".
            self.line(format!(
                "  Cost: unknown {limit_text} — the instrument reported no cost and only some \
                 of its tokens (input {}, output {}); pricing needs both counts: check the \
                 profile's input_tokens_path and output_tokens_path",
                thousands(unpriced_tokens(job, |s| s.input_tokens)),
                thousands(unpriced_tokens(job, |s| s.output_tokens)),
            ));
        } else if unknown {
            // The instruments that ran on the sheets whose cost is unknown (not the one the
            // score names first: a fallback may have run instead), each once.
            let names = unreported_instruments(job);
            let who = match names.is_empty() {
                true => "the instrument".to_string(),
                false => names.join(" or "),
            };
            let hint = if claude_cli_in_text_mode(job, &names) {
                " (claude_cli with output_format: text does not; stream-json does)"
            } else {
                ""
            };
            self.line(format!(
                "  Cost: unknown {limit_text} — {who} reported neither its cost nor its \
                 tokens{hint}"
            ));
        } else {
            self.line(format!("  Cost: $0.00 {limit_text}"));
        }
        // Only a job that can spend money is told to cap its spending (issue 23).
        if !enabled && !only_free_instruments(job) {
            self.line(self.style.paint(
                "  Tip: Set cost_limits.enabled: true in your score to prevent unexpected charges",
                Color::Dim,
            ));
        }
    }

    fn hooks(&mut self) {
        let job = self.job;
        let configured = configured_hooks(job);
        if job.hook_results.is_empty() {
            // Hooks still running have no result yet: not "interrupted" (the Hooks line says
            // they run).
            if configured.is_empty() || job.status != JobStatus::Completed || job.hooks_running {
                return;
            }
            self.heading("Hook Results");
            self.line(format!(
                "  {} {} configured but no results recorded",
                self.style.paint("WARNING:", Color::Yellow),
                plural(configured.len(), "on_success hook", "on_success hooks")
            ));
            self.line(
                "  Hooks may have been interrupted (e.g., conductor restart during cooldown)",
            );
            for hook in configured {
                let kind = hook
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                let label = match hook.get("description").and_then(Value::as_str) {
                    Some(d) if !d.is_empty() => format!("{kind}: {d}"),
                    _ => kind.to_string(),
                };
                match hook.get("job_path").and_then(Value::as_str) {
                    Some(p) if !p.is_empty() => self.line(format!("  • {label} → {p}")),
                    _ => self.line(format!("  • {label}")),
                }
            }
            return;
        }
        let passed = job.hook_results.iter().filter(|h| h.success).count();
        let failed = job.hook_results.len() - passed;
        self.heading("Hook Results");
        self.line(format!(
            "  Total: {} | Passed: {passed} | Failed: {failed}",
            job.hook_results.len()
        ));
        if !configured.is_empty() && job.hook_results.len() < configured.len() {
            let why = unrun_hooks_reason(job, failed)
                .map(|why| format!(": {why}"))
                .unwrap_or_default();
            self.line(format!(
                "  {} {} did not produce results{why}",
                self.style.paint("WARNING:", Color::Yellow),
                plural(configured.len() - job.hook_results.len(), "hook", "hooks")
            ));
        }
        let failures: Vec<&HookResult> = job.hook_results.iter().filter(|h| !h.success).collect();
        for hook in failures.iter().rev().take(3).rev() {
            let extra = |key: &str| hook.extra.get(key).and_then(Value::as_str);
            let kind = if hook.hook_type.is_empty() {
                extra("hook_name").unwrap_or("").to_string()
            } else {
                hook.hook_type.clone()
            };
            let kind = if kind.is_empty() {
                "unknown".to_string()
            } else {
                kind
            };
            let desc = hook.description.clone().unwrap_or_default();
            let label = if desc.is_empty() {
                kind
            } else {
                format!("{kind}: {desc}")
            };
            let error = hook
                .error_message
                .as_deref()
                .or_else(|| extra("error"))
                .unwrap_or("")
                .to_string();
            let error = if error.chars().count() > 80 {
                format!("{}...", error.chars().take(77).collect::<String>())
            } else {
                error
            };
            self.line(format!(
                "  {} {label} — {error}",
                self.style.paint("•", Color::Red)
            ));
        }
    }

    fn recent_errors(&mut self) {
        let (errors, total) = recent_errors_of(self.job, 3, self.now);
        if errors.is_empty() {
            return;
        }
        if total > errors.len() as u64 {
            self.heading(&format!(
                "Recent Errors — newest {} of {total}",
                errors.len()
            ));
        } else {
            self.heading("Recent Errors");
        }
        for e in errors {
            let message = if e.error_message.chars().count() > 60 {
                format!(
                    "{}...",
                    e.error_message.chars().take(57).collect::<String>()
                )
            } else {
                e.error_message.clone()
            };
            let mut source = if e.attempt_number == 0 {
                format!("Sheet {}, not run", e.sheet_num)
            } else {
                format!("Sheet {}, attempt {}", e.sheet_num, e.attempt_number)
            };
            if let Some(b) = &e.backend {
                source.push_str(&format!(", {b}"));
            }
            let color = match e.error_type.as_str() {
                "rate_limit" => Color::Yellow,
                "transient" => Color::Yellow,
                _ => Color::Red,
            };
            self.line(format!(
                "  • {} ({source}) - {message}",
                self.style.paint(&e.error_code, color)
            ));
        }
        self.line(String::new());
        self.line(format!(
            "  Use 'mozart errors {}' for complete error history",
            self.job.job_id
        ));
    }

    fn tail(&mut self) {
        if let Some(t) = last_activity(self.job) {
            self.heading("Last Activity");
            self.line(format!("  {}", format_timestamp(t.as_str())));
        }
        // The conductor's own breaker is shown with the other holds (`instrument_holds`).
        if let Some(cb) = circuit_breaker(self.job).filter(|cb| !cb.is_live()) {
            let source = if cb.is_persisted() {
                "persisted"
            } else {
                "inferred"
            };
            self.heading(&format!("Circuit Breaker ({source})"));
            let color = match cb.state.as_str() {
                "open" => Color::Red,
                "half_open" => Color::Yellow,
                _ => Color::Green,
            };
            self.line(format!(
                "  State: {}",
                self.style.paint(&cb.state.to_uppercase(), color)
            ));
            self.line(format!(
                "  Consecutive failures: {}",
                cb.consecutive_failures
            ));
            self.line(format!("  {}", cb.reason));
        }
        if self.job.status == JobStatus::Failed {
            self.line(String::new());
            self.line(self.style.paint(
                &format!(
                    "Run 'mozart diagnose {}' for a full diagnostic report.",
                    self.job.job_id
                ),
                Color::Yellow,
            ));
        }
    }
}

/// `128B`, `1.5KB`, `2.3MB`.
pub fn format_bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n}B")
    } else if n < 1024 * 1024 {
        format!("{:.1}KB", n as f64 / 1024.0)
    } else {
        format!("{:.1}MB", n as f64 / (1024.0 * 1024.0))
    }
}

/// Render the full per-score view. `active_limits` are pre-formatted rate-limit lines
/// (shown under Execution Stats for running jobs that waited on rate limits).
pub fn render_status(
    job: &JobCheckpoint,
    now: f64,
    active_limits: &[String],
    style: &Style,
) -> String {
    let mut v = View {
        job,
        now,
        style,
        out: Vec::new(),
    };
    v.header();
    if let Some(view) = job
        .sheets_view
        .as_ref()
        .filter(|v| v.mode == SheetMode::Page)
    {
        // `status --sheets`: the page, and how to get the next one.
        v.progress();
        if !job.sheets.is_empty() {
            v.sheet_table();
        }
        v.page_footer(view);
        let mut text = v.out.join("\n");
        text.push('\n');
        return text;
    }
    v.progress();
    v.parallel();
    v.synthesis();
    if let Some(view) = job.sheets_view.as_ref().filter(|v| v.truncated) {
        v.large_summary(view);
    } else if !job.sheets.is_empty() {
        if job.sheets.values().any(|s| s.movement.is_some()) {
            v.movements();
            v.validation_failures(usize::MAX);
        } else if job.sheets.len() >= LARGE_SCORE_THRESHOLD {
            v.sheet_summary();
            v.validation_failures(10);
        } else {
            v.sheet_table();
            v.validation_failures(usize::MAX);
        }
    }
    // A large job's summary shows a few running sheets' progress, not twenty screens.
    let large = job.sheets_view.as_ref().is_some_and(|v| v.truncated);
    v.live_progress(if large {
        LARGE_LIVE_PROGRESS
    } else {
        usize::MAX
    });
    v.instrument_holds();
    v.job_message();
    v.timing();
    v.execution_stats(active_limits);
    v.cost();
    v.hooks();
    v.recent_errors();
    v.tail();
    let mut text = v.out.join("\n");
    text.push('\n');
    text
}

/// The view for a metadata dict (no checkpoint yet, conductor.md §6.10).
pub fn render_meta_status(meta: &JobListEntry, style: &Style) -> String {
    let (id, status) = (meta.job_id(), meta.status());
    let color = match status {
        "running" => Color::Green,
        "queued" => Color::Blue,
        "failed" => Color::Red,
        _ => Color::Yellow,
    };
    let mut out = vec![
        style.paint("Score Status", Color::Bold),
        format!("  {}", style.paint(id, Color::Bold)),
        format!("  ID: {id}"),
        format!("  Status: {}", style.paint(&status.to_uppercase(), color)),
        String::new(),
        format!("  Config: {}", meta.config_path()),
        format!(
            "  Submitted: {}",
            format_epoch_minute(Some(meta.submitted_at()))
        ),
    ];
    out.push(String::new());
    out.push(style.paint(
        "Full status unavailable — state file not yet written or workspace path mismatch.",
        Color::Dim,
    ));
    let mut s = out.join("\n");
    s.push('\n');
    s
}

/// Why some configured `on_success` hooks have no result, when the job says: a cancel
/// stopped them, or a failed hook stopped the rest (`on_failure: abort`, or
/// `concert.abort_concert_on_hook_failure`).
fn unrun_hooks_reason(job: &JobCheckpoint, failed: usize) -> Option<&'static str> {
    if job.status == JobStatus::Cancelled {
        return Some("the cancel stopped them");
    }
    if failed == 0 {
        return None;
    }
    let aborts = configured_hooks(job)
        .iter()
        .any(|h| h.get("on_failure").and_then(Value::as_str) == Some("abort"));
    let concert_aborts = job
        .config_snapshot
        .as_ref()
        .and_then(|c| c.get("concert"))
        .and_then(|c| c.get("abort_concert_on_hook_failure"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if aborts {
        Some("a hook failed and on_failure: abort stopped the rest")
    } else if concert_aborts {
        Some("a hook failed and concert.abort_concert_on_hook_failure stopped the rest")
    } else {
        None
    }
}

/// Whether every sheet whose cost is unknown has no finished attempt: its unknown cost is
/// that of an attempt stopped before it ended (a cancel keeps the attempt count as it was).
/// Whether a sheet whose cost is unknown had some of its tokens reported (an input or an
/// output count, not both: both would have been priced).
fn some_tokens_unpriced(job: &JobCheckpoint) -> bool {
    unpriced_tokens(job, |s| s.input_tokens) + unpriced_tokens(job, |s| s.output_tokens) > 0
}

/// The tokens (`count`: input or output) of the sheets that ran and whose cost is unknown.
fn unpriced_tokens(job: &JobCheckpoint, count: impl Fn(&SheetCheckpoint) -> Option<u64>) -> u64 {
    job.sheets
        .values()
        .filter(|s| s.cost_confidence == 0.0 && s.attempt_count > 0)
        .filter_map(count)
        .sum()
}

/// The instruments that ran on the sheets whose cost is unknown: those of their failed
/// attempts, the ones they fell back from and the one each ran on last. `shell` reports its cost ($0) on every attempt, so it is
/// named only when nothing else ran.
fn unreported_instruments(job: &JobCheckpoint) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let unknown = |s: &SheetCheckpoint| s.cost_confidence == 0.0 && s.attempt_count > 0;
    // The failed attempts the conductor added (newest first), of those sheets.
    let failed = job.recent_attempt_errors.iter().flat_map(|r| {
        r.errors
            .iter()
            .filter(|e| job.sheets.get(&e.sheet_num).is_some_and(unknown))
            .filter_map(|e| e.instrument.as_deref())
    });
    for name in failed {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    for s in job.sheets.values().filter(|s| unknown(s)) {
        let ran = s
            .error_history
            .iter()
            .filter_map(|e| e.context.get("instrument").and_then(Value::as_str))
            .chain(
                s.instrument_fallback_history
                    .iter()
                    .map(|f| f.from.as_str()),
            )
            .chain(s.instrument_name.as_deref());
        for name in ran {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    if names.iter().any(|n| n != "shell") {
        names.retain(|n| n != "shell");
    }
    names
}

/// Whether the "Cost: unknown" line's hint about `claude_cli`'s text mode is true of `job`:
/// `claude_cli` ran on a sheet whose cost is unknown (`names`: the ones that ran, empty when
/// not recorded: the score's instrument) with `backend.output_format: text`. Not for its
/// json / stream-json modes (their CLI reports its cost: unknown there means it failed before
/// reporting), nor for the `claude-code` profile or any other instrument.
fn claude_cli_in_text_mode(job: &JobCheckpoint, names: &[String]) -> bool {
    let config = job.config_snapshot.as_ref();
    let text_mode = config
        .and_then(|c| c.pointer("/backend/output_format"))
        .and_then(Value::as_str)
        == Some("text");
    let ran_claude_cli = if names.is_empty() {
        let named = config
            .and_then(|c| c.get("instrument"))
            .and_then(Value::as_str);
        matches!(named, None | Some("claude_cli"))
    } else {
        names.iter().any(|n| n == "claude_cli")
    };
    text_mode && ran_claude_cli
}

fn only_stopped_attempts_unknown(job: &JobCheckpoint) -> bool {
    job.sheets
        .values()
        .filter(|s| s.cost_confidence == 0.0)
        .all(|s| s.attempt_count == 0)
}

/// Whether every instrument the job names is the free built-in `shell` (no API charges):
/// the snapshot's score-level instrument (or backend type), movement and per-sheet choices,
/// and the instrument each sheet ran on.
fn only_free_instruments(job: &JobCheckpoint) -> bool {
    let mut names: Vec<String> = job
        .sheets
        .values()
        .filter_map(|s| s.instrument_name.clone())
        .collect();
    if let Some(c) = job.config_snapshot.as_ref() {
        let top = c
            .get("instrument")
            .and_then(|v| v.as_str().map(str::to_owned))
            .or_else(|| {
                c.get("backend")
                    .and_then(|b| b.get("type").and_then(Value::as_str).map(str::to_owned))
            });
        names.extend(top);
        if let Some(movements) = c.get("movements").and_then(|m| m.as_object().cloned()) {
            names.extend(
                movements
                    .values()
                    .filter_map(|m| m.get("instrument").and_then(Value::as_str))
                    .map(str::to_owned),
            );
        }
        if let Some(per) = c
            .get("sheet")
            .and_then(|s| s.get("per_sheet_instruments").cloned())
            .and_then(|p| p.as_object().cloned())
        {
            names.extend(per.values().filter_map(Value::as_str).map(str::to_owned));
        }
    }
    !names.is_empty() && names.iter().all(|n| n == "shell")
}

/// The cost limits of a score as the status shows them: `(limit: $10.00)` for a job limit,
/// `(limit: $0.50 per sheet)`, `(limits: $10.00 per job, $0.50 per sheet)`, with
/// `, not enforced` when `cost_limits.enabled` is false; `(no limit set)` without one.
fn cost_limit_text(limits: Option<&serde_json::Map<String, Value>>, enabled: bool) -> String {
    let limit = |key: &str| {
        limits
            .and_then(|c| c.get(key))
            .and_then(Value::as_f64)
            .filter(|l| *l != 0.0)
    };
    let text = match (limit("max_cost_per_job"), limit("max_cost_per_sheet")) {
        (None, None) => return "(no limit set)".to_string(),
        (Some(job), None) => format!("limit: {}", usd(job)),
        (None, Some(sheet)) => format!("limit: {} per sheet", usd(sheet)),
        (Some(job), Some(sheet)) => {
            format!("limits: {} per job, {} per sheet", usd(job), usd(sheet))
        }
    };
    if enabled {
        format!("({text})")
    } else {
        format!("({text}, not enforced)")
    }
}

/// What a crossed cost limit did to a job in `status`, by the job's state: the pause is
/// what a limit does while sheets are left to run; a limit crossed when none were left
/// ends the job (completed, or failed when the sheet over its limit failed).
fn cost_limit_words(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Completed => "Cost limit reached — by the last sheet; the score completed",
        JobStatus::Failed => "Cost limit reached — no sheet was left to run; the score failed",
        JobStatus::Cancelled => "Cost limit reached — the score was paused, then cancelled",
        JobStatus::Paused => "Cost limit reached — score was paused",
        _ => "Cost limit reached",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::render::status_json::tests::sample;

    #[test]
    fn a_paused_job_waiting_out_a_rate_limit_does_not_say_it_runs_again_by_itself() {
        let mut job = sample();
        job.status = JobStatus::Paused;
        let mut sheet3 = job.sheets.get(&3).unwrap().clone();
        sheet3.status = SheetStatus::Pending;
        sheet3.rate_limit = Some(Box::new(mozart_ipc::checkpoint::RateLimitWait {
            instrument: "shell".into(),
            until: Some(1_800_000_006.0),
            seconds_left: 6.0,
            reason: Some("Rate limit detected".into()),
        }));
        job.sheets.insert(3, sheet3);
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(!text.contains("Runs again in"), "{text}");
        assert!(
            text.contains(
                "Paused: the limit clears in 6s; it runs again after 'mozart resume demo'"
            ),
            "{text}"
        );
        job.status = JobStatus::Running;
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(text.contains("Runs again in 6s (no retry spent)"), "{text}");
    }

    #[test]
    fn a_running_shell_sheet_shows_no_tool_calls_or_tokens() {
        let mut job = sample();
        job.status = JobStatus::Running;
        let mut sheet3 = job.sheets.get(&3).unwrap().clone();
        sheet3.status = SheetStatus::InProgress;
        sheet3.instrument_name = Some("shell".into());
        sheet3.live = Some(Box::new(mozart_ipc::checkpoint::LiveProgress {
            elapsed_seconds: 4.5,
            idle_seconds: 4.5,
            output_bytes: 8,
            tool_calls: 0,
            last_tool: None,
            input_tokens: 0,
            output_tokens: 0,
            api_retries: 0,
            last_event: None,
            queued: false,
        }));
        job.sheets.insert(3, sheet3.clone());
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(text.contains("Live Progress — Sheet 3"), "{text}");
        assert!(text.contains("  Output received: 8"), "{text}");
        assert!(!text.contains("Tool calls"), "{text}");
        assert!(!text.contains("Tokens so far"), "{text}");
        sheet3.instrument_name = Some("claude_cli".into());
        job.sheets.insert(3, sheet3);
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(
            text.contains("  Tool calls: 0\n  Tokens so far: 0 in / 0 out"),
            "{text}"
        );
    }

    #[test]
    fn a_validation_commands_output_is_indented_under_its_sheet() {
        let mut job = sample();
        let sheet2 = job.sheets.get_mut(&2).unwrap();
        if let Some(d) = sheet2
            .validation_details
            .as_mut()
            .and_then(|d| d.first_mut())
        {
            d.error_message = Some("Command failed (exit 2): make test\nFAILED: x\n".into());
        }
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(
            text.contains(
                "  Sheet 2: out.txt exists — Command failed (exit 2): make test\n      FAILED: x\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_rate_limit_wait_reads_the_same_seconds_everywhere() {
        // The header's hold and the sheet's wait round up alike: 10.4 s left is "11s" in
        // both, not "11s" above and "10s" below.
        let mut job = sample();
        job.status = JobStatus::Running;
        let mut sheet3 = job.sheets.get(&3).unwrap().clone();
        sheet3.status = SheetStatus::Pending;
        sheet3.rate_limit = Some(Box::new(mozart_ipc::checkpoint::RateLimitWait {
            instrument: "shell".into(),
            until: Some(1_800_000_010.4),
            seconds_left: 10.4,
            reason: Some("Rate limit detected".into()),
        }));
        job.sheets.insert(3, sheet3);
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(
            text.contains("Runs again in 11s (no retry spent)"),
            "{text}"
        );
        assert!(text.contains("waiting (rate limit, 11s left)"), "{text}");
    }

    #[test]
    fn a_paused_job_does_not_say_its_retry_comes_in_n_seconds() {
        let mut job = sample();
        job.status = JobStatus::Paused;
        let mut sheet3 = job.sheets.get(&3).unwrap().clone();
        sheet3.status = SheetStatus::Pending;
        sheet3.retry_wait = Some(Box::new(mozart_ipc::checkpoint::RetryWait {
            attempt: 2,
            max_retries: 4,
            mode: Some("normal".into()),
            at: Some(1_800_000_016.0),
            seconds_left: 16.0,
        }));
        job.sheets.insert(3, sheet3);
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(!text.contains("retrying"), "{text}");
        assert!(
            text.contains("paused before its retry (attempt 2 of 4)"),
            "{text}"
        );
        job.status = JobStatus::Running;
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(text.contains("retrying (attempt 2 of 4) in 16s"), "{text}");
    }

    #[test]
    fn a_failed_job_over_its_cost_limit_is_not_said_to_be_paused() {
        let mut job = sample();
        job.status = JobStatus::Failed;
        job.total_estimated_cost = 1.5;
        job.cost_limit_reached = true;
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(!text.contains("paused"), "{text}");
        assert!(
            text.contains("Cost limit reached — no sheet was left to run; the score failed"),
            "{text}"
        );
        job.status = JobStatus::Paused;
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(
            text.contains("Cost limit reached — score was paused"),
            "{text}"
        );
    }

    #[test]
    fn the_cost_line_names_every_limit_in_force() {
        let text = |v: Value, enabled: bool| cost_limit_text(v.as_object(), enabled);
        assert_eq!(text(serde_json::json!({}), true), "(no limit set)");
        assert_eq!(
            text(serde_json::json!({"max_cost_per_job": 10.0}), true),
            "(limit: $10.00)"
        );
        assert_eq!(
            text(serde_json::json!({"max_cost_per_sheet": 0.5}), true),
            "(limit: $0.50 per sheet)"
        );
        assert_eq!(
            text(
                serde_json::json!({"max_cost_per_job": 10.0, "max_cost_per_sheet": 0.5}),
                false
            ),
            "(limits: $10.00 per job, $0.50 per sheet, not enforced)"
        );
    }

    #[test]
    fn hooks_without_results_say_what_stopped_them() {
        let mut job = sample();
        job.config_snapshot = Some(serde_json::json!({"on_success": [
            {"type": "run_command", "command": "false", "on_failure": "abort"},
            {"type": "run_job", "job_path": "next.yaml"}
        ]}));
        assert_eq!(
            unrun_hooks_reason(&job, 1),
            Some("a hook failed and on_failure: abort stopped the rest")
        );
        assert_eq!(unrun_hooks_reason(&job, 0), None);
        job.config_snapshot = Some(serde_json::json!({
            "on_success": [{"type": "run_command", "command": "false"}, {"type": "run_job"}],
            "concert": {"abort_concert_on_hook_failure": true}
        }));
        assert_eq!(
            unrun_hooks_reason(&job, 1),
            Some("a hook failed and concert.abort_concert_on_hook_failure stopped the rest")
        );
        job.config_snapshot = Some(serde_json::json!({
            "on_success": [{"type": "run_command", "command": "false"}, {"type": "run_job"}]
        }));
        assert_eq!(unrun_hooks_reason(&job, 1), None);
        job.status = JobStatus::Cancelled;
        assert_eq!(unrun_hooks_reason(&job, 0), Some("the cancel stopped them"));
    }

    #[test]
    fn progress_bar_shows_counts_and_percent() {
        assert_eq!(
            progress_bar(1, 4),
            format!("Sheets  {}{}   25% (1/4)", "█".repeat(10), "░".repeat(30))
        );
        assert_eq!(
            progress_bar(3, 3),
            format!("Sheets  {}  100% (3/3)", "█".repeat(40))
        );
        assert!(progress_bar(0, 0).ends_with("  0% (0/0)"));
    }

    #[test]
    fn a_recovered_job_shows_a_note_and_a_real_error_an_error() {
        let mut job = sample();
        job.status = JobStatus::Running;
        job.error_message = None;
        job.pid = Some(u32::MAX - 1);
        job.mark_zombie_detected(None);
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(
            text.contains("\nNote: Recovered from stale running state (PID"),
            "{text}"
        );
        assert!(!text.contains("Error: Recovered"), "{text}");

        // A real error that merely mentions resuming is still an error.
        let mut job = sample();
        job.error_message = Some("sheet 2 failed; fix it and it is ready to resume".into());
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(
            text.contains("\nError: sheet 2 failed; fix it and it is ready to resume"),
            "{text}"
        );
    }

    #[test]
    fn small_scores_get_a_sheet_table() {
        let text = render_status(&sample(), 1_800_000_000.0, &[], &Style::plain());
        let expected_table = "\
Sheet Details
  #  Description  Instrument  Status            Attempts  Validation  Error
  1  Draft        command     completed (1.2s)  1         ✓ Pass
  2                           failed            2         ✗ Fail      validation failed: out.txt missing
  3                           failed            3         -           xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...
";
        assert!(text.contains(expected_table), "{text}");
        assert!(text.starts_with(
            "Score Status\n  Demo score\n  ID: demo\n  Status: FAILED\n  Duration: 55.0s\n"
        ));
        assert!(text.contains("(2/3)"));
        assert!(text.contains("\nValidation Failures\n  Sheet 2: out.txt exists — missing\n"));
        assert!(text.contains("\nError: Sheet 3 failed\n"));
        assert!(text.contains(
            "\nTiming\n  Created:  2026-01-02 03:04:05 UTC\n  Updated:  2026-01-02 03:05:00 UTC\n  Completed: 2026-01-02 03:05:00 UTC\n"
        ));
        assert!(text.contains("\nExecution Stats\n  Total retries: 2\n  Rate limit waits: 0\n"));
        assert!(text.contains("\nCost Summary\n  Cost: $0.00 (no limit set)\n  Tip: "));
        assert!(text.contains(&format!(
            "\nRecent Errors\n  • E001 (Sheet 3, attempt 3) - {}...\n  • E201 (Sheet 2, attempt 2) - validation failed: out.txt missing\n",
            "x".repeat(57)
        )));
        assert!(text.contains("\nLast Activity\n  2026-01-02 03:06:00 UTC\n"));
        assert!(text.contains(
            "\nCircuit Breaker (inferred)\n  State: CLOSED\n  Consecutive failures: 1\n"
        ));
        assert!(text.ends_with("Run 'mozart diagnose demo' for a full diagnostic report.\n"));
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn the_header_says_where_the_sheet_logs_are() {
        let mut job = sample();
        job.workspace = Some("/w".into());
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(
            text.starts_with("Score Status\n  Demo score\n  ID: demo\n  Status: FAILED\n  Duration: 55.0s\n  Sheet logs: /w/logs (sheets past 1 s or 4,000 bytes; `mozart logs demo --sheet N` shows any sheet's output)\n"),
            "{text}"
        );
    }

    #[test]
    fn large_scores_get_a_compact_summary() {
        let mut job = sample();
        job.total_sheets = 60;
        job.config_snapshot = None;
        for n in 4..=60 {
            job.sheets.insert(n, SheetCheckpoint::new(n));
        }
        job.sheets.get_mut(&4).unwrap().status = SheetStatus::InProgress;
        let text = render_status(&job, 1_800_000_000.0, &[], &Style::plain());
        assert!(!text.contains("Sheet Details"));
        assert!(text.contains(
            "\nSheet Summary\n  60 sheets: 1 completed, 2 failed, 1 in_progress, 56 pending\n  Instruments: command (1)\n"
        ), "{text}");
        assert!(text.contains("\nActive & Failed Sheets\n  Sheet    2: failed — validation failed: out.txt missing...\n"));
        assert!(text.contains("  Sheet    4: in_progress\n"));
    }

    #[test]
    fn completed_jobs_with_unrun_hooks_warn() {
        let mut job = sample();
        job.status = JobStatus::Completed;
        job.error_message = None;
        let text = render_status(&job, 0.0, &[], &Style::plain());
        assert!(text.contains(
            "\nHook Results\n  WARNING: 1 on_success hook configured but no results recorded\n"
        ));
        assert!(text.contains("  • run_job → next.yaml\n"));
        assert!(!text.contains("mozart diagnose"));
    }

    #[test]
    fn metadata_view_says_full_status_is_unavailable() {
        let meta = serde_json::from_value(serde_json::json!({"job_id": "q", "status": "queued",
            "config_path": "/x/q.yaml", "workspace": "/w", "submitted_at": 1_795_294_390.0}))
        .unwrap();
        assert_eq!(
            render_meta_status(&meta, &Style::plain()),
            "Score Status\n  q\n  ID: q\n  Status: QUEUED\n\n  Config: /x/q.yaml\n  Submitted: 2026-11-21 20:53\n\nFull status unavailable — state file not yet written or workspace path mismatch.\n"
        );
    }

    #[test]
    fn bytes_are_humanized() {
        for (n, want) in [(128, "128B"), (1536, "1.5KB"), (2_411_725, "2.3MB")] {
            assert_eq!(format_bytes(n), want);
        }
    }
}
