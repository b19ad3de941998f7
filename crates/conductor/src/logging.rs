//! Conductor logging: tracing to the log file as JSON lines (and, in the foreground, to
//! stderr in a human format), with a level that SIGHUP can change (conductor.md §5.3 step 6).
//!
//! Every line of the log file is one JSON object in upstream's shape (conductor.md §4.4):
//! `timestamp` (ISO-8601 UTC), `level` (`debug`, `info`, `warning`, `error`), `event`,
//! `component`, then the event's own fields. A job event names itself with an `event`
//! field (`job.submitted`, `sheet.completed`, …) and carries its human sentence as
//! `message`; any other line's `event` is its message, as upstream's structlog writes it.
//! Nobody has to parse text back into fields: `mozart logs` reads these objects.

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

/// Replaces the secrets in a text (the conductor knows no rules itself: `mozart start`
/// hands it the backends' redaction). It takes the text and hands it back as it is when it
/// holds no secret, as most lines do: no copy per line.
pub type Redactor = fn(String) -> String;

fn no_redaction(text: String) -> String {
    text
}

/// Rewrites every line of the human console log through a redaction function before it is
/// written: the log quotes instrument errors, hook failures and paths, and must not keep a
/// credential any of them held (issue 21).
struct Redacting<M> {
    inner: M,
    redact: Redactor,
}

/// One write of [`Redacting`].
struct RedactingWriter<W> {
    inner: W,
    redact: Redactor,
}

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for Redacting<M>
{
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer(),
            redact: self.redact,
        }
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes each event whole, in one call.
        let redacted = (self.redact)(String::from_utf8_lossy(buf).into_owned());
        self.inner.write_all(redacted.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Install the global subscriber writing JSON lines to `log_file` (created, appended) and,
/// when `foreground`, human lines to stderr too, every line passed through `redact`. If a
/// subscriber is already installed (the conductor runs inside another program), that one is
/// kept.
pub fn init(
    log_file: &Path,
    level: &str,
    foreground: bool,
    redact: Option<Redactor>,
) -> Result<LogHandle, ConductorError> {
    let redact = redact.unwrap_or(no_redaction);
    if let Some(dir) = log_file.parent() {
        std::fs::create_dir_all(dir).map_err(|err| ConductorError::Logging {
            path: log_file.to_path_buf(),
            message: err.to_string(),
        })?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file)
        .map_err(|err| ConductorError::Logging {
            path: log_file.to_path_buf(),
            message: err.to_string(),
        })?;
    let (filter, handle) = reload::Layer::new(filter_for(level));
    let json = JsonLines::new(file).with_redactor(redact);
    let console = foreground.then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Redacting {
                inner: std::io::stderr,
                redact,
            })
    });
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(json)
        .with(console)
        .try_init();
    Ok(LogHandle {
        reload: installed.is_ok().then_some(handle),
    })
}

/// The layer that writes each event as one JSON object on its own line.
pub struct JsonLines<W: Write + Send + 'static> {
    out: Mutex<W>,
    redact: Redactor,
}

impl<W: Write + Send + 'static> JsonLines<W> {
    /// A layer appending to `out`.
    pub fn new(out: W) -> Self {
        JsonLines {
            out: Mutex::new(out),
            redact: no_redaction,
        }
    }

    /// The same layer, each line passed through `redact` before it is written.
    pub fn with_redactor(mut self, redact: Redactor) -> Self {
        self.redact = redact;
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
        let line = (self.redact)(json_line(event));
        // One write per line on a file opened for appending: lines of concurrent writers
        // never interleave. A failed write cannot be logged anywhere better; it is dropped.
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
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

/// The JSON line (with its newline) for one tracing event.
///
/// Written straight to text as the fields are visited: no map of `Value`s is built and
/// printed (issue 24: ~25 allocations per line, four lines per sheet). The object is the
/// one the map gave: `timestamp`, `level`, `event`, `message` (a job event's sentence),
/// `component`, then the event's own fields in their order; a field named like one of the
/// first five does not repeat it.
pub fn json_line(event: &Event<'_>) -> String {
    let meta = event.metadata();
    let mut fields = Fields::default();
    event.record(&mut fields);
    let mut line = Vec::with_capacity(160 + fields.rest.len());
    let mut timestamp = std::mem::take(&mut fields.scratch);
    timestamp.clear();
    let _ = SystemTime.format_time(&mut Writer::new(&mut timestamp));
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
    String::from_utf8(line).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `text` as a JSON string (quoted, escaped as serde_json escapes).
fn json_str(out: &mut Vec<u8>, text: &str) {
    let _ = serde_json::to_writer(out, text);
}

/// An event's fields as they are visited: the message and event name kept aside, every
/// other field already written as `,"key":value`.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    event: Option<String>,
    rest: Vec<u8>,
    /// The field names written to `rest`, so a repeated one is written once.
    written: Vec<&'static str>,
    /// A buffer for `Debug` values (then the timestamp).
    scratch: String,
}

/// A field's value, borrowed for as long as it is recorded.
enum FieldValue<'a> {
    Str(&'a str),
    Json(serde_json::Value),
}

impl Fields {
    fn put(&mut self, field: &Field, value: FieldValue<'_>) {
        let name = field.name();
        let text = |value: FieldValue<'_>| match value {
            FieldValue::Str(s) => s.to_string(),
            FieldValue::Json(Value::String(s)) => s,
            FieldValue::Json(other) => other.to_string(),
        };
        match name {
            "message" => self.message = Some(text(value)),
            "event" => self.event = Some(text(value)),
            // The line's own keys are not repeated (the map kept the first).
            "timestamp" | "level" | "component" => {}
            _ if self.written.contains(&name) => {}
            _ => {
                self.written.push(name);
                self.rest.push(b',');
                json_str(&mut self.rest, name);
                self.rest.push(b':');
                let null = matches!(value, FieldValue::Json(Value::Null));
                if is_secret_key(name) && !null {
                    self.rest.extend_from_slice(b"\"[REDACTED]\"");
                    return;
                }
                match value {
                    FieldValue::Str(s) => json_str(&mut self.rest, s),
                    FieldValue::Json(v) => {
                        let _ = serde_json::to_writer(&mut self.rest, &v);
                    }
                }
            }
        }
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(
            field,
            FieldValue::Json(
                serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number),
            ),
        );
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, FieldValue::Json(Value::from(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, FieldValue::Json(Value::from(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, FieldValue::Json(Value::Bool(value)));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, FieldValue::Str(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, FieldValue::Json(Value::String(value.to_string())));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%display` values and `?debug` values both arrive here.
        use std::fmt::Write as _;
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        let _ = write!(text, "{value:?}");
        self.put(field, FieldValue::Str(&text));
        self.scratch = text;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mask(text: String) -> String {
        text.replace("hunter2", "[REDACTED]")
    }

    #[test]
    fn every_line_goes_through_the_redactor() {
        let buffer = std::sync::Arc::new(Mutex::new(Vec::<u8>::new()));
        let shared = SharedBuf(buffer.clone());
        let subscriber =
            tracing_subscriber::registry().with(JsonLines::new(shared).with_redactor(mask));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(event = "hook.failed", "password hunter2 refused");
        });
        let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
        assert!(text.contains("password [REDACTED] refused"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    /// A writer into a shared buffer.
    struct SharedBuf(std::sync::Arc<Mutex<Vec<u8>>>);

    impl Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
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
