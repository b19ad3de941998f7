//! Prompt templating with minijinja (score.md §5.1–5.6).
//!
//! The template is compiled once per score ([`PromptRenderer`]) and rendered per sheet with
//! strict undefined variables, upstream's variable precedence (sheet context, then user
//! variables, then `stakes`/`thinking_method`) and Python-compatible methods.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use indexmap::IndexMap;
use minijinja::{Environment, UndefinedBehavior, Value};

use crate::error::ConfigError;
use crate::model::{InjectionCategory, JobConfig, ValidationRule, ValidationType};
use crate::plan::{total_sheets, total_stages, PlannedSheet};

/// Runtime data a sheet's prompt may use beyond the score itself.
#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    /// Workspace override (e.g. `run --workspace`); default the score's workspace.
    pub workspace: Option<PathBuf>,
    /// The directory the instrument runs in (the sheet's git worktree under isolation);
    /// default the workspace.
    pub working_directory: Option<PathBuf>,
    /// The branch the sheet's own worktree really checked out (docs/mochi.md): it replaces
    /// the planned `task_branch`, which lacks the `-2` a taken name gets.
    pub task_branch: Option<String>,
    /// Cross-sheet stdout tails by sheet number.
    pub previous_outputs: BTreeMap<u32, String>,
    /// Cross-sheet captured files by absolute path.
    pub previous_files: IndexMap<String, String>,
    /// Skipped sheets in the lookback window.
    pub skipped_upstream: Vec<u32>,
    /// Resolved context injections.
    pub injected_context: Vec<String>,
    /// Resolved skill injections.
    pub injected_skills: Vec<String>,
    /// Resolved tool injections.
    pub injected_tools: Vec<String>,
    /// Extra variables, merged over user variables (before `stakes`/`thinking_method`).
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Directory a relative `template_file` is resolved against (default: the process CWD,
    /// as upstream's runtime does; `mozart validate` passes the score directory).
    pub template_dir: Option<PathBuf>,
}

const TEMPLATE_NAME: &str = "prompt";

/// A score's prompt template, compiled once.
pub struct PromptRenderer {
    env: Environment<'static>,
    has_template: bool,
    /// The score-level values of the job this renderer was built for (every sheet of it
    /// shares them; recomputing per sheet walked the whole fan-out map each time).
    score: ScoreVars,
    /// The names the template reads from its context, found once when first asked
    /// (minijinja parses the whole template again to list them).
    names: Arc<OnceLock<HashSet<String>>>,
}

/// A template compiled in the strict environment, with the names it reads once asked.
struct Compiled {
    source: String,
    /// The environment holding the template, or Jinja's message for why it does not compile.
    env: Result<Environment<'static>, String>,
    names: Arc<OnceLock<HashSet<String>>>,
}

/// The template `source` compiled in the strict environment, shared with the last caller
/// that compiled the same text: `mozart validate` checks a score's template (V001, V101),
/// renders every sheet (V011) and previews it, each step with its own renderer, and
/// compiling the 516-sheet corpus score's template three times and parsing it twice more
/// for its names was a twelfth of the command. One entry, replaced by the next text. The
/// lock is held while compiling: `validate` compiles on its render worker while its other
/// checks run, and a check that needs the same text waits for that compile instead of
/// doing it a second time.
fn compiled(source: &str) -> Arc<Compiled> {
    static LAST: Mutex<Option<Arc<Compiled>>> = Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(hit) = last.as_ref().filter(|c| c.source == source) {
        return Arc::clone(hit);
    }
    let mut env = environment(true);
    let env = match env.add_template_owned(TEMPLATE_NAME, source.to_string()) {
        Ok(()) => Ok(env),
        Err(e) => Err(jinja_message(&e)),
    };
    let entry = Arc::new(Compiled {
        source: source.to_string(),
        env,
        names: Arc::default(),
    });
    *last = Some(Arc::clone(&entry));
    entry
}

/// The names a template reads from its context (`undeclared_variables`), or `None` when it
/// does not compile; shared with [`PromptRenderer::shared`] for the same text.
pub fn template_names(source: &str) -> Option<HashSet<String>> {
    let entry = compiled(source);
    let env = entry.env.as_ref().ok()?;
    let template = env.get_template(TEMPLATE_NAME).ok()?;
    Some(
        entry
            .names
            .get_or_init(|| template.undeclared_variables(false))
            .clone(),
    )
}

/// A Jinja environment configured like upstream's `PromptBuilder`.
pub fn environment(strict: bool) -> Environment<'static> {
    // Registering the contrib filters costs more than compiling a small template; build the
    // two configurations once per process and hand out copies.
    static BASE: std::sync::LazyLock<[Environment<'static>; 2]> =
        std::sync::LazyLock::new(|| [new_environment(false), new_environment(true)]);
    BASE[usize::from(strict)].clone()
}

/// How many template steps one render may take. A prompt is text for an AI: even the largest
/// upstream example (516 sheets, loops over its items) takes a few thousand steps per sheet.
/// Without a bound, `{% for i in range(99999) %}{% for j in range(99999) %}` spins a core
/// of the conductor (and `mozart validate`) for hours.
pub const TEMPLATE_FUEL: u64 = 5_000_000;

fn new_environment(strict: bool) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_undefined_behavior(if strict {
        UndefinedBehavior::Strict
    } else {
        UndefinedBehavior::Lenient
    });
    env.set_keep_trailing_newline(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    // Jinja2 built-ins that minijinja keeps in contrib (`truncate` is used by the examples).
    minijinja_contrib::add_to_environment(&mut env);
    env.add_filter("truncate", jinja_truncate);
    env
}

/// Jinja2's `truncate(s, length=255, killwords=False, end='...', leeway=None)`; contrib's
/// version takes keyword arguments only, and the examples pass the length positionally.
fn jinja_truncate(
    value: Value,
    length: Option<usize>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: minijinja::value::Kwargs,
) -> Result<Value, minijinja::Error> {
    let length = kwargs
        .get::<Option<usize>>("length")?
        .or(length)
        .unwrap_or(255);
    let killwords = kwargs
        .get::<Option<bool>>("killwords")?
        .or(killwords)
        .unwrap_or(false);
    let end = kwargs
        .get::<Option<String>>("end")?
        .or(end)
        .unwrap_or_else(|| "...".into());
    let leeway = kwargs.get::<Option<usize>>("leeway")?.unwrap_or(5);
    kwargs.assert_all_used()?;
    let s = match value.as_str() {
        Some(s) => s.to_string(),
        None => value.to_string(),
    };
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= length + leeway {
        return Ok(Value::from(s));
    }
    let keep = length.saturating_sub(end.chars().count());
    let head: String = chars[..keep.min(chars.len())].iter().collect();
    if killwords {
        return Ok(Value::from(format!("{head}{end}")));
    }
    let cut = match head.rsplit_once(' ') {
        Some((before, _)) => before.to_string(),
        None => head,
    };
    Ok(Value::from(format!("{cut}{end}")))
}

/// The template source upstream would render: inline `template` if non-empty, else the
/// `template_file` when it exists relative to `dir`, else none (default prompt, §5.3).
pub fn template_source(job: &JobConfig, dir: Option<&Path>) -> Result<Option<String>, ConfigError> {
    if let Some(t) = job.prompt.template.as_deref().filter(|t| !t.is_empty()) {
        return Ok(Some(t.to_string()));
    }
    if let Some(file) = &job.prompt.template_file {
        let path = match dir {
            Some(d) if file.is_relative() => d.join(file),
            _ => file.clone(),
        };
        // Only a regular file, opened without waiting (a FIFO swapped in would block);
        // anything else is no template file, as `missing_template_file` says.
        return match mozart_ipc::workspace_file::read_regular(&path) {
            Ok(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|e| ConfigError::Template {
                    sheet: 0,
                    message: format!("cannot read template file {}: {e}", path.display()),
                }),
            Err(mozart_ipc::workspace_file::ReadError::NotRegular { .. }) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(ConfigError::Template {
                sheet: 0,
                message: format!("cannot read template file {e}"),
            }),
        };
    }
    Ok(None)
}

/// Where `prompt.template_file` was looked for when the score has no inline `template` and
/// no regular file is there; `None` when the prompt does not come from a missing file.
pub fn missing_template_file(job: &JobConfig, dir: Option<&Path>) -> Option<PathBuf> {
    if job
        .prompt
        .template
        .as_deref()
        .is_some_and(|t| !t.is_empty())
    {
        return None;
    }
    let file = job.prompt.template_file.as_ref()?;
    let path = match dir {
        Some(d) if file.is_relative() => d.join(file),
        _ => file.clone(),
    };
    (!path.is_file()).then_some(path)
}

impl std::fmt::Debug for PromptRenderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptRenderer")
            .field("has_template", &self.has_template)
            .finish_non_exhaustive()
    }
}

impl PromptRenderer {
    /// Compile the score's template for running it. Unlike upstream, which silently renders
    /// the default prompt when `template_file` is missing (score.md §5.3), a job whose
    /// template file is not there is refused: that one-line prompt would go to the
    /// instrument (docs/differences.md). `validate` and its preview keep upstream's view.
    pub fn new(job: &JobConfig, template_dir: Option<&Path>) -> Result<Self, ConfigError> {
        if let Some(path) = missing_template_file(job, template_dir) {
            return Err(ConfigError::TemplateFileMissing { path });
        }
        let mut env = environment(true);
        let source = template_source(job, template_dir)?;
        let has_template = source.is_some();
        if let Some(source) = source {
            env.add_template_owned(TEMPLATE_NAME, source)
                .map_err(|e| ConfigError::Template {
                    sheet: 0,
                    message: jinja_message(&e),
                })?;
        }
        Ok(PromptRenderer {
            env,
            has_template,
            score: ScoreVars::new(job),
            names: Arc::default(),
        })
    }

    /// [`PromptRenderer::new`] sharing the compiled template with the last renderer made this
    /// way from the same text (see [`compiled`]): for the commands that look at one score
    /// several times (`validate`, its preview).
    pub fn shared(job: &JobConfig, template_dir: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(source) = template_source(job, template_dir)? else {
            return Ok(PromptRenderer {
                env: environment(true),
                has_template: false,
                score: ScoreVars::new(job),
                names: Arc::default(),
            });
        };
        let entry = compiled(&source);
        match &entry.env {
            Ok(env) => Ok(PromptRenderer {
                env: env.clone(),
                has_template: true,
                score: ScoreVars::new(job),
                names: Arc::clone(&entry.names),
            }),
            Err(message) => Err(ConfigError::Template {
                sheet: 0,
                message: message.clone(),
            }),
        }
    }

    /// Render the template (or the default prompt) for one sheet of the job this renderer
    /// was built for.
    pub fn render(
        &self,
        job: &JobConfig,
        sheet: &PlannedSheet,
        ctx: &RenderContext,
    ) -> Result<String, ConfigError> {
        self.render_with(job, sheet, ctx, &self.score)
    }

    /// [`PromptRenderer::render`] with the score-level values computed once by the caller.
    pub fn render_with(
        &self,
        job: &JobConfig,
        sheet: &PlannedSheet,
        ctx: &RenderContext,
        score: &ScoreVars,
    ) -> Result<String, ConfigError> {
        if !self.has_template {
            return Ok(default_prompt(job, sheet));
        }
        self.render_vars(sheet, sheet_vars(job, sheet, ctx, score, true))
    }

    /// Whether rendering one sheet with these values fails, and why, exactly as
    /// [`PromptRenderer::render_with`] would fail — without keeping the text (`validate`'s
    /// V011 renders every sheet of a score only for this).
    pub fn check_with(
        &self,
        job: &JobConfig,
        sheet: &PlannedSheet,
        ctx: &RenderContext,
        score: &ScoreVars,
    ) -> Result<(), ConfigError> {
        // The default prompt is plain text: it cannot fail.
        if !self.has_template {
            return Ok(());
        }
        let vars = sheet_vars(job, sheet, ctx, score, true);
        let template = self.template(sheet)?;
        template
            .render_captured_to(&vars, std::io::sink())
            .map(|_| ())
            .map_err(|e| self.render_error(sheet, &template, &vars, &e))
    }

    /// Whether the template names a value that injected files fill (`injected_context`,
    /// `injected_skills`, `injected_tools`); when it does not, what those files hold cannot
    /// change what it renders or whether it renders.
    pub fn reads_injections(&self) -> bool {
        if !self.has_template {
            return false;
        }
        self.env
            .get_template(TEMPLATE_NAME)
            .map_or(true, |template| {
                let names = self
                    .names
                    .get_or_init(|| template.undeclared_variables(false));
                ["injected_context", "injected_skills", "injected_tools"]
                    .iter()
                    .any(|name| names.contains(*name))
            })
    }

    /// The compiled template.
    fn template(&self, sheet: &PlannedSheet) -> Result<minijinja::Template<'_, '_>, ConfigError> {
        self.env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ConfigError::Template {
                sheet: sheet.num,
                message: jinja_message(&e),
            })
    }

    /// Render the template with a context already built by [`sheet_vars`].
    fn render_vars(&self, sheet: &PlannedSheet, vars: Value) -> Result<String, ConfigError> {
        let template = self.template(sheet)?;
        template
            .render(&vars)
            .map_err(|e| self.render_error(sheet, &template, &vars, &e))
    }

    /// A render failure in the words `validate` and the conductor report it.
    fn render_error(
        &self,
        sheet: &PlannedSheet,
        template: &minijinja::Template<'_, '_>,
        vars: &Value,
        e: &minijinja::Error,
    ) -> ConfigError {
        let mut message = jinja_message(e);
        if e.kind() == minijinja::ErrorKind::UndefinedError {
            let read = self
                .names
                .get_or_init(|| template.undeclared_variables(false));
            let names = undefined_names(&self.env, read, vars);
            if !names.is_empty() {
                let line = e.line().map(|l| format!(" (line {l})")).unwrap_or_default();
                let plural = if names.len() == 1 { "" } else { "s" };
                message = format!("undefined variable{plural} {}{line}", names.join(", "));
            }
        }
        ConfigError::Template {
            sheet: sheet.num,
            message,
        }
    }
}

/// Render the prompt template of one sheet (the "rendered template" layer of §5.4).
pub fn render_prompt(
    job: &JobConfig,
    sheet: &PlannedSheet,
    ctx: &RenderContext,
) -> Result<String, ConfigError> {
    PromptRenderer::new(job, ctx.template_dir.as_deref())?.render(job, sheet, ctx)
}

/// The message of a minijinja error without its debug trailer.
/// The names a template reads that neither the sheet's values nor the environment define,
/// quoted and sorted: Jinja's own message says only "undefined value".
fn undefined_names(
    env: &Environment<'static>,
    read: &HashSet<String>,
    vars: &Value,
) -> Vec<String> {
    let mut names: Vec<String> = read
        .iter()
        .filter(|name| vars.get_attr(name).map_or(true, |v| v.is_undefined()))
        .filter(|name| !env.globals().any(|(global, _)| global == name.as_str()))
        .map(|name| format!("'{name}'"))
        .collect();
    names.sort();
    names
}

/// Jinja's message for `e`, with its line; a template that ran out of steps says so plainly.
pub fn jinja_message(e: &minijinja::Error) -> String {
    if e.kind() == minijinja::ErrorKind::OutOfFuel {
        return format!(
            "the template takes more than {TEMPLATE_FUEL} steps to render (a loop or range \
             too large for a prompt?){}",
            e.line().map(|l| format!(" (line {l})")).unwrap_or_default()
        );
    }
    let mut msg = e
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| e.kind().to_string());
    if e.kind() == minijinja::ErrorKind::UndefinedError && e.detail().is_none() {
        msg = "undefined value".into();
    }
    match e.line() {
        Some(line) => format!("{msg} (line {line})"),
        None => msg,
    }
}

/// `Processing sheet {n} of {total} (items {start}-{end})` plus stakes / thinking method.
pub fn default_prompt(job: &JobConfig, sheet: &PlannedSheet) -> String {
    let mut out = format!(
        "Processing sheet {} of {} (items {}-{})",
        sheet.num,
        total_sheets(&job.sheet),
        sheet.start_item,
        sheet.end_item
    );
    for extra in [&job.prompt.stakes, &job.prompt.thinking_method]
        .into_iter()
        .flatten()
    {
        if !extra.is_empty() {
            out.push_str("\n\n");
            out.push_str(extra);
        }
    }
    out
}

/// Convert numeric-string keys of nested maps to integers (§5.2): `{{ roles[instance] }}`
/// indexes by int after upstream's JSON round trip. Top-level keys stay as they are.
fn to_value(v: &serde_json::Value, nested: bool) -> Value {
    match v {
        serde_json::Value::Object(map) => {
            let mut ordered: Vec<(Value, Value)> = Vec::with_capacity(map.len());
            for (k, val) in map {
                let key = match (nested, k.trim().parse::<i64>()) {
                    (true, Ok(i)) if !k.is_empty() => Value::from(i),
                    _ => Value::from(k.as_str()),
                };
                ordered.push((key, to_value(val, true)));
            }
            Value::from_iter(ordered)
        }
        serde_json::Value::Array(items) => {
            // Upstream leaves dicts nested inside lists untouched.
            Value::from(items.iter().map(to_value_plain).collect::<Vec<_>>())
        }
        other => Value::from_serialize(other),
    }
}

fn to_value_plain(v: &serde_json::Value) -> Value {
    Value::from_serialize(v)
}

/// The Jinja context of §5.2 for one sheet.
pub fn template_vars(job: &JobConfig, sheet: &PlannedSheet, ctx: &RenderContext) -> Value {
    sheet_vars(job, sheet, ctx, &ScoreVars::new(job), true)
}

/// The user variables as template values, by name. Hashed with FNV-1a: a template looks
/// names up in them tens of times a sheet, for every sheet of the score, and the names are
/// the score's own (not input to a long-lived table), so SipHash's guard bought nothing.
type UserVars = IndexMap<String, Value, std::hash::BuildHasherDefault<mozart_yaml::Fnv>>;

/// The parts of the §5.2 context that are the same for every sheet of a score, computed once
/// for rendering many sheets: the user variables as template values, and the sheet and
/// stage totals (counting stages walks the whole fan-out map, so per sheet it was quadratic).
#[derive(Debug, Clone)]
pub struct ScoreVars {
    /// The user variables as template values, shared by every sheet's context.
    variables: Arc<UserVars>,
    total_sheets: i64,
    total_stages: i64,
    stakes: Value,
    thinking_method: Value,
    /// The score's workspace and its template value (most sheets render with it).
    workspace: (PathBuf, Value),
    /// The injection paths compiled so far, shared by the sheets that name them.
    paths: Arc<Mutex<PathTemplates>>,
}

/// Prelude and cadenza paths compiled as (lenient) templates, each distinct text once: the
/// preview renders every sheet's paths, and the corpus score names 174 distinct paths 652
/// times; `render_str` compiled each of them again for every sheet.
#[derive(Debug, Default)]
struct PathTemplates {
    /// The lenient environment holding them (made on first use).
    env: Option<Environment<'static>>,
    /// A path's text → the name of its template, or `None` when it does not compile.
    names: std::collections::HashMap<String, Option<String>>,
}

impl ScoreVars {
    /// An injection path rendered with `vars`, as `render_str` renders it; `None` when it
    /// does not compile or render.
    fn render_path(&self, text: &str, vars: &Value) -> Option<String> {
        let mut cache = self
            .paths
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let PathTemplates { env, names } = &mut *cache;
        let env = env.get_or_insert_with(|| new_environment(false));
        let name = match names.get(text) {
            Some(name) => name.clone()?,
            None => {
                // Named by number, not by the text: minijinja picks auto-escaping from a
                // template name's extension (`.html`, `.json`), and `render_str` uses none.
                let name = format!("injection path {}", names.len());
                let compiled = env
                    .add_template_owned(name.clone(), text.to_string())
                    .is_ok()
                    .then_some(name);
                names.insert(text.to_string(), compiled.clone());
                compiled?
            }
        };
        env.get_template(&name).ok()?.render(vars).ok()
    }
}

impl ScoreVars {
    /// Convert `job.prompt.variables` (§5.2: nested numeric keys become integers).
    pub fn new(job: &JobConfig) -> Self {
        let mut vars = Self::totals(job);
        vars.variables = Arc::new(
            job.prompt
                .variables
                .iter()
                .map(|(k, v)| (k.clone(), to_value(v, true)))
                .collect(),
        );
        vars
    }

    /// Only the totals (for contexts without user variables).
    fn totals(job: &JobConfig) -> Self {
        ScoreVars {
            variables: Arc::default(),
            total_sheets: total_sheets(&job.sheet),
            total_stages: total_stages(&job.sheet),
            stakes: text_value(&job.prompt.stakes),
            thinking_method: text_value(&job.prompt.thinking_method),
            workspace: (job.workspace.clone(), path_value(&job.workspace)),
            paths: Arc::default(),
        }
    }
}

/// `stakes` / `thinking_method` as template values: the text, or `""` when unset.
fn text_value(text: &Option<String>) -> Value {
    Value::from(text.clone().unwrap_or_default())
}

/// A path as a template value (its text, lossily).
fn path_value(path: &Path) -> Value {
    Value::from(path.to_string_lossy().into_owned())
}

/// The built-in names of the §5.2 context, in the order a template's context lists them.
const BUILTIN_NAMES: [&str; 20] = [
    "sheet_num",
    "total_sheets",
    "start_item",
    "end_item",
    "workspace",
    "working_directory",
    "stage",
    "movement",
    "instance",
    "voice",
    "fan_count",
    "voice_count",
    "total_stages",
    "total_movements",
    "previous_outputs",
    "previous_files",
    "skipped_upstream",
    "injected_context",
    "injected_skills",
    "injected_tools",
];

/// Where a built-in name's value is in [`SheetValues::builtins`].
fn builtin_index(name: &str) -> Option<usize> {
    Some(match name {
        "sheet_num" => 0,
        "total_sheets" => 1,
        "start_item" => 2,
        "end_item" => 3,
        "workspace" => 4,
        "working_directory" => 5,
        "stage" => 6,
        "movement" => 7,
        "instance" => 8,
        "voice" => 9,
        "fan_count" => 10,
        "voice_count" => 11,
        "total_stages" => 12,
        "total_movements" => 13,
        "previous_outputs" => 14,
        "previous_files" => 15,
        "skipped_upstream" => 16,
        "injected_context" => 17,
        "injected_skills" => 18,
        "injected_tools" => 19,
        _ => return None,
    })
}

/// The context of §5.2 for one sheet, as a template object.
///
/// It behaves as the map upstream builds: the built-ins, then the user variables, the task
/// variables, the extra variables and `stakes` / `thinking_method`, a later one replacing an
/// earlier one's value under the same name while the name keeps its first position. It is
/// an object over those parts instead of a map because a template looks names up tens of
/// times per render and every sheet of a score gets its own context: building a ~30-entry
/// hashed map per sheet and hashing each lookup was a tenth of rendering the corpus score;
/// the user variables are shared by every sheet instead of copied into each map.
#[derive(Debug)]
struct SheetValues {
    builtins: [Value; 20],
    /// The score's variables (empty for contexts without user variables).
    user: Arc<UserVars>,
    /// The task variables of a task movement's sheet.
    task: Vec<(&'static str, Value)>,
    /// Extra variables (run-time values merged over the user variables).
    extra: Vec<(String, Value)>,
    stakes: Value,
    thinking_method: Value,
}

impl SheetValues {
    /// The value under `name`: the last part that defines it wins.
    fn lookup(&self, name: &str) -> Option<&Value> {
        match name {
            "stakes" => return Some(&self.stakes),
            "thinking_method" => return Some(&self.thinking_method),
            _ => {}
        }
        if let Some((_, v)) = self.extra.iter().rev().find(|(k, _)| k == name) {
            return Some(v);
        }
        if let Some((_, v)) = self.task.iter().rev().find(|(k, _)| *k == name) {
            return Some(v);
        }
        if let Some(v) = self.user.get(name) {
            return Some(v);
        }
        builtin_index(name).map(|i| &self.builtins[i])
    }

    /// Calls `f` with every name once, in the order the context map lists them (first
    /// definition first), without building anything: the prompt's requirements expand
    /// `{name}` placeholders name by name for every sheet, and [`SheetValues::names`] lists
    /// the names for a template's iteration from this one walk.
    fn each_name(&self, mut f: impl FnMut(&str)) {
        let user = |k: &str| self.user.contains_key(k);
        let task = |k: &str, before: usize| self.task[..before].iter().any(|(t, _)| *t == k);
        let extra = |k: &str, before: usize| self.extra[..before].iter().any(|(e, _)| e == k);
        for name in BUILTIN_NAMES {
            f(name);
        }
        for name in self.user.keys() {
            if builtin_index(name).is_none() {
                f(name);
            }
        }
        for (i, (name, _)) in self.task.iter().enumerate() {
            if builtin_index(name).is_none() && !user(name) && !task(name, i) {
                f(name);
            }
        }
        for (i, (name, _)) in self.extra.iter().enumerate() {
            let earlier = builtin_index(name).is_some()
                || user(name)
                || task(name, self.task.len())
                || extra(name, i);
            if !earlier {
                f(name);
            }
        }
        for name in ["stakes", "thinking_method"] {
            let earlier = builtin_index(name).is_some()
                || user(name)
                || task(name, self.task.len())
                || extra(name, self.extra.len());
            if !earlier {
                f(name);
            }
        }
    }

    /// Every name once, in the order the context map lists them (first definition first).
    fn names(&self) -> Vec<Value> {
        let mut names = Vec::new();
        self.each_name(|name| names.push(Value::from(name)));
        names
    }
}

impl minijinja::value::Object for SheetValues {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.lookup(key.as_str()?).cloned()
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        self.lookup(key).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(self.names())
    }
}

/// The context of §5.2; without `with_user` the score's variables are left out (injection
/// paths).
///
/// The empty cross-sheet collections most sheets have are shared values instead of new ones
/// per sheet, and so is the workspace when the context does not override it.
fn sheet_vars(
    job: &JobConfig,
    sheet: &PlannedSheet,
    ctx: &RenderContext,
    score: &ScoreVars,
    with_user: bool,
) -> Value {
    static EMPTY_MAP: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| Value::from_iter(std::iter::empty::<(Value, Value)>()));
    static EMPTY_SEQ: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| Value::from(Vec::<Value>::new()));
    let seq = |items: &[String]| -> Value {
        if items.is_empty() {
            EMPTY_SEQ.clone()
        } else {
            Value::from(items.to_vec())
        }
    };
    /// A map of texts (previous outputs by sheet, previous files by path).
    fn text_map<'a, K: Into<Value>>(
        entries: impl ExactSizeIterator<Item = (K, &'a String)>,
    ) -> Value {
        if entries.len() == 0 {
            EMPTY_MAP.clone()
        } else {
            Value::from_iter(entries.map(|(k, v)| (k.into(), Value::from(v.as_str()))))
        }
    }
    let workspace = match ctx.workspace.as_ref().unwrap_or(&job.workspace) {
        // Byte for byte: `Path` equality ignores a doubled `/` that the text keeps.
        path if path.as_os_str() == score.workspace.0.as_os_str() => score.workspace.1.clone(),
        path => path_value(path),
    };
    let working_directory = match &ctx.working_directory {
        Some(path) => path_value(path),
        None => workspace.clone(),
    };
    let previous_outputs = text_map(ctx.previous_outputs.iter().map(|(k, v)| (*k, v)));
    let previous_files = text_map(ctx.previous_files.iter().map(|(k, v)| (k.as_str(), v)));
    let skipped_upstream = if ctx.skipped_upstream.is_empty() {
        EMPTY_SEQ.clone()
    } else {
        Value::from(ctx.skipped_upstream.clone())
    };
    let builtins = [
        Value::from(sheet.num),
        Value::from(score.total_sheets),
        Value::from(sheet.start_item),
        Value::from(sheet.end_item),
        workspace,
        working_directory,
        Value::from(sheet.movement),
        Value::from(sheet.movement),
        Value::from(sheet.voice),
        Value::from(sheet.voice),
        Value::from(sheet.voice_count),
        Value::from(sheet.voice_count),
        Value::from(score.total_stages),
        Value::from(score.total_stages),
        previous_outputs,
        previous_files,
        skipped_upstream,
        seq(&ctx.injected_context),
        seq(&ctx.injected_skills),
        seq(&ctx.injected_tools),
    ];
    let task = match crate::tasks::task_of(job, sheet.movement, sheet.voice) {
        Some(task) => crate::tasks::task_vars(job, task)
            .into_iter()
            .map(|(k, v)| match (k, &ctx.task_branch) {
                ("task_branch", Some(real)) => (k, Value::from(real.as_str())),
                _ => (k, Value::from(v)),
            })
            .collect(),
        None => Vec::new(),
    };
    Value::from_object(SheetValues {
        builtins,
        user: if with_user {
            Arc::clone(&score.variables)
        } else {
            Arc::default()
        },
        task,
        extra: ctx
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), to_value(v, true)))
            .collect(),
        stakes: score.stakes.clone(),
        thinking_method: score.thinking_method.clone(),
    })
}

/// Resolve prelude + cadenza injections for a sheet (§5.6): paths rendered leniently,
/// relative ones joined to `base`; missing or unreadable files are skipped, and each skip is
/// returned, said in words the conductor log can show (`sheet.prelude[0] (context): file not
/// found: …`).
pub fn resolve_injections(
    job: &JobConfig,
    sheet: &PlannedSheet,
    base: &Path,
    ctx: &mut RenderContext,
) -> Vec<String> {
    if has_injections(job, sheet) {
        resolve_injections_with(job, sheet, base, ctx, &ScoreVars::totals(job))
    } else {
        Vec::new()
    }
}

fn has_injections(job: &JobConfig, sheet: &PlannedSheet) -> bool {
    let cadenzas = job.sheet.cadenzas.get(&i64::from(sheet.num));
    !job.sheet.prelude.is_empty() || cadenzas.is_some_and(|c| !c.is_empty())
}

/// [`resolve_injections`] with the score-level values computed once by the caller.
pub fn resolve_injections_with(
    job: &JobConfig,
    sheet: &PlannedSheet,
    base: &Path,
    ctx: &mut RenderContext,
    score: &ScoreVars,
) -> Vec<String> {
    let mut skipped = Vec::new();
    // Most scores have neither: skip building a context per sheet.
    if !has_injections(job, sheet) {
        return skipped;
    }
    let lenient = RenderContext {
        workspace: ctx.workspace.clone(),
        ..RenderContext::default()
    };
    // Legacy/preview path: injection paths see the sheet context without user variables.
    let vars = sheet_vars(job, sheet, &lenient, score, false);
    let cadenza_field = format!("sheet.cadenzas.{}", sheet.num);
    let items = job
        .sheet
        .prelude
        .iter()
        .enumerate()
        .map(|(i, item)| ("sheet.prelude", i, item))
        .chain(
            job.sheet
                .cadenzas
                .get(&i64::from(sheet.num))
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, item)| (cadenza_field.as_str(), i, item)),
        );
    for (field, i, item) in items {
        let what = || {
            let category = match item.as_ {
                InjectionCategory::Context => "context",
                InjectionCategory::Skill => "skill",
                InjectionCategory::Tool => "tool",
            };
            format!("{field}[{i}] ({category})")
        };
        let Some(rendered) = score.render_path(&item.file, &vars) else {
            skipped.push(format!(
                "{}: its file path {:?} does not render: left out of sheet {}'s prompt",
                what(),
                item.file,
                sheet.num
            ));
            continue;
        };
        let path = PathBuf::from(&rendered);
        let path = if path.is_relative() {
            base.join(path)
        } else {
            path
        };
        // Only a regular file, opened without waiting: a FIFO swapped in after a look
        // would block the render.
        let content = match mozart_ipc::workspace_file::read_regular(&path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(content) => content,
                Err(e) => {
                    skipped.push(format!(
                        "{}: cannot read {}: {e}: left out of sheet {}'s prompt",
                        what(),
                        path.display(),
                        sheet.num
                    ));
                    continue;
                }
            },
            Err(e) if e.is_not_found() => {
                skipped.push(format!(
                    "{}: file not found: {}: left out of sheet {}'s prompt (a relative path is read from the score's directory)",
                    what(),
                    path.display(),
                    sheet.num
                ));
                continue;
            }
            Err(e) => {
                skipped.push(format!(
                    "{}: {e}: left out of sheet {}'s prompt",
                    what(),
                    sheet.num
                ));
                continue;
            }
        };
        match item.as_ {
            InjectionCategory::Context => ctx.injected_context.push(content),
            InjectionCategory::Skill => ctx.injected_skills.push(content),
            InjectionCategory::Tool => ctx.injected_tools.push(content),
        }
    }
    skipped
}

/// Template + injections, the preview part of §5.4 (blocks 1–3).
pub fn assemble_with_injections(rendered: String, ctx: &RenderContext) -> String {
    let mut parts = vec![rendered];
    if !ctx.injected_skills.is_empty() || !ctx.injected_tools.is_empty() {
        let mut block = Vec::new();
        if !ctx.injected_skills.is_empty() {
            block.push(format!(
                "## Injected Skills\n\n{}",
                ctx.injected_skills.join("\n\n")
            ));
        }
        if !ctx.injected_tools.is_empty() {
            block.push(format!(
                "## Injected Tools\n\n{}",
                ctx.injected_tools.join("\n\n")
            ));
        }
        parts.push(block.join("\n\n"));
    }
    if !ctx.injected_context.is_empty() {
        parts.push(format!(
            "## Injected Context\n\n{}",
            ctx.injected_context.join("\n\n")
        ));
    }
    parts.join("\n\n")
}

/// The full sheet prompt of §5.4 without runtime-only sections (specs, failure history and
/// learned patterns are passed in by the caller when it has them).
pub fn build_sheet_prompt(
    job: &JobConfig,
    sheet: &PlannedSheet,
    ctx: &RenderContext,
    rules: &[&ValidationRule],
    extra_sections: &[String],
) -> Result<String, ConfigError> {
    let renderer = PromptRenderer::new(job, ctx.template_dir.as_deref())?;
    build_sheet_prompt_with(&renderer, job, sheet, ctx, rules, extra_sections)
}

/// [`build_sheet_prompt`] with a template compiled once per job (the conductor renders
/// every sheet of a job with the same [`PromptRenderer`]).
pub fn build_sheet_prompt_with(
    renderer: &PromptRenderer,
    job: &JobConfig,
    sheet: &PlannedSheet,
    ctx: &RenderContext,
    rules: &[&ValidationRule],
    extra_sections: &[String],
) -> Result<String, ConfigError> {
    // The template and the requirements see the same context: build it once per prompt.
    let vars = (renderer.has_template || !rules.is_empty())
        .then(|| sheet_vars(job, sheet, ctx, &renderer.score, true));
    let rendered = match &vars {
        Some(vars) if renderer.has_template => renderer.render_vars(sheet, vars.clone())?,
        _ => default_prompt(job, sheet),
    };
    let mut prompt = assemble_with_injections(rendered, ctx);
    for section in extra_sections {
        prompt.push_str("\n\n");
        prompt.push_str(section);
    }
    if let Some(vars) = &vars {
        if let Some(req) = requirements_from_vars(sheet, rules, vars) {
            prompt.push_str("\n\n");
            prompt.push_str(&req);
        }
    }
    Ok(prompt)
}

/// "Success Requirements" block of §5.4 for the applicable rules.
pub fn requirements_section(
    job: &JobConfig,
    sheet: &PlannedSheet,
    ctx: &RenderContext,
    rules: &[&ValidationRule],
) -> Option<String> {
    requirements_section_with(job, sheet, ctx, rules, &ScoreVars::new(job))
}

/// [`requirements_section`] with the score-level values computed once by the caller.
pub fn requirements_section_with(
    job: &JobConfig,
    sheet: &PlannedSheet,
    ctx: &RenderContext,
    rules: &[&ValidationRule],
    score: &ScoreVars,
) -> Option<String> {
    if rules.is_empty() {
        return None;
    }
    requirements_from_vars(sheet, rules, &sheet_vars(job, sheet, ctx, score, true))
}

/// [`requirements_section`] with the sheet's context already built.
fn requirements_from_vars(
    sheet: &PlannedSheet,
    rules: &[&ValidationRule],
    vars: &Value,
) -> Option<String> {
    if rules.is_empty() {
        return None;
    }
    // `{name}` replaced key by key in context order, each replacement seeing the text the
    // earlier ones left (a value that holds `{other}` is expanded again by a later key).
    let expand = |text: &str| -> String {
        let mut out = text.to_string();
        if !out.contains('{') {
            return out;
        }
        let mut needle = String::new();
        // A sheet's context: its names walked in place (listing them as values for
        // `try_iter` cost more than the rest of the prompt's requirements together).
        if let Some(values) = vars.downcast_object_ref::<SheetValues>() {
            // The `{…}` the text holds, looked for once (and again after a replacement):
            // most names are in none of them.
            let mut present = braced(&out);
            values.each_name(|k| {
                if !present.iter().any(|p| *p == k) && !k.bytes().any(|b| b == b'{' || b == b'}') {
                    return;
                }
                needle.clear();
                needle.push('{');
                needle.push_str(k);
                needle.push('}');
                if out.contains(needle.as_str()) {
                    if let Some(v) = values.lookup(k) {
                        out = out.replace(needle.as_str(), &v.to_string());
                        present = braced(&out);
                    }
                }
            });
            return out;
        }
        if let Ok(iter) = vars.try_iter() {
            for key in iter {
                let Some(k) = key.as_str() else { continue };
                needle.clear();
                needle.push('{');
                needle.push_str(k);
                needle.push('}');
                if out.contains(needle.as_str()) {
                    if let Ok(v) = vars.get_item(&key) {
                        out = out.replace(needle.as_str(), &v.to_string());
                    }
                }
            }
        }
        out
    };
    let mut new_rules = Vec::new();
    let mut inherited = Vec::new();
    for rule in rules {
        if is_new_for(rule, sheet.num) {
            new_rules.push(*rule);
        } else {
            inherited.push(*rule);
        }
    }
    let mut lines = vec![
        "---".to_string(),
        "## Success Requirements (Validated Automatically)".to_string(),
        String::new(),
        "Your output will be checked against these requirements:".to_string(),
        String::new(),
    ];
    for (i, rule) in new_rules.iter().enumerate() {
        let n = i + 1;
        let desc = rule
            .description
            .clone()
            .unwrap_or_else(|| format!("Requirement {n}"));
        lines.push(format!("{n}. **{desc}**"));
        for detail in rule_details(rule, &expand) {
            lines.push(format!("   - {detail}"));
        }
    }
    if !inherited.is_empty() {
        let names: Vec<String> = inherited
            .iter()
            .map(|r| {
                // What the rule checks, as the sheet that introduced it was told (the name
                // alone said nothing of the file or text it wants).
                let name = r
                    .description
                    .clone()
                    .unwrap_or_else(|| r.kind.as_str().to_string());
                format!("{name} ({})", rule_details(r, &expand).join(", "))
            })
            .collect();
        lines.push(String::new());
        lines.push(format!(
            "**Also still required** ({} inherited): {}",
            inherited.len(),
            names.join("; ")
        ));
    }
    lines.push(String::new());
    lines.push("Ensure ALL requirements are met before completing this task.".to_string());
    Some(lines.join("\n"))
}

/// Every `{name}` in `text` as its `name`: the text from each `{` to the next `}` (a name
/// without braces is in `text` as `{name}` exactly when it is listed here).
fn braced(text: &str) -> Vec<String> {
    text.match_indices('{')
        .filter_map(|(i, _)| {
            let rest = &text[i + 1..];
            rest.find('}').map(|j| rest[..j].to_string())
        })
        .collect()
}

/// What a rule asks, in the prompt's words: `Create file: \`PATH\``, `File: …` and
/// `Must contain: …`, a command cut at 60 characters.
fn rule_details(rule: &ValidationRule, expand: &dyn Fn(&str) -> String) -> Vec<String> {
    let path = rule.path.as_deref().map(expand).unwrap_or_default();
    let pattern = || rule.pattern.as_deref().map(expand).unwrap_or_default();
    match rule.kind {
        ValidationType::FileExists => vec![format!("Create file: `{path}`")],
        ValidationType::FileModified => vec![format!("Modify file: `{path}`")],
        ValidationType::ContentContains => vec![
            format!("File: `{path}`"),
            format!("Must contain: `{}`", pattern()),
        ],
        ValidationType::ContentRegex => vec![
            format!("File: `{path}`"),
            format!("Must match pattern: `{}`", pattern()),
        ],
        ValidationType::CommandSucceeds => {
            let cmd = rule.command.clone().unwrap_or_default();
            let shown: String = cmd.chars().take(60).collect();
            let ellipsis = if cmd.chars().count() > 60 { "..." } else { "" };
            vec![format!("Command must succeed: `{shown}{ellipsis}`")]
        }
    }
}

/// New-vs-inherited classification of a rule for a sheet (§3.7.2, last paragraph).
fn is_new_for(rule: &ValidationRule, sheet: u32) -> bool {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^sheet_num\s*(>=|==|>)\s*(\d+)").expect("static regex")
    });
    let Some(cond) = rule.condition.as_deref() else {
        return sheet == 1;
    };
    match RE.captures(cond.trim()) {
        Some(c) => {
            let n: u32 = c[2].parse().unwrap_or(0);
            match &c[1] {
                ">=" => sheet == n,
                "==" => true,
                _ => sheet == n + 1,
            }
        }
        None => sheet == 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_score_str;
    use crate::plan::SheetPlan;

    fn job(text: &str) -> JobConfig {
        load_score_str(text, Path::new("t.yaml")).unwrap().config
    }

    #[test]
    fn renders_builtins_user_vars_and_python_methods() {
        let j = job("name: t\nworkspace: /tmp/ws\nsheet: {size: 2, total_items: 5}\nprompt:\n  template: \"{{ sheet_num }}/{{ total_sheets }} {{ start_item }}-{{ end_item }} {{ workspace }} {% for k, v in roles.items() %}{{ k }}={{ v }}{% endfor %} {{ roles[1] }}\"\n  variables:\n    roles: {'1': a, '2': b}\n");
        let plan = SheetPlan::build(&j).unwrap();
        let out = render_prompt(&j, &plan.sheets[2], &RenderContext::default()).unwrap();
        assert_eq!(out, "3/3 5-5 /tmp/ws 1=a2=b a");
    }

    #[test]
    fn strict_undefined_is_an_error() {
        let j =
            job("name: t\nsheet: {size: 1, total_items: 1}\nprompt: {template: 'x {{ nope }}'}\n");
        let plan = SheetPlan::build(&j).unwrap();
        let err = render_prompt(&j, &plan.sheets[0], &RenderContext::default()).unwrap_err();
        assert!(
            matches!(err, ConfigError::Template { sheet: 1, .. }),
            "{err}"
        );
    }

    /// The whole §5.4 prompt of a sheet, byte for byte (the context is built once per
    /// prompt and shared by the template and the requirements; this pins what both see).
    #[test]
    fn sheet_prompt_is_byte_identical() {
        let j = job(concat!(
            "name: t\nworkspace: /tmp/ws\n",
            "sheet: {size: 1, total_items: 3, fan_out: {2: 2}}\n",
            "prompt:\n",
            "  stakes: high\n",
            "  template: \"{{ sheet_num }}/{{ total_sheets }} s{{ stage }}/{{ total_stages }} ",
            "v{{ voice }}/{{ voice_count }} {{ workspace }} {{ who }} {{ instance }} ",
            "[{{ previous_outputs[1] | default('-') }}] {{ skipped_upstream | length }} ",
            "{{ injected_context | length }} {{ stakes }}|{{ thinking_method }}|",
            "{% for k, v in roles.items() %}{{ k }}={{ v }};{% endfor %}\"\n",
            "  variables: {who: '{sheet_num}x', instance: 9, roles: {'1': a, '2': b}}\n",
            "validations:\n",
            "  - {type: file_exists, path: '{workspace}/out-{sheet_num}.txt', description: out}\n",
            "  - {type: content_contains, path: '{workspace}/{who}.md', pattern: '{instance}'}\n",
            "  - {type: command_succeeds, command: 'test -f {workspace}/x', condition: 'sheet_num >= 2'}\n",
        ));
        let plan = SheetPlan::build(&j).unwrap();
        let renderer = PromptRenderer::new(&j, None).unwrap();
        let rules: Vec<&ValidationRule> = j.validations.iter().collect();
        let mut ctx = RenderContext::default();
        ctx.previous_outputs.insert(1, "one".into());
        ctx.skipped_upstream = vec![1];
        let sheet = &plan.sheets[1];
        let out =
            build_sheet_prompt_with(&renderer, &j, sheet, &ctx, &rules, &["## L".into()]).unwrap();
        assert_eq!(out, SHEET_PROMPT_GOLDEN, "{out}");
        assert_eq!(
            build_sheet_prompt(&j, sheet, &ctx, &rules, &["## L".into()]).unwrap(),
            out
        );
        let first =
            build_sheet_prompt_with(&renderer, &j, &plan.sheets[0], &ctx, &rules, &[]).unwrap();
        assert_eq!(first, SHEET_PROMPT_GOLDEN_FIRST, "{first}");
    }

    const SHEET_PROMPT_GOLDEN: &str = "2/4 s2/3 v1/2 /tmp/ws {sheet_num}x 9 [one] 1 0 high||1=a;2=b;\n\n## L\n\n---\n## Success Requirements (Validated Automatically)\n\nYour output will be checked against these requirements:\n\n1. **Requirement 1**\n   - Command must succeed: `test -f {workspace}/x`\n\n**Also still required** (2 inherited): out (Create file: `/tmp/ws/out-2.txt`); content_contains (File: `/tmp/ws/{sheet_num}x.md`, Must contain: `9`)\n\nEnsure ALL requirements are met before completing this task.";
    const SHEET_PROMPT_GOLDEN_FIRST: &str = "1/4 s1/3 v1/1 /tmp/ws {sheet_num}x 9 [one] 1 0 high||1=a;2=b;\n\n---\n## Success Requirements (Validated Automatically)\n\nYour output will be checked against these requirements:\n\n1. **out**\n   - Create file: `/tmp/ws/out-1.txt`\n2. **Requirement 2**\n   - File: `/tmp/ws/{sheet_num}x.md`\n   - Must contain: `9`\n\n**Also still required** (1 inherited): command_succeeds (Command must succeed: `test -f {workspace}/x`)\n\nEnsure ALL requirements are met before completing this task.";

    /// A name defined twice takes the later part's value (user variables over built-ins,
    /// extra values over user variables, `stakes` last) and keeps its first position: the
    /// requirements' `{name}` expansion goes through the names in that order.
    #[test]
    fn context_values_and_order_follow_the_last_definition() {
        let j = job(concat!(
            "name: t\nworkspace: /tmp/ws\nsheet: {size: 1, total_items: 2}\n",
            "prompt:\n  stakes: high\n",
            "  template: '{{ workspace }}|{{ sheet_num }}|{{ stakes }}|{{ who }}|{{ extra_only }}'\n",
            "  variables: {workspace: '{who}-ws', stakes: mine, who: '{sheet_num}'}\n",
            "validations:\n  - {type: file_exists, path: '{workspace}/{stakes}'}\n",
        ));
        let plan = SheetPlan::build(&j).unwrap();
        let mut ctx = RenderContext::default();
        ctx.extra.insert("who".into(), serde_json::json!("extra"));
        ctx.extra.insert("extra_only".into(), serde_json::json!(7));
        let sheet = &plan.sheets[0];
        let rules: Vec<&ValidationRule> = j.validations.iter().collect();
        let renderer = PromptRenderer::new(&j, None).unwrap();
        assert_eq!(
            renderer.render(&j, sheet, &ctx).unwrap(),
            "{who}-ws|1|high|extra|7"
        );
        // `workspace` expands first (its built-in position) and leaves `{who}`, which
        // `who` (a user variable, after `sheet_num`) then expands to its extra value.
        let req = requirements_section(&j, sheet, &ctx, &rules).unwrap();
        assert!(req.contains("`extra-ws/high`"), "{req}");
        let vars = template_vars(&j, sheet, &ctx);
        let names: Vec<String> = vars
            .try_iter()
            .unwrap()
            .map(|k| k.as_str().unwrap().to_string())
            .collect();
        assert_eq!(&names[..3], ["sheet_num", "total_sheets", "start_item"]);
        assert_eq!(names.iter().position(|n| n == "workspace"), Some(4));
        assert_eq!(
            &names[names.len() - 4..],
            ["stakes", "who", "extra_only", "thinking_method"]
        );
        assert_eq!(names.len(), 20 + 4);
        // The requirements walk the same names in the same order, without listing them.
        let values = vars.downcast_object_ref::<SheetValues>().unwrap();
        let mut walked = Vec::new();
        values.each_name(|n| walked.push(n.to_string()));
        assert_eq!(walked, names);
    }

    /// Injection paths are compiled once per text but rendered per sheet, and without the
    /// auto-escaping minijinja would pick from a name ending in `.html`.
    #[test]
    fn injection_paths_render_per_sheet_and_unescaped() {
        let dir = tempfile::tempdir().unwrap();
        for n in 1..=2 {
            std::fs::write(
                dir.path().join(format!("a&b-{n}.html")),
                format!("file {n}"),
            )
            .unwrap();
        }
        let j = job(concat!(
            "name: t\nworkspace: /tmp/ws\nsheet:\n  size: 1\n  total_items: 3\n",
            "  prelude: [{file: \"{{ 'a&b' }}-{{ sheet_num }}.html\", as: context}]\n",
            "prompt: {template: x}\n",
        ));
        let plan = SheetPlan::build(&j).unwrap();
        let score = ScoreVars::new(&j);
        let injected = |n: usize| {
            let mut ctx = RenderContext::default();
            resolve_injections_with(&j, &plan.sheets[n], dir.path(), &mut ctx, &score);
            ctx.injected_context
        };
        assert_eq!(injected(0), ["file 1"]);
        assert_eq!(injected(1), ["file 2"]);
        assert!(injected(2).is_empty());
    }

    /// A prelude file the instrument (or another user of the workspace) swaps for a FIFO
    /// after it was looked at: the render used to open the FIFO and wait for a writer for
    /// ever (the sheet never started). Now the swap leaves the file out, saying why.
    #[test]
    fn an_injection_file_swapped_for_a_fifo_never_blocks_the_render() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("notes.md");
        let (regular, fifo) = (dir.path().join("r"), dir.path().join("f"));
        let j = job(concat!(
            "name: t\nworkspace: /tmp/ws\nsheet:\n  size: 1\n  total_items: 1\n",
            "  prelude: [{file: notes.md, as: context}]\n",
            "prompt: {template: x}\n",
        ));
        let plan = SheetPlan::build(&j).unwrap();
        let score = ScoreVars::new(&j);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, file, regular, fifo) = (stop.clone(), file.clone(), regular, fifo);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::fs::write(&regular, "notes").unwrap();
                    std::fs::rename(&regular, &file).unwrap();
                    let _ =
                        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600));
                    std::fs::rename(&fifo, &file).unwrap();
                }
            })
        };
        let (done, finished) = std::sync::mpsc::channel();
        let base = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let mut refused = Vec::new();
            for _ in 0..20_000 {
                let mut ctx = RenderContext::default();
                refused.extend(resolve_injections_with(
                    &j,
                    &plan.sheets[0],
                    &base,
                    &mut ctx,
                    &score,
                ));
            }
            let _ = done.send(refused);
        });
        let refused = finished.recv_timeout(std::time::Duration::from_secs(120));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        let refused = refused.expect("the render waited on the FIFO swapped in");
        assert!(
            refused
                .iter()
                .any(|r| r.contains("is not a regular file (a FIFO)")),
            "{:?}",
            refused.first()
        );
    }

    #[test]
    fn default_prompt_with_stakes() {
        let j = job("name: t\nsheet: {size: 2, total_items: 3}\nprompt: {stakes: high}\n");
        let plan = SheetPlan::build(&j).unwrap();
        let out = render_prompt(&j, &plan.sheets[1], &RenderContext::default()).unwrap();
        assert_eq!(out, "Processing sheet 2 of 2 (items 3-3)\n\nhigh");
    }

    #[test]
    fn working_directory_is_the_instrument_s_directory_else_the_workspace() {
        let j = job(
            "name: t\nworkspace: /tmp/ws\nsheet: {size: 1, total_items: 1}\nprompt: {template: 'in {{ working_directory }}'}\n",
        );
        let plan = SheetPlan::build(&j).unwrap();
        let sheet = &plan.sheets[0];
        let out = render_prompt(&j, sheet, &RenderContext::default()).unwrap();
        assert_eq!(out, "in /tmp/ws");
        let ctx = RenderContext {
            working_directory: Some("/tmp/ws/.worktrees/t-sheet-1".into()),
            ..RenderContext::default()
        };
        let out = render_prompt(&j, sheet, &ctx).unwrap();
        assert_eq!(out, "in /tmp/ws/.worktrees/t-sheet-1");
    }
}
