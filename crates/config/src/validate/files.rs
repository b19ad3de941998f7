//! Checks that files and directories the score names exist on disk.

use std::path::Path;

use super::{find_line, relative_to_score, Ctx, Issue, Severity};

/// V002: the workspace's parent directory exists.
pub(super) fn v002(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    // A file where a directory goes: the conductor could not create the workspace.
    let file_in_the_way = c
        .workspace
        .ancestors()
        .find(|p| p.exists())
        .filter(|p| !p.is_dir());
    if let Some(file) = file_in_the_way {
        let f = file.display().to_string();
        let what = if file == c.workspace {
            "Workspace is not a directory"
        } else {
            "Workspace parent is not a directory"
        };
        out.push(
            Issue::new("V002", Severity::Error, format!("{what}: {f} is a file"))
                .line(find_line(raw, "workspace:"))
                .suggest(format!("Change the workspace path, or move {f} away"))
                .meta("path", f)
                .meta("workspace", c.workspace.display().to_string()),
        );
        return;
    }
    if let Some(parent) = c.workspace.parent() {
        if !parent.exists() {
            let p = parent.display().to_string();
            let mut i = Issue::new(
                "V002",
                Severity::Error,
                format!("Workspace parent directory does not exist: {p}"),
            )
            .line(find_line(raw, "workspace:"))
            .suggest(format!("Create parent directory: mkdir -p {p}"))
            .meta("path", p)
            .meta("workspace", c.workspace.display().to_string());
            i.auto_fixable = true;
            out.push(i);
        }
    }
}

/// V003: `prompt.template_file` exists and is a file.
pub(super) fn v003(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    let score_path = x.score_path;
    if let Some(tf) = &c.prompt.template_file {
        let p = relative_to_score(tf, score_path);
        if !p.exists() {
            out.push(
                Issue::new(
                    "V003",
                    Severity::Error,
                    format!("Template file not found: {}", p.display()),
                )
                .line(find_line(raw, "template_file:"))
                .suggest("Create the template file or fix the path")
                .meta("expected_path", p.display().to_string()),
            );
        } else if !p.is_file() {
            out.push(
                Issue::new(
                    "V003",
                    Severity::Error,
                    format!("Template path is not a file: {}", p.display()),
                )
                .line(find_line(raw, "template_file:"))
                .suggest("Ensure template_file points to a file, not a directory"),
            );
        }
    }
}

/// V004: `backend.system_prompt_file` exists.
pub(super) fn v004(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    let score_path = x.score_path;
    if let Some(sp) = &c.backend.system_prompt_file {
        let p = relative_to_score(sp, score_path);
        if !p.exists() {
            out.push(
                Issue::new(
                    "V004",
                    Severity::Error,
                    format!("System prompt file not found: {}", p.display()),
                )
                .line(find_line(raw, "system_prompt_file:"))
                .suggest("Create the system prompt file or fix the path")
                .meta("expected_path", p.display().to_string()),
            );
        }
    }
}

/// V005: `backend.working_directory` exists and is a directory.
pub(super) fn v005(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    let score_path = x.score_path;
    if let Some(wd) = &c.backend.working_directory {
        let p = relative_to_score(wd, score_path);
        if !p.exists() {
            let mut i = Issue::new(
                "V005",
                Severity::Error,
                format!("Working directory does not exist: {}", p.display()),
            )
            .line(find_line(raw, "working_directory:"))
            .suggest(format!("Create directory: mkdir -p {}", p.display()))
            .meta("path", p.display().to_string());
            i.auto_fixable = true;
            out.push(i);
        } else if !p.is_dir() {
            out.push(
                Issue::new(
                    "V005",
                    Severity::Error,
                    format!("Working directory path is not a directory: {}", p.display()),
                )
                .line(find_line(raw, "working_directory:"))
                .suggest("Ensure path points to a directory, not a file"),
            );
        }
    }
}

/// V107: absolute files that pattern validations read exist.
pub(super) fn v107(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let score_path = x.score_path;
    for (i, v) in c.validations.iter().enumerate() {
        if !v.kind.needs_pattern() {
            continue;
        }
        let Some(path) = v.path.as_deref().filter(|p| !p.contains('{')) else {
            continue;
        };
        let p = relative_to_score(Path::new(path), score_path);
        if p.is_absolute() && !p.exists() {
            out.push(
                Issue::new(
                    "V107",
                    Severity::Warning,
                    format!(
                        "File referenced in validation {} does not exist: {}",
                        i + 1,
                        p.display()
                    ),
                )
                .suggest("Ensure file will be created before this validation runs")
                .meta("validation_index", i.to_string())
                .meta("path", p.display().to_string()),
            );
        }
    }
}

/// V108: prelude and cadenza injection files exist.
pub(super) fn v108(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    let score_path = x.score_path;
    let mut injections: Vec<(String, &str)> = c
        .sheet
        .prelude
        .iter()
        .map(|p| ("prelude".to_string(), p.file.as_str()))
        .collect();
    for (n, items) in &c.sheet.cadenzas {
        injections.extend(
            items
                .iter()
                .map(|p| (format!("cadenza (sheet {n})"), p.file.as_str())),
        );
    }
    for (source, file) in injections {
        if file.contains("{{") {
            continue;
        }
        let p = relative_to_score(Path::new(file), score_path);
        if !p.exists() {
            out.push(
                Issue::new(
                    "V108",
                    Severity::Warning,
                    format!("Injection file from {source} not found: {}", p.display()),
                )
                .line(find_line(raw, file))
                .suggest("Create the file or fix the path")
                .meta("source", source)
                .meta("path", p.display().to_string()),
            );
        }
    }
}

/// V216 (ours, a warning): a `run_job` hook's `job_path` that the conductor will not find
/// when the job ends, looked for as the hook will look for it (beside the score, then from
/// the user's own directories above it). A path with a `{placeholder}` is known only then.
/// Upstream's validate says nothing, and the chain then fails after the whole job has run.
pub(super) fn v216(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let resolved = crate::resolve_path(x.score_path);
    let score_dir = resolved.parent().unwrap_or(Path::new("/"));
    for (i, hook) in x.c.on_success.iter().enumerate() {
        let Some(job_path) = hook.job_path.as_deref() else {
            continue;
        };
        let text = job_path.to_string_lossy();
        if hook.kind != crate::model::HookType::RunJob || text.contains('{') || text.is_empty() {
            continue;
        }
        if let Err(beside) = crate::chained_score(score_dir, job_path) {
            out.push(
                Issue::new(
                    "V216",
                    Severity::Warning,
                    format!(
                        "Score chained by on_success hook {} not found: {}",
                        i + 1,
                        beside.display()
                    ),
                )
                .line(find_line(x.raw, &text))
                .suggest(
                    "Fix job_path: a relative path is taken from the score's directory (or, \
                     not found there, from the directories above it); otherwise the job runs \
                     to the end and its chain fails",
                )
                .meta("hook", (i + 1).to_string())
                .meta("path", beside.display().to_string()),
            );
        }
    }
}

/// V218 (ours, a warning): `workspace_lifecycle.archive_on_fresh` with a workspace that holds
/// the score file (`workspace: .`): a `--fresh` run archives every top-level entry of the
/// workspace, so the score's neighbours (anything else in that directory) move into the
/// archive directory. The score file itself (and the directory holding it) is kept in place.
pub(super) fn v218(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    if !x.c.workspace_lifecycle.archive_on_fresh {
        return;
    }
    let score = crate::resolve_path(x.score_path);
    let workspace = crate::resolve_path(&x.c.workspace);
    if !score.starts_with(&workspace) {
        return;
    }
    out.push(
        Issue::new(
            "V218",
            Severity::Warning,
            format!(
                "workspace_lifecycle.archive_on_fresh with the workspace {} holding the score \
                 file: a --fresh run moves everything else in that directory into {}",
                workspace.display(),
                workspace
                    .join(&x.c.workspace_lifecycle.archive_dir)
                    .display()
            ),
        )
        .line(x.line_of("workspace"))
        .suggest(
            "Give the score a workspace of its own (e.g. workspace: ./NAME-ws), or drop \
             archive_on_fresh",
        )
        .meta("workspace", workspace.display().to_string()),
    );
}
