//! Job listings: the `mozart status` overview and `mozart list` (cli.md §4.1, §4.2), from
//! the `job.list` rows of `mozart_ipc::status` (two shapes, conductor.md §6.2 and §9; only
//! `job_id`, `status`, `workspace` and `submitted_at` are relied upon).

use mozart_ipc::status::JobListEntry;
use serde_json::{json, Value};

use super::style::{job_status_color, Color, Style};
use super::time::{format_duration, format_epoch_minute, format_uptime};

/// Statuses counted as active by the overview and `list`'s default filter.
pub const ACTIVE_STATUSES: [&str; 3] = ["queued", "running", "paused"];
/// Statuses shown under RECENT in the overview.
pub const RECENT_STATUSES: [&str; 3] = ["completed", "failed", "cancelled"];
/// How many recent jobs the overview shows.
pub const RECENT_LIMIT: usize = 5;
/// How many active jobs the overview shows (newest first); when more are active it says
/// how many and how to list them all (ours: upstream lists every one, 1,000 lines for
/// 1,000 jobs).
pub const ACTIVE_LIMIT: usize = 20;

fn status_of(job: &JobListEntry) -> String {
    job.status().to_lowercase()
}

/// The status a person reads: `pausing (N running)` while a paused job's sheets still run.
fn shown_status(job: &JobListEntry) -> String {
    match job.pausing() {
        Some(n) => format!("pausing ({n} running)"),
        None => status_of(job),
    }
}

/// Split `job.list` into active jobs (conductor order) and the newest five finished ones.
pub fn split_overview(jobs: &[JobListEntry]) -> (Vec<JobListEntry>, Vec<JobListEntry>) {
    let active: Vec<JobListEntry> = jobs
        .iter()
        .filter(|j| ACTIVE_STATUSES.contains(&status_of(j).as_str()))
        .cloned()
        .collect();
    let mut recent: Vec<JobListEntry> = jobs
        .iter()
        .filter(|j| RECENT_STATUSES.contains(&status_of(j).as_str()))
        .cloned()
        .collect();
    recent.sort_by(|a, b| {
        b.submitted_at()
            .partial_cmp(&a.submitted_at())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    recent.truncate(RECENT_LIMIT);
    (active, recent)
}

/// The overview's `--json` document. `active_total` is how many jobs are active in all:
/// `active_count` says that many, `active` holds the newest [`ACTIVE_LIMIT`] of them, and
/// when that is not all of them `active_shown` says how many it holds.
pub fn overview_json(
    active: &[JobListEntry],
    active_total: usize,
    recent: &[JobListEntry],
) -> Value {
    let mut doc = json!({
        "conductor": "running",
        "active_count": active_total.max(active.len()),
        "active": active,
        "recent_count": recent.len(),
        "recent": recent,
    });
    if active_total > active.len() {
        doc["active_shown"] = json!(active.len());
    }
    doc
}

fn overview_line(job: &JobListEntry, show_elapsed: bool, now: f64, style: &Style) -> String {
    let id = job.job_id();
    let status = {
        let s = shown_status(job);
        if s.is_empty() {
            "unknown".to_string()
        } else {
            s
        }
    };
    let mut line = format!(
        "  {id:<24} {}",
        style.paint(
            &match job.pausing() {
                Some(n) => format!("PAUSING ({n} running)"),
                None => status.to_uppercase(),
            },
            job_status_color(job.shown_status())
        )
    );
    let ts = job.submitted_at();
    if ts != 0.0 {
        if !show_elapsed {
            line.push_str(&format!("  {}", format_epoch_minute(Some(ts))));
        } else if status == "running" {
            line.push_str(&format!("  {} elapsed", format_duration(Some(now - ts))));
        }
    }
    line
}

/// The human overview (cli.md §4.1 **[verified]** layout).
pub fn render_overview(
    uptime_seconds: Option<f64>,
    active: &[JobListEntry],
    active_total: usize,
    recent: &[JobListEntry],
    now: f64,
    style: &Style,
) -> String {
    let mut out = Vec::new();
    let uptime = format_uptime(uptime_seconds);
    let mut head = format!(
        "{} {}",
        style.paint("Mozart Conductor:", Color::Bold),
        style.paint("RUNNING", Color::Green)
    );
    if !uptime.is_empty() {
        head.push_str(&format!("  ({uptime})"));
    }
    out.push(head);
    out.push(String::new());
    if active.is_empty() {
        out.push(style.paint("No active scores.", Color::Dim));
    } else {
        out.push(style.paint("ACTIVE", Color::Bold));
        out.extend(active.iter().map(|j| overview_line(j, true, now, style)));
        if active_total > active.len() {
            out.push(style.paint(
                &format!(
                    "  Showing the newest {} of {active_total} active scores; every one: mozart list --limit 0",
                    active.len()
                ),
                Color::Dim,
            ));
        }
    }
    if !recent.is_empty() {
        out.push(String::new());
        out.push(style.paint("RECENT", Color::Bold));
        out.extend(recent.iter().map(|j| overview_line(j, false, now, style)));
    }
    out.push(String::new());
    let summary = match active_total.max(active.len()) {
        0 => "No active scores".to_string(),
        1 => "1 score active".to_string(),
        n => format!("{n} scores active"),
    };
    out.push(style.paint(
        &format!("{summary}. Use 'mozart status <score>' for details."),
        Color::Dim,
    ));
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// `list`'s filter: `--status` (case-insensitive) wins over `--all`; by default only active
/// jobs; then the first `limit` in conductor order.
pub fn filter_list(
    jobs: &[JobListEntry],
    all: bool,
    status: Option<&str>,
    limit: usize,
) -> Vec<JobListEntry> {
    jobs.iter()
        .filter(|j| match status {
            Some(s) if !s.is_empty() => status_of(j) == s.to_lowercase(),
            _ => all || ACTIVE_STATUSES.contains(&status_of(j).as_str()),
        })
        .take(limit)
        .cloned()
        .collect()
}

/// The human `list` output for already-filtered jobs.
pub fn render_list(
    jobs: &[JobListEntry],
    all: bool,
    status: Option<&str>,
    style: &Style,
) -> String {
    render_list_page(jobs, all, status, None, style)
}

/// [`render_list`] with the footer replaced (a page that does not show every match says
/// so there instead of `N score(s)`).
pub fn render_list_page(
    jobs: &[JobListEntry],
    all: bool,
    status: Option<&str>,
    footer: Option<&str>,
    style: &Style,
) -> String {
    if jobs.is_empty() {
        let text = match status {
            Some(s) if !s.is_empty() => style.paint(&format!("No {s} scores found."), Color::Dim),
            _ if all => style.paint("No scores found.", Color::Dim),
            _ => format!(
                "{} Use {} to see score history.",
                style.paint("No active scores.", Color::Dim),
                style.paint("--all", Color::Bold)
            ),
        };
        return format!("{text}\n");
    }
    let rows: Vec<Vec<super::table::Cell>> = jobs
        .iter()
        .map(|j| {
            let status = shown_status(j);
            let color = job_status_color(j.shown_status());
            vec![
                j.job_id().into(),
                super::table::Cell::colored(status, color),
                j.workspace().into(),
                format_epoch_minute(Some(j.submitted_at())).into(),
            ]
        })
        .collect();
    let mut lines = super::table::render(
        &["SCORE ID", "STATUS", "WORKSPACE", "SUBMITTED"],
        &rows,
        "",
        "   ",
        style,
    );
    lines.push(String::new());
    let count = mozart_config::plural(jobs.len(), "score", "scores");
    lines.push(style.paint(footer.unwrap_or(&count), Color::Dim));
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn job(id: &str, status: &str, submitted: f64) -> JobListEntry {
        serde_json::from_value(json!({"job_id": id, "status": status,
            "config_path": format!("/s/{id}.yaml"), "workspace": format!("/w/{id}"),
            "submitted_at": submitted, "started_at": null}))
        .unwrap()
    }

    #[test]
    fn overview_matches_the_verified_layout() {
        let jobs = vec![
            job("chain", "completed", 1_795_294_330.0),
            job("slow", "completed", 1_795_294_390.0),
        ];
        let (active, recent) = split_overview(&jobs);
        assert_eq!(
            render_overview(
                Some(6.4),
                &active,
                active.len(),
                &recent,
                1_795_294_400.0,
                &Style::plain()
            ),
            "Mozart Conductor: RUNNING  (uptime 6s)

No active scores.

RECENT
  slow                     COMPLETED  2026-11-21 20:53
  chain                    COMPLETED  2026-11-21 20:52

No active scores. Use 'mozart status <score>' for details.
"
        );
    }

    #[test]
    fn overview_lists_active_jobs_with_elapsed_time() {
        let jobs: Vec<JobListEntry> =
            vec![job("run", "running", 1000.0), job("wait", "queued", 1010.0)]
                .into_iter()
                .chain((0..7).map(|i| job(&format!("old{i}"), "failed", f64::from(i))))
                .collect();
        let (active, recent) = split_overview(&jobs);
        assert_eq!(recent.len(), 5);
        assert_eq!(recent[0].job_id(), "old6");
        let text = render_overview(None, &active, 2, &recent, 1192.5, &Style::plain());
        assert!(text.starts_with("Mozart Conductor: RUNNING\n\nACTIVE\n  run                      RUNNING  3m 12s elapsed\n  wait                     QUEUED\n"), "{text}");
        assert!(text.ends_with("\n2 scores active. Use 'mozart status <score>' for details.\n"));
        let doc = overview_json(&active, 2, &recent);
        assert_eq!(doc["active_count"], 2);
        assert!(doc.get("active_shown").is_none());
        let cut = render_overview(None, &active, 1000, &recent, 1192.5, &Style::plain());
        assert!(cut.contains("\n  Showing the newest 2 of 1000 active scores; every one: mozart list --limit 0\n"), "{cut}");
        assert!(cut.ends_with("\n1000 scores active. Use 'mozart status <score>' for details.\n"));
        let doc = overview_json(&active, 1000, &recent);
        assert_eq!(
            (doc["active_count"].as_u64(), doc["active_shown"].as_u64()),
            (Some(1000), Some(2))
        );
        assert_eq!(doc["recent_count"], 5);
        assert_eq!(doc["conductor"], "running");
    }

    #[test]
    fn list_filters_and_aligns() {
        let jobs = vec![
            job("a", "running", 1_795_294_390.0),
            job("bb", "COMPLETED", 1_795_294_390.0),
            job("c", "paused", 1_795_294_390.0),
        ];
        assert_eq!(filter_list(&jobs, false, None, 20).len(), 2);
        assert_eq!(filter_list(&jobs, true, None, 20).len(), 3);
        assert_eq!(filter_list(&jobs, false, Some("completed"), 20).len(), 1);
        assert_eq!(filter_list(&jobs, true, None, 1).len(), 1);
        let shown = filter_list(&jobs, false, None, 20);
        assert_eq!(
            render_list(&shown, false, None, &Style::plain()),
            "SCORE ID   STATUS    WORKSPACE   SUBMITTED
a          running   /w/a        2026-11-21 20:53
c          paused    /w/c        2026-11-21 20:53

2 scores
"
        );
    }

    #[test]
    fn empty_lists_say_why() {
        let p = Style::plain();
        assert_eq!(
            render_list(&[], false, None, &p),
            "No active scores. Use --all to see score history.\n"
        );
        assert_eq!(render_list(&[], true, None, &p), "No scores found.\n");
        assert_eq!(
            render_list(&[], true, Some("failed"), &p),
            "No failed scores found.\n"
        );
    }
}
