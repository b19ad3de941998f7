//! What several learning commands share: their common option groups (flattened into each
//! command's arguments, in the place the spec lists them, cli.md §8) and the way they show a
//! list of store rows.

use mozart_learning::PatternRecord;
use serde_json::{json, Map, Value};

use super::{round, table};
use crate::output::print_json;
use crate::OutputMode;

/// `--window`, `--limit`, `--json` of `learning-drift` and `learning-epistemic-drift`.
#[derive(Debug, clap::Args)]
pub struct DriftWindow {
    /// Applications per comparison window.
    #[arg(short, long, default_value_t = 5, value_name = "INTEGER")]
    pub window: usize,
    /// Maximum number of patterns.
    #[arg(short, long, default_value_t = 10, value_name = "INTEGER")]
    pub limit: usize,
    /// Output as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// `--history`, `--limit` of the commands that keep a history (`patterns-entropy`,
/// `patterns-budget`, `entropy-status`).
#[derive(Debug, clap::Args)]
pub struct History {
    /// Show the recorded history instead.
    #[arg(short = 'H', long)]
    pub history: bool,
    /// Maximum history rows.
    #[arg(short = 'n', long, default_value_t = 20, value_name = "INTEGER")]
    pub limit: usize,
}

/// `--job`, `--history`, `--limit`, `--json` of the commands over the conductor's entropy
/// checks (`patterns-budget`, `entropy-status`; `-j` is `--job` there).
#[derive(Debug, clap::Args)]
pub struct JobHistory {
    /// Only this job hash (the conductor records `daemon-entropy-check`).
    #[arg(short, long, value_name = "TEXT")]
    pub job: Option<String>,
    #[command(flatten)]
    pub rows: History,
    /// Output as JSON.
    #[arg(id = "json", long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

impl JobHistory {
    /// How many rows to read: the history's limit, or all of them for the summary.
    pub fn read_limit(&self) -> usize {
        if self.rows.history {
            self.rows.limit
        } else {
            10_000
        }
    }
}

/// The keys every pattern document starts with (`patterns-list --json`, the export's
/// semantic insights); each adds its own after them.
pub fn pattern_head(p: &PatternRecord) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert("id".into(), json!(p.id));
    doc.insert("pattern_type".into(), json!(p.pattern_type));
    doc.insert("pattern_name".into(), json!(p.pattern_name));
    doc.insert("description".into(), json!(p.description));
    doc.insert("occurrence_count".into(), json!(p.occurrence_count));
    doc.insert(
        "effectiveness_score".into(),
        json!(round(p.effectiveness_score, 3)),
    );
    doc
}

/// How a command shows a list of store rows: a titled table, or `none` when there are no
/// rows.
pub struct Listing<'a, T> {
    /// The table's title line.
    pub title: &'a str,
    /// Column headers.
    pub headers: &'a [&'a str],
    /// Lines printed instead of an empty table.
    pub none: &'a [&'a str],
    /// One row's cells.
    pub cells: fn(&T) -> Vec<String>,
}

impl<T> Listing<'_, T> {
    /// The titled table of `rows`, or the `none` lines when there are none.
    pub fn render(&self, rows: &[T]) -> String {
        if rows.is_empty() {
            return self.none.iter().map(|line| format!("{line}\n")).collect();
        }
        let cells: Vec<Vec<String>> = rows.iter().map(self.cells).collect();
        table(self.title, self.headers, &cells)
    }

    /// Print `json` when given (the `--json` document), else [`Self::render`]. True when a
    /// table was printed, for the caller's footer.
    pub fn print(&self, rows: &[T], json: Option<Value>) -> bool {
        match json {
            Some(doc) => {
                print_json(&doc);
                false
            }
            None => {
                print!("{}", self.render(rows));
                !rows.is_empty()
            }
        }
    }
}
