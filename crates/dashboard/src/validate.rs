//! Validating a score (pasted text or a file) the way `mozart validate` does, into one
//! report the dashboard page and the MCP `validate` tool both show.

use std::path::Path;

use mozart_client::hints::LoadPurpose;
use mozart_config::validate::{self as checks, CheckEnv, Severity};
use mozart_config::{ConfigError, FileAccess, Score};
use serde::Serialize;

/// Largest score text accepted from a form or a tool call.
pub const MAX_SCORE_BYTES: usize = 2 * 1024 * 1024;
/// Sheets shown in the plan (a fan-out score can have thousands).
pub const PLAN_LIMIT: i64 = 200;

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct IssueView {
    /// `V001`…
    pub check_id: String,
    /// `error`, `warning`, `info`.
    pub severity: String,
    /// Message.
    pub message: String,
    /// 1-based line in the YAML.
    pub line: Option<usize>,
    /// How to fix it.
    pub suggestion: Option<String>,
}

/// One planned sheet.
#[derive(Debug, Clone, Serialize)]
pub struct PlanSheet {
    /// Sheet number.
    pub sheet_num: u32,
    /// `[start, end]` items.
    pub item_range: [i64; 2],
    /// Stage (fan-out).
    pub stage: Option<i64>,
    /// Instance (fan-out).
    pub instance: Option<i64>,
    /// First lines of the rendered prompt.
    pub prompt_snippet: String,
    /// Why the prompt did not render.
    pub render_error: Option<String>,
}

/// The outcome of validating a score.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationReport {
    /// No errors (warnings allowed).
    pub valid: bool,
    /// The score could not even be loaded: the message (YAML / schema error).
    pub load_error: Option<String>,
    /// Hints for `load_error`.
    pub hints: Vec<String>,
    /// Score name.
    pub name: Option<String>,
    /// Sheets in the plan.
    pub total_sheets: i64,
    /// Instrument.
    pub instrument: Option<String>,
    /// Validation rules.
    pub validations: usize,
    /// Extended-check findings.
    pub issues: Vec<IssueView>,
    /// Dependency levels (sheets that may run together), when the score declares any.
    pub dag_levels: Vec<Vec<i64>>,
    /// The first sheets of the plan.
    pub plan: Vec<PlanSheet>,
    /// True when the plan was cut at [`PLAN_LIMIT`].
    pub plan_truncated: bool,
    /// What the score names that was not read or checked ([`validate_posted`]).
    pub not_read: Vec<String>,
}

impl ValidationReport {
    fn failed(message: String, hints: Vec<String>) -> ValidationReport {
        ValidationReport {
            valid: false,
            load_error: Some(message),
            hints,
            name: None,
            total_sheets: 0,
            instrument: None,
            validations: 0,
            issues: Vec::new(),
            dag_levels: Vec::new(),
            plan: Vec::new(),
            plan_truncated: false,
            not_read: Vec::new(),
        }
    }

    /// Plain-text rendering (tool results, logs).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if let Some(err) = &self.load_error {
            out.push_str(&format!("Error: {err}\n"));
            for h in &self.hints {
                out.push_str(&format!("  - {h}\n"));
            }
            return out;
        }
        if !self.not_read.is_empty() {
            out.push_str("Not read (this preview uses only the score's text):\n");
            for n in &self.not_read {
                out.push_str(&format!("  - {n}\n"));
            }
        }
        let name = self.name.as_deref().unwrap_or("?");
        for i in &self.issues {
            let line = i.line.map(|l| format!("Line {l}: ")).unwrap_or_default();
            out.push_str(&format!(
                "{} [{}] {line}{}\n",
                i.severity.to_uppercase(),
                i.check_id,
                i.message
            ));
            if let Some(s) = &i.suggestion {
                out.push_str(&format!("    Suggestion: {s}\n"));
            }
        }
        out.push_str(&format!(
            "Validation: {} ({name})\nSheets: {}\nInstrument: {}\nValidations: {}\n",
            if self.valid { "PASSED" } else { "FAILED" },
            self.total_sheets,
            self.instrument.as_deref().unwrap_or("?"),
            self.validations
        ));
        out
    }
}

/// Validate a score file.
pub fn validate_file(path: &Path) -> ValidationReport {
    if !path.is_file() {
        return ValidationReport::failed(
            format!("Score file not found: {}", path.display()),
            vec!["Check the file path and try again.".into()],
        );
    }
    match mozart_config::load_score(path) {
        Ok(score) => report(&score, path),
        Err(err) => load_failure(err),
    }
}

/// Validate score text as if it were the file `path` (relative paths in the score resolve
/// against that file's directory).
pub fn validate_text(yaml: &str, path: &Path) -> ValidationReport {
    validate_str(yaml, path, FileAccess::Files)
}

/// Validate score text posted to the dashboard from that text alone: no file the score
/// names is read or checked and no command runs (the dashboard's process may see files its
/// visitor should not); the report lists what was left out.
pub fn validate_posted(yaml: &str) -> ValidationReport {
    validate_str(yaml, Path::new(POSTED_NAME), FileAccess::TextOnly)
}

/// The file name a posted score is validated as.
pub const POSTED_NAME: &str = "pasted-score.yaml";

fn validate_str(yaml: &str, path: &Path, access: FileAccess) -> ValidationReport {
    if yaml.len() > MAX_SCORE_BYTES {
        return ValidationReport::failed(
            format!(
                "The score is {} bytes; at most {MAX_SCORE_BYTES} are accepted here.",
                yaml.len()
            ),
            vec!["Validate a large score with: mozart validate <file>".into()],
        );
    }
    if yaml.trim().is_empty() {
        return ValidationReport::failed(
            "The score is empty.".into(),
            vec!["Paste a score: at minimum name, sheet and prompt sections.".into()],
        );
    }
    let loaded = match access {
        FileAccess::Files => mozart_config::load_score_str(yaml, path),
        FileAccess::TextOnly => mozart_config::load_score_text_only(yaml, path),
    };
    match loaded {
        Ok(score) => report(&score, path),
        Err(err) => load_failure(err),
    }
}

fn report(score: &Score, path: &Path) -> ValidationReport {
    let c = &score.config;
    let issues = checks::run_checks(score, path, &check_env());
    let valid = !issues.iter().any(|i| i.severity == Severity::Error);
    let preview = checks::preview(score, path, Some(PLAN_LIMIT));
    let total = mozart_config::plan::total_sheets(&c.sheet);
    ValidationReport {
        valid,
        load_error: None,
        hints: Vec::new(),
        name: Some(c.name.clone()),
        total_sheets: total,
        instrument: Some(
            c.instrument
                .clone()
                .unwrap_or_else(|| c.backend.kind.as_str().to_string()),
        ),
        validations: c.validations.len(),
        issues: issues
            .iter()
            .map(|i| IssueView {
                check_id: i.check_id.to_string(),
                severity: match i.severity {
                    Severity::Error => "error",
                    Severity::Warning => "warning",
                    Severity::Info => "info",
                }
                .to_string(),
                message: i.message.clone(),
                line: i.line,
                suggestion: i.suggestion.clone(),
            })
            .collect(),
        dag_levels: if c.sheet.dependencies.is_empty() {
            Vec::new()
        } else {
            checks::dag_levels(c)
        },
        plan: preview
            .sheets
            .iter()
            .map(|s| PlanSheet {
                sheet_num: s.sheet_num,
                item_range: s.item_range,
                stage: s.stage,
                instance: s.instance,
                prompt_snippet: s.prompt_snippet.clone(),
                render_error: s.render_error.clone(),
            })
            .collect(),
        plan_truncated: total > PLAN_LIMIT,
        not_read: score.not_read.clone(),
    }
}

/// Instrument names the checks know: profile directories plus this build's built-ins.
fn check_env() -> CheckEnv {
    let mut env = CheckEnv::with_profile_dirs(&mozart_ipc::paths::instrument_profile_dirs());
    if let Ok(builtin) = mozart_backends::InstrumentRegistry::builtin() {
        env.known_instruments.extend(builtin.names());
    }
    env
}

fn load_failure(err: ConfigError) -> ValidationReport {
    let advice = mozart_client::hints::load_failure(err, LoadPurpose::Validate, false);
    ValidationReport::failed(advice.message, advice.hints)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_good_score_has_a_plan() {
        let yaml = "name: t\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 3\nprompt:\n  template: \"RUN: echo {{ sheet_num }}\"\n";
        let r = validate_text(yaml, Path::new("/tmp/t.yaml"));
        assert!(r.valid, "{r:?}");
        assert_eq!(r.total_sheets, 3);
        assert_eq!(r.plan.len(), 3);
        assert!(r.plan[1].prompt_snippet.contains("RUN: echo 2"));
    }

    #[test]
    fn broken_yaml_is_a_named_error_with_a_hint() {
        let r = validate_text("name: [unclosed\n", Path::new("/tmp/t.yaml"));
        assert!(!r.valid);
        assert!(r.load_error.unwrap().starts_with("YAML syntax error"));
        assert!(!r.hints.is_empty());
    }

    #[test]
    fn a_score_that_is_not_a_mapping_gets_the_hints_mozart_validate_gives() {
        let r = validate_text("- a\n- b\n", Path::new("/tmp/t.yaml"));
        assert_eq!(
            r.load_error.as_deref(),
            Some("Score must be a YAML mapping (key-value pairs), got: list")
        );
        assert_eq!(
            r.hints,
            vec![
                "A Mozart score needs key-value fields like: name: my-score",
                "Check that your file isn't plain text, a list, or empty.",
                "See: docs/scores.md in Mozart's source.",
            ]
        );
    }

    #[test]
    fn a_missing_section_names_it() {
        let r = validate_text("name: x\n", Path::new("/tmp/t.yaml"));
        assert!(r.load_error.unwrap().contains("Schema validation failed"));
        assert!(r.hints.iter().any(|h| h.contains("sheet")));
    }
}
