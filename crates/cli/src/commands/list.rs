//! `mozart list` (cli.md §4.2), in pages: a listing that does not show every matching job
//! says so and how to see the rest (upstream stops at `--limit` silently).

use std::path::PathBuf;

use mozart_ipc::methods;
use mozart_ipc::status::{JobList, JobListEntry, JobPage};
use mozart_ipc::types::ListPageParams;
use serde_json::json;

use super::status::{job_call, JobCallError};
use crate::output::print_json;
use crate::render::{jobs, Style};
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart list`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show all scores including completed, failed, and cancelled (still in pages of --limit).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Filter by score status (queued, running, completed, failed, paused, cancelled).
    #[arg(short = 's', long = "status", value_name = "TEXT", ignore_case = true,
          value_parser = clap::builder::PossibleValuesParser::new(
              ["queued", "running", "completed", "failed", "paused", "cancelled", "pending"]))]
    pub status: Option<String>,
    /// Maximum number of scores to display, newest first (0 for no limit). When more match,
    /// the output says how many and how to see them.
    #[arg(short = 'l', long = "limit", default_value_t = 20)]
    pub limit: u64,
    /// Skip this many scores first (the next page: --offset 20).
    #[arg(short = 'o', long = "offset", default_value_t = 0)]
    pub offset: u64,
    /// Output JSON for machine parsing: {"jobs": [...], "total", "offset", "limit"}.
    #[arg(id = "json", long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Reserved for future per-workspace filtering.
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
}

/// Run `mozart list`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let mut page = fetch(globals, &args)?;
    if args.output.is_json() {
        // A paused job whose sheets still run reads `pausing`, as in `status --json`; the
        // `pausing` key says how many still run.
        for job in &mut page.jobs.0 {
            if let (Some(_), JobListEntry::Live(j)) = (job.pausing(), &mut *job) {
                j.status = "pausing".into();
            }
        }
        print_json(&json!({
            "jobs": page.jobs,
            "total": page.total,
            "offset": page.offset,
            "limit": page.limit,
        }));
        return Ok(0);
    }
    let style = Style::for_stdout();
    let note = cut_note(&page, &args);
    if page.jobs.0.is_empty() {
        if let Some(note) = note {
            println!("{note}");
            return Ok(0);
        }
    }
    let text = jobs::render_list_page(
        &page.jobs.0,
        args.all,
        args.status.as_deref(),
        note.as_deref(),
        &style,
    );
    print!("{text}");
    Ok(0)
}

/// Which statuses the flags ask for: `--status` wins over `--all`; by default active jobs.
fn statuses(args: &Args) -> Option<Vec<String>> {
    match args.status.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => Some(vec![s.to_lowercase()]),
        None if args.all => None,
        None => Some(
            jobs::ACTIVE_STATUSES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
    }
}

/// One page from the conductor (`job.list_page`); from a conductor without it (upstream's),
/// the page is cut from its `job.list`.
fn fetch(globals: &Globals, args: &Args) -> Result<JobPage, CliError> {
    let params = ListPageParams {
        statuses: statuses(args),
        limit: Some(args.limit).filter(|n| *n > 0),
        offset: args.offset,
        ..Default::default()
    };
    match job_call::<_, JobPage>(globals, methods::JOB_LIST_PAGE, &params, args.output) {
        Ok(page) => Ok(page),
        Err(JobCallError::Other(mozart_client::ClientError::Unsupported { .. })) => {
            let all: JobList = job_call(globals, methods::JOB_LIST, (), args.output)
                .map_err(|e| e.into_cli(args.output))?;
            Ok(page_of(&all.0, &params))
        }
        Err(e) => Err(e.into_cli(args.output)),
    }
}

/// A page cut locally from a whole listing.
fn page_of(all: &[JobListEntry], p: &ListPageParams) -> JobPage {
    let matching: Vec<&JobListEntry> = all
        .iter()
        .filter(|j| {
            p.statuses
                .as_ref()
                .is_none_or(|st| st.contains(&j.status().to_lowercase()))
        })
        .collect();
    let skip = usize::try_from(p.offset).unwrap_or(usize::MAX);
    let take = p
        .limit
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    JobPage {
        jobs: JobList(
            matching
                .iter()
                .skip(skip)
                .take(take)
                .map(|j| (*j).clone())
                .collect(),
        ),
        total: matching.len() as u64,
        offset: p.offset,
        limit: p.limit,
        ..Default::default()
    }
}

/// The line that says a listing is cut: which rows are shown of how many, and the flags
/// that show the others. None when every matching job is shown.
fn cut_note(page: &JobPage, args: &Args) -> Option<String> {
    let shown = page.jobs.0.len() as u64;
    if page.offset == 0 && shown >= page.total {
        return None;
    }
    let mut base = vec!["mozart list".to_string()];
    if let Some(s) = &args.status {
        base.push(format!("--status {s}"));
    } else if args.all {
        base.push("--all".to_string());
    }
    let base = base.join(" ");
    let first = page.offset + 1;
    let last = page.offset + shown;
    let mut more = Vec::new();
    if last < page.total {
        let limit = if args.limit == 0 { shown } else { args.limit };
        more.push(format!("next page: {base} --offset {last} --limit {limit}"));
        more.push(format!("every one: {base} --limit 0"));
    }
    if shown == 0 {
        return Some(format!(
            "Nothing at offset {} ({} in all). First page: {base}",
            page.offset,
            mozart_config::plural(page.total, "score", "scores")
        ));
    }
    let head = format!(
        "Showing {first}–{last} of {}",
        mozart_config::plural(page.total, "score", "scores")
    );
    Some(if more.is_empty() {
        format!("{head}.")
    } else {
        format!("{head}; {}.", more.join("; "))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn page(shown: usize, total: u64, offset: u64) -> JobPage {
        let row = |i: usize| {
            serde_json::from_value::<JobListEntry>(json!({"job_id": format!("j{i}"),
                "status": "completed", "config_path": "/s.yaml", "workspace": "/w",
                "submitted_at": 1.0, "started_at": null}))
            .unwrap()
        };
        JobPage {
            jobs: JobList((0..shown).map(row).collect()),
            total,
            offset,
            limit: Some(20),
            ..Default::default()
        }
    }

    fn args(all: bool, limit: u64) -> Args {
        Args {
            all,
            status: None,
            limit,
            offset: 0,
            output: OutputMode::Human,
            workspace: None,
        }
    }

    #[test]
    fn a_cut_listing_says_so_and_how_to_see_the_rest() {
        assert_eq!(cut_note(&page(5, 5, 0), &args(true, 20)), None);
        assert_eq!(
            cut_note(&page(20, 100, 0), &args(true, 20)).unwrap(),
            "Showing 1–20 of 100 scores; next page: mozart list --all --offset 20 --limit 20; every one: mozart list --all --limit 0."
        );
        assert_eq!(
            cut_note(&page(10, 100, 90), &args(true, 20)).unwrap(),
            "Showing 91–100 of 100 scores."
        );
        assert!(cut_note(&page(0, 3, 40), &args(false, 20))
            .unwrap()
            .starts_with("Nothing at offset 40 (3 scores in all)."));
    }

    #[test]
    fn an_old_conductor_s_listing_is_paged_here() {
        let all = page(30, 30, 0).jobs.0;
        let p = ListPageParams {
            statuses: Some(vec!["completed".into()]),
            limit: Some(20),
            offset: 20,
            ..Default::default()
        };
        let got = page_of(&all, &p);
        assert_eq!((got.jobs.0.len(), got.total), (10, 30));
    }
}
