//! Conductor logging: tracing to the log file as JSON lines (and, in the foreground, to
//! stderr in a human format), with a level that SIGHUP can change (conductor.md §5.3 step 6).
//!
//! Every line of the log file is one JSON object in upstream's shape (conductor.md §4.4):
//! `timestamp` (ISO-8601 UTC), `level` (`debug`, `info`, `warning`, `error`), `event`,
//! `component`, then the event's own fields. A job event names itself with an `event`
//! field (`job.submitted`, `sheet.completed`, …) and carries its human sentence as
//! `message`; any other line's `event` is its message, as upstream's structlog writes it.
//! Nobody has to parse text back into fields: `mozart logs` reads these objects.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

use crate::ConductorError;

/// Changes the log level of the running conductor.
pub struct LogHandle {
    reload: Option<reload::Handle<EnvFilter, Registry>>,
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHandle").finish_non_exhaustive()
    }
}

/// Map upstream's level names to a tracing filter (`warning` → `warn`).
fn filter_for(level: &str) -> EnvFilter {
    let level = match level.to_ascii_lowercase().as_str() {
        "warning" | "warn" => "warn",
        "debug" => "debug",
        "error" => "error",
        "trace" => "trace",
        _ => "info",
    };
    EnvFilter::new(level)
}

impl LogHandle {
    /// Apply a new level; a failure is logged and otherwise ignored.
    pub fn set_level(&self, level: &str) {
        if let Some(handle) = &self.reload {
            if let Err(err) = handle.reload(filter_for(level)) {
                tracing::warn!(error = %err, "daemon.log_level_reload_failed");
            }
        }
    }
}

/// How the conductor's log lines lose their secrets. The conductor knows no rules itself:
/// `mozart start` hands in the backends' redaction. Each text value of a line (its message,
/// a string or `%display` field, an error) is redacted once, before it is written to either
/// output, and a field whose name says it holds a secret loses its value.
#[derive(Debug, Clone, Copy)]
pub struct Redaction {
    /// `text` with its secrets replaced; the text itself when it holds none (most do: no
    /// copy).
    pub text: for<'a> fn(&'a str) -> Cow<'a, str>,
    /// Whether a field's name says its value is a secret (`client_secret`, `auth`), beyond
    /// the names every log redacts (`api_key`, `password`, `…token`; not `input_tokens`).
    pub secret_name: fn(&str) -> bool,
    /// Whether a value is plainly not a secret whatever its field's name (`true`, `$VAR`,
    /// an earlier marker).
    pub placeholder: fn(&str) -> bool,
}

fn text_as_is(text: &str) -> Cow<'_, str> {
    Cow::Borrowed(text)
}

fn no_name(_: &str) -> bool {
    false
}

fn every_value(_: &str) -> bool {
    true
}

impl Redaction {
    /// No redaction beyond the secret field names every log redacts.
    pub const NONE: Redaction = Redaction {
        text: text_as_is,
        secret_name: no_name,
        placeholder: every_value,
    };
}

/// Install the global subscriber writing JSON lines to `log_file` (created, appended) and,
/// when `foreground`, human lines to stderr too, both with `redaction`'s secrets replaced.
/// If a subscriber is already installed (the conductor runs inside another program), that
/// one is kept.
pub fn init(
    log_file: &Path,
    level: &str,
    foreground: bool,
    redaction: Option<Redaction>,
) -> Result<LogHandle, ConductorError> {
    if let Some(dir) = log_file.parent() {
        std::fs::create_dir_all(dir).map_err(|err| ConductorError::Logging {
            path: log_file.to_path_buf(),
            message: err.to_string(),
        })?;
    }
    let file = RotatingLog::open(log_file, LOG_MAX_BYTES, LOG_BACKUPS).map_err(|err| {
        ConductorError::Logging {
            path: log_file.to_path_buf(),
            message: err.to_string(),
        }
    })?;
    let (filter, handle) = reload::Layer::new(filter_for(level));
    let mut lines = JsonLines::new(file).with_redaction(redaction.unwrap_or(Redaction::NONE));
    if foreground {
        lines = lines.with_console(std::io::stderr());
    }
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .try_init();
    Ok(LogHandle {
        reload: installed.is_ok().then_some(handle),
    })
}

/// Size at which the conductor's log is rotated (upstream's 50 MiB).
pub const LOG_MAX_BYTES: u64 = 50 * 1024 * 1024;
/// Rotated logs kept beside it (`conductor.log.1` newest … `conductor.log.5`), as upstream.
pub const LOG_BACKUPS: u32 = 5;

/// The conductor's log file, rotated by size as upstream's `RotatingFileHandler`: a line
/// that would take the file past `max_bytes` first moves `log` to `log.1` (`log.1` to
/// `log.2`, …, the oldest past `backups` dropped) and starts a new `log`. A file already
/// that large when the conductor starts is rotated before its first line. When the
/// process's stdout / stderr are that file (the detached conductor's are), they follow it
/// to the new one, so a panic lands in the current log.
#[derive(Debug)]
pub struct RotatingLog {
    path: std::path::PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    backups: u32,
}

impl RotatingLog {
    /// Open (create, append to) `path`, rotating it first if it is already `max_bytes`.
    pub fn open(path: &Path, max_bytes: u64, backups: u32) -> std::io::Result<Self> {
        let file = Self::append(path)?;
        let size = file.metadata()?.len();
        let mut log = RotatingLog {
            path: path.to_path_buf(),
            file,
            size,
            max_bytes,
            backups,
        };
        if log.size >= log.max_bytes {
            log.rotate()?;
        }
        Ok(log)
    }

    fn append(path: &Path) -> std::io::Result<File> {
        OpenOptions::new().create(true).append(true).open(path)
    }

    fn backup(&self, n: u32) -> std::path::PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        std::path::PathBuf::from(name)
    }

    /// `log.(k)` → `log.(k+1)` from the oldest down, `log` → `log.1`, a new `log`.
    fn rotate(&mut self) -> std::io::Result<()> {
        if self.backups == 0 {
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        for n in (1..self.backups).rev() {
            let from = self.backup(n);
            if from.exists() {
                std::fs::rename(&from, self.backup(n + 1))?;
            }
        }
        std::fs::rename(&self.path, self.backup(1))?;
        let file = Self::append(&self.path)?;
        let old = std::mem::replace(&mut self.file, file);
        follow_std_streams(&old, &self.file);
        self.size = 0;
        Ok(())
    }
}

/// Point stdout and stderr at `new` where they were `old` (the same file, not just the
/// same name): the detached conductor's are its log.
fn follow_std_streams(old: &File, new: &File) {
    use nix::sys::stat::{fstat, FileStat};
    let Ok(was) = fstat(old) else {
        return;
    };
    let is_old = |stat: nix::Result<FileStat>| {
        stat.is_ok_and(|s| s.st_dev == was.st_dev && s.st_ino == was.st_ino)
    };
    if is_old(fstat(std::io::stdout())) {
        let _ = nix::unistd::dup2_stdout(new);
    }
    if is_old(fstat(std::io::stderr())) {
        let _ = nix::unistd::dup2_stderr(new);
    }
}

impl Write for RotatingLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.size > 0 && self.size + buf.len() as u64 > self.max_bytes {
            // A rotation that fails (a full disk, a directory made read-only) keeps the
            // line in the file as it is: the log is never lost for it.
            let _ = self.rotate();
        }
        let n = self.file.write(buf)?;
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The layer that writes each event as one JSON object on its own line and, with a
/// console, as one human line in tracing-subscriber's `Full` format without colours
/// (`2026-11-28T09:16:43.049467Z  INFO mozart_jobs::manager::events: sheet 3 completed
/// event="sheet.completed" sheet_num=3`). Both lines come from one visit of the event's
/// fields: one timestamp, one redaction of each text.
pub struct JsonLines<W: Write + Send + 'static> {
    out: Mutex<W>,
    console: Option<Mutex<Box<dyn Write + Send>>>,
    redaction: Redaction,
}

impl<W: Write + Send + 'static> JsonLines<W> {
    /// A layer appending to `out`.
    pub fn new(out: W) -> Self {
        JsonLines {
            out: Mutex::new(out),
            console: None,
            redaction: Redaction::NONE,
        }
    }

    /// The same layer, each text redacted by `redaction` before it is written.
    pub fn with_redaction(mut self, redaction: Redaction) -> Self {
        self.redaction = redaction;
        self
    }

    /// The same layer, writing each event to `console` as a human line too.
    pub fn with_console(mut self, console: impl Write + Send + 'static) -> Self {
        self.console = Some(Mutex::new(Box::new(console)));
        self
    }
}

impl JsonLines<File> {
    /// A layer appending to the file at `path` (for tests and embedders).
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        Ok(Self::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        ))
    }
}

impl<S: Subscriber, W: Write + Send + 'static> Layer<S> for JsonLines<W> {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let lines = event_lines(event, &self.redaction, self.console.is_some());
        // One write per line on a file opened for appending: lines of concurrent writers
        // never interleave. A failed write cannot be logged anywhere better; it is dropped.
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(lines.json.as_bytes());
            let _ = out.flush();
        }
        if let (Some(console), Some(human)) = (&self.console, &lines.human) {
            if let Ok(mut console) = console.lock() {
                let _ = console.write_all(human.as_bytes());
            }
        }
    }
}

/// Upstream's level names.
fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG | Level::TRACE => "debug",
    }
}

/// `mozart_jobs::manager::host` → `jobs`: the part of the conductor that spoke.
fn component(target: &str) -> &str {
    let krate = target.split("::").next().unwrap_or(target);
    krate.strip_prefix("mozart_").unwrap_or(krate)
}

/// Whether a field's value is a secret (upstream redacts these keys). Token *counts*
/// (`input_tokens`, …) are numbers worth keeping.
fn is_secret_key(key: &str) -> bool {
    // Compared without a lower-cased copy: every field of every line is asked.
    let key = key.as_bytes();
    let has = |word: &&str| {
        key.windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
    };
    if key.len() >= 6 && key[key.len() - 6..].eq_ignore_ascii_case(b"tokens") {
        return false;
    }
    [
        "api_key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "authorization",
        "bearer",
        "auth_header",
    ]
    .iter()
    .any(has)
}

/// The lines of one event: the JSON line, and the human line when a console wants it.
struct EventLines {
    json: String,
    human: Option<String>,
}

/// tracing-subscriber's level column (`Full` format: right-aligned to five).
fn level_column(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => " WARN",
        Level::INFO => " INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// The JSON line (with its newline) for one tracing event, and the human line (with its
/// newline) when `human` is asked.
///
/// Written straight to text as the fields are visited: no map of `Value`s is built and
/// printed (issue 24). The object is the one the map gave: `timestamp`, `level`, `event`,
/// `message` (a job event's sentence), `component`, then the event's own fields in their
/// order; a field named like one of the first five does not repeat it. The human line is
/// tracing-subscriber's `Full` format without colours: timestamp, level, target, then the
/// message and every field as `name=value` in their order.
fn event_lines(event: &Event<'_>, redaction: &Redaction, human: bool) -> EventLines {
    let meta = event.metadata();
    let mut fields = Fields::new(redaction, human);
    event.record(&mut fields);
    let mut timestamp = std::mem::take(&mut fields.scratch);
    timestamp.clear();
    let _ = SystemTime.format_time(&mut Writer::new(&mut timestamp));
    let human = human.then(|| {
        let target = fields.log_target.as_deref().unwrap_or(meta.target());
        let mut line =
            String::with_capacity(timestamp.len() + target.len() + fields.human.len() + 10);
        line.push_str(&timestamp);
        line.push(' ');
        line.push_str(level_column(meta.level()));
        line.push(' ');
        line.push_str(target);
        line.push_str(": ");
        line.push_str(&fields.human);
        line.push('\n');
        line
    });
    let mut line = Vec::with_capacity(160 + fields.rest.len());
    line.extend_from_slice(b"{\"timestamp\":");
    json_str(&mut line, &timestamp);
    line.extend_from_slice(b",\"level\":\"");
    line.extend_from_slice(level_name(meta.level()).as_bytes());
    line.extend_from_slice(b"\",\"event\":");
    // A job event names itself (`event = "sheet.completed"`) and its message is the human
    // sentence; anything else is named by its message, as upstream's log lines are.
    match (fields.event, fields.message) {
        (Some(name), message) => {
            json_str(&mut line, &name);
            if let Some(message) = message {
                line.extend_from_slice(b",\"message\":");
                json_str(&mut line, &message);
            }
        }
        (None, Some(message)) => json_str(&mut line, &message),
        (None, None) => line.extend_from_slice(b"\"\""),
    }
    line.extend_from_slice(b",\"component\":");
    json_str(&mut line, component(meta.target()));
    line.extend_from_slice(&fields.rest);
    line.extend_from_slice(b"}\n");
    // Every piece is UTF-8 (serde_json's strings, ASCII punctuation): never lossy.
    let json = String::from_utf8(line)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    EventLines { json, human }
}

/// The JSON line (with its newline) for one tracing event, nothing redacted but the secret
/// field names every log redacts.
pub fn json_line(event: &Event<'_>) -> String {
    event_lines(event, &Redaction::NONE, false).json
}

/// A float as JSON: `null` when it has no JSON form.
fn float_json(value: f64) -> Value {
    serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number)
}

/// `text` as a JSON string (quoted, escaped as serde_json escapes: control characters, `"`
/// and `\\`). Most texts of a line (names, IDs, paths, sentences) need no escape and are
/// copied between quotes as they are, without the serializer (issue 24).
fn json_str(out: &mut Vec<u8>, text: &str) {
    if text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        let _ = serde_json::to_writer(out, text);
    } else {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// `text` for a terminal: the control characters a terminal acts on (escape sequences,
/// bell, backspace, form feed, delete, C1 codes) written as escapes, as tracing-subscriber
/// writes a message.
fn push_escaped(out: &mut String, text: &str) {
    use std::fmt::Write as _;
    let plain = |c: char| {
        !matches!(
            c,
            '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}'
        )
    };
    if text.chars().all(plain) {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '\x1b' => out.push_str("\\x1b"),
            '\x07' => out.push_str("\\x07"),
            '\x08' => out.push_str("\\x08"),
            '\x0c' => out.push_str("\\x0c"),
            '\x7f' => out.push_str("\\x7f"),
            '\u{80}'..='\u{9f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// What a field's name says about its value, asked once per name and thread (names are
/// the callsites' own `&'static str`s).
#[derive(Clone, Copy)]
struct NameVerdict {
    /// Redacted whatever the value (`api_key`, `password`, `…token`).
    always: bool,
    /// Redacted unless the value is a placeholder (the backends' wider rule).
    unless_placeholder: bool,
}

/// Hashes the verdict cache's keys (addresses and a length): FxHash's step, a multiply per
/// word. The keys come from the program's own callsites, not from input, so std's
/// flood-resistant hasher buys nothing and cost a fifth of a field's time (issue 24).
#[derive(Default)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type Verdicts = std::collections::HashMap<
    (usize, usize, usize),
    NameVerdict,
    std::hash::BuildHasherDefault<AddrHasher>,
>;

thread_local! {
    static VERDICTS: std::cell::RefCell<Verdicts> = std::cell::RefCell::new(Verdicts::default());
}

/// [`NameVerdict`] of `name` under `redaction`, from the thread's cache when it was asked
/// before (keyed by the name's address and length, and the rule's address).
fn verdict(name: &'static str, redaction: &Redaction) -> NameVerdict {
    let key = (
        name.as_ptr() as usize,
        name.len(),
        redaction.secret_name as usize,
    );
    let cached = VERDICTS.with(|v| v.borrow().get(&key).copied());
    cached.unwrap_or_else(|| {
        let verdict = NameVerdict {
            always: is_secret_key(name),
            unless_placeholder: (redaction.secret_name)(name),
        };
        VERDICTS.with(|v| {
            let mut v = v.borrow_mut();
            // Names are the callsites' fields (a few hundred); a bound keeps it so.
            if v.len() < 4096 {
                v.insert(key, verdict);
            }
        });
        verdict
    })
}

/// An event's fields as they are visited: the message and event name kept aside, every
/// other field already written as `,"key":value`, and (when asked) the human line's fields.
struct Fields<'r> {
    redaction: &'r Redaction,
    message: Option<String>,
    event: Option<String>,
    rest: Vec<u8>,
    /// The field names written to `rest`, so a repeated one is written once.
    written: Vec<&'static str>,
    /// Whether the human line is built.
    want_human: bool,
    /// The human line's message and fields, space-separated.
    human: String,
    /// The target a `log` crate record names (`log.target`), for the human line.
    log_target: Option<String>,
    /// A buffer for `Debug` values (then the timestamp).
    scratch: String,
}

/// A field's value, borrowed for as long as it is recorded.
enum FieldValue<'a> {
    /// Text: a string, a `%display` or `?debug` value, an error.
    Text(&'a str),
    /// A whole number or a boolean, as JSON.
    Json(serde_json::Value),
    /// A float: JSON `null` when it has no JSON form (`NaN`, `inf`), which is no secret.
    Float(f64),
}

impl<'r> Fields<'r> {
    fn new(redaction: &'r Redaction, want_human: bool) -> Self {
        Fields {
            redaction,
            message: None,
            event: None,
            rest: Vec::new(),
            written: Vec::new(),
            want_human,
            human: String::new(),
            log_target: None,
            scratch: String::new(),
        }
    }

    /// Record one field. `quoted` says how the human line shows a text: `Debug`-quoted (a
    /// string) or as it is (`%display`, `?debug`, an error). `sources` is an error's chain
    /// for the human line.
    fn put(&mut self, field: &Field, value: FieldValue<'_>, quoted: bool, sources: &[String]) {
        let name = field.name();
        // A `log` crate record's metadata: not a field of the human line, which shows the
        // record's target as its own, as tracing-subscriber does.
        let log_meta = name.starts_with("log.");
        if let ("log.target", FieldValue::Text(t)) = (name, &value) {
            self.log_target = Some((*t).to_string());
        }
        let verdict = verdict(name, self.redaction);
        let redacted_text;
        let secret = match &value {
            FieldValue::Float(f) => verdict.always && f.is_finite(),
            FieldValue::Json(_) => verdict.always,
            FieldValue::Text(t) => {
                verdict.always || (verdict.unless_placeholder && !(self.redaction.placeholder)(t))
            }
        };
        let value = match value {
            FieldValue::Text(t) if !secret => {
                redacted_text = (self.redaction.text)(t);
                FieldValue::Text(&redacted_text)
            }
            other => other,
        };
        if self.want_human && !log_meta {
            self.push_human(name, &value, secret, quoted, sources);
        }
        let text = |value: &FieldValue<'_>| match value {
            FieldValue::Text(s) => s.to_string(),
            FieldValue::Json(other) => other.to_string(),
            FieldValue::Float(f) => float_json(*f).to_string(),
        };
        match name {
            "message" => self.message = Some(text(&value)),
            "event" => self.event = Some(text(&value)),
            // The line's own keys are not repeated (the map kept the first).
            "timestamp" | "level" | "component" => {}
            _ if self.written.contains(&name) => {}
            _ => {
                self.written.push(name);
                self.rest.push(b',');
                json_str(&mut self.rest, name);
                self.rest.push(b':');
                if secret {
                    self.rest.extend_from_slice(b"\"[REDACTED]\"");
                    return;
                }
                match value {
                    FieldValue::Text(s) => json_str(&mut self.rest, s),
                    FieldValue::Json(v) => {
                        let _ = serde_json::to_writer(&mut self.rest, &v);
                    }
                    FieldValue::Float(f) => {
                        let _ = serde_json::to_writer(&mut self.rest, &float_json(f));
                    }
                }
            }
        }
    }

    /// The human line's piece for one field (tracing-subscriber's `DefaultFields`).
    fn push_human(
        &mut self,
        name: &str,
        value: &FieldValue<'_>,
        secret: bool,
        quoted: bool,
        sources: &[String],
    ) {
        use std::fmt::Write as _;
        if !self.human.is_empty() {
            self.human.push(' ');
        }
        if name == "message" {
            if let FieldValue::Text(t) = value {
                push_escaped(&mut self.human, t);
            }
            return;
        }
        self.human.push_str(name.strip_prefix("r#").unwrap_or(name));
        self.human.push('=');
        match value {
            _ if secret && quoted => self.human.push_str("\"[REDACTED]\""),
            _ if secret => self.human.push_str("[REDACTED]"),
            FieldValue::Text(t) if quoted => {
                let _ = write!(self.human, "{t:?}");
            }
            FieldValue::Text(t) => push_escaped(&mut self.human, t),
            FieldValue::Float(f) => {
                let _ = write!(self.human, "{f:?}");
            }
            FieldValue::Json(other) => {
                let _ = write!(self.human, "{other}");
            }
        }
        if !sources.is_empty() && !secret {
            self.human.push(' ');
            self.human.push_str(name);
            self.human.push_str(".sources=[");
            for (i, source) in sources.iter().enumerate() {
                if i > 0 {
                    self.human.push_str(", ");
                }
                push_escaped(&mut self.human, &(self.redaction.text)(source));
            }
            self.human.push(']');
        }
    }
}

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, FieldValue::Float(value), false, &[]);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, FieldValue::Json(Value::from(value)), false, &[]);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, FieldValue::Json(Value::from(value)), false, &[]);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, FieldValue::Json(Value::Bool(value)), false, &[]);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, FieldValue::Text(value), true, &[]);
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let text = value.to_string();
        let mut sources = Vec::new();
        if self.want_human {
            // The human line lists the error's sources after it, as tracing-subscriber does.
            let mut next = value.source();
            while let Some(source) = next {
                sources.push(source.to_string());
                next = source.source();
            }
        }
        self.put(field, FieldValue::Text(&text), false, &sources);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%display` values and `?debug` values both arrive here.
        use std::fmt::Write as _;
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        let _ = write!(text, "{value:?}");
        self.put(field, FieldValue::Text(&text), false, &[]);
        self.scratch = text;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mask(text: &str) -> Cow<'_, str> {
        if text.contains("hunter2") {
            Cow::Owned(text.replace("hunter2", "[REDACTED]"))
        } else {
            Cow::Borrowed(text)
        }
    }

    #[test]
    fn the_log_rotates_by_size_keeping_the_newest_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conductor.log");
        let mut log = RotatingLog::open(&path, 100, 2).unwrap();
        for i in 0..10 {
            log.write_all(format!("{i:0>59}\n").as_bytes()).unwrap();
        }
        // 60-byte lines, 100-byte files: one line each; the two newest kept before it.
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(read("conductor.log"), format!("{:0>59}\n", 9));
        assert_eq!(read("conductor.log.1"), format!("{:0>59}\n", 8));
        assert_eq!(read("conductor.log.2"), format!("{:0>59}\n", 7));
        assert!(!dir.path().join("conductor.log.3").exists());
    }

    #[test]
    fn a_text_is_quoted_exactly_as_serde_json_quotes_it() {
        for text in [
            "",
            "sheet 3 completed in 0.1s",
            "/srv/ws/out-3.txt",
            "naïve — ünïcode ✓ 🎻",
            "say \"hi\"",
            "back\\slash",
            "tab\there\nnew line\r\u{1}\u{1f}",
            "del\u{7f} and c1\u{85}",
        ] {
            let mut ours = Vec::new();
            json_str(&mut ours, text);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(text).unwrap(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn every_text_goes_through_the_redaction() {
        let buffer = Buffer::default();
        let redaction = Redaction {
            text: mask,
            ..Redaction::NONE
        };
        let subscriber = tracing_subscriber::registry()
            .with(JsonLines::new(buffer.clone()).with_redaction(redaction));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                event = "hook.failed",
                command = %"login hunter2",
                "password hunter2 refused"
            );
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("password [REDACTED] refused"), "{text}");
        assert!(text.contains("login [REDACTED]"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    /// The backends' redaction, as `mozart start` hands it in.
    fn backends() -> Redaction {
        Redaction {
            text: mozart_backends::redact::redact_cow,
            secret_name: mozart_backends::redact::is_secret_name,
            placeholder: mozart_backends::redact::is_placeholder,
        }
    }

    /// The JSON and human lines one layer writes for `run`'s events.
    fn both_lines(redaction: Redaction, run: impl FnOnce()) -> (String, String) {
        let (json, console) = (Buffer::default(), Buffer::default());
        let layer = JsonLines::new(json.clone())
            .with_redaction(redaction)
            .with_console(console.clone());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), run);
        let text = |b: &Buffer| String::from_utf8(b.0.lock().unwrap().clone()).unwrap();
        (text(&json), text(&console))
    }

    /// A line without its timestamp (the first word).
    fn after_timestamp(line: &str) -> &str {
        line.split_once(' ').map_or(line, |(_, rest)| rest)
    }

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cannot spawn")
        }
    }
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("no such file")
        }
    }
    impl std::error::Error for Inner {}
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Every kind of event the conductor writes, for the human-line comparison.
    fn sample_events() {
        tracing::info!(
            event = "sheet.completed",
            job_id = "fan",
            sheet_num = 39u32,
            attempt = 1u32,
            duration_seconds = 0.668127437,
            validation_passed = true,
            validations_passed = 1u64,
            cost_usd = 0.0,
            input_tokens = 0u64,
            output_tokens = 0u64,
            "sheet 39 completed in 0.7s; validations 1/1 passed"
        );
        tracing::warn!(path = %"/w/é x", error = ?"disk \"full\"", delta = -3i64, "cannot write");
        let err = Outer(Inner);
        tracing::error!(
            error = &err as &(dyn std::error::Error + 'static),
            r#type = "x",
            "spawn failed"
        );
        tracing::debug!(
            ratio = 1e20,
            nothing = f64::NAN,
            "bell \x07 and \x1b[31m red"
        );
        tracing::info!("daemon.stopped");
        tracing::info!(what = "only a field");
    }

    #[test]
    fn the_human_line_is_tracing_subscribers_full_format_without_colours() {
        // The reference: tracing-subscriber's own formatter, as the conductor used it.
        let reference = Buffer::default();
        let writer = reference.clone();
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(fmt), sample_events);
        let reference = String::from_utf8(reference.0.lock().unwrap().clone()).unwrap();
        let (_, ours) = both_lines(Redaction::NONE, sample_events);
        let strip = |text: &str| {
            text.lines()
                .map(after_timestamp)
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            strip(&ours),
            strip(&reference),
            "ours:\n{ours}\nreference:\n{reference}"
        );
        assert_eq!(ours.lines().count(), 6, "{ours}");
        // And the same instant opens both lines of an event.
        let (json, human) = both_lines(Redaction::NONE, || tracing::info!("one"));
        let stamp = human.split(' ').next().unwrap();
        assert!(
            json.starts_with(&format!("{{\"timestamp\":\"{stamp}\"")),
            "{json} / {human}"
        );
    }

    #[test]
    fn a_secret_is_redacted_in_both_lines() {
        let (json, human) = both_lines(backends(), || {
            tracing::warn!(
                api_key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
                auth = "s3cr3t-value-1234",
                session_token = 12345u64,
                input_tokens = 7u64,
                mode = "auto",
                command = %"curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345' x",
                "login with password=hunter2hunter2 refused"
            );
        });
        for line in [&json, &human] {
            for secret in [
                "sk-ant-api03",
                "s3cr3t-value",
                "12345",
                "abcdefghijklmnop",
                "hunter2",
            ] {
                assert!(!line.contains(secret), "{secret} in {line}");
            }
        }
        let e: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(e["api_key"], "[REDACTED]");
        assert_eq!(e["auth"], "[REDACTED]");
        assert_eq!(e["session_token"], "[REDACTED]");
        assert_eq!(e["input_tokens"], 7);
        assert_eq!(e["mode"], "auto");
        assert_eq!(e["event"], "login with password=[REDACTED] refused");
        assert!(
            e["command"]
                .as_str()
                .unwrap()
                .contains("[REDACTED_BEARER_TOKEN]"),
            "{json}"
        );
        let human = after_timestamp(&human);
        assert!(
            human.starts_with(" WARN mozart_conductor::logging::tests: login with password=[REDACTED] refused api_key=\"[REDACTED]\" auth=\"[REDACTED]\" session_token=[REDACTED] input_tokens=7 mode=\"auto\" command=curl"),
            "{human}"
        );
    }

    use std::sync::Arc;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(run: impl FnOnce()) -> Vec<Value> {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(JsonLines::new(buffer.clone()));
        tracing::subscriber::with_default(subscriber, run);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn job_events_and_plain_messages_are_json_lines_in_upstreams_shape() {
        let got = lines(|| {
            tracing::info!(
                event = "sheet.completed",
                job_id = "j",
                sheet_num = 2u32,
                attempt = 1u32,
                duration_seconds = 0.5,
                validation_passed = true,
                "sheet 2 completed"
            );
            tracing::warn!(path = %"/x", error = ?"disk \"full\"", "cannot write");
            tracing::error!(api_key = "sk-secret", input_tokens = 7u64, "auth");
        });
        assert_eq!(got.len(), 3);
        let e = &got[0];
        assert!(e["timestamp"].as_str().unwrap().ends_with('Z'), "{e}");
        assert_eq!(e["level"], "info");
        assert_eq!(e["event"], "sheet.completed");
        assert_eq!(e["message"], "sheet 2 completed");
        assert_eq!(e["component"], "conductor");
        assert_eq!(e["job_id"], "j");
        assert_eq!(e["sheet_num"], 2);
        assert_eq!(e["attempt"], 1);
        assert_eq!(e["duration_seconds"], 0.5);
        assert_eq!(e["validation_passed"], true);
        let w = &got[1];
        assert_eq!(w["level"], "warning");
        assert_eq!(w["event"], "cannot write");
        assert!(w.get("message").is_none(), "{w}");
        assert_eq!(w["path"], "/x");
        assert_eq!(w["error"], "\"disk \\\"full\\\"\"");
        let r = &got[2];
        assert_eq!(r["level"], "error");
        assert_eq!(r["api_key"], "[REDACTED]");
        assert_eq!(r["input_tokens"], 7);
    }

    #[test]
    fn a_line_is_the_objects_text_keys_in_order_nothing_repeated() {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(JsonLines::new(buffer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(
                event = "sheet.completed",
                job_id = "j\"1",
                timestamp = "not this",
                level = 3u64,
                sheet_num = 2u32,
                ratio = 1e20,
                nothing = f64::NAN,
                client_secret = f64::NAN,
                session_token = ?"abc",
                output_tokens = 9u64,
                path = %"/w/é",
                "sheet {} completed",
                2
            );
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let (stamp, rest) = text
            .strip_prefix("{\"timestamp\":\"")
            .and_then(|t| t.split_once('"'))
            .unwrap();
        assert!(stamp.ends_with('Z'), "{text}");
        assert_eq!(
            rest,
            ",\"level\":\"info\",\"event\":\"sheet.completed\",\"message\":\"sheet 2 completed\",\
             \"component\":\"conductor\",\"job_id\":\"j\\\"1\",\"sheet_num\":2,\"ratio\":1e+20,\
             \"nothing\":null,\"client_secret\":null,\"session_token\":\"[REDACTED]\",\
             \"output_tokens\":9,\"path\":\"/w/é\"}\n"
        );
    }

    #[test]
    fn targets_become_short_components() {
        assert_eq!(component("mozart_jobs::manager::host"), "jobs");
        assert_eq!(component("mozart_conductor"), "conductor");
        assert_eq!(component("other::x"), "other");
    }
}
