//! Checks of the `validations:` rules themselves.

use super::{find_line, Ctx, Issue, Severity};
use crate::model::ValidationType;

/// V007: validation and rate-limit regexes compile (the schema already rejects both cases, kept for parity).
pub(super) fn v007(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    for (i, v) in c.validations.iter().enumerate() {
        if v.kind == ValidationType::ContentRegex {
            if let Some(Err(e)) = v.pattern.as_deref().map(crate::pyregex::compile) {
                out.push(Issue::new(
                    "V007",
                    Severity::Error,
                    format!("Invalid regex pattern in validation[{i}].pattern: {e}"),
                ));
            }
        }
    }
    for (i, p) in c.rate_limit.detection_patterns.iter().enumerate() {
        if crate::model::is_default_detection_pattern(p) {
            continue;
        }
        if let Err(e) = crate::pyregex::compile(p) {
            out.push(Issue::new(
                "V007",
                Severity::Error,
                format!("Invalid regex pattern in rate_limit.detection_patterns[{i}]: {e}"),
            ));
        }
    }
}

/// V008: each validation rule has the fields its type needs.
pub(super) fn v008(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    for (i, v) in c.validations.iter().enumerate() {
        let blank = |f: &Option<String>| f.as_deref().is_none_or(|s| s.trim().is_empty());
        let mut missing = Vec::new();
        if v.kind.needs_path() && blank(&v.path) {
            missing.push("path");
        }
        if v.kind.needs_pattern() && blank(&v.pattern) {
            missing.push("pattern");
        }
        if v.kind == ValidationType::CommandSucceeds && blank(&v.command) {
            missing.push("command");
        }
        if !missing.is_empty() {
            out.push(
                Issue::new(
                    "V008",
                    Severity::Error,
                    format!(
                        "Validation rule {} ({}) missing required fields: {}",
                        i + 1,
                        v.kind.as_str(),
                        missing.join(", ")
                    ),
                )
                .suggest(format!("Add {} to the validation rule", missing.join(", ")))
                .meta("validation_index", i.to_string())
                .meta("validation_type", v.kind.as_str())
                .meta("missing_fields", missing.join(",")),
            );
        }
    }
}

/// V106: an empty pattern matches any content.
pub(super) fn v106(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    for (i, v) in c.validations.iter().enumerate() {
        if v.kind.needs_pattern() && v.pattern.as_deref().is_some_and(|p| p.trim().is_empty()) {
            out.push(
                Issue::new(
                    "V106",
                    Severity::Warning,
                    format!(
                        "Empty pattern in validation rule {} will match any content",
                        i + 1
                    ),
                )
                .suggest("Add a meaningful pattern or remove this validation")
                .meta("validation_index", i.to_string()),
            );
        }
    }
}

/// V201: Jinja syntax in a validation path.
pub(super) fn v201(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    for (i, v) in c.validations.iter().enumerate() {
        if let Some(p) = v.path.as_deref().filter(|p| p.contains("{{")) {
            out.push(
                Issue::new(
                    "V201",
                    Severity::Warning,
                    format!("Validation rule {} uses Jinja syntax in path: {p}", i + 1),
                )
                .line(find_line(raw, p))
                .context(p)
                .suggest("Use {workspace} not {{ workspace }} in validation paths")
                .meta("validation_index", i.to_string())
                .meta("path", p),
            );
        }
    }
}

/// V203: no validation rules (a reviewer judges every attempt of a `review:` score:
/// docs/mochi.md).
pub(super) fn v203(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    if c.validations.is_empty() && c.review.is_none() {
        out.push(
            Issue::new(
                "V203",
                Severity::Warning,
                "No validation rules configured".into(),
            )
            .suggest("Add at least one validation rule — see 'Validations' in docs/scores.md"),
        );
    }
}

/// V205: every validation is `file_exists`.
pub(super) fn v205(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    if !c.validations.is_empty()
        && c.validations
            .iter()
            .all(|v| v.kind == ValidationType::FileExists)
    {
        out.push(
            Issue::new(
                "V205",
                Severity::Info,
                "All validations are file_exists — stale files from previous runs will pass".into(),
            )
            .suggest("Consider adding file_modified or content checks to detect stale files")
            .meta("validation_count", c.validations.len().to_string()),
        );
    }
}
