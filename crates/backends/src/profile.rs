//! Instrument profiles as data (instruments.md §4.1). Field names match upstream's YAML so
//! existing profile files load unchanged; unknown keys are rejected.

use std::collections::{BTreeMap, BTreeSet};

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};

use crate::error::BackendError;

/// `cli` or `http`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstrumentKind {
    /// A command-line program.
    Cli,
    /// An HTTP API.
    Http,
}

impl InstrumentKind {
    /// `"cli"` / `"http"`.
    pub fn as_str(self) -> &'static str {
        match self {
            InstrumentKind::Cli => "cli",
            InstrumentKind::Http => "http",
        }
    }
}

fn default_timeout() -> f64 {
    1800.0
}

/// One instrument profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstrumentProfile {
    /// Lookup key (`instrument: <name>` in a score).
    pub name: String,
    /// Human name; the backend's `name()`.
    pub display_name: String,
    /// One-line description.
    #[serde(default)]
    pub description: Option<String>,
    /// `cli` (needs `cli:`) or `http` (needs `http:`).
    pub kind: InstrumentKind,
    /// Capability tags (`tool_use`, `file_editing`, …).
    #[serde(default)]
    pub capabilities: BTreeSet<String>,
    /// Parsed for compatibility; unused (instruments.md §4.1).
    #[serde(default)]
    pub code_mode: Option<CodeModeConfig>,
    /// Models with context size and pricing.
    #[serde(default)]
    pub models: Vec<ModelCapacity>,
    /// Initial `--model` value.
    #[serde(default)]
    pub default_model: Option<String>,
    /// Timeout when the score gives none.
    #[serde(default = "default_timeout")]
    pub default_timeout_seconds: f64,
    /// How to run a CLI instrument.
    #[serde(default)]
    pub cli: Option<CliProfile>,
    /// How to call an HTTP instrument.
    #[serde(default)]
    pub http: Option<HttpProfile>,
    /// Where the instrument's process runs when the score does not say (`local` when absent;
    /// docs/instruments.md "Placement").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::types::placement::PlacementSpec>,
}

/// `code_mode:` (parsed, unused).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeModeConfig {
    /// Interfaces offered to the model.
    #[serde(default)]
    pub interfaces: Vec<CodeModeInterface>,
    /// `deno`, `node_vm` or `v8_isolate`.
    #[serde(default)]
    pub runtime: Option<String>,
    /// Limit per execution (≥ 100).
    #[serde(default)]
    pub max_execution_ms: Option<u64>,
}

/// One code-mode interface.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeModeInterface {
    /// Name.
    pub name: String,
    /// TypeScript declaration.
    pub typescript: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
}

/// A model an instrument can run, with pricing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCapacity {
    /// Model id.
    pub name: String,
    /// Context window in tokens (≥ 1).
    pub context_window: u64,
    /// USD per 1000 input tokens.
    #[serde(default)]
    pub cost_per_1k_input: f64,
    /// USD per 1000 output tokens.
    #[serde(default)]
    pub cost_per_1k_output: f64,
    /// Output token cap.
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
}

/// `cli:` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliProfile {
    /// The command line.
    pub command: CliCommand,
    /// How to read the output.
    #[serde(default)]
    pub output: CliOutputConfig,
    /// How to recognise errors.
    #[serde(default)]
    pub errors: CliErrorConfig,
}

/// `cli.command` (argument order: instruments.md §4.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CliCommand {
    /// Program name (PATH lookup) or path.
    pub executable: String,
    /// e.g. `exec`, `run`.
    #[serde(default)]
    pub subcommand: Option<String>,
    /// Flag before the prompt; `None` → positional prompt.
    #[serde(default)]
    pub prompt_flag: Option<String>,
    /// Ours (issue 21): write the prompt to the CLI's stdin instead of its command line,
    /// which every local user can read (`ps`, `/proc/*/cmdline`); these arguments stand
    /// where `prompt_flag <prompt>` would (`["-p"]` for Claude Code, `[]` for Gemini CLI,
    /// `["-"]` for `codex exec`). `None` → the prompt is an argument (upstream).
    #[serde(default)]
    pub prompt_stdin_args: Option<Vec<String>>,
    /// Flag before the model.
    #[serde(default)]
    pub model_flag: Option<String>,
    /// Flag that disables interactive approval.
    #[serde(default)]
    pub auto_approve_flag: Option<String>,
    /// Output-format flag.
    #[serde(default)]
    pub output_format_flag: Option<String>,
    /// Its value; `None` → boolean flag.
    #[serde(default)]
    pub output_format_value: Option<String>,
    /// Declared, unused (instruments.md §4.7.4).
    #[serde(default)]
    pub system_prompt_flag: Option<String>,
    /// Declared, unused.
    #[serde(default)]
    pub allowed_tools_flag: Option<String>,
    /// Declared, unused.
    #[serde(default)]
    pub mcp_config_flag: Option<String>,
    /// Appended after the prompt.
    #[serde(default)]
    pub mcp_disable_args: Vec<String>,
    /// Flag taking `int(timeout_seconds)`.
    #[serde(default)]
    pub timeout_flag: Option<String>,
    /// Flag taking the working directory.
    #[serde(default)]
    pub working_dir_flag: Option<String>,
    /// Appended last.
    #[serde(default)]
    pub extra_flags: Vec<String>,
    /// Extra environment; values expand `$VAR` / `${VAR}` from the parent environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `None` → inherit everything; a list → only system variables plus these.
    #[serde(default)]
    pub required_env: Option<Vec<String>>,
}

/// `text`, `json` or `jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// Plain text: the answer is stdout.
    #[default]
    Text,
    /// One JSON document.
    Json,
    /// One JSON event per line.
    Jsonl,
}

/// `cli.output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CliOutputConfig {
    /// Format of stdout.
    #[serde(default)]
    pub format: OutputFormat,
    /// Dot-path of the answer.
    #[serde(default)]
    pub result_path: Option<String>,
    /// Dot-path of the error message.
    #[serde(default)]
    pub error_path: Option<String>,
    /// `type` of the JSONL completion event.
    #[serde(default)]
    pub completion_event_type: Option<String>,
    /// Extra equalities the completion event must satisfy; keys are dot-paths.
    #[serde(default)]
    pub completion_event_filter: BTreeMap<String, serde_json::Value>,
    /// Dot-path of the input token count.
    #[serde(default)]
    pub input_tokens_path: Option<String>,
    /// Dot-path of the output token count.
    #[serde(default)]
    pub output_tokens_path: Option<String>,
    /// Sum every match of a wildcard token path.
    #[serde(default)]
    pub aggregate_tokens: bool,
    /// Dot-path of the HTTP status of the API call that failed (ours; Claude Code's
    /// `api_error_status`): the classifier reads it as a structured signal, so an overloaded
    /// API (529/503) is retried with backoff instead of parked as a rate limit.
    #[serde(default)]
    pub api_status_path: Option<String>,
    /// Dot-path of the cost in USD the CLI reports itself (ours; Claude Code's
    /// `total_cost_usd`, `json` output): used as the attempt's exact cost instead of pricing
    /// its tokens from `models`.
    #[serde(default)]
    pub cost_path: Option<String>,
}

fn default_success_codes() -> Vec<i32> {
    vec![0]
}

/// `cli.errors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliErrorConfig {
    /// Exit codes meaning success.
    #[serde(default = "default_success_codes")]
    pub success_exit_codes: Vec<i32>,
    /// Regexes (case-insensitive) meaning a rate limit.
    #[serde(default)]
    pub rate_limit_patterns: Vec<String>,
    /// Regexes meaning an auth failure.
    #[serde(default)]
    pub auth_error_patterns: Vec<String>,
    /// Regexes meaning overload.
    #[serde(default)]
    pub capacity_patterns: Vec<String>,
    /// Regexes meaning a timeout.
    #[serde(default)]
    pub timeout_patterns: Vec<String>,
    /// Regexes meaning a crash.
    #[serde(default)]
    pub crash_patterns: Vec<String>,
    /// Regexes meaning a stale run.
    #[serde(default)]
    pub stale_patterns: Vec<String>,
    /// Declared, unused.
    #[serde(default)]
    pub rate_limit_event_type: Option<String>,
    /// Declared, unused.
    #[serde(default)]
    pub rate_limit_event_filter: BTreeMap<String, serde_json::Value>,
}

impl Default for CliErrorConfig {
    fn default() -> Self {
        CliErrorConfig {
            success_exit_codes: default_success_codes(),
            rate_limit_patterns: Vec::new(),
            auth_error_patterns: Vec::new(),
            capacity_patterns: Vec::new(),
            timeout_patterns: Vec::new(),
            crash_patterns: Vec::new(),
            stale_patterns: Vec::new(),
            rate_limit_event_type: None,
            rate_limit_event_filter: BTreeMap::new(),
        }
    }
}

/// API schema family of an HTTP instrument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SchemaFamily {
    /// OpenAI chat completions.
    #[default]
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini.
    Gemini,
}

fn default_endpoint() -> String {
    "/v1/chat/completions".into()
}

/// `http:` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProfile {
    /// Base URL.
    pub base_url: String,
    /// Endpoint path.
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// API family.
    #[serde(default)]
    pub schema_family: SchemaFamily,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub auth_env_var: Option<String>,
}

/// The pattern `field` (`cli.errors.<set>[<i>]`) names in `errors`.
fn patterns_of<'a>(errors: &'a CliErrorConfig, field: &str) -> Option<&'a str> {
    let rest = field.strip_prefix("cli.errors.")?;
    let (set, index) = rest.split_once('[')?;
    let i: usize = index.strip_suffix(']')?.parse().ok()?;
    let list = match set {
        "rate_limit_patterns" => &errors.rate_limit_patterns,
        "auth_error_patterns" => &errors.auth_error_patterns,
        "capacity_patterns" => &errors.capacity_patterns,
        "timeout_patterns" => &errors.timeout_patterns,
        "crash_patterns" => &errors.crash_patterns,
        "stale_patterns" => &errors.stale_patterns,
        _ => return None,
    };
    list.get(i).map(String::as_str)
}

/// Compiled `cli.errors` patterns of one profile.
#[derive(Debug, Clone)]
pub struct ErrorPatterns {
    /// Rate limit.
    pub rate_limit: Option<Regex>,
    /// Auth.
    pub auth: Option<Regex>,
    /// Capacity.
    pub capacity: Option<Regex>,
    /// Timeout.
    pub timeout: Option<Regex>,
    /// Crash.
    pub crash: Option<Regex>,
    /// Stale.
    pub stale: Option<Regex>,
}

fn compile_set(
    profile: &str,
    field: &str,
    patterns: &[String],
) -> Result<Option<Regex>, BackendError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    for (i, p) in patterns.iter().enumerate() {
        RegexBuilder::new(p)
            .case_insensitive(true)
            .build()
            .map_err(|err| BackendError::InvalidPattern {
                profile: profile.to_string(),
                field: format!("cli.errors.{field}[{i}]"),
                message: err.to_string(),
            })?;
    }
    let joined = patterns
        .iter()
        .map(|p| format!("(?:{p})"))
        .collect::<Vec<_>>()
        .join("|");
    RegexBuilder::new(&joined)
        .case_insensitive(true)
        .build()
        .map(Some)
        .map_err(|err| BackendError::InvalidPattern {
            profile: profile.to_string(),
            field: format!("cli.errors.{field}"),
            message: err.to_string(),
        })
}

impl ErrorPatterns {
    /// Check the syntax of a profile's error patterns without compiling them: loading every
    /// profile (each CLI command that lists instruments, `doctor`, the conductor's start)
    /// must not pay for automata that only a job's backend uses (`compile`, once per job).
    pub fn check(profile: &str, errors: &CliErrorConfig) -> Result<(), BackendError> {
        let sets = [
            ("rate_limit_patterns", &errors.rate_limit_patterns),
            ("auth_error_patterns", &errors.auth_error_patterns),
            ("capacity_patterns", &errors.capacity_patterns),
            ("timeout_patterns", &errors.timeout_patterns),
            ("crash_patterns", &errors.crash_patterns),
            ("stale_patterns", &errors.stale_patterns),
        ];
        for (field, patterns) in sets {
            for (i, p) in patterns.iter().enumerate() {
                regex_syntax::ParserBuilder::new()
                    .case_insensitive(true)
                    .build()
                    .parse(p)
                    .map_err(|err| BackendError::InvalidPattern {
                        profile: profile.to_string(),
                        field: format!("cli.errors.{field}[{i}]"),
                        message: format!("regex parse error:\n{err}"),
                    })?;
            }
        }
        Ok(())
    }

    /// Compile a profile's error patterns.
    pub fn compile(profile: &str, errors: &CliErrorConfig) -> Result<Self, BackendError> {
        Ok(ErrorPatterns {
            rate_limit: compile_set(profile, "rate_limit_patterns", &errors.rate_limit_patterns)?,
            auth: compile_set(profile, "auth_error_patterns", &errors.auth_error_patterns)?,
            capacity: compile_set(profile, "capacity_patterns", &errors.capacity_patterns)?,
            timeout: compile_set(profile, "timeout_patterns", &errors.timeout_patterns)?,
            crash: compile_set(profile, "crash_patterns", &errors.crash_patterns)?,
            stale: compile_set(profile, "stale_patterns", &errors.stale_patterns)?,
        })
    }
}

/// What to do about a profile that does not load (in the Mozart home, which the conductor
/// reads when it starts).
pub(crate) const FIX: &str = "Correct the profile (docs/instruments.md describes its fields), check it with 'mozart instruments list', then run 'mozart restart' so the conductor reads it";

impl InstrumentProfile {
    /// The credential variables a CLI profile passes on (its `required_env` names with `KEY`
    /// or `TOKEN`), and those of them set (not empty) in this process's environment: what
    /// the hint after a refused key and `mozart instruments check` name.
    pub fn key_vars(&self) -> (Vec<&str>, Vec<&str>) {
        self.key_vars_in(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
    }

    /// [`key_vars`](Self::key_vars) with `is_set` saying which variables are set (in
    /// another process's environment, e.g. the running conductor's).
    pub fn key_vars_in(&self, is_set: impl Fn(&str) -> bool) -> (Vec<&str>, Vec<&str>) {
        let vars: Vec<&str> = self
            .cli
            .iter()
            .flat_map(|cli| cli.command.required_env.iter().flatten())
            .map(String::as_str)
            .filter(|v| v.contains("KEY") || v.contains("TOKEN"))
            .collect();
        let set = vars.iter().copied().filter(|v| is_set(v)).collect();
        (vars, set)
    }

    /// Parse and validate a profile from YAML text; `origin` names the file in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, BackendError> {
        let profile = Self::parse_checked(text, origin)?;
        if let Some(cli) = &profile.cli {
            // Named as every other fault of a profile file is: the file, the line (the
            // first that holds the pattern's text), the field.
            ErrorPatterns::check(&profile.name, &cli.errors).map_err(|err| match err {
                BackendError::InvalidPattern { field, message, .. } => {
                    let pattern = patterns_of(&cli.errors, &field);
                    let line = pattern.and_then(|p| {
                        text.lines()
                            .position(|l| l.contains(p))
                            .map(|n| format!("line {}: ", n + 1))
                    });
                    let message = message.trim_start_matches("regex parse error:\n").trim();
                    BackendError::InvalidProfile {
                        origin: origin.to_string(),
                        message: format!(
                            "{}{field}: not a valid regular expression: {message}",
                            line.unwrap_or_default()
                        ),
                    }
                }
                other => other,
            })?;
        }
        Ok(profile)
    }

    /// A profile built into this binary: as [`from_yaml`](Self::from_yaml) without the
    /// syntax check of its error patterns, which a unit test makes once for every built-in
    /// (`built_in_error_patterns_parse`) — every command that loads the registry paid
    /// ~2.5 M instructions for it (2 % of `mozart validate` on the 516-sheet corpus score).
    pub(crate) fn from_builtin_yaml(text: &str, origin: &str) -> Result<Self, BackendError> {
        Self::parse_checked(text, origin)
    }

    /// Parse `text` and check the rules serde cannot express.
    fn parse_checked(text: &str, origin: &str) -> Result<Self, BackendError> {
        let invalid = |message: String| BackendError::InvalidProfile {
            origin: origin.to_string(),
            message,
        };
        // YAML 1.1 as in a score (`yes` is true), then the typed model straight from the
        // tree, so an error names the field path and the line in the profile file.
        let node = mozart_yaml::parse(text).map_err(|e| invalid(format!("{e}. {FIX}")))?;
        let node = match node {
            Some(n) if matches!(n.kind, mozart_yaml::NodeKind::Map(_)) => n,
            _ => return Err(invalid(format!("the document is not a mapping. {FIX}"))),
        };
        let profile: InstrumentProfile =
            mozart_yaml::from_node(&node).map_err(|e| invalid(format!("{e}. {FIX}")))?;
        profile.validate().map_err(invalid)?;
        Ok(profile)
    }

    /// Check the rules serde cannot express; returns the first violation.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("name: must not be empty".into());
        }
        match (self.kind, &self.cli, &self.http) {
            (InstrumentKind::Cli, None, _) => {
                return Err("kind 'cli' requires a 'cli' section".into())
            }
            (InstrumentKind::Http, _, None) => {
                return Err("kind 'http' requires an 'http' section".into())
            }
            _ => {}
        }
        if let Some(placement) = &self.placement {
            placement.validate().map_err(|e| format!("placement.{e}"))?;
            if self.kind == InstrumentKind::Http
                && placement.kind != crate::types::placement::PlacementKind::Local
            {
                return Err("placement: only CLI instruments run as processes that can be placed elsewhere; an http instrument is always called from the conductor".into());
            }
        }
        if self.default_timeout_seconds.is_nan() || self.default_timeout_seconds <= 0.0 {
            return Err("default_timeout_seconds: must be greater than 0".into());
        }
        for (i, m) in self.models.iter().enumerate() {
            if m.context_window < 1 {
                return Err(format!("models[{i}].context_window: must be at least 1"));
            }
            for (field, price) in [
                ("cost_per_1k_input", m.cost_per_1k_input),
                ("cost_per_1k_output", m.cost_per_1k_output),
            ] {
                if !(price.is_finite() && price >= 0.0) {
                    return Err(format!(
                        "models[{i}].{field}: must be a number, 0 or more (USD per 1,000 tokens), not {price}"
                    ));
                }
            }
        }
        if let Some(cli) = &self.cli {
            if cli.command.executable.trim().is_empty() {
                return Err("cli.command.executable: must not be empty".into());
            }
            // An exit status is 0-255: any other code could never match.
            if let Some((i, code)) = cli
                .errors
                .success_exit_codes
                .iter()
                .enumerate()
                .find(|(_, c)| !(0..=255).contains(*c))
            {
                return Err(format!(
                    "cli.errors.success_exit_codes[{i}]: must be an exit status from 0 to 255, not {code}"
                ));
            }
        }
        if let Some(cm) = &self.code_mode {
            if cm.max_execution_ms.is_some_and(|ms| ms < 100) {
                return Err("code_mode.max_execution_ms: must be at least 100".into());
            }
        }
        Ok(())
    }

    /// The model whose pricing applies: `default_model` if listed, else the first model.
    pub fn pricing_model(&self) -> Option<&ModelCapacity> {
        self.default_model
            .as_ref()
            .and_then(|d| self.models.iter().find(|m| &m.name == d))
            .or_else(|| self.models.first())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A pattern that is not a regular expression is named as every fault of a profile
    /// file is — file, line, field — with the parser's words once.
    #[test]
    fn a_bad_pattern_names_the_file_line_and_field() {
        let text = "name: badregex\ndisplay_name: B\nkind: cli\ncli:\n  command:\n    executable: echo\n  errors:\n    rate_limit_patterns:\n      - \"rate(limit\"\n";
        let err = InstrumentProfile::from_yaml(text, "/p/badregex.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid instrument profile /p/badregex.yaml: line 9: cli.errors.rate_limit_patterns[0]: not a valid regular expression"),
            "{err}"
        );
        assert!(err.matches("regex parse error").count() <= 1, "{err}");
        assert!(err.contains("unclosed group"), "{err}");
    }

    /// A price that is not a number (`.nan`, `.inf`) is refused, naming the field: a job
    /// priced with it had an infinite or NaN cost, and a cost limit that never tripped.
    #[test]
    fn a_price_that_is_not_a_number_is_refused_naming_the_field() {
        for price in [".nan", ".inf", "-1"] {
            let text = format!("name: p\ndisplay_name: P\nkind: cli\nmodels:\n  - {{name: m, context_window: 10, cost_per_1k_input: 0.1, cost_per_1k_output: {price}}}\ncli:\n  command:\n    executable: echo\n");
            let err = InstrumentProfile::from_yaml(&text, "p.yaml")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("models[0].cost_per_1k_output: must be a number, 0 or more"),
                "{price}: {err}"
            );
        }
    }

    #[test]
    fn a_profile_placement_is_checked_and_http_profiles_cannot_be_placed() {
        let cli = "name: x\ndisplay_name: X\nkind: cli\ncli:\n  command:\n    executable: echo\n";
        let placed = format!("{cli}placement:\n  type: slurm\n  partition: gpu\n");
        let p = InstrumentProfile::from_yaml(&placed, "x.yaml").unwrap();
        assert_eq!(
            p.placement.as_ref().map(|s| s.kind),
            Some(crate::types::placement::PlacementKind::Slurm)
        );
        let bad = format!("{cli}placement:\n  type: local\n  partition: gpu\n");
        let err = InstrumentProfile::from_yaml(&bad, "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("placement.partition"), "{err}");
        let http = "name: h\ndisplay_name: H\nkind: http\nhttp:\n  base_url: http://localhost:1\n  schema_family: openai\nplacement: {type: slurm}\n";
        let err = InstrumentProfile::from_yaml(http, "h.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("placement:"), "{err}");
    }

    #[test]
    fn a_wrongly_typed_field_names_its_path_and_line_and_yaml_11_values_load() {
        let text = "# my instrument\nname: x\ndisplay_name: X\nkind: cli\nmodels:\n  - name: m1\n    context_window: 1000\n  - name: m2\n    context_window: lots\ncli:\n  command:\n    executable: echo\n";
        let err = InstrumentProfile::from_yaml(text, "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("x.yaml: line 9: models[1].context_window: must be a whole number"),
            "{err}"
        );
        assert!(
            err.contains("check it with 'mozart instruments list'"),
            "{err}"
        );
        let text = "name: x\ndisplay_name: X\nkind: cli\ncli:\n  command:\n    executable: echo\n  output:\n    aggregate_tokens: yes\n";
        let p = InstrumentProfile::from_yaml(text, "x.yaml").unwrap();
        assert!(p.cli.unwrap().output.aggregate_tokens);
    }

    #[test]
    fn unknown_keys_and_missing_sections_are_rejected() {
        let ok = "name: x\ndisplay_name: X\nkind: cli\ncli:\n  command:\n    executable: echo\n";
        let p = InstrumentProfile::from_yaml(ok, "x.yaml").unwrap();
        assert_eq!(p.default_timeout_seconds, 1800.0);
        assert_eq!(p.cli.as_ref().unwrap().errors.success_exit_codes, vec![0]);

        let typo = "name: x\ndisplay_name: X\nkind: cli\ncli:\n  command:\n    executable: echo\n    promt_flag: -p\n";
        let err = InstrumentProfile::from_yaml(typo, "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("promt_flag") && err.contains("x.yaml"),
            "{err}"
        );

        let no_cli = "name: x\ndisplay_name: X\nkind: cli\n";
        assert!(InstrumentProfile::from_yaml(no_cli, "x.yaml")
            .unwrap_err()
            .to_string()
            .contains("requires a 'cli'"));

        let bad_re = "name: x\ndisplay_name: X\nkind: cli\ncli:\n  command:\n    executable: e\n  errors:\n    auth_error_patterns: ['(']\n";
        let err = InstrumentProfile::from_yaml(bad_re, "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("auth_error_patterns[0]"), "{err}");
    }
}
