//! Conductor logging: tracing to the log file (and stderr in the foreground), with a level
//! that SIGHUP can change (conductor.md §5.3 step 6).

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

use tracing_subscriber::fmt::writer::{MakeWriter, MakeWriterExt};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

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

/// Rewrites every log line through a redaction function before it is written: the
/// conductor's log quotes instrument errors, hook failures and paths, and must not keep a
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

/// Replaces the secrets in a text (the conductor knows no rules itself: `mozart start`
/// hands it the backends' redaction).
pub type Redactor = fn(&str) -> String;

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer(),
            redact: self.redact,
        }
    }
}

impl<W: std::io::Write> std::io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes each event whole, in one call.
        let redacted = (self.redact)(&String::from_utf8_lossy(buf));
        self.inner.write_all(redacted.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn no_redaction(text: &str) -> String {
    text.to_string()
}

/// Install the global subscriber writing to `log_file` (created, appended) and, when
/// `foreground`, to stderr too, every line passed through `redact`. If a subscriber is
/// already installed (the conductor runs inside another program), that one is kept.
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
    let file = Mutex::new(file);
    let installed = if foreground {
        let writer = Redacting {
            inner: file.and(std::io::stderr),
            redact,
        };
        tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(writer),
            )
            .try_init()
    } else {
        tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(Redacting {
                        inner: file,
                        redact,
                    }),
            )
            .try_init()
    };
    Ok(LogHandle {
        reload: installed.is_ok().then_some(handle),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mask(text: &str) -> String {
        text.replace("hunter2", "[REDACTED]")
    }

    #[test]
    fn every_line_goes_through_the_redactor() {
        let make = Redacting {
            inner: Mutex::new(Vec::<u8>::new()),
            redact: mask,
        };
        let line = b"WARN hook failed: password hunter2 refused\n";
        {
            let mut writer = make.make_writer();
            assert_eq!(
                writer.write(line).unwrap(),
                line.len(),
                "the whole line is taken"
            );
            writer.flush().unwrap();
        }
        assert_eq!(
            String::from_utf8(make.inner.into_inner().unwrap()).unwrap(),
            "WARN hook failed: password [REDACTED] refused\n"
        );
    }
}
