//! Errors of score loading, planning and rendering.

use std::path::PathBuf;

use thiserror::Error;

use crate::de::FieldError;
use crate::yaml::YamlError;

/// Anything that stops a score from being loaded, planned or rendered.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read (missing, permissions, not UTF-8).
    #[error("Cannot read score file {}: {source}", path.display())]
    Read {
        /// Score file.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The YAML itself is malformed (or too large / an alias bomb).
    #[error("YAML syntax error: {}", error.render(path))]
    Yaml {
        /// Score file.
        path: PathBuf,
        /// Parser error with line and column.
        error: YamlError,
    },
    /// The document is not a mapping (`found` is the Python type name or `empty file`).
    #[error("The score file is empty or invalid. A Mozart score requires at minimum: name, sheet, and prompt sections. See docs/scores.md in Mozart's source for examples.")]
    NotMapping {
        /// Score file.
        path: PathBuf,
        /// `list`, `str`, `int`, … or `empty file`.
        found: String,
    },
    /// The mapping violates the schema (score.md §2–3).
    #[error("{}", schema_text(errors, path.as_deref(), true))]
    Schema {
        /// Score file, when loaded from one.
        path: Option<PathBuf>,
        /// Every violation found, in model order.
        errors: Vec<FieldError>,
    },
    /// The sheet plan cannot be built.
    #[error("{0}")]
    Plan(String),
    /// Ours: the task list of `tasks:` cannot be read or is malformed (docs/mochi.md).
    #[error("{0}")]
    Tasks(String),
    /// `prompt.template_file` names a file that is not there (and no inline `template`).
    #[error(
        "prompt.template_file not found: {} (a relative path is read next to the score file). \
         Create the file, fix the path, or write the prompt in prompt.template",
        path.display()
    )]
    TemplateFileMissing {
        /// Where the file was looked for.
        path: PathBuf,
    },
    /// Ours: a path the score names for Mozart to create files in (the workspace) goes
    /// through a symbolic link of another user's (docs/security.md "Files").
    #[error("{}", link.refusal(what, path))]
    ForeignLink {
        /// What the path is: `the workspace`.
        what: &'static str,
        /// The path as named (made absolute).
        path: PathBuf,
        /// The link not followed.
        link: Box<mozart_ipc::own_path::ForeignLink>,
    },
    /// A template failed to compile or render.
    #[error("{message}")]
    Template {
        /// Sheet being rendered (0 when not sheet-specific).
        sheet: u32,
        /// Jinja's message.
        message: String,
    },
}

/// pydantic's error layout (its heading `N validation error(s) for JobConfig` says
/// `N error(s) in the score` here), then per error the dotted
/// location on its own line and the message indented below it (score.md §1.3). With
/// `details`, the `[type=…, input_value=…, input_type=…]` suffix is kept; the line of each
/// error is added as `    in FILE, line N`.
pub fn schema_text(errors: &[FieldError], path: Option<&std::path::Path>, details: bool) -> String {
    let n = errors.len();
    let mut out = format!("{n} error{} in the score", if n == 1 { "" } else { "s" });
    for e in errors {
        out.push('\n');
        out.push_str(&e.loc_text());
        out.push_str("\n  ");
        out.push_str(&e.message);
        if details {
            out.push_str(&format!(" [type={}", e.kind));
            if let Some(input) = &e.input {
                out.push_str(&format!(", input_value={}", truncate_repr(input)));
            }
            if let Some(t) = &e.input_type {
                out.push_str(&format!(", input_type={t}"));
            }
            out.push(']');
        } else {
            out.push(' ');
        }
        match (path, e.line) {
            (Some(p), Some(line)) => {
                out.push_str(&format!("\n    in {}, line {line}", p.display()))
            }
            (None, Some(line)) => out.push_str(&format!("\n    at line {line}")),
            _ => {}
        }
    }
    out
}

/// pydantic shortens long input reprs to 25 + `...` + 24 characters.
fn truncate_repr(repr: &str) -> String {
    let chars: Vec<char> = repr.chars().collect();
    if chars.len() <= 50 {
        return repr.to_string();
    }
    let head: String = chars[..25].iter().collect();
    let tail: String = chars[chars.len() - 24..].iter().collect();
    format!("{head}...{tail}")
}

/// Typo table of score.md §6.3 (top-level keys only).
const TYPOS: [(&str, &str); 17] = [
    ("retries", "retry"),
    ("paralel", "parallel"),
    ("parralel", "parallel"),
    ("parrallel", "parallel"),
    ("backend_type", "instrument (or backend.type)"),
    ("max_retries", "retry.max_retries"),
    ("timeout", "stale_detection.idle_timeout_seconds"),
    (
        "preamble",
        "prompt.template (preamble is set automatically by Mozart)",
    ),
    ("task", "prompt.template"),
    ("stager_delay_ms", "parallel.stagger_delay_ms"),
    ("stagger_delay", "parallel.stagger_delay_ms"),
    ("insturment", "instrument"),
    ("instrumnet", "instrument"),
    ("insturment_config", "instrument_config"),
    ("instrumnet_config", "instrument_config"),
    ("validation", "validations"),
    ("notification", "notifications"),
];

/// The valid field of the unknown field's section closest to it (difflib-like, cutoff 0.6),
/// with the section's path: `sheet.total_itmes` → `sheet.total_items`.
fn close_field(e: &FieldError) -> Option<String> {
    let (name, section) = e.loc.split_last()?;
    let valid: std::collections::HashSet<String> =
        e.expected.iter().map(|s| s.to_string()).collect();
    let best = crate::validate::close_match(name, &valid)?;
    Some(match section.is_empty() {
        true => best,
        false => format!("{}.{best}", section.join(".")),
    })
}

/// Hints for a schema failure (score.md §6.3): one per unknown field, then those of the
/// other errors reported with them (a `prompt:` given as a string, a section missing).
pub fn schema_hints(errors: &[FieldError]) -> Vec<String> {
    let (extra, other): (Vec<&FieldError>, Vec<&FieldError>) =
        errors.iter().partition(|e| e.kind == "extra_forbidden");
    if extra.is_empty() {
        return other_hints(errors);
    }
    let mut hints: Vec<String> = extra.into_iter().map(unknown_field_hint).collect();
    if !other.is_empty() {
        let other: Vec<FieldError> = other.into_iter().cloned().collect();
        let mut more = other_hints(&other);
        // Its closing "See:" line; the one below says the same.
        more.pop();
        hints.extend(more);
    }
    hints.push("See: docs/scores.md in Mozart's source for every score field.".into());
    hints
}

/// One "did you mean" line per unknown field of `errors` (none for other errors): what
/// `mozart run` adds to the schema errors it prints, so a typo gets the same suggestion
/// there as from `mozart validate`.
pub fn unknown_field_hints(errors: &[FieldError]) -> Vec<String> {
    errors
        .iter()
        .filter(|e| e.kind == "extra_forbidden")
        .map(unknown_field_hint)
        .collect()
}

/// "did you mean" for an unknown field: upstream's typo table first, then the closest valid
/// field of its section.
fn unknown_field_hint(e: &FieldError) -> String {
    let loc = e.loc_text();
    match TYPOS.iter().find(|(k, _)| *k == loc) {
        Some((_, s)) => format!("Unknown field '{loc}' — did you mean '{s}'?"),
        None => match close_field(e) {
            Some(s) => format!("Unknown field '{loc}' — did you mean '{s}'?"),
            None => format!("Unknown field '{loc}' — this is not a valid score field."),
        },
    }
}

/// Hints for schema errors other than unknown fields; the last is always a "See:" line.
fn other_hints(errors: &[FieldError]) -> Vec<String> {
    if errors
        .iter()
        .any(|e| e.kind == "model_type" && e.loc_text() == "prompt")
    {
        return vec![
            "The 'prompt' field must be a mapping, not a string.".into(),
            "Use:  prompt:  /  template: \"your prompt text here\"".into(),
            "See: docs/scores.md in Mozart's source.".into(),
        ];
    }
    let missing: Vec<String> = errors
        .iter()
        .filter(|e| e.kind == "missing")
        .map(FieldError::loc_text)
        .collect();
    // The "minimum sections" hint only when a section is missing: for a value error such as
    // a dependency cycle it led nowhere.
    // Nor for a field missing inside a section that is there (`sheet.total_items`): that
    // score has its sections, and the hint names what the section lacks instead.
    let mut hints = Vec::new();
    let section = |name: &str| missing.iter().any(|m| m == name);
    if ["name", "sheet", "prompt"].into_iter().any(section) {
        hints.push("Ensure your score has at minimum: name, sheet, and prompt sections.".into());
    }
    if section("sheet") {
        hints.push("Add a 'sheet' section with total_items and size.".into());
    } else if missing
        .iter()
        .any(|m| m == "sheet.total_items" || m == "sheet.size")
    {
        // Only for those two: a field missing deeper (`sheet.prelude.0.as`) is named by the
        // error itself, and this hint sent the user to fields the score has.
        hints.push("Give the 'sheet' section both total_items and size.".into());
    }
    if section("prompt") {
        hints.push("Add a 'prompt' section with a 'template' or 'template_file'.".into());
    }
    if errors
        .iter()
        .any(|e| e.message.contains("Circular dependency"))
    {
        hints.push(
            "Remove one of the dependencies in the cycle (sheet.dependencies: a sheet may only wait for sheets that do not wait for it).".into(),
        );
    }
    hints.push("See: docs/scores.md in Mozart's source.".into());
    hints
}
