//! `mozart history SCORE_ID` (cli.md §5.4): the attempts the conductor recorded for a
//! score (`job.history`, conductor.md §8.11).

use std::path::PathBuf;

use mozart_ipc::methods;
use mozart_ipc::status::{HistoryRecord, HistoryResult};
use mozart_ipc::types::HistoryParams;
use serde_json::{json, Value};

use super::status::{absolute_text, check_score_id, failed, ipc_text, job_call, JobCallError};
use crate::output::print_json;
use crate::render::table::{self, Cell};
use crate::render::time::thousands;
use crate::render::{Color, Style};
use crate::{CliError, Globals, OutputMode};

/// The JSON answer when no history store exists (cli.md §5.4).
pub const NO_HISTORY_ERROR: &str = "Execution history requires SQLite state backend";
/// Its hint.
pub const NO_HISTORY_HINT: &str = "Re-run the score with SQLite state to enable history tracking";

/// Arguments of `mozart history`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to show execution history for.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: String,
    /// Filter by specific sheet number.
    #[arg(short = 'b', long = "sheet", value_name = "INTEGER")]
    pub sheet: Option<u32>,
    /// Maximum number of records to show, newest first (0: every one).
    #[arg(
        short = 'n',
        long = "limit",
        default_value_t = 50,
        value_name = "INTEGER"
    )]
    pub limit: u32,
    /// Workspace directory to search for score state (debug override).
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
    /// Output history as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// What the conductor (or the workspace) had to say.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    /// The attempt records, newest first, as the conductor sent them.
    pub records: Vec<HistoryRecord>,
    /// False when there is no history store at all.
    pub has_history: bool,
    /// How many records match in all, listed or not.
    pub total: u64,
}

/// Run `mozart history`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let id = args.score_id.as_str();
    check_score_id(id)?;
    let history = fetch(globals, id, &args)?;
    if !history.has_history {
        if args.output.is_json() {
            print_json(&json!({"error": NO_HISTORY_ERROR, "hint": NO_HISTORY_HINT}));
        } else {
            let style = Style::for_stdout();
            println!(
                "{}",
                style.paint(
                    "Execution history requires the SQLite state backend.",
                    Color::Yellow
                )
            );
            println!(
                "{}",
                style.paint(
                    "History is only recorded when using SQLite state storage.",
                    Color::Dim
                )
            );
        }
        return Ok(1);
    }
    if let (Some(n), true) = (args.sheet, history.records.is_empty()) {
        // No attempt of that sheet: say so only of a sheet the score has.
        let query = mozart_ipc::sheet_view::SheetQuery {
            mode: mozart_ipc::sheet_view::SheetMode::Page,
            offset: 0,
            limit: Some(1),
            ..Default::default()
        };
        if let Ok(mozart_ipc::status::JobStatusResult::Checkpoint(job)) =
            super::status::fetch(globals, id, args.workspace.as_deref(), query, args.output)
        {
            check_sheet(id, n, job.total_sheets, args.output)?;
        }
    }
    if args.output.is_json() {
        print_json(&history_json(id, &history, args.sheet));
    } else {
        print!(
            "{}",
            crate::output::terminal_safe(&render_history(
                id,
                &history,
                args.sheet,
                &Style::for_stdout()
            ))
        );
    }
    Ok(0)
}

/// `--sheet N` of a score with `total` sheets: an error naming the sheets it has when it has
/// no sheet `n` (not "no errors" or "no history" of a sheet that does not exist).
pub(crate) fn check_sheet(id: &str, n: u32, total: u32, mode: OutputMode) -> Result<(), CliError> {
    if n >= 1 && n <= total {
        return Ok(());
    }
    Err(failed(
        format!(
            "Score {id} has no sheet {n} (it has {}).",
            mozart_config::plural(total, "sheet", "sheets")
        ),
        &[&format!("See its sheets with: mozart status {id} --sheets")],
        mode,
    ))
}

fn fetch(globals: &Globals, id: &str, args: &Args) -> Result<History, CliError> {
    let params = HistoryParams {
        job_id: id.to_string(),
        workspace: args.workspace.as_deref().map(absolute_text),
        sheet_num: args.sheet,
        limit: args.limit,
    };
    match job_call::<_, HistoryResult>(globals, methods::JOB_HISTORY, params, args.output) {
        Ok(result) => Ok(History {
            // An upstream conductor does not say: what it sent is all that is known.
            total: result.total.unwrap_or(result.records.len() as u64),
            records: result.records,
            has_history: result.has_history,
        }),
        Err(JobCallError::Job(_)) => Err(failed(
            format!("Score not found: {id}"),
            &["Run 'mozart list' to see available scores."],
            args.output,
        )),
        Err(JobCallError::Cli(err)) => match args.workspace.as_deref() {
            // Without a conductor, upstream reads the workspace's `.mozart-state.db`; our
            // conductor keeps attempts in its registry, so there is no workspace store to
            // read unless an upstream run left one behind.
            Some(dir) if dir.join(".mozart-state.db").exists() => Err(failed(
                format!(
                    "Reading execution history from {} without a conductor is not supported yet",
                    dir.join(".mozart-state.db").display()
                ),
                &["Start the conductor and retry: mozart start"],
                args.output,
            )),
            // Every job's attempts are in the conductor's registry: not "SQLite state backend
            // required" (they were recorded), but the conductor to read them.
            Some(_) => Err(failed(
                format!(
                    "Mozart conductor is not running: the execution history of every job is in its registry ({}), not in the workspace",
                    crate::conductor_client::registry_text(globals)
                ),
                &[&format!(
                    "Start the conductor (mozart start), then run: mozart history {id}"
                )],
                args.output,
            )),
            None => Err(err),
        },
        Err(JobCallError::Other(err)) => {
            let hint = if matches!(
                err,
                mozart_client::ClientError::Transport(mozart_ipc::IpcError::ResponseTooLarge { .. })
            ) {
                format!(
                    "Too many records for one answer: ask for fewer (mozart history {id} --limit 10000) or one sheet's (--sheet N)"
                )
            } else {
                super::status::other_error_hint(&err, id)
            };
            Err(failed(ipc_text(err), &[&hint], args.output))
        }
    }
}

/// `mozart history --json`: records as the conductor sent them, plus the sheet filter.
/// `total_records` is every matching record (upstream: those returned); ours, `returned`
/// and `truncated` say how many of them `records` holds.
pub fn history_json(id: &str, history: &History, sheet: Option<u32>) -> Value {
    let records = &history.records;
    let total = history.total.max(records.len() as u64);
    let mut doc = json!({
        "job_id": id,
        "total_records": total,
        "records": records,
        "returned": records.len(),
        "truncated": (records.len() as u64) < total,
    });
    if let (Some(s), Some(obj)) = (sheet, doc.as_object_mut()) {
        obj.insert("sheet_filter".into(), json!(s));
    }
    doc
}

/// The human table: Sheet, Attempt, Exit Code, Duration, Timestamp (cli.md §5.4).
pub fn render_history(id: &str, history: &History, sheet: Option<u32>, style: &Style) -> String {
    let records = &history.records;
    let mut out: Vec<String> = Vec::new();
    if records.is_empty() {
        out.push(format!(
            "{} {id}",
            style.paint("No execution history found for score:", Color::Dim)
        ));
        if let Some(s) = sheet {
            out.push(style.paint(&format!("Sheet filter: {s}"), Color::Dim));
        }
        out.push(String::new());
        out.push(style.paint(
            "Hint: every attempt is recorded as it ends or is cut short; none has yet for this score (or sheet).",
            Color::Dim,
        ));
        return out.join("\n") + "\n";
    }
    let rows: Vec<Vec<Cell>> = records
        .iter()
        .map(|r| {
            let exit = match r.exit_code {
                // Cut short by a cancel or a conductor stop: no exit code, no result.
                _ if r.outcome.as_deref() == Some("interrupted") => {
                    Cell::colored("interrupted", Color::Yellow)
                }
                Some(0) => Cell::colored("0", Color::Green),
                Some(code) => Cell::colored(code.to_string(), Color::Red),
                None => Cell::colored("-", Color::Dim),
            };
            let duration = r
                .duration_seconds
                .map(|d| {
                    // A run of a few milliseconds did take time: not "0.0s".
                    if d > 0.0 && d < 0.05 {
                        "<0.1s".to_string()
                    } else {
                        format!("{d:.1}s")
                    }
                })
                .unwrap_or_else(|| "-".into());
            let timestamp: String = r.executed_at.chars().take(19).collect();
            vec![
                Cell::colored(r.sheet_num.to_string(), Color::Cyan),
                Cell::from(r.attempt_num.to_string()),
                exit,
                Cell::from(duration),
                Cell::colored(timestamp, Color::Dim),
            ]
        })
        .collect();
    out.push(style.paint(&format!("Execution History: {id}"), Color::Bold));
    out.extend(table::render(
        &["Sheet", "Attempt", "Exit Code", "Duration", "Timestamp"],
        &rows,
        "",
        "  ",
        style,
    ));
    out.push(String::new());
    let total = history.total.max(records.len() as u64);
    if (records.len() as u64) < total {
        // A cut list says so, with the true total and how to see the rest.
        let sheet_arg = sheet.map(|s| format!(" --sheet {s}")).unwrap_or_default();
        out.push(style.paint(
            &format!(
                "Showing the newest {} of {} record(s); every one: mozart history {id}{sheet_arg} --limit 0",
                thousands(records.len() as u64),
                thousands(total)
            ),
            Color::Yellow,
        ));
    } else {
        out.push(style.paint(&format!("Total: {} record(s)", records.len()), Color::Dim));
    }
    out.join("\n") + "\n"
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn record(sheet: u32, attempt: u32, exit: Option<i32>, secs: Option<f64>) -> HistoryRecord {
        HistoryRecord {
            id: 1,
            job_id: "j".into(),
            sheet_num: sheet,
            attempt_num: attempt,
            prompt: None,
            output: Some("x".into()),
            exit_code: exit,
            duration_seconds: secs,
            executed_at: "2026-11-21T22:27:24.622150Z".into(),
            outcome: None,
        }
    }

    fn all(records: Vec<HistoryRecord>) -> History {
        History {
            total: records.len() as u64,
            records,
            has_history: true,
        }
    }

    #[test]
    fn table_shows_exit_codes_durations_and_second_precision_times() {
        let records = vec![
            record(2, 1, Some(1), Some(12.345)),
            record(1, 1, None, None),
        ];
        let text = render_history("j", &all(records), None, &Style::plain());
        assert_eq!(
            text,
            "Execution History: j\n\
             Sheet  Attempt  Exit Code  Duration  Timestamp\n\
             2      1        1          12.3s     2026-11-21T22:27:24\n\
             1      1        -          -         2026-11-21T22:27:24\n\
             \n\
             Total: 2 record(s)\n"
        );
    }

    #[test]
    fn an_interrupted_attempt_says_so_in_place_of_its_exit_code() {
        let mut cut = record(1, 2, None, None);
        cut.outcome = Some("interrupted".into());
        let records = vec![cut, record(1, 1, Some(1), Some(2.0))];
        let text = render_history("j", &all(records), None, &Style::plain());
        assert!(
            text.contains("1      2        interrupted  -         2026-11-21T22:27:24"),
            "{text}"
        );
        assert!(text.contains("Total: 2 record(s)"), "{text}");
    }

    #[test]
    fn empty_history_says_so_and_names_the_sheet_filter() {
        let text = render_history("j", &all(Vec::new()), Some(3), &Style::plain());
        assert!(text.starts_with("No execution history found for score: j\nSheet filter: 3\n"));
    }

    #[test]
    fn json_carries_the_sheet_filter_only_when_given() {
        let history = all(vec![record(1, 1, Some(0), Some(1.0))]);
        let doc = history_json("j", &history, None);
        assert_eq!(doc["total_records"], 1);
        assert_eq!(doc["truncated"], false);
        assert!(doc.get("sheet_filter").is_none());
        assert_eq!(history_json("j", &history, Some(1))["sheet_filter"], 1);
    }

    #[test]
    fn a_cut_list_says_so_with_the_true_total_and_how_to_see_every_record() {
        let mut history = all(vec![record(2, 1, Some(1), Some(1.0))]);
        history.total = 10_000;
        let text = render_history("j", &history, Some(2), &Style::plain());
        assert!(
            text.ends_with("Showing the newest 1 of 10,000 record(s); every one: mozart history j --sheet 2 --limit 0\n"),
            "{text}"
        );
        let doc = history_json("j", &history, None);
        assert_eq!(doc["total_records"], 10_000);
        assert_eq!(doc["returned"], 1);
        assert_eq!(doc["truncated"], true);
    }
}
