//! The CLI's own logging: `-L/--log-level`, `--log-file`, `--log-format` (cli.md §1.2).
//!
//! Upstream logs to stderr in a human format at WARNING by default, so a normal command
//! prints no log lines; `-L DEBUG` shows what the command did (which socket it reached,
//! which methods it called and how long each took). The conductor's log is a different
//! thing: `mozart start` / `restart` configure it with their own `--log-level`.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::CliError;

/// The level names `-L` accepts (any case; upstream needs upper case, see differences.md).
pub const LEVELS: [&str; 4] = ["DEBUG", "INFO", "WARNING", "ERROR"];

/// The formats `--log-format` accepts.
pub const FORMATS: [&str; 3] = ["json", "console", "both"];

/// Where and how the CLI logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Human lines on stderr (and in the log file when there is one).
    Console,
    /// One JSON object a line, in the conductor log's shape, on stderr (and in the file).
    Json,
    /// Human lines on stderr, JSON lines in the log file.
    Both,
}

fn level_filter(level: Option<&str>) -> LevelFilter {
    match level.map(str::to_ascii_uppercase).as_deref() {
        Some("DEBUG") => LevelFilter::DEBUG,
        Some("INFO") => LevelFilter::INFO,
        Some("ERROR") => LevelFilter::ERROR,
        _ => LevelFilter::WARN,
    }
}

fn format(name: Option<&str>) -> Format {
    match name.map(str::to_ascii_lowercase).as_deref() {
        Some("json") => Format::Json,
        Some("both") => Format::Both,
        _ => Format::Console,
    }
}

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

fn console_layer<W>(writer: W) -> BoxedLayer
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(writer)
        .boxed()
}

fn open_log_file(path: &Path) -> Result<std::fs::File, CliError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|err| {
            CliError::failed(
                format!("Cannot open the log file {}: {err}", path.display()),
                vec!["Check --log-file (or MOZART_LOG_FILE): its directory must exist and be writable.".into()],
            )
        })
}

/// Install the CLI's subscriber from the global options. `both` without a log file is
/// refused with upstream's message; a log file that cannot be opened is named.
pub fn init(
    level: Option<&str>,
    file: Option<&PathBuf>,
    format_name: Option<&str>,
) -> Result<(), CliError> {
    let format = format(format_name);
    if format == Format::Both && file.is_none() {
        return Err(CliError::failed(
            "Logging configuration error: file_path is required when format='both'",
            vec![
                "Check --log-format and --log-file options.".into(),
                "format='both' requires --log-file to be set.".into(),
            ],
        ));
    }
    let mut layers: Vec<BoxedLayer> = Vec::new();
    match format {
        Format::Json => {
            layers.push(mozart_conductor::logging::JsonLines::new(std::io::stderr()).boxed())
        }
        Format::Console | Format::Both => layers.push(console_layer(std::io::stderr)),
    }
    if let Some(path) = file {
        let out = open_log_file(path)?;
        layers.push(match format {
            Format::Console => console_layer(Mutex::new(out)),
            Format::Json | Format::Both => mozart_conductor::logging::JsonLines::new(out).boxed(),
        });
    }
    // Another subscriber already installed (a test harness) keeps its place.
    let _ = tracing_subscriber::registry()
        .with(layers.with_filter(level_filter(level)))
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_in_any_case_and_default_to_warning() {
        assert_eq!(level_filter(None), LevelFilter::WARN);
        assert_eq!(level_filter(Some("debug")), LevelFilter::DEBUG);
        assert_eq!(level_filter(Some("INFO")), LevelFilter::INFO);
        assert_eq!(level_filter(Some("Error")), LevelFilter::ERROR);
        assert_eq!(level_filter(Some("WARNING")), LevelFilter::WARN);
    }

    #[test]
    fn both_without_a_file_is_refused_with_upstreams_words() {
        let err = init(None, None, Some("both")).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("Logging configuration error: file_path is required when format='both'")
        );
    }
}
