//! Ours: task lists and the worker + reviewer loop (docs/mochi.md, seed 004 "MOCHI").
//!
//! `tasks:` fans one movement out over the bullets of the `## Tasks` section of a markdown
//! file or of a GitHub issue's body: one voice per task, with the task's text, slug, branch
//! and `[model:NAME]` annotation available to templates and placeholders. The list is read
//! when the score is loaded (so `validate`, `run --dry-run` and the conductor all see the same
//! tasks, and bad input is refused before any agent runs). `review:` describes the reviewer
//! the conductor runs after each worker attempt.

use std::path::{Path, PathBuf};
use std::process::Command;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::model::{FreeMap, JobConfig};

fn d_section() -> String {
    "Tasks".into()
}
fn d_one() -> i64 {
    1
}
fn d_three() -> i64 {
    3
}
fn d_true() -> bool {
    true
}
fn d_origin() -> String {
    "origin".into()
}

/// `tasks`: where the task list comes from and what becomes of each task's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksConfig {
    /// Markdown file holding a `## Tasks` section (relative to the score's directory).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// GitHub issue whose body holds the section (read with `gh issue view N --json body`).
    #[serde(default)]
    pub issue: Option<u64>,
    /// `owner/name` for `gh -R` (default: the repository of the current directory).
    #[serde(default)]
    pub repo: Option<String>,
    /// The git repository the tasks work on (its per-task worktrees and branches); default:
    /// the directory of `file`, else the score's directory. Relative to the score's directory.
    #[serde(default)]
    pub repository: Option<PathBuf>,
    /// Heading of the section (`## <section>`).
    #[serde(default = "d_section")]
    pub section: String,
    /// The movement fanned out over the tasks.
    #[serde(default = "d_one")]
    pub movement: i64,
    /// Branch name template: `{slug}`, `{task_num}`, `{prefix}` (= `isolation.branch_prefix`).
    #[serde(default)]
    pub branch: Option<String>,
    /// What happens to a task's result once it is done.
    #[serde(default)]
    pub dispatch: DispatchMode,
    /// Git remote the `pr` dispatch pushes to.
    #[serde(default = "d_origin")]
    pub remote: String,
    /// Base branch of the pull requests (default: `isolation.source_branch`, else the
    /// repository's current branch).
    #[serde(default)]
    pub pr_base: Option<String>,
    /// The parsed tasks; filled in when the score is loaded (anything written here is
    /// replaced).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<TaskItem>,
}

/// One task of the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskItem {
    /// 1-based position (the voice that plays it).
    pub num: u32,
    /// The bullet's text without the `[model:…]` annotation.
    pub text: String,
    /// `Fix the bug in auth.go` → `fix-the-bug-in-auth-go`.
    pub slug: String,
    /// The `[model:NAME]` annotation, if any.
    #[serde(default)]
    pub model: Option<String>,
    /// Branch name from the template. When that branch (or the worktree directory) is
    /// taken, the task's worktree gets `-2`, `-3`, … at run time: the prompt's
    /// `task_branch` then holds the real name, and `mozart run --dry-run` shows it.
    pub branch: String,
    /// Line of the bullet in its source.
    pub line: usize,
}

/// `tasks.dispatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchMode {
    /// Leave the result on its branch.
    #[default]
    None,
    /// Push the branch and open a pull request with `gh pr create`.
    Pr,
    /// A markdown report (final output + memory files) in `{workspace}/output/`.
    ResearchReport,
    /// The worker's raw final output as a markdown file in `{workspace}/output/`.
    File,
}

impl DispatchMode {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchMode::None => "none",
            DispatchMode::Pr => "pr",
            DispatchMode::ResearchReport => "research-report",
            DispatchMode::File => "file",
        }
    }
}

/// `review`: the second instrument that judges each worker attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewConfig {
    /// Reviewer instrument (profile or `instruments:` alias); default: the sheet's own.
    #[serde(default)]
    pub instrument: Option<String>,
    /// Reviewer model.
    #[serde(default)]
    pub model: Option<String>,
    /// Reviewer instrument overrides.
    #[serde(default)]
    pub instrument_config: FreeMap,
    /// Worker iterations before the sheet fails.
    #[serde(default = "d_three")]
    pub max_iterations: i64,
    /// Reviewer prompt (Jinja); default: the built-in one (docs/mochi.md).
    #[serde(default)]
    pub template: Option<String>,
    /// Keep PROGRESS.md, MEMORY.md, FEEDBACK.md and AGENTS.md in the sheet's directory and
    /// put them in the worker's prompt.
    #[serde(default = "d_true")]
    pub memory: bool,
    /// Movement reviewed (default: `tasks.movement`, or every sheet without `tasks`).
    #[serde(default)]
    pub movement: Option<i64>,
    /// Reviewer time limit in seconds (default: the sheet's).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
}

impl ReviewConfig {
    /// Whether sheets of `movement` are reviewed.
    pub fn reviews(&self, job: &JobConfig, movement: u32) -> bool {
        let wanted = self
            .movement
            .or_else(|| job.tasks.as_ref().map(|t| t.movement));
        wanted.is_none_or(|m| m == i64::from(movement))
    }
}

/// Reject review settings that cannot work.
pub(crate) fn check_review(job: &JobConfig) -> Result<(), String> {
    let Some(r) = &job.review else {
        return Ok(());
    };
    if r.max_iterations < 1 {
        return Err(format!(
            "review.max_iterations must be at least 1, got {}",
            r.max_iterations
        ));
    }
    if r.timeout_seconds.is_some_and(|t| t.is_nan() || t <= 0.0) {
        return Err("review.timeout_seconds must be greater than 0".into());
    }
    if r.instrument.as_deref().is_some_and(|i| i.trim().is_empty()) {
        return Err("review.instrument must name an instrument".into());
    }
    Ok(())
}

/// The task a sheet plays, if its movement is the task movement.
pub fn task_of(job: &JobConfig, movement: u32, voice: u32) -> Option<&TaskItem> {
    let tasks = job.tasks.as_ref()?;
    if tasks.movement != i64::from(movement) {
        return None;
    }
    tasks
        .items
        .get(usize::try_from(voice).ok()?.checked_sub(1)?)
}

/// Names of the task variables (defined on the sheets of the task movement).
pub const TASK_VARS: [&str; 6] = [
    "task",
    "task_slug",
    "task_model",
    "task_branch",
    "task_num",
    "task_count",
];

/// The template and placeholder variables of a task's sheet (docs/mochi.md).
pub fn task_vars(job: &JobConfig, task: &TaskItem) -> [(&'static str, String); 6] {
    let count = job.tasks.as_ref().map_or(0, |t| t.items.len());
    [
        ("task", task.text.clone()),
        ("task_slug", task.slug.clone()),
        ("task_model", task.model.clone().unwrap_or_default()),
        ("task_branch", task.branch.clone()),
        ("task_num", task.num.to_string()),
        ("task_count", count.to_string()),
    ]
}

/// `Fix the bug in auth.go` → `fix-the-bug-in-auth-go`: ASCII letters and digits kept
/// (lower-cased), every other run of characters one `-`, at most 60 characters.
pub fn slugify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut slug = out.trim_end_matches('-').to_string();
    if slug.len() > 60 {
        slug.truncate(60);
        slug = slug.trim_end_matches('-').to_string();
    }
    slug
}

/// Parse the bullets of the `## <section>` section. `source` names the input in errors.
pub fn parse_tasks(text: &str, section: &str, source: &str) -> Result<Vec<TaskItem>, String> {
    let mut in_section = false;
    let mut found = None;
    let mut items = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r');
        let heading = line.trim_start();
        let level = heading.chars().take_while(|c| *c == '#').count();
        if level > 0 && heading[level..].starts_with([' ', '\t']) {
            if level <= 2 {
                in_section = level == 2 && heading[level..].trim().eq_ignore_ascii_case(section);
                if in_section && found.is_none() {
                    found = Some(i + 1);
                }
            }
            continue;
        }
        if !in_section {
            continue;
        }
        let body = line.trim_start();
        let Some(rest) = body
            .strip_prefix("- ")
            .or_else(|| body.strip_prefix("* "))
            .or_else(|| body.strip_prefix("-\t"))
            .or_else(|| body.strip_prefix("*\t"))
        else {
            continue;
        };
        let (task, model) =
            strip_model(rest.trim()).map_err(|m| format!("{source} line {}: {m}", i + 1))?;
        if task.is_empty() {
            return Err(format!(
                "{source} line {}: empty task (a bullet with no text)",
                i + 1
            ));
        }
        let num = u32::try_from(items.len() + 1).unwrap_or(u32::MAX);
        let mut slug = slugify(&task);
        if slug.is_empty() {
            slug = format!("task-{num}");
        }
        items.push(TaskItem {
            num,
            text: task,
            slug,
            model,
            branch: String::new(),
            line: i + 1,
        });
    }
    let Some(heading_line) = found else {
        return Err(format!(
            "{source}: no `## {section}` section; add a `## {section}` heading followed by one `- ` bullet per task"
        ));
    };
    if items.is_empty() {
        return Err(format!(
            "{source} line {heading_line}: the `## {section}` section has no tasks; list them as `- ` or `* ` bullets"
        ));
    }
    let mut seen: IndexMap<&str, usize> = IndexMap::new();
    for item in &items {
        if let Some(first) = seen.insert(item.slug.as_str(), item.line) {
            return Err(format!(
                "{source} line {}: task \"{}\" has the slug '{}' of the task on line {first}; reword one of them (slugs name branches and worktrees)",
                item.line, item.text, item.slug
            ));
        }
    }
    Ok(items)
}

/// Split off a `[model:NAME]` annotation.
fn strip_model(text: &str) -> Result<(String, Option<String>), String> {
    let Some(start) = text.find("[model:") else {
        return Ok((text.to_string(), None));
    };
    let after = &text[start + "[model:".len()..];
    let Some(end) = after.find(']') else {
        return Err(format!(
            "unclosed model annotation in \"{text}\"; write [model:NAME]"
        ));
    };
    let name = after[..end].trim();
    if name.is_empty() {
        return Err(format!(
            "empty model annotation in \"{text}\"; write [model:NAME]"
        ));
    }
    let rest = format!("{}{}", &text[..start], &after[end + 1..]);
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    Ok((rest, Some(name.to_string())))
}

/// Whether git accepts `name` as a branch name (the rules of `git check-ref-format`).
pub fn valid_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['-', '/', '.'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.contains("/.")
        && name != "@"
        && !name
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c))
}

/// Read the task list of a loaded score and fan its movement out over it. Called by the
/// loader before fan-out expansion; `base` is the score's directory.
pub(crate) fn load(job: &mut JobConfig, base: &Path) -> Result<(), String> {
    let prefix = job.isolation.branch_prefix.clone();
    let own_trees = job.isolation.enabled
        && job.isolation.mode == crate::model::IsolationMode::Worktree
        && job.isolation.scope == crate::model::IsolationScope::Sheet;
    let reviewed = job.review.as_ref().is_some_and(|r| {
        r.movement
            .is_none_or(|m| job.tasks.as_ref().is_some_and(|t| t.movement == m))
    });
    let Some(tasks) = job.tasks.as_mut() else {
        return Ok(());
    };
    if tasks.dispatch != DispatchMode::None && !reviewed {
        return Err(format!(
            "tasks.dispatch `{}` happens when the reviewer answers DONE: add a `review:` section for the task movement",
            tasks.dispatch.as_str()
        ));
    }
    if tasks.dispatch == DispatchMode::Pr && !own_trees {
        return Err("tasks.dispatch `pr` opens a pull request from each task's own branch: set `isolation: {enabled: true, scope: sheet}`".into());
    }
    let (text, source) = match (&tasks.file, tasks.issue) {
        (Some(_), Some(_)) => {
            return Err("tasks: give either `file` or `issue`, not both".into());
        }
        (None, None) => {
            return Err(
                "tasks: say where the task list is: `file: PRD.md` or `issue: <number>`".into(),
            );
        }
        (Some(file), None) => {
            let path = if file.is_absolute() {
                file.clone()
            } else {
                base.join(file)
            };
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("tasks.file: cannot read {}: {e}", path.display()))?;
            tasks.file = Some(path.clone());
            if tasks.repository.is_none() {
                tasks.repository = path.parent().map(Path::to_path_buf);
            }
            (text, path.display().to_string())
        }
        (None, Some(issue)) => (
            issue_body(issue, tasks.repo.as_deref())?,
            format!("GitHub issue #{issue}"),
        ),
    };
    tasks.repository = Some(match tasks.repository.take() {
        Some(r) if r.is_absolute() => r,
        Some(r) => crate::paths::resolve_path(&base.join(r)),
        None => base.to_path_buf(),
    });
    let mut items = parse_tasks(&text, &tasks.section, &source)?;
    let template = tasks
        .branch
        .clone()
        .unwrap_or_else(|| "{prefix}/{slug}".into());
    for item in &mut items {
        item.branch = crate::braces::expand_with(&template, |key| match key {
            "slug" => Some(item.slug.clone().into()),
            "task_num" => Some(item.num.to_string().into()),
            "prefix" => Some(prefix.clone().into()),
            _ => None,
        });
        if !valid_branch_name(&item.branch) {
            return Err(format!(
                "tasks.branch: '{}' (task on {source} line {}) is not a valid git branch name; change the template or the task",
                item.branch, item.line
            ));
        }
    }
    let m = tasks.movement;
    if m < 1 || m > job.sheet.total_items {
        return Err(format!(
            "tasks.movement {m} is not a movement of this score (1-{})",
            job.sheet.total_items
        ));
    }
    if job.sheet.fan_out.contains_key(&m) {
        return Err(format!(
            "tasks.movement {m} also has sheet.fan_out; remove that entry (the task list sets the voice count)"
        ));
    }
    job.sheet
        .fan_out
        .insert(m, i64::try_from(items.len()).unwrap_or(i64::MAX));
    tasks.items = items;
    Ok(())
}

/// After fan-out expansion: give each task's sheet the model (or instrument alias) of its
/// `[model:NAME]` annotation. A name that is an `instruments:` alias selects that instrument;
/// a `gemini-…` name selects the `gemini-cli` instrument with that model (as MOCHI does);
/// any other name is the model of the sheet's own instrument.
pub(crate) fn assign_models(job: &mut JobConfig) {
    let Some(tasks) = job.tasks.as_ref() else {
        return;
    };
    let Some(map) = job.sheet.fan_out_stage_map.as_ref() else {
        return;
    };
    let mut picks = Vec::new();
    for (num, meta) in map {
        if meta.stage != Some(tasks.movement) {
            continue;
        }
        let voice = meta.instance.unwrap_or(1);
        let Some(model) = usize::try_from(voice - 1)
            .ok()
            .and_then(|i| tasks.items.get(i))
            .and_then(|t| t.model.clone())
        else {
            continue;
        };
        picks.push((num, model));
    }
    for (num, model) in picks {
        if job.instruments.contains_key(&model) {
            job.sheet.per_sheet_instruments.insert(num, model);
            continue;
        }
        if model.starts_with("gemini-") {
            job.sheet
                .per_sheet_instruments
                .insert(num, "gemini-cli".into());
        }
        job.sheet
            .per_sheet_instrument_config
            .entry(num)
            .or_default()
            .insert("model".into(), serde_json::Value::String(model));
    }
}

/// The body of a GitHub issue through the `gh` CLI.
fn issue_body(issue: u64, repo: Option<&str>) -> Result<String, String> {
    let mut args = vec![
        "issue".to_string(),
        "view".into(),
        issue.to_string(),
        "--json".into(),
        "body".into(),
    ];
    if let Some(r) = repo {
        args.push("-R".into());
        args.push(r.to_string());
    }
    let shown = format!("gh {}", args.join(" "));
    let out = Command::new("gh").args(&args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("tasks.issue: `{shown}` cannot run: the GitHub CLI `gh` is not on PATH; install it (https://cli.github.com) and run `gh auth login`, or list the tasks in a file with `tasks.file`")
        } else {
            format!("tasks.issue: cannot run `{shown}`: {e}")
        }
    })?;
    if !out.status.success() {
        return Err(format!(
            "tasks.issue: `{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("tasks.issue: `{shown}` did not print JSON ({e})"))?;
    doc.get("body")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("tasks.issue: `{shown}` printed no `body`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_like_mochi() {
        assert_eq!(slugify("Fix the bug in auth.go"), "fix-the-bug-in-auth-go");
        assert_eq!(slugify("  Add --verbose flag!! "), "add-verbose-flag");
        assert_eq!(slugify("日本"), "");
    }

    #[test]
    fn parses_the_tasks_section_only() {
        let text = "# PRD\n- not a task\n## Tasks\n- Fix the bug in auth.go\n* Write docs [model:gemini-2.5-pro]\n  - nested counts\n### Notes\n- still tasks\n## Other\n- not a task\n";
        let items = parse_tasks(text, "Tasks", "PRD.md").unwrap();
        let got: Vec<(&str, &str, Option<&str>, usize)> = items
            .iter()
            .map(|t| (t.text.as_str(), t.slug.as_str(), t.model.as_deref(), t.line))
            .collect();
        assert_eq!(
            got,
            vec![
                ("Fix the bug in auth.go", "fix-the-bug-in-auth-go", None, 4),
                ("Write docs", "write-docs", Some("gemini-2.5-pro"), 5),
                ("nested counts", "nested-counts", None, 6),
                ("still tasks", "still-tasks", None, 8),
            ]
        );
    }

    #[test]
    fn bad_lists_name_the_line() {
        let e = parse_tasks("# x\n- a\n", "Tasks", "PRD.md").unwrap_err();
        assert!(e.contains("PRD.md: no `## Tasks` section"), "{e}");
        let e = parse_tasks("## Tasks\n\nsome text\n", "Tasks", "PRD.md").unwrap_err();
        assert!(e.contains("PRD.md line 1") && e.contains("no tasks"), "{e}");
        let e = parse_tasks("## Tasks\n- Fix it\n- fix  it!\n", "Tasks", "PRD.md").unwrap_err();
        assert!(e.contains("PRD.md line 3") && e.contains("line 2"), "{e}");
        let e = parse_tasks("## Tasks\n- x [model:]\n", "Tasks", "P").unwrap_err();
        assert!(e.contains("P line 2: empty model annotation"), "{e}");
    }

    #[test]
    fn model_annotations_pick_the_sheets_model_or_instrument() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("PRD.md"),
            "## Tasks\n- plain\n- strong [model:claude-opus-4]\n- wide [model:gemini-2.5-pro]\n- aliased [model:fast]\n",
        )
        .unwrap();
        let score = dir.path().join("s.yaml");
        std::fs::write(
            &score,
            "name: s\ninstrument: claude_cli\ninstruments: {fast: {profile: codex-cli, config: {model: o4-mini}}}\nsheet: {size: 1, total_items: 2}\ntasks: {file: PRD.md}\nprompt: {template: x}\n",
        )
        .unwrap();
        let job = crate::load_score(&score).unwrap().config;
        let plan = crate::SheetPlan::build(&job).unwrap();
        let got: Vec<(u32, &str, Option<&str>)> = plan
            .sheets
            .iter()
            .map(|s| (s.num, s.instrument.as_str(), s.model.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "claude_cli", None),
                (2, "claude_cli", Some("claude-opus-4")),
                (3, "gemini-cli", Some("gemini-2.5-pro")),
                (4, "codex-cli", Some("o4-mini")),
                (5, "claude_cli", None),
            ]
        );
        let t = task_of(&job, 1, 2).unwrap();
        assert_eq!(
            (t.slug.as_str(), t.branch.as_str()),
            ("strong", "mozart/strong")
        );
        assert!(task_of(&job, 2, 1).is_none(), "movement 2 plays no task");
        assert_eq!(
            job.tasks.as_ref().unwrap().repository.as_deref(),
            Some(dir.path().canonicalize().unwrap().as_path())
        );
    }

    #[test]
    fn branch_names() {
        assert!(valid_branch_name("mochi/fix-it"));
        for bad in ["a b", "a..b", "-x", "x.lock", "x/", "a~b", ""] {
            assert!(!valid_branch_name(bad), "{bad}");
        }
    }
}
