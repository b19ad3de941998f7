//! Checks of the `validations:` rules themselves.

use std::collections::HashSet;

use super::{close_match, find_line, Ctx, Issue, Severity, CORE_BUILTINS};
use crate::model::{JobConfig, ValidationType};

/// V007: validation and rate-limit regexes compile (the schema already rejects both cases, kept for parity).
pub(super) fn v007(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    for (i, v) in c.validations.iter().enumerate() {
        if v.kind == ValidationType::ContentRegex {
            if let Some(Err(e)) = v
                .pattern
                .as_deref()
                .map(crate::pyregex::compile_content_regex)
            {
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
                .line(
                    x.line_of(&format!("validations.{i}.path"))
                        .or_else(|| find_line(raw, p)),
                )
                .context(p)
                .suggest("Use {workspace} not {{ workspace }} in validation paths")
                .meta("validation_index", i.to_string())
                .meta("path", p),
            );
        }
    }
}

/// V214 (ours, not upstream's): a `{name}` in a validation path, command or working
/// directory that the placeholder expander leaves as written (no built-in, no
/// `prompt.variables` key, no task value), so the run looks for a file literally named
/// `{name}` or runs the braces. In a command (shell, Python f-strings) only a name close to a
/// known one counts. Only single-brace identifiers count: `{{ … }}` is V201's, and
/// `${NAME}` or `{print}`-like shell text after a `$` is left alone.
pub(super) fn v214(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    if c.validations.is_empty() {
        return;
    }
    let known = placeholder_names(c);
    for (i, v) in c.validations.iter().enumerate() {
        let fields = [
            ("path", v.path.as_deref()),
            ("command", v.command.as_deref()),
            ("working_directory", v.working_directory.as_deref()),
        ];
        for (field, text) in fields {
            let Some(text) = text else { continue };
            for name in unknown_placeholders(text, &known) {
                let mut names: Vec<&str> = known.iter().map(String::as_str).collect();
                names.sort_unstable();
                let hint = close_match(&name, &known);
                // Commands hold shell and Python braces (`f'{total}'`): there only a near
                // miss of a known name is taken for a placeholder.
                if field == "command" && hint.is_none() {
                    continue;
                }
                let message = format!(
                    "Validation rule {} {field} uses unknown placeholder '{{{name}}}': it stays \
                     as written at run time",
                    i + 1
                );
                let suggestion = match &hint {
                    Some(m) => format!(
                        "Did you mean {{{m}}}? Known placeholders: {}",
                        names.join(", ")
                    ),
                    None => format!(
                        "Use a known placeholder or add '{name}' to prompt.variables. Known \
                         placeholders: {}",
                        names.join(", ")
                    ),
                };
                let mut issue = Issue::new("V214", Severity::Warning, message)
                    .line(find_line(x.raw, &format!("{{{name}}}")))
                    .context(text)
                    .suggest(suggestion)
                    .meta("validation_index", i.to_string())
                    .meta("field", field)
                    .meta("placeholder", name.clone());
                if let Some(m) = hint {
                    issue = issue.meta("did_you_mean", m);
                }
                out.push(issue);
            }
        }
    }
}

/// The names a validation's `{name}` placeholders expand to for some sheet of `c`
/// (placeholders::sheet_vars and the run's `{task_branch}`).
fn placeholder_names(c: &JobConfig) -> HashSet<String> {
    let mut known: HashSet<String> = CORE_BUILTINS
        .iter()
        .filter(|n| **n != "instrument_name")
        .map(|n| n.to_string())
        .collect();
    known.extend(c.prompt.variables.keys().cloned());
    if c.tasks.is_some() {
        known.extend(crate::tasks::TASK_VARS.map(String::from));
    }
    known
}

/// The `{name}`s of `text` that the expander (`braces::expand_with`) would leave as written,
/// in order, each once: an identifier between single braces, not `${name}` (shell) and not
/// inside `{{ … }}`.
fn unknown_placeholders(text: &str, known: &HashSet<String>) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out: Vec<String> = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find('{') {
        let open = from + at;
        let after = &text[open + 1..];
        from = open + 1;
        let Some(len) = after
            .find(['}', '{'])
            .filter(|&i| after.as_bytes()[i] == b'}')
        else {
            continue;
        };
        let key = &after[..len];
        if known.contains(key) {
            // The expander replaces it and goes on after its `}`.
            from = open + 1 + len + 1;
            continue;
        }
        let identifier = key
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_')
            && key
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        let shell_or_jinja = open > 0 && matches!(bytes[open - 1], b'$' | b'{')
            || bytes.get(open + 1 + len + 1) == Some(&b'}');
        if identifier && !shell_or_jinja && !out.iter().any(|k| k == key) {
            out.push(key.to_string());
        }
    }
    out
}

/// V215 (ours, not upstream's): a validation `condition` Mozart cannot read, or that names a
/// variable no sheet has. Such a part counts as true (upstream's fail-open rule, kept), so a
/// typo makes the rule apply to every sheet.
pub(super) fn v215(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let mut known: Option<HashSet<String>> = None;
    for (i, v) in c.validations.iter().enumerate() {
        let Some(cond) = v.condition.as_deref() else {
            continue;
        };
        let warn = |message: String, suggestion: String| {
            Issue::new("V215", Severity::Warning, message)
                .line(find_line(x.raw, cond))
                .context(cond)
                .suggest(suggestion)
                .meta("validation_index", i.to_string())
                .meta("condition", cond)
        };
        let rule = i + 1;
        for unread in crate::expr::unread_condition_parts(cond) {
            out.push(match unread {
                Err(part) => warn(
                    format!(
                        "Validation rule {rule} condition part '{part}' cannot be read: it \
                         counts as true, so the rule applies to every sheet"
                    ),
                    "Write each part as 'name op number' (== != < <= > >=), joined with ' and '"
                        .into(),
                ),
                Ok((read, ignored)) => warn(
                    format!(
                        "Validation rule {rule} condition reads only '{read}': '{ignored}' is \
                         ignored"
                    ),
                    "Conditions support only ' and ' between 'name op number' parts (no 'or', \
                     no parentheses); split the rule in two instead"
                        .into(),
                ),
            });
        }
        let known = known.get_or_insert_with(|| {
            let mut names: HashSet<String> = CONDITION_VARIABLES.map(String::from).into();
            names.extend(c.prompt.variables.keys().cloned());
            names
        });
        for name in crate::expr::condition_names(cond) {
            if known.contains(&name) {
                continue;
            }
            let hint = match close_match(&name, known) {
                Some(m) => format!("Did you mean {m}?"),
                None => format!("Known variables: {}", CONDITION_VARIABLES.join(", ")),
            };
            out.push(
                warn(
                    format!(
                        "Validation rule {rule} condition names unknown variable '{name}': \
                         that part counts as true, so the rule applies to every sheet"
                    ),
                    hint,
                )
                .meta("variable", name),
            );
        }
    }
}

/// The sheet values a validation `condition` compares (besides numeric `prompt.variables`).
const CONDITION_VARIABLES: [&str; 12] = [
    "sheet_num",
    "total_sheets",
    "start_item",
    "end_item",
    "stage",
    "instance",
    "fan_count",
    "total_stages",
    "movement",
    "voice",
    "voice_count",
    "total_movements",
];

/// [`unknown_placeholders`] against no known names (tests).
#[cfg(test)]
pub(super) fn unknown_placeholders_for_tests(text: &str) -> Vec<String> {
    unknown_placeholders(text, &HashSet::new())
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
