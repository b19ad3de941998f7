//! `load_score`: read → YAML 1.1 → pre-steps → schema → constraints → fan-out (score.md §1).

use std::path::{Component, Path, PathBuf};

use crate::check::{check_job, Checker};
use crate::de::{from_node, FieldError};
use crate::error::ConfigError;
use crate::model::{BackendType, JobConfig};
use crate::paths::{against_cwd, resolve_own_path, resolve_path};
use crate::plan::expand_sheet_at;
use crate::yaml::{self, python_float, Node, NodeKind};

/// A loaded, validated score.
#[derive(Debug, Clone)]
pub struct Score {
    /// The validated model (fan-out expanded, workspace absolute).
    pub config: JobConfig,
    /// The score file as given.
    pub path: PathBuf,
    /// The raw YAML text.
    pub text: String,
    /// The parsed document (for line lookups).
    pub document: Node,
    /// Non-fatal warnings (upstream's `UserWarning`s), to print on stderr.
    pub warnings: Vec<String>,
    /// What loading, checking and previewing this score may read besides its text.
    pub file_access: FileAccess,
    /// What the score names that was neither read nor checked because of
    /// [`FileAccess::TextOnly`], one line each (empty otherwise).
    pub not_read: Vec<String>,
}

/// What loading, checking and previewing a score may read besides the score's own text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FileAccess {
    /// Whatever the score names: its task list, template file and injection files, and the
    /// existence checks of its paths (`mozart validate`, `mozart run`, the conductor).
    #[default]
    Files,
    /// Nothing but the text (a score pasted into the dashboard, whose process may see files
    /// its user should not): no file the score names is read or even checked for
    /// existence, no command runs; [`Score::not_read`] lists what was left out.
    TextOnly,
}

/// Load and validate a score file.
pub fn load_score(path: &Path) -> Result<Score, ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })?;
    let score_dir = resolve_path(path.parent().unwrap_or(Path::new("")));
    load_inner(text, path, Some(&score_dir), FileAccess::Files)
}

/// Load a score from text; a relative workspace resolves against the process CWD
/// (upstream's `from_yaml_string`).
pub fn load_score_str(text: &str, path: &Path) -> Result<Score, ConfigError> {
    load_inner(text.to_string(), path, None, FileAccess::Files)
}

/// Load a score from its text alone ([`FileAccess::TextOnly`]): its task list is not read
/// (a `tasks:` movement stays one voice), a relative workspace is made absolute against the
/// process CWD without looking at the filesystem, and [`crate::validate::run_checks`] and
/// [`crate::validate::preview`] then read no template or injection file and check no path.
pub fn load_score_text_only(text: &str, path: &Path) -> Result<Score, ConfigError> {
    load_inner(text.to_string(), path, None, FileAccess::TextOnly)
}

fn load_inner(
    text: String,
    path: &Path,
    score_dir: Option<&Path>,
    access: FileAccess,
) -> Result<Score, ConfigError> {
    let (root, duplicates) =
        yaml::parse_noting_duplicates(&text).map_err(|error| ConfigError::Yaml {
            path: path.to_path_buf(),
            error,
        })?;
    let mut root = match root {
        Some(node) if matches!(node.kind, NodeKind::Map(_)) => node,
        Some(node) => {
            return Err(ConfigError::NotMapping {
                path: path.to_path_buf(),
                found: if matches!(node.kind, NodeKind::Null) {
                    "empty file".into()
                } else {
                    node.type_name().into()
                },
            })
        }
        None => {
            return Err(ConfigError::NotMapping {
                path: path.to_path_buf(),
                found: "empty file".into(),
            })
        }
    };
    // A relative workspace is joined to the score's directory as named, its links left for
    // the workspace's own resolution to judge (a link of another user's above the score
    // leads the workspace too).
    let workspace_base = score_dir.map(|_| against_cwd(path.parent().unwrap_or(Path::new(""))));
    pre_steps(&mut root, workspace_base.as_deref());
    let schema = |errors: Vec<FieldError>| ConfigError::Schema {
        path: Some(path.to_path_buf()),
        errors,
    };
    let mut config: JobConfig =
        from_node(&root, &[]).map_err(|e| schema(every_unknown_field(&root, *e)))?;
    let mut checker = Checker::new(&root);
    check_job(&mut checker, &config);
    if !checker.errors.is_empty() {
        return Err(schema(checker.errors));
    }
    crate::tasks::check_review(&config).map_err(ConfigError::Tasks)?;
    sheet_shorthand_to_condition(&mut config);
    let mut not_read = Vec::new();
    if access == FileAccess::TextOnly {
        if let Some(tasks) = &config.tasks {
            not_read.push(match (&tasks.file, tasks.issue) {
                (Some(file), _) => format!(
                    "tasks.file ({}): the task list, so movement {} shows one voice",
                    file.display(),
                    tasks.movement
                ),
                (None, Some(issue)) => format!(
                    "tasks.issue (#{issue}): the task list, so movement {} shows one voice",
                    tasks.movement
                ),
                (None, None) => "tasks: the task list".to_string(),
            });
        }
    } else if config.tasks.is_some() {
        // Relative task files belong to the score's directory (also when the text came
        // from the conductor's registry rather than the file).
        let base = match score_dir {
            Some(dir) => dir.to_path_buf(),
            None => resolve_path(path.parent().unwrap_or(Path::new(""))),
        };
        crate::tasks::load(&mut config, &base).map_err(ConfigError::Tasks)?;
    }
    if let Err((msg, at)) = expand_sheet_at(&mut config.sheet) {
        let mut checker = Checker::new(&root);
        checker.value_error_at("sheet", &at, msg);
        return Err(schema(checker.errors));
    }
    crate::tasks::assign_models(&mut config);
    config.workspace = match access {
        // Never through another user's symbolic link: they would choose where Mozart
        // creates its files and the instrument works (docs/security.md "Files").
        FileAccess::Files => {
            resolve_own_path(&config.workspace).map_err(|link| ConfigError::ForeignLink {
                what: "the workspace",
                path: config.workspace.clone(),
                link: Box::new(link),
            })?
        }
        // Resolving symlinks would reveal where paths the text names lead.
        FileAccess::TextOnly => lexical_absolute(&config.workspace),
    };
    if access == FileAccess::TextOnly {
        not_read.extend(text_only_omissions(&config));
    }
    if !config.circuit_breaker.cross_workspace_coordination {
        config.circuit_breaker.honor_other_jobs_rate_limits = false;
    }
    sync_auto_apply(&mut config);
    let mut warnings = duplicate_key_warnings(duplicates);
    warnings.extend(collect_warnings(&config));
    Ok(Score {
        config,
        path: path.to_path_buf(),
        text,
        document: root,
        warnings,
        file_access: access,
        not_read,
    })
}

/// What a text-only score names that checks and previews would otherwise read or check.
/// A rule's `sheet: N` stands for `condition: "sheet_num == N"` when it has no condition of
/// its own (score.md §3.7; a condition given too wins), so every reader of `condition` — the
/// conductor's per-sheet selection, `validate`'s preview — applies it alike.
fn sheet_shorthand_to_condition(config: &mut JobConfig) {
    for rule in &mut config.validations {
        if rule.condition.is_none() {
            if let Some(sheet) = rule.sheet {
                rule.condition = Some(format!("sheet_num == {sheet}"));
            }
        }
    }
}

fn text_only_omissions(config: &JobConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(file) = &config.prompt.template_file {
        out.push(format!("prompt.template_file ({})", file.display()));
    }
    for item in &config.sheet.prelude {
        out.push(format!("sheet.prelude file ({})", item.file));
    }
    for (sheet, items) in &config.sheet.cadenzas {
        for item in items {
            out.push(format!("sheet.cadenzas.{sheet} file ({})", item.file));
        }
    }
    out.push(
        "the existence checks of the paths it names (V002, V003, V004, V005, V107, V108)"
            .to_string(),
    );
    out
}

/// `path` joined to the current directory when relative (`/` when there is none).
/// `path` made absolute against the CWD with `.` and `..` collapsed, touching nothing.
fn lexical_absolute(path: &Path) -> PathBuf {
    let absolute = against_cwd(path);
    let mut out = PathBuf::from("/");
    for comp in absolute.components() {
        match comp {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
        }
    }
    out
}

/// Most unknown fields one score is checked for at once.
const MAX_UNKNOWN_FIELDS: usize = 50;

/// The schema errors to report for a score whose first error is `first`: every unknown field
/// (each `extra_forbidden`) and the first other error, in document order, as pydantic lists
/// every error of a model — serde stops at the first, and a user fixing typos one `validate`
/// at a time was told of one per run. Each error's entry is taken out of a copy of the tree
/// and the score read again; the search ends at a second other error (it may come of taking
/// the first one's entry out, e.g. a required field now missing) or where an entry cannot be
/// found. A missing field has no entry: its section is taken out instead (serde finds a field
/// missing once it has read every key of the section), so the unknown fields after it are
/// still found; the section's own absence that follows is no error of the user's. The other
/// required top-level fields that are absent too are listed with the first.
fn every_unknown_field(root: &Node, first: FieldError) -> Vec<FieldError> {
    let mut probe = root.clone();
    let mut other_seen = first.kind != "extra_forbidden";
    let mut errors = vec![first];
    while errors.len() < MAX_UNKNOWN_FIELDS {
        let Some(last) = errors.last() else { break };
        let target = if last.kind == "missing" {
            &last.loc[..last.loc.len().saturating_sub(1)]
        } else {
            &last.loc[..]
        };
        let target = target.to_vec();
        if !remove_at(&mut probe, &target) {
            break;
        }
        let next = match from_node::<JobConfig>(&probe, &[]) {
            Ok(_) => break,
            Err(next) => *next,
        };
        if next.kind != "extra_forbidden" {
            if other_seen {
                break;
            }
            other_seen = true;
        }
        errors.push(next);
    }
    if let Some(missing) = errors
        .iter()
        .find(|e| e.kind == "missing" && e.loc.len() == 1)
        .cloned()
    {
        for field in REQUIRED_TOP_LEVEL {
            let absent = match &root.kind {
                NodeKind::Map(entries) => !entries.iter().any(|(k, _)| is_key(k, field)),
                _ => false,
            };
            if absent && !errors.iter().any(|e| e.loc == [field]) {
                let mut error = missing.clone();
                error.loc = vec![field.to_string()];
                errors.push(error);
            }
        }
    }
    errors
}

/// The score's required top-level fields, in the model's order.
const REQUIRED_TOP_LEVEL: [&str; 3] = ["name", "sheet", "prompt"];

/// Remove the mapping entry at a pydantic location (`["sheet", "bogus"]`,
/// `["validations", "0", "bogus"]`); false when the location names no such entry.
fn remove_at(root: &mut Node, loc: &[String]) -> bool {
    let Some((name, parents)) = loc.split_last() else {
        return false;
    };
    let mut node = root;
    for part in parents {
        let next = match &mut node.kind {
            NodeKind::Map(entries) => entries
                .iter_mut()
                .find(|(k, _)| k.key_text() == *part)
                .map(|(_, v)| v),
            NodeKind::Seq(items) => part.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        match next {
            Some(n) => node = n,
            None => return false,
        }
    }
    let Some(entries) = map_entries(node) else {
        return false;
    };
    let before = entries.len();
    entries.retain(|(k, _)| k.key_text() != *name);
    entries.len() < before
}

fn map_entries(node: &mut Node) -> Option<&mut Vec<(Node, Node)>> {
    match &mut node.kind {
        NodeKind::Map(entries) => Some(entries),
        _ => None,
    }
}

/// Whether a score's text has a top-level `workspace:` key (without it the default
/// `./workspace` is taken from the submitting directory). Text that does not parse: `true`
/// (its loading reports why).
pub fn names_workspace(text: &str) -> bool {
    match yaml::parse_noting_duplicates(text) {
        Ok((Some(root), _)) => match &root.kind {
            NodeKind::Map(entries) => entries.iter().any(|(k, _)| is_key(k, "workspace")),
            _ => true,
        },
        _ => true,
    }
}

fn is_key(k: &Node, name: &str) -> bool {
    matches!(&k.kind, NodeKind::Str(s) if s == name)
}

/// Upstream's "before" steps: drop `sheet.total_sheets`, switch cost limits on when a limit is
/// given without `enabled`, and pre-resolve a relative workspace against the score directory
/// (§1.1, §3.3, §3.11, §7.1). The workspace is resolved (links followed) afterwards, as
/// every workspace is.
fn pre_steps(root: &mut Node, score_dir: Option<&Path>) {
    let Some(entries) = map_entries(root) else {
        return;
    };
    for (k, v) in entries.iter_mut() {
        if is_key(k, "sheet") {
            if let Some(sheet) = map_entries(v) {
                sheet.retain(|(k, _)| !is_key(k, "total_sheets"));
            }
        } else if is_key(k, "cost_limits") {
            if let Some(cl) = map_entries(v) {
                let has_limit = cl.iter().any(|(k, v)| {
                    (is_key(k, "max_cost_per_sheet") || is_key(k, "max_cost_per_job"))
                        && !matches!(v.kind, NodeKind::Null)
                });
                if has_limit && !cl.iter().any(|(k, _)| is_key(k, "enabled")) {
                    let line = v.line;
                    let key = Node {
                        kind: NodeKind::Str("enabled".into()),
                        line,
                        col: 1,
                    };
                    let value = Node {
                        kind: NodeKind::Bool(true),
                        line,
                        col: 1,
                    };
                    if let Some(cl) = map_entries(v) {
                        cl.push((key, value));
                    }
                }
            }
        } else if is_key(k, "workspace") {
            if let Some(dir) = score_dir {
                let text = python_str(v);
                let p = PathBuf::from(&text);
                let joined = if p.is_absolute() { p } else { dir.join(p) };
                v.kind = NodeKind::Str(joined.to_string_lossy().into_owned());
            }
        }
    }
}

/// Python `str()` of a scalar (`None`, `5`, `True`).
fn python_str(node: &Node) -> String {
    match &node.kind {
        NodeKind::Str(s) | NodeKind::Date(s) => s.clone(),
        NodeKind::Null => "None".into(),
        NodeKind::Bool(b) => if *b { "True" } else { "False" }.into(),
        NodeKind::Int(i) => i.to_string(),
        NodeKind::Float(f) => python_float(*f),
        _ => node.repr(),
    }
}

fn sync_auto_apply(config: &mut JobConfig) {
    let l = &mut config.learning;
    if let Some(aa) = &l.auto_apply {
        l.auto_apply_enabled = aa.enabled;
        l.auto_apply_trust_threshold = aa.trust_threshold;
    } else if l.auto_apply_enabled {
        l.auto_apply = Some(crate::model::AutoApplyConfig {
            enabled: true,
            trust_threshold: l.auto_apply_trust_threshold,
            max_patterns_per_sheet: 3,
            require_validated_status: true,
            log_applications: true,
        });
    }
}

/// Upstream's `UserWarning`s (score.md §2, §3.4, §3.6, §3.17).
/// Keys given twice in one mapping: YAML keeps the last value silently, as upstream does, so
/// the score loads, but the author is told which value was dropped (docs/differences.md).
fn duplicate_key_warnings(duplicates: Vec<yaml::DuplicateKey>) -> Vec<String> {
    duplicates.iter().map(yaml::DuplicateKey::warning).collect()
}

fn collect_warnings(c: &JobConfig) -> Vec<String> {
    let mut out = Vec::new();
    if c.prompt.template.is_none() && c.prompt.template_file.is_none() {
        out.push("prompt has neither 'template' nor 'template_file'. The default preamble prompt will be used.".into());
    }
    if let Some(warning) = unused_rate_limit_fields(&c.rate_limit) {
        out.push(warning);
    }
    let b = &c.backend;
    let defaults = crate::model::BackendConfig::default();
    let mut foreign: Vec<&str> = Vec::new();
    if b.kind != BackendType::ClaudeCli {
        if b.skip_permissions != defaults.skip_permissions {
            foreign.push("skip_permissions");
        }
        if b.disable_mcp != defaults.disable_mcp {
            foreign.push("disable_mcp");
        }
        if b.output_format != defaults.output_format {
            foreign.push("output_format");
        }
        if b.cli_model.is_some() {
            foreign.push("cli_model");
        }
        if b.allowed_tools.is_some() {
            foreign.push("allowed_tools");
        }
        if b.system_prompt_file.is_some() {
            foreign.push("system_prompt_file");
        }
        if !b.cli_extra_args.is_empty() {
            foreign.push("cli_extra_args");
        }
    }
    if b.kind != BackendType::AnthropicApi {
        if b.model != defaults.model {
            foreign.push("model");
        }
        if b.api_key_env != defaults.api_key_env {
            foreign.push("api_key_env");
        }
        if b.max_tokens != defaults.max_tokens {
            foreign.push("max_tokens");
        }
        if b.temperature != defaults.temperature {
            foreign.push("temperature");
        }
    }
    if !foreign.is_empty() {
        foreign.sort_unstable();
        out.push(format!(
            "Backend type is '{}' but the following fields for a different backend were set: {}. These fields will be ignored.",
            b.kind.as_str(),
            foreign.join(", ")
        ));
    }
    for hook in &c.grounding.hooks {
        if hook.expected_checksums.is_empty() {
            out.push("GroundingHookConfig type='file_checksum' with empty expected_checksums will not validate any files.".into());
        }
    }
    // Only a job-wide worktree is shared: with `scope: sheet` each sheet has its own, and
    // `mode: none` makes no worktree at all (upstream warns whenever both are enabled).
    if c.parallel.enabled
        && c.isolation.enabled
        && c.isolation.mode == crate::model::IsolationMode::Worktree
        && c.isolation.scope == crate::model::IsolationScope::Job
    {
        out.push("parallel.enabled and isolation.enabled are both set. Parallel sheets will share the same worktree — ensure they don't write to overlapping paths.".into());
    }
    out
}

/// The `rate_limit` fields a score changes from their defaults, which this conductor does not
/// use (as upstream's baton does not: only its legacy runner did); a user who sets
/// `max_waits: 3` to stop an unattended job after three waits hears it before the job waits a
/// fourth time.
fn unused_rate_limit_fields(r: &crate::model::RateLimitConfig) -> Option<String> {
    let d = crate::model::RateLimitConfig::default();
    let mut set: Vec<&str> = Vec::new();
    let mut instead: Vec<&str> = Vec::new();
    if r.max_waits != d.max_waits || r.max_quota_waits != d.max_quota_waits {
        set.push(if r.max_waits != d.max_waits {
            "rate_limit.max_waits"
        } else {
            "rate_limit.max_quota_waits"
        });
        instead.push(
            "a rate-limited sheet waits until the limit clears, however often it is limited (pause or cancel the job to stop it)",
        );
    }
    if r.wait_minutes != d.wait_minutes {
        set.push("rate_limit.wait_minutes");
        instead.push(
            "the wait is what the API said, else a probe schedule (15 s, 30 s, 1, 2, 5, 10 minutes, then every 15)",
        );
    }
    if r.detection_patterns != d.detection_patterns {
        set.push("rate_limit.detection_patterns");
        instead.push(
            "rate limits are detected by Mozart's built-in patterns and the instrument profile's cli.errors.rate_limit_patterns",
        );
    }
    if set.is_empty() {
        return None;
    }
    Some(format!(
        "{} {} set but not used by this conductor: {}. These fields will be ignored.",
        set.join(", "),
        if set.len() == 1 { "is" } else { "are" },
        instead.join("; ")
    ))
}
