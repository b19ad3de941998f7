//! `mozart logs [SCORE_ID]` (cli.md §5.1): show or follow a Mozart log file, filtered by
//! score and level. Never contacts the conductor.
//!
//! The default file is the conductor's own log (`$MOZART_HOME/logs/conductor.log`, clone
//! aware); `-w DIR` reads upstream's per-workspace `DIR/logs/mozart.log`, `--file` any
//! file. Lines are upstream's JSON log lines or our conductor's `tracing` lines; both
//! become one entry shape (`timestamp`, `level`, `component`, `event`, fields).

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
use crate::{CliError, Globals};

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
    /// Follow the log file for new entries (like tail -f).
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
    /// Filter by minimum log level (DEBUG, INFO, WARNING, ERROR).
    #[arg(short = 'l', long = "level", value_name = "TEXT")]
    pub level: Option<String>,
    /// Output raw JSON log entries.
    #[arg(short = 'j', long = "json")]
    pub json: bool,
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
            if let Some(code) = follow_conductor(globals, &filter, args.json, &style)? {
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
            let hint = if from_conductor {
                "Hint: The conductor writes this log while it runs. Start it with: mozart start"
            } else {
                "Hint: Logs are created when running scores with file logging enabled.\n\
                 Use --log-file or --log-format=both with mozart run to enable file logging."
            };
            println!("{}", style.paint(hint, Color::Dim));
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
            false,
        ));
    }
    if !globals.quiet && !args.json {
        println!(
            "{}",
            style.paint(&format!("Log file: {}", path.display()), Color::Dim)
        );
    }
    if args.follow {
        follow(&path, &filter, args.json, &style)
    } else {
        display(&path, &filter, args.lines, args.json, &style)
    }
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
    Ok((paths.log_file, true))
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

/// Parse one log line: a JSON object, a `tracing` line, or (anything else) a raw entry
/// `{"event": <line>, "_raw": true}`. Blank lines give `None`.
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
    if let Some(map) = parse_tracing_line(line) {
        return Some(map);
    }
    let mut raw = Map::new();
    raw.insert("event".into(), Value::String(line.to_string()));
    raw.insert("_raw".into(), Value::Bool(true));
    Some(raw)
}

/// `2026-01-01T10:00:00.123Z  INFO span{k=v}: target: message k=v ...` (tracing-subscriber's
/// default format, which the conductor writes).
fn parse_tracing_line(line: &str) -> Option<Map<String, Value>> {
    let (timestamp, rest) = line.split_once(' ')?;
    if !timestamp.contains('T') || !timestamp.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let rest = rest.trim_start();
    let (level, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let level = match level {
        "WARN" => "WARNING",
        "TRACE" | "DEBUG" | "INFO" | "ERROR" => level,
        _ => return None,
    };
    let mut map = Map::new();
    map.insert("timestamp".into(), Value::String(timestamp.to_string()));
    map.insert("level".into(), Value::String(level.to_string()));
    let mut rest = rest.trim_start();
    let mut span_fields = Map::new();
    // Span context comes first, as `name{fields}:name{fields}: `; a target never has braces.
    if let Some(end) = split_point(rest) {
        let head = &rest[..end];
        if head.contains('{') {
            for (_, body) in spans(head) {
                if let Some(fields) = parse_fields(body) {
                    span_fields.extend(fields);
                }
            }
            rest = rest[end + 1..].trim_start();
        }
    }
    let mut message = rest;
    if let Some(end) = split_point(rest) {
        let target = &rest[..end];
        if !target.contains(' ') {
            map.insert("component".into(), Value::String(target.to_string()));
            message = rest[end + 1..].trim_start();
        }
    }
    // The message runs until the first position from which the rest is all `k=v` fields.
    let mut event = message.to_string();
    let mut fields = Map::new();
    let candidates = std::iter::once(0).chain(message.match_indices(' ').map(|(i, _)| i + 1));
    for start in candidates {
        if let Some(parsed) = parse_fields(&message[start..]) {
            event = message[..start].trim_end().to_string();
            fields = parsed;
            break;
        }
    }
    map.insert("event".into(), Value::String(event));
    for (k, v) in span_fields.into_iter().chain(fields) {
        map.entry(k).or_insert(v);
    }
    Some(map)
}

/// Byte index of the first `:` followed by a space (or the end), outside braces and
/// quotes, that is not part of a `::` path.
fn split_point(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut depth, mut quoted, mut escaped) = (0i32, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if quoted {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => quoted = true,
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b':' if depth == 0 => {
                let next = bytes.get(i + 1).copied();
                let prev = if i > 0 { Some(bytes[i - 1]) } else { None };
                if next != Some(b':') && prev != Some(b':') && matches!(next, None | Some(b' ')) {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `(name, body)` of each `name{body}` in a span chain.
fn spans(head: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = head;
    while let Some(open) = rest.find('{') {
        let name = rest[..open].trim_start_matches(':');
        let mut depth = 0;
        let mut close = None;
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { break };
        out.push((name, &rest[open + 1..close]));
        rest = &rest[close + 1..];
    }
    out
}

/// Parse `k=v k2="quoted \"v\""` completely, or `None` if any part is not a field.
fn parse_fields(text: &str) -> Option<Map<String, Value>> {
    let mut map = Map::new();
    let mut chars = text.trim().chars().peekable();
    chars.peek()?;
    while chars.peek().is_some() {
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                key.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if key.is_empty() || chars.next() != Some('=') {
            return None;
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => match chars.next()? {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        'r' => s.push('\r'),
                        other => s.push(other),
                    },
                    c => s.push(c),
                }
            }
            Value::String(s)
        } else {
            let mut s = String::new();
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                s.push(c);
                chars.next();
            }
            scalar(&s)
        };
        match chars.peek() {
            None => {}
            Some(' ') => {
                while chars.peek() == Some(&' ') {
                    chars.next();
                }
            }
            Some(_) => return None,
        }
        map.insert(key, value);
    }
    Some(map)
}

/// An unquoted field value: integer, float, boolean, else text.
fn scalar(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    if let Ok(f) = text.parse::<f64>() {
        if f.is_finite() && text.contains('.') {
            return Value::from(f);
        }
    }
    match text {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(text.to_string()),
    }
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
    let extras: Vec<String> = entry
        .iter()
        .filter(|(k, _)| !COLUMN_KEYS.contains(&k.as_str()))
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
    writeln!(out, "{line}").is_ok()
}

fn render(entry: &Map<String, Value>, json: bool, style: &Style) -> String {
    if json {
        entry_json_line(entry)
    } else {
        format_entry(entry, style)
    }
}

fn display(
    path: &Path,
    filter: &LogFilter,
    lines: i64,
    json: bool,
    style: &Style,
) -> Result<i32, CliError> {
    let bytes = std::fs::read(path).map_err(|e| {
        failed(
            format!("Cannot read log file {}: {e}", path.display()),
            &["Check that the file exists and is readable"],
            false,
        )
    })?;
    let content = String::from_utf8_lossy(&bytes);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if content.trim().is_empty() {
        emit(&mut out, &style.paint("No log entries found.", Color::Dim));
        return Ok(0);
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
        if !emit(&mut out, &render(entry, json, style)) {
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

/// `--follow` through the conductor's `job.logs.follow` stream. `None` when no conductor
/// answers or it does not know the method (then the file is tailed instead).
fn follow_conductor(
    globals: &Globals,
    filter: &LogFilter,
    json: bool,
    style: &Style,
) -> Result<Option<i32>, CliError> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let paths = crate::conductor_client::paths(globals, None)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(format!("cannot start the follow stream: {e}"), &[], false))?;
    runtime.block_on(async {
        let Ok(stream) = tokio::net::UnixStream::connect(&paths.socket).await else {
            return Ok(None);
        };
        let (read, mut write) = stream.into_split();
        let params = LogFollowParams {
            job_id: filter.job_id.clone(),
            backlog_lines: 0,
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
        // The stream starts with a `started` item; an older conductor answers "method not
        // found" instead.
        let started = match first {
            Ok(Ok(Some(line))) => {
                match serde_json::from_str::<Notification<LogFollowItem>>(&line) {
                    Ok(Notification {
                        params: LogFollowItem::Started(log_file),
                        ..
                    }) => Some(log_file),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some(log_file) = started else {
            return Ok(None);
        };
        let mut interrupt =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(|e| failed(format!("cannot listen for Ctrl-C: {e}"), &[], false))?;
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let what = filter
            .job_id
            .as_deref()
            .map_or_else(|| "all scores".to_string(), |j| format!("score '{j}'"));
        emit(
            &mut out,
            &style.paint(
                &format!("Following the conductor's log for {what} ({log_file})"),
                Color::Dim,
            ),
        );
        emit(&mut out, &style.paint("Press Ctrl+C to stop", Color::Dim));
        emit(&mut out, "");
        loop {
            let line = tokio::select! {
                line = lines.next_line() => line,
                _ = interrupt.recv() => {
                    emit(&mut out, "");
                    emit(&mut out, &style.paint("Stopped following logs.", Color::Dim));
                    return Ok(Some(0));
                }
            };
            let Ok(Some(line)) = line else {
                emit(&mut out, "");
                emit(
                    &mut out,
                    &style.paint("The conductor stopped; no more log entries.", Color::Yellow),
                );
                return Ok(Some(0));
            };
            let Ok(message) = serde_json::from_str::<Notification<LogFollowItem>>(&line) else {
                continue;
            };
            let entry = match message.params {
                LogFollowItem::Line(l) => parse_line(&l),
                LogFollowItem::Entry(e) => Some(e),
                LogFollowItem::Started(_) => None,
            };
            if let Some(entry) = entry.filter(|e| should_include(e, filter)) {
                if !emit(&mut out, &render(&entry, json, style)) {
                    return Ok(Some(0));
                }
            }
        }
    })
}

fn follow(path: &Path, filter: &LogFilter, json: bool, style: &Style) -> Result<i32, CliError> {
    let cannot = |e: std::io::Error| {
        failed(
            format!("Cannot follow log file {}: {e}", path.display()),
            &["Check that the file exists and is readable"],
            false,
        )
    };
    // One runtime for the whole follow, so the Ctrl-C listener installed once sees an
    // interrupt at any moment (cli.md §1.8: follow modes stopped with Ctrl-C exit 0).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(format!("cannot start the follow timer: {e}"), &[], false))?;
    let mut interrupt = runtime
        .block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        })
        .map_err(|e| failed(format!("cannot listen for Ctrl-C: {e}"), &[], false))?;
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
    loop {
        for line in tail.read_lines().map_err(cannot)? {
            if let Some(entry) = parse_line(&line).filter(|e| should_include(e, filter)) {
                if !emit(&mut out, &render(&entry, json, style)) {
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
                        emit(&mut out, &render(&entry, json, style));
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
    use serde_json::json;

    const CONDUCTOR_LINE: &str = "2026-11-21T22:27:25.272153Z  INFO mozart_conductor::manager::host: job finished job_id=\"bad\" outcome=Failed reason=\"sheets [1, 2] failed\" new_work=false";

    #[test]
    fn conductor_tracing_lines_become_structured_entries() {
        let e = parse_line(CONDUCTOR_LINE).unwrap();
        assert_eq!(
            Value::Object(e.clone()),
            json!({
                "timestamp": "2026-11-21T22:27:25.272153Z",
                "level": "INFO",
                "component": "mozart_conductor::manager::host",
                "event": "job finished",
                "job_id": "bad",
                "outcome": "Failed",
                "reason": "sheets [1, 2] failed",
                "new_work": false
            })
        );
        assert_eq!(
            format_entry(&e, &Style::plain()),
            "22:27:25 INFO    mozart_conductor::manager::host bad job finished outcome=Failed reason=sheets [1, 2] failed new_work=False"
        );
    }

    #[test]
    fn span_fields_warn_levels_and_escaped_quotes_are_understood() {
        let line = "2026-01-01T00:00:00Z  WARN job{job_id=\"a.b\" sheet_num=3}: mozart_baton::x: cannot \"go\" error=\"said \\\"no\\\"\" n=1.5";
        let e = parse_line(line).unwrap();
        assert_eq!(e["level"], "WARNING");
        assert_eq!(e["job_id"], "a.b");
        assert_eq!(e["sheet_num"], 3);
        assert_eq!(e["component"], "mozart_baton::x");
        assert_eq!(e["event"], "cannot \"go\"");
        assert_eq!(e["error"], "said \"no\"");
        assert_eq!(e["n"], 1.5);
        let text = format_entry(&e, &Style::plain());
        assert_eq!(
            text,
            "00:00:00 WARNING mozart_baton::x a.b sheet:3 cannot \"go\" error=said \"no\" n=1.5"
        );
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
            "2026-01-01T00:00:01Z  INFO m: a job_id=\"one\"",
            "2026-01-01T00:00:02Z  INFO m: b job_id=\"two\"",
            "2026-01-01T00:00:03Z ERROR m: c job_id=\"one\"",
            "2026-01-01T00:00:04Z DEBUG m: d job_id=\"one\"",
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
