//! The learning commands (cli.md §8, learning.md §19): read and write the global learning
//! store `<MOZART_HOME>/global-learning.db` directly, no conductor needed.

pub mod drift;
pub mod entropy;
pub mod export;
pub mod patterns;
pub mod shared;
pub mod stats;

use mozart_learning::{LearningStore, PatternQuery, PatternRecord};

use crate::CliError;

/// Open the global learning store (created if missing, as upstream does). What this
/// creates is private, as the conductor makes it: a missing Mozart home 0700, a missing
/// store 0600 (SQLite gives its `-wal` and `-shm` files the store's mode).
pub(crate) fn open_store() -> Result<LearningStore, CliError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let home =
        mozart_conductor::mozart_home().map_err(|e| CliError::failed(e.to_string(), vec![]))?;
    let path = home.join("global-learning.db");
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&home);
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    LearningStore::open(&path).map_err(|e| {
        let message = format!("Cannot open the learning store {}: {e}", path.display());
        let hint = if damaged(&message) {
            DAMAGED_HINT
        } else {
            "Check that the file is a Mozart learning database and is readable."
        };
        CliError::failed(message, vec![hint.into()])
    })
}

/// The hint for a damaged learning store (its own, so the CLI does not name the job
/// registry instead).
const DAMAGED_HINT: &str =
    "The learning store is damaged: `mozart doctor` checks it and says what to do";

/// Whether SQLite said the file is damaged.
fn damaged(message: &str) -> bool {
    message.contains("database disk image is malformed")
        || message.contains("file is not a database")
}

/// The first `query.limit` patterns matching `query`, and how many match in all (so that a
/// command can say how many its limit left out).
pub(crate) fn first_patterns(
    store: &LearningStore,
    query: PatternQuery,
) -> Result<(Vec<PatternRecord>, usize), CliError> {
    let limit = query.limit;
    let mut patterns = store
        .get_patterns(&PatternQuery {
            limit: usize::MAX,
            ..query
        })
        .map_err(store_error)?;
    let matched = patterns.len();
    patterns.truncate(limit);
    Ok((patterns, matched))
}

/// A learning store failure as a CLI error.
pub(crate) fn store_error(err: mozart_learning::LearningError) -> CliError {
    let message = format!("Learning store error: {err}");
    let hints = if damaged(&message) {
        vec![DAMAGED_HINT.into()]
    } else {
        vec![]
    };
    CliError::failed(message, hints)
}

/// Round to `dp` decimals (Python `round`, near enough for display and JSON).
pub(crate) fn round(x: f64, dp: i32) -> f64 {
    let f = 10f64.powi(dp);
    (x * f).round() / f
}

/// Left-aligned columns with a title line, two spaces between columns.
pub(crate) fn table(title: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(widths.len()) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0);
            out.push_str(&" ".repeat(pad.saturating_sub(cell.chars().count())));
        }
        out.trim_end().to_string()
    };
    let mut out = String::new();
    if !title.is_empty() {
        out.push_str(title);
        out.push('\n');
    }
    let heads: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    out.push_str(&line(&heads));
    out.push('\n');
    let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
    out.push_str(&line(&rule));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

/// At most `n` characters of `text`, with `...` when cut.
pub(crate) fn cut(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(n).collect();
        s.push_str("...");
        s
    }
}

/// First `n` characters, no ellipsis (upstream's ID and type columns).
pub(crate) fn head(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}
