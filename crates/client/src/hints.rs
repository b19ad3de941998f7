//! What a user reads when something goes wrong, worded once for every client (the CLI, the
//! dashboard, the MCP server): score-loading errors and refused submissions, each a message
//! with the hints that say what to do.

use mozart_config::error::{schema_hints, schema_text, unknown_field_hints};
use mozart_config::ConfigError;
use mozart_ipc::types::RejectionReason;

/// The standard message when no conductor answers.
pub const NOT_RUNNING: &str = "Mozart conductor is not running.";
/// The standard hint that goes with it.
pub const START_HINT: &str = "Start it with: mozart start";
/// The hint after an unknown score.
pub const LIST_HINT: &str = "Run 'mozart list' to see available scores.";

/// A failure as the user sees it: one message and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// What went wrong.
    pub message: String,
    /// What to do about it.
    pub hints: Vec<String>,
}

/// What the score was being loaded for: the words differ a little between checking a score
/// (`validate`, the dashboard's check) and submitting it (`run`), as upstream's do.
#[derive(Debug, Clone, Copy)]
pub enum LoadPurpose<'a> {
    /// Checking the score: schema errors are headed "Schema validation failed" and come
    /// with their own hints.
    Validate,
    /// Submitting the score file `file`: every error ends with "Validate with: …".
    Run {
        /// The score file as the user named it.
        file: &'a str,
    },
}

/// A score that does not load, worded for the user. `details` keeps pydantic's
/// `[type=…, input_value=…]` suffix of schema errors (the JSON outputs show it).
pub fn load_failure(err: ConfigError, purpose: LoadPurpose<'_>, details: bool) -> Advice {
    const INDENTATION: &str = "Check for indentation issues or invalid YAML characters.";
    let (message, mut hints) = match (err, purpose) {
        // Reading it again would fail the same way: no "Validate with" hint.
        (ConfigError::Read { path, source }, _) => return read_failure(&path, &source),
        (ConfigError::Yaml { error, path }, _) => (
            format!("YAML syntax error: {}", error.render(&path)),
            vec![INDENTATION.to_string()],
        ),
        (ConfigError::NotMapping { found, .. }, purpose) => (
            format!("Score must be a YAML mapping (key-value pairs), got: {found}"),
            match purpose {
                LoadPurpose::Validate => vec![
                    "A Mozart score needs key-value fields like: name: my-score".to_string(),
                    "Check that your file isn't plain text, a list, or empty.".to_string(),
                    "See: docs/scores.md in Mozart's source.".to_string(),
                ],
                LoadPurpose::Run { .. } => Vec::new(),
            },
        ),
        (ConfigError::Schema { path, errors }, LoadPurpose::Validate) => (
            format!(
                "Schema validation failed: {}",
                schema_text(&errors, path.as_deref(), details)
            ),
            schema_hints(&errors),
        ),
        (ConfigError::Schema { path, errors }, LoadPurpose::Run { .. }) => (
            schema_text(&errors, path.as_deref(), details),
            unknown_field_hints(&errors),
        ),
        (other, _) => (other.to_string(), Vec::new()),
    };
    if let LoadPurpose::Run { file } = purpose {
        hints.push(format!("Validate with: mozart validate {file}"));
    }
    Advice { message, hints }
}

/// A score file that cannot be read, named, with what to do for the usual causes: a
/// directory or a binary file given where the score goes, a missing or unreadable file.
fn read_failure(path: &std::path::Path, source: &std::io::Error) -> Advice {
    let shown = path.display();
    let (why, hint) = if path.is_dir() {
        (
            "it is a directory".to_string(),
            format!("Give the score's YAML file, not a directory (e.g. {shown}/score.yaml)."),
        )
    } else if source.kind() == std::io::ErrorKind::InvalidData {
        (
            format!("it is not UTF-8 text ({source})"),
            "A score is a YAML text file: check that this is the file you meant.".to_string(),
        )
    } else {
        (
            source.to_string(),
            "Check that the file exists and you have read permission.".to_string(),
        )
    };
    Advice {
        message: format!("Cannot read score file {shown}: {why}"),
        hints: vec![hint],
    }
}

/// The hints for a refused submission of score `file` as job `job_id` (cli.md §3.1 step 7),
/// and whether the client should list the active rate limits after them.
pub fn rejection_hints(
    reason: RejectionReason,
    job_id: &str,
    file: &str,
    fresh: bool,
) -> (Vec<String>, bool) {
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match reason {
        RejectionReason::ShuttingDown => (
            v(&[
                "The conductor is shutting down.",
                "Wait for shutdown to complete, then restart: mozart start",
            ]),
            false,
        ),
        RejectionReason::Pressure => (
            v(&[
                "The system is under heavy load.",
                "Check active rate limits: mozart clear-rate-limits (to view/clear)",
                "Wait for running jobs to complete or reduce concurrent work.",
            ]),
            true,
        ),
        RejectionReason::AlreadyActive => {
            let last = if fresh {
                // (Upstream names `clear`, which never removes an active job.)
                format!("To start it over: mozart cancel {job_id}, then mozart run {file} --fresh")
            } else {
                "Or wait for it to finish.".to_string()
            };
            (
                vec![
                    "A score with this name is already active.".to_string(),
                    format!(
                        "Pause or cancel it first: mozart pause {job_id} / mozart cancel {job_id}"
                    ),
                    last,
                ],
                false,
            )
        }
        RejectionReason::Paused => (
            vec![format!("See where it stands: mozart status {job_id}")],
            false,
        ),
        RejectionReason::ScoreInvalid => (
            vec![
                "The score file has errors.".to_string(),
                format!("Validate it with: mozart validate {file}"),
            ],
            false,
        ),
        RejectionReason::WorkspaceInvalid => (
            v(&[
                "The workspace path is invalid.",
                "Create the directory or use --workspace to override.",
            ]),
            false,
        ),
        RejectionReason::ScoreNotFound => (
            v(&[
                "The score file could not be found.",
                "Check the file path and try again.",
            ]),
            false,
        ),
        RejectionReason::Isolation => (
            vec![
                "The score's git worktree isolation could not be set up; the error above says why.".to_string(),
                "If its directory is not a git repository: run the score on one (git init it, or set tasks.repository to one), or set isolation.enabled: false to run without worktrees (with the default scope: job, isolation.fallback_on_error: true runs it without one instead).".to_string(),
                format!("Check the score first with: mozart validate {file}"),
            ],
            false,
        ),
        RejectionReason::Other => (
            v(&[
                "The conductor is running but declined this submission.",
                "Check with: mozart conductor-status",
            ]),
            false,
        ),
    }
}

/// The headline of a refused submission.
pub fn rejection_headline(message: Option<&str>) -> String {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => format!("Conductor rejected score: {m}"),
        None => "Conductor rejected score.".to_string(),
    }
}

/// `job.pause` of `id` answered `paused: false` (with the conductor's `error`): code
/// `E502`, as `mozart pause` shows it.
pub fn pause_refused(id: &str, error: Option<String>) -> Advice {
    Advice {
        message: error.unwrap_or_else(|| format!("Failed to pause score '{id}'")),
        hints: vec![
            format!("Check score status: mozart status {id}"),
            "Only running scores can be paused.".to_string(),
        ],
    }
}

/// `job.resume` of `id` refused with the conductor's `message`. Upstream's refusal of a
/// resume carries no reason, so "not found" in its words is what tells an unknown score.
pub fn resume_refused(id: &str, message: Option<String>) -> Advice {
    let message = message
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| format!("Failed to resume score '{id}'"));
    let hints = if message.to_lowercase().contains("not found") {
        vec![LIST_HINT.to_string()]
    } else {
        vec![
            format!("Run 'mozart diagnose {id}' for details."),
            LIST_HINT.to_string(),
        ]
    };
    Advice { message, hints }
}

/// `job.cancel` of `id` answered `cancelled: false`.
pub fn cancel_missed(id: &str) -> Advice {
    Advice {
        message: format!("Score '{id}' not found or already stopped."),
        hints: vec![LIST_HINT.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_hints_follow_the_spec_order() {
        let first = |m: &str, fresh: bool| {
            rejection_hints(RejectionReason::from_message(m), "demo", "d.yaml", fresh).0[0].clone()
        };
        assert_eq!(
            first("Conductor is shutting down", false),
            "The conductor is shutting down."
        );
        assert_eq!(
            first("System under memory PRESSURE", false),
            "The system is under heavy load."
        );
        assert!(rejection_hints(RejectionReason::Pressure, "d", "f", false).1);
        let (dup, _) = rejection_hints(
            RejectionReason::from_message(
                "Job 'demo' is already running. Use 'mozart pause' or 'mozart cancel' first",
            ),
            "demo",
            "d.yaml",
            true,
        );
        assert_eq!(
            dup,
            vec![
                "A score with this name is already active.",
                "Pause or cancel it first: mozart pause demo / mozart cancel demo",
                "To start it over: mozart cancel demo, then mozart run d.yaml --fresh",
            ]
        );
        assert_eq!(
            first("Failed to parse config file: bad", false),
            "The score file has errors."
        );
        assert_eq!(
            first("Something else entirely", false),
            "The conductor is running but declined this submission."
        );
        assert_eq!(
            first("Workspace parent does not exist or is not writable", false),
            "The workspace path is invalid."
        );
        assert_eq!(
            first("Config file not found: /tmp/x.yaml", false),
            "The score file could not be found."
        );
        assert!(first(
            "Cannot isolate the job's sheets: job m: worktree isolation requires a git repository",
            false
        )
        .starts_with("The score's git worktree isolation could not be set up"));
    }

    #[test]
    fn a_score_that_is_not_a_mapping_is_named_for_both_purposes() {
        let err = || ConfigError::NotMapping {
            path: "s.yaml".into(),
            found: "list".into(),
        };
        let run = load_failure(err(), LoadPurpose::Run { file: "s.yaml" }, false);
        assert_eq!(
            run.message,
            "Score must be a YAML mapping (key-value pairs), got: list"
        );
        assert_eq!(run.hints, vec!["Validate with: mozart validate s.yaml"]);
        let check = load_failure(err(), LoadPurpose::Validate, false);
        assert_eq!(check.hints.len(), 3);
    }
}
