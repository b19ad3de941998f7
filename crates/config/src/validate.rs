//! The extended checks of `mozart validate` (score.md §6.4) and its rendering preview (§6.5).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{LazyLock, OnceLock};

use regex::Regex;
use serde::Serialize;

use crate::model::JobConfig;
use crate::placeholders::PlaceholderVars;
use crate::plan::{fan_meta, item_range, total_sheets, total_stages, SheetPlan};
use crate::template::{self, PromptRenderer, RenderContext};
use crate::{FileAccess, Score};

mod files;
mod rules;
mod settings;

pub use settings::slurm_partitions;

/// Issue severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Must fix.
    Error,
    /// Should fix.
    Warning,
    /// Consider.
    Info,
}

/// One finding of an extended check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Issue {
    /// `V001` …
    pub check_id: &'static str,
    /// Severity.
    pub severity: Severity,
    /// Message.
    pub message: String,
    /// 1-based line in the raw YAML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// Column (never set by upstream checks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// Offending text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// How to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// Whether `mozart` could fix it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub auto_fixable: bool,
    /// Extra facts.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_meta")]
    pub metadata: Vec<(&'static str, String)>,
}

fn ser_meta<S: serde::Serializer>(m: &[(&'static str, String)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(m.len()))?;
    for (k, v) in m {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

impl Issue {
    fn new(check_id: &'static str, severity: Severity, message: String) -> Self {
        Issue {
            check_id,
            severity,
            message,
            line: None,
            column: None,
            context: None,
            suggestion: None,
            auto_fixable: false,
            metadata: Vec::new(),
        }
    }
    fn line(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }
    fn suggest(mut self, s: impl Into<String>) -> Self {
        self.suggestion = Some(s.into());
        self
    }
    fn context(mut self, c: impl Into<String>) -> Self {
        self.context = Some(c.into());
        self
    }
    fn meta(mut self, k: &'static str, v: impl Into<String>) -> Self {
        self.metadata.push((k, v.into()));
        self
    }
}

/// Names V101 accepts besides [`CORE_BUILTINS`]: template-only variables and Jinja globals.
/// (Upstream's V101 flags the injected and `skipped_upstream` values, which render at run
/// time; docs/differences.md.)
const V101_EXTRA_BUILTINS: [&str; 17] = [
    "working_directory",
    "stakes",
    "thinking_method",
    "previous_outputs",
    "previous_files",
    "skipped_upstream",
    "injected_context",
    "injected_skills",
    "injected_tools",
    "loop",
    "self",
    "range",
    "dict",
    "lipsum",
    "cycler",
    "joiner",
    "namespace",
];

/// Built-in names used by V202 / V208.
const CORE_BUILTINS: [&str; 14] = [
    "workspace",
    "sheet_num",
    "total_sheets",
    "start_item",
    "end_item",
    "instrument_name",
    "stage",
    "instance",
    "fan_count",
    "total_stages",
    "movement",
    "voice",
    "voice_count",
    "total_movements",
];

/// Native backends and built-in instrument profiles known to V210/V211.
pub const BUILTIN_INSTRUMENTS: [&str; 10] = [
    "claude_cli",
    "anthropic_api",
    "ollama",
    "recursive_light",
    "aider",
    "claude-code",
    "cline-cli",
    "codex-cli",
    "gemini-cli",
    "goose",
];

/// First 1-based line containing `marker` (upstream's heuristic).
pub fn find_line(raw: &str, marker: &str) -> Option<usize> {
    raw.split('\n')
        .position(|l| l.contains(marker))
        .map(|i| i + 1)
}

/// Join a path to the directory of the score file as given (not made absolute).
fn relative_to_score(path: &Path, score_path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        score_path.parent().unwrap_or(Path::new("")).join(path)
    }
}

/// Inputs of the checks that come from outside the score.
#[derive(Debug, Clone, Default)]
pub struct CheckEnv {
    /// Instrument profile names known to the registry (built-ins plus user profiles).
    pub known_instruments: BTreeSet<String>,
    /// Names whose profile file the conductor would not load, with why (the file and its
    /// fault): V210 names them with the reason, since the conductor refuses such a score.
    pub broken_profiles: std::collections::BTreeMap<String, String>,
    /// Names of built-in instruments a profile file would replace but does not load, with
    /// why and what to do: the conductor plays the built-in, so they are not unknown.
    pub shadowing_profiles: std::collections::BTreeMap<String, (String, String)>,
}

impl CheckEnv {
    /// Whether every instrument the score names is already known, so V210/V211 cannot fire
    /// whatever else is added: lets `mozart validate` skip loading the instrument registry.
    pub fn knows_all(&self, c: &JobConfig) -> bool {
        instrument_names(c)
            .all(|i| self.known_instruments.contains(i) || c.instruments.contains_key(i))
    }

    /// The built-in names plus profile file stems / `name:` values found in the given dirs.
    pub fn with_profile_dirs(dirs: &[PathBuf]) -> Self {
        let mut known: BTreeSet<String> =
            BUILTIN_INSTRUMENTS.iter().map(|s| s.to_string()).collect();
        for dir in dirs {
            // Another user's profiles are not loaded (`profile_trust`): their names are
            // not instruments there are.
            if crate::profile_trust::untrusted_profile_dir(dir).is_some() {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let is_yaml = matches!(
                    path.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml")
                );
                if !is_yaml {
                    continue;
                }
                let Ok(text) = crate::profile_trust::read_profile_file(&path) else {
                    continue;
                };
                if let Ok(Some(node)) = crate::yaml::parse(&text) {
                    if let Some(name) = node.get("name").and_then(|n| n.as_str()) {
                        known.insert(name.to_string());
                    }
                }
            }
        }
        CheckEnv {
            known_instruments: known,
            broken_profiles: Default::default(),
            shadowing_profiles: Default::default(),
        }
    }
}

/// Run every extended check in upstream's order, then sort stably by severity.
/// `score_path` is CONFIG_FILE as given on the command line.
pub fn run_checks(score: &Score, score_path: &Path, env: &CheckEnv) -> Vec<Issue> {
    run_checks_with(score, score_path, env, || ()).0
}

/// [`run_checks`], also running `also` on this thread while V011 renders the score's sheets
/// on another (`mozart validate` looks up the instruments' programs there).
///
/// V011's renders are most of the work on a large score (516 sheets for the corpus score):
/// they start on a second thread before any other check, and this thread takes its share
/// of them once the other checks and `also` are done, instead of every check waiting for
/// the renders or the renders for every check. The issues come out in the same order as one
/// pass in upstream's order finds them.
pub fn run_checks_with<T>(
    score: &Score,
    score_path: &Path,
    env: &CheckEnv,
    also: impl FnOnce() -> T,
) -> (Vec<Issue>, T) {
    let c = &score.config;
    let raw = score.text.as_str();
    let renders: OnceLock<Renders<'_>> = OnceLock::new();
    let prepare = || Renders::new(score, score_path);
    // Two workers when the machine has a second core and the score enough sheets to pay for
    // a thread; a worker that gets no core (a busy machine) leaves its share to the other.
    let two = total_sheets(&c.sheet) >= PARALLEL_RENDERS_FROM
        && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let mut templates: Vec<Issue> = Vec::new();
    let mut others: Vec<Issue> = Vec::new();
    let (rendered, extra) = std::thread::scope(|scope| {
        let other = two.then(|| scope.spawn(|| renders.get_or_init(prepare).sheets()));
        // The checks that do not compile the template first: the other worker compiles it
        // meanwhile, and V001/V101 below share that compile.
        other_checks(score, score_path, env, &mut others);
        let extra = also();
        check_templates(c, raw, score_path, score.file_access, &mut templates);
        let renders = renders.get_or_init(prepare);
        let mine = renders.sheets();
        // A panic in the other worker goes on as it would have in one pass.
        let theirs = other.map(|other| {
            other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        // Each worker stops once a lower sheet has failed, so the lower of the two failures
        // is the first failing sheet, as one pass in order finds it.
        let first = match (mine, theirs.flatten()) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        (first, extra)
    });
    let mut out = templates;
    out.append(&mut others);
    if let Some((first, error)) = rendered {
        report_render_error(first, &error, &mut out);
    }
    out.sort_by_key(|i| i.severity);
    (out, extra)
}

/// What every extended check reads.
struct Ctx<'a> {
    /// The validated configuration.
    c: &'a JobConfig,
    /// The score's raw text, for line numbers.
    raw: &'a str,
    /// The parsed score, for the line of a field ([`Ctx::line_of`]).
    doc: &'a crate::yaml::Node,
    /// CONFIG_FILE as given on the command line.
    score_path: &'a Path,
}

impl Ctx<'_> {
    /// The line of the field at a dotted path (`validations.0.path`), found in the parsed
    /// score: a search of the text for the value found its first occurrence anywhere.
    fn line_of(&self, path: &str) -> Option<usize> {
        crate::check::key_line(self.doc, path)
    }
}

/// One extended check.
type Check = fn(&Ctx<'_>, &mut Vec<Issue>);

/// The checks before the version and instrument checks, in upstream's order: the first,
/// then the file checks (which look at the filesystem, so a text-only score skips them),
/// then the rest.
const CHECKS_FIRST: &[Check] = &[settings::v010];

/// The checks that look at the paths a score names (upstream runs them after V010).
const FILE_CHECKS: &[Check] = &[
    files::v002,
    files::v003,
    files::v004,
    files::v005,
    files::v107,
    files::v108,
    settings::v012,
    files::v216,
    files::v218,
];

/// The checks after the file checks and before the version and instrument checks.
const CHECKS_BEFORE: &[Check] = &[rules::v007, rules::v008, settings::v103_v104, rules::v106];

/// The checks after the version and instrument checks, in upstream's order.
const CHECKS_AFTER: &[Check] = &[
    rules::v201,
    rules::v214,
    rules::v215,
    settings::v202,
    rules::v203,
    settings::v204,
    rules::v205,
    settings::v206_v207,
    settings::v208,
    settings::v209,
    settings::v212,
    settings::v217,
];

/// Every check after V001/V101, in upstream's order.
fn other_checks(score: &Score, score_path: &Path, env: &CheckEnv, out: &mut Vec<Issue>) {
    let x = Ctx {
        c: &score.config,
        raw: score.text.as_str(),
        doc: &score.document,
        score_path,
    };
    for check in CHECKS_FIRST {
        check(&x, out);
    }
    if score.file_access == FileAccess::Files {
        for check in FILE_CHECKS {
            check(&x, out);
        }
    }
    for check in CHECKS_BEFORE {
        check(&x, out);
    }
    check_version_refs(score, score_path, out);
    check_instruments(x.c, x.raw, env, out);
    for check in CHECKS_AFTER {
        check(&x, out);
    }
}

/// `{name}` occurrences of built-in names not adjacent to another brace (V202).
fn format_placeholders(tpl: &str) -> Vec<(usize, String)> {
    // What `\{(workspace|sheet_num|…)\}` finds, left to right without overlaps, found
    // without building that regex: a match is a `{`, one name and a `}`, and no name is
    // another followed by `}`, so at most one name fits at a `{`.
    let bytes = tpl.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = tpl[from..].find('{') {
        let start = from + at;
        from = start + 1;
        let rest = &tpl[from..];
        let Some(name) = CORE_BUILTINS.iter().find(|name| {
            rest.strip_prefix(**name)
                .is_some_and(|tail| tail.starts_with('}'))
        }) else {
            continue;
        };
        let end = from + name.len() + 1;
        from = end;
        let before = start > 0 && bytes[start - 1] == b'{';
        let after = bytes.get(end) == Some(&b'}');
        if !before && !after {
            out.push((start, name.to_string()));
        }
    }
    out
}

fn template_sources(
    c: &JobConfig,
    score_path: &Path,
    access: FileAccess,
) -> Vec<(String, Result<String, String>)> {
    let mut out = Vec::new();
    if let Some(t) = c.prompt.template.as_deref().filter(|t| !t.is_empty()) {
        out.push(("prompt.template".to_string(), Ok(t.to_string())));
    }
    let template_file = c
        .prompt
        .template_file
        .as_ref()
        .filter(|_| access == FileAccess::Files);
    if let Some(tf) = template_file {
        let p = relative_to_score(tf, score_path);
        if p.exists() {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push((
                format!("template_file ({name})"),
                std::fs::read_to_string(&p).map_err(|e| e.to_string()),
            ));
        }
    }
    out
}

/// V001 (syntax) and V101 (undefined variables) for each template source, compiling each
/// template once for both checks. After the severity sort the issues come out as if all
/// V001s were checked first, as upstream does.
fn check_templates(
    c: &JobConfig,
    raw: &str,
    score_path: &Path,
    access: FileAccess,
    out: &mut Vec<Issue>,
) {
    let env = template::environment(false);
    for (source, text) in template_sources(c, score_path, access) {
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                out.push(Issue::new(
                    "V001",
                    Severity::Error,
                    format!("Could not read template file: {e}"),
                ));
                continue;
            }
        };
        // Compiled as the renderer of V011 and of the preview will compile it (the same
        // text compiles alike in either environment), so the three share one compile.
        if let Some(names) = template::template_names(&text) {
            check_undefined_vars(c, &source, &text, names, out);
            continue;
        }
        if let Err(e) = env.template_from_str(&text) {
            out.push(jinja_syntax_issue(&source, &text, raw, &e));
        }
    }
}

/// V011 (ours, not upstream's): a prompt that compiles but cannot render for some sheet (an
/// undefined variable under strict rendering, a filter error, a loop too large). Upstream
/// passes such a score and every sheet then fails at run time (docs/differences.md). Skipped
/// when V001 already reports the template itself.
fn report_render_error(first: u32, error: &str, out: &mut Vec<Issue>) {
    if out.iter().any(|i| i.check_id == "V001") {
        return;
    }
    out.push(
        Issue::new(
            "V011",
            Severity::Error,
            format!("The prompt cannot be rendered for sheet {first}: {error}"),
        )
        .suggest(if error.starts_with("undefined variable") {
            "Define it in prompt.variables (or fix its name): a sheet that cannot render \
             fails with E301 when the score runs"
        } else {
            "Fix the template: a sheet that cannot render fails with E301 when the score runs"
        })
        .meta("sheet", first.to_string()),
    );
}

/// The first sheet whose prompt cannot render and the error, exactly as the full preview
/// would report them (its `render_error`), without building the preview: V011 renders every
/// sheet of the score (516 for the corpus score), and the preview's snippets, rule contexts
/// and injected files were most of that work. Injected files are read only when the template
/// names what they fill (`injected_context`, `injected_skills`, `injected_tools`): otherwise
/// they cannot change whether a sheet renders. The first failure is enough: a template that
/// runs out of steps takes a while to do so, and it would on every sheet.
#[cfg(test)]
fn first_render_error(score: &Score, score_path: &Path) -> Option<(u32, String)> {
    Renders::new(score, score_path).sheets()
}

/// V011's render pass over a score's sheets, shared by the workers.
enum Renders<'a> {
    /// Nothing to render, or the answer is known without rendering (a template that does not
    /// compile fails on the first sheet).
    Known(Option<(u32, String)>),
    /// Every sheet to render.
    Sheets(Box<RenderCheck<'a>>),
}

impl<'a> Renders<'a> {
    /// Compile the score's template and make what every sheet renders with.
    fn new(score: &'a Score, score_path: &Path) -> Self {
        let c = &score.config;
        let text_only = score.file_access == FileAccess::TextOnly;
        // A text-only score whose prompt is only in its template file has nothing to render.
        if text_only
            && c.prompt.template.as_deref().is_none_or(str::is_empty)
            && c.prompt.template_file.is_some()
        {
            return Renders::Known(None);
        }
        let total = total_sheets(&c.sheet);
        if total < 1 {
            return Renders::Known(None);
        }
        let score_dir = score_path.parent().unwrap_or(Path::new("")).to_path_buf();
        let renderer = match PromptRenderer::shared(c, Some(&score_dir)) {
            Ok(r) => r,
            // The preview's first sheet reports a template that does not compile.
            Err(e) => {
                let e = match e {
                    crate::ConfigError::Template { message, .. } => {
                        crate::ConfigError::Template { sheet: 1, message }
                    }
                    other => crate::ConfigError::Plan(other.to_string()),
                };
                return Renders::Known(Some((1, e.to_string())));
            }
        };
        Renders::Sheets(Box::new(RenderCheck {
            c,
            injections: !text_only && renderer.reads_injections(),
            score_vars: template::ScoreVars::new(c),
            ctx: RenderContext {
                template_dir: Some(score_dir.clone()),
                ..RenderContext::default()
            },
            score_dir,
            renderer,
            first_bad: AtomicI64::new(i64::MAX),
            next: AtomicI64::new(1),
            total,
        }))
    }

    /// Render the sheets no worker has taken yet (see [`RenderCheck::sheets`]).
    fn sheets(&self) -> Option<(u32, String)> {
        match self {
            Renders::Known(known) => known.clone(),
            Renders::Sheets(check) => check.sheets(),
        }
    }
}

/// How many sheets a score needs before V011 renders them on two threads.
const PARALLEL_RENDERS_FROM: i64 = 64;

/// What V011 renders each sheet with, shared by the workers.
struct RenderCheck<'a> {
    c: &'a JobConfig,
    renderer: PromptRenderer,
    injections: bool,
    score_vars: template::ScoreVars,
    ctx: RenderContext,
    score_dir: PathBuf,
    /// The lowest sheet found failing so far (`i64::MAX`: none).
    first_bad: AtomicI64,
    /// The next sheet no worker has taken yet.
    next: AtomicI64,
    /// The score's number of sheets.
    total: i64,
}

impl RenderCheck<'_> {
    /// Take and render the next sheet until one fails, none is left or a lower one has
    /// failed elsewhere; the failing sheet this worker found and its error.
    fn sheets(&self) -> Option<(u32, String)> {
        let c = self.c;
        loop {
            let num = self.next.fetch_add(1, Ordering::Relaxed);
            if num > self.total || num > self.first_bad.load(Ordering::Relaxed) {
                return None;
            }
            let sheet = preview_sheet(c, num);
            let stand_ins;
            let base = match cross_sheet_stand_ins(c, sheet.num, &self.ctx) {
                Some(ctx) => {
                    stand_ins = ctx;
                    &stand_ins
                }
                None => &self.ctx,
            };
            let rendered = if self.injections {
                let mut ctx = base.clone();
                template::resolve_injections_with(
                    c,
                    &sheet,
                    &self.score_dir,
                    &mut ctx,
                    &self.score_vars,
                );
                self.renderer.check_with(c, &sheet, &ctx, &self.score_vars)
            } else {
                self.renderer.check_with(c, &sheet, base, &self.score_vars)
            };
            if let Err(e) = rendered {
                self.first_bad.fetch_min(num, Ordering::Relaxed);
                return Some((sheet.num, e.to_string()));
            }
        }
    }
}

/// `ctx` with stand-ins for what earlier sheets print, for a score that captures it
/// (`cross_sheet.auto_capture_stdout`): at run time `previous_outputs` holds the output of
/// each sheet of the lookback window that printed any, which no check can know before the
/// score runs; a template reading `previous_outputs[1]` is not wrong for that. `None` when
/// the score captures nothing.
fn cross_sheet_stand_ins(c: &JobConfig, sheet: u32, ctx: &RenderContext) -> Option<RenderContext> {
    let cfg = c.cross_sheet.as_ref().filter(|x| x.auto_capture_stdout)?;
    let from = match u32::try_from(cfg.lookback_sheets) {
        Ok(lookback) if lookback > 0 => sheet.saturating_sub(lookback).max(1),
        _ => 1,
    };
    if from >= sheet {
        return None;
    }
    let mut ctx = ctx.clone();
    for prev in from..sheet {
        ctx.previous_outputs.insert(
            prev,
            format!("(the output of sheet {prev}, when the score runs)"),
        );
    }
    Some(ctx)
}

/// Sheet `num` as the preview plans it: its sheet context, no instrument resolution.
fn preview_sheet(c: &JobConfig, num: i64) -> crate::PlannedSheet {
    let (stage, instance, fan_count) = fan_meta(&c.sheet, num);
    let (start, end) = item_range(&c.sheet, num);
    crate::PlannedSheet {
        num: num as u32,
        movement: stage.max(0) as u32,
        voice: instance.max(0) as u32,
        voice_count: fan_count.max(0) as u32,
        start_item: start,
        end_item: end,
        dependencies: Vec::new(),
        instrument: String::new(),
        instrument_config: Default::default(),
        model: None,
        instrument_fallbacks: Vec::new(),
        skip_when: None,
        skip_when_command: None,
        timeout_seconds: c.backend.timeout_seconds,
        description: None,
        movement_name: None,
    }
}

fn jinja_syntax_issue(source: &str, text: &str, raw: &str, e: &minijinja::Error) -> Issue {
    let lineno = e.line().unwrap_or(1);
    let line = text.split('\n').nth(lineno - 1).unwrap_or("");
    let context = if line.chars().count() > 80 {
        format!("{}...", line.chars().take(77).collect::<String>())
    } else {
        line.to_string()
    };
    let yaml_line = if source == "prompt.template" {
        find_line(raw, "template:")
    } else {
        None
    };
    let detail = e
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| e.kind().to_string());
    Issue::new(
        "V001",
        Severity::Error,
        format!("Jinja syntax error in {source}: {detail}"),
    )
    .line(yaml_line)
    .context(context)
    .suggest("Check Jinja2 template syntax")
    .meta("template_line", lineno.to_string())
    .meta("source", source.to_string())
}

/// Names assigned anywhere by `{% set %}`, `{% for %}` or `{% macro %}` (upstream adds all
/// set/for targets to what `find_undeclared_variables` reports).
fn declared_names(text: &str) -> HashSet<String> {
    const SET_PATTERN: &str =
        r"\{%-?\s*(?:set|for|macro)\s+([\w\s,()]+?)(?:\s+in\s|\s*=|\s*%\}|\()";
    // Anchored: each is tried at one `{%` (see below). ASCII text takes [`declared_at`]
    // instead, which matches what this pattern matches there without building it (its
    // Unicode `\w` is thousands of states: compiling it cost as much as the search).
    static SET: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(&format!("^(?:{SET_PATTERN})")).expect("static regex"));
    let mut out = HashSet::new();
    // The pattern's matches are found one `{%` at a time instead of by one search over the
    // whole template (which cost as much as compiling it): after its opening `{%` a match
    // holds no `{` and no `%` but those of a closing `%}`, so the matches are exactly the
    // matches anchored at each `{%` that end by the first `%}` after it; and a `{%` not
    // followed by `-`, white space and a keyword cannot start one.
    let mut from = 0;
    while let Some(at) = text[from..].find("{%") {
        let start = from + at;
        from = start + 2;
        let after = text[from..].strip_prefix('-').unwrap_or(&text[from..]);
        let word = after.trim_start();
        if !["set", "for", "macro"].iter().any(|k| word.starts_with(k)) {
            continue;
        }
        let end = text[from..].find("%}").map_or(text.len(), |i| from + i + 2);
        let statement = &text[start..end];
        // Whether a match exists depends on the statement alone: an ASCII statement in a
        // template with other text that is not (an em dash in the prose) takes the fast
        // path too, and the Unicode pattern is built only for a statement that needs it.
        let names = if statement.is_ascii() {
            declared_at(statement)
        } else {
            SET.captures(statement)
                .and_then(|c| c.get(1))
                .map(|m| m.as_str())
        };
        let Some(names) = names else {
            continue;
        };
        for name in names.split([',', '(', ')']) {
            let n = name.trim();
            if !n.is_empty() {
                out.insert(n.to_string());
            }
        }
    }
    out
}

/// What `SET_PATTERN` (in [`declared_names`]) captures at the start of an ASCII statement
/// (`{% set … %}`), or `None` where it does not match or captures only white space (which
/// names nothing). In ASCII `\s` is `[\t\n\v\f\r ]` and `\w` is `[0-9A-Za-z_]`. The
/// capture is lazy: it ends at the first place where one of the endings matches (`\s+in\s`,
/// `\s*=`, `\s*%}` or `(`); when no place after the keyword's white space does, the regex
/// can only end the capture inside that white space, which names nothing.
fn declared_at(statement: &str) -> Option<&str> {
    fn space(b: u8) -> bool {
        matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ')
    }
    fn in_class(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_' || space(b) || matches!(b, b',' | b'(' | b')')
    }
    let b = statement.as_bytes();
    let skip_space = |mut i: usize| {
        while i < b.len() && space(b[i]) {
            i += 1;
        }
        i
    };
    let mut i = 2; // past `{%`
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = skip_space(i);
    let keyword = ["set", "for", "macro"]
        .into_iter()
        .find(|k| b[i..].starts_with(k.as_bytes()))?;
    i += keyword.len();
    let first = skip_space(i);
    if first == i {
        return None;
    }
    // The capture is `b[first..end]` for the first `end` after `first` at which an ending
    // matches, every byte before it in the class.
    let mut end = first;
    while end < b.len() && in_class(b[end]) {
        end += 1;
        let after = skip_space(end);
        let ends = (after > end
            && b[after..].starts_with(b"in")
            && b.get(after + 2).is_some_and(|&c| space(c)))
            || b.get(after) == Some(&b'=')
            || b[after..].starts_with(b"%}")
            || b.get(end) == Some(&b'(');
        if ends {
            return Some(&statement[first..end]);
        }
    }
    None
}

fn check_undefined_vars(
    c: &JobConfig,
    source: &str,
    text: &str,
    names: HashSet<String>,
    out: &mut Vec<Issue>,
) {
    let mut defined: HashSet<String> = CORE_BUILTINS
        .iter()
        .chain(&V101_EXTRA_BUILTINS)
        .map(|s| s.to_string())
        .collect();
    defined.extend(c.prompt.variables.keys().cloned());
    if c.tasks.is_some() {
        defined.extend(crate::tasks::TASK_VARS.iter().map(|s| s.to_string()));
    }
    let declared = declared_names(text);
    let mut undefined: Vec<String> = names
        .into_iter()
        .filter(|v| !defined.contains(v) && !declared.contains(v))
        .collect();
    undefined.sort();
    for var in undefined {
        let suggestion = match close_match(&var, &defined) {
            Some(m) => format!("Did you mean '{m}'?"),
            // Upstream prints "Available variables: []" here, which leads nowhere.
            None if c.prompt.variables.is_empty() => format!(
                "Define '{var}' in prompt.variables, or use a built-in such as sheet_num, \
                 total_sheets, start_item, end_item or workspace"
            ),
            None if c.prompt.variables.len() <= 5 => {
                let mut names: Vec<&String> = c.prompt.variables.keys().collect();
                names.sort();
                let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
                format!("Available variables: [{}]", quoted.join(", "))
            }
            None => format!("Define '{var}' in prompt.variables section"),
        };
        out.push(
            Issue::new(
                "V101",
                Severity::Warning,
                format!("Undefined variable '{var}' in {source}"),
            )
            .suggest(suggestion)
            .meta("variable", var.clone())
            .meta("source", source.to_string()),
        );
    }
}

/// Python `difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)`.
pub fn close_match(word: &str, candidates: &HashSet<String>) -> Option<String> {
    let mut best: Option<(f64, &String)> = None;
    let mut sorted: Vec<&String> = candidates.iter().collect();
    sorted.sort();
    for cand in sorted {
        let r = ratio(word, cand);
        if r >= 0.6 && best.is_none_or(|(b, _)| r > b) {
            best = Some((r, cand));
        }
    }
    best.map(|(_, c)| c.clone())
}

/// `SequenceMatcher.ratio()` approximated by longest-common-subsequence matching blocks.
fn ratio(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    fn matches(a: &[char], b: &[char]) -> usize {
        let mut best = (0, 0, 0);
        for i in 0..a.len() {
            for j in 0..b.len() {
                let mut k = 0;
                while i + k < a.len() && j + k < b.len() && a[i + k] == b[j + k] {
                    k += 1;
                }
                if k > best.2 {
                    best = (i, j, k);
                }
            }
        }
        if best.2 == 0 {
            return 0;
        }
        let (i, j, k) = best;
        k + matches(&a[..i], &b[..j]) + matches(&a[i + k..], &b[j + k..])
    }
    2.0 * matches(&a, &b) as f64 / (a.len() + b.len()) as f64
}

/// The `N` of a file named `…-vN.yaml` (upstream's `-v(\d+)\.yaml$`), when it is a number.
/// Digits other than ASCII ones match `\d` there but never parse, so they end it alike.
fn version_of(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".yaml")?;
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, number) = stem.split_at(stem.len() - digits);
    if digits == 0 || !head.ends_with("-v") {
        return None;
    }
    number.parse().ok()
}

fn check_version_refs(score: &Score, score_path: &Path, out: &mut Vec<Issue>) {
    let name = score_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(cur) = version_of(&name) else {
        return;
    };
    if cur < 2 {
        return;
    }
    let prev = cur - 1;
    let c = &score.config;
    if c.name.contains(&format!("-v{prev}")) {
        out.push(
            Issue::new(
                "V009",
                Severity::Error,
                format!(
                    "Job name '{}' references v{prev} but file is v{cur}",
                    c.name
                ),
            )
            .line(find_line(&score.text, "name:"))
            .suggest(format!("Update name to use v{cur}")),
        );
    }
    let ws = c.workspace.display().to_string();
    if ws.contains(&format!("-v{prev}")) || ws.contains(&format!("v{prev}/")) {
        out.push(
            Issue::new(
                "V009",
                Severity::Error,
                format!("Workspace path references v{prev} but file is v{cur}"),
            )
            .line(find_line(&score.text, "workspace:"))
            .context(ws)
            .suggest(format!("Update workspace to use v{cur}")),
        );
    }
    let markers = [
        format!("-v{prev}"),
        format!("v{prev}.0"),
        format!("v{prev}/"),
        format!("-v{prev}/"),
        format!("evolution-v{prev}"),
    ];
    let skip = [
        "VERSION PROGRESSION:",
        "→",
        "->",
        "EVOLUTION FROM",
        "evolved from",
        "LEARNINGS",
    ];
    for (i, line) in score.text.split('\n').enumerate() {
        if !markers.iter().any(|m| line.contains(m.as_str())) {
            continue;
        }
        if skip.iter().any(|s| line.contains(s))
            || line.contains(&format!("v{prev}→v{cur}"))
            || line.contains(&format!("v{prev}->v{cur}"))
            || (line.trim_start().starts_with('#') && line.contains(&format!("v{}", prev - 1)))
        {
            continue;
        }
        out.push(
            Issue::new(
                "V009",
                Severity::Warning,
                format!(
                    "Line {} references v{prev} - verify this is intentional",
                    i + 1
                ),
            )
            .line(Some(i + 1))
            .context(line.trim().chars().take(80).collect::<String>())
            .suggest(format!(
                "Update to v{cur} if this should reference the current version"
            )),
        );
    }
}

/// Every instrument name V210/V211 look up (keep in step with [`check_instruments`]).
fn instrument_names(c: &JobConfig) -> impl Iterator<Item = &str> {
    let movements = c.movements.values();
    c.instrument
        .as_deref()
        .into_iter()
        .chain(c.sheet.per_sheet_instruments.values().map(String::as_str))
        .chain(c.sheet.instrument_map.keys().map(String::as_str))
        .chain(movements.clone().filter_map(|m| m.instrument.as_deref()))
        .chain(c.instrument_fallbacks.iter().map(String::as_str))
        .chain(
            movements
                .flat_map(|m| m.instrument_fallbacks.iter())
                .map(String::as_str),
        )
        .chain(
            c.sheet
                .per_sheet_fallbacks
                .values()
                .flatten()
                .map(String::as_str),
        )
}

fn check_instruments(c: &JobConfig, raw: &str, env: &CheckEnv, out: &mut Vec<Issue>) {
    if env.known_instruments.is_empty() {
        return;
    }
    let mut valid: BTreeSet<String> = env.known_instruments.clone();
    for broken in env.broken_profiles.keys() {
        valid.remove(broken);
    }
    valid.extend(c.instruments.keys().cloned());
    let suggestion = format!(
        "Available instruments: {}. Run 'mozart instruments list' to see all instruments.",
        valid.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let candidates: HashSet<String> = valid.iter().cloned().collect();
    // A built-in whose replacing profile does not load: the built-in is what plays, said.
    for (name, (why, fix)) in &env.shadowing_profiles {
        if !instrument_names(c).any(|i| i == name) {
            continue;
        }
        let shown = mozart_yaml::control_escaped(name);
        out.push(
            Issue::new(
                "V210",
                Severity::Warning,
                format!("Instrument '{shown}' plays the built-in '{shown}': the profile that would replace it does not load: {why}"),
            )
            .line(find_line(raw, name))
            .suggest(fix.clone())
            .meta("instrument_name", name.as_str()),
        );
    }
    let mut issue = |id: &'static str, name: &str, location: String, line: Option<usize>| {
        // The name as the score wrote it, its control characters written out: shown, not
        // obeyed by the terminal.
        let shown = mozart_yaml::control_escaped(name);
        // A profile file that names it but does not load: the reason is what to fix.
        if let Some(why) = env.broken_profiles.get(name) {
            out.push(
                Issue::new(
                    id,
                    Severity::Warning,
                    format!("Unknown {location}: '{shown}': its profile does not load: {why}"),
                )
                .line(line)
                .suggest(format!(
                    "Fix the profile (the conductor refuses a score playing '{name}' until it loads); check it with: mozart instruments check {name}"
                ))
                .meta("instrument_name", name)
                .meta("location", location),
            );
            return;
        }
        // Ours: upstream lists every instrument; the likely one comes first.
        let suggestion = match close_match(name, &candidates) {
            Some(m) => format!("Did you mean '{m}'? {suggestion}"),
            None => suggestion.clone(),
        };
        out.push(
            Issue::new(
                id,
                Severity::Warning,
                format!("Unknown {location}: '{shown}' not found in instrument registry"),
            )
            .line(line)
            .suggest(suggestion)
            .meta("instrument_name", name)
            .meta("location", location),
        );
    };
    if let Some(i) = c.instrument.as_deref().filter(|i| !valid.contains(*i)) {
        issue(
            "V210",
            i,
            "score-level instrument".into(),
            find_line(raw, "instrument:"),
        );
    }
    for (n, i) in &c.sheet.per_sheet_instruments {
        if !valid.contains(i) {
            issue(
                "V210",
                i,
                format!("sheet {n} instrument"),
                find_line(raw, &format!("{n}:")),
            );
        }
    }
    for i in c.sheet.instrument_map.keys() {
        if !valid.contains(i) {
            issue(
                "V210",
                i,
                "instrument_map entry".into(),
                find_line(raw, &format!("{i}:")),
            );
        }
    }
    for (n, m) in &c.movements {
        if let Some(i) = m.instrument.as_deref().filter(|i| !valid.contains(*i)) {
            issue(
                "V210",
                i,
                format!("movement {n} instrument"),
                find_line(raw, &format!("{n}:")),
            );
        }
    }
    for i in &c.instrument_fallbacks {
        if !valid.contains(i) {
            issue(
                "V211",
                i,
                "score-level instrument_fallbacks".into(),
                find_line(raw, i),
            );
        }
    }
    for (n, m) in &c.movements {
        for i in &m.instrument_fallbacks {
            if !valid.contains(i) {
                issue(
                    "V211",
                    i,
                    format!("movement {n} instrument_fallbacks"),
                    find_line(raw, i),
                );
            }
        }
    }
    for (n, list) in &c.sheet.per_sheet_fallbacks {
        for i in list {
            if !valid.contains(i) {
                issue(
                    "V211",
                    i,
                    format!("sheet {n} per_sheet_fallbacks"),
                    find_line(raw, i),
                );
            }
        }
    }
}

/// One validation rule as shown in the preview.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreviewValidation<'a> {
    /// 0-based rule index.
    pub index: usize,
    /// Rule type.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Whether the condition applies to this sheet.
    pub applicable: bool,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<&'a str>,
    /// Path after preview expansion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expanded_path: Option<Cow<'a, str>>,
    /// Pattern.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<&'a str>,
    /// Condition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<&'a str>,
}

/// One sheet of the rendering preview; its rules come from [`Preview::validations`].
#[derive(Debug, Clone, Serialize)]
pub struct PreviewSheet {
    /// Sheet number.
    pub sheet_num: u32,
    /// `[start, end]`.
    pub item_range: [i64; 2],
    /// Stage (fan-out only).
    pub stage: Option<i64>,
    /// Instance (fan-out only).
    pub instance: Option<i64>,
    /// Fan count (fan-out only).
    pub fan_count: Option<i64>,
    /// First 15 lines of the prompt.
    pub prompt_snippet: String,
    /// Render failure.
    pub render_error: Option<String>,
    /// The sheet context the rules are expanded with.
    #[serde(skip)]
    context: SheetContext,
}

/// The integer sheet context of §5.2 that rule paths and conditions may use.
#[derive(Debug, Clone, Copy)]
struct SheetContext {
    sheet_num: i64,
    start_item: i64,
    end_item: i64,
    stage: i64,
    instance: i64,
    fan_count: i64,
}

impl SheetContext {
    /// The value of a per-sheet name; `None` for every other name.
    fn get(&self, name: &str) -> Option<i64> {
        Some(match name {
            "sheet_num" => self.sheet_num,
            "start_item" => self.start_item,
            "end_item" => self.end_item,
            "stage" => self.stage,
            "instance" => self.instance,
            "fan_count" => self.fan_count,
            // The new names of the same values, as the run knows them.
            "movement" => self.stage,
            "voice" => self.instance,
            "voice_count" => self.fan_count,
            _ => return None,
        })
    }
}

/// How a rule's path looks in the preview.
#[derive(Debug, Clone)]
enum RulePath<'a> {
    /// The rule has no path.
    None,
    /// The path uses no per-sheet placeholder: expanded once for every sheet.
    Fixed(String),
    /// The path uses a per-sheet placeholder: expanded per sheet.
    PerSheet(&'a str),
}

/// A validation rule prepared once for previewing every sheet (§6.5).
#[derive(Debug, Clone)]
struct PreviewRule<'a> {
    rule: &'a crate::ValidationRule,
    condition: Option<String>,
    parsed: Option<crate::expr::Condition>,
    path: RulePath<'a>,
}

/// The rendering preview (§6.5).
#[derive(Debug, Clone)]
pub struct Preview<'a> {
    /// Concrete sheets.
    pub total_sheets: i64,
    /// Fan-out used.
    pub has_fan_out: bool,
    /// Dependencies declared.
    pub has_dependencies: bool,
    /// `Sheet {n}: template render failed — {error}` lines.
    pub render_errors: Vec<String>,
    /// Previewed sheets.
    pub sheets: Vec<PreviewSheet>,
    rules: Vec<PreviewRule<'a>>,
    /// User variables, `workspace`, `total_sheets` and `total_stages` as placeholder values.
    fixed_vars: PlaceholderVars,
    total_stages: i64,
}

impl<'a> Preview<'a> {
    /// The score's rules as they apply to `sheet` (one entry per rule, in score order).
    pub fn validations<'p>(
        &'p self,
        sheet: &PreviewSheet,
    ) -> impl ExactSizeIterator<Item = PreviewValidation<'p>> + 'p {
        let ctx = sheet.context;
        let (total, stages) = (self.total_sheets, self.total_stages);
        let lookup = move |name: &str| {
            ctx.get(name).or(match name {
                "total_sheets" => Some(total),
                "total_stages" | "total_movements" => Some(stages),
                _ => None,
            })
        };
        self.rules.iter().enumerate().map(move |(index, r)| {
            let expanded_path = match &r.path {
                RulePath::None => None,
                RulePath::Fixed(p) => Some(Cow::Borrowed(p.as_str())),
                RulePath::PerSheet(p) => Some(Cow::Owned(self.expand_for(p, &ctx))),
            };
            PreviewValidation {
                index,
                kind: r.rule.kind.as_str(),
                applicable: r.parsed.as_ref().is_none_or(|c| c.applies_to(lookup)),
                description: r.rule.description.as_deref(),
                expanded_path,
                pattern: r.rule.pattern.as_deref(),
                condition: r.condition.as_deref(),
            }
        })
    }

    /// Expand a rule path for one sheet: the sheet's own values over the fixed ones.
    fn expand_for(&self, path: &str, ctx: &SheetContext) -> String {
        crate::placeholders::expand_with(path, |key| match ctx.get(key) {
            Some(v) => Some(Cow::Owned(v.to_string())),
            None => self.fixed_vars.get(key).map(|v| Cow::Borrowed(v.as_str())),
        })
    }
}

/// Build the preview for sheets `1..=limit` (all when `None`); `score_path` as given.
pub fn preview<'a>(score: &'a Score, score_path: &Path, limit: Option<i64>) -> Preview<'a> {
    preview_until(score, score_path, limit, false)
}

/// [`preview`], stopping after the first sheet that cannot render when `stop_at_error`.
fn preview_until<'a>(
    score: &'a Score,
    score_path: &Path,
    limit: Option<i64>,
    stop_at_error: bool,
) -> Preview<'a> {
    let c = &score.config;
    let total = total_sheets(&c.sheet);
    let stages = total_stages(&c.sheet);
    let has_fan_out = c.sheet.fan_out_stage_map.is_some();
    let prompts = SheetPrompts::new(score, score_path);
    let mut render_errors = Vec::new();
    let mut sheets = Vec::new();
    let upto = limit.map_or(total, |l| l.min(total));
    let fixed_vars = fixed_vars(c, total, stages);
    let rules = preview_rules(c, &fixed_vars);
    for num in 1..=upto {
        let sheet = preview_sheet(c, num);
        let (snippet, error) = match prompts.snippet(&sheet) {
            Ok(snippet) => (snippet, None),
            Err(msg) => {
                render_errors.push(format!(
                    "Sheet {num}: template render failed \u{2014} {msg}"
                ));
                (String::new(), Some(msg))
            }
        };
        sheets.push(PreviewSheet {
            sheet_num: num as u32,
            item_range: [sheet.start_item, sheet.end_item],
            stage: has_fan_out.then_some(i64::from(sheet.movement)),
            instance: has_fan_out.then_some(i64::from(sheet.voice)),
            fan_count: has_fan_out.then_some(i64::from(sheet.voice_count)),
            prompt_snippet: snippet,
            render_error: error,
            context: SheetContext {
                sheet_num: num,
                start_item: sheet.start_item,
                end_item: sheet.end_item,
                stage: i64::from(sheet.movement),
                instance: i64::from(sheet.voice),
                fan_count: i64::from(sheet.voice_count),
            },
        });
        if stop_at_error && !render_errors.is_empty() {
            break;
        }
    }
    Preview {
        total_sheets: total,
        has_fan_out,
        has_dependencies: !c.sheet.dependencies.is_empty(),
        render_errors,
        sheets,
        rules,
        fixed_vars,
        total_stages: stages,
    }
}

/// Placeholder values in §5.8.1 order: user variables, then the built-ins over them.
fn fixed_vars(c: &JobConfig, total: i64, stages: i64) -> PlaceholderVars {
    let mut fixed_vars = PlaceholderVars::new();
    for (k, v) in &c.prompt.variables {
        fixed_vars.insert(k.clone(), crate::placeholders::python_str_of(v));
    }
    fixed_vars.insert("workspace".into(), c.workspace.display().to_string());
    fixed_vars.insert("total_sheets".into(), total.to_string());
    fixed_vars.insert("total_stages".into(), stages.to_string());
    fixed_vars.insert("total_movements".into(), stages.to_string());
    fixed_vars
}

/// Each rule's condition parsed, and a path without per-sheet placeholders expanded, once
/// rather than once per sheet: the 516-sheet corpus score has 923 rules.
fn preview_rules<'a>(c: &'a JobConfig, fixed_vars: &PlaceholderVars) -> Vec<PreviewRule<'a>> {
    c.validations
        .iter()
        .map(|v| {
            let condition = v
                .condition
                .clone()
                .or_else(|| v.sheet.map(|s| format!("sheet_num == {s}")));
            let parsed = condition.as_deref().map(crate::expr::Condition::parse);
            let path = match v.path.as_deref() {
                None => RulePath::None,
                Some(p) => {
                    let mut per_sheet = false;
                    let fixed = crate::placeholders::expand_with(p, |key| {
                        if PER_SHEET_NAMES.contains(&key) {
                            per_sheet = true;
                            return None;
                        }
                        fixed_vars.get(key).map(|v| Cow::Borrowed(v.as_str()))
                    });
                    if per_sheet {
                        RulePath::PerSheet(p)
                    } else {
                        RulePath::Fixed(fixed)
                    }
                }
            };
            PreviewRule {
                rule: v,
                condition,
                parsed,
                path,
            }
        })
        .collect()
}

/// What renders the preview's prompt snippets: the score's renderer (none for a text-only
/// score whose prompt is only in its template file) and its variables, built once.
struct SheetPrompts<'a> {
    config: &'a JobConfig,
    score_dir: PathBuf,
    text_only: bool,
    renderer: Option<Result<PromptRenderer, crate::ConfigError>>,
    score_vars: template::ScoreVars,
}

impl<'a> SheetPrompts<'a> {
    fn new(score: &'a Score, score_path: &Path) -> Self {
        let c = &score.config;
        let score_dir = score_path.parent().unwrap_or(Path::new("")).to_path_buf();
        let text_only = score.file_access == FileAccess::TextOnly;
        // A text-only score whose prompt is only in its template file has no prompt to show.
        let unread_template = text_only
            && c.prompt.template.as_deref().is_none_or(str::is_empty)
            && c.prompt.template_file.is_some();
        let renderer = (!unread_template).then(|| PromptRenderer::shared(c, Some(&score_dir)));
        SheetPrompts {
            config: c,
            score_dir,
            text_only,
            renderer,
            score_vars: template::ScoreVars::new(c),
        }
    }

    /// The snippet of `sheet`'s prompt, or why it cannot render.
    fn snippet(&self, sheet: &crate::PlannedSheet) -> Result<String, String> {
        let c = self.config;
        let mut ctx = RenderContext {
            template_dir: Some(self.score_dir.clone()),
            ..RenderContext::default()
        };
        if let Some(stand_ins) = cross_sheet_stand_ins(c, sheet.num, &ctx) {
            ctx = stand_ins;
        }
        if !self.text_only {
            template::resolve_injections_with(
                c,
                sheet,
                &self.score_dir,
                &mut ctx,
                &self.score_vars,
            );
        }
        let rendered = match &self.renderer {
            None => Ok(UNREAD_TEMPLATE.to_string()),
            Some(Ok(r)) => r.render_with(c, sheet, &ctx, &self.score_vars),
            Some(Err(e)) => Err(match e {
                crate::ConfigError::Template { message, .. } => crate::ConfigError::Template {
                    sheet: sheet.num,
                    message: message.clone(),
                },
                other => crate::ConfigError::Plan(other.to_string()),
            }),
        };
        rendered
            .map(|text| snippet_of(&template::assemble_with_injections(text, &ctx)))
            .map_err(|e| e.to_string())
    }
}

/// The preview's prompt of a text-only score whose prompt is only in its template file.
pub const UNREAD_TEMPLATE: &str =
    "(prompt.template_file not read: this preview uses only the score's own text)";

/// The names whose placeholder value differs from sheet to sheet.
const PER_SHEET_NAMES: [&str; 9] = [
    "sheet_num",
    "start_item",
    "end_item",
    "stage",
    "instance",
    "fan_count",
    "movement",
    "voice",
    "voice_count",
];

/// The first 15 lines of a prompt, then `...` when there are more (§6.5).
fn snippet_of(prompt: &str) -> String {
    let mut lines = prompt.split('\n');
    let mut snippet = String::new();
    for (i, line) in lines.by_ref().take(15).enumerate() {
        if i > 0 {
            snippet.push('\n');
        }
        snippet.push_str(line);
    }
    if lines.next().is_some() {
        snippet.push_str("\n...");
    }
    snippet
}

/// DAG levels for the summary (§6.2): peel sheets whose in-range prerequisites are done;
/// sheets on a cycle are never listed. Each level is found from the sheets the previous one
/// released (Kahn's algorithm), so a 516-sheet chain is linear rather than quadratic.
pub fn dag_levels(c: &JobConfig) -> Vec<Vec<i64>> {
    let n = total_sheets(&c.sheet).max(0);
    let Ok(size) = usize::try_from(n) else {
        return Vec::new();
    };
    let idx = |s: i64| usize::try_from(s - 1).unwrap_or(usize::MAX);
    // Prerequisites still pending per sheet (duplicates count, and are released, twice).
    let mut pending = vec![0usize; size];
    let mut dependents: Vec<Vec<i64>> = vec![Vec::new(); size];
    for s in 1..=n {
        if let Some(deps) = c.sheet.dependencies.get(&s) {
            for d in deps.iter().filter(|d| (1..=n).contains(*d)) {
                pending[idx(s)] += 1;
                dependents[idx(*d)].push(s);
            }
        }
    }
    let mut level: Vec<i64> = (1..=n).filter(|s| pending[idx(*s)] == 0).collect();
    let mut levels = Vec::new();
    while !level.is_empty() {
        let mut next = Vec::new();
        for s in &level {
            for t in &dependents[idx(*s)] {
                pending[idx(*t)] -= 1;
                if pending[idx(*t)] == 0 {
                    next.push(*t);
                }
            }
        }
        next.sort_unstable();
        levels.push(std::mem::replace(&mut level, next));
    }
    levels
}

/// Build the plan used by the summary, for callers that want it.
pub fn plan(c: &JobConfig) -> Result<SheetPlan, crate::ConfigError> {
    SheetPlan::build(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed-seed xorshift sampler: `next(n)` picks an index below `n`, the same sequence
    /// on every run.
    fn sampler() -> impl FnMut(usize) -> usize {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        }
    }

    #[test]
    fn declared_names_same_on_ascii_and_unicode_text() {
        let ascii = "{% set a = 1 %}{%- for x, y in z %}{% macro m(p, q) %}{%set\tb=2%}";
        let names = declared_names(ascii);
        let expected: HashSet<String> = ["a", "x", "y", "m", "b"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(names, expected);
        // The same text with a non-ASCII character elsewhere takes the Unicode pattern.
        let unicode = format!("{ascii} \u{e9}{{% set \u{e9}t\u{e9} = 1 %}}");
        let mut with_unicode = expected.clone();
        with_unicode.insert("\u{e9}t\u{e9}".into());
        assert_eq!(declared_names(&unicode), with_unicode);
    }

    /// V202's scan finds what upstream's `\{(workspace|sheet_num|…)\}` finds, left to right.
    #[test]
    fn format_placeholders_agree_with_the_pattern() {
        let re = Regex::new(&format!(r"\{{({})\}}", CORE_BUILTINS.join("|"))).unwrap();
        let by_regex = |tpl: &str| -> Vec<(usize, String)> {
            let bytes = tpl.as_bytes();
            re.captures_iter(tpl)
                .filter_map(|c| {
                    let m = c.get(0)?;
                    let before = m.start() > 0 && bytes[m.start() - 1] == b'{';
                    let after = bytes.get(m.end()) == Some(&b'}');
                    (!before && !after).then(|| (m.start(), c[1].to_string()))
                })
                .collect()
        };
        let pieces = [
            "{",
            "}",
            "{{",
            "}}",
            "workspace",
            "voice",
            "voice_count",
            "stage",
            "sheet_num",
            "x",
            " ",
            "\u{e9}",
            "stages",
            "{stage}",
            "{voice_count",
            "{voice}",
        ];
        let mut next = sampler();
        let mut found = 0;
        for _ in 0..20_000 {
            let tpl: String = (0..next(10)).map(|_| pieces[next(pieces.len())]).collect();
            let want = by_regex(&tpl);
            found += want.len();
            assert_eq!(format_placeholders(&tpl), want, "{tpl:?}");
        }
        assert!(found > 500, "only {found} placeholders among the samples");
    }

    /// `-vN.yaml` names as upstream's `-v(\d+)\.yaml$` reads them.
    #[test]
    fn version_of_reads_names_as_the_pattern() {
        let re = Regex::new(r"-v(\d+)\.yaml$").unwrap();
        for name in [
            "a-v2.yaml",
            "a-v12.yaml",
            "a-v.yaml",
            "av2.yaml",
            "a-v2.yml",
            "a-v2.yaml.bak",
            "-v0.yaml",
            "x-v1-v3.yaml",
            "a-v\u{663}.yaml",
            "a-v1\u{663}.yaml",
            "a-v\u{663}1.yaml",
            "a-v99999999999999999999.yaml",
            "a-v+1.yaml",
            "v2.yaml",
            "-v2.yaml",
        ] {
            let want = re.captures(name).and_then(|c| c[1].parse::<i64>().ok());
            assert_eq!(version_of(name), want, "{name}");
        }
    }

    /// Trying the pattern at each `{%` finds the names one search over the whole text finds,
    /// on texts where a statement is unclosed, nested in another's text, spaced oddly or
    /// not ASCII.
    #[test]
    fn declared_names_agree_with_one_search_over_the_text() {
        const SET_PATTERN: &str =
            r"\{%-?\s*(?:set|for|macro)\s+([\w\s,()]+?)(?:\s+in\s|\s*=|\s*%\}|\()";
        let re = Regex::new(SET_PATTERN).unwrap();
        let one_search = |text: &str| -> HashSet<String> {
            let mut out = HashSet::new();
            for c in re.captures_iter(text) {
                for name in c[1].split([',', '(', ')']) {
                    let n = name.trim();
                    if !n.is_empty() {
                        out.insert(n.to_string());
                    }
                }
            }
            out
        };
        let texts = [
            "{% set a = 1 %}{%- for x, y in z %}{% macro m(p, q) %}{%set\tb=2%}",
            "{% {% set inner = 1 %} {% if x %}{% set  = 3 %}{% set   spaced   = 4 %}",
            "{% for i in range(3) %}{{ i }}{% endfor %}{% set last",
            "{%- set a, b = 1, 2 -%}{% set c %}block{% endset %}{%set d=1%}{% setx = 2 %}",
            "text {% macro  twice ( v ) %}{{ v }}{% endmacro %} {% for k in d %}",
            "{% set \u{e9}t\u{e9} = 1 %}{%\u{a0}set nb = 2 %}{% for \u{3b1} in l %}",
            "{% set a % b %}{% set x (y) %}{% for %}{%-%}{% set\n multi\n = 1 %}",
        ];
        for text in texts {
            assert_eq!(declared_names(text), one_search(text), "{text:?}");
        }
        // ASCII texts take the hand-written matcher: every statement made of these pieces
        // (each piece one the pattern treats specially) agrees with the regex.
        let pieces = [
            "{%", "%}", "-", " ", "\t", "\n", "\x0b", "set", "for", "macro", "in", "=", "(", ")",
            ",", "a", "b1", "_", "%", "}", "{", "x.y", "+", "'",
        ];
        let mut next = sampler();
        for _ in 0..20_000 {
            let mut text = String::from(["{%", "{%-", "{% ", "x{%"][next(4)]);
            text.push_str(["set", "for", "macro", " set", "\tfor"][next(5)]);
            for _ in 0..next(12) {
                text.push_str(pieces[next(pieces.len())]);
            }
            assert_eq!(declared_names(&text), one_search(&text), "{text:?}");
        }
    }

    /// On a score large enough for two render workers, V011 still names the first failing
    /// sheet, whichever worker's share it is in, and agrees with the full preview.
    #[test]
    fn render_check_on_two_workers_names_the_first_failing_sheet() {
        let cases = [
            // Only odd sheets fail, from 101 on; an even one (the second worker's) later.
            ("{% if sheet_num >= 101 and sheet_num % 2 == 1 or sheet_num == 150 %}{{ a.b }}{% endif %}", Some(101)),
            // The first failure is in the second worker's share.
            ("{% if sheet_num in [100, 103, 180] %}{{ nope }}{% endif %}", Some(100)),
            ("{% if sheet_num == 200 %}{{ last.x }}{% endif %}", Some(200)),
            ("{{ sheet_num }}", None),
        ];
        for (template, first) in cases {
            let text = format!(
                "name: t\nworkspace: ws\nsheet:\n  size: 1\n  total_items: 200\nprompt:\n  template: '{template}'\n"
            );
            let path = Path::new("score.yaml");
            let score = crate::load_score_str(&text, path).unwrap();
            let preview = preview(&score, path, None);
            let expected = preview
                .sheets
                .iter()
                .find_map(|s| s.render_error.clone().map(|e| (s.sheet_num, e)));
            assert_eq!(expected.as_ref().map(|(n, _)| *n), first, "{template}");
            assert_eq!(first_render_error(&score, path), expected, "{template}");
            // And as `validate` runs it: the other worker starts before the other checks.
            let v011: Vec<String> = run_checks(&score, path, &CheckEnv::default())
                .into_iter()
                .filter(|i| i.check_id == "V011")
                .map(|i| i.message)
                .collect();
            let want: Vec<String> = expected
                .iter()
                .map(|(n, e)| format!("The prompt cannot be rendered for sheet {n}: {e}"))
                .collect();
            assert_eq!(v011, want, "{template}");
        }
    }

    /// V011's own render pass names the same first failing sheet and error as the full
    /// preview, whether or not the template reads what injected files fill.
    #[test]
    fn render_check_agrees_with_the_preview() {
        let dir = tempfile::tempdir().unwrap();
        // Sheet 2's cadenza exists, sheet 1's and 3's do not.
        std::fs::write(dir.path().join("ctx-2.md"), "two").unwrap();
        let cadenzas = "  cadenzas:\n    1: [{file: ctx-1.md, as: context}]\n    2: [{file: ctx-2.md, as: context}]\n    3: [{file: ctx-3.md, as: context}]\n";
        let cases = [
            // Reads the injected text: sheet 1 has none, so it fails first.
            ("{{ injected_context[0] }}", Some(1)),
            // Fails only where the injected text is there.
            ("{% if injected_context %}{{ missing }}{% endif %}", Some(2)),
            // Names no injected value: fails on sheet 3 by its own number.
            ("{% if sheet_num == 3 %}{{ nope.x }}{% endif %}", Some(3)),
            ("{{ sheet_num }} fine", None),
        ];
        for (template, first) in cases {
            let text = format!(
                "name: t\nworkspace: ws\nsheet:\n  size: 1\n  total_items: 3\n{cadenzas}prompt:\n  template: '{template}'\n"
            );
            let path = dir.path().join("score.yaml");
            let score = crate::load_score_str(&text, &path).unwrap();
            let preview = preview(&score, &path, None);
            let expected = preview
                .sheets
                .iter()
                .find_map(|s| s.render_error.clone().map(|e| (s.sheet_num, e)));
            assert_eq!(expected.as_ref().map(|(n, _)| *n), first, "{template}");
            assert_eq!(first_render_error(&score, &path), expected, "{template}");
        }
    }

    #[test]
    fn dag_levels_peel_in_order() {
        let score = crate::load_score_str(
            "name: t\nsheet:\n  size: 1\n  total_items: 6\n  dependencies:\n    2: [1]\n    3: [1, 1]\n    4: [3, 2]\n    6: [4, 2]\nprompt: {template: x}\n",
            Path::new("t.yaml"),
        )
        .unwrap();
        assert_eq!(
            dag_levels(&score.config),
            vec![vec![1, 5], vec![2, 3], vec![4], vec![6]]
        );
    }

    #[test]
    fn a_text_only_score_reads_and_checks_nothing_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret.md");
        std::fs::write(&secret, "## Tasks\n- SECRET-LINE-1 {{ sheet_num }}\n").unwrap();
        let s = secret.display();
        let text = format!(
            "name: t\nworkspace: {d}/missing/ws\nsheet:\n  size: 1\n  total_items: 2\n  prelude:\n    - file: {s}\n      as: context\nprompt:\n  template_file: {s}\ntasks: {{file: {s}, movement: 1}}\nvalidations:\n  - type: content_contains\n    path: {s}-gone\n    pattern: x\n",
            d = dir.path().display()
        );
        let path = Path::new("pasted.yaml");
        // What the same text does with file access: it reads the secret (the test's premise).
        let files = crate::load_score_str(&text, path).unwrap();
        let shown = preview(&files, path, None);
        assert!(shown
            .sheets
            .iter()
            .any(|p| p.prompt_snippet.contains("SECRET-LINE")));

        let score = crate::load_score_text_only(&text, path).unwrap();
        assert_eq!(score.file_access, FileAccess::TextOnly);
        let issues = run_checks(&score, path, &CheckEnv::default());
        let all = format!("{issues:?}");
        assert!(!all.contains("SECRET-LINE"), "{all}");
        for id in ["V002", "V003", "V107", "V108"] {
            assert!(!issues.iter().any(|i| i.check_id == id), "{id}: {all}");
        }
        let shown = preview(&score, path, None);
        assert_eq!(
            shown.sheets.len(),
            2,
            "the task list is not read: one voice"
        );
        for sheet in &shown.sheets {
            assert_eq!(sheet.prompt_snippet, UNREAD_TEMPLATE);
        }
        let notes = score.not_read.join("\n");
        assert!(notes.contains("prompt.template_file"), "{notes}");
        assert!(notes.contains("sheet.prelude file"), "{notes}");
        assert!(notes.contains("tasks.file"), "{notes}");
        assert!(notes.contains("V002"), "{notes}");
        assert!(!notes.contains("SECRET-LINE"), "{notes}");
    }

    /// V214: an unknown single-brace placeholder in a validation path or command is named
    /// with its rule, field and closest known name; known names, `${VAR}` and `{{ x }}` are not.
    #[test]
    fn v214_names_unknown_placeholders_in_validations() {
        let text = "name: t\nsheet: {size: 1, total_items: 2}\nprompt:\n  template: hi\n  \
                    variables: {lang: en}\nvalidations:\n  - type: file_exists\n    \
                    path: \"{workspace}/{sheetnum}.txt\"\n  - type: command_succeeds\n    \
                    command: \"test -f ${HOME}/{lang}/{{ workspace }} && echo {totl_sheets}\"\n";
        let path = Path::new("t.yaml");
        let score = crate::load_score_text_only(text, path).unwrap();
        let issues: Vec<Issue> = run_checks(&score, path, &CheckEnv::default())
            .into_iter()
            .filter(|i| i.check_id == "V214")
            .collect();
        assert_eq!(issues.len(), 2, "{issues:?}");
        assert_eq!(issues[0].severity, Severity::Warning);
        assert_eq!(
            issues[0].message,
            "Validation rule 1 path uses unknown placeholder '{sheetnum}': it stays as written \
             at run time"
        );
        assert_eq!(issues[0].line, Some(8));
        let hint = issues[0].suggestion.as_deref().unwrap_or("");
        assert!(
            hint.starts_with("Did you mean {sheet_num}? Known placeholders: "),
            "{hint}"
        );
        assert!(hint.contains("lang, movement"), "{hint}");
        assert!(issues[0].metadata.contains(&("field", "path".into())));
        assert_eq!(
            issues[1].message,
            "Validation rule 2 command uses unknown placeholder '{totl_sheets}': it stays as \
             written at run time"
        );
        assert!(issues[1]
            .suggestion
            .as_deref()
            .is_some_and(|s| s.starts_with("Did you mean {total_sheets}?")));
        assert_eq!(
            unknown_in("{a}{b}{{c}}{d"),
            vec!["a".to_string(), "b".to_string()]
        );
    }

    /// V217: settings changed from their defaults that the conductor does not use are
    /// named, with the line and what happens instead; a score that leaves them alone hears
    /// nothing.
    #[test]
    fn v217_names_settings_the_conductor_does_not_use() {
        let v217 = |text: &str| -> Vec<(String, Option<usize>)> {
            let path = Path::new("t.yaml");
            let score = crate::load_score_text_only(text, path).unwrap();
            run_checks(&score, path, &CheckEnv::default())
                .into_iter()
                .filter(|i| i.check_id == "V217")
                .map(|i| (i.message, i.line))
                .collect()
        };
        let base = "name: t\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: hi\n";
        assert!(v217(base).is_empty());
        let seen = v217(&format!(
            "{base}rate_limit:\n  max_waits: 3\nparallel:\n  enabled: true\n  stagger_delay_ms: 500\n"
        ));
        assert_eq!(
            seen,
            vec![(
                "parallel.stagger_delay_ms is accepted but not used by this conductor".to_string(),
                Some(9)
            ),]
        );
        // The rate_limit fields (which upstream's own example scores set) are said when the
        // score loads, on stderr, leaving validate's issues as upstream's.
        let warnings = |text: &str| {
            crate::load_score_text_only(text, Path::new("t.yaml"))
                .unwrap()
                .warnings
        };
        assert!(warnings(base).is_empty());
        let said = warnings(&format!(
            "{base}rate_limit:\n  max_waits: 3\n  detection_patterns: [\"429\"]\n"
        ));
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with(
                "rate_limit.max_waits, rate_limit.detection_patterns are set but not used by \
                 this conductor: a rate-limited sheet waits until the limit clears"
            ),
            "{said:?}"
        );
    }

    /// V215: a condition part Mozart cannot read, text after the comparison it reads, and an
    /// unknown variable are each named with their rule; readable conditions are not.
    #[test]
    fn v215_names_unreadable_conditions_and_unknown_variables() {
        let rule = |cond: &str| {
            format!("  - type: file_exists\n    path: a.txt\n    condition: \"{cond}\"\n")
        };
        let text = format!(
            "name: t\nsheet: {{size: 1, total_items: 2}}\nprompt:\n  template: hi\n  \
             variables: {{depth: 2}}\nvalidations:\n{}{}{}{}",
            rule("sheet_nmu == 1"),
            rule("movement = 1"),
            rule("movement == 1 or movement == 2"),
            rule("movement >= 1 and depth == 2 and sheet_num < 3"),
        );
        let path = Path::new("t.yaml");
        let score = crate::load_score_text_only(&text, path).unwrap();
        let seen: Vec<(String, Option<String>, Option<usize>)> =
            run_checks(&score, path, &CheckEnv::default())
                .into_iter()
                .filter(|i| i.check_id == "V215")
                .map(|i| (i.message, i.suggestion, i.line))
                .collect();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(
            seen[0].0,
            "Validation rule 1 condition names unknown variable 'sheet_nmu': that part counts \
             as true, so the rule applies to every sheet"
        );
        assert_eq!(seen[0].1.as_deref(), Some("Did you mean sheet_num?"));
        assert_eq!(seen[0].2, Some(9));
        assert_eq!(
            seen[1].0,
            "Validation rule 2 condition part 'movement = 1' cannot be read: it counts as true, \
             so the rule applies to every sheet"
        );
        assert_eq!(
            seen[2].0,
            "Validation rule 3 condition reads only 'movement == 1': 'or movement == 2' is \
             ignored"
        );
    }

    fn unknown_in(text: &str) -> Vec<String> {
        rules::unknown_placeholders_for_tests(text)
    }
}
