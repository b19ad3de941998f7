//! `mozart logs [SCORE_ID]` (cli.md §5.1): show or follow a Mozart log file, filtered by
//! score and level.
//!
//! The default file is the conductor's own log: its `log_file` setting (asked of the running
//! conductor, else read from conductor.yaml), else `$MOZART_HOME/logs/conductor.log` (clone
//! aware); `-w DIR` reads upstream's per-workspace `DIR/logs/mozart.log`, `--file` any
//! file. Both are JSON lines of one shape (`timestamp`, `level`, `event`, `component`,
//! fields; our job events add `message`): nothing is parsed out of text. A line that is
//! not JSON (an older conductor's text log) is shown as it is.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mozart_ipc::types::{LogFollowItem, LogFollowParams, Notification};
use serde_json::{Map, Value};

use super::status::{check_score_id, failed};
use crate::output::ascii_json;
use crate::render::{Color, Style};
use crate::{CliError, Globals, OutputMode};

/// Level names in order of severity (upstream `_LEVEL_ORDER`).
pub const LEVELS: [&str; 5] = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];
/// Keys shown in their own columns, never among the `k=v` extras.
const COLUMN_KEYS: [&str; 9] = [
    "timestamp",
    "level",
    "event",
    "component",
    "job_id",
    "sheet_num",
    "run_id",
    "parent_run_id",
    "_raw",
];
/// Fields still shown as `k=v` on an entry that carries its own `message` (the rest are in
/// the sentence, and in `--json`): where the sheet's output is.
const MESSAGE_EXTRAS: [&str; 2] = ["stdout_log", "stderr_log"];
/// How often `--follow` polls the file.
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// How long `--follow` waits for a rotated-away file to reappear.
const ROTATION_WAIT_SECS: u32 = 10;

/// Arguments of `mozart logs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to filter logs for (optional, shows all if not specified).
    #[arg(value_name = "SCORE_ID")]
    pub score_id: Option<String>,
    /// Workspace directory to find logs (debug override): reads DIR/logs/mozart.log.
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
    /// Specific log file path (overrides the conductor log).
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Follow new entries as they are written (with a job: its sheets' progress and output),
    /// across conductor restarts, until Ctrl+C.
    #[arg(short = 'F', long = "follow")]
    pub follow: bool,
    /// Number of lines to show (0 for all).
    #[arg(
        short = 'n',
        long = "lines",
        default_value_t = 50,
        allow_negative_numbers = true
    )]
    pub lines: i64,
    /// Filter by minimum log level (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case).
    #[arg(short = 'l', long = "level", value_name = "TEXT")]
    pub level: Option<String>,
    /// Show this sheet's output instead of the log: its log files
    /// (`{workspace}/logs/sheet-NN.stdout.log` / `.stderr.log`), else — for a stream that
    /// printed little and ended within a second, which has no file — the tail the registry
    /// keeps. Needs SCORE_ID.
    #[arg(long = "sheet", value_name = "N", requires = "score_id")]
    pub sheet: Option<u32>,
    /// Output raw JSON log entries.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Which entries to show and how.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogFilter {
    /// Only entries of this score.
    pub job_id: Option<String>,
    /// Minimum level index into [`LEVELS`].
    pub min_level: usize,
}

/// Run `mozart logs`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    if let Some(id) = args.score_id.as_deref() {
        check_score_id(id)?;
        // `--follow` may start before the job is submitted (it waits for `job.submitted`).
        if !args.follow
            && args.file.is_none()
            && args.workspace.is_none()
            && unknown_to_conductor(globals, id)
        {
            return Err(failed(
                format!("Score not found: {id}"),
                &["Run 'mozart list --all' to see available scores."],
                args.output,
            ));
        }
        if let Some(sheet) = args.sheet {
            return sheet_output(globals, id, sheet, &args);
        }
    }
    let style = Style::for_stdout();
    if args.follow && args.file.is_none() && args.workspace.is_none() {
        // Streamed by the conductor itself (with its running sheets' progress); a file
        // tail only when no conductor answers.
        let min_level = match &args.level {
            Some(level) => level_index(&level.to_uppercase()).unwrap_or(usize::MAX),
            None => 0,
        };
        if min_level != usize::MAX {
            let filter = LogFilter {
                job_id: args.score_id.clone(),
                min_level,
            };
            if let Some(code) = follow_conductor(globals, &filter, args.output, &style)? {
                return Ok(code);
            }
        }
    }
    let (target, from_conductor) = default_target(globals, &args)?;
    let path = match locate(&target) {
        Some(p) => p,
        None => {
            println!(
                "{} {}",
                style.paint("No log files found at:", Color::Yellow),
                target.display()
            );
            println!();
            // Upstream's hint here (`--log-file` with `mozart run`) is not true of this port:
            // `--log-file` logs only the CLI, and the conductor always writes its own log.
            let hint = if from_conductor {
                "Hint: The conductor writes this log while it runs. Start it with: mozart start"
                    .to_string()
            } else {
                let log = crate::conductor_client::paths(globals, None)
                    .map(|paths| conductor_log(&paths).display().to_string())
                    .unwrap_or_else(|_| "in the Mozart home's logs/".to_string());
                let what = if args.file.is_some() {
                    "Check the path given with --file."
                } else {
                    "This conductor writes no per-workspace logs/mozart.log (upstream's)."
                };
                format!("Hint: {what} Mozart's log is the conductor's, {log}: mozart logs [SCORE_ID] shows it")
            };
            println!("{}", style.paint(&hint, Color::Dim));
            return Ok(1);
        }
    };
    let mut filter = LogFilter {
        job_id: args.score_id.clone(),
        min_level: 0,
    };
    if let Some(level) = &args.level {
        match level_index(&level.to_uppercase()) {
            Some(i) => filter.min_level = i,
            None => {
                println!(
                    "{} {level}\nValid levels: DEBUG, INFO, WARNING, ERROR, CRITICAL",
                    style.paint("Invalid log level:", Color::Red)
                );
                return Ok(1);
            }
        }
    }
    if path.extension().is_some_and(|x| x == "gz") {
        return Err(failed(
            format!(
                "Compressed log files are not supported yet: {}",
                path.display()
            ),
            &["Decompress it and pass it with --file"],
            OutputMode::Human,
        ));
    }
    let header = !globals.quiet && !args.output.is_json();
    if header {
        println!(
            "{}",
            style.paint(&format!("Log file: {}", path.display()), Color::Dim)
        );
    }
    if args.follow {
        follow(&path, &filter, args.output, &style)
    } else {
        display(&path, &filter, args.lines, args.output, header, &style)
    }
}

/// `mozart logs JOB --sheet N`: the sheet's output, stream by stream, from its log file when
/// it has one, else from the tail its registry row keeps (issue 24: a short stream that ended
/// within a second has no file).
fn sheet_output(globals: &Globals, id: &str, sheet: u32, args: &Args) -> Result<i32, CliError> {
    // A page of this one sheet: its row read back from the registry whatever the job's size
    // (the default view of a job over 10,000 sheets is a summary without it).
    let query = mozart_ipc::sheet_view::SheetQuery {
        mode: mozart_ipc::sheet_view::SheetMode::Page,
        offset: u64::from(sheet.saturating_sub(1)),
        limit: Some(1),
        ..Default::default()
    };
    let answer = super::status::fetch(globals, id, args.workspace.as_deref(), query, args.output)?;
    let mozart_ipc::status::JobStatusResult::Checkpoint(checkpoint) = answer else {
        return Err(failed(
            format!("No state recorded yet for score: {id}"),
            &[&format!("Check its progress with: mozart status {id}")],
            args.output,
        ));
    };
    let Some(state) = checkpoint.sheets.get(&sheet) else {
        return Err(failed(
            format!(
                "Score {id} has no sheet {sheet} with a state (it has {}).",
                mozart_config::plural(checkpoint.total_sheets, "sheet", "sheets")
            ),
            &[&format!("See its sheets with: mozart status {id} --sheets")],
            args.output,
        ));
    };
    let workspace = args.workspace.clone().or_else(|| {
        checkpoint
            .workspace
            .clone()
            .filter(|w| !w.is_empty())
            .map(PathBuf::from)
    });
    let mut streams = Vec::new();
    // The conductor's word that a log could not be written (a full disk), read once.
    let mut unwritten_logs = None;
    for (stream, tail) in [
        ("stdout", &state.stdout_tail),
        ("stderr", &state.stderr_tail),
    ] {
        let unwritten = workspace.as_deref().and_then(|w| {
            let path = mozart_ipc::paths::sheet_output_log(w, id, sheet, stream);
            unwritten_logs
                .get_or_insert_with(|| unwritten_sheet_logs(globals))
                .remove(&path.display().to_string())
                .map(|(at, error)| Unwritten { path, at, error })
        });
        let found = mozart_backends::output_log::read_sheet_output(
            workspace.as_deref(),
            id,
            sheet,
            stream,
            tail.as_deref(),
        );
        let (text, source, refused) = match found {
            Some(found) => {
                let source = match (found.file, found.text.is_empty()) {
                    (Some(f), _) => f.display().to_string(),
                    // Only the reason its log is not shown.
                    (None, true) => "none".to_string(),
                    (None, false) => "registry".to_string(),
                };
                // 0 or less: all of it.
                let lines = usize::try_from(args.lines).unwrap_or(0);
                let text = mozart_backends::output_log::last_lines(&found.text, lines);
                (text, source, found.refused)
            }
            // Nothing kept, but the reason is known: said, not "no output".
            None if unwritten.is_some() => (String::new(), "none".to_string(), None),
            None => continue,
        };
        streams.push((stream, text, source, unwritten, refused));
    }
    if args.output.is_json() {
        let out: Map<String, Value> = streams
            .iter()
            .map(|(stream, text, source, unwritten, refused)| {
                let mut v = serde_json::json!({ "text": text, "source": source });
                if let Some(why) = refused {
                    v["log_refused"] = serde_json::json!(why);
                }
                if let Some(u) = unwritten {
                    v["log_unwritten"] = serde_json::json!({
                        "path": u.path.display().to_string(),
                        "at": u.at,
                        "error": u.error,
                    });
                }
                (stream.to_string(), v)
            })
            .collect();
        let doc = serde_json::json!({ "job_id": id, "sheet": sheet, "streams": out });
        crate::output::print_json(&doc);
        return Ok(0);
    }
    let style = Style::for_stdout();
    if streams.is_empty() {
        println!("Sheet {sheet} of {id}: no output recorded.");
    }
    for (stream, text, source, unwritten, refused) in &streams {
        let from = match (source.as_str(), unwritten) {
            ("registry", _) if refused.is_some() => format!(
                "from the registry (the end of the output it keeps, at most {} bytes: the log \
                 file is not shown)",
                mozart_backends::process::REGISTRY_TAIL_BYTES
            ),
            ("none", _) if refused.is_some() => {
                "nothing shown (its log file is not, see the note)".to_string()
            }
            ("registry", None) => {
                "from the registry (no log file: short output that ended within a second)"
                    .to_string()
            }
            ("registry", Some(_)) => format!(
                "from the registry (the end of the output it keeps, at most {} bytes: the log \
                 file could not be written)",
                mozart_backends::process::REGISTRY_TAIL_BYTES
            ),
            ("none", _) => "nothing kept (the log file could not be written)".to_string(),
            (path, _) => format!("from {path}"),
        };
        println!(
            "{}",
            style.paint(
                &format!("=== sheet {sheet} {stream} — {from} ==="),
                Color::Dim
            )
        );
        if let Some(u) = unwritten {
            println!(
                "{}",
                style.paint(
                    &format!(
                        "Note: the conductor could not write {} ({}, at {}): it is missing or \
                         incomplete.",
                        u.path.display(),
                        u.error,
                        u.at
                    ),
                    Color::Yellow
                )
            );
        }
        if let Some(why) = refused {
            println!(
                "{}",
                style.paint(
                    &format!("Note: {}", crate::output::plain(why)),
                    Color::Yellow
                )
            );
        }
        // The instrument's own bytes: shown, never obeyed by the terminal.
        print!("{}", crate::output::terminal_safe(text));
        if !text.ends_with('\n') && !text.is_empty() {
            println!();
        }
    }
    Ok(0)
}

/// A sheet log the conductor said it could not write: the file, when, and why.
struct Unwritten {
    path: PathBuf,
    at: String,
    error: String,
}

/// Every sheet log the conductor's log says could not be written (a full disk), by path:
/// the last time and why. Empty when the log cannot be read.
fn unwritten_sheet_logs(globals: &Globals) -> std::collections::HashMap<String, (String, String)> {
    use std::io::BufRead;
    let mut found = std::collections::HashMap::new();
    let Ok(paths) = crate::conductor_client::paths(globals, None) else {
        return found;
    };
    let Ok(file) = File::open(conductor_log(&paths)) else {
        return found;
    };
    let event = mozart_backends::output_log::UNWRITTEN_EVENT;
    for line in std::io::BufReader::new(file)
        .split(b'\n')
        .map_while(Result::ok)
    {
        if !line.windows(event.len()).any(|w| w == event.as_bytes()) {
            continue;
        }
        let Ok(entry) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if entry["event"] != event {
            continue;
        }
        let text = |k: &str| entry[k].as_str().unwrap_or_default().to_string();
        found.insert(text("path"), (text("timestamp"), text("error")));
    }
    found
}

/// True when a running conductor says it has no job `id` (its registry holds every job it
/// ever ran). Without a conductor nobody can tell, and the log is read as is.
fn unknown_to_conductor(globals: &Globals, id: &str) -> bool {
    let Ok(paths) = crate::conductor_client::paths(globals, None) else {
        return false;
    };
    let Ok(mut client) = mozart_ipc::BlockingClient::connect(&paths.socket) else {
        return false;
    };
    // The cheapest question that names an unknown job: one row of its attempt history.
    let params = mozart_ipc::types::HistoryParams {
        job_id: id.to_string(),
        workspace: None,
        sheet_num: None,
        limit: 1,
    };
    matches!(
        client.call_value(mozart_ipc::methods::JOB_HISTORY, params),
        Err(mozart_ipc::IpcError::Rpc { error, .. }) if error.code == mozart_ipc::error::JOB_NOT_FOUND
    )
}

/// The file the user asked for, and whether it is the conductor's log.
fn default_target(globals: &Globals, args: &Args) -> Result<(PathBuf, bool), CliError> {
    if let Some(file) = &args.file {
        return Ok((file.clone(), false));
    }
    if let Some(ws) = &args.workspace {
        return Ok((ws.join("logs").join("mozart.log"), false));
    }
    let paths = crate::conductor_client::paths(globals, None)?;
    Ok((conductor_log(&paths), true))
}

/// The log the conductor really writes: its `log_file` setting (conductor.yaml), else
/// `$MOZART_HOME/logs/conductor.log`. A running conductor is asked (it keeps the file it
/// started with until a restart); without one, conductor.yaml is read as `start` reads it.
fn conductor_log(paths: &mozart_conductor::ConductorPaths) -> PathBuf {
    let live = mozart_ipc::BlockingClient::connect(&paths.socket)
        .ok()
        .and_then(|mut c| c.call_value(mozart_ipc::methods::DAEMON_CONFIG, ()).ok());
    let configured = match live {
        Some(doc) => doc
            .get("log_file")
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from),
        None => mozart_conductor::DaemonConfig::load(Some(&paths.config_file), None)
            .ok()
            .and_then(|c| c.log_file),
    };
    paths.log_for(configured.as_deref())
}

/// The file itself, else its newest rotated copy (`<name>.1`, `<name>.1.gz`, ...).
fn locate(target: &Path) -> Option<PathBuf> {
    if target.exists() {
        return Some(target.to_path_buf());
    }
    let name = target.file_name()?.to_string_lossy().into_owned();
    (1..100).find_map(|i| {
        [format!("{name}.{i}"), format!("{name}.{i}.gz")]
            .into_iter()
            .map(|n| target.with_file_name(n))
            .find(|p| p.exists())
    })
}

/// Index of an upper-case level name in [`LEVELS`]; `WARN` and `TRACE` (tracing's names)
/// count as `WARNING` and `DEBUG`.
pub fn level_index(level: &str) -> Option<usize> {
    match level {
        "WARN" => Some(2),
        "TRACE" => Some(0),
        other => LEVELS.iter().position(|l| *l == other),
    }
}

// ---------------------------------------------------------------------------------------
// Parsing.
// ---------------------------------------------------------------------------------------

/// Parse one log line: a JSON object (the conductor's log and upstream's are JSON lines),
/// or (anything else, e.g. a line an older conductor wrote as text) a raw entry
/// `{"event": <line>, "_raw": true}`, shown as it is. Blank lines give `None`.
pub fn parse_line(line: &str) -> Option<Map<String, Value>> {
    // Any file can be shown (`--file`); the conductor's own log is written redacted, other
    // files are redacted here (issue 21).
    let line = mozart_backends::redact(line);
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(line) {
        return Some(map);
    }
    let mut raw = Map::new();
    raw.insert("event".into(), Value::String(line.to_string()));
    raw.insert("_raw".into(), Value::Bool(true));
    Some(raw)
}

// ---------------------------------------------------------------------------------------
// Filtering and formatting.
// ---------------------------------------------------------------------------------------

/// Whether `id` appears in `text` as a whole score ID (not inside a longer one).
fn mentions(text: &str, id: &str) -> bool {
    let is_id_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    text.match_indices(id).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + id.len()..].chars().next();
        !before.is_some_and(is_id_char) && !after.is_some_and(is_id_char)
    })
}

/// Whether an entry passes the score and level filters. Structured entries match on their
/// `job_id`; unparsed lines match when they mention the score.
pub fn should_include(entry: &Map<String, Value>, filter: &LogFilter) -> bool {
    if let Some(id) = &filter.job_id {
        let matched = if entry.get("_raw").is_some_and(|v| v == &Value::Bool(true)) {
            entry
                .get("event")
                .and_then(Value::as_str)
                .is_some_and(|t| mentions(t, id))
        } else {
            entry.get("job_id").and_then(Value::as_str) == Some(id.as_str())
        };
        if !matched {
            return false;
        }
    }
    let level = entry
        .get("level")
        .and_then(Value::as_str)
        .unwrap_or("INFO")
        .to_uppercase();
    // Unknown levels count as INFO (cli.md §5.1).
    level_index(&level).unwrap_or(1) >= filter.min_level
}

fn level_color(level: &str) -> Option<Color> {
    match level {
        "DEBUG" => Some(Color::Dim),
        "INFO" => Some(Color::Blue),
        "WARNING" => Some(Color::Yellow),
        "ERROR" | "CRITICAL" => Some(Color::Red),
        _ => None,
    }
}

/// Python's `str()` of a field value, as upstream prints extras.
fn python_text(v: &Value) -> String {
    super::errors::python_text(v)
}

/// Python `json.dumps` separators (`", "`, `": "`) with ASCII escapes, one line.
pub fn entry_json_line(entry: &Map<String, Value>) -> String {
    struct PySeparators;
    impl serde_json::ser::Formatter for PySeparators {
        fn begin_array_value<W: ?Sized + Write>(
            &mut self,
            writer: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            if first {
                Ok(())
            } else {
                writer.write_all(b", ")
            }
        }
        fn begin_object_key<W: ?Sized + Write>(
            &mut self,
            writer: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            if first {
                Ok(())
            } else {
                writer.write_all(b", ")
            }
        }
        fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
            writer.write_all(b": ")
        }
    }
    let mut buf = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, PySeparators);
    if serde::Serialize::serialize(entry, &mut ser).is_err() {
        return "{}".to_string();
    }
    ascii_json(&String::from_utf8_lossy(&buf))
}

/// The human line: `HH:MM:SS LEVEL   component job_id sheet:<n> event k=v ...`.
pub fn format_entry(entry: &Map<String, Value>, style: &Style) -> String {
    let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("");
    if entry.get("_raw").is_some_and(|v| v == &Value::Bool(true)) {
        return text("event").to_string();
    }
    let mut parts: Vec<String> = Vec::new();
    let timestamp = text("timestamp");
    if !timestamp.is_empty() {
        let short = match timestamp.split_once('T') {
            Some((_, time)) => time
                .split('+')
                .next()
                .unwrap_or("")
                .split('.')
                .next()
                .unwrap_or("")
                .trim_end_matches('Z')
                .to_string(),
            None => timestamp.chars().take(19).collect(),
        };
        parts.push(style.paint(&short, Color::Dim));
    }
    let level = entry
        .get("level")
        .and_then(Value::as_str)
        .unwrap_or("INFO")
        .to_uppercase();
    let padded = format!("{level:7}");
    parts.push(match level_color(&level) {
        Some(c) => style.paint(&padded, c),
        None => padded,
    });
    let component = text("component");
    if !component.is_empty() {
        parts.push(style.paint(component, Color::Cyan));
    }
    let job = text("job_id");
    if !job.is_empty() {
        parts.push(job.to_string());
    }
    if let Some(sheet) = entry.get("sheet_num").filter(|v| !v.is_null()) {
        parts.push(style.paint(&format!("sheet:{}", python_text(sheet)), Color::Green));
    }
    parts.push(match entry.get("event") {
        Some(v) => python_text(v),
        None => String::new(),
    });
    // Our job events say what happened in a sentence; the fields behind it are in `--json`.
    let message = entry.get("message").and_then(Value::as_str);
    if let Some(message) = message {
        parts.push(message.to_string());
    }
    let extras: Vec<String> = entry
        .iter()
        .filter(|(k, _)| !COLUMN_KEYS.contains(&k.as_str()))
        .filter(|(k, v)| {
            message.is_none() || (MESSAGE_EXTRAS.contains(&k.as_str()) && !v.is_null())
        })
        .filter(|(k, _)| message.is_none() || k.as_str() != "message")
        .map(|(k, v)| format!("{k}={}", python_text(v)))
        .collect();
    if !extras.is_empty() {
        parts.push(style.paint(&extras.join(" "), Color::Dim));
    }
    parts.join(" ")
}

/// The entries of `content` that pass `filter`, last `lines` of them (all when
/// `lines <= 0`). Filtering comes first so `mozart logs JOB -n 20` shows that score's last
/// 20 entries even in a busy conductor log.
pub fn select_entries(content: &str, filter: &LogFilter, lines: i64) -> Vec<Map<String, Value>> {
    let matching: Vec<Map<String, Value>> = content
        .lines()
        .filter_map(parse_line)
        .filter(|e| should_include(e, filter))
        .collect();
    let keep = usize::try_from(lines).ok().filter(|n| *n > 0);
    match keep {
        Some(n) if matching.len() > n => matching[matching.len() - n..].to_vec(),
        _ => matching,
    }
}

/// Write one line; `false` once stdout is gone (e.g. `mozart logs | head`).
fn emit(out: &mut impl Write, line: &str) -> bool {
    writeln!(out, "{}", crate::output::terminal_safe(line)).is_ok()
}

fn render(entry: &Map<String, Value>, mode: OutputMode, style: &Style) -> String {
    if mode.is_json() {
        entry_json_line(entry)
    } else {
        format_entry(entry, style)
    }
}

/// Where the job's per-sheet output files are, as its events say (`sheet_logs`).
pub fn sheet_logs_of<'a>(
    entries: impl IntoIterator<Item = &'a Map<String, Value>>,
) -> Option<String> {
    entries
        .into_iter()
        .filter_map(|e| e.get("sheet_logs").and_then(Value::as_str))
        .last()
        .map(str::to_string)
}

/// The line that says where a job's full per-sheet output is.
fn sheet_logs_line(dir: &str, style: &Style) -> String {
    style.paint(
        &format!("Sheet logs: {dir} (full output of each sheet that ran past 1 s or printed over 4,000 bytes: sheet-NN.stdout.log, sheet-NN.stderr.log; a shorter one's is in the registry)"),
        Color::Dim,
    )
}

fn display(
    path: &Path,
    filter: &LogFilter,
    lines: i64,
    mode: OutputMode,
    header: bool,
    style: &Style,
) -> Result<i32, CliError> {
    let bytes = std::fs::read(path).map_err(|e| {
        failed(
            format!("Cannot read log file {}: {e}", path.display()),
            &["Check that the file exists and is readable"],
            OutputMode::Human,
        )
    })?;
    let content = String::from_utf8_lossy(&bytes);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if content.trim().is_empty() {
        emit(&mut out, &style.paint("No log entries found.", Color::Dim));
        return Ok(0);
    }
    if header && filter.job_id.is_some() {
        let job_entries: Vec<Map<String, Value>> = content
            .lines()
            .filter_map(parse_line)
            .filter(|e| e.get("sheet_logs").is_some())
            .filter(|e| {
                should_include(
                    e,
                    &LogFilter {
                        min_level: 0,
                        ..filter.clone()
                    },
                )
            })
            .collect();
        if let Some(dir) = sheet_logs_of(&job_entries) {
            emit(&mut out, &sheet_logs_line(&dir, style));
        }
    }
    let entries = select_entries(&content, filter, lines);
    if entries.is_empty() {
        emit(
            &mut out,
            &style.paint("No log entries match the specified filters.", Color::Dim),
        );
        if let Some(id) = &filter.job_id {
            emit(
                &mut out,
                &style.paint(&format!("Score ID filter: {id}"), Color::Dim),
            );
        }
        return Ok(0);
    }
    for entry in &entries {
        if !emit(&mut out, &render(entry, mode, style)) {
            break;
        }
    }
    Ok(0)
}

// ---------------------------------------------------------------------------------------
// Following.
// ---------------------------------------------------------------------------------------

/// An open log file and where we are in it.
struct Tail {
    file: File,
    inode: u64,
    pos: u64,
    partial: Vec<u8>,
}

impl Tail {
    fn open(path: &Path, at_end: bool) -> std::io::Result<Tail> {
        let mut file = File::open(path)?;
        let meta = file.metadata()?;
        let pos = if at_end {
            file.seek(SeekFrom::End(0))?
        } else {
            0
        };
        Ok(Tail {
            file,
            inode: meta.ino(),
            pos,
            partial: Vec::new(),
        })
    }

    /// Complete new lines since the last call.
    fn read_lines(&mut self) -> std::io::Result<Vec<String>> {
        let len = self.file.metadata()?.len();
        if len < self.pos {
            // Truncated in place: start over from the top.
            self.file.seek(SeekFrom::Start(0))?;
            self.pos = 0;
            self.partial.clear();
        }
        let mut buf = Vec::new();
        self.file.read_to_end(&mut buf)?;
        self.pos += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let mut lines = Vec::new();
        while let Some(nl) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            lines.push(String::from_utf8_lossy(&line).into_owned());
        }
        Ok(lines)
    }
}

/// The lines of a `job.logs.follow` stream after its `started` item.
type FollowLines = tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>;

/// An open `job.logs.follow` stream: its lines, the log file it follows, and the writing half
/// of its connection, held while following (dropping it shuts the connection's writing side
/// down, and the conductor ends a stream whose client has hung up).
struct FollowStream {
    lines: FollowLines,
    log_file: String,
    _write: tokio::net::unix::OwnedWriteHalf,
}

/// `--follow` through the conductor's `job.logs.follow` stream. `None` when no conductor
/// answers or it does not know the method (then the file is tailed instead).
fn follow_conductor(
    globals: &Globals,
    filter: &LogFilter,
    mode: OutputMode,
    style: &Style,
) -> Result<Option<i32>, CliError> {
    let paths = crate::conductor_client::paths(globals, None)?;
    let sheet_logs = if paths.socket.exists() {
        sheet_logs_from_conductor(globals, filter.job_id.as_deref())
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("cannot start the follow stream: {e}"), vec![]))?;
    runtime.block_on(async {
        let Some(stream) = open_follow_stream(&paths.socket, filter, mode, 0).await? else {
            return Ok(None);
        };
        let interrupt =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(|e| CliError::failed(format!("cannot listen for Ctrl-C: {e}"), vec![]))?;
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let logs_said = follow_header(
            &mut out,
            filter,
            &stream.log_file,
            sheet_logs.as_deref(),
            mode,
            style,
        );
        let code = relay(
            (stream, &paths.socket),
            interrupt,
            &mut out,
            filter,
            logs_said,
            mode,
            style,
        )
        .await;
        Ok(Some(code))
    })
}

/// Ask for `job.logs.follow` on a connection of its own: the stream's lines and the log
/// file it follows, once its `started` item came (an older conductor answers "method not
/// found" instead: `None`, as when nothing answers). A socket another user controls is an
/// error.
async fn open_follow_stream(
    socket: &Path,
    filter: &LogFilter,
    mode: OutputMode,
    backlog_lines: usize,
) -> Result<Option<FollowStream>, CliError> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let stream = match mozart_ipc::connect_stream(socket, Duration::from_secs(5)).await {
        Ok(stream) => stream,
        Err(err) if err.is_untrusted() => {
            return Err(crate::conductor_client::connect_error(err, mode))
        }
        Err(_) => return Ok(None),
    };
    let (read, mut write) = stream.into_split();
    let params = LogFollowParams {
        job_id: filter.job_id.clone(),
        backlog_lines,
    };
    let request = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": mozart_ipc::methods::JOB_LOGS_FOLLOW,
        "params": params,
    });
    if write
        .write_all(format!("{request}\n").as_bytes())
        .await
        .is_err()
    {
        return Ok(None);
    }
    let mut lines = tokio::io::BufReader::new(read).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
    let started = match first {
        Ok(Ok(Some(line))) => match serde_json::from_str::<Notification<LogFollowItem>>(&line) {
            Ok(Notification {
                params: LogFollowItem::Started(log_file),
                ..
            }) => Some(log_file),
            _ => None,
        },
        _ => None,
    };
    Ok(started.map(|log_file| FollowStream {
        lines,
        log_file,
        _write: write,
    }))
}

/// What is followed, where the job's full output is, and how to stop. True when the
/// sheet-log line needs no saying later (said now, JSON output, or no one job followed).
fn follow_header(
    out: &mut impl Write,
    filter: &LogFilter,
    log_file: &str,
    sheet_logs: Option<&str>,
    mode: OutputMode,
    style: &Style,
) -> bool {
    let what = filter
        .job_id
        .as_deref()
        .map_or_else(|| "all scores".to_string(), |j| format!("score '{j}'"));
    emit(
        out,
        &style.paint(
            &format!("Following the conductor's log for {what} ({log_file})"),
            Color::Dim,
        ),
    );
    // Where the job's full output is: known now for a job the conductor has, else said as
    // soon as its submission comes by.
    let logs_said = match sheet_logs {
        Some(dir) if !mode.is_json() => {
            emit(out, &sheet_logs_line(dir, style));
            true
        }
        _ => mode.is_json() || filter.job_id.is_none(),
    };
    emit(out, &style.paint("Press Ctrl+C to stop", Color::Dim));
    emit(out, "");
    logs_said
}

/// Lines of the conductor's log a stream opened after a restart asks for again: what the
/// new conductor (and the old one, stopping) wrote while no stream was open.
const RECONNECT_BACKLOG: usize = 10_000;

/// The newest log time a stream has sent, and the lines of that moment: a stream opened
/// after a restart shows its backlog from there on, neither repeating a line nor losing one.
struct Shown {
    at: jiff::Timestamp,
    lines: std::collections::HashSet<String>,
}

impl Shown {
    /// Nothing shown yet: a later stream's backlog starts at `at` (the start of `--follow`).
    fn since(at: jiff::Timestamp) -> Shown {
        Shown {
            at,
            lines: std::collections::HashSet::new(),
        }
    }

    /// Note a line the stream sent.
    fn note(&mut self, line: &str) {
        let Some(at) = log_time(line) else { return };
        if at > self.at {
            self.at = at;
            self.lines.clear();
        }
        if at == self.at {
            self.lines.insert(line.to_string());
        }
    }

    /// Whether a line of a later stream is new (a line without a time is shown).
    fn is_new(&self, line: &str) -> bool {
        log_time(line)
            .is_none_or(|at| at > self.at || (at == self.at && !self.lines.contains(line)))
    }
}

/// The time of a conductor log line (`timestamp`).
fn log_time(line: &str) -> Option<jiff::Timestamp> {
    let value: Value = serde_json::from_str(line).ok()?;
    value.get("timestamp")?.as_str()?.parse().ok()
}

/// Print the stream's entries that pass the filter until Ctrl-C or a closed output; the
/// exit code. When the conductor stops (`mozart restart`, a crash), says so, waits for it
/// to answer again and goes on with a stream of the new conductor: first what was logged
/// while none was open.
async fn relay(
    (mut stream, socket): (FollowStream, &Path),
    mut interrupt: tokio::signal::unix::Signal,
    out: &mut impl Write,
    filter: &LogFilter,
    mut logs_said: bool,
    mode: OutputMode,
    style: &Style,
) -> i32 {
    let mut shown = Shown::since(jiff::Timestamp::now());
    // What an earlier stream showed, for a stream opened after a restart.
    let mut before: Option<Shown> = None;
    loop {
        let line = tokio::select! {
            line = stream.lines.next_line() => line,
            _ = interrupt.recv() => {
                emit(out, "");
                emit(out, &style.paint("Stopped following logs.", Color::Dim));
                return 0;
            }
        };
        let Ok(Some(line)) = line else {
            emit(out, "");
            emit(
                out,
                &style.paint(
                    "The conductor stopped; waiting for it to start again (Ctrl+C to stop).",
                    Color::Yellow,
                ),
            );
            match reopen(socket, filter, mode, &mut interrupt).await {
                Ok(Some(next)) => {
                    emit(
                        out,
                        &style.paint(
                            &format!(
                                "The conductor started again; following its log ({}).",
                                next.log_file
                            ),
                            Color::Dim,
                        ),
                    );
                    emit(out, "");
                    stream = next;
                    before = Some(Shown {
                        at: shown.at,
                        lines: shown.lines.clone(),
                    });
                    continue;
                }
                Ok(None) => {
                    emit(out, "");
                    emit(out, &style.paint("Stopped following logs.", Color::Dim));
                    return 0;
                }
                Err(e) => {
                    emit(out, &format!("Error: {e}"));
                    return 1;
                }
            }
        };
        let Ok(message) = serde_json::from_str::<Notification<LogFollowItem>>(&line) else {
            continue;
        };
        let entry = match message.params {
            LogFollowItem::Line(l) => {
                if before.as_ref().is_some_and(|b| !b.is_new(&l)) {
                    continue;
                }
                shown.note(&l);
                parse_line(&l)
            }
            LogFollowItem::Entry(e) => Some(e),
            LogFollowItem::Started(_) => None,
        };
        if let Some(entry) = entry.filter(|e| should_include(e, filter)) {
            if !logs_said {
                if let Some(dir) = sheet_logs_of([&entry]) {
                    emit(out, &sheet_logs_line(&dir, style));
                    logs_said = true;
                }
            }
            if !emit(out, &render(&entry, mode, style)) {
                return 0;
            }
        }
    }
}

/// A stream of the conductor once it answers again, with the lines it logged meanwhile;
/// `None` on Ctrl-C. A socket another user controls is an error.
async fn reopen(
    socket: &Path,
    filter: &LogFilter,
    mode: OutputMode,
    interrupt: &mut tokio::signal::unix::Signal,
) -> Result<Option<FollowStream>, CliError> {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = interrupt.recv() => return Ok(None),
        }
        if let Some(stream) = open_follow_stream(socket, filter, mode, RECONNECT_BACKLOG).await? {
            return Ok(Some(stream));
        }
    }
}

/// The job's sheet-log directory as the conductor knows it (`job.status`'s workspace).
fn sheet_logs_from_conductor(globals: &Globals, job_id: Option<&str>) -> Option<String> {
    let id = job_id?;
    let mut client = crate::conductor_client::connect(globals).ok()?;
    // Its workspace, not its sheets (a full document carries every sheet of the job).
    let params = mozart_ipc::sheet_view::StatusParams {
        job_id: id.to_string(),
        workspace: None,
        sheets: Some(mozart_ipc::sheet_view::SheetQuery::state_only()),
    };
    let status: mozart_ipc::status::JobStatusResult =
        client.call(mozart_ipc::methods::JOB_STATUS, params).ok()?;
    let workspace = match &status {
        mozart_ipc::status::JobStatusResult::Checkpoint(cp) => cp.workspace.clone(),
        mozart_ipc::status::JobStatusResult::Record(meta) => Some(meta.workspace().to_string()),
    }?;
    Some(
        mozart_ipc::paths::sheet_logs_dir(Path::new(&workspace), id)
            .display()
            .to_string(),
    )
}

fn follow(
    path: &Path,
    filter: &LogFilter,
    mode: OutputMode,
    style: &Style,
) -> Result<i32, CliError> {
    let cannot = |e: std::io::Error| {
        failed(
            format!("Cannot follow log file {}: {e}", path.display()),
            &["Check that the file exists and is readable"],
            OutputMode::Human,
        )
    };
    // One runtime for the whole follow, so the Ctrl-C listener installed once sees an
    // interrupt at any moment (cli.md §1.8: follow modes stopped with Ctrl-C exit 0).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(format!("cannot start the follow timer: {e}"), vec![]))?;
    let mut interrupt = runtime
        .block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        })
        .map_err(|e| CliError::failed(format!("cannot listen for Ctrl-C: {e}"), vec![]))?;
    let mut tail = Tail::open(path, true).map_err(cannot)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    emit(
        &mut out,
        &style.paint(
            &format!("Following log file: {}", path.display()),
            Color::Dim,
        ),
    );
    emit(&mut out, &style.paint("Press Ctrl+C to stop", Color::Dim));
    emit(&mut out, "");
    let mut sleep = |secs: Duration| -> bool {
        runtime.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(secs) => false,
                _ = interrupt.recv() => true,
            }
        })
    };
    let mut logs_said = mode.is_json() || filter.job_id.is_none();
    loop {
        for line in tail.read_lines().map_err(cannot)? {
            if let Some(entry) = parse_line(&line).filter(|e| should_include(e, filter)) {
                if !logs_said {
                    if let Some(dir) = sheet_logs_of([&entry]) {
                        emit(&mut out, &sheet_logs_line(&dir, style));
                        logs_said = true;
                    }
                }
                if !emit(&mut out, &render(&entry, mode, style)) {
                    return Ok(0);
                }
            }
        }
        if sleep(FOLLOW_POLL) {
            emit(&mut out, "");
            emit(
                &mut out,
                &style.paint("Stopped following logs.", Color::Dim),
            );
            return Ok(0);
        }
        match std::fs::metadata(path) {
            Ok(meta) if meta.ino() == tail.inode => {}
            Ok(_) => {
                // Replaced by a new file (rotation by rename): drain the old one, then
                // read the new one from its start.
                for line in tail.read_lines().map_err(cannot)? {
                    if let Some(entry) = parse_line(&line).filter(|e| should_include(e, filter)) {
                        emit(&mut out, &render(&entry, mode, style));
                    }
                }
                tail = Tail::open(path, false).map_err(cannot)?;
            }
            Err(_) => {
                emit(
                    &mut out,
                    &style.paint("Log file rotated. Waiting for new file...", Color::Yellow),
                );
                let mut reopened = None;
                for _ in 0..ROTATION_WAIT_SECS {
                    if sleep(Duration::from_secs(1)) {
                        emit(&mut out, "");
                        emit(
                            &mut out,
                            &style.paint("Stopped following logs.", Color::Dim),
                        );
                        return Ok(0);
                    }
                    if path.exists() {
                        reopened = Some(Tail::open(path, false).map_err(cannot)?);
                        break;
                    }
                }
                match reopened {
                    Some(t) => tail = t,
                    None => {
                        emit(
                            &mut out,
                            &style.paint("Log file not recreated. Stopping.", Color::Yellow),
                        );
                        return Ok(0);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const CONDUCTOR_LINE: &str = r#"{"timestamp":"2026-11-21T22:27:25.272153Z","level":"error","event":"sheet.failed","message":"sheet 2 failed [E009]: boom","component":"jobs","job_id":"bad","sheet_num":2,"attempt":1,"error_code":"E009","exit_code":1,"stderr_log":"/w/logs/sheet-02.stderr.log","stdout_log":null}"#;

    #[test]
    fn conductor_events_show_their_sentence_and_where_the_output_is() {
        let e = parse_line(CONDUCTOR_LINE).unwrap();
        assert_eq!(e["job_id"], "bad");
        assert_eq!(
            format_entry(&e, &Style::plain()),
            "22:27:25 ERROR   jobs bad sheet:2 sheet.failed sheet 2 failed [E009]: boom stderr_log=/w/logs/sheet-02.stderr.log"
        );
        let e = parse_line(r#"{"timestamp":"2026-01-01T00:00:00Z","level":"warning","event":"cannot write","component":"jobs","path":"/x"}"#).unwrap();
        assert_eq!(
            format_entry(&e, &Style::plain()),
            "00:00:00 WARNING jobs cannot write path=/x"
        );
    }

    #[test]
    fn text_lines_of_an_older_conductor_are_shown_as_they_are() {
        let line = "2026-01-01T00:00:00Z  WARN mozart_baton::x: cannot go job_id=\"a.b\"";
        let e = parse_line(line).unwrap();
        assert_eq!(e["_raw"], true);
        assert_eq!(format_entry(&e, &Style::plain()), line);
        let only = |id: &str| LogFilter {
            job_id: Some(id.into()),
            min_level: 0,
        };
        assert!(should_include(&e, &only("a.b")));
        assert!(!should_include(&e, &only("a")));
    }

    #[test]
    fn the_sheet_log_directory_comes_from_the_jobs_events() {
        let log = [
            r#"{"event":"job.submitted","job_id":"j","sheet_logs":"/old/logs"}"#,
            r#"{"event":"sheet.started","job_id":"j"}"#,
            r#"{"event":"job.submitted","job_id":"j","sheet_logs":"/new/logs"}"#,
        ];
        let entries: Vec<Map<String, Value>> = log.iter().filter_map(|l| parse_line(l)).collect();
        assert_eq!(sheet_logs_of(&entries).as_deref(), Some("/new/logs"));
        assert_eq!(sheet_logs_of(&entries[1..2]), None);
    }

    #[test]
    fn upstream_json_lines_and_raw_lines_parse() {
        let e = parse_line(r#"{"event": "job.submitted", "level": "info", "timestamp": "2026-01-01T10:11:12.5+00:00", "component": "manager", "job_id": "x", "sheet_num": 2, "extra": null}"#).unwrap();
        assert_eq!(
            format_entry(&e, &Style::plain()),
            "10:11:12 INFO    manager x sheet:2 job.submitted extra=None"
        );
        let raw = parse_line("   plain text from somewhere  ").unwrap();
        assert_eq!(raw["_raw"], true);
        assert_eq!(
            format_entry(&raw, &Style::plain()),
            "plain text from somewhere"
        );
        assert!(parse_line("   ").is_none());
        assert_eq!(
            entry_json_line(&raw),
            r#"{"event": "plain text from somewhere", "_raw": true}"#
        );
    }

    #[test]
    fn filters_match_the_job_and_minimum_level_then_keep_the_last_lines() {
        let log = [
            r#"{"timestamp":"2026-01-01T00:00:01Z","level":"info","event":"a","job_id":"one"}"#,
            r#"{"timestamp":"2026-01-01T00:00:02Z","level":"info","event":"b","job_id":"two"}"#,
            r#"{"timestamp":"2026-01-01T00:00:03Z","level":"error","event":"c","job_id":"one"}"#,
            r#"{"timestamp":"2026-01-01T00:00:04Z","level":"debug","event":"d","job_id":"one"}"#,
            "stray line about one-more",
            "stray line about one",
            "{\"event\": \"e\", \"level\": \"strange\", \"job_id\": \"one\"}",
        ]
        .join("\n");
        let events = |f: &LogFilter, n: i64| -> Vec<String> {
            select_entries(&log, f, n)
                .iter()
                .map(|e| e["event"].as_str().unwrap().to_string())
                .collect()
        };
        let one = LogFilter {
            job_id: Some("one".into()),
            min_level: 0,
        };
        assert_eq!(
            events(&one, 0),
            vec!["a", "c", "d", "stray line about one", "e"]
        );
        assert_eq!(events(&one, 2), vec!["stray line about one", "e"]);
        let warn = LogFilter {
            job_id: None,
            min_level: level_index("WARNING").unwrap(),
        };
        assert_eq!(events(&warn, 50), vec!["c"]);
        // Unknown levels count as INFO.
        let info = LogFilter {
            job_id: Some("one".into()),
            min_level: 1,
        };
        assert_eq!(
            events(&info, -1),
            vec!["a", "c", "stray line about one", "e"]
        );
    }

    #[test]
    fn rotated_copies_are_found_when_the_file_is_gone() {
        let dir = std::env::temp_dir().join(format!("mozart-logs-rot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("conductor.log");
        assert_eq!(locate(&target), None);
        std::fs::write(dir.join("conductor.log.2"), "x").unwrap();
        assert_eq!(locate(&target), Some(dir.join("conductor.log.2")));
        std::fs::write(&target, "x").unwrap();
        assert_eq!(locate(&target), Some(target.clone()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
