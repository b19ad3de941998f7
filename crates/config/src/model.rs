//! The raw score model: serde structs mirroring the YAML exactly (score.md §2–3).
//!
//! Field names are the YAML keys; defaults are upstream's. Every struct denies unknown keys
//! (pydantic `extra="forbid"`). Numeric constraints and cross-field rules are checked after
//! deserialization by [`crate::check`], so this file stays a plain description of the shape.

use std::path::PathBuf;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// A free-form YAML mapping (`instrument_config`, `prompt.variables`, …).
pub type FreeMap = serde_json::Map<String, serde_json::Value>;

/// `rate_limit.detection_patterns` when a score gives none (score.md §3.9).
const DEFAULT_DETECTION_PATTERNS: [&str; 7] = [
    "rate.?limit",
    "usage.?limit",
    "quota",
    "too many requests",
    "429",
    "capacity",
    "try again later",
];

/// Whether `pattern` is one of the built-in detection patterns: those are known to compile
/// (a test says so), so loading a score need not compile them again.
pub fn is_default_detection_pattern(pattern: &str) -> bool {
    DEFAULT_DETECTION_PATTERNS.contains(&pattern)
}

/// Whether `pattern` is the default `feedback.pattern`, which is known to compile.
pub fn is_default_feedback_pattern(pattern: &str) -> bool {
    pattern == DEFAULT_FEEDBACK_PATTERN
}

/// `feedback.pattern` when the score sets none.
const DEFAULT_FEEDBACK_PATTERN: &str = "(?s)FEEDBACK_START(.+?)FEEDBACK_END";

#[cfg(test)]
#[test]
fn default_detection_patterns_compile() {
    for p in DEFAULT_DETECTION_PATTERNS {
        assert!(matches!(crate::pyregex::compile(p), Ok(Some(_))), "{p}");
    }
    assert!(matches!(
        crate::pyregex::compile(DEFAULT_FEEDBACK_PATTERN),
        Ok(Some(_))
    ));
}

macro_rules! defaults {
    ($($name:ident: $ty:ty = $value:expr;)*) => {
        $(fn $name() -> $ty { $value })*
    };
}

defaults! {
    d_true: bool = true;
    d_workspace: PathBuf = PathBuf::from("./workspace");
    d_one: i64 = 1;
    d_timeout_1800: f64 = 1800.0;
    d_capture: i64 = 51200;
    d_model: String = "claude-sonnet-4-5-20250929".into();
    d_api_key_env: String = "ANTHROPIC_API_KEY".into();
    d_max_tokens: i64 = 16384;
    d_temperature: f64 = 0.7;
    d_rl_endpoint: String = "http://localhost:8080".into();
    d_30: f64 = 30.0;
    d_ollama_url: String = "http://localhost:11434".into();
    d_ollama_model: String = "llama3.1:8b".into();
    d_num_ctx: i64 = 32768;
    d_300: f64 = 300.0;
    d_keep_alive: String = "5m".into();
    d_10i: i64 = 10;
    d_10f: f64 = 10.0;
    d_3i: i64 = 3;
    d_200i: i64 = 200;
    d_5i: i64 = 5;
    d_5f: f64 = 5.0;
    d_3600: f64 = 3600.0;
    d_2f: f64 = 2.0;
    d_50f: f64 = 50.0;
    d_60i: i64 = 60;
    d_24i: i64 = 24;
    d_48i: i64 = 48;
    d_patterns: Vec<String> = DEFAULT_DETECTION_PATTERNS.iter().map(|s| s.to_string()).collect();
    d_cost_in: f64 = 0.003;
    d_cost_out: f64 = 0.015;
    d_80f: f64 = 80.0;
    d_2000i: i64 = 2000;
    d_mozart: String = "mozart".into();
    d_archive: String = "archive".into();
    d_preserve: Vec<String> = [".iteration", ".mozart-*", ".coverage", "archive/**", ".worktrees/**"].iter().map(|s| s.to_string()).collect();
    d_50i: i64 = 50;
    d_60f_i: i64 = 60;
    d_80i: i64 = 80;
    d_2i: i64 = 2;
    d_feedback_pattern: String = DEFAULT_FEEDBACK_PATTERN.into();
    d_03: f64 = 0.3;
    d_07: f64 = 0.7;
    d_015: f64 = 0.15;
    d_005: f64 = 0.05;
    d_05: f64 = 0.5;
    d_100i: i64 = 100;
    d_085: f64 = 0.85;
    d_050: f64 = 0.50;
    d_095: f64 = 0.95;
    d_010: f64 = 0.10;
    d_3600i: i64 = 3600;
    d_default: String = "default".into();
    d_events: Vec<NotificationEvent> = vec![NotificationEvent::JobComplete, NotificationEvent::JobFailed];
    d_75i: i64 = 75;
    d_sqlite_state: StateBackend = StateBackend::Sqlite;
    d_10_f: f64 = 10.0;
}

/// The whole score (`JobConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Job name (display, legacy job id).
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Workspace directory; absolute after loading (§7.1).
    #[serde(default = "d_workspace")]
    pub workspace: PathBuf,
    /// Native backend settings.
    #[serde(default)]
    pub backend: BackendConfig,
    /// Instrument profile or alias name.
    #[serde(default)]
    pub instrument: Option<String>,
    /// Score-level instrument overrides.
    #[serde(default)]
    pub instrument_config: FreeMap,
    /// Score-level fallback chain.
    #[serde(default)]
    pub instrument_fallbacks: Vec<String>,
    /// Named instrument aliases.
    #[serde(default)]
    pub instruments: IndexMap<String, InstrumentDef>,
    /// Per-stage movement settings.
    #[serde(default)]
    pub movements: IndexMap<i64, MovementDef>,
    /// Sheet layout.
    pub sheet: SheetConfig,
    /// Prompt template.
    pub prompt: PromptConfig,
    /// Spec corpus.
    #[serde(default)]
    pub spec: SpecCorpusConfig,
    /// Retry policy.
    #[serde(default)]
    pub retry: RetryConfig,
    /// Rate-limit detection.
    #[serde(default)]
    pub rate_limit: RateLimitConfig,
    /// Circuit breaker.
    #[serde(default)]
    pub circuit_breaker: CircuitBreakerConfig,
    /// Cost limits.
    #[serde(default)]
    pub cost_limits: CostLimitConfig,
    /// Learning.
    #[serde(default)]
    pub learning: LearningConfig,
    /// Grounding hooks.
    #[serde(default)]
    pub grounding: GroundingConfig,
    /// AI review.
    #[serde(default)]
    pub ai_review: AIReviewConfig,
    /// Logging.
    #[serde(default)]
    pub logging: LogConfig,
    /// Workspace archiving.
    #[serde(default)]
    pub workspace_lifecycle: WorkspaceLifecycleConfig,
    /// Git worktree isolation.
    #[serde(default)]
    pub isolation: IsolationConfig,
    /// Conductor identity.
    #[serde(default)]
    pub conductor: ConductorConfig,
    /// Parallel sheets.
    #[serde(default)]
    pub parallel: ParallelConfig,
    /// Stale-output detection.
    #[serde(default)]
    pub stale_detection: StaleDetectionConfig,
    /// Human checkpoints.
    #[serde(default)]
    pub checkpoints: CheckpointConfig,
    /// Bridge (null = off).
    #[serde(default)]
    pub bridge: Option<BridgeConfig>,
    /// Cross-sheet context (null = off).
    #[serde(default)]
    pub cross_sheet: Option<CrossSheetConfig>,
    /// Feedback extraction.
    #[serde(default)]
    pub feedback: FeedbackConfig,
    /// Validation rules.
    #[serde(default)]
    pub validations: Vec<ValidationRule>,
    /// Notifications.
    #[serde(default)]
    pub notifications: Vec<NotificationConfig>,
    /// Post-success hooks.
    #[serde(default)]
    pub on_success: Vec<PostSuccessHookConfig>,
    /// Concert (job chaining).
    #[serde(default)]
    pub concert: ConcertConfig,
    /// State backend.
    #[serde(default = "d_sqlite_state")]
    pub state_backend: StateBackend,
    /// Explicit state path.
    #[serde(default)]
    pub state_path: Option<PathBuf>,
    /// Pause between sheets.
    #[serde(default = "d_2i")]
    pub pause_between_sheets_seconds: i64,
    /// Where instrument processes run (`local` when absent; docs/scores.md "Placement").
    /// Not in upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementConfig>,
    /// Ours: fan a movement out over a markdown task list (docs/mochi.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<crate::tasks::TasksConfig>,
    /// Ours: a reviewer instrument that loops with the worker until `DONE` (docs/mochi.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::tasks::ReviewConfig>,
}

/// `placement.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementType {
    /// A child process of the conductor (the default).
    #[default]
    Local,
    /// A Slurm batch job per attempt.
    Slurm,
    /// A Kubernetes Job per attempt: designed, not implemented (rejected by `validate`).
    Kubernetes,
}

/// `placement` (docs/design/distributed.md): the same shape as an instrument profile's.
/// Given at score level (`placement`), per movement (`movements.<n>.placement`) and per
/// sheet (`sheet.per_sheet_placement.<n>`); merged field by field over the instrument
/// profile's placement, the most specific level winning (docs/scores.md "Placement").
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// `local`, `slurm` or `kubernetes`; when absent, the less specific level's (the
    /// profile's, else `local`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PlacementType>,
    /// Slurm partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Slurm account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Slurm QOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Slurm wall-time limit (`sbatch --time`, Slurm's format: minutes, `H:MM:SS`, `D-HH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// CPUs per task (`sbatch --cpus-per-task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Memory per node (`sbatch --mem`, e.g. `16G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// GPUs (`sbatch --gpus`, e.g. `1` or `a100:2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<String>,
    /// Generic resources (`sbatch --gres`, e.g. `gpu:1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    /// Node features (`sbatch --constraint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// More `sbatch` options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// Shared directory for the attempts' files (default `<workspace>/.mozart-slurm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// Seconds between looks at a running remote attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_seconds: Option<f64>,
    /// Longest wait in Slurm's queue before the job starts (none: no limit; the sheet's
    /// timeout counts from the job's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_timeout_seconds: Option<f64>,
    /// How long to wait for a finished job's exit file to appear (shared filesystems).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_file_grace_seconds: Option<f64>,
    /// Let Slurm requeue a preempted job (`sbatch --requeue`) instead of failing the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_on_preemption: Option<bool>,
    /// Submit the first attempts of sheets dispatched together (a fan-out) as one Slurm job
    /// array (`sbatch --array`), one task per sheet, instead of one job each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<bool>,
}

/// `state_backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateBackend {
    /// JSON file.
    Json,
    /// SQLite database.
    Sqlite,
}

/// `sheet` (`SheetConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SheetConfig {
    /// Items per sheet.
    pub size: i64,
    /// Item count (stage count with fan-out).
    pub total_items: i64,
    /// First item number.
    #[serde(default = "d_one")]
    pub start_item: i64,
    /// Display labels, sheet-keyed.
    #[serde(default)]
    pub descriptions: IndexMap<i64, String>,
    /// Stage-keyed prerequisites.
    #[serde(default)]
    pub dependencies: IndexMap<i64, Vec<i64>>,
    /// Spec tag filters, sheet-keyed.
    #[serde(default)]
    pub spec_tags: IndexMap<i64, Vec<String>>,
    /// Stage-keyed skip expressions.
    #[serde(default)]
    pub skip_when: IndexMap<i64, String>,
    /// Per-sheet prompt extensions.
    #[serde(default)]
    pub prompt_extensions: IndexMap<i64, Vec<String>>,
    /// Injected into every sheet.
    #[serde(default)]
    pub prelude: Vec<InjectionItem>,
    /// Per-sheet injections.
    #[serde(default)]
    pub cadenzas: IndexMap<i64, Vec<InjectionItem>>,
    /// Stage-keyed command skip rules.
    #[serde(default)]
    pub skip_when_command: IndexMap<i64, SkipWhenCommand>,
    /// Stage → voice count.
    #[serde(default)]
    pub fan_out: IndexMap<i64, i64>,
    /// Expansion metadata, sheet → {stage, instance, fan_count}.
    #[serde(default)]
    pub fan_out_stage_map: Option<StageMap>,
    /// Per-sheet instrument.
    #[serde(default)]
    pub per_sheet_instruments: IndexMap<i64, String>,
    /// Per-sheet instrument config.
    #[serde(default)]
    pub per_sheet_instrument_config: IndexMap<i64, FreeMap>,
    /// Per-sheet fallbacks.
    #[serde(default)]
    pub per_sheet_fallbacks: IndexMap<i64, Vec<String>>,
    /// Instrument → sheets.
    #[serde(default)]
    pub instrument_map: IndexMap<String, Vec<i64>>,
    /// Ours: placement of single sheets, over their movement's (docs/scores.md "Placement").
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub per_sheet_placement: IndexMap<i64, PlacementConfig>,
}

/// One sheet of `sheet.fan_out_stage_map`: the stage it was expanded from, its place among
/// that stage's voices and their number (§4.2). A struct rather than a map of names: the
/// run's score keeps an entry per sheet, ~60 bytes each where a map of three named numbers
/// cost ~330 (a 100,000-voice job, issue 24). The JSON is the same map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanOutMeta {
    /// Stage (movement) before expansion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<i64>,
    /// 1-based voice within the stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<i64>,
    /// Voices of the stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_count: Option<i64>,
}

/// `sheet.fan_out_stage_map`: sheet number → [`FanOutMeta`], held as runs of consecutive
/// sheets (a stage's voices: same stage and voice count, voices counting up), so a stage of
/// 100,000 voices costs one run, not 100,000 entries of ~100 bytes (issue 24). Reads and
/// writes as the map of sheets upstream writes, in the same order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageMap {
    runs: Vec<StageRun>,
    /// Runs in ascending sheet numbers, none overlapping (as the expansion makes them):
    /// found by a binary search, else by a walk.
    sorted: bool,
}

/// Sheets `first..first + len`: sheet `first + k` is `stage`'s voice `instance + k`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct StageRun {
    first: i64,
    len: i64,
    stage: Option<i64>,
    instance: Option<i64>,
    fan_count: Option<i64>,
}

impl StageRun {
    fn meta(&self, k: i64) -> FanOutMeta {
        FanOutMeta {
            stage: self.stage,
            instance: self.instance.map(|i| i + k),
            fan_count: self.fan_count,
        }
    }

    /// Sheet `num` with `meta` continues this run.
    fn extends(&self, num: i64, meta: &FanOutMeta) -> bool {
        Some(num) == self.first.checked_add(self.len)
            && meta.stage == self.stage
            && meta.fan_count == self.fan_count
            && meta.instance == self.instance.and_then(|i| i.checked_add(self.len))
    }
}

impl StageMap {
    /// An empty map.
    pub fn new() -> StageMap {
        StageMap {
            runs: Vec::new(),
            sorted: true,
        }
    }

    /// Add sheet `num` after the others (`num` must not be in the map yet: the
    /// [`FromIterator`] form takes any entries).
    pub(crate) fn push(&mut self, num: i64, meta: FanOutMeta) {
        if let Some(last) = self.runs.last_mut() {
            if last.extends(num, &meta) {
                last.len += 1;
                return;
            }
            if num < last.first.saturating_add(last.len) {
                self.sorted = false;
            }
        }
        self.runs.push(StageRun {
            first: num,
            len: 1,
            stage: meta.stage,
            instance: meta.instance,
            fan_count: meta.fan_count,
        });
    }

    /// Sheet `num`'s entry.
    pub fn get(&self, num: i64) -> Option<FanOutMeta> {
        let within = |r: &StageRun| num >= r.first && num - r.first < r.len;
        let run = if self.sorted {
            let i = self
                .runs
                .partition_point(|r| r.first.saturating_add(r.len) <= num);
            self.runs.get(i).filter(|r| within(r))
        } else {
            self.runs.iter().find(|r| within(r))
        };
        run.map(|r| r.meta(num - r.first))
    }

    /// Number of sheets.
    pub fn len(&self) -> usize {
        self.runs
            .iter()
            .map(|r| usize::try_from(r.len).unwrap_or(0))
            .sum()
    }

    /// No sheets.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// How many runs hold the sheets (tests: a stage is one run).
    #[cfg(test)]
    pub(crate) fn runs_len(&self) -> usize {
        self.runs.len()
    }

    /// (sheet, entry), in the map's order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, FanOutMeta)> + '_ {
        self.runs
            .iter()
            .flat_map(|r| (0..r.len).map(move |k| (r.first + k, r.meta(k))))
    }

    /// The entries, in the map's order.
    pub fn values(&self) -> impl Iterator<Item = FanOutMeta> + '_ {
        self.iter().map(|(_, meta)| meta)
    }
}

impl<'a> IntoIterator for &'a StageMap {
    type Item = (i64, FanOutMeta);
    type IntoIter = Box<dyn Iterator<Item = (i64, FanOutMeta)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl FromIterator<(i64, FanOutMeta)> for StageMap {
    /// The map of these entries; a sheet given twice keeps its first place and its last
    /// entry, as a map read from JSON does.
    fn from_iter<I: IntoIterator<Item = (i64, FanOutMeta)>>(entries: I) -> StageMap {
        let mut map = StageMap::new();
        let mut seen_max: Option<i64> = None;
        let mut rest = entries.into_iter();
        for (num, meta) in rest.by_ref() {
            if seen_max.is_some_and(|max| num <= max) {
                // Not in ascending order: a number may repeat. Rebuild through a map.
                let mut all: IndexMap<i64, FanOutMeta> = map.iter().collect();
                all.insert(num, meta);
                all.extend(rest);
                let mut map = StageMap::new();
                for (n, m) in all {
                    map.push(n, m);
                }
                return map;
            }
            seen_max = Some(num);
            map.push(num, meta);
        }
        map
    }
}

impl Serialize for StageMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut out = serializer.serialize_map(Some(self.len()))?;
        for (num, meta) in self.iter() {
            out.serialize_entry(&num, &meta)?;
        }
        out.end()
    }
}

impl<'de> Deserialize<'de> for StageMap {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<StageMap, D::Error> {
        let entries = IndexMap::<i64, FanOutMeta>::deserialize(deserializer)?;
        Ok(entries.into_iter().collect())
    }
}

/// `sheet.prelude[]` / `sheet.cadenzas.*[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectionItem {
    /// File path (may contain Jinja).
    pub file: String,
    /// Category.
    #[serde(rename = "as", alias = "as_")]
    pub as_: InjectionCategory,
}

/// `InjectionCategory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InjectionCategory {
    /// Context.
    Context,
    /// Skill.
    Skill,
    /// Tool.
    Tool,
}

/// `sheet.skip_when_command.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkipWhenCommand {
    /// Shell command; `{workspace}` substituted.
    pub command: String,
    /// Skip reason.
    #[serde(default)]
    pub description: Option<String>,
    /// Timeout.
    #[serde(default = "d_10_f")]
    pub timeout_seconds: f64,
}

/// `prompt`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptConfig {
    /// Inline Jinja template.
    #[serde(default)]
    pub template: Option<String>,
    /// External template path.
    #[serde(default)]
    pub template_file: Option<PathBuf>,
    /// User variables.
    #[serde(default)]
    pub variables: FreeMap,
    /// `{{ stakes }}`.
    #[serde(default)]
    pub stakes: Option<String>,
    /// `{{ thinking_method }}`.
    #[serde(default)]
    pub thinking_method: Option<String>,
    /// Score-level prompt extensions.
    #[serde(default)]
    pub prompt_extensions: Vec<String>,
}

/// `instruments.<alias>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstrumentDef {
    /// Profile name.
    pub profile: String,
    /// Config overrides.
    #[serde(default)]
    pub config: FreeMap,
}

/// `movements.<stage>`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MovementDef {
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// Instrument.
    #[serde(default)]
    pub instrument: Option<String>,
    /// Instrument config.
    #[serde(default)]
    pub instrument_config: FreeMap,
    /// Accepted and ignored upstream ([GAP] §3.5).
    #[serde(default)]
    pub voices: Option<i64>,
    /// Fallback chain.
    #[serde(default)]
    pub instrument_fallbacks: Vec<String>,
    /// Ours: placement of this movement's sheets, over the score's (docs/scores.md
    /// "Placement").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementConfig>,
}

/// `backend.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendType {
    /// Claude Code CLI.
    #[default]
    ClaudeCli,
    /// Anthropic API.
    AnthropicApi,
    /// Recursive Light.
    RecursiveLight,
    /// Ollama.
    Ollama,
}

impl BackendType {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendType::ClaudeCli => "claude_cli",
            BackendType::AnthropicApi => "anthropic_api",
            BackendType::RecursiveLight => "recursive_light",
            BackendType::Ollama => "ollama",
        }
    }
}

/// `backend.output_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OutputFormat {
    /// JSON.
    #[serde(rename = "json")]
    Json,
    /// Plain text.
    #[serde(rename = "text")]
    Text,
    /// Stream JSON: the default (ours; upstream's is `text`), the one format in which Claude
    /// Code reports its progress, tokens, cost and API retries while it runs.
    #[default]
    #[serde(rename = "stream-json")]
    StreamJson,
}

/// `backend` (`BackendConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Backend kind.
    #[serde(default, rename = "type")]
    pub kind: BackendType,
    /// `--dangerously-skip-permissions`.
    #[serde(default = "d_true")]
    pub skip_permissions: bool,
    /// Disable MCP servers.
    #[serde(default = "d_true")]
    pub disable_mcp: bool,
    /// CLI output format.
    #[serde(default)]
    pub output_format: OutputFormat,
    /// CLI model.
    #[serde(default)]
    pub cli_model: Option<String>,
    /// Allowed tools.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// System prompt file.
    #[serde(default)]
    pub system_prompt_file: Option<PathBuf>,
    /// Working directory.
    #[serde(default)]
    pub working_directory: Option<PathBuf>,
    /// Sheet timeout.
    #[serde(default = "d_timeout_1800")]
    pub timeout_seconds: f64,
    /// Per-sheet timeouts.
    #[serde(default)]
    pub timeout_overrides: IndexMap<i64, f64>,
    /// Per-sheet overrides.
    #[serde(default)]
    pub sheet_overrides: IndexMap<i64, SheetBackendOverride>,
    /// Extra CLI args.
    #[serde(default)]
    pub cli_extra_args: Vec<String>,
    /// Output capture cap.
    #[serde(default = "d_capture")]
    pub max_output_capture_bytes: i64,
    /// API model.
    #[serde(default = "d_model")]
    pub model: String,
    /// API key variable.
    #[serde(default = "d_api_key_env")]
    pub api_key_env: String,
    /// API max tokens.
    #[serde(default = "d_max_tokens")]
    pub max_tokens: i64,
    /// API temperature.
    #[serde(default = "d_temperature")]
    pub temperature: f64,
    /// Recursive Light settings.
    #[serde(default)]
    pub recursive_light: RecursiveLightConfig,
    /// Ollama settings.
    #[serde(default)]
    pub ollama: OllamaConfig,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            kind: BackendType::ClaudeCli,
            skip_permissions: true,
            disable_mcp: true,
            output_format: OutputFormat::StreamJson,
            cli_model: None,
            allowed_tools: None,
            system_prompt_file: None,
            working_directory: None,
            timeout_seconds: 1800.0,
            timeout_overrides: IndexMap::new(),
            sheet_overrides: IndexMap::new(),
            cli_extra_args: Vec::new(),
            max_output_capture_bytes: 51200,
            model: d_model(),
            api_key_env: d_api_key_env(),
            max_tokens: 16384,
            temperature: 0.7,
            recursive_light: RecursiveLightConfig::default(),
            ollama: OllamaConfig::default(),
        }
    }
}

/// `backend.sheet_overrides.<sheet>`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SheetBackendOverride {
    /// CLI model.
    #[serde(default)]
    pub cli_model: Option<String>,
    /// API model.
    #[serde(default)]
    pub model: Option<String>,
    /// Temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Max tokens.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Timeout.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
}

/// `backend.recursive_light`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecursiveLightConfig {
    /// Endpoint URL.
    #[serde(default = "d_rl_endpoint")]
    pub endpoint: String,
    /// User id.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Timeout.
    #[serde(default = "d_30")]
    pub timeout: f64,
}

impl Default for RecursiveLightConfig {
    fn default() -> Self {
        RecursiveLightConfig {
            endpoint: d_rl_endpoint(),
            user_id: None,
            timeout: 30.0,
        }
    }
}

/// `backend.ollama.compression_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionLevel {
    /// Minimal.
    Minimal,
    /// Moderate.
    #[default]
    Moderate,
    /// Aggressive.
    Aggressive,
}

/// `backend.ollama`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OllamaConfig {
    /// Base URL.
    #[serde(default = "d_ollama_url")]
    pub base_url: String,
    /// Model.
    #[serde(default = "d_ollama_model")]
    pub model: String,
    /// Context size.
    #[serde(default = "d_num_ctx")]
    pub num_ctx: i64,
    /// Dynamic tools.
    #[serde(default = "d_true")]
    pub dynamic_tools: bool,
    /// Compression.
    #[serde(default)]
    pub compression_level: CompressionLevel,
    /// Timeout.
    #[serde(default = "d_300")]
    pub timeout_seconds: f64,
    /// Keep-alive.
    #[serde(default = "d_keep_alive")]
    pub keep_alive: String,
    /// Tool loop cap.
    #[serde(default = "d_10i")]
    pub max_tool_iterations: i64,
    /// Health check timeout.
    #[serde(default = "d_10f")]
    pub health_check_timeout: f64,
}

impl Default for OllamaConfig {
    fn default() -> Self {
        OllamaConfig {
            base_url: d_ollama_url(),
            model: d_ollama_model(),
            num_ctx: 32768,
            dynamic_tools: true,
            compression_level: CompressionLevel::Moderate,
            timeout_seconds: 300.0,
            keep_alive: d_keep_alive(),
            max_tool_iterations: 10,
            health_check_timeout: 10.0,
        }
    }
}

/// `bridge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// MCP proxy.
    #[serde(default = "d_true")]
    pub mcp_proxy_enabled: bool,
    /// MCP servers.
    #[serde(default)]
    pub mcp_servers: Vec<MCPServerConfig>,
    /// Hybrid routing.
    #[serde(default)]
    pub hybrid_routing_enabled: bool,
    /// Complexity threshold.
    #[serde(default = "d_07")]
    pub complexity_threshold: f64,
    /// Fallback to Claude.
    #[serde(default = "d_true")]
    pub fallback_to_claude: bool,
    /// Context budget.
    #[serde(default = "d_75i")]
    pub context_budget_percent: i64,
}

/// `bridge.mcp_servers[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MCPServerConfig {
    /// Name.
    pub name: String,
    /// Command.
    pub command: String,
    /// Args.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// Working dir.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Timeout.
    #[serde(default = "d_30")]
    pub timeout_seconds: f64,
}

/// `validations[].type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValidationType {
    /// Path is a regular file.
    FileExists,
    /// mtime advanced.
    FileModified,
    /// Literal substring.
    ContentContains,
    /// Python regex.
    ContentRegex,
    /// `bash -c` exits 0.
    CommandSucceeds,
}

impl ValidationType {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationType::FileExists => "file_exists",
            ValidationType::FileModified => "file_modified",
            ValidationType::ContentContains => "content_contains",
            ValidationType::ContentRegex => "content_regex",
            ValidationType::CommandSucceeds => "command_succeeds",
        }
    }

    /// The four types that need `path`.
    pub fn needs_path(self) -> bool {
        !matches!(self, ValidationType::CommandSucceeds)
    }

    /// The two content types that need `pattern`.
    pub fn needs_pattern(self) -> bool {
        matches!(
            self,
            ValidationType::ContentContains | ValidationType::ContentRegex
        )
    }
}

/// `validations[]` (`ValidationRule`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationRule {
    /// Rule type.
    #[serde(rename = "type")]
    pub kind: ValidationType,
    /// File path (placeholders).
    #[serde(default)]
    pub path: Option<String>,
    /// Pattern for content rules.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Command for `command_succeeds`.
    #[serde(default)]
    pub command: Option<String>,
    /// Command cwd.
    #[serde(default)]
    pub working_directory: Option<String>,
    /// Stage (1–10).
    #[serde(default = "d_one")]
    pub stage: i64,
    /// Applicability condition (§3.7.2).
    #[serde(default)]
    pub condition: Option<String>,
    /// Retries.
    #[serde(default = "d_3i")]
    pub retry_count: i64,
    /// Command timeout.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Delay between retries.
    #[serde(default = "d_200i")]
    pub retry_delay_ms: i64,
    /// Shorthand for `condition: sheet_num == N`.
    #[serde(default)]
    pub sheet: Option<i64>,
}

/// `retry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Max retries.
    #[serde(default = "d_3i")]
    pub max_retries: i64,
    /// Base delay.
    #[serde(default = "d_10f")]
    pub base_delay_seconds: f64,
    /// Max delay.
    #[serde(default = "d_3600")]
    pub max_delay_seconds: f64,
    /// Exponential base.
    #[serde(default = "d_2f")]
    pub exponential_base: f64,
    /// Jitter.
    #[serde(default = "d_true")]
    pub jitter: bool,
    /// Completion attempts.
    #[serde(default = "d_5i")]
    pub max_completion_attempts: i64,
    /// Completion delay.
    #[serde(default = "d_5f")]
    pub completion_delay_seconds: f64,
    /// Completion threshold.
    #[serde(default = "d_50f")]
    pub completion_threshold_percent: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: 3,
            base_delay_seconds: 10.0,
            max_delay_seconds: 3600.0,
            exponential_base: 2.0,
            jitter: true,
            max_completion_attempts: 5,
            completion_delay_seconds: 5.0,
            completion_threshold_percent: 50.0,
        }
    }
}

/// `rate_limit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Regexes.
    #[serde(default = "d_patterns")]
    pub detection_patterns: Vec<String>,
    /// Wait minutes.
    #[serde(default = "d_60i")]
    pub wait_minutes: i64,
    /// Max waits.
    #[serde(default = "d_24i")]
    pub max_waits: i64,
    /// Max quota waits.
    #[serde(default = "d_48i")]
    pub max_quota_waits: i64,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            detection_patterns: d_patterns(),
            wait_minutes: 60,
            max_waits: 24,
            max_quota_waits: 48,
        }
    }
}

/// `circuit_breaker`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Enabled.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Failure threshold.
    #[serde(default = "d_5i")]
    pub failure_threshold: i64,
    /// Recovery timeout.
    #[serde(default = "d_300")]
    pub recovery_timeout_seconds: f64,
    /// Cross-workspace coordination.
    #[serde(default = "d_true")]
    pub cross_workspace_coordination: bool,
    /// Honour other jobs' rate limits.
    #[serde(default = "d_true")]
    pub honor_other_jobs_rate_limits: bool,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            enabled: true,
            failure_threshold: 5,
            recovery_timeout_seconds: 300.0,
            cross_workspace_coordination: true,
            honor_other_jobs_rate_limits: true,
        }
    }
}

/// `cost_limits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostLimitConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Per-sheet cap.
    #[serde(default)]
    pub max_cost_per_sheet: Option<f64>,
    /// Per-job cap.
    #[serde(default)]
    pub max_cost_per_job: Option<f64>,
    /// Input price.
    #[serde(default = "d_cost_in")]
    pub cost_per_1k_input_tokens: f64,
    /// Output price.
    #[serde(default = "d_cost_out")]
    pub cost_per_1k_output_tokens: f64,
    /// Warning threshold.
    #[serde(default = "d_80f")]
    pub warn_at_percent: f64,
}

impl Default for CostLimitConfig {
    fn default() -> Self {
        CostLimitConfig {
            enabled: false,
            max_cost_per_sheet: None,
            max_cost_per_job: None,
            cost_per_1k_input_tokens: 0.003,
            cost_per_1k_output_tokens: 0.015,
            warn_at_percent: 80.0,
        }
    }
}

/// `parallel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Max concurrent sheets.
    #[serde(default = "d_3i")]
    pub max_concurrent: i64,
    /// Fail fast.
    #[serde(default = "d_true")]
    pub fail_fast: bool,
    /// Must stay true upstream.
    #[serde(default = "d_true")]
    pub budget_partition: bool,
    /// Stagger delay.
    #[serde(default)]
    pub stagger_delay_ms: i64,
}

impl Default for ParallelConfig {
    fn default() -> Self {
        ParallelConfig {
            enabled: false,
            max_concurrent: 3,
            fail_fast: true,
            budget_partition: true,
            stagger_delay_ms: 0,
        }
    }
}

/// `stale_detection`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaleDetectionConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Idle timeout.
    #[serde(default = "d_300")]
    pub idle_timeout_seconds: f64,
    /// Check interval.
    #[serde(default = "d_30")]
    pub check_interval_seconds: f64,
}

impl Default for StaleDetectionConfig {
    fn default() -> Self {
        StaleDetectionConfig {
            enabled: false,
            idle_timeout_seconds: 300.0,
            check_interval_seconds: 30.0,
        }
    }
}

/// `cross_sheet`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrossSheetConfig {
    /// Capture stdout tails.
    #[serde(default)]
    pub auto_capture_stdout: bool,
    /// Truncation.
    #[serde(default = "d_2000i")]
    pub max_output_chars: i64,
    /// Glob patterns.
    #[serde(default)]
    pub capture_files: Vec<String>,
    /// Lookback window.
    #[serde(default = "d_3i")]
    pub lookback_sheets: i64,
}

/// `isolation.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationMode {
    /// None.
    None,
    /// Git worktree.
    #[default]
    Worktree,
}

/// `isolation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IsolationConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Mode.
    #[serde(default)]
    pub mode: IsolationMode,
    /// Worktree base.
    #[serde(default)]
    pub worktree_base: Option<PathBuf>,
    /// Branch prefix.
    #[serde(default = "d_mozart")]
    pub branch_prefix: String,
    /// Source branch.
    #[serde(default)]
    pub source_branch: Option<String>,
    /// Cleanup on success.
    #[serde(default = "d_true")]
    pub cleanup_on_success: bool,
    /// Cleanup on failure.
    #[serde(default)]
    pub cleanup_on_failure: bool,
    /// Lock during execution.
    #[serde(default = "d_true")]
    pub lock_during_execution: bool,
    /// Fallback on error.
    #[serde(default = "d_true")]
    pub fallback_on_error: bool,
    /// Ours: paths relative to the repository root (typically git-ignored, like `.env`)
    /// copied from the main checkout into a new worktree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_files: Vec<String>,
    /// Ours: shell commands run in a new worktree after the copies (e.g. `npm ci`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup_commands: Vec<String>,
    /// Ours: time limit of each setup command in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_timeout_seconds: Option<f64>,
    /// Ours: one worktree for the job (default) or one per sheet.
    #[serde(default, skip_serializing_if = "IsolationScope::is_job")]
    pub scope: IsolationScope,
}

/// Ours: `isolation.scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationScope {
    /// One worktree shared by every sheet (upstream).
    #[default]
    Job,
    /// A worktree and branch of its own for every sheet, so parallel sheets never share a tree.
    Sheet,
}

impl IsolationScope {
    /// Whether this is the default (kept out of serialized configs).
    pub fn is_job(&self) -> bool {
        *self == IsolationScope::Job
    }
}

impl Default for IsolationConfig {
    fn default() -> Self {
        IsolationConfig {
            enabled: false,
            mode: IsolationMode::Worktree,
            worktree_base: None,
            branch_prefix: d_mozart(),
            source_branch: None,
            cleanup_on_success: true,
            cleanup_on_failure: false,
            lock_during_execution: true,
            fallback_on_error: true,
            copy_files: Vec::new(),
            setup_commands: Vec::new(),
            setup_timeout_seconds: None,
            scope: IsolationScope::Job,
        }
    }
}

/// `workspace_lifecycle.archive_naming`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveNaming {
    /// Iteration number.
    #[default]
    Iteration,
    /// Timestamp.
    Timestamp,
}

/// `workspace_lifecycle`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceLifecycleConfig {
    /// Archive on `--fresh`.
    #[serde(default)]
    pub archive_on_fresh: bool,
    /// Archive dir.
    #[serde(default = "d_archive")]
    pub archive_dir: String,
    /// Naming.
    #[serde(default)]
    pub archive_naming: ArchiveNaming,
    /// Max archives.
    #[serde(default)]
    pub max_archives: i64,
    /// Preserved globs.
    #[serde(default = "d_preserve")]
    pub preserve_patterns: Vec<String>,
}

impl Default for WorkspaceLifecycleConfig {
    fn default() -> Self {
        WorkspaceLifecycleConfig {
            archive_on_fresh: false,
            archive_dir: d_archive(),
            archive_naming: ArchiveNaming::Iteration,
            max_archives: 0,
            preserve_patterns: d_preserve(),
        }
    }
}

/// `logging.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum LogLevel {
    /// DEBUG.
    Debug,
    /// INFO.
    #[default]
    Info,
    /// WARNING.
    Warning,
    /// ERROR.
    Error,
}

/// `logging.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// JSON.
    Json,
    /// Console.
    #[default]
    Console,
    /// Both.
    Both,
}

/// `logging`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// Level.
    #[serde(default)]
    pub level: LogLevel,
    /// Format.
    #[serde(default)]
    pub format: LogFormat,
    /// File.
    #[serde(default)]
    pub file_path: Option<PathBuf>,
    /// Rotation size.
    #[serde(default = "d_50i")]
    pub max_file_size_mb: i64,
    /// Backups.
    #[serde(default = "d_5i")]
    pub backup_count: i64,
    /// Timestamps.
    #[serde(default = "d_true")]
    pub include_timestamps: bool,
    /// Context.
    #[serde(default = "d_true")]
    pub include_context: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: LogLevel::Info,
            format: LogFormat::Console,
            file_path: None,
            max_file_size_mb: 50,
            backup_count: 5,
            include_timestamps: true,
            include_context: true,
        }
    }
}

/// `ai_review.on_low_score`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnLowScore {
    /// Retry.
    Retry,
    /// Warn.
    #[default]
    Warn,
    /// Fail.
    Fail,
}

/// `ai_review`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AIReviewConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Min score.
    #[serde(default = "d_60f_i")]
    pub min_score: i64,
    /// Target score.
    #[serde(default = "d_80i")]
    pub target_score: i64,
    /// Action.
    #[serde(default)]
    pub on_low_score: OnLowScore,
    /// Retries for review.
    #[serde(default = "d_2i")]
    pub max_retry_for_review: i64,
    /// Template.
    #[serde(default)]
    pub review_prompt_template: Option<String>,
}

impl Default for AIReviewConfig {
    fn default() -> Self {
        AIReviewConfig {
            enabled: false,
            min_score: 60,
            target_score: 80,
            on_low_score: OnLowScore::Warn,
            max_retry_for_review: 2,
            review_prompt_template: None,
        }
    }
}

/// `feedback.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackFormat {
    /// JSON.
    #[default]
    Json,
    /// YAML.
    Yaml,
    /// Text.
    Text,
}

/// `feedback`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Extraction regex.
    #[serde(default = "d_feedback_pattern")]
    pub pattern: String,
    /// Format.
    #[serde(default)]
    pub format: FeedbackFormat,
}

impl Default for FeedbackConfig {
    fn default() -> Self {
        FeedbackConfig {
            enabled: false,
            pattern: d_feedback_pattern(),
            format: FeedbackFormat::Json,
        }
    }
}

/// `learning.outcome_store_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeStoreType {
    /// JSON.
    #[default]
    Json,
    /// SQLite.
    Sqlite,
}

/// `learning`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearningConfig {
    /// Enabled.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Store type.
    #[serde(default)]
    pub outcome_store_type: OutcomeStoreType,
    /// Store path.
    #[serde(default)]
    pub outcome_store_path: Option<PathBuf>,
    /// Min confidence.
    #[serde(default = "d_03")]
    pub min_confidence_threshold: f64,
    /// High confidence.
    #[serde(default = "d_07")]
    pub high_confidence_threshold: f64,
    /// Escalation.
    #[serde(default)]
    pub escalation_enabled: bool,
    /// Global patterns.
    #[serde(default = "d_true")]
    pub use_global_patterns: bool,
    /// Exploration rate.
    #[serde(default = "d_015")]
    pub exploration_rate: f64,
    /// Exploration min priority.
    #[serde(default = "d_005")]
    pub exploration_min_priority: f64,
    /// Entropy alert threshold.
    #[serde(default = "d_05")]
    pub entropy_alert_threshold: f64,
    /// Entropy check interval.
    #[serde(default = "d_100i")]
    pub entropy_check_interval: i64,
    /// Deprecated flat auto-apply.
    #[serde(default)]
    pub auto_apply_enabled: bool,
    /// Deprecated flat auto-apply threshold.
    #[serde(default = "d_085")]
    pub auto_apply_trust_threshold: f64,
    /// Exploration budget.
    #[serde(default)]
    pub exploration_budget: ExplorationBudgetConfig,
    /// Entropy response.
    #[serde(default)]
    pub entropy_response: EntropyResponseConfig,
    /// Auto-apply.
    #[serde(default)]
    pub auto_apply: Option<AutoApplyConfig>,
}

impl Default for LearningConfig {
    fn default() -> Self {
        LearningConfig {
            enabled: true,
            outcome_store_type: OutcomeStoreType::Json,
            outcome_store_path: None,
            min_confidence_threshold: 0.3,
            high_confidence_threshold: 0.7,
            escalation_enabled: false,
            use_global_patterns: true,
            exploration_rate: 0.15,
            exploration_min_priority: 0.05,
            entropy_alert_threshold: 0.5,
            entropy_check_interval: 100,
            auto_apply_enabled: false,
            auto_apply_trust_threshold: 0.85,
            exploration_budget: ExplorationBudgetConfig::default(),
            entropy_response: EntropyResponseConfig::default(),
            auto_apply: None,
        }
    }
}

/// `learning.exploration_budget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplorationBudgetConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Floor.
    #[serde(default = "d_005")]
    pub floor: f64,
    /// Ceiling.
    #[serde(default = "d_050")]
    pub ceiling: f64,
    /// Decay.
    #[serde(default = "d_095")]
    pub decay_rate: f64,
    /// Boost.
    #[serde(default = "d_010")]
    pub boost_amount: f64,
    /// Initial.
    #[serde(default = "d_015")]
    pub initial_budget: f64,
}

impl Default for ExplorationBudgetConfig {
    fn default() -> Self {
        ExplorationBudgetConfig {
            enabled: false,
            floor: 0.05,
            ceiling: 0.50,
            decay_rate: 0.95,
            boost_amount: 0.10,
            initial_budget: 0.15,
        }
    }
}

/// `learning.entropy_response`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntropyResponseConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Threshold.
    #[serde(default = "d_03")]
    pub entropy_threshold: f64,
    /// Cooldown.
    #[serde(default = "d_3600i")]
    pub cooldown_seconds: i64,
    /// Boost budget.
    #[serde(default = "d_true")]
    pub boost_budget: bool,
    /// Revisit quarantine.
    #[serde(default = "d_true")]
    pub revisit_quarantine: bool,
    /// Max revisits.
    #[serde(default = "d_3i")]
    pub max_quarantine_revisits: i64,
}

impl Default for EntropyResponseConfig {
    fn default() -> Self {
        EntropyResponseConfig {
            enabled: false,
            entropy_threshold: 0.3,
            cooldown_seconds: 3600,
            boost_budget: true,
            revisit_quarantine: true,
            max_quarantine_revisits: 3,
        }
    }
}

/// `learning.auto_apply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoApplyConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Trust threshold.
    #[serde(default = "d_085")]
    pub trust_threshold: f64,
    /// Max patterns.
    #[serde(default = "d_3i")]
    pub max_patterns_per_sheet: i64,
    /// Require validated.
    #[serde(default = "d_true")]
    pub require_validated_status: bool,
    /// Log applications.
    #[serde(default = "d_true")]
    pub log_applications: bool,
}

/// `grounding`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroundingConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Hooks.
    #[serde(default)]
    pub hooks: Vec<GroundingHookConfig>,
    /// Fail on failure.
    #[serde(default = "d_true")]
    pub fail_on_grounding_failure: bool,
    /// Escalate.
    #[serde(default = "d_true")]
    pub escalate_on_failure: bool,
    /// Timeout.
    #[serde(default = "d_30")]
    pub timeout_seconds: f64,
}

impl Default for GroundingConfig {
    fn default() -> Self {
        GroundingConfig {
            enabled: false,
            hooks: Vec::new(),
            fail_on_grounding_failure: true,
            escalate_on_failure: true,
            timeout_seconds: 30.0,
        }
    }
}

/// `grounding.hooks[].type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroundingHookType {
    /// File checksum.
    FileChecksum,
}

/// `grounding.hooks[].checksum_algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecksumAlgorithm {
    /// MD5.
    Md5,
    /// SHA-256.
    #[default]
    Sha256,
}

/// `grounding.hooks[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroundingHookConfig {
    /// Type.
    #[serde(rename = "type")]
    pub kind: GroundingHookType,
    /// Name.
    #[serde(default)]
    pub name: Option<String>,
    /// Path → checksum.
    #[serde(default)]
    pub expected_checksums: IndexMap<String, String>,
    /// Algorithm.
    #[serde(default)]
    pub checksum_algorithm: ChecksumAlgorithm,
}

/// `checkpoints`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Triggers.
    #[serde(default)]
    pub triggers: Vec<CheckpointTriggerConfig>,
}

/// `checkpoints.triggers[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointTriggerConfig {
    /// Name.
    pub name: String,
    /// Sheets.
    #[serde(default)]
    pub sheet_nums: Option<Vec<i64>>,
    /// Keywords.
    #[serde(default)]
    pub prompt_contains: Option<Vec<String>>,
    /// Min retry count.
    #[serde(default)]
    pub min_retry_count: Option<i64>,
    /// Confirmation.
    #[serde(default = "d_true")]
    pub requires_confirmation: bool,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// `conductor.role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConductorRole {
    /// Human.
    #[default]
    Human,
    /// AI.
    Ai,
    /// Hybrid.
    Hybrid,
}

/// `conductor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConductorConfig {
    /// Name.
    #[serde(default = "d_default")]
    pub name: String,
    /// Role.
    #[serde(default)]
    pub role: ConductorRole,
    /// Identity context.
    #[serde(default)]
    pub identity_context: Option<String>,
    /// Preferences.
    #[serde(default)]
    pub preferences: ConductorPreferences,
}

impl Default for ConductorConfig {
    fn default() -> Self {
        ConductorConfig {
            name: d_default(),
            role: ConductorRole::Human,
            identity_context: None,
            preferences: ConductorPreferences::default(),
        }
    }
}

/// `conductor.preferences`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConductorPreferences {
    /// Minimal output.
    #[serde(default)]
    pub prefer_minimal_output: bool,
    /// Escalation timeout.
    #[serde(default = "d_300")]
    pub escalation_response_timeout_seconds: f64,
    /// Auto retry.
    #[serde(default = "d_true")]
    pub auto_retry_on_transient_errors: bool,
    /// Channels.
    #[serde(default)]
    pub notification_channels: Vec<String>,
}

impl Default for ConductorPreferences {
    fn default() -> Self {
        ConductorPreferences {
            prefer_minimal_output: false,
            escalation_response_timeout_seconds: 300.0,
            auto_retry_on_transient_errors: true,
            notification_channels: Vec::new(),
        }
    }
}

/// `notifications[].type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationType {
    /// Desktop.
    Desktop,
    /// Slack.
    Slack,
    /// Webhook.
    Webhook,
    /// Email.
    Email,
}

/// `notifications[].on_events[]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationEvent {
    /// Job start.
    JobStart,
    /// Sheet start.
    SheetStart,
    /// Sheet complete.
    SheetComplete,
    /// Sheet failed.
    SheetFailed,
    /// Job complete.
    JobComplete,
    /// Job failed.
    JobFailed,
    /// Job paused.
    JobPaused,
}

/// `notifications[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationConfig {
    /// Channel.
    #[serde(rename = "type")]
    pub kind: NotificationType,
    /// Events.
    #[serde(default = "d_events")]
    pub on_events: Vec<NotificationEvent>,
    /// Channel config.
    #[serde(default)]
    pub config: FreeMap,
}

/// `on_success[].type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookType {
    /// Submit another score.
    RunJob,
    /// Shell command.
    RunCommand,
    /// argv command.
    RunScript,
}

impl HookType {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HookType::RunJob => "run_job",
            HookType::RunCommand => "run_command",
            HookType::RunScript => "run_script",
        }
    }
}

/// `on_success[].on_failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookOnFailure {
    /// Continue.
    #[default]
    Continue,
    /// Abort remaining hooks.
    Abort,
}

/// `on_success[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostSuccessHookConfig {
    /// Type.
    #[serde(rename = "type")]
    pub kind: HookType,
    /// Score to chain.
    #[serde(default)]
    pub job_path: Option<PathBuf>,
    /// Chained workspace.
    #[serde(default)]
    pub job_workspace: Option<PathBuf>,
    /// Inherit learning.
    #[serde(default = "d_true")]
    pub inherit_learning: bool,
    /// Command.
    #[serde(default)]
    pub command: Option<String>,
    /// Cwd.
    #[serde(default)]
    pub working_directory: Option<PathBuf>,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Failure policy.
    #[serde(default)]
    pub on_failure: HookOnFailure,
    /// Timeout.
    #[serde(default = "d_300")]
    pub timeout_seconds: f64,
    /// Detached.
    #[serde(default)]
    pub detached: bool,
    /// Fresh.
    #[serde(default)]
    pub fresh: bool,
}

/// `concert`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcertConfig {
    /// Enabled.
    #[serde(default)]
    pub enabled: bool,
    /// Max chain depth.
    #[serde(default = "d_5i")]
    pub max_chain_depth: i64,
    /// Cooldown.
    #[serde(default = "d_5f")]
    pub cooldown_between_jobs_seconds: f64,
    /// Inherit workspace.
    #[serde(default = "d_true")]
    pub inherit_workspace: bool,
    /// Log path.
    #[serde(default)]
    pub concert_log_path: Option<PathBuf>,
    /// Abort on hook failure.
    #[serde(default)]
    pub abort_concert_on_hook_failure: bool,
}

impl Default for ConcertConfig {
    fn default() -> Self {
        ConcertConfig {
            enabled: false,
            max_chain_depth: 5,
            cooldown_between_jobs_seconds: 5.0,
            inherit_workspace: true,
            concert_log_path: None,
            abort_concert_on_hook_failure: false,
        }
    }
}

/// `spec`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecCorpusConfig {
    /// Directory ("" = off).
    #[serde(default)]
    pub spec_dir: String,
    /// Include CLAUDE.md.
    #[serde(default)]
    pub include_claude_md: bool,
    /// Inline fragments.
    #[serde(default)]
    pub fragments: Vec<SpecFragment>,
}

/// `spec.fragments[].kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecKind {
    /// Text.
    #[default]
    Text,
    /// Structured.
    Structured,
}

/// `spec.fragments[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFragment {
    /// Name.
    pub name: String,
    /// Content.
    pub content: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Kind.
    #[serde(default)]
    pub kind: SpecKind,
    /// Data.
    #[serde(default)]
    pub data: Option<FreeMap>,
}
