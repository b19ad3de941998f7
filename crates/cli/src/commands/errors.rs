//! `mozart errors SCORE_ID` (cli.md §5.2): every recorded error of a score, from the
//! checkpoint the conductor returns for `job.errors` (conductor.md §8.9).
//!
//! Also home of the checkpoint fetch that `diagnose` shares, and of the error records both
//! commands build from a checkpoint.

use std::path::{Path, PathBuf};

use mozart_ipc::checkpoint::{HookResult, JobCheckpoint};
use mozart_ipc::methods;
use mozart_ipc::status::{DiagnoseResult, ErrorRuns, JobStatusResult};
use mozart_ipc::time::Timestamp;
use mozart_ipc::types::ErrorsParams;
use serde_json::Value;

use super::status::{
    absolute, check_score_id, failed, ipc_text, job_call, job_params, JobCallError,
};
use crate::output::{boxed, console_width, print_json};
use crate::render::status_json::normalize_error_code;
use crate::render::table::{self, Cell};
use crate::render::time::{format_clock, format_epoch_minute, format_timestamp};
use crate::render::{Color, Style};
use crate::{CliError, Globals, OutputMode};
use mozart_client::diagnose::{collect_errors, errors_json, ErrorEntry, ErrorFilter};
use mozart_ipc::time::epoch_now;
use mozart_jobs::wire::{EARLIER_ERRORS_OMITTED, ERRORS_PER_SHEET};

/// Longest message shown whole in the table (upstream cuts at 60, which hides the cause).
pub const TABLE_MESSAGE_CHARS: usize = 240;
/// Of a longer message, the start kept (what kind of failure)…
const MESSAGE_HEAD_CHARS: usize = 60;
/// …and the end of its last line kept (where a failing command says why).
const MESSAGE_TAIL_CHARS: usize = 160;
/// How much of an output tail the verbose details show (upstream
/// `TRUNCATE_STDOUT_TAIL_CHARS`).
pub const DETAIL_TAIL_CHARS: usize = 500;
/// How much of a stack trace the verbose details show.
pub const DETAIL_STACK_CHARS: usize = 800;

/// Arguments of `mozart errors`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to show errors for.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: String,
    /// Filter errors by specific sheet number.
    #[arg(short = 'b', long = "sheet", value_name = "INTEGER")]
    pub sheet: Option<u32>,
    /// Filter by error type: transient, rate_limit, or permanent.
    #[arg(short = 't', long = "type", value_name = "TEXT", ignore_case = true,
          value_parser = clap::builder::PossibleValuesParser::new(["transient", "rate_limit", "permanent"]))]
    pub error_type: Option<String>,
    /// Filter by error code (e.g., E001, E101).
    #[arg(short = 'c', long = "code", value_name = "TEXT")]
    pub code: Option<String>,
    /// Show full stdout/stderr tails for each error.
    #[arg(short = 'V', long = "verbose")]
    pub verbose: bool,
    /// Also list the errors of the score's earlier runs (before its latest `run --fresh`);
    /// by default only the current run's are shown.
    #[arg(long = "all-runs")]
    pub all_runs: bool,
    /// Workspace directory to search for score state (debug override).
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
    /// Output errors as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart errors`.
pub fn run(globals: &Globals, mut args: Args) -> Result<i32, CliError> {
    // The global -v asks for the same extra detail as the command's own -V.
    args.verbose |= globals.verbose;
    let id = args.score_id.as_str();
    check_score_id(id)?;
    let fetched = fetch_checkpoint(
        globals,
        methods::JOB_ERRORS,
        id,
        args.workspace.as_deref(),
        args.all_runs,
        args.output,
        &StateLookup {
            not_found_hints: &["Run 'mozart list' to see available scores."],
            workspace_on_unknown_job: false,
        },
    )?;
    if let Some(n) = args.sheet {
        super::history::check_sheet(id, n, fetched.state.total_sheets, args.output)?;
    }
    let filter = ErrorFilter {
        sheet: args.sheet,
        error_type: args.error_type.as_deref().map(str::to_lowercase),
        code: args.code.clone(),
    };
    let errors = collect_errors(&fetched.state, &filter, epoch_now());
    // A job failed by an `on_success` hook has no sheet error: the hook's is the one to show.
    let unfiltered = filter.sheet.is_none() && filter.error_type.is_none() && filter.code.is_none();
    let hook_failures: Vec<&HookResult> = fetched
        .state
        .hook_results
        .iter()
        .filter(|h| unfiltered && !h.success)
        .collect();
    if args.output.is_json() {
        let mut doc = errors_json(id, &errors, args.verbose);
        if !hook_failures.is_empty() {
            doc["hook_failures"] = serde_json::to_value(&hook_failures).unwrap_or_default();
        }
        if let Some(runs) = &fetched.runs {
            add_runs_json(&mut doc, runs);
        }
        print_json(&doc);
    } else {
        let style = Style::for_stdout();
        if errors.is_empty() && !hook_failures.is_empty() {
            println!(
                "{} {id}",
                style.paint("No sheet errors for score:", Color::Green)
            );
        } else {
            print!(
                "{}",
                crate::output::terminal_safe(&render_errors(
                    id,
                    &errors,
                    &filter,
                    args.verbose,
                    &style
                ))
            );
        }
        if !hook_failures.is_empty() {
            print!(
                "{}",
                crate::output::terminal_safe(&render_hook_failures(id, &hook_failures, &style))
            );
        }
        if let Some(note) = fetched
            .runs
            .as_ref()
            .and_then(|runs| earlier_runs_note(id, "errors", runs))
        {
            println!("{}", style.paint(&note, Color::Dim));
        }
        let workspace = fetched.workspace.as_deref().or(fetched
            .state
            .workspace
            .as_deref()
            .map(Path::new));
        if let Some(ws) = workspace.filter(|_| !errors.is_empty()) {
            println!(
                "{}",
                style.paint(
                    &format!(
                        "Sheet logs: {} (full output of each sheet that ran past 1 s or printed over 4,000 bytes; -V shows a shorter one's)",
                        mozart_ipc::paths::sheet_logs_dir(ws, id).display()
                    ),
                    Color::Dim
                )
            );
        }
    }
    Ok(0)
}

// ---------------------------------------------------------------------------------------
// Fetching the checkpoint (shared with `diagnose`).
// ---------------------------------------------------------------------------------------

/// A checkpoint answered by the conductor (or read from a workspace), and the workspace it
/// lives in when known.
#[derive(Debug)]
pub(crate) struct FetchedState {
    /// The score's checkpoint.
    pub state: JobCheckpoint,
    /// Its workspace directory.
    pub workspace: Option<PathBuf>,
    /// Which of the job's runs its errors come from (the conductor's answer only).
    pub runs: Option<ErrorRuns>,
}

/// The line saying that errors of earlier runs are not listed, and how to see them: `None`
/// when every run's are, or the earlier runs had none. `command` is `errors` or
/// `diagnose`.
pub(crate) fn earlier_runs_note(id: &str, command: &str, runs: &ErrorRuns) -> Option<String> {
    if runs.all_runs || runs.earlier_errors_not_shown == 0 {
        return None;
    }
    let since = runs
        .started_at
        .map(|t| format!(", started afresh {} UTC", format_epoch_minute(Some(t))))
        .unwrap_or_default();
    let earlier = runs.earlier_errors_not_shown;
    Some(format!(
        "Only this run's errors are shown (run {}{since}); {} of earlier runs {} not: mozart {command} {id} --all-runs lists them",
        runs.run,
        mozart_config::plural(earlier, "error", "errors"),
        if earlier == 1 { "is" } else { "are" },
    ))
}

/// `run`, `run_started_at`, `all_runs` and `earlier_runs_errors_not_shown` of a `--json`
/// document.
pub(crate) fn add_runs_json(doc: &mut Value, runs: &ErrorRuns) {
    doc["run"] = runs.run.into();
    doc["run_started_at"] = runs.started_at.into();
    doc["all_runs"] = runs.all_runs.into();
    doc["earlier_runs_errors_not_shown"] = runs.earlier_errors_not_shown.into();
}

/// What [`add_runs_json`] put in a document, read back.
pub(crate) fn runs_of_json(doc: &Value) -> Option<ErrorRuns> {
    Some(ErrorRuns {
        run: u32::try_from(doc.get("run")?.as_u64()?).ok()?,
        started_at: doc.get("run_started_at").and_then(Value::as_f64),
        all_runs: doc
            .get("all_runs")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        earlier_errors_not_shown: doc
            .get("earlier_runs_errors_not_shown")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// How a command reacts when the state cannot be found.
pub(crate) struct StateLookup<'a> {
    /// Hints under `Score not found: <id>`.
    pub not_found_hints: &'a [&'a str],
    /// Read the `-w` workspace even when the conductor says the job is unknown (upstream
    /// does this for `diagnose` only, F-451).
    pub workspace_on_unknown_job: bool,
}

/// Call `method` (`job.errors` / `job.diagnose`) and parse the checkpoint in its `state`.
/// Without a conductor, `-w` reads the workspace's JSON state file (cli.md §1.4).
pub(crate) fn fetch_checkpoint(
    globals: &Globals,
    method: &str,
    id: &str,
    workspace: Option<&Path>,
    all_runs: bool,
    mode: OutputMode,
    lookup: &StateLookup<'_>,
) -> Result<FetchedState, CliError> {
    let not_found = || {
        failed(
            format!("Score not found: {id}"),
            lookup.not_found_hints,
            mode,
        )
    };
    // `job.errors` answers `{"state"}`, `job.diagnose` adds `workspace` (§8.9–§8.10).
    let params = ErrorsParams {
        all_runs,
        ..ErrorsParams::from(job_params(id, workspace))
    };
    let result: DiagnoseResult = match job_call(globals, method, params, mode) {
        Ok(result) => result,
        Err(JobCallError::Job(_)) => {
            return match workspace {
                Some(dir) if lookup.workspace_on_unknown_job => from_workspace(id, dir, mode, None),
                _ => Err(not_found()),
            }
        }
        Err(JobCallError::Cli(err)) => {
            return match workspace {
                // No conductor: the job's state is in its registry, to be read once it runs.
                Some(dir) => from_workspace(id, dir, mode, Some((globals, command_of(method)))),
                None => Err(err),
            };
        }
        Err(JobCallError::Other(err)) => {
            let hint = super::status::other_error_hint(&err, id);
            return Err(failed(ipc_text(err), &[&hint], mode));
        }
    };
    let JobStatusResult::Checkpoint(state) = result.state else {
        // A job the conductor knows but that has no checkpoint yet (queued, or only its
        // registry row survived): upstream crashes validating the metadata dict.
        return Err(failed(
            format!("No state recorded yet for score: {id}"),
            &[&format!("Check its progress with: mozart status {id}")],
            mode,
        ));
    };
    let answered_ws = result
        .workspace
        .or_else(|| state.workspace.clone())
        .filter(|w| !w.is_empty())
        .map(PathBuf::from);
    Ok(FetchedState {
        state: *state,
        workspace: answered_ws.or_else(|| workspace.map(absolute)),
        runs: result.runs,
    })
}

/// `errors` / `diagnose`: the command of `method`.
fn command_of(method: &str) -> &'static str {
    if method == methods::JOB_DIAGNOSE {
        "diagnose"
    } else {
        "errors"
    }
}

/// Debug escape hatch: the workspace's `<id>.json` state file. `no_conductor`: the globals
/// and the command when it is read because no conductor runs (the hints then say where the
/// state is and to start it).
fn from_workspace(
    id: &str,
    dir: &Path,
    mode: OutputMode,
    no_conductor: Option<(&Globals, &str)>,
) -> Result<FetchedState, CliError> {
    if !dir.is_dir() {
        return Err(failed(
            format!("Workspace not found: {}", dir.display()),
            &[],
            mode,
        ));
    }
    match mozart_jobs::wire::load_state_file(dir, id) {
        Ok(Some(state)) => Ok(FetchedState {
            state,
            workspace: Some(absolute(dir)),
            runs: None,
        }),
        Ok(None) => {
            let hints = match no_conductor {
                Some((globals, command)) => {
                    crate::conductor_client::no_workspace_state_hints(globals, command, id, dir)
                }
                None => vec![
                    format!(
                        "{} has no {id}.json state file: a workspace holds one only for a score with `state_backend: json`",
                        dir.display()
                    ),
                    "Run 'mozart list' to see available scores".into(),
                ],
            };
            let hints: Vec<&str> = hints.iter().map(String::as_str).collect();
            Err(failed(format!("Score not found: {id}"), &hints, mode))
        }
        Err(e) => Err(failed(
            format!("Cannot read the state of {id} in {}: {e}", dir.display()),
            &[],
            mode,
        )),
    }
}

/// An attempt number as printed: `not run` for a sheet that never started one.
fn attempt_text(n: u32) -> String {
    if n == 0 {
        "not run".into()
    } else {
        n.to_string()
    }
}

/// Colour of an error type (upstream `StatusColors.ERROR_TYPE`).
pub fn error_type_color(error_type: &str) -> Option<Color> {
    match error_type {
        "permanent" => Some(Color::Red),
        "transient" => Some(Color::Yellow),
        "rate_limit" => Some(Color::Blue),
        _ => None,
    }
}

/// A cell coloured by error type.
pub(crate) fn type_cell(error_type: &str) -> Cell {
    match error_type_color(error_type) {
        Some(c) => Cell::colored(error_type, c),
        None => Cell::from(error_type),
    }
}

/// A message's lines that say something, trimmed.
fn message_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

/// A message on one line: its lines joined with ` ⏎ `.
fn one_line(text: &str) -> String {
    message_lines(text).join(" ⏎ ")
}

/// An error message for one table cell: whole (on one line) up to [`TABLE_MESSAGE_CHARS`];
/// a longer one keeps its start and the end of its last line, where a failing command
/// names the cause, and says how much is left out.
pub(crate) fn summary(text: &str) -> String {
    let lines = message_lines(text);
    let whole = lines.join(" ⏎ ");
    let total = whole.chars().count();
    if total <= TABLE_MESSAGE_CHARS {
        return whole;
    }
    let last = lines.last().copied().unwrap_or("");
    let last_len = last.chars().count();
    let tail: String = last
        .chars()
        .skip(last_len.saturating_sub(MESSAGE_TAIL_CHARS))
        .collect();
    let head: String = whole.chars().take(MESSAGE_HEAD_CHARS).collect();
    let hidden = total.saturating_sub(head.chars().count() + tail.chars().count());
    format!("{head} … {tail} ({hidden} more chars, -V for all)")
}

/// The last meaningful line of a failed command's stderr (else stdout), when the message
/// does not already say it: what a failing command prints last usually names the cause.
pub(crate) fn cause_line(e: &ErrorEntry) -> Option<String> {
    // A command that exited 0 did not fail (a validation did): its last line is no cause.
    if e.context.get("exit_code").and_then(Value::as_i64) == Some(0) {
        return None;
    }
    // A line that says something: not the closing `}` of a CLI's JSON document (Gemini
    // CLI's errors read "… — stdout: }").
    let last = |t: &Option<String>| {
        t.as_deref().and_then(|t| {
            t.lines()
                .map(str::trim)
                .rfind(|l| l.chars().any(char::is_alphanumeric))
                .map(str::to_string)
        })
    };
    // Without a stderr tail the other one is the attempt's whole output (an older attempt's
    // is stdout and stderr together, as the registry keeps it): not "stdout".
    let (stream, line) = match last(&e.stderr_tail) {
        Some(l) => ("stderr", l),
        None => ("output", last(&e.stdout_tail)?),
    };
    if e.error_message.contains(&line) {
        return None;
    }
    let count = line.chars().count();
    let line: String = if count > MESSAGE_TAIL_CHARS {
        let tail: String = line.chars().skip(count - MESSAGE_TAIL_CHARS).collect();
        format!("…{tail}")
    } else {
        line
    };
    Some(format!("{stream}: {line}"))
}

/// The first `max` characters, with `...` replacing the tail when cut (`max` includes it).
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        let head: String = text.chars().take(max.saturating_sub(3)).collect();
        format!("{head}...")
    } else {
        text.to_string()
    }
}

fn head(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// Python's `str()` of a JSON value, as upstream prints context values.
pub(crate) fn python_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}

/// A rounded panel with `title` centred in its top border (Rich's `Panel(title=...)`).
pub(crate) fn titled_panel(title: &str, lines: &[String], width: usize) -> String {
    let body = boxed(lines, width, true);
    let mut out_lines: Vec<String> = body.lines().map(str::to_string).collect();
    if let Some(top) = out_lines.first_mut() {
        let inner = top.chars().count().saturating_sub(2);
        let label = format!(" {title} ");
        let label_len = label.chars().count();
        if label_len + 2 <= inner {
            let left = (inner - label_len) / 2;
            let right = inner - label_len - left;
            *top = format!("╭{}{label}{}╮", "─".repeat(left), "─".repeat(right));
        }
    }
    let mut s = out_lines.join("\n");
    s.push('\n');
    s
}

/// An error type with what it means, so that `Type: permanent` beside the classifier's
/// `category=transient` (an error that would have been retried, on the attempt the sheet
/// ended on) reads as two things, not a contradiction.
fn type_words(error_type: &str) -> String {
    match error_type {
        "permanent" => {
            "permanent (the sheet failed on this attempt, whatever its category)".to_string()
        }
        "transient" => "transient (the sheet was retried after it)".to_string(),
        "rate_limit" => "rate_limit (waited out, then retried)".to_string(),
        other => other.to_string(),
    }
}

/// The body of one `--verbose` detail panel (upstream `format_error_details`).
pub fn detail_lines(e: &ErrorEntry) -> Vec<String> {
    let message = if e.error_message.is_empty() {
        "N/A"
    } else {
        &e.error_message
    };
    let mut lines = vec![
        format!("Message: {message}"),
        format!("Type: {}", type_words(&e.error_type)),
        format!("Code: {}", normalize_error_code(Some(&e.error_code), None)),
        format!("Attempt: {}", attempt_text(e.attempt_number)),
    ];
    if let Some(ts) = &e.timestamp {
        lines.push(format!("Time: {}", format_timestamp(ts)));
    }
    let context: Vec<String> = e
        .context
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| format!("{k}={}", python_text(v)))
        .collect();
    if !context.is_empty() {
        lines.push(format!("Context: {}", context.join(", ")));
    }
    let mut block = |label: &str, text: &Option<String>, max: usize| {
        if let Some(t) = text.as_deref().filter(|t| !t.is_empty()) {
            lines.push(String::new());
            lines.push(format!("{label}:"));
            lines.extend(head(t, max).lines().map(str::to_string));
        }
    };
    // An older attempt's tail is its stdout and stderr together (the registry keeps one
    // output tail an attempt): "Stdout" would misname what a failed command printed on
    // stderr. Two tails are the last attempt's streams apart.
    let has_stderr = e.stderr_tail.as_deref().is_some_and(|t| !t.is_empty());
    let out_label = if has_stderr {
        "Stdout (tail)"
    } else {
        "Output (tail)"
    };
    block(out_label, &e.stdout_tail, DETAIL_TAIL_CHARS);
    block("Stderr (tail)", &e.stderr_tail, DETAIL_TAIL_CHARS);
    block("Stack Trace", &e.stack_trace, DETAIL_STACK_CHARS);
    lines
}

/// The failed `on_success` hooks of a job (what turned it `failed` with `Post-success hook
/// failed`): each one's reason whole and the end of its output.
pub fn render_hook_failures(id: &str, failures: &[&HookResult], style: &Style) -> String {
    let mut out = vec![String::new(), style.paint("Hook Failures", Color::Bold)];
    for hook in failures {
        let label = match hook.description.as_deref().filter(|d| !d.is_empty()) {
            Some(d) => format!("{}: {d}", hook.hook_type),
            None => hook.hook_type.clone(),
        };
        let reason = hook
            .error_message
            .as_deref()
            .or_else(|| hook.extra.get("error").and_then(Value::as_str))
            .unwrap_or("failed");
        // A reason of several lines (a chained score's load errors) stays under its bullet.
        let reason = reason.trim_end().replace('\n', "\n    ");
        out.push(format!(
            "  {} {label} — {reason}",
            style.paint("•", Color::Red)
        ));
        if let Some(Some(output)) = &hook.output {
            let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
            for line in &lines[lines.len().saturating_sub(5)..] {
                out.push(style.paint(&format!("      {line}"), Color::Dim));
            }
        }
    }
    out.push(format!(
        "Fix the cause, then 'mozart resume {id}' runs the failed hook and those after it again."
    ));
    out.join("\n") + "\n"
}

/// The human output of `mozart errors`.
pub fn render_errors(
    id: &str,
    errors: &[ErrorEntry],
    filter: &ErrorFilter,
    verbose: bool,
    style: &Style,
) -> String {
    let mut out: Vec<String> = Vec::new();
    if errors.is_empty() {
        out.push(format!(
            "{} {id}",
            style.paint("No errors found for score:", Color::Green)
        ));
        if let Some(s) = filter.sheet {
            out.push(style.paint(&format!("Sheet filter: {s}"), Color::Dim));
        }
        if let Some(t) = &filter.error_type {
            out.push(style.paint(&format!("Type filter: {t}"), Color::Dim));
        }
        if let Some(c) = &filter.code {
            out.push(style.paint(&format!("Code filter: {c}"), Color::Dim));
        }
        return out.join("\n") + "\n";
    }
    out.push(style.paint(&format!("Errors for Score: {id}"), Color::Bold));
    let rows: Vec<Vec<Cell>> = errors
        .iter()
        .map(|e| {
            let time = e
                .timestamp
                .as_deref()
                .and_then(|t| Timestamp::from_raw(t).to_epoch())
                .map(format_clock)
                .unwrap_or_default();
            let message = if verbose {
                // Whole, but on the row's one line (a failing validation command's output
                // follows its message on lines of its own); the panel below keeps the lines.
                one_line(&e.error_message)
            } else {
                match cause_line(e) {
                    Some(cause) => format!("{} — {cause}", summary(&e.error_message)),
                    None => summary(&e.error_message),
                }
            };
            vec![
                Cell::colored(e.sheet_num.to_string(), Color::Cyan),
                Cell::colored(time, Color::Dim),
                type_cell(&e.error_type),
                Cell::from(normalize_error_code(Some(&e.error_code), None)),
                Cell::from(attempt_text(e.attempt_number)),
                Cell::from(message),
            ]
        })
        .collect();
    out.extend(table::render(
        &["Sheet", "Time", "Type", "Code", "Attempt", "Message"],
        &rows,
        "",
        "  ",
        style,
    ));
    out.push(String::new());
    out.push(style.paint(
        &format!(
            "Total: {}",
            mozart_config::plural(errors.len(), "error", "errors")
        ),
        Color::Dim,
    ));
    // The conductor lists each sheet's newest errors only; say where the rest are.
    for e in errors {
        if let Some(n) = e
            .context
            .get(EARLIER_ERRORS_OMITTED)
            .and_then(Value::as_u64)
        {
            out.push(style.paint(
                &format!(
                    "Sheet {}: {} not listed (only the newest {ERRORS_PER_SHEET} are); `mozart history {id} --sheet {}` lists every attempt",
                    e.sheet_num,
                    mozart_config::plural(n, "earlier error", "earlier errors"),
                    e.sheet_num
                ),
                Color::Yellow,
            ));
        }
    }
    let mut text = out.join("\n") + "\n";
    if verbose {
        text.push('\n');
        text.push_str(&style.paint("Error Details", Color::Bold));
        text.push('\n');
        let width = console_width();
        for e in errors {
            let title = format!(
                "Sheet {} - {}",
                e.sheet_num,
                normalize_error_code(Some(&e.error_code), None)
            );
            text.push_str(&titled_panel(&title, &detail_lines(e), width));
        }
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mozart_client::test_support::{failed_sheet, job_with};
    use serde_json::json;

    #[test]
    fn table_cuts_long_messages_and_counts_errors() {
        let long = format!("{}\nthe real cause", "x".repeat(300));
        let job = job_with(vec![failed_sheet(1, &long, Some("E900"))]);
        let errors = collect_errors(&job, &ErrorFilter::default(), 0.0);
        let text = render_errors(
            "j",
            &errors,
            &ErrorFilter::default(),
            false,
            &Style::plain(),
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Errors for Score: j");
        assert!(lines[1].starts_with("Sheet  Time      Type       Code  Attempt  Message"));
        assert!(
            lines[2].ends_with(&format!(
                "{} … the real cause (243 more chars, -V for all)",
                "x".repeat(60)
            )),
            "{}",
            lines[2]
        );
        assert!(lines[2].starts_with("1      10:00:05  permanent  E900  2        "));
        assert!(text.ends_with("\nTotal: 1 error\n"));
        assert!(!text.contains("Error Details"));

        let verbose = render_errors("j", &errors, &ErrorFilter::default(), true, &Style::plain());
        assert!(
            verbose.contains(&long.replace('\n', " ⏎ ")),
            "verbose shows the whole message, on the row's one line"
        );
        // The panel keeps the message's lines, each inside the border.
        for line in verbose.lines().skip_while(|l| !l.starts_with('╭')) {
            assert!(
                line.starts_with('╭') || line.starts_with('│') || line.starts_with('╰'),
                "a line out of the panel's border: {line:?}\n{verbose}"
            );
        }
        assert!(verbose.contains("\nError Details\n╭"), "{verbose}");
        assert!(verbose.contains(" Sheet 1 - E900 "), "{verbose}");
        assert!(verbose.contains("│ Context: exit_code=3"), "{verbose}");
        assert!(
            verbose.contains(
                "│ Type: permanent (the sheet failed on this attempt, whatever its category) "
            ),
            "{verbose}"
        );
    }

    #[test]
    fn a_sheet_whose_older_errors_were_cut_says_so() {
        let mut sheet = failed_sheet(3, "validation failed", Some("E900"));
        let mut context = serde_json::Map::new();
        context.insert(EARLIER_ERRORS_OMITTED.into(), json!(7));
        sheet.error_history = vec![mozart_ipc::checkpoint::CheckpointErrorRecord {
            timestamp: Timestamp::from_epoch(0.0),
            error_type: mozart_ipc::checkpoint::ErrorType::Permanent,
            error_code: "E900".into(),
            error_message: "validation failed".into(),
            attempt_number: 8,
            context,
            stdout_tail: None,
            stderr_tail: None,
            stack_trace: None,
        }];
        let errors = collect_errors(&job_with(vec![sheet]), &ErrorFilter::default(), 0.0);
        let text = render_errors(
            "j",
            &errors,
            &ErrorFilter::default(),
            false,
            &Style::plain(),
        );
        assert!(
            text.contains(
                "\nSheet 3: 7 earlier errors not listed (only the newest 50 are); \
                 `mozart history j --sheet 3` lists every attempt\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_last_output_line_names_the_cause_unless_the_message_does() {
        let job = job_with(vec![failed_sheet(
            1,
            "Command failed with exit code 1",
            Some("E009"),
        )]);
        let mut e = collect_errors(&job, &ErrorFilter::default(), 0.0).remove(0);
        assert_eq!(cause_line(&e), None);
        e.context.insert("exit_code".into(), json!(0));
        e.stdout_tail = Some("all good\n".into());
        assert_eq!(
            cause_line(&e),
            None,
            "a validation failure has no failing command"
        );
        e.context.insert("exit_code".into(), json!(1));
        e.stdout_tail = Some("progress\n".into());
        assert_eq!(cause_line(&e).as_deref(), Some("output: progress"));
        e.stderr_tail = Some(format!(
            "{}\nfatal: no db password\n\n",
            "noise ".repeat(50)
        ));
        assert_eq!(
            cause_line(&e).as_deref(),
            Some("stderr: fatal: no db password")
        );
        let text = render_errors(
            "j",
            &[e.clone()],
            &ErrorFilter::default(),
            false,
            &Style::plain(),
        );
        assert!(
            text.contains("  Command failed with exit code 1 — stderr: fatal: no db password\n"),
            "{text}"
        );
        e.error_message = "died: fatal: no db password".into();
        assert_eq!(cause_line(&e), None);
        // The end of a JSON document names nothing.
        e.stderr_tail = None;
        e.stdout_tail = Some("{\n  \"error\": \"quota\"\n}\n".into());
        assert_eq!(
            cause_line(&e).as_deref(),
            Some("output: \"error\": \"quota\"")
        );
        e.stdout_tail = Some("{\n}\n".into());
        assert_eq!(cause_line(&e), None);
    }

    #[test]
    fn an_output_tail_without_stderr_is_not_called_stdout() {
        // An older attempt's tail holds stdout and stderr together (here the timeout line
        // the conductor wrote on stderr): the panel must not call it stdout.
        let job = job_with(vec![failed_sheet(
            1,
            "Process killed by SIGTERM due to timeout",
            Some("E001"),
        )]);
        let mut e = collect_errors(&job, &ErrorFilter::default(), 0.0).remove(0);
        e.stdout_tail = Some("Command timed out after 3s".into());
        e.stderr_tail = None;
        let lines = detail_lines(&e);
        assert!(lines.iter().any(|l| l == "Output (tail):"), "{lines:?}");
        assert!(!lines.iter().any(|l| l.starts_with("Stdout")), "{lines:?}");
        e.stderr_tail = Some("boom".into());
        let lines = detail_lines(&e);
        assert!(lines.iter().any(|l| l == "Stdout (tail):"), "{lines:?}");
        assert!(lines.iter().any(|l| l == "Stderr (tail):"), "{lines:?}");
    }

    #[test]
    fn no_errors_names_the_filters() {
        let f = ErrorFilter {
            sheet: Some(4),
            error_type: None,
            code: Some("E001".into()),
        };
        assert_eq!(
            render_errors("j", &[], &f, false, &Style::plain()),
            "No errors found for score: j\nSheet filter: 4\nCode filter: E001\n"
        );
    }

    #[test]
    fn panel_titles_are_centred_in_the_border() {
        let panel = titled_panel("T", &["body".into()], 20);
        let first = panel.lines().next().unwrap();
        assert_eq!(first.chars().count(), 20);
        assert!(first.contains("─ T ─"), "{first}");
    }
}
